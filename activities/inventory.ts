import { Context, log } from '@temporalio/activity';
import type { Pool } from 'pg';
import type { OrderItem } from '../domain/order';
import { withTransaction } from '../db/pool';
import { businessFailure, ErrorTypes } from './errors';

/** Conflict retry: wait = min(max, base·2^attempt) + rand(0, jitter), at most maxAttempts tries. */
export interface CasOptions {
  maxAttempts: number;
  baseMs: number;
  maxMs: number;
  jitterMs: number;
}
export const DEFAULT_CAS: CasOptions = { maxAttempts: 8, baseMs: 5, maxMs: 250, jitterMs: 25 };

export function backoffMs(attempt: number, o: CasOptions, random: () => number = Math.random): number {
  return Math.min(o.maxMs, o.baseMs * 2 ** attempt) + random() * o.jitterMs;
}

export interface ReserveRequest {
  orderId: string;
  customerId: string;
  items: Pick<OrderItem, 'sku' | 'qty'>[];
}

export interface SnapshotRow {
  sku: string;
  stock: number;
  version: string;
}

/**
 * Business logic that runs between the snapshot read and the CAS write, outside any transaction
 * (seed 003's validatePurchasePolicy sits here). It may throw a business failure.
 */
export type ReserveLogic = (req: ReserveRequest, snapshot: SnapshotRow[]) => Promise<void>;

export interface ReserveResult {
  outcome: 'reserved' | 'already-reserved';
  attempts: number;
  conflicts: number;
}

class CasConflict extends Error {}

/**
 * Optimistic reservation. Read the rows with no lock and no transaction; run the logic; then write
 * in one short transaction, rows in primary-key order, each guarded by `version = $v AND stock >= $qty`.
 * Any rowCount of 0 rolls the whole write back as a conflict; the next read tells a conflict from
 * insufficient stock. Never uses FOR UPDATE.
 */
export async function reserveOptimistic(
  db: Pool,
  req: ReserveRequest,
  opts: CasOptions,
  io: { logic?: ReserveLogic; heartbeat(details: unknown): void; sleep(ms: number): Promise<void> },
): Promise<ReserveResult> {
  const items = [...req.items].sort((a, b) => (a.sku < b.sku ? -1 : a.sku > b.sku ? 1 : 0));
  let conflicts = 0;
  for (let attempt = 0; attempt < opts.maxAttempts; attempt++) {
    const prior = await db.query({ text: 'SELECT 1 FROM reservations WHERE order_id = $1 LIMIT 1', values: [req.orderId] });
    if (prior.rowCount) return { outcome: 'already-reserved', attempts: attempt + 1, conflicts };

    const { rows: snapshot } = await db.query<SnapshotRow>({
      text: 'SELECT sku, stock, version FROM products WHERE sku = ANY($1::text[]) ORDER BY sku',
      values: [items.map((i) => i.sku)],
    });
    const bySku = new Map(snapshot.map((r) => [r.sku, r]));
    for (const item of items) {
      const row = bySku.get(item.sku);
      if (!row) throw businessFailure(ErrorTypes.InvalidOrder, `unknown SKU ${item.sku}`, { sku: item.sku });
      if (row.stock < item.qty) {
        throw businessFailure(ErrorTypes.InsufficientStock, `${item.sku}: ${row.stock} in stock, ${item.qty} wanted`, {
          sku: item.sku, stock: row.stock, wanted: item.qty,
        });
      }
    }
    await io.logic?.(req, snapshot);

    try {
      const inserted = await withTransaction(db, async (c) => {
        for (const item of items) {
          const row = bySku.get(item.sku)!;
          const res = await c.query({
            text: `UPDATE products SET stock = stock - $2, version = version + 1
                   WHERE sku = $1 AND version = $3 AND stock >= $2`,
            values: [item.sku, item.qty, row.version],
          });
          if (res.rowCount !== 1) throw new CasConflict(item.sku);
        }
        for (const item of items) {
          const res = await c.query({
            text: `INSERT INTO reservations (order_id, sku, qty, status) VALUES ($1, $2, $3, 'HELD')
                   ON CONFLICT (order_id, sku) DO NOTHING`,
            values: [req.orderId, item.sku, item.qty],
          });
          // Another execution of this same reserve committed first: undo ours, report theirs.
          if (res.rowCount !== 1) throw new AlreadyReserved();
        }
        return true;
      });
      if (inserted) return { outcome: 'reserved', attempts: attempt + 1, conflicts };
    } catch (err) {
      if (err instanceof AlreadyReserved) return { outcome: 'already-reserved', attempts: attempt + 1, conflicts };
      if (!(err instanceof CasConflict)) throw err;
      conflicts++;
      const wait = backoffMs(attempt, opts);
      log.debug('CAS conflict, retrying', { orderId: req.orderId, sku: err.message, attempt, waitMs: Math.round(wait) });
      io.heartbeat({ attempt, conflicts });
      await io.sleep(wait);
    }
  }
  throw businessFailure(ErrorTypes.ContentionExhausted, `gave up after ${opts.maxAttempts} conflicting attempts`, {
    orderId: req.orderId, attempts: opts.maxAttempts,
  });
}

class AlreadyReserved extends Error {}

/**
 * Compensation for the reservation. Only HELD rows become RELEASED, and the stock goes back in the
 * same transaction, so a second release (or a release with nothing reserved) changes nothing.
 */
export async function releaseReservation(db: Pool, orderId: string): Promise<{ released: { sku: string; qty: number }[] }> {
  return withTransaction(db, async (c) => {
    const { rows } = await c.query<{ sku: string; qty: number }>({
      text: `UPDATE reservations SET status = 'RELEASED', updated_at = now()
             WHERE order_id = $1 AND status = 'HELD' RETURNING sku, qty`,
      values: [orderId],
    });
    rows.sort((a, b) => (a.sku < b.sku ? -1 : 1));
    for (const r of rows) {
      await c.query({
        text: 'UPDATE products SET stock = stock + $2, version = version + 1 WHERE sku = $1',
        values: [r.sku, r.qty],
      });
    }
    return { released: rows };
  });
}

export function inventoryActivities(deps: { db: Pool; cas?: Partial<CasOptions>; reserveLogic?: ReserveLogic }) {
  const opts: CasOptions = { ...DEFAULT_CAS, ...deps.cas };
  return {
    async reserveInventory(req: ReserveRequest): Promise<ReserveResult> {
      const ctx = Context.current();
      const result = await reserveOptimistic(deps.db, req, opts, {
        logic: deps.reserveLogic,
        heartbeat: (d) => ctx.heartbeat(d),
        sleep: (ms) => ctx.sleep(ms), // rejects when the activity is cancelled
      });
      log.info('inventory reserved', { orderId: req.orderId, ...result });
      return result;
    },

    async releaseInventory(req: { orderId: string }): Promise<{ released: { sku: string; qty: number }[] }> {
      const result = await releaseReservation(deps.db, req.orderId);
      log.info('inventory released', { orderId: req.orderId, lines: result.released.length });
      return result;
    },
  };
}
