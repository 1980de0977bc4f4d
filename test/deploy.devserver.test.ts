/**
 * A deploy across the change of the money's era, with Worker Versioning, on the real Temporal dev
 * server:
 *   build A is the charge era's build (test/support/charge-era.ts: this repository at its last
 *   commit before the authorization era, a worker process of its own tree) and is current; build B
 *   (this tree, in-process workers) starts beside it, its workers polling but getting nothing;
 *   A runs an order whose charge the provider holds up, and meanwhile B is made current
 *   (ops/deployments.ts, as npm start does once its workers poll);
 *   a new order runs on B: authorized, shipped, captured; A's order finishes on A, charged (every
 *   workflow task of it, also those after B became current), and A's history does not replay on B's
 *   code: why every saga is pinned.
 * Then A drains (no pinned run left), its workers stop, and `client.ts status` still answers for
 * A's closed order, from the server alone.
 */
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { WorkflowHandle } from '@temporalio/client';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { runCli } from '../client';
import { workflowIdFor, type OrderInput } from '../domain/order';
import { readConfig, type AppConfig } from '../ops/config';
import {
  DEPLOYMENT_NAME,
  describeVersion,
  makeVersionCurrent,
  openPinnedRuns,
  orderTaskQueues,
  resolveBuildId,
  runVersion,
  versionName,
} from '../ops/deployments';
import { orderOutcome } from '../orders/order-outcome';
import { createOrderWorkers, type OrderWorkers } from '../worker';
import { DEFAULT_SAGA_CONFIG, orderSaga, stateQuery, type SagaState } from '../workflows';
import { createProduct, holds, ledger, makeOrder, testAdmin, testPool, uid } from './support/helpers';
import { CHARGE_ERA_BUILD_ID, chargeEraWorkflows, startChargeEraWorker } from './support/charge-era';
import { stopProcess } from '../platform/processes';
import { bundleWorkflows, dataConverter, startDevServer } from './support/temporal-env';

let env: TestWorkflowEnvironment;
let db: Pool;
let cfg: AppConfig;
let bundleA: WorkflowBundleWithSourceMap;
let bundleB: WorkflowBundleWithSourceMap;
const pools: OrderWorkers[] = [];
let workerA: ChildProcess | undefined;
let bundleAFile = '';
const running: Promise<void>[] = [];
const admin = testAdmin();
const namespace = 'default';
const say = (line: string): void => console.log(`[deploy] ${line}`);

beforeAll(async () => {
  env = await startDevServer({
    // A version no longer current is checked for open pinned runs every second (default: minutes),
    // so the test sees A drained.
    dynamicConfig: {
      'matching.wv.VersionDrainageStatusVisibilityGracePeriod': '1s',
      'matching.wv.VersionDrainageStatusRefreshInterval': '1s',
    },
  });
  db = testPool();
  cfg = readConfig({
    TEMPORAL_ADDRESS: env.address,
    TEMPORAL_NAMESPACE: namespace,
    TASK_QUEUE: `deploy-${uid()}`,
    DATABASE_URL: inject('roleUrls').app,
    READER_DATABASE_URL: inject('roleUrls').reader,
    PROVIDER_URL: inject('providerUrl'),
    PROVIDER_API_KEY: inject('providerApiKey'),
    // The held-up charge (10 s) is answered within the worker's wait: a slow charge, not an unknown one.
    PROVIDER_TIMEOUT_MS: '11500',
  });
  bundleA = await bundleWorkflows(chargeEraWorkflows());
  bundleAFile = path.join(mkdtempSync(path.join(os.tmpdir(), 'order-saga-deploy-')), 'charge-era-bundle.js');
  writeFileSync(bundleAFile, bundleA.code);
  bundleB = await bundleWorkflows();
});

afterAll(async () => {
  await admin.clear();
  if (workerA) await stopProcess(workerA, 'SIGKILL');
  for (const w of pools) w.shutdown();
  await Promise.all(running);
  for (const w of pools) {
    await w.db.end();
    if (w.reader !== w.db) await w.reader.end();
  }
  await db?.end();
  await env?.teardown();
});

