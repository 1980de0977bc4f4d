/**
 * The payment provider: a separate HTTP process that behaves like a real gateway, with its state in
 * Postgres (schema `provider`) and API-key authentication. Start: `npm run provider`.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { RESPONSE_ALREADY_SENT } from '@hono/node-server/utils/response';
import type { Context, MiddlewareHandler } from 'hono';
import type { Pool, PoolClient } from 'pg';
import * as v from 'valibot';
import { assertMigrated, PROVIDER_MIGRATIONS } from '../db/migrate';
import { createPool, withTransaction } from '../db/pool';
import { parseWith } from '../domain/validation';
import {
  ChargeRequestSchema,
  DECLINED_PAYMENT_METHODS,
  IDEMPOTENCY_HEADER,
  IdempotencyKeySchema,
  KEY_CLOSED_ERROR,
  KEY_CLOSED_STATUS,
  REPLAY_HEADER,
  RefundRequestSchema,
  type CancelResult,
  type Charge,
  type ChargeRequest,
  type ClosedKey,
  type Inquiry,
  type Refund,
  type RefundRequest,
} from './api';
import { DEV_PROVIDER_ADMIN_KEY, DEV_PROVIDER_API_KEY, PROVIDER_ADMIN_PORT, PROVIDER_PORT } from './defaults';
import { ClientNameSchema, FaultBook, parseFaultRequest, type FaultKind, type FaultTarget } from './faults';
import { HttpError, jsonApp, jsonBody, jsonServer, rawPath, readJson, type JsonEnv } from './http';

export interface ProviderConfig {
  databaseUrl: string;
  host: string;
  port: number;
  /** The API keys accepted now (more than one only while rotating); any other key gets 401. */
  apiKeys: string[];
  /** The admin API (fault switches) listens apart from the payment API, with its own keys. */
  adminPort: number;
  /** Loopback unless asked otherwise: the payment API may face a network, the fault switches not. */
  adminHost: string;
  adminKeys: string[];
}

/**
 * The keys from `<NAME>S` (a comma-separated list, for a rotation's overlap) or `<NAME>`, else the
 * development default. Throws naming the variable when a key is empty or malformed.
 */
export function keysFromEnv(env: NodeJS.ProcessEnv, name: string, fallback: string): string[] {
  const list = env[`${name}S`];
  const keys = list !== undefined ? list.split(',').map((k) => k.trim()) : [env[name] ?? fallback];
  for (const k of keys) {
    if (!/^[\x21-\x7e]{8,200}$/.test(k) || k.includes(',')) {
      throw new Error(
        `${list !== undefined ? `${name}S` : name}: each key must be 8 to 200 printable characters, without spaces or commas`,
      );
    }
  }
  return keys;
}

/** Compares a presented key with the configured ones in constant time per key. */
function keyMatches(given: string, hashes: Buffer[]): boolean {
  const g = Buffer.from(sha256(given));
  let ok = false;
  for (const h of hashes) ok = timingSafeEqual(g, h) || ok;
  return ok;
}

const sha256 = (s: string): string => createHash('sha256').update(s).digest('hex');

function log(event: string, fields: Record<string, unknown> = {}): void {
  process.stdout.write(`${JSON.stringify({ ts: new Date().toISOString(), svc: 'provider', event, ...fields })}\n`);
}

/** Bodies over 64 KiB are refused (by their Content-Length before reading). */
const MAX_BODY = 64 * 1024;

function bad(field: string, message: string): never {
  throw new HttpError(400, { error: 'invalid_request', field, message: `${field}: ${message}` });
}

/** A Bearer key that must be one of `hashes` (compared in constant time), else 401 with these messages. */
function bearer(hashes: Buffer[], missing: string, unknown: string): MiddlewareHandler {
  return async (c, next) => {
    const header = c.req.header('authorization') ?? '';
    const key = header.startsWith('Bearer ') ? header.slice(7) : '';
    if (!key) throw new HttpError(401, { error: 'unauthenticated', message: missing });
    if (!keyMatches(key, hashes)) throw new HttpError(401, { error: 'unauthenticated', message: unknown });
    await next();
  };
}

