/**
 * Cancels and resolves as promises kept in Postgres, on the real Postgres and the real provider: a
 * cancel is decided against the pivot in the row the shipment writes (the same request again gets its
 * first answer; a cancel and a shipment never both win, raced); once a cancel is recorded no charge
 * request goes out and the shipment is refused, whoever writes it; an operator's resolve is checked
 * against the ledger (mark-resolved with money kept or stock held is refused with the figures;
 * settled-elsewhere with a reference is accepted, and the checker names it as an exception).
 */
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createActivities, type OrderActivities } from '../activities';
import { decideCancel, recordResolve } from '../activities/order-requests';
import { checkInvariants } from '../db/invariants';
import { withTransaction } from '../db/pool';
import { chargeKeyFor } from '../domain/order';
import {
  createProduct,
  ledger,
  makeOrder,
  orderRow,
  runActivity,
  testAdmin,
  testPool,
  testProvider,
  uid,
} from './support/helpers';

let db: Pool;
let acts: OrderActivities;
beforeAll(() => {
  db = testPool();
  acts = createActivities({ db, provider: testProvider() });
});
afterAll(async () => {
  await db.end();
});

/** An order taken to `upTo` through the real activities. */
async function orderAt(upTo: 'PENDING' | 'RESERVED' | 'CHARGED' | 'SHIPPED') {
  const p = await createProduct(db, { stock: 10, priceCents: 899 });
  const order = makeOrder([{ sku: p.sku, qty: 1, unitPriceCents: p.priceCents }]);
  await runActivity(acts.createOrder, order);
  // These tests decide cancels and resolves with the charge era's steps: the row is an order of that era.
  await db.query({ text: `UPDATE orders SET payment_flow = 'charge' WHERE order_id = $1`, values: [order.orderId] });
  if (upTo !== 'PENDING')
    await runActivity(acts.reserveInventory, {
      orderId: order.orderId,
      customerId: order.customerId,
      items: order.items,
    });
  if (upTo === 'CHARGED' || upTo === 'SHIPPED')
    await runActivity(acts.chargePayment, {
      orderId: order.orderId,
      amountCents: 899,
      currency: order.currency,
      paymentMethod: order.paymentMethod,
      idempotencyKey: chargeKeyFor(order.orderId),
      markCharged: true,
    });
  if (upTo === 'SHIPPED') await runActivity(acts.createShipment, { orderId: order.orderId, byOperator: false });
  expect((await orderRow(db, order.orderId))?.status).toBe(upTo);
  return { order, sku: p.sku };
}

const cancel = (orderId: string, requestId = `r-${uid()}`) =>
  decideCancel(db, { orderId, requestId, reason: 'customer asked', source: 'client' });

const failureOf = async (p: Promise<unknown>): Promise<{ type?: string; details?: unknown[] }> =>
  p.then(
    () => ({}),
    (e: { type?: string; details?: unknown[]; cause?: { type?: string; details?: unknown[] } }) =>
      e.type ? e : (e.cause ?? {}),
  );

