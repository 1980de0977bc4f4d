/** Wire types of the payment provider's HTTP API, shared by the server and its client. */

export type ChargeStatus = 'processing' | 'succeeded' | 'failed';

export interface ChargeRequest {
  amountCents: number;
  currency: string;
  paymentMethod: string;
  reference?: string;
}

export interface Charge {
  idempotencyKey: string;
  status: ChargeStatus;
  amountCents: number;
  currency: string;
  failureCode?: string;
  refundedCents: number;
}

export interface RefundRequest {
  chargeKey: string;
  amountCents: number;
}

export interface Refund {
  idempotencyKey: string;
  chargeKey: string;
  amountCents: number;
  status: 'succeeded';
}

export interface ApiError {
  error: string;
  message: string;
  field?: string;
}

/** Test payment methods, as gateways document them. Any other tok_* succeeds. */
export const DECLINED_PAYMENT_METHODS: Record<string, string> = {
  tok_declined: 'card_declined',
  tok_insufficient_funds: 'insufficient_funds',
};

export const API_KEY_HEADER = 'authorization';
export const IDEMPOTENCY_HEADER = 'idempotency-key';
export const REPLAY_HEADER = 'idempotent-replayed';
