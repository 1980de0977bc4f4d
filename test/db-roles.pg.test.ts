/**
 * The database roles (db/roles.ts), tried as each process would misuse them: every write outside a
 * role's own tables is refused by Postgres itself (insufficient_privilege), and the row is unchanged.
 * Connections use the role URLs that npm start hands to the worker, the provider and the checks.
 */
import { Client } from 'pg';
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { ensureLoginRole, type RoleKind } from '../db/roles';
import { createProduct, makeOrder, testPool, testProvider, uid } from './support/helpers';

let db: Pool;
let sku: string;
let chargeKey: string;
const clients: Client[] = [];

async function as(kind: RoleKind): Promise<Client> {
  const c = new Client({ connectionString: inject('roleUrls')[kind] });
  await c.connect();
  clients.push(c);
  return c;
}

/** Runs the statement as the role; resolves to Postgres's SQLSTATE (or 'ok' when it ran). */
async function attempt(c: Client, sql: string, values: unknown[] = []): Promise<string> {
  try {
    await c.query('BEGIN');
    await c.query({ text: sql, values });
    return 'ok';
  } catch (err) {
    return (err as { code?: string }).code ?? String(err);
  } finally {
    await c.query('ROLLBACK').catch(() => undefined);
  }
}

const REFUSED = '42501'; // insufficient_privilege

beforeAll(async () => {
  db = testPool();
  sku = (await createProduct(db, { stock: 10, priceCents: 500 })).sku;
  const order = makeOrder([{ sku, qty: 1, unitPriceCents: 500 }]);
  chargeKey = `${order.orderId}:charge`;
  const r = await testProvider().charge(chargeKey, {
    amountCents: 500,
    currency: 'USD',
    paymentMethod: 'tok_visa',
    reference: order.orderId,
  });
  expect(r.charge.status).toBe('succeeded');
});
afterAll(async () => {
  for (const c of clients) await c.end().catch(() => undefined);
  await db.end();
});

async function unchanged(): Promise<void> {
  const p = await db.query({ text: 'SELECT stock, name FROM products WHERE sku = $1', values: [sku] });
  expect(p.rows[0]).toEqual({ stock: 10, name: `test product ${sku}` });
  const c = await db.query({
    text: 'SELECT amount_cents, status FROM provider.charges WHERE idempotency_key = $1',
    values: [chargeKey],
  });
  expect(c.rows[0]).toEqual({ amount_cents: '500', status: 'succeeded' });
}

