/** The invariant checker finds each kind of violation, with its order IDs, and passes a clean saga. */
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkInvariants, RULES, type WorkflowLookup } from '../db/invariants';
import { createProduct, testPool, uid } from './support/helpers';

let db: Pool;
beforeAll(() => {
  db = testPool();
});
afterAll(async () => {
  await db.end();
});

const DAY = 86_400_000;

type Item = { sku: string; qty: number; unitPriceCents: number };

async function order(
  id: string,
  status: string,
  opts: { reason?: string; createdAgoMs?: number; items?: Item[]; customer?: string } = {},
): Promise<void> {
  await db.query({
    text: `INSERT INTO orders (order_id, customer_id, status, reason, currency, total_cents, items, payment_method, workflow_id, created_at)
           VALUES ($1, $6, $2, $3, 'USD', 1000, $7::jsonb, 'tok_visa', $4, now() - ($5::bigint * interval '1 millisecond'))`,
    values: [
      id,
      status,
      opts.reason ?? null,
      `order:${id}`,
      opts.createdAgoMs ?? 0,
      opts.customer ?? 'c',
      JSON.stringify(opts.items ?? []),
    ],
  });
}

async function charge(
  key: string,
  reference: string,
  amount = 1000,
  status = 'succeeded',
  currency = 'USD',
): Promise<void> {
  await db.query({
    text: `INSERT INTO provider.charges (idempotency_key, request_hash, amount_cents, currency, payment_method, reference, status)
           VALUES ($1, 'h', $2, $5, 'tok_visa', $3, $4)`,
    values: [key, amount, reference, status, currency],
  });
}

async function refund(key: string, chargeKey: string, amount: number): Promise<void> {
  await db.query({
    text: `INSERT INTO provider.refunds (idempotency_key, request_hash, charge_key, amount_cents, status) VALUES ($1, 'h', $2, $3, 'succeeded')`,
    values: [key, chargeKey, amount],
  });
}

/** A reservation row; the caller lowers the product's stock by what it plants HELD or SOLD. */
async function reserve(
  orderId: string,
  sku: string,
  qty: number,
  status: 'HELD' | 'RELEASED' | 'SOLD',
  quotaQty = 0,
): Promise<void> {
  await db.query({
    text: 'INSERT INTO reservations (order_id, sku, qty, status, quota_qty) VALUES ($1, $2, $3, $4, $5)',
    values: [orderId, sku, qty, status, quotaQty],
  });
}

/** Removes the test's orders (with their ledger, reservations, shipments and quota) and restocks its SKUs. */
async function cleanUp(orderIds: string[], skus: string[], customers: string[] = []): Promise<void> {
  await db.query({
    text: 'DELETE FROM provider.refunds WHERE charge_key LIKE ANY($1::text[])',
    values: [orderIds.map((i) => `${i}:%`)],
  });
  await db.query({ text: 'DELETE FROM provider.charges WHERE reference = ANY($1::text[])', values: [orderIds] });
  await db.query({ text: 'DELETE FROM reservations WHERE order_id = ANY($1::text[])', values: [orderIds] });
  await db.query({ text: 'DELETE FROM shipments WHERE order_id = ANY($1::text[])', values: [orderIds] });
  await db.query({ text: 'DELETE FROM purchase_quota WHERE customer_id = ANY($1::text[])', values: [customers] });
  await db.query({ text: 'DELETE FROM orders WHERE order_id = ANY($1::text[])', values: [orderIds] });
  await db.query({ text: 'UPDATE products SET stock = initial_stock WHERE sku = ANY($1::text[])', values: [skus] });
}

async function ship(orderId: string): Promise<void> {
  await db.query({
    text: 'INSERT INTO shipments (order_id, tracking_number) VALUES ($1, $2)',
    values: [orderId, `TRK-${orderId}`],
  });
}

