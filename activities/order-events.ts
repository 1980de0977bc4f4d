/**
 * The order's events (migrations/0016_order_events.sql): what each status change tells the world, and
 * the refunds' events (the compensation's, and each refund after the shipment). Each is written in the same statement or transaction as the write that makes it
 * true, numbered per order (orders.event_seq); ops/event-relay.ts delivers them.
 */
import type { Pool, PoolClient } from 'pg';
import { withTransaction } from '../db/pool';
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
  const first = `NOT EXISTS (SELECT 1 FROM order_events WHERE order_id = $1 AND kind = 'order.refunded' AND NOT data ? 'refundKey')`;
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

/**
 * A refund after the shipment (client.ts refund, migrations/0019_refunds.sql), once the provider made
 * it: in one transaction, the refund recorded as made; on the order row what was taken (`takenCents`,
 * as the provider says: charged for the charge era, captured for the authorization era) and what is
 * refunded (the ledger's sum, `ledgerRefundedCents`, and at least every refund recorded as made); and
 * the refund's event, once per refund key (the same refund again writes no second event). Returns the
 * order's refunded total and whether the event was written now.
 */
export async function recordRefundMade(
  db: Pool,
  req: { orderId: string; refundKey: string; takenCents?: number; ledgerRefundedCents?: number },
): Promise<{ refundedCents: number; fresh: boolean }> {
  return withTransaction(db, async (c) => {
    await c.query({
      text: `UPDATE order_refunds SET status = 'succeeded', message = NULL, settled_at = COALESCE(settled_at, now())
              WHERE refund_key = $1 AND order_id = $2 AND status <> 'succeeded'`,
      values: [req.refundKey, req.orderId],
    });
    const first = `NOT EXISTS (SELECT 1 FROM order_events WHERE order_id = $1 AND kind = 'order.refunded' AND data ->> 'refundKey' = $2)`;
    const { rows } = await c.query<{ refunded_cents: string; fresh: boolean }>({
      text: `WITH o AS (
               UPDATE orders SET
                      charged_cents = CASE WHEN payment_flow = 'charge' THEN GREATEST(charged_cents, $3) ELSE charged_cents END,
                      captured_cents = CASE WHEN payment_flow = 'authorization' THEN GREATEST(captured_cents, $3) ELSE captured_cents END,
                      refunded_cents = GREATEST(refunded_cents, $4,
                        (SELECT COALESCE(sum(amount_cents), 0) FROM order_refunds WHERE order_id = $1 AND status = 'succeeded')),
                      event_seq = event_seq + CASE WHEN ${first} THEN 1 ELSE 0 END
                WHERE order_id = $1
               RETURNING order_id, event_seq, status, reason, customer_id, total_cents, currency, attention_step,
                         refunded_cents, ${first} AS fresh
             ), e AS (
               INSERT INTO order_events (order_id, seq, kind, data)
               SELECT o.order_id, o.event_seq, 'order.refunded', ${EVENT_DATA_SQL('o')} || jsonb_build_object(
                        'refundedCents', o.refunded_cents, 'refundKey', $2::text,
                        'amountCents', (SELECT amount_cents FROM order_refunds WHERE refund_key = $2))
                 FROM o WHERE o.fresh RETURNING 1
             )
             SELECT o.refunded_cents, (SELECT count(*) FROM e) = 1 AS fresh FROM o`,
      values: [req.orderId, req.refundKey, req.takenCents ?? 0, req.ledgerRefundedCents ?? 0],
    });
    const row = rows[0];
    if (!row) throw new Error(`order ${req.orderId} has no row`);
    return { refundedCents: Number(row.refunded_cents), fresh: row.fresh };
  });
}
