/**
 * The worker: the order saga's workflows and activities on the `orders` task queue, plus the serial
 * inventory lanes (task queues `orders-inventory-lane-<n>`, one task at a time each), plus the
 * inventory metrics endpoint. The one place that builds the Postgres pool and the provider client.
 *   DATABASE_URL=… npx tsx worker.ts      (npm start runs it for you)
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { NativeConnection, Runtime, Worker, type WorkerOptions } from '@temporalio/worker';
import type { Pool } from 'pg';
import { createActivities } from './activities';
import { InventoryMetrics } from './activities/inventory-metrics';
import { createPool } from './db/pool';
import { laneTaskQueue } from './domain/lanes';
import { DEFAULT_PORTS, readConfig, type AppConfig } from './lib/config';
import { jsonServer, sendJson } from './provider/http';
import { createProviderClient } from './provider/client';
import { DEFAULT_SAGA_CONFIG } from './workflows/order-saga';

/**
 * The main worker's settings, shared with the benchmark (so its floor and saga run on the same ones).
 * Measured with `npm run bench` (P2); see the README's benchmark section for the figures.
 */
export const WORKER_TUNING = {} satisfies Partial<WorkerOptions>;

export interface OrderWorkers {
  workers: Worker[];
  db: Pool;
  /** The read-only role's pool (reconciliation); db itself when READER_DATABASE_URL is unset. */
  reader: Pool;
  metrics: InventoryMetrics;
  /** Runs every worker until shutdown() (or a signal). */
  run(): Promise<void>;
  shutdown(): void;
}

export async function createOrderWorkers(
  cfg: AppConfig,
  connection: NativeConnection,
  extra: { db?: Pool; workflowBundle?: { code: string } | { codePath: string }; lanes?: number; metrics?: InventoryMetrics } = {},
): Promise<OrderWorkers> {
  if (!cfg.databaseUrl && !extra.db) throw new Error('DATABASE_URL is required');
  const db = extra.db ?? createPool(cfg.databaseUrl!, { max: 20 });
  const reader = extra.db || !cfg.readerDatabaseUrl || cfg.readerDatabaseUrl === cfg.databaseUrl ? db : createPool(cfg.readerDatabaseUrl, { max: 2 });
  const metrics = extra.metrics ?? new InventoryMetrics();
  const provider = createProviderClient({ baseUrl: cfg.providerUrl, apiKey: cfg.providerApiKey, timeoutMs: cfg.providerTimeoutMs });
  const activities = createActivities({ db, reader, provider, metrics, cas: { laneSkus: cfg.laneSkus } });
  const main = await Worker.create({
    ...WORKER_TUNING,
    connection,
    namespace: cfg.namespace,
    taskQueue: cfg.taskQueue,
    ...(extra.workflowBundle ? { workflowBundle: extra.workflowBundle } : { workflowsPath: require.resolve('./workflows') }),
    activities,
  });
  const lanes: Worker[] = [];
  for (let n = 0; n < (extra.lanes ?? DEFAULT_SAGA_CONFIG.inventoryLanes); n++) {
    lanes.push(
      await Worker.create({
        connection,
        namespace: cfg.namespace,
        taskQueue: laneTaskQueue(cfg.taskQueue, n),
        activities: { reserveInventorySerial: activities.reserveInventorySerial },
        maxConcurrentActivityTaskExecutions: 1, // the lane: one task at a time
      }),
    );
  }
  const workers = [main, ...lanes];
  return {
    workers,
    db,
    reader,
    metrics,
    run: async () => {
      await Promise.all(workers.map((w) => w.run()));
    },
    shutdown: () => {
      for (const w of workers) if (w.getState() === 'RUNNING') w.shutdown();
    },
  };
}

/** GET /metrics (Prometheus text) and GET /stats (JSON) of the inventory metrics; any other request gets a JSON 4xx. */
export function startMetricsServer(metrics: InventoryMetrics, port: number, host = '127.0.0.1'): Promise<http.Server> {
  const routes: Record<string, (res: http.ServerResponse) => void> = {
    '/metrics': (res) => {
      res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' });
      res.end(metrics.prometheus());
    },
    '/stats': (res) => sendJson(res, 200, { skus: metrics.snapshot() }),
  };
  const server = jsonServer((req, res) => {
    let pathname: string;
    try {
      pathname = new URL(req.url ?? '/', 'http://worker').pathname;
    } catch {
      return sendJson(res, 400, { error: 'invalid_path', message: 'the request target is not a valid path' });
    }
    const route = routes[pathname];
    if (!route) return sendJson(res, 404, { error: 'not_found', message: `${pathname.slice(0, 100)} is not an endpoint (GET /metrics, GET /stats)` });
    if (req.method !== 'GET' && req.method !== 'HEAD') return sendJson(res, 405, { error: 'method_not_allowed', message: `${req.method} is not allowed; use GET` }, { allow: 'GET, HEAD' });
    route(res);
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve(server));
  });
}

async function main(): Promise<void> {
  const cfg = readConfig();
  const runtimeMetrics = process.env.TEMPORAL_METRICS_ADDRESS ?? `127.0.0.1:${DEFAULT_PORTS.temporalMetrics}`;
  if (runtimeMetrics !== 'off') Runtime.install({ telemetryOptions: { metrics: { prometheus: { bindAddress: runtimeMetrics } } } });
  const connection = await NativeConnection.connect({ address: cfg.temporalAddress });
  // As many lanes as the workflows hash SKUs over (DEFAULT_SAGA_CONFIG.inventoryLanes).
  const lanes = DEFAULT_SAGA_CONFIG.inventoryLanes;
  // WORKFLOW_BUNDLE: a prebuilt workflow bundle (bundleWorkflowCode), so a restart does not bundle again.
  const bundlePath = process.env.WORKFLOW_BUNDLE;
  const w = await createOrderWorkers(cfg, connection, { lanes, ...(bundlePath ? { workflowBundle: { codePath: bundlePath } } : {}) });
  const server = await startMetricsServer(w.metrics, Number(process.env.WORKER_METRICS_PORT ?? DEFAULT_PORTS.workerMetrics));
  const port = (server.address() as AddressInfo).port;
  process.stdout.write(
    `worker: polling task queue "${cfg.taskQueue}" and ${lanes} serial lane(s) on ${cfg.temporalAddress} (namespace ${cfg.namespace}); ` +
      `inventory metrics http://127.0.0.1:${port}/metrics, Temporal metrics ${runtimeMetrics === 'off' ? 'off' : `http://${runtimeMetrics}/metrics`}\n`,
  );
  try {
    await w.run(); // SIGINT/SIGTERM shut the workers down gracefully (the SDK installs those handlers)
  } finally {
    server.close();
    await w.db.end();
    if (w.reader !== w.db) await w.reader.end();
    await connection.close();
  }
}

if (require.main === module) {
  main().catch((err: Error) => {
    process.stderr.write(`worker: ${err.stack ?? err.message}\n`);
    process.exit(1);
  });
}
