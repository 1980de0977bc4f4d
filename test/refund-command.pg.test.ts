/**
 * `client.ts refund` on the real Postgres and the real provider: orders brought past their shipment by
 * the real activities (the authorization era captured, the charge era charged), then refunded through
 * the command line as a person would: part of a capture (the ledger, the order row, the event), the
 * same key again (no second refund, the same answer), another key (a second partial refund), what is
 * refused naming the field with nothing written (above what is left, a key already used for another
 * amount, an order not shipped or with nothing captured, an unknown order, bad options), an answer
 * lost or never given (asked again by key; pending, then settled by the same command), and `check`
 * after it all: a refund the command made passes, one it did not make or above the capture does not.
 */
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createActivities, type OrderActivities } from '../activities';
import { runCli } from '../client';
import { RULES, type CheckReport } from '../db/invariants';
import { authorizeKeyFor, captureKeyFor, chargeKeyFor, orderRefundKeyFor, type OrderInput } from '../domain/order';
import { readConfig } from '../ops/config';
import { createProduct, makeOrder, runActivity, testAdmin, testPool, testProvider, uid } from './support/helpers';

let db: Pool;
let acts: OrderActivities;
beforeAll(() => {
  db = testPool();
  acts = createActivities({ db, provider: testProvider() });
});
afterAll(async () => {
  await testAdmin().clear();
  await db.end();
});

/** The command line as a person runs it: the app's role, the provider, no Temporal (refund needs none). */
const cfg = () =>
  readConfig({
    TEMPORAL_ADDRESS: '127.0.0.1:1',
    WORKER_METRICS_URL: 'http://127.0.0.1:1',
    DATABASE_URL: inject('roleUrls').app,
    READER_DATABASE_URL: inject('roleUrls').reader,
    PROVIDER_URL: inject('providerUrl'),
    PROVIDER_API_KEY: inject('providerApiKey'),
    PROVIDER_TIMEOUT_MS: '2000',
  });

async function cli(...argv: string[]): Promise<{ code: number; out: string; err: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runCli(argv, cfg(), { out: (l) => out.push(l), err: (l) => err.push(l) });
  return { code, out: out.join('\n'), err: err.join('\n') };
}

const TOTAL = 2000; // 2 × 10.00 USD

/** An order placed and reserved by the real activities; `era: 'charge'` makes its row one of the charge era. */
async function placed(era: 'authorization' | 'charge' = 'authorization'): Promise<OrderInput> {
  const { sku, priceCents } = await createProduct(db, { stock: 10, priceCents: 1000 });
  const order = makeOrder([{ sku, qty: 2, unitPriceCents: priceCents }]);
  await runActivity(acts.createOrder, order);
  if (era === 'charge')
    await db.query({ text: `UPDATE orders SET payment_flow = 'charge' WHERE order_id = $1`, values: [order.orderId] });
  await runActivity(acts.reserveInventory, {
    orderId: order.orderId,
    customerId: order.customerId,
    items: order.items,
  });
  return order;
}

const money = (order: OrderInput) => ({
  orderId: order.orderId,
  amountCents: TOTAL,
  currency: order.currency,
  paymentMethod: order.paymentMethod,
});

/** Authorization era, held: AUTHORIZED (before the shipment). */
async function authorized(): Promise<OrderInput> {
  const order = await placed();
  await runActivity(acts.authorizePayment, { ...money(order), idempotencyKey: authorizeKeyFor(order.orderId) });
  return order;
}

/** Authorization era, shipped and not captured: SHIPPED. */
async function shippedUncaptured(): Promise<OrderInput> {
  const order = await authorized();
  await runActivity(acts.createShipment, { orderId: order.orderId, byOperator: false });
  return order;
}

/** Authorization era, shipped, captured and confirmed: COMPLETED. */
async function completed(): Promise<OrderInput> {
  const order = await shippedUncaptured();
  await runActivity(acts.capturePayment, {
    orderId: order.orderId,
    authorizationKey: authorizeKeyFor(order.orderId),
    captureKey: captureKeyFor(order.orderId),
  });
  await runActivity(acts.sendConfirmation, { orderId: order.orderId, trackingNumber: 'x' });
  return order;
}

/** Charge era, charged, shipped and confirmed: COMPLETED. */
async function chargedCompleted(): Promise<OrderInput> {
  const order = await placed('charge');
  await runActivity(acts.chargePayment, {
    ...money(order),
    idempotencyKey: chargeKeyFor(order.orderId),
    markCharged: true,
  });
  await runActivity(acts.createShipment, { orderId: order.orderId, byOperator: false });
  await runActivity(acts.sendConfirmation, { orderId: order.orderId, trackingNumber: 'x' });
  return order;
}

