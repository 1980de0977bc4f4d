/**
 * Order types and the one input schema, shared by client.ts, the activities and the workflow.
 * Deterministic (valibot only), so the workflow bundle can import it.
 */
import * as v from 'valibot';
import { at, parseWith, record } from './validation';

export const ORDER_STATUSES = [
  'PENDING',
  'RESERVED',
  'CHARGED',
  'UNKNOWN_PAYMENT',
  'AUTHORIZED',
  'SHIPPED',
  'CAPTURED',
  'COMPLETED',
  'COMPENSATING',
  'FAILED',
  'CANCELLED',
  'NEEDS_ATTENTION',
] as const;
export type OrderStatus = (typeof ORDER_STATUSES)[number];
/** The statuses an order ends in: nothing moves it on from there. */
export const TERMINAL_STATUSES: readonly OrderStatus[] = ['COMPLETED', 'FAILED', 'CANCELLED'];
/**
 * Past the pivot (the shipment): from these the order only goes forward. For an order of the
 * authorization era, SHIPPED is "shipped, not yet captured" and CAPTURED "shipped, money taken".
 */
export const PAST_PIVOT_STATUSES: readonly OrderStatus[] = ['SHIPPED', 'CAPTURED', 'COMPLETED'];
/**
 * At the pivot: the money is charged (charge era) or held (authorization era), nothing shipped yet.
 * An escalation from these goes back to the shipment, never backward on its own.
 */
export const AT_PIVOT_STATUSES: readonly OrderStatus[] = ['CHARGED', 'AUTHORIZED'];
/** Before the pivot, where a failure or a cancel still compensates; an escalation from these may turn backward. */
export const BEFORE_PIVOT_STATUSES: readonly OrderStatus[] = ['PENDING', 'RESERVED', 'UNKNOWN_PAYMENT', 'COMPENSATING'];
/** The forward path, in order: a forward write to a status the order has already passed changes nothing. */
export const FORWARD_STATUSES: readonly OrderStatus[] = [
  'PENDING',
  'RESERVED',
  'UNKNOWN_PAYMENT',
  'AUTHORIZED',
  'CHARGED',
  ...PAST_PIVOT_STATUSES,
];
export const isTerminal = (status: OrderStatus): boolean => TERMINAL_STATUSES.includes(status);
export const isPastPivot = (status: OrderStatus): boolean => PAST_PIVOT_STATUSES.includes(status);
export const isAtPivot = (status: OrderStatus | null | undefined): boolean =>
  status !== null && status !== undefined && AT_PIVOT_STATUSES.includes(status);
/**
 * The pivot's rule for an escalation: one made at the pivot (from CHARGED or AUTHORIZED, the shipment
 * failing) or after it (from SHIPPED or CAPTURED) only ever goes forward, whatever a person answers;
 * it is never compensated. Also true of a row resumed to such a status.
 */
export const escalatedForward = (from: OrderStatus | null | undefined): boolean =>
  isAtPivot(from) || (from !== null && from !== undefined && isPastPivot(from));

/**
 * How an order's money moves, recorded on its row (`payment_flow`, migrations/0018): `charge` (the
 * older era: charged before the shipment, refunded as its compensation) or `authorization` (held
 * before the shipment, voided as its compensation, captured after it). A run decides by the row, not
 * by its build: a charge-era order restarted from its row is still charged and refunded.
 */
export const PAYMENT_FLOWS = ['charge', 'authorization'] as const;
export type PaymentFlow = (typeof PAYMENT_FLOWS)[number];

export const CURRENCIES = ['USD', 'EUR'] as const;
export type Currency = (typeof CURRENCIES)[number];

export const LIMITS = {
  idMaxLength: 64,
  maxItems: 50,
  maxQty: 1000,
  maxUnitPriceCents: 10_000_000,
  maxTotalCents: 1_000_000_000,
} as const;

/** A rejected input, naming the offending field (for example `items[1].qty`). */
export class OrderValidationError extends Error {
  constructor(
    readonly field: string,
    readonly problem: string,
  ) {
    super(`invalid order: ${field}: ${problem}`);
    this.name = 'OrderValidationError';
  }
}

