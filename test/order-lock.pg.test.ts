/**
 * The order row as the saga's lock, activity by activity, on the real Postgres and the real provider:
 * guarded transitions, one owner, the charge's and refund's preconditions, the all-or-nothing
 * shipment, the crash-safe purchase quota, the release's tombstone, and currencies.
 */
import { MockActivityEnvironment } from '@temporalio/testing';
import { DefaultLogger } from '@temporalio/worker';
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createActivities, type OrderActivities } from '../activities';
import type { ReserveLogic } from '../activities/inventory';
import { loadOrder } from '../client';
import { chargeKeyFor, refundKeyFor } from '../domain/order';
import { orderStore } from '../orders/order-store';
import { parseSagaConfig } from '../workflows/order-saga';
import {
  createProduct,
  ledger,
  makeOrder,
  orderRow,
  productRow,
  reservations,
  runActivity,
  testPool,
  testProvider,
} from './support/helpers';
import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

let db: Pool;
let acts: OrderActivities;
beforeAll(() => {
  db = testPool();
  acts = createActivities({ db, provider: testProvider() });
});
afterAll(async () => {
  await db.end();
});

/** Makes an order row one of the charge era (as a row the charge-based build wrote). */
async function chargeEra(orderId: string): Promise<void> {
  await db.query({ text: `UPDATE orders SET payment_flow = 'charge' WHERE order_id = $1`, values: [orderId] });
}

async function placed(qty = 2, lines = 1): Promise<{ order: ReturnType<typeof makeOrder>; skus: string[] }> {
  const products = [];
  for (let i = 0; i < lines; i++) products.push(await createProduct(db, { stock: 10, priceCents: 1000 }));
  const order = makeOrder(products.map((p) => ({ sku: p.sku, qty, unitPriceCents: p.priceCents })));
  expect(await runActivity(acts.createOrder, order)).toEqual({
    outcome: 'created',
    status: 'PENDING',
    paymentFlow: 'authorization',
  });
  // These tests hold the lock's rules with the charge era's steps: the row is an order of that era.
  await chargeEra(order.orderId);
  return { order, skus: products.map((p) => p.sku) };
}

const reserveReq = (order: ReturnType<typeof makeOrder>) => ({
  orderId: order.orderId,
  customerId: order.customerId,
  items: order.items,
});
const chargeReq = (order: ReturnType<typeof makeOrder>) => ({
  orderId: order.orderId,
  amountCents: order.items.reduce((s, i) => s + i.qty * i.unitPriceCents, 0),
  currency: order.currency,
  paymentMethod: order.paymentMethod,
  idempotencyKey: chargeKeyFor(order.orderId),
});
const refundReq = (orderId: string) => ({
  orderId,
  chargeKey: chargeKeyFor(orderId),
  idempotencyKey: refundKeyFor(orderId),
});

