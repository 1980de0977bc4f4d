/**
 * The payment provider's authorizations, as a separate process over HTTP with its ledger in Postgres:
 * holds, captures, voids, their inquiries, the technical cancel of an authorization (before and after
 * a late one), refunds of captures, races of one key, expiry (a provider of its own with a short
 * PROVIDER_AUTH_EXPIRY_MS), and every fault kind on the new targets.
 */
import type { ChildProcess } from 'node:child_process';
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { startProviderProcess, startTsProcess, stopProcess } from '../platform/processes';
import type { Authorization, Capture } from '../provider/api';
import {
  createProviderClient,
  ProviderHttpError,
  ProviderUnreachableError,
  type AuthorizationClient,
  type ProviderAdmin,
  type ProviderClient,
} from '../provider/client';
import { readProviderConfig } from '../provider/config';
import { DEFAULT_AUTH_EXPIRY_MS } from '../provider/defaults';
import { AUTHORIZATION_FAULT_TARGETS, parseFaultRequest, type FaultTarget } from '../provider/faults';
import { testAdmin, testPool, uid } from './support/helpers';

let db: Pool;
beforeAll(() => {
  db = testPool();
});
afterAll(async () => {
  await db.end();
});

type Json = Record<string, unknown>;
interface Answer {
  status: number;
  json: Json;
  replayed: boolean;
}

/** One request to the payment API (`base`, the shared provider unless told): JSON unless `raw` says otherwise. */
async function send(
  method: 'GET' | 'POST',
  path: string,
  opts: { body?: unknown; raw?: string; type?: string; key?: string; apiKey?: string | null; base?: string } = {},
): Promise<Answer> {
  const headers: Record<string, string> = {};
  if (opts.apiKey !== null) headers.authorization = `Bearer ${opts.apiKey ?? inject('providerApiKey')}`;
  if (opts.key !== undefined) headers['idempotency-key'] = opts.key;
  const body = opts.raw ?? (opts.body === undefined ? undefined : JSON.stringify(opts.body));
  if (body !== undefined) headers['content-type'] = opts.type ?? 'application/json';
  const res = await fetch(new URL(path, opts.base ?? inject('providerUrl')), { method, headers, body });
  return {
    status: res.status,
    json: (await res.json()) as Json,
    replayed: res.headers.get('idempotent-replayed') === 'true',
  };
}

const enc = encodeURIComponent;
const card = { amountCents: 5000, currency: 'USD', paymentMethod: 'tok_visa' };
const authorize = (key: string, body: unknown = card, base?: string) =>
  send('POST', '/v1/authorizations', { key, body, base });
const inquire = (key: string, base?: string) => send('GET', `/v1/authorizations/${enc(key)}`, { base });
const capture = (authKey: string, captureKey: string, amountCents: number, base?: string) =>
  send('POST', `/v1/authorizations/${enc(authKey)}/capture`, { key: captureKey, body: { amountCents }, base });
const inquireCapture = (captureKey: string) => send('GET', `/v1/captures/${enc(captureKey)}`);
const voidIt = (key: string, base?: string) => send('POST', `/v1/authorizations/${enc(key)}/void`, { base });
const cancel = (key: string) => send('POST', `/v1/authorizations/${enc(key)}/cancel`);
const refund = (key: string, body: unknown) => send('POST', '/v1/refunds', { key, body });

type Table = 'authorizations' | 'captures' | 'closed_authorization_keys' | 'refunds';
const rows = async (table: Table, key: string): Promise<number> =>
  (await db.query({ text: `SELECT 1 FROM provider.${table} WHERE idempotency_key = $1`, values: [key] })).rowCount ?? 0;
const voids = async (key: string): Promise<{ source: string }[]> =>
  (
    await db.query<{ source: string }>({
      text: 'SELECT source FROM provider.voids WHERE authorization_key = $1',
      values: [key],
    })
  ).rows;

const newKey = (what = 'authorize'): string => `a-${uid()}:${what}`;
const client = (): ProviderClient & AuthorizationClient =>
  createProviderClient({ baseUrl: inject('providerUrl'), apiKey: inject('providerApiKey'), timeoutMs: 5_000 });

/**
 * The key `$1`'s advisory lock (provider/idempotency.ts's lockKey) as pg_locks row `l` shows it: two
 * int4s, shown as unsigned oids, in this database. Other tests share the database and the provider:
 * only a lock of this key tells this test's sessions apart from theirs.
 */
const keyLock = (l: string): string =>
  `${l}.locktype = 'advisory' AND ${l}.objsubid = 2
   AND ${l}.database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND ${l}.classid::bigint = (hashtext('provider.authorization-key')::bigint & 4294967295)
   AND ${l}.objid::bigint = (hashtext($1)::bigint & 4294967295)`;

/**
 * Waits until a session of `key` waits for a lock: `relation`, on provider.authorizations while it
 * holds the key's lock; or `advisory`, the key's lock itself.
 */
async function waitForLockWait(kind: 'relation' | 'advisory', key: string): Promise<void> {
  const text =
    kind === 'relation'
      ? `SELECT count(*)::int AS n FROM pg_locks w JOIN pg_locks k ON k.pid = w.pid AND k.granted AND ${keyLock('k')}
           WHERE NOT w.granted AND w.locktype = 'relation' AND w.relation = 'provider.authorizations'::regclass`
      : `SELECT count(*)::int AS n FROM pg_locks l WHERE NOT l.granted AND ${keyLock('l')}`;
  for (let i = 0; i < 200; i++) {
    if ((await db.query<{ n: number }>({ text, values: [key] })).rows[0]!.n > 0) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`no session of ${key} waited for the ${kind} lock within 10 s`);
}

