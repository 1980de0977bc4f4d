/**
 * Lanes stay serial across worker processes. Three real worker processes serve one task queue and its
 * lanes; two hot SKUs (one per lane) are pinned to the lanes (INVENTORY_LANE_SKUS), and 40 orders for
 * them start at once. Every lane transaction records its start and end on the database's clock, one
 * row per order it took (lane_tasks); the most transactions of one lane that overlapped must be 1, with
 * tasks run by more than one process, and nothing dropped: every order decided, stock and reservations
 * agreeing.
 *
 * And a lane is never held silently: a worker process holding a lane is stopped with SIGSTOP (its
 * kernel still answers the lock session's keepalives); another process's lane task finds the holder's
 * lease over, ends its session, and the lane's orders complete.
 */
import type { ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LANE_LEASE, laneHoldings, maxOverlap } from '../activities/lane-lock';
import { laneFor, laneTaskQueue } from '../domain/lanes';
import { workflowIdFor } from '../domain/order';
import { orderOutcome } from '../orders/order-outcome';
import { startTsProcess, startWorkerProcess, stopProcess } from '../platform/processes';
import { DEFAULT_SAGA_CONFIG, orderSaga } from '../workflows';
import { bundleWorkflows, startE2eServer } from './support/temporal-env';
import { createProduct, makeOrder, productRow, reservations, testPool, uid, workerProcessEnv } from './support/helpers';

const WORKERS = 3;
const PER_SKU = 20;
const STOCK = 15;
let env: TestWorkflowEnvironment;
let db: Pool;
let workers: ChildProcess[] = [];
let holder: ChildProcess | undefined;
const tmp = mkdtempSync(path.join(os.tmpdir(), 'order-saga-lanes-'));

let bundled: string | undefined;
/** The workflow bundle every worker process of this file loads, written once. */
async function bundlePath(): Promise<string> {
  if (!bundled) {
    bundled = path.join(tmp, 'bundle.js');
    writeFileSync(bundled, (await bundleWorkflows()).code);
  }
  return bundled;
}

/** A worker process's environment: this file's server, the run's database (the worker's role), these SKUs pinned. */
async function workerEnv(taskQueue: string, laneSkus: string[]): Promise<NodeJS.ProcessEnv> {
  return workerProcessEnv(env.address, taskQueue, await bundlePath(), { INVENTORY_LANE_SKUS: laneSkus.join(',') });
}

/** A worker process's identity (platform/identity.ts): its PID and host, and a random suffix of its own. */
function workerOf(c: ChildProcess): RegExp {
  const host = os.hostname().replace(/[^\w-]/g, (ch) => `\\${ch}`); // a hostname's dots, as themselves
  return new RegExp(`^${c.pid}@${host}/[0-9a-f]{6}$`);
}

/** Waits for pred, or fails naming what it waited for. */
async function until(pred: () => Promise<boolean> | boolean, what: string, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await pred()) return;
    await sleep(200);
  }
  throw new Error(`timed out after ${ms} ms waiting for ${what}`);
}

/** p, or a failure naming what did not happen within ms. */
async function within<T>(ms: number, p: Promise<T>, what: string): Promise<T> {
  let t: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    t = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([p, late]);
  } finally {
    clearTimeout(t);
  }
}

/** Lets the lane's holder run again if it was stopped, and kills it: nothing of this file is left behind. */
async function endHolder(): Promise<void> {
  if (!holder?.pid || holder.exitCode !== null || holder.signalCode !== null) return;
  process.kill(holder.pid, 'SIGCONT');
  await stopProcess(holder, 'SIGKILL');
}

/**
 * A lane held by a worker process: the crash test's worker, whose first lane task hangs inside the lane
 * (the lock held, the lease renewed), on a SKU of its own pinned to the lanes; its order started and
 * the lane seen held by it, its lease renewed at least once.
 */
async function holdLane(prefix: string) {
  const lanes = DEFAULT_SAGA_CONFIG.inventoryLanes;
  const p = await createProduct(db, { stock: 5, priceCents: 400 });
  const taskQueue = `${prefix}-${uid()}`;
  const lane = laneTaskQueue(taskQueue, laneFor([p.sku], lanes));
  const settings = await workerEnv(taskQueue, [p.sku]);
  const marker = path.join(tmp, `holding-${taskQueue}`);
  holder = (
    await startTsProcess(
      'test/support/crash-worker.ts',
      { ...settings, CRASH_POINT: 'in-lane', CRASH_MARKER: marker },
      /crash-worker: ready/,
      { showStderr: true, readyTimeoutMs: 120_000 },
    )
  ).child;
  const order = () => makeOrder([{ sku: p.sku, qty: 1, unitPriceCents: p.priceCents }]);
  const start = (o: ReturnType<typeof order>) =>
    env.client.workflow.start(orderSaga, { taskQueue, workflowId: workflowIdFor(o.orderId), args: [o] });
  const first = order();
  const firstRun = await start(first);
  await until(() => existsSync(marker), 'the holder to hang inside the lane', 90_000);
  const lease = async () =>
    (
      await db.query<{ worker: string; expires_at: Date; now: Date }>({
        text: 'SELECT worker, expires_at, clock_timestamp() AS now FROM lane_leases WHERE lane = $1',
        values: [lane],
      })
    ).rows[0];
  // Alive, it renews its lease: the expiry moves on.
  const before = await lease();
  expect(before?.worker).toMatch(workerOf(holder));
  const holderWorker = before!.worker;
  await until(async () => (await lease())!.expires_at > before!.expires_at, 'the holder to renew its lease', 30_000);
  return { p, lane, settings, holderWorker, order, start, first, firstRun, lease };
}

