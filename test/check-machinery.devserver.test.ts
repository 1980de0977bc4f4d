/**
 * `client.ts check`, as a real process, on the dev server: the machinery beside the data. A worker of
 * one build, made current as npm start does; both Schedules created as npm start creates them and
 * each run once; an open order whose run waits on a task queue nobody polls. Then: all well (exit 0),
 * the `sweep` Schedule paused, the `reconcile` Schedule deleted, an open order sealed with a key this
 * process does not have, and Temporal out of reach — each exit 1, naming what is wrong.
 * The data is a database of the file's own, so the checker's whole-database report is this file's.
 */
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { Client } from '@temporalio/client';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { workflowIdFor, type OrderInput } from '../domain/order';
import { readConfig } from '../ops/config';
import { makeVersionCurrent, orderTaskQueues } from '../ops/deployments';
import { APP_SCHEDULES, RECONCILE_SCHEDULE_ID, SWEEP_SCHEDULE_ID, upsertSchedule } from '../ops/schedules';
import { dataConverterFor, parseKeyList } from '../platform/payload-codec';
import { runProcess } from '../platform/processes';
import { createOrderWorkers, type OrderWorkers } from '../worker';
import { DEFAULT_SAGA_CONFIG } from '../workflows/order-saga';
import { makeOrder, uid } from './support/helpers';
import { ownDatabase, type OwnDatabase } from './support/own-database';
import { bundleWorkflows, startDevServer } from './support/temporal-env';

const ROOT = path.resolve(__dirname, '..');
const taskQueue = `check-${uid()}`;
/** Where the file's open orders wait: no worker polls it, so they stay open and untouched. */
const idleQueue = `idle-${uid()}`;
const buildId = `check-${uid()}`;

let env: TestWorkflowEnvironment;
let own: OwnDatabase;
let owner: Pool; // this file's database, as its owner
let onDatabase: (url: string) => string;
let workers: OrderWorkers | undefined;
let running: Promise<void> | undefined;
let childEnv: NodeJS.ProcessEnv;

async function check(extra: string[] = [], extraEnv: NodeJS.ProcessEnv = {}) {
  const r = await runProcess(
    process.execPath,
    [require.resolve('tsx/cli'), path.join(ROOT, 'client.ts'), 'check', ...extra],
    { ...childEnv, ...extraEnv },
  );
  return { code: r.code ?? -1, stdout: r.stdout, stderr: r.stderr };
}

/** An open order: its row PENDING, its run started by `client` on the idle task queue. */
async function openOrder(client: Client): Promise<{ order: OrderInput; runId: string }> {
  const order = makeOrder([{ sku: 'SKU-MUG', qty: 1, unitPriceCents: 1299 }], { orderId: `chk-${uid()}` });
  await owner.query({
    text: `INSERT INTO orders (order_id, customer_id, status, currency, total_cents, items, payment_method, workflow_id)
           VALUES ($1, $2, 'PENDING', 'USD', 1299, $3, 'tok_visa', $4)`,
    values: [order.orderId, order.customerId, JSON.stringify(order.items), workflowIdFor(order.orderId)],
  });
  const handle = await client.workflow.start('orderSaga', {
    workflowId: workflowIdFor(order.orderId),
    taskQueue: idleQueue,
    args: [order],
  });
  return { order, runId: handle.firstExecutionRunId };
}