describe('authorizations (POST /v1/authorizations)', () => {
  it('holds once per key until its expiry (7 days by default); a replay returns the first answer', async () => {
    const key = newKey();
    const before = Date.now();
    const first = await authorize(key, { ...card, reference: 'order-1' });
    expect(first.status).toBe(201);
    expect(first.replayed).toBe(false);
    expect(first.json).toMatchObject({
      idempotencyKey: key,
      status: 'authorized',
      amountCents: 5000,
      currency: 'USD',
      capturedCents: 0,
      refundedCents: 0,
    });
    const expiresAt = Date.parse(String(first.json.expiresAt));
    expect(expiresAt).toBeGreaterThanOrEqual(before + DEFAULT_AUTH_EXPIRY_MS - 60_000);
    expect(expiresAt).toBeLessThanOrEqual(Date.now() + DEFAULT_AUTH_EXPIRY_MS + 60_000);
    const again = await authorize(key, { ...card, reference: 'order-1' });
    expect(again.status).toBe(201);
    expect(again.replayed).toBe(true);
    expect(again.json).toEqual(first.json);
    expect(await rows('authorizations', key)).toBe(1);
    const asked = await inquire(key);
    expect(asked.status).toBe(200);
    expect(asked.json).toEqual(first.json);
  });

  it('the same key with other parameters is refused with 422, and the hold is unchanged', async () => {
    const key = newKey();
    expect((await authorize(key)).status).toBe(201);
    for (const other of [
      { ...card, amountCents: 5001 },
      { ...card, currency: 'EUR' },
      { ...card, reference: 'x' },
    ]) {
      const r = await authorize(key, other);
      expect(r.status).toBe(422);
      expect(r.json.error).toBe('idempotency_key_reused');
    }
    expect((await inquire(key)).json).toMatchObject({ status: 'authorized', amountCents: 5000 });
  });

  it('declined test cards answer 402 (nothing held, no expiry), again on a replay; the inquiry says declined', async () => {
    for (const [paymentMethod, failureCode] of [
      ['tok_declined', 'card_declined'],
      ['tok_insufficient_funds', 'insufficient_funds'],
    ]) {
      const key = newKey();
      const r = await authorize(key, { ...card, paymentMethod });
      expect(r.status).toBe(402);
      expect(r.json).toMatchObject({ status: 'declined', failureCode });
      expect(r.json).not.toHaveProperty('expiresAt');
      const replay = await authorize(key, { ...card, paymentMethod });
      expect(replay.status).toBe(402);
      expect(replay.replayed).toBe(true);
      expect((await inquire(key)).json).toMatchObject({ status: 'declined', failureCode });
    }
  });

  it('the inquiry of a key never seen is 404, of a malformed key 400', async () => {
    const never = await inquire(`never-${uid()}`);
    expect(never.status).toBe(404);
    expect(never.json.error).toBe('not_found');
    const bad = await send('GET', '/v1/authorizations/%ZZ');
    expect(bad.status).toBe(400);
    expect(bad.json.field).toBe('key');
  });

  it('refuses a missing or wrong API key and bad requests with a 4xx naming the field, writing nothing', async () => {
    const key = newKey();
    expect((await send('POST', '/v1/authorizations', { key, body: card, apiKey: null })).status).toBe(401);
    expect((await send('POST', '/v1/authorizations', { key, body: card, apiKey: 'wrong-key-123' })).status).toBe(401);
    const noKey = await send('POST', '/v1/authorizations', { body: card });
    expect(noKey.status).toBe(400);
    expect(noKey.json.field).toBe('Idempotency-Key');
    const cases: [unknown, string][] = [
      [{ ...card, amountCents: -5 }, 'amountCents'],
      [{ ...card, amountCents: 1.5 }, 'amountCents'],
      [{ ...card, currency: 'usd' }, 'currency'],
      [{ ...card, paymentMethod: '' }, 'paymentMethod'],
      [{ ...card, hold: true }, 'hold'],
      [{ amountCents: 5000, currency: 'USD' }, 'paymentMethod'],
    ];
    for (const [body, field] of cases) {
      const r = await authorize(key, body);
      expect(r.status).toBe(400);
      expect(r.json).toMatchObject({ error: 'invalid_request', field });
      expect(String(r.json.message)).toMatch(new RegExp(`^${field}: `));
    }
    expect((await send('POST', '/v1/authorizations', { key, raw: '{nope' })).status).toBe(400);
    expect((await send('POST', '/v1/authorizations', { key, raw: 'x', type: 'text/plain' })).status).toBe(415);
    expect(await rows('authorizations', key)).toBe(0);
  });

  it('while the first request is in flight: the same key gets 409, the inquiry and the cancel say processing, capture and void wait', async () => {
    const key = newKey();
    const admin = testAdmin();
    await admin.set({ kind: 'delay', target: 'authorizations', delayMs: 1_500, count: 1, keyPrefix: key });
    try {
      const first = authorize(key);
      await new Promise((r) => setTimeout(r, 400));
      const second = await authorize(key);
      expect(second.status).toBe(409);
      expect(second.json.error).toBe('request_in_flight');
      expect((await inquire(key)).json).toMatchObject({ status: 'processing' });
      const cancelled = await cancel(key);
      expect(cancelled.json).toMatchObject({ outcome: 'found', authorization: { status: 'processing' } });
      const captured = await capture(key, `${key}:capture`, 5000);
      expect(captured.status).toBe(409);
      expect(captured.json.error).toBe('authorization_processing');
      const voided = await voidIt(key);
      expect(voided.status).toBe(409);
      expect(voided.json.error).toBe('authorization_processing');
      expect((await first).status).toBe(201);
      const third = await authorize(key);
      expect(third.replayed).toBe(true);
      expect(third.json.status).toBe('authorized');
      expect(await rows('authorizations', key)).toBe(1);
      expect(await rows('captures', `${key}:capture`)).toBe(0);
      expect(await voids(key)).toEqual([]);
    } finally {
      await admin.clear();
    }
  });

  it('eight requests racing with one key: one hold; with different bodies, one winner and the rest 409 or 422', async () => {
    const same = newKey();
    const alike = await Promise.all(Array.from({ length: 8 }, () => authorize(same)));
    expect(alike.filter((r) => r.status === 201 && !r.replayed)).toHaveLength(1);
    for (const r of alike) expect([201, 409]).toContain(r.status);
    expect(await rows('authorizations', same)).toBe(1);

    const differ = newKey();
    const bodies = Array.from({ length: 8 }, (_, i) => ({ ...card, amountCents: 1000 + i }));
    const answers = await Promise.all(bodies.map((b) => authorize(differ, b)));
    const won = answers.filter((r) => r.status === 201 && !r.replayed);
    expect(won).toHaveLength(1);
    for (const r of answers) if (r !== won[0]) expect([409, 422]).toContain(r.status);
    expect(await rows('authorizations', differ)).toBe(1);
    expect((await inquire(differ)).json.amountCents).toBe(won[0]!.json.amountCents);
  });
});