type KeyedEnv = JsonEnv & { Variables: { key: string } };

/**
 * No body, or an empty JSON object: the technical cancel takes nothing but its path. A body must be
 * `application/json` (else 415), at most `maxBytes` (else 413), and `{}` (else 400).
 */
function emptyBody(maxBytes: number): MiddlewareHandler {
  const json = jsonBody(maxBytes);
  return async (c, next) => {
    const length = c.req.header('content-length');
    if (c.req.header('transfer-encoding') === undefined && (length === undefined || length === '0')) return next();
    return json(c, async () => {
      const body = await readJson(c);
      if (typeof body !== 'object' || body === null || Array.isArray(body) || Object.keys(body).length > 0)
        bad('body', 'must be empty or {}');
      await next();
    });
  };
}

/** The Idempotency-Key header, required: the route reads it as c.get('key'). */
const requireIdempotencyKey: MiddlewareHandler<KeyedEnv> = async (c, next) => {
  const key = c.req.header(IDEMPOTENCY_HEADER);
  if (key === undefined) bad('Idempotency-Key', 'header is required');
  c.set('key', parseWith(IdempotencyKeySchema, key, bad, 'Idempotency-Key'));
  await next();
};

/**
 * A charge key in the path (the inquiry's, the cancel's): its segment as sent, between `prefix` and
 * `suffix`, percent-decoded, held to the Idempotency-Key rule.
 */
function pathKey(c: Context, prefix: string, suffix = ''): string {
  let key: string;
  try {
    const path = rawPath(c);
    key = decodeURIComponent(path.slice(prefix.length, path.length - suffix.length));
  } catch {
    throw new HttpError(400, {
      error: 'invalid_path',
      field: 'key',
      message: 'key: the path has a malformed % escape',
    });
  }
  return parseWith(IdempotencyKeySchema, key, bad, 'key');
}

interface ChargeRow {
  idempotency_key: string;
  request_hash: string;
  amount_cents: string;
  currency: string;
  status: Charge['status'];
  failure_code: string | null;
  refunded_cents: string;
}

const CHARGE_SELECT = `SELECT c.idempotency_key, c.request_hash, c.amount_cents, c.currency, c.status, c.failure_code,
  COALESCE((SELECT sum(r.amount_cents) FROM provider.refunds r WHERE r.charge_key = c.idempotency_key), 0) AS refunded_cents
  FROM provider.charges c WHERE c.idempotency_key = $1`;

function toCharge(row: ChargeRow): Charge {
  const charge: Charge = {
    idempotencyKey: row.idempotency_key,
    status: row.status,
    amountCents: Number(row.amount_cents),
    currency: row.currency,
    refundedCents: Number(row.refunded_cents),
  };
  if (row.failure_code) charge.failureCode = row.failure_code;
  return charge;
}

const chargeHttpStatus = (c: Charge): 201 | 402 => (c.status === 'failed' ? 402 : 201);

/**
 * The faults matched for one call. Each is counted (and logged as `fault applied`) only where it
 * takes effect: a call refused before it, or a replay that never waits, does not count.
 */
