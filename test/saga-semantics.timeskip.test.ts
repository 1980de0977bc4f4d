/**
 * Saga semantics under failure, on the real Java time-skipping server, with real activities, a real
 * Postgres and the real provider process (its fault switches set over its admin API). Faults that the
 * provider cannot produce are injected by test-only activity implementations wrapping the real ones.
 * Every test checks the order row, the stock and the provider's ledger, not only the result.
 */
import { orderOutcome } from '../lib/order-outcome';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Context } from '@temporalio/activity';
import type { WorkflowHandle } from '@temporalio/client';
import { ApplicationFailure, defaultPayloadConverter, type HistoryAndWorkflowId } from '@temporalio/common';
import { historyToJSON, type History } from '@temporalio/common/lib/proto-utils';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import type { Pool } from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { createActivities, type OrderActivities } from '../activities';
import { checkInvariants } from '../db/invariants';
import { workflowIdFor, type OrderInput, type OrderResult } from '../domain/order';
import type { ProviderClient } from '../provider/client';
import { orderSaga, stateQuery, type ResolveRequest, type SagaConfig, type SagaState } from '../workflows';
import { NeedsAttentionKey, OrderStatusKey } from '../workflows/search-attributes';
import { request, RequestRefusedError, sendRequest } from '../lib/saga-requests';
import { EncryptionCodec, requirePayloadKeys } from '../platform/payload-codec';
import { withFaults, type ActivityFaults } from './support/activity-faults';
import { useSagaTestEnv } from './support/saga-test-env';
import { dataConverter } from './support/temporal-env';
import {
  createProduct,
  ledger,
  makeOrder,
  orderRow,
  productRow,
  reservations,
  testAdmin,
  testProvider,
  uid,
} from './support/helpers';

const ROOT = path.resolve(__dirname, '..');
const HOUR = 3_600_000;
let env: TestWorkflowEnvironment;
let bundle: WorkflowBundleWithSourceMap;
let db: Pool;
const admin = testAdmin();
/** Histories of every path, replayed at the end (and saved as fixtures with UPDATE_FIXTURES=1). */
const histories: { name: string; workflowId: string; history: History }[] = [];

useSagaTestEnv({ server: 'timeskip' }, { started: (saga) => ({ env, bundle, db } = saga) });

afterEach(async () => {
  await admin.clear();
});

type Name = keyof OrderActivities;
type Fault = (call: number) => Error | undefined | Promise<Error | undefined>;

const transient = (what: string): Error =>
  ApplicationFailure.retryable(`injected transient failure of ${what}`, 'InjectedTransient');
const permanent = (what: string): Error =>
  ApplicationFailure.nonRetryable(`injected permanent failure of ${what}`, 'InjectedPermanent');
const once =
  (make: () => Error): Fault =>
  (call) =>
    call === 1 ? make() : undefined;

/**
 * Test-only activity implementations: the real ones, with faults injected per activity and every call
 * recorded in order.
 */
function faultyActivities(faults: Partial<Record<Name, Fault>>, provider: ProviderClient = testProvider()) {
  const real = createActivities({ db, provider });
  const calls: Name[] = [];
  const counts = new Map<Name, number>();
  const counted: ActivityFaults = {};
  for (const name of Object.keys(real) as Name[]) {
    counted[name] = () => {
      const n = (counts.get(name) ?? 0) + 1;
      counts.set(name, n);
      calls.push(name);
      return faults[name]?.(n);
    };
  }
  return { activities: withFaults(real, counted), calls, counts };
}

interface Run {
  handle: WorkflowHandle<typeof orderSaga>;
  order: OrderInput;
  /** Waits for the saga's result. Time skips only while something awaits it (or env.sleep). */
  result: () => Promise<OrderResult>;
}

