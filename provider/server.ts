/**
 * The payment provider: a separate HTTP process that behaves like a real gateway, with its state in
 * Postgres (schema `provider`) and API-key authentication. Start: `npm run provider`. This file is
 * its entry (the environment, the keys, listening); the ledger is in ledger.ts, the routes in routes.ts.
 */
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Pool } from 'pg';
import { createPool, WARM_CONNECTIONS } from '../db/pool';
import { jsonServer } from '../platform/http';
import { startTracing } from '../platform/tracing';
import { DEV_PROVIDER_ADMIN_KEY, DEV_PROVIDER_API_KEY, PROVIDER_ADMIN_PORT, PROVIDER_PORT } from './defaults';
import { FaultBook } from './faults';
import { openLedger } from './ledger';
import { log } from './log';
import { createAdminApp, createProviderApp } from './routes';

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

/** Opens the ledger and starts both APIs (a port 0 takes a free one); resolves with the ports bound. */
export async function startProvider(
  cfg: ProviderConfig,
): Promise<{ server: http.Server; admin: http.Server; port: number; adminPort: number; pool: Pool }> {
  const pool = createPool(cfg.databaseUrl, { min: WARM_CONNECTIONS });
  const ledger = await openLedger(pool, cfg.apiKeys);
  const faults = new FaultBook();
  const server = jsonServer(createProviderApp(ledger, faults, cfg.apiKeys));
  const admin = jsonServer(createAdminApp(faults, cfg.adminKeys));
  const listen = (srv: http.Server, port: number, host: string): Promise<number> =>
    new Promise((resolve, reject) => {
      srv.once('error', reject);
      srv.listen(port, host, () => resolve((srv.address() as AddressInfo).port));
    });
  const port = await listen(server, cfg.port, cfg.host);
  const adminPort = await listen(admin, cfg.adminPort, cfg.adminHost);
  return { server, admin, port, adminPort, pool };
}

if (require.main === module) {
  // First: off (no OTEL_EXPORTER_OTLP_ENDPOINT), nothing; on, its HTTP requests and SQL become spans.
  const tracing = startTracing('order-saga-provider');
  const databaseUrl = process.env.DATABASE_URL;
  if (!databaseUrl) {
    process.stderr.write('provider: DATABASE_URL is required\n');
    process.exit(2);
  }
  let cfg: ProviderConfig;
  try {
    cfg = {
      databaseUrl,
      host: process.env.PROVIDER_HOST ?? '127.0.0.1',
      port: Number(process.env.PROVIDER_PORT ?? PROVIDER_PORT),
      apiKeys: keysFromEnv(process.env, 'PROVIDER_API_KEY', DEV_PROVIDER_API_KEY),
      adminPort: Number(process.env.PROVIDER_ADMIN_PORT ?? PROVIDER_ADMIN_PORT),
      adminHost: process.env.PROVIDER_ADMIN_HOST ?? '127.0.0.1',
      adminKeys: keysFromEnv(process.env, 'PROVIDER_ADMIN_KEY', DEV_PROVIDER_ADMIN_KEY),
    };
  } catch (err) {
    process.stderr.write(`provider: ${(err as Error).message}\n`);
    process.exit(2);
  }
  startProvider(cfg)
    .then(({ server, admin, port, adminPort, pool }) => {
      log('listening', {
        url: `http://${cfg.host}:${port}`,
        adminUrl: `http://${cfg.adminHost}:${adminPort}`,
        devKeys: cfg.apiKeys.includes(DEV_PROVIDER_API_KEY) || cfg.adminKeys.includes(DEV_PROVIDER_ADMIN_KEY),
      });
      const stop = (): void => {
        admin.close();
        admin.closeAllConnections();
        server.close(
          () =>
            void pool
              .end()
              .then(() => tracing?.shutdown())
              .finally(() => process.exit(0)),
        );
        server.closeAllConnections();
      };
      process.on('SIGINT', stop);
      process.on('SIGTERM', stop);
    })
    .catch((err: Error) => {
      process.stderr.write(`provider: failed to start: ${err.message}\n`);
      process.exit(1);
    });
}
