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

/** A refund of a charge (`chargeKey`) or of a capture (`captureKey`): exactly one of the two. */
export const RefundRequestSchema = v.pipe(
  record(
    { chargeKey: v.optional(printable()), captureKey: v.optional(printable()), amountCents },
    'must be a JSON object',
  ),
  v.forward(
    v.check(
      (r) => r.chargeKey !== undefined || r.captureKey !== undefined,
      'is required (or captureKey, for a refund of a capture)',
    ),
    ['chargeKey'],
  ),
  v.forward(
    v.check((r) => r.chargeKey === undefined || r.captureKey === undefined, 'give chargeKey or captureKey, not both'),
    ['captureKey'],
  ),
  v.transform((r): RefundRequest =>
    r.captureKey !== undefined
      ? { captureKey: r.captureKey, amountCents: r.amountCents }
      : { chargeKey: r.chargeKey!, amountCents: r.amountCents },
  ),
);
export type RefundRequest = { chargeKey: string; amountCents: number } | { captureKey: string; amountCents: number };

export type Refund = { idempotencyKey: string; amountCents: number; status: 'succeeded' } & (
  { chargeKey: string } | { captureKey: string }
);

/** Holds on a card: an authorization, captured later (money taken) or voided (hold released). */
export const AuthorizationRequestSchema = ChargeRequestSchema;
export type AuthorizationRequest = ChargeRequest;

/**
 * `processing` (being decided), `authorized` (held, capturable until `expiresAt`), `declined` (nothing
 * held), `voided` (released), `captured` (taken), `expired` (never captured, and lapsed).
 */
export type AuthorizationStatus = 'processing' | 'authorized' | 'declined' | 'voided' | 'captured' | 'expired';

export interface Authorization {
  idempotencyKey: string;
  status: AuthorizationStatus;
  /** The amount held. */
  amountCents: number;
  currency: string;
  /** A declined one's reason (`card_declined`, `insufficient_funds`). */
  failureCode?: string;
  /** When the hold lapses (ISO 8601): a capture after it is refused. None while processing or when declined. */
  expiresAt?: string;
  /** When it was voided (ISO 8601), by a void or a technical cancel. */
  voidedAt?: string;
  /** The capture's key and amount, once captured. */
  captureKey?: string;
  capturedCents: number;
  /** What was refunded of its capture. */
  refundedCents: number;
}

/** The inquiry's answer (GET /v1/authorizations/{key}, 200): the authorization, or the closed key. */
export type AuthorizationInquiry = Authorization | ClosedKey;

/**
 * The technical cancel's answer (POST /v1/authorizations/{key}/cancel, 200): the authorization made
 * under the key, as it is after the cancel (a hold it found is voided), or the key now closed.
 */
export type AuthorizationCancelResult =
  { outcome: 'found'; authorization: Authorization } | ({ outcome: 'closed' } & ClosedKey);

/** POST /v1/authorizations/{key}/capture: at most the amount held. */
export const CaptureRequestSchema = record({ amountCents }, 'must be a JSON object');
export type CaptureRequest = v.InferOutput<typeof CaptureRequestSchema>;

export interface Capture {
  /** The capture's own Idempotency-Key. */
  idempotencyKey: string;
  authorizationKey: string;
  /** `failed`: refused for good (`failureCode` says why); `processing` only while the provider decides. */
  status: 'processing' | 'succeeded' | 'failed';
  amountCents: number;
  currency: string;
  failureCode?: CaptureFailure;
  refundedCents: number;
}

/**
 * A capture refused by the authorization's state, for good: answered 409 with this as its error,
 * kept under the capture key (its replay and its inquiry say the same).
 */
export type CaptureFailure =
  'authorization_expired' | 'authorization_voided' | 'authorization_declined' | 'already_captured';

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
