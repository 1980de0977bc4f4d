/**
 * The workflow's fallback to the serial inventory lanes, on the real time-skipping server with a real
 * Postgres: routing on `route-to-lane` and on ContentionExhausted, and one task at a time per lane.
 */
import { WorkflowClient } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import type { Pool } from 'pg';
import { describe, expect, it } from 'vitest';
import { createActivities, type OrderActivities } from '../activities';
import type { ReserveRequest, ReserveResult } from '../activities/inventory';
import { laneFor, laneTaskQueue } from '../domain/lanes';
import { workflowIdFor, type OrderInput } from '../domain/order';
import { orderSaga } from '../workflows';
import { useSagaTestEnv } from './support/saga-test-env';
import { dataConverter } from './support/temporal-env';
import { createProduct, holds, makeOrder, productRow, reservations, testProvider, uid } from './support/helpers';

let env: TestWorkflowEnvironment;
let bundle: WorkflowBundleWithSourceMap;
let db: Pool;

useSagaTestEnv({ server: 'timeskip' }, { started: (saga) => ({ env, bundle, db } = saga) });
/** Runs the main worker and two lane workers (one task at a time each) until `body` is done. */
async function withLanes<T>(
  main: OrderActivities,
  lane: (n: number) => Pick<OrderActivities, 'reserveInventorySerial'>,
  body: (taskQueue: string) => Promise<T>,
): Promise<T> {
  const taskQueue = `lanes-${uid()}`;
  const workers = [
    await Worker.create({
      dataConverter: dataConverter(),
      connection: env.nativeConnection,
      taskQueue,
      workflowBundle: bundle,
      activities: main,
    }),
    ...(await Promise.all(
      [0, 1].map((n) =>
        Worker.create({
          dataConverter: dataConverter(),
          connection: env.nativeConnection,
          taskQueue: laneTaskQueue(taskQueue, n),
          activities: lane(n),
          maxConcurrentActivityTaskExecutions: 1,
        }),
      ),
    )),
  ];
  const running = workers.map((w) => w.run());
  try {
    return await body(taskQueue);
  } finally {
    for (const w of workers) w.shutdown();
    await Promise.all(running);
  }
}

/**
 * Waits without skipping time: the lane test measures real concurrency, and skipped time would only
 * make queued tasks look old.
 */
const run = (taskQueue: string, order: OrderInput) =>
  new WorkflowClient({ connection: env.connection, dataConverter: dataConverter() }).execute(orderSaga, {
    taskQueue,
    workflowId: workflowIdFor(order.orderId),
    args: [order],
  });

describe('serial lane fallback', () => {
  it.each([
    [
      'the activity says route-to-lane',
      async (): Promise<ReserveResult> => ({
        outcome: 'route-to-lane',
        path: 'cas',
        attempts: 0,
        conflicts: 0,
        reason: 'hot',
      }),
    ],
    [
      'CAS attempts are exhausted',
      async (): Promise<ReserveResult> => {
        throw ApplicationFailure.create({ type: 'ContentionExhausted', message: 'gave up', nonRetryable: true });
      },
    ],
  ])('%s: the workflow reserves through the lane, once, and completes', async (_name, cas) => {
    const p = await createProduct(db, { stock: 9, priceCents: 500 });
    const order = makeOrder([{ sku: p.sku, qty: 2, unitPriceCents: p.priceCents }]);
    const real = createActivities({ db, provider: testProvider() });
    const laneCalls: number[] = [];
    const result = await withLanes(
      { ...real, reserveInventory: cas },
      (n) => ({
        reserveInventorySerial: async (req: ReserveRequest) => (laneCalls.push(n), real.reserveInventorySerial(req)),
      }),
      (tq) => run(tq, order),
    );
    expect(result.status).toBe('COMPLETED');
    expect(laneCalls).toEqual([laneFor([p.sku], 2)]);
    expect(await reservations(db, order.orderId)).toEqual([{ sku: p.sku, qty: 2, status: 'SOLD' }]);
    expect((await productRow(db, p.sku)).stock).toBe(7);
    expect((await holds(db, order.orderId)).captures).toEqual([{ status: 'succeeded', amount: expect.any(Number) }]);
  });

  it('each lane runs one task at a time; nothing is dropped', async () => {
    // Products whose SKUs hash to lane 0 and to lane 1.
    const byLane: Record<number, { sku: string; priceCents: number }[]> = { 0: [], 1: [] };
    while (byLane[0]!.length < 3 || byLane[1]!.length < 3) {
      const p = await createProduct(db, { stock: 5, priceCents: 300 });
      const l = laneFor([p.sku], 2);
      if (byLane[l]!.length < 3) byLane[l]!.push(p);
    }
    const real = createActivities({ db, provider: testProvider() });
    const inFlight = { 0: 0, 1: 0 } as Record<number, number>;
    const maxInFlight = { 0: 0, 1: 0 } as Record<number, number>;
    let maxTotal = 0;
    const lane = (n: number) => ({
      reserveInventorySerial: async (req: ReserveRequest) => {
        inFlight[n]!++;
        maxInFlight[n] = Math.max(maxInFlight[n]!, inFlight[n]!);
        maxTotal = Math.max(maxTotal, inFlight[0]! + inFlight[1]!);
        try {
          await new Promise((r) => setTimeout(r, 150)); // long enough for tasks to pile up
          return await real.reserveInventorySerial(req);
        } finally {
          inFlight[n]!--;
        }
      },
    });
    const route = async (): Promise<ReserveResult> => ({
      outcome: 'route-to-lane',
      path: 'cas',
      attempts: 0,
      conflicts: 0,
      reason: 'hot',
    });
    const orders = [...byLane[0]!, ...byLane[1]!].map((p) =>
      makeOrder([{ sku: p.sku, qty: 1, unitPriceCents: p.priceCents }]),
    );
    const results = await withLanes({ ...real, reserveInventory: route }, lane, (tq) =>
      Promise.all(orders.map((o) => run(tq, o))),
    );
    expect(results.map((r) => `${r.status} ${r.reason ?? ''}`.trim())).toEqual(Array(6).fill('COMPLETED'));
    expect(maxInFlight).toEqual({ 0: 1, 1: 1 });
    expect(maxTotal).toBeLessThanOrEqual(2);
    for (const o of orders) expect((await reservations(db, o.orderId)).map((r) => r.status)).toEqual(['SOLD']);
  });
});
