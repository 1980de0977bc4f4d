/**
 * The orders API's queries: the placements under their Idempotency-Keys (migrations/0017_api_keys.sql),
 * and the orders as a storefront sees them, from their rows (never from a replayed history). A
 * storefront sees only the orders it placed.
 */
import type { Pool } from 'pg';
import {
  awaitingFrom,
  ORDER_STATUSES,
  RESOLVE_ACTIONS_FOR,
  type OrderItem,
  type OrderStatus,
  type PaymentFlow,
} from '../domain/order';

/** A placement as the API recorded it: its answer, or none yet while the first request is in flight. */
export interface Placement {
  requestHash: string;
  orderId: string;
  answer?: { status: number; body: unknown };
  leaseOver: boolean;
}

/** What claiming a key came to. */
export type Claim =
  | { kind: 'new' }
  /** The first request's process died before it answered (its lease ran out): this one carries it on. */
  | { kind: 'takeover' }
  | { kind: 'existing'; placement: Placement }
  /** The order ID is already placed under another key (of this storefront or another). */
  | { kind: 'order-taken' };

/** The order as GET /v1/orders/{id} answers it. */
export interface OrderView {
  orderId: string;
  customerId: string;
  status: OrderStatus;
  reason: string | null;
  currency: string;
  items: OrderItem[];
  totalCents: number;
  /** How the order's money moves: `authorization` (held, then captured after the shipment) or `charge` (older orders). */
  paymentFlow: PaymentFlow;
  /** The hold on the card (authorization era; 0 for a charge-era order). */
  authorizedCents: number;
  /** What became of the hold: authorized (held), voided (released), captured; null while none is known. */
  authorization: 'authorized' | 'voided' | 'captured' | null;
  /** Money taken: the capture's (authorization era) or the charge's (charge era). */
  chargedCents: number;
  refundedCents: number;
  cancel: { reason: string } | null;
  /** What a person must do before the order moves on, or null when the saga moves it on by itself. */
  nextStep: { by: 'operator'; action: 'resolve'; choices: readonly string[]; detail: string } | null;
  createdAt: string;
  updatedAt: string;
}

interface OrderDbRow {
  order_id: string;
  customer_id: string;
  status: OrderStatus;
  reason: string | null;
  currency: string;
  items: OrderItem[];
  total_cents: string;
  charged_cents: string;
  payment_flow: PaymentFlow;
  authorized_cents: string;
  captured_cents: string;
  authorization_status: 'authorized' | 'voided' | 'captured' | null;
  refunded_cents: string;
  cancel_reason: string | null;
  cancel_request_id: string | null;
  attention_from: OrderStatus | null;
  /** What the current escalation is about (an escalated capture is `capturePayment`). */
  attention_step: string | null;
  created_at: Date;
  updated_at: Date;
  /** created_at to the microsecond (a Date keeps milliseconds): the cursor's position. */
  created_key: string;
}

const ORDER_COLUMNS = `o.order_id, o.customer_id, o.status, o.reason, o.currency, o.items, o.total_cents, o.charged_cents,
  o.payment_flow, o.authorized_cents, o.captured_cents, o.authorization_status, o.refunded_cents, o.cancel_reason, o.cancel_request_id, o.attention_from, o.attention_step, o.created_at, o.updated_at,
  to_json(o.created_at) #>> '{}' AS created_key`;

function view(r: OrderDbRow): OrderView {
  const choices = RESOLVE_ACTIONS_FOR[awaitingFrom(r.attention_from, r.attention_step)];
  return {
    orderId: r.order_id,
    customerId: r.customer_id,
    status: r.status,
    reason: r.reason,
    currency: r.currency,
    items: r.items,
    totalCents: Number(r.total_cents),
    paymentFlow: r.payment_flow,
    authorizedCents: Number(r.authorized_cents),
    authorization: r.authorization_status,
    chargedCents: Number(r.charged_cents) + Number(r.captured_cents),
    refundedCents: Number(r.refunded_cents),
    cancel: r.cancel_request_id ? { reason: r.cancel_reason ?? '' } : null,
    nextStep:
      r.status === 'NEEDS_ATTENTION'
        ? {
            by: 'operator',
            action: 'resolve',
            choices,
            detail: `${r.reason ?? 'the saga escalated'}; an operator settles it with client.ts resolve ${r.order_id} --action <${choices.join('|')}>`,
          }
        : null,
    createdAt: r.created_at.toISOString(),
    updatedAt: r.updated_at.toISOString(),
  };
}

