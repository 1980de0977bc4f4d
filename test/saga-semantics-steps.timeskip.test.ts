/**
 * Saga semantics under failure (the steps and their compensations), on the real Java time-skipping
 * server, with real activities, a real Postgres and the real provider process (its fault switches set
 * over its admin API). Faults that the provider cannot produce are injected by test-only activity
 * implementations wrapping the real ones (test/support/saga-semantics.ts). Every test checks the order
 * row, the stock and the provider's ledger, not only the result. The file ends by replaying every
 * history it produced.
 */
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { describe, expect, it } from 'vitest';
import { checkInvariants } from '../db/invariants';
import { stateQuery } from '../workflows';
import { NeedsAttentionKey, OrderStatusKey } from '../workflows/search-attributes';
import { RequestRefusedError } from '../orders/saga-requests';
import { ledger, orderRow, productRow, reservations } from './support/helpers';
import {
  admin,
  causeMessages,
  db,
  faultyActivities,
  HOUR,
  newOrder,
  once,
  permanent,
  replaysItsHistories,
  resolve,
  skipUntil,
  transient,
  useSagaSemantics,
  waitUntil,
  withSaga,
  type Fault,
  type Name,
} from './support/saga-semantics';

// The charge era's semantics: orders whose rows an older build wrote, carried by this build's charge path.
useSagaSemantics({ era: 'charge' });

describe('forward steps failing once, transiently', () => {
  it.each<Name>(['createOrder', 'reserveInventory', 'chargePayment', 'createShipment', 'sendConfirmation'])(
    '%s fails once: the saga completes with exactly one charge',
    async (step) => {
      const { order, sku, stock, total } = await newOrder();
      const { activities, counts } = faultyActivities({ [step]: once(() => transient(step)) });
      const result = await withSaga(`transient-${step}`, order, activities, (r) => r.result());
      expect(result.status).toBe('COMPLETED');
      expect(counts.get(step)).toBe(2);
      expect(await orderRow(db, order.orderId)).toEqual({ status: 'COMPLETED', reason: null });
      expect((await productRow(db, sku)).stock).toBe(stock - 2);
      expect(await ledger(db, order.orderId)).toEqual({
        charges: [{ status: 'succeeded', amount: total }],
        refunds: [],
      });
    },
  );

  it('a 5xx before commit at the provider: retried with the same key, exactly one charge', async () => {
    const { order, total } = await newOrder();
    await admin.set({ kind: 'fail-before-commit', target: 'charges', count: 2, keyPrefix: `${order.orderId}:` });
    const { activities, counts } = faultyActivities({});
    const result = await withSaga('5xx-before-commit', order, activities, (r) => r.result());
    expect(result.status).toBe('COMPLETED');
    expect(counts.get('chargePayment')).toBe(3);
    expect(await ledger(db, order.orderId)).toEqual({ charges: [{ status: 'succeeded', amount: total }], refunds: [] });
  });
});

describe('steps before the pivot failing permanently: backward recovery, LIFO', () => {
  it('createOrder fails permanently: the saga fails with the cause, writes nothing and compensates nothing', async () => {
    const { order, sku, stock } = await newOrder();
    const { activities, calls } = faultyActivities({ createOrder: () => permanent('createOrder') });
    const failure = await withSaga('permanent-createOrder', order, activities, (r) =>
      r.result().then(
        () => undefined,
        (e: Error) => e,
      ),
    );
    expect(causeMessages(failure)).toMatch(/injected permanent failure of createOrder/);
    expect(calls).toEqual(['createOrder']);
    expect(await orderRow(db, order.orderId)).toBeUndefined();
    expect((await productRow(db, sku)).stock).toBe(stock);
    expect(await ledger(db, order.orderId)).toEqual({ charges: [], refunds: [] });
  });

  // The refund is registered before the reservation (a run cannot know whether another run charged):
  // when nothing was charged it asks the provider and refunds nothing.
  const cases: [Name, string[]][] = [
    ['reserveInventory', ['refundPayment', 'releaseInventory']],
    ['chargePayment', ['refundPayment', 'releaseInventory']],
  ];
  it.each(cases)(
    '%s fails permanently: compensations %j run, stock and ledger back to their start',
    async (step, expected) => {
      const { order, sku, stock } = await newOrder();
      const { activities, calls } = faultyActivities({ [step]: () => permanent(step) });
      const { result, state } = await withSaga(`permanent-${step}`, order, activities, async (r) => ({
        result: await r.result(),
        state: await r.handle.query(stateQuery),
      }));
      expect(result.status).toBe('FAILED');
      expect(result.reason).toMatch(step === 'chargePayment' ? /PaymentUnavailable/ : /InjectedPermanent/);
      expect(state.compensationsRun).toEqual(expected);
      expect(calls.filter((c) => c === 'releaseInventory' || c === 'refundPayment')).toEqual(expected);
      expect(await orderRow(db, order.orderId)).toEqual({ status: 'FAILED', reason: result.reason });
      expect((await productRow(db, sku)).stock).toBe(stock);
      expect(await ledger(db, order.orderId)).toEqual({ charges: [], refunds: [] });
      expect(calls).not.toContain('createShipment');
    },
  );

  it('the shipment is rejected (the pivot did not happen): refund then release, exactly one refund', async () => {
    const { order, sku, stock, total } = await newOrder();
    const { activities, calls } = faultyActivities({
      createShipment: () => ApplicationFailure.nonRetryable('no carrier serves this address', 'ShipmentRejected'),
    });
    const result = await withSaga('shipment-rejected', order, activities, (r) => r.result());
    expect(result.status).toBe('FAILED');
    expect(result.reason).toMatch(/ShipmentRejected/);
    expect(calls.filter((c) => c === 'releaseInventory' || c === 'refundPayment')).toEqual([
      'refundPayment',
      'releaseInventory',
    ]);
    expect((await productRow(db, sku)).stock).toBe(stock);
    expect(await ledger(db, order.orderId)).toEqual({
      charges: [{ status: 'succeeded', amount: total }],
      refunds: [{ amount: total }],
    });
  });
});