/** The provider's refunds of the order (of its charge or its captures), oldest first. */
async function ledgerRefunds(orderId: string): Promise<{ key: string; of: string; amount: number }[]> {
  const { rows } = await db.query<{ idempotency_key: string; of: string; amount_cents: string }>({
    text: `SELECT idempotency_key, COALESCE(charge_key, capture_key) AS of, amount_cents FROM provider.refunds
            WHERE idempotency_key LIKE $1 ORDER BY created_at, idempotency_key`,
    values: [`${orderId}:%`],
  });
  return rows.map((r) => ({ key: r.idempotency_key, of: r.of, amount: Number(r.amount_cents) }));
}

/** What the order row says of its money and status. */
async function row(orderId: string) {
  const { rows } = await db.query<{
    status: string;
    charged_cents: string;
    captured_cents: string;
    refunded_cents: string;
  }>({
    text: 'SELECT status, charged_cents, captured_cents, refunded_cents FROM orders WHERE order_id = $1',
    values: [orderId],
  });
  const r = rows[0]!;
  return {
    status: r.status,
    charged: Number(r.charged_cents),
    captured: Number(r.captured_cents),
    refunded: Number(r.refunded_cents),
  };
}

/** The refunds the command recorded for the order: key, amount, status. */
async function recorded(orderId: string): Promise<{ key: string; amount: number; status: string }[]> {
  const { rows } = await db.query<{ refund_key: string; amount_cents: string; status: string }>({
    text: 'SELECT refund_key, amount_cents, status FROM order_refunds WHERE order_id = $1 ORDER BY created_at',
    values: [orderId],
  });
  return rows.map((r) => ({ key: r.refund_key, amount: Number(r.amount_cents), status: r.status }));
}

/** The order's refund events: their data's refund key, amount and refunded total. */
async function refundEvents(orderId: string) {
  const { rows } = await db.query<{ data: { refundKey?: string; amountCents?: number; refundedCents: number } }>({
    text: `SELECT data FROM order_events WHERE order_id = $1 AND kind = 'order.refunded' ORDER BY seq`,
    values: [orderId],
  });
  return rows.map((r) => ({
    refundKey: r.data.refundKey,
    amountCents: r.data.amountCents,
    refundedCents: r.data.refundedCents,
  }));
}

/** `client.ts check --data-only --json`: the report's violations that name these orders, as lines. */
async function checkOf(orderIds: string[]): Promise<string[]> {
  const r = await cli('check', '--data-only', '--json');
  const report = JSON.parse(r.out) as CheckReport;
  return report.violations
    .filter((v) => v.orderIds.some((o) => orderIds.includes(o)))
    .map((v) => `${v.rule}: ${v.detail} [${v.orderIds.join(', ')}]`);
}

