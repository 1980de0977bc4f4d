/**
 * The sweeper on the real Temporal dev server, with the real activities, Postgres and provider:
 * - Terminate (as the Web UI does it) at every workflow task of a completed, a declined, a cancelled
 *   and an escalated order, then only the sweeper acts: each order ends coherent (the checker finds
 *   nothing) and the sweeper's record names it;
 * - a run whose workflow task fails by a planted bug is reset once, then handed to a person, without
 *   a loop; one that fails with the SDK's Update-ordering bug's message is terminated and started again
 *   from the row instead, and its order ends.
 */
import path from 'node:path';
import { temporal } from '@temporalio/proto';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker } from '@temporalio/worker';
import type { Pool } from 'pg';
import { describe, expect, it } from 'vitest';
import { createActivities } from '../activities';
import { SweeperStats, type SweepOptions, type SweepReport } from '../activities/sweeper';
import { workflowIdFor, type OrderInput } from '../domain/order';
import { orderStore } from '../orders/order-store';
import { sendRequest } from '../orders/saga-requests';
import { orderSaga, stateQuery, sweeperWorkflow } from '../workflows';
import {
  asChargeEra,
  createProduct,
  makeOrder,
  moneyKept,
  orderViolations,
  productRow,
  testAdmin,
  testProvider,
  uid,
} from './support/helpers';
import { useSagaTestEnv } from './support/saga-test-env';
import { bundleWorkflows, dataConverter } from './support/temporal-env';

let env: TestWorkflowEnvironment;
let db: Pool;
/** The worker of the planted bug's queue, beside the saga's. */
let broken: Worker | undefined;
let brokenRunning: Promise<void> | undefined;
const taskQueue = `sweep-${uid()}`;
const brokenQueue = `broken-${uid()}`;
const stats = new SweeperStats();

useSagaTestEnv(
  {
    server: 'dev',
    taskQueue,
    // Orders of the charge era (rows as the older build wrote them), healed by this build's charge path.
    activities: ({ env, db }) =>
      asChargeEra(
        db,
        createActivities({
          db,
          provider: testProvider(),
          temporal: { client: () => Promise.resolve(env.client), taskQueue },
          sweeperStats: stats,
        }),
      ),
  },
  {
    started: async (saga) => {
      ({ env, db } = saga);
      broken = await Worker.create({
        dataConverter: dataConverter(),
        connection: env.nativeConnection,
        taskQueue: brokenQueue,
        workflowBundle: await bundleWorkflows(path.resolve(__dirname, 'support/workflows-broken.ts')),
      });
      brokenRunning = broken.run();
    },
    stopping: async () => {
      broken?.shutdown();
      await brokenRunning;
    },
  },
);

const WFT_COMPLETED = temporal.api.enums.v1.EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED;
const sleepMs = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** One sweep over these orders, as the Schedule runs it (the sweeper workflow on the worker). */
const sweep = (orderIds: string[], opts: Partial<SweepOptions> = {}): Promise<SweepReport> =>
  env.client.workflow.execute(sweeperWorkflow, {
    taskQueue,
    workflowId: `sweep-${uid()}`,
    args: [{ graceMs: 0, failedTaskAttempts: 2, ...opts, orderIds }],
  });

async function newOrder(kind: string, overrides: Partial<OrderInput> = {}) {
  const p = await createProduct(db, { stock: 10, priceCents: 750 });
  const order = makeOrder([{ sku: p.sku, qty: 2, unitPriceCents: p.priceCents }], {
    orderId: `sw-${kind}-${uid()}`,
    ...overrides,
  });
  return { order, sku: p.sku };
}

const start = (order: OrderInput, config = {}) =>
  env.client.workflow.start(orderSaga, { taskQueue, workflowId: workflowIdFor(order.orderId), args: [order, config] });

const tasksDone = async (h: { fetchHistory: () => Promise<temporal.api.history.v1.IHistory> }): Promise<number> =>
  ((await h.fetchHistory()).events ?? []).filter((e) => e.eventType === WFT_COMPLETED).length;

async function rowStatus(orderId: string): Promise<string | undefined> {
  const { rows } = await db.query<{ status: string }>({
    text: 'SELECT status FROM orders WHERE order_id = $1',
    values: [orderId],
  });
  return rows[0]?.status;
}

/** The run the order row names as its owner (the last run that wrote it). */
async function ownerRun(orderId: string): Promise<string | undefined> {
  const { rows } = await db.query<{ owner_run_id: string | null }>({
    text: 'SELECT owner_run_id FROM orders WHERE order_id = $1',
    values: [orderId],
  });
  return rows[0]?.owner_run_id ?? undefined;
}