describe('compensations failing', () => {
  const rejectShipment = (): Error => ApplicationFailure.nonRetryable('rejected', 'ShipmentRejected');

  it.each<Name>(['refundPayment', 'releaseInventory'])(
    '%s fails once, transiently: retried, and the saga still undoes everything',
    async (comp) => {
      const { order, sku, stock, total } = await newOrder();
      const { activities, counts } = faultyActivities({
        createShipment: rejectShipment,
        [comp]: once(() => transient(comp)),
      });
      const result = await withSaga(`comp-transient-${comp}`, order, activities, (r) => r.result());
      expect(result.status).toBe('FAILED');
      expect(counts.get(comp)).toBe(2);
      expect((await productRow(db, sku)).stock).toBe(stock);
      expect(await ledger(db, order.orderId)).toEqual({
        charges: [{ status: 'succeeded', amount: total }],
        refunds: [{ amount: total }],
      });
    },
  );

  it.each<Name>(['refundPayment', 'releaseInventory'])(
    '%s fails permanently: NEEDS_ATTENTION with the reason, then resolve retry finishes it',
    async (comp) => {
      const { order, sku, stock, total } = await newOrder();
      const { activities } = faultyActivities({ createShipment: rejectShipment, [comp]: once(() => permanent(comp)) });
      const result = await withSaga(`comp-permanent-${comp}`, order, activities, async ({ handle, result }) => {
        const s = await waitUntil(handle, (st) => st.status === 'NEEDS_ATTENTION');
        expect(s.awaiting).toBe('compensation');
        expect(s.reason).toMatch(new RegExp(`compensation ${comp} failed`));
        const row = await orderRow(db, order.orderId);
        expect(row?.status).toBe('NEEDS_ATTENTION');
        expect(row?.reason).toMatch(new RegExp(`compensation ${comp} failed`));
        const sa = (await handle.describe()).typedSearchAttributes;
        expect(sa.get(NeedsAttentionKey)).toBe(true);
        expect(sa.get(OrderStatusKey)).toBe('NEEDS_ATTENTION');
        // A wrong action is refused by the validator, and changes nothing.
        const refused = await resolve(handle, { action: 'charge-succeeded' }).catch((e: unknown) => e);
        expect(refused).toBeInstanceOf(RequestRefusedError);
        expect((refused as RequestRefusedError).message).toMatch(/action must be one of retry, mark-resolved/);
        expect((await handle.query(stateQuery)).awaiting).toBe('compensation');
        await resolve(handle, { action: 'retry', note: 'provider fixed' });
        return result();
      });
      expect(result.status).toBe('FAILED');
      expect((await orderRow(db, order.orderId))?.status).toBe('FAILED');
      expect((await productRow(db, sku)).stock).toBe(stock);
      expect(await ledger(db, order.orderId)).toEqual({
        charges: [{ status: 'succeeded', amount: total }],
        refunds: [{ amount: total }],
      });
    },
  );
});

