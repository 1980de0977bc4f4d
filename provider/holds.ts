/**
 * The authorizations in the provider's ledger: holds (POST /v1/authorizations), their captures, voids
 * and technical cancels, each under the authorization key's lock, so a capture, a void and a cancel of
 * one authorization are serialized and each sees what the one before it committed. A hold's status is
 * read from its rows and the database's clock: an expired hold is one neither captured nor voided
 * whose `expires_at` has passed (nothing needs to sweep it).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Pool, PoolClient } from 'pg';
import { withTransaction } from '../db/pool';
import { HttpError } from '../platform/http';
import {
  DECLINED_PAYMENT_METHODS,
  type Authorization,
  type AuthorizationCancelResult,
  type AuthorizationInquiry,
  type AuthorizationRequest,
  type AuthorizationStatus,
  type Capture,
  type CaptureFailure,
  type CaptureRequest,
  type ClosedKey,
} from './api';
import { inFlight as inFlightError, isUniqueViolation, keyClosed, keyReused, lockKey, sha256 } from './idempotency';
import { log } from './log';

interface AuthorizationRow {
  idempotency_key: string;
  request_hash: string;
  amount_cents: string;
  currency: string;
  status: 'processing' | 'authorized' | 'declined';
  failure_code: string | null;
  expires_at: Date | null;
  expired: boolean | null;
  voided_at: Date | null;
  capture_key: string | null;
  captured_cents: string | null;
  refunded_cents: string;
}

/** The hold with what became of it: its void, its one succeeded capture and that capture's refunds. */
const AUTHORIZATION_SELECT = `SELECT a.idempotency_key, a.request_hash, a.amount_cents, a.currency, a.status, a.failure_code,
  a.expires_at, a.expires_at <= clock_timestamp() AS expired, v.voided_at,
  k.idempotency_key AS capture_key, k.amount_cents AS captured_cents,
  COALESCE((SELECT sum(r.amount_cents) FROM provider.refunds r WHERE r.capture_key = k.idempotency_key), 0) AS refunded_cents
  FROM provider.authorizations a
  LEFT JOIN provider.voids v ON v.authorization_key = a.idempotency_key
  LEFT JOIN provider.captures k ON k.authorization_key = a.idempotency_key AND k.status = 'succeeded'
  WHERE a.idempotency_key = $1`;

/** Captured and voided are final; an authorized hold not captured by its expiry is expired. */
function statusOf(row: AuthorizationRow): AuthorizationStatus {
  if (row.status !== 'authorized') return row.status === 'processing' ? 'processing' : 'declined';
  if (row.voided_at) return 'voided';
  if (row.capture_key) return 'captured';
  return row.expired ? 'expired' : 'authorized';
}

function toAuthorization(row: AuthorizationRow): Authorization {
  const a: Authorization = {
    idempotencyKey: row.idempotency_key,
    status: statusOf(row),
    amountCents: Number(row.amount_cents),
    currency: row.currency,
    capturedCents: Number(row.captured_cents ?? 0),
    refundedCents: Number(row.refunded_cents),
  };
  if (row.failure_code) a.failureCode = row.failure_code;
  if (row.expires_at) a.expiresAt = row.expires_at.toISOString();
  if (row.voided_at) a.voidedAt = row.voided_at.toISOString();
  if (row.capture_key) a.captureKey = row.capture_key;
  return a;
}

interface CaptureRow {
  idempotency_key: string;
  request_hash: string;
  authorization_key: string;
  amount_cents: string;
  currency: string;
  status: 'succeeded' | 'failed';
  failure_code: CaptureFailure | null;
  refunded_cents: string;
}

const CAPTURE_SELECT = `SELECT k.idempotency_key, k.request_hash, k.authorization_key, k.amount_cents, a.currency, k.status,
  k.failure_code, COALESCE((SELECT sum(r.amount_cents) FROM provider.refunds r WHERE r.capture_key = k.idempotency_key), 0) AS refunded_cents
  FROM provider.captures k JOIN provider.authorizations a ON a.idempotency_key = k.authorization_key
  WHERE k.idempotency_key = $1`;

function toCapture(row: CaptureRow): Capture {
  const capture: Capture = {
    idempotencyKey: row.idempotency_key,
    authorizationKey: row.authorization_key,
    status: row.status,
    amountCents: Number(row.amount_cents),
    currency: row.currency,
    refundedCents: Number(row.refunded_cents),
  };
  if (row.failure_code) capture.failureCode = row.failure_code;
  return capture;
}

