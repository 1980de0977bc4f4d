import { log } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { chargeKeyFor, refundKeyFor, type OrderStatus } from '../domain/order';
import type { ChargeStatus } from '../provider/api';
import type { Pool } from 'pg';
import { ProviderHttpError, type ProviderClient } from '../provider/client';
import { businessFailure, ErrorTypes } from './errors';
import { readOrder, stateConflict, transition } from './order-lock';

export interface ChargeRequest {
  orderId: string;
  amountCents: number;
  currency: string;
  paymentMethod: string;
  /** Move the order row to CHARGED once the provider has taken the charge (same activity, no extra step). */
  markCharged?: boolean;
  /** The key the workflow computed (`<orderId>:charge`); older runs leave it to the activity. */
  idempotencyKey?: string;
}

/**
 * The key a request names, or the order's own when it names none. A key of another order is refused:
 * a charge or refund acts only on its own order's money.
 */
function keyOf(given: string | undefined, orderId: string, own: (orderId: string) => string, field: string): string {
  const key = own(orderId);
  if (given !== undefined && given !== key) {
    throw businessFailure(ErrorTypes.OrderMismatch, `${field} ${given} is not order ${orderId}'s (${key})`, {
      orderId,
      field,
    });
  }
  return key;
}

/** What the provider knows of a charge; `refundedCents` > 0 means it does not count as paid. */
export type InquiryResult = { status: ChargeStatus | 'not_found'; amountCents?: number; refundedCents?: number };

/**
 * How long after its start a charge attempt may still send its request. The attempt's
 * startToCloseTimeout (15 s) must exceed this plus the provider timeout (10 s).
 */
const SEND_BUDGET_MS = 3_000;

/** The order statuses in which a charge request may be sent (or replayed). */
const CHARGEABLE = ['RESERVED', 'UNKNOWN_PAYMENT', 'CHARGED'];

export type RefundResult =
  | { outcome: 'refunded'; amountCents: number; replayed: boolean }
  | { outcome: 'nothing-to-refund'; chargeStatus: 'not_found' | 'failed' };

/** 4xx answers other than 409 are final: retrying the same request cannot change them. */
function rethrowProviderError(
  err: unknown,
  type: typeof ErrorTypes.PaymentRejected | typeof ErrorTypes.RefundRejected,
): never {
  if (err instanceof ProviderHttpError && err.status >= 400 && err.status < 500 && err.status !== 409) {
    throw businessFailure(type, err.message, { status: err.status, error: err.body.error });
  }
  // 409 (in flight), 5xx, timeouts and lost connections: the outcome is unknown, so retry (same key).
  throw ApplicationFailure.retryable((err as Error).message, 'ProviderUnavailable');
}

