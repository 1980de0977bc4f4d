/**
 * Key rotation at the provider: it accepts exactly the keys it is configured with now. A key removed
 * from the configuration (the development default included) gets 401 after a restart; during a
 * rotation, PROVIDER_API_KEYS / PROVIDER_ADMIN_KEYS list both. A real provider process, each time.
 */
import { createHash } from 'node:crypto';
import type { ChildProcess } from 'node:child_process';
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { startProviderProcess, startTsProcess, stopProcess } from '../platform/processes';
import { DEV_PROVIDER_ADMIN_KEY, DEV_PROVIDER_API_KEY } from '../provider/defaults';
import { testPool } from './support/helpers';

let db: Pool;
let child: ChildProcess | undefined;
beforeAll(() => {
  db = testPool();
});
afterAll(async () => {
  await stopProcess(child);
  await db.end();
});

async function provider(env: Record<string, string>): Promise<{ url: string; adminUrl: string }> {
  await stopProcess(child);
  const p = await startProviderProcess({
    DATABASE_URL: inject('roleUrls').provider,
    PROVIDER_PORT: '0',
    PROVIDER_ADMIN_PORT: '0',
    ...env,
  });
  child = p.child;
  return p;
}
const status = async (url: string, key: string): Promise<number> =>
  (await fetch(url, { headers: { authorization: `Bearer ${key}` } })).status;
const sha = (k: string): string => createHash('sha256').update(k).digest('hex');

describe('provider keys: rotation', () => {
  it('accepts exactly the configured keys; a removed key gets 401 on the payment and the admin API', async () => {
    // During the rotation: old and new keys both work.
    let p = await provider({
      PROVIDER_API_KEYS: 'key-old-1234, key-new-5678',
      PROVIDER_ADMIN_KEYS: 'adm-old-1234,adm-new-5678',
    });
    const inquiry = (base: string): string => new URL('/v1/charges/never-seen%3Acharge', base).toString();
    const faults = (base: string): string => new URL('/admin/faults', base).toString();
    expect(await status(inquiry(p.url), 'key-old-1234')).toBe(404); // authenticated: the charge is unknown
    expect(await status(inquiry(p.url), 'key-new-5678')).toBe(404);
    expect(await status(faults(p.adminUrl), 'adm-old-1234')).toBe(200);
    expect(await status(faults(p.adminUrl), 'adm-new-5678')).toBe(200);
    expect(await status(inquiry(p.url), DEV_PROVIDER_API_KEY)).toBe(401); // the default was never configured here

    // After it: only the new keys. The old ones, and the development defaults, get 401.
    p = await provider({ PROVIDER_API_KEY: 'key-new-5678', PROVIDER_ADMIN_KEY: 'adm-new-5678' });
    expect(await status(inquiry(p.url), 'key-new-5678')).toBe(404);
    expect(await status(inquiry(p.url), 'key-old-1234')).toBe(401);
    expect(await status(inquiry(p.url), DEV_PROVIDER_API_KEY)).toBe(401);
    expect(await status(faults(p.adminUrl), 'adm-new-5678')).toBe(200);
    expect(await status(faults(p.adminUrl), 'adm-old-1234')).toBe(401);
    expect(await status(faults(p.adminUrl), DEV_PROVIDER_ADMIN_KEY)).toBe(401);
    // The table of keys in force says the same (hashed).
    const rows = await db.query<{ key_hash: string }>('SELECT key_hash FROM provider.api_keys');
    expect(rows.rows.map((r) => r.key_hash)).toEqual([sha('key-new-5678')]);
  });

  it('a malformed key list is refused at start, naming the variable', async () => {
    await stopProcess(child);
    child = undefined;
    const start = startTsProcess(
      'provider/server.ts',
      {
        DATABASE_URL: inject('roleUrls').provider,
        PROVIDER_PORT: '0',
        PROVIDER_ADMIN_PORT: '0',
        PROVIDER_API_KEYS: 'good-key-1234,',
      },
      /listening/,
    );
    await expect(start).rejects.toThrow(/PROVIDER_API_KEYS: each key must be 8 to 200 printable characters/);
  });
});