/** The workers of one build (in this process), running until the test stops them. */
async function startBuild(buildId: string, workflowBundle: WorkflowBundleWithSourceMap): Promise<OrderWorkers> {
  const w = await createOrderWorkers(cfg, env.nativeConnection, { workflowBundle, versioning: { buildId } });
  pools.push(w);
  running.push(w.run());
  return w;
}

const start = (order: OrderInput): Promise<WorkflowHandle<typeof orderSaga>> =>
  env.client.workflow.start(orderSaga, {
    taskQueue: cfg.taskQueue,
    workflowId: workflowIdFor(order.orderId),
    args: [order],
  });

/** The version a run is on (its description), and the version of each of its completed workflow tasks. */
async function buildsOf(
  handle: WorkflowHandle,
): Promise<{ run: string; behavior: string; tasks: { build: string; at: number }[] }> {
  const d = await handle.describe();
  const v = runVersion(d.raw);
  const history = await handle.fetchHistory();
  const tasks = (history.events ?? [])
    .filter((e) => e.workflowTaskCompletedEventAttributes)
    .map((e) => ({
      build: e.workflowTaskCompletedEventAttributes!.deploymentVersion?.buildId ?? '(unversioned)',
      at: Number(e.eventTime?.seconds ?? 0) * 1000 + Math.floor((e.eventTime?.nanos ?? 0) / 1e6),
    }));
  return { run: v?.version ?? '(unversioned)', behavior: v?.behavior ?? '-', tasks };
}

/** `client.ts status <orderId> --json`, in this process. */
async function status(orderId: string): Promise<{ code: number; state?: SagaState; err: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runCli(
    ['status', orderId, '--json'],
    cfg,
    { out: (l) => out.push(l), err: (l) => err.push(l) },
    {
      client: env.client,
    },
  );
  if (code !== 0) return { code, err: err.join('\n') };
  const {
    workflowId: _w,
    uiUrl: _u,
    ...state
  } = JSON.parse(out.join('\n')) as SagaState & {
    workflowId: string;
    uiUrl: string;
  };
  return { code, state, err: err.join('\n') };
}

