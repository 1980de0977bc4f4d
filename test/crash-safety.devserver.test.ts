/**
 * Crash safety on the real dev server: the worker process is killed with SIGKILL right after a side
 * effect committed and before its activity completed; a fresh worker picks the saga up from its
 * history. Exactly one hold and one capture, and the stock moves exactly once.
 */
import { orderOutcome } from '../orders/order-outcome';
import type { ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { temporal } from '@temporalio/proto';
import { ApplicationFailure } from '@temporalio/common';
import { Worker, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import type { Pool } from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import { createActivities, type OrderActivities } from '../activities';
import { workflowIdFor, type OrderInput } from '../domain/order';
import { readConfig } from '../ops/config';
import { startTsProcess, stopProcess } from '../platform/processes';
import { createOrderWorkers } from '../worker';
import { request } from '../orders/saga-requests';
import { orderSaga, stateQuery } from '../workflows';
import { bundleWorkflows, dataConverter, startE2eServer } from './support/temporal-env';
import {
  createProduct,
  holds,
  ledger,
  makeOrder,
  orderRow,
  productRow,
  reservations,
  testAdmin,
  testPool,
  testProvider,
  uid,
} from './support/helpers';

let env: TestWorkflowEnvironment;
let db: Pool;
let bundle: WorkflowBundleWithSourceMap;
const admin = testAdmin();
const tmp = mkdtempSync(path.join(os.tmpdir(), 'order-saga-crash-'));

beforeAll(async () => {
  ({ env } = await startE2eServer());
  db = testPool();
  bundle = await bundleWorkflows();
});
afterEach(async () => {
  await admin.clear();
});
afterAll(async () => {
  await db?.end();
  await env?.teardown();
});

function envFor(taskQueue: string): NodeJS.ProcessEnv {
  return {
    TEMPORAL_ADDRESS: env.address,
    TASK_QUEUE: taskQueue,
    DATABASE_URL: inject('roleUrls').app,
    PROVIDER_URL: inject('providerUrl'),
    PROVIDER_API_KEY: inject('providerApiKey'),
  };
}

/** Starts the crash worker as one process (node --import tsx), so SIGKILL reaches the worker itself. */
async function crashWorker(taskQueue: string, point: string, marker: string): Promise<ChildProcess> {
  const env = { ...envFor(taskQueue), CRASH_POINT: point, CRASH_MARKER: marker };
  return (
    await startTsProcess('test/support/crash-worker.ts', env, /crash-worker: ready/, {
      showStderr: true,
      readyTimeoutMs: 120_000,
    })
  ).child;
}

async function until(pred: () => Promise<boolean>, what: string, ms = 60_000): Promise<void> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await pred()) return;
    await sleep(100);
  }
  throw new Error(`timed out waiting for ${what}`);
}

/** Runs the saga: first on the crash worker until `crashed` says it is time, SIGKILL, then on a fresh worker. */
async function crashAndRecover(order: OrderInput, point: string, crashed: (marker: string) => Promise<boolean>) {
  const taskQueue = `crash-${uid()}`;
  const marker = path.join(tmp, `${uid()}.marker`);
  const first = await crashWorker(taskQueue, point, marker);
  const handle = await env.client.workflow.start(orderSaga, {
    taskQueue,
    workflowId: workflowIdFor(order.orderId),
    args: [order],
  });
  try {
    await until(() => crashed(marker), `crash point ${point}`);
  } finally {
    await stopProcess(first, 'SIGKILL');
  }
  const fresh = await createOrderWorkers(readConfig(envFor(taskQueue)), env.nativeConnection, {
    db,
    workflowBundle: bundle,
    lanes: 0,
  });
  const running = fresh.run();
  try {
    return await orderOutcome(handle);
  } finally {
    fresh.shutdown();
    await running;
  }
}