describe('database roles', () => {
  it("the app's role works on the app's tables but cannot touch the provider's ledger or the schema", async () => {
    const app = await as('app');
    expect(await attempt(app, 'UPDATE products SET name = name WHERE sku = $1', [sku])).toBe('ok');
    const refused = {
      'rewrite a charge': await attempt(
        app,
        `UPDATE provider.charges SET amount_cents = 1 WHERE idempotency_key = $1`,
        [chargeKey],
      ),
      'delete a charge': await attempt(app, `DELETE FROM provider.charges WHERE idempotency_key = $1`, [chargeKey]),
      'plant a refund': await attempt(
        app,
        `INSERT INTO provider.refunds (idempotency_key, request_hash, charge_key, amount_cents, status) VALUES ($1, 'x', $2, 500, 'succeeded')`,
        [`${uid()}:refund`, chargeKey],
      ),
      'plant an api key': await attempt(app, `INSERT INTO provider.api_keys (key_hash, label) VALUES ('x', 'planted')`),
      'read the ledger': await attempt(app, `SELECT * FROM provider.charges`),
      'legalise a transition': await attempt(
        app,
        `INSERT INTO order_transitions SELECT to_status, from_status FROM order_transitions LIMIT 1`,
      ),
      'rewrite the migration record': await attempt(app, `DELETE FROM schema_migrations`),
      'drop the status trigger': await attempt(app, `ALTER TABLE orders DISABLE TRIGGER ALL`),
      'create a table': await attempt(app, `CREATE TABLE planted (x int)`),
      'truncate the stock': await attempt(app, `TRUNCATE products CASCADE`),
    };
    expect(refused).toEqual(Object.fromEntries(Object.keys(refused).map((k) => [k, REFUSED])));
    await unchanged();
  });

  it("the provider's role works on its ledger but cannot touch orders or stock", async () => {
    const provider = await as('provider');
    // Names are qualified: unqualified they would not even resolve (no USAGE on the app's schema).
    expect(await attempt(provider, 'SELECT status FROM provider.charges WHERE idempotency_key = $1', [chargeKey])).toBe(
      'ok',
    );
    const refused = {
      'rewrite stock': await attempt(provider, `UPDATE public.products SET stock = 0 WHERE sku = $1`, [sku]),
      'plant a product': await attempt(
        provider,
        `INSERT INTO public.products (sku, name, price_cents, stock, initial_stock) VALUES ($1, 'x', 1, 1, 1)`,
        [`P-${uid()}`],
      ),
      'rewrite orders': await attempt(provider, `UPDATE public.orders SET status = 'COMPLETED'`),
      'delete reservations': await attempt(provider, `DELETE FROM public.reservations`),
      'read orders': await attempt(provider, `SELECT * FROM public.orders`),
      'rewrite its migration record': await attempt(provider, `DELETE FROM provider.schema_migrations`),
      'create a table in its schema': await attempt(provider, `CREATE TABLE provider.planted (x int)`),
      'drop its ledger': await attempt(provider, `DROP TABLE provider.refunds`),
    };
    expect(refused).toEqual(Object.fromEntries(Object.keys(refused).map((k) => [k, REFUSED])));
    await unchanged();
  });

  it('the read-only role reads both schemas and writes neither, even with read-only transactions turned off', async () => {
    const reader = await as('reader');
    expect(
      await attempt(reader, `SELECT count(*) FROM orders o LEFT JOIN provider.charges c ON c.reference = o.order_id`),
    ).toBe('ok');
    expect(await attempt(reader, `UPDATE products SET stock = 0 WHERE sku = $1`, [sku])).toBe('25006'); // read_only_sql_transaction
    await reader.query('SET default_transaction_read_only = off');
    const refused = {
      'rewrite stock': await attempt(reader, `UPDATE products SET stock = 0 WHERE sku = $1`, [sku]),
      'rewrite a charge': await attempt(
        reader,
        `UPDATE provider.charges SET status = 'failed' WHERE idempotency_key = $1`,
        [chargeKey],
      ),
      'record a finding': await attempt(
        reader,
        `INSERT INTO reconciliation_runs (run_id, orders, violations) VALUES ($1, 0, 0)`,
        [uid()],
      ),
      'read the hashes of the API keys': await attempt(reader, `SELECT key_hash FROM provider.api_keys`),
      "read the hashes of the orders API's keys": await attempt(reader, `SELECT secret_hash FROM api_keys`),
      'create a table': await attempt(reader, `CREATE TABLE planted (x int)`),
    };
    expect(refused).toEqual(Object.fromEntries(Object.keys(refused).map((k) => [k, REFUSED])));
    await unchanged();
  });

  it('a role of one of these names that is not ours is refused, not taken over', async () => {
    const name = `someone_${uid()}`;
    await db.query(`CREATE ROLE ${name} NOLOGIN`);
    try {
      const c = await db.connect();
      try {
        await expect(ensureLoginRole(c, name, 'a-password-of-16-chars')).rejects.toThrow(
          `role ${name} already exists on this server and was not created by order-saga`,
        );
      } finally {
        c.release();
      }
      const { rows } = await db.query({ text: 'SELECT rolcanlogin FROM pg_roles WHERE rolname = $1', values: [name] });
      expect(rows).toEqual([{ rolcanlogin: false }]);
    } finally {
      await db.query(`DROP ROLE ${name}`);
    }
  });

  it('no role can log in as anything more: none is superuser, creates roles or databases, or bypasses row security', async () => {
    const { rows } = await db.query(
      `SELECT rolname, rolsuper, rolcreaterole, rolcreatedb, rolbypassrls, rolcanlogin FROM pg_roles WHERE rolname LIKE 'order\\_%' ORDER BY rolname`,
    );
    expect(rows).toEqual(
      ['order_app', 'order_provider', 'order_reader'].map((rolname) => ({
        rolname,
        rolsuper: false,
        rolcreaterole: false,
        rolcreatedb: false,
        rolbypassrls: false,
        rolcanlogin: true,
      })),
    );
  });
});