describe('a cancel is decided in Postgres, against the pivot', () => {
  it('accepted before the shipment: recorded on the order; the same request again gets the same answer', async () => {
    for (const at of ['PENDING', 'RESERVED', 'CHARGED'] as const) {
      const { order } = await orderAt(at);
      const first = await cancel(order.orderId, 'req-1');
      expect(first).toEqual({ outcome: 'accepted', cancel: { requestId: 'req-1', reason: 'customer asked' } });
      expect(await cancel(order.orderId, 'req-1')).toMatchObject({ outcome: 'accepted' });
      // Another request for an order already being cancelled: the same promise.
      expect(await cancel(order.orderId, 'req-2')).toMatchObject({
        outcome: 'accepted',
        message: expect.stringMatching(/already being cancelled/) as string,
        cancel: { requestId: 'req-1' },
      });
      const { rows } = await db.query<{ request_id: string; outcome: string; source: string }>({
        text: 'SELECT request_id, outcome, source FROM order_requests WHERE order_id = $1 ORDER BY request_id',
        values: [order.orderId],
      });
      expect(rows).toEqual([
        { request_id: 'req-1', outcome: 'accepted', source: 'client' },
        { request_id: 'req-2', outcome: 'accepted', source: 'client' },
      ]);
    }
  });

  it('refused once shipped, and for an order with no row: nothing recorded on the order', async () => {
    const { order } = await orderAt('SHIPPED');
    expect(await cancel(order.orderId)).toEqual({
      outcome: 'refused',
      message: `order ${order.orderId} has reached the shipment (the pivot); it can only move forward`,
    });
    const row = await db.query({
      text: 'SELECT cancel_request_id FROM orders WHERE order_id = $1',
      values: [order.orderId],
    });
    expect(row.rows[0]).toEqual({ cancel_request_id: null });
    expect(await cancel(`missing-${uid()}`)).toMatchObject({ outcome: 'refused', message: /no order row/ });
    // Once cancelled and ended, a cancel sent again is refused: there is nothing left to cancel.
    const { order: ended } = await orderAt('RESERVED');
    await cancel(ended.orderId, 'first');
    await runActivity(acts.releaseInventory, { orderId: ended.orderId });
    await runActivity(acts.setOrderStatus, { orderId: ended.orderId, status: 'CANCELLED', reason: 'customer asked' });
    expect(await cancel(ended.orderId)).toEqual({
      outcome: 'refused',
      message: `order ${ended.orderId} is already CANCELLED`,
    });
  });

  it('once recorded, no charge request goes out and the shipment is refused, whoever writes it', async () => {
    const reserved = await orderAt('RESERVED');
    await cancel(reserved.order.orderId);
    const charge = await failureOf(
      runActivity(acts.chargePayment, {
        orderId: reserved.order.orderId,
        amountCents: 899,
        currency: 'USD',
        paymentMethod: reserved.order.paymentMethod,
        idempotencyKey: chargeKeyFor(reserved.order.orderId),
        markCharged: true,
      }),
    );
    expect(charge).toMatchObject({ type: 'OrderStateConflict', details: [{ cancel: { reason: 'customer asked' } }] });
    expect(await ledger(db, reserved.order.orderId)).toEqual({ charges: [], refunds: [] });

    const charged = await orderAt('CHARGED');
    await cancel(charged.order.orderId);
    const ship = await failureOf(
      runActivity(acts.createShipment, { orderId: charged.order.orderId, byOperator: false }),
    );
    expect(ship).toMatchObject({ type: 'OrderStateConflict', details: [{ status: 'CHARGED', cancel: {} }] });
    // A write outside the saga (an operator's SQL) meets the trigger.
    await expect(
      db.query({ text: `UPDATE orders SET status = 'SHIPPED' WHERE order_id = $1`, values: [charged.order.orderId] }),
    ).rejects.toThrow(/a cancel is recorded/);
    expect((await orderRow(db, charged.order.orderId))?.status).toBe('CHARGED');
  });

  it('a cancel and a shipment raced on one order never both win (24 races)', async () => {
    const wins = { cancel: 0, ship: 0 };
    for (let i = 0; i < 24; i++) {
      const { order } = await orderAt('CHARGED');
      const [c, s] = await Promise.all([
        cancel(order.orderId),
        runActivity(acts.createShipment, { orderId: order.orderId, byOperator: false }).then(
          () => 'shipped' as const,
          () => 'refused' as const,
        ),
      ]);
      expect([c.outcome, s]).toContainEqual(c.outcome === 'accepted' ? 'refused' : 'shipped');
      expect(c.outcome === 'accepted' && s === 'shipped').toBe(false);
      const row = await db.query<{ status: string; cancel_request_id: string | null }>({
        text: 'SELECT status, cancel_request_id FROM orders WHERE order_id = $1',
        values: [order.orderId],
      });
      expect(row.rows[0]!.status === 'SHIPPED' && row.rows[0]!.cancel_request_id !== null).toBe(false);
      wins[c.outcome === 'accepted' ? 'cancel' : 'ship']++;
    }
    expect(wins.cancel + wins.ship).toBe(24);
  });
});

