/**
 * The parts of the stack the bench's sections share: the real provider process with the bench's own
 * keys, the project's activities wired to it, and products with stock for any run.
 */
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import type { Client } from '@temporalio/client';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { bundleWorkflowCode } from '@temporalio/worker';
import type { Pool } from 'pg';
import { createActivities, type OrderActivities } from '../activities';
import { workflowIdFor, type OrderInput } from '../domain/order';
import { readConfig } from '../ops/config';
import { PRELOAD_MODULES } from '../ops/workflow-bundle';
import { dataConverterFor, parseKeyList } from '../platform/payload-codec';
import { startProviderProcess } from '../platform/processes';
import type { Tracing } from '../platform/tracing';
import { createProviderClient } from '../provider/client';
import { createOrderWorkers } from '../worker';
import type { orderSaga } from '../workflows';
import { sagaStartOptions } from '../orders/saga-start';

/** The bench provider's payment API key (its admin key is another). */
export const BENCH_PROVIDER_KEY = 'bench-key';

/**
 * The provider as its own process on free loopback ports, on the database at `url`; `env` adds to its
 * environment. Loopback whatever the caller's PROVIDER_HOST says, and no tracing unless `env` asks
 * for it (an exported OTEL_EXPORTER_OTLP_ENDPOINT would send its spans away and weigh on its CPU).
 */
export function startBenchProvider(
  url: string,
  env: NodeJS.ProcessEnv = {},
): Promise<{ child: ChildProcess; url: string; adminUrl: string }> {
  return startProviderProcess({
    DATABASE_URL: url,
    PROVIDER_PORT: '0',
    PROVIDER_ADMIN_PORT: '0',
    PROVIDER_API_KEY: BENCH_PROVIDER_KEY,
    PROVIDER_ADMIN_KEY: 'bench-admin',
    PROVIDER_HOST: '127.0.0.1',
    PROVIDER_ADMIN_HOST: '127.0.0.1',
    OTEL_EXPORTER_OTLP_ENDPOINT: '',
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: '',
    ...env,
  });
}

/** A key list (PAYLOAD_KEYS's form) of one key of the bench's own, new each call. */
export const benchKeyList = (): string => `bench-1:${randomBytes(32).toString('base64')}`;

/** The project's payload codec with `keys` (a new key of the bench's own unless given). */
export const benchDataConverter = (keys = benchKeyList()): ReturnType<typeof dataConverterFor> =>
  dataConverterFor(parseKeyList(keys, 'the bench key'));

/** Every activity of the saga, on `db` and the bench provider at `providerUrl`. */
export const benchActivities = (db: Pool, providerUrl: string): OrderActivities =>
  createActivities({ db, provider: createProviderClient({ baseUrl: providerUrl, apiKey: BENCH_PROVIDER_KEY }) });

/** Every activity of the saga, and the floors' no-op (bench/workflows.ts). */
export const benchWorkflowActivities = (db: Pool, providerUrl: string) => ({
  ...benchActivities(db, providerUrl),
  noop: async (): Promise<undefined> => undefined,
});

const quiet = { log() {}, trace() {}, debug() {}, info() {}, warn() {}, error() {} };

/** bench/workflows.ts (the saga and its floors) bundled, the bundler quiet; with a data converter's failure converter when given. */
export const bundleBenchWorkflows = (failureConverterPath?: string): ReturnType<typeof bundleWorkflowCode> =>
  bundleWorkflowCode({
    workflowsPath: path.join(__dirname, 'workflows.ts'),
    logger: quiet,
    ...(failureConverterPath ? { failureConverterPath } : {}),
    preloadModules: PRELOAD_MODULES,
  });

/** `count` products `<prefix>-0` … with a million units each and a price of 100; returns the prefix. */
export async function insertBenchProducts(db: Pool, prefix: string, count: number): Promise<string> {
  await db.query({
    text: `INSERT INTO products (sku, name, price_cents, stock, initial_stock) SELECT $1 || '-' || g, 'bench', 100, 1000000, 1000000 FROM generate_series(0, $2::int - 1) g`,
    values: [prefix, count],
  });
  return prefix;
}

/** What saga-overhead runs: the saga, or a floor of the essential work (bench/workflows.ts). */
export type BenchWorkflow = 'saga' | 'floor' | 'cheap' | 'like';

/**
 * Every workflow of saga-overhead is started eagerly: the server hands its first workflow task back in
 * the start's answer, to the worker of this process (the client shares the worker's connection), one
 * poll fewer per order. The bench's load is the one place where one process both starts orders and
 * hosts their worker. `BENCH_EAGER_START=0` starts them as client.ts does, to measure the difference
 * (docs/benchmark.md).
 */
export const EAGER_START = process.env.BENCH_EAGER_START !== '0';
const eagerStart = (): { requestEagerStart?: true } => (EAGER_START ? { requestEagerStart: true } : {});

const FLOOR_WORKFLOWS = { floor: 'noopSaga', cheap: 'noopSagaLocal', like: 'noopSagaLikeForLike' } as const;

/**
 * One workflow of `kind` on `taskQueue`, start to result; returns its workflow ID. The `i`th saga
 * orders one unit of product `<sku>-<i mod 100>` (insertBenchProducts), started as client.ts place
 * starts it: the new order's search attributes in the request.
 */
export async function runBenchWorkflow(
  client: Client,
  kind: BenchWorkflow,
  taskQueue: string,
  sku: string,
  i: number,
): Promise<string> {
  if (kind !== 'saga') {
    const workflowId = `bench-${kind}-${Date.now()}-${i}`;
    await client.workflow.execute(FLOOR_WORKFLOWS[kind], { taskQueue, workflowId, ...eagerStart() });
    return workflowId;
  }
  const order: OrderInput = {
    orderId: `bench-${Date.now()}-${i}`,
    customerId: `bench-${i % 50}`,
    currency: 'USD',
    paymentMethod: 'tok_visa',
    items: [{ sku: `${sku}-${i % 100}`, qty: 1, unitPriceCents: 100 }],
  };
  const r = await client.workflow.execute<typeof orderSaga>('orderSaga', {
    ...sagaStartOptions(order, taskQueue, { searchAttributesAtStart: true }),
    ...eagerStart(),
  });
  if (r.status !== 'COMPLETED') throw new Error(`bench saga ended ${r.status}`);
  return workflowIdFor(order.orderId);
}

/**
 * The production worker (createOrderWorkers) in this process, on `env`'s server, `db` and the bench
 * provider at `providerUrl`, polling `taskQueue`; resolves to its stop.
 */
export async function runBenchWorkers(
  env: TestWorkflowEnvironment,
  db: Pool,
  providerUrl: string,
  taskQueue: string,
  extra: { dataConverter: ReturnType<typeof dataConverterFor>; tracing?: Tracing },
): Promise<() => Promise<void>> {
  const cfg = {
    ...readConfig({}),
    temporalAddress: env.address,
    taskQueue,
    providerUrl,
    providerApiKey: BENCH_PROVIDER_KEY,
  };
  const workers = await createOrderWorkers(cfg, env.nativeConnection, { db, temporalClient: env.client, ...extra });
  const running = workers.run();
  return async () => {
    workers.shutdown();
    await running;
  };
}