describe('captures (POST /v1/authorizations/{key}/capture)', () => {
  it('captures once per capture key: a replay returns the first answer; both inquiries say captured', async () => {
    const key = newKey();
    const captureKey = `${key}:capture`;
    await authorize(key);
    const first = await capture(key, captureKey, 5000);
    expect(first.status).toBe(201);
    expect(first.replayed).toBe(false);
    expect(first.json).toEqual({
      idempotencyKey: captureKey,
      authorizationKey: key,
      status: 'succeeded',
      amountCents: 5000,
      currency: 'USD',
      refundedCents: 0,
    });
    const again = await capture(key, captureKey, 5000);
    expect(again.status).toBe(201);
    expect(again.replayed).toBe(true);
    expect(again.json).toEqual(first.json);
    expect((await inquireCapture(captureKey)).json).toEqual(first.json);
    expect((await inquire(key)).json).toMatchObject({ status: 'captured', captureKey, capturedCents: 5000 });
    expect(await rows('captures', captureKey)).toBe(1);
    // The authorization's own replay says what became of it.
    expect((await authorize(key)).json).toMatchObject({ status: 'captured', capturedCents: 5000 });
  });

  it('a partial capture takes less than the hold (the rest is released); over the hold is a 422 that writes nothing', async () => {
    const key = newKey();
    await authorize(key);
    const over = await capture(key, `${key}:capture`, 5001);
    expect(over.status).toBe(422);
    expect(over.json).toMatchObject({ error: 'capture_exceeds_authorization', field: 'amountCents' });
    expect(await rows('captures', `${key}:capture`)).toBe(0);
    expect((await inquireCapture(`${key}:capture`)).status).toBe(404);
    // Nothing was written: the same capture key may still be used, for an amount that fits.
    const part = await capture(key, `${key}:capture`, 3000);
    expect(part.status).toBe(201);
    expect((await inquire(key)).json).toMatchObject({ status: 'captured', amountCents: 5000, capturedCents: 3000 });
  });

  it('one capture per authorization: a second capture key gets 409 already_captured, kept as a failed capture', async () => {
    const key = newKey();
    await authorize(key);
    expect((await capture(key, `${key}:capture`, 2000)).status).toBe(201);
    const second = await capture(key, `${key}:capture-2`, 1000);
    expect(second.status).toBe(409);
    expect(second.json.error).toBe('already_captured');
    expect(second.replayed).toBe(false);
    const replay = await capture(key, `${key}:capture-2`, 1000);
    expect(replay.status).toBe(409);
    expect(replay.json).toEqual(second.json);
    expect(replay.replayed).toBe(true);
    expect((await inquireCapture(`${key}:capture-2`)).json).toMatchObject({
      status: 'failed',
      failureCode: 'already_captured',
      authorizationKey: key,
      amountCents: 1000,
    });
    expect((await inquire(key)).json).toMatchObject({ captureKey: `${key}:capture`, capturedCents: 2000 });
  });

  it('a capture key reused with another amount or for another authorization is refused with 422', async () => {
    const key = newKey();
    const other = newKey();
    await authorize(key);
    await authorize(other);
    expect((await capture(key, `${key}:capture`, 5000)).status).toBe(201);
    const amount = await capture(key, `${key}:capture`, 4000);
    expect(amount.status).toBe(422);
    expect(amount.json.error).toBe('idempotency_key_reused');
    const elsewhere = await capture(other, `${key}:capture`, 5000);
    expect(elsewhere.status).toBe(422);
    expect(elsewhere.json.error).toBe('idempotency_key_reused');
    expect((await inquire(other)).json.status).toBe('authorized');
  });

  it('of a voided or a declined authorization fails with its own error, kept under the capture key', async () => {
    const voided = newKey();
    await authorize(voided);
    expect((await voidIt(voided)).status).toBe(200);
    const a = await capture(voided, `${voided}:capture`, 5000);
    expect(a.status).toBe(409);
    expect(a.json).toMatchObject({ error: 'authorization_voided' });
    expect((await inquireCapture(`${voided}:capture`)).json).toMatchObject({
      status: 'failed',
      failureCode: 'authorization_voided',
    });
    expect((await inquire(voided)).json).toMatchObject({ status: 'voided', capturedCents: 0 });

    const declined = newKey();
    await authorize(declined, { ...card, paymentMethod: 'tok_declined' });
    const d = await capture(declined, `${declined}:capture`, 5000);
    expect(d.status).toBe(409);
    expect(d.json.error).toBe('authorization_declined');
    expect((await inquireCapture(`${declined}:capture`)).json).toMatchObject({
      status: 'failed',
      failureCode: 'authorization_declined',
    });
  });

  it('of no authorization is a 404 that writes nothing; bad requests are 4xx naming the field', async () => {
    const key = newKey();
    const none = await capture(key, `${key}:capture`, 100);
    expect(none.status).toBe(404);
    expect(none.json.error).toBe('authorization_not_found');
    expect(await rows('captures', `${key}:capture`)).toBe(0);
    expect((await inquireCapture(`${key}:capture`)).status).toBe(404);

    await authorize(key);
    const path = `/v1/authorizations/${enc(key)}/capture`;
    const noKey = await send('POST', path, { body: { amountCents: 100 } });
    expect(noKey.status).toBe(400);
    expect(noKey.json.field).toBe('Idempotency-Key');
    for (const [body, field] of [
      [{ amountCents: 0 }, 'amountCents'],
      [{}, 'amountCents'],
      [{ amountCents: 100, currency: 'USD' }, 'currency'],
    ] as const) {
      const r = await send('POST', path, { key: `${key}:capture`, body });
      expect(r.status).toBe(400);
      expect(r.json.field).toBe(field);
    }
    expect(await rows('captures', `${key}:capture`)).toBe(0);
    expect((await inquire(key)).json.status).toBe('authorized');
  });

  it('races: one capture key sent 6 times at once is one capture; two capture keys at once, one wins', async () => {
    const key = newKey();
    await authorize(key);
    const same = await Promise.all(Array.from({ length: 6 }, () => capture(key, `${key}:capture`, 5000)));
    expect(same.filter((r) => r.status === 201 && !r.replayed)).toHaveLength(1);
    for (const r of same) expect([201, 409]).toContain(r.status);
    for (const r of same.filter((x) => x.status === 409)) expect(r.json.error).toBe('request_in_flight');
    expect(await rows('captures', `${key}:capture`)).toBe(1);

    const two = newKey();
    await authorize(two);
    const [x, y] = await Promise.all([capture(two, `${two}:capture-x`, 5000), capture(two, `${two}:capture-y`, 5000)]);
    expect([x.status, y.status].sort()).toEqual([201, 409]);
    expect([x, y].find((r) => r.status === 409)!.json.error).toBe('already_captured');
    const { rows: kept } = await db.query<{ status: string }>({
      text: `SELECT status FROM provider.captures WHERE authorization_key = $1 ORDER BY status`,
      values: [two],
    });
    expect(kept.map((r) => r.status)).toEqual(['failed', 'succeeded']);
  });

  it('a capture and a void racing: whichever comes first wins, the other is refused with its own error', async () => {
    const keys = Array.from({ length: 12 }, () => newKey());
    await Promise.all(keys.map((k) => authorize(k)));
    const results = await Promise.all(
      keys.map(async (key, i) => {
        const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));
        const [c, v] = await Promise.all([
          pause(i % 3).then(() => capture(key, `${key}:capture`, 5000)),
          pause((i * 5) % 4).then(() => voidIt(key)),
        ]);
        return { key, c, v, voids: (await voids(key)).length, status: (await inquire(key)).json.status };
      }),
    );
    for (const { c, v, voids: n, status } of results) {
      if (c.status === 201) {
        expect(v.status).toBe(409);
        expect(v.json.error).toBe('authorization_captured');
        expect({ n, status }).toEqual({ n: 0, status: 'captured' });
      } else {
        expect(c.status).toBe(409);
        expect(c.json.error).toBe('authorization_voided');
        expect(v.status).toBe(200);
        expect({ n, status }).toEqual({ n: 1, status: 'voided' });
      }
    }
  });
});

