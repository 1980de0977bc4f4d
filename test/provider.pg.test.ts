/** The payment provider, as a separate process over HTTP, with its state in Postgres. */
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { ProviderHttpError } from '../provider/client';
import { testAdmin, testPool, testProvider, uid } from './support/helpers';

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

const rows = async (table: 'charges' | 'refunds' | 'closed_keys', key: string): Promise<number> =>
  (await db.query({ text: `SELECT 1 FROM provider.${table} WHERE idempotency_key = $1`, values: [key] })).rowCount ?? 0;

/** The technical cancel: no body unless one is given (then as JSON, unless `type` says otherwise). */
async function cancel(
  key: string,
  opts: { body?: string; type?: string; apiKey?: string | null } = {},
): Promise<{ status: number; json: Record<string, unknown> }> {
  const headers: Record<string, string> = {};
  if (opts.apiKey !== null) headers.authorization = `Bearer ${opts.apiKey ?? inject('providerApiKey')}`;
  if (opts.body !== undefined) headers['content-type'] = opts.type ?? 'application/json';
  const res = await fetch(new URL(`/v1/charges/${encodeURIComponent(key)}/cancel`, inject('providerUrl')), {
    method: 'POST',
    headers,
    body: opts.body,
  });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}

/** Waits until some session waits for a lock: `relation` on provider.charges, or the key's advisory lock. */
async function waitForLockWait(kind: 'relation' | 'advisory'): Promise<void> {
  const text =
    kind === 'relation'
      ? `SELECT count(*)::int AS n FROM pg_locks WHERE NOT granted AND locktype = 'relation' AND relation = 'provider.charges'::regclass`
      : `SELECT count(*)::int AS n FROM pg_locks WHERE NOT granted AND locktype = 'advisory' AND objsubid = 2`;
  for (let i = 0; i < 200; i++) {
    if ((await db.query<{ n: number }>(text)).rows[0]!.n > 0) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`no session waited for the ${kind} lock within 10 s`);
}

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

