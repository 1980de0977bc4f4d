/**
 * The command line's one way to the database: every query `client.ts` (and the load it runs)
 * makes is a named function here, over one pool that `openOrderStore` opens with the role the
 * caller asks for — the application's (`order_app`, DATABASE_URL) for what writes, the read-only
 * one (`order_reader`, READER_DATABASE_URL) for what only reads (db/roles.ts).
 */
import type { Pool } from 'pg';
import { recordRefundMade } from '../activities/order-events';
import { decideCancel, recordResolve, settleRequest, type CancelDecision } from '../activities/order-requests';
import { checkAgainstCatalogue } from '../activities/orders';
import { STALL_CAUSES } from '../activities/sweep-classify';
import { checkInvariants, type CheckReport, type WorkflowLookup } from '../db/invariants';
import { createApiKey, listApiKeys, revokeApiKey, type ApiKeyRow } from './api-keys';
import { createPool, withTransaction } from '../db/pool';
import { TERMINAL_STATUSES, type OrderInput, type OrderStatus, type PaymentFlow } from '../domain/order';
import type { AppConfig } from '../ops/config';

/** Which database role a store connects as. */
export type StoreRole = 'app' | 'reader';

/** The last reconciliation run and what it found. */
export interface Reconciliation {
  run: { runId: string; at: string; orders: number; violations: number };
  findings: { rule: string; orderIds: string[]; detail: string }[];
}

/** One thing the sweeper did (migrations/0008_sweeper.sql, 0010_sweeper_stalls.sql). */
export interface SweeperActionRow {
  at: string;
  orderId: string;
  action: 'restart' | 'reset' | 'remove-override' | 'person' | 'alert';
  /** Why (activities/sweep-classify.ts's SweepCause); null on rows written before causes were kept. */
  cause: string | null;
  reason: string;
  runId: string | null;
  newRunId: string | null;
}

/** An order event and its delivery (migrations/0016_order_events.sql). */
export interface OrderEventRow {
  id: string;
  kind: string;
  createdAt: string;
  state: 'delivered' | 'pending' | 'dead-lettered';
  attempts: number;
  lastError: string | null;
  /** When it was delivered, dead-lettered, or is next tried. */
  at: string;
}

/** What `client.ts status` shows of an order whose run Temporal no longer has. */
export interface OrderRowView {
  orderId: string;
  status: OrderStatus;
  reason: string | null;
  /** With NEEDS_ATTENTION: the status it escalated from, and what the escalation is about. */
  attentionFrom?: OrderStatus;
  attentionStep?: string;
  cancel?: { requestId: string; reason: string };
  updatedAt: string;
}

/** An open order the sweeper last found not moving, with what it did about it. */
export interface StalledOrderRow extends SweeperActionRow {
  status: string;
}

/** What `client.ts refund` reads of an order before it refunds. */
export interface RefundableOrder {
  orderId: string;
  status: OrderStatus;
  /** With NEEDS_ATTENTION: the status it escalated from. */
  attentionFrom: OrderStatus | null;
  paymentFlow: PaymentFlow;
  currency: string;
  totalCents: number;
  refundedCents: number;
}

/** A refund after the shipment, as recorded before it is sent (migrations/0019_refunds.sql). */
export interface OrderRefundRow {
  /** The provider's Idempotency-Key: `<orderId>:refund:<key>`. */
  refundKey: string;
  orderId: string;
  sourceKind: 'capture' | 'charge';
  sourceKey: string;
  amountCents: number;
  reason: string | null;
  status: 'pending' | 'succeeded' | 'refused';
  message: string | null;
  createdAt: string;
}

/**
 * Recording a refund before it is sent: `recorded` (new, pending), `exists` (the key was recorded
 * before: the same refund), or `busy` (another refund of the order is pending: its answer comes first).
 */
export type RefundRecording =
  | { outcome: 'recorded'; refund: OrderRefundRow }
  | { outcome: 'exists'; refund: OrderRefundRow }
  | { outcome: 'busy'; refund: OrderRefundRow };

