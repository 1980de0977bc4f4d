import { log } from '@temporalio/activity';
import type { Pool } from 'pg';
import { ErrorTypes } from '../domain/failures';
import {
  isTerminal,
  orderTotalCents,
  parseOrder,
  workflowIdFor,
  type OrderInput,
  type OrderStatus,
  type PaymentFlow,
} from '../domain/order';
import { businessFailure } from './errors';
import { EVENT_DATA_SQL } from './order-events';
import {
  assertNotSuperseded,
  callerRunId,
  notSuperseded,
  readOrder,
  recordedCancel,
  resumeFromAttention,
  takeOwnership,
  transition,
  type OrderLockRow,
  type PendingResolve,
  type RecordedCancel,
} from './order-lock';

export interface ProductRow {
  sku: string;
  name: string;
  price_cents: string;
  currency: string;
  stock: number;
  initial_stock: number;
  version: string;
}

/**
 * Checks an order against the catalogue: every SKU exists, is priced in the order's currency, and
 * every unit price is the catalogue's.
 * Returns the field and problem of the first mismatch, or undefined. Shared by the client (before it
 * starts a workflow) and by createOrder (the workflow boundary).
 */
export async function checkAgainstCatalogue(
  db: Pool,
  order: OrderInput,
): Promise<{ field: string; problem: string } | undefined> {
  const { rows } = await db.query<Pick<ProductRow, 'sku' | 'price_cents' | 'currency'>>({
    text: 'SELECT sku, price_cents, currency FROM products WHERE sku = ANY($1::text[])',
    values: [order.items.map((i) => i.sku)],
  });
  const bySku = new Map(rows.map((r) => [r.sku, r]));
  for (const [i, item] of order.items.entries()) {
    const row = bySku.get(item.sku);
    if (row === undefined) return { field: `items[${i}].sku`, problem: `unknown SKU ${item.sku}` };
    if (row.currency !== order.currency) {
      return {
        field: 'currency',
        problem: `the catalogue prices ${item.sku} in ${row.currency}, not ${order.currency}`,
      };
    }
    const price = Number(row.price_cents);
    if (price !== item.unitPriceCents) {
      return {
        field: `items[${i}].unitPriceCents`,
        problem: `catalogue price of ${item.sku} is ${price}, not ${item.unitPriceCents}`,
      };
    }
  }
  return undefined;
}

/** Does the stored order say the same as this input? (A second start with other contents must not act.) */
function sameOrder(row: OrderLockRow, order: OrderInput): boolean {
  const items = (o: { sku: string; qty: number; unitPriceCents: number }[]): string =>
    JSON.stringify([...o].sort((a, b) => (a.sku < b.sku ? -1 : 1)).map((i) => [i.sku, i.qty, i.unitPriceCents]));
  return (
    row.customer_id === order.customerId &&
    row.currency === order.currency &&
    row.payment_method === order.paymentMethod &&
    Number(row.total_cents) === orderTotalCents(order) &&
    items(row.items) === items(order.items)
  );
}

/** What createOrder found: a new row, an open order this run now owns, or an order already settled. */
export type CreateOrderResult =
  | {
      outcome: 'created' | 'owned';
      status: OrderStatus;
      /** How the order's money moves (its row's era): a charge-era order taken over keeps the charge path. */
      paymentFlow: PaymentFlow;
      attentionFrom?: OrderStatus;
      /** What the escalation the row stands in is about, when it said. */
      attentionStep?: string;
      cancel?: RecordedCancel;
      /** A resolve recorded for that escalation and not yet applied: this run applies it. */
      resolve?: PendingResolve;
    }
  | { outcome: 'settled'; status: OrderStatus };

/**
 * The order whose saga closed before it wrote its row, marked never placed: its row written FAILED
 * with `reason`, and its order.failed event, in one statement, unless a row exists already. A
 * createOrder still in flight for the closed run (or a later run's) then finds the order settled and
 * changes nothing, and the sweeper leaves a settled order alone. Returns whether this wrote it.
 */
export async function recordNeverPlaced(db: Pool, input: OrderInput, reason: string): Promise<boolean> {
  const order = parseOrder(input);
  const { rows } = await db.query<{ n: number }>({
    text: `WITH o AS (
             INSERT INTO orders (order_id, customer_id, status, reason, currency, total_cents, items, payment_method, workflow_id, payment_flow, event_seq)
             VALUES ($1, $2, 'FAILED', $3, $4, $5, $6, $7, $8, 'authorization', 1) ON CONFLICT (order_id) DO NOTHING
             RETURNING order_id, event_seq, status, reason, customer_id, total_cents, currency, attention_step
           ), e AS (
             INSERT INTO order_events (order_id, seq, kind, data)
             SELECT o.order_id, o.event_seq, 'order.failed', ${EVENT_DATA_SQL('o')} FROM o
           )
           SELECT count(*)::int AS n FROM o`,
    values: [
      order.orderId,
      order.customerId,
      reason,
      order.currency,
      orderTotalCents(order),
      JSON.stringify(order.items),
      order.paymentMethod,
      workflowIdFor(order.orderId),
    ],
  });
  return rows[0]!.n === 1;
}

