/**
 * Is the machinery that keeps orders moving in place? What `client.ts check` asks Temporal, beside the
 * invariants over the data:
 *  - each of the application's Schedules (ops/schedules.ts) exists, is not paused, starts its workflow
 *    on the saga's task queue, and its last finished run completed within three of its intervals;
 *  - a worker polls the build new sagas go to (the Worker Deployment's current version, or unversioned
 *    workers when no version is current) on the saga's task queue;
 *  - every open order's run can be read with the payload keys at hand: each encrypted payload of its
 *    history opens with the configured codec (a missing key is named with the order).
 * The facts are gathered from the server first; each verdict is a pure function of them and `now`.
 */
import { ScheduleNotFoundError, WorkflowNotFoundError, type Client } from '@temporalio/client';
import type { Payload } from '@temporalio/common';
import { tsToMs } from '@temporalio/common/lib/time';
import { temporal } from '@temporalio/proto';
import { workflowIdFor } from '../domain/order';
import { ENCRYPTED_ENCODING } from '../platform/payload-codec';
import { versionName } from './deployments';
import { APP_SCHEDULES, type AppSchedule } from './schedules';

/** A Schedule's last finished run must be at most this many of its intervals old. */
export const RUN_WITHIN_INTERVALS = 3;
/** A poller counts as live when it polled this recently (a worker's long poll lasts up to a minute). */
export const POLLED_WITHIN_MS = 90_000;

/** One check's verdict; `orderId` when it is about one order. */
export interface MachineryCheck {
  name: string;
  ok: boolean;
  detail: string;
  orderId?: string;
}

export interface MachineryReport {
  ok: boolean;
  checks: MachineryCheck[];
}

// ---- Schedules ----

/** A run a Schedule started, newest first; `closedAtMs` once it has finished. */
export interface ScheduledRun {
  workflowId: string;
  status: string;
  startedAtMs?: number;
  closedAtMs?: number;
}

export type ScheduleFacts =
  | { scheduleId: string; found: false }
  | {
      scheduleId: string;
      found: true;
      paused: boolean;
      note?: string;
      /** Its interval; undefined for a calendar spec with fewer than two upcoming times. */
      everyMs?: number;
      createdAtMs: number;
      workflowType?: string;
      taskQueue?: string;
      /** Its recent runs, newest first (the server keeps the last ten actions). */
      runs: ScheduledRun[];
      /** The bound on each run it starts (the action's execution timeout); undefined: none. */
      runBoundMs?: number;
      /** Starts it skipped because a run was still going (overlap policy SKIP), over its life. */
      skippedOverlap?: number;
    };

const iso = (ms: number): string => new Date(ms).toISOString();

/** 90000 → 90s, 60000 → 1m, 3600000 → 1h (the form `--every` takes). */
export function formatEvery(ms: number): string {
  for (const [unit, size] of [
    ['d', 86_400_000],
    ['h', 3_600_000],
    ['m', 60_000],
  ] as const)
    if (ms % size === 0) return `${ms / size}${unit}`;
  return `${Math.round(ms / 1000)}s`;
}

/** Present, not paused, starting the right workflow where the workers are, and its last finished run completed recently. */
export function scheduleVerdict(
  f: ScheduleFacts,
  expected: Pick<AppSchedule, 'workflowType'> & { taskQueue: string },
  now: number,
): MachineryCheck {
  const name = `schedule ${f.scheduleId}`;
  if (!f.found)
    return {
      name,
      ok: false,
      detail: `missing (npm start creates it; or: npx tsx client.ts schedule ${f.scheduleId})`,
    };
  const problems: string[] = [];
  if (f.paused)
    problems.push(
      `paused${f.note ? ` ("${f.note}")` : ''} (unpause: temporal schedule toggle --unpause --schedule-id ${f.scheduleId})`,
    );
  if (f.workflowType !== expected.workflowType)
    problems.push(`starts ${f.workflowType ?? 'no workflow'}, not ${expected.workflowType}`);
  if (f.taskQueue !== expected.taskQueue)
    problems.push(`starts on task queue ${f.taskQueue ?? '(none)'}, which is not the workers' ${expected.taskQueue}`);
  // The last finished run is judged; one still running is neither good nor bad news yet.
  const last = f.runs.find((r) => r.status !== 'RUNNING');
  const closedAt = last?.closedAtMs ?? now;
  const window = f.everyMs === undefined ? undefined : RUN_WITHIN_INTERVALS * f.everyMs;
  const ago = `more than ${RUN_WITHIN_INTERVALS} intervals ago`;
  if (last && last.status !== 'COMPLETED')
    problems.push(
      `its last run ${last.workflowId} ended ${last.status}${last.closedAtMs ? ` at ${iso(closedAt)}` : ''}`,
    );
  else if (last && window !== undefined && now - closedAt > window)
    problems.push(`its last run completed at ${iso(closedAt)}, ${ago}`);
  else if (!last && window !== undefined && now - f.createdAtMs > window)
    problems.push(`no run has completed since it was created at ${iso(f.createdAtMs)}, ${ago}`);
  const stuck = runningTooLong(f, now);
  if (stuck) problems.push(stuck);
  if (problems.length) return { name, ok: false, detail: problems.join('; ') };
  const every = f.everyMs === undefined ? 'on a calendar' : `every ${formatEvery(f.everyMs)}`;
  const runs = last
    ? `last run completed at ${iso(closedAt)}`
    : `created at ${iso(f.createdAtMs)}; no run has completed yet`;
  return { name, ok: true, detail: `${every}, ${runs}` };
}

