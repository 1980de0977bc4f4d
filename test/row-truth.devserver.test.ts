/**
 * The order row is the saga's only truth, on the real Temporal dev server with the real activities,
 * Postgres and provider:
 * - a slow provider database (a lock before the authorization's first write): the request times out, the
 *   inquiry says not_found, the customer cancels; the late request can never keep the money;
 * - a shipped order reset to its first workflow task, then cancelled: the cancel is refused (the row is
 *   past the pivot, whatever the reset run believed) and the order completes;
 * - terminate after each workflow task, then start the same order again: it always ends coherent.
 */
import { randomUUID } from 'node:crypto';
import { ApplicationFailure } from '@temporalio/common';
import { temporal } from '@temporalio/proto';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { Pool } from 'pg';
import { describe, expect, it } from 'vitest';
import { createActivities, type OrderActivities } from '../activities';
import { workflowIdFor, type OrderInput, type OrderResult } from '../domain/order';
import { orderOutcome } from '../orders/order-outcome';
import { request } from '../orders/saga-requests';
import { orderSaga, stateQuery } from '../workflows';
import {
  createProduct,
  holds,
  ledger,
  makeOrder,
  moneyKept,
  orderViolations,
  productRow,
  testProvider,
  uid,
} from './support/helpers';
import { failWhileIn, withFaults } from './support/activity-faults';
import { useSagaTestEnv } from './support/saga-test-env';

/** The provider timeout of this file's worker: short, so a blocked request times out quickly. */
const PROVIDER_TIMEOUT_MS = 2_000;
let env: TestWorkflowEnvironment;
let db: Pool;
const taskQueue = `row-${uid()}`;
/** Orders whose confirmation fails (permanently) while they are in this set. */
const failConfirmation = new Set<string>();

useSagaTestEnv(
  {
    server: 'dev',
    taskQueue,
    activities: ({ db }): OrderActivities =>
      withFaults(createActivities({ db, provider: testProvider(PROVIDER_TIMEOUT_MS) }), {
        sendConfirmation: failWhileIn(failConfirmation, () =>
          ApplicationFailure.nonRetryable('mail server down', 'InjectedPermanent'),
        ),
      }),
  },
  { started: (saga) => ({ env, db } = saga) },
);

const WFT_COMPLETED = temporal.api.enums.v1.EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED;
const sleepMs = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function newOrder(kind: string): Promise<{ order: OrderInput; sku: string; total: number }> {
  const p = await createProduct(db, { stock: 10, priceCents: 625 });
  const order = makeOrder([{ sku: p.sku, qty: 2, unitPriceCents: p.priceCents }], { orderId: `rt-${kind}-${uid()}` });
  return { order, sku: p.sku, total: 2 * p.priceCents };
}

const start = (order: OrderInput) =>
  env.client.workflow.start(orderSaga, { taskQueue, workflowId: workflowIdFor(order.orderId), args: [order] });

/** The end of a run as a word: its status, or `failed: <causes>`, or `still running` after `ms`. */
async function ending(handle: { workflowId: string; result: () => Promise<unknown> }, ms = 60_000): Promise<string> {
  return Promise.race([
    orderOutcome(handle).then(
      (r: OrderResult) => r.status,
      (e: Error) => {
        const chain: string[] = [];
        for (let x: unknown = e; x instanceof Error; x = (x as { cause?: unknown }).cause) chain.push(x.message);
        return `failed: ${chain.join(' ← ')}`;
      },
    ),
    sleepMs(ms).then(() => `still running after ${ms} ms`),
  ]);
}

const violations = (orderIds: string[]): Promise<string[]> => orderViolations(db, env.client, orderIds);

describe('a slow provider database: a not_found after a timed-out request is not an answer', () => {
  it('the authorization blocks before its first write, the inquiry says not_found, the customer cancels: no money is kept', async () => {
    const { order, sku } = await newOrder('slow');
    const stockBefore = (await productRow(db, sku)).stock;
    // Writes to the provider's authorizations wait; reads do not (the inquiry answers not_found).
    const lock = await db.connect();
    let locked = true;
    try {
      await lock.query('BEGIN');
      await lock.query('LOCK TABLE provider.authorizations IN SHARE MODE');
      const handle = await start(order);
      // The first request timed out and the inquiry found nothing: the saga is between requests.
      for (let i = 0; i < 600; i++) {
        const st = await handle.query(stateQuery);
        if ((st.attempts.inquiry ?? 0) >= 1) break;
        await sleepMs(100);
      }
      expect((await handle.query(stateQuery)).attempts.inquiry ?? 0).toBeGreaterThanOrEqual(1);
      const cancel = request(handle, { command: 'cancel', reason: 'customer gave up waiting' });
      // The compensation's technical cancel waits behind the blocked request for a while.
      await sleepMs(3 * PROVIDER_TIMEOUT_MS);
      await lock.query('COMMIT');
      locked = false;
      await cancel;
      expect(await ending(handle)).toBe('CANCELLED');
    } finally {
      if (locked) await lock.query('ROLLBACK');
      lock.release();
    }
    // Any request still on its way has landed (or been refused) by now.
    await sleepMs(2 * PROVIDER_TIMEOUT_MS);
    const h = await holds(db, order.orderId);
    process.stdout.write(`slow provider: holds ${JSON.stringify(h)}\n`);
    expect(h.captures).toEqual([]);
    expect(await ledger(db, order.orderId)).toEqual({ charges: [], refunds: [] });
    // Either the late hold landed and was voided, or the key was closed and no hold exists.
    expect(h.authorizations.length === 0 ? h.keyClosed : h.voids.length === 1).toBe(true);
    expect((await productRow(db, sku)).stock).toBe(stockBefore);
    expect(await violations([order.orderId])).toEqual([]);
  });
});

