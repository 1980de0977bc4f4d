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
} as const;
export type ErrorType = (typeof ErrorTypes)[keyof typeof ErrorTypes];

export function businessFailure(type: ErrorType, message: string, details?: unknown, cause?: Error): ApplicationFailure {
  return ApplicationFailure.create({ type, message, nonRetryable: true, details: details === undefined ? [] : [details], cause });
}
