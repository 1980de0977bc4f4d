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
 *
 * Then the promises a person makes to an order waiting in NEEDS_ATTENTION: a cancel and every resolve
 * action, recorded in Postgres as client.ts records them while no worker runs, and the run replaced
 * before it could apply them (its history deleted; terminated and restarted by the sweeper, standing
 * in for the sweeper's replace after a deploy; Reset to its first or its second workflow task, which
 * reapplies the Signal). The next run reads each from the order row and applies it once.
 *
 * The orders are of the charge era (their rows as the build before the authorization era wrote them):
 * after a deploy across that change, this build is the one that heals them, by the charge path.
 */
import { randomUUID } from 'node:crypto';
import { WorkflowNotFoundError } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { temporal } from '@temporalio/proto';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker } from '@temporalio/worker';
import { afterAll, expect, it } from 'vitest';
import { createActivities, type OrderActivities } from '../activities';
import type { SweepReport } from '../activities/sweeper';
import { ErrorTypes } from '../domain/failures';
import { workflowIdFor, type OrderInput } from '../domain/order';
import { orderStore } from '../orders/order-store';
import { sendRequest } from '../orders/saga-requests';
import { answerQuery, cancelSignal, orderSaga, resolveSignal, stateQuery, sweeperWorkflow } from '../workflows';
import type { ResolveAction } from '../workflows/messages';
import {
  chargeEraCreate,
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
  // The orders are of the charge era (rows an older build wrote): what this build heals from their rows.
  real.createOrder = chargeEraCreate(db, real.createOrder);
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

it('a pending resolve reaches the next run: each request kind, after its history is deleted, after the sweeper replaces its run, and after a Reset', async () => {
  const taskQueue = `pending-${uid()}`;
  /** Each request a person can give an order waiting in NEEDS_ATTENTION, and how that order got there. */
  const kinds = [
    'cancel', // an unknown charge the provider never saw; the customer cancels
    'charge-succeeded', // the charge landed, its answer was lost, the inquiries failed
    'charge-failed', // the charge never reached the provider, the inquiries failed
    'charge-failed-refused', // the charge landed, its answer was lost; the person says charge-failed
    'compensation-retry', // the shipment was rejected, then the refund failed for good; fixed
    'compensation-mark-resolved', // the same; the operator refunded at the provider by hand
    'settled-elsewhere', // the same; the money went back by bank transfer
    'forward-retry', // the confirmation failed for good; fixed
    'forward-mark-resolved', // the same; sent by hand
  ] as const;
  // Reset to the first workflow task: the run takes the order over (createOrder); to the second: its
  // next write is refused, naming the row's escalation and the resolve.
  const modes = ['deleted', 'replaced', 'reset', 'reset-later'] as const;
  type Kind = (typeof kinds)[number];
  type Mode = (typeof modes)[number];
  const cases: { kind: Kind; mode: Mode; order: OrderInput; sku: string; requestId: string }[] = [];
  for (const kind of kinds)
    for (const mode of modes) {
      const p = await createProduct(db, { stock: 10, priceCents: 625 });
      const order = makeOrder([{ sku: p.sku, qty: 2, unitPriceCents: p.priceCents }], {
        orderId: `pr-${kind}-${mode}-${uid()}`,
      });
      cases.push({ kind, mode, order, sku: p.sku, requestId: `req-${kind}-${mode}` });
    }
  const kindOf = new Map(cases.map((c) => [c.order.orderId, c.kind]));
  const is = (orderId: string, ...ks: Kind[]): boolean => ks.includes(kindOf.get(orderId)!);
  // What is broken, per order; the operator fixes some of it before the next run.
  const inquiryDown = new Set(
    cases
      .filter((c) => is(c.order.orderId, 'cancel', 'charge-succeeded', 'charge-failed', 'charge-failed-refused'))
      .map((c) => c.order.orderId),
  );
  const refundBroken = new Set(
    cases
      .filter((c) => c.kind.startsWith('compensation') || c.kind === 'settled-elsewhere')
      .map((c) => c.order.orderId),
  );
  const confirmationBroken = new Set(cases.filter((c) => c.kind.startsWith('forward')).map((c) => c.order.orderId));
  const wrap = (real: OrderActivities): Partial<OrderActivities> => ({
    chargePayment: async (req) => {
      if (!inquiryDown.has(req.orderId)) return real.chargePayment(req);
      // The provider takes the money (the row does not learn it), and the answer is lost.
      if (is(req.orderId, 'charge-succeeded', 'charge-failed-refused'))
        await testProvider().charge(req.idempotencyKey, {
          amountCents: req.amountCents,
          currency: req.currency,
          paymentMethod: req.paymentMethod,
          reference: req.orderId,
        });
      throw new Error('the charge request timed out (test)');
    },
    inquireCharge: (req) =>
      inquiryDown.has(req.orderId)
        ? Promise.reject(ApplicationFailure.nonRetryable('the provider is unreachable (test)', 'InjectedPermanent'))
        : real.inquireCharge(req),
    createShipment: (req) =>
      refundBroken.has(req.orderId)
        ? Promise.reject(ApplicationFailure.nonRetryable('the carrier rejected it (test)', ErrorTypes.ShipmentRejected))
        : real.createShipment(req),
    refundPayment: (req) =>
      refundBroken.has(req.orderId)
        ? Promise.reject(ApplicationFailure.nonRetryable('the provider refused the refund (test)', 'InjectedPermanent'))
        : real.refundPayment(req),
    sendConfirmation: (req) =>
      confirmationBroken.has(req.orderId)
        ? Promise.reject(ApplicationFailure.nonRetryable('the mail relay refused it (test)', 'InjectedPermanent'))
        : real.sendConfirmation(req),
  });
  const actionOf = (kind: Kind): ResolveAction =>
    kind === 'charge-failed-refused'
      ? 'charge-failed'
      : (kind.replace(/^(compensation|forward)-/, '') as ResolveAction);
  const server = await startDevServer();
  cleanup.push(() => server.teardown());
  const { client } = server;
  const first = await sagaWorker(server, taskQueue, wrap);
  cleanup.push(() => first.stop());
  const config = { unknownEscalationMs: 1_000, inquiryBaseMs: 250, inquiryMaxMs: 1_000 };
  for (const c of cases)
    await client.workflow.start(orderSaga, {
      taskQueue,
      workflowId: workflowIdFor(c.order.orderId),
      args: [c.order, config],
    });
  await until('every order waits for a person', async () => {
    const rows = await Promise.all(cases.map((c) => rowOf(c.order.orderId)));
    return rows.every((r) => r?.status === 'NEEDS_ATTENTION');
  });
  // No run applies anything from here on: the worker stops.
  await first.stop();

  // The person answers, as client.ts does (recorded in Postgres first, then the Signal); then the run is
  // replaced before it could apply it.
  const store = orderStore(testPool());
  for (const c of cases) {
    const { orderId } = c.order;
    if (c.kind === 'compensation-mark-resolved')
      await testProvider().refund(`${orderId}:by-hand`, { chargeKey: `${orderId}:charge`, amountCents: 1250 });
    if (c.kind === 'cancel') {
      expect(await store.decideCancel({ orderId, requestId: c.requestId, reason: 'customer cancelled' })).toMatchObject(
        {
          outcome: 'accepted',
        },
      );
    } else {
      const action = actionOf(c.kind);
      const reference = action === 'settled-elsewhere' ? 'bank-transfer-0815' : undefined;
      expect(
        await store.recordResolve({ orderId, requestId: c.requestId, action, ...(reference ? { reference } : {}) }),
      ).toEqual({ recorded: true });
    }
    const handle = client.workflow.getHandle(workflowIdFor(orderId));
    if (c.kind === 'cancel')
      await handle.signal(cancelSignal, { requestId: c.requestId, reason: 'customer cancelled' });
    else {
      const action = actionOf(c.kind);
      await handle.signal(resolveSignal, {
        requestId: c.requestId,
        action,
        ...(action === 'settled-elsewhere' ? { reference: 'bank-transfer-0815' } : {}),
      });
    }
    if (c.mode === 'deleted') {
      await client.workflowService.deleteWorkflowExecution({
        namespace: 'default',
        workflowExecution: { workflowId: workflowIdFor(orderId) },
      });
    } else if (c.mode === 'replaced') {
      await handle.terminate('replaced: its build was drained (test)');
    } else {
      // Reset to the end of its first (or second) workflow task, as the Web UI does; the server
      // reapplies the Signal.
      const history = await handle.fetchHistory();
      const firstTask = (history.events ?? []).filter(
        (e) => e.eventType === temporal.api.enums.v1.EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
      )[c.mode === 'reset' ? 0 : 1]!;
      await client.workflowService.resetWorkflowExecution({
        namespace: 'default',
        workflowExecution: { workflowId: workflowIdFor(orderId) },
        workflowTaskFinishEventId: Number(firstTask.eventId) as never,
        requestId: randomUUID(),
        reason: `test: ${c.mode}`,
      });
    }
  }
  await store.close();
  for (const c of cases.filter((c) => c.mode === 'deleted'))
    await until(`the history of ${c.order.orderId} is gone`, async () =>
      client.workflow
        .getHandle(workflowIdFor(c.order.orderId))
        .describe()
        .then(
          () => false,
          (e: unknown) => e instanceof WorkflowNotFoundError,
        ),
    );
  // Fixed meanwhile: the provider answers again, and the refund and confirmation of the "retry" orders
  // work; those the person settled otherwise stay broken (the next run must not call them) or, for the
  // money settled elsewhere, would refund a second time if called.
  inquiryDown.clear();
  for (const c of cases) {
    if (c.kind === 'compensation-retry' || c.kind === 'settled-elsewhere') refundBroken.delete(c.order.orderId);
    if (c.kind === 'forward-retry') confirmationBroken.delete(c.order.orderId);
  }
  const second = await sagaWorker(server, taskQueue, wrap);
  cleanup.push(() => second.stop());

  // Only the sweeper acts now (the reset runs go on by themselves).
  const ids = cases.map((c) => c.order.orderId);
  const terminal = ['COMPLETED', 'FAILED', 'CANCELLED'];
  const answeredAgain = new Set<string>();
  for (let i = 0; i < 90; i++) {
    const open = (await Promise.all(ids.map(rowOf))).filter((r) => !terminal.includes(r!.status));
    if (open.length === 0) break;
    // The next run refused the charge-failed it found (the provider has the money) and waits for a
    // person again: the person answers charge-succeeded, to that run.
    for (const c of cases.filter((c) => c.kind === 'charge-failed-refused' && !answeredAgain.has(c.order.orderId))) {
      const handle = client.workflow.getHandle(workflowIdFor(c.order.orderId));
      // The next run, not the closed one before it (a closed run answers queries too).
      const running = await handle.describe().then(
        (d) => d.status.name === 'RUNNING',
        () => false,
      );
      const waiting =
        running &&
        (await handle
          .query(stateQuery)
          .then((s) => s.awaiting === 'charge-outcome')
          .catch(() => false));
      if (!waiting) continue;
      expect(await handle.query(answerQuery, c.requestId)).toMatchObject({ outcome: 'refused' });
      const { answer } = await sendRequest(
        handle,
        { command: 'resolve', action: 'charge-succeeded' },
        { waitMs: 20_000, requestId: `${c.requestId}-again` },
      );
      expect(answer?.outcome, `${c.kind} ${c.mode}: the second answer`).toBe('accepted');
      answeredAgain.add(c.order.orderId);
    }
    await client.workflow.execute(sweeperWorkflow, {
      taskQueue,
      workflowId: `pending-sweep-${uid()}`,
      args: [{ graceMs: 0, orderIds: ids }],
    });
    await sleepMs(1_000);
  }
  const want: Record<Kind, string> = {
    cancel: 'CANCELLED',
    'charge-succeeded': 'COMPLETED',
    'charge-failed': 'FAILED',
    'charge-failed-refused': 'COMPLETED',
    'compensation-retry': 'FAILED',
    'compensation-mark-resolved': 'FAILED',
    'settled-elsewhere': 'FAILED',
    'forward-retry': 'COMPLETED',
    'forward-mark-resolved': 'COMPLETED',
  };
  const seen: string[] = [];
  for (const c of cases) {
    const { orderId } = c.order;
    const label = `${c.kind} ${c.mode}`;
    const status = (await rowOf(orderId))!.status;
    const l = await ledger(db, orderId);
    const request = await db.query<{ outcome: string }>({
      text: 'SELECT outcome FROM order_requests WHERE order_id = $1 AND request_id = $2',
      values: [orderId, c.requestId],
    });
    const answer = await client.workflow.getHandle(workflowIdFor(orderId)).query(answerQuery, c.requestId);
    seen.push(`${label}: ${status}, request ${request.rows[0]?.outcome}, answer ${answer?.outcome}`);
    expect(status, label).toBe(want[c.kind]);
    // Refused by the ledger: the provider has the money; the person's second answer completed it.
    const first = c.kind === 'charge-failed-refused' ? 'refused' : 'accepted';
    expect(request.rows[0]?.outcome, label).toBe(first);
    expect(answer?.outcome, label).toBe(first);
    const succeeded = l.charges.filter((x) => x.status === 'succeeded');
    const stock = (await productRow(db, c.sku)).stock;
    if (c.kind === 'cancel' || c.kind === 'charge-failed') {
      expect(succeeded, `${label}: no money taken`).toEqual([]);
      expect(stock, label).toBe(10);
    } else if (want[c.kind] === 'COMPLETED') {
      expect(succeeded, `${label}: charged once`).toEqual([{ status: 'succeeded', amount: 1250 }]);
      expect(l.refunds, label).toEqual([]);
      expect(stock, label).toBe(8);
    } else {
      expect(succeeded, label).toEqual([{ status: 'succeeded', amount: 1250 }]);
      // Settled elsewhere: the provider keeps the charge (the customer was paid back outside); else one refund.
      expect(l.refunds, label).toEqual(c.kind === 'settled-elsewhere' ? [] : [{ amount: 1250 }]);
      expect(stock, label).toBe(10);
    }
  }
  console.log(`a pending resolve reaches the next run:\n  ${seen.join('\n  ')}`);
  const marked = cases.filter((c) => c.kind === 'forward-mark-resolved').map((c) => c.order.orderId);
  const completed = await db.query<{ order_id: string; n: number }>({
    text: `SELECT order_id, count(*)::int AS n FROM order_events WHERE kind = 'order.completed' AND order_id = ANY ($1::text[])
            GROUP BY order_id ORDER BY order_id`,
    values: [marked],
  });
  expect(completed.rows, 'an order a person marked resolved completes once, with one event').toEqual(
    [...marked].sort().map((order_id) => ({ order_id, n: 1 })),
  );
  expect(await orderViolations(db, client, ids)).toEqual([]);
}, 300_000);
