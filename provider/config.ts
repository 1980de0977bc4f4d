/**
 * The provider's settings, read from its environment in one place. The provider sits below ops/ in
 * the layers, so it reads its own variables here rather than through ops/config.ts.
 */
import {
  DEFAULT_AUTH_EXPIRY_MS,
  DEV_PROVIDER_ADMIN_KEY,
  DEV_PROVIDER_API_KEY,
  PROVIDER_ADMIN_PORT,
  PROVIDER_PORT,
} from './defaults';

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
  /** How long an authorization holds the amount; a capture after it is refused (`authorization_expired`). */
  authExpiryMs: number;
}

/** An expiry from 1 s (tests) to 30 days (the longest card holds). */
const AUTH_EXPIRY_MIN_MS = 1_000;
const AUTH_EXPIRY_MAX_MS = 30 * 24 * 3_600_000;

/** PROVIDER_AUTH_EXPIRY_MS, else the default; throws naming the variable when it is not a usable duration. */
function authExpiryFromEnv(env: NodeJS.ProcessEnv): number {
  const raw = env.PROVIDER_AUTH_EXPIRY_MS;
  if (raw === undefined || raw === '') return DEFAULT_AUTH_EXPIRY_MS;
  const ms = Number(raw);
  if (!/^\d+$/.test(raw.trim()) || !Number.isSafeInteger(ms) || ms < AUTH_EXPIRY_MIN_MS || ms > AUTH_EXPIRY_MAX_MS)
    throw new Error(
      `PROVIDER_AUTH_EXPIRY_MS must be a whole number of milliseconds from ${AUTH_EXPIRY_MIN_MS} to ${AUTH_EXPIRY_MAX_MS} (30 days), not "${raw}"`,
    );
  return ms;
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
 * PROVIDER_ADMIN_HOST, PROVIDER_ADMIN_KEY(S) and PROVIDER_AUTH_EXPIRY_MS, with their loopback and
 * development defaults. Throws naming the variable when one cannot be used.
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
    authExpiryMs: authExpiryFromEnv(env),
  };
}
