/**
 * The sweeper's decision for one open order, as a pure function: what it knows of the order (the row,
 * its own record of the order, the run's description and pending tasks, the time since the run's last
 * event, the task queue's pollers) in, one case out. activities/sweeper.ts gathers the facts and runs
 * the case's handler; nothing here reads a clock, a database or a server, so every case has a unit
 * test without one (test/sweep-classify.test.ts).
 */
import { isTerminal, type OrderStatus } from '../domain/order';
import { SDK_UPDATE_BUG } from '../platform/task-failures';

/** The bounds a sweep decides with (activities/sweeper.ts's SweepOptions). */
export interface SweepBounds {
  /** Restarts per order before a person is told instead. */
  maxRestarts: number;
  /** A workflow task failing (or timing out) this many attempts in a row counts as failing for good. */
  failedTaskAttempts: number;
  /** An order in NEEDS_ATTENTION longer than this is alerted (again after as long). */
  attentionAgeMs: number;
  /** A running run whose last event is older than this has stopped moving. */
  stallAfterMs: number;
}

/** An activity the run is waiting on, from its description. */
export interface PendingActivityFacts {
  type: string;
  attempt: number;
  /** Set when an operator (or a rule) paused it. */
  paused?: { by?: string; reason?: string; at?: string };
  /** Its last failure's message, decoded; empty when it has none. */
  lastFailure: string;
  /**
   * How long its current attempt is past one of its own timeouts (schedule-to-start while no worker
   * has it, start-to-close or heartbeat once one has), which the server should have fired by then.
   */
  overdue?: { ms: number; timeout: 'schedule-to-start' | 'start-to-close' | 'heartbeat' };
}

/** The run's workflow task that has not completed yet. */
export interface PendingTaskFacts {
  /** Scheduled: no worker has it; started: a worker is on it. */
  state: 'scheduled' | 'started';
  attempt: number;
  /** How its last attempts ended (read from the history only once attempt ≥ failedTaskAttempts). */
  lastAttempts?: 'failed' | 'timed-out';
  /** The failure's message, when they failed. */
  failure?: string;
  /** Its last completed workflow task's event ID, where a reset takes it back to. */
  resetTo?: number;
}

/** The latest run of the order's workflow, from its description. */
export interface RunFacts {
  runId: string;
  /** RUNNING, COMPLETED, FAILED, TERMINATED, CANCELED, TIMED_OUT, CONTINUED_AS_NEW. */
  status: string;
  workflowTask?: PendingTaskFacts;
  activities: PendingActivityFacts[];
  /** The Worker Deployment version (`name:build`) its last workflow task completed on; absent: unversioned. */
  build?: string;
  /** A versioning override an operator set: pinned to a version, or auto-upgrade. */
  override?: { pinnedTo: string } | { autoUpgrade: true };
  /** Milliseconds since its last event or an activity's heartbeat; only asked of a row older than the stall bound. */
  sinceProgressMs?: number;
}

/** The status the sweeper gives an order whose saga runs but has not written its row yet. */
export const NO_ROW = 'no row';

export interface OrderFacts {
  /** The row's status; NO_ROW for a running saga that has not written its row yet. */
  status: OrderStatus | typeof NO_ROW;
  /** Milliseconds since the row last changed (with no row: since the run started). */
  ageMs: number;
  /** What the sweeper did to this order before. */
  record: { restarts: number; resets: number; alertedWithinAttentionAge: boolean };
  /** The latest run, or undefined when the order has no workflow. */
  run?: RunFacts;
  /**
   * The versions polling the run's workflow task queue (`''`: an unversioned worker); only asked when
   * the run has stopped moving with a workflow task nobody took.
   */
  pollers?: string[];
}

/** Why the sweeper acts (a column of `sweeper_actions`; the stall causes are what `client.ts stalled` lists). */
export type SweepCause =
  | 'closed'
  | 'missing'
  | 'task-failing'
  | 'sdk-update-bug'
  | 'task-timing-out'
  | 'override-unpolled'
  | 'build-unpolled'
  | 'timeout-lost'
  | 'activity-paused'
  | 'activity-retrying'
  | 'stalled'
  | 'attention'
  | 'unreadable';

/** The causes of a run that is open but not moving. */
export const STALL_CAUSES: readonly SweepCause[] = [
  'task-timing-out',
  'override-unpolled',
  'build-unpolled',
  'timeout-lost',
  'activity-paused',
  'activity-retrying',
  'stalled',
];