describe('the technical cancel (POST /v1/charges/{key}/cancel)', () => {
  const charge = { amountCents: 2500, currency: 'USD', paymentMethod: 'tok_visa' };
  const inquiry = (key: string) => get(`/v1/charges/${encodeURIComponent(key)}`);

  it('closes a key never charged; a later charge under it is refused with 410 and writes nothing', async () => {
    const key = `k-${uid()}:charge`;
    const closed = await cancel(key);
    expect(closed.status).toBe(200);
    expect(closed.json).toMatchObject({ outcome: 'closed', idempotencyKey: key, status: 'closed' });
    expect(Number.isNaN(Date.parse(String(closed.json.closedAt)))).toBe(false);
    expect(await rows('closed_keys', key)).toBe(1);
    const refused = await post('/v1/charges', charge, { key });
    expect(refused.status).toBe(410);
    expect(refused.json.error).toBe('key_closed');
    expect(await rows('charges', key)).toBe(0);
    // A retry of the same charge is refused the same way; the inquiry reports the key closed.
    expect((await post('/v1/charges', charge, { key })).status).toBe(410);
    const asked = await inquiry(key);
    expect(asked.status).toBe(200);
    expect(asked.json).toEqual({ idempotencyKey: key, status: 'closed', closedAt: closed.json.closedAt });
    expect((await post('/v1/refunds', { chargeKey: key, amountCents: 1 }, { key: `${key}:refund` })).status).toBe(404);
    expect(await rows('charges', key)).toBe(0);
  });

  it('is idempotent: a closed key answers closed again (with an empty JSON body too), still one row', async () => {
    const key = `k-${uid()}:charge`;
    const first = await cancel(key);
    const again = await cancel(key, { body: '{}' });
    expect(again.status).toBe(200);
    expect(again.json).toEqual(first.json);
    expect(await rows('closed_keys', key)).toBe(1);
  });

  it('of a key with a charge changes nothing and answers the charge (succeeded with its refunds, or failed)', async () => {
    const key = `k-${uid()}:charge`;
    expect((await post('/v1/charges', charge, { key })).status).toBe(201);
    expect((await post('/v1/refunds', { chargeKey: key, amountCents: 500 }, { key: `${key}:refund` })).status).toBe(
      201,
    );
    const before = (await inquiry(key)).json;
    const found = await cancel(key);
    expect(found.status).toBe(200);
    expect(found.json).toEqual({ outcome: 'found', charge: before });
    expect(found.json.charge).toMatchObject({ status: 'succeeded', amountCents: 2500, refundedCents: 500 });
    expect(await rows('closed_keys', key)).toBe(0);
    expect((await inquiry(key)).json).toEqual(before);
    const replay = await post('/v1/charges', charge, { key });
    expect(replay.status).toBe(201);
    expect(replay.replayed).toBe(true);

    const declined = `k-${uid()}:charge`;
    expect((await post('/v1/charges', { ...charge, paymentMethod: 'tok_declined' }, { key: declined })).status).toBe(
      402,
    );
    expect((await cancel(declined)).json).toMatchObject({ outcome: 'found', charge: { status: 'failed' } });
    expect(await rows('closed_keys', declined)).toBe(0);
  });

  it('refuses a wrong key or a body other than {} with a 4xx, closing nothing', async () => {
    const key = `k-${uid()}:charge`;
    expect((await cancel(key, { apiKey: null })).status).toBe(401);
    expect((await cancel(key, { apiKey: 'wrong-key-123' })).status).toBe(401);
    const withBody = await cancel(key, { body: '{"reason":"x"}' });
    expect(withBody.status).toBe(400);
    expect(withBody.json.field).toBe('body');
    expect((await cancel(key, { body: '[]' })).status).toBe(400);
    expect((await cancel(key, { body: '{nope' })).status).toBe(400);
    expect((await cancel(key, { body: 'x', type: 'text/plain' })).status).toBe(415);
    expect(await rows('closed_keys', key)).toBe(0);
    expect((await inquiry(key)).status).toBe(404);
  });

  it('meets the fault switch under target cancels: fail-before-commit closes nothing, lose-response closes', async () => {
    const key = `k-${uid()}:charge`;
    const admin = testAdmin();
    await admin.set({ kind: 'fail-before-commit', target: 'cancels', count: 1, keyPrefix: key });
    try {
      expect((await cancel(key)).status).toBe(503);
      expect(await rows('closed_keys', key)).toBe(0);
      await admin.set({ kind: 'lose-response-after-commit', target: 'cancels', count: 1, keyPrefix: key });
      await expect(cancel(key)).rejects.toThrow();
      expect(await rows('closed_keys', key)).toBe(1);
      expect((await admin.list()).applied.cancels['lose-response-after-commit']).toBeGreaterThanOrEqual(1);
    } finally {
      await admin.clear();
    }
    expect((await cancel(key)).json).toMatchObject({ outcome: 'closed' });
  });

  it('the client: cancelCharge and getCharge report a closed key, charge gets ProviderHttpError 410', async () => {
    const provider = testProvider();
    const key = `k-${uid()}:charge`;
    expect(await provider.getCharge(key)).toBeUndefined();
    expect(await provider.cancelCharge(key)).toEqual({ outcome: 'closed' });
    expect(await provider.getCharge(key)).toMatchObject({ idempotencyKey: key, status: 'closed' });
    const refused = await provider.charge(key, charge).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(ProviderHttpError);
    expect(refused).toMatchObject({ status: 410, body: { error: 'key_closed' } });
    const paid = `k-${uid()}:charge`;
    const made = await provider.charge(paid, charge);
    expect(await provider.cancelCharge(paid)).toEqual({ outcome: 'found', charge: made.charge });
  });

  /** One race, with provider.charges locked (ACCESS EXCLUSIVE) by the owner until both requests wait. */
  async function raceUnderTableLock(first: 'charge' | 'cancel') {
    const key = `k-${uid()}:charge`;
    const locker = await db.connect();
    let charged: ReturnType<typeof post> | undefined;
    let cancelled: ReturnType<typeof cancel> | undefined;
    try {
      await locker.query('BEGIN');
      await locker.query('LOCK TABLE provider.charges IN ACCESS EXCLUSIVE MODE');
      if (first === 'charge') {
        charged = post('/v1/charges', charge, { key });
        await waitForLockWait('relation'); // the charge's first write waits for the table
        cancelled = cancel(key);
      } else {
        cancelled = cancel(key);
        await waitForLockWait('relation'); // the cancel's look for a charge waits for the table
        charged = post('/v1/charges', charge, { key });
      }
      await waitForLockWait('advisory'); // the second waits for the key, held by the first
    } finally {
      await locker.query('COMMIT').catch(() => undefined);
      locker.release();
    }
    const [c, x] = await Promise.all([charged, cancelled]);
    return {
      key,
      charge: c,
      cancel: x,
      charges: await rows('charges', key),
      closed: await rows('closed_keys', key),
    };
  }

  it('a charge blocked behind a table lock, then a cancel: the charge wins and the cancel answers found', async () => {
    const r = await raceUnderTableLock('charge');
    expect(r.charge.status).toBe(201);
    expect(r.cancel.status).toBe(200);
    // Decided in the charge's own transaction: the cancel never sees it processing.
    expect(r.cancel.json).toMatchObject({ outcome: 'found', charge: { status: 'succeeded', amountCents: 2500 } });
    expect({ charges: r.charges, closed: r.closed }).toEqual({ charges: 1, closed: 0 });
  });

  it('a cancel blocked behind a table lock, then a charge: the key is closed and the charge refused', async () => {
    const r = await raceUnderTableLock('cancel');
    expect(r.cancel.json).toMatchObject({ outcome: 'closed' });
    expect(r.charge.status).toBe(410);
    expect(r.charge.json.error).toBe('key_closed');
    expect({ charges: r.charges, closed: r.closed }).toEqual({ charges: 0, closed: 1 });
    expect((await inquiry(r.key)).json).toMatchObject({ status: 'closed' });
  });

  it('charges and cancels racing freely: each key ends charged (cancel found it) or closed (charge refused), never both', async () => {
    const keys = Array.from({ length: 24 }, () => `k-${uid()}:charge`);
    const results = await Promise.all(
      keys.map(async (key, i) => {
        const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));
        const [c, x] = await Promise.all([
          pause(i % 3).then(() => post('/v1/charges', charge, { key })),
          pause((i * 7) % 4).then(() => cancel(key)),
        ]);
        return { c, x, charges: await rows('charges', key), closed: await rows('closed_keys', key) };
      }),
    );
    for (const { c, x, charges, closed } of results) {
      expect(x.status).toBe(200);
      if (x.json.outcome === 'found') {
        expect(c.status).toBe(201);
        expect({ charges, closed }).toEqual({ charges: 1, closed: 0 });
      } else {
        expect(x.json.outcome).toBe('closed');
        expect(c.status).toBe(410);
        expect({ charges, closed }).toEqual({ charges: 0, closed: 1 });
      }
    }
  });
});
