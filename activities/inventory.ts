import { Context, log } from '@temporalio/activity';
import type { Pool, PoolClient } from 'pg';
import { withTransaction } from '../db/pool';
import type { OrderStatus } from '../domain/order';
import { ErrorTypes } from '../domain/failures';
import { businessFailure } from './errors';
import { ABORT_RATE_CRITICAL, InventoryMetrics } from './inventory-metrics';
import { readOrder, rowConflict, stateConflict, transition } from './order-lock';
import { LaneGroup, type Outcome } from './lane-group';
import { withLaneLock } from './lane-lock';
import { holdPurchaseQuota } from './purchase-policy';
import type { ReserveRequest, SnapshotRow } from './reserve-types';
import { UndoLog } from './undo-log';

export type { ReserveRequest, SnapshotRow };

/** Conflict retry: wait = min(max, base·2^attempt) + rand(0, jitter), at most maxAttempts tries. */
export interface CasOptions {
  maxAttempts: number;
  baseMs: number;
  maxMs: number;
  jitterMs: number;
  /** Above this recent abort rate on any of its SKUs, a reservation goes straight to the serial lane. */
  abortRateThreshold: number;
  /** SKUs an operator pinned to the serial lane (INVENTORY_LANE_SKUS): known-hot, never tried by CAS. */
  laneSkus?: string[];
  /**
   * With the adaptive router (metrics present): after this many conflicts in one reservation it goes to
   * the serial lane instead of backing off again. Bounds the tail while the router's window still
   * says the SKU is cool (a probe after a cooldown, or a burst on a SKU not yet measured).
   */
  laneAfterConflicts?: number;
}
export const DEFAULT_CAS: CasOptions = {
  maxAttempts: 8,
  baseMs: 5,
  maxMs: 250,
  jitterMs: 25,
  abortRateThreshold: ABORT_RATE_CRITICAL,
  laneAfterConflicts: 1,
};

export function backoffMs(
  attempt: number,
  o: Pick<CasOptions, 'baseMs' | 'maxMs' | 'jitterMs'>,
  random: () => number = Math.random,
): number {
  return Math.min(o.maxMs, o.baseMs * 2 ** attempt) + random() * o.jitterMs;
}

/**
 * Business logic that runs between the snapshot read and the write, outside any transaction. Side
 * effects it takes record their inverse in `undo`. (The purchase quota is not here: it commits inside
 * the reservation's transaction, see holdPurchaseQuota.)
 */
export type ReserveLogic = (req: ReserveRequest, snapshot: SnapshotRow[], undo: UndoLog) => Promise<void>;

export type ReserveResult =
  /** `status`: the order row's status afterwards (RESERVED, or further along when it was already reserved). */
  | {
      outcome: 'reserved' | 'already-reserved';
      path: 'cas' | 'lane';
      attempts: number;
      conflicts: number;
      status: OrderStatus;
    }
  /** The SKUs are too contended for optimism right now: the workflow sends this to the serial lane. */
  | { outcome: 'route-to-lane'; path: 'cas'; attempts: number; conflicts: number; reason: string };

class CasConflict extends Error {}
class AlreadyReserved extends Error {}

const sortItems = <T extends { sku: string }>(items: T[]): T[] =>
  [...items].sort((a, b) => (a.sku < b.sku ? -1 : a.sku > b.sku ? 1 : 0));

/**
 * The order row guards the reservation: a PENDING order may reserve; an order already past it whose
 * lines are held (or sold), with none released, is already reserved (a retry, or a Reset run); any
 * other status is refused. A release leaves the order COMPENSATING or terminal: that is its tombstone,
 * so a late reservation after it is refused here and again inside the commit.
 */
async function reserveGate(db: Pool | PoolClient, orderId: string): Promise<OrderStatus | 'reserve'> {
  const order = await readOrder(db, orderId);
  // A cancel recorded before the reservation: nothing is reserved (the run learns of it from the refusal).
  if (order?.status === 'PENDING' && !order.cancel_request_id) return 'reserve';
  if (order && ['RESERVED', 'UNKNOWN_PAYMENT', 'CHARGED', 'AUTHORIZED', 'SHIPPED', 'CAPTURED'].includes(order.status)) {
    const { rows } = await db.query<{ kept: string; released: string }>({
      text: `SELECT count(*) FILTER (WHERE status IN ('HELD', 'SOLD')) AS kept, count(*) FILTER (WHERE status = 'RELEASED') AS released
             FROM reservations WHERE order_id = $1`,
      values: [orderId],
    });
    if (Number(rows[0]!.kept) > 0 && Number(rows[0]!.released) === 0) return order.status;
  }
  return rowConflict(orderId, order, 'reserve inventory');
}

