import { log } from '@temporalio/activity';
import type { Pool } from 'pg';
import { withTransaction } from '../db/pool';
import { transition } from './order-lock';

export function notificationActivities({ db }: { db: Pool }) {
  return {
    /**
     * Sends the order confirmation and completes the order, in one transaction: the message goes to
     * the notifications outbox, keyed by (order, kind), so a retry never sends a second one, and the
     * order moves SHIPPED → COMPLETED. Refused for an order that has not shipped.
     */
    async sendConfirmation(req: { orderId: string; trackingNumber: string }): Promise<{ sent: boolean }> {
      const res = await withTransaction(db, async (c) => {
        await transition(c, req.orderId, 'COMPLETED');
        return c.query({
          text: `INSERT INTO notifications (order_id, kind, body) VALUES ($1, 'confirmation', $2)
                 ON CONFLICT (order_id, kind) DO NOTHING`,
          values: [req.orderId, `Your order ${req.orderId} is on its way. Tracking number: ${req.trackingNumber}.`],
        });
      });
      log.info('confirmation sent', { orderId: req.orderId, firstTime: res.rowCount === 1 });
      return { sent: res.rowCount === 1 };
    },
  };
}