describe('the order state machine', () => {
  it('with markCharged the charge moves the row to CHARGED itself; without, the row stays RESERVED; a replay is a no-op', async () => {
    const { order } = await placed();
    await runActivity(acts.reserveInventory, reserveReq(order));
    expect(await runActivity(acts.chargePayment, chargeReq(order))).not.toHaveProperty('status');
    expect((await orderRow(db, order.orderId))?.status).toBe('RESERVED');
    expect(await runActivity(acts.chargePayment, { ...chargeReq(order), markCharged: true })).toMatchObject({
      status: 'CHARGED',
    });
    expect((await orderRow(db, order.orderId))?.status).toBe('CHARGED');
    expect(await runActivity(acts.chargePayment, { ...chargeReq(order), markCharged: true })).toMatchObject({
      status: 'CHARGED',
    });
    expect((await ledger(db, order.orderId)).charges).toHaveLength(1);
  });

  it('the money the saga learns is on the row: charged with the move to CHARGED (by the charge or after an inquiry), refunded with the refund, once', async () => {
    const money = async (orderId: string) =>
      (
        await db.query<{ charged_cents: string; refunded_cents: string }>({
          text: 'SELECT charged_cents, refunded_cents FROM orders WHERE order_id = $1',
          values: [orderId],
        })
      ).rows[0];
    const { order } = await placed(); // 2 × 1000
    await runActivity(acts.reserveInventory, reserveReq(order));
    await runActivity(acts.chargePayment, chargeReq(order));
    expect(await money(order.orderId)).toEqual({ charged_cents: '0', refunded_cents: '0' }); // not yet CHARGED
    await runActivity(acts.chargePayment, { ...chargeReq(order), markCharged: true });
    await runActivity(acts.chargePayment, { ...chargeReq(order), markCharged: true });
    expect(await money(order.orderId)).toEqual({ charged_cents: '2000', refunded_cents: '0' });
    await runActivity(acts.refundPayment, refundReq(order.orderId));
    await runActivity(acts.refundPayment, refundReq(order.orderId)); // a replay
    expect(await money(order.orderId)).toEqual({ charged_cents: '2000', refunded_cents: '2000' });

    // Charged as an inquiry found it: the move to CHARGED records it all the same.
    const { order: inquired } = await placed();
    await runActivity(acts.reserveInventory, reserveReq(inquired));
    await runActivity(acts.chargePayment, chargeReq(inquired));
    await runActivity(acts.setOrderStatus, { orderId: inquired.orderId, status: 'CHARGED' });
    expect(await money(inquired.orderId)).toEqual({ charged_cents: '2000', refunded_cents: '0' });
  });

  it("the keys the workflow passes must be the order's own: another order's key is refused before any call", async () => {
    const { order } = await placed();
    await runActivity(acts.reserveInventory, reserveReq(order));
    const other = `${order.orderId}x:charge`;
    await expect(runActivity(acts.chargePayment, { ...chargeReq(order), idempotencyKey: other })).rejects.toMatchObject(
      { type: 'OrderMismatch' },
    );
    await expect(runActivity(acts.inquireCharge, { orderId: order.orderId, chargeKey: other })).rejects.toMatchObject({
      type: 'OrderMismatch',
    });
    await expect(
      runActivity(acts.refundPayment, { ...refundReq(order.orderId), idempotencyKey: `${other}:refund` }),
    ).rejects.toMatchObject({ type: 'OrderMismatch' });
    expect(await ledger(db, order.orderId)).toEqual({ charges: [], refunds: [] });
    await runActivity(acts.chargePayment, { ...chargeReq(order), idempotencyKey: `${order.orderId}:charge` });
    expect(
      await runActivity(acts.inquireCharge, { orderId: order.orderId, chargeKey: `${order.orderId}:charge` }),
    ).toMatchObject({ status: 'succeeded' });
  });

  it('walks the forward path; an illegal transition is refused naming the current status, even as raw SQL', async () => {
    const { order } = await placed();
    await runActivity(acts.reserveInventory, reserveReq(order));
    expect((await orderRow(db, order.orderId))?.status).toBe('RESERVED');
    await runActivity(acts.chargePayment, chargeReq(order));
    await runActivity(acts.setOrderStatus, { orderId: order.orderId, status: 'CHARGED' });
    await runActivity(acts.createShipment, { orderId: order.orderId, byOperator: false });
    expect((await orderRow(db, order.orderId))?.status).toBe('SHIPPED');
    await runActivity(acts.sendConfirmation, { orderId: order.orderId, trackingNumber: 'x' });
    expect((await orderRow(db, order.orderId))?.status).toBe('COMPLETED');
    // A late, repeated status write is a no-op, never a step back.
    await runActivity(acts.setOrderStatus, { orderId: order.orderId, status: 'RESERVED' });
    expect((await orderRow(db, order.orderId))?.status).toBe('COMPLETED');
    // Terminal stays terminal.
    await expect(
      runActivity(acts.setOrderStatus, { orderId: order.orderId, status: 'COMPENSATING' }),
    ).rejects.toMatchObject({
      type: 'OrderStateConflict',
      nonRetryable: true,
      details: [{ status: 'COMPLETED' }],
    });
    await expect(
      db.query({ text: `UPDATE orders SET status = 'PENDING' WHERE order_id = $1`, values: [order.orderId] }),
    ).rejects.toThrow(/not a legal transition/);
    expect((await orderRow(db, order.orderId))?.status).toBe('COMPLETED');
  });

  it('a terminal order is not rewritten by another run, but its owner may repeat its own last write', async () => {
    const { order } = await placed();
    await runActivity(acts.setOrderStatus, { orderId: order.orderId, status: 'COMPENSATING', reason: 'r' });
    await runActivity(acts.setOrderStatus, { orderId: order.orderId, status: 'CANCELLED', reason: 'customer' });
    await runActivity(acts.setOrderStatus, { orderId: order.orderId, status: 'CANCELLED', reason: 'customer' }); // same run, a retry
    await db.query({
      text: `UPDATE orders SET owner_run_id = 'another-run' WHERE order_id = $1`,
      values: [order.orderId],
    });
    await expect(
      runActivity(acts.setOrderStatus, { orderId: order.orderId, status: 'CANCELLED', reason: 'x' }),
    ).rejects.toMatchObject({
      type: 'OrderStateConflict',
      details: [{ status: 'CANCELLED' }],
    });
    expect(await orderRow(db, order.orderId)).toEqual({ status: 'CANCELLED', reason: 'customer' });
  });
  it('NEEDS_ATTENTION leaves only back to where it came from: a pivot escalation never compensates, a compensation never ships', async () => {
    const { order } = await placed();
    await runActivity(acts.reserveInventory, reserveReq(order));
    await runActivity(acts.chargePayment, chargeReq(order));
    await runActivity(acts.setOrderStatus, { orderId: order.orderId, status: 'CHARGED' });
    await runActivity(acts.setOrderStatus, {
      orderId: order.orderId,
      status: 'NEEDS_ATTENTION',
      reason: 'shipment failed at the pivot',
    });
    await expect(
      runActivity(acts.setOrderStatus, { orderId: order.orderId, status: 'COMPENSATING' }),
    ).rejects.toMatchObject({ type: 'OrderStateConflict' });
    await expect(runActivity(acts.releaseInventory, { orderId: order.orderId })).rejects.toMatchObject({
      type: 'OrderStateConflict',
    });
    await expect(
      db.query({ text: `UPDATE orders SET status = 'COMPENSATING' WHERE order_id = $1`, values: [order.orderId] }),
    ).rejects.toThrow(/from CHARGED/);
    // A resume goes back to the row's own origin, whatever the caller believes.
    expect(
      await runActivity(acts.setOrderStatus, { orderId: order.orderId, status: 'UNKNOWN_PAYMENT', resume: true }),
    ).toBe('CHARGED');
    expect((await orderRow(db, order.orderId))?.status).toBe('CHARGED');

    const other = await placed();
    await runActivity(acts.reserveInventory, reserveReq(other.order));
    await runActivity(acts.setOrderStatus, { orderId: other.order.orderId, status: 'COMPENSATING' });
    await runActivity(acts.setOrderStatus, {
      orderId: other.order.orderId,
      status: 'NEEDS_ATTENTION',
      reason: 'release failed',
    });
    await expect(
      runActivity(acts.createShipment, { orderId: other.order.orderId, byOperator: false }),
    ).rejects.toMatchObject({
      type: 'OrderStateConflict',
    });
    expect((await reservations(db, other.order.orderId)).map((r) => r.status)).toEqual(['HELD']);
  });
});

