/**
 * Resets, as the Web UI's Reset button does them, on the real Temporal dev server with the real
 * activities, Postgres and provider. Four finished orders (completed, declined, cancelled after its
 * charge, compensated after the shipment was rejected) are each reset to every workflow-task-completed
 * event of their first run, in turn. After every reset run ends, the invariant checker (with Temporal's
 * visibility) finds no violation for these orders, and no order is shipped without a succeeded,
 * unrefunded charge. The orders are of the charge era (rows as the older build wrote them), run by this
 * build's charge path; the soak resets open and closed runs of the authorization era.
 */
import { orderOutcome } from '../orders/order-outcome';
import { randomUUID } from 'node:crypto';
import { ApplicationFailure } from '@temporalio/common';
import { temporal } from '@temporalio/proto';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { Pool } from 'pg';
import { describe, expect, it } from 'vitest';
import { createActivities, type OrderActivities } from '../activities';
import { ErrorTypes } from '../domain/failures';
import { workflowIdFor, type OrderInput, type OrderResult } from '../domain/order';
import { checkInvariants, temporalLookup } from '../db/invariants';
import { request } from '../orders/saga-requests';
import { orderSaga, stateQuery } from '../workflows';
import { failWhileIn, withFaults } from './support/activity-faults';
import { useSagaTestEnv } from './support/saga-test-env';
import {
  asChargeEra,
  createProduct,
  ledger,
  makeOrder,
  moneyKept,
  testAdmin,
  testProvider,
  uid,
} from './support/helpers';

const DAY = 86_400_000;
let env: TestWorkflowEnvironment;
let db: Pool;
const taskQueue = `reset-${uid()}`;
/** Orders whose charge waits until the test lets it go (once), so a cancel can arrive after it. */
const chargeGates = new Map<string, { reached: () => void; go: Promise<void> }>();
/** Orders whose shipment the carrier rejects. */
const rejectShipment = new Set<string>();
/** Orders whose confirmation fails (permanently) while they are in this set. */
const failConfirmation = new Set<string>();

useSagaTestEnv(
  {
    server: 'dev',
    taskQueue,
    activities: ({ db }): OrderActivities =>
      withFaults(asChargeEra(db, createActivities({ db, provider: testProvider() })), {
        chargePayment: {
          after: async (req) => {
            const gate = chargeGates.get(req.orderId);
            if (!gate) return;
            chargeGates.delete(req.orderId);
            gate.reached();
            await gate.go;
          },
        },
        createShipment: failWhileIn(rejectShipment, () =>
          ApplicationFailure.nonRetryable('no carrier serves this address', ErrorTypes.ShipmentRejected),
        ),
        sendConfirmation: failWhileIn(failConfirmation, () =>
          ApplicationFailure.nonRetryable('mail server down', 'InjectedPermanent'),
        ),
      }),
  },
  { started: (saga) => ({ env, db } = saga) },
);

const WFT_COMPLETED = temporal.api.enums.v1.EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED;

async function newOrder(kind: string, overrides: Partial<OrderInput> = {}): Promise<OrderInput> {
  const p = await createProduct(db, { stock: 10, priceCents: 1500 });
  return makeOrder([{ sku: p.sku, qty: 2, unitPriceCents: p.priceCents }], {
    orderId: `rs-${kind}-${uid()}`,
    ...overrides,
  });
}

/** Runs the first run of an order's saga to its end; `during` may act on it meanwhile. */
async function firstRun(
  order: OrderInput,
  during?: (handle: Awaited<ReturnType<typeof env.client.workflow.start>>) => Promise<void>,
): Promise<{ runId: string; result: OrderResult }> {
  const handle = await env.client.workflow.start(orderSaga, {
    taskQueue,
    workflowId: workflowIdFor(order.orderId),
    args: [order],
  });
  await during?.(handle);
  return { runId: handle.firstExecutionRunId, result: await orderOutcome(handle) };
}

/** Resets a run to the end of one of its workflow tasks, as the Web UI's Reset does; returns the new run. */
async function resetTo(workflowId: string, runId: string, eventId: number) {
  const { runId: newRunId } = (await env.client.workflowService.resetWorkflowExecution({
    namespace: 'default',
    workflowExecution: { workflowId, runId },
    workflowTaskFinishEventId: eventId as never, // an int64: protobufjs takes a number
    requestId: randomUUID(),
    reason: `reset test: ${workflowId} to event ${eventId}`,
  })) as temporal.api.workflowservice.v1.IResetWorkflowExecutionResponse;
  return env.client.workflow.getHandle<typeof orderSaga>(workflowId, newRunId ?? undefined, { followRuns: false });
}