describe('voids (POST /v1/authorizations/{key}/void)', () => {
  it('releases the hold; a second void returns it again, still one void', async () => {
    const key = newKey();
    await authorize(key);
    const first = await voidIt(key);
    expect(first.status).toBe(200);
    expect(first.replayed).toBe(false);
    expect(first.json).toMatchObject({ idempotencyKey: key, status: 'voided', amountCents: 5000, capturedCents: 0 });
    expect(Number.isNaN(Date.parse(String(first.json.voidedAt)))).toBe(false);
    const again = await voidIt(key);
    expect(again.status).toBe(200);
    expect(again.replayed).toBe(true);
    expect(again.json).toEqual(first.json);
    expect(await voids(key)).toEqual([{ source: 'void' }]);
    expect((await inquire(key)).json).toEqual(first.json);
  });

  it('of a captured authorization is refused (409 authorization_captured); of a declined one answers it as it is', async () => {
    const key = newKey();
    await authorize(key);
    await capture(key, `${key}:capture`, 5000);
    const refused = await voidIt(key);
    expect(refused.status).toBe(409);
    expect(refused.json.error).toBe('authorization_captured');
    expect(await voids(key)).toEqual([]);
    expect((await inquire(key)).json.status).toBe('captured');

    const declined = newKey();
    await authorize(declined, { ...card, paymentMethod: 'tok_declined' });
    const d = await voidIt(declined);
    expect(d.status).toBe(200);
    expect(d.json).toMatchObject({ status: 'declined', failureCode: 'card_declined' });
    expect(await voids(declined)).toEqual([]);
  });

  it('of no authorization is a 404; a body other than {} a 400; a wrong API key a 401; none writes', async () => {
    const key = newKey();
    const none = await voidIt(key);
    expect(none.status).toBe(404);
    expect(none.json.error).toBe('authorization_not_found');
    await authorize(key);
    const withBody = await send('POST', `/v1/authorizations/${enc(key)}/void`, { raw: '{"reason":"x"}' });
    expect(withBody.status).toBe(400);
    expect(withBody.json.field).toBe('body');
    expect((await send('POST', `/v1/authorizations/${enc(key)}/void`, { apiKey: 'wrong-key-123' })).status).toBe(401);
    expect((await send('POST', `/v1/authorizations/${enc(key)}/void`, { raw: '{}' })).status).toBe(200);
    expect(await voids(key)).toEqual([{ source: 'void' }]);
  });
});