async function readSnapshot(db: Pool | PoolClient, skus: string[], forUpdate = false): Promise<SnapshotRow[]> {
  const { rows } = await db.query<SnapshotRow>({
    name: forUpdate ? 'inventory-snapshot-locked' : 'inventory-snapshot',
    text: `SELECT sku, stock, version, max_per_customer FROM products WHERE sku = ANY($1::text[]) ORDER BY sku${forUpdate ? ' FOR UPDATE' : ''}`,
    values: [skus],
  });
  return rows;
}

/** Unknown SKU and insufficient stock are business failures, never retried. */
function checkStock(items: ReserveRequest['items'], snapshot: SnapshotRow[]): void {
  const bySku = new Map(snapshot.map((r) => [r.sku, r]));
  for (const item of items) {
    const row = bySku.get(item.sku);
    if (!row) throw businessFailure(ErrorTypes.InvalidOrder, `unknown SKU ${item.sku}`, { sku: item.sku });
    if (row.stock < item.qty) {
      throw businessFailure(ErrorTypes.InsufficientStock, `${item.sku}: ${row.stock} in stock, ${item.qty} wanted`, {
        sku: item.sku,
        stock: row.stock,
        wanted: item.qty,
      });
    }
  }
}

/** After a commit found rows of this order already there: only a real reservation counts as one. */
async function confirmReserved(db: Pool | PoolClient, orderId: string): Promise<OrderStatus> {
  const gate = await reserveGate(db, orderId);
  if (gate === 'reserve') stateConflict(orderId, 'PENDING', 'reserve: reservation rows of this order exist already');
  return gate;
}

/**
 * The reservation's transaction, around the stock writes (`writeStock`): first the order row moves
 * PENDING → RESERVED (locking it first, as every writer of this order does, so two transactions of
 * one order never wait on each other in opposite orders), then the stock, then the purchase quota
 * hold and the reservation rows HELD (each recording its quota hold). All or nothing.
 */
async function commitReservation(
  c: PoolClient,
  req: ReserveRequest,
  items: ReserveRequest['items'],
  writeStock: () => Promise<SnapshotRow[]>,
  /** The reserving run, when the transaction is not its own activity's (the lane's group commit). */
  runId?: string | null,
): Promise<void> {
  // Another execution of this same reserve committed first (the order is RESERVED): undo ours, report theirs.
  if (!(await transition(c, req.orderId, 'RESERVED', runId === undefined ? {} : { runId })).changed)
    throw new AlreadyReserved();
  const snapshot = await writeStock();
  const quota = await holdPurchaseQuota(c, req, snapshot);
  for (const item of items) {
    const res = await c.query({
      text: `INSERT INTO reservations (order_id, sku, qty, status, quota_qty) VALUES ($1, $2, $3, 'HELD', $4) ON CONFLICT (order_id, sku) DO NOTHING`,
      values: [req.orderId, item.sku, item.qty, quota.get(item.sku) ?? 0],
    });
    if (res.rowCount !== 1) throw new AlreadyReserved();
  }
}

export interface ReserveIo {
  logic?: ReserveLogic;
  metrics?: InventoryMetrics;
  heartbeat(details: unknown): void;
  sleep(ms: number): Promise<void>;
}

/**
 * Optimistic reservation. Read the rows with no lock and no transaction; run the logic; then write in
 * one short transaction, rows in primary-key order, each guarded by `version = $v AND stock >= $qty`.
 * Any rowCount of 0 rolls the whole write back as a conflict; the attempt's undo log runs LIFO, then
 * the next read tells a conflict from insufficient stock. Never uses FOR UPDATE.
 * When a SKU's recent abort rate is over the threshold, it does not try: it routes to the lane.
 */
