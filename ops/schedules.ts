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
  /**
   * How long one of its runs may take, start to close (the run's execution timeout). Its activity's
   * own bounds (a try of 5 min) are shorter; a run that still cannot finish (its worker gone, its activity lost) is
   * ended by the server at this bound, and the Schedule's next start goes ahead.
   */
  runBound: string;
}

/** Both Schedules, as npm start creates them and `client.ts check` expects them. */
export const APP_SCHEDULES: readonly AppSchedule[] = [
  {
    scheduleId: SWEEP_SCHEDULE_ID,
    workflowType: WorkflowNames.sweeper,
    defaultEvery: '1m',
    everyVariable: 'SWEEP_EVERY',
    runBound: '10m',
  },
  {
    scheduleId: RECONCILE_SCHEDULE_ID,
    workflowType: WorkflowNames.reconcile,
    defaultEvery: '1h',
    everyVariable: 'RECONCILE_EVERY',
    runBound: '30m',
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

/** The bound of a run of `workflowType`'s Schedule (APP_SCHEDULES), or undefined for another workflow. */
export const runBoundOf = (workflowType: string): string | undefined =>
  APP_SCHEDULES.find((s) => s.workflowType === workflowType)?.runBound;

/**
 * The policies (a function: the SDK is loaded on first use). One run at a time (SKIP): two sweeps never act on the same order at once, and a start due while a run
 * is still going is skipped rather than queued behind it. No run outlives its bound (runBound), so a
 * run that cannot finish holds the next back for at most that long; `client.ts check` names one
 * running past its bound and a Schedule that keeps skipping.
 */
const policies = () => ({ overlap: ScheduleOverlapPolicy.SKIP, catchupWindow: '1h' }) as const;

/**
 * Creates the Schedule, or updates its interval, arguments, run bound and policies when it exists (a
 * Schedule made by an older build gets today's). Says which.
 */
export async function upsertSchedule(client: Client, req: ScheduleRequest): Promise<{ created: boolean }> {
  // eslint-disable-next-line @typescript-eslint/no-unsafe-assignment -- Duration is the 'ms' package's template type, which the linter cannot resolve
  const spec = { intervals: [{ every: req.every as Duration }] };
  const bound = runBoundOf(req.workflowType);
  const action = {
    type: 'startWorkflow' as const,
    workflowType: req.workflowType,
    taskQueue: req.taskQueue,
    workflowId: req.scheduleId,
    args: req.args ?? [],
    // eslint-disable-next-line @typescript-eslint/no-unsafe-assignment -- Duration, as above
    ...(bound ? { workflowExecutionTimeout: bound as Duration } : {}),
  };
  try {
    await client.schedule.create({ scheduleId: req.scheduleId, spec, action, policies: policies() });
    return { created: true };
  } catch (err) {
    if (!(err instanceof ScheduleAlreadyRunning)) throw err;
  }
  await client.schedule
    .getHandle(req.scheduleId)
    .update((prev) => ({ ...prev, spec, action, policies: { ...prev.policies, ...policies() } }));
  return { created: false };
}