describe('a deploy with Worker Versioning (dev server)', () => {
  it('a new build is made current after it polls; a saga started on the old build finishes there, and its history does not replay on the new one', async () => {
    const lanes = DEFAULT_SAGA_CONFIG.inventoryLanes;
    const taskQueues = orderTaskQueues(cfg.taskQueue, lanes);
    const real = resolveBuildId();
    const A = { deploymentName: DEPLOYMENT_NAME, buildId: CHARGE_ERA_BUILD_ID };
    const B = { deploymentName: DEPLOYMENT_NAME, buildId: real };
    say(`build A = ${versionName(A)} (the charge era's build), build B = ${versionName(B)} (this tree)`);

    // ---- Build A: a worker process of the charge era's tree, then current ----
    workerA = await startChargeEraWorker({
      TEMPORAL_ADDRESS: env.address,
      TEMPORAL_NAMESPACE: namespace,
      TASK_QUEUE: cfg.taskQueue,
      DATABASE_URL: inject('roleUrls').app,
      READER_DATABASE_URL: inject('roleUrls').reader,
      PROVIDER_URL: inject('providerUrl'),
      PROVIDER_API_KEY: inject('providerApiKey'),
      PROVIDER_TIMEOUT_MS: '11500',
      WORKFLOW_BUNDLE: bundleAFile, // bundled in beforeAll, not within the test's time
    });
    const madeA = await makeVersionCurrent(env.connection, { namespace, version: A, taskQueues });
    expect(madeA.previous).toBeUndefined();
    say(`A current after ${madeA.waitedMs} ms`);

    // ---- Build B's workers start beside A's: they poll, but get nothing until B is current ----
    await startBuild(B.buildId, bundleB);

    // ---- An order on A whose charge the provider holds for 10 s ----
    const p = await createProduct(db, { stock: 10, priceCents: 1500 });
    const line = [{ sku: p.sku, qty: 1, unitPriceCents: p.priceCents }];
    const first = makeOrder(line);
    await admin.set({ kind: 'delay', target: 'charges', delayMs: 10_000, count: 1, keyPrefix: `${first.orderId}:` });
    const h1 = await start(first);
    for (const until = Date.now() + 30_000; (await ledger(db, first.orderId)).charges.length === 0;) {
      if (Date.now() > until) throw new Error('the first order never reached the provider');
      await new Promise((r) => setTimeout(r, 100));
    }

    // ---- B current, while A's order waits for its charge ----
    const heldAt = Date.now();
    const madeB = await makeVersionCurrent(env.connection, { namespace, version: B, taskQueues });
    const bCurrentAt = Date.now();
    expect(madeB.previous).toEqual(A);
    say(`B current ${bCurrentAt - heldAt} ms after A's order reached the provider`);
    say(
      `B current (was ${versionName(madeB.previous!)}): polled after ${madeB.registeredMs} ms, current after ${madeB.currentMs} ms, routed after ${madeB.waitedMs} ms`,
    );
    expect((await h1.describe()).status.name, 'the first order is still at its charge when B becomes current').toBe(
      'RUNNING',
    );
    expect((await describeVersion(env.connection, namespace, A)).status).toBe('DRAINING');
    expect(await openPinnedRuns(env.connection, namespace, A)).toBe(1);

    // ---- A new order runs on B; the first one finishes on A, each on its own steps ----
    const second = makeOrder(line);
    const h2 = await start(second);
    expect(await orderOutcome(h2)).toMatchObject({ status: 'COMPLETED' });
    expect(await orderOutcome(h1)).toMatchObject({ status: 'COMPLETED' });

    const on1 = await buildsOf(h1);
    const on2 = await buildsOf(h2);
    const after = on1.tasks.filter((t) => t.at >= bCurrentAt - 1_000);
    say(
      `order ${first.orderId} ran on ${on1.run} (${on1.behavior}): ${on1.tasks.length} workflow tasks, all on ${[...new Set(on1.tasks.map((t) => t.build))].join(', ')}; ${after.length} of them after B became current`,
    );
    say(
      `order ${second.orderId} ran on ${on2.run} (${on2.behavior}): ${on2.tasks.length} workflow tasks on ${[...new Set(on2.tasks.map((t) => t.build))].join(', ')}`,
    );
    expect(on1).toMatchObject({ run: versionName(A), behavior: 'PINNED' });
    expect(on1.tasks.every((t) => t.build === A.buildId)).toBe(true);
    expect(after.length).toBeGreaterThanOrEqual(1); // the charge's answer came back to A, not B
    expect(on2).toMatchObject({ run: versionName(B), behavior: 'PINNED' });
    expect(on2.tasks.every((t) => t.build === B.buildId)).toBe(true);
    const steps = async (h: WorkflowHandle) =>
      ((await h.fetchHistory()).events ?? []).flatMap((e) => {
        const a = e.activityTaskScheduledEventAttributes?.activityType?.name;
        return a ? [a] : [];
      });
    // A local activity's marker names its activity in plain JSON (the SDK's own record, not a payload).
    const localSteps = async (h: WorkflowHandle) =>
      ((await h.fetchHistory()).events ?? []).flatMap((e) => {
        const data = e.markerRecordedEventAttributes?.details?.data?.payloads?.[0]?.data;
        if (!data) return [];
        const { activity_type: type } = JSON.parse(Buffer.from(data).toString()) as { activity_type?: string };
        return type ? [type] : [];
      });
    const [money1, money2] = [
      { ...(await ledger(db, first.orderId)), ...(await holds(db, first.orderId)) },
      { ...(await ledger(db, second.orderId)), ...(await holds(db, second.orderId)) },
    ];
    say(
      `order ${first.orderId} on A, old steps: regular activities ${(await steps(h1)).join(', ')}; provider: ${money1.charges.length} charge(s) ${money1.charges.map((c) => `${c.status} ${c.amount}`).join(', ')}, ${money1.authorizations.length} authorization(s)`,
    );
    say(
      `order ${second.orderId} on B, new steps: regular activities ${(await steps(h2)).join(', ')}; provider: ${money2.charges.length} charge(s), authorization(s) ${money2.authorizations.map((a) => `${a.status} ${a.amount}`).join(', ')}, capture(s) ${money2.captures.map((c) => `${c.status} ${c.amount}`).join(', ')}`,
    );
    expect(await steps(h1)).toContain('chargePayment');
    expect(await steps(h1)).not.toContain('authorizePayment');
    expect(money1.charges.map((c) => c.status)).toEqual(['succeeded']);
    expect(money1.authorizations).toEqual([]);
    expect(await steps(h2)).toContain('authorizePayment');
    // B captures inside a workflow task (a local activity): a marker, not a scheduled activity.
    expect(await localSteps(h2)).toEqual(expect.arrayContaining(['reserveInventory', 'capturePayment']));
    expect(await steps(h2)).not.toContain('chargePayment');
    expect(money2.charges).toEqual([]);
    expect(money2.captures.map((c) => [c.status, c.amount])).toEqual([['succeeded', 1500]]);
    const eras = await db.query<{ order_id: string; payment_flow: string }>({
      text: 'SELECT order_id, payment_flow FROM orders WHERE order_id = ANY($1::text[]) ORDER BY order_id = $2 DESC',
      values: [[first.orderId, second.orderId], first.orderId],
    });
    expect(eras.rows.map((r) => r.payment_flow)).toEqual(['charge', 'authorization']);

    // ---- Why pinning matters: A's history does not replay on B's code (it does on A's) ----
    const history1 = await h1.fetchHistory();
    const history2 = await h2.fetchHistory();
    const replay = async (bundle: WorkflowBundleWithSourceMap, workflowId: string, history: typeof history1) => {
      for await (const r of Worker.runReplayHistories({ dataConverter: dataConverter(), workflowBundle: bundle }, [
        { workflowId, history },
      ]))
        return r.error;
      throw new Error('no replay result');
    };
    const onB = await replay(bundleB, h1.workflowId, history1);
    say(
      `replay of order ${first.orderId} (recorded on A) on B's code: ${onB ? `${onB.name}: ${onB.message.split('\n')[0]}` : 'no error'}`,
    );
    expect(onB).toBeDefined();
    expect(onB!.name).toMatch(/DeterminismViolation/);
    expect(await replay(bundleA, h1.workflowId, history1)).toBeUndefined();
    expect(await replay(bundleB, h2.workflowId, history2)).toBeUndefined();

    // ---- status of a closed run: from the server, the same as its workers' answer ----
    for (const [h, o] of [
      [h1, first],
      [h2, second],
    ] as const) {
      const live = await h.query(stateQuery); // their workers are still up
      const s = await status(o.orderId);
      expect(s.code, s.err).toBe(0);
      expect(s.state).toEqual(JSON.parse(JSON.stringify(live)));
    }

    // ---- A drains (no pinned run left); its workers stop; status still answers ----
    let drained = await describeVersion(env.connection, namespace, A);
    for (const until = Date.now() + 60_000; drained.drainage !== 'DRAINED' && Date.now() < until;) {
      await new Promise((r) => setTimeout(r, 500));
      drained = await describeVersion(env.connection, namespace, A);
    }
    expect(await openPinnedRuns(env.connection, namespace, A)).toBe(0);
    say(`A after its last order: ${JSON.stringify(drained)}`);
    expect(drained).toMatchObject({ status: 'DRAINED', drainage: 'DRAINED' });
    expect(await describeVersion(env.connection, namespace, B)).toMatchObject({ status: 'CURRENT' });
    // A restart of the same build (npm start again) changes nothing.
    expect(await makeVersionCurrent(env.connection, { namespace, version: B, taskQueues })).toMatchObject({
      alreadyCurrent: true,
    });

    await stopProcess(workerA, 'SIGTERM');
    workerA = undefined;
    const closedA = await status(first.orderId);
    expect(closedA.code, closedA.err).toBe(0);
    expect(closedA.state).toMatchObject({
      status: 'COMPLETED',
      stepsDone: ['createOrder', 'reserveInventory', 'chargePayment', 'createShipment', 'sendConfirmation'],
      pivotPassed: true,
    });
    say(
      `status of ${first.orderId} with no worker of A left: ${closedA.state!.status}, steps ${closedA.state!.stepsDone.join(' → ')}`,
    );
  });
});
