import { Context, log } from '@temporalio/activity';
import type { Pool, PoolClient } from 'pg';
import { withTransaction } from '../db/pool';
import type { OrderStatus } from '../domain/order';
import { ErrorTypes } from '../domain/failures';
import { businessFailure } from './errors';
import { ABORT_RATE_CRITICAL, InventoryMetrics } from './inventory-metrics';
import { readOrder, rowConflict, stateConflict, transition } from './order-lock';
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
  laneAfterConflicts: 2,
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
): Promise<void> {
  // Another execution of this same reserve committed first (the order is RESERVED): undo ours, report theirs.
  if (!(await transition(c, req.orderId, 'RESERVED')).changed) throw new AlreadyReserved();
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

/**
 * The serial lane's reservation: the logic first (outside any transaction), then one short
 * transaction that locks the rows with SELECT … FOR UPDATE in primary-key order, checks and writes.
 * No business logic runs while the locks are held. One lane runs one of these at a time, on the lane's
 * session (withLaneLock): a holder whose session is ended for a lapsed lease commits nothing.
 */
export async function reserveSerial(
  db: PoolClient,
  req: ReserveRequest,
  io: Pick<ReserveIo, 'logic' | 'metrics' | 'heartbeat'>,
): Promise<ReserveResult> {
  const items = sortItems(req.items);
  const skus = items.map((i) => i.sku);
  io.heartbeat({ lane: true });
  const gate = await reserveGate(db, req.orderId);
  if (gate !== 'reserve') return { outcome: 'already-reserved', path: 'lane', attempts: 0, conflicts: 0, status: gate };
  const undo = new UndoLog();
  try {
    const snapshot = await readSnapshot(db, skus);
    checkStock(items, snapshot);
    await io.logic?.(req, snapshot, undo);
    await onSession(db, (c) =>
      commitReservation(c, req, items, async () => {
        const locked = await readSnapshot(c, skus, true);
        checkStock(items, locked);
        for (const item of items) {
          await c.query({
            text: 'UPDATE products SET stock = stock - $2, version = version + 1 WHERE sku = $1',
            values: [item.sku, item.qty],
          });
        }
        return locked;
      }),
    );
    io.metrics?.recordLaneCommit(skus);
    return { outcome: 'reserved', path: 'lane', attempts: 1, conflicts: 0, status: 'RESERVED' };
  } catch (err) {
    await undo.rollback();
    if (err instanceof AlreadyReserved) {
      const status = await confirmReserved(db, req.orderId);
      return { outcome: 'already-reserved', path: 'lane', attempts: 1, conflicts: 0, status };
    }
    throw err;
  }
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

    /** Runs on a serial lane's task queue: one task at a time per lane, across every worker process. */
    async reserveInventorySerial(req: ReserveRequest): Promise<ReserveResult> {
      const ctx = Context.current();
      const lane = ctx.info.taskQueue;
      const io = {
        heartbeat: () => ctx.heartbeat({ waiting: lane }),
        signal: ctx.cancellationSignal,
        log: (m: string, f: Record<string, unknown>) => {
          log.warn(m, f);
        },
      };
      const result = await withLaneLock(deps.db, lane, req.orderId, io, (session) =>
        reserveSerial(session, req, { logic, metrics: deps.metrics, heartbeat: (d) => ctx.heartbeat(d) }),
      );
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