function callFaults(book: FaultBook, target: FaultTarget, key: string, c: Context<KeyedEnv>) {
  const name = c.req.header('x-client-name');
  const client = typeof name === 'string' && v.is(ClientNameSchema, name) ? { client: name } : {};
  const fired = book.take(target, key, client.client);
  const done = new Set<FaultKind>();
  const applied = (kind: FaultKind, fields: Record<string, unknown> = {}): void => {
    done.add(kind);
    book.apply(target, kind);
    log('fault applied', { target, kind, key, ...client, ...fields });
  };
  return {
    /** Runs the call, then gives back to their rules the matched faults it did not apply. */
    async run(call: () => Promise<Response>): Promise<Response> {
      try {
        return await call();
      } finally {
        for (const [kind, rule] of fired) if (!done.has(kind)) book.release(rule);
      }
    },
    /** An outage or a 5xx before any work; before them, a delay unless the work itself applies it. */
    async before(delayHere = true): Promise<void> {
      if (fired.has('outage')) {
        applied('outage');
        throw new HttpError(503, { error: 'unavailable', message: 'injected fault: provider outage, nothing written' });
      }
      const delay = fired.get('delay');
      if (delayHere && delay?.delayMs) {
        applied('delay', { delayMs: delay.delayMs });
        await sleep(delay.delayMs);
      }
      if (fired.has('fail-before-commit')) {
        applied('fail-before-commit');
        throw new HttpError(503, {
          error: 'unavailable',
          message: 'injected fault: failed before commit, nothing written',
        });
      }
    },
    /** A charge's delay: applied by createCharge, only when it inserted the charge and waits. */
    chargeDelay(): { ms: number; applied: () => void } | undefined {
      const delay = fired.get('delay');
      return delay?.delayMs
        ? { ms: delay.delayMs, applied: () => applied('delay', { delayMs: delay.delayMs }) }
        : undefined;
    },
    processing(): boolean {
      if (!fired.has('processing')) return false;
      applied('processing');
      return true;
    },
    /**
     * The work is done; the caller never hears of it: the one place that needs the raw socket. Returns
     * the non-answer for the route to return (nothing is written), or undefined to answer as usual.
     */
    loseResponse(): Response | undefined {
      const rule = fired.get('lose-response-after-commit');
      if (!rule) return undefined;
      applied('lose-response-after-commit', { mode: rule.mode ?? 'drop' });
      const res = c.env.outgoing;
      if (rule.mode === 'hang') {
        const t = setTimeout(() => res.socket?.destroy(), 300_000);
        res.once('close', () => clearTimeout(t));
      } else {
        res.socket?.destroy();
      }
      return RESPONSE_ALREADY_SENT;
    },
  };
}

/**
 * The key's lock, taken first by each transaction that makes a charge or closes a key: a charge and a
 * technical cancel of one key are serialized whatever holds either up (a table lock before its first
 * write, say), and the second sees what the first committed. A two-int advisory lock, in its own
 * space (apart from the one-bigint locks of the migrations and roles); two keys that hash alike
 * merely wait for each other.
 */
async function lockKey(c: PoolClient, key: string): Promise<void> {
  await c.query({ text: `SELECT pg_advisory_xact_lock(hashtext('provider.charge-key'), hashtext($1))`, values: [key] });
}

const keyClosed = (key: string): HttpError =>
  new HttpError(KEY_CLOSED_STATUS, {
    error: KEY_CLOSED_ERROR,
    message: `charge key ${key} was closed by a cancel: no charge can be made under it`,
  });

