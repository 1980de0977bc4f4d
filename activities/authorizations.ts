/**
 * The payment activities of the authorization era: a hold on the card before the shipment (its
 * compensation a void), its capture after the shipment (forward only), and an inquiry for each, by
 * key. The same patterns as the charge (payments.ts): the key derives from the order and another
 * order's is refused; the row must allow the step; a timeout, a 409 in flight or a 5xx is retryable
 * and the saga inquires by key before it decides; a refusal is a typed, non-retryable failure.
 */
import { log } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import type { Pool } from 'pg';
import { ErrorTypes } from '../domain/failures';
import {
  authorizeKeyFor,
  holdKeysFor,
  PAST_PIVOT_STATUSES,
  reauthorizeKeyFor,
  type OrderStatus,
} from '../domain/order';
import { KEY_CLOSED_ERROR, KEY_CLOSED_STATUS, type AuthorizationStatus, type CaptureFailure } from '../provider/api';
import { ProviderHttpError, type AuthorizationClient } from '../provider/client';
import { businessFailure } from './errors';
import { assertNotSuperseded, callerRunId, readOrder, rowConflict, stateConflict, transition } from './order-lock';
import { SEND_BUDGET_MS } from './payments';

export interface AuthorizeRequest {
  orderId: string;
  amountCents: number;
  currency: string;
  paymentMethod: string;
  /** The key the workflow computed (`<orderId>:authorize`); the activity refuses another order's. */
  idempotencyKey: string;
}

/**
 * What the provider knows of the hold under `<orderId>:authorize`: `not_found` right after a
 * timed-out request means "not yet"; `closed`: a technical cancel closed the key with nothing held.
 */
export interface AuthorizationInquiryResult {
  status: AuthorizationStatus | 'not_found' | 'closed';
  amountCents?: number;
  capturedCents?: number;
  expiresAt?: string;
}

/** What the provider knows of the capture under `<orderId>:capture`; `failed` carries why. */
export interface CaptureInquiryResult {
  status: 'processing' | 'succeeded' | 'failed' | 'not_found';
  amountCents?: number;
  failureCode?: CaptureFailure;
}

export type VoidResult =
  | { outcome: 'voided'; replayed: boolean }
  | { outcome: 'nothing-to-void'; authorizationStatus: 'closed' | 'declined' | 'voided' | 'expired' };

/** The statuses in which a hold may be requested (or replayed). */
const AUTHORIZABLE: readonly OrderStatus[] = ['RESERVED', 'UNKNOWN_PAYMENT', 'AUTHORIZED'];
/** The statuses in which the hold may be captured: shipped, or captured already (a replay). */
const CAPTURABLE: readonly OrderStatus[] = ['SHIPPED', 'CAPTURED'];

/** The key a request names, which must be the order's own. */
function ownKey(given: string, orderId: string, own: (orderId: string) => string, field: string): string {
  const key = own(orderId);
  if (given !== key) {
    throw businessFailure(ErrorTypes.OrderMismatch, `${field} ${given} is not order ${orderId}'s (${key})`, {
      orderId,
      field,
    });
  }
  return key;
}

/** One of the order's hold keys (the first hold, or the fresh one), with its capture key. */
function holdPair(orderId: string, authorizationKey: string, field: string) {
  const pair = holdKeysFor(orderId).find((p) => p.authorizationKey === authorizationKey);
  if (!pair) {
    throw businessFailure(
      ErrorTypes.OrderMismatch,
      `${field} ${authorizationKey} is not one of order ${orderId}'s holds`,
      {
        orderId,
        field,
      },
    );
  }
  return pair;
}

/** 409 in flight, 5xx, timeouts, lost connections: the outcome is unknown; retryable (same key). */
function unknownOutcome(err: unknown): never {
  throw ApplicationFailure.retryable((err as Error).message, 'ProviderUnavailable');
}

const isKeyClosed = (err: unknown): err is ProviderHttpError =>
  err instanceof ProviderHttpError && err.status === KEY_CLOSED_STATUS && err.body.error === KEY_CLOSED_ERROR;

/** A capture refused by the hold's state, for good (the provider keeps it under the capture key). */
const CAPTURE_REFUSALS: readonly string[] = [
  'authorization_expired',
  'authorization_voided',
  'authorization_declined',
  'already_captured',
  'capture_exceeds_authorization',
  'authorization_not_found',
];