describe('the technical cancel of an authorization (POST /v1/authorizations/{key}/cancel)', () => {
  it('closes a key never authorized; a late authorization is refused with 410 and writes nothing', async () => {
    const key = newKey();
    const closed = await cancel(key);
    expect(closed.status).toBe(200);
    expect(closed.json).toMatchObject({ outcome: 'closed', idempotencyKey: key, status: 'closed' });
    expect(await rows('closed_authorization_keys', key)).toBe(1);
    const late = await authorize(key);
    expect(late.status).toBe(410);
    expect(late.json.error).toBe('key_closed');
    expect((await authorize(key)).status).toBe(410);
    expect(await rows('authorizations', key)).toBe(0);
    expect((await inquire(key)).json).toEqual({
      idempotencyKey: key,
      status: 'closed',
      closedAt: closed.json.closedAt,
    });
    expect((await cancel(key)).json).toEqual(closed.json); // idempotent, one row
    expect(await rows('closed_authorization_keys', key)).toBe(1);
    const v = await voidIt(key);
    expect(v.status).toBe(404);
    expect(String(v.json.message)).toMatch(/closed by a cancel/);
    expect((await capture(key, `${key}:capture`, 100)).status).toBe(404);
    // A closed authorization key closes nothing else: the same string is still free as a charge key.
    const charge = await send('POST', '/v1/charges', { key, body: card });
    expect(charge.status).toBe(201);
  });

  it('voids an authorization it finds (found, voided); again the same; a capture after it fails', async () => {
    const key = newKey();
    await authorize(key);
    const found = await cancel(key);
    expect(found.status).toBe(200);
    expect(found.json).toMatchObject({ outcome: 'found', authorization: { idempotencyKey: key, status: 'voided' } });
    expect(await voids(key)).toEqual([{ source: 'cancel' }]);
    expect(await rows('closed_authorization_keys', key)).toBe(0);
    expect((await cancel(key)).json).toEqual(found.json);
    expect((await capture(key, `${key}:capture`, 5000)).json.error).toBe('authorization_voided');
    expect((await authorize(key)).json).toMatchObject({ status: 'voided' });
  });

  it('leaves a captured or a declined authorization as it is, and answers it', async () => {
    const key = newKey();
    await authorize(key);
    await capture(key, `${key}:capture`, 4000);
    expect((await cancel(key)).json).toMatchObject({
      outcome: 'found',
      authorization: { status: 'captured', capturedCents: 4000 },
    });
    expect(await voids(key)).toEqual([]);
    const declined = newKey();
    await authorize(declined, { ...card, paymentMethod: 'tok_insufficient_funds' });
    expect((await cancel(declined)).json).toMatchObject({ outcome: 'found', authorization: { status: 'declined' } });
    expect(await rows('closed_authorization_keys', declined)).toBe(0);
  });

  it('refuses a wrong key or a body other than {} with a 4xx, closing nothing', async () => {
    const key = newKey();
    const path = `/v1/authorizations/${enc(key)}/cancel`;
    expect((await send('POST', path, { apiKey: null })).status).toBe(401);
    const withBody = await send('POST', path, { raw: '{"why":1}' });
    expect(withBody.status).toBe(400);
    expect(withBody.json.field).toBe('body');
    expect((await send('POST', path, { raw: '[]' })).status).toBe(400);
    expect((await send('POST', path, { raw: 'x', type: 'text/plain' })).status).toBe(415);
    expect(await rows('closed_authorization_keys', key)).toBe(0);
  });

  /** One race, with provider.authorizations locked (ACCESS EXCLUSIVE) by the owner until both requests wait. */
  async function raceUnderTableLock(first: 'authorize' | 'cancel') {
    const key = newKey();
    const locker = await db.connect();
    let held: Promise<Answer> | undefined;
    let cancelled: Promise<Answer> | undefined;
    try {
      await locker.query('BEGIN');
      await locker.query('LOCK TABLE provider.authorizations IN ACCESS EXCLUSIVE MODE');
      if (first === 'authorize') {
        held = authorize(key);
        await waitForLockWait('relation', key); // the authorization's first write waits for the table
        cancelled = cancel(key);
      } else {
        cancelled = cancel(key);
        await waitForLockWait('relation', key); // the cancel's look for an authorization waits for the table
        held = authorize(key);
      }
      await waitForLockWait('advisory', key); // the second waits for the key, held by the first
    } finally {
      await locker.query('COMMIT').catch(() => undefined);
      locker.release();
    }
    const [a, x] = await Promise.all([held, cancelled]);
    return {
      key,
      authorization: a,
      cancel: x,
      held: await rows('authorizations', key),
      closed: await rows('closed_authorization_keys', key),
      voids: await voids(key),
    };
  }

  it('an authorization held up behind a table lock, then the cancel: the hold is made, then voided', async () => {
    const r = await raceUnderTableLock('authorize');
    expect(r.authorization.status).toBe(201);
    expect(r.authorization.json.status).toBe('authorized');
    expect(r.cancel.json).toMatchObject({ outcome: 'found', authorization: { status: 'voided' } });
    expect({ held: r.held, closed: r.closed, voids: r.voids }).toEqual({
      held: 1,
      closed: 0,
      voids: [{ source: 'cancel' }],
    });
    expect((await inquire(r.key)).json.status).toBe('voided');
  });

  it('a cancel held up behind a table lock, then the authorization: the key is closed and the late one refused', async () => {
    const r = await raceUnderTableLock('cancel');
    expect(r.cancel.json).toMatchObject({ outcome: 'closed' });
    expect(r.authorization.status).toBe(410);
    expect(r.authorization.json.error).toBe('key_closed');
    expect({ held: r.held, closed: r.closed, voids: r.voids }).toEqual({ held: 0, closed: 1, voids: [] });
  });

  it('authorizations and cancels racing freely: each key ends voided (cancel found it) or closed, never both', async () => {
    const keys = Array.from({ length: 16 }, () => newKey());
    const results = await Promise.all(
      keys.map(async (key, i) => {
        const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));
        const [a, x] = await Promise.all([
          pause(i % 3).then(() => authorize(key)),
          pause((i * 7) % 4).then(() => cancel(key)),
        ]);
        return {
          a,
          x,
          held: await rows('authorizations', key),
          closed: await rows('closed_authorization_keys', key),
          voided: (await voids(key)).length,
        };
      }),
    );
    for (const { a, x, held, closed, voided } of results) {
      expect(x.status).toBe(200);
      if (x.json.outcome === 'found') {
        expect(a.status).toBe(201);
        expect(x.json.authorization).toMatchObject({ status: 'voided' });
        expect({ held, closed, voided }).toEqual({ held: 1, closed: 0, voided: 1 });
      } else {
        expect(x.json.outcome).toBe('closed');
        expect(a.status).toBe(410);
        expect({ held, closed, voided }).toEqual({ held: 0, closed: 1, voided: 0 });
      }
    }
  });
});

