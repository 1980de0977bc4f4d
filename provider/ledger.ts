/**
 * The provider's ledger in Postgres (schema `provider`): charges, refunds, closed keys, inquiries,
 * each once per Idempotency-Key under the key's advisory lock; the authorizations (holds.ts); and the
 * API keys in force, hashed. Its refusals are the API's (HttpError), so the routes pass them on as
 * they are.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Pool, PoolClient } from 'pg';
import { assertMigrated, PROVIDER_MIGRATIONS } from '../db/migrate';
import { withTransaction } from '../db/pool';
import { HttpError } from '../platform/http';
import {
  DECLINED_PAYMENT_METHODS,
  type CancelResult,
  type Charge,
  type ChargeRequest,
  type ClosedKey,
  type Inquiry,
  type Refund,
  type RefundRequest,
} from './api';
import { DEV_PROVIDER_API_KEY } from './defaults';
import { createHolds } from './holds';
import { inFlight as inFlightError, isUniqueViolation, keyClosed, keyReused, lockKey, sha256 } from './idempotency';
import { log } from './log';

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

/** The provider's ledger in Postgres: charges and refunds, each once per Idempotency-Key; closed keys. */
function createLedger(pool: Pool, opts: { authExpiryMs: number }) {
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
      await lockKey(c, 'provider.charge-key', key);
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
  ): Promise<{ charge: Charge; replayed: boolean }> {
    const hash = sha256(JSON.stringify([body.amountCents, body.currency, body.paymentMethod, body.reference ?? null]));
    if (inFlight.has(key)) throw inFlightError();
    inFlight.add(key);
    try {
      // Under the key's lock: a key a cancel closed takes no charge, and a cancel that comes after this
      // finds the charge. Without a delay the charge is decided in the same transaction, so no cancel
      // or inquiry ever sees it `processing`.
      const inserted = await withTransaction(pool, async (c) => {
        await lockKey(c, 'provider.charge-key', key);
        if (await closedKey(c, key)) throw keyClosed('charge', key);
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
        if (rows[0] && rows[0].request_hash !== hash) throw keyReused();
        inFlight.delete(key); // the row is not ours to decide: recover it if it was cut off
        const row = await recover(rows[0]);
        if (!row) throw new HttpError(409, { error: 'conflict', message: 'charge is being written; retry' });
        return { charge: toCharge(row), replayed: true };
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
    return { charge, replayed: false };
  }

  /**
   * A refund of a charge or of a capture: only of money taken (a succeeded charge or capture), and
   * never more than it, summed over its refunds. An authorization never captured has nothing to
   * refund: its hold is voided instead.
   */
  async function createRefund(key: string, body: RefundRequest): Promise<{ refund: Refund; replayed: boolean }> {
    const of =
      'captureKey' in body
        ? ({ kind: 'capture', table: 'captures', field: 'captureKey', key: body.captureKey } as const)
        : ({ kind: 'charge', table: 'charges', field: 'chargeKey', key: body.chargeKey } as const);
    // A charge's refund hashes as before captures existed, so the refunds already written still replay.
    const hash = sha256(
      JSON.stringify(of.kind === 'charge' ? [of.key, body.amountCents] : ['capture', of.key, body.amountCents]),
    );
    const answer = (amountCents: number): Refund =>
      of.kind === 'charge'
        ? { idempotencyKey: key, chargeKey: of.key, amountCents, status: 'succeeded' }
        : { idempotencyKey: key, captureKey: of.key, amountCents, status: 'succeeded' };
    return withTransaction(pool, async (c) => {
      // Serialise refunds of one charge (or capture), so their sum can never pass its amount.
      const taken = await c.query<{ amount_cents: string; status: string }>({
        text: `SELECT amount_cents, status FROM provider.${of.table} WHERE idempotency_key = $1 FOR UPDATE`,
        values: [of.key],
      });
      const existing = await c.query<{ request_hash: string; amount_cents: string }>({
        text: 'SELECT request_hash, amount_cents FROM provider.refunds WHERE idempotency_key = $1',
        values: [key],
      });
      const prior = existing.rows[0];
      if (prior) {
        if (prior.request_hash !== hash) throw keyReused();
        return { refund: answer(Number(prior.amount_cents)), replayed: true };
      }
      const row = taken.rows[0];
      if (!row) throw await notFound(c, of.kind, of.key);
      if (row.status !== 'succeeded') {
        throw new HttpError(422, {
          error: `${of.kind}_not_refundable`,
          field: of.field,
          message: `${of.kind} is ${row.status}`,
        });
      }
      const refunded = await c.query<{ sum: string }>({
        text: `SELECT COALESCE(sum(amount_cents), 0) AS sum FROM provider.refunds WHERE ${of.kind}_key = $1`,
        values: [of.key],
      });
      if (Number(refunded.rows[0]!.sum) + body.amountCents > Number(row.amount_cents)) {
        throw new HttpError(422, {
          error: `refund_exceeds_${of.kind}`,
          field: 'amountCents',
          message: `refunds would exceed the ${of.kind}`,
        });
      }
      try {
        await c.query({
          text: `INSERT INTO provider.refunds (idempotency_key, request_hash, ${of.kind}_key, amount_cents, status) VALUES ($1, $2, $3, $4, 'succeeded')`,
          values: [key, hash, of.key, body.amountCents],
        });
      } catch (err) {
        // The same key, for another charge or capture, committed meanwhile: like a charge in flight, retry to see it.
        if (isUniqueViolation(err)) throw inFlightError();
        throw err;
      }
      log('refund', { key, [of.field]: of.key, amountCents: body.amountCents });
      return { refund: answer(body.amountCents), replayed: false };
    });
  }

  /** No charge (or capture) under the key; a capture key that names an authorization says so. */
  async function notFound(c: PoolClient, kind: 'charge' | 'capture', key: string): Promise<HttpError> {
    const field = kind === 'charge' ? 'chargeKey' : 'captureKey';
    const held =
      kind === 'capture' &&
      Boolean(
        (
          await c.query({
            text: 'SELECT 1 FROM provider.authorizations WHERE idempotency_key = $1',
            values: [key],
          })
        ).rowCount,
      );
    return new HttpError(404, {
      error: `${kind}_not_found`,
      field,
      message: held
        ? `no capture with that key: ${key} is an authorization, whose hold is voided, not refunded; refund its capture`
        : `no ${kind} with that key`,
    });
  }

  return { getCharge, cancelCharge, createCharge, createRefund, ...createHolds(pool, opts) };
}
export type Ledger = ReturnType<typeof createLedger>;

/**
 * The ledger on `pool`: refuses a schema not migrated, and records the API keys in force.
 * `authExpiryMs`: how long an authorization's hold lasts.
 */
export async function openLedger(pool: Pool, apiKeys: string[], opts: { authExpiryMs: number }): Promise<Ledger> {
  // It runs with its own role, which may write its ledger but not change the schema: the owner migrates.
  await assertMigrated(pool, PROVIDER_MIGRATIONS, 'provider.schema_migrations');
  // The table records the keys in force (hashed), the ones of the provider that started last.
  await withTransaction(pool, async (c) => {
    await c.query({
      text: 'DELETE FROM provider.api_keys WHERE key_hash <> ALL($1::text[])',
      values: [apiKeys.map(sha256)],
    });
    for (const k of apiKeys) {
      await c.query({
        text: `INSERT INTO provider.api_keys (key_hash, label) VALUES ($1, $2) ON CONFLICT (key_hash) DO NOTHING`,
        values: [sha256(k), k === DEV_PROVIDER_API_KEY ? 'development default' : 'configured'],
      });
    }
  });
  return createLedger(pool, opts);
}