export function authorizationActivities({ db, provider }: { db: Pool; provider: AuthorizationClient }) {
  /** The order row, refused unless the step may act on it (its status, its era, its owner). */
  const rowFor = async (orderId: string, allowed: readonly OrderStatus[], wanted: string) => {
    const order = await readOrder(db, orderId);
    if (!order || !allowed.includes(order.status) || order.payment_flow !== 'authorization')
      rowConflict(orderId, order, wanted);
    assertNotSuperseded(orderId, order, callerRunId(), wanted);
    return order;
  };

  return {
    /**
     * Step 3: a hold for the row's own total under `<orderId>:authorize`, only while the row allows it
     * (RESERVED, or a hold already under way) and no cancel is recorded. The row then moves to
     * AUTHORIZED (authorized_cents written with it). A decline is final (PaymentDeclined); a key the
     * void closed (a technical cancel) is refused: ChargeClosed, nothing held.
     */
    async authorizePayment(
      req: AuthorizeRequest,
    ): Promise<{ authorizationKey: string; amountCents: number; expiresAt?: string; status: OrderStatus }> {
      const started = Date.now();
      const key = ownKey(req.idempotencyKey, req.orderId, authorizeKeyFor, 'idempotencyKey');
      const order = await rowFor(req.orderId, AUTHORIZABLE, 'authorize');
      if (order.cancel_request_id) rowConflict(req.orderId, order, 'authorize');
      if (Number(order.total_cents) !== req.amountCents || order.currency !== req.currency) {
        throw businessFailure(
          ErrorTypes.OrderMismatch,
          `authorization of ${req.amountCents} ${req.currency} does not match order ${req.orderId} (${order.total_cents} ${order.currency})`,
        );
      }
      // Late (the attempt stalled before sending): not sent; the saga may have timed it out already.
      if (Date.now() - started > SEND_BUDGET_MS) {
        throw ApplicationFailure.retryable(
          `authorization ${key} not sent: the attempt stalled ${Date.now() - started} ms before sending`,
          'ChargeNotSent',
        );
      }
      let amountCents: number;
      let expiresAt: string | undefined;
      try {
        const r = await provider.authorize(key, {
          amountCents: req.amountCents,
          currency: req.currency,
          paymentMethod: req.paymentMethod,
          reference: req.orderId,
        });
        const a = r.authorization;
        if (r.http === 402 || a.status === 'declined') {
          throw businessFailure(ErrorTypes.PaymentDeclined, `card declined: ${a.failureCode ?? 'declined'}`, {
            failureCode: a.failureCode,
          });
        }
        // A replay of a hold released since (voided, expired): it holds nothing, it is not authorized.
        if (a.status === 'voided' || a.status === 'expired') {
          throw businessFailure(ErrorTypes.ChargeClosed, `authorization ${key} is ${a.status}; nothing is held`, {
            authorizationStatus: a.status,
          });
        }
        log.info('authorization made', {
          key,
          amountCents: a.amountCents,
          expiresAt: a.expiresAt,
          replayed: r.replayed,
        });
        amountCents = a.amountCents;
        expiresAt = a.expiresAt;
      } catch (err) {
        if (err instanceof ApplicationFailure) throw err;
        if (isKeyClosed(err)) {
          throw businessFailure(ErrorTypes.ChargeClosed, `authorization ${key} refused: ${err.body.message}`, {
            status: err.status,
            error: err.body.error,
          });
        }
        if (err instanceof ProviderHttpError && err.status >= 400 && err.status < 500 && err.status !== 409) {
          throw businessFailure(ErrorTypes.PaymentRejected, err.message, { status: err.status, error: err.body.error });
        }
        unknownOutcome(err);
      }
      const { status } = await transition(db, req.orderId, 'AUTHORIZED');
      return { authorizationKey: key, amountCents, ...(expiresAt ? { expiresAt } : {}), status };
    },

    /**
     * After the shipment, when the first hold expired before its capture: one fresh hold, key
     * `<orderId>:reauthorize`, for the amount the first one held, with the order's card. Only for a
     * shipped order of the authorization era; the row does not move (it stays SHIPPED, not yet
     * captured). A decline is final (PaymentDeclined); in flight, 5xx or a timeout is retryable, and
     * the saga inquires by key.
     */
    async reauthorizePayment(req: {
      orderId: string;
      idempotencyKey: string;
    }): Promise<{ authorizationKey: string; amountCents: number; expiresAt?: string }> {
      const key = ownKey(req.idempotencyKey, req.orderId, reauthorizeKeyFor, 'idempotencyKey');
      const order = await rowFor(req.orderId, ['SHIPPED'], 'authorize again');
      const { rows } = await db.query<{ authorized_cents: string }>({
        text: 'SELECT authorized_cents FROM orders WHERE order_id = $1',
        values: [req.orderId],
      });
      const amountCents = Number(rows[0]?.authorized_cents ?? 0);
      if (amountCents <= 0) rowConflict(req.orderId, order, 'authorize again: no hold was ever made');
      try {
        const r = await provider.authorize(key, {
          amountCents,
          currency: order.currency,
          paymentMethod: order.payment_method,
          reference: req.orderId,
        });
        const a = r.authorization;
        if (r.http === 402 || a.status === 'declined') {
          throw businessFailure(
            ErrorTypes.PaymentDeclined,
            `fresh authorization declined: ${a.failureCode ?? 'declined'}`,
            {
              failureCode: a.failureCode,
            },
          );
        }
        if (a.status !== 'authorized' && a.status !== 'captured')
          throw businessFailure(ErrorTypes.ChargeClosed, `fresh authorization ${key} is ${a.status}; nothing is held`);
        log.info('fresh authorization made', { key, amountCents: a.amountCents, replayed: r.replayed });
        return {
          authorizationKey: key,
          amountCents: a.amountCents,
          ...(a.expiresAt ? { expiresAt: a.expiresAt } : {}),
        };
      } catch (err) {
        if (err instanceof ApplicationFailure) throw err;
        if (err instanceof ProviderHttpError && err.status >= 400 && err.status < 500 && err.status !== 409) {
          throw businessFailure(ErrorTypes.PaymentRejected, err.message, { status: err.status, error: err.body.error });
        }
        unknownOutcome(err);
      }
    },

    /** The inquiry of a hold (the first or the fresh one) by its key. Unreachable → throws (retryable). */
    async inquireAuthorization(req: {
      orderId: string;
      authorizationKey: string;
    }): Promise<AuthorizationInquiryResult> {
      const key = holdPair(req.orderId, req.authorizationKey, 'authorizationKey').authorizationKey;
      try {
        const a = await provider.getAuthorization(key);
        const result: AuthorizationInquiryResult = !a
          ? { status: 'not_found' }
          : a.status === 'closed'
            ? { status: 'closed' }
            : {
                status: a.status,
                amountCents: a.amountCents,
                capturedCents: a.capturedCents,
                ...(a.expiresAt ? { expiresAt: a.expiresAt } : {}),
              };
        log.info('authorization inquiry', { key, ...result });
        return result;
      } catch (err) {
        unknownOutcome(err);
      }
    },

    /**
     * The compensation of step 3: the technical cancel of `<orderId>:authorize`, which voids a hold
     * it finds and closes a key never used (so a request still on its way can never hold money).
     * Safe when there is nothing to undo. Never for a shipped order (refused before anything is
     * sent); `processing` is never voided blindly (ChargeProcessing: a person decides); a captured
     * hold is refused by the provider, never happens before the pivot, and goes to a person too.
     */
    async voidAuthorization(req: { orderId: string; authorizationKey: string }): Promise<VoidResult> {
      const key = ownKey(req.authorizationKey, req.orderId, authorizeKeyFor, 'authorizationKey');
      const shipped = await db.query<{ status: OrderStatus }>({
        text: `SELECT o.status FROM orders o WHERE o.order_id = $1 AND (o.status = ANY ($2::text[])
                 OR EXISTS (SELECT 1 FROM shipments s WHERE s.order_id = o.order_id)
                 OR EXISTS (SELECT 1 FROM reservations r WHERE r.order_id = o.order_id AND r.status = 'SOLD'))`,
        values: [req.orderId, PAST_PIVOT_STATUSES],
      });
      if (shipped.rowCount) stateConflict(req.orderId, shipped.rows[0]!.status, 'void the hold of a shipped order');
      let result: VoidResult;
      try {
        const cancel = await provider.cancelAuthorization(key);
        if (cancel.outcome === 'closed') result = { outcome: 'nothing-to-void', authorizationStatus: 'closed' };
        else {
          const a = cancel.authorization;
          if (a.status === 'processing') {
            throw businessFailure(
              ErrorTypes.ChargeProcessing,
              `authorization ${key} is still processing at the provider; not voiding blindly`,
            );
          }
          if (a.status === 'captured') {
            throw businessFailure(
              ErrorTypes.RefundRejected,
              `authorization ${key} was captured (${a.capturedCents} cents); a void cannot release it`,
              { capturedCents: a.capturedCents },
            );
          }
          if (a.status === 'authorized') throw new Error(`authorization ${key} still authorized after its cancel`);
          result =
            a.status === 'voided'
              ? { outcome: 'voided', replayed: false }
              : { outcome: 'nothing-to-void', authorizationStatus: a.status };
        }
      } catch (err) {
        if (err instanceof ApplicationFailure) throw err;
        if (err instanceof ProviderHttpError && err.status >= 400 && err.status < 500 && err.status !== 409) {
          throw businessFailure(ErrorTypes.RefundRejected, err.message, { status: err.status, error: err.body.error });
        }
        unknownOutcome(err);
      }
      // The row says the hold is gone (a hold never made stays null: nothing was held).
      await db.query({
        text: `UPDATE orders SET authorization_status = 'voided', updated_at = now()
                WHERE order_id = $1 AND authorization_status = 'authorized'`,
        values: [req.orderId],
      });
      log.info('authorization voided', { key, ...result });
      return result;
    },

    /**
     * Step 5, forward only: captures the hold under `<orderId>:authorize` once, with its own key
     * `<orderId>:capture`, for the amount held (the row's authorized_cents), only for a shipped
     * order of the authorization era. The row then moves to CAPTURED (captured_cents with it). A
     * refusal for good (expired, voided, declined, more than held) is CaptureRefused, naming the
     * provider's code; in flight, 5xx or a timeout is retryable, and the saga inquires by key.
     */
    async capturePayment(req: {
      orderId: string;
      authorizationKey: string;
      captureKey: string;
    }): Promise<{ captureKey: string; amountCents: number; status: OrderStatus }> {
      const pair = holdPair(req.orderId, req.authorizationKey, 'authorizationKey');
      const authKey = pair.authorizationKey;
      const key = ownKey(req.captureKey, req.orderId, () => pair.captureKey, 'captureKey');
      const { rows } = await db.query<{ authorized_cents: string }>({
        text: 'SELECT authorized_cents FROM orders WHERE order_id = $1',
        values: [req.orderId],
      });
      await rowFor(req.orderId, CAPTURABLE, 'capture');
      const amountCents = Number(rows[0]?.authorized_cents ?? 0);
      if (amountCents <= 0) {
        throw businessFailure(ErrorTypes.CaptureRefused, `order ${req.orderId} records no hold to capture`, {
          failureCode: 'authorization_not_found',
        });
      }
      try {
        const r = await provider.capture(authKey, key, { amountCents });
        if (r.capture.status === 'failed') {
          throw businessFailure(
            ErrorTypes.CaptureRefused,
            `capture ${key} refused: ${r.capture.failureCode ?? 'failed'}`,
            { failureCode: r.capture.failureCode ?? 'failed' },
          );
        }
        if (r.capture.status !== 'succeeded') throw new Error(`capture ${key} is ${r.capture.status}`);
        log.info('capture succeeded', { key, amountCents: r.capture.amountCents, replayed: r.replayed });
      } catch (err) {
        if (err instanceof ApplicationFailure) throw err;
        if (err instanceof ProviderHttpError && CAPTURE_REFUSALS.includes(err.body.error)) {
          throw businessFailure(ErrorTypes.CaptureRefused, `capture ${key} refused: ${err.body.message}`, {
            status: err.status,
            failureCode: err.body.error,
          });
        }
        unknownOutcome(err);
      }
      const { status } = await transition(db, req.orderId, 'CAPTURED');
      return { captureKey: key, amountCents, status };
    },

    /** The inquiry of the capture by its own key. Unreachable → throws (retryable). */
    async inquireCapture(req: { orderId: string; captureKey: string }): Promise<CaptureInquiryResult> {
      const key = req.captureKey;
      if (!holdKeysFor(req.orderId).some((p) => p.captureKey === key))
        throw businessFailure(ErrorTypes.OrderMismatch, `captureKey ${key} is not order ${req.orderId}'s`, {
          orderId: req.orderId,
          field: 'captureKey',
        });
      try {
        const c = await provider.getCapture(key);
        const result: CaptureInquiryResult = !c
          ? { status: 'not_found' }
          : { status: c.status, amountCents: c.amountCents, ...(c.failureCode ? { failureCode: c.failureCode } : {}) };
        log.info('capture inquiry', { key, ...result });
        return result;
      } catch (err) {
        unknownOutcome(err);
      }
    },
  };
}
