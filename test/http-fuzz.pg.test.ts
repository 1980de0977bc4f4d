/**
 * The HTTP edge, fuzzed: a provider process of its own (payment API and admin API) and the worker's
 * metrics endpoint get malformed paths and % escapes, bad methods, wrong content types, malformed and
 * invalid bodies, oversized bodies, bad headers, requests Node cannot parse, and concurrent requests
 * with one Idempotency-Key and different bodies. Every answer must be a 4xx with a JSON error (never
 * a 500, never plain text), and nothing may be written but the one winner of each concurrent race.
 * Requests go over raw sockets, so the bytes are exactly the fuzzer's. Seeded: a failure reproduces.
 */
import type { ChildProcess } from 'node:child_process';
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { InventoryMetrics } from '../activities/inventory-metrics';
import { startProviderProcess, stopProcess } from '../platform/processes';
import { startMetricsServer } from '../worker';
import { testPool, uid } from './support/helpers';
import { raw, request, rng, type Reply, type Req } from './support/raw-http';

const API_KEY = 'fuzz-api-key-1234';
const ADMIN_KEY = 'fuzz-admin-key-1234';
const SEED = Number(process.env.FUZZ_SEED ?? 20261130);

const PATH_PIECES = [
  '%',
  '%%',
  '%G0',
  '%1',
  '%zz',
  '%C0%AF',
  '%ED%A0%80',
  '%E2%82',
  '%FF%FE',
  '%00',
  '%0A',
  '%1F',
  '%7F',
  '..',
  '/',
  '//',
  ';',
  'x',
  'ü',
  '%F0%9F%92',
  'a'.repeat(300),
];
const METHODS = ['GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'TRACE', 'BREW'];

const validCharge = (key: string, amountCents = 500) => ({
  amountCents,
  currency: 'USD',
  paymentMethod: 'tok_visa',
  reference: key,
});

/** A charge body that breaks at least one rule (by construction, never a valid one). */
function badCharge(r: ReturnType<typeof rng>, key: string): unknown {
  const body: Record<string, unknown> = validCharge(key);
  const mutations: (() => void)[] = [
    () => (body.amountCents = r.pick([0, -1, 1.5, '100', null, true, 2 ** 60, [], {}])),
    () => (body.currency = r.pick(['usd', 'US', 'USDD', '', 5, null, 'U\u0000D'])),
    () => (body.paymentMethod = r.pick(['', 'x'.repeat(65), 7, null, 'a\nb'])),
    () => (body.reference = r.pick(['', 'x'.repeat(201), 5, 'a\u0001', false])),
    // defineProperty: an assignment to __proto__ would set the prototype, not add a field.
    () =>
      Object.defineProperty(body, r.pick(['amount', '__proto__', 'constructor', 'status', '']), {
        value: 1,
        enumerable: true,
      }),
    () => delete body[r.pick(['amountCents', 'currency', 'paymentMethod'])],
  ];
  for (let n = 1 + r.int(2); n > 0; n--) r.pick(mutations)();
  return body;
}

function badRefund(r: ReturnType<typeof rng>, key: string): unknown {
  const body: Record<string, unknown> = { chargeKey: `${key}:charge`, amountCents: 100 };
  r.pick<() => void>([
    () => (body.amountCents = r.pick([0, -5, 0.5, '1', null])),
    () => (body.chargeKey = r.pick(['', 'x'.repeat(201), 3, null, 'a\u0002b'])),
    () => (body.extra = true),
    () => delete body.chargeKey,
  ])();
  return body;
}

function badFault(r: ReturnType<typeof rng>): unknown {
  return r.pick<unknown>([
    {},
    { kind: 'outage' },
    { kind: 'meteor', count: 1 },
    { kind: 'delay', count: 1 },
    { kind: 'delay', count: 1, delayMs: -1 },
    { kind: 'outage', count: -1 },
    { kind: 'outage', rate: 2 },
    { kind: 'processing', target: 'charges', count: 1 },
    { kind: 'outage', count: 1, keyPrefix: '' },
    { kind: 'outage', count: 1, mode: 'drop' },
    { kind: 'outage', count: 1, surprise: 1 },
  ]);
}

/** JSON that does not parse, or is not an object. */
const BAD_JSON = [
  '{',
  '{"amountCents":',
  '{"a":1}}',
  "{'a':1}",
  '[]',
  '[1,2]',
  '42',
  '"text"',
  'null',
  'true',
  '',
  '\u0000',
  '{"a":1,}',
  '['.repeat(20_000),
  '{"a":"\ud800"',
];

const CONTENT_TYPES = [
  'text/plain',
  'application/x-www-form-urlencoded',
  'multipart/form-data; boundary=x',
  'application/jsonx',
  'text/json',
  'application/xml',
  '',
];

/** Requests Node's parser itself refuses; the answer must still be a JSON 4xx. */
const UNPARSABLE = [
  'GARBAGE\r\n\r\n',
  'GET /healthz HTTP/9.9\r\nhost: x\r\n\r\n',
  'GET  HTTP/1.1\r\nhost: x\r\n\r\n',
  'GET /healthz HTTP/1.1\r\nbad header: x\r\n\r\n',
  'GET /healthz HTTP/1.1\r\nx-a: \u0001\r\n\r\n',
  `GET /healthz HTTP/1.1\r\nx-big: ${'a'.repeat(20_000)}\r\n\r\n`,
  'POST /v1/charges HTTP/1.1\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\nhello',
  'POST /v1/charges HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n',
  'GET /\u0000 HTTP/1.1\r\n\r\n',
  'GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\nexpect: 200-ok\r\n\r\n',
  'POST /v1/charges HTTP/1.1\r\nhost: x\r\nconnection: close\r\nexpect: something\r\ncontent-length: 2\r\n\r\n{}',
  'CONNECT 127.0.0.1:22 HTTP/1.1\r\nhost: 127.0.0.1:22\r\n\r\n',
];

let db: Pool;
let provider: ChildProcess | undefined;
let ports: { api: number; admin: number; metrics: number };
let metricsServer: http.Server;
const prefix = `fz${uid()}`;
const sent: Record<string, number> = {};
const failures: string[] = [];

/** Sends and checks one request that must be refused: a 4xx whose body is a JSON error. */
async function refused(target: string, port: number, r: Req | string): Promise<void> {
  sent[target] = (sent[target] ?? 0) + 1;
  let reply: Reply;
  try {
    reply = typeof r === 'string' ? await raw(port, r) : await request(port, r);
  } catch (err) {
    failures.push(`${target}: ${(err as Error).message}`);
    return;
  }
  const what =
    typeof r === 'string'
      ? JSON.stringify(r.slice(0, 80))
      : `${r.method} ${r.path.slice(0, 80)} ${JSON.stringify(r.headers ?? {}).slice(0, 200)} ${String(r.body ?? '').slice(0, 60)}`;
  let parsed: unknown;
  try {
    parsed = JSON.parse(reply.body);
  } catch {
    parsed = undefined;
  }
  const json = parsed as { error?: unknown; message?: unknown } | undefined;
  if (reply.status < 400 || reply.status > 499)
    failures.push(`${target} ${what}: status ${reply.status} ${reply.body.slice(0, 100)}`);
  else if (
    !reply.headers['content-type']?.startsWith('application/json') ||
    typeof json?.error !== 'string' ||
    typeof json.message !== 'string'
  ) {
    failures.push(
      `${target} ${what}: not a JSON error: ${reply.status} ${reply.headers['content-type']} ${reply.body.slice(0, 100)}`,
    );
  }
}

/** Runs the requests with at most `width` in flight. */
async function pool<T>(items: T[], width: number, fn: (x: T) => Promise<void>): Promise<void> {
  let i = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (i < items.length) await fn(items[i++]!);
    }),
  );
}

