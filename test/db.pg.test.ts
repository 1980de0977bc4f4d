/** The pool helpers survive a server that goes away mid-transaction (as in the chaos soak's Postgres restart). */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Pool } from 'pg';
import { createPool, isConnectionError, withTransaction } from '../db/pool';
import { inject } from 'vitest';
import { testPool } from './support/helpers';

let db: Pool;
beforeAll(() => {
  db = testPool();
});
afterAll(async () => {
  await db.end();
});

describe('withTransaction', () => {
  it('a connection killed between two statements rejects the transaction, does not crash the process, and is not reused', async () => {
    const killer = testPool();
    try {
      let pid = 0;
      await expect(
        withTransaction(db, async (c) => {
          pid = (await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
          await killer.query({ text: 'SELECT pg_terminate_backend($1)', values: [pid] });
          await new Promise((r) => setTimeout(r, 200)); // the 'error' event arrives here, between statements
          await c.query('SELECT 1');
        }),
      ).rejects.toThrow();
      const after = await withTransaction(
        db,
        async (c) => (await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid,
      );
      expect(after).not.toBe(pid);
    } finally {
      await killer.end();
    }
  });
});

describe('isConnectionError', () => {
  it('says so of a killed connection and of a refused one, not of a statement the server refused', async () => {
    const killer = testPool();
    try {
      const killed = await withTransaction(db, async (c) => {
        const { pid } = (await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!;
        await killer.query({ text: 'SELECT pg_terminate_backend($1)', values: [pid] });
        await new Promise((r) => setTimeout(r, 200));
        await c.query('SELECT 1');
      }).catch((e: unknown) => e);
      expect(isConnectionError(killed), String(killed)).toBe(true);
      const url = new URL(inject('databaseUrl'));
      url.port = '1'; // nothing listens there
      const nowhere = createPool(url.toString(), { connectionTimeoutMillis: 2_000 });
      const refused = await nowhere.query('SELECT 1').catch((e: unknown) => e);
      await nowhere.end();
      expect(isConnectionError(refused)).toBe(true);
      const syntax = await db.query('SELEC 1').catch((e: unknown) => e);
      expect(isConnectionError(syntax)).toBe(false);
    } finally {
      await killer.end();
    }
  });
});
