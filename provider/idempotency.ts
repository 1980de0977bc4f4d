/**
 * What every keyed call of the ledger shares: the request's hash, the key's lock, and the refusals of
 * a key in flight or reused with other parameters.
 */
import { createHash } from 'node:crypto';
import type { PoolClient } from 'pg';
import { HttpError } from '../platform/http';
import { KEY_CLOSED_ERROR, KEY_CLOSED_STATUS } from './api';

/** The hex SHA-256 the ledger stores: of a request's parameters, and of each API key. */
export const sha256 = (s: string): string => createHash('sha256').update(s).digest('hex');

/**
 * The lock spaces of the keys: a charge key and an authorization key are separate key spaces (an
 * authorization's capture, void and cancel take the authorization key's lock).
 */
export type KeySpace = 'provider.charge-key' | 'provider.authorization-key';

/**
 * The key's lock, taken first by each transaction that makes, changes or closes what the key names: a
 * charge and a technical cancel of one key (or a capture, a void and a cancel of one authorization)
 * are serialized whatever holds either up (a table lock before its first write, say), and the second
 * sees what the first committed. A two-int advisory lock, in its own space (apart from the one-bigint
 * locks of the migrations and roles); two keys that hash alike merely wait for each other.
 */
export async function lockKey(c: PoolClient, space: KeySpace, key: string): Promise<void> {
  await c.query({ text: `SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2))`, values: [space, key] });
}

export const inFlight = (): HttpError =>
  new HttpError(409, { error: 'request_in_flight', message: 'a request with this Idempotency-Key is in flight' });

export const keyReused = (): HttpError =>
  new HttpError(422, {
    error: 'idempotency_key_reused',
    message: 'this Idempotency-Key was used with other parameters',
  });

/** The refusal of a new charge or authorization under a key a cancel closed: final, nothing written. */
export const keyClosed = (what: 'charge' | 'authorization', key: string): HttpError =>
  new HttpError(KEY_CLOSED_STATUS, {
    error: KEY_CLOSED_ERROR,
    message: `${what} key ${key} was closed by a cancel: no ${what} can be made under it`,
  });

/** A unique violation: the same key, written meanwhile by another transaction. */
export const isUniqueViolation = (err: unknown): boolean => (err as { code?: string }).code === '23505';