beforeAll(async () => {
  db = testPool();
  const p = await startProviderProcess({
    DATABASE_URL: inject('roleUrls').provider,
    PROVIDER_PORT: '0',
    PROVIDER_ADMIN_PORT: '0',
    PROVIDER_API_KEY: API_KEY,
    PROVIDER_ADMIN_KEY: ADMIN_KEY,
  });
  provider = p.child;
  metricsServer = await startMetricsServer(new InventoryMetrics(), 0);
  ports = {
    api: Number(new URL(p.url).port),
    admin: Number(new URL(p.adminUrl).port),
    metrics: (metricsServer.address() as AddressInfo).port,
  };
});
afterAll(async () => {
  metricsServer?.close();
  await stopProcess(provider);
  await db.end();
});

const auth = { authorization: `Bearer ${API_KEY}` };
const json = { ...auth, 'content-type': 'application/json' };

describe('the HTTP edge under fuzzing', () => {
  it('answers every malformed request with a JSON 4xx, and writes nothing', async () => {
    const r = rng(SEED);
    const junk = (): string => Array.from({ length: 1 + r.int(4) }, () => r.pick(PATH_PIECES)).join('');
    const key = (): string => `${prefix}-${r.int(1e9)}`;
    const api: Req[] = [];
    const admin: Req[] = [];
    const metrics: Req[] = [];
    for (let i = 0; i < 300; i++) {
      // Malformed paths, with and without a key; random methods on random paths.
      api.push({ method: 'GET', path: `/v1/charges/${prefix}${junk()}`, headers: auth });
      api.push({
        method: r.pick(METHODS),
        path: `/${r.pick(['', 'v1', 'v1/charges', 'v1/refunds', 'admin/faults', 'healthz'])}/${junk()}`,
        headers: r.pick<Record<string, string>>([auth, {}]),
      });
      // Invalid bodies: by field, by JSON, by content type, by size, by header.
      api.push({
        method: 'POST',
        path: '/v1/charges',
        headers: { ...json, 'idempotency-key': key() },
        body: JSON.stringify(badCharge(r, key())),
      });
      api.push({
        method: 'POST',
        path: '/v1/refunds',
        headers: { ...json, 'idempotency-key': key() },
        body: JSON.stringify(badRefund(r, key())),
      });
      api.push({
        method: 'POST',
        path: r.pick(['/v1/charges', '/v1/refunds']),
        headers: { ...json, 'idempotency-key': key() },
        body: r.pick(BAD_JSON),
      });
      const k = key();
      api.push({
        method: 'POST',
        path: '/v1/charges',
        headers: { ...auth, 'content-type': r.pick(CONTENT_TYPES), 'idempotency-key': k },
        body: JSON.stringify(validCharge(k)),
      });
      api.push({
        method: 'POST',
        path: '/v1/charges',
        headers: r.pick<Record<string, string>>([
          { ...json },
          { ...json, 'idempotency-key': '' },
          { ...json, 'idempotency-key': 'k'.repeat(201) },
          { 'content-type': 'application/json', 'idempotency-key': key() },
          { ...json, authorization: `Bearer ${'x'.repeat(4000)}`, 'idempotency-key': key() },
          { ...json, authorization: 'Basic Zm9vOmJhcg==', 'idempotency-key': key() },
        ]),
        body: JSON.stringify(validCharge(key())),
      });
      admin.push({
        method: 'POST',
        path: '/admin/faults',
        headers: { authorization: `Bearer ${ADMIN_KEY}`, 'content-type': 'application/json' },
        body: JSON.stringify(badFault(r)),
      });
      admin.push({
        method: r.pick(METHODS),
        path: `/admin/${junk()}`,
        headers: r.pick<Record<string, string>>([
          { authorization: `Bearer ${ADMIN_KEY}` },
          {},
          { authorization: `Bearer ${API_KEY}` },
        ]),
      });
      metrics.push({ method: r.pick(METHODS.filter((m) => m !== 'GET')), path: r.pick(['/metrics', '/stats']) });
      metrics.push({ method: r.pick(METHODS), path: `/${junk()}` });
    }
    for (const size of [64 * 1024 + 1, 200_000, 1_000_000]) {
      for (const chunked of [false, true]) {
        const k = key();
        const padded = Buffer.from(JSON.stringify({ ...validCharge(k), reference: 'x'.repeat(size) }));
        api.push({
          method: 'POST',
          path: '/v1/charges',
          headers: { ...json, 'idempotency-key': k },
          body: padded,
          chunked,
        });
        api.push({
          method: 'POST',
          path: '/v1/refunds',
          headers: { ...json, 'idempotency-key': key() },
          body: padded,
          chunked,
        });
        admin.push({
          method: 'POST',
          path: '/admin/faults',
          headers: { authorization: `Bearer ${ADMIN_KEY}`, 'content-type': 'application/json' },
          body: padded,
          chunked,
        });
      }
    }
    await pool(api, 16, (q) => refused('provider API', ports.api, q));
    await pool(admin, 16, (q) => refused('provider admin', ports.admin, q));
    await pool(metrics, 16, (q) => refused('worker metrics', ports.metrics, q));
    for (const bytes of UNPARSABLE) {
      await refused('provider API', ports.api, bytes);
      await refused('provider admin', ports.admin, bytes);
      await refused('worker metrics', ports.metrics, bytes);
    }

    const total = Object.values(sent).reduce((a, b) => a + b, 0);
    console.log(
      `http fuzz (seed ${SEED}): ${total} malformed requests sent (${Object.entries(sent)
        .map(([t, n]) => `${t} ${n}`)
        .join(', ')}); ${failures.length} not answered with a JSON 4xx`,
    );
    expect(failures.slice(0, 20)).toEqual([]);
    expect(total).toBeGreaterThan(3000);
    const written = await db.query({
      text: `SELECT (SELECT count(*) FROM provider.charges WHERE idempotency_key LIKE $1)::int AS charges,
                    (SELECT count(*) FROM provider.refunds WHERE idempotency_key LIKE $1)::int AS refunds`,
      values: [`${prefix}%`],
    });
    expect(written.rows[0]).toEqual({ charges: 0, refunds: 0 });
    const rules = await fetch(`http://127.0.0.1:${ports.admin}/admin/faults`, {
      headers: { authorization: `Bearer ${ADMIN_KEY}` },
    });
    expect(((await rules.json()) as { rules: unknown[] }).rules).toEqual([]);
  });

  it('a body refused while the client is still sending it: the answer arrives every time, and nothing is written', async () => {
    // Without a lingering close, about one in a hundred of these answers was lost to the reset that
    // closing a socket with unread bytes sends.
    const cases: { name: string; port: number; r: Req; status: number }[] = [];
    for (let round = 0; round < 40; round++) {
      for (const size of [64 * 1024 + 1, 1_000_000]) {
        for (const chunked of [false, true]) {
          const k = `${prefix}-big-${round}-${size}-${chunked}`;
          const body = Buffer.from(JSON.stringify({ ...validCharge(k), reference: 'x'.repeat(size) }));
          const headers = { ...json, 'idempotency-key': k };
          const admin = { authorization: `Bearer ${ADMIN_KEY}`, 'content-type': 'application/json' };
          const how = `${size} B ${chunked ? 'chunked' : 'by length'}`;
          cases.push(
            {
              name: `charge ${how}`,
              port: ports.api,
              status: 413,
              r: { method: 'POST', path: '/v1/charges', headers, body, chunked },
            },
            {
              name: `fault ${how}`,
              port: ports.admin,
              status: 413,
              r: { method: 'POST', path: '/admin/faults', headers: admin, body, chunked },
            },
            {
              name: `charge without a key ${how}`,
              port: ports.api,
              status: 401,
              r: {
                method: 'POST',
                path: '/v1/charges',
                headers: { 'content-type': 'application/json', 'idempotency-key': k },
                body,
                chunked,
              },
            },
          );
        }
      }
    }
    const lost: Record<string, number> = {};
    const wrong: string[] = [];
    await pool(cases, 16, async (c) => {
      try {
        const reply = await request(c.port, c.r);
        if (reply.status !== c.status || typeof (JSON.parse(reply.body) as { error?: unknown }).error !== 'string')
          wrong.push(`${c.name}: ${reply.status} ${reply.body.slice(0, 80)}`);
      } catch {
        lost[c.name] = (lost[c.name] ?? 0) + 1;
      }
    });
    console.log(`http fuzz: ${cases.length} refused bodies still being sent; answers lost: ${JSON.stringify(lost)}`);
    expect(lost).toEqual({});
    expect(wrong.slice(0, 10)).toEqual([]);
    const written = await db.query({
      text: `SELECT count(*)::int AS n FROM provider.charges WHERE idempotency_key LIKE $1`,
      values: [`${prefix}-big-%`],
    });
    expect(written.rows[0]).toEqual({ n: 0 });
  });

  it('concurrent requests with one Idempotency-Key and different bodies: one wins, the rest get a JSON 409 or 422, one row', async () => {
    const races = 10;
    const width = 8;
    let lost = 0;
    /** Sends the requests at once: exactly one wins, the others are JSON 409/422, and one row holds the winner's amount. */
    const race = async (path: string, key: string, body: (n: number) => unknown, table: string): Promise<void> => {
      const replies = await Promise.all(
        Array.from({ length: width }, (_, n) =>
          request(ports.api, {
            method: 'POST',
            path,
            headers: { ...json, 'idempotency-key': key },
            body: JSON.stringify(body(n)),
          }),
        ),
      );
      const won = replies.filter((x) => x.status === 201);
      expect(won).toHaveLength(1);
      for (const x of replies.filter((y) => y.status !== 201)) {
        expect([409, 422]).toContain(x.status);
        expect(JSON.parse(x.body)).toMatchObject({ error: expect.any(String), message: expect.any(String) });
        lost++;
      }
      const rows = await db.query({
        text: `SELECT amount_cents FROM ${table} WHERE idempotency_key = $1`,
        values: [key],
      });
      expect(rows.rows).toEqual([
        { amount_cents: String((JSON.parse(won[0]!.body) as { amountCents: number }).amountCents) },
      ]);
    };
    for (let i = 0; i < races; i++) {
      // Charges: the same key, eight amounts at once.
      const key = `${prefix}-race-${i}`;
      await race('/v1/charges', key, (n) => validCharge(key, 100 + n), 'provider.charges');
      // Refunds: one refund key, eight amounts (against two charges) at once.
      const other = `${prefix}-race-${Math.max(0, i - 1)}`;
      await race(
        '/v1/refunds',
        `${key}:refund`,
        (n) => ({ chargeKey: n % 2 ? key : other, amountCents: 1 + n }),
        'provider.refunds',
      );
    }
    console.log(
      `http fuzz: ${races * width * 2} concurrent requests in ${races * 2} races with one key each; ${lost} refused with 409/422, one row per key`,
    );
  });
});
