/**
 * The chaos soak's per-order audit (scripts/chaos/audit.ts) against the real Postgres, for the orders
 * that have no row: a placed order must have one, unless a person stopped its run before it wrote it;
 * then nothing may have moved for it (here: a hold asked of the provider).
 */
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auditOrders } from '../scripts/chaos/audit';
import type { ChaosOrder } from '../scripts/chaos/orders';
import { testPool, uid } from './support/helpers';

let db: Pool;
beforeAll(() => {
  db = testPool();
});
afterAll(async () => {
  await db?.end();
});

const placed = (orderId: string): ChaosOrder => ({
  input: {
    orderId,
    customerId: 'cust-audit',
    currency: 'USD',
    paymentMethod: 'tok_visa',
    items: [{ sku: 'SKU-AUDIT', qty: 1, unitPriceCents: 990 }],
  },
  meddle: 'terminate',
  when: 0,
  viaApi: false,
});

describe('the chaos audit of orders with no row', () => {
  it('flags a placed order with no row, unless stopped before its row; then anything that moved', async () => {
    const id = (k: string): string => `audit-${k}-${uid()}`;
    const [lost, stopped, stoppedButHeld] = [id('lost'), id('stopped'), id('held')];
    await db.query({
      text: `INSERT INTO provider.authorizations (idempotency_key, request_hash, amount_cents, currency, payment_method, reference, status, expires_at)
             VALUES ($1, 'h', 990, 'USD', 'tok_visa', $2, 'authorized', now() + interval '1 hour')`,
      values: [`${stoppedButHeld}:authorize`, stoppedButHeld],
    });
    const { violations } = await auditOrders(db, [lost, stopped, stoppedButHeld].map(placed), {
      cancelAccepted: new Set(),
      apiRefused: new Set(),
      stoppedBeforeRow: new Set([stopped, stoppedButHeld]),
    });
    expect(violations.map((v) => [v.rule, v.orderIds, v.detail])).toEqual([
      ['every placed order has its row', [lost], 'no order row (every chaos order is valid)'],
      ['an order stopped before its row moved nothing', [stoppedButHeld], 'no order row, yet a hold asked for'],
    ]);
  });
});
