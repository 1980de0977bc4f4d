/**
 * The load generator: places N orders through Temporal with C in flight, K hot SKUs taking a share
 * of them, and reports throughput, saga latency, statuses and the abort rate. Used by
 * `client.ts load` and the chaos soak.
 */
import { randomUUID } from 'node:crypto';
import type { Client } from '@temporalio/client';
import { tsToMs } from '@temporalio/common/lib/time';
import { temporal } from '@temporalio/proto';
import * as v from 'valibot';
import type { SkuStats } from '../activities/inventory-metrics';
import { parseWith, record, wholeNumber } from '../domain/validation';
import type { OrderInput, OrderResult } from '../domain/order';
import { ORDER_SAGA, sagaStartOptions } from './saga-start';
import { orderOutcome } from './order-outcome';
import type { OrderStore } from './order-store';

/** The CLI flag each option comes from, for the error a person sees. */
const FLAGS: Record<string, string> = {
  orders: '--orders',
  concurrency: '--concurrency',
  hotSkus: '--hot-skus',
  hotShare: '--hot-share',
  declineShare: '--decline-share',
};
const SHARE = 'must be a number from 0 to 1';
const share = v.pipe(v.number(SHARE), v.minValue(0, SHARE), v.maxValue(1, SHARE));
const fn = <F>() => v.custom<F>((x) => typeof x === 'function', 'must be a function');

const LoadOptionsSchema = record(
  {
    orders: wholeNumber(1, 100_000),
    concurrency: wholeNumber(1, 500),
    hotSkus: wholeNumber(1, 1000),
    /** Share of orders that go to the hot SKUs. */
    hotShare: share,
    /** Share of orders paid with a declined test card. */
    declineShare: share,
    taskQueue: v.pipe(v.string('must be a task queue name'), v.minLength(1, 'must be a task queue name')),
    /** Called after every order with (done, total). */
    onProgress: v.optional(fn<(done: number, total: number) => void>()),
    /** Reads the worker's inventory stats, for the abort rate (optional). */
    stats: v.optional(fn<() => Promise<SkuStats[]>>()),
    /** Stop placing new orders after this long (ms); the ones in flight still finish. */
    maxDurationMs: v.optional(wholeNumber(1, 7 * 86_400_000)),
    /** Stop waiting for one saga after this long (ms): it is counted as UNSETTLED (the checker looks at it). */
    resultTimeoutMs: v.optional(wholeNumber(1, 7 * 86_400_000)),
  },
  'must be an object',
);
export type LoadOptions = v.InferOutput<typeof LoadOptionsSchema>;

/** A load's options that break a rule, naming the option (`field`) and, in the message, its CLI flag. */
export class LoadOptionsError extends Error {
  constructor(
    readonly field: string,
    readonly problem: string,
  ) {
    super(`${FLAGS[field] ?? (field || 'load options')}: ${problem}`);
    this.name = 'LoadOptionsError';
  }
}

/** Validates a load's options; throws LoadOptionsError naming the field (`--orders: must be a whole number from 1 to 100000`). */
export function parseLoadOptions(raw: unknown): LoadOptions {
  return parseWith(LoadOptionsSchema, raw, (field, problem) => {
    throw new LoadOptionsError(field, problem);
  });
}

export interface LoadSummary {
  runId: string;
  orders: number;
  placed: number;
  seconds: number;
  ordersPerSecond: number;
  latencyMs: { p50: number; p99: number; max: number };
  statuses: Record<string, number>;
  /** Why the orders that did not complete ended as they did (reason → count). */
  reasons: Record<string, number>;
  errors: number;
  firstErrors: string[];
  hotSkus: string[];
  abortRate?: number;
  casAttempts?: number;
  fallbacks?: number;
  orderIds: string[];
}

/** A well-mixed hash of (i, seed) onto [0, 1). */
export function unitHash(i: number, seed: number): number {
  let h = Math.imul(i + 1, 0x9e3779b1) ^ Math.imul(seed, 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 16), 0x7feb352d);
  h = Math.imul(h ^ (h >>> 15), 0x846ca68b);
  return ((h ^ (h >>> 16)) >>> 0) / 2 ** 32;
}

export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

