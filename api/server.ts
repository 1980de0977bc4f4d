/**
 * The orders API: an HTTP process of its own (`npm run api`; `npm start` runs it too), the storefront's
 * door to the saga. This file is its entry (configuration, the Temporal client and the pool, listening,
 * stopping on a signal); the routes are in app.ts.
 */
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Client, Connection } from '@temporalio/client';
import { createPool } from '../db/pool';
import { readApiSettings, readConfig, type ApiSettings, type AppConfig } from '../ops/config';
import { jsonServer } from '../platform/http';
import { dataConverterFor, requirePayloadKeys } from '../platform/payload-codec';
import { activeTracing, startTracing } from '../platform/tracing';
import { createApiApp } from './app';

/** One JSON line per event on stdout. */
const log = (event: string, fields: Record<string, unknown> = {}): void =>
  void process.stdout.write(`${JSON.stringify({ at: new Date().toISOString(), service: 'api', event, ...fields })}\n`);

/** Connects to Temporal and Postgres and listens; resolves with the server and the port bound (0 takes a free one). */
export async function startApi(
  cfg: AppConfig,
  settings: ApiSettings,
): Promise<{ server: http.Server; port: number; stop(): Promise<void> }> {
  if (!cfg.databaseUrl) throw new Error('DATABASE_URL is required (the application role)');
  const connection = await Connection.connect({ ...cfg.temporal.connection, connectTimeout: '5s' });
  const tracing = activeTracing();
  const client = new Client({
    connection,
    namespace: cfg.namespace,
    dataConverter: dataConverterFor(requirePayloadKeys()),
    ...(tracing ? { interceptors: tracing.clientInterceptors() } : {}),
  });
  const db = createPool(cfg.databaseUrl, { max: 10 });
  const app = createApiApp({ db, client, taskQueue: cfg.taskQueue, log, ...settings });
  const server = jsonServer(app);
  const port = await new Promise<number>((resolve, reject) => {
    server.once('error', reject);
    server.listen(settings.port, settings.host, () => resolve((server.address() as AddressInfo).port));
  });
  return {
    server,
    port,
    async stop() {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      await db.end();
      await connection.close();
    },
  };
}

if (require.main === module) {
  const tracing = startTracing('order-saga-api');
  let cfg: AppConfig;
  let settings: ApiSettings;
  try {
    cfg = readConfig();
    settings = readApiSettings();
  } catch (err) {
    process.stderr.write(`api: invalid input: ${(err as Error).message}\n`);
    process.exit(2);
  }
  startApi(cfg, settings)
    .then(({ port, stop }) => {
      log('listening', { url: `http://${settings.host}:${port}`, cors: settings.corsOrigins });
      const onSignal = (): void =>
        void stop()
          .then(() => tracing?.shutdown())
          .finally(() => process.exit(0));
      process.on('SIGINT', onSignal);
      process.on('SIGTERM', onSignal);
    })
    .catch((err: Error) => {
      process.stderr.write(`api: failed to start: ${err.message}\n`);
      process.exit(1);
    });
}
