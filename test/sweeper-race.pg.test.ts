/**
 * The sweeper reads the open rows once, then looks at each order's run. An order whose run settles
 * it in between (its last local activity commits just before the run closes) must be left alone:
 * the row, read again when the run is found closed, decides. Temporal is a stand-in here (the
 * sweeper's only calls: the list of running sagas, describe, then start for a restart); the rows are
 * real.
 */
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { MockActivityEnvironment } from '@temporalio/testing';
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sweeperActivities, type SweepReport } from '../activities/sweeper';
import { orderStore } from '../orders/order-store';
import { testPool, uid } from './support/helpers';

let db: Pool;
beforeAll(() => {
  db = testPool();
});
afterAll(async () => {
  await db.end();
});

async function openOrder(id: string): Promise<void> {
  await db.query({
    text: `INSERT INTO orders (order_id, customer_id, status, currency, total_cents, items, payment_method, workflow_id, created_at, updated_at)
           VALUES ($1, 'c', 'SHIPPED', 'USD', 1000, '[]'::jsonb, 'tok_visa', $2, now() - interval '1 hour', now() - interval '1 hour')`,
    values: [id, `order:${id}`],
  });
}

/** A Temporal stand-in: the run is not found; `beforeAnswer` runs first; starts are counted. */
function standIn(beforeAnswer: () => Promise<void>): { client: Client; starts: string[] } {
  const starts: string[] = [];
  const client = {
    workflow: {
      list: async function* () {}, // no running saga of a settled order
      getHandle: (workflowId: string) => ({
        describe: async () => {
          await beforeAnswer();
          throw new WorkflowNotFoundError('not found', workflowId, undefined);
        },
      }),
      start: async (_type: string, opts: { workflowId: string }) => {
        starts.push(opts.workflowId);
        return { firstExecutionRunId: `run-${uid()}`, signal: async () => undefined };
      },
    },
  } as unknown as Client;
  return { client, starts };
}

const sweepOne = (client: Client, orderId: string): Promise<SweepReport> =>
  new MockActivityEnvironment().run(
    sweeperActivities({ db, temporal: { client: () => Promise.resolve(client), taskQueue: `race-${uid()}` } })
      .sweepOrders,
    { orderIds: [orderId], graceMs: 0 },
  );

describe('the sweeper and an order that settles while it sweeps', () => {
  it('an order its run completed after the rows were read is not restarted', async () => {
    const orderId = `race-${uid()}`;
    await openOrder(orderId);
    const { client, starts } = standIn(async () => {
      await db.query({ text: `UPDATE orders SET status = 'COMPLETED' WHERE order_id = $1`, values: [orderId] });
    });
    const report = await sweepOne(client, orderId);
    expect(report.actions).toEqual([]);
    expect(starts).toEqual([]);
    expect(await orderStore(db).sweeperActions({ limit: 10, orderId })).toEqual([]);
  });

  it('the same order still open is restarted (the stand-in reaches the restart)', async () => {
    const orderId = `race-${uid()}`;
    await openOrder(orderId);
    const { client, starts } = standIn(async () => undefined);
    const report = await sweepOne(client, orderId);
    expect(starts).toEqual([`order:${orderId}`]);
    expect(report.actions.map((a) => a.action)).toEqual(['restart']);
  });
});
