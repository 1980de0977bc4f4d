/**
 * The worker: the order saga's workflows and activities on the `orders` task queue, plus the serial
 * inventory lanes (task queues `orders-inventory-lane-<n>`, one transaction at a time each, many
 * reservations per transaction), plus the inventory metrics endpoint. The one place that builds the Postgres pool and the provider client.
 *   DATABASE_URL=… npx tsx worker.ts      (npm start runs it for you)
 * Run alone, it is one build of the Worker Deployment `order-saga` (BUILD_ID, else ops/deployments.ts
 * makes one from the package version and the commit), its sagas PINNED to it; it receives new sagas
 * once its version is made current (npm start does that; docs/versioning.md), or, with
 * WORKER_MAKE_CURRENT=true (docker compose), makes it current itself once it polls.
 * WORKER_VERSIONING=off runs it unversioned (tests that start worker processes of their own).
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Client, Connection } from '@temporalio/client';
import type { DataConverter } from '@temporalio/common';
import { NativeConnection, Worker, type WorkerOptions } from '@temporalio/worker';
import { installRuntime } from './platform/runtime';
import type { Pool } from 'pg';
import { Counter, Gauge, Registry } from 'prom-client';
import { createActivities } from './activities';
import { InventoryMetrics, type SkuStats } from './activities/inventory-metrics';
import { LANE_GROUP_MAX } from './activities/lane-group';
import { recordWorkerStop, SweeperStats } from './activities/sweeper';
import { createPool, WARM_CONNECTIONS } from './db/pool';
import { laneTaskQueue } from './domain/lanes';
import { readConfig, readWorkerSettings, type AppConfig } from './ops/config';
import { startEventRelay } from './ops/event-relay';
import { TemporalProfileError } from './ops/temporal-connection';
import { PRELOAD_MODULES, WORKFLOWS_PATH } from './ops/workflow-bundle';
import { DEPLOYMENT_NAME, makeVersionCurrent, orderTaskQueues, resolveBuildId, versionName } from './ops/deployments';
import { databaseAnswers, healthRoutes, type Readiness } from './platform/health';
import { jsonApp, jsonServer, rawPath } from './platform/http';
import { WORKER_IDENTITY } from './platform/identity';
import { dataConverterFor, requirePayloadKeys } from './platform/payload-codec';
import { activeTracing, startTracing, type Tracing } from './platform/tracing';
import { createProviderClient } from './provider/client';
import { DEFAULT_SAGA_CONFIG } from './workflows/order-saga';

/**
 * The main worker's settings, shared with the benchmark (so its floor and saga run on the same ones).
 * Measured by the bench's saga-overhead section; see the README's benchmark section for the figures.
 */
export const WORKER_TUNING = {} satisfies Partial<WorkerOptions>;

/**
 * Worker Versioning for createOrderWorkers: the build these workers are, in the Worker Deployment
 * `deploymentName` (default `order-saga`). Every workflow they start is PINNED to it (the workers'
 * default behaviour, not an annotation on the workflow: an annotated workflow is refused by an
 * unversioned worker, and the time-skipping test server ignores versioning altogether).
 */
export interface WorkerVersioning {
  buildId: string;
  deploymentName?: string;
}

/** The WorkerOptions of a versioned worker (the main worker and every lane alike), or none. */
export function deploymentOptions(v: WorkerVersioning | undefined): Pick<WorkerOptions, 'workerDeploymentOptions'> {
  if (!v) return {};
  return {
    workerDeploymentOptions: {
      useWorkerVersioning: true,
      version: { deploymentName: v.deploymentName ?? DEPLOYMENT_NAME, buildId: v.buildId },
      defaultVersioningBehavior: 'PINNED',
    },
  };
}

export interface OrderWorkers {
  workers: Worker[];
  /** The version these workers poll as (`order-saga:<build>`), or undefined when unversioned. */
  version?: { deploymentName: string; buildId: string };
  db: Pool;
  /** The read-only role's pool (reconciliation); db itself when READER_DATABASE_URL is unset. */
  reader: Pool;
  metrics: InventoryMetrics;
  /** What the sweeper (run by the sweep Schedule on these workers) has done. */
  sweeperStats: SweeperStats;
  /** Runs every worker until shutdown() (or a signal). */
  run(): Promise<void>;
  shutdown(): void;
}

