import { log } from '@temporalio/activity';
import type { Pool } from 'pg';
import { transition } from './order-lock';

export function notificationActivities({ db }: { db: Pool }) {
  return {
    /**
     * Completes the order: SHIPPED → COMPLETED, which writes its `order.completed` event (with the
     * tracking number) in the same statement (activities/order-events.ts); the relay delivers it to
     * the configured endpoint. A retry changes nothing and writes no second event. Refused for an
     * order that has not shipped.
     */
    async sendConfirmation(req: { orderId: string; trackingNumber: string }): Promise<{ sent: boolean }> {
      const { changed } = await transition(db, req.orderId, 'COMPLETED');
      log.info('order completed, its event written', { orderId: req.orderId, firstTime: changed });
      return { sent: changed };
    },
  };
}
