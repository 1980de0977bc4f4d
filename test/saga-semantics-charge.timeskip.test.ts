/**
 * Saga semantics under failure (charges whose outcome is unknown: lost responses, `processing` or an
 * unreachable provider for hours), on the real Java time-skipping server, with real activities, a real
 * Postgres and the real provider process (its fault switches set over its admin API). Every test
 * checks the order row, the stock and the provider's ledger, not only the result. The file ends by
 * replaying every history it produced.
 */
import { ApplicationFailure } from '@temporalio/common';
import { describe, expect, it } from 'vitest';
import type { AuthorizationClient, ProviderClient } from '../provider/client';
import { stateQuery } from '../workflows';
import { ledger, orderRow, productRow, testProvider } from './support/helpers';
import {
  admin,
  db,
  env,
  faultyActivities,
  HOUR,
  newOrder,
  replaysItsHistories,
  resolve,
  skipUntil,
  useSagaSemantics,
  withSaga,
} from './support/saga-semantics';

// The charge era's semantics: orders whose rows an older build wrote, carried by this build's charge path.
useSagaSemantics({ era: 'charge' });

describe('charges whose outcome is unknown: inquiry before deciding', () => {
  it('lost response after commit: the inquiry finds succeeded, no second charge, the saga goes on', async () => {
    const { order, total } = await newOrder();
    const lostBefore = (await admin.list()).injected['lose-response-after-commit'] ?? 0;
    await admin.set({
      kind: 'lose-response-after-commit',
      target: 'charges',
      count: 10,
      keyPrefix: `${order.orderId}:`,
    });
    const { activities } = faultyActivities({});
    const { result, state } = await withSaga('lost-response', order, activities, async (r) => ({
      result: await r.result(),
      state: await r.handle.query(stateQuery),
    }));
    expect(result.status).toBe('COMPLETED');
    expect(state.attempts.inquiry).toBe(1);
    expect(await ledger(db, order.orderId)).toEqual({ charges: [{ status: 'succeeded', amount: total }], refunds: [] });
    // One request (the saga never retries a charge blindly), its response lost, then the inquiry.
    expect((await admin.list()).injected['lose-response-after-commit']).toBe(lostBefore + 1);
  });

  it('lost response after commit, then a later permanent failure: exactly one refund', async () => {
    const { order, sku, stock, total } = await newOrder();
    await admin.set({
      kind: 'lose-response-after-commit',
      target: 'charges',
      count: 10,
      keyPrefix: `${order.orderId}:`,
    });
    const { activities } = faultyActivities({
      createShipment: () => ApplicationFailure.nonRetryable('rejected', 'ShipmentRejected'),
    });
    const result = await withSaga('lost-response-then-failure', order, activities, (r) => r.result());
    expect(result.status).toBe('FAILED');
    expect((await productRow(db, sku)).stock).toBe(stock);
    expect(await ledger(db, order.orderId)).toEqual({
      charges: [{ status: 'succeeded', amount: total }],
      refunds: [{ amount: total }],
    });
  });

  it('the provider answers processing for hours: no refund in that time; escalates at the limit; resolve settles it', async () => {
    const { order, total } = await newOrder();
    await admin.set({
      kind: 'lose-response-after-commit',
      target: 'charges',
      count: 10,
      keyPrefix: `${order.orderId}:`,
    });
    await admin.set({ kind: 'processing', target: 'inquiries', count: 100_000, keyPrefix: `${order.orderId}:` });
    const { activities } = faultyActivities({});
    const t0 = await env.currentTimeMs();
    const result = await withSaga('processing-for-hours', order, activities, async ({ handle, result }) => {
      const unknown = await skipUntil(handle, (s) => s.status === 'UNKNOWN_PAYMENT', '1m');
      expect(unknown.unknowns).toEqual(['charge']);
      expect((await orderRow(db, order.orderId))?.status).toBe('UNKNOWN_PAYMENT');
      const s = await skipUntil(handle, (st) => st.awaiting === 'charge-outcome', '30m');
      const elapsed = (await env.currentTimeMs()) - t0;
      expect(elapsed).toBeGreaterThanOrEqual(5.5 * HOUR); // the limit is 6 h, checked before each wait
      expect(elapsed).toBeLessThan(8 * HOUR);
      expect(s.status).toBe('NEEDS_ATTENTION');
      expect(s.attempts.inquiry).toBeGreaterThan(10);
      expect((await ledger(db, order.orderId)).refunds).toEqual([]); // never a blind refund
      await admin.clear();
      await resolve(handle, { action: 'charge-succeeded', note: 'seen in the provider dashboard' });
      return result();
    });
    expect(result.status).toBe('COMPLETED');
    expect(await ledger(db, order.orderId)).toEqual({ charges: [{ status: 'succeeded', amount: total }], refunds: [] });
  });

  it('the provider is unreachable for hours: no refund; escalates; resolve charge-failed compensates once it is back', async () => {
    const { order, sku, stock } = await newOrder();
    const live = testProvider(2_000);
    let reachable = false;
    const refused = (): Promise<never> => Promise.reject(new Error('connect ECONNREFUSED 127.0.0.1'));
    const unreachable: ProviderClient & AuthorizationClient = {
      timeoutMs: live.timeoutMs,
      charge: (k, r) => (reachable ? live.charge(k, r) : refused()),
      getCharge: (k) => (reachable ? live.getCharge(k) : refused()),
      cancelCharge: (k) => (reachable ? live.cancelCharge(k) : refused()),
      refund: (k, r) => (reachable ? live.refund(k, r) : refused()),
      authorize: (k, r) => (reachable ? live.authorize(k, r) : refused()),
      getAuthorization: (k) => (reachable ? live.getAuthorization(k) : refused()),
      capture: (a, k, r) => (reachable ? live.capture(a, k, r) : refused()),
      getCapture: (k) => (reachable ? live.getCapture(k) : refused()),
      voidAuthorization: (k) => (reachable ? live.voidAuthorization(k) : refused()),
      cancelAuthorization: (k) => (reachable ? live.cancelAuthorization(k) : refused()),
    };
    const { activities } = faultyActivities({}, unreachable);
    const result = await withSaga('unreachable-for-hours', order, activities, async ({ handle, result }) => {
      const s = await skipUntil(handle, (st) => st.awaiting === 'charge-outcome', '30m');
      expect(s.status).toBe('NEEDS_ATTENTION');
      expect((await ledger(db, order.orderId)).refunds).toEqual([]);
      reachable = true;
      await resolve(handle, { action: 'charge-failed' });
      return result();
    });
    expect(result.status).toBe('FAILED');
    expect((await productRow(db, sku)).stock).toBe(stock);
    expect(await ledger(db, order.orderId)).toEqual({ charges: [], refunds: [] });
  });
});

replaysItsHistories(4);