export async function createOrderWorkers(
  cfg: AppConfig,
  connection: NativeConnection,
  extra: {
    db?: Pool;
    workflowBundle?: { code: string } | { codePath: string };
    lanes?: number;
    metrics?: InventoryMetrics;
    /** The sweeper's Temporal client; by default one is connected with cfg.temporal on first use. */
    temporalClient?: Client;
    sweeperStats?: SweeperStats;
    /** Off (unversioned) unless given: worker.ts's main and npm start give it; tests choose. */
    versioning?: WorkerVersioning;
    /** The payload codec and failure converter; by default from the keys in the environment (PAYLOAD_KEYS…). */
    dataConverter?: DataConverter;
    /** Tracing's interceptors and sink; by default the process's (startTracing), off when it has none. */
    tracing?: Tracing;
  } = {},
): Promise<OrderWorkers> {
  if (!cfg.databaseUrl && !extra.db) throw new Error('DATABASE_URL is required');
  // Before anything opens: a worker without its keys would fail each order it touches, not start.
  const dataConverter = extra.dataConverter ?? dataConverterFor(requirePayloadKeys());
  const db = extra.db ?? createPool(cfg.databaseUrl!, { max: 20, min: WARM_CONNECTIONS });
  const reader =
    extra.db || !cfg.readerDatabaseUrl || cfg.readerDatabaseUrl === cfg.databaseUrl
      ? db
      : createPool(cfg.readerDatabaseUrl, { max: 2 });
  const metrics = extra.metrics ?? new InventoryMetrics();
  const provider = createProviderClient({
    baseUrl: cfg.providerUrl,
    apiKey: cfg.providerApiKey,
    timeoutMs: cfg.providerTimeoutMs,
  });
  const sweeperStats = extra.sweeperStats ?? new SweeperStats();
  let sweeperClient: Promise<Client> | undefined = extra.temporalClient
    ? Promise.resolve(extra.temporalClient)
    : undefined;
  const temporal = {
    taskQueue: cfg.taskQueue,
    client: () =>
      (sweeperClient ??= Connection.connect(cfg.temporal.connection).then(
        (connection) => new Client({ connection, namespace: cfg.namespace, dataConverter }),
      )),
  };
  const activities = createActivities({
    db,
    reader,
    provider,
    metrics,
    cas: { laneSkus: cfg.laneSkus },
    temporal,
    sweeperStats,
  });
  const versioned = deploymentOptions(extra.versioning);
  const tracing = extra.tracing ?? activeTracing();
  const traced = tracing?.workerOptions({ prebuiltBundle: !!extra.workflowBundle });
  const main = await Worker.create({
    ...traced,
    ...WORKER_TUNING,
    ...versioned,
    identity: WORKER_IDENTITY,
    connection,
    namespace: cfg.namespace,
    taskQueue: cfg.taskQueue,
    dataConverter,
    ...(extra.workflowBundle
      ? { workflowBundle: extra.workflowBundle }
      : { workflowsPath: WORKFLOWS_PATH, bundlerOptions: { preloadModules: PRELOAD_MODULES } }),
    activities,
  });
  const lanes: Worker[] = [];
  for (let n = 0; n < (extra.lanes ?? DEFAULT_SAGA_CONFIG.inventoryLanes); n++) {
    lanes.push(
      await Worker.create({
        ...versioned, // the lanes belong to the same version: a pinned saga's lane tasks go to its own build
        identity: WORKER_IDENTITY,
        connection,
        namespace: cfg.namespace,
        dataConverter,
        taskQueue: laneTaskQueue(cfg.taskQueue, n),
        activities: { reserveInventorySerial: activities.reserveInventorySerial },
        ...(traced ? { interceptors: { activity: traced.interceptors?.activity ?? [] } } : {}),
        // The lane holds several tasks at once, but commits one transaction at a time (across every
        // worker process: the lane's lock): each round takes every task waiting, in one transaction.
        maxConcurrentActivityTaskExecutions: LANE_GROUP_MAX,
      }),
    );
  }
  const workers = [main, ...lanes];
  return {
    workers,
    ...(versioned.workerDeploymentOptions ? { version: versioned.workerDeploymentOptions.version } : {}),
    db,
    reader,
    metrics,
    sweeperStats,
    run: async () => {
      await Promise.all(workers.map((w) => w.run()));
    },
    shutdown: () => {
      for (const w of workers) if (w.getState() === 'RUNNING') w.shutdown();
    },
  };
}

