import { createHash } from 'node:crypto';
import { log } from '@temporalio/activity';
import type { Pool } from 'pg';
import { withTransaction } from '../db/pool';

/** A tracking number derived from the order ID, so a retried shipment is the same shipment. */
export const trackingNumberFor = (orderId: string): string =>
  `TRK-${createHash('sha256').update(orderId).digest('hex').slice(0, 12).toUpperCase()}`;

export function shippingActivities({ db }: { db: Pool }) {
  return {
    /**
     * The pivot. Creates the shipment and turns the order's HELD reservations into SOLD, in one
     * transaction. Idempotent: a retry finds the shipment and changes nothing.
     */
    async createShipment(req: { orderId: string }): Promise<{ trackingNumber: string }> {
      const trackingNumber = trackingNumberFor(req.orderId);
      await withTransaction(db, async (c) => {
        await c.query({
          text: 'INSERT INTO shipments (order_id, tracking_number) VALUES ($1, $2) ON CONFLICT (order_id) DO NOTHING',
          values: [req.orderId, trackingNumber],
        });
        await c.query({
          text: `UPDATE reservations SET status = 'SOLD', updated_at = now() WHERE order_id = $1 AND status = 'HELD'`,
          values: [req.orderId],
        });
      });
      log.info('shipment created', { orderId: req.orderId, trackingNumber });
      return { trackingNumber };
    },
  };
}
