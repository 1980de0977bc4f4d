/**
 * The technical cancel as the payment activities use it, on the real Postgres and the real provider:
 * the refund step closes a key never charged (so a late charge request can take no money), the
 * charge under a closed key is a final ChargeClosed, the inquiry reports `closed`; and the worker's
 * startup check of the provider timeout against the charge attempt's.
 */
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createActivities, type OrderActivities } from '../activities';
import { CHARGE_ATTEMPT_TIMEOUT_MS, checkChargeTimeouts, SEND_BUDGET_MS } from '../activities/payments';
import { chargeKeyFor, refundKeyFor } from '../domain/order';
import { createProviderClient } from '../provider/client';
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

const refundReq = (orderId: string) => ({
  orderId,
  chargeKey: chargeKeyFor(orderId),
  idempotencyKey: refundKeyFor(orderId),
});

let db: Pool;
let acts: OrderActivities;
beforeAll(() => {
  db = testPool();
  acts = createActivities({ db, provider: testProvider() });
});
afterAll(async () => {
  await db.end();
});

const closedRows = async (key: string): Promise<number> =>
  (await db.query({ text: 'SELECT 1 FROM provider.closed_keys WHERE idempotency_key = $1', values: [key] })).rowCount ??
  0;
const card = { amountCents: 1500, currency: 'USD', paymentMethod: 'tok_visa' };

describe('the startup check: provider timeout + send budget inside the charge attempt', () => {
  it('accepts a timeout that fits strictly, refuses one that does not, naming the settings', () => {
    expect(CHARGE_ATTEMPT_TIMEOUT_MS).toBe(15_000);
    expect(() => checkChargeTimeouts(10_000)).not.toThrow();
    expect(() => checkChargeTimeouts(CHARGE_ATTEMPT_TIMEOUT_MS - SEND_BUDGET_MS - 1)).not.toThrow();
    // Exactly at the limit is refused: a request sent at the end of the budget could outlive the attempt.
    expect(() => checkChargeTimeouts(CHARGE_ATTEMPT_TIMEOUT_MS - SEND_BUDGET_MS)).toThrow(
      /PROVIDER_TIMEOUT_MS.*12000 ms.*SEND_BUDGET_MS.*CHARGE_ATTEMPT_TIMEOUT_MS, 15000 ms.*at most 11999 ms/,
    );
    expect(() => checkChargeTimeouts(5_000, 8_000)).toThrow(/PROVIDER_TIMEOUT_MS/);
    expect(() => checkChargeTimeouts(Number.NaN)).toThrow(/PROVIDER_TIMEOUT_MS.*positive/);
    expect(() => checkChargeTimeouts(0)).toThrow(/PROVIDER_TIMEOUT_MS.*positive/);
  });

  it('createActivities (what the worker calls at its start) throws for a provider client whose timeout is too long', () => {
    const provider = (timeoutMs: number) =>
      createProviderClient({ baseUrl: 'http://127.0.0.1:9', apiKey: 'k', timeoutMs });
    expect(() => createActivities({ db, provider: provider(60_000) })).toThrow(/PROVIDER_TIMEOUT_MS.*60000 ms/);
    expect(() => createActivities({ db, provider: provider(2_000) })).not.toThrow();
    expect(createProviderClient({ baseUrl: 'http://127.0.0.1:9', apiKey: 'k' }).timeoutMs).toBe(10_000);
  });
});