/** Runs a Schedule now, and waits for that run to complete. */
async function runOnce(scheduleId: string): Promise<void> {
  const handle = env.client.schedule.getHandle(scheduleId);
  const before = (await handle.describe()).info.recentActions.length;
  await handle.trigger();
  for (let i = 0; i < 200; i++) {
    const actions = (await handle.describe()).info.recentActions;
    if (actions.length > before) {
      await env.client.workflow.getHandle(actions.at(-1)!.action.workflow.workflowId).result();
      return;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`schedule ${scheduleId} took no action when triggered`);
}

beforeAll(async () => {
  own = await ownDatabase('check');
  owner = own.owner;
  onDatabase = own.on;
  env = await startDevServer();
  childEnv = {
    TEMPORAL_ADDRESS: env.address,
    TEMPORAL_NAMESPACE: 'default',
    TASK_QUEUE: taskQueue,
    DATABASE_URL: onDatabase(inject('roleUrls').app),
    READER_DATABASE_URL: onDatabase(inject('roleUrls').reader),
    PROVIDER_URL: inject('providerUrl'),
    PROVIDER_API_KEY: inject('providerApiKey'),
  };
  const cfg = readConfig(childEnv);
  workers = await createOrderWorkers(cfg, env.nativeConnection, {
    workflowBundle: await bundleWorkflows(),
    versioning: { buildId },
  });
  running = workers.run();
  await makeVersionCurrent(env.connection, {
    namespace: 'default',
    version: workers.version!,
    taskQueues: orderTaskQueues(taskQueue, DEFAULT_SAGA_CONFIG.inventoryLanes),
  });
  // As npm start creates them (every hour here, so none runs by itself during the file), each run once.
  for (const s of APP_SCHEDULES) await upsertSchedule(env.client, { ...s, taskQueue, every: '1h' });
  for (const s of APP_SCHEDULES) await runOnce(s.scheduleId);
  await openOrder(env.client);
});

afterAll(async () => {
  workers?.shutdown();
  await running;
  await workers?.db.end();
  await workers?.reader.end();
  await env?.teardown();
  await own?.drop();
});

describe('client.ts check: the machinery', () => {
  it('all well: the data clean, both Schedules ran, the current build polls, every open order opens — exit 0', async () => {
    const r = await check();
    expect(r.stderr).toBe('');
    expect(r.code, r.stdout).toBe(0);
    expect(r.stdout).toMatch(/^checked \d+ orders and \d+ SKUs at .*: 0 violation\(s\)$/m);
    expect(r.stdout).toContain('machinery: all 4 checks pass');
    expect(r.stdout).toMatch(/^ {2}ok schedule sweep: every 1h, last run completed at /m);
    expect(r.stdout).toMatch(/^ {2}ok schedule reconcile: every 1h, last run completed at /m);
    expect(r.stdout).toContain(`ok worker: `);
    expect(r.stdout).toContain(`of the current build order-saga:${buildId} on task queue ${taskQueue}`);
    expect(r.stdout).toContain(
      'ok open orders: 1 of 1 open order(s) read with the keys at hand (PAYLOAD_KEYS: test-1)',
    );

    const json = await check(['--json']);
    expect(json.code).toBe(0);
    const report = JSON.parse(json.stdout) as { violations: unknown[]; machinery: { ok: boolean; checks: unknown[] } };
    expect(report.violations).toEqual([]);
    expect(report.machinery.ok).toBe(true);
    expect(report.machinery.checks.map((c) => (c as { name: string }).name)).toEqual([
      'schedule sweep',
      'schedule reconcile',
      'worker',
      'open orders',
    ]);
  });

  it('the sweep Schedule paused: exit 1, naming it', async () => {
    const sweep = env.client.schedule.getHandle(SWEEP_SCHEDULE_ID);
    await sweep.pause('paused by the check test');
    try {
      const r = await check();
      expect(r.code, r.stdout).toBe(1);
      expect(r.stdout).toContain('machinery: 1 problem(s)');
      expect(r.stdout).toContain(
        '  PROBLEM schedule sweep: paused ("paused by the check test") (unpause: temporal schedule toggle --unpause --schedule-id sweep)',
      );
      expect(r.stdout).toMatch(/^ {2}ok schedule reconcile: /m);
      expect(r.stdout).toContain(': 0 violation(s)'); // the data is as it was
      console.log(r.stdout);
    } finally {
      await sweep.unpause();
    }
  });

  it('the reconcile Schedule missing: exit 1, naming it; created again, it has three intervals to run', async () => {
    await env.client.schedule.getHandle(RECONCILE_SCHEDULE_ID).delete();
    const r = await check();
    expect(r.code, r.stdout).toBe(1);
    expect(r.stdout).toContain(
      '  PROBLEM schedule reconcile: missing (npm start creates it; or: npx tsx client.ts schedule reconcile)',
    );
    expect(r.stdout).toMatch(/^ {2}ok schedule sweep: /m);
    console.log(r.stdout);

    const reconcile = APP_SCHEDULES.find((s) => s.scheduleId === RECONCILE_SCHEDULE_ID)!;
    await upsertSchedule(env.client, { ...reconcile, taskQueue, every: '1h' });
    const again = await check();
    expect(again.code, again.stdout).toBe(0);
    expect(again.stdout).toMatch(/^ {2}ok schedule reconcile: every 1h, created at .*; no run has completed yet$/m);
  });

  it('an open order sealed with a key not at hand: exit 1, naming the order and the key', async () => {
    const other = new Client({
      connection: env.connection,
      namespace: 'default',
      dataConverter: dataConverterFor(parseKeyList(`gone-1:${randomBytes(32).toString('base64')}`)),
    });
    const { order, runId } = await openOrder(other);
    const r = await check();
    expect(r.code, r.stdout).toBe(1);
    expect(r.stdout).toContain(
      '  PROBLEM open orders: 1 of 2 open order(s) read with the keys at hand (PAYLOAD_KEYS: test-1); 1 cannot be read',
    );
    expect(r.stdout).toContain(
      `  PROBLEM order ${order.orderId}: run ${runId}: event 1 WorkflowExecutionStarted: payload encrypted with key ID "gone-1", which is not among the keys of PAYLOAD_KEYS (test-1)`,
    );
    console.log(r.stdout);
    const json = JSON.parse((await check(['--json'])).stdout) as { machinery: { checks: { orderId?: string }[] } };
    expect(json.machinery.checks.filter((c) => c.orderId).map((c) => c.orderId)).toEqual([order.orderId]);
  });

  it('Temporal out of reach: exit 1 saying so; --data-only checks the data alone', async () => {
    const away = { TEMPORAL_ADDRESS: '127.0.0.1:1' };
    const r = await check([], away);
    expect(r.code, r.stdout).toBe(1);
    expect(r.stderr).toContain('note: cannot reach Temporal at 127.0.0.1:1');
    expect(r.stdout).toContain('  PROBLEM temporal: cannot reach Temporal at 127.0.0.1:1');
    expect(r.stdout).toContain("the Schedules, the workers and the open orders' payloads are not checked");
    console.log(r.stdout);
    const dataOnly = await check(['--data-only'], away);
    expect(dataOnly.code, dataOnly.stdout).toBe(0);
    expect(dataOnly.stdout).not.toContain('machinery');
  });
});
