/**
 * Lanes stay serial across worker processes. Three real worker processes serve one task queue and its
 * lanes; two hot SKUs (one per lane) are pinned to the lanes (INVENTORY_LANE_SKUS), and 40 orders for
 * them start at once. Every lane task records its start and end on the database's clock
 * (lane_tasks); the most tasks of one lane that overlapped must be 1, with tasks run by more than
 * one process, and nothing dropped: every order decided, stock and reservations agreeing.
 */
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { maxOverlap } from '../activities/lane-lock';
import { laneFor, laneTaskQueue } from '../domain/lanes';
import { workflowIdFor } from '../domain/order';
import { orderOutcome } from '../lib/order-outcome';
import { startWorkerProcess, stopProcess } from '../platform/processes';
import { DEFAULT_SAGA_CONFIG, orderSaga } from '../workflows';
import { bundleWorkflows, startE2eServer } from './support/temporal-env';
import { createProduct, makeOrder, productRow, reservations, testPool, uid } from './support/helpers';

const WORKERS = 3;
const PER_SKU = 20;
const STOCK = 15;
let env: TestWorkflowEnvironment;
let db: Pool;
let workers: ChildProcess[] = [];
const tmp = mkdtempSync(path.join(os.tmpdir(), 'order-saga-lanes-'));

beforeAll(async () => {
  ({ env } = await startE2eServer());
  db = testPool();
});
afterAll(async () => {
  await Promise.all(workers.map((w) => stopProcess(w)));
  await db?.end();
  await env?.teardown();
  rmSync(tmp, { recursive: true, force: true });
});

describe('serial lanes across worker processes', () => {
  it(`${WORKERS} worker processes, two hot SKUs pinned to the lanes: each lane runs one task at a time, nothing dropped`, async () => {
    const lanes = DEFAULT_SAGA_CONFIG.inventoryLanes;
    const hot: Record<number, { sku: string; priceCents: number }> = {};
    while (Object.keys(hot).length < lanes) {
      const p = await createProduct(db, { stock: STOCK, priceCents: 400 });
      hot[laneFor([p.sku], lanes)] ??= p;
    }
    const bundlePath = path.join(tmp, 'bundle.js');
    writeFileSync(bundlePath, (await bundleWorkflows()).code);
    const taskQueue = `lanes3-${uid()}`;
    workers = await Promise.all(
      Array.from({ length: WORKERS }, () =>
        startWorkerProcess({
          TEMPORAL_ADDRESS: env.address,
          TASK_QUEUE: taskQueue,
          DATABASE_URL: inject('roleUrls').app,
          READER_DATABASE_URL: inject('roleUrls').reader,
          PROVIDER_URL: inject('providerUrl'),
          PROVIDER_API_KEY: inject('providerApiKey'),
          INVENTORY_LANE_SKUS: Object.values(hot)
            .map((p) => p.sku)
            .join(','),
          WORKER_METRICS_PORT: '0',
          TEMPORAL_METRICS_ADDRESS: 'off',
          WORKFLOW_BUNDLE: bundlePath,
          WORKER_VERSIONING: 'off', // unversioned: no deploy here (test/deploy.devserver.test.ts has one)
        }),
      ),
    );

    const orders = Object.values(hot).flatMap((p) =>
      Array.from({ length: PER_SKU }, () => makeOrder([{ sku: p.sku, qty: 1, unitPriceCents: p.priceCents }])),
    );
    const handles = await Promise.all(
      orders.map((o) =>
        env.client.workflow.start(orderSaga, { taskQueue, workflowId: workflowIdFor(o.orderId), args: [o] }),
      ),
    );
    const outcomes = await Promise.all(handles.map((h) => orderOutcome(h)));

    // Nothing dropped: each SKU sold exactly its stock, the rest were refused for stock, nothing held.
    for (const p of Object.values(hot)) {
      const mine = orders.map((o, i) => ({ o, r: outcomes[i]! })).filter(({ o }) => o.items[0]!.sku === p.sku);
      const statuses = mine.map(({ r }) => r.status).sort();
      expect(statuses).toEqual(
        [...Array<string>(STOCK).fill('COMPLETED'), ...Array<string>(PER_SKU - STOCK).fill('FAILED')].sort(),
      );
      expect((await productRow(db, p.sku)).stock).toBe(0);
      const sold = (await Promise.all(mine.map(({ o }) => reservations(db, o.orderId)))).flat();
      expect(sold.filter((r) => r.status === 'SOLD')).toHaveLength(STOCK);
      expect(sold.filter((r) => r.status === 'HELD')).toHaveLength(0);
    }

    // One task at a time per lane, on the database's clock, across the processes.
    const { rows } = await db.query<{ lane: string; worker: string; started_at: Date; ended_at: Date }>({
      text: 'SELECT lane, worker, started_at, ended_at FROM lane_tasks WHERE order_id = ANY($1::text[])',
      values: [orders.map((o) => o.orderId)],
    });
    const report: string[] = [];
    for (let n = 0; n < lanes; n++) {
      const mine = rows.filter((r) => r.lane === laneTaskQueue(taskQueue, n));
      const byWorker = new Set(mine.map((r) => r.worker)).size;
      report.push(`lane ${n}: ${mine.length} tasks by ${byWorker} worker processes, max overlap ${maxOverlap(mine)}`);
      expect(mine.length).toBeGreaterThanOrEqual(PER_SKU);
      expect(maxOverlap(mine)).toBe(1);
    }
    expect(new Set(rows.map((r) => r.worker)).size).toBeGreaterThanOrEqual(2);
    console.log(`lanes across ${WORKERS} worker processes: ${report.join('; ')}`);
  });
});
