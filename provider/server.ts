/**
 * The payment provider: a separate HTTP process that behaves like a real gateway, with its state in
 * Postgres (schema `provider`) and API-key authentication. Start: `npm run provider`. This file is
 * its entry (listening, and stopping on a signal); its settings are read in config.ts, the ledger is in
 * ledger.ts, the routes in routes.ts.
 */
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Pool } from 'pg';
import { createPool, WARM_CONNECTIONS } from '../db/pool';
import { databaseAnswers } from '../platform/health';
import { jsonServer } from '../platform/http';
import { startTracing } from '../platform/tracing';
import { readProviderConfig, type ProviderConfig } from './config';
import { DEV_PROVIDER_ADMIN_KEY, DEV_PROVIDER_API_KEY } from './defaults';
import { FaultBook } from './faults';
import { openLedger } from './ledger';
import { log } from './log';
import { createAdminApp, createProviderApp } from './routes';

/** Opens the ledger and starts both APIs (a port 0 takes a free one); resolves with the ports bound. */
export async function startProvider(
  cfg: ProviderConfig,
): Promise<{ server: http.Server; admin: http.Server; port: number; adminPort: number; pool: Pool }> {
  const pool = createPool(cfg.databaseUrl, { min: WARM_CONNECTIONS });
  const ledger = await openLedger(pool, cfg.apiKeys, { authExpiryMs: cfg.authExpiryMs });
  const faults = new FaultBook();
  const server = jsonServer(
    createProviderApp(ledger, faults, cfg.apiKeys, databaseAnswers(pool, "the ledger's database")),
  );
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
  let cfg: ProviderConfig;
  try {
    cfg = readProviderConfig();
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
        authExpiryMs: cfg.authExpiryMs,
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
