/**
 * The sweeper and runs that are open but not moving, and orders it cannot read, on the real Temporal
 * dev server with the real activities, Postgres and provider (the stall bound is made small here):
 * - an activity retrying past the bound goes to a person with its last failure; once an operator
 *   pauses it, a person is told who paused it and since when, with the order's money and stock; the
 *   sweeper never unpauses it, tells once, and `client.ts sweeps --stalled` and `views` name the order;
 * - a versioning override of a pinned run (a versioned worker, its version current) to a build nobody
 *   polls is removed, and the run completes; so is one set after the order settled (the row
 *   COMPLETED, the run's last workflow task still to come), which leaves the run open, not the order;
 * - an override set before the run wrote its row (it started pinned to a build nobody polls) is
 *   removed too: the run has no version of its own yet, goes where new runs go, and completes;
 * - an order whose run's payload cannot be decoded goes to a person, and the sweep goes on to restart
 *   another stranded order, which completes.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { ApplicationFailure, Client } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker, type WorkerOptions } from '@temporalio/worker';
import type { Pool } from 'pg';
import { describe, expect, inject, it } from 'vitest';
import { runCli } from '../client';
import { createActivities, type OrderActivities } from '../activities';
import { recordWorkerStop, SweeperStats, type SweepOptions, type SweepReport } from '../activities/sweeper';
import { workflowIdFor, type OrderInput } from '../domain/order';
import { readConfig } from '../ops/config';
import { DEPLOYMENT_NAME, makeVersionCurrent } from '../ops/deployments';
import { orderStore } from '../orders/order-store';
import { dataConverterFor, parseKeyList } from '../platform/payload-codec';
import { orderSaga, sweeperWorkflow } from '../workflows';
import { createProduct, makeOrder, orderViolations, testProvider, uid } from './support/helpers';
import { withFaults } from './support/activity-faults';
import { useSagaTestEnv } from './support/saga-test-env';
import { dataConverter } from './support/temporal-env';
import { deploymentOptions } from '../worker';

let env: TestWorkflowEnvironment;
let db: Pool;
let bundle: WorkerOptions['workflowBundle'];
const taskQueue = `stall-${uid()}`;
const stats = new SweeperStats();

/** Orders whose shipment fails (the carrier is down), and those whose shipment waits until released. */
const failing = new Set<string>();
const holds = new Map<string, { released: Promise<void>; release: () => void; started: boolean }>();

/** The real activities, with test-only faults of the carrier: the saga's own shipment step, failing or held up. */
function testActivities(env: TestWorkflowEnvironment, db: Pool, queue: string): OrderActivities {
  const real = createActivities({
    db,
    provider: testProvider(),
    temporal: { client: () => Promise.resolve(env.client), taskQueue: queue },
    sweeperStats: stats,
  });
  const held = async (step: string, orderId: string): Promise<void> => {
    const hold = holds.get(`${step}:${orderId}`);
    if (!hold) return;
    holds.delete(`${step}:${orderId}`); // once: a later run's attempt goes through
    hold.started = true;
    await hold.released;
  };
  return withFaults(real, {
    createShipment: async (req) => {
      if (failing.has(req.orderId)) return ApplicationFailure.retryable('the carrier is down', 'CarrierDown');
      await held('createShipment', req.orderId);
    },
    authorizePayment: (req) => held('authorizePayment', req.orderId),
    // After its commit: the row is COMPLETED, the run's last workflow task still to come.
    sendConfirmation: { after: (req) => held('sendConfirmation', req.orderId) },
  });
}

/** A versioned worker (as npm start runs them), its version current, for the override test. */
const versionedQueue = `stall-v-${uid()}`;
const version = { deploymentName: DEPLOYMENT_NAME, buildId: `stall-${uid()}` };
let versioned: { worker: Worker; running: Promise<void> } | undefined;

useSagaTestEnv(
  {
    server: 'dev',
    taskQueue,
    activities: ({ env, db }) => testActivities(env, db, taskQueue),
  },
  {
    started: async (saga) => {
      ({ env, db, bundle } = saga);
      const worker = await Worker.create({
        dataConverter: dataConverter(),
        connection: env.nativeConnection,
        taskQueue: versionedQueue,
        workflowBundle: saga.bundle,
        activities: testActivities(env, db, versionedQueue),
        ...deploymentOptions({ buildId: version.buildId }),
      });
      versioned = { worker, running: worker.run() };
      await makeVersionCurrent(env.connection, {
        namespace: env.client.options.namespace,
        version,
        taskQueues: { workflow: versionedQueue, activity: [] },
      });
    },
    stopping: async () => {
      for (const h of holds.values()) h.release();
      versioned?.worker.shutdown();
      await versioned?.running;
    },
  },
);

