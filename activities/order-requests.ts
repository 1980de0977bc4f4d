/**
 * Cancels and resolves as promises kept in Postgres (migrations/0009_order_requests.sql): whatever
 * happens to a run's history, the order row says what was accepted.
 *
 * A cancel is decided here, against the pivot, in the row the shipment writes: accepted only while the
 * order has not shipped (nor escalated at the pivot), and then recorded on the order, so the shipment's
 * guarded write refuses it whichever run tries. client.ts decides a cancel here before it tells anyone
 * (`decideCancel`); a run records a Signal that came without a record (the Web UI, the Temporal CLI)
 * with the `recordCancel` activity. A resolve is recorded by client.ts as pending; the run checks it
 * against the ledger (`checkResolution`) before it moves money or closes the order.
 */
import { log } from '@temporalio/activity';
import type { Pool, PoolClient } from 'pg';
import { withTransaction } from '../db/pool';
import {
  authorizeKeyFor,
  chargeKeyFor,
  formatMoney,
  holdKeysFor,
  isPastPivot,
  isTerminal,
  RESOLVE_ACTIONS_FOR,
  type Awaiting,
  type OrderStatus,
} from '../domain/order';
import type { AuthorizationClient, ProviderClient } from '../provider/client';
import { readOrder, recordedCancel, type RecordedCancel } from './order-lock';

/** Who recorded a request first: client.ts before its Signal, or a run for a Signal without a record. */
export type RequestSource = 'client' | 'signal';

export interface CancelDecision {
  outcome: 'accepted' | 'refused';
  /** Why it was refused, or a note on an accepted one (already being cancelled). */
  message?: string;
  /** The cancel recorded on the order (the first accepted one), when there is one. */
  cancel?: RecordedCancel;
}

/** An escalation from these stands at the pivot (the shipment may have been made by hand): no cancel. */
const AT_PIVOT: readonly (OrderStatus | null)[] = ['CHARGED', 'AUTHORIZED', 'SHIPPED', 'CAPTURED'];

/** Why the order, as it stands, refuses a cancel; undefined when it takes one. */
export function cancelRefusal(
  orderId: string,
  row: { status: OrderStatus; attention_from: OrderStatus | null },
): string | undefined {
  const { status } = row;
  if (isTerminal(status) && !isPastPivot(status)) return `order ${orderId} is already ${status}`;
  if (isPastPivot(status) || (status === 'NEEDS_ATTENTION' && AT_PIVOT.includes(row.attention_from)))
    return `order ${orderId} has reached the shipment (the pivot); it can only move forward`;
  if (status === 'COMPENSATING' || (status === 'NEEDS_ATTENTION' && row.attention_from === 'COMPENSATING'))
    return `order ${orderId} is already being compensated; there is nothing left to cancel`;
  return undefined;
}

/**
 * Decides a cancel in one transaction on the order row (locked, as the shipment locks it): the same
 * request again gets its first answer; else accepted (and recorded on the order) or refused, and the
 * request is recorded either way. An order with no row yet is refused, nothing written.
 */
export async function decideCancel(
  db: Pool,
  req: { orderId: string; requestId: string; reason: string; source: RequestSource },
): Promise<CancelDecision> {
  return withTransaction(db, async (c) => {
    const row = await readOrder(c, req.orderId, true);
    if (!row) return { outcome: 'refused', message: `order ${req.orderId} has no order row (yet)` };
    const prior = await priorRequest(c, req.orderId, req.requestId);
    const cancel = recordedCancel(row);
    if (prior) return decisionOf(prior, cancel);
    // An order being cancelled takes another cancel as the same promise, until it has ended.
    const refused = cancel && !isTerminal(row.status) ? undefined : cancelRefusal(req.orderId, row);
    const outcome = refused === undefined ? 'accepted' : 'refused';
    const message =
      refused ?? (cancel ? `order ${req.orderId} is already being cancelled (${cancel.reason})` : undefined);
    await c.query({
      text: `INSERT INTO order_requests (order_id, request_id, kind, source, reason, outcome, message, decided_at)
             VALUES ($1, $2, 'cancel', $3, $4, $5, $6, now())`,
      values: [req.orderId, req.requestId, req.source, req.reason, outcome, message ?? null],
    });
    if (outcome === 'refused') return { outcome, message: refused };
    if (cancel) return { outcome, ...(message ? { message } : {}), cancel };
    await c.query({
      text: 'UPDATE orders SET cancel_request_id = $2, cancel_reason = $3, updated_at = now() WHERE order_id = $1',
      values: [req.orderId, req.requestId, req.reason],
    });
    return { outcome, cancel: { requestId: req.requestId, reason: req.reason } };
  });
}