/** Starts a saga on its own task queue and workflow ID, runs `body` while the worker runs, and keeps the history. */
async function withSaga<T>(
  name: string,
  order: OrderInput,
  activities: OrderActivities,
  body: (run: Run) => Promise<T>,
  config: Partial<SagaConfig> = {},
): Promise<T> {
  const taskQueue = `sem-${uid()}`;
  const worker = await Worker.create({
    dataConverter: dataConverter(),
    connection: env.nativeConnection,
    taskQueue,
    workflowBundle: bundle,
    activities,
  });
  return worker.runUntil(async () => {
    const handle = await env.client.workflow.start(orderSaga, {
      taskQueue,
      workflowId: workflowIdFor(order.orderId),
      args: [order, config],
    });
    const out = await body({ handle, order, result: () => orderOutcome(handle) });
    await handle.result().catch(() => undefined);
    histories.push({ name, workflowId: handle.workflowId, history: await handle.fetchHistory() });
    return out;
  });
}

async function newOrder(
  opts: Partial<OrderInput> = {},
  qty = 2,
): Promise<{ order: OrderInput; sku: string; stock: number; total: number }> {
  const p = await createProduct(db, { stock: 10, priceCents: 1200 });
  return {
    order: makeOrder([{ sku: p.sku, qty, unitPriceCents: p.priceCents }], opts),
    sku: p.sku,
    stock: 10,
    total: qty * 1200,
  };
}

/** Skips time in steps until the saga's state satisfies `pred` (bounded). */
async function skipUntil(
  handle: WorkflowHandle<typeof orderSaga>,
  pred: (s: SagaState) => boolean,
  step = '10m',
  max = 400,
): Promise<SagaState> {
  for (let i = 0; i < max; i++) {
    const s = await handle.query(stateQuery);
    if (pred(s)) return s;
    await env.sleep(step);
  }
  throw new Error(`state never matched; last: ${JSON.stringify(await handle.query(stateQuery))}`);
}

async function waitUntil(
  handle: WorkflowHandle<typeof orderSaga>,
  pred: (s: SagaState) => boolean,
): Promise<SagaState> {
  for (let i = 0; i < 200; i++) {
    const s = await handle.query(stateQuery);
    if (pred(s)) return s;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`state never matched; last: ${JSON.stringify(await handle.query(stateQuery))}`);
}

/**
 * Sends `resolve` and waits for its answer. (Nothing may await the workflow's result meanwhile: time
 * would skip past the saga's timers while the answer is read.)
 */
async function resolve(handle: WorkflowHandle<typeof orderSaga>, req: ResolveRequest): Promise<SagaState> {
  return request(handle, { command: 'resolve', ...req });
}

/** A gate an activity waits at until the test opens it. */
function gate(): { wait: () => Promise<undefined>; open: () => void; reached: Promise<void> } {
  let open!: () => void;
  let reached!: () => void;
  const opened = new Promise<void>((r) => (open = r));
  const arrived = new Promise<void>((r) => (reached = r));
  return {
    wait: async () => {
      reached();
      await opened;
      return undefined;
    },
    open,
    reached: arrived,
  };
}

/** Every message along an error's cause chain, for matching a workflow failure's root cause. */
const causeMessages = (e: unknown): string => {
  const out: string[] = [];
  for (let x = e as { message?: string; cause?: unknown } | undefined; x; x = x.cause as typeof x)
    out.push(String(x.message));
  return out.join(' | ');
};

