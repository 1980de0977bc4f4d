/** The pool helpers survive a server that goes away mid-transaction (as in the chaos soak's Postgres restart). */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Pool } from 'pg';
import { withTransaction } from '../db/pool';
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