/** One sample of a scraped metric: its labels (none for an unlabelled metric) and its value. */
type Sample = [labels: Partial<Record<string, string>>, value: number];

/**
 * A Prometheus counter or gauge filled from `samples` at each scrape (reset first), so it shows
 * exactly the worker's own counts.
 */
function scrapedMetric(
  registry: Registry,
  kind: 'counter' | 'gauge',
  def: { name: string; help: string; labelNames?: string[] },
  samples: () => Iterable<Sample>,
): void {
  const config = { ...def, labelNames: def.labelNames ?? [], registers: [registry] };
  if (kind === 'counter')
    new Counter({
      ...config,
      collect() {
        this.reset();
        for (const [labels, value] of samples()) this.inc(labels, value);
      },
    });
  else
    new Gauge({
      ...config,
      collect() {
        this.reset();
        for (const [labels, value] of samples()) this.set(labels, value);
      },
    });
}

/** The inventory metrics as Prometheus metrics (one label, `sku`), read from `metrics` at each scrape. */
function inventoryRegistry(metrics: InventoryMetrics): Registry {
  const registry = new Registry();
  const perSku =
    (kind: 'counter' | 'gauge') =>
    (name: string, help: string, pick: (s: SkuStats) => number): void =>
      scrapedMetric(registry, kind, { name, help, labelNames: ['sku'] }, () =>
        metrics.snapshot().map((s): Sample => [{ sku: s.sku }, pick(s)]),
      );
  const counter = perSku('counter');
  const gauge = perSku('gauge');
  counter(
    'order_saga_inventory_cas_attempts_total',
    'Optimistic (CAS) reservation attempts per SKU.',
    (s) => s.attempts,
  );
  counter(
    'order_saga_inventory_cas_aborts_total',
    'CAS attempts aborted by a version conflict, per SKU.',
    (s) => s.aborts,
  );
  counter('order_saga_inventory_fallbacks_total', 'Reservations sent to the serial lane, per SKU.', (s) => s.fallbacks);
  counter(
    'order_saga_inventory_lane_commits_total',
    'Reservations committed by the serial lane, per SKU.',
    (s) => s.laneCommits,
  );
  gauge('order_saga_inventory_abort_rate', 'Aborted attempts over task executions, per SKU.', (s) => s.abortRate);
  gauge(
    'order_saga_inventory_recent_abort_rate',
    'Abort rate over the recent window, per SKU.',
    (s) => s.recentAbortRate,
  );
  return registry;
}

/** The sweeper's counters and its stranded- and stalled-order gauges, read from `stats` at each scrape. */
function sweeperMetrics(registry: Registry, stats: SweeperStats): void {
  const metric =
    (kind: 'counter' | 'gauge') =>
    (name: string, help: string, pick: (s: SweeperStats) => number): void =>
      scrapedMetric(registry, kind, { name, help }, () => [[{}, pick(stats)]]);
  const counter = metric('counter');
  const gauge = metric('gauge');
  counter('order_saga_sweeper_healed_total', 'Stranded orders whose saga the sweeper started again.', (s) => s.healed);
  counter(
    'order_saga_sweeper_resets_total',
    'Runs the sweeper reset after their workflow task kept failing.',
    (s) => s.resets,
  );
  counter(
    'order_saga_sweeper_overrides_removed_total',
    'Versioning overrides the sweeper removed (they sent a run to a version nobody polls).',
    (s) => s.overridesRemoved,
  );
  counter('order_saga_sweeper_to_person_total', 'Orders the sweeper handed to a person.', (s) => s.handedToPerson);
  counter(
    'order_saga_sweeper_unreadable_total',
    'Orders the sweeper could not read (an undecodable payload, a history or description it could not fetch).',
    (s) => s.unreadable,
  );
  gauge(
    'order_saga_stalled_orders',
    'Orders whose run was running but not moving, at the last sweep (open ones, and runs with no open row).',
    (s) => s.stalled,
  );
  gauge(
    'order_saga_oldest_stranded_order_seconds',
    'Age of the oldest open order with no live run, at the last sweep (0: none).',
    (s) => s.oldestStrandedMs / 1000,
  );
}