/** The provider's ledger in Postgres: charges and refunds, each once per Idempotency-Key; closed keys. */
function createLedger(pool: Pool) {
  /** Charges this process is deciding right now: the same key meanwhile gets 409. */
  const inFlight = new Set<string>();

  /** Decides a `processing` charge from its stored payment method (a test card can be declined). */
  async function decide(key: string, q: Pool | PoolClient = pool): Promise<void> {
    await q.query({
      text: `UPDATE provider.charges SET status = CASE WHEN payment_method = ANY($2::text[]) THEN 'failed' ELSE 'succeeded' END,
                    failure_code = CASE WHEN payment_method = ANY($2::text[]) THEN $3::jsonb ->> payment_method END,
                    updated_at = now()
             WHERE idempotency_key = $1 AND status = 'processing'`,
      values: [key, Object.keys(DECLINED_PAYMENT_METHODS), JSON.stringify(DECLINED_PAYMENT_METHODS)],
    });
  }

  /**
   * A `processing` charge that no request of this process is deciding was cut off (a crash, or the
   * database went away mid-request): finish it now, as a gateway's recovery would, instead of leaving
   * it processing forever.
   */
  async function recover(row: ChargeRow | undefined): Promise<ChargeRow | undefined> {
    if (!row || row.status !== 'processing' || inFlight.has(row.idempotency_key)) return row;
    await decide(row.idempotency_key);
    log('charge recovered', { key: row.idempotency_key });
    const { rows } = await pool.query<ChargeRow>({ text: CHARGE_SELECT, values: [row.idempotency_key] });
    return rows[0];
  }

  async function closedKey(q: Pool | PoolClient, key: string): Promise<ClosedKey | undefined> {
    const { rows } = await q.query<{ closed_at: Date }>({
      text: 'SELECT closed_at FROM provider.closed_keys WHERE idempotency_key = $1',
      values: [key],
    });
    return rows[0] && { idempotencyKey: key, status: 'closed', closedAt: rows[0].closed_at.toISOString() };
  }

  /** The inquiry: the charge, the closed key, or undefined (neither: not yet, or never). */
  async function getCharge(key: string): Promise<Inquiry | undefined> {
    const { rows } = await pool.query<ChargeRow>({ text: CHARGE_SELECT, values: [key] });
    const row = await recover(rows[0]);
    return row ? toCharge(row) : closedKey(pool, key);
  }

  /**
   * The technical cancel: under the key's lock, the charge made under the key, unchanged, or else the
   * key closed (idempotent: a closed key stays closed, with its first closing time).
   */
  async function cancelCharge(key: string): Promise<CancelResult> {
    const r = await withTransaction(pool, async (c) => {
      await lockKey(c, key);
      const { rows } = await c.query<ChargeRow>({ text: CHARGE_SELECT, values: [key] });
      const row = rows[0];
      if (row) return { row };
      const inserted = await c.query({
        text: 'INSERT INTO provider.closed_keys (idempotency_key) VALUES ($1) ON CONFLICT (idempotency_key) DO NOTHING',
        values: [key],
      });
      return { closed: (await closedKey(c, key))!, first: Boolean(inserted.rowCount) };
    });
    if (r.row) return { outcome: 'found', charge: toCharge((await recover(r.row)) ?? r.row) };
    if (r.first) log('key closed', { key });
    return { outcome: 'closed', ...r.closed };
  }

  /** `delay`: how long a new charge stays `processing` (a slow gateway) before it is decided. */
  async function createCharge(
    key: string,
    body: ChargeRequest,
    delay?: { ms: number; applied: () => void },
  ): Promise<{ status: 201 | 402; charge: Charge; replayed: boolean }> {
    const hash = sha256(JSON.stringify([body.amountCents, body.currency, body.paymentMethod, body.reference ?? null]));
    if (inFlight.has(key))
      throw new HttpError(409, {
        error: 'request_in_flight',
        message: 'a request with this Idempotency-Key is in flight',
      });
    inFlight.add(key);
    try {
      // Under the key's lock: a key a cancel closed takes no charge, and a cancel that comes after this
      // finds the charge. Without a delay the charge is decided in the same transaction, so no cancel
      // or inquiry ever sees it `processing`.
      const inserted = await withTransaction(pool, async (c) => {
        await lockKey(c, key);
        if (await closedKey(c, key)) throw keyClosed(key);
        const r = await c.query({
          text: `INSERT INTO provider.charges (idempotency_key, request_hash, amount_cents, currency, payment_method, reference, status)
                 VALUES ($1, $2, $3, $4, $5, $6, 'processing') ON CONFLICT (idempotency_key) DO NOTHING`,
          values: [key, hash, body.amountCents, body.currency, body.paymentMethod, body.reference ?? null],
        });
        if (r.rowCount && !delay) await decide(key, c);
        return Boolean(r.rowCount);
      });
      if (!inserted) {
        const { rows } = await pool.query<ChargeRow>({ text: CHARGE_SELECT, values: [key] });
        if (rows[0] && rows[0].request_hash !== hash) {
          throw new HttpError(422, {
            error: 'idempotency_key_reused',
            message: 'this Idempotency-Key was used with other parameters',
          });
        }
        inFlight.delete(key); // the row is not ours to decide: recover it if it was cut off
        const row = await recover(rows[0]);
        if (!row) throw new HttpError(409, { error: 'conflict', message: 'charge is being written; retry' });
        const charge = toCharge(row);
        return { status: chargeHttpStatus(charge), charge, replayed: true };
      }
      if (delay) {
        delay.applied();
        await sleep(delay.ms); // meanwhile the same key gets 409, the inquiry and the cancel `processing`
        await decide(key);
      }
    } finally {
      inFlight.delete(key);
    }
    const { rows } = await pool.query<ChargeRow>({ text: CHARGE_SELECT, values: [key] });
    const charge = toCharge(rows[0]!);
    log('charge', { key, status: charge.status, amountCents: charge.amountCents });
    return { status: chargeHttpStatus(charge), charge, replayed: false };
  }

  async function createRefund(
    key: string,
    body: RefundRequest,
  ): Promise<{ status: 201; refund: Refund; replayed: boolean }> {
    const hash = sha256(JSON.stringify([body.chargeKey, body.amountCents]));
    return withTransaction(pool, async (c) => {
      // Serialise refunds of one charge, so their sum can never pass the charge's amount.
      const charge = await c.query<{ amount_cents: string; status: string }>({
        text: 'SELECT amount_cents, status FROM provider.charges WHERE idempotency_key = $1 FOR UPDATE',
        values: [body.chargeKey],
      });
      const existing = await c.query<{ request_hash: string; charge_key: string; amount_cents: string }>({
        text: 'SELECT request_hash, charge_key, amount_cents FROM provider.refunds WHERE idempotency_key = $1',
        values: [key],
      });
      const prior = existing.rows[0];
      if (prior) {
        if (prior.request_hash !== hash) {
          throw new HttpError(422, {
            error: 'idempotency_key_reused',
            message: 'this Idempotency-Key was used with other parameters',
          });
        }
        const refund: Refund = {
          idempotencyKey: key,
          chargeKey: prior.charge_key,
          amountCents: Number(prior.amount_cents),
          status: 'succeeded',
        };
        return { status: 201 as const, refund, replayed: true };
      }
      const row = charge.rows[0];
      if (!row)
        throw new HttpError(404, { error: 'charge_not_found', field: 'chargeKey', message: 'no charge with that key' });
      if (row.status !== 'succeeded') {
        throw new HttpError(422, {
          error: 'charge_not_refundable',
          field: 'chargeKey',
          message: `charge is ${row.status}`,
        });
      }
      const refunded = await c.query<{ sum: string }>({
        text: 'SELECT COALESCE(sum(amount_cents), 0) AS sum FROM provider.refunds WHERE charge_key = $1',
        values: [body.chargeKey],
      });
      if (Number(refunded.rows[0]!.sum) + body.amountCents > Number(row.amount_cents)) {
        throw new HttpError(422, {
          error: 'refund_exceeds_charge',
          field: 'amountCents',
          message: 'refunds would exceed the charge',
        });
      }
      try {
        await c.query({
          text: `INSERT INTO provider.refunds (idempotency_key, request_hash, charge_key, amount_cents, status) VALUES ($1, $2, $3, $4, 'succeeded')`,
          values: [key, hash, body.chargeKey, body.amountCents],
        });
      } catch (err) {
        // The same key, for another charge, committed meanwhile: like a charge in flight, retry to see it.
        if ((err as { code?: string }).code === '23505') {
          throw new HttpError(409, {
            error: 'request_in_flight',
            message: 'a request with this Idempotency-Key is in flight',
          });
        }
        throw err;
      }
      log('refund', { key, chargeKey: body.chargeKey, amountCents: body.amountCents });
      return {
        status: 201 as const,
        refund: { idempotencyKey: key, chargeKey: body.chargeKey, amountCents: body.amountCents, status: 'succeeded' },
        replayed: false,
      };
    });
  }

  return { getCharge, cancelCharge, createCharge, createRefund };
}
type Ledger = ReturnType<typeof createLedger>;

