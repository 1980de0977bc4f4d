/**
 * `client.ts status` of a closed run reads the saga's state from the server (orders/closed-run.ts: the
 * run's description, result and history), because a closed run pinned to a drained build has no
 * worker left to answer its `state` query. Here, while the worker is still up, that answer must equal
 * the query's, field for field, on the paths that close a saga: completed after a lost authorization
 * response (an inquiry), declined, out of stock, cancelled after the hold.
 */
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { runCli } from '../client';
import { workflowIdFor } from '../domain/order';
import { readConfig, type AppConfig } from '../ops/config';
import { orderOutcome } from '../orders/order-outcome';
import { createOrderWorkers, type OrderWorkers } from '../worker';
import { request } from '../orders/saga-requests';
import { orderSaga, stateQuery } from '../workflows';
import { createProduct, makeOrder, testAdmin, testPool, uid } from './support/helpers';
import { bundleWorkflows, startDevServer } from './support/temporal-env';

let env: TestWorkflowEnvironment;
let workers: OrderWorkers;
let running: Promise<void>;
let cfg: AppConfig;
const admin = testAdmin();
const db = testPool();

beforeAll(async () => {
  env = await startDevServer();
  cfg = readConfig({
    TEMPORAL_ADDRESS: env.address,
    TASK_QUEUE: `closed-${uid()}`,
    DATABASE_URL: inject('roleUrls').app,
    READER_DATABASE_URL: inject('roleUrls').reader,
    PROVIDER_URL: inject('providerUrl'),
    PROVIDER_API_KEY: inject('providerApiKey'),
  });
  workers = await createOrderWorkers(cfg, env.nativeConnection, { workflowBundle: await bundleWorkflows() });
  running = workers.run();
});

afterAll(async () => {
  await admin.clear();
  workers?.shutdown();
  await running;
  await workers?.db.end();
  await db.end();
  await env?.teardown();
});

describe('client.ts status of a closed run', () => {
  it('equals the state query of the run, without asking its workers', async () => {
    const p = await createProduct(db, { stock: 20, priceCents: 700 });
    const line = [{ sku: p.sku, qty: 1, unitPriceCents: p.priceCents }];
    const cases = {
      'lost response, inquiry': makeOrder(line),
      declined: makeOrder(line, { paymentMethod: 'tok_declined' }),
      'out of stock': makeOrder([{ sku: p.sku, qty: 50, unitPriceCents: p.priceCents }]),
      'cancelled after the hold': makeOrder(line),
    };
    await admin.set({
      kind: 'lose-response-after-commit',
      target: 'authorizations',
      count: 1,
      keyPrefix: `${cases['lost response, inquiry'].orderId}:`,
    });
    const slow = cases['cancelled after the hold'];
    await admin.set({
      kind: 'delay',
      target: 'authorizations',
      delayMs: 2_000,
      count: 1,
      keyPrefix: `${slow.orderId}:`,
    });
    const handles = await Promise.all(
      Object.values(cases).map((o) =>
        env.client.workflow.start(orderSaga, {
          taskQueue: cfg.taskQueue,
          workflowId: workflowIdFor(o.orderId),
          args: [o],
        }),
      ),
    );
    await new Promise((r) => setTimeout(r, 800)); // the slow authorization is at the provider
    await request(env.client.workflow.getHandle(workflowIdFor(slow.orderId)), { command: 'cancel', reason: 'test' });

    const statuses = await Promise.all(handles.map(async (h) => (await orderOutcome(h)).status));
    expect(statuses).toEqual(['COMPLETED', 'FAILED', 'FAILED', 'CANCELLED']);
    for (const [i, [name, order]] of Object.entries(cases).entries()) {
      const live = JSON.parse(JSON.stringify(await handles[i]!.query(stateQuery))) as unknown;
      const out: string[] = [];
      const err: string[] = [];
      const code = await runCli(
        ['status', order.orderId, '--json'],
        cfg,
        { out: (l) => out.push(l), err: (l) => err.push(l) },
        { client: env.client },
      );
      expect(code, err.join('\n')).toBe(0);
      const { workflowId, uiUrl, ...state } = JSON.parse(out.join('\n')) as Record<string, unknown>;
      expect(workflowId).toBe(workflowIdFor(order.orderId));
      expect(uiUrl).toEqual(expect.any(String));
      expect(state, name).toEqual(live);
    }
  });
});
