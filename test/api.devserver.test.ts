/**
 * The orders API through real HTTP against the real stack: the API as its own process (api/server.ts),
 * a Temporal dev server, a worker, Postgres and the provider process. Every endpoint and every
 * refusal; the same Idempotency-Key replayed, reused with another body and in flight; two storefronts
 * racing one key; a cancel before and after the pivot; the money on the order's row; pages of a
 * list; keys made and revoked with client.ts; the rate limit and CORS; and a seeded fuzz of malformed
 * requests, none of which writes a row or starts a workflow.
 */
import type { ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { WorkflowNotFoundError } from '@temporalio/client';
import { MockActivityEnvironment } from '@temporalio/testing';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { orderActivities, recordNeverPlaced } from '../activities/orders';
import { MAX_BODY_BYTES, REPLAY_HEADER } from '../api/app';
import { CHECKS_BY_HAND } from '../api/openapi';
import { apiStore } from '../api/store';
import { parseOrder, workflowIdFor, type OrderInput } from '../domain/order';
import { createApiKey } from '../orders/api-keys';
import { startTsProcess, stopProcess } from '../platform/processes';
import { orderSaga, sweeperWorkflow } from '../workflows';
import { admin, cfg, cli, db, env, orderFile, useE2eEnv } from './support/e2e-env';
import { createProduct, makeOrder, productRow, uid } from './support/helpers';
import { MALFORMED_ORDERS } from './support/malformed-orders';
import { request, rng } from './support/raw-http';

useE2eEnv();

interface Api {
  url: string;
  port: number;
  child: ChildProcess;
}
let api: Api;
/** Storefront A's name and key, and storefront B's key. */
const storefrontA = `shop-a-${uid()}`;
let keyA: string;
let keyB: string;

/** Starts api/server.ts as its own process on a free port, with the test's Temporal, task queue and app role. */
async function startApi(extra: NodeJS.ProcessEnv = {}): Promise<Api> {
  const { child, match } = await startTsProcess(
    'api/server.ts',
    {
      ...process.env,
      TEMPORAL_ADDRESS: env.address,
      TEMPORAL_NAMESPACE: 'default',
      TASK_QUEUE: cfg.taskQueue,
      DATABASE_URL: inject('roleUrls').app,
      API_PORT: '0',
      API_ANSWER_TIMEOUT_MS: '20000',
      ...extra,
    },
    /"event":"listening","url":"(http:\/\/127\.0\.0\.1:(\d+))"/,
  );
  return { url: match[1]!, port: Number(match[2]), child };
}

interface Answer {
  status: number;
  headers: Headers;
  body: Record<string, unknown>;
  text: string;
}

async function call(
  path: string,
  opts: { method?: string; key?: string; idem?: string; body?: unknown; headers?: Record<string, string> } = {},
  base = api,
): Promise<Answer> {
  const headers: Record<string, string> = { ...opts.headers };
  if (opts.key) headers.authorization = `Bearer ${opts.key}`;
  if (opts.idem) headers['idempotency-key'] = opts.idem;
  if (opts.body !== undefined) headers['content-type'] ??= 'application/json';
  const res = await fetch(`${base.url}${path}`, {
    method: opts.method ?? (opts.body === undefined ? 'GET' : 'POST'),
    headers,
    ...(opts.body === undefined ? {} : { body: typeof opts.body === 'string' ? opts.body : JSON.stringify(opts.body) }),
  });
  const text = await res.text();
  return {
    status: res.status,
    headers: res.headers,
    body: text ? (JSON.parse(text) as Record<string, unknown>) : {},
    text,
  };
}

const placeOrder = (order: unknown, idem: string, key = keyA) => call('/v1/orders', { key, idem, body: order });

/** Reads the order until `done` says so (or 60 s pass). */
async function follow(
  orderId: string,
  done: (b: Record<string, unknown>) => boolean,
): Promise<Record<string, unknown>> {
  const until = Date.now() + 60_000;
  for (;;) {
    const r = await call(`/v1/orders/${orderId}`, { key: keyA });
    expect(r.status).toBe(200);
    if (done(r.body) || Date.now() > until) return r.body;
    await new Promise((res) => setTimeout(res, 200));
  }
}

async function workflowExists(orderId: string): Promise<boolean> {
  try {
    await env.client.workflow.getHandle(`order:${orderId}`).describe();
    return true;
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return false;
    throw err;
  }
}

/** Storefront A's claim of `idem` for `order`, as a request's process left it: its lease over in `lease` (an interval). */
async function claimLeft(order: OrderInput, idem: string, lease: string): Promise<void> {
  const requestHash = createHash('sha256')
    .update(JSON.stringify(parseOrder(order)))
    .digest('hex');
  await db.query({
    text: `INSERT INTO api_placements (storefront, idempotency_key, request_hash, order_id, lease_until)
           VALUES ($1, $2, $3, $4, now() + $5::interval)`,
    values: [storefrontA, idem, requestHash, order.orderId, lease],
  });
}

async function rowsFor(orderId: string): Promise<{ orders: number; placements: number }> {
  const { rows } = await db.query<{ orders: number; placements: number }>({
    text: `SELECT (SELECT count(*)::int FROM orders WHERE order_id = $1) AS orders,
                  (SELECT count(*)::int FROM api_placements WHERE order_id = $1) AS placements`,
    values: [orderId],
  });
  return rows[0]!;
}

beforeAll(async () => {
  keyA = (await createApiKey(db, storefrontA)).key;
  keyB = (await createApiKey(db, `shop-b-${uid()}`)).key;
  api = await startApi();
});

afterAll(async () => {
  if (api) await stopProcess(api.child);
});

describe('health, the document and the keys', () => {
  it('answers /healthz and /readyz without a key, and serves the OpenAPI 3.1 document generated from the schema', async () => {
    expect(await call('/healthz')).toMatchObject({ status: 200, body: { ok: true } });
    expect(await call('/readyz')).toMatchObject({ status: 200, body: { ok: true } });
    const doc = await call('/v1/openapi.json');
    expect(doc.status).toBe(200);
    expect(doc.body.openapi).toBe('3.1.0');
    const order = (doc.body.components as { schemas: { Order: Record<string, unknown> } }).schemas.Order;
    expect(order.required).toEqual(['orderId', 'customerId', 'currency', 'paymentMethod', 'items']);
    expect(order.additionalProperties).toBe(false);
    const props = order.properties as Record<string, Record<string, unknown>>;
    expect(props.currency!.enum).toEqual(['USD', 'EUR']);
    expect(JSON.stringify(props.orderId)).toContain('^[A-Za-z0-9][A-Za-z0-9_.-]*$');
    for (const check of CHECKS_BY_HAND) expect(order.description).toContain(check);
  });

  it('refuses a missing, malformed, unknown or revoked key with a 401 that says nothing more', async () => {
    const made = await cli(['api-keys', 'create', `shop-c-${uid()}`, '--json']);
    expect(made.code, made.stderr).toBe(0);
    const { key, keyId } = JSON.parse(made.stdout) as { key: string; keyId: string };
    expect((await call('/v1/orders', { key })).status).toBe(200);
    const { rows } = await db.query<{ secret_hash: string }>({
      text: 'SELECT secret_hash FROM api_keys WHERE key_id = $1',
      values: [keyId],
    });
    const secret = key.slice(`osk_${keyId}_`.length); // base64url: the secret itself may hold '_'
    expect(secret).toHaveLength(43);
    expect(rows[0]!.secret_hash).not.toContain(secret); // a hash, not the secret
    const revoked = await cli(['api-keys', 'revoke', keyId]);
    expect(revoked.code, revoked.stderr).toBe(0);
    const wrong = `${keyA.slice(0, -4)}AAAA`;
    const tries: Record<string, string>[] = [
      {},
      { authorization: 'Basic x' },
      { authorization: `Bearer ${wrong}` },
      { authorization: `Bearer ${key}` },
      { authorization: 'Bearer osk_nope' },
    ];
    for (const headers of tries) {
      for (const path of ['/v1/orders', '/v1/orders/x', '/v1/orders/x/cancel']) {
        const r = await call(path, { headers, method: path.endsWith('cancel') ? 'POST' : 'GET' });
        expect(r.status, `${path} ${JSON.stringify(headers)}`).toBe(401);
        expect(r.body).toEqual({ error: 'unauthenticated', message: 'unauthenticated' });
      }
    }
  });
});

describe('POST /v1/orders', () => {
  it('places an order (202 with its URL), replays the first answer for the same key and body, and follows it to COMPLETED with the money on the row', async () => {
    const { sku, priceCents } = await createProduct(db, { stock: 5, priceCents: 1250 });
    const order = makeOrder([{ sku, qty: 2, unitPriceCents: priceCents }]);
    const idem = `k-${uid()}`;
    const first = await placeOrder(order, idem);
    expect(first.status, JSON.stringify(first.body)).toBe(202);
    expect(first.body).toEqual({ orderId: order.orderId, status: 'RESERVED', url: `/v1/orders/${order.orderId}` });
    expect(first.headers.get('location')).toBe(`/v1/orders/${order.orderId}`);
    expect(first.headers.get(REPLAY_HEADER.toLowerCase())).toBeNull();
    const { runId } = await env.client.workflow.getHandle(`order:${order.orderId}`).describe();

    // The same body with its keys in another order and other spacing is the same request, answered as
    // it was even after the catalogue changed.
    await db.query({ text: 'UPDATE products SET price_cents = price_cents + 1 WHERE sku = $1', values: [sku] });
    const again = await call('/v1/orders', {
      key: keyA,
      idem,
      body: `{ "items": ${JSON.stringify(order.items)}, "paymentMethod": "tok_visa", "currency": "USD", "customerId": "${order.customerId}", "orderId": "${order.orderId}" }`,
    });
    expect(again.status).toBe(202);
    expect(again.text).toBe(first.text); // the first answer as it was sent
    expect(again.headers.get(REPLAY_HEADER.toLowerCase())).toBe('true');
    expect((await env.client.workflow.getHandle(`order:${order.orderId}`).describe()).runId).toBe(runId);

    const done = await follow(order.orderId, (b) => b.status === 'COMPLETED');
    expect(done).toMatchObject({
      orderId: order.orderId,
      customerId: order.customerId,
      status: 'COMPLETED',
      currency: 'USD',
      items: order.items,
      totalCents: 2500,
      paymentFlow: 'authorization',
      authorizedCents: 2500,
      authorization: 'captured',
      chargedCents: 2500,
      refundedCents: 0,
      cancel: null,
      nextStep: null,
    });
    expect(await rowsFor(order.orderId)).toEqual({ orders: 1, placements: 1 });
  });

  it('refuses the same key with another body (422), the same order under another key (409) and an order placed outside the API (409)', async () => {
    const { sku, priceCents } = await createProduct(db, { stock: 5 });
    const order = makeOrder([{ sku, qty: 1, unitPriceCents: priceCents }]);
    const idem = `k-${uid()}`;
    expect((await placeOrder(order, idem)).status).toBe(202);
    const other = await placeOrder({ ...order, items: [{ sku, qty: 2, unitPriceCents: priceCents }] }, idem);
    expect(other).toMatchObject({ status: 422, body: { error: 'idempotency_key_reused', field: 'Idempotency-Key' } });
    const otherKey = await placeOrder(order, `k-${uid()}`);
    expect(otherKey).toMatchObject({ status: 409, body: { error: 'order_exists', field: 'orderId' } });

    // Placed by client.ts: not the API's, and refused without a write.
    const outside = makeOrder([{ sku, qty: 1, unitPriceCents: priceCents }]);
    const placed = await cli(['place', '--file', orderFile(outside), '--no-wait']);
    expect(placed.code, placed.stderr).toBe(0);
    expect(await placeOrder(outside, `k-${uid()}`)).toMatchObject({
      status: 409,
      body: { error: 'order_exists', field: 'orderId' },
    });
    expect(await rowsFor(outside.orderId)).toEqual({ orders: 1, placements: 0 });
  });

  it("answers the saga's refusals with a machine-readable error: out of stock (409), over a purchase limit (422), and replays them", async () => {
    const scarce = await createProduct(db, { stock: 1 });
    const order = makeOrder([{ sku: scarce.sku, qty: 2, unitPriceCents: scarce.priceCents }]);
    const idem = `k-${uid()}`;
    const refused = await placeOrder(order, idem);
    expect(refused.status, JSON.stringify(refused.body)).toBe(409);
    expect(refused.body).toMatchObject({ error: 'out_of_stock', orderId: order.orderId });
    expect(String(refused.body.message)).toContain(scarce.sku);
    const replay = await placeOrder(order, idem);
    expect(replay).toMatchObject({ status: 409, body: refused.body });
    expect(replay.headers.get(REPLAY_HEADER.toLowerCase())).toBe('true');

    const limited = await createProduct(db, { stock: 10 });
    await db.query({ text: 'UPDATE products SET max_per_customer = 1 WHERE sku = $1', values: [limited.sku] });
    const over = makeOrder([{ sku: limited.sku, qty: 2, unitPriceCents: limited.priceCents }]);
    const tooMany = await placeOrder(over, `k-${uid()}`);
    expect(tooMany.status, JSON.stringify(tooMany.body)).toBe(422);
    expect(tooMany.body).toMatchObject({ error: 'purchase_limit_exceeded', orderId: over.orderId });
    expect(await follow(over.orderId, (b) => b.status === 'FAILED')).toMatchObject({
      chargedCents: 0,
      refundedCents: 0,
    });
  });

  it('answers 409 to the same key while the first request is in flight, and carries on a placement whose process died', async () => {
    const { sku, priceCents } = await createProduct(db, { stock: 5 });
    const order = makeOrder([{ sku, qty: 1, unitPriceCents: priceCents }]);
    const idem = `k-${uid()}`;
    // The first request's claim, as its process left it: in flight, its lease running.
    await claimLeft(order, idem, '1 hour');
    expect(await placeOrder(order, idem)).toMatchObject({
      status: 409,
      body: { error: 'request_in_flight', field: 'Idempotency-Key' },
    });
    expect(await workflowExists(order.orderId)).toBe(false);
    // Its process died: the lease runs out, and the same request again places the order.
    await db.query({
      text: `UPDATE api_placements SET lease_until = now() - interval '1 second' WHERE storefront = $1 AND idempotency_key = $2`,
      values: [storefrontA, idem],
    });
    const carried = await placeOrder(order, idem);
    expect(carried.status, JSON.stringify(carried.body)).toBe(202);
    expect((await placeOrder(order, idem)).headers.get(REPLAY_HEADER.toLowerCase())).toBe('true');
  });

  it('a saga terminated before it answered refused nothing: an order with its row is accepted, and the sweeper carries it on', async () => {
    const { sku, priceCents } = await createProduct(db, { stock: 5 });
    const order = makeOrder([{ sku, qty: 1, unitPriceCents: priceCents }]);
    const idem = `k-${uid()}`;
    // The product's row locked, so the saga waits in its reservation: after its row, before its answer.
    const lock = await db.connect();
    let first: Promise<Answer> | undefined;
    try {
      await lock.query('BEGIN');
      await lock.query({ text: 'SELECT 1 FROM products WHERE sku = $1 FOR UPDATE', values: [sku] });
      first = placeOrder(order, idem);
      const until = Date.now() + 20_000;
      while ((await rowsFor(order.orderId)).orders === 0 && Date.now() < until) await sleep(100);
      expect((await rowsFor(order.orderId)).orders).toBe(1);
      await env.client.workflow.getHandle(workflowIdFor(order.orderId)).terminate('an operator, before the answer');
    } finally {
      await lock.query('ROLLBACK').catch(() => undefined);
      lock.release();
    }
    // Temporal cuts the waiting update with an error of its own (the run is closed): 503, and the same
    // request again carries the placement on, answered from the open row.
    let answer = await first;
    for (let i = 0; i < 20 && answer.status === 503; i++) {
      await sleep(1_000);
      answer = await placeOrder(order, idem);
    }
    expect(answer.status, JSON.stringify(answer.body)).toBe(202);
    expect(answer.body).toMatchObject({ orderId: order.orderId });
    // PENDING, or RESERVED when the terminated run's reservation, let go with the lock, wrote its step.
    expect(['PENDING', 'RESERVED']).toContain(answer.body.status);
    // The sweeper starts the saga again from the row, and the order completes.
    const report = await env.client.workflow.execute(sweeperWorkflow, {
      taskQueue: cfg.taskQueue,
      workflowId: `sweep-${uid()}`,
      args: [{ graceMs: 0, orderIds: [order.orderId] }],
    });
    expect(report.actions.map((a) => a.action)).toEqual(['restart']);
    expect(await follow(order.orderId, (b) => b.status === 'COMPLETED')).toMatchObject({ status: 'COMPLETED' });
    expect((await productRow(db, sku)).stock).toBe(4); // one unit sold, once
    expect((await placeOrder(order, idem)).status).toBe(202); // the answer kept
  });

  it('a saga terminated before it wrote its row: the order is marked never placed, and a late createOrder changes nothing', async () => {
    const { sku, priceCents } = await createProduct(db, { stock: 5 });
    const order = makeOrder([{ sku, qty: 1, unitPriceCents: priceCents }]);
    const idem = `k-${uid()}`;
    // Its run started, then terminated before any task ran (nobody polls its queue).
    const handle = await env.client.workflow.start(orderSaga, {
      taskQueue: `nobody-polls-${uid()}`,
      workflowId: workflowIdFor(order.orderId),
      args: [order],
    });
    // Its placement, as a process that died after starting it left it: the lease is over.
    await claimLeft(order, idem, '-1 second');
    // While its run is open, it may still write the row: no answer, and nothing written.
    expect(await placeOrder(order, idem)).toMatchObject({ status: 503, body: { error: 'no_answer' } });
    expect(await rowsFor(order.orderId)).toEqual({ orders: 0, placements: 1 });
    await handle.terminate('stopped before its first task');
    const answer = await placeOrder(order, idem);
    expect(answer.status, JSON.stringify(answer.body)).toBe(409);
    expect(answer.body).toMatchObject({ error: 'order_failed', orderId: order.orderId });
    expect(String(answer.body.message)).toContain('terminated before it wrote the order; nothing was placed');
    expect(await follow(order.orderId, (b) => b.status === 'FAILED')).toMatchObject({ status: 'FAILED' });
    const { rows: events } = await db.query<{ kind: string }>({
      text: 'SELECT kind FROM order_events WHERE order_id = $1 ORDER BY seq',
      values: [order.orderId],
    });
    expect(events.map((e) => e.kind)).toEqual(['order.failed']);
    // createOrder still in flight for that run (or a Reset's run) finds the order settled: nothing moves.
    const late = await new MockActivityEnvironment().run(orderActivities({ db }).createOrder, order);
    expect(late).toEqual({ outcome: 'settled', status: 'FAILED' });
    // The mark is written once: a row already there (the fence's own, or a late createOrder's) stays.
    expect(await recordNeverPlaced(db, order, 'again')).toBe(false);
    expect((await db.query('SELECT 1 FROM order_events WHERE order_id = $1', [order.orderId])).rowCount).toBe(1);
    expect((await placeOrder(order, idem)).headers.get(REPLAY_HEADER.toLowerCase())).toBe('true');
  });

  it('a request that carried on a placement after its lease, answering second, gives the first answer written', async () => {
    // The first request still at work when its lease ran out (so the same request again took the
    // placement over): whichever answers second gives the answer already written, marked a replay.
    const store = apiStore(db);
    const p = { storefront: `shop-${uid()}`, key: `k-${uid()}`, requestHash: 'h', orderId: `lease-${uid()}` };
    expect(await store.claim({ ...p, leaseMs: 0 })).toEqual({ kind: 'new' });
    expect(await store.claim({ ...p, leaseMs: 60_000 })).toEqual({ kind: 'takeover' });
    const first = { status: 202, body: { orderId: p.orderId, status: 'RESERVED' } };
    expect(await store.answer({ ...p, ...first })).toEqual({ ...first, first: true });
    const second = await store.answer({ ...p, status: 409, body: { error: 'order_failed' } });
    expect(second).toEqual({ ...first, first: false });
    expect((await store.placement(p.storefront, p.key))?.answer).toEqual(first);
  });

  it('two storefronts racing one Idempotency-Key and one order: one workflow, and each gets the first answer or a 409', async () => {
    for (let round = 0; round < 4; round++) {
      const { sku, priceCents } = await createProduct(db, { stock: 20 });
      const order = makeOrder([{ sku, qty: 1, unitPriceCents: priceCents }]);
      const idem = `race-${uid()}`;
      const answers = await Promise.all([keyA, keyB, keyA, keyB].map((key) => placeOrder(order, idem, key)));
      const accepted = answers.filter((a) => a.status === 202);
      expect(accepted.length, JSON.stringify(answers.map((a) => [a.status, a.body]))).toBeGreaterThanOrEqual(1);
      for (const a of accepted) expect(a.body).toEqual(accepted[0]!.body);
      for (const a of answers.filter((x) => x.status !== 202)) {
        expect(a.status).toBe(409);
        expect(['order_exists', 'request_in_flight']).toContain(a.body.error);
      }
      expect(await rowsFor(order.orderId)).toEqual({ orders: 1, placements: 1 });
      // Exactly one run under the order's workflow ID (visibility catches up within moments).
      let runs = 0;
      for (const until = Date.now() + 15_000; runs === 0 && Date.now() < until;) {
        runs = (await env.client.workflow.count(`WorkflowId = 'order:${order.orderId}'`)).count;
        if (runs === 0) await new Promise((res) => setTimeout(res, 200));
      }
      expect(runs).toBe(1);
      expect(await workflowExists(order.orderId)).toBe(true);
      const { rows } = await db.query({
        text: 'SELECT 1 FROM reservations WHERE order_id = $1',
        values: [order.orderId],
      });
      expect(rows).toHaveLength(1);
    }
  });

  it('refuses bad requests naming the field (400, 413, 415, 422), writing nothing and starting no workflow', async () => {
    const { sku, priceCents } = await createProduct(db, { stock: 5 });
    const order = makeOrder([{ sku, qty: 1, unitPriceCents: priceCents }]);
    const cases: { name: string; answer: Promise<Answer>; status: number; error: string; field?: string }[] = [
      {
        name: 'no key',
        answer: call('/v1/orders', { key: keyA, body: order }),
        status: 400,
        error: 'missing_idempotency_key',
        field: 'Idempotency-Key',
      },
      {
        name: 'long key',
        answer: placeOrder(order, 'x'.repeat(256)),
        status: 400,
        error: 'invalid_idempotency_key',
        field: 'Idempotency-Key',
      },
      { name: 'not JSON', answer: placeOrder('{"orderId":', `k-${uid()}`), status: 400, error: 'invalid_json' },
      {
        name: 'text/plain',
        answer: call('/v1/orders', {
          key: keyA,
          idem: `k-${uid()}`,
          body: JSON.stringify(order),
          headers: { 'content-type': 'text/plain' },
        }),
        status: 415,
        error: 'unsupported_media_type',
        field: 'Content-Type',
      },
      {
        name: 'too large',
        answer: placeOrder({ ...order, pad: 'x'.repeat(MAX_BODY_BYTES) }, `k-${uid()}`),
        status: 413,
        error: 'body_too_large',
      },
      {
        name: 'qty',
        answer: placeOrder({ ...order, items: [{ sku, qty: 0, unitPriceCents: priceCents }] }, `k-${uid()}`),
        status: 422,
        error: 'invalid_order',
        field: 'items[0].qty',
      },
      {
        name: 'unknown SKU',
        answer: placeOrder({ ...order, items: [{ sku: 'NO-SUCH-SKU-X', qty: 1, unitPriceCents: 1 }] }, `k-${uid()}`),
        status: 422,
        error: 'invalid_order',
        field: 'items[0].sku',
      },
      {
        name: 'wrong price',
        answer: placeOrder({ ...order, items: [{ sku, qty: 1, unitPriceCents: priceCents + 1 }] }, `k-${uid()}`),
        status: 422,
        error: 'invalid_order',
        field: 'items[0].unitPriceCents',
      },
      {
        name: 'extra field',
        answer: placeOrder({ ...order, coupon: 'x' }, `k-${uid()}`),
        status: 422,
        error: 'invalid_order',
        field: 'coupon',
      },
    ];
    for (const c of cases) {
      const r = await c.answer;
      expect(r.status, `${c.name}: ${JSON.stringify(r.body)}`).toBe(c.status);
      expect(r.body.error, c.name).toBe(c.error);
      if (c.field) expect(r.body.field, c.name).toBe(c.field);
      if (c.field) expect(String(r.body.message), c.name).toContain(c.field);
    }
    expect(await rowsFor(order.orderId)).toEqual({ orders: 0, placements: 0 });
    expect(await workflowExists(order.orderId)).toBe(false);
  });
});

describe('GET /v1/orders and cancel', () => {
  it("pages a storefront's orders newest first, filtered by customer and status, and shows none of another storefront's", async () => {
    const { sku, priceCents } = await createProduct(db, { stock: 10 });
    const customerId = `cust-${uid()}`;
    const placed: string[] = [];
    for (let i = 0; i < 3; i++) {
      const order = makeOrder([{ sku, qty: 1, unitPriceCents: priceCents }], { customerId });
      expect((await placeOrder(order, `k-${uid()}`)).status).toBe(202);
      placed.push(order.orderId);
    }
    const first = await call(`/v1/orders?customer=${customerId}&limit=2`, { key: keyA });
    expect(first.status).toBe(200);
    const ids = (first.body.orders as { orderId: string }[]).map((o) => o.orderId);
    expect(ids).toEqual([placed[2], placed[1]]);
    expect(typeof first.body.next).toBe('string');
    const second = await call(`/v1/orders?customer=${customerId}&limit=2&cursor=${String(first.body.next)}`, {
      key: keyA,
    });
    expect((second.body.orders as { orderId: string }[]).map((o) => o.orderId)).toEqual([placed[0]]);
    expect(second.body.next).toBeUndefined();
    for (const id of placed) await follow(id, (b) => b.status === 'COMPLETED');
    const completed = await call(`/v1/orders?customer=${customerId}&status=COMPLETED`, { key: keyA });
    expect((completed.body.orders as unknown[]).length).toBe(3);
    expect((await call(`/v1/orders?customer=${customerId}&status=FAILED`, { key: keyA })).body.orders).toEqual([]);
    expect((await call(`/v1/orders?customer=${customerId}`, { key: keyB })).body.orders).toEqual([]);
    expect((await call(`/v1/orders/${placed[0]}`, { key: keyB })).status).toBe(404);
    for (const [query, field] of [
      ['status=LOST', 'status'],
      ['customer=a%20b', 'customer'],
      ['cursor=nope', 'cursor'],
      ['limit=0', 'limit'],
      ['limit=101', 'limit'],
      ['limit=1e1', 'limit'],
      ['page=2', 'page'],
      ['status=FAILED&status=COMPLETED', 'status'],
    ] as const) {
      const r = await call(`/v1/orders?${query}`, { key: keyA });
      expect(r.status, query).toBe(400);
      expect(r.body.field, query).toBe(field);
    }
  });

  it('names the next step a person must take for an order in NEEDS_ATTENTION, from its row', async () => {
    const orderId = `t-${uid()}`;
    // A row as an escalation over an unknown charge leaves it (the saga's part is tested elsewhere).
    await db.query({
      text: `INSERT INTO orders (order_id, customer_id, status, reason, currency, total_cents, items, payment_method, workflow_id, attention_from)
             VALUES ($1, 'cust-1', 'NEEDS_ATTENTION', 'charge outcome unknown after 10 inquiries', 'USD', 1000,
                     '[{"sku":"SKU-MUG","qty":1,"unitPriceCents":1000}]', 'tok_visa', $2, 'UNKNOWN_PAYMENT')`,
      values: [orderId, `order:${orderId}`],
    });
    await db.query({
      text: `INSERT INTO api_placements (storefront, idempotency_key, request_hash, order_id, status_code, response, lease_until)
             VALUES ($1, $2, 'x', $2, 202, '{}', now())`,
      values: [storefrontA, orderId],
    });
    const r = await call(`/v1/orders/${orderId}`, { key: keyA });
    expect(r.body).toMatchObject({
      status: 'NEEDS_ATTENTION',
      nextStep: { by: 'operator', action: 'resolve', choices: ['charge-succeeded', 'charge-failed'] },
    });
    expect(String((r.body.nextStep as { detail: string }).detail)).toContain(`client.ts resolve ${orderId}`);
  });

  it('cancels before the pivot (recorded, 202; the hold voided on the row), and refuses past the pivot, after the end, and for no such order', async () => {
    const { sku, priceCents } = await createProduct(db, { stock: 5 });
    const order = makeOrder([{ sku, qty: 1, unitPriceCents: priceCents }]);
    // The authorization takes 3 s at the provider: the cancel comes while it is on its way.
    await admin.set({
      kind: 'delay',
      target: 'authorizations',
      delayMs: 3_000,
      count: 1,
      keyPrefix: `${order.orderId}:`,
    });
    expect((await placeOrder(order, `k-${uid()}`)).status).toBe(202);
    const idem = `c-${uid()}`;
    const cancel = await call(`/v1/orders/${order.orderId}/cancel`, {
      key: keyA,
      idem,
      body: { reason: 'customer changed their mind' },
    });
    expect(cancel.status, JSON.stringify(cancel.body)).toBe(202);
    expect(cancel.body).toMatchObject({ orderId: order.orderId, cancel: 'accepted' });
    const { rows } = await db.query({
      text: `SELECT outcome, reason FROM order_requests WHERE order_id = $1 AND kind = 'cancel'`,
      values: [order.orderId],
    });
    expect(rows).toEqual([{ outcome: 'accepted', reason: 'customer changed their mind' }]);
    // The same key again is the same request: its first decision, not a second row.
    expect(
      (
        await call(`/v1/orders/${order.orderId}/cancel`, {
          key: keyA,
          idem,
          body: { reason: 'customer changed their mind' },
        })
      ).status,
    ).toBe(202);
    const ended = await follow(order.orderId, (b) => b.status === 'CANCELLED');
    expect(ended).toMatchObject({ status: 'CANCELLED', cancel: { reason: 'customer changed their mind' } });
    // The hold was voided (or its key closed before any was made): nothing taken, nothing to refund.
    expect(ended).toMatchObject({ paymentFlow: 'authorization', chargedCents: 0, refundedCents: 0 });
    expect([null, 'voided']).toContain(ended.authorization);
    const again = await call(`/v1/orders/${order.orderId}/cancel`, { key: keyA, method: 'POST' });
    expect(again).toMatchObject({ status: 409, body: { error: 'already_ended' } });
    expect(String(again.body.message)).toContain('CANCELLED');

    const shipped = makeOrder([{ sku, qty: 1, unitPriceCents: priceCents }]);
    expect((await placeOrder(shipped, `k-${uid()}`)).status).toBe(202);
    await follow(shipped.orderId, (b) => b.status === 'COMPLETED');
    const late = await call(`/v1/orders/${shipped.orderId}/cancel`, { key: keyA, method: 'POST' });
    expect(late).toMatchObject({ status: 409, body: { error: 'past_pivot' } });
    expect(String(late.body.message)).toContain('pivot');

    expect(await call(`/v1/orders/no-such-${uid()}/cancel`, { key: keyA, method: 'POST' })).toMatchObject({
      status: 404,
      body: { error: 'not_found' },
    });
    expect(await call(`/v1/orders/no-such-${uid()}`, { key: keyA })).toMatchObject({
      status: 404,
      body: { error: 'not_found' },
    });
    const badBody = await call(`/v1/orders/${shipped.orderId}/cancel`, { key: keyA, body: { why: 'x' } });
    expect(badBody).toMatchObject({ status: 422, body: { field: 'why' } });
  });
});

describe('rate limit, CORS and the fuzz', () => {
  it('answers 429 with Retry-After over the per-key limit, and CORS headers only for configured origins', async () => {
    // On a task queue no worker polls, with a short wait for the early answer.
    const idleQueue = `idle-${uid()}`;
    const limited = await startApi({
      API_RATE_LIMIT: '3',
      API_CORS_ORIGINS: 'https://shop.example',
      TASK_QUEUE: idleQueue,
      API_ANSWER_TIMEOUT_MS: '1000',
    });
    try {
      // No early answer in time: a 503 to retry, and the same request again carries the placement on.
      const { sku, priceCents } = await createProduct(db, { stock: 5 });
      const order = makeOrder([{ sku, qty: 1, unitPriceCents: priceCents }]);
      const keyC = (await createApiKey(db, `shop-idle-${uid()}`)).key;
      for (let i = 0; i < 2; i++) {
        const late = await call('/v1/orders', { key: keyC, idem: 'late-1', body: order }, limited);
        expect(late.status, JSON.stringify(late.body)).toBe(503);
        expect(late.body.error).toBe('no_answer');
        expect(late.headers.get('retry-after')).toBe('5');
      }
      expect(await rowsFor(order.orderId)).toEqual({ orders: 0, placements: 1 });
      await env.client.workflow.getHandle(`order:${order.orderId}`).terminate('test: no worker on its queue');

      const statuses: number[] = [];
      let retryAfter: string | null = null;
      for (let i = 0; i < 5; i++) {
        const r = await call('/v1/orders', { key: keyA }, limited);
        statuses.push(r.status);
        if (r.status === 429) {
          retryAfter = r.headers.get('retry-after');
          expect(r.body.error).toBe('rate_limited');
        }
      }
      expect(statuses.slice(0, 3)).toEqual([200, 200, 200]);
      expect(statuses[3]).toBe(429);
      expect(Number(retryAfter)).toBeGreaterThanOrEqual(1);
      // Another key has its own bucket.
      expect((await call('/v1/orders', { key: keyB }, limited)).status).toBe(200);
      const preflight = await fetch(`${limited.url}/v1/orders`, {
        method: 'OPTIONS',
        headers: { origin: 'https://shop.example', 'access-control-request-method': 'POST' },
      });
      expect(preflight.headers.get('access-control-allow-origin')).toBe('https://shop.example');
      const elsewhere = await fetch(`${limited.url}/healthz`, { headers: { origin: 'https://evil.example' } });
      expect(elsewhere.headers.get('access-control-allow-origin')).toBeNull();
    } finally {
      await stopProcess(limited.child);
    }
    // Unconfigured: no CORS header at all.
    const plain = await fetch(`${api.url}/v1/orders`, {
      method: 'OPTIONS',
      headers: { origin: 'https://shop.example', 'access-control-request-method': 'POST' },
    });
    expect([...plain.headers.keys()].filter((h) => h.startsWith('access-control-'))).toEqual([]);
  });

  it('a seeded fuzz of malformed requests: each a JSON 4xx, no row written, no workflow started', async () => {
    const seed = Number(process.env.FUZZ_SEED ?? 20261203);
    const r = rng(seed);
    const { sku, priceCents } = await createProduct(db, { stock: 1000 });
    const prefix = `fz${uid()}`;
    const orderIds = new Set<string>();
    const base = (): OrderInput => {
      const o = makeOrder([{ sku, qty: 1, unitPriceCents: priceCents }], { orderId: `${prefix}-${r.int(1e6)}` });
      orderIds.add(o.orderId);
      return o;
    };
    const auth = `Bearer ${keyA}`;
    const json = { 'content-type': 'application/json', authorization: auth };
    const requests: {
      name: string;
      method: string;
      path: string;
      headers: Record<string, string>;
      body?: string;
      chunked?: boolean;
    }[] = [];
    // The shared malformed orders, each under its own order ID where the ID is not what is wrong.
    for (const m of MALFORMED_ORDERS) {
      const o = m.order as Record<string, unknown>;
      const body =
        typeof o === 'object' &&
        o !== null &&
        !Array.isArray(o) &&
        typeof o.orderId === 'string' &&
        o.orderId === 'ok-1'
          ? { ...o, orderId: base().orderId }
          : o;
      requests.push({
        name: m.name,
        method: 'POST',
        path: '/v1/orders',
        headers: { ...json, 'idempotency-key': `${prefix}-${uid()}` },
        body: JSON.stringify(body),
      });
    }
    const mutations: ((o: Record<string, unknown>) => unknown)[] = [
      (o) => ({
        ...o,
        [r.pick(['orderId', 'customerId', 'currency', 'paymentMethod', 'items'])]: r.pick([
          null,
          1,
          -1,
          1.5,
          true,
          '',
          [],
          {},
          'x'.repeat(300),
          '\u0000',
        ]),
      }),
      (o) => {
        const copy = { ...o };
        delete copy[r.pick(['orderId', 'customerId', 'currency', 'paymentMethod', 'items'])];
        return copy;
      },
      (o) => ({
        ...o,
        items: [{ sku, qty: r.pick([0, -1, 1.5, 1001, '1', null, 1e308]), unitPriceCents: priceCents }],
      }),
      (o) => ({
        ...o,
        items: [{ sku, qty: 1, unitPriceCents: r.pick([-1, 0.5, '1', null, priceCents + 1, 10_000_001]) }],
      }),
      (o) => ({
        ...o,
        items: [
          {
            sku: r.pick(['', 'lower', 'NO-SUCH-' + uid().toUpperCase(), 'A B', 'É']),
            qty: 1,
            unitPriceCents: priceCents,
          },
        ],
      }),
      (o) => ({
        ...o,
        items: [
          { sku, qty: 1, unitPriceCents: priceCents },
          { sku, qty: 1, unitPriceCents: priceCents },
        ],
      }),
      (o) => ({ ...o, items: Array.from({ length: 51 }, () => ({ sku, qty: 1, unitPriceCents: priceCents })) }),
      (o) => ({ ...o, items: [{ sku, qty: 1, unitPriceCents: priceCents, extra: 1 }] }),
      (o) => ({ ...o, [`x${r.int(100)}`]: 1 }),
      (o) => [o],
      () => r.pick([null, 0, '"order"', true]),
    ];
    for (let i = 0; i < 160; i++) {
      const mutated = r.pick(mutations)({ ...base() });
      requests.push({
        name: `mutation ${i}`,
        method: 'POST',
        path: '/v1/orders',
        headers: { ...json, 'idempotency-key': `${prefix}-${uid()}` },
        body: JSON.stringify(mutated),
      });
    }
    const good = (): string => JSON.stringify(base());
    for (let i = 0; i < 60; i++) {
      const kind = r.int(8);
      const idem = { 'idempotency-key': `${prefix}-${uid()}` };
      if (kind === 0)
        requests.push({
          name: 'bad JSON',
          method: 'POST',
          path: '/v1/orders',
          headers: { ...json, ...idem },
          body: good().slice(0, 1 + r.int(40)),
        });
      if (kind === 1)
        requests.push({
          name: 'content type',
          method: 'POST',
          path: '/v1/orders',
          headers: {
            authorization: auth,
            ...idem,
            'content-type': r.pick([
              'text/plain',
              'application/x-www-form-urlencoded',
              'application/jsonx',
              'multipart/form-data; boundary=x',
            ]),
          },
          body: good(),
        });
      if (kind === 2)
        requests.push({
          name: 'no content type',
          method: 'POST',
          path: '/v1/orders',
          headers: { authorization: auth, ...idem },
          body: good(),
        });
      if (kind === 3)
        requests.push({
          name: 'oversized',
          method: 'POST',
          path: '/v1/orders',
          headers: { ...json, ...idem },
          body: JSON.stringify({ ...base(), pad: 'x'.repeat(MAX_BODY_BYTES + r.int(100_000)) }),
          chunked: r.int(2) === 0,
        });
      if (kind === 4)
        requests.push({
          name: 'idempotency key',
          method: 'POST',
          path: '/v1/orders',
          headers: { ...json, ...(r.int(2) ? {} : { 'idempotency-key': r.pick(['x'.repeat(256), 'a b', 'ü']) }) },
          body: good(),
        });
      if (kind === 5)
        requests.push({
          name: 'no auth',
          method: r.pick(['GET', 'POST']),
          path: r.pick(['/v1/orders', `/v1/orders/${prefix}`, `/v1/orders/${prefix}/cancel`]),
          headers: {
            'content-type': 'application/json',
            authorization: r.pick(['', 'Bearer', `Bearer ${keyA}x`, `bearer ${keyA}`]),
          },
          body: good(),
        });
      if (kind === 6)
        requests.push({
          name: 'path',
          method: r.pick(['GET', 'POST', 'PUT', 'DELETE', 'PATCH']),
          path: r.pick([
            '/v1/orders/%zz',
            '/v1/orders/%00',
            '/v1/orders/a/b/c',
            '/v1/order',
            '/v1/orders/../x',
            `/v1/orders/${'a'.repeat(70)}`,
            '/v2/orders',
          ]),
          headers: { ...json, ...idem },
          body: good(),
        });
      if (kind === 7)
        requests.push({
          name: 'query',
          method: 'GET',
          path: `/v1/orders?${r.pick(['limit=-1', 'limit=abc', 'status=', 'cursor=%ff', 'customer=' + 'x'.repeat(80), 'a=b', 'limit=1&limit=2'])}`,
          headers: { authorization: auth },
        });
    }
    const problems: string[] = [];
    for (const q of requests) {
      const reply = await request(api.port, {
        method: q.method,
        path: q.path,
        headers: q.headers,
        ...(q.body === undefined ? {} : { body: q.body }),
        ...(q.chunked ? { chunked: true } : {}),
      });
      let parsed: { error?: unknown } | undefined;
      try {
        parsed = JSON.parse(reply.body) as { error?: unknown };
      } catch {
        parsed = undefined;
      }
      if (reply.status < 400 || reply.status > 499 || typeof parsed?.error !== 'string')
        problems.push(`${q.name}: ${q.method} ${q.path.slice(0, 60)} → ${reply.status} ${reply.body.slice(0, 200)}`);
    }
    expect(problems).toEqual([]);
    const written = await db.query<{ n: number }>({
      text: `SELECT (SELECT count(*) FROM orders WHERE order_id LIKE $1) + (SELECT count(*) FROM api_placements WHERE order_id LIKE $1 OR idempotency_key LIKE $1) AS n`,
      values: [`${prefix}%`],
    });
    expect(Number(written.rows[0]!.n)).toBe(0);
    for (const id of orderIds) expect(await workflowExists(id), id).toBe(false);
    expect(requests.length).toBeGreaterThan(250);
  });
});
