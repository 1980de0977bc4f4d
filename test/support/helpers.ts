import { randomUUID } from 'node:crypto';
import { MockActivityEnvironment } from '@temporalio/testing';
import { DefaultLogger } from '@temporalio/worker';
import type { Pool } from 'pg';
import { inject } from 'vitest';
import type { Client } from '@temporalio/client';
import type { OrderActivities } from '../../activities';
import type { ReserveLogic } from '../../activities/inventory';
import { checkInvariants, temporalLookup } from '../../db/invariants';
import { createPool } from '../../db/pool';
import { authorizeKeyFor, type OrderInput } from '../../domain/order';
import {
  createProviderAdmin,
  createProviderClient,
  type ProviderAdmin,
  type AuthorizationClient,
  type ProviderClient,
} from '../../provider/client';

export const testPool = (): Pool => createPool(inject('databaseUrl'));
export const testProvider = (timeoutMs = 5_000): ProviderClient & AuthorizationClient =>
  createProviderClient({ baseUrl: inject('providerUrl'), apiKey: inject('providerApiKey'), timeoutMs });

export const testAdmin = (): ProviderAdmin =>
  createProviderAdmin({ baseUrl: inject('providerAdminUrl'), adminKey: inject('providerAdminKey') });

/**
 * A worker process's environment for a test: the given server and task queue, this run's database
 * (the worker's roles) and provider, the given workflow bundle, no metrics, unversioned (a deploy
 * has its own test: test/deploy.devserver.test.ts). `extra` adds or overrides variables.
 */
export const workerProcessEnv = (
  address: string,
  taskQueue: string,
  bundle: string,
  extra: NodeJS.ProcessEnv = {},
): NodeJS.ProcessEnv => ({
  TEMPORAL_ADDRESS: address,
  TASK_QUEUE: taskQueue,
  DATABASE_URL: inject('roleUrls').app,
  READER_DATABASE_URL: inject('roleUrls').reader,
  PROVIDER_URL: inject('providerUrl'),
  PROVIDER_API_KEY: inject('providerApiKey'),
  WORKER_METRICS_PORT: '0',
  TEMPORAL_METRICS_ADDRESS: 'off',
  WORKFLOW_BUNDLE: bundle,
  WORKER_VERSIONING: 'off',
  ...extra,
});

/** A short unique suffix, so every test has its own order IDs, SKUs, workflow IDs and task queues. */
export const uid = (): string => randomUUID().slice(0, 8);

/** Inserts a product of the test's own, so tests never share stock. */
export async function createProduct(
  db: Pool,
  opts: { stock: number; priceCents?: number },
): Promise<{ sku: string; priceCents: number }> {
  const sku = `T-${uid().toUpperCase()}`;
  const priceCents = opts.priceCents ?? 1000;
  await db.query({
    text: 'INSERT INTO products (sku, name, price_cents, stock, initial_stock) VALUES ($1, $2, $3, $4, $4)',
    values: [sku, `test product ${sku}`, priceCents, opts.stock],
  });
  return { sku, priceCents };
}

export function makeOrder(
  items: { sku: string; qty: number; unitPriceCents: number }[],
  overrides: Partial<OrderInput> = {},
): OrderInput {
  return {
    orderId: `t-${uid()}`,
    customerId: `cust-${uid()}`,
    currency: 'USD',
    paymentMethod: 'tok_visa',
    items,
    ...overrides,
  };
}

export async function productRow(db: Pool, sku: string): Promise<{ stock: number; version: number }> {
  const { rows } = await db.query<{ stock: number; version: string }>({
    text: 'SELECT stock, version FROM products WHERE sku = $1',
    values: [sku],
  });
  return { stock: rows[0]!.stock, version: Number(rows[0]!.version) };
}

export async function orderRow(
  db: Pool,
  orderId: string,
): Promise<{ status: string; reason: string | null } | undefined> {
  const { rows } = await db.query<{ status: string; reason: string | null }>({
    text: 'SELECT status, reason FROM orders WHERE order_id = $1',
    values: [orderId],
  });
  return rows[0];
}

/** The provider's ledger for one order: its charge rows and refund rows. */
export async function ledger(
  db: Pool,
  orderId: string,
): Promise<{ charges: { status: string; amount: number }[]; refunds: { amount: number }[] }> {
  const charges = await db.query<{ status: string; amount_cents: string }>({
    text: 'SELECT status, amount_cents FROM provider.charges WHERE idempotency_key = $1',
    values: [`${orderId}:charge`],
  });
  const refunds = await db.query<{ amount_cents: string }>({
    text: 'SELECT amount_cents FROM provider.refunds WHERE charge_key = $1',
    values: [`${orderId}:charge`],
  });
  return {
    charges: charges.rows.map((r) => ({ status: r.status, amount: Number(r.amount_cents) })),
    refunds: refunds.rows.map((r) => ({ amount: Number(r.amount_cents) })),
  };
}

