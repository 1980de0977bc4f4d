/**
 * The provider's ledger in Postgres (schema `provider`): charges, refunds, closed keys, inquiries,
 * each once per Idempotency-Key under the key's advisory lock; and the API keys in force, hashed.
 * Its refusals are the API's (HttpError), so the routes pass them on as they are.
 */
import { createHash } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Pool, PoolClient } from 'pg';
import { assertMigrated, PROVIDER_MIGRATIONS } from '../db/migrate';
import { withTransaction } from '../db/pool';
import { HttpError } from '../platform/http';
import {
  DECLINED_PAYMENT_METHODS,
  KEY_CLOSED_ERROR,
  KEY_CLOSED_STATUS,
  type CancelResult,
  type Charge,
  type ChargeRequest,
  type ClosedKey,
  type Inquiry,
  type Refund,
  type RefundRequest,
} from './api';
import { DEV_PROVIDER_API_KEY } from './defaults';
import { log } from './log';

/** The hex SHA-256 the ledger stores: of a request's parameters, and of each API key. */
export const sha256 = (s: string): string => createHash('sha256').update(s).digest('hex');

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
  ): Promise<{ charge: Charge; replayed: boolean }> {
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

  async function createRefund(key: string, body: RefundRequest): Promise<{ refund: Refund; replayed: boolean }> {
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
        return { refund, replayed: true };
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
        refund: { idempotencyKey: key, chargeKey: body.chargeKey, amountCents: body.amountCents, status: 'succeeded' },
        replayed: false,
      };
    });
  }

  return { getCharge, cancelCharge, createCharge, createRefund };
}
export type Ledger = ReturnType<typeof createLedger>;

/** The ledger on `pool`: refuses a schema not migrated, and records the API keys in force. */
export async function openLedger(pool: Pool, apiKeys: string[]): Promise<Ledger> {
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
  return createLedger(pool);
}