export async function reserveOptimistic(
  db: Pool,
  req: ReserveRequest,
  opts: CasOptions,
  io: ReserveIo,
): Promise<ReserveResult> {
  const items = sortItems(req.items);
  const skus = items.map((i) => i.sku);
  let conflicts = 0;
  for (let attempt = 0; attempt < opts.maxAttempts; attempt++) {
    // Each retry heartbeats, so a stuck one is detected by its heartbeat timeout. The first attempt does
    // not: that timeout counts from the activity's start, and a heartbeat then would cost a round trip
    // to the server (and a write of the run's state) on every order for nothing it did not know.
    if (attempt > 0) io.heartbeat({ attempt, conflicts });
    const gate = await reserveGate(db, req.orderId);
    if (gate !== 'reserve')
      return { outcome: 'already-reserved', path: 'cas', attempts: attempt, conflicts, status: gate };
    const pinned = skus.find((s) => opts.laneSkus?.includes(s));
    if (pinned)
      return {
        outcome: 'route-to-lane',
        path: 'cas',
        attempts: attempt,
        conflicts,
        reason: `${pinned} is pinned to the serial lane`,
      };
    const hot = io.metrics && skus.find((s) => io.metrics!.useLane(s, opts.abortRateThreshold));
    if (hot) {
      io.metrics!.recordFallback(skus);
      return {
        outcome: 'route-to-lane',
        path: 'cas',
        attempts: attempt,
        conflicts,
        reason: `${hot} abort rate over ${(opts.abortRateThreshold * 100).toFixed(0)} %`,
      };
    }

    const snapshot = await readSnapshot(db, skus);
    checkStock(items, snapshot);
    const bySku = new Map(snapshot.map((r) => [r.sku, r]));
    const undo = new UndoLog();
    try {
      await io.logic?.(req, snapshot, undo);
      await withTransaction(db, (c) =>
        commitReservation(c, req, items, async () => {
          for (const item of items) {
            const res = await c.query({
              name: 'inventory-cas',
              text: `UPDATE products SET stock = stock - $2, version = version + 1 WHERE sku = $1 AND version = $3 AND stock >= $2`,
              values: [item.sku, item.qty, bySku.get(item.sku)!.version],
            });
            if (res.rowCount !== 1) throw new CasConflict(item.sku);
          }
          return snapshot;
        }),
      );
      io.metrics?.recordAttempt(skus, false);
      return { outcome: 'reserved', path: 'cas', attempts: attempt + 1, conflicts, status: 'RESERVED' };
    } catch (err) {
      await undo.rollback();
      if (err instanceof AlreadyReserved) {
        const status = await confirmReserved(db, req.orderId);
        return { outcome: 'already-reserved', path: 'cas', attempts: attempt + 1, conflicts, status };
      }
      if (!(err instanceof CasConflict)) throw err;
      conflicts++;
      io.metrics?.recordAttempt(skus, true);
      if (io.metrics?.laneAfterConflict(skus, conflicts, opts.laneAfterConflicts)) {
        io.metrics.recordFallback(skus);
        return {
          outcome: 'route-to-lane',
          path: 'cas',
          attempts: attempt + 1,
          conflicts,
          reason: `${conflicts} conflicts on ${err.message}`,
        };
      }
      const wait = backoffMs(attempt, opts);
      log.debug('CAS conflict, retrying', {
        orderId: req.orderId,
        sku: err.message,
        attempt,
        waitMs: Math.round(wait),
      });
      await io.sleep(wait);
    }
  }
  io.metrics?.recordFallback(skus);
  throw businessFailure(ErrorTypes.ContentionExhausted, `gave up after ${opts.maxAttempts} conflicting attempts`, {
    orderId: req.orderId,
    attempts: opts.maxAttempts,
  });
}

/** A reservation waiting for its lane: checked against a snapshot, its logic not yet run. */
export interface LaneReservation {
  req: ReserveRequest;
  /** The request's items in primary-key (SKU) order. */
  items: ReserveRequest['items'];
  snapshot: SnapshotRow[];
  /**
   * The run reserving: the round runs in one task's async context, so each reservation names its own
   * run for the order row's ownership (null: none).
   */
  runId: string | null;
}

/**
 * The serial lane's first step, on the task's own connection before it waits for the lane: the order
 * row's gate (a retried task whose reservation is done finds it here and waits for nothing), then the
 * snapshot and its stock check (a SKU already out of stock is refused without queueing).
 */
export async function prepareSerial(
  db: Pool,
  req: ReserveRequest,
  runId: string | null = null,
): Promise<LaneReservation | ReserveResult> {
  const items = sortItems(req.items);
  const gate = await reserveGate(db, req.orderId);
  if (gate !== 'reserve') return { outcome: 'already-reserved', path: 'lane', attempts: 0, conflicts: 0, status: gate };
  const snapshot = await readSnapshot(
    db,
    items.map((i) => i.sku),
  );
  checkStock(items, snapshot);
  return { req, items, snapshot, runId };
}

/** The savepoint each reservation of a group commit runs under. */
const SAVEPOINT = 'lane_reservation';