/** Runs an activity as if called by run `runId` of the order's workflow. */
function asRun<A extends unknown[], R>(runId: string, fn: (...args: A) => Promise<R>, ...args: A): Promise<R> {
  const env = new MockActivityEnvironment(
    { workflowExecution: { workflowId: 'order:any', runId } },
    { logger: new DefaultLogger('ERROR', () => undefined) },
  );
  return env.run<A, R, typeof fn>(fn, ...args);
}

describe('one order, one owner', () => {
  it('a run superseded by a later run (a Reset, a new start) can no longer move the row, charge, ship or take it back', async () => {
    const { order } = await placed();
    const old = `old-${order.orderId}`;
    const next = `new-${order.orderId}`;
    await db.query({ text: 'UPDATE orders SET owner_run_id = $2 WHERE order_id = $1', values: [order.orderId, old] });
    await asRun(old, acts.reserveInventory, reserveReq(order));
    // The later run takes the open order over: the old run is superseded.
    expect(await asRun(next, acts.createOrder, order)).toMatchObject({ outcome: 'owned', status: 'RESERVED' });
    const refused = { type: 'NotOrderOwner', nonRetryable: true };
    await expect(
      asRun(old, acts.setOrderStatus, { orderId: order.orderId, status: 'COMPENSATING' }),
    ).rejects.toMatchObject(refused);
    await expect(asRun(old, acts.chargePayment, chargeReq(order))).rejects.toMatchObject(refused);
    await expect(asRun(old, acts.createOrder, order)).rejects.toMatchObject(refused);
    expect(await ledger(db, order.orderId)).toEqual({ charges: [], refunds: [] });
    // The owner goes on; a write the guard makes a no-op returns where the row really stands.
    expect(await asRun(next, acts.chargePayment, { ...chargeReq(order), markCharged: true })).toMatchObject({
      status: 'CHARGED',
    });
    await expect(asRun(old, acts.createShipment, { orderId: order.orderId, byOperator: false })).rejects.toMatchObject(
      refused,
    );
    await asRun(next, acts.createShipment, { orderId: order.orderId, byOperator: false });
    expect(await asRun(next, acts.setOrderStatus, { orderId: order.orderId, status: 'CHARGED' })).toBe('SHIPPED');
    const row = await db.query<{ owner_run_id: string; superseded_runs: string[] }>({
      text: 'SELECT owner_run_id, superseded_runs FROM orders WHERE order_id = $1',
      values: [order.orderId],
    });
    expect(row.rows[0]).toEqual({ owner_run_id: next, superseded_runs: [old] });
  });

  it('a run older than the owner (time-ordered run IDs) cannot take the order over, even if it never owned it', async () => {
    const { order } = await placed();
    // UUID version 7 run IDs, as the Temporal server makes them: the first is the older run.
    const older = '01900000-0000-7000-8000-00000000000a';
    const newer = '01900000-0000-7000-8000-00000000000b';
    expect(await asRun(newer, acts.createOrder, order)).toMatchObject({ outcome: 'owned' });
    await expect(
      asRun(older, acts.setOrderStatus, { orderId: order.orderId, status: 'COMPENSATING' }),
    ).rejects.toMatchObject({ type: 'NotOrderOwner' });
    await expect(asRun(older, acts.reserveInventory, reserveReq(order))).rejects.toMatchObject({
      type: 'NotOrderOwner',
    });
    expect(await asRun(newer, acts.reserveInventory, reserveReq(order))).toMatchObject({ status: 'RESERVED' });
  });

  it('an escalation before the pivot (an unknown charge) may turn backward; one at the pivot may not', async () => {
    const early = await placed();
    await runActivity(acts.reserveInventory, reserveReq(early.order));
    await runActivity(acts.setOrderStatus, { orderId: early.order.orderId, status: 'UNKNOWN_PAYMENT' });
    await runActivity(acts.setOrderStatus, {
      orderId: early.order.orderId,
      status: 'NEEDS_ATTENTION',
      reason: 'unknown',
    });
    expect(await runActivity(acts.setOrderStatus, { orderId: early.order.orderId, status: 'COMPENSATING' })).toBe(
      'COMPENSATING',
    );
    const late = await placed();
    await runActivity(acts.reserveInventory, reserveReq(late.order));
    await runActivity(acts.chargePayment, { ...chargeReq(late.order), markCharged: true });
    await runActivity(acts.setOrderStatus, { orderId: late.order.orderId, status: 'NEEDS_ATTENTION', reason: 'pivot' });
    await expect(
      runActivity(acts.setOrderStatus, { orderId: late.order.orderId, status: 'COMPENSATING' }),
    ).rejects.toMatchObject({ type: 'OrderStateConflict', details: [{ status: 'NEEDS_ATTENTION' }] });
  });

  it('createOrder on a settled order reports it settled and writes nothing; other contents are refused; an open order is taken over', async () => {
    const { order } = await placed();
    const before = await db.query<{ customer_id: string; total_cents: string }>({
      text: 'SELECT * FROM orders WHERE order_id = $1',
      values: [order.orderId],
    });
    const other = { ...order, items: [{ ...order.items[0]!, qty: 3 }] };
    await expect(runActivity(acts.createOrder, other)).rejects.toMatchObject({
      type: 'OrderMismatch',
      nonRetryable: true,
    });
    // Another card is other contents too: the charge key would be reused with other parameters.
    await expect(runActivity(acts.createOrder, { ...order, paymentMethod: 'tok_mastercard' })).rejects.toMatchObject({
      type: 'OrderMismatch',
    });
    expect(await runActivity(acts.createOrder, order)).toEqual({
      outcome: 'owned',
      status: 'PENDING',
      paymentFlow: 'charge',
    });
    await runActivity(acts.setOrderStatus, { orderId: order.orderId, status: 'COMPENSATING' });
    await runActivity(acts.setOrderStatus, { orderId: order.orderId, status: 'FAILED', reason: 'declined' });
    expect(await runActivity(acts.createOrder, order)).toEqual({ outcome: 'settled', status: 'FAILED' });
    expect(await runActivity(acts.createOrder, other)).toEqual({ outcome: 'settled', status: 'FAILED' });
    const after = await db.query({
      text: 'SELECT customer_id, items, total_cents FROM orders WHERE order_id = $1',
      values: [order.orderId],
    });
    expect(after.rows[0]).toMatchObject({
      customer_id: before.rows[0]!.customer_id,
      total_cents: before.rows[0]!.total_cents,
    });
  });
});