export interface NewProducts {
  skus: string[];
  name: string;
  priceCents: number;
  stock: number;
}

export interface OrderStore {
  /** The first line the catalogue does not price as the order says (unknown SKU, currency, price), or undefined. */
  catalogueProblem(order: OrderInput): Promise<{ field: string; problem: string } | undefined>;
  /** Is there an order row with this ID already? */
  orderExists(orderId: string): Promise<boolean>;
  /** Creates products (stock = initial stock); needs the application role. */
  createProducts(p: NewProducts): Promise<void>;
  /** The last reconciliation run's findings, or undefined when none has run. */
  lastReconciliation(): Promise<Reconciliation | undefined>;
  /** The order row's status, reason and recorded cancel, or undefined when there is no such order. */
  orderRow(orderId: string): Promise<OrderRowView | undefined>;
  /** Decides a cancel against the pivot and records it before anyone is told (activities/order-requests.ts). */
  decideCancel(req: { orderId: string; requestId: string; reason: string }): Promise<CancelDecision>;
  /** Records a resolve as pending, before its Signal; false when the order has no row. */
  recordResolve(req: {
    orderId: string;
    requestId: string;
    action: string;
    note?: string;
    reference?: string;
  }): Promise<{ recorded: boolean }>;
  /** Writes the answer of a request still pending (refused by the run before it was checked). */
  settleRequest(req: {
    orderId: string;
    requestId: string;
    outcome: 'accepted' | 'refused';
    message?: string;
  }): Promise<void>;
  /** An order's events with their delivery, in order; or, with `dead`, every dead-lettered event, oldest first. */
  orderEvents(opts: { orderId?: string; dead?: boolean; limit: number }): Promise<OrderEventRow[]>;
  /** Sends an order's dead-lettered events again (the relay takes them at once); needs the application role. */
  resendEvents(orderId: string): Promise<number>;
  /** The sweeper's latest actions, newest first (`orderId` limits them to one order). */
  sweeperActions(opts: { limit: number; orderId?: string }): Promise<SweeperActionRow[]>;
  /** Open orders whose latest sweeper action (alerts aside) was for a run that had stopped moving, oldest first. */
  stalledOrders(): Promise<StalledOrderRow[]>;
  /** The order as `client.ts refund` needs it, or undefined when there is no such order. */
  refundableOrder(orderId: string): Promise<RefundableOrder | undefined>;
  /** The refund recorded under this provider key, if any. */
  orderRefund(refundKey: string): Promise<OrderRefundRow | undefined>;
  /** The order's refunds whose answer is not known yet (pending), oldest first. */
  pendingRefunds(orderId: string): Promise<OrderRefundRow[]>;
  /**
   * Records a refund as pending before it is sent, under the order row's lock: the key recorded
   * already is that refund; another refund of the order still pending refuses a new one.
   */
  recordRefund(req: {
    refundKey: string;
    orderId: string;
    sourceKind: 'capture' | 'charge';
    sourceKey: string;
    amountCents: number;
    reason?: string;
  }): Promise<RefundRecording>;
  /** The provider made the refund: recorded, with the order's money and its event (activities/order-events.ts). */
  refundMade(req: {
    orderId: string;
    refundKey: string;
    takenCents?: number;
    ledgerRefundedCents?: number;
  }): Promise<{ refundedCents: number; fresh: boolean }>;
  /** The provider refused the refund for good: nothing was refunded; recorded with why. */
  refundRefused(req: { refundKey: string; message: string }): Promise<void>;
  /** Every invariant over the database and the provider's ledger, in one snapshot (db/invariants.ts). */
  checkInvariants(opts: {
    deadlineMs: number;
    workflows?: WorkflowLookup;
    eventsGraceMs?: number;
  }): Promise<CheckReport>;
  /** The IDs of the orders that are not terminal, oldest first. */
  openOrderIds(): Promise<string[]>;
  /** The orders API's keys (orders/api-keys.ts): make one for a storefront (the only copy of its secret), list, revoke. */
  createApiKey(storefront: string): Promise<{ keyId: string; key: string }>;
  listApiKeys(): Promise<ApiKeyRow[]>;
  revokeApiKey(keyId: string): Promise<boolean>;
  /** Ends the pool. */
  close(): Promise<void>;
}

