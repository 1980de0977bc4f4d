/**
 * The saga of the authorization era: authorize, reserve, ship, capture, confirm. On the real Java
 * time-skipping server, with real activities, a real Postgres and the real provider process. Every
 * test checks the order row's money, the stock and the provider's ledger of holds, captures and
 * voids, not only the result. The file ends by replaying every history it produced.
 */
import type { Pool } from 'pg';
import { describe, expect, it } from 'vitest';
import { checkInvariants } from '../db/invariants';
import { authorizeKeyFor, captureKeyFor, reauthorizeKeyFor, recaptureKeyFor } from '../domain/order';
import { request } from '../orders/saga-requests';
import { stateQuery } from '../workflows';
import { holds, ledger, productRow, reservations } from './support/helpers';
import {
  admin,
  db,
  faultyActivities,
  gate,
  newOrder,
  replaysItsHistories,
  resolve,
  skipUntil,
  transient,
  useSagaSemantics,
  waitUntil,
  withSaga,
} from './support/saga-semantics';

useSagaSemantics();

/** The checker's violations that name the order (the books agree: money, stock, shipment, status). */
async function violationsOf(orderId: string) {
  const report = await checkInvariants(db, { deadlineMs: 86_400_000 });
  return report.violations.filter((v) => v.orderIds.includes(orderId));
}

/** Every hold the provider made for the order, the first first. */
async function holdsOf(orderId: string): Promise<{ key: string; status: string }[]> {
  const { rows } = await db.query<{ idempotency_key: string; status: string }>({
    text: 'SELECT idempotency_key, status FROM provider.authorizations WHERE idempotency_key LIKE $1 ORDER BY created_at',
    values: [`${orderId}:%`],
  });
  return rows.map((r) => ({ key: r.idempotency_key, status: r.status }));
}

/** The order row's status and money. */
async function money(pool: Pool, orderId: string) {
  const { rows } = await pool.query<{
    status: string;
    payment_flow: string;
    charged_cents: string;
    authorized_cents: string;
    captured_cents: string;
    authorization_status: string | null;
    attention_from: string | null;
    attention_step: string | null;
  }>({
    text: `SELECT status, payment_flow, charged_cents, authorized_cents, captured_cents, authorization_status,
                  attention_from, attention_step FROM orders WHERE order_id = $1`,
    values: [orderId],
  });
  const r = rows[0]!;
  return {
    status: r.status,
    paymentFlow: r.payment_flow,
    charged: Number(r.charged_cents),
    authorized: Number(r.authorized_cents),
    captured: Number(r.captured_cents),
    authorizationStatus: r.authorization_status,
    attentionFrom: r.attention_from,
    attentionStep: r.attention_step,
  };
}