describe("an operator's word is checked against the ledger", () => {
  it('mark-resolved of a refund the provider never made is refused with the figures; settled-elsewhere with a reference closes it, and the checker names it', async () => {
    const { order, sku, stock, total } = await newOrder();
    const { activities } = faultyActivities({
      createShipment: () => ApplicationFailure.nonRetryable('rejected', 'ShipmentRejected'),
      refundPayment: once(() => permanent('refundPayment')),
    });
    const result = await withSaga('refund-settled-elsewhere', order, activities, async ({ handle, result }) => {
      await waitUntil(handle, (st) => st.awaiting === 'compensation');
      const kept = await resolve(handle, { action: 'mark-resolved' }).catch((e: unknown) => e);
      expect(kept).toBeInstanceOf(RequestRefusedError);
      expect((kept as Error).message).toMatch(
        /charged .* 0\.00 USD refunded: mark-resolved would close .* customer's money kept/,
      );
      const noReference = await resolve(handle, { action: 'settled-elsewhere' }).catch((e: unknown) => e);
      expect((noReference as Error).message).toMatch(/^reference: /);
      expect((await handle.query(stateQuery)).awaiting).toBe('compensation');
      await resolve(handle, { action: 'settled-elsewhere', reference: 'wire-4711', note: 'refunded by bank transfer' });
      return result();
    });
    expect(result.status).toBe('FAILED');
    // Each word the operator gave is recorded with the answer it got.
    const words = await db.query<{ action: string; outcome: string; reference: string | null }>({
      text: `SELECT action, outcome, reference FROM order_requests WHERE order_id = $1 AND kind = 'resolve' ORDER BY at`,
      values: [order.orderId],
    });
    expect(words.rows).toEqual([
      { action: 'mark-resolved', outcome: 'refused', reference: null },
      { action: 'settled-elsewhere', outcome: 'accepted', reference: 'wire-4711' },
    ]);
    // The money went back outside the provider: its ledger shows the charge alone; the stock is back.
    expect(await ledger(db, order.orderId)).toEqual({ charges: [{ status: 'succeeded', amount: total }], refunds: [] });
    expect((await productRow(db, sku)).stock).toBe(stock);
    const report = await checkInvariants(db, { deadlineMs: 86_400_000 });
    expect(report.violations.filter((v) => v.orderIds.includes(order.orderId))).toEqual([]);
    expect(report.exceptions).toContainEqual(
      expect.objectContaining({ orderId: order.orderId, status: 'FAILED', reference: 'wire-4711' }),
    );
  });
});

describe('after the pivot: forward recovery only', () => {
  it('the confirmation fails for a day, then succeeds: completed, no compensation', async () => {
    const { order, sku, stock, total } = await newOrder();
    const failForADay: Fault = () => {
      const info = Context.current().info;
      return info.currentAttemptScheduledTimestampMs - info.scheduledTimestampMs < 24 * HOUR
        ? transient('sendConfirmation')
        : undefined;
    };
    const { activities, calls, counts } = faultyActivities({ sendConfirmation: failForADay });
    const result = await withSaga('confirmation-fails-for-a-day', order, activities, async ({ handle, result }) => {
      await skipUntil(handle, (s) => s.status === 'COMPLETED', '1h', 40);
      return result();
    });
    expect(result.status).toBe('COMPLETED');
    expect(counts.get('sendConfirmation')).toBeGreaterThan(40);
    expect(calls).not.toContain('refundPayment');
    expect(calls).not.toContain('releaseInventory');
    expect((await productRow(db, sku)).stock).toBe(stock - 2);
    expect(await reservations(db, order.orderId)).toEqual([{ sku, qty: 2, status: 'SOLD' }]);
    expect(await ledger(db, order.orderId)).toEqual({ charges: [{ status: 'succeeded', amount: total }], refunds: [] });
  });

  it('a forward step that never recovers escalates to NEEDS_ATTENTION without compensating', async () => {
    const { order, total } = await newOrder();
    const { activities, calls } = faultyActivities({ sendConfirmation: () => transient('sendConfirmation') });
    const result = await withSaga(
      'forward-escalates',
      order,
      activities,
      async ({ handle, result }) => {
        const s = await skipUntil(handle, (st) => st.awaiting === 'forward-step', '1h');
        expect(s.status).toBe('NEEDS_ATTENTION');
        expect(s.pivotPassed).toBe(true);
        expect((await orderRow(db, order.orderId))?.status).toBe('NEEDS_ATTENTION');
        await resolve(handle, { action: 'mark-resolved', note: 'emailed by hand' });
        return result();
      },
      { forwardRetryLimitMs: 2 * HOUR },
    );
    expect(result.status).toBe('COMPLETED');
    expect(calls).not.toContain('refundPayment');
    expect(await ledger(db, order.orderId)).toEqual({ charges: [{ status: 'succeeded', amount: total }], refunds: [] });
  });
});

replaysItsHistories(17);