/**
 * The serial lane's group commit, on the lane's session (withLaneLock: a holder whose session is ended
 * for a lapsed lease commits nothing). First each reservation's logic, all at once, outside any
 * transaction (no business logic runs while the locks are held); then one short transaction: the order
 * rows of the group locked in primary-key order (orders before stock, as every writer of an order
 * does), then its product rows in primary-key order, then each reservation under a savepoint of its
 * own — all or nothing: one's business failure (out of stock, over its purchase limit) is rolled back
 * to its savepoint and the others commit. Idempotent by the order and the reservation rows: a
 * reservation already done (a retried task, or the same order twice in one group) reports the first.
 * The answers come back in the group's order.
 */
export async function reserveGroup(
  c: PoolClient,
  group: LaneReservation[],
  io: Pick<ReserveIo, 'logic' | 'metrics'>,
): Promise<Outcome<ReserveResult>[]> {
  const out: (Outcome<ReserveResult> | undefined)[] = group.map(() => undefined);
  const undos = group.map(() => new UndoLog());
  const logic = await Promise.allSettled(group.map(async (r, i) => io.logic?.(r.req, r.snapshot, undos[i]!)));
  logic.forEach((l, i) => {
    if (l.status === 'rejected') out[i] = { ok: false, error: l.reason };
  });
  const live = group.map((_, i) => i).filter((i) => !out[i]);
  const already: number[] = [];
  try {
    if (live.length > 0) {
      await onSession(c, async () => {
        const orderIds = [...new Set(live.map((i) => group[i]!.req.orderId))].sort();
        await c.query({
          name: 'lane-lock-orders',
          text: 'SELECT 1 FROM orders WHERE order_id = ANY($1::text[]) ORDER BY order_id FOR UPDATE',
          values: [orderIds],
        });
        const skus = [...new Set(live.flatMap((i) => group[i]!.items.map((it) => it.sku)))].sort();
        // The stock as this transaction sees it, kept up to date as each reservation commits.
        const stock = new Map((await readSnapshot(c, skus, true)).map((r) => [r.sku, { ...r }]));
        for (const i of live) {
          const { req, items, runId } = group[i]!;
          await c.query(`SAVEPOINT ${SAVEPOINT}`);
          try {
            await commitReservation(
              c,
              req,
              items,
              async () => {
                const rows = items.flatMap((it) => stock.get(it.sku) ?? []);
                checkStock(items, rows);
                for (const item of items) {
                  await c.query({
                    name: 'lane-take-stock',
                    text: 'UPDATE products SET stock = stock - $2, version = version + 1 WHERE sku = $1',
                    values: [item.sku, item.qty],
                  });
                }
                return rows;
              },
              runId,
            );
            await c.query(`RELEASE SAVEPOINT ${SAVEPOINT}`);
            for (const item of items) stock.get(item.sku)!.stock -= item.qty;
            out[i] = {
              ok: true,
              value: { outcome: 'reserved', path: 'lane', attempts: 1, conflicts: 0, status: 'RESERVED' },
            };
          } catch (err) {
            // Its statements undone, the transaction goes on for the others (if this fails, the session is lost).
            await c.query(`ROLLBACK TO SAVEPOINT ${SAVEPOINT}; RELEASE SAVEPOINT ${SAVEPOINT}`);
            if (err instanceof AlreadyReserved) already.push(i);
            else out[i] = { ok: false, error: err };
          }
        }
      });
    }
  } catch (err) {
    // The transaction itself failed (its session lost, say): nothing of it committed, every task fails.
    for (const i of live) out[i] = { ok: false, error: err };
  }
  for (const i of already) {
    if (out[i]) continue;
    try {
      const status = await confirmReserved(c, group[i]!.req.orderId);
      out[i] = { ok: true, value: { outcome: 'already-reserved', path: 'lane', attempts: 1, conflicts: 0, status } };
    } catch (err) {
      out[i] = { ok: false, error: err };
    }
  }
  // What each reservation's logic did is undone unless its own commit stands.
  for (const [i, o] of out.entries()) {
    if (o?.ok && o.value.outcome === 'reserved') io.metrics?.recordLaneCommit(group[i]!.items.map((it) => it.sku));
    else await undos[i]!.rollback();
  }
  return out.map((o) => o ?? { ok: false, error: new Error('no answer from the lane') });
}

/** BEGIN … COMMIT on one connection the caller holds (the lane's session), rolled back on any error. */
async function onSession<T>(c: PoolClient, fn: (c: PoolClient) => Promise<T>): Promise<T> {
  await c.query('BEGIN');
  try {
    const result = await fn(c);
    await c.query('COMMIT');
    return result;
  } catch (err) {
    await c.query('ROLLBACK').catch(() => undefined);
    throw err;
  }
}

/**
 * Compensation for the reservation, in one transaction: the order moves to COMPENSATING (its
 * tombstone: a late reservation commit after this is refused), only HELD rows become RELEASED, and the
 * stock and exactly the purchase quota those rows held go back. A second release, or a release with
 * nothing reserved, changes nothing. Refused once the order has shipped: the pivot is never undone.
 */
