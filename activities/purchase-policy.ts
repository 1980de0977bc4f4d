import type { Pool } from 'pg';
import { businessFailure, ErrorTypes } from './errors';
import type { ReserveRequest, SnapshotRow } from './inventory';
import type { UndoLog } from './undo-log';

/**
 * The purchase policy (seed 003's validatePurchasePolicy), run outside any transaction between the
 * snapshot read and the CAS write. For a product with `max_per_customer`, it holds the customer's
 * quota with one conditional upsert, and records the inverse in the attempt's undo log.
 */
export async function holdPurchaseQuota(db: Pool, req: ReserveRequest, snapshot: SnapshotRow[], undo: UndoLog): Promise<void> {
  for (const row of snapshot) {
    if (row.max_per_customer === null) continue;
    const qty = req.items.find((i) => i.sku === row.sku)!.qty;
    const held = await db.query({
      text: `INSERT INTO purchase_quota (customer_id, sku, held) SELECT $1::text, $2::text, $3::int WHERE $3::int <= $4::int
             ON CONFLICT (customer_id, sku) DO UPDATE SET held = purchase_quota.held + EXCLUDED.held
             WHERE purchase_quota.held + EXCLUDED.held <= $4::int`,
      values: [req.customerId, row.sku, qty, row.max_per_customer],
    });
    if (held.rowCount !== 1) {
      throw businessFailure(ErrorTypes.PurchaseLimitExceeded, `${row.sku}: at most ${row.max_per_customer} per customer`, {
        sku: row.sku,
        limit: row.max_per_customer,
      });
    }
    undo.record(`quota ${req.customerId}/${row.sku} -${qty}`, async () => {
      await db.query({
        text: 'UPDATE purchase_quota SET held = held - $3 WHERE customer_id = $1 AND sku = $2',
        values: [req.customerId, row.sku, qty],
      });
    });
  }
}
