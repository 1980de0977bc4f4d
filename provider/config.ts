/**
 * The provider's settings, read from its environment in one place. The provider sits below lib/ in
 * the layers, so it reads its own variables here rather than through lib/config.ts.
 */
import { DEV_PROVIDER_ADMIN_KEY, DEV_PROVIDER_API_KEY, PROVIDER_ADMIN_PORT, PROVIDER_PORT } from './defaults';

export interface ProviderConfig {
  databaseUrl: string;
  host: string;
  port: number;
  /** The API keys accepted now (more than one only while rotating); any other key gets 401. */
  apiKeys: string[];
  /** The admin API (fault switches) listens apart from the payment API, with its own keys. */
  adminPort: number;
  /** Loopback unless asked otherwise: the payment API may face a network, the fault switches not. */
  adminHost: string;
  adminKeys: string[];
}

/**
 * The keys from `<NAME>S` (a comma-separated list, for a rotation's overlap) or `<NAME>`, else the
 * development default. Throws naming the variable when a key is empty or malformed.
 */
export function keysFromEnv(env: NodeJS.ProcessEnv, name: string, fallback: string): string[] {
  const list = env[`${name}S`];
  const keys = list !== undefined ? list.split(',').map((k) => k.trim()) : [env[name] ?? fallback];
  for (const k of keys) {
    if (!/^[\x21-\x7e]{8,200}$/.test(k) || k.includes(',')) {
      throw new Error(
        `${list !== undefined ? `${name}S` : name}: each key must be 8 to 200 printable characters, without spaces or commas`,
      );
    }
  }
  return keys;
}

/**
 * DATABASE_URL (required), PROVIDER_HOST, PROVIDER_PORT, PROVIDER_API_KEY(S), PROVIDER_ADMIN_PORT,
 * PROVIDER_ADMIN_HOST and PROVIDER_ADMIN_KEY(S), with their loopback and development defaults. Throws
 * naming the variable when one cannot be used.
 */
export function readProviderConfig(env: NodeJS.ProcessEnv = process.env): ProviderConfig {
  const databaseUrl = env.DATABASE_URL;
  if (!databaseUrl) throw new Error('DATABASE_URL is required');
  return {
    databaseUrl,
    host: env.PROVIDER_HOST ?? '127.0.0.1',
    port: Number(env.PROVIDER_PORT ?? PROVIDER_PORT),
    apiKeys: keysFromEnv(env, 'PROVIDER_API_KEY', DEV_PROVIDER_API_KEY),
    adminPort: Number(env.PROVIDER_ADMIN_PORT ?? PROVIDER_ADMIN_PORT),
    adminHost: env.PROVIDER_ADMIN_HOST ?? '127.0.0.1',
    adminKeys: keysFromEnv(env, 'PROVIDER_ADMIN_KEY', DEV_PROVIDER_ADMIN_KEY),
  };
}
