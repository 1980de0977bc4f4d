/**
 * The orders API's keys (migrations/0017_api_keys.sql), one per storefront: made and revoked by
 * `client.ts api-keys`, checked by the API on every request. A key reads `osk_<keyId>_<secret>`; only
 * the SHA-256 of its secret is stored, so the table gives no key away.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Pool } from 'pg';

const KEY_RE = /^osk_([a-z0-9]{8,32})_([A-Za-z0-9_-]{43})$/;
const sha256 = (s: string): string => createHash('sha256').update(s).digest('hex');

export interface ApiKeyRow {
  keyId: string;
  storefront: string;
  createdAt: string;
  revokedAt: string | null;
}

/** Makes a key for `storefront`; the returned key is the only copy of its secret. */
export async function createApiKey(db: Pool, storefront: string): Promise<{ keyId: string; key: string }> {
  const keyId = randomBytes(8).toString('hex');
  const secret = randomBytes(32).toString('base64url');
  await db.query({
    text: 'INSERT INTO api_keys (key_id, storefront, secret_hash) VALUES ($1, $2, $3)',
    values: [keyId, storefront, sha256(secret)],
  });
  return { keyId, key: `osk_${keyId}_${secret}` };
}

/** Every key, newest first (never a secret). */
export async function listApiKeys(db: Pool): Promise<ApiKeyRow[]> {
  const { rows } = await db.query<{ key_id: string; storefront: string; created_at: Date; revoked_at: Date | null }>(
    'SELECT key_id, storefront, created_at, revoked_at FROM api_keys ORDER BY created_at DESC, key_id',
  );
  return rows.map((r) => ({
    keyId: r.key_id,
    storefront: r.storefront,
    createdAt: r.created_at.toISOString(),
    revokedAt: r.revoked_at?.toISOString() ?? null,
  }));
}

/** Revokes a key by its ID; false when there is no such key still in use. */
export async function revokeApiKey(db: Pool, keyId: string): Promise<boolean> {
  const r = await db.query({
    text: 'UPDATE api_keys SET revoked_at = now() WHERE key_id = $1 AND revoked_at IS NULL',
    values: [keyId],
  });
  return r.rowCount === 1;
}

/** The storefront and key ID of a key in use, or undefined for anything else (malformed, unknown, revoked). */
export async function verifyApiKey(db: Pool, key: string): Promise<{ keyId: string; storefront: string } | undefined> {
  const m = KEY_RE.exec(key);
  if (!m) return undefined;
  const [, keyId, secret] = m as unknown as [string, string, string];
  const { rows } = await db.query<{ storefront: string; secret_hash: string }>({
    text: 'SELECT storefront, secret_hash FROM api_keys WHERE key_id = $1 AND revoked_at IS NULL',
    values: [keyId],
  });
  const row = rows[0];
  if (!row) return undefined;
  const ok = timingSafeEqual(Buffer.from(sha256(secret), 'hex'), Buffer.from(row.secret_hash, 'hex'));
  return ok ? { keyId, storefront: row.storefront } : undefined;
}
