/**
 * The order row as the saga's lock (a semantic lock: its status and its owner run, not a database
 * lock, decide which writes go through while the saga runs) and its only truth. Every status write
 * goes through `transition`: one guarded UPDATE against the `order_transitions` table, its rowCount
 * checked. A refused transition is a typed, non-retryable `OrderStateConflict` that names the current
 * status. The run that writes becomes the owner; the owner it replaced is superseded, and a write from
 * a superseded run (an activity left over from a reset or terminated run) is refused with `NotOrderOwner`.
 */
import { Context } from '@temporalio/activity';
import type { Pool, PoolClient } from 'pg';
import {
  BEFORE_PIVOT_STATUSES,
  FORWARD_STATUSES,
  isTerminal,
  type OrderStatus,
  type PaymentFlow,
} from '../domain/order';
import { ErrorTypes } from '../domain/failures';
import { businessFailure } from './errors';
import { EVENT_DATA_SQL, STATUS_EVENTS } from './order-events';

type Db = Pool | PoolClient;

export interface OrderLockRow {
  status: OrderStatus;
  owner_run_id: string | null;
  superseded_runs: string[];
  attention_from: OrderStatus | null;
  customer_id: string;
  currency: string;
  payment_method: string;
  /** The order's era (migrations/0018_authorizations.sql): charged, or authorized then captured. */
  payment_flow: PaymentFlow;
  total_cents: string;
  items: { sku: string; qty: number; unitPriceCents: number }[];
  /** The accepted cancel recorded on the order (migrations/0009_order_requests.sql), if any. */
  cancel_request_id: string | null;
  cancel_reason: string | null;
  /** What the current escalation is about (migrations/0011_resolve_escalation.sql), if it said. */
  attention_step: string | null;
  /** A resolve answering the current escalation, not refused and not yet applied (see `pendingResolve`). */
  pending_resolve: PendingResolve | null;
}

/** A cancel accepted and recorded on the order row: every run of the order honours it. */
export interface RecordedCancel {
  requestId: string;
  reason: string;
}

/**
 * A resolve recorded for the order's current escalation (the row in NEEDS_ATTENTION, the request's
 * `attention_seq` the row's) and not refused: pending, or accepted by a run that then did not leave
 * NEEDS_ATTENTION on it. Whichever run moves the order next applies it. Leaving NEEDS_ATTENTION, or a
 * later escalation, spends it: a request answers the one escalation it was recorded against.
 */
export interface PendingResolve {
  requestId: string;
  action: string;
  note?: string;
  reference?: string;
}

/** The first resolve still to apply, as one column of the row (`readOrder`). */
const PENDING_RESOLVE = `(SELECT json_strip_nulls(json_build_object('requestId', r.request_id, 'action', r.action, 'note', r.note, 'reference', r.reference))
     FROM order_requests r
    WHERE r.order_id = orders.order_id AND orders.status = 'NEEDS_ATTENTION' AND r.kind = 'resolve'
      AND r.outcome <> 'refused' AND r.attention_seq = orders.attention_seq
    ORDER BY r.at, r.request_id LIMIT 1) AS pending_resolve`;

/** The row's recorded cancel, if any. */
export const recordedCancel = (
  row: Pick<OrderLockRow, 'cancel_request_id' | 'cancel_reason'> | undefined,
): RecordedCancel | undefined =>
  row?.cancel_request_id ? { requestId: row.cancel_request_id, reason: row.cancel_reason || 'cancelled' } : undefined;

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
    text: `SELECT status, owner_run_id, superseded_runs, attention_from, customer_id, currency, payment_method, payment_flow, total_cents, items,
                  cancel_request_id, cancel_reason, attention_step, ${PENDING_RESOLVE}
             FROM orders WHERE order_id = $1${forUpdate ? ' FOR UPDATE' : ''}`,
    values: [orderId],
  });
  return rows[0];
}

/** What a refusal says of the row besides its status: the escalation and the requests recorded on it. */
export interface RowRequests {
  attentionFrom?: OrderStatus | null;
  attentionStep?: string | null;
  cancel?: RecordedCancel;
  resolve?: PendingResolve | null;
}

/**
 * The refusal: `details[0]` is `{ orderId, status, wanted, attentionFrom, attentionStep, cancel,
 * resolve }`, so the workflow can branch on where the row stands (in NEEDS_ATTENTION, where it
 * escalated from and about what) and learn of a cancel or a resolve still to apply recorded on it.
 */
export function stateConflict(
  orderId: string,
  status: OrderStatus | undefined,
  wanted: string,
  { attentionFrom, attentionStep, cancel, resolve }: RowRequests = {},
): never {
  throw businessFailure(
    ErrorTypes.OrderStateConflict,
    status === undefined
      ? `order ${orderId} does not exist (wanted: ${wanted})`
      : `order ${orderId} is ${status}${attentionFrom && status === 'NEEDS_ATTENTION' ? ` (from ${attentionFrom})` : ''}${cancel ? `, cancel recorded (${cancel.reason})` : ''}; refused: ${wanted}`,
    {
      orderId,
      status: status ?? null,
      wanted,
      attentionFrom: attentionFrom ?? null,
      attentionStep: attentionStep ?? null,
      cancel: cancel ?? null,
      resolve: resolve ?? null,
    },
  );
}