const ID_RE = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;
const SKU_RE = /^[A-Z0-9][A-Z0-9_-]*$/;
const PAYMENT_METHOD_RE = /^tok_[A-Za-z0-9_]{1,40}$/;
// eslint-disable-next-line no-control-regex
const NO_CONTROL_RE = /^[^\u0000-\u001f\u007f]*$/;

const identifier = (re: RegExp, what: string) =>
  v.pipe(
    v.string('must be a string'),
    v.minLength(1, 'must not be empty'),
    v.maxLength(LIMITS.idMaxLength, `must be at most ${LIMITS.idMaxLength} characters`),
    v.regex(NO_CONTROL_RE, 'must not contain control characters'),
    v.regex(re, `must match ${what}`),
  );

const integer = (min: number, max: number) =>
  v.pipe(
    v.number('must be a number'),
    v.finite('must be a number'),
    v.integer('must be a whole number'),
    v.minValue(min, `must be at least ${min}`),
    v.maxValue(max, `must be at most ${max}`),
  );

/** An order's or a customer's ID (client.ts checks its arguments with it too). */
export const IdSchema = identifier(ID_RE, 'letters, digits, "_", "." or "-"');

const OrderItemSchema = record(
  {
    sku: identifier(SKU_RE, 'upper-case letters, digits, "_" or "-"'),
    qty: integer(1, LIMITS.maxQty),
    unitPriceCents: integer(0, LIMITS.maxUnitPriceCents),
  },
  'must be an object',
);

/** The order a client places: the one input schema, checked by the client, the workflow, the activity and the orders API (its OpenAPI document is generated from it). */
export const OrderSchema = v.pipe(
  record(
    {
      orderId: IdSchema,
      customerId: IdSchema,
      currency: v.picklist(CURRENCIES, `must be one of ${CURRENCIES.join(', ')}`),
      paymentMethod: identifier(PAYMENT_METHOD_RE, 'a token such as tok_visa'),
      items: v.pipe(
        v.array(OrderItemSchema, 'must be an array'),
        v.minLength(1, 'must not be empty'),
        v.maxLength(LIMITS.maxItems, `must have at most ${LIMITS.maxItems} lines`),
        v.rawCheck(({ dataset, addIssue }) => {
          if (!dataset.typed) return;
          const seen = new Set<string>();
          dataset.value.forEach((item, i) => {
            if (seen.has(item.sku))
              addIssue({ message: `duplicate line for ${item.sku}`, path: [at(dataset.value, i), at(item, 'sku')] });
            seen.add(item.sku);
          });
        }),
      ),
    },
    'must be a JSON object',
  ),
  v.forward(
    v.check(
      (order) => orderTotalCents(order) <= LIMITS.maxTotalCents,
      `order total must be at most ${LIMITS.maxTotalCents} cents`,
    ),
    ['items'],
  ),
  v.forward(
    v.check((order) => orderTotalCents(order) > 0, 'order total must be more than 0 cents'),
    ['items'],
  ),
);

export type OrderInput = v.InferOutput<typeof OrderSchema>;
export type OrderItem = OrderInput['items'][number];

/** Validates untrusted input and returns a clean copy. Throws OrderValidationError naming the field. */
export function parseOrder(raw: unknown): OrderInput {
  return parseWith(
    OrderSchema,
    raw,
    (field, problem) => {
      throw new OrderValidationError(field, problem);
    },
    'order',
  );
}

export function orderTotalCents(order: { items: readonly { qty: number; unitPriceCents: number }[] }): number {
  return order.items.reduce((sum, i) => sum + i.qty * i.unitPriceCents, 0);
}

/** Business keys: the workflow ID and every idempotency key derive from the order ID. */
export const workflowIdFor = (orderId: string): string => `order:${orderId}`;
/** The order ID a saga's workflow ID names (undefined for a workflow ID of another kind). */
export const orderIdOf = (workflowId: string): string | undefined =>
  workflowId.startsWith('order:') ? workflowId.slice('order:'.length) : undefined;
