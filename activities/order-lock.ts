/**
 * The order row as the saga's lock (seed 004's semantic lock). Every status write goes through
 * `transition`: one guarded UPDATE against the `order_transitions` table, its rowCount checked. A
 * refused transition is a typed, non-retryable `OrderStateConflict` that names the current status.
 */
import { Context } from '@temporalio/activity';
import type { Pool, PoolClient } from 'pg';
import { TERMINAL_STATUSES, type OrderStatus } from '../domain/order';
import { businessFailure, ErrorTypes } from './errors';

type Db = Pool | PoolClient;

export interface OrderLockRow {
  status: OrderStatus;
  owner_run_id: string | null;
  customer_id: string;
  currency: string;
  payment_method: string;
  total_cents: string;
  items: { sku: string; qty: number; unitPriceCents: number }[];
}

/** The run ID of the workflow that called the current activity, or undefined outside an activity. */
export function callerRunId(): string | undefined {
  try {
    return Context.current().info.workflowExecution?.runId;
  } catch {
    return undefined;
  }
}

export async function readOrder(db: Db, orderId: string, forUpdate = false): Promise<OrderLockRow | undefined> {
  const { rows } = await db.query<OrderLockRow>({
    text: `SELECT status, owner_run_id, customer_id, currency, payment_method, total_cents, items FROM orders WHERE order_id = $1${forUpdate ? ' FOR UPDATE' : ''}`,
    values: [orderId],
  });
  return rows[0];
}

/** The refusal: `details[0]` is `{ orderId, status, wanted }`, so the workflow can branch on the status. */
export function stateConflict(orderId: string, status: OrderStatus | undefined, wanted: string): never {
  throw businessFailure(
    ErrorTypes.OrderStateConflict,
    status === undefined
      ? `order ${orderId} does not exist (wanted: ${wanted})`
      : `order ${orderId} is ${status}; refused: ${wanted}`,
    { orderId, status: status ?? null, wanted },
  );
}

/** The forward path. A forward write to a status the order has already passed is a no-op, not an error. */
const FORWARD: readonly OrderStatus[] = ['PENDING', 'RESERVED', 'UNKNOWN_PAYMENT', 'CHARGED', 'SHIPPED', 'COMPLETED'];
const isPast = (current: OrderStatus, to: OrderStatus): boolean =>
  FORWARD.includes(to) && FORWARD.indexOf(current) >= FORWARD.indexOf(to);

/**
 * Moves the order to `to` if the table allows it from the current status: one guarded UPDATE, its
 * rowCount checked. Rewriting the current status, or a forward status the order has already passed
 * (a late or repeated write), changes nothing and succeeds, except on a terminal order that another
 * run owns: a second run must not act on a settled order. The writing run becomes the owner.
 * Returns whether the status changed.
 */
export async function transition(
  db: Db,
  orderId: string,
  to: OrderStatus,
  opts: { reason?: string; runId?: string } = {},
): Promise<boolean> {
  const runId = opts.runId ?? callerRunId() ?? null;
  const res = await db.query({
    name: 'order-transition',
    text: `UPDATE orders SET status = $2, reason = COALESCE($3, reason), owner_run_id = COALESCE($4, owner_run_id), updated_at = now()
           WHERE order_id = $1 AND status IN (SELECT from_status FROM order_transitions WHERE to_status = $2)
             AND (status <> 'NEEDS_ATTENTION' OR attention_from = $2)`,
    values: [orderId, to, opts.reason ?? null, runId],
  });
  if (res.rowCount === 1) return true;
  const current = await readOrder(db, orderId);
  if (current && (current.status === to || isPast(current.status, to))) {
    if (!isTerminal(current.status)) return false;
    if (runId === null || current.owner_run_id === runId) return false; // the owner's own retry
  }
  return stateConflict(orderId, current?.status, `→ ${to}`);
}

/**
 * Leaves NEEDS_ATTENTION for the status the order stood in when it escalated (whatever a run thinks
 * it was). Returns the order's status afterwards; an order no longer in NEEDS_ATTENTION is left as it is.
 */
export async function resumeFromAttention(db: Db, orderId: string, reason?: string): Promise<OrderStatus> {
  const runId = callerRunId() ?? null;
  const { rows } = await db.query<{ status: OrderStatus }>({
    text: `UPDATE orders SET status = attention_from, reason = COALESCE($2, reason), owner_run_id = COALESCE($3, owner_run_id), updated_at = now()
           WHERE order_id = $1 AND status = 'NEEDS_ATTENTION' AND attention_from IS NOT NULL RETURNING status`,
    values: [orderId, reason ?? null, runId],
  });
  if (rows[0]) return rows[0].status;
  const current = await readOrder(db, orderId);
  return current ? current.status : stateConflict(orderId, undefined, 'resume from NEEDS_ATTENTION');
}

export const isTerminal = (status: OrderStatus): boolean => TERMINAL_STATUSES.includes(status);