/** Why a capture is refused for good, by what became of its authorization. */
const CAPTURE_FAILURE: Partial<Record<AuthorizationStatus, CaptureFailure>> = {
  expired: 'authorization_expired',
  voided: 'authorization_voided',
  declined: 'authorization_declined',
  captured: 'already_captured',
};

/** The message of each final refusal of a capture (its 409), the same on every replay. */
export const CAPTURE_FAILURE_MESSAGES: Record<CaptureFailure, string> = {
  authorization_expired: 'the authorization expired before it was captured: its hold lapsed, nothing was captured',
  authorization_voided: 'the authorization was voided: its hold is released, nothing was captured',
  authorization_declined: 'the authorization was declined: nothing is held, nothing was captured',
  already_captured: 'the authorization was captured under another capture key (one capture per authorization)',
};

const processingRefusal = (key: string, what: string): HttpError =>
  new HttpError(409, {
    error: 'authorization_processing',
    message: `authorization ${key} is still being decided; retry the ${what}`,
  });

/** Authorizations, captures, voids and the authorization's technical cancel. */
export function createHolds(pool: Pool, opts: { authExpiryMs: number }) {
  /** Authorizations this process is deciding right now: the same key meanwhile gets 409. */
  const authorizing = new Set<string>();
  /** Captures this process is writing right now, by capture key: the same key meanwhile gets 409. */
  const capturing = new Set<string>();

  /**
   * Decides a `processing` authorization from its stored payment method (a test card can be
   * declined); an authorized one holds until PROVIDER_AUTH_EXPIRY_MS from now.
   */
  async function decide(key: string, q: Pool | PoolClient = pool): Promise<void> {
    await q.query({
      text: `UPDATE provider.authorizations
             SET status = CASE WHEN payment_method = ANY($2::text[]) THEN 'declined' ELSE 'authorized' END,
                 failure_code = CASE WHEN payment_method = ANY($2::text[]) THEN $3::jsonb ->> payment_method END,
                 expires_at = CASE WHEN payment_method = ANY($2::text[]) THEN NULL
                                   ELSE clock_timestamp() + $4::bigint * interval '1 millisecond' END,
                 updated_at = now()
             WHERE idempotency_key = $1 AND status = 'processing'`,
      values: [key, Object.keys(DECLINED_PAYMENT_METHODS), JSON.stringify(DECLINED_PAYMENT_METHODS), opts.authExpiryMs],
    });
  }

  async function select(q: Pool | PoolClient, key: string): Promise<AuthorizationRow | undefined> {
    return (await q.query<AuthorizationRow>({ text: AUTHORIZATION_SELECT, values: [key] })).rows[0];
  }

  /**
   * The authorization under the key; one left `processing` by a request this process is not deciding
   * was cut off (a crash, the database gone mid-request): it is decided now, as a gateway's recovery
   * would, instead of staying processing forever.
   */
  async function read(q: Pool | PoolClient, key: string): Promise<AuthorizationRow | undefined> {
    const row = await select(q, key);
    if (!row || row.status !== 'processing' || authorizing.has(key)) return row;
    await decide(key, q);
    log('authorization recovered', { key });
    return select(q, key);
  }

  async function closedKey(q: Pool | PoolClient, key: string): Promise<ClosedKey | undefined> {
    const { rows } = await q.query<{ closed_at: Date }>({
      text: 'SELECT closed_at FROM provider.closed_authorization_keys WHERE idempotency_key = $1',
      values: [key],
    });
    return rows[0] && { idempotencyKey: key, status: 'closed', closedAt: rows[0].closed_at.toISOString() };
  }

  /** No authorization under the key (404, nothing written): never made, or its key closed by a cancel. */
  async function noAuthorization(q: Pool | PoolClient, key: string): Promise<HttpError> {
    const closed = await closedKey(q, key);
    return new HttpError(404, {
      error: 'authorization_not_found',
      message: closed
        ? `authorization key ${key} was closed by a cancel: no authorization was made under it`
        : 'no authorization with that key',
    });
  }

  /** The inquiry: the authorization, the closed key, or undefined (neither: not yet, or never). */
  async function getAuthorization(key: string): Promise<AuthorizationInquiry | undefined> {
    const row = await read(pool, key);
    return row ? toAuthorization(row) : closedKey(pool, key);
  }

  /** `delay`: how long a new authorization stays `processing` (a slow gateway) before it is decided. */
  async function createAuthorization(
    key: string,
    body: AuthorizationRequest,
    delay?: { ms: number; applied: () => void },
  ): Promise<{ authorization: Authorization; replayed: boolean }> {
    const hash = sha256(JSON.stringify([body.amountCents, body.currency, body.paymentMethod, body.reference ?? null]));
    if (authorizing.has(key)) throw inFlightError();
    authorizing.add(key);
    let authorization: Authorization;
    try {
      // Under the key's lock: a key a cancel closed takes no hold, and a cancel that comes after this
      // finds the authorization. Without a delay it is decided in the same transaction, so no cancel,
      // capture or inquiry ever sees it `processing`. The answer is the authorization as this request
      // made it, read in its own transaction: a cancel right after the commit does not change it.
      type Made = AuthorizationRow | undefined | 'not inserted' | 'processing';
      let made = await withTransaction(pool, async (c): Promise<Made> => {
        await lockKey(c, 'provider.authorization-key', key);
        if (await closedKey(c, key)) throw keyClosed('authorization', key);
        const r = await c.query({
          text: `INSERT INTO provider.authorizations (idempotency_key, request_hash, amount_cents, currency, payment_method, reference, status)
                 VALUES ($1, $2, $3, $4, $5, $6, 'processing') ON CONFLICT (idempotency_key) DO NOTHING`,
          values: [key, hash, body.amountCents, body.currency, body.paymentMethod, body.reference ?? null],
        });
        if (!r.rowCount) return 'not inserted';
        if (delay) return 'processing';
        await decide(key, c);
        return select(c, key);
      });
      if (made === 'not inserted') {
        const first = await select(pool, key);
        if (first && first.request_hash !== hash) throw keyReused();
        authorizing.delete(key); // the row is not ours to decide: recover it if it was cut off
        const row = await read(pool, key);
        if (!row) throw new HttpError(409, { error: 'conflict', message: 'authorization is being written; retry' });
        return { authorization: toAuthorization(row), replayed: true };
      }
      if (made === 'processing') {
        delay!.applied();
        await sleep(delay!.ms); // meanwhile the same key gets 409, the inquiry and the cancel `processing`
        made = await withTransaction(pool, async (c) => {
          await decide(key, c);
          return select(c, key);
        });
      }
      authorization = toAuthorization(made!);
    } finally {
      authorizing.delete(key);
    }
    log('authorization', { key, status: authorization.status, amountCents: authorization.amountCents });
    return { authorization, replayed: false };
  }

  /**
   * A capture of the authorization under `authorizationKey`, once per `captureKey`: at most the amount
   * held, one capture per authorization (what a partial capture leaves is released). A refusal for
   * good (expired, voided, declined, captured under another key) is kept as a failed capture; a
   * request error (an amount over the hold, no authorization, one still processing) writes nothing.
   */
  async function createCapture(
    authorizationKey: string,
    captureKey: string,
    body: CaptureRequest,
  ): Promise<{ capture: Capture; replayed: boolean }> {
    const hash = sha256(JSON.stringify([authorizationKey, body.amountCents]));
    if (capturing.has(captureKey)) throw inFlightError();
    capturing.add(captureKey);
    let replayed: boolean;
    try {
      replayed = await withTransaction(pool, async (c) => {
        await lockKey(c, 'provider.authorization-key', authorizationKey);
        const prior = (await c.query<CaptureRow>({ text: CAPTURE_SELECT, values: [captureKey] })).rows[0];
        if (prior) {
          if (prior.request_hash !== hash) throw keyReused();
          return true;
        }
        const row = await read(c, authorizationKey);
        if (!row) throw await noAuthorization(c, authorizationKey);
        const status = statusOf(row);
        if (status === 'processing') throw processingRefusal(authorizationKey, 'capture');
        const failure = CAPTURE_FAILURE[status];
        if (!failure && body.amountCents > Number(row.amount_cents)) {
          throw new HttpError(422, {
            error: 'capture_exceeds_authorization',
            field: 'amountCents',
            message: `amountCents: ${body.amountCents} is more than the ${row.amount_cents} authorized`,
          });
        }
        try {
          await c.query({
            text: `INSERT INTO provider.captures (idempotency_key, request_hash, authorization_key, amount_cents, status, failure_code)
                   VALUES ($1, $2, $3, $4, $5, $6)`,
            values: [
              captureKey,
              hash,
              authorizationKey,
              body.amountCents,
              failure ? 'failed' : 'succeeded',
              failure ?? null,
            ],
          });
        } catch (err) {
          // The same capture key, for another authorization, committed meanwhile: retry to see it.
          if (isUniqueViolation(err)) throw inFlightError();
          throw err;
        }
        return false;
      });
    } finally {
      capturing.delete(captureKey);
    }
    const capture = toCapture((await pool.query<CaptureRow>({ text: CAPTURE_SELECT, values: [captureKey] })).rows[0]!);
    if (!replayed)
      log('capture', { key: captureKey, authorizationKey, status: capture.status, failure: capture.failureCode });
    return { capture, replayed };
  }

  /** The capture's inquiry: the capture (succeeded or failed), or undefined (not seen). */
  async function getCapture(captureKey: string): Promise<Capture | undefined> {
    const row = (await pool.query<CaptureRow>({ text: CAPTURE_SELECT, values: [captureKey] })).rows[0];
    return row && toCapture(row);
  }

  /**
   * Releases a held (or lapsed) authorization, in the key's transaction: true when this call voided
   * it. A voided, declined or processing one is left as it is; a captured one is refused by the
   * caller, which knows its own answer.
   */
  async function release(c: PoolClient, row: AuthorizationRow, source: 'void' | 'cancel'): Promise<boolean> {
    const status = statusOf(row);
    if (status !== 'authorized' && status !== 'expired') return false;
    await c.query({
      text: 'INSERT INTO provider.voids (authorization_key, source) VALUES ($1, $2)',
      values: [row.idempotency_key, source],
    });
    log('void', { key: row.idempotency_key, source, was: status });
    return true;
  }

  /**
   * The void: a held authorization released (an expired one too, so a compensation never fails on a
   * hold that lapsed). Idempotent: a voided one answers again (`replayed`), a declined one as it is
   * (nothing is held). A captured one is refused (409 `authorization_captured`: refund the capture).
   */
  async function voidAuthorization(key: string): Promise<{ authorization: Authorization; replayed: boolean }> {
    return withTransaction(pool, async (c) => {
      await lockKey(c, 'provider.authorization-key', key);
      const row = await read(c, key);
      if (!row) throw await noAuthorization(c, key);
      const status = statusOf(row);
      if (status === 'processing') throw processingRefusal(key, 'void');
      if (status === 'captured') {
        throw new HttpError(409, {
          error: 'authorization_captured',
          message: `authorization ${key} was captured (${row.capture_key}): refund the capture instead`,
        });
      }
      await release(c, row, 'void');
      return { authorization: toAuthorization((await select(c, key))!), replayed: status === 'voided' };
    });
  }

  /**
   * The technical cancel: under the key's lock, the authorization made under the key, with its hold
   * released if it held one (`found`, as it is after the cancel: voided, declined, captured, or still
   * processing), or else the key closed (idempotent: a closed key stays closed, with its first
   * closing time), so a late authorization under it is refused.
   */
  async function cancelAuthorization(key: string): Promise<AuthorizationCancelResult> {
    const r = await withTransaction(pool, async (c) => {
      await lockKey(c, 'provider.authorization-key', key);
      const row = await read(c, key);
      if (row) {
        await release(c, row, 'cancel');
        return { authorization: toAuthorization((await select(c, key))!) };
      }
      const inserted = await c.query({
        text: 'INSERT INTO provider.closed_authorization_keys (idempotency_key) VALUES ($1) ON CONFLICT (idempotency_key) DO NOTHING',
        values: [key],
      });
      return { closed: (await closedKey(c, key))!, first: Boolean(inserted.rowCount) };
    });
    if (r.authorization) return { outcome: 'found', authorization: r.authorization };
    if (r.first) log('authorization key closed', { key });
    return { outcome: 'closed', ...r.closed };
  }

  return {
    getAuthorization,
    createAuthorization,
    createCapture,
    getCapture,
    voidAuthorization,
    cancelAuthorization,
  };
}