describe('a cancel is refused once the row is past the pivot, whatever the run believes', () => {
  it('a shipped order reset to its first workflow task, then cancelled: refused, and the order completes', async () => {
    const { order, total } = await newOrder('reset-cancel');
    failConfirmation.add(order.orderId);
    const first = await start(order);
    for (let i = 0; i < 200; i++) {
      // awaiting is set first, then the NEEDS_ATTENTION write's answer comes: wait for both.
      const st = await first.query(stateQuery);
      if (st.awaiting === 'forward-step' && st.status === 'NEEDS_ATTENTION') break;
      await sleepMs(50);
    }
    expect((await first.query(stateQuery)).status).toBe('NEEDS_ATTENTION');
    failConfirmation.delete(order.orderId);
    const history = await first.fetchHistory();
    const firstTask = (history.events ?? []).find((e) => e.eventType === WFT_COMPLETED)!;
    const { runId } = (await env.client.workflowService.resetWorkflowExecution({
      namespace: 'default',
      workflowExecution: { workflowId: first.workflowId, runId: first.firstExecutionRunId },
      workflowTaskFinishEventId: Number(firstTask.eventId) as never,
      requestId: randomUUID(),
      reason: 'row-truth test: reset a shipped order to its first task',
    })) as temporal.api.workflowservice.v1.IResetWorkflowExecutionResponse;
    const reset = env.client.workflow.getHandle<typeof orderSaga>(first.workflowId, runId ?? undefined, {
      followRuns: false,
    });
    const refusal = await request(reset, { command: 'cancel', reason: 'too late' }).then(
      () => 'accepted',
      (e: Error) => e.message,
    );
    expect(refusal).toMatch(/pivot|forward/);
    // The reset run may wait again for the confirmation's escalation: the operator retries.
    const end = await ending(reset, 5_000);
    if (end.startsWith('still running')) {
      await request(reset, { command: 'resolve', action: 'retry' });
    }
    expect(await ending(reset)).toBe('COMPLETED');
    expect((await holds(db, order.orderId)).captures).toEqual([{ status: 'succeeded', amount: total }]);
    expect(await violations([order.orderId])).toEqual([]);
  });
});

describe('Terminate (as the Web UI does it) after each workflow task, then the same order again', () => {
  it('every order ends coherent: settled once, no money kept without a shipment, no stock held', async () => {
    // How many workflow tasks a whole order takes here.
    const probe = await newOrder('probe');
    const probeHandle = await start(probe.order);
    expect(await ending(probeHandle)).toBe('COMPLETED');
    const tasks = ((await probeHandle.fetchHistory()).events ?? []).filter((e) => e.eventType === WFT_COMPLETED).length;
    expect(tasks).toBeGreaterThanOrEqual(2); // the start (steps 1–2), the authorization's answer (4–6)
    const outcomes: Record<string, number> = {};
    const ids: string[] = [];
    for (let k = 1; k < tasks; k++) {
      const { order, sku, total } = await newOrder(`term${k}`);
      ids.push(order.orderId);
      const stockBefore = (await productRow(db, sku)).stock;
      const handle = await start(order);
      // Terminate as soon as the run has completed k workflow tasks.
      for (let i = 0; i < 400; i++) {
        const done = ((await handle.fetchHistory()).events ?? []).filter((e) => e.eventType === WFT_COMPLETED).length;
        if (done >= k) break;
        await sleepMs(10);
      }
      await handle.terminate(`terminate test: after workflow task ${k}`).catch(() => undefined); // it may have ended
      const again = await start(order);
      const end = await ending(again);
      outcomes[end] = (outcomes[end] ?? 0) + 1;
      expect(['COMPLETED', 'ALREADY_SETTLED'], `terminated after task ${k}`).toContain(end);
      const row = await db.query<{ status: string }>({
        text: 'SELECT status FROM orders WHERE order_id = $1',
        values: [order.orderId],
      });
      expect(row.rows[0]?.status, `terminated after task ${k}`).toBe('COMPLETED');
      expect(await moneyKept(db, order.orderId), `terminated after task ${k}`).toBe(total);
      expect((await productRow(db, sku)).stock, `terminated after task ${k}`).toBe(stockBefore - 2);
    }
    expect(await violations(ids)).toEqual([]);
    process.stdout.write(`terminate test: ${ids.length} orders, outcomes ${JSON.stringify(outcomes)}\n`);
  });
});
