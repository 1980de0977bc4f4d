/** Wire types of the payment provider's HTTP API, shared by the server and its client; the requests as schemas. */
import * as v from 'valibot';
import { record } from '../domain/validation';

export type ChargeStatus = 'processing' | 'succeeded' | 'failed';

/** A non-empty string of at most `max` characters, none of them a control character. */
const printable = (max = 200) => {
  const message = `must be a non-empty string of at most ${max} printable characters`;
  return v.pipe(
    v.string(message),
    v.minLength(1, message),
    v.maxLength(max, message),
    // eslint-disable-next-line no-control-regex -- refusing control characters is the point
    v.regex(/^[^\u0000-\u001f]*$/, message),
  );
};

/** An Idempotency-Key, as a header or as the path segment of an inquiry. */
export const IdempotencyKeySchema = printable();

const amountMessage = 'must be a positive whole number';
const amountCents = v.pipe(v.number(amountMessage), v.safeInteger(amountMessage), v.minValue(1, amountMessage));

export const ChargeRequestSchema = record(
  {
    amountCents,
    currency: v.pipe(printable(3), v.regex(/^[A-Z]{3}$/, 'must be an ISO 4217 code such as USD')),
    paymentMethod: printable(64),
    reference: v.optional(printable()),
  },
  'must be a JSON object',
);
export type ChargeRequest = v.InferOutput<typeof ChargeRequestSchema>;

export interface Charge {
  idempotencyKey: string;
  status: ChargeStatus;
  amountCents: number;
  currency: string;
  failureCode?: string;
  refundedCents: number;
}

/**
 * A key closed by a technical cancel before any charge was made under it: GET /v1/charges/{key}
 * answers this (200), and a later POST /v1/charges with the key is refused (410 `key_closed`).
 */
export interface ClosedKey {
  idempotencyKey: string;
  status: 'closed';
  /** When the cancel closed it (ISO 8601). */
  closedAt: string;
}

/** The inquiry's answer (GET /v1/charges/{key}, 200): the charge, or the closed key. */
export type Inquiry = Charge | ClosedKey;

/**
 * The technical cancel's answer (POST /v1/charges/{key}/cancel, 200): the charge made under the key,
 * unchanged (refund it as usual), or the key now closed (no charge can ever be made under it).
 */
export type CancelResult = { outcome: 'found'; charge: Charge } | ({ outcome: 'closed' } & ClosedKey);

export const RefundRequestSchema = record({ chargeKey: printable(), amountCents }, 'must be a JSON object');
export type RefundRequest = v.InferOutput<typeof RefundRequestSchema>;

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

/** The refusal of a charge under a closed key: final (no retry can change it), and nothing was written. */
export const KEY_CLOSED_STATUS = 410;
export const KEY_CLOSED_ERROR = 'key_closed';

export const IDEMPOTENCY_HEADER = 'idempotency-key';
export const REPLAY_HEADER = 'idempotent-replayed';