/**
 * GET /metrics (Prometheus text) and GET /stats (JSON) of the inventory metrics, GET /healthz and
 * GET /readyz (platform/health.ts; ready per `ready`, always without one); any other request gets a
 * JSON 4xx.
 */
export function startMetricsServer(
  metrics: InventoryMetrics,
  port: number,
  host = '127.0.0.1',
  sweeper?: SweeperStats,
  ready: Readiness = () => Promise.resolve(undefined),
): Promise<http.Server> {
  const registry = inventoryRegistry(metrics);
  if (sweeper) sweeperMetrics(registry, sweeper);
  const app = jsonApp();
  healthRoutes(app, ready);
  app.get('/metrics', async (c) => c.body(await registry.metrics(), 200, { 'content-type': registry.contentType }));
  app.get('/stats', (c) => c.json({ skus: metrics.snapshot() }));
  for (const path of ['/metrics', '/stats']) {
    app.all(path, (c) =>
      c.json({ error: 'method_not_allowed', message: `${c.req.method} is not allowed; use GET` }, 405, {
        allow: 'GET, HEAD',
      }),
    );
  }
  app.notFound((c) =>
    c.json(
      { error: 'not_found', message: `${rawPath(c).slice(0, 100)} is not an endpoint (GET /metrics, GET /stats)` },
      404,
    ),
  );
  const server = jsonServer(app);
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve(server));
  });
}

async function main(): Promise<void> {
  // First: off (no OTEL_EXPORTER_OTLP_ENDPOINT), nothing; on, the pool, the provider client and the workers get traced.
  const tracing = startTracing('order-saga-worker');
  const cfg = readConfig();
  const own = readWorkerSettings();
  const runtimeMetrics = own.runtimeMetrics;
  // The SDK's own lines at WARN (WORKER_LOG_LEVEL to change): its INFO lines say each worker started,
  // which the worker's one "polling task queue" line already does; the saga's warnings and alerts stay.
  installRuntime(
    own.logLevel,
    runtimeMetrics !== 'off' ? { metrics: { prometheus: { bindAddress: runtimeMetrics } } } : {},
  );
  const connection = await NativeConnection.connect(cfg.temporal.connection);
  // As many lanes as the workflows hash SKUs over (DEFAULT_SAGA_CONFIG.inventoryLanes).
  const lanes = DEFAULT_SAGA_CONFIG.inventoryLanes;
  // WORKFLOW_BUNDLE: a prebuilt workflow bundle (bundleWorkflowCode), so a restart does not bundle again.
  const bundlePath = own.workflowBundle;
  // A Worker Deployment version unless WORKER_VERSIONING=off; BUILD_ID names the build.
  const versioning = own.versioned ? { buildId: resolveBuildId() } : undefined;
  const w = await createOrderWorkers(cfg, connection, {
    lanes,
    ...(bundlePath ? { workflowBundle: { codePath: bundlePath } } : {}),
    ...(versioning ? { versioning } : {}),
  });
  const server = await startMetricsServer(w.metrics, own.metricsPort, own.metricsHost, w.sweeperStats, workersReady(w));
  // The order events' relay, one per worker process (ops/event-relay.ts), when an endpoint is set.
  const relay = own.orderEvents
    ? startEventRelay(
        w.db,
        own.orderEvents,
        { maxAttempts: own.orderEventsMaxAttempts, maxDelayMs: own.orderEventsMaxDelayMs },
        (level, message, fields) =>
          void (level === 'error' ? process.stderr : process.stdout).write(
            `worker: ${message} ${JSON.stringify(fields)}\n`,
          ),
      )
    : undefined;
  const port = (server.address() as AddressInfo).port;
  process.stdout.write(
    `worker: polling task queue "${cfg.taskQueue}" and ${lanes} serial lane(s) on ${cfg.temporal.summary} ` +
      `${w.version ? `as ${versionName(w.version)} (sagas pinned to it)` : 'unversioned'}; ` +
      `inventory metrics http://${own.metricsHost}:${port}/metrics (and /healthz, /readyz), Temporal metrics ${runtimeMetrics === 'off' ? 'off' : `http://${runtimeMetrics}/metrics`}; ` +
      `order events ${own.orderEvents ? `relayed to ${own.orderEvents.url}` : 'kept, not sent (no ORDER_EVENTS_WEBHOOK_URL)'}\n`,
  );
  try {
    const running = w.run(); // SIGINT/SIGTERM shut the workers down gracefully (the SDK installs those handlers)
    const stopRecorded = recordStopOnceNotPolling(w, cfg.databaseUrl!);
    if (w.version && own.makeCurrent) void promote(cfg, w, lanes);
    await running;
    await stopRecorded;
  } finally {
    server.close();
    await relay?.stop();
    await w.db.end();
    if (w.reader !== w.db) await w.reader.end();
    await connection.close();
    await tracing?.shutdown();
  }
}

