/**
 * The order's events (migrations/0016_order_events.sql): what each status change tells the world, and
 * the refund's event. Each is written in the same statement or transaction as the write that makes it
 * true, numbered per order (orders.event_seq); lib/event-relay.ts delivers them.
 */
import type { Pool, PoolClient } from 'pg';
import type { OrderStatus } from '../domain/order';

/** The event kinds, as the receiver reads them in `type`. */
export const ORDER_EVENT_KINDS = [
  'order.accepted',
  'order.needs_attention',
  'order.shipped',
  'order.completed',
  'order.cancelled',
  'order.failed',
  'order.refunded',
] as const;
export type OrderEventKind = (typeof ORDER_EVENT_KINDS)[number];

/** The statuses whose arrival is an event; every other status change is the saga's own business. */
export const STATUS_EVENTS: Partial<Record<OrderStatus, OrderEventKind>> = {
  RESERVED: 'order.accepted',
  NEEDS_ATTENTION: 'order.needs_attention',
  SHIPPED: 'order.shipped',
  COMPLETED: 'order.completed',
  CANCELLED: 'order.cancelled',
  FAILED: 'order.failed',
};

/**
 * The event's data, in SQL over the order row as `o` (after the write): its status and reason, the
 * customer, the total, the tracking number once it shipped, and what a person is asked about.
 */
export const EVENT_DATA_SQL = (o: string): string =>
  `jsonb_strip_nulls(jsonb_build_object('status', ${o}.status, 'reason', ${o}.reason, 'customerId', ${o}.customer_id,
     'totalCents', ${o}.total_cents, 'currency', ${o}.currency, 'attentionStep',
     CASE WHEN ${o}.status = 'NEEDS_ATTENTION' THEN ${o}.attention_step END,
     'trackingNumber', (SELECT s.tracking_number FROM shipments s WHERE s.order_id = ${o}.order_id)))`;

/**
 * The refund on the order's side, in one statement: the money charged and given back (the orders API
 * reads them there), and the refund's event, once per order (a retry of the refund step writes the
 * amounts again and no second event). Returns whether the event was written now.
 */
export async function recordRefunded(
  db: Pool | PoolClient,
  orderId: string,
  chargedCents: number,
  refundedCents: number,
): Promise<boolean> {
  const first = `NOT EXISTS (SELECT 1 FROM order_events WHERE order_id = $1 AND kind = 'order.refunded')`;
  const { rows } = await db.query<{ n: number }>({
    text: `WITH o AS (
             UPDATE orders SET charged_cents = GREATEST(charged_cents, $2), refunded_cents = GREATEST(refunded_cents, $3),
                    event_seq = event_seq + CASE WHEN ${first} THEN 1 ELSE 0 END
              WHERE order_id = $1
             RETURNING order_id, event_seq, status, reason, customer_id, total_cents, currency, attention_step, ${first} AS fresh
           ), e AS (
             INSERT INTO order_events (order_id, seq, kind, data)
             SELECT o.order_id, o.event_seq, 'order.refunded', ${EVENT_DATA_SQL('o')} || jsonb_build_object('refundedCents', $3::bigint)
               FROM o WHERE o.fresh RETURNING 1
           )
           SELECT count(*)::int AS n FROM e`,
    values: [orderId, chargedCents, refundedCents],
  });
  return rows[0]!.n === 1;
}