const sleepMs = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const STALL: Partial<SweepOptions> = { graceMs: 0, stallAfterMs: 1_000 };

/** One sweep over these orders, as the Schedule runs it (the sweeper workflow on the worker). */
const sweep = (orderIds: string[], opts: Partial<SweepOptions> = {}): Promise<SweepReport> =>
  env.client.workflow.execute(sweeperWorkflow, {
    taskQueue,
    workflowId: `sweep-${uid()}`,
    args: [{ ...STALL, ...opts, orderIds }],
  });

async function newOrder(kind: string): Promise<{ order: OrderInput; sku: string }> {
  const p = await createProduct(db, { stock: 10, priceCents: 750 });
  const order = makeOrder([{ sku: p.sku, qty: 2, unitPriceCents: p.priceCents }], { orderId: `st-${kind}-${uid()}` });
  return { order, sku: p.sku };
}

const start = (order: OrderInput, queue = taskQueue) =>
  env.client.workflow.start(orderSaga, {
    taskQueue: queue,
    workflowId: workflowIdFor(order.orderId),
    args: [order, {}],
  });

/** Polls `check` until it holds (bounded), and says what it waited for when it never does. */
async function until(what: string, check: () => Promise<boolean>, tries = 300): Promise<void> {
  for (let i = 0; i < tries; i++) {
    if (await check()) return;
    await sleepMs(100);
  }
  throw new Error(`waited in vain for ${what}`);
}

/** Holds the step's activity of this order (a regular activity: no workflow task in flight) until released. */
function hold(
  step: 'authorizePayment' | 'createShipment' | 'sendConfirmation',
  orderId: string,
): { release: () => void; started: () => boolean } {
  let release!: () => void;
  const released = new Promise<void>((r) => (release = r));
  const h = { released, release, started: false };
  holds.set(`${step}:${orderId}`, h);
  return { release, started: () => h.started };
}

async function rowStatus(orderId: string): Promise<string | undefined> {
  const { rows } = await db.query<{ status: string }>({
    text: 'SELECT status FROM orders WHERE order_id = $1',
    values: [orderId],
  });
  return rows[0]?.status;
}

const pending = async (orderId: string) => (await env.client.workflow.getHandle(workflowIdFor(orderId)).describe()).raw;