describe("an operator's resolve is checked against the ledger", () => {
  /** A charged order whose refund compensation failed: COMPENSATING, money and stock still with the shop. */
  async function compensating() {
    const { order, sku } = await orderAt('CHARGED');
    await withTransaction(db, (c) =>
      c.query({ text: `UPDATE orders SET status = 'COMPENSATING' WHERE order_id = $1`, values: [order.orderId] }),
    );
    return { order, sku };
  }
  const check = (orderId: string, action: string, compensation: string, reference?: string) =>
    runActivity(acts.checkResolution, {
      orderId,
      requestId: `r-${uid()}`,
      action,
      awaiting: 'compensation',
      compensation,
      ...(reference ? { reference } : {}),
    });

  it('mark-resolved of a refund the provider never made is refused with the figures; after the refund it is accepted', async () => {
    const { order } = await compensating();
    const refused = await check(order.orderId, 'mark-resolved', 'refundPayment');
    expect(refused.refused).toMatch(/8\.99 USD charged .* 0\.00 USD refunded/);
    expect(refused.refused).toMatch(/settled-elsewhere --reference/);
    await runActivity(acts.refundPayment, {
      orderId: order.orderId,
      chargeKey: chargeKeyFor(order.orderId),
      idempotencyKey: `${order.orderId}:charge:refund`,
    });
    expect(await check(order.orderId, 'mark-resolved', 'refundPayment')).toEqual({});
  });

  it('mark-resolved of a release while stock is held is refused, naming the units', async () => {
    const { order, sku } = await compensating();
    expect((await check(order.orderId, 'mark-resolved', 'releaseInventory')).refused).toMatch(
      new RegExp(`still holds 1×${sku}`),
    );
  });

  it('settled-elsewhere with a reference is accepted, recorded, and the checker names it instead of a violation', async () => {
    const { order } = await compensating();
    const requestId = `r-${uid()}`;
    expect(
      await runActivity(acts.checkResolution, {
        orderId: order.orderId,
        requestId,
        action: 'settled-elsewhere',
        reference: 'bank-transfer-4711',
        awaiting: 'compensation',
        compensation: 'refundPayment',
      }),
    ).toEqual({});
    // The saga then closes the order, as after mark-resolved (the release is done as usual).
    await runActivity(acts.releaseInventory, { orderId: order.orderId });
    await withTransaction(db, (c) =>
      c.query({ text: `UPDATE orders SET status = 'CANCELLED' WHERE order_id = $1`, values: [order.orderId] }),
    );
    const report = await checkInvariants(db, { deadlineMs: 86_400_000 });
    expect(report.violations.filter((v) => v.orderIds.includes(order.orderId))).toEqual([]);
    expect(report.exceptions).toContainEqual(
      expect.objectContaining({ orderId: order.orderId, status: 'CANCELLED', reference: 'bank-transfer-4711' }),
    );
    // The same order marked resolved without such a word is a violation: money kept.
    const other = await compensating();
    await runActivity(acts.releaseInventory, { orderId: other.order.orderId });
    await withTransaction(db, (c) =>
      c.query({ text: `UPDATE orders SET status = 'CANCELLED' WHERE order_id = $1`, values: [other.order.orderId] }),
    );
    const again = await checkInvariants(db, { deadlineMs: 86_400_000 });
    expect(again.violations.filter((v) => v.orderIds.includes(other.order.orderId))).not.toEqual([]);
    // Put it right (the refund), so the shared database stays clean for the files after this one.
    await runActivity(acts.refundPayment, {
      orderId: other.order.orderId,
      chargeKey: chargeKeyFor(other.order.orderId),
      idempotencyKey: `${other.order.orderId}:charge:refund`,
    });
  });
});