/** The URL of a role from the configuration (the reader falls back to DATABASE_URL there). */
export function roleUrl(
  cfg: Pick<AppConfig, 'databaseUrl' | 'readerDatabaseUrl'>,
  role: StoreRole,
): string | undefined {
  return role === 'app' ? cfg.databaseUrl : cfg.readerDatabaseUrl;
}

/** Opens a store as `role`; undefined when the configuration has no URL for it. */
export function openOrderStore(
  cfg: Pick<AppConfig, 'databaseUrl' | 'readerDatabaseUrl'>,
  role: StoreRole,
  opts: { max?: number } = {},
): OrderStore | undefined {
  const url = roleUrl(cfg, role);
  return url ? orderStore(createPool(url, { max: opts.max ?? 1 })) : undefined;
}

/** The store's queries over a pool the caller already has (tests); close() ends that pool. */
export function orderStore(db: Pool): OrderStore {
  return {
    catalogueProblem: (order) => checkAgainstCatalogue(db, order),

    async orderExists(orderId) {
      const existing = await db.query({ text: 'SELECT 1 FROM orders WHERE order_id = $1', values: [orderId] });
      return (existing.rowCount ?? 0) > 0;
    },

    async createProducts({ skus, name, priceCents, stock }) {
      await db.query({
        text: `INSERT INTO products (sku, name, price_cents, stock, initial_stock)
               SELECT s, $2, $3, $4, $4 FROM unnest($1::text[]) AS s`,
        values: [skus, name, priceCents, stock],
      });
    },

    async lastReconciliation() {
      const run = await db.query<{ run_id: string; started_at: Date; orders: number; violations: number }>(
        'SELECT run_id, started_at, orders, violations FROM reconciliation_runs ORDER BY started_at DESC LIMIT 1',
      );
      const last = run.rows[0];
      if (!last) return undefined;
      const rows = await db.query<{ rule: string; order_ids: string[]; detail: string }>({
        text: 'SELECT rule, order_ids, detail FROM reconciliation_findings WHERE run_id = $1 ORDER BY id',
        values: [last.run_id],
      });
      return {
        run: {
          runId: last.run_id,
          at: last.started_at.toISOString(),
          orders: last.orders,
          violations: last.violations,
        },
        findings: rows.rows.map((r) => ({ rule: r.rule, orderIds: r.order_ids, detail: r.detail })),
      };
    },

    async sweeperActions({ limit, orderId }) {
      const { rows } = await db.query<SweeperActionDbRow>({
        text: `SELECT at, order_id, action, cause, reason, run_id, new_run_id FROM sweeper_actions
                WHERE ($2::text IS NULL OR order_id = $2) ORDER BY at DESC, id DESC LIMIT $1`,
        values: [limit, orderId ?? null],
      });
      return rows.map(actionRow);
    },

    async orderEvents({ orderId, dead, limit }) {
      const { rows } = await db.query<{
        id: string;
        kind: string;
        created_at: Date;
        state: OrderEventRow['state'];
        attempts: number;
        last_error: string | null;
        at: Date;
      }>({
        text: `SELECT order_id || ':' || seq AS id, kind, created_at, attempts, last_error,
                      CASE WHEN delivered_at IS NOT NULL THEN 'delivered' WHEN dead_at IS NOT NULL THEN 'dead-lettered' ELSE 'pending' END AS state,
                      COALESCE(delivered_at, dead_at, next_attempt_at) AS at
                 FROM order_events
                WHERE ($1::text IS NULL OR order_id = $1) AND (NOT $2 OR dead_at IS NOT NULL AND delivered_at IS NULL)
                ORDER BY CASE WHEN $2 THEN dead_at END, order_id, seq LIMIT $3`,
        values: [orderId ?? null, !!dead, limit],
      });
      return rows.map((r) => ({
        id: r.id,
        kind: r.kind,
        createdAt: r.created_at.toISOString(),
        state: r.state,
        attempts: r.attempts,
        lastError: r.last_error,
        at: r.at.toISOString(),
      }));
    },

    async resendEvents(orderId) {
      const res = await db.query({
        text: `UPDATE order_events SET dead_at = NULL, attempts = 0, next_attempt_at = now()
                WHERE order_id = $1 AND dead_at IS NOT NULL AND delivered_at IS NULL`,
        values: [orderId],
      });
      return res.rowCount ?? 0;
    },

    async stalledOrders() {
      const { rows } = await db.query<SweeperActionDbRow & { status: string }>({
        text: `SELECT * FROM (
                 SELECT DISTINCT ON (a.order_id) a.at, a.order_id, a.action, a.cause, a.reason, a.run_id, a.new_run_id, o.status
                   FROM sweeper_actions a JOIN orders o ON o.order_id = a.order_id
                  WHERE a.action <> 'alert' AND o.status <> ALL ($1::text[])
                  ORDER BY a.order_id, a.at DESC, a.id DESC) latest
                WHERE cause = ANY ($2::text[]) ORDER BY at`,
        values: [TERMINAL_STATUSES, STALL_CAUSES],
      });
      return rows.map((r) => ({ ...actionRow(r), status: r.status }));
    },

    async orderRow(orderId) {
      const { rows } = await db.query<{
        status: OrderStatus;
        reason: string | null;
        cancel_request_id: string | null;
        cancel_reason: string | null;
        attention_from: OrderStatus | null;
        attention_step: string | null;
        updated_at: Date;
      }>({
        text: `SELECT status, reason, cancel_request_id, cancel_reason, attention_from, attention_step, updated_at
               FROM orders WHERE order_id = $1`,
        values: [orderId],
      });
      const r = rows[0];
      if (!r) return undefined;
      return {
        orderId,
        status: r.status,
        reason: r.reason,
        ...(r.status === 'NEEDS_ATTENTION' && r.attention_from ? { attentionFrom: r.attention_from } : {}),
        ...(r.status === 'NEEDS_ATTENTION' && r.attention_step ? { attentionStep: r.attention_step } : {}),
        ...(r.cancel_request_id ? { cancel: { requestId: r.cancel_request_id, reason: r.cancel_reason ?? '' } } : {}),
        updatedAt: r.updated_at.toISOString(),
      };
    },

    decideCancel: (req) => decideCancel(db, { ...req, source: 'client' }),
    recordResolve: (req) => recordResolve(db, req),
    settleRequest: (req) => settleRequest(db, req),

    checkInvariants: (opts) => checkInvariants(db, opts),

    async refundableOrder(orderId) {
      const { rows } = await db.query<{
        status: OrderStatus;
        attention_from: OrderStatus | null;
        payment_flow: PaymentFlow;
        currency: string;
        total_cents: string;
        refunded_cents: string;
      }>({
        text: `SELECT status, attention_from, payment_flow, currency, total_cents, refunded_cents FROM orders WHERE order_id = $1`,
        values: [orderId],
      });
      const r = rows[0];
      return (
        r && {
          orderId,
          status: r.status,
          attentionFrom: r.attention_from,
          paymentFlow: r.payment_flow,
          currency: r.currency,
          totalCents: Number(r.total_cents),
          refundedCents: Number(r.refunded_cents),
        }
      );
    },

    async orderRefund(refundKey) {
      const { rows } = await db.query<OrderRefundDbRow>({
        text: `SELECT ${REFUND_COLUMNS} FROM order_refunds WHERE refund_key = $1`,
        values: [refundKey],
      });
      return rows[0] && refundRow(rows[0]);
    },

    async pendingRefunds(orderId) {
      const { rows } = await db.query<OrderRefundDbRow>({
        text: `SELECT ${REFUND_COLUMNS} FROM order_refunds WHERE order_id = $1 AND status = 'pending' ORDER BY created_at, refund_key`,
        values: [orderId],
      });
      return rows.map(refundRow);
    },

    recordRefund: (req) =>
      withTransaction(db, async (c) => {
        // The order row's lock: two refunds of one order are recorded one after the other.
        await c.query({ text: 'SELECT 1 FROM orders WHERE order_id = $1 FOR UPDATE', values: [req.orderId] });
        const same = await c.query<OrderRefundDbRow>({
          text: `SELECT ${REFUND_COLUMNS} FROM order_refunds WHERE refund_key = $1`,
          values: [req.refundKey],
        });
        if (same.rows[0]) return { outcome: 'exists', refund: refundRow(same.rows[0]) };
        const pending = await c.query<OrderRefundDbRow>({
          text: `SELECT ${REFUND_COLUMNS} FROM order_refunds WHERE order_id = $1 AND status = 'pending' ORDER BY created_at LIMIT 1`,
          values: [req.orderId],
        });
        if (pending.rows[0]) return { outcome: 'busy', refund: refundRow(pending.rows[0]) };
        const { rows } = await c.query<OrderRefundDbRow>({
          text: `INSERT INTO order_refunds (refund_key, order_id, source_kind, source_key, amount_cents, reason)
                 VALUES ($1, $2, $3, $4, $5, $6) RETURNING ${REFUND_COLUMNS}`,
          values: [req.refundKey, req.orderId, req.sourceKind, req.sourceKey, req.amountCents, req.reason ?? null],
        });
        return { outcome: 'recorded', refund: refundRow(rows[0]!) };
      }),

    refundMade: (req) => recordRefundMade(db, req),

    async refundRefused({ refundKey, message }) {
      await db.query({
        text: `UPDATE order_refunds SET status = 'refused', message = $2, settled_at = now() WHERE refund_key = $1 AND status = 'pending'`,
        values: [refundKey, message],
      });
    },

    async openOrderIds() {
      const { rows } = await db.query<{ order_id: string }>({
        text: 'SELECT order_id FROM orders WHERE NOT (status = ANY($1)) ORDER BY created_at, order_id',
        values: [TERMINAL_STATUSES],
      });
      return rows.map((r) => r.order_id);
    },

    createApiKey: (storefront) => createApiKey(db, storefront),
    listApiKeys: () => listApiKeys(db),
    revokeApiKey: (keyId) => revokeApiKey(db, keyId),

    close: () => db.end(),
  };
}

