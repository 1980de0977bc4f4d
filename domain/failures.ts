/**
 * The failure types, by name: an `ApplicationFailure`'s `type`, which the saga branches on and the
 * client and the soak read back. Written here once, imported everywhere, so a typo is a compile error.
 */

/**
 * Typed business failures, thrown by the activities. Every one of these is non-retryable, because
 * retrying cannot change a business answer.
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
  /**
   * The provider refused the capture for good (the hold expired, was voided or declined; more than
   * held): the goods shipped, the money not taken. details[0].failureCode names the provider's reason.
   */
  CaptureRefused: 'CaptureRefused',
} as const;
export type ErrorType = (typeof ErrorTypes)[keyof typeof ErrorTypes];

/** The types the saga itself fails with (the run's own end, or a stop inside it). */
export const SagaFailureTypes = {
  /** The order is terminal and owned by another run: this run stops and changes nothing. */
  OrderSettled: 'OrderSettled',
  /** The provider never took the charge after every round of request and inquiry. */
  PaymentUnavailable: 'PaymentUnavailable',
  /** The run ended backward because the order was cancelled. */
  OrderCancelled: 'OrderCancelled',
  /** The run ended backward because the saga's deadline passed. */
  DeadlineExceeded: 'DeadlineExceeded',
  /** The run ended backward on a failure that named no type. */
  SagaFailed: 'SagaFailed',
} as const;
export type SagaFailureType = (typeof SagaFailureTypes)[keyof typeof SagaFailureTypes];

/** Every business failure type, derived: what the activity option groups never retry. */
export const NON_RETRYABLE: readonly ErrorType[] = Object.values(ErrorTypes);

/** Answers about the charge that no retry or inquiry can change. */
export const FINAL_CHARGE_ANSWERS: readonly string[] = [
  ErrorTypes.PaymentDeclined,
  ErrorTypes.PaymentRejected,
  ErrorTypes.OrderStateConflict,
  ErrorTypes.OrderMismatch,
  ErrorTypes.ChargeRefunded,
  ErrorTypes.ChargeClosed,
  ErrorTypes.NotOrderOwner,
  SagaFailureTypes.OrderSettled,
];