describe('crash safety: SIGKILL of the worker between a commit and its activity completing', () => {
  for (const [target, what] of [
    ['authorizations', 'hold'],
    ['captures', 'capture'],
  ] as const)
    it(`after the provider committed the ${what}: the restarted saga ends with exactly one hold and one capture`, async () => {
      const p = await createProduct(db, { stock: 5, priceCents: 1700 });
      const order = makeOrder([{ sku: p.sku, qty: 1, unitPriceCents: p.priceCents }]);
      // The provider commits the request, then never answers: the worker sits in the activity.
      await admin.set({
        kind: 'lose-response-after-commit',
        mode: 'hang',
        target,
        count: 1,
        keyPrefix: `${order.orderId}:`,
      });
      const result = await crashAndRecover(order, 'none', async () => {
        const h = await holds(db, order.orderId);
        return target === 'authorizations' ? h.authorizations.length > 0 : h.captures.length > 0;
      });
      expect(result.status).toBe('COMPLETED');
      expect(await holds(db, order.orderId)).toEqual({
        authorizations: [{ status: 'authorized', amount: 1700 }],
        captures: [{ status: 'succeeded', amount: 1700 }],
        voids: [],
        keyClosed: false,
      });
      expect(await ledger(db, order.orderId)).toEqual({ charges: [], refunds: [] });
      expect((await productRow(db, p.sku)).stock).toBe(4);
    });

  it('the worker holding the run is killed as its authorization fails elsewhere: the saga decides the same on replay', async () => {
    // The run's workflow tasks go to a worker process; the regular activities run here. The hold is
    // made, then its answer is lost just after that process is killed, so the next workflow task waits
    // on the dead worker's sticky queue until it times out; a fresh worker takes it. The inquiry then
    // says processing once, and the saga decides to wait (a timer) or escalate. The history must
    // replay with no nondeterminism error: the decision rests on durable timers, not the workflow
    // clock, which can read differently on replay in this shape of history (docs/decisions.md).
    const p = await createProduct(db, { stock: 5, priceCents: 1300 });
    const order = makeOrder([{ sku: p.sku, qty: 1, unitPriceCents: p.priceCents }]);
    const taskQueue = `crash-${uid()}`;
    const holder = await crashWorker(taskQueue, 'workflows-only', path.join(tmp, `${uid()}.marker`));
    const real = createActivities({ db, provider: testProvider() });
    let charging!: () => void;
    const charged = new Promise<void>((r) => (charging = r));
    let answer!: () => void;
    const answered = new Promise<void>((r) => (answer = r));
    let inquiries = 0;
    const activities: OrderActivities = {
      ...real,
      authorizePayment: async (req) => {
        // Made at the provider; its answer never reaches the saga (so the row is not marked either).
        await testProvider().authorize(req.idempotencyKey, {
          amountCents: req.amountCents,
          currency: req.currency,
          paymentMethod: req.paymentMethod,
          reference: req.orderId,
        });
        charging();
        await answered;
        throw ApplicationFailure.retryable(
          'provider POST /v1/authorizations: no answer in 2000 ms',
          'ProviderUnavailable',
        );
      },
      inquireAuthorization: async (req) =>
        ++inquiries === 1 ? { status: 'processing' } : real.inquireAuthorization(req),
    };
    const activityWorker = await Worker.create({
      dataConverter: dataConverter(),
      connection: env.nativeConnection,
      taskQueue,
      activities,
    });
    const runningActivities = activityWorker.run();
    let workflowWorker: Worker | undefined;
    let runningWorkflows: Promise<void> | undefined;
    try {
      const handle = await env.client.workflow.start(orderSaga, {
        taskQueue,
        workflowId: workflowIdFor(order.orderId),
        // Escalation after 5 s of unknown authorization: the sticky queue's timeout alone is 10 s.
        args: [order, { unknownEscalationMs: 5_000, inquiryBaseMs: 1_000, inquiryMaxMs: 2_000 }],
      });
      await Promise.race([
        charged,
        sleep(60_000).then(() => Promise.reject(new Error('the authorization never reached the provider'))),
      ]);
      await stopProcess(holder, 'SIGKILL');
      answer();
      workflowWorker = await Worker.create({
        dataConverter: dataConverter(),
        connection: env.nativeConnection,
        taskQueue,
        workflowBundle: bundle,
        activities: real, // its local activities; the regular ones stay on the worker above
        enableNonLocalActivities: false,
      });
      runningWorkflows = workflowWorker.run();
      // An escalation (which the timers never reach here) is resolved as an operator would, so
      // that the run ends and its history is replayed either way.
      let escalated = false;
      const operator = setInterval(() => {
        void handle
          .query(stateQuery)
          .then(async (st) => {
            if (st.awaiting !== 'charge-outcome' || escalated) return;
            escalated = true;
            await request(handle, { command: 'resolve', action: 'charge-succeeded' });
          })
          .catch(() => undefined);
      }, 250);
      const result = await orderOutcome(handle).finally(() => clearInterval(operator));
      expect(result.status).toBe('COMPLETED');
      expect((await holds(db, order.orderId)).captures).toEqual([{ status: 'succeeded', amount: 1300 }]);
      expect(await ledger(db, order.orderId)).toEqual({ charges: [], refunds: [] });
      const history = await handle.fetchHistory();
      const T = temporal.api.enums.v1.EventType;
      // The path under test happened: a workflow task timed out on the dead worker's sticky queue.
      expect(history.events?.some((e) => e.eventType === T.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT)).toBe(true);
      expect(history.events?.some((e) => e.eventType === T.EVENT_TYPE_WORKFLOW_TASK_FAILED)).toBe(false);
      expect(inquiries).toBeGreaterThanOrEqual(2);
      await Worker.runReplayHistory(
        { dataConverter: dataConverter(), workflowBundle: bundle },
        history,
        workflowIdFor(order.orderId),
      );
      expect(escalated).toBe(false);
    } finally {
      answer();
      await stopProcess(holder, 'SIGKILL');
      activityWorker.shutdown();
      workflowWorker?.shutdown();
      await Promise.all([runningActivities, runningWorkflows]);
    }
  });

  it('mid-reserve, after the CAS committed: the stock is taken exactly once', async () => {
    const p = await createProduct(db, { stock: 5, priceCents: 900 });
    const order = makeOrder([{ sku: p.sku, qty: 2, unitPriceCents: p.priceCents }]);
    const result = await crashAndRecover(order, 'after-reserve-commit', async (m) => existsSync(m));
    expect(result.status).toBe('COMPLETED');
    expect(await productRow(db, p.sku)).toEqual({ stock: 3, version: 1 });
    expect(await reservations(db, order.orderId)).toEqual([{ sku: p.sku, qty: 2, status: 'SOLD' }]);
    expect((await holds(db, order.orderId)).captures).toHaveLength(1);
  });

  it('mid-release, after the release committed: the stock comes back exactly once', async () => {
    const p = await createProduct(db, { stock: 5, priceCents: 900 });
    const order = makeOrder([{ sku: p.sku, qty: 2, unitPriceCents: p.priceCents }], { paymentMethod: 'tok_declined' });
    const result = await crashAndRecover(order, 'after-release-commit', async (m) => existsSync(m));
    expect(result.status).toBe('FAILED');
    expect((await orderRow(db, order.orderId))?.status).toBe('FAILED');
    expect(await productRow(db, p.sku)).toEqual({ stock: 5, version: 2 });
    expect(await reservations(db, order.orderId)).toEqual([{ sku: p.sku, qty: 2, status: 'RELEASED' }]);
    expect((await ledger(db, order.orderId)).refunds).toEqual([]);
  });
});