/**
 * Runs `task` in `loops` concurrent loops (each starts its next task when its last one ends) until
 * `deadline` (a Date.now() time) passes or `more()` says there is no work left. The load generator's
 * lanes, the chaos soak's and the bench's workers.
 */
export async function concurrentLoops(
  loops: number,
  deadline: number,
  task: () => Promise<void>,
  more: () => boolean = () => true,
): Promise<void> {
  await Promise.all(
    Array.from({ length: loops }, async () => {
      while (more() && Date.now() < deadline) await task();
    }),
  );
}

/** Creates the run's own products (plenty of stock), so a load never starves the demo catalogue. */
async function loadProducts(
  store: Pick<OrderStore, 'createProducts'>,
  runId: string,
  opts: LoadOptions,
): Promise<{ hot: string[]; cold: string[] }> {
  const tag = runId.toUpperCase();
  const hot = Array.from({ length: opts.hotSkus }, (_, i) => `LOAD-${tag}-HOT-${i}`);
  const cold = Array.from({ length: 50 }, (_, i) => `LOAD-${tag}-COLD-${i}`);
  await store.createProducts({
    skus: [...hot, ...cold],
    name: 'load test product',
    priceCents: 990,
    stock: Math.max(1000, opts.orders * 4),
  });
  return { hot, cold };
}

export async function runLoad(
  client: Client,
  store: Pick<OrderStore, 'createProducts'>,
  opts: LoadOptions,
): Promise<LoadSummary> {
  opts = parseLoadOptions(opts);
  const runId = randomUUID().slice(0, 8);
  const { hot, cold } = await loadProducts(store, runId, opts);
  const before = opts.stats ? await opts.stats().catch(() => undefined) : undefined;
  // Deterministic per run: order i's SKU and card follow from i (two independent hashes of i).
  const orders: OrderInput[] = Array.from({ length: opts.orders }, (_, i) => {
    const sku = unitHash(i, 1) < opts.hotShare ? hot[i % hot.length]! : cold[i % cold.length]!;
    const declined = unitHash(i, 2) < opts.declineShare;
    return {
      orderId: `load-${runId}-${i}`,
      customerId: `load-cust-${i % 97}`,
      currency: 'USD',
      paymentMethod: declined ? 'tok_declined' : 'tok_visa',
      items: [{ sku, qty: 1, unitPriceCents: 990 }],
    };
  });
  const latencies: number[] = [];
  const statuses: Record<string, number> = {};
  const reasons: Record<string, number> = {};
  const firstErrors: string[] = [];
  let errors = 0;
  let next = 0;
  let done = 0;
  const started = Date.now();
  const deadline = opts.maxDurationMs ? started + opts.maxDurationMs : Infinity;
  const placeOne = async (): Promise<void> => {
    const order = orders[next++]!;
    const t = Date.now();
    try {
      // The server's default ID policies (each run's order IDs are new); the saga sets its search attributes.
      const handle = await client.workflow.start(ORDER_SAGA, sagaStartOptions(order, opts.taskQueue));
      let timer: NodeJS.Timeout | undefined;
      const timeout = opts.resultTimeoutMs
        ? new Promise<'UNSETTLED'>((r) => (timer = setTimeout(() => r('UNSETTLED'), opts.resultTimeoutMs)))
        : new Promise<never>(() => undefined);
      const result: OrderResult | 'UNSETTLED' = await Promise.race([orderOutcome(handle), timeout]);
      clearTimeout(timer);
      const status = result === 'UNSETTLED' ? result : result.status;
      statuses[status] = (statuses[status] ?? 0) + 1;
      if (result !== 'UNSETTLED') {
        latencies.push(Date.now() - t);
        if (result.status !== 'COMPLETED') {
          const why = `${result.status}: ${(result.reason ?? '').split(':')[0]}`;
          reasons[why] = (reasons[why] ?? 0) + 1;
        }
      }
    } catch (err) {
      errors++;
      if (firstErrors.length < 5) firstErrors.push(`${order.orderId}: ${(err as Error).message}`);
    }
    opts.onProgress?.(++done, orders.length);
  };
  await concurrentLoops(Math.min(opts.concurrency, orders.length), deadline, placeOne, () => next < orders.length);
  const seconds = (Date.now() - started) / 1000;
  latencies.sort((a, b) => a - b);
  const summary: LoadSummary = {
    runId,
    orders: opts.orders,
    placed: next,
    seconds: Math.round(seconds * 10) / 10,
    ordersPerSecond: Math.round((done / seconds) * 10) / 10,
    latencyMs: {
      p50: percentile(latencies, 50),
      p99: percentile(latencies, 99),
      max: latencies[latencies.length - 1] ?? 0,
    },
    statuses,
    reasons,
    errors,
    firstErrors,
    hotSkus: hot,
    orderIds: orders.slice(0, next).map((o) => o.orderId),
  };
  const after = opts.stats ? await opts.stats().catch(() => undefined) : undefined;
  if (after) {
    const mine = new Set([...hot, ...cold]);
    const sum = (list: SkuStats[] | undefined, k: 'attempts' | 'aborts' | 'fallbacks' | 'laneCommits'): number =>
      (list ?? []).filter((s) => mine.has(s.sku)).reduce((a, s) => a + s[k], 0);
    const attempts = sum(after, 'attempts') - sum(before, 'attempts');
    const aborts = sum(after, 'aborts') - sum(before, 'aborts');
    const lane = sum(after, 'laneCommits') - sum(before, 'laneCommits');
    summary.casAttempts = attempts;
    summary.fallbacks = sum(after, 'fallbacks') - sum(before, 'fallbacks');
    summary.abortRate = attempts + lane === 0 ? 0 : Math.round((aborts / (attempts + lane)) * 1000) / 1000;
  }
  return summary;
}