describe('authorize, ship, capture', () => {
  it('happy path: authorized, shipped, captured once for the total, completed; nothing charged', async () => {
    const { order, sku, stock, total } = await newOrder();
    const { activities, calls } = faultyActivities({});
    const { result, state } = await withSaga('auth-happy-path', order, activities, async (r) => ({
      result: await r.result(),
      state: await r.handle.query(stateQuery),
    }));
    expect(result.status).toBe('COMPLETED');
    expect(state.stepsDone).toEqual([
      'createOrder',
      'reserveInventory',
      'authorizePayment',
      'createShipment',
      'capturePayment',
      'sendConfirmation',
    ]);
    expect(calls.filter((c) => c === 'capturePayment')).toHaveLength(1);
    expect(calls).not.toContain('chargePayment');
    expect(calls).not.toContain('voidAuthorization');
    expect(await money(db, order.orderId)).toMatchObject({
      status: 'COMPLETED',
      paymentFlow: 'authorization',
      charged: 0,
      authorized: total,
      captured: total,
      authorizationStatus: 'captured',
    });
    expect(await holds(db, order.orderId)).toEqual({
      authorizations: [{ status: 'authorized', amount: total }],
      captures: [{ status: 'succeeded', amount: total }],
      voids: [],
      keyClosed: false,
    });
    expect(await ledger(db, order.orderId)).toEqual({ charges: [], refunds: [] });
    expect((await productRow(db, sku)).stock).toBe(stock - 2);
    expect((await reservations(db, order.orderId)).map((r) => r.status)).toEqual(['SOLD']);
    expect(await violationsOf(order.orderId)).toEqual([]);
  });

  it('cancel before the shipment: the hold is voided, nothing captured, the stock back', async () => {
    const { order, sku, stock, total } = await newOrder();
    const g = gate();
    const { activities, calls } = faultyActivities({ authorizePayment: g.wait });
    const { result } = await withSaga('auth-cancel-before-shipment', order, activities, async ({ handle, result }) => {
      await g.reached;
      const pending = request(handle, { command: 'cancel', reason: 'customer changed their mind' });
      await waitUntil(handle, () => true);
      g.open();
      await pending;
      return { result: await result() };
    });
    expect(result).toMatchObject({ status: 'CANCELLED', reason: 'customer changed their mind' });
    expect(calls).not.toContain('createShipment');
    expect(calls).not.toContain('capturePayment');
    expect(calls).toContain('voidAuthorization');
    expect((await productRow(db, sku)).stock).toBe(stock);
    const h = await holds(db, order.orderId);
    expect(h.captures).toEqual([]);
    // The hold was made (the request was not cancellable mid-flight), then released by the void.
    expect(h.authorizations).toEqual([{ status: 'authorized', amount: total }]);
    expect(h.voids).toEqual(['cancel']);
    expect(await money(db, order.orderId)).toMatchObject({
      status: 'CANCELLED',
      captured: 0,
      authorizationStatus: 'voided',
    });
    expect(await violationsOf(order.orderId)).toEqual([]);
  });

  it('cancel before the hold is made: the key is closed, nothing held, nothing captured', async () => {
    const { order, sku, stock } = await newOrder();
    const g = gate();
    const { activities, calls } = faultyActivities({ reserveInventory: g.wait });
    const { result } = await withSaga('auth-cancel-before-hold', order, activities, async ({ handle, result }) => {
      await g.reached;
      const pending = request(handle, { command: 'cancel', reason: 'too slow' });
      await waitUntil(handle, () => true);
      g.open();
      await pending;
      return { result: await result() };
    });
    expect(result.status).toBe('CANCELLED');
    expect(calls).not.toContain('authorizePayment');
    expect((await productRow(db, sku)).stock).toBe(stock);
    expect(await holds(db, order.orderId)).toEqual({ authorizations: [], captures: [], voids: [], keyClosed: true });
  });

  it('an authorization whose answer is lost: inquired by key, never sent blind again, and the saga goes on', async () => {
    const { order, total } = await newOrder();
    await admin.set({
      kind: 'lose-response-after-commit',
      target: 'authorizations',
      count: 10,
      keyPrefix: `${order.orderId}:`,
    });
    const { activities, calls } = faultyActivities({});
    const { result, state } = await withSaga('auth-lost-response', order, activities, async (r) => ({
      result: await r.result(),
      state: await r.handle.query(stateQuery),
    }));
    expect(result.status).toBe('COMPLETED');
    expect(calls.filter((c) => c === 'authorizePayment')).toHaveLength(1);
    expect(calls).toContain('inquireAuthorization');
    expect(state.attempts.inquiry).toBe(1);
    expect(await holds(db, order.orderId)).toMatchObject({
      authorizations: [{ status: 'authorized', amount: total }],
      captures: [{ status: 'succeeded', amount: total }],
    });
  });

  it('a capture whose answer is lost: inquired by its key, captured once', async () => {
    const { order, total } = await newOrder();
    await admin.set({
      kind: 'lose-response-after-commit',
      target: 'captures',
      count: 10,
      keyPrefix: `${order.orderId}:`,
    });
    const { activities, calls } = faultyActivities({});
    const result = await withSaga('auth-capture-lost-response', order, activities, (r) => r.result());
    expect(result.status).toBe('COMPLETED');
    expect(calls.filter((c) => c === 'capturePayment')).toHaveLength(1);
    expect(calls).toContain('inquireCapture');
    expect((await holds(db, order.orderId)).captures).toEqual([{ status: 'succeeded', amount: total }]);
    expect((await money(db, order.orderId)).captured).toBe(total);
  });

  it('the hold expired before its capture: one fresh authorization, captured under its own key, completed', async () => {
    const { order, total } = await newOrder();
    // The first hold lapses between the shipment and the capture (as a hold older than its expiry would).
    const expireFirst = async (): Promise<undefined> => {
      await db.query({
        text: `UPDATE provider.authorizations SET expires_at = now() - interval '1 second' WHERE idempotency_key = $1`,
        values: [authorizeKeyFor(order.orderId)],
      });
      return undefined;
    };
    const { activities, calls } = faultyActivities({ capturePayment: expireFirst });
    const result = await withSaga('auth-fresh-hold', order, activities, (r) => r.result());
    expect(result.status).toBe('COMPLETED');
    expect(calls.filter((c) => c === 'reauthorizePayment')).toHaveLength(1);
    expect(calls).not.toContain('voidAuthorization');
    const fresh = await db.query<{ status: string; amount_cents: string }>({
      text: `SELECT c.status, c.amount_cents FROM provider.captures c WHERE c.idempotency_key = $1`,
      values: [recaptureKeyFor(order.orderId)],
    });
    expect(fresh.rows.map((r) => [r.status, Number(r.amount_cents)])).toEqual([['succeeded', total]]);
    expect((await holds(db, order.orderId)).captures).toEqual([
      { status: 'failed', amount: total, failureCode: 'authorization_expired' },
    ]);
    expect(await money(db, order.orderId)).toMatchObject({ status: 'COMPLETED', captured: total });
    expect(await violationsOf(order.orderId)).toEqual([]);
  });

  it('a capture that outlives the forward window escalates; the run terminated, a new run of the order captures it once', async () => {
    const { order, sku, total } = await newOrder();
    // The capture never goes through while the first run lives (a provider that keeps failing it).
    const first = faultyActivities({ capturePayment: () => transient('capturePayment') });
    await withSaga(
      'auth-capture-window-then-terminated',
      order,
      first.activities,
      async ({ handle }) => {
        const s = await skipUntil(handle, (st) => st.awaiting === 'capture', '1m');
        expect(s.reason).toContain('not taken within the forward window');
        expect(await money(db, order.orderId)).toMatchObject({
          status: 'NEEDS_ATTENTION',
          attentionFrom: 'SHIPPED',
          attentionStep: 'capturePayment',
          captured: 0,
        });
        await handle.terminate('operator restarts the order');
      },
      { forwardRetryLimitMs: 60_000 },
    );
    expect(first.calls).not.toContain('voidAuthorization');
    const second = faultyActivities({});
    const result = await withSaga('auth-second-run-captures', order, second.activities, (r) => r.result());
    expect(result.status).toBe('COMPLETED');
    expect(second.calls).not.toContain('voidAuthorization');
    expect(second.calls).not.toContain('releaseInventory');
    expect(await reservations(db, order.orderId)).toEqual([{ sku, qty: 2, status: 'SOLD' }]);
    expect((await holds(db, order.orderId)).captures).toEqual([{ status: 'succeeded', amount: total }]);
    expect(await money(db, order.orderId)).toMatchObject({ status: 'COMPLETED', captured: total });
    expect(await violationsOf(order.orderId)).toEqual([]);
  });

  it('a capture refused for good after the shipment (both holds expired): NEEDS_ATTENTION, shipped, not captured, never voided', async () => {
    const { order, total } = await newOrder();
    // Every hold of the order lapses before its capture: the first, and the fresh one too.
    const expireAll = async (): Promise<undefined> => {
      await db.query({
        text: `UPDATE provider.authorizations SET expires_at = now() - interval '1 second' WHERE idempotency_key LIKE $1`,
        values: [`${order.orderId}:%`],
      });
      return undefined;
    };
    const { activities, calls } = faultyActivities({ capturePayment: expireAll });
    const seen = await withSaga('auth-capture-refused', order, activities, async ({ handle }) => {
      const s = await skipUntil(handle, (st) => st.awaiting === 'capture', '1m');
      const row = await money(db, order.orderId);
      // A resolve that says the money was taken is checked against the ledger, and refused.
      const refused = await resolve(handle, { action: 'mark-resolved', note: 'claimed taken' }).catch(
        (e: unknown) => e,
      );
      await handle.terminate('test over: the person has the order');
      return { s, row, refused };
    });
    expect(seen.s.status).toBe('NEEDS_ATTENTION');
    expect(seen.s.reason).toContain('authorization_expired');
    expect(seen.s.reason).toContain(`capture ${recaptureKeyFor(order.orderId)} refused: authorization_expired`);
    expect(seen.s.reason).toContain(`the one fresh authorization, after ${authorizeKeyFor(order.orderId)} expired`);
    expect(seen.s.reason).toContain('the goods shipped, the money not taken');
    expect(seen.row).toMatchObject({
      status: 'NEEDS_ATTENTION',
      attentionFrom: 'SHIPPED',
      attentionStep: 'capturePayment',
      authorized: total,
      captured: 0,
    });
    expect(String((seen.refused as Error).message)).toContain(`capture ${captureKeyFor(order.orderId)} is failed`);
    expect(calls.filter((c) => c === 'reauthorizePayment')).toHaveLength(1);
    expect((await holdsOf(order.orderId)).map((a) => a.key)).toEqual([
      authorizeKeyFor(order.orderId),
      reauthorizeKeyFor(order.orderId),
    ]);
    expect(calls).not.toContain('voidAuthorization');
    expect(calls).not.toContain('releaseInventory');
    expect((await holds(db, order.orderId)).captures).toEqual([
      { status: 'failed', amount: total, failureCode: 'authorization_expired' },
    ]);
  });
});

replaysItsHistories(9);