describe('client.ts refund: part of a capture, by its own key', () => {
  it('refunds part of the capture: the ledger, the order row, its event; the same key again refunds nothing and gives the same answer', async () => {
    const order = await completed();
    const { orderId } = order;
    const key = orderRefundKeyFor(orderId, 'rma-1');

    const first = await cli('refund', orderId, '--amount', '500', '--key', 'rma-1', '--reason', 'one mug returned');
    expect(first.code, first.err).toBe(0);
    expect(first.out).toBe(
      `order ${orderId}: refunded 5.00 USD of capture ${captureKeyFor(orderId)} (refund ${key}); 5.00 USD of 20.00 USD refunded so far`,
    );
    expect(await ledgerRefunds(orderId)).toEqual([{ key, of: captureKeyFor(orderId), amount: 500 }]);
    expect(await row(orderId)).toEqual({ status: 'COMPLETED', charged: 0, captured: TOTAL, refunded: 500 });
    expect(await recorded(orderId)).toEqual([{ key, amount: 500, status: 'succeeded' }]);
    expect(await refundEvents(orderId)).toEqual([{ refundKey: key, amountCents: 500, refundedCents: 500 }]);
    const { rows } = await db.query<{ reason: string }>({
      text: 'SELECT reason FROM order_refunds WHERE refund_key = $1',
      values: [key],
    });
    expect(rows[0]?.reason).toBe('one mug returned');

    // The same command again: the same refund, not a second one.
    const again = await cli('refund', orderId, '--amount', '500', '--key', 'rma-1');
    expect(again.code, again.err).toBe(0);
    expect(again.out).toMatch(
      new RegExp(`refund ${key} of 5\\.00 USD .*was already made; the same key refunds nothing again`),
    );
    const json = await cli('refund', orderId, '--amount', '500', '--key', 'rma-1', '--json');
    expect(json.code).toBe(0);
    expect(JSON.parse(json.out)).toEqual({
      orderId,
      refundKey: key,
      amountCents: 500,
      currency: 'USD',
      status: 'succeeded',
      alreadyMade: true,
      of: { kind: 'capture', key: captureKeyFor(orderId) },
      refundedCents: 500,
      takenCents: TOTAL,
    });
    expect(await ledgerRefunds(orderId)).toHaveLength(1);
    expect((await row(orderId)).refunded).toBe(500);
    expect(await refundEvents(orderId)).toHaveLength(1);

    // Another refund needs another key; both are partial, and the row sums them.
    const second = await cli('refund', orderId, '--amount', '700', '--key', 'rma-2', '--json');
    expect(second.code, second.err).toBe(0);
    expect(JSON.parse(second.out)).toMatchObject({ alreadyMade: false, amountCents: 700, refundedCents: 1200 });
    expect((await ledgerRefunds(orderId)).map((r) => r.amount)).toEqual([500, 700]);
    expect((await row(orderId)).refunded).toBe(1200);
    expect((await refundEvents(orderId)).map((e) => e.refundedCents)).toEqual([500, 1200]);

    // The rest, exactly: allowed; then nothing is left.
    expect((await cli('refund', orderId, '--amount', '800', '--key', 'rma-3')).code).toBe(0);
    expect((await row(orderId)).refunded).toBe(TOTAL);
    const none = await cli('refund', orderId, '--amount', '1', '--key', 'rma-4');
    expect(none.code).toBe(1);
    expect(none.err).toMatch(/--amount: 0\.01 USD is more than what is left .* 0\.00 USD left/);

    expect(await checkOf([orderId])).toEqual([]);
  });

  it('above what is left is refused naming --amount, and a key used for another amount naming --key; nothing is written', async () => {
    const { orderId } = await completed();
    expect((await cli('refund', orderId, '--amount', '1500', '--key', 'a')).code).toBe(0);
    const over = await cli('refund', orderId, '--amount', '501', '--key', 'b');
    expect(over).toMatchObject({ code: 1, out: '' });
    expect(over.err).toBe(
      `refund refused: --amount: 5.01 USD is more than what is left to refund of order ${orderId}: ` +
        `20.00 USD taken under ${captureKeyFor(orderId)}, 15.00 USD refunded already, 5.00 USD left`,
    );
    const reused = await cli('refund', orderId, '--amount', '400', '--key', 'a');
    expect(reused.code).toBe(1);
    expect(reused.err).toMatch(
      new RegExp(
        `^refund refused: --key: a is refund ${orderRefundKeyFor(orderId, 'a')} of 15\\.00 USD \\(succeeded\\); .*another --key`,
      ),
    );
    expect(await ledgerRefunds(orderId)).toEqual([
      { key: orderRefundKeyFor(orderId, 'a'), of: captureKeyFor(orderId), amount: 1500 },
    ]);
    expect(await recorded(orderId)).toEqual([
      { key: orderRefundKeyFor(orderId, 'a'), amount: 1500, status: 'succeeded' },
    ]);
    expect((await row(orderId)).refunded).toBe(1500);
  });

  it('an order waiting for a person after its capture (NEEDS_ATTENTION from CAPTURED) may be refunded', async () => {
    const order = await shippedUncaptured();
    const { orderId } = order;
    await runActivity(acts.capturePayment, {
      orderId,
      authorizationKey: authorizeKeyFor(orderId),
      captureKey: captureKeyFor(orderId),
    });
    await runActivity(acts.setOrderStatus, {
      orderId,
      status: 'NEEDS_ATTENTION',
      reason: 'the confirmation failed for good',
    });
    const r = await cli('refund', orderId, '--amount', '2000', '--key', 'all');
    expect(r.code, r.err).toBe(0);
    expect(await row(orderId)).toEqual({ status: 'NEEDS_ATTENTION', charged: 0, captured: TOTAL, refunded: TOTAL });
    expect(await checkOf([orderId])).toEqual([]);
  });

  it('an order not shipped, shipped with nothing captured, or unknown is refused naming orderId; nothing is written', async () => {
    const held = await authorized();
    const notShipped = await cli('refund', held.orderId, '--amount', '100', '--key', 'k');
    expect(notShipped.code).toBe(1);
    expect(notShipped.err).toMatch(
      new RegExp(
        `^refund refused: orderId: order ${held.orderId} is AUTHORIZED: a refund is for an order past its shipment.*client\\.ts cancel`,
      ),
    );

    const uncaptured = await shippedUncaptured();
    const nothing = await cli('refund', uncaptured.orderId, '--amount', '100', '--key', 'k');
    expect(nothing.code).toBe(1);
    expect(nothing.err).toMatch(
      new RegExp(`^refund refused: orderId: order ${uncaptured.orderId} has no money to refund: nothing was captured`),
    );

    const unknown = `t-${uid()}`;
    expect(await cli('refund', unknown, '--amount', '100', '--key', 'k')).toMatchObject({
      code: 1,
      err: `refund refused: orderId: no order ${unknown}`,
    });

    for (const id of [held.orderId, uncaptured.orderId]) {
      expect(await ledgerRefunds(id)).toEqual([]);
      expect(await recorded(id)).toEqual([]);
      expect((await row(id)).refunded).toBe(0);
    }
  });

  it.each([
    [
      ['--amount', '0', '--key', 'k'],
      /option '--amount <cents>' argument '0' is invalid\. Expected a whole number of cents/,
    ],
    [['--amount', '1.5', '--key', 'k'], /--amount <cents>' argument '1\.5' is invalid/],
    [['--amount', '-5', '--key', 'k'], /--amount <cents>' argument '-5' is invalid/],
    [['--amount', 'ten', '--key', 'k'], /--amount <cents>' argument 'ten' is invalid/],
    [['--key', 'k'], /required option '--amount <cents>' not specified/],
    [['--amount', '100'], /required option '--key <key>' not specified/],
    [['--amount', '100', '--key', 'two words'], /--key <key>' argument 'two words' is invalid\. Expected a refund key/],
    [['--amount', '100', '--key', 'k', '--reason', 'x'.repeat(201)], /invalid input: --reason: must be from 1 to 200/],
  ])('%j: exit 2, naming the option, nothing written', async (args, named) => {
    const { orderId } = await completed();
    const r = await cli('refund', orderId, ...args);
    expect(r.code, r.err).toBe(2);
    expect(r.err).toMatch(named);
    expect(r.out).toBe('');
    expect(await recorded(orderId)).toEqual([]);
    expect(await ledgerRefunds(orderId)).toEqual([]);
  });
});

describe('client.ts refund: an answer lost or never given', () => {
  it('a lost answer is asked again with the same key: one refund, reported made', async () => {
    const { orderId } = await completed();
    const lost = async () => (await testAdmin().list()).applied.refunds['lose-response-after-commit'];
    const before = await lost();
    await testAdmin().set({
      kind: 'lose-response-after-commit',
      target: 'refunds',
      count: 1,
      keyPrefix: `${orderId}:refund:`,
    });
    const r = await cli('refund', orderId, '--amount', '300', '--key', 'lost');
    expect(r.code, r.err).toBe(0);
    expect(r.out).toMatch(/refunded 3\.00 USD of capture/);
    expect(await lost()).toBe(before + 1); // the first answer was lost; the same key again told it
    expect(await ledgerRefunds(orderId)).toHaveLength(1);
    expect(await recorded(orderId)).toEqual([
      { key: orderRefundKeyFor(orderId, 'lost'), amount: 300, status: 'succeeded' },
    ]);
    expect((await row(orderId)).refunded).toBe(300);
  });

  it('no answer within --wait: pending, not a failure; no other refund meanwhile; the same command settles it', async () => {
    const { orderId } = await completed();
    const key = orderRefundKeyFor(orderId, 'slow');
    await testAdmin().set({ kind: 'outage', target: 'refunds', count: 1000, keyPrefix: `${orderId}:refund:` });
    try {
      const r = await cli('refund', orderId, '--amount', '400', '--key', 'slow', '--wait', '1');
      expect(r.code).toBe(1);
      expect(r.err).toBe('');
      expect(r.out).toMatch(
        new RegExp(
          `refund ${key} of 4\\.00 USD is not known yet: the provider did not answer within 1 s .*recorded as pending.*run the same command again`,
        ),
      );
      expect(r.out).not.toMatch(/fail/i);
      expect(await recorded(orderId)).toEqual([{ key, amount: 400, status: 'pending' }]);
      expect(await ledgerRefunds(orderId)).toEqual([]);

      const other = await cli('refund', orderId, '--amount', '100', '--key', 'other');
      expect(other.code).toBe(1);
      expect(other.err).toMatch(
        new RegExp(
          `refund ${key} of 4\\.00 USD whose answer is not known yet: .*client\\.ts refund ${orderId} --amount 400 --key slow`,
        ),
      );
    } finally {
      await testAdmin().clear();
    }
    const settled = await cli('refund', orderId, '--amount', '400', '--key', 'slow');
    expect(settled.code, settled.err).toBe(0);
    expect(settled.out).toMatch(/refunded 4\.00 USD of capture/);
    expect(await recorded(orderId)).toEqual([{ key, amount: 400, status: 'succeeded' }]);
    expect(await ledgerRefunds(orderId)).toEqual([{ key, of: captureKeyFor(orderId), amount: 400 }]);
    expect((await row(orderId)).refunded).toBe(400);
    expect((await cli('refund', orderId, '--amount', '100', '--key', 'other')).code).toBe(0);
    expect(await checkOf([orderId])).toEqual([]);
  });
});

describe('client.ts refund and the invariant checker', () => {
  it('a charge-era order refunded by the command passes check; a refund the command did not make, or above the capture, does not', async () => {
    const charged = await chargedCompleted();
    const r = await cli('refund', charged.orderId, '--amount', '250', '--key', 'goodwill');
    expect(r.code, r.err).toBe(0);
    expect(r.out).toMatch(new RegExp(`refunded 2\\.50 USD of charge ${chargeKeyFor(charged.orderId)}`));
    expect(await ledgerRefunds(charged.orderId)).toEqual([
      { key: orderRefundKeyFor(charged.orderId, 'goodwill'), of: chargeKeyFor(charged.orderId), amount: 250 },
    ]);
    expect(await row(charged.orderId)).toEqual({ status: 'COMPLETED', charged: TOTAL, captured: 0, refunded: 250 });

    const captured = await completed();
    expect((await cli('refund', captured.orderId, '--amount', '2000', '--key', 'all')).code).toBe(0);
    expect(await checkOf([charged.orderId, captured.orderId])).toEqual([]);

    // Refunds at the provider the command did not make: one of a charge, one of a capture.
    const byHand = await chargedCompleted();
    await testProvider().refund(`${byHand.orderId}:by-hand`, {
      chargeKey: chargeKeyFor(byHand.orderId),
      amountCents: 100,
    });
    const byHandCapture = await completed();
    await testProvider().refund(`${byHandCapture.orderId}:by-hand`, {
      captureKey: captureKeyFor(byHandCapture.orderId),
      amountCents: 100,
    });
    // Recorded by the command, but above the capture (the provider refuses it: written behind its back).
    const above = await completed();
    expect((await cli('refund', above.orderId, '--amount', '1000', '--key', 'half')).code).toBe(0);
    await db.query({
      text: `UPDATE provider.refunds SET amount_cents = 2500 WHERE idempotency_key = $1`,
      values: [orderRefundKeyFor(above.orderId, 'half')],
    });
    try {
      const found = await checkOf([byHand.orderId, byHandCapture.orderId, above.orderId]);
      const has = (rule: string, orderId: string): boolean =>
        found.some((l) => l.startsWith(`${rule}: `) && l.includes(orderId));
      expect(has(RULES.noRefundOnShipped, byHand.orderId)).toBe(true);
      expect(has(RULES.shippedPaidOnce, byHand.orderId)).toBe(true);
      expect(has(RULES.noRefundOnShipped, byHandCapture.orderId)).toBe(true);
      expect(has(RULES.refundWithoutCapture, above.orderId)).toBe(true);
      expect(has(RULES.refundsRecorded, above.orderId)).toBe(true);
    } finally {
      // Leave the shared test database clean for the files after this one.
      await db.query({
        text: 'DELETE FROM provider.refunds WHERE idempotency_key = ANY($1::text[])',
        values: [[`${byHand.orderId}:by-hand`, `${byHandCapture.orderId}:by-hand`]],
      });
      await db.query({
        text: `UPDATE provider.refunds SET amount_cents = 1000 WHERE idempotency_key = $1`,
        values: [orderRefundKeyFor(above.orderId, 'half')],
      });
    }
    expect(await checkOf([byHand.orderId, byHandCapture.orderId, above.orderId])).toEqual([]);
  });
});