describe('an activity that keeps failing past the bound', () => {
  it('goes to a person with its last failure; paused by an operator, a person is told who and since when, once per pause, and it stays paused', async () => {
    const { order, sku } = await newOrder('paused');
    failing.add(order.orderId);
    const handle = await start(order);
    const shipment = async () =>
      (await pending(order.orderId)).pendingActivities?.find((a) => a.activityType?.name === 'createShipment');
    await until('the shipment retrying', async () => ((await shipment())?.attempt ?? 0) >= 2);
    await sleepMs(1_200); // past the stall bound since the run's last event

    const retrying = await sweep([order.orderId]);
    expect(retrying.actions.map((a) => [a.action, a.cause])).toEqual([['person', 'activity-retrying']]);
    expect(retrying.actions[0]!.reason).toMatch(
      /createShipment is retrying \(attempt \d+\); last failure: the carrier is down/,
    );
    expect(retrying.stalled).toBe(1);

    const activityId = (await shipment())!.activityId!;
    await env.client.workflowService.pauseActivity({
      namespace: env.client.options.namespace,
      execution: { workflowId: workflowIdFor(order.orderId) },
      id: activityId,
      identity: 'ops-on-call',
      reason: 'carrier incident',
      requestId: randomUUID(),
    });
    await until('the shipment paused', async () => (await shipment())?.paused === true);

    const paused = await sweep([order.orderId]);
    expect(paused.actions.map((a) => [a.action, a.cause])).toEqual([['person', 'activity-paused']]);
    const reason = paused.actions[0]!.reason;
    expect(reason).toMatch(
      /createShipment is paused by ops-on-call since \d{4}-\d\d-\d\dT[\d:.]+Z \(carrier incident\)/,
    );
    expect(reason).toMatch(new RegExp(`order AUTHORIZED, total 15\\.00 USD, stock held: ${sku} x2`));
    process.stdout.write(`stall test, told a person: ${reason}\n`);

    // Told once; never unpaused; named among the stalled orders.
    expect((await sweep([order.orderId])).actions).toEqual([]);
    expect((await shipment())?.paused).toBe(true);
    const stalled = await orderStore(db).stalledOrders();
    expect(stalled.find((r) => r.orderId === order.orderId)).toMatchObject({
      cause: 'activity-paused',
      action: 'person',
    });
    // Where a person finds it: client.ts sweeps --stalled, and a view of client.ts views.
    const cfg = readConfig({ TEMPORAL_ADDRESS: env.address, READER_DATABASE_URL: inject('roleUrls').reader });
    const said: string[] = [];
    const io = { out: (l: string) => void said.push(l), err: (l: string) => void said.push(l) };
    expect(await runCli(['sweeps', '--stalled'], cfg, io)).toBe(0);
    expect(said.join('\n')).toMatch(new RegExp(`AUTHORIZED +\\S+ +person +${order.orderId} \\[activity-paused\\]: `));
    said.length = 0;
    expect(await runCli(['views'], cfg, io)).toBe(0);
    expect(said.join('\n')).toMatch(new RegExp(`stalled: .*${order.orderId} \\(activity-paused\\)`));
    expect(said.join('\n')).toContain(`'${workflowIdFor(order.orderId)}'`);

    // An alert belongs to an episode: unpaused while the carrier is still down, then paused again,
    // the same run's second pause is told again (once).
    const pauseTimeOf = async () => (await shipment())?.pauseInfo?.pauseTime?.seconds?.toString();
    const firstPause = await pauseTimeOf();
    await env.client.workflowService.unpauseActivity({
      namespace: env.client.options.namespace,
      execution: { workflowId: workflowIdFor(order.orderId) },
      id: activityId,
      identity: 'ops-on-call',
    });
    await until('the shipment unpaused', async () => (await shipment())?.paused === false);
    await sleepMs(1_100); // a pause time of its own (the server's timestamps, to the second here)
    await env.client.workflowService.pauseActivity({
      namespace: env.client.options.namespace,
      execution: { workflowId: workflowIdFor(order.orderId) },
      id: activityId,
      identity: 'ops-on-call',
      reason: 'carrier incident, again',
      requestId: randomUUID(),
    });
    await until('the shipment paused again', async () => (await shipment())?.paused === true);
    expect(await pauseTimeOf()).not.toBe(firstPause);
    const again = await sweep([order.orderId]);
    expect(again.actions.map((a) => [a.action, a.cause])).toEqual([['person', 'activity-paused']]);
    expect(again.actions[0]!.reason).toContain('(carrier incident, again)');
    expect((await sweep([order.orderId])).actions).toEqual([]);

    // The operator's decision: the carrier is back, the activity unpaused; the saga completes.
    failing.delete(order.orderId);
    await env.client.workflowService.unpauseActivity({
      namespace: env.client.options.namespace,
      execution: { workflowId: workflowIdFor(order.orderId) },
      id: activityId,
      identity: 'ops-on-call',
    });
    await handle.result();
    expect(await rowStatus(order.orderId)).toBe('COMPLETED');
    expect((await orderStore(db).stalledOrders()).map((r) => r.orderId)).not.toContain(order.orderId);
    expect(await orderViolations(db, env.client, [order.orderId])).toEqual([]);
  });
});

/** What `temporal workflow update-options --versioning-override-behavior pinned` does, to a build nobody runs. */
const pinToGhost = (orderId: string) =>
  env.client.workflowService.updateWorkflowExecutionOptions({
    namespace: env.client.options.namespace,
    workflowExecution: { workflowId: workflowIdFor(orderId) },
    workflowExecutionOptions: {
      versioningOverride: {
        pinned: {
          behavior: temporal.api.workflow.v1.VersioningOverride.PinnedOverrideBehavior.PINNED_OVERRIDE_BEHAVIOR_PINNED,
          version: { deploymentName: DEPLOYMENT_NAME, buildId: `ghost-${uid()}` },
        },
      },
    },
    updateMask: { paths: ['versioning_override'] },
  });