/**
 * The newest run, when it is still running past its bound (or, with no bound, past three intervals):
 * it holds back every start the Schedule skips meanwhile. Undefined when none is.
 */
function runningTooLong(f: Extract<ScheduleFacts, { found: true }>, now: number): string | undefined {
  const run = f.runs[0];
  if (run?.status !== 'RUNNING' || run.startedAtMs === undefined) return undefined;
  const limit = f.runBoundMs ?? (f.everyMs === undefined ? undefined : RUN_WITHIN_INTERVALS * f.everyMs);
  if (limit === undefined || now - run.startedAtMs <= limit) return undefined;
  const past =
    f.runBoundMs !== undefined
      ? `past its bound of ${formatEvery(f.runBoundMs)}`
      : `more than ${RUN_WITHIN_INTERVALS} intervals, with no bound (npx tsx client.ts schedule ${f.scheduleId} sets one)`;
  const skipped = f.skippedOverlap ? `; ${f.skippedOverlap} starts skipped while a run was still going` : '';
  return `its run ${run.workflowId} has been running since ${iso(run.startedAtMs)}, ${past}${skipped} (temporal workflow describe --workflow-id ${run.workflowId})`;
}

async function scheduleFacts(client: Client, scheduleId: string): Promise<ScheduleFacts> {
  let d;
  try {
    d = await client.schedule.getHandle(scheduleId).describe();
  } catch (err) {
    if (err instanceof ScheduleNotFoundError) return { scheduleId, found: false };
    throw err;
  }
  const next = d.info.nextActionTimes.map((t) => t.getTime());
  const everyMs = d.spec.intervals?.[0]?.every ?? (next.length >= 2 ? next[1]! - next[0]! : undefined);
  // Newest first, until the first run that has finished: that is the one judged.
  const runs: ScheduledRun[] = [];
  for (const a of [...d.info.recentActions].reverse()) {
    const { workflowId } = a.action.workflow;
    try {
      const w = await client.workflow.getHandle(workflowId).describe();
      runs.push({
        workflowId,
        status: w.status.name,
        startedAtMs: w.startTime.getTime(),
        ...(w.closeTime ? { closedAtMs: w.closeTime.getTime() } : {}),
      });
      if (w.status.name !== 'RUNNING') break;
    } catch (err) {
      if (!(err instanceof WorkflowNotFoundError)) throw err; // gone with retention: the next older one
    }
  }
  const action = d.action.type === 'startWorkflow' ? d.action : undefined;
  return {
    scheduleId,
    found: true,
    paused: d.state.paused,
    ...(d.state.note ? { note: d.state.note } : {}),
    ...(everyMs !== undefined ? { everyMs } : {}),
    createdAtMs: d.info.createdAt.getTime(),
    ...(action ? { workflowType: action.workflowType, taskQueue: action.taskQueue } : {}),
    ...(typeof action?.workflowExecutionTimeout === 'number' ? { runBoundMs: action.workflowExecutionTimeout } : {}),
    skippedOverlap: d.info.numActionsSkippedOverlap,
    runs,
  };
}

// ---- The worker of the current build ----

export interface PollerFacts {
  identity: string;
  lastAccessMs: number;
  /** The version it polls as; undefined for an unversioned worker. */
  version?: { deploymentName: string; buildId: string };
}

