/**
 * `npm start`'s dev server keeps history in a SQLite file with the settings of
 * servers/temporal-dev.ts (WAL, synchronous=normal). A saga in flight when that server stops (as
 * npm start stops it on Ctrl-C) completes after it starts again on the same file: nothing is lost,
 * and the hold is made and captured once.
 */
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker } from '@temporalio/worker';
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createActivities, type OrderActivities } from '../activities';
import { workflowIdFor, type OrderResult } from '../domain/order';
import { createProduct, holds, ledger, makeOrder, orderRow, testPool, testProvider, uid } from './support/helpers';
import { bundleWorkflows, dataConverter, startDevServer } from './support/temporal-env';

let db: Pool;
let dir: string;
const envs: TestWorkflowEnvironment[] = [];

beforeAll(() => {
  db = testPool();
  dir = mkdtempSync(path.join(os.tmpdir(), 'order-saga-durable-'));
  chmodSync(dir, 0o700);
});

afterAll(async () => {
  for (const env of envs) await env.teardown().catch(() => undefined);
  await db?.end();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('the file-backed dev server of npm start', () => {
  it('a saga in flight when the server stops completes after it starts again, held and captured once', async () => {
    const dbFilename = path.join(dir, 'temporal.db');
    const bundle = await bundleWorkflows();
    const taskQueue = `durable-${uid()}`;
    const real = createActivities({ db, provider: testProvider() });
    let reached!: () => void;
    const atHold = new Promise<void>((r) => (reached = r));
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    // The first hold is made at the provider, then its answer is held until the server has stopped.
    let first = true;
    const activities: OrderActivities = {
      ...real,
      authorizePayment: async (req) => {
        const out = await real.authorizePayment(req);
        if (first) {
          first = false;
          reached();
          await held;
        }
        return out;
      },
    };

    const before = await startDevServer({ dbFilename });
    envs.push(before);
    const p = await createProduct(db, { stock: 5, priceCents: 700 });
    const order = makeOrder([{ sku: p.sku, qty: 1, unitPriceCents: 700 }], { orderId: `durable-${uid()}` });
    const worker1 = await Worker.create({
      dataConverter: dataConverter(),
      connection: before.nativeConnection,
      taskQueue,
      workflowBundle: bundle,
      activities,
      shutdownGraceTime: '1s',
    });
    const running1 = worker1.run().catch(() => undefined); // it loses its server below
    await before.client.workflow.start('orderSaga', {
      taskQueue,
      workflowId: workflowIdFor(order.orderId),
      args: [order],
    });
    await atHold;

    // The stop, in npm start's order: the worker (the hold's answer goes out as it drains), then the server.
    worker1.shutdown();
    release();
    await running1;
    await before.teardown();
    envs.splice(envs.indexOf(before), 1);
    expect((await orderRow(db, order.orderId))?.status).not.toBe('COMPLETED');

    const after = await startDevServer({ dbFilename });
    envs.push(after);
    const worker2 = await Worker.create({
      dataConverter: dataConverter(),
      connection: after.nativeConnection,
      taskQueue,
      workflowBundle: bundle,
      activities: real,
    });
    const result = await worker2.runUntil(() =>
      after.client.workflow.getHandle<() => Promise<OrderResult>>(workflowIdFor(order.orderId)).result(),
    );
    expect(result.status).toBe('COMPLETED');
    expect((await orderRow(db, order.orderId))?.status).toBe('COMPLETED');
    const money = await holds(db, order.orderId);
    expect(money.authorizations).toEqual([{ status: 'authorized', amount: 700 }]);
    expect(money.captures).toEqual([{ status: 'succeeded', amount: 700 }]);
    expect(await ledger(db, order.orderId)).toEqual({ charges: [], refunds: [] });
  });
});