describe('invariant checker', () => {
  it('reports each kind of violation with the order involved, and nothing for a consistent order', async () => {
    const id = (name: string): string => `inv-${name}-${uid()}`;
    const ids = {
      good: id('good'),
      double: id('double'),
      refundFailed: id('refund-failed'),
      over: id('over'),
      unrefunded: id('unrefunded'),
      stuck: id('stuck'),
      attention: id('attention'),
      held: id('held'),
      orphan: id('orphan'),
    };
    // A consistent completed order: one line, one charge of its total, stock moved to SOLD, shipped.
    const p = await createProduct(db, { stock: 10 });
    await order(ids.good, 'COMPLETED', { items: [{ sku: p.sku, qty: 1, unitPriceCents: 1000 }] });
    await charge(`${ids.good}:charge`, ids.good);
    await db.query({ text: 'UPDATE products SET stock = 9 WHERE sku = $1', values: [p.sku] });
    await db.query({
      text: `INSERT INTO reservations (order_id, sku, qty, status) VALUES ($1, $2, 1, 'SOLD')`,
      values: [ids.good, p.sku],
    });
    await ship(ids.good);

    await order(ids.double, 'COMPLETED');
    await charge(`${ids.double}:charge`, ids.double);
    await charge(`${ids.double}:charge-again`, ids.double);
    await order(ids.refundFailed, 'FAILED', { reason: 'declined' });
    await charge(`${ids.refundFailed}:charge`, ids.refundFailed, 1000, 'failed');
    await refund(`${ids.refundFailed}:charge:refund`, `${ids.refundFailed}:charge`, 500);
    await order(ids.over, 'FAILED', { reason: 'x' });
    await charge(`${ids.over}:charge`, ids.over, 1000);
    await refund(`${ids.over}:charge:refund`, `${ids.over}:charge`, 800);
    await refund(`${ids.over}:charge:refund-2`, `${ids.over}:charge`, 800);
    await order(ids.unrefunded, 'CANCELLED', { reason: 'customer' });
    await charge(`${ids.unrefunded}:charge`, ids.unrefunded);
    await order(ids.stuck, 'RESERVED', { createdAgoMs: 2 * DAY });
    await order(ids.attention, 'NEEDS_ATTENTION');
    const lost = await createProduct(db, { stock: 10 });
    await db.query({ text: 'UPDATE products SET stock = 7 WHERE sku = $1', values: [lost.sku] }); // 3 units gone
    const q = await createProduct(db, { stock: 10 });
    await order(ids.held, 'FAILED', { reason: 'x' });
    await db.query({ text: 'UPDATE products SET stock = 8 WHERE sku = $1', values: [q.sku] });
    await db.query({
      text: `INSERT INTO reservations (order_id, sku, qty, status) VALUES ($1, $2, 2, 'HELD')`,
      values: [ids.held, q.sku],
    });
    await charge(`${ids.orphan}:charge`, ids.orphan);

    const report = await checkInvariants(db, { deadlineMs: DAY });
    const found = (rule: string, orderId: string): boolean =>
      report.violations.some((v) => v.rule === rule && v.orderIds.includes(orderId));
    const mentions = (orderId: string): boolean => report.violations.some((v) => v.orderIds.includes(orderId));

    expect(found(RULES.doubleCharge, ids.double)).toBe(true);
    expect(found(RULES.refundWithoutCharge, ids.refundFailed)).toBe(true);
    expect(found(RULES.refundAboveCharge, ids.over)).toBe(true);
    expect(found(RULES.failedChargedRefundedOnce, ids.over)).toBe(true);
    expect(found(RULES.failedChargedRefundedOnce, ids.unrefunded)).toBe(true);
    expect(found(RULES.orderDecided, ids.stuck)).toBe(true);
    expect(found(RULES.orderDecided, ids.attention)).toBe(true);
    expect(report.violations.some((v) => v.rule === RULES.stockConserved && v.detail.startsWith(`${lost.sku}:`))).toBe(
      true,
    );
    expect(found(RULES.noHeldOnFailed, ids.held)).toBe(true);
    expect(found(RULES.orphanCharge, ids.orphan)).toBe(true);
    expect(mentions(ids.good)).toBe(false);
    expect(report.violations.some((v) => v.detail.startsWith(`${p.sku}:`) || v.detail.startsWith(`${q.sku}:`))).toBe(
      false,
    );

    // Leave the shared test database as it was.
    const all = Object.values(ids);
    await cleanUp(all, [p.sku, lost.sku, q.sku]);
    const after = await checkInvariants(db, { deadlineMs: DAY });
    expect(after.violations.filter((v) => v.orderIds.some((o) => all.includes(o)))).toEqual([]);
  });
  it('reports shipped-order, shipment, quota and closed-run violations with the orders involved, and nothing for a consistent order', async () => {
    const id = (name: string): string => `inv2-${name}-${uid()}`;
    const cust = (name: string): string => `cust-${name}-${uid()}`;
    const ids = {
      good: id('good'),
      refundedFailed: id('refunded-failed'),
      shippedNoCharge: id('shipped-no-charge'),
      shippedShortCharge: id('shipped-short-charge'),
      shippedOtherCurrency: id('shipped-other-currency'),
      shippedFailedCharge: id('shipped-failed-charge'),
      shippedRefunded: id('shipped-refunded'),
      refundWithShipment: id('refund-with-shipment'),
      shipWithHeld: id('ship-with-held'),
      shipShort: id('ship-short'),
      soldNoShipment: id('sold-no-shipment'),
      completedHeld: id('completed-held'),
      quotaLow: id('quota-low'),
      quotaMissing: id('quota-missing'),
      closedRun: id('closed-run'),
      missingRun: id('missing-run'),
      runningRun: id('running-run'),
      settledRun: id('settled-run'),
    };
    const customers = {
      good: cust('good'),
      quotaLow: cust('quota-low'),
      quotaMissing: cust('quota-missing'),
      quotaLeak: cust('quota-leak'),
    };
    const p = await createProduct(db, { stock: 100 });
    const other = await createProduct(db, { stock: 10 });
    const line = (qty = 1): Item => ({ sku: p.sku, qty, unitPriceCents: 1000 });
    let taken = 0; // units planted HELD or SOLD of p, taken off its stock below
    const take = async (orderId: string, qty: number, status: 'HELD' | 'SOLD', quotaQty = 0): Promise<void> => {
      await reserve(orderId, p.sku, qty, status, quotaQty);
      taken += qty;
    };

    // Consistent: a completed order with one line, SOLD, shipped, charged its total once, its quota held.
    await order(ids.good, 'COMPLETED', { items: [line()], customer: customers.good });
    await charge(`${ids.good}:charge`, ids.good);
    await take(ids.good, 1, 'SOLD', 1);
    await ship(ids.good);
    await db.query({
      text: 'INSERT INTO purchase_quota (customer_id, sku, held) VALUES ($1, $2, 1)',
      values: [customers.good, p.sku],
    });
    // Consistent: a failed order, charged and refunded once in full, its reservation released (with its quota).
    await order(ids.refundedFailed, 'FAILED', { reason: 'shipment rejected', items: [line()] });
    await charge(`${ids.refundedFailed}:charge`, ids.refundedFailed);
    await refund(`${ids.refundedFailed}:charge:refund`, `${ids.refundedFailed}:charge`, 1000);
    await reserve(ids.refundedFailed, p.sku, 1, 'RELEASED', 1);

    // shippedPaidOnce: no charge, a charge below the total, in another currency, a failed charge, a refunded charge.
    await order(ids.shippedNoCharge, 'SHIPPED');
    await order(ids.shippedShortCharge, 'COMPLETED');
    await charge(`${ids.shippedShortCharge}:charge`, ids.shippedShortCharge, 900);
    await order(ids.shippedOtherCurrency, 'SHIPPED');
    await charge(`${ids.shippedOtherCurrency}:charge`, ids.shippedOtherCurrency, 1000, 'succeeded', 'EUR');
    await order(ids.shippedFailedCharge, 'SHIPPED');
    await charge(`${ids.shippedFailedCharge}:charge`, ids.shippedFailedCharge, 1000, 'failed');
    // noRefundOnShipped (and shippedPaidOnce): a refund on a SHIPPED order.
    await order(ids.shippedRefunded, 'SHIPPED');
    await charge(`${ids.shippedRefunded}:charge`, ids.shippedRefunded);
    await refund(`${ids.shippedRefunded}:charge:refund`, `${ids.shippedRefunded}:charge`, 1000);
    // noRefundOnShipped (and shipmentsMatchSold): a refund on an order with a shipment, whatever its status.
    await order(ids.refundWithShipment, 'FAILED', { reason: 'x' });
    await charge(`${ids.refundWithShipment}:charge`, ids.refundWithShipment);
    await refund(`${ids.refundWithShipment}:charge:refund`, `${ids.refundWithShipment}:charge`, 1000);
    await ship(ids.refundWithShipment);

    // shipmentsMatchSold: a shipment while a reservation is still HELD (its line SOLD, so only that
    // condition catches it), a shipment with fewer SOLD than lines, SOLD without a shipment, HELD left
    // on a COMPLETED order.
    await order(ids.shipWithHeld, 'SHIPPED', { items: [line()] });
    await charge(`${ids.shipWithHeld}:charge`, ids.shipWithHeld);
    await take(ids.shipWithHeld, 1, 'SOLD');
    await reserve(ids.shipWithHeld, other.sku, 1, 'HELD');
    await db.query({ text: 'UPDATE products SET stock = initial_stock - 1 WHERE sku = $1', values: [other.sku] });
    await ship(ids.shipWithHeld);
    await order(ids.shipShort, 'SHIPPED', { items: [line(), { sku: other.sku, qty: 1, unitPriceCents: 0 }] });
    await charge(`${ids.shipShort}:charge`, ids.shipShort);
    await take(ids.shipShort, 1, 'SOLD');
    await ship(ids.shipShort);
    await order(ids.soldNoShipment, 'COMPLETED', { items: [line()] });
    await charge(`${ids.soldNoShipment}:charge`, ids.soldNoShipment);
    await take(ids.soldNoShipment, 1, 'SOLD');
    await order(ids.completedHeld, 'COMPLETED', { items: [line()] });
    await charge(`${ids.completedHeld}:charge`, ids.completedHeld);
    await take(ids.completedHeld, 1, 'HELD');

    // quotaMatchesHolds: quota below the hold, a hold with no quota row, a quota row with no hold.
    await order(ids.quotaLow, 'RESERVED', { items: [line(2)], customer: customers.quotaLow });
    await take(ids.quotaLow, 2, 'HELD', 2);
    await db.query({
      text: 'INSERT INTO purchase_quota (customer_id, sku, held) VALUES ($1, $2, 1)',
      values: [customers.quotaLow, p.sku],
    });
    await order(ids.quotaMissing, 'RESERVED', { items: [line()], customer: customers.quotaMissing });
    await take(ids.quotaMissing, 1, 'HELD', 1);
    await db.query({
      text: 'INSERT INTO purchase_quota (customer_id, sku, held) VALUES ($1, $2, 2)',
      values: [customers.quotaLeak, p.sku],
    });

    // closedRunTerminal: open orders whose workflow has completed / is not found, and one still running.
    await order(ids.closedRun, 'CHARGED');
    await charge(`${ids.closedRun}:charge`, ids.closedRun);
    await order(ids.missingRun, 'RESERVED');
    await order(ids.runningRun, 'CHARGED');
    await charge(`${ids.runningRun}:charge`, ids.runningRun);
    // ... and one whose run writes its terminal status after the snapshot, just before it closes: not a finding.
    await order(ids.settledRun, 'COMPENSATING');

    await db.query({ text: 'UPDATE products SET stock = initial_stock - $2 WHERE sku = $1', values: [p.sku, taken] });

    const runs = new Map([
      [`order:${ids.closedRun}`, 'COMPLETED'],
      [`order:${ids.missingRun}`, 'NOT_FOUND'],
      [`order:${ids.runningRun}`, 'RUNNING'],
      [`order:${ids.settledRun}`, 'COMPLETED'],
      [`order:${ids.good}`, 'COMPLETED'],
    ]);
    const asked: string[] = [];
    const workflows: WorkflowLookup = async (workflowIds) => {
      asked.push(...workflowIds);
      if (workflowIds.includes(`order:${ids.settledRun}`)) {
        await db.query({
          text: `UPDATE orders SET status = 'FAILED', reason = 'declined' WHERE order_id = $1`,
          values: [ids.settledRun],
        });
      }
      return new Map(workflowIds.filter((w) => runs.has(w)).map((w) => [w, runs.get(w)!]));
    };
    const report = await checkInvariants(db, { deadlineMs: DAY, workflows });
    const found = (rule: string, orderId: string): boolean =>
      report.violations.some((v) => v.rule === rule && v.orderIds.includes(orderId));
    const mentions = (orderId: string): boolean => report.violations.some((v) => v.orderIds.includes(orderId));

    expect(found(RULES.shippedPaidOnce, ids.shippedNoCharge)).toBe(true);
    expect(found(RULES.shippedPaidOnce, ids.shippedShortCharge)).toBe(true);
    expect(found(RULES.shippedPaidOnce, ids.shippedOtherCurrency)).toBe(true);
    expect(found(RULES.shippedPaidOnce, ids.shippedFailedCharge)).toBe(true);
    expect(found(RULES.shippedPaidOnce, ids.shippedRefunded)).toBe(true);

    expect(found(RULES.noRefundOnShipped, ids.shippedRefunded)).toBe(true);
    expect(found(RULES.noRefundOnShipped, ids.refundWithShipment)).toBe(true);
    expect(found(RULES.noRefundOnShipped, ids.refundedFailed)).toBe(false);

    expect(found(RULES.shipmentsMatchSold, ids.refundWithShipment)).toBe(true);
    expect(found(RULES.shipmentsMatchSold, ids.shipWithHeld)).toBe(true);
    expect(found(RULES.shipmentsMatchSold, ids.shipShort)).toBe(true);
    expect(found(RULES.shipmentsMatchSold, ids.soldNoShipment)).toBe(true);
    expect(found(RULES.shipmentsMatchSold, ids.completedHeld)).toBe(true);

    expect(found(RULES.quotaMatchesHolds, ids.quotaLow)).toBe(true);
    expect(found(RULES.quotaMatchesHolds, ids.quotaMissing)).toBe(true);
    expect(
      report.violations.some(
        (v) => v.rule === RULES.quotaMatchesHolds && v.detail.startsWith(`${customers.quotaLeak}/${p.sku}:`),
      ),
    ).toBe(true);
    expect(report.violations.some((v) => v.detail.startsWith(`${customers.good}/`))).toBe(false);

    expect(asked).toEqual(
      expect.arrayContaining([ids.closedRun, ids.missingRun, ids.runningRun, ids.settledRun].map((o) => `order:${o}`)),
    );
    expect(asked).not.toContain(`order:${ids.good}`);
    expect(found(RULES.closedRunTerminal, ids.closedRun)).toBe(true);
    expect(found(RULES.closedRunTerminal, ids.missingRun)).toBe(true);
    expect(mentions(ids.runningRun)).toBe(false);
    expect(mentions(ids.settledRun)).toBe(false);

    expect(mentions(ids.good)).toBe(false);
    expect(mentions(ids.refundedFailed)).toBe(false);
    expect(
      report.violations.some((v) => v.detail.startsWith(`${p.sku}:`) || v.detail.startsWith(`${other.sku}:`)),
    ).toBe(false);

    // Leave the shared test database as it was.
    const all = Object.values(ids);
    await cleanUp(all, [p.sku, other.sku], Object.values(customers));
    const after = await checkInvariants(db, { deadlineMs: DAY, workflows });
    const skuDetail = (d: string): boolean => d.startsWith(`${p.sku}:`) || d.startsWith(`${other.sku}:`);
    expect(after.violations.filter((v) => v.orderIds.some((o) => all.includes(o)) || skuDetail(v.detail))).toEqual([]);
    expect(after.violations.filter((v) => Object.values(customers).some((c) => v.detail.startsWith(`${c}/`)))).toEqual(
      [],
    );
  });
});