export interface WorkerFacts {
  taskQueue: string;
  /** The version new workflows on the task queue go to; undefined: unversioned workers get them. */
  current?: { deploymentName: string; buildId: string };
  pollers: PollerFacts[];
}

/** A live poller of the build new sagas go to, on the saga's task queue. */
export function workerVerdict(f: WorkerFacts, now: number): MachineryCheck {
  const live = f.pollers.filter((p) => now - p.lastAccessMs <= POLLED_WITHIN_MS);
  const of = (p: PollerFacts) => (p.version ? versionName(p.version) : 'unversioned');
  const wanted = f.current ? versionName(f.current) : 'unversioned';
  const matching = live.filter((p) => of(p) === wanted);
  const where = `task queue ${f.taskQueue}`;
  if (matching.length) {
    const who = `(${[...new Set(matching.map((p) => p.identity))].join(', ')})`;
    return {
      name: 'worker',
      ok: true,
      detail: f.current
        ? `${matching.length} poller(s) of the current build ${wanted} on ${where} ${who}`
        : `${matching.length} unversioned poller(s) on ${where}, no build current ${who}`,
    };
  }
  const others = [...new Set(live.map(of))];
  const polling = others.length ? ` (polling: ${others.join(', ')}; docs/versioning.md)` : '';
  const within = `in the last ${POLLED_WITHIN_MS / 1000} s`;
  return {
    name: 'worker',
    ok: false,
    detail: f.current
      ? `no worker of the current build ${wanted} polled ${where} ${within}${polling}: new sagas, and those pinned to it, wait`
      : `no unversioned worker polled ${where} ${within}, and no build is current${polling}: new sagas wait`,
  };
}

async function workerFacts(client: Client, taskQueue: string): Promise<WorkerFacts> {
  const r = await client.workflowService.describeTaskQueue({
    namespace: client.options.namespace,
    taskQueue: { name: taskQueue, kind: temporal.api.enums.v1.TaskQueueKind.TASK_QUEUE_KIND_NORMAL },
    taskQueueType: temporal.api.enums.v1.TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
  });
  const versioned = temporal.api.enums.v1.WorkerVersioningMode.WORKER_VERSIONING_MODE_VERSIONED;
  const current = r.versioningInfo?.currentDeploymentVersion;
  return {
    taskQueue,
    ...(current?.buildId
      ? { current: { deploymentName: current.deploymentName ?? '', buildId: current.buildId } }
      : {}),
    pollers: (r.pollers ?? []).map((p) => {
      const o = p.deploymentOptions;
      return {
        identity: p.identity ?? '',
        lastAccessMs: tsToMs(p.lastAccessTime),
        ...(o?.buildId && o.workerVersioningMode === versioned
          ? { version: { deploymentName: o.deploymentName ?? '', buildId: o.buildId } }
          : {}),
      };
    }),
  };
}

// ---- Open orders' payloads ----

type HistoryEvent = temporal.api.history.v1.IHistoryEvent;

/** Every payload this codec sealed, anywhere in the event (inputs, results, signals, failures, headers). */
export function sealedPayloads(value: unknown, out: Payload[] = []): Payload[] {
  if (!value || typeof value !== 'object' || ArrayBuffer.isView(value)) return out;
  const p = value as Payload;
  if (p.metadata && typeof p.metadata === 'object' && 'encoding' in p.metadata) {
    const encoding = p.metadata.encoding;
    if (encoding && Buffer.from(encoding).toString() === ENCRYPTED_ENCODING) out.push(p);
    return out;
  }
  for (const v of Object.values(value)) sealedPayloads(v, out);
  return out;
}

const eventName = (e: HistoryEvent): string =>
  (temporal.api.enums.v1.EventType[e.eventType ?? 0] ?? 'EVENT_TYPE_UNSPECIFIED')
    .replace('EVENT_TYPE_', '')
    .toLowerCase()
    .replace(/(^|_)([a-z])/g, (_m, _s, c: string) => c.toUpperCase());