/**
 * The payment API: POST /v1/charges, GET /v1/charges/:key (the inquiry), POST /v1/charges/:key/cancel
 * (the technical cancel), POST /v1/refunds; GET /healthz.
 */
export function createProviderApp(ledger: Ledger, faults: FaultBook, apiKeys: string[]) {
  const app = jsonApp<KeyedEnv>((err) => log('error', { message: err.message }));
  app.get('/healthz', (c) => c.json({ ok: true }));
  // Exactly the keys configured now: a key removed from the configuration stops working at restart.
  app.use(
    '*',
    bearer(
      apiKeys.map((k) => Buffer.from(sha256(k))),
      'missing API key (Authorization: Bearer …)',
      'unknown API key',
    ),
  );
  const replayed = (yes: boolean): Record<string, string> => (yes ? { [REPLAY_HEADER]: 'true' } : {});

  app.post('/v1/charges', requireIdempotencyKey, jsonBody(MAX_BODY), async (c) => {
    const key = c.get('key');
    const body = parseWith(ChargeRequestSchema, await readJson(c), bad, 'body');
    const f = callFaults(faults, 'charges', key, c);
    return f.run(async () => {
      await f.before(false);
      const r = await ledger.createCharge(key, body, f.chargeDelay());
      return f.loseResponse() ?? c.json(r.charge, r.status, replayed(r.replayed));
    });
  });

  app.get('/v1/charges/:key', async (c) => {
    const key = pathKey(c, '/v1/charges/');
    const f = callFaults(faults, 'inquiries', key, c);
    return f.run(async () => {
      await f.before();
      if (f.processing()) {
        return c.json(
          {
            idempotencyKey: key,
            status: 'processing',
            amountCents: 0,
            currency: '',
            refundedCents: 0,
          } satisfies Charge,
          200,
        );
      }
      const charge = await ledger.getCharge(key);
      return (
        f.loseResponse() ??
        (charge ? c.json(charge, 200) : c.json({ error: 'not_found', message: 'no charge with that key' }, 404))
      );
    });
  });

  // The technical cancel: the charge under the key, unchanged, or the key closed for good.
  app.post('/v1/charges/:key/cancel', emptyBody(MAX_BODY), async (c) => {
    const key = pathKey(c, '/v1/charges/', '/cancel');
    const f = callFaults(faults, 'cancels', key, c);
    return f.run(async () => {
      await f.before();
      // A gateway still deciding a charge under this key: the caller must not refund blindly.
      if (f.processing()) {
        const charge: Charge = {
          idempotencyKey: key,
          status: 'processing',
          amountCents: 0,
          currency: '',
          refundedCents: 0,
        };
        return c.json({ outcome: 'found', charge }, 200);
      }
      const r = await ledger.cancelCharge(key);
      return f.loseResponse() ?? c.json(r, 200);
    });
  });

  app.post('/v1/refunds', requireIdempotencyKey, jsonBody(MAX_BODY), async (c) => {
    const key = c.get('key');
    const body = parseWith(RefundRequestSchema, await readJson(c), bad, 'body');
    const f = callFaults(faults, 'refunds', key, c);
    return f.run(async () => {
      await f.before();
      const r = await ledger.createRefund(key, body);
      return f.loseResponse() ?? c.json(r.refund, 201, replayed(r.replayed));
    });
  });

  app.notFound((c) => c.json({ error: 'not_found', message: `${c.req.method} ${rawPath(c)} is not an endpoint` }, 404));
  return app;
}

