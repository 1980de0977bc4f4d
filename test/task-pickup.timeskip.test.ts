/**
 * No task waits on the server's recovery: an activity task no worker takes within the pickup bound
 * (PICKUP_BOUND_MS, workflows/saga-activities.ts) is sent again by the saga, as after a server restart
 * that lost or delayed it. On the time-skipping server: the saga's worker runs workflows only (no
 * activity poller), so its first regular activity times out unstarted; after the resend, a worker with
 * the activities starts and the saga completes, the activity having run once, on the resent task.
 */
import { temporal } from '@temporalio/proto';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import type { Pool } from 'pg';
import { describe, expect, it } from 'vitest';
import { createActivities } from '../activities';
import { workflowIdFor } from '../domain/order';
import { orderOutcome } from '../orders/order-outcome';
import { PICKUP_BOUND_MS } from '../workflows/saga-activities';
import { orderSaga } from '../workflows';
import { createProduct, holds, makeOrder, testProvider, uid } from './support/helpers';
import { useSagaTestEnv } from './support/saga-test-env';
import { dataConverter } from './support/temporal-env';

let env: TestWorkflowEnvironment;
let bundle: WorkflowBundleWithSourceMap;
let db: Pool;
useSagaTestEnv({ server: 'timeskip' }, { started: (saga) => ({ env, bundle, db } = saga) });

const T = temporal.api.enums.v1;
type Event = temporal.api.history.v1.IHistoryEvent;

const events = async (workflowId: string): Promise<Event[]> =>
  (await env.client.workflow.getHandle(workflowId).fetchHistory()).events ?? [];

async function eventually<T>(what: string, probe: () => Promise<T | undefined>): Promise<T> {
  for (let i = 0; i < 300; i++) {
    const v = await probe();
    if (v !== undefined) return v;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${what}: not within 30 s`);
}

describe('a task no worker takes', () => {
  it('is sent again after the pickup bound, and the saga completes on the resent task', async () => {
    const taskQueue = `pickup-${uid()}`;
    const p = await createProduct(db, { stock: 10, priceCents: 900 });
    const order = makeOrder([{ sku: p.sku, qty: 1, unitPriceCents: p.priceCents }]);
    const workflowId = workflowIdFor(order.orderId);
    const common = { connection: env.nativeConnection, taskQueue, dataConverter: dataConverter() };
    // Workflows only: its local attempts fail (no activity registered), and nobody polls activity tasks.
    const workflows = await Worker.create({ ...common, workflowBundle: bundle });
    const activities = await Worker.create({
      ...common,
      activities: createActivities({ db, provider: testProvider() }),
    });

    const out = await workflows.runUntil(async () => {
      const handle = await env.client.workflow.start(orderSaga, { taskQueue, workflowId, args: [order] });
      const first = await eventually('the first regular activity is scheduled', async () =>
        (await events(workflowId)).find((e) => e.eventType === T.EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED),
      );
      const type = first.activityTaskScheduledEventAttributes!.activityType!.name!;
      expect(Number(first.activityTaskScheduledEventAttributes!.scheduleToStartTimeout!.seconds)).toBe(
        PICKUP_BOUND_MS / 1000,
      );
      await env.sleep(PICKUP_BOUND_MS + 1_000);
      const resent = await eventually('the activity is sent again', async () => {
        const h = await events(workflowId);
        const timedOut = h.find(
          (e) =>
            e.eventType === T.EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT &&
            e.activityTaskTimedOutEventAttributes?.failure?.timeoutFailureInfo?.timeoutType ===
              T.TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START,
        );
        const again = h.filter(
          (e) =>
            e.eventType === T.EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED &&
            e.activityTaskScheduledEventAttributes?.activityType?.name === type,
        );
        return timedOut && again.length === 2 ? again[1]! : undefined;
      });
      // Now a worker with the activities comes (the server is back): the resent task is taken.
      return activities.runUntil(async () => ({ type, resent, result: await orderOutcome(handle) }));
    });

    expect(out.result.status).toBe('COMPLETED');
    const h = await events(workflowId);
    const started = h.filter((e) => e.eventType === T.EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED);
    // The first task never started; the resent one did.
    expect(
      started.some(
        (e) => Number(e.activityTaskStartedEventAttributes!.scheduledEventId) === Number(out.resent.eventId),
      ),
    ).toBe(true);
    expect(
      h.filter(
        (e) =>
          e.eventType === T.EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT &&
          e.activityTaskTimedOutEventAttributes?.failure?.timeoutFailureInfo?.timeoutType ===
            T.TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START,
      ).length,
    ).toBeGreaterThanOrEqual(1);
    const money = await holds(db, order.orderId);
    expect(money.captures.filter((c) => c.status === 'succeeded')).toHaveLength(1);
    console.log(
      `[pickup] ${out.type} sent again after ${PICKUP_BOUND_MS / 1000} s unstarted; the order ended ${out.result.status}`,
    );
  });
});
