/**
 * A deploy in the middle of a sweep, on the real Temporal dev server, with versioned in-process workers
 * of two builds (today's workflows in both) and the `sweep` Schedule as npm start makes it
 * (ops/schedules.ts, here every 3 s and scoped to the test's order):
 *   build A is current, and its sweep activity is held in flight (it heartbeats until its worker stops);
 *   build B starts and is made current, A's workers stop (the sweep's run is not pinned to A: it
 *   auto-upgrades); then an order placed on B is terminated in the middle of its authorization, and only the
 *   Schedule's sweeps act: the order is healed (a new run from the row ends it COMPLETED), captured once.
 */
import { Context } from '@temporalio/activity';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createActivities } from '../activities';
import { SweeperStats } from '../activities/sweeper';
import { WorkflowNames } from '../domain/names';
import { workflowIdFor } from '../domain/order';
import { DEPLOYMENT_NAME, makeVersionCurrent, orderTaskQueues, runVersion } from '../ops/deployments';
import { upsertSchedule } from '../ops/schedules';
import { deploymentOptions } from '../worker';
import { orderSaga } from '../workflows';
import {
  createProduct,
  holds,
  makeOrder,
  orderViolations,
  testAdmin,
  testPool,
  testProvider,
  uid,
} from './support/helpers';
import { bundleWorkflows, dataConverter, startDevServer } from './support/temporal-env';

let env: TestWorkflowEnvironment;
let db: Pool;
let bundle: WorkflowBundleWithSourceMap;
const taskQueue = `deploy-sweep-${uid()}`;
const scheduleId = `sweep-${uid()}`;
const namespace = 'default';
const admin = testAdmin();
const builds: { worker: Worker; running: Promise<void> }[] = [];
const say = (line: string): void => console.log(`[deploy-sweep] ${line}`);
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

beforeAll(async () => {
  env = await startDevServer();
  db = testPool();
  bundle = await bundleWorkflows();
});

afterAll(async () => {
  await admin.clear();
  await env?.client.schedule
    .getHandle(scheduleId)
    .delete()
    .catch(() => undefined);
  for (const b of builds) if (b.worker.getState() === 'RUNNING') b.worker.shutdown();
  await Promise.all(builds.map((b) => b.running));
  await db?.end();
  await env?.teardown();
});

/** A build's versioned worker on the test's queue; `sweepOrders` replaced when given. */
async function startBuild(
  buildId: string,
  sweepOrders?: () => Promise<never>,
): Promise<{ worker: Worker; running: Promise<void> }> {
  const activities = createActivities({
    db,
    provider: testProvider(),
    temporal: { client: () => Promise.resolve(env.client), taskQueue },
    sweeperStats: new SweeperStats(),
  });
  const worker = await Worker.create({
    ...deploymentOptions({ buildId }),
    connection: env.nativeConnection,
    namespace,
    taskQueue,
    dataConverter: dataConverter(),
    workflowBundle: bundle,
    activities: sweepOrders ? { ...activities, sweepOrders } : activities,
  });
  const b = { worker, running: worker.run() };
  builds.push(b);
  return b;
}

const makeCurrent = (buildId: string) =>
  makeVersionCurrent(env.connection, {
    namespace,
    version: { deploymentName: DEPLOYMENT_NAME, buildId },
    taskQueues: orderTaskQueues(taskQueue, 0),
  });

async function rowStatus(orderId: string): Promise<string | undefined> {
  const { rows } = await db.query<{ status: string }>({
    text: 'SELECT status FROM orders WHERE order_id = $1',
    values: [orderId],
  });
  return rows[0]?.status;
}

/** Polls `probe` every 200 ms until it returns a value, for at most `ms`; throws naming `what`. */
async function until<T>(what: string, ms: number, probe: () => Promise<T | undefined>): Promise<T> {
  for (const end = Date.now() + ms; ; await sleep(200)) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`${what}: not within ${ms} ms`);
  }
}

