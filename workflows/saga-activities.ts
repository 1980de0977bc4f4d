/**
 * How the saga calls its activities: the option groups (every activity has a timeout and an explicit
 * retry policy), the calls themselves (with a summary for the Web UI), and what their failures mean.
 * Workflow code: deterministic.
 */
import {
  ActivityFailure,
  ApplicationFailure,
  log,
  proxyActivities,
  proxyLocalActivities,
  type ActivityFunctionWithOptions,
  type ActivityOptions,
  type LocalActivityFunctionWithOptions,
  type LocalActivityOptions,
  TimeoutFailure,
} from '@temporalio/workflow';
import { TimeoutType } from '@temporalio/common';
import { msToNumber } from '@temporalio/common/lib/time';
import type { OrderActivities } from '../activities';
import type { PendingResolve, RecordedCancel } from '../activities/order-lock';
import { CHARGE_ATTEMPT_TIMEOUT_MS } from '../domain/charge-timing';
import { ErrorTypes, NON_RETRYABLE, SagaFailureTypes } from '../domain/failures';
import { escalatedForward, isPastPivot, isTerminal, type OrderStatus } from '../domain/order';

/** What the option groups below never retry: every business failure type. */
const nonRetryable: string[] = [...NON_RETRYABLE];
const backoff = { initialInterval: '1s', backoffCoefficient: 2 } as const;

export const orderOpts: ActivityOptions = {
  startToCloseTimeout: '10s',
  retry: { ...backoff, maximumInterval: '30s', maximumAttempts: 10, nonRetryableErrorTypes: nonRetryable },
};
export const inventoryOpts: ActivityOptions = {
  startToCloseTimeout: '30s',
  heartbeatTimeout: '10s',
  retry: { ...backoff, maximumInterval: '30s', maximumAttempts: 5, nonRetryableErrorTypes: nonRetryable },
};
/**
 * One charge request per attempt, never retried by the server: the saga decides every request itself,
 * so after a cancel or the deadline no new request goes out (it only learns the fate of the last one).
 * A request not picked up soon is dropped unsent (then inquired): one scheduled before a cancel cannot
 * go out long after it, when no worker was there to take it.
 */
export const chargeOnceOpts: ActivityOptions = {
  scheduleToStartTimeout: '10s',
  startToCloseTimeout: CHARGE_ATTEMPT_TIMEOUT_MS,
  retry: { maximumAttempts: 1 },
};
/** Rounds of charge request + inquiry before the saga gives up (backward) on a provider that never took it. */
export const CHARGE_ROUNDS = 5;
export const inquiryOpts: ActivityOptions = {
  startToCloseTimeout: '10s',
  retry: { ...backoff, maximumInterval: '5s', maximumAttempts: 3, nonRetryableErrorTypes: nonRetryable },
};
/** The serial lane: a task waits its turn as long as it takes (never dropped); each try is bounded. */
export const laneOpts: ActivityOptions = {
  startToCloseTimeout: '30s',
  heartbeatTimeout: '10s',
  retry: { ...backoff, maximumInterval: '30s', nonRetryableErrorTypes: nonRetryable },
};
/** Compensations retry until they succeed; only a non-retryable failure stops them. */
export const compensationOpts = (maxIntervalMs: number): ActivityOptions => ({
  startToCloseTimeout: '15s',
  retry: { ...backoff, maximumInterval: maxIntervalMs, nonRetryableErrorTypes: nonRetryable },
});
/** Status bookkeeping retries without limit: it must not be the reason a saga stops. */
export const statusOpts: ActivityOptions = { startToCloseTimeout: '10s', retry: { ...backoff, maximumInterval: '1m' } };
/** After the pivot: retry for the forward limit, then escalate (never compensate). */
export const forwardOpts = (limitMs: number): ActivityOptions => ({
  startToCloseTimeout: '30s',
  scheduleToCloseTimeout: limitMs,
  retry: { ...backoff, maximumInterval: '30m', nonRetryableErrorTypes: nonRetryable },
});

