/**
 * Which failures stop a sweep: one that cannot reach Temporal at all (a client to a closed port: every
 * call fails as UNAVAILABLE) fails as a whole, to be retried, and hands nobody over; a description that
 * fails for one order only (a stand-in client) hands that order to a person and the sweep goes on.
 * The open rows are real.
 */
import net from 'node:net';
import {
  Client,
  Connection,
  defaultGrpcRetryOptions,
  makeGrpcRetryInterceptor,
  WorkflowNotFoundError,
} from '@temporalio/client';
import { MockActivityEnvironment } from '@temporalio/testing';
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SweeperStats, sweeperActivities, type SweepReport } from '../activities/sweeper';
import { orderStore } from '../orders/order-store';
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

async function openOrders(n: number): Promise<string[]> {
  const ids = Array.from({ length: n }, () => `unreach-${uid()}`);
  for (const id of ids)
    await db.query({
      text: `INSERT INTO orders (order_id, customer_id, status, currency, total_cents, items, payment_method, workflow_id, updated_at)
             VALUES ($1, 'c', 'CHARGED', 'USD', 1000, '[]'::jsonb, 'tok_visa', $2, now() - interval '1 hour')`,
      values: [id, `order:${id}`],
    });
  return ids;
}

/** A gRPC error as the client raises it, with its status code. */
const grpcError = (code: number, message: string): Error =>
  Object.assign(new Error(message), { code, details: message, metadata: {} });

describe('a sweep that cannot reach Temporal', () => {
  it('fails as a whole (the workflow retries it) and tells nobody about any order', async () => {
    const ids = await openOrders(2);
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

describe('a description that fails for one order only', () => {
  it.each([
    ['an internal error', 13],
    ['a deadline, while the server answers other calls', 4],
  ])('(%s) hands that order to a person, and the sweep restarts the next', async (_what, code) => {
    const [bad, good] = await openOrders(2);
    const starts: string[] = [];
    const client = {
      options: { namespace: 'default' },
      workflowService: { getSystemInfo: async () => ({}) },
      workflow: {
        // The visibility store down as well: the open orders are swept all the same.
        list: () => {
          throw grpcError(13, 'visibility store says no');
        },
        getHandle: (workflowId: string) => ({
          describe: async () => {
            if (workflowId === `order:${bad}`) throw grpcError(code, 'history shard says no');
            throw new WorkflowNotFoundError('not found', workflowId, undefined);
          },
        }),
        start: async (_type: string, opts: { workflowId: string }) => {
          starts.push(opts.workflowId);
          return { firstExecutionRunId: `run-${uid()}` };
        },
      },
    } as unknown as Client;
    const stats = new SweeperStats();
    const sweep = (): Promise<SweepReport> =>
      new MockActivityEnvironment().run(
        sweeperActivities({ db, temporal: { client: () => Promise.resolve(client), taskQueue: `q-${uid()}` }, stats })
          .sweepOrders,
        { orderIds: [bad!, good!], graceMs: 0 },
      );
    const report = await sweep();
    expect(report.unreadable).toBe(1);
    expect(stats.unreadable).toBe(1);
    expect(report.actions.map((a) => [a.orderId, a.action, a.cause])).toEqual([
      [bad, 'person', 'unreadable'],
      [good, 'restart', 'missing'],
    ]);
    expect(report.actions[0]!.reason).toMatch(/could not describe its run: .*history shard says no/);
    expect(starts).toEqual([`order:${good}`]);
    await db.query({ text: 'DELETE FROM orders WHERE order_id = ANY ($1)', values: [[bad, good]] });
  });
});
