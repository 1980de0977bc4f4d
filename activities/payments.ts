import { log } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { chargeKeyFor, refundKeyFor } from '../domain/order';
import type { ChargeStatus } from '../provider/api';
import { ProviderHttpError, type ProviderClient } from '../provider/client';
import { businessFailure, ErrorTypes } from './errors';

export interface ChargeRequest {
  orderId: string;
  amountCents: number;
  currency: string;
  paymentMethod: string;
}

export type InquiryResult = { status: ChargeStatus | 'not_found'; amountCents?: number };

export type RefundResult =
  | { outcome: 'refunded'; amountCents: number; replayed: boolean }
  | { outcome: 'nothing-to-refund'; chargeStatus: 'not_found' | 'failed' };

/** 4xx answers other than 409 are final: retrying the same request cannot change them. */
function rethrowProviderError(err: unknown, type: typeof ErrorTypes.PaymentRejected | typeof ErrorTypes.RefundRejected): never {
  if (err instanceof ProviderHttpError && err.status >= 400 && err.status < 500 && err.status !== 409) {
    throw businessFailure(type, err.message, { status: err.status, error: err.body.error });
  }
  // 409 (in flight), 5xx, timeouts and lost connections: the outcome is unknown, so retry (same key).
  throw ApplicationFailure.retryable((err as Error).message, 'ProviderUnavailable');
}

export function paymentActivities({ provider }: { provider: ProviderClient }) {
  return {
    /** Charges with key `<orderId>:charge`. A replay returns the first result; a decline is final. */
    async chargePayment(req: ChargeRequest): Promise<{ chargeKey: string; amountCents: number }> {
      const key = chargeKeyFor(req.orderId);
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
        log.info('charge succeeded', { key, amountCents: r.charge.amountCents, replayed: r.replayed });
        return { chargeKey: key, amountCents: r.charge.amountCents };
      } catch (err) {
        if (err instanceof ApplicationFailure) throw err;
        rethrowProviderError(err, ErrorTypes.PaymentRejected);
      }
    },

    /** The inquiry: what the provider knows of `<orderId>:charge`. Unreachable → throws (retryable). */
    async inquireCharge(req: { orderId: string }): Promise<InquiryResult> {
      const key = chargeKeyFor(req.orderId);
      try {
        const charge = await provider.getCharge(key);
        const result: InquiryResult = charge ? { status: charge.status, amountCents: charge.amountCents } : { status: 'not_found' };
        log.info('charge inquiry', { key, ...result });
        return result;
      } catch (err) {
        rethrowProviderError(err, ErrorTypes.PaymentRejected);
      }
    },

    /**
     * Compensation for the charge: a refund with key `<orderId>:charge:refund`. It asks first and refunds
     * only a charge the provider says succeeded; nothing to refund is a no-op, and `processing` is an
     * error to retry, never a blind refund.
     */
    async refundPayment(req: { orderId: string }): Promise<RefundResult> {
      const chargeKey = chargeKeyFor(req.orderId);
      try {
        const charge = await provider.getCharge(chargeKey);
        if (!charge) return { outcome: 'nothing-to-refund', chargeStatus: 'not_found' };
        if (charge.status === 'failed') return { outcome: 'nothing-to-refund', chargeStatus: 'failed' };
        if (charge.status === 'processing') {
          throw ApplicationFailure.retryable(`charge ${chargeKey} is still processing; not refunding blindly`, 'ChargeProcessing');
        }
        const r = await provider.refund(refundKeyFor(req.orderId), { chargeKey, amountCents: charge.amountCents });
        log.info('refund succeeded', { chargeKey, amountCents: r.refund.amountCents, replayed: r.replayed });
        return { outcome: 'refunded', amountCents: r.refund.amountCents, replayed: r.replayed };
      } catch (err) {
        if (err instanceof ApplicationFailure) throw err;
        rethrowProviderError(err, ErrorTypes.RefundRejected);
      }
    },
  };
}