export type ActName = keyof OrderActivities;
export type Args<K extends ActName> = Parameters<OrderActivities[K]>;
export type Ret<K extends ActName> = Awaited<ReturnType<OrderActivities[K]>>;

/**
 * How long a scheduled activity may wait for a worker to take it before the saga sends it again. A
 * task the server lost or delayed (around a restart of the server or its database) is then sent anew
 * within this bound, whatever the sweeper's stall bound is. A worker that exists takes a task within
 * milliseconds; a busy serial lane's queue is the longest wait it meets, and a resent task keeps its
 * place in the saga (same step, same idempotency key). On a build no worker polls, the timeout's
 * workflow task waits for that build too: the sweeper sees it unpolled and replaces the run.
 */
export const PICKUP_BOUND_MS = 60_000;
/**
 * How many times a task is sent again; the last send waits without a schedule-to-start bound, so a run
 * whose tasks nobody takes for good stops adding events (and the sweeper sees it stalled).
 */
export const MAX_RESENDS = 5;

/**
 * Runs one activity with a readable summary, shown for the activity in the Web UI. Unless the options
 * set their own schedule-to-start timeout (which then means "dropped unsent", as for a charge), a task
 * no worker took within PICKUP_BOUND_MS is scheduled again (at most MAX_RESENDS times), within the
 * step's schedule-to-close bound when it has one: that bound holds across the resends.
 */
export function act<K extends ActName>(
  opts: ActivityOptions,
  name: K,
  summary: string,
  ...args: Args<K>
): Promise<Ret<K>> {
  const fn = proxyActivities<OrderActivities>(opts)[name] as ActivityFunctionWithOptions<OrderActivities[K]>;
  if (opts.scheduleToStartTimeout !== undefined)
    return stopIfSettled(fn.executeWithOptions({ ...opts, summary }, args));
  return stopIfSettled(
    resendUntilTaken(opts, (o, resent) =>
      fn.executeWithOptions({ ...o, summary: resent ? `${summary} (sent again: no worker took it)` : summary }, args),
    ),
  );
}

/** Calls `send` with a schedule-to-start bound, again after each time no worker took the task in time. */
async function resendUntilTaken<T>(
  opts: ActivityOptions,
  send: (o: ActivityOptions, resent: number) => Promise<T>,
): Promise<T> {
  // eslint-disable-next-line no-restricted-properties -- the step's own bound, on the workflow's recorded clock
  const started = Date.now();
  const closeBy =
    opts.scheduleToCloseTimeout === undefined ? undefined : started + msToNumber(opts.scheduleToCloseTimeout);
  for (let resent = 0; ; resent++) {
    // eslint-disable-next-line no-restricted-properties -- as above
    const left = closeBy === undefined ? undefined : Math.max(1_000, closeBy - Date.now());
    const last = resent >= MAX_RESENDS;
    const o: ActivityOptions = {
      ...opts,
      ...(last
        ? {}
        : { scheduleToStartTimeout: left === undefined ? PICKUP_BOUND_MS : Math.min(PICKUP_BOUND_MS, left) }),
      ...(left === undefined ? {} : { scheduleToCloseTimeout: left }),
    };
    try {
      return await send(o, resent);
    } catch (err) {
      const lastChance = left !== undefined && left <= PICKUP_BOUND_MS;
      if (!notTaken(err) || lastChance || last) throw err;
      log.warn('no worker took the activity within its bound; sending it again', {
        activity: err instanceof ActivityFailure ? err.activityType : undefined,
        resent: resent + 1,
      });
    }
  }
}

/** The activity timed out before any worker took it. */
const notTaken = (err: unknown): boolean =>
  err instanceof ActivityFailure &&
  err.cause instanceof TimeoutFailure &&
  err.cause.timeoutType === TimeoutType.SCHEDULE_TO_START;