describe('refunds of captures (POST /v1/refunds with captureKey)', () => {
  it('are keyed, replayable, never exceed the capture, and show on the capture and the authorization', async () => {
    const key = newKey();
    const captureKey = `${key}:capture`;
    await authorize(key);
    await capture(key, captureKey, 4000);
    const first = await refund(`${captureKey}:refund`, { captureKey, amountCents: 2500 });
    expect(first.status).toBe(201);
    expect(first.json).toEqual({
      idempotencyKey: `${captureKey}:refund`,
      captureKey,
      amountCents: 2500,
      status: 'succeeded',
    });
    const replay = await refund(`${captureKey}:refund`, { captureKey, amountCents: 2500 });
    expect(replay.replayed).toBe(true);
    expect(replay.json).toEqual(first.json);
    // The capture took 4000 of the 5000 held: 1501 more would pass what was taken.
    const over = await refund(`${captureKey}:refund-2`, { captureKey, amountCents: 1501 });
    expect(over.status).toBe(422);
    expect(over.json).toMatchObject({ error: 'refund_exceeds_capture', field: 'amountCents' });
    expect((await refund(`${captureKey}:refund-2`, { captureKey, amountCents: 1500 })).status).toBe(201);
    expect((await inquireCapture(captureKey)).json.refundedCents).toBe(4000);
    expect((await inquire(key)).json).toMatchObject({ status: 'captured', capturedCents: 4000, refundedCents: 4000 });
    expect((await refund(`${captureKey}:refund-3`, { captureKey, amountCents: 1 })).status).toBe(422);
  });

  it('an authorization never captured has nothing to refund; a failed capture neither', async () => {
    const key = newKey();
    await authorize(key);
    const asCapture = await refund(`${key}:refund`, { captureKey: key, amountCents: 100 });
    expect(asCapture.status).toBe(404);
    expect(asCapture.json).toMatchObject({ error: 'capture_not_found', field: 'captureKey' });
    expect(String(asCapture.json.message)).toMatch(/is an authorization/);
    const asCharge = await refund(`${key}:refund`, { chargeKey: key, amountCents: 100 });
    expect(asCharge.status).toBe(404);
    expect(asCharge.json).toMatchObject({ error: 'charge_not_found', field: 'chargeKey' });
    expect(await rows('refunds', `${key}:refund`)).toBe(0);

    await voidIt(key);
    await capture(key, `${key}:capture`, 5000); // refused for good, kept as failed
    const failed = await refund(`${key}:refund`, { captureKey: `${key}:capture`, amountCents: 100 });
    expect(failed.status).toBe(422);
    expect(failed.json).toMatchObject({ error: 'capture_not_refundable', field: 'captureKey' });
    expect(await rows('refunds', `${key}:refund`)).toBe(0);
  });

  it('names a charge or a capture, exactly one; a refund key is one refund, of a charge or of a capture', async () => {
    const neither = await refund(`r-${uid()}`, { amountCents: 100 });
    expect(neither.status).toBe(400);
    expect(neither.json.field).toBe('chargeKey');
    const both = await refund(`r-${uid()}`, { chargeKey: 'a', captureKey: 'b', amountCents: 100 });
    expect(both.status).toBe(400);
    expect(both.json.field).toBe('captureKey');

    const chargeKey = `c-${uid()}:charge`;
    await send('POST', '/v1/charges', { key: chargeKey, body: card });
    const key = newKey();
    await authorize(key);
    await capture(key, `${key}:capture`, 5000);
    const refundKey = `r-${uid()}`;
    const ofCharge = await refund(refundKey, { chargeKey, amountCents: 100 });
    expect(ofCharge.status).toBe(201);
    expect(ofCharge.json).toEqual({ idempotencyKey: refundKey, chargeKey, amountCents: 100, status: 'succeeded' });
    const reused = await refund(refundKey, { captureKey: `${key}:capture`, amountCents: 100 });
    expect(reused.status).toBe(422);
    expect(reused.json.error).toBe('idempotency_key_reused');
    expect((await inquireCapture(`${key}:capture`)).json.refundedCents).toBe(0);
  });
});

describe('the client', () => {
  it('authorize, capture, getCapture, voidAuthorization, cancelAuthorization and refund, with their refusals', async () => {
    const provider = client();
    const key = newKey();
    const made = await provider.authorize(key, card);
    expect(made).toMatchObject({ http: 201, replayed: false, authorization: { status: 'authorized' } });
    expect(await provider.authorize(key, card)).toMatchObject({ http: 201, replayed: true });
    expect(await provider.getAuthorization(key)).toEqual(made.authorization);
    const captured = await provider.capture(key, `${key}:capture`, { amountCents: 5000 });
    expect(captured).toMatchObject({ replayed: false, capture: { status: 'succeeded', amountCents: 5000 } });
    expect(await provider.getCapture(`${key}:capture`)).toEqual(captured.capture);
    expect(await provider.getCapture(`${key}:never`)).toBeUndefined();
    const again = await provider.capture(key, `${key}:capture-2`, { amountCents: 5000 }).catch((e: unknown) => e);
    expect(again).toBeInstanceOf(ProviderHttpError);
    expect(again).toMatchObject({ status: 409, body: { error: 'already_captured' } });
    await expect(provider.voidAuthorization(key)).rejects.toMatchObject({
      status: 409,
      body: { error: 'authorization_captured' },
    });
    const r = await provider.refund(`${key}:refund`, { captureKey: `${key}:capture`, amountCents: 5000 });
    expect(r).toMatchObject({ replayed: false, refund: { captureKey: `${key}:capture`, amountCents: 5000 } });

    const declined = newKey();
    expect((await provider.authorize(declined, { ...card, paymentMethod: 'tok_declined' })).http).toBe(402);

    const held = newKey();
    await provider.authorize(held, card);
    expect(await provider.voidAuthorization(held)).toMatchObject({
      replayed: false,
      authorization: { status: 'voided' },
    });
    expect(await provider.voidAuthorization(held)).toMatchObject({ replayed: true });
    expect(await provider.cancelAuthorization(held)).toMatchObject({
      outcome: 'found',
      authorization: { status: 'voided' },
    });

    const unused = newKey();
    expect(await provider.getAuthorization(unused)).toBeUndefined();
    expect(await provider.cancelAuthorization(unused)).toEqual({ outcome: 'closed' });
    expect(await provider.getAuthorization(unused)).toMatchObject({ status: 'closed' });
    await expect(provider.authorize(unused, card)).rejects.toMatchObject({
      status: 410,
      body: { error: 'key_closed' },
    });
  });

  it('a capture whose answer does not come in time: ProviderUnreachableError, and the inquiry by its key finds it', async () => {
    const impatient = createProviderClient({
      baseUrl: inject('providerUrl'),
      apiKey: inject('providerApiKey'),
      timeoutMs: 400,
    });
    const key = newKey();
    await impatient.authorize(key, card);
    const admin = testAdmin();
    await admin.set({ kind: 'delay', target: 'captures', delayMs: 1_200, count: 1, keyPrefix: `${key}:capture` });
    try {
      const lost = await impatient.capture(key, `${key}:capture`, { amountCents: 5000 }).catch((e: unknown) => e);
      expect(lost).toBeInstanceOf(ProviderUnreachableError);
      expect(lost).toMatchObject({ timedOut: true });
      // Right after the timeout, "not seen" means "not yet": the capture lands once the delay is over.
      let found: Capture | undefined;
      for (let i = 0; i < 50 && !found; i++) {
        found = await impatient.getCapture(`${key}:capture`);
        if (!found) await new Promise((r) => setTimeout(r, 100));
      }
      expect(found).toMatchObject({ status: 'succeeded', amountCents: 5000 });
      // The same capture key again is the first capture, replayed.
      expect(await impatient.capture(key, `${key}:capture`, { amountCents: 5000 })).toMatchObject({ replayed: true });
    } finally {
      await admin.clear();
    }
  });
});

