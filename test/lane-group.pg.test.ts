/**
 * The serial lane's group commit against the real Postgres: several reservations in one transaction,
 * each all-or-nothing under its savepoint (one out of stock fails alone, the others commit), idempotent
 * by the order and its reservation rows, rows locked in primary-key order (two groups whose orders name
 * the same SKUs in opposite orders never deadlock); and through the lane's activity: the tasks waiting
 * for a held lane are taken in one round, one lane transaction, each with its own answer.
 */
import { MockActivityEnvironment } from '@temporalio/testing';
import { DefaultLogger } from '@temporalio/worker';
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createActivities } from '../activities';
import {
  prepareSerial,
  reserveGroup,
  type LaneReservation,
  type ReserveRequest,
  type ReserveResult,
} from '../activities/inventory';
import { InventoryMetrics } from '../activities/inventory-metrics';
import { LaneGroup } from '../activities/lane-group';
import { laneHoldings, maxOverlap } from '../activities/lane-lock';
import {
  createProduct,
  pendingOrderRows,
  productRow,
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

const orderRows = (ids: string[], customerId?: string): Promise<void> => pendingOrderRows(db, ids, customerId);

const status = async (id: string): Promise<string> =>
  (await db.query<{ status: string }>({ text: 'SELECT status FROM orders WHERE order_id = $1', values: [id] })).rows[0]!
    .status;

/** The requests, prepared as the lane's task prepares them, committed by one group on one session. */
async function group(reqs: ReserveRequest[], metrics?: InventoryMetrics) {
  // Each reservation's own run (the round runs in one task's context: the order row must not take its run).
  const prepared = (await Promise.all(reqs.map((r) => prepareSerial(db, r, `run-${r.orderId}`)))) as LaneReservation[];
  const c = await db.connect();
  try {
    return await reserveGroup(c, prepared, { metrics });
  } finally {
    c.release();
  }
}

/** Runs the lane's activity as a task of lane `lane` (its task queue). */
function onLane(acts: ReturnType<typeof createActivities>, lane: string, req: ReserveRequest): Promise<ReserveResult> {
  return new MockActivityEnvironment({ taskQueue: lane }, { logger: new DefaultLogger('ERROR', () => undefined) }).run(
    acts.reserveInventorySerial,
    req,
  );
}

describe('the lane group commit', () => {
  it('one transaction for the group: the reservation out of stock fails alone, the others commit, in order', async () => {
    const p = await createProduct(db, { stock: 3 });
    const [q, r] = (await Promise.all([createProduct(db, { stock: 5 }), createProduct(db, { stock: 5 })])).sort(
      (x, y) => (x.sku < y.sku ? -1 : 1),
    );
    const ids = ['a', 'b', 'c', 'd'].map((x) => `group-${x}-${uid()}`);
    await orderRows(ids);
    const metrics = new InventoryMetrics();
    const out = await group(
      [
        { orderId: ids[0]!, customerId: 'c', items: [{ sku: p.sku, qty: 1 }] },
        { orderId: ids[1]!, customerId: 'c', items: [{ sku: p.sku, qty: 2 }] },
        { orderId: ids[2]!, customerId: 'c', items: [{ sku: p.sku, qty: 1 }] }, // none left for it
        // Two SKUs, named out of order: locked and written in primary-key order all the same.
        {
          orderId: ids[3]!,
          customerId: 'c',
          items: [
            { sku: r.sku, qty: 1 },
            { sku: q.sku, qty: 2 },
          ],
        },
      ],
      metrics,
    );
    expect(out.map((o) => (o.ok ? o.value.outcome : (o.error as { type: string }).type))).toEqual([
      'reserved',
      'reserved',
      'InsufficientStock',
      'reserved',
    ]);
    expect(await productRow(db, p.sku)).toEqual({ stock: 0, version: 2 });
    expect(await reservations(db, ids[0]!)).toEqual([{ sku: p.sku, qty: 1, status: 'HELD' }]);
    expect(await reservations(db, ids[1]!)).toEqual([{ sku: p.sku, qty: 2, status: 'HELD' }]);
    expect(await reservations(db, ids[2]!)).toEqual([]); // rolled back to its savepoint: nothing of it left
    expect(await status(ids[2]!)).toBe('PENDING');
    expect(await status(ids[1]!)).toBe('RESERVED');
    const { rows: owners } = await db.query<{ order_id: string; owner_run_id: string | null }>({
      text: 'SELECT order_id, owner_run_id FROM orders WHERE order_id = ANY($1::text[])',
      values: [[ids[0], ids[1], ids[3]]],
    });
    for (const o of owners) expect(o.owner_run_id).toBe(`run-${o.order_id}`); // each its own run
    expect(await reservations(db, ids[3]!)).toEqual([
      { sku: q.sku, qty: 2, status: 'HELD' },
      { sku: r.sku, qty: 1, status: 'HELD' },
    ]);
    expect((await productRow(db, q.sku)).stock).toBe(3);
    expect((await productRow(db, r.sku)).stock).toBe(4);
    expect(metrics.snapshot().find((m) => m.sku === p.sku)).toMatchObject({ laneCommits: 2 });
  });

  it('idempotent by the reservation: a retry in the same group, or in a later one, finds it done', async () => {
    const p = await createProduct(db, { stock: 10 });
    const id = `group-retry-${uid()}`;
    await orderRows([id]);
    const req = { orderId: id, customerId: 'c', items: [{ sku: p.sku, qty: 2 }] };
    const out = await group([req, req]); // the task and its retry, taken together
    expect(out.map((o) => o.ok && o.value.outcome)).toEqual(['reserved', 'already-reserved']);
    expect(out[1]).toMatchObject({ ok: true, value: { status: 'RESERVED', path: 'lane' } });
    expect(await productRow(db, p.sku)).toEqual({ stock: 8, version: 1 });
    // A retried task later: its gate finds the reservation and it never waits for the lane.
    expect(await prepareSerial(db, req)).toMatchObject({ outcome: 'already-reserved', status: 'RESERVED' });
    // And one that got past its gate before the first committed: the commit finds the rows and reports them.
    const late: LaneReservation = { req, items: req.items, snapshot: [], runId: null };
    const c = await db.connect();
    try {
      expect(await reserveGroup(c, [late], {})).toEqual([
        {
          ok: true,
          value: { outcome: 'already-reserved', path: 'lane', attempts: 1, conflicts: 0, status: 'RESERVED' },
        },
      ]);
    } finally {
      c.release();
    }
    expect(await productRow(db, p.sku)).toEqual({ stock: 8, version: 1 });
    expect(await reservations(db, id)).toEqual([{ sku: p.sku, qty: 2, status: 'HELD' }]);
  });

  it('rows in primary-key order: groups naming the same SKUs in opposite orders, at once, never deadlock', async () => {
    const skus = (await Promise.all([1, 2, 3].map(() => createProduct(db, { stock: 1000 })))).map((p) => p.sku);
    const rounds = 15;
    const ids = Array.from({ length: rounds * 4 }, (_, i) => `group-order-${i}-${uid()}`);
    await orderRows(ids);
    const req = (i: number, order: string[]): ReserveRequest => ({
      orderId: ids[i]!,
      customerId: 'c',
      items: order.map((sku) => ({ sku, qty: 1 })),
    });
    const forward = [...skus];
    const backward = [...skus].reverse();
    // Two lanes' groups at once, round after round, each holding a pair of orders in opposite SKU orders.
    const lane = async (offset: number) => {
      const outs = [];
      for (let r = 0; r < rounds; r++) {
        const i = r * 4 + offset;
        outs.push(...(await group([req(i, offset ? forward : backward), req(i + 1, offset ? backward : forward)])));
      }
      return outs;
    };
    const all = (await Promise.all([lane(0), lane(2)])).flat();
    expect(all.filter((o) => !o.ok).map((o) => (o as { error: Error }).error.message)).toEqual([]);
    for (const sku of skus) expect((await productRow(db, sku)).stock).toBe(1000 - rounds * 4);
  });
});

describe('the lane activity: the tasks waiting for the lane go in one round', () => {
  it('a held lane, six tasks waiting: one lane transaction takes them all, each gets its own answer', async () => {
    const p = await createProduct(db, { stock: 4 });
    const lane = `orders-${uid()}-inventory-lane-0`;
    const ids = Array.from({ length: 6 }, (_, i) => `group-lane-${i}-${uid()}`);
    await orderRows(ids);
    const acts = createActivities({ db, provider: testProvider() });
    // Another process holds the lane: every task queues behind it.
    const other = await db.connect();
    await other.query({ text: 'SELECT pg_advisory_lock(hashtext($1))', values: [`lane:${lane}`] });
    const settled = Promise.allSettled(
      ids.map((id) => onLane(acts, lane, { orderId: id, customerId: 'c', items: [{ sku: p.sku, qty: 1 }] })),
    );
    await new Promise((r) => setTimeout(r, 2_000)); // under one 4 s wait for the lock: one round takes them
    await other.query({ text: 'SELECT pg_advisory_unlock(hashtext($1))', values: [`lane:${lane}`] });
    other.release();
    const results = await settled;
    const answers = results.map((r) =>
      r.status === 'fulfilled' ? r.value.outcome : (r.reason as { type: string }).type,
    );
    expect(answers.filter((a) => a === 'reserved')).toHaveLength(4);
    expect(answers.filter((a) => a === 'InsufficientStock')).toHaveLength(2);
    expect((await productRow(db, p.sku)).stock).toBe(0);
    for (const [i, id] of ids.entries())
      expect((await reservations(db, id)).length).toBe(answers[i] === 'reserved' ? 1 : 0);
    const { rows } = await db.query<{ order_id: string; worker: string; started_at: Date; ended_at: Date }>({
      text: 'SELECT order_id, worker, started_at, ended_at FROM lane_tasks WHERE lane = $1',
      values: [lane],
    });
    expect(rows.map((r) => r.order_id).sort()).toEqual([...ids].sort()); // one row per order
    expect(laneHoldings(rows)).toHaveLength(1); // one holding of the lane: one round
    expect(maxOverlap(laneHoldings(rows))).toBe(1);
  });

  it('a task cancelled while it waits leaves the queue; the others are answered', async () => {
    const answered: number[] = [];
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const g = new LaneGroup<number, number>(async (round) => {
      await gate; // the lane is held elsewhere
      const items = round.take();
      answered.push(...items);
      return items.map((n) => ({ ok: true, value: n * 10 }));
    });
    const first = g.submit(1);
    const stop = new AbortController();
    const second = g.submit(2, { signal: stop.signal });
    const third = g.submit(3);
    stop.abort(new Error('cancelled'));
    await expect(second).rejects.toThrow('cancelled');
    release();
    expect(await Promise.all([first, third])).toEqual([10, 30]);
    expect(answered).toEqual([1, 3]);
  });
});