export const chargeKeyFor = (orderId: string): string => `${orderId}:charge`;
export const refundKeyFor = (orderId: string): string => `${orderId}:charge:refund`;
/** The hold on the card (authorization era); its void and its technical cancel name it too. */
export const authorizeKeyFor = (orderId: string): string => `${orderId}:authorize`;
/** The capture of the hold, after the shipment: its own key, once per order. */
export const captureKeyFor = (orderId: string): string => `${orderId}:capture`;
/**
 * The one fresh hold the saga tries after the shipment when the first expired before its capture
 * (a card that declines it sends the order to a person), and that hold's capture.
 */
export const reauthorizeKeyFor = (orderId: string): string => `${orderId}:reauthorize`;
export const recaptureKeyFor = (orderId: string): string => `${orderId}:reauthorize:capture`;
/** The holds of an order and each one's capture key, the first hold first. */
export const holdKeysFor = (orderId: string): readonly { authorizationKey: string; captureKey: string }[] => [
  { authorizationKey: authorizeKeyFor(orderId), captureKey: captureKeyFor(orderId) },
  { authorizationKey: reauthorizeKeyFor(orderId), captureKey: recaptureKeyFor(orderId) },
];

/**
 * A refund after the shipment (`client.ts refund`), named by the person who asks for it (`key`: a
 * return's or a ticket's ID): the provider's Idempotency-Key, so the same key is the same refund.
 */
export const orderRefundKeyFor = (orderId: string, key: string): string => `${orderId}:refund:${key}`;

/**
 * Where an order may be refunded after the shipment: past the pivot, or waiting for a person after
 * it (NEEDS_ATTENTION from one of those). Whether money was taken is the provider's ledger's to say.
 */
export const isRefundable = (status: OrderStatus, attentionFrom?: OrderStatus | null): boolean =>
  isPastPivot(status) || (status === 'NEEDS_ATTENTION' && !!attentionFrom && isPastPivot(attentionFrom));

/** The saga's result, returned by the workflow and printed by the client. */
export interface OrderResult {
  orderId: string;
  /** ALREADY_SETTLED: another run had settled this order; this run stopped without effects. */
  status: OrderStatus | 'ALREADY_SETTLED';
  /** With ALREADY_SETTLED: the order's own status. */
  orderStatus?: OrderStatus;
  reason?: string;
}

/** Money as a person writes it: 5248 USD cents → "52.48 USD". */
export function formatMoney(cents: number, currency: string): string {
  const sign = cents < 0 ? '-' : '';
  const abs = Math.abs(cents);
  return `${sign}${Math.floor(abs / 100)}.${String(abs % 100).padStart(2, '0')} ${currency}`;
}

/** The saga's static summary in the Web UI: "Order o-1 for cust-42: 3×SKU-A, 1×SKU-B — 52.48 USD". */
export function orderSummary(order: OrderInput): string {
  const lines = order.items.map((i) => `${i.qty}×${i.sku}`);
  const shown = lines.length > 4 ? [...lines.slice(0, 3), `and ${lines.length - 3} more lines`] : lines;
  return `Order ${order.orderId} for ${order.customerId}: ${shown.join(', ')} — ${formatMoney(orderTotalCents(order), order.currency)}`;
}

/** What an escalation waits for a person about (the saga's `awaiting`). */
export type Awaiting = 'charge-outcome' | 'compensation' | 'forward-step' | 'capture';

/** The resolve actions that answer each kind of escalation; any other is refused, naming these. */
export const RESOLVE_ACTIONS_FOR: Record<Awaiting, readonly string[]> = {
  'charge-outcome': ['charge-succeeded', 'charge-failed'],
  compensation: ['retry', 'mark-resolved', 'settled-elsewhere'],
  'forward-step': ['retry', 'mark-resolved'],
  // The goods shipped, the money not taken: try the capture again (after the customer gave a new
  // card, say), or say it was taken another way (checked against the ledger).
  capture: ['retry', 'mark-resolved'],
};

/**
 * What an escalation is about, from the status the order escalated from: an unknown charge, a step
 * after the pivot (at the shipment or after it), or a compensation.
 */
export function awaitingFrom(from: OrderStatus | null | undefined, step?: string | null): Awaiting {
  if (from === 'UNKNOWN_PAYMENT') return 'charge-outcome';
  if (from === 'SHIPPED' && step === 'capturePayment') return 'capture';
  if (escalatedForward(from)) return 'forward-step';
  return 'compensation';
}