interface SweeperActionDbRow {
  at: Date;
  order_id: string;
  action: SweeperActionRow['action'];
  cause: string | null;
  reason: string;
  run_id: string | null;
  new_run_id: string | null;
}

const actionRow = (r: SweeperActionDbRow): SweeperActionRow => ({
  at: r.at.toISOString(),
  orderId: r.order_id,
  action: r.action,
  cause: r.cause,
  reason: r.reason,
  runId: r.run_id,
  newRunId: r.new_run_id,
});

const REFUND_COLUMNS =
  'refund_key, order_id, source_kind, source_key, amount_cents, reason, status, message, created_at';

interface OrderRefundDbRow {
  refund_key: string;
  order_id: string;
  source_kind: OrderRefundRow['sourceKind'];
  source_key: string;
  amount_cents: string;
  reason: string | null;
  status: OrderRefundRow['status'];
  message: string | null;
  created_at: Date;
}

const refundRow = (r: OrderRefundDbRow): OrderRefundRow => ({
  refundKey: r.refund_key,
  orderId: r.order_id,
  sourceKind: r.source_kind,
  sourceKey: r.source_key,
  amountCents: Number(r.amount_cents),
  reason: r.reason,
  status: r.status,
  message: r.message,
  createdAt: r.created_at.toISOString(),
});
