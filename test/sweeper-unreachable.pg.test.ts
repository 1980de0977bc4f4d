/**
 * A sweep that cannot reach Temporal at all (a client to a closed port: every call fails as
 * UNAVAILABLE) fails as a whole, to be retried, and hands nobody over; the open rows are real.
 */
import net from 'node:net';
import { Client, Connection, defaultGrpcRetryOptions, makeGrpcRetryInterceptor } from '@temporalio/client';
import { MockActivityEnvironment } from '@temporalio/testing';
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SweeperStats, sweeperActivities } from '../activities/sweeper';
import { orderStore } from '../lib/order-store';
import { testPool, uid } from './support/helpers';

let db: Pool;
beforeAll(() => {
  db = testPool();
});
afterAll(async () => {
  await db.end();
});

/** A loopback port nobody listens on: bound, then closed. */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((r) => server.close(() => r()));
  return port;
}

describe('a sweep that cannot reach Temporal', () => {
  it('fails as a whole (the workflow retries it) and tells nobody about any order', async () => {
    const ids = [`unreach-${uid()}`, `unreach-${uid()}`];
    for (const id of ids)
      await db.query({
        text: `INSERT INTO orders (order_id, customer_id, status, currency, total_cents, items, payment_method, workflow_id, updated_at)
               VALUES ($1, 'c', 'CHARGED', 'USD', 1000, '[]'::jsonb, 'tok_visa', $2, now() - interval '1 hour')`,
        values: [id, `order:${id}`],
      });
    const connection = Connection.lazy({
      address: `127.0.0.1:${await closedPort()}`,
      interceptors: [makeGrpcRetryInterceptor(defaultGrpcRetryOptions({ maxAttempts: 2 }))],
    });
    const client = new Client({ connection });
    const stats = new SweeperStats();
    const sweep = sweeperActivities({
      db,
      temporal: { client: () => Promise.resolve(client), taskQueue: `unreach-${uid()}` },
      stats,
    }).sweepOrders;
    try {
      await expect(new MockActivityEnvironment().run(sweep, { orderIds: ids, graceMs: 0 })).rejects.toThrow();
    } finally {
      await connection.close();
    }
    expect(stats.unreadable).toBe(0);
    expect(stats.handedToPerson).toBe(0);
    for (const orderId of ids) expect(await orderStore(db).sweeperActions({ limit: 10, orderId })).toEqual([]);
    await db.query({ text: 'DELETE FROM orders WHERE order_id = ANY ($1)', values: [ids] });
  });
});