/** A page's position: the last order of the page before, newest first. */
export interface Cursor {
  createdAt: string;
  orderId: string;
}

export const encodeCursor = (c: Cursor): string =>
  Buffer.from(JSON.stringify([c.createdAt, c.orderId])).toString('base64url');

/** The cursor a client sent back, or undefined when it is not one this API made. */
export function decodeCursor(text: string): Cursor | undefined {
  try {
    const v: unknown = JSON.parse(Buffer.from(text, 'base64url').toString('utf8'));
    if (!Array.isArray(v) || v.length !== 2 || typeof v[0] !== 'string' || typeof v[1] !== 'string') return undefined;
    if (Number.isNaN(Date.parse(v[0]))) return undefined;
    return { createdAt: v[0], orderId: v[1] };
  } catch {
    return undefined;
  }
}

/** Is this the same request as the placement's, left unanswered by a process that died (its lease is over)? */
export const carriedOn = (p: Placement, requestHash: string): boolean =>
  !p.answer && p.leaseOver && p.requestHash === requestHash;

export const isOrderStatus = (s: string): s is OrderStatus => (ORDER_STATUSES as readonly string[]).includes(s);

export function apiStore(db: Pool) {
  /** The placement under this storefront's key, if there is one. */
  async function placement(storefront: string, key: string): Promise<Placement | undefined> {
    const { rows } = await db.query<{
      request_hash: string;
      order_id: string;
      status_code: number | null;
      response: unknown;
      lease_over: boolean;
    }>({
      text: `SELECT request_hash, order_id, status_code, response, lease_until <= now() AS lease_over
               FROM api_placements WHERE storefront = $1 AND idempotency_key = $2`,
      values: [storefront, key],
    });
    const row = rows[0];
    if (!row) return undefined;
    return {
      requestHash: row.request_hash,
      orderId: row.order_id,
      leaseOver: row.lease_over,
      ...(row.status_code === null ? {} : { answer: { status: row.status_code, body: row.response } }),
    };
  }

  return {
    /**
     * Claims `key` for this order, in one statement: a new placement (in flight until `answer`), or
     * what is already there. A placement whose lease has run out is taken over.
     */
    async claim(p: {
      storefront: string;
      key: string;
      requestHash: string;
      orderId: string;
      leaseMs: number;
    }): Promise<Claim> {
      const inserted = await db.query({
        text: `INSERT INTO api_placements (storefront, idempotency_key, request_hash, order_id, lease_until)
               VALUES ($1, $2, $3, $4, now() + $5 * interval '1 millisecond') ON CONFLICT DO NOTHING`,
        values: [p.storefront, p.key, p.requestHash, p.orderId, p.leaseMs],
      });
      if (inserted.rowCount === 1) return { kind: 'new' };
      const prior = await placement(p.storefront, p.key);
      if (!prior) return { kind: 'order-taken' };
      if (!carriedOn(prior, p.requestHash)) return { kind: 'existing', placement: prior };
      const taken = await db.query({
        text: `UPDATE api_placements SET lease_until = now() + $3 * interval '1 millisecond'
                WHERE storefront = $1 AND idempotency_key = $2 AND status_code IS NULL AND lease_until <= now()`,
        values: [p.storefront, p.key, p.leaseMs],
      });
      return taken.rowCount === 1
        ? { kind: 'takeover' }
        : { kind: 'existing', placement: { ...prior, leaseOver: false } };
    },

    placement,

    /** Records the answer given, for the same request again. */
    async answer(p: {
      storefront: string;
      key: string;
      status: number;
      body: unknown;
    }): Promise<{ status: number; body: unknown; first: boolean }> {
      const { rowCount } = await db.query({
        text: `UPDATE api_placements SET status_code = $3, response = $4, answered_at = now()
                WHERE storefront = $1 AND idempotency_key = $2 AND status_code IS NULL`,
        values: [p.storefront, p.key, p.status, JSON.stringify(p.body)],
      });
      if (rowCount) return { status: p.status, body: p.body, first: true };
      // Another request with this key answered first (it took the placement over after this one's
      // lease ran out): its answer is the key's, so this request gives it too.
      const { rows } = await db.query<{ status_code: number; response: unknown }>({
        text: `SELECT status_code, response FROM api_placements WHERE storefront = $1 AND idempotency_key = $2`,
        values: [p.storefront, p.key],
      });
      const kept = rows[0];
      if (!kept || kept.status_code === null) return { status: p.status, body: p.body, first: true };
      return { status: kept.status_code, body: kept.response, first: false };
    },

    /** Gives up the lease of a placement left unanswered (no early answer in time): a retry carries it on. */
    async release(p: { storefront: string; key: string }): Promise<void> {
      await db.query({
        text: `UPDATE api_placements SET lease_until = now() WHERE storefront = $1 AND idempotency_key = $2 AND status_code IS NULL`,
        values: [p.storefront, p.key],
      });
    },

    /** Is the order placed, and not through this API (by client.ts, say)? */
    async placedOutside(orderId: string): Promise<boolean> {
      const { rows } = await db.query<{ outside: boolean }>({
        text: `SELECT EXISTS (SELECT 1 FROM orders WHERE order_id = $1)
                  AND NOT EXISTS (SELECT 1 FROM api_placements WHERE order_id = $1) AS outside`,
        values: [orderId],
      });
      return rows[0]!.outside;
    },

    /** Did this storefront place this order? */
    async placedBy(storefront: string, orderId: string): Promise<boolean> {
      const r = await db.query({
        text: 'SELECT 1 FROM api_placements WHERE storefront = $1 AND order_id = $2',
        values: [storefront, orderId],
      });
      return r.rowCount === 1;
    },

    /** The order, if this storefront placed it and its saga has written its row. */
    async order(storefront: string, orderId: string): Promise<OrderView | undefined> {
      const { rows } = await db.query<OrderDbRow>({
        text: `SELECT ${ORDER_COLUMNS} FROM orders o JOIN api_placements p ON p.order_id = o.order_id
                WHERE o.order_id = $2 AND p.storefront = $1`,
        values: [storefront, orderId],
      });
      return rows[0] && view(rows[0]);
    },

    /** One page of this storefront's orders, newest first, after `cursor`; `next` when there may be more. */
    async orders(q: {
      storefront: string;
      status?: OrderStatus;
      customerId?: string;
      cursor?: Cursor;
      limit: number;
    }): Promise<{ orders: OrderView[]; next?: Cursor }> {
      const { rows } = await db.query<OrderDbRow>({
        text: `SELECT ${ORDER_COLUMNS} FROM orders o JOIN api_placements p ON p.order_id = o.order_id
                WHERE p.storefront = $1 AND ($2::text IS NULL OR o.status = $2) AND ($3::text IS NULL OR o.customer_id = $3)
                  AND ($4::timestamptz IS NULL OR (o.created_at, o.order_id) < ($4::timestamptz, $5::text))
                ORDER BY o.created_at DESC, o.order_id DESC LIMIT $6`,
        values: [
          q.storefront,
          q.status ?? null,
          q.customerId ?? null,
          q.cursor?.createdAt ?? null,
          q.cursor?.orderId ?? null,
          q.limit + 1,
        ],
      });
      const page = rows.slice(0, q.limit);
      const last = page[page.length - 1];
      return {
        orders: page.map(view),
        ...(rows.length > q.limit && last ? { next: { createdAt: last.created_key, orderId: last.order_id } } : {}),
      };
    },
  };
}

export type ApiStore = ReturnType<typeof apiStore>;
