/**
 * The disaster drill: Temporal's whole state is lost, and every order continues from its row.
 *
 * On a dev server, orders in every state: completed; held before its charge (its reservation has not
 * answered); in its charge (the provider holds the request past the client's timeout); in its charge
 * with a cancel accepted (decided and recorded in Postgres, as client.ts does, then the Signal);
 * escalated after the pivot (NEEDS_ATTENTION, its confirmation failed for good); and past the pivot
 * (shipped, its confirmation in flight). Then the server stops and its state is gone (an in-memory dev
 * server: nothing survives). What docs/operating.md tells an operator to do follows: an empty server
 * with the namespace and the search attributes, and the worker. After that no person acts: only the
 * sweeper runs (as its Schedule would), and every order reaches a coherent end: the cancelled one
 * CANCELLED and never shipped, the others COMPLETED, each charged once, the checker silent.
 */
import { ApplicationFailure } from '@temporalio/common';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker } from '@temporalio/worker';
import { afterAll, expect, it } from 'vitest';
import { createActivities, type OrderActivities } from '../activities';
import type { SweepReport } from '../activities/sweeper';
import { workflowIdFor, type OrderInput } from '../domain/order';
import { orderStore } from '../lib/order-store';
import { cancelSignal, orderSaga, stateQuery, sweeperWorkflow } from '../workflows';
import {
  createProduct,
  ledger,
  makeOrder,
  moneyKept,
  orderViolations,
  productRow,
  testAdmin,
  testPool,
  testProvider,
  uid,
} from './support/helpers';
import { bundleWorkflows, dataConverter, startDevServer } from './support/temporal-env';

const db = testPool();
const admin = testAdmin();
const sleepMs = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
let cleanup: (() => Promise<void>)[] = [];

afterAll(async () => {
  for (const c of cleanup.reverse()) await c().catch(() => undefined);
  await admin.clear();
  await db.end();
});

async function rowOf(orderId: string): Promise<{ status: string; cancel_request_id: string | null } | undefined> {
  const { rows } = await db.query<{ status: string; cancel_request_id: string | null }>({
    text: 'SELECT status, cancel_request_id FROM orders WHERE order_id = $1',
    values: [orderId],
  });
  return rows[0];
}

/** Polls until `ok` (bounded: 60 s). */
async function until(what: string, ok: () => Promise<boolean>): Promise<void> {
  for (let i = 0; i < 600; i++) {
    if (await ok()) return;
    await sleepMs(100);
  }
  throw new Error(`not reached within 60 s: ${what}`);
}

/** A worker on `env` with the real activities, some of them held or failing for the given orders. */
async function sagaWorker(
  env: TestWorkflowEnvironment,
  taskQueue: string,
  wrap: (real: OrderActivities) => Partial<OrderActivities> = () => ({}),
): Promise<{ stop: () => Promise<void> }> {
  const real = createActivities({
    db,
    provider: testProvider(),
    temporal: { client: () => Promise.resolve(env.client), taskQueue },
  });
  const worker = await Worker.create({
    dataConverter: dataConverter(),
    connection: env.nativeConnection,
    taskQueue,
    workflowBundle: await bundleWorkflows(),
    activities: { ...real, ...wrap(real) },
    shutdownGraceTime: '2s',
  });
  const running = worker.run();
  return {
    stop: async () => {
      worker.shutdown();
      await running;
    },
  };
}