/** Worker states in which a worker no longer polls: Core has stopped its pollers (tasks in hand may still run). */
const NOT_POLLING = new Set(['DRAINING', 'DRAINED', 'STOPPED', 'FAILED']);

/**
 * Records this process's stop for the sweeper (worker_stops) as soon as none of its workers polls any
 * more, so the sweeper counts its pollers as gone at once (activities/sweep-reads.ts): once a shutdown
 * (SIGTERM, SIGINT) has brought every worker to DRAINING, before the activities still in hand finish,
 * which a platform's grace period may cut short with a SIGKILL. A moment later than that, so the
 * server's record of the last poll (its end) comes first. On a connection of its own, bounded: a
 * database that does not answer must not hold up the stop. Resolves once written or failed.
 */
function recordStopOnceNotPolling(w: OrderWorkers, databaseUrl: string): Promise<void> {
  return new Promise<void>((resolve) => {
    const timer = setInterval(() => {
      const states = w.workers.map((x) => x.getState());
      if (!states.every((st) => NOT_POLLING.has(st))) return;
      clearInterval(timer);
      setTimeout(() => {
        const stops = createPool(databaseUrl, { max: 1, connectionTimeoutMillis: 2_000, query_timeout: 2_000 });
        recordWorkerStop(stops, [...new Set(w.workers.map((x) => x.options.identity))])
          .catch(
            (err: Error) =>
              void process.stderr.write(`worker: could not record its stop for the sweeper: ${err.message}\n`),
          )
          .finally(() => {
            void stops.end().catch(() => undefined);
            resolve();
          });
      }, 250);
    }, 50);
    timer.unref();
  });
}

/** Ready while every worker of the process (the main one and each lane) runs, and the database answers. */
export function workersReady(w: Pick<OrderWorkers, 'workers' | 'db'>): Readiness {
  const db = databaseAnswers(w.db);
  return async () => {
    const stopped = w.workers.filter((x) => x.getState() !== 'RUNNING');
    if (stopped.length)
      return `${stopped.length} of ${w.workers.length} workers are not polling (${stopped.map((x) => `${x.options.taskQueue}: ${x.getState()}`).join(', ')})`;
    return db();
  };
}

/** WORKER_MAKE_CURRENT: this worker's version becomes current once it polls; a failure stops the worker. */
async function promote(cfg: AppConfig, w: OrderWorkers, lanes: number): Promise<void> {
  let client: Connection | undefined;
  try {
    client = await Connection.connect(cfg.temporal.connection);
    await makeVersionCurrent(client, {
      namespace: cfg.namespace,
      version: w.version!,
      taskQueues: orderTaskQueues(cfg.taskQueue, lanes),
      identity: `worker ${process.pid}`,
      log: (line) => void process.stdout.write(`worker: ${line}\n`),
    });
  } catch (err) {
    process.stderr.write(
      `worker: could not make ${versionName(w.version!)} current: ${(err as Error).message}; an operator can: ` +
        `temporal worker deployment set-current-version --deployment-name ${w.version!.deploymentName} --build-id ${w.version!.buildId} --namespace ${cfg.namespace}\n`,
    );
    process.exitCode = 1;
    w.shutdown();
  } finally {
    await client?.close();
  }
}

if (require.main === module) {
  main().catch((err: Error) => {
    // A profile refused is said in one line, naming the setting; anything else with its stack.
    process.stderr.write(`worker: ${err instanceof TemporalProfileError ? err.message : (err.stack ?? err.message)}\n`);
    process.exit(1);
  });
}