export function paymentActivities({ db, provider }: { db: Pool; provider: ProviderClient }) {
  return {
    /**
     * Charges with key `<orderId>:charge`, only while the order row allows it (RESERVED, or a charge
     * already under way) and only for the row's own total and currency. A replay returns the first
     * result; a decline is final; a replay of a charge that was refunded is not paid. With `markCharged`
     * the row then moves to CHARGED (a guarded transition); if that write fails the charge stands and
     * the saga learns it by inquiry, as after a timeout.
     */
    async chargePayment(req: ChargeRequest): Promise<{ chargeKey: string; amountCents: number; status?: 'CHARGED' }> {
      const started = Date.now();
      const key = keyOf(req.idempotencyKey, req.orderId, chargeKeyFor, 'idempotencyKey');
      const order = await readOrder(db, req.orderId);
      if (!order || !CHARGEABLE.includes(order.status)) stateConflict(req.orderId, order?.status, 'charge');
      if (Number(order.total_cents) !== req.amountCents || order.currency !== req.currency) {
        throw businessFailure(
          ErrorTypes.OrderMismatch,
          `charge of ${req.amountCents} ${req.currency} does not match order ${req.orderId} (${order.total_cents} ${order.currency})`,
        );
      }
      // A request that would go out late (the attempt stalled before sending) is not sent at all: the
      // saga may already have timed this attempt out, inquired, and moved on (cancelled, say).
      if (Date.now() - started > SEND_BUDGET_MS) {
        throw ApplicationFailure.retryable(
          `charge ${key} not sent: the attempt stalled ${Date.now() - started} ms before sending`,
          'ChargeNotSent',
        );
      }
      let amountCents: number;
      try {
        const r = await provider.charge(key, {
          amountCents: req.amountCents,
          currency: req.currency,
          paymentMethod: req.paymentMethod,
          reference: req.orderId,
        });
        if (r.http === 402) {
          throw businessFailure(ErrorTypes.PaymentDeclined, `card declined: ${r.charge.failureCode ?? 'declined'}`, {
            failureCode: r.charge.failureCode,
          });
        }
        if (r.charge.refundedCents > 0) {
          throw businessFailure(
            ErrorTypes.ChargeRefunded,
            `charge ${key} was refunded (${r.charge.refundedCents} of ${r.charge.amountCents}); it does not count as paid`,
            {
              refundedCents: r.charge.refundedCents,
            },
          );
        }
        log.info('charge succeeded', { key, amountCents: r.charge.amountCents, replayed: r.replayed });
        amountCents = r.charge.amountCents;
      } catch (err) {
        if (err instanceof ApplicationFailure) throw err;
        rethrowProviderError(err, ErrorTypes.PaymentRejected);
      }
      if (!req.markCharged) return { chargeKey: key, amountCents };
      await transition(db, req.orderId, 'CHARGED');
      return { chargeKey: key, amountCents, status: 'CHARGED' };
    },

    /** The inquiry: what the provider knows of `<orderId>:charge`. Unreachable → throws (retryable). */
    async inquireCharge(req: { orderId: string; chargeKey?: string }): Promise<InquiryResult> {
      const key = keyOf(req.chargeKey, req.orderId, chargeKeyFor, 'chargeKey');
      try {
        const charge = await provider.getCharge(key);
        const result: InquiryResult = charge
          ? { status: charge.status, amountCents: charge.amountCents, refundedCents: charge.refundedCents }
          : { status: 'not_found' };
        log.info('charge inquiry', { key, ...result });
        return result;
      } catch (err) {
        rethrowProviderError(err, ErrorTypes.PaymentRejected);
      }
    },

    /**
     * Compensation for the charge: a refund with key `<orderId>:charge:refund`. It asks first and refunds
     * only a charge the provider says succeeded; nothing to refund is a no-op. `processing` is never
     * refunded blindly: it is a non-retryable ChargeProcessing, so the saga escalates to a person. Never
     * for an order that has shipped (its row, its reservations or its shipment say so).
     */
    async refundPayment(req: { orderId: string; chargeKey?: string; idempotencyKey?: string }): Promise<RefundResult> {
      const chargeKey = keyOf(req.chargeKey, req.orderId, chargeKeyFor, 'chargeKey');
      const refundKey = keyOf(req.idempotencyKey, req.orderId, refundKeyFor, 'idempotencyKey');
      const shipped = await db.query<{ status: OrderStatus }>({
        text: `SELECT o.status FROM orders o WHERE o.order_id = $1 AND (o.status IN ('SHIPPED', 'COMPLETED')
                 OR EXISTS (SELECT 1 FROM shipments s WHERE s.order_id = o.order_id)
                 OR EXISTS (SELECT 1 FROM reservations r WHERE r.order_id = o.order_id AND r.status = 'SOLD'))`,
        values: [req.orderId],
      });
      if (shipped.rowCount) stateConflict(req.orderId, shipped.rows[0]!.status, 'refund a shipped order');
      try {
        const charge = await provider.getCharge(chargeKey);
        if (!charge) return { outcome: 'nothing-to-refund', chargeStatus: 'not_found' };
        if (charge.status === 'failed') return { outcome: 'nothing-to-refund', chargeStatus: 'failed' };
        if (charge.status === 'processing') {
          throw businessFailure(
            ErrorTypes.ChargeProcessing,
            `charge ${chargeKey} is still processing at the provider; not refunding blindly`,
          );
        }
        const r = await provider.refund(refundKey, { chargeKey, amountCents: charge.amountCents });
        log.info('refund succeeded', { chargeKey, amountCents: r.refund.amountCents, replayed: r.replayed });
        return { outcome: 'refunded', amountCents: r.refund.amountCents, replayed: r.replayed };
      } catch (err) {
        if (err instanceof ApplicationFailure) throw err;
        rethrowProviderError(err, ErrorTypes.RefundRejected);
      }
    },
  };
}