/** The provider's ledger of one order's hold: the authorization, its capture and its void. */
export async function holds(pool: Pool, orderId: string) {
  const a = await pool.query<{ status: string; amount_cents: string }>({
    text: 'SELECT status, amount_cents FROM provider.authorizations WHERE idempotency_key = $1',
    values: [authorizeKeyFor(orderId)],
  });
  const c = await pool.query<{ status: string; amount_cents: string; failure_code: string | null }>({
    text: 'SELECT status, amount_cents, failure_code FROM provider.captures WHERE authorization_key = $1',
    values: [authorizeKeyFor(orderId)],
  });
  const v = await pool.query<{ source: string }>({
    text: 'SELECT source FROM provider.voids WHERE authorization_key = $1',
    values: [authorizeKeyFor(orderId)],
  });
  const closed = await pool.query({
    text: 'SELECT 1 FROM provider.closed_authorization_keys WHERE idempotency_key = $1',
    values: [authorizeKeyFor(orderId)],
  });
  return {
    authorizations: a.rows.map((r) => ({ status: r.status, amount: Number(r.amount_cents) })),
    captures: c.rows.map((r) => ({
      status: r.status,
      amount: Number(r.amount_cents),
      ...(r.failure_code ? { failureCode: r.failure_code } : {}),
    })),
    voids: v.rows.map((r) => r.source),
    keyClosed: (closed.rowCount ?? 0) > 0,
  };
}

/** Bare PENDING order rows (customer `customerId`, no items), for tests of the inventory activities. */
export async function pendingOrderRows(db: Pool, ids: string[], customerId = 'c'): Promise<void> {
  for (const id of ids) {
    await db.query({
      text: `INSERT INTO orders (order_id, customer_id, status, currency, total_cents, items, payment_method, workflow_id)
             VALUES ($1, $2, 'PENDING', 'USD', 1, '[]', 'tok_visa', $3)`,
      values: [id, customerId, `order:${id}`],
    });
  }
}

export async function reservations(db: Pool, orderId: string): Promise<{ sku: string; qty: number; status: string }[]> {
  const { rows } = await db.query<{ sku: string; qty: number; status: string }>({
    text: 'SELECT sku, qty, status FROM reservations WHERE order_id = $1 ORDER BY sku',
    values: [orderId],
  });
  return rows;
}

/** An activity environment whose own log lines stay out of the test output. */
export const mockActivityEnv = (): MockActivityEnvironment =>
  new MockActivityEnvironment(undefined, { logger: new DefaultLogger('ERROR', () => undefined) });

/** Runs one activity function in a mock activity context, keeping its return type. */
export function runActivity<A extends unknown[], R>(fn: (...args: A) => Promise<R>, ...args: A): Promise<R> {
  return mockActivityEnv().run<A, R, typeof fn>(fn, ...args);
}

/** Violations the checker finds for these orders, with Temporal's visibility, as readable lines. */
export async function orderViolations(db: Pool, client: Client, orderIds: string[]): Promise<string[]> {
  const report = await checkInvariants(db, { deadlineMs: 86_400_000, workflows: temporalLookup(client) });
  return report.violations
    .filter((v) => v.orderIds.some((o) => orderIds.includes(o)))
    .map((v) => `${v.rule}: ${v.detail} [${v.orderIds.join(', ')}]`);
}

/** Money the customer has given for an order and not got back, in cents. */
export async function moneyKept(db: Pool, orderId: string): Promise<number> {
  // Money taken (the charge, or the captures of the order's holds), less what was refunded of it.
  const { rows } = await db.query<{ kept: string }>({
    text: `WITH caps AS (SELECT c.idempotency_key, c.amount_cents, c.status FROM provider.captures c
                         JOIN provider.authorizations a ON a.idempotency_key = c.authorization_key WHERE a.reference = $1)
           SELECT COALESCE((SELECT sum(amount_cents) FROM provider.charges WHERE idempotency_key = $1 || ':charge' AND status = 'succeeded'), 0)
                + COALESCE((SELECT sum(amount_cents) FROM caps WHERE status = 'succeeded'), 0)
                - COALESCE((SELECT sum(r.amount_cents) FROM provider.refunds r
                            WHERE r.charge_key = $1 || ':charge' OR r.capture_key IN (SELECT idempotency_key FROM caps)), 0) AS kept`,
    values: [orderId],
  });
  return Number(rows[0]!.kept);
}

/**
 * Reservation logic for two racing reservations: each order's first attempt waits, after its read,
 * until both have read, so both write on the same version and exactly one CAS aborts. `onFirst` sees
 * each first attempt (its request and snapshot) before it waits; retries pass straight through.
 */
export function bothReadFirst(
  onFirst: (req: Parameters<ReserveLogic>[0], snapshot: Parameters<ReserveLogic>[1]) => unknown = () => undefined,
): ReserveLogic {
  let arrived = 0;
  let release!: () => void;
  const bothRead = new Promise<void>((r) => (release = r));
  const seen = new Set<string>();
  return async (req, snapshot) => {
    if (seen.has(req.orderId)) return;
    seen.add(req.orderId);
    await onFirst(req, snapshot);
    if (++arrived === 2) release();
    await bothRead;
  };
}

/**
 * createOrder as an older build ran it: the row it writes is of the charge era (charged at step 3,
 * refunded as its compensation), so a test can run this build's saga on such an order, as the
 * sweeper does when it restarts one from its row.
 */
export function chargeEraCreate(db: Pool, create: OrderActivities['createOrder']): OrderActivities['createOrder'] {
  return async (input) => {
    const r = await create(input);
    if (r.outcome !== 'created') return r;
    await db.query({
      text: `UPDATE orders SET payment_flow = 'charge' WHERE order_id = $1 AND status = 'PENDING'`,
      values: [input.orderId],
    });
    return { ...r, paymentFlow: 'charge' };
  };
}

/** The activities, with createOrder as the older build ran it (chargeEraCreate): every new order is of the charge era. */
export function asChargeEra<A extends OrderActivities>(db: Pool, activities: A): A {
  return { ...activities, createOrder: chargeEraCreate(db, activities.createOrder) };
}