it('Temporal loses everything: after an empty server and the worker, only the sweeper acts, and every order ends coherent', async () => {
  const taskQueue = `drill-${uid()}`;
  const kinds = ['completed', 'before-charge', 'in-charge', 'cancel-accepted', 'escalated', 'past-pivot'] as const;
  type Kind = (typeof kinds)[number];
  const orders = new Map<Kind, { order: OrderInput; sku: string }>();
  for (const kind of kinds) {
    const p = await createProduct(db, { stock: 10, priceCents: 625 });
    orders.set(kind, {
      order: makeOrder([{ sku: p.sku, qty: 2, unitPriceCents: p.priceCents }], { orderId: `dr-${kind}-${uid()}` }),
      sku: p.sku,
    });
  }
  const id = (k: Kind): string => orders.get(k)!.order.orderId;

  // ---- Before: a server with orders in every state ----
  let releaseHeld: (err: Error) => void = () => undefined;
  const held = new Promise<never>((_, reject) => (releaseHeld = reject));
  held.catch(() => undefined);
  let serverA: TestWorkflowEnvironment | undefined = await startDevServer();
  const stopA = serverA;
  cleanup.push(() => stopA.teardown());
  const workerA = await sagaWorker(serverA, taskQueue, (real) => ({
    reserveInventory: (req) => (req.orderId === id('before-charge') ? held : real.reserveInventory(req)),
    sendConfirmation: async (req) => {
      if (req.orderId === id('past-pivot')) return held;
      if (req.orderId === id('escalated'))
        throw ApplicationFailure.nonRetryable('the mail relay refused it (drill)', 'InjectedPermanent');
      return real.sendConfirmation(req);
    },
  }));
  cleanup.push(() => workerA.stop());
  for (const k of ['in-charge', 'cancel-accepted'] as const)
    await admin.set({ kind: 'delay', target: 'charges', delayMs: 6_000, count: 1, keyPrefix: `${id(k)}:` });
  const start = (k: Kind) =>
    serverA!.client.workflow.start(orderSaga, {
      taskQueue,
      workflowId: workflowIdFor(id(k)),
      args: [orders.get(k)!.order, {}],
    });
  await (await start('completed')).result();
  for (const k of kinds.slice(1)) await start(k);
  const client = serverA.client;
  await until('the held orders reach their states', async () => {
    const s = await Promise.all(kinds.map(async (k) => (await rowOf(id(k)))?.status));
    const charging = async (k: Kind) =>
      ((await client.workflow.getHandle(workflowIdFor(id(k))).query(stateQuery)).attempts.charge ?? 0) >= 1;
    return (
      s[1] === 'PENDING' &&
      s[4] === 'NEEDS_ATTENTION' &&
      s[5] === 'SHIPPED' &&
      (await charging('in-charge')) &&
      (await charging('cancel-accepted'))
    );
  });
  // The customer cancels while the charge is held up: decided and recorded first, then the Signal.
  const store = orderStore(testPool());
  const decision = await store.decideCancel({
    orderId: id('cancel-accepted'),
    requestId: 'drill-cancel',
    reason: 'customer cancelled before the loss',
  });
  await store.close();
  expect(decision.outcome).toBe('accepted');
  await client.workflow
    .getHandle(workflowIdFor(id('cancel-accepted')))
    .signal(cancelSignal, { requestId: 'drill-cancel', reason: 'customer cancelled before the loss' });
  const before = new Map<Kind, string>();
  for (const k of kinds) before.set(k, (await rowOf(id(k)))!.status);
  console.log(`drill, before the loss: ${kinds.map((k) => `${k} ${before.get(k)}`).join(', ')}`);

  // ---- The loss: the worker goes, the server stops, its state with it ----
  releaseHeld(new Error('the worker went down with the server'));
  await workerA.stop();
  await serverA.teardown();
  serverA = undefined;
  cleanup = [];

  // ---- Recovery, as docs/operating.md says: an empty server (namespace, search attributes), the worker ----
  const serverB = await startDevServer();
  cleanup.push(() => serverB.teardown());
  const workerB = await sagaWorker(serverB, taskQueue);
  cleanup.push(() => workerB.stop());
  expect((await serverB.client.workflow.count()).count).toBe(0); // nothing of the old server survives

  // No person acts: only the sweeper, as its Schedule runs it, until every order has ended.
  const ids = kinds.map(id);
  const reports: SweepReport[] = [];
  for (let i = 0; i < 90; i++) {
    const open = (await Promise.all(ids.map(rowOf))).filter(
      (r) => !['COMPLETED', 'FAILED', 'CANCELLED'].includes(r!.status),
    );
    if (open.length === 0) break;
    reports.push(
      await serverB.client.workflow.execute(sweeperWorkflow, {
        taskQueue,
        workflowId: `drill-sweep-${uid()}`,
        args: [{ graceMs: 0, orderIds: ids }],
      }),
    );
    await sleepMs(1_000);
  }
  const after = new Map<Kind, string>();
  for (const k of kinds) after.set(k, (await rowOf(id(k)))!.status);
  const restarts = reports.flatMap((r) => r.actions).filter((a) => a.action === 'restart');
  console.log(
    `drill, after ${reports.length} sweep(s) and ${restarts.length} restart(s): ${kinds
      .map((k) => `${k} ${before.get(k)} → ${after.get(k)}`)
      .join(', ')}`,
  );

  expect(Object.fromEntries(after)).toEqual({
    completed: 'COMPLETED',
    'before-charge': 'COMPLETED',
    'in-charge': 'COMPLETED',
    'cancel-accepted': 'CANCELLED',
    escalated: 'COMPLETED',
    'past-pivot': 'COMPLETED',
  });
  // Every open order was restarted from its row, once; the completed one was left alone.
  expect(new Set(restarts.map((a) => a.orderId))).toEqual(new Set(ids.slice(1)));
  expect(reports.flatMap((r) => r.actions).filter((a) => a.action === 'person')).toEqual([]);
  // The accepted cancel held: never shipped, the charge that landed meanwhile refunded, stock back.
  const cancelled = id('cancel-accepted');
  expect((await db.query({ text: 'SELECT 1 FROM shipments WHERE order_id = $1', values: [cancelled] })).rowCount).toBe(
    0,
  );
  expect(await moneyKept(db, cancelled)).toBe(0);
  expect((await productRow(db, orders.get('cancel-accepted')!.sku)).stock).toBe(10);
  // The others: charged once, shipped once.
  for (const k of kinds.filter((k) => k !== 'cancel-accepted')) {
    expect((await ledger(db, id(k))).charges, k).toEqual([{ status: 'succeeded', amount: 1250 }]);
    expect((await productRow(db, orders.get(k)!.sku)).stock, k).toBe(8);
  }
  expect(await orderViolations(db, serverB.client, ids)).toEqual([]);
}, 300_000);