/**
 * A short step without a compensation, run first as one local activity attempt: it runs inside the
 * workflow task, with no round trip to the server (a marker in the history). If that attempt fails
 * with anything a retry could change, the regular activity takes over with the step's whole policy,
 * so a step that keeps failing is a pending activity in the Web UI, with its attempts and last failure.
 */
export async function actLocalFirst<K extends ActName>(
  opts: ActivityOptions,
  /** Called before the regular activity takes over (a round trip to the server). */
  beforeRoundTrip: () => void,
  name: K,
  summary: string,
  ...args: Args<K>
): Promise<Ret<K>> {
  try {
    return await actLocal(opts, name, summary, ...args);
  } catch (err) {
    if (isFinalFailure(err, opts)) throw err; // OrderSettled is non-retryable: final
    log.warn('local attempt failed; the activity retries it', { activity: name, error: failureMessage(err) });
    beforeRoundTrip();
    return act(opts, name, `${summary} (retry after a failed local attempt)`, ...args);
  }
}

/**
 * One local activity attempt and nothing more, inside the workflow task (a marker in the history, no
 * round trip): within the step's own limits (a forward step's retry window, for one). The caller
 * decides what a failure means: a regular activity takes over (`actLocalFirst`), or, for a money
 * request, an inquiry by its key.
 */
export async function actLocal<K extends ActName>(
  opts: ActivityOptions,
  name: K,
  summary: string,
  ...args: Args<K>
): Promise<Ret<K>> {
  const local: LocalActivityOptions = {
    startToCloseTimeout: opts.startToCloseTimeout,
    ...(opts.scheduleToCloseTimeout !== undefined ? { scheduleToCloseTimeout: opts.scheduleToCloseTimeout } : {}),
    retry: { maximumAttempts: 1 },
  };
  const fn = proxyLocalActivities<OrderActivities>(local)[name] as LocalActivityFunctionWithOptions<OrderActivities[K]>;
  try {
    return await fn.executeWithOptions({ ...local, summary }, args);
  } catch (err) {
    throw endedElsewhereOr(err);
  }
}

/** The call's answer; a refusal that says the order is settled elsewhere becomes OrderSettled. */
async function stopIfSettled<T>(call: Promise<T>): Promise<T> {
  try {
    return await call;
  } catch (err) {
    throw endedElsewhereOr(err);
  }
}

/** OrderSettled when the row says the order is settled (terminal, owned by another run: this run must stop), else `err`. */
function endedElsewhereOr(err: unknown): unknown {
  const status = endedElsewhereStatus(err);
  return status ? endedElsewhere(status) : err;
}

/** Each ApplicationFailure in the error's cause chain, outermost first. */
function* applicationFailures(err: unknown): Generator<ApplicationFailure> {
  for (let e: unknown = err; e instanceof Error; e = (e as { cause?: unknown }).cause) {
    if (e instanceof ApplicationFailure) yield e;
  }
}

/** The first ApplicationFailure in the cause chain that `test` accepts. */
export function findFailure(err: unknown, test: (f: ApplicationFailure) => boolean): ApplicationFailure | undefined {
  for (const f of applicationFailures(err)) if (test(f)) return f;
  return undefined;
}

/** A failure no retry of the same activity can change: non-retryable, or of a type its policy does not retry. */
function isFinalFailure(err: unknown, opts: ActivityOptions): boolean {
  return !!findFailure(
    err,
    (f) => f.nonRetryable || !!(f.type && opts.retry?.nonRetryableErrorTypes?.includes(f.type)),
  );
}

/** The status named by an OrderStateConflict (or OrderSettled) anywhere in the cause chain. */
export function conflictStatus(err: unknown): OrderStatus | undefined {
  const f = findFailure(
    err,
    (f) => f.type === ErrorTypes.OrderStateConflict || f.type === SagaFailureTypes.OrderSettled,
  );
  return f && (((f.details?.[0] ?? {}) as { status?: OrderStatus }).status ?? undefined);
}