describe('preconditions of money and goods', () => {
  it('no charge request for an order that may not be charged (PENDING, cancelled); the provider never hears of it', async () => {
    const { order } = await placed();
    await expect(runActivity(acts.chargePayment, chargeReq(order))).rejects.toMatchObject({
      type: 'OrderStateConflict',
      details: [{ status: 'PENDING' }],
    });
    await runActivity(acts.setOrderStatus, { orderId: order.orderId, status: 'COMPENSATING' });
    await runActivity(acts.setOrderStatus, { orderId: order.orderId, status: 'CANCELLED' });
    await expect(runActivity(acts.chargePayment, chargeReq(order))).rejects.toMatchObject({
      type: 'OrderStateConflict',
      details: [{ status: 'CANCELLED' }],
    });
    expect(await ledger(db, order.orderId)).toEqual({ charges: [], refunds: [] });
  });

  it('a charge attempt that stalls before sending does not send: the saga may have moved on', async () => {
    const { order } = await placed();
    await runActivity(acts.reserveInventory, reserveReq(order));
    const slowDb = Object.create(db) as Pool;
    slowDb.query = (async (...args: unknown[]) => {
      await new Promise((r) => setTimeout(r, 3_500)); // e.g. a pool wait or a pause before the POST
      return (db.query as (...a: unknown[]) => unknown)(...args);
    }) as Pool['query'];
    const stalled = createActivities({ db: slowDb, provider: testProvider() });
    await expect(runActivity(stalled.chargePayment, chargeReq(order))).rejects.toMatchObject({ type: 'ChargeNotSent' });
    expect(await ledger(db, order.orderId)).toEqual({ charges: [], refunds: [] });
  });

  it('a charge for another amount than the order row is refused before the provider', async () => {
    const { order } = await placed();
    await runActivity(acts.reserveInventory, reserveReq(order));
    await expect(runActivity(acts.chargePayment, { ...chargeReq(order), amountCents: 1 })).rejects.toMatchObject({
      type: 'OrderMismatch',
    });
    expect(await ledger(db, order.orderId)).toEqual({ charges: [], refunds: [] });
  });

  it('the provider replay of a refunded charge does not count as paid; the inquiry reports the refund', async () => {
    const { order } = await placed();
    await runActivity(acts.reserveInventory, reserveReq(order));
    await runActivity(acts.chargePayment, chargeReq(order));
    await runActivity(acts.setOrderStatus, { orderId: order.orderId, status: 'COMPENSATING' });
    expect(await runActivity(acts.refundPayment, refundReq(order.orderId))).toMatchObject({
      outcome: 'refunded',
      amountCents: 2000,
    });
    // Replay the charge as a second run would (the row is put back to a chargeable state by hand here).
    await db.query('BEGIN');
    await db.query(`SET LOCAL session_replication_role = replica`);
    await db.query({ text: `UPDATE orders SET status = 'RESERVED' WHERE order_id = $1`, values: [order.orderId] });
    await db.query('COMMIT');
    await expect(runActivity(acts.chargePayment, chargeReq(order))).rejects.toMatchObject({
      type: 'ChargeRefunded',
      nonRetryable: true,
    });
    expect(
      await runActivity(acts.inquireCharge, { orderId: order.orderId, chargeKey: chargeKeyFor(order.orderId) }),
    ).toEqual({
      status: 'succeeded',
      amountCents: 2000,
      refundedCents: 2000,
    });
    expect(await ledger(db, order.orderId)).toEqual({
      charges: [{ status: 'succeeded', amount: 2000 }],
      refunds: [{ amount: 2000 }],
    });
  });

  it('no refund and no release for a shipped order', async () => {
    const { order, skus } = await placed();
    await runActivity(acts.reserveInventory, reserveReq(order));
    await runActivity(acts.chargePayment, chargeReq(order));
    await runActivity(acts.setOrderStatus, { orderId: order.orderId, status: 'CHARGED' });
    await runActivity(acts.createShipment, { orderId: order.orderId, byOperator: false });
    await expect(runActivity(acts.refundPayment, refundReq(order.orderId))).rejects.toMatchObject({
      type: 'OrderStateConflict',
      details: [{ status: 'SHIPPED' }],
    });
    await expect(runActivity(acts.releaseInventory, { orderId: order.orderId })).rejects.toMatchObject({
      type: 'OrderStateConflict',
      details: [{ status: 'SHIPPED' }],
    });
    expect(await ledger(db, order.orderId)).toEqual({ charges: [{ status: 'succeeded', amount: 2000 }], refunds: [] });
    expect(await reservations(db, order.orderId)).toEqual([{ sku: skus[0], qty: 2, status: 'SOLD' }]);
  });

  it('a shipment needs every line HELD for this order: one released line rejects it, and nothing changes', async () => {
    const { order, skus } = await placed(1, 2);
    await runActivity(acts.reserveInventory, reserveReq(order));
    await runActivity(acts.chargePayment, chargeReq(order));
    await runActivity(acts.setOrderStatus, { orderId: order.orderId, status: 'CHARGED' });
    await db.query({
      text: `UPDATE reservations SET status = 'RELEASED' WHERE order_id = $1 AND sku = $2`,
      values: [order.orderId, skus[1]],
    });
    await expect(runActivity(acts.createShipment, { orderId: order.orderId, byOperator: false })).rejects.toMatchObject(
      {
        type: 'ShipmentRejected',
        nonRetryable: true,
      },
    );
    expect((await orderRow(db, order.orderId))?.status).toBe('CHARGED');
    expect((await reservations(db, order.orderId)).map((r) => r.status).sort()).toEqual(['HELD', 'RELEASED']);
    expect(
      (await db.query({ text: 'SELECT 1 FROM shipments WHERE order_id = $1', values: [order.orderId] })).rowCount,
    ).toBe(0);
  });
});