describe('refundPayment does the technical cancel first', () => {
  it('a key never charged: closed, nothing to refund; the inquiry says closed; the charge is then a final ChargeClosed', async () => {
    const { sku, priceCents } = await createProduct(db, { stock: 5, priceCents: 1000 });
    const order = makeOrder([{ sku, qty: 1, unitPriceCents: priceCents }]);
    await runActivity(acts.createOrder, order);
    await runActivity(acts.reserveInventory, {
      orderId: order.orderId,
      customerId: order.customerId,
      items: order.items,
    });
    expect((await orderRow(db, order.orderId))?.status).toBe('RESERVED');

    expect(await runActivity(acts.refundPayment, refundReq(order.orderId))).toEqual({
      outcome: 'nothing-to-refund',
      chargeStatus: 'closed',
    });
    expect(await closedRows(chargeKeyFor(order.orderId))).toBe(1);
    expect(
      await runActivity(acts.inquireCharge, { orderId: order.orderId, chargeKey: chargeKeyFor(order.orderId) }),
    ).toEqual({ status: 'closed' });
    // Idempotent: the compensation retried answers the same.
    expect(await runActivity(acts.refundPayment, refundReq(order.orderId))).toEqual({
      outcome: 'nothing-to-refund',
      chargeStatus: 'closed',
    });
    await expect(
      runActivity(acts.chargePayment, {
        orderId: order.orderId,
        amountCents: priceCents,
        currency: order.currency,
        paymentMethod: order.paymentMethod,
        idempotencyKey: chargeKeyFor(order.orderId),
      }),
    ).rejects.toMatchObject({
      type: 'ChargeClosed',
      nonRetryable: true,
      details: [{ status: 410, error: 'key_closed' }],
    });
    expect(await ledger(db, order.orderId)).toEqual({ charges: [], refunds: [] });
  });

  it('a succeeded charge is refunded as before; a failed one is nothing to refund; neither key is closed', async () => {
    const provider = testProvider();
    const paid = `t-${uid()}`;
    await provider.charge(chargeKeyFor(paid), { ...card, reference: paid });
    expect(await runActivity(acts.refundPayment, refundReq(paid))).toEqual({
      outcome: 'refunded',
      amountCents: 1500,
      replayed: false,
    });
    expect(await ledger(db, paid)).toEqual({
      charges: [{ status: 'succeeded', amount: 1500 }],
      refunds: [{ amount: 1500 }],
    });

    const declined = `t-${uid()}`;
    await provider.charge(chargeKeyFor(declined), { ...card, paymentMethod: 'tok_declined' });
    expect(await runActivity(acts.refundPayment, refundReq(declined))).toEqual({
      outcome: 'nothing-to-refund',
      chargeStatus: 'failed',
    });
    expect(await closedRows(chargeKeyFor(paid))).toBe(0);
    expect(await closedRows(chargeKeyFor(declined))).toBe(0);
  });

  it('a charge still processing is the ChargeProcessing failure (no blind refund, key not closed)', async () => {
    const orderId = `t-${uid()}`;
    const key = chargeKeyFor(orderId);
    const admin = testAdmin();
    await admin.set({ kind: 'delay', target: 'charges', delayMs: 1_500, count: 1, keyPrefix: key });
    try {
      const charging = testProvider().charge(key, card);
      await new Promise((r) => setTimeout(r, 400));
      await expect(runActivity(acts.refundPayment, refundReq(orderId))).rejects.toMatchObject({
        type: 'ChargeProcessing',
        nonRetryable: true,
      });
      expect(await closedRows(key)).toBe(0);
      expect((await charging).charge.status).toBe('succeeded');
    } finally {
      await admin.clear();
    }
    expect(await runActivity(acts.refundPayment, refundReq(orderId))).toMatchObject({
      outcome: 'refunded',
      amountCents: 1500,
    });
  });

  it('a shipped order is refused before anything is sent: its key is neither closed nor refunded', async () => {
    const orderId = `t-${uid()}`;
    const { sku, priceCents } = await createProduct(db, { stock: 5, priceCents: 1000 });
    const order = makeOrder([{ sku, qty: 1, unitPriceCents: priceCents }], { orderId });
    await runActivity(acts.createOrder, order);
    await runActivity(acts.reserveInventory, { orderId, customerId: order.customerId, items: order.items });
    // A shipment row is enough for the refusal (as the row, the SOLD reservations or the status are).
    await db.query({
      text: `INSERT INTO shipments (order_id, tracking_number) VALUES ($1, $2)`,
      values: [orderId, `TRK-${uid()}`],
    });
    await expect(runActivity(acts.refundPayment, refundReq(orderId))).rejects.toMatchObject({
      type: 'OrderStateConflict',
    });
    expect(await closedRows(chargeKeyFor(orderId))).toBe(0);
    expect(await testProvider().getCharge(chargeKeyFor(orderId))).toBeUndefined();
  });
});
