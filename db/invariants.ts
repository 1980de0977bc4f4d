/**
 * The invariant checker: reads the application database and the provider's ledger in one consistent
 * snapshot and reports every violation with the order IDs involved. Used by `client.ts check`, the
 * reconciliation workflow, the chaos soak and the tests.
 */
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import type { Pool } from 'pg';
import { PAST_PIVOT_STATUSES, TERMINAL_STATUSES } from '../domain/order';
import { withTransaction } from './pool';

export interface Violation {
  rule: string;
  orderIds: string[];
  detail: string;
}

/**
 * An order an operator said was settled outside the saga (resolve settled-elsewhere, with a
 * reference): the refund rule takes that word for the money returned outside the provider, and the
 * report names the order; every rule the checker can check still holds for it.
 */
export interface SettledElsewhere {
  orderId: string;
  status: string;
  reference: string;
  note: string | null;
  at: string;
}

export interface CheckReport {
  checkedAt: string;
  orders: number;
  skus: number;
  violations: Violation[];
  /** Named exceptions: orders settled elsewhere, by an operator's word with a reference. */
  exceptions: SettledElsewhere[];
}

/**
 * Orders with an accepted settled-elsewhere resolve: the refund rule takes the operator's word for
 * money returned outside the provider (it cannot see it), and still counts refunds at the provider.
 * Every other rule holds for them (stock still HELD on one is a violation).
 */
const SETTLED_ELSEWHERE = `SELECT order_id FROM order_requests
  WHERE kind = 'resolve' AND action = 'settled-elsewhere' AND outcome = 'accepted'`;

/**
 * A refund of the ledger (row `r`, of the charge or capture key `sourceKey`) that client.ts refund
 * recorded (migrations/0019_refunds.sql), for the order `orderId` when given: the same key, source
 * and amount, not refused. Such a refund after the shipment is a person's; any other is not.
 */
const RECORDED_REFUND = (r: string, sourceKey: string, orderId?: string): string =>
  `EXISTS (SELECT 1 FROM order_refunds x WHERE x.refund_key = ${r}.idempotency_key${orderId ? ` AND x.order_id = ${orderId}` : ''}
     AND x.source_key = ${sourceKey} AND x.amount_cents = ${r}.amount_cents AND x.status <> 'refused')`;

export const RULES = {
  doubleCharge: 'no order charged twice',
  refundWithoutCharge: 'no refund without a charge',
  refundAboveCharge: 'no refund above its charge',
  failedChargedRefundedOnce: 'every FAILED or CANCELLED order that was charged has exactly one refund',
  stockConserved: 'stock + held + sold = initial for every SKU',
  orderDecided: 'every order is terminal, NEEDS_ATTENTION with a reason, or running within its deadline',
  noHeldOnFailed: 'no reservation left HELD on a FAILED or CANCELLED order',
  orphanCharge: 'no successful charge whose order is missing',
  shippedPaidOnce:
    'every SHIPPED or COMPLETED order of the charge era has exactly one succeeded charge equal to its total in its currency, refunded by client.ts refund only',
  captureWithoutShipment: 'no capture without a shipment',
  openHoldOnTerminal: 'no authorization still open on a terminal order',
  completedCapturedTotal: 'a COMPLETED order of the authorization era is captured for exactly its total',
  nothingCapturedOnFailed: 'nothing is captured on a CANCELLED or FAILED order',
  refundWithoutCapture: 'no refund on money never captured, nor above its capture',
  noRefundOnShipped: 'no refund on a shipped order but the ones client.ts refund recorded',
  refundsRecorded:
    'every refund client.ts refund recorded as made is in the ledger for its amount, and none it recorded as refused is',
  shipmentsMatchSold: 'shipments match SOLD reservations, and no HELD reservation remains on a COMPLETED order',
  quotaMatchesHolds: 'purchase quota held equals what the HELD and SOLD reservations hold',
  closedRunTerminal: 'an order whose workflow has closed is in a terminal status',
  terminalEventOut:
    'every order that ended more than the events grace ago has its terminal event delivered or dead-lettered',
} as const;

/**
 * How long after an order ends its terminal event may still be on its way: an order's events go one
 * after another, and each may take its tries (at most about 2.7 h), so 12 h covers the four before it.
 */
export const EVENTS_GRACE_MS = 12 * 3_600_000;

