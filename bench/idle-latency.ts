/**
 * The idle latency, setting by setting: one order at a time on an idle stack, on a dev server kept in
 * a SQLite file as `npm start` runs it, first with the dev server's defaults and then with each of
 * the project's latency settings (servers/latency.ts) added in turn. A fresh dev server per step, one
 * worker with the production worker's settings, the real provider process.
 */
import path from 'node:path';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { Worker } from '@temporalio/worker';
import { createPool } from '../db/pool';
import { workflowIdFor, type OrderInput } from '../domain/order';
import { stopProcess } from '../platform/processes';
import { LATENCY_SETTINGS, type LatencySetting } from '../servers/latency';
import { startDevServer } from '../servers/temporal-dev';
import { WORKER_TUNING } from '../worker';
import { median, percentile, progress } from './measure';
import { benchWorkflowActivities, bundleBenchWorkflows, insertBenchProducts, startBenchProvider } from './stack';

export interface IdleStep {
  /** What this step adds to the one before (the first: the dev server's defaults). */
  setting: string;
  /** The dynamic config values in force at this step (every setting up to and including this one). */
  values: Record<string, unknown>;
  p50: number;
  p90: number;
  /** The floor of six regular no-op activities (the essential steps) on the same server, one at a time. */
  floorP50: number;
}

/** Measures `orders` orders one at a time at each step: defaults, then each setting added in turn. */
export async function measureIdleLatency(
  url: string,
  opts: { orders: number; settings?: LatencySetting[] },
): Promise<IdleStep[]> {
  const settings = opts.settings ?? LATENCY_SETTINGS;
  const provider = await startBenchProvider(url);
  const db = createPool(url, { max: 10 });
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'order-saga-idle-'));
  try {
    const sku = `BENCH-IDLE-${Date.now()}`;
    await insertBenchProducts(db, sku, 10);
    const workflowBundle = await bundleBenchWorkflows();
    const activities = benchWorkflowActivities(db, provider.url);
    const steps: IdleStep[] = [];
    let seq = 0;
    const values: Record<string, unknown> = {};
    for (let s = 0; s <= settings.length; s++) {
      const added = s === 0 ? undefined : settings[s - 1]!;
      if (added) Object.assign(values, added.values);
      const label = added ? `+ ${added.name}` : "the dev server's defaults";
      progress(`idle latency ${s + 1}/${settings.length + 1}: ${label}…`);
      const env = await startDevServer({
        logLevel: 'error',
        dbFilename: path.join(tmp, `step-${s}.db`),
        latencySettings: false,
        dynamicConfig: { ...values },
      });
      try {
        const taskQueue = `bench-idle-${s}`;
        const worker = await Worker.create({
          ...WORKER_TUNING,
          connection: env.nativeConnection,
          taskQueue,
          workflowBundle,
          activities,
        });
        const one = async (kind: 'saga' | 'floor'): Promise<number> => {
          const i = seq++;
          const t = Date.now();
          if (kind === 'floor') {
            await env.client.workflow.execute('noopSaga', { taskQueue, workflowId: `bench-idle-floor-${i}` });
            return Date.now() - t;
          }
          const order: OrderInput = {
            orderId: `bench-idle-${Date.now()}-${i}`,
            customerId: `bench-idle-${i}`,
            currency: 'USD',
            paymentMethod: 'tok_visa',
            items: [{ sku: `${sku}-${i % 10}`, qty: 1, unitPriceCents: 100 }],
          };
          const r = (await env.client.workflow.execute('orderSaga', {
            taskQueue,
            workflowId: workflowIdFor(order.orderId),
            args: [order],
          })) as { status: string };
          if (r.status !== 'COMPLETED') throw new Error(`idle-latency saga ended ${r.status}`);
          return Date.now() - t;
        };
        const step = await worker.runUntil(async () => {
          await one('saga');
          await one('floor');
          const saga: number[] = [];
          const floor: number[] = [];
          for (let i = 0; i < opts.orders; i++) {
            saga.push(await one('saga'));
            floor.push(await one('floor'));
          }
          const sorted = [...saga].sort((a, b) => a - b);
          return { p50: median(saga), p90: percentile(sorted, 90), floorP50: median(floor) };
        });
        steps.push({ setting: added ? added.name : 'defaults', values: { ...values }, ...step });
      } finally {
        await env.teardown();
      }
    }
    progress('');
    return steps;
  } finally {
    await db.end();
    await stopProcess(provider.child);
    rmSync(tmp, { recursive: true, force: true });
  }
}
