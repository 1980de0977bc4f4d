/** The reserve and release activities against a real Postgres. */
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createActivities } from '../activities';
import type { ReserveResult } from '../activities/inventory';
import {
  bothReadFirst,
  createProduct,
  productRow,
  runActivity,
  reservations,
  testPool,
  testProvider,
  uid,
} from './support/helpers';

let db: Pool;
beforeAll(() => {
  db = testPool();
});
afterAll(async () => {
  await db.end();
});

/** Creates the order rows reservations refer to. */
async function orderRows(ids: string[]): Promise<void> {
  for (const id of ids) {
    await db.query({
      text: `INSERT INTO orders (order_id, customer_id, status, currency, total_cents, items, payment_method, workflow_id)
             VALUES ($1, 'c', 'PENDING', 'USD', 1, '[]', 'tok_visa', $2)`,
      values: [id, `order:${id}`],
    });
  }
}

describe('reserveInventory (optimistic CAS)', () => {
  it('two reservations racing on one version: one commits first, the other retries, no update is lost', async () => {
    const p = await createProduct(db, { stock: 100 });
    const [a, b] = [`race-a-${uid()}`, `race-b-${uid()}`];
    await orderRows([a, b]);

    // The business logic between read and write: on its first attempt, each reservation waits until
    // both have read the snapshot, so both hold the same version when they write.
    const seenVersions: string[] = [];
    const logic = bothReadFirst((_req, snapshot) => seenVersions.push(snapshot[0]!.version));
    const acts = createActivities({
      db,
      provider: testProvider(),
      reserveLogic: logic,
      cas: { baseMs: 1, maxMs: 5, jitterMs: 5 },
    });

    const results: ReserveResult[] = await Promise.all([
      runActivity(acts.reserveInventory, { orderId: a, customerId: 'c', items: [{ sku: p.sku, qty: 3 }] }),
      runActivity(acts.reserveInventory, { orderId: b, customerId: 'c', items: [{ sku: p.sku, qty: 4 }] }),
    ]);

    expect(seenVersions).toEqual(['0', '0']); // both read the same version
    const byAttempts = [...results].sort((x, y) => x.attempts - y.attempts);
    expect(byAttempts.map((r) => [r.outcome, r.attempts, r.conflicts])).toEqual([
      ['reserved', 1, 0], // committed first
      ['reserved', 2, 1], // lost the CAS once, re-read, committed
    ]);
    expect(await productRow(db, p.sku)).toEqual({ stock: 93, version: 2 }); // 100 - 3 - 4: nothing lost
    expect((await reservations(db, a))[0]!.status).toBe('HELD');
    expect((await reservations(db, b))[0]!.status).toBe('HELD');
  });

  it('a retried reserve after its commit is a no-op, and release is idempotent', async () => {
    const p = await createProduct(db, { stock: 10 });
    const id = `idem-${uid()}`;
    await orderRows([id]);
    const acts = createActivities({ db, provider: testProvider() });
    const req = { orderId: id, customerId: 'c', items: [{ sku: p.sku, qty: 4 }] };

    expect((await runActivity(acts.reserveInventory, req)).outcome).toBe('reserved');
    expect((await runActivity(acts.reserveInventory, req)).outcome).toBe('already-reserved');
    expect(await productRow(db, p.sku)).toEqual({ stock: 6, version: 1 });

    expect((await runActivity(acts.releaseInventory, { orderId: id })).released).toEqual([{ sku: p.sku, qty: 4 }]);
    expect((await runActivity(acts.releaseInventory, { orderId: id })).released).toEqual([]);
    expect((await productRow(db, p.sku)).stock).toBe(10);
    // A reserve arriving after the release must not take the stock again: the release left the order
    // COMPENSATING (its tombstone), so the reservation is refused with the order's status.
    await expect(runActivity(acts.reserveInventory, req)).rejects.toMatchObject({
      type: 'OrderStateConflict',
      nonRetryable: true,
      details: [{ status: 'COMPENSATING' }],
    });
    expect((await productRow(db, p.sku)).stock).toBe(10);
  });

  it('insufficient stock is a business failure, not retried, and writes nothing', async () => {
    const p = await createProduct(db, { stock: 2 });
    const id = `short-${uid()}`;
    await orderRows([id]);
    const acts = createActivities({ db, provider: testProvider() });
    await expect(
      runActivity(acts.reserveInventory, { orderId: id, customerId: 'c', items: [{ sku: p.sku, qty: 3 }] }),
    ).rejects.toMatchObject({ type: 'InsufficientStock', nonRetryable: true });
    expect(await productRow(db, p.sku)).toEqual({ stock: 2, version: 0 });
    expect(await reservations(db, id)).toEqual([]);
  });

  it('a multi-line reservation is all or nothing', async () => {
    const ok = await createProduct(db, { stock: 5 });
    const short = await createProduct(db, { stock: 1 });
    const id = `multi-${uid()}`;
    await orderRows([id]);
    const acts = createActivities({ db, provider: testProvider() });
    await expect(
      runActivity(acts.reserveInventory, {
        orderId: id,
        customerId: 'c',
        items: [
          { sku: ok.sku, qty: 2 },
          { sku: short.sku, qty: 2 },
        ],
      }),
    ).rejects.toMatchObject({ type: 'InsufficientStock' });
    expect((await productRow(db, ok.sku)).stock).toBe(5);
    expect((await productRow(db, short.sku)).stock).toBe(1);
  });
});