interface RequestRow {
  kind: 'cancel' | 'resolve';
  outcome: 'pending' | 'accepted' | 'refused';
  message: string | null;
}

async function priorRequest(c: PoolClient, orderId: string, requestId: string): Promise<RequestRow | undefined> {
  const { rows } = await c.query<RequestRow>({
    text: 'SELECT kind, outcome, message FROM order_requests WHERE order_id = $1 AND request_id = $2',
    values: [orderId, requestId],
  });
  return rows[0];
}

function decisionOf(prior: RequestRow, cancel: RecordedCancel | undefined): CancelDecision {
  if (prior.kind !== 'cancel' || prior.outcome !== 'accepted')
    return { outcome: 'refused', message: prior.message ?? 'this request ID was used for another request' };
  return { outcome: 'accepted', ...(prior.message ? { message: prior.message } : {}), ...(cancel ? { cancel } : {}) };
}

/** The escalation a resolve recorded now answers: the order's count of them while it is in NEEDS_ATTENTION. */
const CURRENT_ESCALATION = `(SELECT CASE WHEN o.status = 'NEEDS_ATTENTION' THEN o.attention_seq END FROM orders o WHERE o.order_id = $1)`;

/**
 * A resolve as client.ts records it before its Signal: pending until a run checks it, and against
 * the escalation the order stands in (whichever run moves the order next applies it). The same
 * request ID again is a no-op (and recorded).
 */
export async function recordResolve(
  db: Pool,
  req: { orderId: string; requestId: string; action: string; note?: string; reference?: string },
): Promise<{ recorded: boolean }> {
  await db.query({
    text: `INSERT INTO order_requests (order_id, request_id, kind, source, action, note, reference, outcome, attention_seq)
           SELECT $1, $2, 'resolve', 'client', $3, $4, $5, 'pending', ${CURRENT_ESCALATION}
            WHERE EXISTS (SELECT 1 FROM orders WHERE order_id = $1)
           ON CONFLICT (order_id, request_id) DO NOTHING`,
    values: [req.orderId, req.requestId, req.action, req.note ?? null, req.reference ?? null],
  });
  // Recorded now, or by an earlier attempt of the same request whose answer was lost.
  const { rowCount } = await db.query({
    text: 'SELECT 1 FROM order_requests WHERE order_id = $1 AND request_id = $2',
    values: [req.orderId, req.requestId],
  });
  return { recorded: rowCount === 1 };
}

/** Writes the answer to a request still pending (a refusal the run gave before checking it, say). */
export async function settleRequest(
  db: Pool,
  req: { orderId: string; requestId: string; outcome: 'accepted' | 'refused'; message?: string },
): Promise<void> {
  await db.query({
    text: `UPDATE order_requests SET outcome = $3, message = $4, decided_at = now()
           WHERE order_id = $1 AND request_id = $2 AND outcome = 'pending'`,
    values: [req.orderId, req.requestId, req.outcome, req.message ?? null],
  });
}

/** What a run asks `checkResolution` about: the operator's request and what the saga waits for. */
export interface ResolutionCheck {
  orderId: string;
  requestId: string;
  action: string;
  note?: string;
  reference?: string;
  awaiting: Awaiting;
  /** The compensation that failed, when awaiting one. */
  compensation?: string;
}

