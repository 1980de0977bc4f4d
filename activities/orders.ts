import { log } from '@temporalio/activity';
import type { Pool } from 'pg';
import { orderTotalCents, parseOrder, workflowIdFor, type OrderInput, type OrderStatus } from '../domain/order';
import { businessFailure, ErrorTypes } from './errors';

export interface ProductRow {
  sku: string;
  name: string;
  price_cents: string;
  stock: number;
  initial_stock: number;
  version: string;
}

/**
 * Checks an order against the catalogue: every SKU exists and every unit price is the catalogue's.
 * Returns the field and problem of the first mismatch, or undefined. Shared by the client (before it
 * starts a workflow) and by createOrder (the workflow boundary).
 */
export async function checkAgainstCatalogue(db: Pool, order: OrderInput): Promise<{ field: string; problem: string } | undefined> {
  const { rows } = await db.query<Pick<ProductRow, 'sku' | 'price_cents'>>({
    text: 'SELECT sku, price_cents FROM products WHERE sku = ANY($1::text[])',
    values: [order.items.map((i) => i.sku)],
  });
  const prices = new Map(rows.map((r) => [r.sku, Number(r.price_cents)]));
  for (const [i, item] of order.items.entries()) {
    const price = prices.get(item.sku);
    if (price === undefined) return { field: `items[${i}].sku`, problem: `unknown SKU ${item.sku}` };
    if (price !== item.unitPriceCents) {
      return { field: `items[${i}].unitPriceCents`, problem: `catalogue price of ${item.sku} is ${price}, not ${item.unitPriceCents}` };
    }
  }
  return undefined;
}

export function orderActivities({ db }: { db: Pool }) {
  return {
    /** Writes the order row PENDING: the semantic lock. Idempotent: a retry finds the row and returns. */
    async createOrder(input: OrderInput): Promise<void> {
      const order = parseOrder(input);
      const problem = await checkAgainstCatalogue(db, order);
      if (problem) throw businessFailure(ErrorTypes.InvalidOrder, `${problem.field}: ${problem.problem}`, problem);
      const res = await db.query({
        text: `INSERT INTO orders (order_id, customer_id, status, currency, total_cents, items, payment_method, workflow_id)
               VALUES ($1, $2, 'PENDING', $3, $4, $5, $6, $7) ON CONFLICT (order_id) DO NOTHING`,
        values: [order.orderId, order.customerId, order.currency, orderTotalCents(order), JSON.stringify(order.items),
          order.paymentMethod, workflowIdFor(order.orderId)],
      });
      log.info('order row written', { orderId: order.orderId, created: res.rowCount === 1 });
    },

    /** Mirrors the saga's status (and reason) onto the order row. */
    async setOrderStatus(req: { orderId: string; status: OrderStatus; reason?: string }): Promise<void> {
      await db.query({
        text: 'UPDATE orders SET status = $2, reason = $3, updated_at = now() WHERE order_id = $1',
        values: [req.orderId, req.status, req.reason ?? null],
      });
      if (req.status === 'NEEDS_ATTENTION') {
        log.error('ALERT order needs attention', { orderId: req.orderId, reason: req.reason });
      }
    },
  };
}