/** The refusal of a write on `row` as it stands (its status, escalation origin and recorded cancel). */
export function rowConflict(orderId: string, row: OrderLockRow | undefined, wanted: string): never {
  return stateConflict(orderId, row?.status, wanted, {
    attentionFrom: row?.attention_from,
    attentionStep: row?.attention_step,
    cancel: recordedCancel(row),
    resolve: row?.pending_resolve,
  });
}

/**
 * Is run ID `a` a time-ordered one (UUID version 7, as the Temporal server makes them) created before
 * `b`? Then `a` is an older run of the order than `b`: a run left over from before `b` started (a
 * Reset, a new start after a Terminate), which may no longer take the order over. Run IDs of other
 * versions (the time-skipping test server's) carry no order and never compare as older.
 */
export const olderRun = (a: string, b: string): boolean => a[14] === '7' && b[14] === '7' && a < b;

/**
 * Refuses a run that a later run of the same order has superseded, or that is older than the owner
 * (see olderRun); `runId` undefined (outside a run) passes.
 */
export function assertNotSuperseded(
  orderId: string,
  row: Pick<OrderLockRow, 'superseded_runs' | 'owner_run_id' | 'status'>,
  runId: string | null | undefined,
  wanted: string,
): void {
  if (
    runId &&
    (row.superseded_runs.includes(runId) ||
      (row.owner_run_id !== null && row.owner_run_id !== runId && olderRun(runId, row.owner_run_id)))
  ) {
    throw businessFailure(
      ErrorTypes.NotOrderOwner,
      `order ${orderId} is driven by run ${row.owner_run_id ?? '?'} now; run ${runId} was superseded (refused: ${wanted})`,
      { orderId, status: row.status, owner: row.owner_run_id, runId },
    );
  }
}

/**
 * The SET part shared by every write that changes the owner: the caller ($runParam) becomes the owner
 * and the owner it replaces joins `superseded_runs`.
 */
export const takeOwnership = (runParam: string): string =>
  `superseded_runs = CASE WHEN ${runParam}::text IS NOT NULL AND owner_run_id IS NOT NULL AND owner_run_id <> ${runParam}::text
                           THEN array_append(superseded_runs, owner_run_id) ELSE superseded_runs END,
   owner_run_id = COALESCE(${runParam}::text, owner_run_id)`;
/** The WHERE part: the caller is not a superseded run, nor a run older than the owner (olderRun). */
export const notSuperseded = (runParam: string): string =>
  `(${runParam}::text IS NULL OR (NOT (${runParam}::text = ANY (superseded_runs))
     AND NOT (owner_run_id IS NOT NULL AND owner_run_id <> ${runParam}::text
              AND substr(owner_run_id, 15, 1) = '7' AND substr(${runParam}::text, 15, 1) = '7'
              AND ${runParam}::text COLLATE "C" < owner_run_id COLLATE "C")))`;

/** A forward write to a status the order has already passed is a no-op, not an error. */
const isPast = (current: OrderStatus, to: OrderStatus): boolean =>
  FORWARD_STATUSES.includes(to) && FORWARD_STATUSES.indexOf(current) >= FORWARD_STATUSES.indexOf(to);

/** What a guarded write did: whether the status changed, and the row's status afterwards. */
export interface TransitionResult {
  changed: boolean;
  status: OrderStatus;
}

/**
 * Moves the order to `to` if the table allows it from the current status: one guarded UPDATE, its
 * rowCount checked. Rewriting the current status, or a forward status the order has already passed
 * (a late or repeated write), changes nothing and succeeds, except on a terminal order that another
 * run owns: a second run must not act on a settled order. The writing run becomes the owner; a
 * superseded run is refused. Returns the row's real status afterwards.
 */