/** A one-line progress bar on a TTY (stderr), nothing elsewhere. */
export function progressBar(
  stream: NodeJS.WriteStream = process.stderr,
): ((done: number, total: number) => void) & { end(): void } {
  const started = Date.now();
  let last = 0;
  const draw = (done: number, total: number): void => {
    if (!stream.isTTY) return;
    const now = Date.now();
    if (done !== total && now - last < 100) return;
    last = now;
    const width = 30;
    const filled = Math.round((done / total) * width);
    const rate = done / Math.max(0.001, (now - started) / 1000);
    stream.write(
      `\r[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${done}/${total}  ${rate.toFixed(1)} orders/s `,
    );
  };
  return Object.assign(draw, { end: () => void (stream.isTTY && stream.write('\n')) });
}

/**
 * How many worker processes poll `taskQueue` now: the distinct identities that polled its workflow or
 * activity tasks in the last 90 s (a worker's long poll lasts up to a minute; a killed one drops out
 * after). The server answers for the queue's root partition only, and each poll goes to one partition
 * of several, so a worker that is running may not be seen at once: `load --workers` asks again.
 */
export async function workerProcesses(client: Client, taskQueue: string): Promise<string[]> {
  const { TaskQueueType } = temporal.api.enums.v1;
  const since = Date.now() - 90_000;
  const seen = new Set<string>();
  for (const taskQueueType of [TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY]) {
    const res = await client.workflowService.describeTaskQueue({
      namespace: client.options.namespace,
      taskQueue: { name: taskQueue, kind: temporal.api.enums.v1.TaskQueueKind.TASK_QUEUE_KIND_NORMAL },
      taskQueueType,
    });
    for (const p of res.pollers ?? []) if (p.identity && tsToMs(p.lastAccessTime) >= since) seen.add(p.identity);
  }
  return [...seen].sort();
}

/**
 * `workerProcesses` until at least `want` are seen or `waitMs` has passed (a running worker shows up
 * once one of its polls reaches the root partition); `onWait` hears each count short of it. A check
 * that fails is asked again while the wait lasts; one failing at its end throws.
 */
export async function awaitWorkerProcesses(
  client: Client,
  taskQueue: string,
  want: number,
  opts: { waitMs: number; everyMs: number; onWait?: (seen: number) => void },
): Promise<string[]> {
  const until = Date.now() + opts.waitMs;
  for (;;) {
    let seen: string[];
    try {
      seen = await workerProcesses(client, taskQueue);
    } catch (err) {
      if (Date.now() >= until) throw err; // one failed check is asked again while the wait lasts
      seen = [];
    }
    if (seen.length >= want || Date.now() >= until) return seen;
    opts.onWait?.(seen.length);
    await new Promise((r) => setTimeout(r, Math.min(opts.everyMs, Math.max(0, until - Date.now()))));
  }
}