describe('expiry (PROVIDER_AUTH_EXPIRY_MS)', () => {
  const EXPIRY_MS = 2_500;
  let child: ChildProcess | undefined;
  let base = '';
  beforeAll(async () => {
    const p = await startProviderProcess({
      DATABASE_URL: inject('roleUrls').provider,
      PROVIDER_PORT: '0',
      PROVIDER_ADMIN_PORT: '0',
      PROVIDER_API_KEY: inject('providerApiKey'),
      PROVIDER_ADMIN_KEY: inject('providerAdminKey'),
      PROVIDER_AUTH_EXPIRY_MS: String(EXPIRY_MS),
    });
    child = p.child;
    base = p.url;
  });
  afterAll(async () => {
    await stopProcess(child);
  });

  /** Sleeps until the hold has lapsed (by its own expiresAt), plus a margin. */
  const pastExpiry = async (a: Json): Promise<void> => {
    const left = Date.parse(String(a.expiresAt)) - Date.now();
    await new Promise((r) => setTimeout(r, Math.max(0, left) + 200));
  };

  it('a hold lasts the configured time: captured in time it stays captured; after it, the capture fails for good', async () => {
    const inTime = newKey();
    const late = newKey();
    const t0 = Date.now();
    const a = await authorize(inTime, card, base);
    const b = await authorize(late, card, base);
    const expiresAt = Date.parse(String(a.json.expiresAt));
    expect(expiresAt - t0).toBeGreaterThan(EXPIRY_MS - 1_000);
    expect(expiresAt - t0).toBeLessThanOrEqual(EXPIRY_MS + 1_000);
    expect((await capture(inTime, `${inTime}:capture`, 5000, base)).status).toBe(201);

    await pastExpiry(b.json);
    expect((await inquire(late, base)).json).toMatchObject({ status: 'expired', capturedCents: 0 });
    expect((await inquire(inTime, base)).json).toMatchObject({ status: 'captured' }); // captured stays captured
    const refused = await capture(late, `${late}:capture`, 5000, base);
    expect(refused.status).toBe(409);
    expect(refused.json.error).toBe('authorization_expired');
    const replay = await capture(late, `${late}:capture`, 5000, base);
    expect(replay).toMatchObject({ status: 409, replayed: true, json: refused.json });
    expect((await inquireCapture(`${late}:capture`)).json).toMatchObject({
      status: 'failed',
      failureCode: 'authorization_expired',
    });
    // The authorization's replay says it lapsed.
    expect((await authorize(late, card, base)).json).toMatchObject({ status: 'expired' });
  });

  it('an expired hold can still be voided (a compensation never fails on a lapsed hold), or cancelled', async () => {
    const voided = newKey();
    const cancelled = newKey();
    const a = await authorize(voided, card, base);
    await authorize(cancelled, card, base);
    await pastExpiry(a.json);
    expect((await inquire(voided, base)).json.status).toBe('expired');
    const v = await voidIt(voided, base);
    expect(v.status).toBe(200);
    expect(v.json).toMatchObject({ status: 'voided' });
    expect(await voids(voided)).toEqual([{ source: 'void' }]);
    expect((await cancel(cancelled)).json).toMatchObject({ outcome: 'found', authorization: { status: 'voided' } });
    expect(await voids(cancelled)).toEqual([{ source: 'cancel' }]);
  });

  it('reads the setting, refusing a bad one naming the variable (and the provider does not start)', async () => {
    const env = { DATABASE_URL: 'postgres://x' };
    expect(readProviderConfig(env).authExpiryMs).toBe(DEFAULT_AUTH_EXPIRY_MS);
    expect(DEFAULT_AUTH_EXPIRY_MS).toBe(7 * 24 * 3_600_000);
    expect(readProviderConfig({ ...env, PROVIDER_AUTH_EXPIRY_MS: '1500' }).authExpiryMs).toBe(1500);
    for (const bad of ['abc', '0', '999', '-5', '1.5', '1e4', '2592000001', ' ']) {
      expect(() => readProviderConfig({ ...env, PROVIDER_AUTH_EXPIRY_MS: bad })).toThrow(
        /^PROVIDER_AUTH_EXPIRY_MS must be a whole number of milliseconds from 1000 to 2592000000/,
      );
    }
    const start = startTsProcess(
      'provider/server.ts',
      {
        DATABASE_URL: inject('roleUrls').provider,
        PROVIDER_PORT: '0',
        PROVIDER_ADMIN_PORT: '0',
        PROVIDER_AUTH_EXPIRY_MS: '7 days',
      },
      /listening/,
    );
    await expect(start).rejects.toThrow(/PROVIDER_AUTH_EXPIRY_MS must be a whole number of milliseconds/);
  });
});