/** One case per handler in activities/sweeper.ts. */
export type SweepCase =
  /** The run is moving, or waits on purpose (an inquiry timer, a person, a message): nothing to do. */
  | { case: 'leave'; why: string }
  /** The run is closed or missing: start the saga again from the row. */
  | { case: 'restart'; cause: 'closed' | 'missing'; why: string }
  /** The run cannot go on as it is (a reset would replay the same failure, its build has no workers): terminate it and start the saga again from the row. */
  | { case: 'replace'; cause: 'sdk-update-bug' | 'build-unpolled' | 'timeout-lost'; why: string }
  /** Its workflow task fails or times out for good: reset the run to its last completed workflow task. */
  | { case: 'reset'; cause: 'task-failing' | 'task-timing-out'; why: string; toEventId: number }
  /** A versioning override sends its tasks to a version nobody polls while its own build is polled: remove the override. */
  | { case: 'remove-override'; cause: 'override-unpolled'; why: string }
  /** NEEDS_ATTENTION for longer than the attention age: an alert. */
  | { case: 'alert'; cause: 'attention'; why: string }
  /** What the sweeper must not or cannot heal: a person is told, with the diagnosis. */
  | { case: 'person'; cause: SweepCause; why: string };

/** A duration as a person reads it: seconds under two minutes, else minutes. */
const duration = (ms: number): string =>
  ms < 120_000 ? `${Math.round(ms / 1000)} s` : `${Math.round(ms / 60_000)} min`;
/** A run's status as words: `TIMED_OUT` → `timed out`. */
const spoken = (status: string): string => status.toLowerCase().replace(/_/g, ' ');

/**
 * The order's situation, as one case. A settled order (its row terminal) is only looked at for its
 * run: a closed or missing run leaves nothing to do, and a run that cannot go on is never replaced
 * (a new run would only find the order settled): a person is told.
 */
export function classifyOrder(o: OrderFacts, b: SweepBounds): SweepCase {
  if (o.status === NO_ROW) return classifyRowless(o, b);
  if (!isTerminal(o.status)) return classifyOpen(o, b);
  if (o.run?.status !== 'RUNNING') return { case: 'leave', why: `it is ${o.status} and its run has closed` };
  const c = classifyOpen(o, b);
  if (c.case !== 'replace') return c;
  return {
    case: 'person',
    cause: c.cause,
    why: `${c.why}; the order is ${o.status} already, only its run is left open (terminate it)`,
  };
}

/**
 * A saga running with no order row yet: nothing was reserved or charged for it, and there is no row to
 * start it again from. Its run is healed as an open order's would be where that needs no row (an
 * override to a build nobody polls is removed, the run then going where new runs go; a task failing
 * for good is reset when it has a completed task to go back to, which a run whose first task fails
 * has not); what a new run from the row would heal goes to a person. A run that closed meanwhile
 * leaves nothing to do: the order never happened (or its row is there by the next sweep).
 */
function classifyRowless(o: OrderFacts, b: SweepBounds): SweepCase {
  if (o.run?.status !== 'RUNNING') return { case: 'leave', why: 'its run closed before it wrote the order row' };
  const c = classifyOpen(o, b);
  if (c.case !== 'restart' && c.case !== 'replace') return c;
  return {
    case: 'person',
    cause: c.cause,
    why: `${c.why}; it has not written its order row (nothing reserved or charged), so there is none to start it again from: terminate it, or give it a worker`,
  };
}