/** Until the run waits for a workflow task nobody takes, then past the stall bound. */
async function untilStalledOnTask(orderId: string): Promise<void> {
  await until('a workflow task nobody takes', async () => {
    const raw = await pending(orderId);
    return !!raw.pendingWorkflowTask && !raw.pendingActivities?.length;
  });
  await sleepMs(1_200);
}

describe('a versioning override to a build nobody polls', () => {
  it('is removed by the sweeper, and the run completes', async () => {
    const { order } = await newOrder('override');
    const held = hold('authorizePayment', order.orderId);
    const handle = await start(order, versionedQueue);
    await until('the authorization running', () => Promise.resolve(held.started()));
    await pinToGhost(order.orderId);
    held.release();
    // The authorization completes; the next workflow task waits for the ghost build.
    await untilStalledOnTask(order.orderId);
    expect(await rowStatus(order.orderId)).toBe('AUTHORIZED');

    const report = await sweep([order.orderId]);
    expect(report.actions.map((a) => [a.action, a.cause])).toEqual([['remove-override', 'override-unpolled']]);
    expect(report.actions[0]!.reason).toMatch(/pins it to version order-saga:ghost-\w+, which no worker polls/);
    await handle.result();
    expect(await rowStatus(order.orderId)).toBe('COMPLETED');
    expect(stats.overridesRemoved).toBeGreaterThanOrEqual(1);
    expect(await orderViolations(db, env.client, [order.orderId])).toEqual([]);
  });

  it('set after the order settled (its row COMPLETED, its last workflow task to come): the run is still swept, the override removed, the run closes', async () => {
    const { order } = await newOrder('override-settled');
    const held = hold('sendConfirmation', order.orderId);
    const handle = await start(order, versionedQueue);
    await until('the confirmation committed', () => Promise.resolve(held.started()));
    expect(await rowStatus(order.orderId)).toBe('COMPLETED');
    await pinToGhost(order.orderId);
    held.release();
    await untilStalledOnTask(order.orderId);
    expect((await handle.describe()).status.name).toBe('RUNNING');

    const report = await sweep([order.orderId]);
    expect(report.open).toBe(0); // not an open order: a settled one whose run never closed
    expect(report.actions.map((a) => [a.action, a.cause])).toEqual([['remove-override', 'override-unpolled']]);
    expect(await handle.result()).toMatchObject({ status: 'COMPLETED' });
    expect((await handle.describe()).status.name).toBe('COMPLETED');
    expect(await orderViolations(db, env.client, [order.orderId])).toEqual([]);
  });
});

describe('a run pinned to a build a deploy stopped', () => {
  it('is replaced by a new run from the row as soon as the stopped worker process recorded its stop, not a poll interval later', async () => {
    // A deployment of this test's own, so the versions it makes current touch no other test's.
    const deploymentName = `stop-${uid()}`;
    const queue = `stall-stop-${uid()}`;
    const versioned = async (buildId: string) => {
      const worker = await Worker.create({
        dataConverter: dataConverter(),
        connection: env.nativeConnection,
        taskQueue: queue,
        identity: `${deploymentName}-${buildId}`,
        workflowBundle: bundle,
        activities: testActivities(env, db, queue),
        ...deploymentOptions({ deploymentName, buildId }),
      });
      const running = worker.run();
      await makeVersionCurrent(env.connection, {
        namespace: env.client.options.namespace,
        version: { deploymentName, buildId },
        taskQueues: { workflow: queue, activity: [] },
      });
      return { worker, running };
    };
    const old = await versioned('old');
    const { order } = await newOrder('stopped-build');
    const held = hold('authorizePayment', order.orderId);
    await start(order, queue);
    await until('the authorization running on the old build', () => Promise.resolve(held.started()));
    const next = await versioned('new');
    try {
      // The deploy stops the old build's worker gracefully: it stops polling, its last activity ends,
      // and the process records its stop (worker.ts). The run's next task waits for the old build.
      old.worker.shutdown();
      held.release();
      await old.running;
      await recordWorkerStop(db, [old.worker.options.identity]);
      await untilStalledOnTask(order.orderId);

      const report = await sweep([order.orderId]);
      expect(report.actions.map((a) => [a.action, a.cause])).toEqual([['restart', 'build-unpolled']]);
      expect(report.actions[0]!.reason).toMatch(
        new RegExp(`waits for version ${deploymentName}:old, which no worker polls`),
      );
      await until('the order completed by the new run', async () => (await rowStatus(order.orderId)) === 'COMPLETED');
      expect(await orderViolations(db, env.client, [order.orderId])).toEqual([]);
    } finally {
      next.worker.shutdown();
      await next.running;
    }
  });
});

