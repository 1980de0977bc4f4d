/**
 * The application's Temporal Schedules: `reconcile` (the invariant check) and `sweep` (the sweeper).
 * One way to create or update them, for `client.ts schedule` and `npm start`.
 */
import { ScheduleAlreadyRunning, ScheduleOverlapPolicy, type Client } from '@temporalio/client';
import type { Duration } from '@temporalio/common';
import { WorkflowNames } from '../domain/names';

export const RECONCILE_SCHEDULE_ID = 'reconcile';
export const SWEEP_SCHEDULE_ID = 'sweep';

/** One of the application's Schedules: the workflow it starts and how often by default. */
export interface AppSchedule {
  scheduleId: string;
  workflowType: string;
  /** npm start's interval, unless its variable says otherwise. */
  defaultEvery: string;
  everyVariable: string;
}

/** Both Schedules, as npm start creates them and `client.ts check` expects them. */
export const APP_SCHEDULES: readonly AppSchedule[] = [
  {
    scheduleId: SWEEP_SCHEDULE_ID,
    workflowType: WorkflowNames.sweeper,
    defaultEvery: '1m',
    everyVariable: 'SWEEP_EVERY',
  },
  {
    scheduleId: RECONCILE_SCHEDULE_ID,
    workflowType: WorkflowNames.reconcile,
    defaultEvery: '1h',
    everyVariable: 'RECONCILE_EVERY',
  },
];

export interface ScheduleRequest {
  scheduleId: string;
  workflowType: string;
  taskQueue: string;
  /** A duration such as 1m, 15m, 1h. */
  every: string;
  args?: unknown[];
}

/** Creates the Schedule, or updates its interval and arguments when it exists. Says which. */
export async function upsertSchedule(client: Client, req: ScheduleRequest): Promise<{ created: boolean }> {
  // eslint-disable-next-line @typescript-eslint/no-unsafe-assignment -- Duration is the 'ms' package's template type, which the linter cannot resolve
  const spec = { intervals: [{ every: req.every as Duration }] };
  const action = {
    type: 'startWorkflow' as const,
    workflowType: req.workflowType,
    taskQueue: req.taskQueue,
    workflowId: req.scheduleId,
    args: req.args ?? [],
  };
  try {
    await client.schedule.create({
      scheduleId: req.scheduleId,
      spec,
      action,
      policies: { overlap: ScheduleOverlapPolicy.SKIP, catchupWindow: '1h' },
    });
    return { created: true };
  } catch (err) {
    if (!(err instanceof ScheduleAlreadyRunning)) throw err;
  }
  await client.schedule.getHandle(req.scheduleId).update((prev) => ({ ...prev, spec, action }));
  return { created: false };
}