export async function releaseReservation(
  db: Pool,
  orderId: string,
): Promise<{ released: { sku: string; qty: number }[] }> {
  return withTransaction(db, async (c) => {
    const order = await readOrder(c, orderId, true);
    if (!order) return { released: [] }; // never created: nothing to undo
    if (order.status === 'SHIPPED' || order.status === 'CAPTURED' || order.status === 'COMPLETED')
      stateConflict(orderId, order.status, 'release inventory after the pivot');
    if (order.status !== 'FAILED' && order.status !== 'CANCELLED') await transition(c, orderId, 'COMPENSATING');
    const { rows } = await c.query<{ sku: string; qty: number; quota_qty: number }>({
      text: `UPDATE reservations SET status = 'RELEASED', updated_at = now() WHERE order_id = $1 AND status = 'HELD' RETURNING sku, qty, quota_qty`,
      values: [orderId],
    });
    rows.sort((a, b) => (a.sku < b.sku ? -1 : 1));
    for (const r of rows) {
      await c.query({
        text: 'UPDATE products SET stock = stock + $2, version = version + 1 WHERE sku = $1',
        values: [r.sku, r.qty],
      });
      if (r.quota_qty > 0) {
        await c.query({
          text: 'UPDATE purchase_quota SET held = GREATEST(held - $3, 0) WHERE customer_id = $1 AND sku = $2',
          values: [order.customer_id, r.sku, r.quota_qty],
        });
      }
    }
    return { released: rows.map(({ sku, qty }) => ({ sku, qty })) };
  });
}

export interface InventoryDeps {
  db: Pool;
  cas?: Partial<CasOptions>;
  /** Replaces the default logic (the purchase policy); tests use it to line attempts up. */
  reserveLogic?: ReserveLogic;
  metrics?: InventoryMetrics;
}

export function inventoryActivities(deps: InventoryDeps) {
  const opts: CasOptions = { ...DEFAULT_CAS, ...deps.cas };
  const logic = deps.reserveLogic;
  /** This process's lanes, by task queue: one group commit each. */
  const groups = new Map<string, LaneGroup<LaneReservation, ReserveResult>>();
  const laneGroup = (lane: string): LaneGroup<LaneReservation, ReserveResult> => {
    let g = groups.get(lane);
    if (!g) {
      g = new LaneGroup((round) =>
        withLaneLock(
          deps.db,
          lane,
          () => round.pending().map((r) => r.req.orderId),
          {
            heartbeat: round.heartbeat,
            signal: round.signal,
            log: (m: string, f: Record<string, unknown>) => {
              log.warn(m, f);
            },
          },
          (session) => reserveGroup(session, round.take(), { logic, metrics: deps.metrics }),
        ),
      );
      groups.set(lane, g);
    }
    return g;
  };
  return {
    async reserveInventory(req: ReserveRequest): Promise<ReserveResult> {
      const ctx = Context.current();
      const result = await reserveOptimistic(deps.db, req, opts, {
        logic,
        metrics: deps.metrics,
        heartbeat: (d) => ctx.heartbeat(d),
        sleep: (ms) => ctx.sleep(ms), // rejects when the activity is cancelled
      });
      log.info('inventory reservation', { orderId: req.orderId, ...result });
      return result;
    },

    /**
     * Runs on a serial lane's task queue. The lane's worker holds several tasks at once; they wait for
     * the lane's next round, which commits every reservation waiting in one transaction (one
     * transaction at a time per lane, across every worker process: reserveGroup, LaneGroup).
     */
    async reserveInventorySerial(req: ReserveRequest): Promise<ReserveResult> {
      const ctx = Context.current();
      const lane = ctx.info.taskQueue;
      ctx.heartbeat({ lane: true });
      const prepared = await prepareSerial(deps.db, req, ctx.info.workflowExecution?.runId ?? null);
      const result =
        'outcome' in prepared
          ? prepared
          : await laneGroup(lane).submit(prepared, {
              heartbeat: () => ctx.heartbeat({ waiting: lane }),
              signal: ctx.cancellationSignal,
            });
      log.info('inventory reserved by the serial lane', { orderId: req.orderId, ...result });
      return result;
    },

    async releaseInventory(req: { orderId: string }): Promise<{ released: { sku: string; qty: number }[] }> {
      const result = await releaseReservation(deps.db, req.orderId);
      log.info('inventory released', { orderId: req.orderId, lines: result.released.length });
      return result;
    },
  };
}
