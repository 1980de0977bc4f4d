/** The invariant checker finds each kind of violation, with its order IDs, and passes a clean saga. */
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkInvariants, RULES } from '../lib/invariants';
import { createProduct, testPool, uid } from './helpers';

let db: Pool;
beforeAll(() => {
  db = testPool();
});
afterAll(async () => {
  await db.end();
});

const DAY = 86_400_000;

async function order(id: string, status: string, opts: { reason?: string; createdAgoMs?: number } = {}): Promise<void> {
  await db.query({
    text: `INSERT INTO orders (order_id, customer_id, status, reason, currency, total_cents, items, payment_method, workflow_id, created_at)
           VALUES ($1, 'c', $2, $3, 'USD', 1000, '[]', 'tok_visa', $4, now() - ($5::bigint * interval '1 millisecond'))`,
    values: [id, status, opts.reason ?? null, `order:${id}`, opts.createdAgoMs ?? 0],
  });
}

async function charge(key: string, reference: string, amount = 1000, status = 'succeeded'): Promise<void> {
  await db.query({
    text: `INSERT INTO provider.charges (idempotency_key, request_hash, amount_cents, currency, payment_method, reference, status)
           VALUES ($1, 'h', $2, 'USD', 'tok_visa', $3, $4)`,
    values: [key, amount, reference, status],
  });
}

async function refund(key: string, chargeKey: string, amount: number): Promise<void> {
  await db.query({
    text: `INSERT INTO provider.refunds (idempotency_key, request_hash, charge_key, amount_cents, status) VALUES ($1, 'h', $2, $3, 'succeeded')`,
    values: [key, chargeKey, amount],
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
    // A consistent completed order: one charge, stock moved to SOLD.
    const p = await createProduct(db, { stock: 10 });
    await order(ids.good, 'COMPLETED');
    await charge(`${ids.good}:charge`, ids.good);
    await db.query({ text: 'UPDATE products SET stock = 9 WHERE sku = $1', values: [p.sku] });
    await db.query({ text: `INSERT INTO reservations (order_id, sku, qty, status) VALUES ($1, $2, 1, 'SOLD')`, values: [ids.good, p.sku] });

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
    await db.query({ text: `INSERT INTO reservations (order_id, sku, qty, status) VALUES ($1, $2, 2, 'HELD')`, values: [ids.held, q.sku] });
    await charge(`${ids.orphan}:charge`, ids.orphan);

    const report = await checkInvariants(db, { deadlineMs: DAY });
    const found = (rule: string, orderId: string): boolean => report.violations.some((v) => v.rule === rule && v.orderIds.includes(orderId));
    const mentions = (orderId: string): boolean => report.violations.some((v) => v.orderIds.includes(orderId));

    expect(found(RULES.doubleCharge, ids.double)).toBe(true);
    expect(found(RULES.refundWithoutCharge, ids.refundFailed)).toBe(true);
    expect(found(RULES.refundAboveCharge, ids.over)).toBe(true);
    expect(found(RULES.failedChargedRefundedOnce, ids.over)).toBe(true);
    expect(found(RULES.failedChargedRefundedOnce, ids.unrefunded)).toBe(true);
    expect(found(RULES.orderDecided, ids.stuck)).toBe(true);
    expect(found(RULES.orderDecided, ids.attention)).toBe(true);
    expect(report.violations.some((v) => v.rule === RULES.stockConserved && v.detail.startsWith(`${lost.sku}:`))).toBe(true);
    expect(found(RULES.noHeldOnFailed, ids.held)).toBe(true);
    expect(found(RULES.orphanCharge, ids.orphan)).toBe(true);
    expect(mentions(ids.good)).toBe(false);
    expect(report.violations.some((v) => v.detail.startsWith(`${p.sku}:`) || v.detail.startsWith(`${q.sku}:`))).toBe(false);

    // Leave the shared test database as it was.
    const all = Object.values(ids);
    await db.query({ text: 'DELETE FROM provider.refunds WHERE charge_key LIKE ANY($1::text[])', values: [all.map((i) => `${i}:%`)] });
    await db.query({ text: 'DELETE FROM provider.charges WHERE reference = ANY($1::text[])', values: [all] });
    await db.query({ text: 'DELETE FROM reservations WHERE order_id = ANY($1::text[])', values: [all] });
    await db.query({ text: 'DELETE FROM orders WHERE order_id = ANY($1::text[])', values: [all] });
    await db.query({ text: 'UPDATE products SET stock = initial_stock WHERE sku = ANY($1::text[])', values: [[p.sku, lost.sku, q.sku]] });
    const after = await checkInvariants(db, { deadlineMs: DAY });
    expect(after.violations.filter((v) => v.orderIds.some((o) => all.includes(o)))).toEqual([]);
  });
});
