/**
 * Plain order types and the one input schema, shared by client.ts, the activities and the workflow.
 * Deterministic and dependency-free, so the workflow bundle can import it.
 */

export const ORDER_STATUSES = [
  'PENDING',
  'RESERVED',
  'CHARGED',
  'UNKNOWN_PAYMENT',
  'SHIPPED',
  'COMPLETED',
  'COMPENSATING',
  'FAILED',
  'CANCELLED',
  'NEEDS_ATTENTION',
] as const;
export type OrderStatus = (typeof ORDER_STATUSES)[number];
export const TERMINAL_STATUSES: readonly OrderStatus[] = ['COMPLETED', 'FAILED', 'CANCELLED'];

export const CURRENCIES = ['USD', 'EUR'] as const;
export type Currency = (typeof CURRENCIES)[number];

export interface OrderItem {
  sku: string;
  qty: number;
  unitPriceCents: number;
}

export interface OrderInput {
  orderId: string;
  customerId: string;
  currency: Currency;
  paymentMethod: string;
  items: OrderItem[];
}

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
const ORDER_KEYS = ['orderId', 'customerId', 'currency', 'paymentMethod', 'items'];
const ITEM_KEYS = ['sku', 'qty', 'unitPriceCents'];

function fail(field: string, problem: string): never {
  throw new OrderValidationError(field, problem);
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function checkKeys(obj: Record<string, unknown>, allowed: string[], prefix: string): void {
  for (const key of Object.keys(obj)) {
    if (!allowed.includes(key)) fail(prefix + key, 'unknown field');
  }
}

function identifier(v: unknown, field: string, re: RegExp, what: string): string {
  if (typeof v !== 'string') fail(field, 'must be a string');
  if (v.length === 0) fail(field, 'must not be empty');
  if (v.length > LIMITS.idMaxLength) fail(field, `must be at most ${LIMITS.idMaxLength} characters`);
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f]/.test(v)) fail(field, 'must not contain control characters');
  if (!re.test(v)) fail(field, `must match ${what}`);
  return v;
}

function integer(v: unknown, field: string, min: number, max: number): number {
  if (typeof v !== 'number' || !Number.isFinite(v)) fail(field, 'must be a number');
  if (!Number.isInteger(v)) fail(field, 'must be a whole number');
  if (v < min) fail(field, `must be at least ${min}`);
  if (v > max) fail(field, `must be at most ${max}`);
  return v;
}

/** Validates untrusted input and returns a clean copy. Throws OrderValidationError naming the field. */
export function parseOrder(raw: unknown): OrderInput {
  if (!isRecord(raw)) fail('order', 'must be a JSON object');
  checkKeys(raw, ORDER_KEYS, '');
  const orderId = identifier(raw.orderId, 'orderId', ID_RE, 'letters, digits, "_", "." or "-"');
  const customerId = identifier(raw.customerId, 'customerId', ID_RE, 'letters, digits, "_", "." or "-"');
  if (typeof raw.currency !== 'string' || !(CURRENCIES as readonly string[]).includes(raw.currency)) {
    fail('currency', `must be one of ${CURRENCIES.join(', ')}`);
  }
  const currency = raw.currency as Currency;
  const paymentMethod = identifier(raw.paymentMethod, 'paymentMethod', PAYMENT_METHOD_RE, 'a token such as tok_visa');
  if (!Array.isArray(raw.items)) fail('items', 'must be an array');
  if (raw.items.length === 0) fail('items', 'must not be empty');
  if (raw.items.length > LIMITS.maxItems) fail('items', `must have at most ${LIMITS.maxItems} lines`);
  const seen = new Set<string>();
  const items = raw.items.map((item: unknown, i: number): OrderItem => {
    const at = `items[${i}]`;
    if (!isRecord(item)) fail(at, 'must be an object');
    checkKeys(item, ITEM_KEYS, `${at}.`);
    const sku = identifier(item.sku, `${at}.sku`, SKU_RE, 'upper-case letters, digits, "_" or "-"');
    if (seen.has(sku)) fail(`${at}.sku`, `duplicate line for ${sku}`);
    seen.add(sku);
    return {
      sku,
      qty: integer(item.qty, `${at}.qty`, 1, LIMITS.maxQty),
      unitPriceCents: integer(item.unitPriceCents, `${at}.unitPriceCents`, 0, LIMITS.maxUnitPriceCents),
    };
  });
  const order: OrderInput = { orderId, customerId, currency, paymentMethod, items };
  const total = orderTotalCents(order);
  if (total > LIMITS.maxTotalCents) fail('items', `order total must be at most ${LIMITS.maxTotalCents} cents`);
  if (total === 0) fail('items', 'order total must be more than 0 cents');
  return order;
}

export function orderTotalCents(order: Pick<OrderInput, 'items'>): number {
  return order.items.reduce((sum, i) => sum + i.qty * i.unitPriceCents, 0);
}

/** Business keys: the workflow ID and every idempotency key derive from the order ID. */
export const workflowIdFor = (orderId: string): string => `order:${orderId}`;
export const chargeKeyFor = (orderId: string): string => `${orderId}:charge`;
export const refundKeyFor = (orderId: string): string => `${orderId}:charge:refund`;

/** The saga's result, returned by the workflow and printed by the client. */
export interface OrderResult {
  orderId: string;
  /** ALREADY_SETTLED: another run had settled this order; this run stopped without effects. */
  status: OrderStatus | 'ALREADY_SETTLED';
  /** With ALREADY_SETTLED: the order's own status. */
  orderStatus?: OrderStatus;
  reason?: string;
  chargeStatus?: 'succeeded' | 'not_charged' | 'refunded';
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