/** The admin API: GET/POST/DELETE /admin/faults, with its own key, on its own port. */
export function createAdminApp(faults: FaultBook, adminKeys: string[]) {
  const app = jsonApp();
  const message = 'missing or wrong admin key';
  app.use(
    '*',
    bearer(
      adminKeys.map((k) => Buffer.from(sha256(k))),
      message,
      message,
    ),
  );
  app.get('/admin/faults', (c) => c.json({ rules: faults.list(), injected: faults.injected, applied: faults.applied }));
  app.delete('/admin/faults', (c) => {
    faults.clear();
    log('faults cleared');
    return c.json({ rules: [], injected: faults.injected, applied: faults.applied });
  });
  app.post('/admin/faults', jsonBody(MAX_BODY), async (c) => {
    const body = await readJson(c);
    const rule = faults.add(
      parseFaultRequest(body, (field, problem) => {
        throw new HttpError(400, { error: 'invalid_request', field, message: `${field}: ${problem}` });
      }),
    );
    log('fault set', { ...rule });
    return c.json(rule, 201);
  });
  app.all('/admin/faults', (c) =>
    c.json({ error: 'method_not_allowed', message: `${c.req.method} is not allowed` }, 405),
  );
  app.notFound((c) => c.json({ error: 'not_found', message: 'only /admin/faults' }, 404));
  return app;
}