export function orderRequestActivities({ db, provider }: { db: Pool; provider: ProviderClient & AuthorizationClient }) {
  /**
   * The ledger's word on an authorization-era order (the hold, the capture); undefined when the
   * operator's answer agrees, or when the order is of the charge era (`contradiction` judges it).
   */
  const holdContradiction = async (req: ResolutionCheck): Promise<string | undefined> => {
    const key = authorizeKeyFor(req.orderId);
    const cannot = (err: unknown) => `cannot confirm ${req.action} with the provider: ${(err as Error).message}`;
    if (req.awaiting === 'capture') {
      if (req.action !== 'mark-resolved') return undefined;
      // Either hold's capture (the first, or the fresh one the saga tried after an expiry).
      const says: string[] = [];
      for (const { captureKey } of holdKeysFor(req.orderId)) {
        try {
          const c = await provider.getCapture(captureKey);
          if (c?.status === 'succeeded') return undefined;
          says.push(
            `capture ${captureKey} is ${c ? c.status : 'not_found'}${c?.failureCode ? ` (${c.failureCode})` : ''}`,
          );
        } catch (err) {
          return cannot(err);
        }
      }
      return `the provider says ${says.join(', ')}: the money was not taken; mark-resolved only once it shows a capture succeeded (retry captures again)`;
    }
    const needsLedger =
      req.action === 'charge-succeeded' ||
      req.action === 'charge-failed' ||
      req.action === 'settled-elsewhere' ||
      (req.action === 'mark-resolved' && req.compensation === 'voidAuthorization');
    if (!needsLedger) return undefined;
    let status: string;
    try {
      const a = await provider.getAuthorization(key);
      status = a ? a.status : 'not_found';
    } catch (err) {
      return cannot(err);
    }
    const says = `the provider says authorization ${key} is ${status}`;
    const held = status === 'authorized' || status === 'captured';
    if (req.action === 'charge-succeeded') return held ? undefined : `${says}; not charge-succeeded`;
    if (req.action === 'charge-failed') {
      if (!held && status !== 'processing') return undefined;
      return `${says}; not charge-failed (${held ? 'resolve charge-succeeded' : 'wait until it decides, then resolve again'})`;
    }
    if (status === 'processing')
      return `${says}: it may still hold money; wait until the provider decides, then resolve again`;
    if (req.action === 'mark-resolved' && status === 'authorized')
      return `${says}: the hold is still on the customer's card; void it (retry) or at the provider first`;
    // Never seen, and the key still open: a request on its way could still make a hold after the order closed.
    if (req.action === 'mark-resolved' && req.compensation === 'voidAuthorization' && status === 'not_found')
      return `${says}: its key is still open, so a request on its way could still hold money; retry (the void closes the key), or close it at the provider (POST /v1/authorizations/${key}/cancel) first`;
    return undefined;
  };

  /** Why the ledger (the provider's, the reservations) contradicts the operator's word; undefined when it agrees. */
  const contradiction = async (req: ResolutionCheck): Promise<string | undefined> => {
    const era = await db.query<{ payment_flow: string }>({
      text: 'SELECT payment_flow FROM orders WHERE order_id = $1',
      values: [req.orderId],
    });
    if (era.rows[0]?.payment_flow === 'authorization') {
      const refused = await holdContradiction(req);
      if (refused !== undefined || req.compensation !== 'releaseInventory') return refused;
    }
    const key = chargeKeyFor(req.orderId);
    const charge = async (): Promise<Awaited<ReturnType<ProviderClient['getCharge']>> | string> => {
      try {
        return await provider.getCharge(key);
      } catch (err) {
        return `cannot confirm ${req.action} with the provider: ${(err as Error).message}`;
      }
    };
    if (req.action === 'charge-succeeded' || req.action === 'charge-failed') {
      const c = await charge();
      if (typeof c === 'string') return c;
      const status = !c ? 'not_found' : c.status;
      const refunded = c && c.status !== 'closed' ? c.refundedCents : 0;
      const says = `the provider says charge ${key} is ${status}${refunded > 0 ? ` and refunded (${refunded} cents)` : ''}`;
      const paid = status === 'succeeded' && refunded === 0;
      if (req.action === 'charge-succeeded' && !paid) return `${says}; not charge-succeeded`;
      if (req.action === 'charge-failed' && (paid || status === 'processing')) {
        const next = paid ? 'resolve charge-succeeded' : 'wait until it decides, then resolve again';
        return `${says}; not charge-failed (${next})`;
      }
      return undefined;
    }
    if (req.action === 'settled-elsewhere') {
      // The way out for money settled outside the saga (a transfer, a voucher), provider down or not;
      // only a charge the provider is still deciding could take money after it.
      const c = await charge();
      if (typeof c !== 'string' && c?.status === 'processing')
        return `the provider says charge ${key} is still processing: settled-elsewhere would close order ${req.orderId} while it may still take money; wait until the provider decides the charge (client.ts status ${req.orderId} shows the inquiries), then resolve again`;
      return undefined;
    }
    if (req.action !== 'mark-resolved' || req.awaiting !== 'compensation') return undefined;
    // Marking a compensation done closes the order: only when the money and the stock are back.
    const elsewhere = `; if it was settled outside the saga, say so: --action settled-elsewhere --reference <ref>`;
    if (req.compensation === 'refundPayment') {
      const c = await charge();
      if (typeof c === 'string') return c;
      if (!c || c.status === 'closed' || c.status === 'failed') return undefined;
      if (c.status === 'processing')
        return `the provider says charge ${key} is still processing; mark-resolved would close order ${req.orderId} before it decides (retry later)`;
      if (c.refundedCents >= c.amountCents) return undefined;
      return (
        `the provider holds ${formatMoney(c.amountCents, c.currency)} charged under ${key} and ${formatMoney(c.refundedCents, c.currency)} refunded: ` +
        `mark-resolved would close order ${req.orderId} with ${formatMoney(c.amountCents - c.refundedCents, c.currency)} of the customer's money kept; ` +
        `refund it (retry) or at the provider first${elsewhere}`
      );
    }
    if (req.compensation === 'releaseInventory') {
      const { rows } = await db.query<{ sku: string; qty: number }>({
        text: `SELECT sku, qty FROM reservations WHERE order_id = $1 AND status = 'HELD' ORDER BY sku`,
        values: [req.orderId],
      });
      if (rows.length === 0) return undefined;
      const held = rows.map((r) => `${r.qty}×${r.sku}`).join(', ');
      return `order ${req.orderId} still holds ${held}: mark-resolved would close it with the stock held; retry the release${elsewhere}`;
    }
    return undefined;
  };

  return {
    /** Records a cancel that came as a Signal without a record (the Web UI, the Temporal CLI), deciding it as client.ts would. */
    async recordCancel(req: { orderId: string; requestId: string; reason: string }): Promise<CancelDecision> {
      const decision = await decideCancel(db, { ...req, source: 'signal' });
      log.warn(`cancel sent as a Signal: ${decision.outcome}`, { orderId: req.orderId, requestId: req.requestId });
      return decision;
    },

    /**
     * Checks an operator's resolve against the ledger and records the answer (a resolve client.ts
     * recorded is updated; one that came as a bare Signal is recorded now). Returns the refusal and
     * its figures, or nothing when the ledger agrees. A request already answered keeps its answer.
     */
    async checkResolution(req: ResolutionCheck): Promise<{ refused?: string }> {
      const prior = await db.query<RequestRow & { attention_seq: number | null; now_seq: number; status: OrderStatus }>(
        {
          text: `SELECT r.kind, r.outcome, r.message, r.attention_seq, o.attention_seq AS now_seq, o.status
                 FROM order_requests r JOIN orders o USING (order_id) WHERE r.order_id = $1 AND r.request_id = $2`,
          values: [req.orderId, req.requestId],
        },
      );
      const known = prior.rows[0];
      // A request answers the escalation it was recorded against, once: its Signal reapplied by a
      // Reset to a run that waits on a later escalation does not answer that one.
      if (known && known.attention_seq !== null && known.attention_seq !== known.now_seq) {
        const spent = `request ${req.requestId} answered an earlier escalation of order ${req.orderId} and does not answer this one; send a new resolve`;
        await settleRequest(db, { orderId: req.orderId, requestId: req.requestId, outcome: 'refused', message: spent });
        log.warn('resolve refused: it answered an earlier escalation', {
          orderId: req.orderId,
          requestId: req.requestId,
        });
        return { refused: known.outcome === 'refused' ? (known.message ?? 'refused') : spent };
      }
      if (known && known.outcome !== 'pending')
        return known.outcome === 'refused' ? { refused: known.message ?? 'refused' } : {};
      const allowed = RESOLVE_ACTIONS_FOR[req.awaiting];
      const refused = !allowed.includes(req.action)
        ? `action must be one of ${allowed.join(', ')} while awaiting ${req.awaiting}`
        : await contradiction(req);
      await db.query({
        text: `INSERT INTO order_requests (order_id, request_id, kind, source, action, note, reference, outcome, message, decided_at, attention_seq)
               VALUES ($1, $2, 'resolve', 'signal', $3, $4, $5, $6, $7, now(), ${CURRENT_ESCALATION})
               ON CONFLICT (order_id, request_id) DO UPDATE SET outcome = EXCLUDED.outcome, message = EXCLUDED.message, decided_at = now()
               WHERE order_requests.outcome = 'pending'`,
        values: [
          req.orderId,
          req.requestId,
          req.action,
          req.note ?? null,
          req.reference ?? null,
          refused === undefined ? 'accepted' : 'refused',
          refused ?? null,
        ],
      });
      if (refused) log.warn('resolve refused: the ledger disagrees', { orderId: req.orderId, refused });
      return refused === undefined ? {} : { refused };
    },
  };
}