function classifyOpen(o: OrderFacts, b: SweepBounds): SweepCase {
  const run = o.run;
  if (!run) return restartOrPerson(o, b, 'missing', 'it has no workflow');
  if (run.status !== 'RUNNING') return restartOrPerson(o, b, 'closed', `its run ${run.runId} is ${spoken(run.status)}`);

  const task = run.workflowTask;
  // A workflow task that fails again and again is a bug whatever the clock says: act on it now.
  if (task && task.attempt >= b.failedTaskAttempts && task.lastAttempts === 'failed') {
    if (task.failure !== undefined && SDK_UPDATE_BUG.test(task.failure)) {
      const why = `its workflow task fails on the SDK's Update-ordering bug (sdk-core#1146)`;
      return o.record.restarts >= b.maxRestarts
        ? { case: 'person', cause: 'sdk-update-bug', why: `${why}, and it was restarted ${b.maxRestarts} times` }
        : { case: 'replace', cause: 'sdk-update-bug', why };
    }
    return resetOrPerson(o, task, 'task-failing', `its workflow task keeps failing (attempt ${task.attempt})`);
  }

  const stalled = run.sinceProgressMs !== undefined && run.sinceProgressMs > b.stallAfterMs;
  if (stalled) {
    const idle = `no progress for ${duration(run.sinceProgressMs!)}`;
    // Nobody takes its workflow task: the version its tasks go to has no workers.
    if (task?.state === 'scheduled' && o.pollers) {
      const unpolled = unpolledCase(o, run, o.pollers, b, idle);
      if (unpolled) return unpolled;
    }
    if (task && task.attempt >= b.failedTaskAttempts && task.lastAttempts === 'timed-out')
      return resetOrPerson(
        o,
        task,
        'task-timing-out',
        `${idle}: its workflow task keeps timing out (attempt ${task.attempt})`,
      );
    // An operator's pause is never undone here: a person decides, whatever the order waits for.
    const paused = run.activities.find((a) => a.paused);
    if (paused) {
      const p = paused.paused!;
      const by = p.by ? ` by ${p.by}` : '';
      const since = p.at ? ` since ${p.at}` : '';
      const reason = p.reason ? ` (${p.reason})` : '';
      return {
        case: 'person',
        cause: 'activity-paused',
        why: `${idle}: its activity ${paused.type} is paused${by}${since}${reason}; the sweeper never unpauses`,
      };
    }
    // Temporal lost an activity's timeout (the soak saw one around a restart of the server and its
    // database): the run would wait forever. A new run from the row is safe (the row fences the old
    // run's writes; every call is idempotent by key), and it asks again where the old one waited.
    const lost = run.activities.find((a) => a.overdue && a.overdue.ms > b.stallAfterMs);
    if (lost) {
      const why = `${idle}: its activity ${lost.type} (attempt ${lost.attempt}) is ${duration(lost.overdue!.ms)} past its own ${lost.overdue!.timeout} timeout, which the server never fired`;
      return o.record.restarts >= b.maxRestarts
        ? { case: 'person', cause: 'timeout-lost', why: `${why}, and it was restarted ${b.maxRestarts} times` }
        : { case: 'replace', cause: 'timeout-lost', why };
    }
  }
  if (o.status === 'NEEDS_ATTENTION' || o.status === 'UNKNOWN_PAYMENT') {
    if (o.status === 'NEEDS_ATTENTION' && o.ageMs > b.attentionAgeMs && !o.record.alertedWithinAttentionAge)
      return { case: 'alert', cause: 'attention', why: `in NEEDS_ATTENTION for ${duration(o.ageMs)}` };
    return { case: 'leave', why: `it waits on purpose (${o.status})` };
  }
  if (!stalled) return { case: 'leave', why: 'it is moving' };
  const idle = `no progress for ${duration(run.sinceProgressMs!)}`;
  const retrying = run.activities.find((a) => a.attempt > 1);
  if (retrying)
    return {
      case: 'person',
      cause: 'activity-retrying',
      why: `${idle}: its activity ${retrying.type} is retrying (attempt ${retrying.attempt})${retrying.lastFailure ? `; last failure: ${retrying.lastFailure}` : ''}`,
    };
  if (!task && run.activities.length === 0) return { case: 'leave', why: 'it waits on a timer or a message' };
  const pending = [
    ...(task ? [`workflow task ${task.state} (attempt ${task.attempt})`] : []),
    ...run.activities.map((a) => `activity ${a.type} (attempt ${a.attempt})`),
  ].join(', ');
  return { case: 'person', cause: 'stalled', why: `${idle}; pending: ${pending}` };
}

/**
 * A workflow task nobody takes: the version its tasks go to (the override's, else the run's own) has
 * no pollers. Removing the override heals it when the run's own version is polled; else a new run from
 * the row does, on the version new runs go to (when some worker polls the queue at all).
 */
function unpolledCase(
  o: OrderFacts,
  run: RunFacts,
  pollers: string[],
  b: SweepBounds,
  idle: string,
): SweepCase | undefined {
  const own = run.build ?? '';
  const named = (v: string): string => (v ? `version ${v}` : 'unversioned workers');
  let why: string;
  if (run.override && 'pinnedTo' in run.override) {
    if (pollers.includes(run.override.pinnedTo)) return undefined;
    why = `${idle}: a versioning override pins it to ${named(run.override.pinnedTo)}, which no worker polls`;
    if (pollers.includes(own)) return { case: 'remove-override', cause: 'override-unpolled', why };
    // A run that has not written its row has not completed a workflow task: it has no version of its
    // own yet, and without the override it goes where new runs go.
    if (o.status === NO_ROW && run.build === undefined && pollers.length > 0)
      return { case: 'remove-override', cause: 'override-unpolled', why: `${why}; it has no version of its own yet` };
    why += `, nor its own ${named(own)}`;
  } else if (!run.override && run.build !== undefined && !pollers.includes(own)) {
    why = `${idle}: its workflow task waits for ${named(own)}, which no worker polls`;
  } else return undefined;
  if (pollers.length === 0)
    return { case: 'person', cause: 'build-unpolled', why: `${why}; no worker polls its task queue at all` };
  return o.record.restarts >= b.maxRestarts
    ? { case: 'person', cause: 'build-unpolled', why: `${why}, and it was restarted ${b.maxRestarts} times` }
    : { case: 'replace', cause: 'build-unpolled', why };
}

function restartOrPerson(o: OrderFacts, b: SweepBounds, cause: 'closed' | 'missing', why: string): SweepCase {
  return o.record.restarts >= b.maxRestarts
    ? { case: 'person', cause, why: `${why}, and it was restarted ${b.maxRestarts} times` }
    : { case: 'restart', cause, why };
}

function resetOrPerson(
  o: OrderFacts,
  task: PendingTaskFacts,
  cause: 'task-failing' | 'task-timing-out',
  why: string,
): SweepCase {
  if (o.record.resets >= 1) return { case: 'person', cause, why: `${why} after the sweeper's reset` };
  if (task.resetTo === undefined) return { case: 'person', cause, why: `${why} and it has no task to reset to` };
  return { case: 'reset', cause, why, toEventId: task.resetTo };
}
