import type { PoolClient } from 'pg';
import { ErrorTypes } from '../domain/failures';
import { businessFailure } from './errors';
import type { ReserveRequest, SnapshotRow } from './reserve-types';

/**
 * The purchase policy: a customer buys at most `max_per_customer` units of a product. For a product
 * with that limit, it holds the customer's quota with one conditional upsert, inside the reservation's
 * own transaction: the hold commits with the stock and the reservation row (which records it as
 * `quota_qty`), or not at all. A crash between the two cannot leak a hold or lock the customer out.
 * Returns the quantity held per SKU.
 */
export async function holdPurchaseQuota(
  c: PoolClient,
  req: ReserveRequest,
  snapshot: SnapshotRow[],
): Promise<Map<string, number>> {
  const held = new Map<string, number>();
  for (const row of snapshot) {
    if (row.max_per_customer === null) continue;
    const qty = req.items.find((i) => i.sku === row.sku)!.qty;
    const res = await c.query({
      text: `INSERT INTO purchase_quota (customer_id, sku, held) SELECT $1::text, $2::text, $3::int WHERE $3::int <= $4::int
             ON CONFLICT (customer_id, sku) DO UPDATE SET held = purchase_quota.held + EXCLUDED.held
             WHERE purchase_quota.held + EXCLUDED.held <= $4::int`,
      values: [req.customerId, row.sku, qty, row.max_per_customer],
    });
    if (res.rowCount !== 1) {
      throw businessFailure(
        ErrorTypes.PurchaseLimitExceeded,
        `${row.sku}: at most ${row.max_per_customer} per customer`,
        {
          sku: row.sku,
          limit: row.max_per_customer,
        },
      );
    }
    held.set(row.sku, qty);
  }
  return held;
}
