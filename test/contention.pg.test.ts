/** Contention handling at the activity layer, against a real Postgres: backoff, undo log, routing, metrics. */
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createActivities } from '../activities';
import {
  backoffMs,
  DEFAULT_CAS,
  type CasOptions,
  type ReserveLogic,
  type ReserveResult,
} from '../activities/inventory';
import { InventoryMetrics } from '../activities/inventory-metrics';
import { UndoLog } from '../activities/undo-log';
import { laneFor } from '../domain/lanes';
import {
  bothReadFirst,
  createProduct,
  mockActivityEnv,
  pendingOrderRows,
  productRow,
  reservations,
  runActivity,
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

async function quota(customerId: string, sku: string): Promise<number> {
  const { rows } = await db.query<{ held: number }>({
    text: 'SELECT held FROM purchase_quota WHERE customer_id = $1 AND sku = $2',
    values: [customerId, sku],
  });
  return rows[0]?.held ?? 0;
}

describe('conflict backoff', () => {
  it('stays within min(max, base·2^attempt) + [0, jitter), and is bounded by max + jitter', () => {
    const o = { baseMs: 5, maxMs: 250, jitterMs: 25 };
    for (let attempt = 0; attempt < 20; attempt++) {
      const floor = Math.min(o.maxMs, o.baseMs * 2 ** attempt);
      expect(backoffMs(attempt, o, () => 0)).toBe(floor);
      expect(backoffMs(attempt, o, () => 0.999)).toBeCloseTo(floor + 24.975, 5);
      const sampled = backoffMs(attempt, o);
      expect(sampled).toBeGreaterThanOrEqual(floor);
      expect(sampled).toBeLessThan(o.maxMs + o.jitterMs);
    }
    expect(backoffMs(3, o, () => 0)).toBe(40);
    expect(backoffMs(10, o, () => 0)).toBe(250);
  });

  /** A product, an order row, and activities whose every CAS attempt conflicts (another writer moves the version on). */
  async function alwaysConflicting(kind: string, cas: CasOptions) {
    const p = await createProduct(db, { stock: 50 });
    const id = `${kind}-${uid()}`;
    await orderRows([id]);
    const interfere: ReserveLogic = async () => {
      await db.query({ text: 'UPDATE products SET version = version + 1 WHERE sku = $1', values: [p.sku] });
    };
    const metrics = new InventoryMetrics();
    const acts = createActivities({ db, provider: testProvider(), reserveLogic: interfere, metrics, cas });
    return { p, id, metrics, acts };
  }

  it('gives up after maxAttempts conflicting attempts with ContentionExhausted, leaving nothing behind', async () => {
    // No laneAfterConflicts: only the attempt bound decides.
    const { p, id, metrics, acts } = await alwaysConflicting('exhaust', {
      maxAttempts: 3,
      baseMs: 1,
      maxMs: 2,
      jitterMs: 1,
      abortRateThreshold: 1,
      laneAfterConflicts: undefined,
    });
    await expect(
      runActivity(acts.reserveInventory, { orderId: id, customerId: 'c', items: [{ sku: p.sku, qty: 1 }] }),
    ).rejects.toMatchObject({
      type: 'ContentionExhausted',
      nonRetryable: true,
    });
    expect((await productRow(db, p.sku)).stock).toBe(50);
    expect(await reservations(db, id)).toEqual([]);
    expect(metrics.snapshot()[0]).toMatchObject({ sku: p.sku, attempts: 3, aborts: 3, commits: 0, fallbacks: 1 });
  });

  it('with the adaptive router, laneAfterConflicts conflicts send the reservation to the lane before the attempts run out', async () => {
    const { p, id, metrics, acts } = await alwaysConflicting('lane-after', {
      ...DEFAULT_CAS,
      baseMs: 1,
      maxMs: 2,
      jitterMs: 1,
      abortRateThreshold: 1,
    });
    const r = await runActivity(acts.reserveInventory, {
      orderId: id,
      customerId: 'c',
      items: [{ sku: p.sku, qty: 1 }],
    });
    expect(DEFAULT_CAS.laneAfterConflicts).toBe(1);
    expect(r).toMatchObject({ outcome: 'route-to-lane', attempts: 1, conflicts: 1 });
    expect((await productRow(db, p.sku)).stock).toBe(50); // nothing taken: the lane takes it
    expect(await reservations(db, id)).toEqual([]);
    expect(metrics.snapshot()[0]).toMatchObject({ sku: p.sku, attempts: 1, aborts: 1, commits: 0, fallbacks: 1 });
  });
});

describe('undo log', () => {
  it('runs inverses newest first, once', async () => {
    const log = new UndoLog();
    const ran: string[] = [];
    log.record('a', async () => void ran.push('a'));
    log.record('b', async () => void ran.push('b'));
    log.record('c', async () => void ran.push('c'));
    await log.rollback();
    await log.rollback();
    expect(ran).toEqual(['c', 'b', 'a']);
  });

  it('an aborted attempt leaves no trace: its quota hold rolls back with its CAS, the retry holds it once', async () => {
    const p = await createProduct(db, { stock: 20 });
    await db.query({ text: 'UPDATE products SET max_per_customer = 5 WHERE sku = $1', values: [p.sku] });
    const [a, b] = [`undo-a-${uid()}`, `undo-b-${uid()}`];
    const [ca, cb] = [`ca-${uid()}`, `cb-${uid()}`];
    await orderRows([a], ca);
    await orderRows([b], cb);
    // Both attempts read the same version, then wait for each other, so exactly one CAS aborts.
    const heldBeforeCommit: number[] = [];
    const logic = bothReadFirst(async (req) => {
      heldBeforeCommit.push(await quota(req.customerId, p.sku)); // nothing is held outside the commit
    });
    const acts = createActivities({
      db,
      provider: testProvider(),
      reserveLogic: logic,
      cas: { baseMs: 1, maxMs: 5, jitterMs: 5 },
    });
    const results = await Promise.all([
      runActivity(acts.reserveInventory, { orderId: a, customerId: ca, items: [{ sku: p.sku, qty: 3 }] }),
      runActivity(acts.reserveInventory, { orderId: b, customerId: cb, items: [{ sku: p.sku, qty: 4 }] }),
    ]);
    expect(heldBeforeCommit).toEqual([0, 0]);
    expect(results.map((r) => r.conflicts).sort()).toEqual([0, 1]); // one attempt aborted and retried
    // The aborted attempt's hold rolled back with it; the retry took it again: held once, not twice.
    expect(await quota(ca, p.sku)).toBe(3);
    expect(await quota(cb, p.sku)).toBe(4);
    const rows = await db.query<{ quota_qty: number }>({
      text: 'SELECT quota_qty FROM reservations WHERE order_id = ANY($1) ORDER BY qty',
      values: [[a, b]],
    });
    expect(rows.rows.map((r) => r.quota_qty)).toEqual([3, 4]); // each reservation records its own hold
    expect((await productRow(db, p.sku)).stock).toBe(13);
  });

  it('a reservation heartbeats before each retry after a conflict, never on its first attempt', async () => {
    // The heartbeat timeout counts from the activity's start: a first heartbeat would tell the server nothing.
    const p = await createProduct(db, { stock: 20 });
    const [a, b] = [`beat-a-${uid()}`, `beat-b-${uid()}`];
    await orderRows([a, b]);
    const acts = createActivities({
      db,
      provider: testProvider(),
      reserveLogic: bothReadFirst(),
      cas: { baseMs: 1, maxMs: 5, jitterMs: 5 },
    });
    const beats: Record<string, unknown[]> = { [a]: [], [b]: [] };
    const reserve = (orderId: string) => {
      const env = mockActivityEnv();
      env.on('heartbeat', (d: unknown) => beats[orderId]!.push(d));
      const req = { orderId, customerId: 'c', items: [{ sku: p.sku, qty: 1 }] };
      type Reserve = typeof acts.reserveInventory;
      return env.run<Parameters<Reserve>, Awaited<ReturnType<Reserve>>, Reserve>(acts.reserveInventory, req);
    };
    const [ra, rb] = await Promise.all([reserve(a), reserve(b)]);
    const [retried, first] = ra.conflicts === 1 ? [a, b] : [b, a];
    expect([ra.conflicts, rb.conflicts].sort()).toEqual([0, 1]); // one CAS aborted and was retried
    expect(beats[retried]).toEqual([{ attempt: 1, conflicts: 1 }]);
    expect(beats[first]).toEqual([]);
  });

  it('the quota is never double-held under a race: one customer, limit 2, five orders of 1 at once', async () => {
    const p = await createProduct(db, { stock: 100 });
    await db.query({ text: 'UPDATE products SET max_per_customer = 2 WHERE sku = $1', values: [p.sku] });
    const customer = `race-${uid()}`;
    const ids = Array.from({ length: 5 }, (_, i) => `quota-${i}-${uid()}`);
    await orderRows(ids, customer);
    const acts = createActivities({ db, provider: testProvider(), cas: { baseMs: 1, maxMs: 5, jitterMs: 5 } });
    const settled = await Promise.allSettled(
      ids.map((id) =>
        runActivity(acts.reserveInventory, { orderId: id, customerId: customer, items: [{ sku: p.sku, qty: 1 }] }),
      ),
    );
    const ok = settled.filter((s) => s.status === 'fulfilled');
    const refused = settled.filter((s): s is PromiseRejectedResult => s.status === 'rejected');
    expect(ok).toHaveLength(2);
    expect(refused.map((r) => (r.reason as { type: string }).type)).toEqual([
      'PurchaseLimitExceeded',
      'PurchaseLimitExceeded',
      'PurchaseLimitExceeded',
    ]);
    expect(await quota(customer, p.sku)).toBe(2);
    expect((await productRow(db, p.sku)).stock).toBe(98);
    // Releasing a reservation gives its quota back.
    const reservedId = ids.find((_id, i) => settled[i]!.status === 'fulfilled')!;
    await runActivity(acts.releaseInventory, { orderId: reservedId });
    expect(await quota(customer, p.sku)).toBe(1);
  });
});

describe('routing to the serial lane', () => {
  it('a SKU whose recent abort rate is over 30 % goes straight to the lane, without a CAS attempt', async () => {
    const p = await createProduct(db, { stock: 10 });
    const id = `route-${uid()}`;
    await orderRows([id]);
    const metrics = new InventoryMetrics();
    for (let i = 0; i < 10; i++) metrics.recordAttempt([p.sku], i < 4); // 40 % aborted
    const acts = createActivities({ db, provider: testProvider(), metrics });
    const r = await runActivity(acts.reserveInventory, {
      orderId: id,
      customerId: 'c',
      items: [{ sku: p.sku, qty: 1 }],
    });
    expect(r).toMatchObject({ outcome: 'route-to-lane', attempts: 0 });
    expect(await productRow(db, p.sku)).toEqual({ stock: 10, version: 0 });
    const lane = await runActivity(acts.reserveInventorySerial, {
      orderId: id,
      customerId: 'c',
      items: [{ sku: p.sku, qty: 1 }],
    });
    expect(lane).toMatchObject({ outcome: 'reserved', path: 'lane' });
    expect(await productRow(db, p.sku)).toEqual({ stock: 9, version: 1 });
    expect(metrics.snapshot()[0]).toMatchObject({ fallbacks: 1, laneCommits: 1, attempts: 10 });
  });

  it('under 30 % it stays optimistic', async () => {
    const p = await createProduct(db, { stock: 10 });
    const id = `cool-${uid()}`;
    await orderRows([id]);
    const metrics = new InventoryMetrics();
    for (let i = 0; i < 10; i++) metrics.recordAttempt([p.sku], i < 2); // 20 %
    const acts = createActivities({ db, provider: testProvider(), metrics });
    expect(
      await runActivity(acts.reserveInventory, { orderId: id, customerId: 'c', items: [{ sku: p.sku, qty: 1 }] }),
    ).toMatchObject({ outcome: 'reserved', path: 'cas' });
  });

  it('lane mode lasts a cooldown that doubles while probes still find the SKU hot, and ends on a clean window', () => {
    let now = 0;
    const m = new InventoryMetrics({ now: () => now, cooldownMs: 1_000, windowMs: 60_000 });
    const fill = (aborted: number): void => {
      for (let i = 0; i < 10; i++) m.recordAttempt(['S'], i < aborted);
    };
    fill(5);
    expect(m.useLane('S', 0.3)).toBe(true); // 50 %: lane mode for 1 s
    now = 999;
    expect(m.useLane('S', 0.3)).toBe(true);
    now = 1_000;
    expect(m.useLane('S', 0.3)).toBe(false); // cooldown over: probe optimistically
    fill(4);
    expect(m.useLane('S', 0.3)).toBe(true); // still hot: 2 s this time
    now = 2_999;
    expect(m.useLane('S', 0.3)).toBe(true);
    now = 3_000;
    expect(m.useLane('S', 0.3)).toBe(false);
    fill(1); // 10 %: the contention is over
    expect(m.useLane('S', 0.3)).toBe(false);
    fill(8); // (1 + 8) of 20 recent attempts aborted: 45 %
    expect(m.useLane('S', 0.3)).toBe(true); // hot again later: back to the base 1 s cooldown
    now = 4_000;
    expect(m.useLane('S', 0.3)).toBe(false);
  });

  it('after a conflict: the lane at once while a SKU is probed after its cooldown; else only after laneAfter conflicts', () => {
    let now = 0;
    const m = new InventoryMetrics({ now: () => now, cooldownMs: 1_000, windowMs: 60_000 });
    expect(m.laneAfterConflict(['S'], 1, 2)).toBe(false); // never hot: retry once
    expect(m.laneAfterConflict(['S'], 2, 2)).toBe(true);
    expect(m.laneAfterConflict(['S'], 5, undefined)).toBe(false); // no bound: pure CAS
    for (let i = 0; i < 10; i++) m.recordAttempt(['S'], i < 5);
    expect(m.useLane('S', 0.3)).toBe(true);
    now = 1_000;
    expect(m.useLane('S', 0.3)).toBe(false); // cooldown over: a probe
    expect(m.laneAfterConflict(['T', 'S'], 1, 2)).toBe(true); // the probe conflicted: the lane now
    for (let i = 0; i < 10; i++) m.recordAttempt(['S'], false);
    expect(m.useLane('S', 0.3)).toBe(false); // a clean window: no longer probed
    expect(m.laneAfterConflict(['S'], 1, 2)).toBe(false);
  });

  it('lanes: the same SKUs always hash to the same lane, and SKUs spread over the lanes', () => {
    expect(laneFor(['SKU-B', 'SKU-A'], 4)).toBe(laneFor(['SKU-A'], 4));
    const used = new Set(Array.from({ length: 50 }, (_, i) => laneFor([`SKU-${i}`], 4)));
    expect(used.size).toBe(4);
    expect(laneFor(['X'], 1)).toBe(0);
  });
});

describe('metrics under a concurrent race', () => {
  it('20 reservations racing on one SKU: every attempt counted once, commits match the rows written', async () => {
    const p = await createProduct(db, { stock: 100 });
    const ids = Array.from({ length: 20 }, (_, i) => `m-${i}-${uid()}`);
    await orderRows(ids);
    const metrics = new InventoryMetrics();
    // 5 ms of business logic between read and write, as real logic would take.
    const logic: ReserveLogic = () => new Promise((r) => setTimeout(r, 5));
    const acts = createActivities({
      db,
      provider: testProvider(),
      metrics,
      reserveLogic: logic,
      cas: { ...DEFAULT_CAS, maxAttempts: 50, abortRateThreshold: 1, laneAfterConflicts: undefined },
    }); // pure CAS: never the lane
    const results: ReserveResult[] = await Promise.all(
      ids.map((id) =>
        runActivity(acts.reserveInventory, { orderId: id, customerId: 'c', items: [{ sku: p.sku, qty: 1 }] }),
      ),
    );
    const s = metrics.snapshot()[0]!;
    const totalAttempts = results.reduce((a, r) => a + r.attempts, 0);
    const totalConflicts = results.reduce((a, r) => a + r.conflicts, 0);
    expect(results.every((r) => r.outcome === 'reserved')).toBe(true);
    expect(s.attempts).toBe(totalAttempts);
    expect(s.aborts).toBe(totalConflicts);
    expect(s.commits).toBe(20);
    expect(s.attempts).toBe(s.aborts + s.commits);
    expect(s.aborts).toBeGreaterThan(0); // they did contend
    expect(await productRow(db, p.sku)).toEqual({ stock: 80, version: 20 });
  });
});