export async function transition(
  db: Db,
  orderId: string,
  to: OrderStatus,
  opts: {
    reason?: string;
    /** The run making the change; by default the calling activity's (null: none, ownership untouched). */
    runId?: string | null;
    step?: string;
    /** Added to the event's data (the tracking number of a shipment made in the same transaction). */
    eventData?: Record<string, unknown>;
  } = {},
): Promise<TransitionResult> {
  const runId = opts.runId !== undefined ? opts.runId : (callerRunId() ?? null);
  const res = await db.query<{ n: number }>({
    name: 'order-transition',
    // An escalation records what it is about (`step`), for a run that takes the order over. CHARGED
    // records the money taken: the charge is for the row's own total (chargePayment checks it);
    // AUTHORIZED the money held, CAPTURED the hold taken (authorizations.ts checks them). Each era
    // keeps to its own statuses, and an authorization-era order completes only once captured. A
    // status that is an event (STATUS_EVENTS) writes it in the same statement, numbered from the row.
    text: `WITH o AS (
             UPDATE orders SET status = $2, reason = COALESCE($3, reason), ${takeOwnership('$4')}, updated_at = now(),
                    attention_step = CASE WHEN $2 = 'NEEDS_ATTENTION' AND status <> 'NEEDS_ATTENTION' THEN $6::text ELSE attention_step END,
                    charged_cents = CASE WHEN $2 = 'CHARGED' THEN GREATEST(charged_cents, total_cents) ELSE charged_cents END,
                    authorized_cents = CASE WHEN $2 = 'AUTHORIZED' THEN GREATEST(authorized_cents, total_cents) ELSE authorized_cents END,
                    captured_cents = CASE WHEN $2 = 'CAPTURED' THEN GREATEST(captured_cents, authorized_cents) ELSE captured_cents END,
                    authorization_status = CASE WHEN $2 = 'AUTHORIZED' AND authorization_status IS NULL THEN 'authorized'
                                                WHEN $2 = 'CAPTURED' THEN 'captured' ELSE authorization_status END,
                    event_seq = event_seq + CASE WHEN $7::text IS NULL THEN 0 ELSE 1 END
             WHERE order_id = $1 AND status IN (SELECT from_status FROM order_transitions WHERE to_status = $2)
               AND (status <> 'NEEDS_ATTENTION' OR attention_from = $2
                    OR ($2 = 'COMPENSATING' AND attention_from = ANY ($5::text[])))
               AND ($2 <> 'SHIPPED' OR cancel_request_id IS NULL)
               AND ($2 NOT IN ('AUTHORIZED', 'CAPTURED') OR payment_flow = 'authorization')
               AND ($2 <> 'CHARGED' OR payment_flow = 'charge')
               AND ($2 <> 'COMPLETED' OR payment_flow = 'charge' OR status = 'CAPTURED')
               AND ${notSuperseded('$4')}
             RETURNING order_id, event_seq, status, reason, customer_id, total_cents, currency, attention_step
           ), e AS (
             INSERT INTO order_events (order_id, seq, kind, data)
             SELECT o.order_id, o.event_seq, $7::text, ${EVENT_DATA_SQL('o')} || $8::jsonb FROM o WHERE $7::text IS NOT NULL
           )
           SELECT count(*)::int AS n FROM o`,
    // An escalation may still turn backward (to COMPENSATING) when it began before the pivot.
    values: [
      orderId,
      to,
      opts.reason ?? null,
      runId,
      BEFORE_PIVOT_STATUSES,
      opts.step ?? null,
      STATUS_EVENTS[to] ?? null,
      JSON.stringify(opts.eventData ?? {}),
    ],
  });
  if (res.rows[0]!.n === 1) return { changed: true, status: to };
  const current = await readOrder(db, orderId);
  if (current) assertNotSuperseded(orderId, current, runId, `→ ${to}`);
  if (current && (current.status === to || isPast(current.status, to))) {
    if (!isTerminal(current.status)) return { changed: false, status: current.status };
    // The owner's own retry
    if (runId === null || current.owner_run_id === runId) return { changed: false, status: current.status };
  }
  return rowConflict(orderId, current, `→ ${to}`);
}

/**
 * Leaves NEEDS_ATTENTION for the status the order stood in when it escalated (whatever a run thinks
 * it was), or with `backward` (a person said the charge failed) for COMPENSATING, when it escalated
 * before the pivot: the row itself then says the order goes backward, to any run that reads it next.
 * Returns the order's status afterwards; an order no longer in NEEDS_ATTENTION is left as it is.
 */
export async function resumeFromAttention(
  db: Db,
  orderId: string,
  reason?: string,
  backward = false,
): Promise<OrderStatus> {
  const runId = callerRunId() ?? null;
  const { rows } = await db.query<{ status: OrderStatus }>({
    text: `UPDATE orders SET status = CASE WHEN $4 THEN 'COMPENSATING' ELSE attention_from END,
                  reason = COALESCE($2, reason), ${takeOwnership('$3')}, updated_at = now()
           WHERE order_id = $1 AND status = 'NEEDS_ATTENTION' AND attention_from IS NOT NULL AND ${notSuperseded('$3')}
             AND (NOT $4 OR attention_from = ANY ($5::text[]))
           RETURNING status`,
    values: [orderId, reason ?? null, runId, backward, BEFORE_PIVOT_STATUSES],
  });
  if (rows[0]) return rows[0].status;
  const current = await readOrder(db, orderId);
  if (!current) return stateConflict(orderId, undefined, 'resume from NEEDS_ATTENTION');
  assertNotSuperseded(orderId, current, runId, 'resume from NEEDS_ATTENTION');
  return current.status;
}