describe('purchase quota and the release tombstone', () => {
  const quota = async (customerId: string, sku: string): Promise<number> =>
    (
      await db.query<{ held: number }>({
        text: 'SELECT held FROM purchase_quota WHERE customer_id = $1 AND sku = $2',
        values: [customerId, sku],
      })
    ).rows[0]?.held ?? 0;

  it('a failure between the quota hold and the commit holds nothing: the hold commits with the reservation or not at all', async () => {
    const { order, skus } = await placed(2);
    await db.query({ text: 'UPDATE products SET max_per_customer = 2 WHERE sku = $1', values: [skus[0]] });
    // The insert of the reservation row fails inside the commit, after the quota upsert (a planted
    // conflicting row stands for a crash at that point): the whole transaction rolls back.
    await db.query({
      text: `INSERT INTO reservations (order_id, sku, qty, status) VALUES ($1, $2, 1, 'RELEASED')`,
      values: [order.orderId, skus[0]],
    });
    await expect(runActivity(acts.reserveInventory, reserveReq(order))).rejects.toMatchObject({
      type: 'OrderStateConflict',
    });
    expect(await quota(order.customerId, skus[0]!)).toBe(0);
    expect((await productRow(db, skus[0]!)).stock).toBe(10);
    expect((await orderRow(db, order.orderId))?.status).toBe('PENDING');
    await db.query({ text: 'DELETE FROM reservations WHERE order_id = $1', values: [order.orderId] });
    // The customer is not locked out: the same reservation now takes the whole limit.
    expect((await runActivity(acts.reserveInventory, reserveReq(order))).outcome).toBe('reserved');
    expect(await quota(order.customerId, skus[0]!)).toBe(2);
    await runActivity(acts.releaseInventory, { orderId: order.orderId });
    expect(await quota(order.customerId, skus[0]!)).toBe(0);
  });

  it('a release gives back exactly what this order held', async () => {
    const { order, skus } = await placed(2);
    await runActivity(acts.reserveInventory, reserveReq(order)); // no limit yet: holds no quota
    await db.query({ text: 'UPDATE products SET max_per_customer = 5 WHERE sku = $1', values: [skus[0]] });
    await db.query({
      text: 'INSERT INTO purchase_quota (customer_id, sku, held) VALUES ($1, $2, 3)',
      values: [order.customerId, skus[0]],
    });
    await runActivity(acts.releaseInventory, { orderId: order.orderId });
    expect(await quota(order.customerId, skus[0]!)).toBe(3); // another order's hold is untouched
    await db.query({ text: 'DELETE FROM purchase_quota WHERE customer_id = $1', values: [order.customerId] });
  });

  it('a release that runs before a late reservation commit (a zombie attempt) makes that commit fail', async () => {
    const { order, skus } = await placed(2);
    let proceed!: () => void;
    const go = new Promise<void>((r) => (proceed = r));
    let arrived!: () => void;
    const reading = new Promise<void>((r) => (arrived = r));
    const logic: ReserveLogic = async () => {
      arrived();
      await go; // the attempt is stuck between its snapshot and its commit
    };
    const slow = createActivities({ db, provider: testProvider(), reserveLogic: logic });
    const zombie = runActivity(slow.reserveInventory, reserveReq(order));
    await reading;
    expect((await runActivity(acts.releaseInventory, { orderId: order.orderId })).released).toEqual([]);
    expect((await orderRow(db, order.orderId))?.status).toBe('COMPENSATING');
    proceed();
    await expect(zombie).rejects.toMatchObject({ type: 'OrderStateConflict', details: [{ status: 'COMPENSATING' }] });
    expect(await reservations(db, order.orderId)).toEqual([]);
    expect((await productRow(db, skus[0]!)).stock).toBe(10);
  });
});

