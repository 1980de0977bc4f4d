/** The payment provider, as a separate process over HTTP, with its state in Postgres. */
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { testAdmin, testPool, uid } from './helpers';

let db: Pool;
beforeAll(() => {
  db = testPool();
});
afterAll(async () => {
  await db.end();
});

async function post(
  path: string,
  body: unknown,
  opts: { key?: string; apiKey?: string | null } = {},
): Promise<{ status: number; json: Record<string, unknown>; replayed: boolean }> {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (opts.apiKey !== null) headers.authorization = `Bearer ${opts.apiKey ?? inject('providerApiKey')}`;
  if (opts.key) headers['idempotency-key'] = opts.key;
  const res = await fetch(new URL(path, inject('providerUrl')), {
    method: 'POST',
    headers,
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return {
    status: res.status,
    json: (await res.json()) as Record<string, unknown>,
    replayed: res.headers.get('idempotent-replayed') === 'true',
  };
}

async function get(path: string): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(new URL(path, inject('providerUrl')), {
    headers: { authorization: `Bearer ${inject('providerApiKey')}` },
  });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}

const rows = async (table: 'charges' | 'refunds', key: string): Promise<number> =>
  (await db.query({ text: `SELECT 1 FROM provider.${table} WHERE idempotency_key = $1`, values: [key] })).rowCount ?? 0;

describe('payment provider', () => {
  const charge = { amountCents: 2500, currency: 'USD', paymentMethod: 'tok_visa' };

  it('charges once per idempotency key: a replay returns the first result', async () => {
    const key = `k-${uid()}:charge`;
    const first = await post('/v1/charges', charge, { key });
    const again = await post('/v1/charges', charge, { key });
    expect(first.status).toBe(201);
    expect(first.json).toMatchObject({ idempotencyKey: key, status: 'succeeded', amountCents: 2500 });
    expect(first.replayed).toBe(false);
    expect(again.status).toBe(201);
    expect(again.json).toEqual(first.json);
    expect(again.replayed).toBe(true);
    expect(await rows('charges', key)).toBe(1);
    expect((await get(`/v1/charges/${encodeURIComponent(key)}`)).json).toMatchObject({ status: 'succeeded' });
  });

  it('the same key with other parameters is refused with 422', async () => {
    const key = `k-${uid()}:charge`;
    expect((await post('/v1/charges', charge, { key })).status).toBe(201);
    const other = await post('/v1/charges', { ...charge, amountCents: 2600 }, { key });
    expect(other.status).toBe(422);
    expect(other.json.error).toBe('idempotency_key_reused');
  });

  it('a declined test card answers 402, and the inquiry says failed', async () => {
    const key = `k-${uid()}:charge`;
    const r = await post('/v1/charges', { ...charge, paymentMethod: 'tok_declined' }, { key });
    expect(r.status).toBe(402);
    expect(r.json).toMatchObject({ status: 'failed', failureCode: 'card_declined' });
    expect((await get(`/v1/charges/${encodeURIComponent(key)}`)).json).toMatchObject({ status: 'failed' });
  });

  it('the inquiry of a key never seen is 404', async () => {
    expect((await get(`/v1/charges/never-${uid()}`)).status).toBe(404);
  });

  it('refunds are keyed, replayable, and never exceed the charge', async () => {
    const key = `k-${uid()}:charge`;
    await post('/v1/charges', charge, { key });
    const refund = await post('/v1/refunds', { chargeKey: key, amountCents: 2000 }, { key: `${key}:refund` });
    expect(refund.status).toBe(201);
    const replay = await post('/v1/refunds', { chargeKey: key, amountCents: 2000 }, { key: `${key}:refund` });
    expect(replay.status).toBe(201);
    expect(replay.replayed).toBe(true);
    const over = await post('/v1/refunds', { chargeKey: key, amountCents: 501 }, { key: `${key}:refund-2` });
    expect(over.status).toBe(422);
    expect(over.json.error).toBe('refund_exceeds_charge');
    expect((await get(`/v1/charges/${encodeURIComponent(key)}`)).json).toMatchObject({ refundedCents: 2000 });
    const none = await post('/v1/refunds', { chargeKey: `nope-${uid()}`, amountCents: 1 }, { key: `r-${uid()}` });
    expect(none.status).toBe(404);
  });

  it('rejects a missing or wrong API key and bad requests with a 4xx naming the field, writing nothing', async () => {
    const key = `k-${uid()}:charge`;
    expect((await post('/v1/charges', charge, { key, apiKey: null })).status).toBe(401);
    expect((await post('/v1/charges', charge, { key, apiKey: 'wrong' })).status).toBe(401);
    const noKey = await post('/v1/charges', charge);
    expect(noKey.status).toBe(400);
    expect(noKey.json.field).toBe('Idempotency-Key');
    const badAmount = await post('/v1/charges', { ...charge, amountCents: -5 }, { key });
    expect(badAmount.status).toBe(400);
    expect(badAmount.json.field).toBe('amountCents');
    const badJson = await post('/v1/charges', '{not json', { key });
    expect(badJson.status).toBe(400);
    expect(await rows('charges', key)).toBe(0);
  });

  it('the same key while the first request is in flight gets 409, and the inquiry says processing meanwhile', async () => {
    const key = `k-${uid()}:charge`;
    const admin = testAdmin();
    await admin.set({ kind: 'delay', target: 'charges', delayMs: 1_500, count: 1, keyPrefix: key });
    try {
      const first = post('/v1/charges', charge, { key });
      await new Promise((r) => setTimeout(r, 400));
      const second = await post('/v1/charges', charge, { key });
      expect(second.status).toBe(409);
      expect(second.json.error).toBe('request_in_flight');
      expect((await get(`/v1/charges/${encodeURIComponent(key)}`)).json).toMatchObject({ status: 'processing' });
      expect((await first).status).toBe(201);
      const third = await post('/v1/charges', charge, { key });
      expect(third.status).toBe(201);
      expect(third.replayed).toBe(true);
      expect(await rows('charges', key)).toBe(1);
    } finally {
      await admin.clear();
    }
  });

  it('fail-before-commit answers 503 and writes nothing; the same key then succeeds once', async () => {
    const key = `k-${uid()}:charge`;
    const admin = testAdmin();
    await admin.set({ kind: 'fail-before-commit', target: 'charges', count: 1, keyPrefix: key });
    try {
      expect((await post('/v1/charges', charge, { key })).status).toBe(503);
      expect(await rows('charges', key)).toBe(0);
      expect((await post('/v1/charges', charge, { key })).status).toBe(201);
      expect(await rows('charges', key)).toBe(1);
    } finally {
      await admin.clear();
    }
  });

  it('counts a fault only where it was applied: two rules on one call, a replay, an outage', async () => {
    const admin = testAdmin();
    const chargeKey = `k-${uid()}:charge`;
    expect((await post('/v1/charges', charge, { key: chargeKey })).status).toBe(201);
    const refundKey = `${chargeKey}:refund`;
    const refund = { chargeKey, amountCents: 2500 };
    const applied = async () => (await admin.list()).applied;
    const before = await applied();
    await admin.set({ kind: 'fail-before-commit', target: 'refunds', count: 1, keyPrefix: refundKey });
    await admin.set({ kind: 'lose-response-after-commit', target: 'refunds', count: 1, keyPrefix: refundKey });
    try {
      // Both rules match the first call; the 503 wins, so the lost response is not applied (nor counted).
      expect((await post('/v1/refunds', refund, { key: refundKey })).status).toBe(503);
      let now = await applied();
      expect(now.refunds['fail-before-commit'] - before.refunds['fail-before-commit']).toBe(1);
      expect(now.refunds['lose-response-after-commit'] - before.refunds['lose-response-after-commit']).toBe(0);
      // The lost response's call was given back: the next call commits the refund and loses its answer.
      await expect(post('/v1/refunds', refund, { key: refundKey })).rejects.toThrow();
      expect(await rows('refunds', refundKey)).toBe(1);
      now = await applied();
      expect(now.refunds['lose-response-after-commit'] - before.refunds['lose-response-after-commit']).toBe(1);
      // A delay rule matched by a charge replay never waits: not applied, not counted.
      await admin.set({ kind: 'delay', target: 'charges', delayMs: 5_000, count: 1, keyPrefix: chargeKey });
      expect((await post('/v1/charges', charge, { key: chargeKey })).replayed).toBe(true);
      expect((await applied()).charges.delay - before.charges.delay).toBe(0);
      // An outage refuses every call of its target, each one counted.
      await admin.set({ kind: 'outage', target: 'inquiries', forMs: 60_000 });
      expect((await get(`/v1/charges/${encodeURIComponent(chargeKey)}`)).status).toBe(503);
      expect((await get(`/v1/charges/${encodeURIComponent(chargeKey)}`)).status).toBe(503);
      expect((await applied()).inquiries.outage - before.inquiries.outage).toBe(2);
    } finally {
      await admin.clear();
    }
    expect((await get(`/v1/charges/${encodeURIComponent(chargeKey)}`)).status).toBe(200);
  });

  it('the admin API needs its own key and names a bad field', async () => {
    const res = await fetch(new URL('/admin/faults', inject('providerAdminUrl')), {
      headers: { authorization: `Bearer ${inject('providerApiKey')}` },
    });
    expect(res.status).toBe(401);
    await expect(testAdmin().set({ kind: 'explode' as never, count: 1 } as never)).rejects.toMatchObject({
      status: 400,
      body: { field: 'kind' },
    });
  });
});