describe('settled-elsewhere and the ledger', () => {
  async function compensatingAt(at: 'RESERVED' | 'CHARGED') {
    const { order, sku } = await orderAt(at);
    await withTransaction(db, (c) =>
      c.query({ text: `UPDATE orders SET status = 'COMPENSATING' WHERE order_id = $1`, values: [order.orderId] }),
    );
    return { order, sku };
  }
  const settledElsewhere = (orderId: string, requestId = `r-${uid()}`) =>
    runActivity(acts.checkResolution, {
      orderId,
      requestId,
      action: 'settled-elsewhere',
      reference: 'bank-transfer-4711',
      awaiting: 'compensation',
      compensation: 'refundPayment',
    });
  /** Ends the order as the saga would after the resolve (the release, then CANCELLED). */
  const close = async (orderId: string) => {
    await runActivity(acts.releaseInventory, { orderId });
    await withTransaction(db, (c) =>
      c.query({ text: `UPDATE orders SET status = 'CANCELLED' WHERE order_id = $1`, values: [orderId] }),
    );
  };

  it('settled-elsewhere is refused while the provider says the charge is processing, naming what to wait for; accepted once it decided', async () => {
    const { order } = await compensatingAt('RESERVED');
    const key = chargeKeyFor(order.orderId);
    const admin = testAdmin();
    await admin.set({ kind: 'delay', target: 'charges', delayMs: 1_500, count: 1, keyPrefix: key });
    try {
      const charging = testProvider().charge(key, {
        amountCents: 899,
        currency: 'USD',
        paymentMethod: order.paymentMethod,
      });
      await new Promise((r) => setTimeout(r, 400));
      const refused = await settledElsewhere(order.orderId);
      expect(refused.refused).toMatch(new RegExp(`charge ${key} is still processing`));
      expect(refused.refused).toMatch(/wait until the provider decides the charge.*then resolve again/);
      expect((await charging).charge.status).toBe('succeeded');
    } finally {
      await admin.clear();
    }
    expect(await settledElsewhere(order.orderId)).toEqual({});
    await close(order.orderId);
  });

  it('after settled-elsewhere the refund step of any run refunds nothing at the provider', async () => {
    const { order } = await compensatingAt('CHARGED');
    expect(await settledElsewhere(order.orderId)).toEqual({});
    expect(
      await runActivity(acts.refundPayment, {
        orderId: order.orderId,
        chargeKey: chargeKeyFor(order.orderId),
        idempotencyKey: `${order.orderId}:charge:refund`,
      }),
    ).toEqual({ outcome: 'nothing-to-refund', chargeStatus: 'settled-elsewhere' });
    expect((await ledger(db, order.orderId)).refunds).toEqual([]);
    await close(order.orderId);
  });

  it('the checker exempts no stock: a settled-elsewhere order that still holds stock is a violation', async () => {
    const { order, sku } = await compensatingAt('CHARGED');
    expect(await settledElsewhere(order.orderId)).toEqual({});
    await withTransaction(db, (c) =>
      c.query({ text: `UPDATE orders SET status = 'CANCELLED' WHERE order_id = $1`, values: [order.orderId] }),
    );
    const report = await checkInvariants(db, { deadlineMs: 86_400_000 });
    const mine = report.violations.filter((v) => v.orderIds.includes(order.orderId));
    expect(mine.map((v) => v.rule)).toContain('no reservation left HELD on a FAILED or CANCELLED order');
    expect(mine.find((v) => v.rule.startsWith('no reservation left HELD'))?.detail).toBe(
      'CANCELLED with 1 HELD reservation(s)',
    );
    // It is still the named exception for the money.
    expect(report.exceptions).toContainEqual(expect.objectContaining({ orderId: order.orderId }));
    expect(mine.map((v) => v.rule)).not.toContain(
      'every FAILED or CANCELLED order that was charged has exactly one refund',
    );
    // Put it right (the stock back), so the shared database stays clean for the files after this one.
    await runActivity(acts.releaseInventory, { orderId: order.orderId }).catch(() => undefined);
    await db.query({
      text: `WITH r AS (UPDATE reservations SET status = 'RELEASED' WHERE order_id = $1 AND status = 'HELD' RETURNING sku, qty)
             UPDATE products p SET stock = p.stock + r.qty FROM r WHERE p.sku = r.sku`,
      values: [order.orderId],
    });
    expect(
      (await checkInvariants(db, { deadlineMs: 86_400_000 })).violations.filter((v) =>
        v.orderIds.includes(order.orderId),
      ),
    ).toEqual([]);
    expect(sku).toBeTruthy();
  });
});