/** Sweeps until the order is terminal (the sweeper restarts it, its new run ends it); bounded. */
async function healed(orderId: string): Promise<{ end: string; first?: SweepReport }> {
  let first: SweepReport | undefined;
  for (let i = 0; i < 60; i++) {
    const status = await rowStatus(orderId);
    if (status && ['COMPLETED', 'FAILED', 'CANCELLED'].includes(status))
      return { end: status, ...(first ? { first } : {}) };
    const report = await sweep([orderId]);
    first ??= report;
    await sleepMs(500);
  }
  return { end: `still ${await rowStatus(orderId)}`, ...(first ? { first } : {}) };
}

const violations = (orderIds: string[]): Promise<string[]> => orderViolations(db, env.client, orderIds);

describe('Terminate at every workflow task, then only the sweeper acts', () => {
  it('completed, declined, cancelled and escalated orders all end coherent, and the sweeper names each', async () => {
    const probe = await newOrder('probe');
    const probeRun = await start(probe.order);
    await probeRun.result();
    const tasks = await tasksDone(probeRun);
    const store = orderStore(db);
    const ids: string[] = [];
    const outcomes: Record<string, number> = {};
    const kinds: { kind: string; make: () => Promise<{ order: OrderInput; sku: string }>; config?: object }[] = [
      { kind: 'completed', make: () => newOrder('completed') },
      { kind: 'declined', make: () => newOrder('declined', { paymentMethod: 'tok_declined' }) },
      { kind: 'cancelled', make: () => newOrder('cancelled') },
      {
        kind: 'escalated',
        make: () => newOrder('escalated'),
        config: { unknownEscalationMs: 1_000, inquiryBaseMs: 200, inquiryMaxMs: 400 },
      },
    ];
    const admin = testAdmin();
    for (const { kind, make, config } of kinds) {
      for (let k = 1; k < tasks + 1; k++) {
        const { order, sku } = await make();
        ids.push(order.orderId);
        const stockBefore = (await productRow(db, sku)).stock;
        if (kind === 'escalated') {
          const keyPrefix = `${order.orderId}:`;
          await admin.set({ kind: 'fail-before-commit', target: 'charges', count: 100_000, keyPrefix });
          await admin.set({ kind: 'processing', target: 'inquiries', count: 100_000, keyPrefix });
        }
        const handle = await start(order, config ?? {});
        if (kind === 'cancelled') {
          // As client.ts cancels: decided and recorded on the order row first, then the Signal wakes the run.
          for (let i = 0; i < 400 && (await rowStatus(order.orderId)) === undefined; i++) await sleepMs(5);
          const requestId = `cancel-${uid()}`;
          const decided = await store.decideCancel({
            orderId: order.orderId,
            requestId,
            reason: 'customer changed their mind',
          });
          expect(decided.outcome, decided.message).toBe('accepted');
          await sendRequest(
            handle,
            { command: 'cancel', reason: 'customer changed their mind' },
            { waitMs: 30_000, untilSeen: true, requestId },
          );
        }
        if (kind === 'escalated') {
          for (let i = 0; i < 200 && (await handle.query(stateQuery)).awaiting !== 'charge-outcome'; i++)
            await sleepMs(50);
          await admin.clear();
        } else {
          for (let i = 0; i < 400 && (await tasksDone(handle)) < k; i++) await sleepMs(10);
        }
        const terminated = await handle.terminate(`sweeper test: after workflow task ${k}`).then(
          () => true,
          () => false, // it ended first
        );
        // The terminated run's last local activity may still finish the order; else the sweeper must.
        const { end, first } = await healed(order.orderId);
        outcomes[`${kind}: ${end}`] = (outcomes[`${kind}: ${end}`] ?? 0) + 1;
        expect(['COMPLETED', 'FAILED', 'CANCELLED'], `${kind}, terminated after task ${k}`).toContain(end);
        if (terminated && first && first.open > 0) {
          const named = await store.sweeperActions({ limit: 10, orderId: order.orderId });
          if (first.actions.length === 0) {
            // The sweep read the order open, but the terminated run's last local activity ended it
            // before the sweep looked at it closely: nothing to heal. The row is that run's own, and
            // no sweeper action names the order.
            expect(await ownerRun(order.orderId), `${kind}, terminated after task ${k}`).toBe(
              handle.firstExecutionRunId,
            );
            expect(named, `${kind}, terminated after task ${k}`).toEqual([]);
          } else {
            // It found the order stranded: it restarted it, and its record says so.
            expect(
              first.actions.map((a) => a.action),
              `${kind}, terminated after task ${k}`,
            ).toEqual(['restart']);
            expect(
              named.map((a) => a.action),
              `${kind}, terminated after task ${k}`,
            ).toContain('restart');
          }
        }
        // A cancel the terminated run had accepted is in the row, where the new run reads it: the order ends CANCELLED.
        if (kind === 'cancelled') expect(end, `cancelled, terminated after task ${k}`).toBe('CANCELLED');
        // Money and stock agree with the end: charged and sold if completed, else nothing kept, stock back.
        const kept = await moneyKept(db, order.orderId);
        expect(kept, `${kind}, terminated after task ${k}`).toBe(end === 'COMPLETED' ? 1500 : 0);
        expect((await productRow(db, sku)).stock, `${kind}, terminated after task ${k}`).toBe(
          end === 'COMPLETED' ? stockBefore - 2 : stockBefore,
        );
        if (kind === 'escalated') break; // one terminate, while it waits for a person
      }
    }
    expect(await violations(ids)).toEqual([]);
    process.stdout.write(
      `sweeper test: ${ids.length} orders terminated, outcomes ${JSON.stringify(outcomes)}, healed ${stats.healed}\n`,
    );
    expect(stats.healed).toBeGreaterThanOrEqual(4);
  });
});