/** The first payload of the order's latest run that the client's codecs cannot open, or why there is nothing to read. */
async function readOrder(
  client: Client,
  orderId: string,
): Promise<{ orderId: string; runId?: string; problem?: string; noRun?: boolean }> {
  const handle = client.workflow.getHandle(workflowIdFor(orderId));
  let runId: string | undefined;
  let events: HistoryEvent[];
  try {
    runId = (await handle.describe()).runId;
    events = (await client.workflow.getHandle(handle.workflowId, runId).fetchHistory()).events ?? [];
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return { orderId, noRun: true };
    return { orderId, problem: `its history cannot be read: ${(err as Error).message}` };
  }
  const codecs = [...client.options.loadedDataConverter.payloadCodecs].reverse();
  for (const e of events) {
    for (const sealed of sealedPayloads(e)) {
      try {
        let list = [sealed];
        for (const codec of codecs) list = await codec.decode(list);
      } catch (err) {
        return { orderId, runId, problem: `event ${String(e.eventId)} ${eventName(e)}: ${(err as Error).message}` };
      }
    }
  }
  return { orderId, runId };
}

/** Runs `fn` over `items`, `width` at a time. */
async function eachBounded<T, R>(items: T[], width: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array<R>(items.length);
  let next = 0;
  const lane = async (): Promise<void> => {
    for (let i = next++; i < items.length; i = next++) out[i] = await fn(items[i]!);
  };
  await Promise.all(Array.from({ length: Math.min(width, items.length) }, lane));
  return out;
}

/** The verdicts over every open order: one summary, then one failed check per order that cannot be read. */
export function payloadVerdicts(
  results: { orderId: string; runId?: string; problem?: string; noRun?: boolean }[],
  keys: string,
): MachineryCheck[] {
  const bad = results.filter((r) => r.problem);
  const noRun = results.filter((r) => r.noRun).length;
  const read = results.length - bad.length - noRun;
  const summary: MachineryCheck = {
    name: 'open orders',
    ok: bad.length === 0,
    detail:
      `${read} of ${results.length} open order(s) read with the keys at hand (${keys})` +
      (bad.length ? `; ${bad.length} cannot be read` : '') +
      (noRun ? `; ${noRun} without a run in Temporal (the sweeper starts one from the row)` : ''),
  };
  return [
    summary,
    ...bad.map((r) => ({
      name: `order ${r.orderId}`,
      ok: false,
      orderId: r.orderId,
      detail: `${r.runId ? `run ${r.runId}: ` : ''}${r.problem!}`,
    })),
  ];
}

// ---- All of it ----

export interface MachineryInput {
  taskQueue: string;
  openOrderIds: string[];
  /** Which keys the client has, for the report: `PAYLOAD_KEYS: test-1` or the key file and its IDs. */
  keys: string;
  now?: () => number;
}

/**
 * Every check, each on its own: a call that fails for one (a Schedule the credentials may not read,
 * say) is that check's problem, and the others are still asked.
 */
export async function checkMachinery(client: Client, input: MachineryInput): Promise<MachineryReport> {
  const now = input.now ?? Date.now;
  const asked = async (name: string, fn: () => Promise<MachineryCheck[]>): Promise<MachineryCheck[]> =>
    fn().catch((err: Error) => [{ name, ok: false, detail: `Temporal did not answer: ${err.message}` }]);
  const checks: MachineryCheck[] = [];
  for (const s of APP_SCHEDULES)
    checks.push(
      ...(await asked(`schedule ${s.scheduleId}`, async () => [
        scheduleVerdict(await scheduleFacts(client, s.scheduleId), { ...s, taskQueue: input.taskQueue }, now()),
      ])),
    );
  checks.push(
    ...(await asked('worker', async () => [workerVerdict(await workerFacts(client, input.taskQueue), now())])),
  );
  const orders = await eachBounded(input.openOrderIds, 8, (id) => readOrder(client, id));
  checks.push(...payloadVerdicts(orders, input.keys));
  return { ok: checks.every((c) => c.ok), checks };
}

/** Temporal could not be reached: nothing of the machinery is known, which is itself a failure. */
export function unreachableReport(message: string): MachineryReport {
  return {
    ok: false,
    checks: [
      {
        name: 'temporal',
        ok: false,
        detail: `${message}; the Schedules, the workers and the open orders' payloads are not checked`,
      },
    ],
  };
}

export function formatMachinery(r: MachineryReport): string[] {
  const bad = r.checks.filter((c) => !c.ok).length;
  return [
    `machinery: ${bad ? `${bad} problem(s)` : `all ${r.checks.length} checks pass`}`,
    ...r.checks.map((c) => `  ${c.ok ? 'ok' : 'PROBLEM'} ${c.name}: ${c.detail}`),
  ];
}