describe('a pending resolve is carried by the row to whichever run moves the order next', () => {
  /** A charged order whose refund failed for good: NEEDS_ATTENTION from COMPENSATING, about refundPayment. */
  async function escalated() {
    const { order } = await orderAt('CHARGED');
    await runActivity(acts.setOrderStatus, { orderId: order.orderId, status: 'COMPENSATING' });
    await runActivity(acts.setOrderStatus, {
      orderId: order.orderId,
      status: 'NEEDS_ATTENTION',
      reason: 'compensation refundPayment failed',
      step: 'refundPayment',
    });
    return order;
  }
  const record = (orderId: string, requestId: string, action: string) =>
    recordResolve(db, { orderId, requestId, action });
  const check = (orderId: string, requestId: string, action: string) =>
    runActivity(acts.checkResolution, {
      orderId,
      requestId,
      action,
      awaiting: 'compensation',
      compensation: 'refundPayment',
    });

  it('a pending resolve reaches the next run: createOrder of a run taking the order over and every refused write name it, until a run leaves the escalation', async () => {
    const order = await escalated();
    await record(order.orderId, 'op-1', 'retry');
    const takeOver = await runActivity(acts.createOrder, order);
    expect(takeOver).toEqual({
      outcome: 'owned',
      status: 'NEEDS_ATTENTION',
      paymentFlow: 'charge',
      attentionFrom: 'COMPENSATING',
      attentionStep: 'refundPayment',
      resolve: { requestId: 'op-1', action: 'retry' },
    });
    const refused = await failureOf(
      runActivity(acts.reserveInventory, { orderId: order.orderId, customerId: order.customerId, items: order.items }),
    );
    expect(refused).toMatchObject({
      type: 'OrderStateConflict',
      details: [{ status: 'NEEDS_ATTENTION', attentionStep: 'refundPayment', resolve: { requestId: 'op-1' } }],
    });
    // Accepted by a run that then went away without leaving the escalation: still to apply.
    expect(await check(order.orderId, 'op-1', 'retry')).toEqual({});
    expect(await runActivity(acts.createOrder, order)).toMatchObject({ resolve: { requestId: 'op-1' } });
    // The run that applies it leaves NEEDS_ATTENTION: spent.
    expect(
      await runActivity(acts.setOrderStatus, { orderId: order.orderId, status: 'COMPENSATING', resume: true }),
    ).toBe('COMPENSATING');
    expect(await runActivity(acts.createOrder, order)).not.toHaveProperty('resolve');
  });

  it('a resolve is applied once: its Signal again (a Reset reapplies it) does not answer a later escalation', async () => {
    const order = await escalated();
    await record(order.orderId, 'op-1', 'retry');
    expect(await check(order.orderId, 'op-1', 'retry')).toEqual({});
    await runActivity(acts.setOrderStatus, { orderId: order.orderId, status: 'COMPENSATING', resume: true });
    await runActivity(acts.setOrderStatus, {
      orderId: order.orderId,
      status: 'NEEDS_ATTENTION',
      reason: 'compensation refundPayment failed again',
      step: 'refundPayment',
    });
    expect(await runActivity(acts.createOrder, order)).not.toHaveProperty('resolve');
    const again = await check(order.orderId, 'op-1', 'retry');
    expect(again.refused).toMatch(/request op-1 answered an earlier escalation of order .* send a new resolve/);
    // A new request answers the new escalation.
    await record(order.orderId, 'op-2', 'retry');
    expect(await runActivity(acts.createOrder, order)).toMatchObject({ resolve: { requestId: 'op-2' } });
    expect(await check(order.orderId, 'op-2', 'retry')).toEqual({});
    // Put it right: refunded and released, FAILED.
    await runActivity(acts.setOrderStatus, { orderId: order.orderId, status: 'COMPENSATING', resume: true });
    await runActivity(acts.refundPayment, {
      orderId: order.orderId,
      chargeKey: chargeKeyFor(order.orderId),
      idempotencyKey: `${order.orderId}:charge:refund`,
    });
    await runActivity(acts.releaseInventory, { orderId: order.orderId });
    await runActivity(acts.setOrderStatus, { orderId: order.orderId, status: 'FAILED' });
  });

  it('an action that does not answer the escalation is refused, naming the actions that do', async () => {
    const order = await escalated();
    await record(order.orderId, 'op-1', 'charge-succeeded');
    expect((await check(order.orderId, 'op-1', 'charge-succeeded')).refused).toBe(
      'action must be one of retry, mark-resolved, settled-elsewhere while awaiting compensation',
    );
    const row = await db.query({
      text: 'SELECT outcome FROM order_requests WHERE order_id = $1 AND request_id = $2',
      values: [order.orderId, 'op-1'],
    });
    expect(row.rows[0]).toEqual({ outcome: 'refused' });
    expect(await runActivity(acts.createOrder, order)).not.toHaveProperty('resolve');
    await runActivity(acts.setOrderStatus, { orderId: order.orderId, status: 'COMPENSATING', resume: true });
    await runActivity(acts.refundPayment, {
      orderId: order.orderId,
      chargeKey: chargeKeyFor(order.orderId),
      idempotencyKey: `${order.orderId}:charge:refund`,
    });
    await runActivity(acts.releaseInventory, { orderId: order.orderId });
    await runActivity(acts.setOrderStatus, { orderId: order.orderId, status: 'FAILED' });
  });
});