const succeeded = (l: Awaited<ReturnType<typeof ledger>>) => l.charges.filter((c) => c.status === 'succeeded');

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
    const unreachable: ProviderClient = {
      timeoutMs: live.timeoutMs,
      charge: (k, r) => (reachable ? live.charge(k, r) : refused()),
      getCharge: (k) => (reachable ? live.getCharge(k) : refused()),
      cancelCharge: (k) => (reachable ? live.cancelCharge(k) : refused()),
      refund: (k, r) => (reachable ? live.refund(k, r) : refused()),
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

describe('cancel and deadlines', () => {
  it('cancel before the pivot runs the compensations and ends CANCELLED', async () => {
    const { order, sku, stock } = await newOrder();
    const g = gate();
    const { activities, calls } = faultyActivities({ chargePayment: g.wait });
    const { result, updated } = await withSaga('cancel-before-pivot', order, activities, async ({ handle, result }) => {
      await g.reached;
      const pending = request(handle, { command: 'cancel', reason: 'customer changed their mind' });
      await waitUntil(handle, () => true);
      g.open();
      return { updated: await pending, result: await result() };
    });
    expect(result).toMatchObject({ status: 'CANCELLED', reason: 'customer changed their mind' });
    expect(updated.status).toBe('CANCELLED');
    expect(calls).not.toContain('createShipment');
    expect(await orderRow(db, order.orderId)).toEqual({ status: 'CANCELLED', reason: 'customer changed their mind' });
    expect((await productRow(db, sku)).stock).toBe(stock);
    // The charge ran (it is not cancellable mid-flight), so it was refunded: the ledger nets to zero.
    const l = await ledger(db, order.orderId);
    expect(l.refunds.reduce((a, r) => a + r.amount, 0)).toBe(succeeded(l).reduce((a, c) => a + c.amount, 0));
  });

  it('cancel after the pivot is refused with the reason, and the saga completes', async () => {
    const { order, total } = await newOrder();
    const g = gate();
    const { activities } = faultyActivities({ sendConfirmation: g.wait });
    const result = await withSaga('cancel-after-pivot', order, activities, async ({ handle, result }) => {
      await g.reached;
      const err = await request(handle, { command: 'cancel', reason: 'too late' }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(RequestRefusedError);
      expect((err as RequestRefusedError).message).toMatch(/pivot/);
      g.open();
      return result();
    });
    expect(result.status).toBe('COMPLETED');
    expect(await ledger(db, order.orderId)).toEqual({ charges: [{ status: 'succeeded', amount: total }], refunds: [] });
  });

  it('a Temporal cancellation (as from the Web UI) also compensates', async () => {
    const { order, sku, stock } = await newOrder();
    const g = gate();
    const { activities, calls } = faultyActivities({ reserveInventory: g.wait });
    const result = await withSaga('temporal-cancel', order, activities, async ({ handle, result }) => {
      await g.reached;
      await handle.cancel();
      g.open();
      const r = await result();
      expect((await handle.describe()).status.name).toBe('CANCELLED'); // the Web UI lists it as Canceled
      return r;
    });
    expect(result.status).toBe('CANCELLED');
    expect(result.reason).toMatch(/Temporal cancellation/);
    expect(calls).toContain('releaseInventory');
    expect(calls).not.toContain('chargePayment');
    expect((await orderRow(db, order.orderId))?.status).toBe('CANCELLED');
    expect((await productRow(db, sku)).stock).toBe(stock);
    expect(await reservations(db, order.orderId)).toEqual([{ sku, qty: 2, status: 'RELEASED' }]);
  });

  it('the global deadline fires (time-skipped by a day) on a saga stuck on UNKNOWN: it escalates, it does not compensate', async () => {
    const { order, sku, stock, total } = await newOrder();
    await admin.set({
      kind: 'lose-response-after-commit',
      target: 'charges',
      count: 10,
      keyPrefix: `${order.orderId}:`,
    });
    await admin.set({ kind: 'processing', target: 'inquiries', count: 100_000, keyPrefix: `${order.orderId}:` });
    const { activities, calls } = faultyActivities({});
    const t0 = await env.currentTimeMs();
    const result = await withSaga(
      'deadline',
      order,
      activities,
      async ({ handle, result }) => {
        const s = await skipUntil(handle, (st) => st.status === 'NEEDS_ATTENTION', '2h');
        const elapsed = (await env.currentTimeMs()) - t0;
        expect(elapsed).toBeGreaterThanOrEqual(24 * HOUR);
        expect(elapsed).toBeLessThan(27 * HOUR);
        expect(s.reason).toMatch(/deadline/);
        expect(calls).not.toContain('refundPayment');
        expect(calls).not.toContain('releaseInventory');
        expect((await productRow(db, sku)).stock).toBe(stock - 2); // still reserved: nothing undone blindly
        await admin.clear();
        await resolve(handle, { action: 'charge-succeeded' });
        return result();
      },
      { unknownEscalationMs: 7 * 24 * HOUR }, // the default 24 h deadline comes first
    );
    expect(result.status).toBe('COMPLETED');
    expect(await ledger(db, order.orderId)).toEqual({ charges: [{ status: 'succeeded', amount: total }], refunds: [] });
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

describe('the order row is the lock', () => {
  // First in this block: after a settled order's second run (the next test) the Java test server no
  // longer skips time for env.sleep (result() still skips); see docs/decisions.md.
  it('resolve is checked against the provider: charge-succeeded refused when it never saw the charge, charge-failed refused while processing', async () => {
    const { order, sku, stock } = await newOrder();
    await admin.set({ kind: 'fail-before-commit', target: 'charges', count: 100_000, keyPrefix: `${order.orderId}:` });
    await admin.set({ kind: 'processing', target: 'inquiries', count: 100_000, keyPrefix: `${order.orderId}:` });
    const { activities } = faultyActivities({});
    const refusal = (p: Promise<unknown>): Promise<string> =>
      p.then(
        () => 'accepted',
        (e: Error) => e.message,
      );
    const { result, refusals } = await withSaga(
      'resolve-checked-against-provider',
      order,
      activities,
      async ({ handle, result }) => {
        await skipUntil(handle, (st) => st.awaiting === 'charge-outcome', '10m');
        const refusals = [
          await refusal(resolve(handle, { action: 'charge-succeeded' })),
          await refusal(resolve(handle, { action: 'charge-failed' })),
        ];
        await admin.clear(); // the provider now answers: it never saw the charge (404)
        refusals.push(await refusal(resolve(handle, { action: 'charge-succeeded' })));
        refusals.push(await refusal(resolve(handle, { action: 'charge-failed', note: 'provider has no such charge' })));
        return { refusals, result: await result() };
      },
      { unknownEscalationMs: HOUR },
    );
    expect(refusals[0]).toMatch(/provider says charge .* is processing; not charge-succeeded/);
    expect(refusals[1]).toMatch(/is processing; not charge-failed/);
    expect(refusals[2]).toMatch(/is not_found; not charge-succeeded/);
    expect(refusals[3]).toBe('accepted');
    expect(result.status).toBe('FAILED');
    expect(await ledger(db, order.orderId)).toEqual({ charges: [], refunds: [] });
    expect((await productRow(db, sku)).stock).toBe(stock);
  });

  it('an order cancelled after its charge, started again with the same ID: ALREADY_SETTLED, nothing moves', async () => {
    const { order, sku, stock, total } = await newOrder();
    const g = gate();
    const first = faultyActivities({ chargePayment: async () => (await g.wait(), undefined) });
    const cancelled = await withSaga('cancel-after-charge', order, first.activities, async ({ handle, result }) => {
      await g.reached;
      const pending = request(handle, { command: 'cancel', reason: 'customer changed their mind' });
      await waitUntil(handle, () => true);
      g.open();
      await pending;
      return result();
    });
    expect(cancelled.status).toBe('CANCELLED');
    const after = {
      ledger: await ledger(db, order.orderId),
      stock: (await productRow(db, sku)).stock,
      reservations: await reservations(db, order.orderId),
    };
    expect(after.ledger).toEqual({ charges: [{ status: 'succeeded', amount: total }], refunds: [{ amount: total }] });
    expect(after.stock).toBe(stock);

    // Another client starts the same workflow ID (the default ID-reuse policy allows it once closed).
    const second = faultyActivities({});
    const again = await withSaga('second-run-of-settled-order', order, second.activities, (r) => r.result());
    expect(again).toMatchObject({ orderId: order.orderId, status: 'ALREADY_SETTLED', orderStatus: 'CANCELLED' });
    expect(second.calls).toEqual(['createOrder']); // it changed nothing
    expect(await ledger(db, order.orderId)).toEqual(after.ledger);
    expect((await productRow(db, sku)).stock).toBe(after.stock);
    expect(await reservations(db, order.orderId)).toEqual(after.reservations);
    expect(
      (await db.query({ text: 'SELECT 1 FROM shipments WHERE order_id = $1', values: [order.orderId] })).rowCount,
    ).toBe(0);
    expect(await orderRow(db, order.orderId)).toEqual({ status: 'CANCELLED', reason: 'customer changed their mind' });
  });

  it('an order another run shipped (its waiting run terminated, started again): the new run goes forward, never back', async () => {
    const { order, sku, total } = await newOrder();
    const first = faultyActivities({ sendConfirmation: () => permanent('sendConfirmation') });
    await withSaga('shipped-then-terminated', order, first.activities, async ({ handle }) => {
      await waitUntil(handle, (st) => st.awaiting === 'forward-step');
      expect((await orderRow(db, order.orderId))?.status).toBe('NEEDS_ATTENTION');
      await handle.terminate('operator restarts the order');
    });
    const second = faultyActivities({});
    const result = await withSaga('second-run-of-shipped-order', order, second.activities, (r) => r.result());
    expect(result.status).toBe('COMPLETED');
    expect(second.calls).not.toContain('refundPayment');
    expect(second.calls).not.toContain('releaseInventory');
    expect(await reservations(db, order.orderId)).toEqual([{ sku, qty: 2, status: 'SOLD' }]);
    expect(await ledger(db, order.orderId)).toEqual({ charges: [{ status: 'succeeded', amount: total }], refunds: [] });
    expect(
      (await db.query({ text: 'SELECT 1 FROM shipments WHERE order_id = $1', values: [order.orderId] })).rowCount,
    ).toBe(1);
  });

  it('a charge request no worker picks up is dropped unsent, and after the cancel no new one goes out', async () => {
    const { order, sku, stock } = await newOrder();
    const taskQueue = `sem-${uid()}`;
    const { activities, counts } = faultyActivities({});
    const workflowId = workflowIdFor(order.orderId);
    const handle = env.client.workflow.getHandle<typeof orderSaga>(workflowId);
    const event = async (pred: (e: NonNullable<History['events']>[number]) => boolean): Promise<boolean> =>
      ((await handle.fetchHistory()).events ?? []).some(pred);
    // Phase 1: the worker stops as the reservation completes: no worker polls activities when the
    // charge request is scheduled.
    let full!: Worker;
    const stopAfterReserve: OrderActivities = {
      ...activities,
      reserveInventory: async (req) => {
        const out = await activities.reserveInventory(req);
        full.shutdown();
        return out;
      },
    };
    // No sticky cache: each phase's worker takes over the workflow tasks of the one before.
    const phase = {
      dataConverter: dataConverter(),
      connection: env.nativeConnection,
      taskQueue,
      workflowBundle: bundle,
      maxCachedWorkflows: 0,
    };
    full = await Worker.create({ ...phase, activities: stopAfterReserve });
    await Promise.all([full.run(), env.client.workflow.start(orderSaga, { taskQueue, workflowId, args: [order, {}] })]);
    // Phase 2: workflows only. The customer cancels; the unstarted request times out unsent.
    const wfOnly = await Worker.create(phase);
    await wfOnly.runUntil(async () => {
      await waitUntil(handle, (st) => st.attempts.charge === 1);
      await sendRequest(
        handle,
        { command: 'cancel', reason: 'cancelled while no worker was up' },
        { waitMs: 30_000, untilSeen: true },
      );
      for (let i = 0; i < 600 && !(await event((e) => !!e.activityTaskTimedOutEventAttributes)); i++)
        await new Promise((r) => setTimeout(r, 50));
    });
    // Phase 3: everything again; the saga inquires (nothing there) and ends without a new request.
    const again = await Worker.create({ ...phase, activities });
    const result = await again.runUntil(orderOutcome(handle));
    histories.push({ name: 'charge-unstarted-then-cancel', workflowId, history: await handle.fetchHistory() });
    expect(result).toMatchObject({ status: 'CANCELLED', reason: 'cancelled while no worker was up' });
    expect(counts.get('chargePayment') ?? 0).toBe(0); // never started, never reached the provider
    expect(await ledger(db, order.orderId)).toEqual({ charges: [], refunds: [] });
    expect((await productRow(db, sku)).stock).toBe(stock);
  });

  it('a cancel during a provider outage ends CANCELLED with no charge at all, and no request after the cancel', async () => {
    const { order, sku, stock } = await newOrder();
    await admin.set({ kind: 'fail-before-commit', target: 'charges', count: 100_000, keyPrefix: `${order.orderId}:` });
    const { activities, counts } = faultyActivities({});
    const injectedBefore = (await admin.list()).injected['fail-before-commit'] ?? 0;
    const { result, sentAtCancel } = await withSaga(
      'cancel-during-outage',
      order,
      activities,
      async ({ handle, result }) => {
        await waitUntil(
          handle,
          (s) => (s.attempts.charge ?? 0) >= 1 && s.unknowns.length === 0 && s.stepsDone.includes('reserveInventory'),
        );
        const sentAtCancel = counts.get('chargePayment') ?? 0;
        await request(handle, { command: 'cancel', reason: 'customer gave up during the outage' });
        return { sentAtCancel, result: await result() };
      },
    );
    expect(result).toMatchObject({ status: 'CANCELLED', reason: 'customer gave up during the outage' });
    expect(counts.get('chargePayment')).toBe(sentAtCancel); // no new charge request after the cancel
    expect(await ledger(db, order.orderId)).toEqual({ charges: [], refunds: [] });
    expect((await productRow(db, sku)).stock).toBe(stock);
    expect(sentAtCancel).toBeGreaterThanOrEqual(1);
    expect((await admin.list()).injected['fail-before-commit']).toBe(injectedBefore + sentAtCancel); // each one refused with nothing written
  });

  it('mark-resolved at the pivot records the shipment made by hand: no reservation stays HELD', async () => {
    const { order, sku, total } = await newOrder();
    const { activities } = faultyActivities({ createShipment: once(() => permanent('createShipment')) });
    const result = await withSaga('pivot-mark-resolved', order, activities, async ({ handle, result }) => {
      await waitUntil(handle, (st) => st.awaiting === 'forward-step');
      await resolve(handle, { action: 'mark-resolved', note: 'shipped from the back office' });
      return result();
    });
    expect(result.status).toBe('COMPLETED');
    expect(await reservations(db, order.orderId)).toEqual([{ sku, qty: 2, status: 'SOLD' }]);
    const shipment = await db.query<{ tracking_number: string }>({
      text: 'SELECT tracking_number FROM shipments WHERE order_id = $1',
      values: [order.orderId],
    });
    expect(shipment.rows[0]?.tracking_number).toMatch(/^MANUAL-TRK-/);
    expect(await ledger(db, order.orderId)).toEqual({ charges: [{ status: 'succeeded', amount: total }], refunds: [] });
  });

  it('a zero deadline in the config is refused before anything is written, naming the field', async () => {
    const { order } = await newOrder();
    const { activities, calls } = faultyActivities({});
    const failure = await withSaga(
      'zero-deadline',
      order,
      activities,
      (r) =>
        r.result().then(
          () => undefined,
          (e: Error) => e,
        ),
      { deadlineMs: 0 },
    );
    expect(causeMessages(failure)).toMatch(/config\.deadlineMs: must be a whole number/);
    expect(calls).toEqual([]);
    expect(await orderRow(db, order.orderId)).toBeUndefined();
  });

  it('a lane that no worker polls cannot hold the saga past its deadline', async () => {
    const { order, sku, stock } = await newOrder();
    const { activities } = faultyActivities({});
    // The reservation is sent to a lane (lane 5 of 7), whose task queue nobody polls in this test.
    const routed: OrderActivities = {
      ...activities,
      reserveInventory: async () => ({
        outcome: 'route-to-lane',
        path: 'cas',
        attempts: 0,
        conflicts: 0,
        reason: 'test: hot SKU',
      }),
    };
    const result = await withSaga(
      'unpolled-lane',
      order,
      routed,
      async ({ handle, result }) => {
        await waitUntil(handle, (s) => s.attempts.reserveLane === 1);
        const r = await result();
        // The lane's task had the time left to the deadline, and timed out unstarted.
        const events = (await handle.fetchHistory()).events ?? [];
        const lane = events.find(
          (e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'reserveInventorySerial',
        );
        expect(Number(lane?.activityTaskScheduledEventAttributes?.scheduleToCloseTimeout?.seconds)).toBeLessThanOrEqual(
          5,
        );
        expect(
          events.some(
            (e) => e.activityTaskTimedOutEventAttributes?.scheduledEventId?.toString() === lane?.eventId?.toString(),
          ),
        ).toBe(true);
        return r;
      },
      { inventoryLanes: 7, deadlineMs: 5_000 },
    );
    expect(['FAILED', 'CANCELLED']).toContain(result.status);
    expect((await orderRow(db, order.orderId))?.status).toBe(result.status);
    expect((await productRow(db, sku)).stock).toBe(stock);
    expect(await ledger(db, order.orderId)).toEqual({ charges: [], refunds: [] });
  });
});

describe('replay', () => {
  it('every history above replays without a nondeterminism error', async () => {
    expect(histories.length).toBeGreaterThanOrEqual(20);
    const results = [];
    for await (const r of Worker.runReplayHistories(
      { dataConverter: dataConverter(), workflowBundle: bundle },
      histories.map((h): HistoryAndWorkflowId => ({ workflowId: h.workflowId, history: h.history })),
    ))
      results.push(r);
    expect(results).toHaveLength(histories.length);
    for (const r of results) expect(r.error, r.workflowId).toBeUndefined();
    if (process.env.UPDATE_FIXTURES) {
      const dir = path.join(ROOT, 'test', 'fixtures', 'histories');
      mkdirSync(dir, { recursive: true });
      // Stack traces name this machine's paths, and replay never reads them: saved empty, also those
      // sealed inside a failure's encoded attributes (opened, emptied, sealed again with the test key).
      const codec = new EncryptionCodec(requirePayloadKeys());
      type JsonPayload = { metadata?: Record<string, string>; data?: string };
      const b64 = (v: Uint8Array | null | undefined) => Buffer.from(v ?? []).toString('base64');
      const reseal = (p: JsonPayload): JsonPayload => {
        const opened = codec.open({
          metadata: Object.fromEntries(Object.entries(p.metadata ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64')])),
          data: Buffer.from(p.data ?? '', 'base64'),
        });
        const attrs = defaultPayloadConverter.fromPayload<Record<string, unknown>>(opened);
        const sealed = codec.seal(defaultPayloadConverter.toPayload({ ...attrs, stack_trace: '' }));
        return {
          metadata: Object.fromEntries(Object.entries(sealed.metadata ?? {}).map(([k, v]) => [k, b64(v)])),
          data: b64(sealed.data),
        };
      };
      const scrub = (json: string): string =>
        JSON.stringify(
          JSON.parse(json),
          (k, v: unknown) => (k === 'stackTrace' ? '' : k === 'encodedAttributes' ? reseal(v as JsonPayload) : v),
          2,
        );
      for (const h of histories)
        writeFileSync(path.join(dir, `${h.name}.json`), `${scrub(historyToJSON(h.history))}\n`);
    }
  });
});