/** Latest execution status (RUNNING, COMPLETED, FAILED, TERMINATED, …, or NOT_FOUND) of each workflow ID. */
export type WorkflowLookup = (workflowIds: string[]) => Promise<Map<string, string>>;

/** A WorkflowLookup that asks Temporal (describe of each workflow's latest run), a few at a time. */
export function temporalLookup(client: Client): WorkflowLookup {
  return async (ids) => {
    const out = new Map<string, string>();
    const queue = [...ids];
    const one = async (): Promise<void> => {
      for (let id = queue.shift(); id !== undefined; id = queue.shift()) {
        try {
          out.set(id, (await client.workflow.getHandle(id).describe()).status.name);
        } catch (err) {
          if (!(err instanceof WorkflowNotFoundError)) throw err;
          out.set(id, 'NOT_FOUND');
        }
      }
    };
    await Promise.all(Array.from({ length: 8 }, one));
    return out;
  };
}

export async function checkInvariants(
  db: Pool,
  opts: {
    deadlineMs: number;
    now?: Date;
    workflows?: WorkflowLookup;
    /** Check that ended orders' events went out, this long after they ended (only where a relay runs). */
    eventsGraceMs?: number;
  },
): Promise<CheckReport> {
  const violations: Violation[] = [];
  // One consistent snapshot of the database; Temporal is asked after it, with the client released.
  const { open, counts, elsewhere } = await withTransaction(
    db,
    async (client) => {
      const add = (rule: string, rows: { order_id: string; detail: string }[]): void => {
        for (const r of rows) violations.push({ rule, orderIds: [r.order_id], detail: r.detail });
      };

      add(
        RULES.doubleCharge,
        (
          await client.query<{ order_id: string; detail: string }>(`
      SELECT reference AS order_id, count(*) || ' successful charges: ' || string_agg(idempotency_key, ', ') AS detail
      FROM provider.charges WHERE status = 'succeeded' AND reference IS NOT NULL
      GROUP BY reference HAVING count(*) > 1`)
        ).rows,
      );

      add(
        RULES.refundWithoutCharge,
        (
          await client.query<{ order_id: string; detail: string }>(`
      SELECT COALESCE(c.reference, r.charge_key) AS order_id, 'refund ' || r.idempotency_key || ' of a charge that is ' || c.status AS detail
      FROM provider.refunds r JOIN provider.charges c ON c.idempotency_key = r.charge_key
      WHERE c.status <> 'succeeded'`)
        ).rows,
      );

      add(
        RULES.refundAboveCharge,
        (
          await client.query<{ order_id: string; detail: string }>(`
      SELECT COALESCE(c.reference, c.idempotency_key) AS order_id,
             'refunded ' || sum(r.amount_cents) || ' of a ' || c.amount_cents || ' charge' AS detail
      FROM provider.refunds r JOIN provider.charges c ON c.idempotency_key = r.charge_key
      GROUP BY c.idempotency_key, c.reference, c.amount_cents HAVING sum(r.amount_cents) > c.amount_cents`)
        ).rows,
      );

      add(
        RULES.failedChargedRefundedOnce,
        (
          await client.query<{ order_id: string; detail: string }>(`
      SELECT o.order_id, o.status || ', charged ' || c.amount_cents || ', ' || count(r.*) || ' refund(s) totalling ' || COALESCE(sum(r.amount_cents), 0) AS detail
      FROM orders o
      JOIN provider.charges c ON c.idempotency_key = o.order_id || ':charge' AND c.status = 'succeeded'
      LEFT JOIN provider.refunds r ON r.charge_key = c.idempotency_key
      WHERE o.status IN ('FAILED', 'CANCELLED')
      GROUP BY o.order_id, o.status, c.amount_cents
      -- Money returned outside the provider is the operator's word (named as an exception); a second
      -- refund at the provider is wrong whatever happened outside.
      HAVING CASE WHEN o.order_id IN (${SETTLED_ELSEWHERE}) THEN count(r.*) > 1
                  ELSE count(r.*) <> 1 OR COALESCE(sum(r.amount_cents), 0) <> c.amount_cents END`)
        ).rows,
      );

      const stock = await client.query<{ sku: string; detail: string; orders: string[] | null }>(`
      SELECT p.sku,
             'initial ' || p.initial_stock || ' ≠ stock ' || p.stock || ' + held ' || COALESCE(h.held, 0) || ' + sold ' || COALESCE(h.sold, 0) AS detail,
             h.orders
      FROM products p
      LEFT JOIN (SELECT sku, sum(qty) FILTER (WHERE status = 'HELD') AS held, sum(qty) FILTER (WHERE status = 'SOLD') AS sold,
                        array_agg(order_id ORDER BY order_id) FILTER (WHERE status <> 'RELEASED') AS orders
                 FROM reservations GROUP BY sku) h ON h.sku = p.sku
      WHERE p.stock + COALESCE(h.held, 0) + COALESCE(h.sold, 0) <> p.initial_stock`);
      for (const r of stock.rows)
        violations.push({
          rule: RULES.stockConserved,
          orderIds: (r.orders ?? []).slice(0, 20),
          detail: `${r.sku}: ${r.detail}`,
        });

      add(
        RULES.orderDecided,
        (
          await client.query<{ order_id: string; detail: string }>({
            text: `SELECT order_id, status || CASE WHEN status = 'NEEDS_ATTENTION' THEN ' with no reason' ELSE ' since ' || created_at END AS detail
             FROM orders
             WHERE (status = 'NEEDS_ATTENTION' AND (reason IS NULL OR reason = ''))
                OR (NOT (status = ANY ($3::text[])) AND status <> 'NEEDS_ATTENTION' AND created_at < $1::timestamptz - ($2::bigint * interval '1 millisecond'))`,
            values: [(opts.now ?? new Date()).toISOString(), opts.deadlineMs, TERMINAL_STATUSES],
          })
        ).rows,
      );

      add(
        RULES.noHeldOnFailed,
        (
          await client.query<{ order_id: string; detail: string }>(`
      SELECT o.order_id, o.status || ' with ' || count(*) || ' HELD reservation(s)' AS detail
      FROM orders o JOIN reservations r ON r.order_id = o.order_id AND r.status = 'HELD'
      WHERE o.status IN ('FAILED', 'CANCELLED') GROUP BY o.order_id, o.status`)
        ).rows,
      );

      add(
        RULES.orphanCharge,
        (
          await client.query<{ order_id: string; detail: string }>(`
      SELECT c.reference AS order_id, 'charge ' || c.idempotency_key || ' succeeded for an order that does not exist' AS detail
      FROM provider.charges c LEFT JOIN orders o ON o.order_id = c.reference
      WHERE c.status = 'succeeded' AND c.reference IS NOT NULL AND o.order_id IS NULL`)
        ).rows,
      );

      add(
        RULES.shippedPaidOnce,
        (
          await client.query<{ order_id: string; detail: string }>({
            text: `
      SELECT o.order_id,
             o.status || ' order of ' || o.total_cents || ' ' || o.currency || ': ' ||
             COALESCE(c.status || ' charge of ' || c.amount_cents || ' ' || c.currency || ', refunded ' || COALESCE(r.refunded, 0), 'no charge') AS detail
      FROM orders o
      LEFT JOIN provider.charges c ON c.idempotency_key = o.order_id || ':charge'
      -- Refunds client.ts refund recorded are the person's, after the shipment; any other counts.
      LEFT JOIN (SELECT rr.charge_key, sum(rr.amount_cents) AS refunded FROM provider.refunds rr
                  WHERE rr.charge_key IS NOT NULL AND NOT ${RECORDED_REFUND('rr', 'rr.charge_key')}
                  GROUP BY rr.charge_key) r ON r.charge_key = c.idempotency_key
      WHERE o.status = ANY ($1::text[]) AND o.payment_flow = 'charge'
        AND (c.idempotency_key IS NULL OR c.status <> 'succeeded' OR c.amount_cents <> o.total_cents OR c.currency <> o.currency
             OR COALESCE(r.refunded, 0) <> 0)`,
            values: [PAST_PIVOT_STATUSES],
          })
        ).rows,
      );

      // The authorization era: a hold is the order's (reference), its capture after the shipment only.
      add(
        RULES.captureWithoutShipment,
        (
          await client.query<{ order_id: string; detail: string }>(`
      SELECT a.reference AS order_id, 'capture ' || c.idempotency_key || ' of ' || c.amount_cents || ' with no shipment' AS detail
      FROM provider.captures c JOIN provider.authorizations a ON a.idempotency_key = c.authorization_key
      LEFT JOIN shipments s ON s.order_id = a.reference
      WHERE c.status = 'succeeded' AND a.reference IS NOT NULL AND s.order_id IS NULL`)
        ).rows,
      );

      add(
        RULES.openHoldOnTerminal,
        (
          await client.query<{ order_id: string; detail: string }>(`
      SELECT o.order_id, o.status || ' order with hold ' || a.idempotency_key || ' of ' || a.amount_cents || ' open until ' || a.expires_at AS detail
      FROM orders o JOIN provider.authorizations a ON a.reference = o.order_id
      WHERE o.status IN ('COMPLETED', 'FAILED', 'CANCELLED') AND a.status = 'authorized' AND a.expires_at > clock_timestamp()
        AND NOT EXISTS (SELECT 1 FROM provider.voids v WHERE v.authorization_key = a.idempotency_key)
        AND NOT EXISTS (SELECT 1 FROM provider.captures c WHERE c.authorization_key = a.idempotency_key AND c.status = 'succeeded')`)
        ).rows,
      );

      add(
        RULES.completedCapturedTotal,
        (
          await client.query<{ order_id: string; detail: string }>(`
      SELECT o.order_id, 'COMPLETED order of ' || o.total_cents || ' ' || o.currency || ': captured ' || COALESCE(sum(c.amount_cents), 0) AS detail
      FROM orders o
      LEFT JOIN provider.authorizations a ON a.reference = o.order_id
      LEFT JOIN provider.captures c ON c.authorization_key = a.idempotency_key AND c.status = 'succeeded'
      WHERE o.status = 'COMPLETED' AND o.payment_flow = 'authorization'
      GROUP BY o.order_id, o.total_cents, o.currency
      HAVING COALESCE(sum(c.amount_cents), 0) <> o.total_cents`)
        ).rows,
      );

      add(
        RULES.nothingCapturedOnFailed,
        (
          await client.query<{ order_id: string; detail: string }>(`
      SELECT o.order_id, o.status || ' order with capture ' || c.idempotency_key || ' of ' || c.amount_cents AS detail
      FROM orders o JOIN provider.authorizations a ON a.reference = o.order_id
      JOIN provider.captures c ON c.authorization_key = a.idempotency_key AND c.status = 'succeeded'
      WHERE o.status IN ('FAILED', 'CANCELLED')`)
        ).rows,
      );

      add(
        RULES.refundWithoutCapture,
        (
          await client.query<{ order_id: string; detail: string }>(`
      SELECT COALESCE(a.reference, r.capture_key) AS order_id,
             'refunded ' || sum(r.amount_cents) || ' of capture ' || r.capture_key || ' (' || c.status || ', ' || c.amount_cents || ')' AS detail
      FROM provider.refunds r JOIN provider.captures c ON c.idempotency_key = r.capture_key
      LEFT JOIN provider.authorizations a ON a.idempotency_key = c.authorization_key
      WHERE r.capture_key IS NOT NULL
      GROUP BY a.reference, r.capture_key, c.status, c.amount_cents
      HAVING c.status <> 'succeeded' OR sum(r.amount_cents) > c.amount_cents`)
        ).rows,
      );

      add(
        RULES.noRefundOnShipped,
        (
          await client.query<{ order_id: string; detail: string }>({
            text: `
      WITH r AS (
        -- A refund of an order's charge, or of the capture of one of its holds.
        SELECT r.idempotency_key, r.amount_cents, r.charge_key AS source_key, o.order_id
          FROM provider.refunds r JOIN orders o ON r.charge_key = o.order_id || ':charge'
        UNION ALL
        SELECT r.idempotency_key, r.amount_cents, r.capture_key, a.reference
          FROM provider.refunds r JOIN provider.captures c ON c.idempotency_key = r.capture_key
          JOIN provider.authorizations a ON a.idempotency_key = c.authorization_key
         WHERE a.reference IS NOT NULL
      )
      SELECT o.order_id, 'refund ' || r.idempotency_key || ' of ' || r.amount_cents || ' (of ' || r.source_key || ') on a ' || o.status || ' order'
             || CASE WHEN s.order_id IS NOT NULL THEN ' with shipment ' || s.tracking_number ELSE '' END
             || ', not recorded by client.ts refund' AS detail
      FROM r JOIN orders o ON o.order_id = r.order_id
      LEFT JOIN shipments s ON s.order_id = o.order_id
      WHERE (o.status = ANY ($1::text[]) OR s.order_id IS NOT NULL)
        AND NOT ${RECORDED_REFUND('r', 'r.source_key', 'o.order_id')}`,
            values: [PAST_PIVOT_STATUSES],
          })
        ).rows,
      );

      add(
        RULES.refundsRecorded,
        (
          await client.query<{ order_id: string; detail: string }>(`
      SELECT x.order_id, 'refund ' || x.refund_key || ' of ' || x.amount_cents || ' (of ' || x.source_key || ') recorded as ' || x.status
             || '; the ledger has ' || COALESCE(r.amount_cents || ' of ' || COALESCE(r.charge_key, r.capture_key), 'none') AS detail
      FROM order_refunds x LEFT JOIN provider.refunds r ON r.idempotency_key = x.refund_key
      WHERE (x.status = 'succeeded' AND (r.idempotency_key IS NULL OR r.amount_cents <> x.amount_cents
                                         OR COALESCE(r.charge_key, r.capture_key) <> x.source_key))
         OR (x.status = 'refused' AND r.idempotency_key IS NOT NULL)`)
        ).rows,
      );

      add(
        RULES.shipmentsMatchSold,
        (
          await client.query<{ order_id: string; detail: string }>(`
      SELECT o.order_id,
             o.status || CASE WHEN s.order_id IS NULL THEN ' order without a shipment' ELSE ' order with shipment ' || s.tracking_number END
             || ': ' || count(r.*) FILTER (WHERE r.status = 'SOLD') || ' SOLD, ' || count(r.*) FILTER (WHERE r.status = 'HELD') || ' HELD, '
             || count(r.*) FILTER (WHERE r.status = 'RELEASED') || ' RELEASED of ' || jsonb_array_length(o.items) || ' line(s)' AS detail
      FROM orders o
      LEFT JOIN shipments s ON s.order_id = o.order_id
      LEFT JOIN reservations r ON r.order_id = o.order_id
      GROUP BY o.order_id, o.status, o.items, s.order_id, s.tracking_number
      HAVING (s.order_id IS NOT NULL AND (count(r.*) FILTER (WHERE r.status = 'SOLD') <> count(r.*)
                                          OR count(r.*) FILTER (WHERE r.status = 'SOLD') < jsonb_array_length(o.items)
                                          OR o.status IN ('FAILED', 'CANCELLED')))
          OR (s.order_id IS NULL AND count(r.*) FILTER (WHERE r.status = 'SOLD') > 0)
          OR (o.status = 'COMPLETED' AND count(r.*) FILTER (WHERE r.status = 'HELD') > 0)`)
        ).rows,
      );

      const quota = await client.query<{ customer_id: string; sku: string; detail: string; orders: string[] | null }>(`
      SELECT COALESCE(q.customer_id, h.customer_id) AS customer_id, COALESCE(q.sku, h.sku) AS sku, h.orders,
             'quota held ' || COALESCE(q.held, 0) || ' ≠ ' || COALESCE(h.held, 0) || ' held by HELD/SOLD reservations' AS detail
      FROM purchase_quota q
      FULL OUTER JOIN (SELECT o.customer_id, r.sku, sum(r.quota_qty) AS held, array_agg(o.order_id ORDER BY o.order_id) AS orders
                       FROM reservations r JOIN orders o ON o.order_id = r.order_id
                       WHERE r.status IN ('HELD', 'SOLD') AND r.quota_qty > 0 GROUP BY o.customer_id, r.sku) h
        ON h.customer_id = q.customer_id AND h.sku = q.sku
      WHERE COALESCE(q.held, 0) <> COALESCE(h.held, 0)`);
      for (const r of quota.rows) {
        violations.push({
          rule: RULES.quotaMatchesHolds,
          orderIds: (r.orders ?? []).slice(0, 20),
          detail: `${r.customer_id}/${r.sku}: ${r.detail}`,
        });
      }

      // Only where events are relayed (an endpoint is configured), and for orders that have events
      // (those that ended before the outbox have none).
      if (opts.eventsGraceMs !== undefined)
        add(
          RULES.terminalEventOut,
          (
            await client.query<{ order_id: string; detail: string }>({
              text: `SELECT o.order_id, o.status || ' since ' || o.updated_at || ': its ' || k.kind || ' event ' ||
                            CASE WHEN e.order_id IS NULL THEN 'is missing'
                                 ELSE 'is not delivered after ' || e.attempts || ' tries' || COALESCE(' (' || e.last_error || ')', '') END AS detail
                       FROM orders o
                       CROSS JOIN LATERAL (SELECT 'order.' || lower(o.status) AS kind) k
                       LEFT JOIN order_events e ON e.order_id = o.order_id AND e.kind = k.kind
                      WHERE o.status = ANY ($1::text[]) AND o.event_seq > 0
                        AND o.updated_at < now() - ($2::bigint * interval '1 millisecond')
                        AND (e.order_id IS NULL OR (e.delivered_at IS NULL AND e.dead_at IS NULL))`,
              values: [TERMINAL_STATUSES, opts.eventsGraceMs],
            })
          ).rows,
        );

      const open = await client.query<{ order_id: string; workflow_id: string; status: string }>({
        text: `SELECT order_id, workflow_id, status FROM orders WHERE NOT (status = ANY ($1::text[])) ORDER BY order_id LIMIT 5000`,
        values: [TERMINAL_STATUSES],
      });

      const counts = await client.query<{ orders: string; skus: string }>(
        'SELECT (SELECT count(*) FROM orders) AS orders, (SELECT count(*) FROM products) AS skus',
      );
      const elsewhere = await client.query<{
        order_id: string;
        status: string;
        reference: string;
        note: string | null;
        at: Date;
      }>(`SELECT o.order_id, o.status, r.reference, r.note, r.decided_at AS at
            FROM order_requests r JOIN orders o ON o.order_id = r.order_id
           WHERE r.kind = 'resolve' AND r.action = 'settled-elsewhere' AND r.outcome = 'accepted'
           ORDER BY r.decided_at, o.order_id`);
      return { open, counts, elsewhere };
    },
    'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY',
  );
  // Temporal's visibility: an open order whose workflow has closed will never be settled by it.
  if (opts.workflows && open.rows.length > 0) {
    const runs = await opts.workflows([...new Set(open.rows.map((r) => r.workflow_id))]);
    const closed = open.rows.filter((r) => (runs.get(r.workflow_id) ?? 'RUNNING') !== 'RUNNING');
    // A run writes the terminal status just before it closes: re-read, so that is not a finding.
    const still = closed.length
      ? await db.query<{ order_id: string; status: string }>({
          text: `SELECT order_id, status FROM orders WHERE order_id = ANY($1::text[]) AND NOT (status = ANY ($2::text[]))`,
          values: [closed.map((r) => r.order_id), TERMINAL_STATUSES],
        })
      : { rows: [] };
    for (const r of still.rows) {
      const workflowId = closed.find((c) => c.order_id === r.order_id)!.workflow_id;
      violations.push({
        rule: RULES.closedRunTerminal,
        orderIds: [r.order_id],
        detail: `${r.status} order, but workflow ${workflowId} is ${runs.get(workflowId)}`,
      });
    }
  }
  return {
    checkedAt: (opts.now ?? new Date()).toISOString(),
    orders: Number(counts.rows[0]!.orders),
    skus: Number(counts.rows[0]!.skus),
    violations,
    exceptions: elsewhere.rows.map((r) => ({
      orderId: r.order_id,
      status: r.status,
      reference: r.reference,
      note: r.note,
      at: r.at.toISOString(),
    })),
  };
}

export function formatReport(r: CheckReport): string[] {
  const lines = [
    `checked ${r.orders} orders and ${r.skus} SKUs at ${r.checkedAt}: ${r.violations.length} violation(s)`,
  ];
  for (const v of r.violations)
    lines.push(`  VIOLATION ${v.rule}: ${v.detail}${v.orderIds.length ? ` [orders: ${v.orderIds.join(', ')}]` : ''}`);
  for (const e of r.exceptions)
    lines.push(
      `  EXCEPTION settled elsewhere: order ${e.orderId} (${e.status}), reference ${e.reference}${e.note ? ` (${e.note})` : ''}, at ${e.at}`,
    );
  return lines;
}