/** What a refused write says of the row (OrderStateConflict's details). */
interface ConflictDetails {
  status?: OrderStatus;
  attentionFrom?: OrderStatus | null;
  attentionStep?: string | null;
  cancel?: RecordedCancel | null;
  resolve?: PendingResolve | null;
}

/** The details of the first OrderStateConflict in the cause chain. */
function stateConflictDetails(err: unknown): ConflictDetails | undefined {
  const f = findFailure(err, (f) => f.type === ErrorTypes.OrderStateConflict);
  if (!f) return undefined;
  const details: ConflictDetails = f.details?.[0] ?? {};
  return details;
}

/**
 * The row's status when a refusal says the order is past the pivot: SHIPPED or COMPLETED, or
 * NEEDS_ATTENTION escalated at or after the pivot (from CHARGED, AUTHORIZED, SHIPPED or CAPTURED). Undefined otherwise.
 */
export function pastPivotStatus(err: unknown): OrderStatus | undefined {
  const d = stateConflictDetails(err);
  if (!d?.status) return undefined;
  if (isPastPivot(d.status)) return d.status;
  if (d.status === 'NEEDS_ATTENTION' && escalatedForward(d.attentionFrom)) return d.status;
  return undefined;
}

/** The cancel recorded on the order row, as a refused write names it (OrderStateConflict's details). */
export function recordedCancelIn(err: unknown): RecordedCancel | undefined {
  return stateConflictDetails(err)?.cancel ?? undefined;
}

/** The escalation a refused write found the row in: where it came from, what about, and a resolve still to apply. */
export function escalationIn(err: unknown): EscalationLeft {
  const d = stateConflictDetails(err);
  return {
    ...(d?.attentionFrom ? { from: d.attentionFrom } : {}),
    ...(d?.attentionStep ? { step: d.attentionStep } : {}),
    ...(d?.resolve ? { resolve: d.resolve } : {}),
  };
}

/** An escalation another run of the order made and left (reset, terminated, or its history lost). */
export interface EscalationLeft {
  /** The status the row escalated from. */
  from?: OrderStatus;
  /** What it is about: the compensation that failed, the shipment, the confirmation. */
  step?: string;
  /** A resolve recorded for it and not yet applied. */
  resolve?: PendingResolve;
}

/** The order is terminal and this run does not own it: another run ended it. Stop, change nothing. */
export const endedElsewhere = (status: OrderStatus): ApplicationFailure =>
  ApplicationFailure.create({
    type: SagaFailureTypes.OrderSettled,
    message: `the order is already ${status}, ended by another run`,
    nonRetryable: true,
    details: [{ status }],
  });

export function endedElsewhereStatus(err: unknown): OrderStatus | undefined {
  const status = conflictStatus(err);
  return status && isTerminal(status) ? status : undefined;
}

/** The first ApplicationFailure type in the cause chain. */
export function failureType(err: unknown): string | undefined {
  return findFailure(err, (f) => !!f.type)?.type ?? undefined;
}

/** The innermost ApplicationFailure's `type: message`, or the error's message. */
export function failureMessage(err: unknown): string {
  let message = err instanceof Error ? err.message : String(err);
  for (const f of applicationFailures(err)) message = f.type ? `${f.type}: ${f.message}` : f.message;
  return message;
}

/** "90 s", "15 min", "24 h": durations as a timer's summary says them. */
export const duration = (ms: number): string =>
  ms < 1_000
    ? `${ms} ms`
    : ms < 120_000
      ? `${Math.round(ms / 1000)} s`
      : ms < 2 * 3_600_000
        ? `${Math.round(ms / 60_000)} min`
        : `${Math.round(ms / 3_600_000)} h`;