describe('a versioning override set before the run wrote its row', () => {
  it('(started pinned to a build nobody polls) is removed by the sweeper: the run goes where new runs go, and completes', async () => {
    const { order } = await newOrder('override-rowless');
    const handle = await env.client.workflow.start(orderSaga, {
      taskQueue: versionedQueue,
      workflowId: workflowIdFor(order.orderId),
      args: [order, {}],
      versioningOverride: { pinnedTo: { deploymentName: DEPLOYMENT_NAME, buildId: `ghost-${uid()}` } },
    });
    await untilStalledOnTask(order.orderId);
    expect(await rowStatus(order.orderId)).toBeUndefined(); // its first step never ran

    const report = await sweep([order.orderId]);
    expect(report.open).toBe(0); // no open row: a running saga with no row at all
    expect(report.actions.map((a) => [a.action, a.cause])).toEqual([['remove-override', 'override-unpolled']]);
    expect(report.actions[0]!.reason).toMatch(
      /which no worker polls; it has no version of its own yet; override removed/,
    );
    expect(await handle.result()).toMatchObject({ status: 'COMPLETED' });
    expect(await rowStatus(order.orderId)).toBe('COMPLETED');
    expect(await orderViolations(db, env.client, [order.orderId])).toEqual([]);
  });
});

describe('an order the sweeper cannot read', () => {
  it('goes to a person with the reason, and the sweep goes on to restart another stranded order', async () => {
    // A: its row open a minute, its run started with a payload key this worker does not have, then terminated.
    const { order: a } = await newOrder('unreadable');
    await db.query({
      text: `INSERT INTO orders (order_id, customer_id, status, currency, total_cents, items, payment_method, workflow_id, updated_at)
             VALUES ($1, $2, 'PENDING', $3, 1500, $4, $5, $6, now() - interval '1 minute')`,
      values: [a.orderId, a.customerId, a.currency, JSON.stringify(a.items), a.paymentMethod, workflowIdFor(a.orderId)],
    });
    const foreign = new Client({
      connection: env.connection,
      namespace: env.client.options.namespace,
      dataConverter: dataConverterFor(parseKeyList(`elsewhere-1:${randomBytes(32).toString('base64')}`, 'test')),
    });
    const aRun = await foreign.workflow.start('orderSaga', {
      taskQueue: `nobody-${uid()}`,
      workflowId: workflowIdFor(a.orderId),
      args: [a, { deadlineMs: 3_600_000 }],
    });
    await aRun.terminate('stall test: a run whose payloads this worker cannot open');

    // B: terminated in its authorization, an ordinary stranded order (its held attempt is let go at the end).
    const { order: b } = await newOrder('stranded');
    const held = hold('authorizePayment', b.orderId);
    const bRun = await start(b);
    await until('the authorization running', () => Promise.resolve(held.started()));
    await bRun.terminate('stall test: terminated in the authorization');

    const before = stats.unreadable;
    const report = await sweep([a.orderId, b.orderId]);
    expect(report.unreadable).toBe(1);
    expect(stats.unreadable).toBe(before + 1);
    const byOrder = Object.fromEntries(report.actions.map((x) => [x.orderId, x]));
    expect(byOrder[a.orderId]).toMatchObject({ action: 'person', cause: 'unreadable' });
    expect(byOrder[a.orderId]!.reason).toMatch(/could not decode its last run's start payload/);
    expect(byOrder[b.orderId]).toMatchObject({ action: 'restart', cause: 'closed' });
    process.stdout.write(`unreadable test, told a person: ${byOrder[a.orderId]!.reason}\n`);

    await env.client.workflow.getHandle(workflowIdFor(b.orderId), byOrder[b.orderId]!.newRunId).result();
    expect(await rowStatus(b.orderId)).toBe('COMPLETED');
    held.release(); // the closed run's late attempt meets the row lock
    expect(await orderViolations(db, env.client, [b.orderId])).toEqual([]);
    // Told once: the next sweep says nothing new about A.
    expect((await sweep([a.orderId])).actions).toEqual([]);
    await db.query({ text: 'DELETE FROM orders WHERE order_id = $1', values: [a.orderId] }); // the planted row
  });
});