describe('input from outside the client', () => {
  it('an order in a currency the catalogue does not price it in is invalid: exit 2, field named, nothing written', async () => {
    const p = await createProduct(db, { stock: 10, priceCents: 1000 });
    const order = makeOrder([{ sku: p.sku, qty: 1, unitPriceCents: 1000 }], { currency: 'EUR' });
    const file = path.join(mkdtempSync(path.join(os.tmpdir(), 'order-')), 'order.json');
    writeFileSync(file, JSON.stringify(order));
    await expect(loadOrder(file, orderStore(db))).rejects.toMatchObject({
      code: 2,
      message: expect.stringMatching(/currency: the catalogue prices .* in USD, not EUR/),
    });
    await expect(runActivity(acts.createOrder, order)).rejects.toMatchObject({
      type: 'InvalidOrder',
      message: expect.stringMatching(/^currency:/),
    });
    expect(await orderRow(db, order.orderId)).toBeUndefined();
  });

  it('the saga config is checked: zero or unknown knobs are refused, naming the field', () => {
    expect(() => parseSagaConfig({ deadlineMs: 0 })).toThrow(/config\.deadlineMs/);
    expect(() => parseSagaConfig({ inquiryBaseMs: 0 })).toThrow(/config\.inquiryBaseMs/);
    expect(() => parseSagaConfig({ inventoryLanes: 1000 })).toThrow(/config\.inventoryLanes/);
    expect(() => parseSagaConfig({ deadlineMs: '1h' })).toThrow(/config\.deadlineMs/);
    expect(() => parseSagaConfig({ nope: 1 })).toThrow(/config\.nope: unknown field/);
    expect(parseSagaConfig({ deadlineMs: 60_000 }).deadlineMs).toBe(60_000);
  });
});
