import { ApplicationFailure } from '@temporalio/common';

/**
 * Typed business failures. The workflow branches on `failure.type`; every one of these is
 * non-retryable, because retrying cannot change a business answer.
 */
export const ErrorTypes = {
  InvalidOrder: 'InvalidOrder',
  InsufficientStock: 'InsufficientStock',
  ContentionExhausted: 'ContentionExhausted',
  PaymentDeclined: 'PaymentDeclined',
  PaymentRejected: 'PaymentRejected',
  RefundRejected: 'RefundRejected',
  ShipmentRejected: 'ShipmentRejected',
  PurchaseLimitExceeded: 'PurchaseLimitExceeded',
  /** The order row does not allow the step: details name its current status (the semantic lock). */
  OrderStateConflict: 'OrderStateConflict',
  /** The calling run was superseded by a later run of the same order (a Reset, a new start): it may not move the row. */
  NotOrderOwner: 'NotOrderOwner',
  /** An order with this ID exists with other contents, or belongs to another workflow. */
  OrderMismatch: 'OrderMismatch',
  /** The provider reports the charge refunded: it does not count as paid. */
  ChargeRefunded: 'ChargeRefunded',
  /** The provider still says `processing`: a refund would be blind, so a person decides. */
  ChargeProcessing: 'ChargeProcessing',
  /**
   * The provider refuses the charge: its key was closed by a technical cancel (the refund step, on a
   * backward path), so nothing was charged and nothing can be under this key.
   */
  ChargeClosed: 'ChargeClosed',
} as const;
export type ErrorType = (typeof ErrorTypes)[keyof typeof ErrorTypes];

export function businessFailure(
  type: ErrorType,
  message: string,
  details?: unknown,
  cause?: Error,
): ApplicationFailure {
  return ApplicationFailure.create({
    type,
    message,
    nonRetryable: true,
    details: details === undefined ? [] : [details],
    cause,
  });
}