describe('a deploy during a sweep', () => {
  it('the sweep in flight moves to the new build, later sweeps run, and an order terminated after the deploy is healed', async () => {
    const A = `a-${uid()}`;
    const B = `b-${uid()}`;

    // ---- Build A current; its sweep activity is held in flight until its worker stops ----
    let held: (id: string) => void = () => undefined;
    const heldRun = new Promise<string>((r) => (held = r));
    await startBuild(A, async () => {
      const ctx = Context.current();
      held(ctx.info.workflowExecution?.workflowId ?? '');
      for (;;) {
        ctx.heartbeat();
        await ctx.sleep(1_000); // rejects once the activity is cancelled (its worker shutting down)
      }
    });
    await makeCurrent(A);

    const p = await createProduct(db, { stock: 10, priceCents: 1500 });
    const order = makeOrder([{ sku: p.sku, qty: 1, unitPriceCents: p.priceCents }]);
    await upsertSchedule(env.client, {
      scheduleId,
      workflowType: WorkflowNames.sweeper,
      taskQueue,
      every: '3s',
      args: [{ graceMs: 0, orderIds: [order.orderId] }],
    });
    const heldSweep = await Promise.race([
      heldRun,
      sleep(60_000).then(() => {
        throw new Error('no sweep reached its activity on build A within 60 s');
      }),
    ]);
    const onA = runVersion((await env.client.workflow.getHandle(heldSweep).describe()).raw);
    say(`sweep ${heldSweep} held in flight on ${onA?.version} (${onA?.behavior})`);
    expect(onA).toMatchObject({ buildId: A, behavior: 'AUTO_UPGRADE' });

    // ---- The deploy: B's workers start, B is made current, A's workers stop ----
    const deployedAt = Date.now();
    await startBuild(B);
    await makeCurrent(B);
    builds[0]!.worker.shutdown();
    await builds[0]!.running;
    say(`B current and A stopped ${Date.now() - deployedAt} ms after the deploy began`);

    // ---- An order on B, terminated in the middle of its authorization ----
    await admin.set({
      kind: 'delay',
      target: 'authorizations',
      delayMs: 8_000,
      count: 1,
      keyPrefix: `${order.orderId}:`,
    });
    const h = await env.client.workflow.start(orderSaga, {
      taskQueue,
      workflowId: workflowIdFor(order.orderId),
      args: [order],
    });
    await until('the order reached the provider', 30_000, async () =>
      (await holds(db, order.orderId)).authorizations.length > 0 ? true : undefined,
    );
    await h.terminate('test: terminated mid-authorization, after a deploy during a sweep');
    const atTerminate = await rowStatus(order.orderId);
    expect(['COMPLETED', 'FAILED', 'CANCELLED']).not.toContain(atTerminate);
    const terminatedAt = Date.now();

    // ---- Only the Schedule's sweeps act ----
    const end = await until('the order healed by the sweeps', 180_000, async () => {
      const s = await rowStatus(order.orderId);
      return s === 'COMPLETED' || s === 'FAILED' || s === 'CANCELLED' ? s : undefined;
    });
    say(`order ${order.orderId}: ${atTerminate} at the terminate, ${end} ${Date.now() - terminatedAt} ms later`);
    expect(end).toBe('COMPLETED');
    const latest = await env.client.workflow.getHandle(workflowIdFor(order.orderId)).describe();
    expect(latest.runId).not.toBe(h.firstExecutionRunId);
    expect(runVersion(latest.raw)?.buildId).toBe(B);

    const heldNow = await env.client.workflow.getHandle(heldSweep).describe();
    const sweeps = await env.client.schedule.getHandle(scheduleId).describe();
    const after = sweeps.info.recentActions.filter((a) => a.takenAt.getTime() > deployedAt);
    say(
      `the held sweep ended ${heldNow.status.name} on ${runVersion(heldNow.raw)?.version}; ${after.length} sweeps started after the deploy; ${sweeps.info.numActionsSkippedOverlap} starts skipped`,
    );
    expect(heldNow.status.name).toBe('COMPLETED');
    expect(runVersion(heldNow.raw)?.buildId).toBe(B);
    expect(after.length).toBeGreaterThan(0);

    const money = await holds(db, order.orderId);
    expect(money.captures.filter((c) => c.status === 'succeeded')).toHaveLength(1);
    expect(await orderViolations(db, env.client, [order.orderId])).toEqual([]);
  }, 300_000);
});