export async function startProvider(
  cfg: ProviderConfig,
): Promise<{ server: http.Server; admin: http.Server; port: number; adminPort: number; pool: Pool }> {
  const pool = createPool(cfg.databaseUrl);
  // It runs with its own role, which may write its ledger but not change the schema: the owner migrates.
  await assertMigrated(pool, PROVIDER_MIGRATIONS, 'provider.schema_migrations');
  // The table records the keys in force (hashed), the ones of the provider that started last.
  await withTransaction(pool, async (c) => {
    await c.query({
      text: 'DELETE FROM provider.api_keys WHERE key_hash <> ALL($1::text[])',
      values: [cfg.apiKeys.map(sha256)],
    });
    for (const k of cfg.apiKeys) {
      await c.query({
        text: `INSERT INTO provider.api_keys (key_hash, label) VALUES ($1, $2) ON CONFLICT (key_hash) DO NOTHING`,
        values: [sha256(k), k === DEV_PROVIDER_API_KEY ? 'development default' : 'configured'],
      });
    }
  });
  const faults = new FaultBook();
  const server = jsonServer(createProviderApp(createLedger(pool), faults, cfg.apiKeys));
  const admin = jsonServer(createAdminApp(faults, cfg.adminKeys));
  const listen = (srv: http.Server, port: number, host: string): Promise<number> =>
    new Promise((resolve, reject) => {
      srv.once('error', reject);
      srv.listen(port, host, () => resolve((srv.address() as AddressInfo).port));
    });
  const port = await listen(server, cfg.port, cfg.host);
  const adminPort = await listen(admin, cfg.adminPort, cfg.adminHost);
  return { server, admin, port, adminPort, pool };
}

if (require.main === module) {
  const databaseUrl = process.env.DATABASE_URL;
  if (!databaseUrl) {
    process.stderr.write('provider: DATABASE_URL is required\n');
    process.exit(2);
  }
  let cfg: ProviderConfig;
  try {
    cfg = {
      databaseUrl,
      host: process.env.PROVIDER_HOST ?? '127.0.0.1',
      port: Number(process.env.PROVIDER_PORT ?? PROVIDER_PORT),
      apiKeys: keysFromEnv(process.env, 'PROVIDER_API_KEY', DEV_PROVIDER_API_KEY),
      adminPort: Number(process.env.PROVIDER_ADMIN_PORT ?? PROVIDER_ADMIN_PORT),
      adminHost: process.env.PROVIDER_ADMIN_HOST ?? '127.0.0.1',
      adminKeys: keysFromEnv(process.env, 'PROVIDER_ADMIN_KEY', DEV_PROVIDER_ADMIN_KEY),
    };
  } catch (err) {
    process.stderr.write(`provider: ${(err as Error).message}\n`);
    process.exit(2);
  }
  startProvider(cfg)
    .then(({ server, admin, port, adminPort, pool }) => {
      log('listening', {
        url: `http://${cfg.host}:${port}`,
        adminUrl: `http://${cfg.adminHost}:${adminPort}`,
        devKeys: cfg.apiKeys.includes(DEV_PROVIDER_API_KEY) || cfg.adminKeys.includes(DEV_PROVIDER_ADMIN_KEY),
      });
      const stop = (): void => {
        admin.close();
        admin.closeAllConnections();
        server.close(() => void pool.end().finally(() => process.exit(0)));
        server.closeAllConnections();
      };
      process.on('SIGINT', stop);
      process.on('SIGTERM', stop);
    })
    .catch((err: Error) => {
      process.stderr.write(`provider: failed to start: ${err.message}\n`);
      process.exit(1);
    });
}