export function orderActivities({ db }: { db: Pool }) {
  const activities = {
    /**
     * Writes the order row PENDING (the semantic lock) and makes the calling run its owner. An order
     * that exists already is not written again: if it is settled (terminal) the run must end without
     * effects; if it is open with the same contents (a retry, a Reset, a start after the old run was
     * terminated) the run takes ownership; with other contents it is refused.
     */
    async createOrder(input: OrderInput): Promise<CreateOrderResult> {
      const order = parseOrder(input);
      const existing = await readOrder(db, order.orderId);
      if (!existing) {
        const problem = await checkAgainstCatalogue(db, order);
        if (problem) throw businessFailure(ErrorTypes.InvalidOrder, `${problem.field}: ${problem.problem}`, problem);
        const res = await db.query({
          // An order of this build is authorized, shipped, then captured (the row's era, migrations/0018).
          text: `INSERT INTO orders (order_id, customer_id, status, currency, total_cents, items, payment_method, workflow_id, owner_run_id, payment_flow)
                 VALUES ($1, $2, 'PENDING', $3, $4, $5, $6, $7, $8, 'authorization') ON CONFLICT (order_id) DO NOTHING`,
          values: [
            order.orderId,
            order.customerId,
            order.currency,
            orderTotalCents(order),
            JSON.stringify(order.items),
            order.paymentMethod,
            workflowIdFor(order.orderId),
            callerRunId() ?? null,
          ],
        });
        if (res.rowCount === 1) {
          log.info('order row written', { orderId: order.orderId });
          return { outcome: 'created', status: 'PENDING', paymentFlow: 'authorization' };
        }
        return activities.createOrder(input); // another writer inserted it meanwhile: decide on its row
      }
      if (isTerminal(existing.status)) {
        log.warn('order already settled; this run changes nothing', {
          orderId: order.orderId,
          status: existing.status,
        });
        return { outcome: 'settled', status: existing.status };
      }
      if (!sameOrder(existing, order)) {
        throw businessFailure(
          ErrorTypes.OrderMismatch,
          `order ${order.orderId} exists (${existing.status}) with other contents; this run changed nothing`,
          {
            orderId: order.orderId,
            status: existing.status,
          },
        );
      }
      const runId = callerRunId() ?? null;
      assertNotSuperseded(order.orderId, existing, runId, 'take the order over');
      const claimed = await db.query({
        text: `UPDATE orders SET ${takeOwnership('$2')}, updated_at = now()
               WHERE order_id = $1 AND status = $3 AND ${notSuperseded('$2')}`,
        values: [order.orderId, runId, existing.status],
      });
      if (claimed.rowCount !== 1) return activities.createOrder(input); // it moved meanwhile: decide again
      log.warn('open order taken over by this run', {
        orderId: order.orderId,
        status: existing.status,
        previousOwner: existing.owner_run_id,
      });
      const cancel = recordedCancel(existing);
      return {
        outcome: 'owned',
        status: existing.status,
        paymentFlow: existing.payment_flow,
        attentionFrom: existing.attention_from ?? undefined,
        ...(existing.status === 'NEEDS_ATTENTION' && existing.attention_step
          ? { attentionStep: existing.attention_step }
          : {}),
        ...(cancel ? { cancel } : {}),
        ...(existing.pending_resolve ? { resolve: existing.pending_resolve } : {}),
      };
    },

    /**
     * Writes the saga's status (and reason) onto the order row: a guarded transition, refused if
     * illegal. Returns the row's real status afterwards (a write the guard made a no-op returns where
     * the row stands). `resume`: leave NEEDS_ATTENTION for the status the row escalated from. `step`:
     * what an escalation is about (the compensation that failed, the shipment, the confirmation).
     */
    async setOrderStatus(req: {
      orderId: string;
      status: OrderStatus;
      reason?: string;
      resume?: boolean;
      /** With `resume`: leave NEEDS_ATTENTION backward, for COMPENSATING (the charge failed). */
      backward?: boolean;
      step?: string;
    }): Promise<OrderStatus> {
      if (req.resume) return resumeFromAttention(db, req.orderId, req.reason, req.backward ?? false);
      const { status } = await transition(db, req.orderId, req.status, {
        reason: req.reason,
        ...(req.step ? { step: req.step } : {}),
      });
      if (status === 'NEEDS_ATTENTION') {
        log.error('ALERT order needs attention', { orderId: req.orderId, reason: req.reason });
      }
      return status;
    },
  };
  return activities;
}