describe('faults on the authorization targets', () => {
  /** What one call of a target needs, the call itself, and whether it wrote (undefined: it only reads). */
  interface Call {
    prepare(key: string): Promise<void>;
    call(key: string): Promise<Answer>;
    written?(key: string): Promise<number>;
    ok: number;
  }
  const calls: Record<(typeof AUTHORIZATION_FAULT_TARGETS)[number], Call> = {
    authorizations: {
      prepare: async () => undefined,
      call: (k) => authorize(k),
      written: (k) => rows('authorizations', k),
      ok: 201,
    },
    captures: {
      prepare: async (k) => void (await authorize(`${k}:hold`)),
      call: (k) => capture(`${k}:hold`, k, 5000),
      written: (k) => rows('captures', k),
      ok: 201,
    },
    voids: {
      prepare: async (k) => void (await authorize(k)),
      call: (k) => voidIt(k),
      written: async (k) => (await voids(k)).length,
      ok: 200,
    },
    'authorization-cancels': {
      prepare: async () => undefined,
      call: (k) => cancel(k),
      written: (k) => rows('closed_authorization_keys', k),
      ok: 200,
    },
    'authorization-inquiries': {
      prepare: async (k) => void (await authorize(k)),
      call: (k) => inquire(k),
      ok: 200,
    },
    'capture-inquiries': {
      prepare: async (k) => {
        await authorize(`${k}:hold`);
        await capture(`${k}:hold`, k, 5000);
      },
      call: (k) => inquireCapture(k),
      ok: 200,
    },
  };
  let admin: ProviderAdmin;
  beforeAll(() => {
    admin = testAdmin();
  });
  const applied = async (target: FaultTarget, kind: 'outage' | 'fail-before-commit' | 'lose-response-after-commit') =>
    (await admin.list()).applied[target][kind];

  it('every authorization target is a fault target, and processing only where an answer can say it', () => {
    for (const target of AUTHORIZATION_FAULT_TARGETS) {
      expect(parseFaultRequest({ kind: 'outage', target, count: 1 }).target).toBe(target);
      const processing = () => parseFaultRequest({ kind: 'processing', target, count: 1 });
      if (['authorizations', 'captures', 'voids'].includes(target)) expect(processing).toThrow(/^target: /);
      else expect(processing().target).toBe(target);
    }
  });

  for (const target of AUTHORIZATION_FAULT_TARGETS) {
    it(`${target}: outage and fail-before-commit answer 503 writing nothing; a lost answer after the work; a delay`, async () => {
      const { prepare, call, written, ok } = calls[target];
      const key = `f-${uid()}:${target}`;
      await prepare(key);
      try {
        for (const kind of ['outage', 'fail-before-commit'] as const) {
          const before = await applied(target, kind);
          await admin.set({ kind, target, count: 1, keyPrefix: key });
          const r = await call(key);
          expect(r.status).toBe(503);
          expect(r.json.error).toBe('unavailable');
          expect(await applied(target, kind)).toBe(before + 1);
          if (written) expect(await written(key)).toBe(0);
        }
        const lostBefore = await applied(target, 'lose-response-after-commit');
        await admin.set({ kind: 'lose-response-after-commit', target, count: 1, keyPrefix: key });
        await expect(call(key)).rejects.toThrow();
        expect(await applied(target, 'lose-response-after-commit')).toBe(lostBefore + 1);
        if (written) expect(await written(key)).toBe(1); // the work was done, only its answer lost

        await admin.set({ kind: 'delay', target, delayMs: 700, count: 1, keyPrefix: key });
        const t0 = Date.now();
        const delayed = await call(key);
        // A replay of an authorization never waits (nothing to decide); every other call does.
        if (target !== 'authorizations') expect(Date.now() - t0).toBeGreaterThanOrEqual(650);
        expect(delayed.status).toBe(ok);
        if (written) expect(await written(key)).toBe(1);
      } finally {
        await admin.clear();
      }
    });
  }

  it('processing: the inquiries and the cancel say processing, writing nothing; then the truth', async () => {
    const key = newKey();
    await authorize(key);
    await capture(key, `${key}:capture`, 5000);
    const unused = newKey();
    await admin.set({ kind: 'processing', target: 'authorization-inquiries', count: 1, keyPrefix: key });
    await admin.set({ kind: 'processing', target: 'capture-inquiries', count: 1, keyPrefix: `${key}:capture` });
    await admin.set({ kind: 'processing', target: 'authorization-cancels', count: 1, keyPrefix: unused });
    try {
      expect((await inquire(key)).json).toMatchObject({ idempotencyKey: key, status: 'processing' });
      expect((await inquireCapture(`${key}:capture`)).json).toMatchObject({ status: 'processing' });
      const c = await cancel(unused);
      expect(c.json).toMatchObject({ outcome: 'found', authorization: { status: 'processing' } });
      expect(await rows('closed_authorization_keys', unused)).toBe(0);
      const counts = (await admin.list()).applied;
      for (const t of ['authorization-inquiries', 'capture-inquiries', 'authorization-cancels'] as const)
        expect(counts[t].processing).toBeGreaterThanOrEqual(1);
    } finally {
      await admin.clear();
    }
    expect((await inquire(key)).json.status).toBe('captured');
    expect((await inquireCapture(`${key}:capture`)).json.status).toBe('succeeded');
    expect((await cancel(unused)).json.outcome).toBe('closed');
  });

  it('a delayed authorization: processing meanwhile, and the delay counted once it is applied', async () => {
    const key = newKey();
    const before = (await admin.list()).applied.authorizations.delay;
    await admin.set({ kind: 'delay', target: 'authorizations', delayMs: 800, count: 1, keyPrefix: key });
    try {
      const first = authorize(key);
      await new Promise((r) => setTimeout(r, 300));
      expect(((await inquire(key)).json as unknown as Authorization).status).toBe('processing');
      expect((await first).json.status).toBe('authorized');
      expect((await admin.list()).applied.authorizations.delay).toBe(before + 1);
    } finally {
      await admin.clear();
    }
  });
});