/** Violations the checker finds for these orders, and shipments without a succeeded, unrefunded charge. */
async function problems(orderIds: string[]): Promise<string[]> {
  const report = await checkInvariants(db, { deadlineMs: DAY, workflows: temporalLookup(env.client) });
  const found = report.violations
    .filter((v) => v.orderIds.some((o) => orderIds.includes(o)))
    .map((v) => `${v.rule}: ${v.detail} [${v.orderIds.join(', ')}]`);
  const unpaid = await db.query<{ order_id: string }>({
    text: `SELECT s.order_id FROM shipments s
           LEFT JOIN provider.charges c ON c.idempotency_key = s.order_id || ':charge' AND c.status = 'succeeded'
           WHERE s.order_id = ANY($1::text[])
             AND (c.idempotency_key IS NULL OR EXISTS (SELECT 1 FROM provider.refunds r WHERE r.charge_key = c.idempotency_key))`,
    values: [orderIds],
  });
  return [...found, ...unpaid.rows.map((r) => `shipped without a succeeded, unrefunded charge [${r.order_id}]`)];
}

describe('Reset (as the Web UI does it) of finished orders to every workflow task', () => {
  it('after every reset run, no violation and nothing shipped unpaid', async () => {
    const completed = await newOrder('completed');
    const declined = await newOrder('declined', { paymentMethod: 'tok_declined' });
    const cancelled = await newOrder('cancelled');
    const rejected = await newOrder('rejected');
    rejectShipment.add(rejected.orderId);

    let reached!: () => void;
    const atCharge = new Promise<void>((r) => (reached = r));
    let go!: () => void;
    chargeGates.set(cancelled.orderId, { reached, go: new Promise<void>((r) => (go = r)) });

    const runs = [
      { order: completed, ...(await firstRun(completed)) },
      { order: declined, ...(await firstRun(declined)) },
      {
        order: cancelled,
        ...(await firstRun(cancelled, async (handle) => {
          await atCharge; // charged, not yet returned: the cancel arrives after the charge, before the pivot
          const pending = request(handle, { command: 'cancel', reason: 'customer changed their mind' });
          setTimeout(go, 300);
          await pending;
        })),
      },
      { order: rejected, ...(await firstRun(rejected)) },
    ];
    expect(runs.map((r) => r.result.status)).toEqual(['COMPLETED', 'FAILED', 'CANCELLED', 'FAILED']);
    const ids = runs.map((r) => r.order.orderId);
    expect(await problems(ids)).toEqual([]);

    let resets = 0;
    const outcomes: Record<string, number> = {};
    for (const run of runs) {
      const workflowId = workflowIdFor(run.order.orderId);
      const history = await env.client.workflow.getHandle(workflowId, run.runId).fetchHistory();
      const points = (history.events ?? []).filter((e) => e.eventType === WFT_COMPLETED).map((e) => Number(e.eventId));
      // At least the three workflow tasks of a completed saga: the start (with createOrder, local), after
      // the reservation, after the charge (with the shipment and the confirmation, local).
      expect(points.length).toBeGreaterThanOrEqual(3);
      for (const eventId of points) {
        const handle = await resetTo(workflowId, run.runId, eventId);
        resets++;
        const end = await Promise.race([
          orderOutcome(handle).then(
            (r: OrderResult) => r.status,
            (e: Error) => {
              const chain: string[] = [];
              for (let x: unknown = e; x instanceof Error; x = (x as { cause?: unknown }).cause) chain.push(x.message);
              return `failed: ${chain.join(' ← ')}`;
            },
          ),
          new Promise<string>((r) => setTimeout(() => r('still running after 60 s'), 60_000)),
        ]);
        outcomes[end] = (outcomes[end] ?? 0) + 1;
        expect(end, `${run.order.orderId} reset to event ${eventId}`).not.toMatch(/still running|failed/);
        expect(await problems(ids), `${run.order.orderId} reset to event ${eventId}`).toEqual([]);
      }
    }
    // The closing note quotes these.
    process.stdout.write(`reset test: ${resets} resets, outcomes ${JSON.stringify(outcomes)}\n`);
    expect(resets).toBeGreaterThanOrEqual(20);
  });
  it('an open order waiting in NEEDS_ATTENTION after its shipment, reset to every workflow task: it completes, never compensates', async () => {
    const order = await newOrder('open');
    failConfirmation.add(order.orderId);
    const workflowId = workflowIdFor(order.orderId);
    const first = await env.client.workflow.start(orderSaga, { taskQueue, workflowId, args: [order] });
    const escalated = async (h: { query: typeof first.query }): Promise<boolean> => {
      const st = await h.query(stateQuery);
      return st.awaiting === 'forward-step' && st.status === 'NEEDS_ATTENTION';
    };
    for (let i = 0; i < 200 && !(await escalated(first)); i++) await new Promise((r) => setTimeout(r, 50));
    expect(await escalated(first)).toBe(true);
    failConfirmation.delete(order.orderId); // the mail server is back
    const history = await first.fetchHistory();
    const points = (history.events ?? []).filter((e) => e.eventType === WFT_COMPLETED).map((e) => Number(e.eventId));
    let resets = 0;
    for (const eventId of points) {
      const handle = await resetTo(workflowId, first.firstExecutionRunId, eventId);
      resets++;
      // A run reset to after the escalation waits for a person again: the operator retries.
      const finished = await Promise.race([
        handle.result().then(() => true),
        new Promise<false>((r) => setTimeout(() => r(false), 3_000)),
      ]);
      if (!finished) {
        expect((await handle.query(stateQuery)).awaiting, `reset to event ${eventId}`).toBe('forward-step');
        await request(handle, { command: 'resolve', action: 'retry' });
      }
      const result = await orderOutcome(handle);
      expect(['COMPLETED', 'ALREADY_SETTLED'], `reset to event ${eventId}`).toContain(result.status);
      const refunds = await db.query({
        text: 'SELECT 1 FROM provider.refunds WHERE charge_key = $1',
        values: [`${order.orderId}:charge`],
      });
      expect(refunds.rowCount, `reset to event ${eventId}`).toBe(0);
      expect(await problems([order.orderId]), `reset to event ${eventId}`).toEqual([]);
    }
    process.stdout.write(`reset test (open order): ${resets} resets\n`);
    // Every completed task was a reset point. At least four: the start, after the reservation, after
    // the charge (before the pivot) and after the escalation's write (past it). The local steps
    // (create, ship, confirm) may share a task with their neighbours or not, as timing falls.
    expect(resets).toBe(points.length);
    expect(resets).toBeGreaterThanOrEqual(4);
  });
  it('an order escalated before the pivot (its charge unknown), reset to every workflow task: each run ends coherent', async () => {
    const order = await newOrder('unknown');
    const admin = testAdmin();
    const prefix = `${order.orderId}:`;
    await admin.set({ kind: 'fail-before-commit', target: 'charges', count: 100_000, keyPrefix: prefix });
    await admin.set({ kind: 'processing', target: 'inquiries', count: 100_000, keyPrefix: prefix });
    const workflowId = workflowIdFor(order.orderId);
    const config = { unknownEscalationMs: 1_500, inquiryBaseMs: 200, inquiryMaxMs: 400 };
    const first = await env.client.workflow.start(orderSaga, { taskQueue, workflowId, args: [order, config] });
    const awaiting = async (h: { query: typeof first.query }): Promise<string | undefined> =>
      (await h.query(stateQuery)).awaiting;
    for (let i = 0; i < 300 && (await awaiting(first)) !== 'charge-outcome'; i++)
      await new Promise((r) => setTimeout(r, 50));
    expect(await awaiting(first)).toBe('charge-outcome');
    await admin.clear(); // the provider is well again: it never saw the charge
    const history = await first.fetchHistory();
    const points = (history.events ?? []).filter((e) => e.eventType === WFT_COMPLETED).map((e) => Number(e.eventId));
    const outcomes: Record<string, number> = {};
    for (const eventId of points) {
      const handle = await resetTo(workflowId, first.firstExecutionRunId, eventId);
      // A run reset to after the escalation waits for a person again: the provider never saw the charge.
      const finished = await Promise.race([
        orderOutcome(handle).then(
          () => true,
          () => true,
        ),
        new Promise<false>((r) => setTimeout(() => r(false), 4_000)),
      ]);
      if (!finished && (await awaiting(handle)) === 'charge-outcome') {
        // The operator checks the provider first (an earlier reset run may have charged it).
        const paid = (await ledger(db, order.orderId)).charges.some((c) => c.status === 'succeeded');
        const action = paid ? 'charge-succeeded' : 'charge-failed';
        await request(handle, { command: 'resolve', action, note: 'checked the provider' });
      }
      const end = await orderOutcome(handle).then(
        (r) => r.status,
        (e: Error) => `failed: ${e.message}`,
      );
      outcomes[end] = (outcomes[end] ?? 0) + 1;
      expect(['COMPLETED', 'FAILED', 'ALREADY_SETTLED'], `reset to event ${eventId}`).toContain(end);
      expect(await problems([order.orderId]), `reset to event ${eventId}`).toEqual([]);
      // Money: charged only if shipped, and then exactly once and never refunded.
      const shipped = (await db.query({ text: 'SELECT 1 FROM shipments WHERE order_id = $1', values: [order.orderId] }))
        .rowCount;
      const kept = await moneyKept(db, order.orderId);
      expect(kept, `reset to event ${eventId}`).toBe(shipped ? 3000 : 0);
    }
    process.stdout.write(
      `reset test (unknown charge): ${points.length} resets, outcomes ${JSON.stringify(outcomes)}\n`,
    );
    expect(points.length).toBeGreaterThanOrEqual(5);
  });
});
