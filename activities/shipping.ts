import { createHash } from 'node:crypto';
import { log } from '@temporalio/activity';
import type { Pool } from 'pg';
import { withTransaction } from '../db/pool';
import { ErrorTypes } from '../domain/failures';
import { businessFailure } from './errors';
import { assertNotSuperseded, callerRunId, readOrder, stateConflict, transition } from './order-lock';

/** A tracking number derived from the order ID, so a retried shipment is the same shipment. */
export const trackingNumberFor = (orderId: string): string =>
  `TRK-${createHash('sha256').update(orderId).digest('hex').slice(0, 12).toUpperCase()}`;

export function shippingActivities({ db }: { db: Pool }) {
  return {
    /**
     * The pivot. In one transaction: the order moves CHARGED → SHIPPED, every line of the order turns
     * HELD → SOLD (all or nothing: a line not held for this order rejects the shipment), and the
     * shipment is created. Idempotent: a retry finds the order shipped and returns the same shipment.
     * `byOperator`: the operator shipped by hand (resolve mark-resolved at the pivot); the same
     * bookkeeping, so no reservation stays HELD.
     */
    async createShipment(req: { orderId: string; byOperator: boolean }): Promise<{ trackingNumber: string }> {
      const trackingNumber = (req.byOperator ? 'MANUAL-' : '') + trackingNumberFor(req.orderId);
      const shipped = await withTransaction(db, async (c) => {
        const prior = async (): Promise<string | undefined> =>
          (
            await c.query<{ tracking_number: string }>({
              text: 'SELECT tracking_number FROM shipments WHERE order_id = $1',
              values: [req.orderId],
            })
          ).rows[0]?.tracking_number;
        // Shipped already (a retry, or a run that finds the order further along): the same shipment.
        const row = await readOrder(c, req.orderId, true);
        if (row) assertNotSuperseded(req.orderId, row, callerRunId(), 'ship');
        const before = await prior();
        if (before !== undefined) return before;
        // Its event carries the tracking number: the shipment row is written below, in this transaction.
        if (!(await transition(c, req.orderId, 'SHIPPED', { eventData: { trackingNumber } })).changed) {
          const after = await prior();
          if (after !== undefined) return after;
          stateConflict(
            req.orderId,
            (await readOrder(c, req.orderId))?.status,
            'ship: the order is past SHIPPED with no shipment',
          );
        }
        const lines = await c.query<{ lines: number; sold: string }>({
          text: `WITH sold AS (UPDATE reservations SET status = 'SOLD', updated_at = now() WHERE order_id = $1 AND status = 'HELD' RETURNING sku)
                 SELECT jsonb_array_length(o.items) AS lines, (SELECT count(*) FROM sold) AS sold FROM orders o WHERE o.order_id = $1`,
          values: [req.orderId],
        });
        const { lines: wanted, sold } = lines.rows[0]!;
        if (Number(sold) !== wanted) {
          throw businessFailure(
            ErrorTypes.ShipmentRejected,
            `order ${req.orderId}: ${sold} of ${wanted} line(s) held; nothing shipped`,
            { held: Number(sold), lines: wanted },
          );
        }
        await c.query({
          text: 'INSERT INTO shipments (order_id, tracking_number) VALUES ($1, $2) ON CONFLICT (order_id) DO NOTHING',
          values: [req.orderId, trackingNumber],
        });
        return trackingNumber;
      });
      log.info('shipment created', { orderId: req.orderId, trackingNumber: shipped, byOperator: req.byOperator });
      return { trackingNumber: shipped };
    },
  };
}
