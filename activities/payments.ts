import { log } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { CHARGE_ATTEMPT_TIMEOUT_MS } from '../domain/charge-timing';
import { chargeKeyFor, PAST_PIVOT_STATUSES, refundKeyFor, type OrderStatus } from '../domain/order';
import { KEY_CLOSED_ERROR, KEY_CLOSED_STATUS, type ChargeStatus } from '../provider/api';
import type { Pool } from 'pg';
import { ProviderHttpError, type ProviderClient } from '../provider/client';
import { ErrorTypes } from '../domain/failures';
import { businessFailure } from './errors';
import { recordRefunded } from './order-events';
import { assertNotSuperseded, callerRunId, readOrder, rowConflict, stateConflict, transition } from './order-lock';

export interface ChargeRequest {
  orderId: string;
  amountCents: number;
  currency: string;
  paymentMethod: string;
  /** Move the order row to CHARGED once the provider has taken the charge (same activity, no extra step). */
  markCharged?: boolean;
  /** The key the workflow computed (`<orderId>:charge`); the activity refuses another order's. */
  idempotencyKey: string;
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

/**
 * What the provider knows of a charge; `refundedCents` > 0 means it does not count as paid. `closed`:
 * a technical cancel closed the key before any charge was made, so none ever will be. `not_found`
 * right after a timed-out request means "not yet", not "never": the request may still be on its way.
 */
export type InquiryResult = {
  status: ChargeStatus | 'not_found' | 'closed';
  amountCents?: number;
  refundedCents?: number;
};

export { CHARGE_ATTEMPT_TIMEOUT_MS };

/**
 * How long after its start a charge attempt may still send its request. The attempt's
 * startToCloseTimeout (CHARGE_ATTEMPT_TIMEOUT_MS) must exceed this plus the provider timeout
 * (checkChargeTimeouts, at the worker's start).
 */
export const SEND_BUDGET_MS = 3_000;

/**
 * Refuses, naming the settings, a provider timeout with which a charge request could still be
 * waiting for its answer after the saga timed its attempt out: a request sent at the last moment of
 * the send budget must be over (answered or given up) strictly before the attempt's timeout.
 */
export function checkChargeTimeouts(providerTimeoutMs: number, attemptTimeoutMs = CHARGE_ATTEMPT_TIMEOUT_MS): void {
  const field = "PROVIDER_TIMEOUT_MS (the provider client's timeoutMs)";
  if (!Number.isFinite(providerTimeoutMs) || providerTimeoutMs <= 0) {
    throw new Error(`${field}: must be a positive number of milliseconds, not ${providerTimeoutMs}`);
  }
  if (providerTimeoutMs + SEND_BUDGET_MS >= attemptTimeoutMs) {
    throw new Error(
      `${field}: ${providerTimeoutMs} ms plus the charge's send budget (SEND_BUDGET_MS, ${SEND_BUDGET_MS} ms) must be ` +
        `under the charge attempt's startToCloseTimeout (CHARGE_ATTEMPT_TIMEOUT_MS, ${attemptTimeoutMs} ms): ` +
        `set it to at most ${attemptTimeoutMs - SEND_BUDGET_MS - 1} ms`,
    );
  }
}

/** The order statuses in which a charge request may be sent (or replayed). */
const CHARGEABLE = ['RESERVED', 'UNKNOWN_PAYMENT', 'CHARGED'];

export type RefundResult =
  | { outcome: 'refunded'; amountCents: number; replayed: boolean }
  | { outcome: 'nothing-to-refund'; chargeStatus: 'not_found' | 'failed' | 'closed' | 'settled-elsewhere' };

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

/** The provider's refusal of a charge under a key a technical cancel closed. */
const isKeyClosed = (err: unknown): err is ProviderHttpError =>
  err instanceof ProviderHttpError && err.status === KEY_CLOSED_STATUS && err.body.error === KEY_CLOSED_ERROR;

/** The payment activities. Throws at once (at the worker's start) when the provider's timeout is too long. */
export function paymentActivities({ db, provider }: { db: Pool; provider: ProviderClient }) {
  checkChargeTimeouts(provider.timeoutMs);
  return {
    /**
     * Charges with key `<orderId>:charge`, only while the order row allows it (RESERVED, or a charge
     * already under way) and only for the row's own total and currency. A replay returns the first
     * result; a decline is final; a replay of a charge that was refunded is not paid. With `markCharged`
     * the row then moves to CHARGED (a guarded transition); if that write fails the charge stands and
     * the saga learns it by inquiry, as after a timeout. A key the refund step closed (a technical
     * cancel) is refused by the provider: a non-retryable ChargeClosed, nothing charged.
     */
    async chargePayment(req: ChargeRequest): Promise<{ chargeKey: string; amountCents: number; status?: OrderStatus }> {
      const started = Date.now();
      const key = keyOf(req.idempotencyKey, req.orderId, chargeKeyFor, 'idempotencyKey');
      const order = await readOrder(db, req.orderId);
      // A cancel recorded on the order: no new money request goes out (the refund closes the key).
      if (!order || !CHARGEABLE.includes(order.status) || order.cancel_request_id)
        rowConflict(req.orderId, order, 'charge');
      // A run superseded by a later one (a Reset, a new start) sends no money request.
      assertNotSuperseded(req.orderId, order, callerRunId(), 'charge');
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
        if (isKeyClosed(err)) {
          throw businessFailure(ErrorTypes.ChargeClosed, `charge ${key} refused: ${err.body.message}`, {
            status: err.status,
            error: err.body.error,
          });
        }
        rethrowProviderError(err, ErrorTypes.PaymentRejected);
      }
      if (!req.markCharged) return { chargeKey: key, amountCents };
      const { status } = await transition(db, req.orderId, 'CHARGED');
      return { chargeKey: key, amountCents, status };
    },

    /**
     * The inquiry: what the provider knows of `<orderId>:charge` (`closed`: a technical cancel closed
     * the key, nothing was or will be charged). Unreachable → throws (retryable).
     */
    async inquireCharge(req: { orderId: string; chargeKey: string }): Promise<InquiryResult> {
      const key = keyOf(req.chargeKey, req.orderId, chargeKeyFor, 'chargeKey');
      try {
        const charge = await provider.getCharge(key);
        const result: InquiryResult = !charge
          ? { status: 'not_found' }
          : charge.status === 'closed'
            ? { status: 'closed' }
            : { status: charge.status, amountCents: charge.amountCents, refundedCents: charge.refundedCents };
        log.info('charge inquiry', { key, ...result });
        return result;
      } catch (err) {
        rethrowProviderError(err, ErrorTypes.PaymentRejected);
      }
    },

    /**
     * Compensation for the charge: a refund with key `<orderId>:charge:refund`. It first sends the
     * technical cancel of `<orderId>:charge`: with no charge under the key the provider closes it
     * (`closed`, nothing to refund), so a charge request still on its way (a 404 after a timeout is
     * "not yet") can never take money later. It refunds only a charge the provider says succeeded;
     * a failed one is nothing to refund. `processing` is never refunded blindly: it is a non-retryable
     * ChargeProcessing, so the saga escalates to a person. Never for an order that has shipped (its
     * row, its reservations or its shipment say so): that is refused before anything is sent.
     */
    async refundPayment(req: { orderId: string; chargeKey: string; idempotencyKey: string }): Promise<RefundResult> {
      const chargeKey = keyOf(req.chargeKey, req.orderId, chargeKeyFor, 'chargeKey');
      const refundKey = keyOf(req.idempotencyKey, req.orderId, refundKeyFor, 'idempotencyKey');
      const shipped = await db.query<{ status: OrderStatus }>({
        text: `SELECT o.status FROM orders o WHERE o.order_id = $1 AND (o.status = ANY ($2::text[])
                 OR EXISTS (SELECT 1 FROM shipments s WHERE s.order_id = o.order_id)
                 OR EXISTS (SELECT 1 FROM reservations r WHERE r.order_id = o.order_id AND r.status = 'SOLD'))`,
        values: [req.orderId, PAST_PIVOT_STATUSES],
      });
      if (shipped.rowCount) stateConflict(req.orderId, shipped.rows[0]!.status, 'refund a shipped order');
      // An operator said the money went back outside the saga: whichever run compensates (one that took
      // the order over after the resolve, say), the provider does not refund it a second time.
      const elsewhere = await db.query<{ reference: string }>({
        text: `SELECT reference FROM order_requests
                WHERE order_id = $1 AND kind = 'resolve' AND action = 'settled-elsewhere' AND outcome = 'accepted' LIMIT 1`,
        values: [req.orderId],
      });
      if (elsewhere.rows[0]) {
        log.warn('refund skipped: settled elsewhere', { orderId: req.orderId, reference: elsewhere.rows[0].reference });
        return { outcome: 'nothing-to-refund', chargeStatus: 'settled-elsewhere' };
      }
      try {
        const cancel = await provider.cancelCharge(chargeKey);
        if (cancel.outcome === 'closed') {
          log.info('charge key closed: nothing to refund', { chargeKey });
          return { outcome: 'nothing-to-refund', chargeStatus: 'closed' };
        }
        const charge = cancel.charge;
        if (charge.status === 'failed') return { outcome: 'nothing-to-refund', chargeStatus: 'failed' };
        if (charge.status === 'processing') {
          throw businessFailure(
            ErrorTypes.ChargeProcessing,
            `charge ${chargeKey} is still processing at the provider; not refunding blindly`,
          );
        }
        const r = await provider.refund(refundKey, { chargeKey, amountCents: charge.amountCents });
        // The money on the order's side (the orders API reads it there), and the refund's event once.
        await recordRefunded(db, req.orderId, charge.amountCents, r.refund.amountCents);
        log.info('refund succeeded', { chargeKey, amountCents: r.refund.amountCents, replayed: r.replayed });
        return { outcome: 'refunded', amountCents: r.refund.amountCents, replayed: r.replayed };
      } catch (err) {
        if (err instanceof ApplicationFailure) throw err;
        rethrowProviderError(err, ErrorTypes.RefundRejected);
      }
    },
  };
}