describe('the authorization era: holds, captures and refunds of captures', () => {
  /** An order of the authorization era, inserted as it stands. */
  async function authOrder(id: string, status: string, shipped: boolean): Promise<void> {
    await db.query({
      text: `INSERT INTO orders (order_id, customer_id, status, currency, total_cents, items, payment_method, workflow_id, payment_flow)
             VALUES ($1, 'c', $2, 'USD', 1000, '[]'::jsonb, 'tok_visa', $3, 'authorization')`,
      values: [id, status, `order:${id}`],
    });
    if (shipped)
      await db.query({ text: `INSERT INTO shipments (order_id, tracking_number) VALUES ($1, 'TRK')`, values: [id] });
  }
  async function hold(orderId: string, amount = 1000): Promise<string> {
    const key = `${orderId}:authorize`;
    await db.query({
      text: `INSERT INTO provider.authorizations (idempotency_key, request_hash, amount_cents, currency, payment_method, reference, status, expires_at)
             VALUES ($1, 'h', $2, 'USD', 'tok_visa', $3, 'authorized', now() + interval '7 days')`,
      values: [key, amount, orderId],
    });
    return key;
  }
  async function capture(authKey: string, amount: number, status = 'succeeded'): Promise<string> {
    const key = `${authKey}:capture`;
    await db.query({
      text: `INSERT INTO provider.captures (idempotency_key, request_hash, authorization_key, amount_cents, status, failure_code)
             VALUES ($1, 'h', $2, $3, $4, $5)`,
      values: [key, authKey, amount, status, status === 'failed' ? 'authorization_expired' : null],
    });
    return key;
  }

  it('finds each rule of the authorization era, naming the order, and passes a captured, completed order', async () => {
    const u = uid();
    const ids = {
      captureNoShipment: `${u}-capnoship`,
      openHold: `${u}-openhold`,
      shortCapture: `${u}-short`,
      capturedFailed: `${u}-capfailed`,
      refundNoCapture: `${u}-refnocap`,
      clean: `${u}-clean`,
    };
    await authOrder(ids.captureNoShipment, 'AUTHORIZED', false);
    await capture(await hold(ids.captureNoShipment), 1000);
    await authOrder(ids.openHold, 'CANCELLED', false);
    await hold(ids.openHold);
    await authOrder(ids.shortCapture, 'COMPLETED', true);
    await capture(await hold(ids.shortCapture), 500);
    await authOrder(ids.capturedFailed, 'FAILED', true);
    await capture(await hold(ids.capturedFailed), 1000);
    await authOrder(ids.refundNoCapture, 'NEEDS_ATTENTION', true);
    const failed = await capture(await hold(ids.refundNoCapture), 1000, 'failed');
    await db.query({
      text: `INSERT INTO provider.refunds (idempotency_key, request_hash, capture_key, amount_cents, status) VALUES ($1, 'h', $2, 300, 'succeeded')`,
      values: [`${ids.refundNoCapture}:refund`, failed],
    });
    await authOrder(ids.clean, 'COMPLETED', true);
    await capture(await hold(ids.clean), 1000);
    try {
      const report = await checkInvariants(db, { deadlineMs: DAY });
      const found = (rule: string, orderId: string): boolean =>
        report.violations.some((v) => v.rule === rule && v.orderIds.includes(orderId));
      expect(found(RULES.captureWithoutShipment, ids.captureNoShipment)).toBe(true);
      expect(found(RULES.openHoldOnTerminal, ids.openHold)).toBe(true);
      expect(found(RULES.completedCapturedTotal, ids.shortCapture)).toBe(true);
      expect(found(RULES.nothingCapturedOnFailed, ids.capturedFailed)).toBe(true);
      expect(found(RULES.refundWithoutCapture, ids.refundNoCapture)).toBe(true);
      // A captured, completed order of this era is not judged by the charge era's rules.
      expect(report.violations.filter((v) => v.orderIds.includes(ids.clean))).toEqual([]);
    } finally {
      const all = Object.values(ids);
      await db.query({
        text: 'DELETE FROM provider.refunds WHERE idempotency_key LIKE ANY($1::text[])',
        values: [all.map((i) => `${i}:%`)],
      });
      await db.query({
        text: 'DELETE FROM provider.captures WHERE authorization_key LIKE ANY($1::text[])',
        values: [all.map((i) => `${i}:%`)],
      });
      await db.query({ text: 'DELETE FROM provider.authorizations WHERE reference = ANY($1::text[])', values: [all] });
      await db.query({ text: 'DELETE FROM shipments WHERE order_id = ANY($1::text[])', values: [all] });
      await db.query({ text: 'DELETE FROM orders WHERE order_id = ANY($1::text[])', values: [all] });
    }
  });
});