/** The lane's takeovers, and its tasks as lane_tasks recorded them. */
async function laneRecords(lane: string) {
  const { rows: taken } = await db.query<{ holder_worker: string; by_worker: string; expired_at: Date; at: Date }>({
    text: 'SELECT holder_worker, by_worker, expired_at, at FROM lane_takeovers WHERE lane = $1',
    values: [lane],
  });
  const { rows: tasks } = await db.query<{ order_id: string; worker: string; started_at: Date; ended_at: Date }>({
    text: 'SELECT order_id, worker, started_at, ended_at FROM lane_tasks WHERE lane = $1',
    values: [lane],
  });
  return { taken, tasks };
}

beforeAll(async () => {
  ({ env } = await startE2eServer());
  db = testPool();
});
afterAll(async () => {
  await endHolder();
  await Promise.all(workers.map((w) => stopProcess(w)));
  await db?.end();
  await env?.teardown();
  rmSync(tmp, { recursive: true, force: true });
});

describe('serial lanes across worker processes', () => {
  it(`${WORKERS} worker processes, two hot SKUs pinned to the lanes: each lane runs one transaction at a time, nothing dropped`, async () => {
    const lanes = DEFAULT_SAGA_CONFIG.inventoryLanes;
    const hot: Record<number, { sku: string; priceCents: number }> = {};
    while (Object.keys(hot).length < lanes) {
      const p = await createProduct(db, { stock: STOCK, priceCents: 400 });
      hot[laneFor([p.sku], lanes)] ??= p;
    }
    const taskQueue = `lanes3-${uid()}`;
    const workerSettings = await workerEnv(
      taskQueue,
      Object.values(hot).map((p) => p.sku),
    );
    workers = await Promise.all(Array.from({ length: WORKERS }, () => startWorkerProcess(workerSettings)));

    const orders = Object.values(hot).flatMap((p) =>
      Array.from({ length: PER_SKU }, () => makeOrder([{ sku: p.sku, qty: 1, unitPriceCents: p.priceCents }])),
    );
    const handles = await Promise.all(
      orders.map((o) =>
        env.client.workflow.start(orderSaga, { taskQueue, workflowId: workflowIdFor(o.orderId), args: [o] }),
      ),
    );
    const outcomes = await Promise.all(handles.map((h) => orderOutcome(h)));

    // Nothing dropped: each SKU sold exactly its stock, the rest were refused for stock, nothing held.
    for (const p of Object.values(hot)) {
      const mine = orders.map((o, i) => ({ o, r: outcomes[i]! })).filter(({ o }) => o.items[0]!.sku === p.sku);
      const statuses = mine.map(({ r }) => r.status).sort();
      expect(statuses).toEqual(
        [...Array<string>(STOCK).fill('COMPLETED'), ...Array<string>(PER_SKU - STOCK).fill('FAILED')].sort(),
      );
      expect((await productRow(db, p.sku)).stock).toBe(0);
      const sold = (await Promise.all(mine.map(({ o }) => reservations(db, o.orderId)))).flat();
      expect(sold.filter((r) => r.status === 'SOLD')).toHaveLength(STOCK);
      expect(sold.filter((r) => r.status === 'HELD')).toHaveLength(0);
    }

    // One task at a time per lane, on the database's clock, across the processes.
    const { rows } = await db.query<{ lane: string; worker: string; started_at: Date; ended_at: Date }>({
      text: 'SELECT lane, worker, started_at, ended_at FROM lane_tasks WHERE order_id = ANY($1::text[])',
      values: [orders.map((o) => o.orderId)],
    });
    const report: string[] = [];
    for (let n = 0; n < lanes; n++) {
      const mine = rows.filter((r) => r.lane === laneTaskQueue(taskQueue, n));
      const byWorker = new Set(mine.map((r) => r.worker)).size;
      // A group commit's rows (one per order it took) are one holding of the lane: holdings never overlap.
      const held = laneHoldings(mine);
      report.push(
        `lane ${n}: ${mine.length} tasks in ${held.length} transactions by ${byWorker} worker processes, max overlap ${maxOverlap(held)}`,
      );
      // Every order reserved went through the lane; one refused for stock may be refused before it
      // queues (its own snapshot found none left), and then it holds no lane.
      expect(mine.length).toBeGreaterThanOrEqual(STOCK);
      expect(maxOverlap(held)).toBe(1);
    }
    expect(new Set(rows.map((r) => r.worker)).size).toBeGreaterThanOrEqual(2);
    console.log(`lanes across ${WORKERS} worker processes: ${report.join('; ')}`);
  });

  it('a lane held by a frozen process is freed: SIGSTOP of the worker holding it, another process takes the lane over and the orders complete', async () => {
    const { p, lane, settings, holderWorker, order, start, first, firstRun, lease } = await holdLane('frozen');
    const frozen = holder!;

    process.kill(frozen.pid!, 'SIGSTOP');
    const stoppedAt = (await lease())!.now;
    const other = await startWorkerProcess(settings);
    workers.push(other);
    const second = order();
    const secondRun = await start(second);
    // Generous: without the lease, the lane would be held until the orders' deadline (24 h).
    const outcomes = await within(
      180_000,
      Promise.all([orderOutcome(firstRun), orderOutcome(secondRun)]),
      'both orders decided with the lane holder stopped',
    );
    expect(outcomes.map((o) => o.status)).toEqual(['COMPLETED', 'COMPLETED']);

    // The stopped holder was seen and its session ended by the other process, after its lease ran out.
    const { taken, tasks } = await laneRecords(lane);
    expect(taken).toHaveLength(1);
    expect(taken[0]!.holder_worker).toBe(holderWorker);
    expect(taken[0]!.by_worker).toMatch(workerOf(other));
    // Renewed up to the stop (a live holder's lease runs LANE_LEASE.ms ahead), so it ran out only after it.
    expect(taken[0]!.expired_at.getTime()).toBeGreaterThan(stoppedAt.getTime());
    expect(taken[0]!.expired_at.getTime()).toBeLessThanOrEqual(stoppedAt.getTime() + LANE_LEASE.ms);
    expect(taken[0]!.at.getTime()).toBeGreaterThan(taken[0]!.expired_at.getTime());

    // Each order reserved once, by the process that runs; the stopped holder committed nothing.
    expect((await productRow(db, p.sku)).stock).toBe(3);
    for (const o of [first, second]) expect((await reservations(db, o.orderId)).map((r) => r.status)).toEqual(['SOLD']);
    expect(tasks.map((t) => t.worker)).not.toContain(holderWorker);
    expect(tasks.map((t) => t.order_id).sort()).toEqual([first.orderId, second.orderId].sort());
    expect(maxOverlap(laneHoldings(tasks))).toBe(1); // the orders may share one round
    console.log(
      `frozen lane holder: stopped at ${stoppedAt.toISOString()}; lease expired ${taken[0]!.expired_at.toISOString()}; ` +
        `taken over ${(taken[0]!.at.getTime() - stoppedAt.getTime()) / 1000} s after SIGSTOP (database clock); ` +
        `the lane's tasks done ${Math.max(...tasks.map((t) => t.ended_at.getTime() - stoppedAt.getTime())) / 1000} s after it`,
    );
    await endHolder();
  }, 300_000);

  it('a lane held by a stuck task is freed: its process alive, its attempt timed out, it stops renewing, the lane is taken over and the orders complete', async () => {
    const { p, lane, settings, holderWorker, order, start, first, firstRun } = await holdLane('stuck');
    const other = await startWorkerProcess(settings);
    workers.push(other);
    const second = order();
    const t0 = Date.now();
    const secondRun = await start(second);
    // The holder's attempt times out (its heartbeat is late: the SDK cancels it), and it stops renewing.
    // Generous: renewing on, it would hold the lane until the orders' deadline (24 h).
    const outcomes = await within(
      180_000,
      Promise.all([orderOutcome(firstRun), orderOutcome(secondRun)]),
      'both orders decided with the lane holder stuck',
    );
    expect(outcomes.map((o) => o.status)).toEqual(['COMPLETED', 'COMPLETED']);
    expect(holder!.exitCode).toBeNull(); // it was alive all along

    const { taken, tasks } = await laneRecords(lane);
    expect(taken).toHaveLength(1);
    expect(taken[0]!.holder_worker).toBe(holderWorker);
    expect(taken[0]!.by_worker).toMatch(workerOf(other));
    expect((await productRow(db, p.sku)).stock).toBe(3);
    for (const o of [first, second]) expect((await reservations(db, o.orderId)).map((r) => r.status)).toEqual(['SOLD']);
    expect(tasks.map((t) => t.worker)).not.toContain(holderWorker);
    expect(tasks.map((t) => t.order_id).sort()).toEqual([first.orderId, second.orderId].sort());
    expect(maxOverlap(laneHoldings(tasks))).toBe(1); // the orders may share one round
    console.log(
      `stuck lane holder: lease expired ${taken[0]!.expired_at.toISOString()}, taken over ${taken[0]!.at.toISOString()}; ` +
        `both orders decided ${(Date.now() - t0) / 1000} s after the second started`,
    );
    await endHolder();
  }, 300_000);
});