/** The row of an order in flight (a minute old), and its run on the planted bug's worker. */
async function plantFailingRun(plant?: 'sdk-update-bug') {
  const { order } = await newOrder('bug');
  await db.query({
    text: `INSERT INTO orders (order_id, customer_id, status, currency, total_cents, items, payment_method, workflow_id, updated_at)
           VALUES ($1, $2, 'PENDING', $3, 1500, $4, $5, $6, now() - interval '1 minute')`,
    values: [
      order.orderId,
      order.customerId,
      order.currency,
      JSON.stringify(order.items),
      order.paymentMethod,
      workflowIdFor(order.orderId),
    ],
  });
  const handle = await env.client.workflow.start('orderSaga', {
    taskQueue: brokenQueue,
    workflowId: workflowIdFor(order.orderId),
    args: plant ? [plant] : [],
  });
  const latest = env.client.workflow.getHandle(workflowIdFor(order.orderId));
  /** Waits until the latest run's workflow task has failed at least twice. */
  const failing = async (): Promise<void> => {
    const attempt = async (): Promise<number> => (await latest.describe()).raw.pendingWorkflowTask?.attempt ?? 0;
    for (let i = 0; i < 300 && (await attempt()) < 2; i++) await sleepMs(100);
    expect(await attempt()).toBeGreaterThanOrEqual(2);
  };
  return { order, handle, latest, failing };
}

describe('a workflow task that fails for good', () => {
  it('is reset once to its last completed workflow task, then handed to a person, without a loop', async () => {
    const { order, latest, failing } = await plantFailingRun();
    await failing();
    const first = await sweep([order.orderId]);
    expect(first.actions.map((a) => a.action)).toEqual(['reset']);
    // The reset run meets the same bug.
    await failing();
    const second = await sweep([order.orderId]);
    expect(second.actions.map((a) => a.action)).toEqual(['person']);
    const third = await sweep([order.orderId]);
    expect(third.actions).toEqual([]); // no loop: told once
    const recorded = await orderStore(db).sweeperActions({ limit: 10, orderId: order.orderId });
    expect(recorded.map((a) => a.action)).toEqual(['person', 'reset']);
    expect(recorded[0]!.reason).toMatch(/keeps failing/);
    await latest.terminate('sweeper test: done');
    await db.query({ text: 'DELETE FROM orders WHERE order_id = $1', values: [order.orderId] }); // the planted row
  });

  it("on the SDK's Update-ordering bug is not reset (it would replay it): a new run from the row ends the order", async () => {
    const { order, handle, failing } = await plantFailingRun('sdk-update-bug');
    await failing();
    const first = await sweep([order.orderId]);
    expect(first.actions.map((a) => a.action)).toEqual(['restart']);
    expect(first.actions[0]!.reason).toMatch(/Update-ordering bug \(sdk-core#1146\), so the sweeper terminated it/);
    const planted = env.client.workflow.getHandle(workflowIdFor(order.orderId), handle.firstExecutionRunId);
    expect((await planted.describe()).status.name).toBe('TERMINATED');
    // The new run is the real saga, on the saga's queue: it catches up from the PENDING row and ends it.
    const newRun = env.client.workflow.getHandle(workflowIdFor(order.orderId), first.actions[0]!.newRunId);
    await newRun.result();
    expect(await rowStatus(order.orderId)).toBe('COMPLETED');
    expect(await violations([order.orderId])).toEqual([]);
    const recorded = await orderStore(db).sweeperActions({ limit: 10, orderId: order.orderId });
    expect(recorded.map((a) => a.action)).toEqual(['restart']);
  });
});
