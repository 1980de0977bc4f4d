import { ApplicationFailureCategory } from '@temporalio/common';
import {
  allHandlersFinished,
  ApplicationFailure,
  CancellationScope,
  CancelledFailure,
  condition,
  isCancellation,
  log,
  patched,
  proxyActivities,
  proxyLocalActivities,
  setHandler,
  setCurrentDetails,
  sleep,
  upsertSearchAttributes,
  workflowInfo,
  type ActivityFunctionWithOptions,
  type ActivityOptions,
  type LocalActivityFunctionWithOptions,
  type LocalActivityOptions,
} from '@temporalio/workflow';
import type { OrderActivities } from '../activities';
import { laneFor, laneTaskQueue, MAX_LANES } from '../domain/lanes';
import {
  chargeKeyFor,
  formatMoney,
  OrderValidationError,
  orderTotalCents,
  parseOrder,
  TERMINAL_STATUSES,
  workflowIdFor,
  type OrderInput,
  type OrderResult,
  type OrderStatus,
} from '../domain/order';
import { currentDetails } from './details';
import { acceptedUpdate, cancelUpdate, resolveUpdate, stateQuery, type Acceptance, type ResolveAction, type SagaState } from './messages';
import { CustomerIdKey, NeedsAttentionKey, OrderStatusKey, TotalCentsKey } from './search-attributes';

/** Knobs of one saga; every one has a production default. Durations are in milliseconds. */
export interface SagaConfig {
  /** Global saga deadline, an in-workflow timer. */
  deadlineMs: number;
  /** How long an UNKNOWN charge is inquired about before it escalates to NEEDS_ATTENTION. */
  unknownEscalationMs: number;
  /** First and largest gap between inquiries of an UNKNOWN charge (doubling in between). */
  inquiryBaseMs: number;
  inquiryMaxMs: number;
  /** How long a step after the pivot retries before it escalates (it never compensates). */
  forwardRetryLimitMs: number;
  /** How many serial inventory lanes the worker runs (SKUs hash over them). */
  inventoryLanes: number;
  /** The longest wait between two tries of a compensation (they retry until they succeed). */
  compensationRetryMaxMs: number;
}

const HOUR = 3_600_000;
export const DEFAULT_SAGA_CONFIG: SagaConfig = {
  deadlineMs: 24 * HOUR,
  unknownEscalationMs: 6 * HOUR,
  inquiryBaseMs: 5_000,
  inquiryMaxMs: 15 * 60_000,
  forwardRetryLimitMs: 3 * 24 * HOUR,
  inventoryLanes: 2,
  compensationRetryMaxMs: 5 * 60_000,
};

/** Checks the `config` argument as strictly as the order: known keys, whole positive numbers. */
export function parseSagaConfig(raw: unknown): SagaConfig {
  if (raw === undefined || raw === null) return { ...DEFAULT_SAGA_CONFIG };
  if (typeof raw !== 'object' || Array.isArray(raw)) throw new OrderValidationError('config', 'must be an object');
  const cfg: SagaConfig = { ...DEFAULT_SAGA_CONFIG };
  for (const [key, value] of Object.entries(raw as Record<string, unknown>)) {
    if (!(key in DEFAULT_SAGA_CONFIG)) throw new OrderValidationError(`config.${key}`, 'unknown field');
    const max = key === 'inventoryLanes' ? MAX_LANES : 365 * 24 * HOUR;
    if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > max) {
      throw new OrderValidationError(`config.${key}`, `must be a whole number from 1 to ${max}`);
    }
    cfg[key as keyof SagaConfig] = value;
  }
  if (cfg.inquiryMaxMs < cfg.inquiryBaseMs) throw new OrderValidationError('config.inquiryMaxMs', 'must be at least config.inquiryBaseMs');
  return cfg;
}

// ---- Named activity option groups: every activity has a timeout and an explicit retry policy ----
const NON_RETRYABLE = [
  'InvalidOrder', 'InsufficientStock', 'ContentionExhausted', 'PurchaseLimitExceeded',
  'PaymentDeclined', 'PaymentRejected', 'RefundRejected', 'ShipmentRejected',
  'OrderStateConflict', 'OrderMismatch', 'ChargeRefunded', 'ChargeProcessing',
];
/** Answers about the charge that no retry or inquiry can change. */
const FINAL_CHARGE_ANSWERS = ['PaymentDeclined', 'PaymentRejected', 'OrderStateConflict', 'OrderMismatch', 'ChargeRefunded', 'OrderSettled'];

/** Patch IDs. Old histories replay the code they ran; new runs take the order row as their lock. */
const ORDER_ROW_LOCK = 'order-row-lock';
const RESOLVE_ASKS_PROVIDER = 'resolve-asks-provider';
/** New runs end a FAILED or CANCELLED order as a failed (or, for a Temporal cancellation, canceled) workflow. */
const FAILED_OUTCOMES = 'failed-outcomes';
/** New runs cancel their deadline timer when they end. */
const DEADLINE_TIMER_ENDS = 'deadline-timer-ends';
/**
 * New runs take fewer round trips to the server: the charge moves the row to CHARGED itself, and the
 * short database steps without a compensation (createOrder, createShipment, sendConfirmation) run
 * first as a local activity, inside the workflow task. Reserve and charge stay regular (see README).
 */
const FEWER_ROUND_TRIPS = 'fewer-round-trips';

const orderOpts: ActivityOptions = {
  startToCloseTimeout: '10s',
  retry: { initialInterval: '1s', backoffCoefficient: 2, maximumInterval: '30s', maximumAttempts: 10, nonRetryableErrorTypes: NON_RETRYABLE },
};
const inventoryOpts: ActivityOptions = {
  startToCloseTimeout: '30s',
  heartbeatTimeout: '10s',
  retry: { initialInterval: '1s', backoffCoefficient: 2, maximumInterval: '30s', maximumAttempts: 5, nonRetryableErrorTypes: NON_RETRYABLE },
};
const paymentOpts: ActivityOptions = {
  startToCloseTimeout: '15s',
  retry: { initialInterval: '1s', backoffCoefficient: 2, maximumInterval: '10s', maximumAttempts: 4, nonRetryableErrorTypes: NON_RETRYABLE },
};
/**
 * One charge request per attempt, never retried by the server: the saga decides every request itself,
 * so after a cancel or the deadline no new request goes out (it only learns the fate of the last one).
 */
const chargeOnceOpts: ActivityOptions = {
  // A request not picked up soon is dropped unsent (then inquired): one scheduled before a cancel
  // cannot go out long after it, when no worker was there to take it.
  scheduleToStartTimeout: '10s',
  startToCloseTimeout: '15s',
  retry: { maximumAttempts: 1 },
};
/** Rounds of charge request + inquiry before the saga gives up (backward) on a provider that never took it. */
const CHARGE_ROUNDS = 5;
const inquiryOpts: ActivityOptions = {
  startToCloseTimeout: '10s',
  retry: { initialInterval: '1s', backoffCoefficient: 2, maximumInterval: '5s', maximumAttempts: 3, nonRetryableErrorTypes: NON_RETRYABLE },
};
/** The serial lane: a task waits its turn as long as it takes (never dropped); each try is bounded. */
const laneOpts: ActivityOptions = {
  startToCloseTimeout: '30s',
  heartbeatTimeout: '10s',
  retry: { initialInterval: '1s', backoffCoefficient: 2, maximumInterval: '30s', nonRetryableErrorTypes: NON_RETRYABLE },
};
/** Compensations retry until they succeed; only a non-retryable failure stops them. */
const compensationOpts = (maxIntervalMs: number): ActivityOptions => ({
  startToCloseTimeout: '15s',
  retry: { initialInterval: '1s', backoffCoefficient: 2, maximumInterval: maxIntervalMs, nonRetryableErrorTypes: NON_RETRYABLE },
});
/** Status bookkeeping retries without limit: it must not be the reason a saga stops. */
const statusOpts: ActivityOptions = {
  startToCloseTimeout: '10s',
  retry: { initialInterval: '1s', backoffCoefficient: 2, maximumInterval: '1m' },
};
const forwardOpts = (limitMs: number): ActivityOptions => ({
  startToCloseTimeout: '30s',
  scheduleToCloseTimeout: limitMs,
  retry: { initialInterval: '1s', backoffCoefficient: 2, maximumInterval: '30m', nonRetryableErrorTypes: NON_RETRYABLE },
});

type ActName = keyof OrderActivities;
type Args<K extends ActName> = Parameters<OrderActivities[K]>;
type Ret<K extends ActName> = Awaited<ReturnType<OrderActivities[K]>>;

/** Runs one activity with a readable summary, shown for the activity in the Web UI. */
function act<K extends ActName>(opts: ActivityOptions, name: K, summary: string, ...args: Args<K>): Promise<Ret<K>> {
  const fn = proxyActivities<OrderActivities>(opts)[name] as ActivityFunctionWithOptions<OrderActivities[K]>;
  return stopIfSettled(fn.executeWithOptions({ ...opts, summary }, args) as Promise<Ret<K>>);
}

/**
 * A short step without a compensation, run first as one local activity attempt: it runs inside the
 * workflow task, with no round trip to the server (a marker in the history). If that attempt fails
 * with anything a retry could change, the regular activity takes over with the step's whole policy,
 * so a step that keeps failing is a pending activity in the Web UI, with its attempts and last failure.
 */
async function actLocalFirst<K extends ActName>(opts: ActivityOptions, name: K, summary: string, ...args: Args<K>): Promise<Ret<K>> {
  const local: LocalActivityOptions = { startToCloseTimeout: opts.startToCloseTimeout, retry: { maximumAttempts: 1 } };
  const fn = proxyLocalActivities<OrderActivities>(local)[name] as LocalActivityFunctionWithOptions<OrderActivities[K]>;
  try {
    return await stopIfSettled(fn.executeWithOptions({ ...local, summary }, args) as Promise<Ret<K>>);
  } catch (err) {
    if (isFinalFailure(err, opts)) throw err;
    log.warn('local attempt failed; the activity retries it', { activity: name, error: describe(err) });
  }
  return act(opts, name, `${summary} (retry after a failed local attempt)`, ...args);
}

/** A failure no retry of the same activity can change: non-retryable, or of a type its policy does not retry. */
function isFinalFailure(err: unknown, opts: ActivityOptions): boolean {
  for (let e: unknown = err; e instanceof Error; e = (e as { cause?: unknown }).cause) {
    if (e instanceof ApplicationFailure && (e.nonRetryable || (e.type && opts.retry?.nonRetryableErrorTypes?.includes(e.type)))) return true;
  }
  return false;
}

async function stopIfSettled<T>(call: Promise<T>): Promise<T> {
  try {
    return await call;
  } catch (err) {
    // The row says the order is settled (terminal, owned by another run): this run must stop.
    const status = settledStatus(err);
    if (status) throw settled(status);
    throw err;
  }
}

/** The status named by an OrderStateConflict (or OrderSettled) anywhere in the cause chain. */
const conflictStatus = (err: unknown): OrderStatus | undefined => {
  let e: unknown = err;
  while (e instanceof Error) {
    if (e instanceof ApplicationFailure && (e.type === 'OrderStateConflict' || e.type === 'OrderSettled')) {
      return ((e.details?.[0] ?? {}) as { status?: OrderStatus }).status ?? undefined;
    }
    e = (e as { cause?: unknown }).cause;
  }
  return undefined;
};

/** The order is terminal and this run does not own it: another run settled it. Stop, change nothing. */
const settled = (status: OrderStatus): ApplicationFailure =>
  ApplicationFailure.create({ type: 'OrderSettled', message: `the order is already ${status}, settled by another run`, nonRetryable: true, details: [{ status }] });
const settledStatus = (err: unknown): OrderStatus | undefined => {
  const status = conflictStatus(err);
  return status && isFinal(status) ? status : undefined;
};

const failureType = (err: unknown): string | undefined => {
  let e: unknown = err;
  while (e instanceof Error) {
    if (e instanceof ApplicationFailure && e.type) return e.type;
    e = (e as { cause?: unknown }).cause;
  }
  return undefined;
};

const describe = (err: unknown): string => {
  let e: unknown = err;
  let message = err instanceof Error ? err.message : String(err);
  while (e instanceof Error) {
    if (e instanceof ApplicationFailure) message = e.type ? `${e.type}: ${e.message}` : e.message;
    e = (e as { cause?: unknown }).cause;
  }
  return message;
};

/** The order saga. Workflow ID `order:<orderId>`; its history is the saga log. */
export async function orderSaga(input: OrderInput, config: Partial<SagaConfig> = {}): Promise<OrderResult> {
  let cfg: SagaConfig;
  let order: OrderInput;
  let locked: boolean;
  try {
    order = parseOrder(input); // the workflow boundary checks again what the client checked
    // New runs: the order row is the lock (guarded transitions, one owner, money stops on cancel).
    locked = patched(ORDER_ROW_LOCK);
    // Input from outside the client is checked too (old runs keep the config they ran with).
    cfg = locked ? parseSagaConfig(config) : { ...DEFAULT_SAGA_CONFIG, ...config };
  } catch (err) {
    if (err instanceof OrderValidationError) {
      throw ApplicationFailure.create({ type: 'InvalidOrder', message: err.message, nonRetryable: true, details: [{ field: err.field }] });
    }
    throw err;
  }
  const orderId = order.orderId;
  if (locked && workflowInfo().workflowId !== workflowIdFor(orderId)) {
    throw ApplicationFailure.create({
      type: 'InvalidOrder',
      message: `workflowId: an order saga runs as ${workflowIdFor(orderId)}, not ${workflowInfo().workflowId}; nothing was done`,
      nonRetryable: true,
      details: [{ field: 'workflowId' }],
    });
  }
  /** Fewer round trips (see FEWER_ROUND_TRIPS); older histories replay the steps they recorded. */
  const lean = locked && patched(FEWER_ROUND_TRIPS);
  const sagaStart = Date.now();

  const state: SagaState = {
    orderId,
    status: 'PENDING',
    step: 'start',
    stepsDone: [],
    compensations: [],
    compensationsRun: [],
    unknowns: [],
    attempts: {},
    pivotPassed: false,
  };
  const compensations: { name: string; run: () => Promise<unknown> }[] = [];
  let pivotStarted = false;
  /** Backward recovery has begun, for this reason: the order will end FAILED or CANCELLED whatever comes. */
  let unwinding: string | undefined;
  let cancelReason: string | undefined;
  let overdue = false;
  let resolution: { action: ResolveAction; note?: string } | undefined;
  let resolving = false;
  const preScope = new CancellationScope();

  setHandler(stateQuery, () => state);
  let settledElsewhere = false;
  setHandler(acceptedUpdate, async (): Promise<Acceptance> => {
    // Reserved by this run, or found already further along (a run that took over a charged order).
    const reserved = (): boolean => state.stepsDone.includes('reserveInventory') || pivotStarted || ['CHARGED', 'SHIPPED', 'COMPLETED'].includes(state.status);
    // Waits are shielded from a Temporal cancellation: the saga's own end answers them.
    await CancellationScope.nonCancellable(() => condition(() => reserved() || unwinding !== undefined || settledElsewhere || isFinal(state.status)));
    if (settledElsewhere) return { orderId, accepted: false, status: 'ALREADY_SETTLED', reason: state.reason };
    if (reserved()) return { orderId, accepted: true, status: state.status };
    return { orderId, accepted: false, status: state.status, reason: unwinding ?? state.reason };
  });
  /** The run's current details in the Web UI (user metadata), kept up to date with `state`. */
  const refresh = (): void => setCurrentDetails(currentDetails(order, state));
  setHandler(
    cancelUpdate,
    async (reason) => {
      cancelReason = reason || 'cancelled';
      preScope.cancel();
      await CancellationScope.nonCancellable(() => condition(() => isFinal(state.status) || state.status === 'NEEDS_ATTENTION' || settledElsewhere));
      return state;
    },
    {
      validator: (reason) => {
        if (typeof reason !== 'string' || reason.length > 500) throw new Error('reason must be a string of at most 500 characters');
        if (pivotStarted) throw new Error(`order ${orderId} has reached the shipment (the pivot); it can only move forward`);
        if (isFinal(state.status)) throw new Error(`order ${orderId} is already ${state.status}`);
        if (cancelReason !== undefined) throw new Error(`order ${orderId} is already being cancelled`);
        if (unwinding !== undefined) throw new Error(`order ${orderId} is already being compensated (${unwinding}); there is nothing left to cancel`);
      },
    },
  );
  setHandler(
    resolveUpdate,
    async ({ action, note }) => {
      resolving = true;
      try {
        // An operator's word on the charge is checked against the provider's ledger first.
        if ((action === 'charge-succeeded' || action === 'charge-failed') && patched(RESOLVE_ASKS_PROVIDER)) {
          await checkResolveWithProvider(action);
        }
        resolution = { action, note };
        await CancellationScope.nonCancellable(() => condition(() => resolution === undefined || settledElsewhere));
        return state;
      } finally {
        resolving = false;
      }
    },
    {
      validator: ({ action, note }) => {
        if (note !== undefined && (typeof note !== 'string' || note.length > 500)) throw new Error('note must be a string of at most 500 characters');
        if (resolution !== undefined || resolving) throw new Error('another resolve is being applied');
        const allowed: Record<NonNullable<SagaState['awaiting']>, ResolveAction[]> = {
          'charge-outcome': ['charge-succeeded', 'charge-failed'],
          compensation: ['retry', 'mark-resolved'],
          'forward-step': ['retry', 'mark-resolved'],
        };
        if (!state.awaiting) throw new Error(`order ${orderId} is ${state.status}; there is nothing to resolve`);
        if (!allowed[state.awaiting].includes(action)) {
          throw new Error(`action must be one of ${allowed[state.awaiting].join(', ')} while awaiting ${state.awaiting}`);
        }
      },
    },
  );

  /** Refuses the resolve (the Update fails, the saga waits on) unless the provider's ledger agrees. */
  async function checkResolveWithProvider(action: 'charge-succeeded' | 'charge-failed'): Promise<void> {
    const key = chargeKeyFor(orderId);
    let answer;
    try {
      answer = await act(inquiryOpts, 'inquireCharge', `resolve ${action}: ask the provider about ${key}`, { orderId });
    } catch (err) {
      throw ApplicationFailure.create({ type: 'ResolveRefused', message: `cannot confirm ${action} with the provider: ${describe(err)}`, nonRetryable: true });
    }
    const refunded = (answer.refundedCents ?? 0) > 0;
    const says = `the provider says charge ${key} is ${answer.status}${refunded ? ` and refunded (${answer.refundedCents} cents)` : ''}`;
    const paid = answer.status === 'succeeded' && !refunded;
    if (action === 'charge-succeeded' && !paid) throw ApplicationFailure.create({ type: 'ResolveRefused', message: `${says}; not charge-succeeded`, nonRetryable: true });
    if (action === 'charge-failed' && (paid || answer.status === 'processing')) {
      const next = paid ? 'resolve charge-succeeded' : 'wait until it decides, then resolve again';
      throw ApplicationFailure.create({ type: 'ResolveRefused', message: `${says}; not charge-failed (${next})`, nonRetryable: true });
    }
  }

  /** The saga's own view and the Web UI's search attributes; no database write. */
  function mirror(status: OrderStatus, reason?: string): void {
    state.status = status;
    if (reason !== undefined) state.reason = reason;
    refresh();
    upsertSearchAttributes([
      { key: OrderStatusKey, value: status },
      { key: NeedsAttentionKey, value: status === 'NEEDS_ATTENTION' },
    ]);
  }

  /** A status-only step: a guarded transition of the order row (refused if the row does not allow it). */
  async function setStatus(status: OrderStatus, reason?: string): Promise<void> {
    if (!locked) mirror(status, reason); // old runs: the command order they recorded
    const write = reason ?? state.reason;
    await CancellationScope.nonCancellable(() =>
      act(statusOpts, 'setOrderStatus', `order ${orderId} → ${status}`, { orderId, status, reason: write }),
    );
    if (locked) mirror(status, reason); // only once the row took it
  }

  async function step<T>(name: string, fn: () => Promise<T>): Promise<T> {
    // Steps before the pivot run their activities non-cancellably; a cancel takes effect between steps.
    // Under the lock createOrder runs even then: the run must own the row to settle it.
    if (!pivotStarted && preScope.consideredCancelled && !(locked && name === 'createOrder')) throw new CancelledFailure(cancelReason ?? 'cancelled');
    state.step = name;
    state.attempts[name] = (state.attempts[name] ?? 0) + 1;
    refresh();
    const out = await fn();
    state.stepsDone.push(name);
    refresh();
    return out;
  }

  /** Escalates to NEEDS_ATTENTION and waits for an operator's resolve. Returns the action. */
  async function escalate(awaiting: NonNullable<SagaState['awaiting']>, reason: string): Promise<ResolveAction> {
    const previous = state.status;
    state.awaiting = awaiting;
    log.error('ALERT saga needs attention', { orderId, reason, awaiting });
    await setStatus('NEEDS_ATTENTION', reason);
    await condition(() => resolution !== undefined);
    const { action, note } = resolution!;
    log.warn('operator resolved', { orderId, action, note });
    state.awaiting = undefined;
    state.reason = `${reason} (operator: ${action}${note ? `, ${note}` : ''})`;
    resolution = undefined;
    refresh();
    if (previous !== 'NEEDS_ATTENTION') {
      if (locked) {
        // Back to where the row stood when it escalated, which may be further than this run knows.
        const now = await CancellationScope.nonCancellable(() =>
          act(statusOpts, 'setOrderStatus', `order ${orderId} → back from NEEDS_ATTENTION`, { orderId, status: previous, reason: state.reason, resume: true }),
        );
        mirror(now ?? previous);
      } else {
        await setStatus(previous);
      }
    }
    return action;
  }

  /** When the charge's outcome is unknown: ask the provider by key until it knows, on durable timers. */
  async function inquireUntilKnown(): Promise<'succeeded' | 'failed' | 'not_found' | 'refunded'> {
    state.unknowns = ['charge'];
    refresh();
    const started = Date.now();
    for (let n = 0; ; n++) {
      try {
        const r = await act(inquiryOpts, 'inquireCharge', `inquire charge ${orderId}:charge`, { orderId });
        state.attempts.inquiry = n + 1;
        if (r.status !== 'processing') {
          state.unknowns = [];
          // A charge the provider has refunded does not count as paid.
          return r.status === 'succeeded' && (r.refundedCents ?? 0) > 0 ? 'refunded' : r.status;
        }
      } catch (err) {
        log.warn('inquiry failed; charge outcome unknown', { orderId, error: describe(err) });
      }
      if (state.status !== 'UNKNOWN_PAYMENT') await setStatus('UNKNOWN_PAYMENT');
      const wait = Math.min(cfg.inquiryMaxMs, cfg.inquiryBaseMs * 2 ** n);
      if (overdue || Date.now() - started + wait > cfg.unknownEscalationMs) {
        const waited = Date.now() - started;
        const why = overdue ? 'saga deadline passed' : `no answer after ${duration(waited)}`;
        // Never refund blindly: a person settles it (after checking the provider's dashboard).
        const action = await escalate('charge-outcome', `charge ${orderId}:charge outcome unknown (${why})`);
        state.unknowns = [];
        return action === 'charge-succeeded' ? 'succeeded' : 'failed';
      }
      // A durable timer (the caller runs this loop non-cancellably: an unknown charge is settled first).
      await sleep(wait, { summary: `charge outcome unknown; next inquiry in ${duration(wait)}` });
    }
  }

  /** After a cancel or the deadline, no new charge request goes out. */
  const stopCharging = (): boolean => cancelReason !== undefined || overdue || preScope.consideredCancelled;
  const stopReason = (): string => cancelReason ?? (overdue ? 'saga deadline passed' : 'cancelled by a Temporal cancellation request');

  /**
   * The charge under the order lock: every request is the saga's own decision (the activity is never
   * retried by the server). A timeout or 5xx is followed by an inquiry; only `not_found` (nothing
   * charged) allows another request, after a pause, and only while no cancel or deadline has come.
   */
  async function chargeLocked(): Promise<'row-charged' | 'charged'> {
    const request = { orderId, amountCents: orderTotalCents(order), currency: order.currency, paymentMethod: order.paymentMethod, ...(lean ? { markCharged: true } : {}) };
    for (let round = 1; ; round++) {
      if (stopCharging()) throw new CancelledFailure(stopReason());
      state.attempts.charge = round;
      try {
        // Not cancellable: a cancel waits for this request's answer (it may already be at the provider).
        const r = await CancellationScope.nonCancellable(() =>
          act(chargeOnceOpts, 'chargePayment', `charge ${formatMoney(request.amountCents, order.currency)} (key ${orderId}:charge, request ${round})`, request),
        );
        return r.status === 'CHARGED' ? 'row-charged' : 'charged';
      } catch (err) {
        if (FINAL_CHARGE_ANSWERS.includes(failureType(err) ?? '')) throw err;
        log.warn('charge timed out or failed; inquiring before deciding', { orderId, error: describe(err) });
      }
      const verdict = await CancellationScope.nonCancellable(() => inquireUntilKnown());
      if (verdict === 'succeeded') return 'charged';
      if (verdict === 'refunded') throw ApplicationFailure.create({ type: 'ChargeRefunded', message: `charge ${orderId}:charge was refunded`, nonRetryable: true });
      if (verdict === 'failed') throw ApplicationFailure.create({ type: 'PaymentDeclined', message: 'charge failed at the provider', nonRetryable: true });
      if (round >= CHARGE_ROUNDS) {
        throw ApplicationFailure.create({ type: 'PaymentUnavailable', message: `charge not taken after ${round} requests`, nonRetryable: true });
      }
      // not_found: nothing was charged. Pause, unless a cancel or the deadline comes first.
      const pauseMs = Math.min(cfg.inquiryMaxMs, 1000 * 2 ** (round - 1));
      await CancellationScope.nonCancellable(() =>
        condition(stopCharging, pauseMs, { summary: `the provider never took charge request ${round}; request ${round + 1} in ${duration(pauseMs)} unless cancelled` }),
      );
    }
  }

  /** Charges; says whether the charge activity has already moved the row to CHARGED. */
  async function charge(): Promise<'row-charged' | 'charged'> {
    if (locked) return chargeLocked();
    const request = { orderId, amountCents: orderTotalCents(order), currency: order.currency, paymentMethod: order.paymentMethod };
    for (let round = 1; ; round++) {
      state.attempts.charge = round;
      try {
        // Not cancellable: a cancel waits for the charge's answer, so the refund that follows knows it.
        await CancellationScope.nonCancellable(() =>
          act(paymentOpts, 'chargePayment', `charge ${formatMoney(request.amountCents, order.currency)} (key ${orderId}:charge)`, request),
        );
        return 'charged';
      } catch (err) {
        const type = failureType(err);
        if (type === 'PaymentDeclined' || type === 'PaymentRejected') throw err;
        log.warn('charge timed out or failed; inquiring before deciding', { orderId, error: describe(err) });
      }
      // Not cancellable either: a cancel waits until the charge's outcome is known (or escalated).
      const verdict = await CancellationScope.nonCancellable(() => inquireUntilKnown());
      if (verdict === 'succeeded') return 'charged';
      if (verdict === 'failed') throw ApplicationFailure.create({ type: 'PaymentDeclined', message: 'charge failed at the provider', nonRetryable: true });
      if (round >= 3) {
        throw ApplicationFailure.create({ type: 'PaymentUnavailable', message: `charge not taken after ${round} rounds`, nonRetryable: true });
      }
      // not_found: nothing was charged; retry with the same key.
    }
  }

  /**
   * Runs the compensations LIFO. If another run has already settled the order (terminal), the
   * compensations still run (each is safe when there is nothing to undo, and never acts on a shipped
   * order), then the saga stops with OrderSettled.
   */
  async function compensate(reason: string): Promise<void> {
    let settledAs: OrderStatus | undefined;
    try {
      await setStatus('COMPENSATING', reason);
    } catch (err) {
      settledAs = settledStatus(err);
      if (!settledAs) throw err;
    }
    while (compensations.length > 0) {
      const c = compensations[compensations.length - 1]!;
      state.step = `compensate:${c.name}`;
      refresh();
      try {
        await c.run();
      } catch (err) {
        settledAs = settledStatus(err);
        if (settledAs) break; // shipped and settled elsewhere: nothing here may be undone
        const action = await escalate('compensation', `compensation ${c.name} failed: ${describe(err)}`);
        if (action === 'retry') continue;
      }
      compensations.pop();
      state.compensations.pop();
      state.compensationsRun.push(c.name);
      refresh();
    }
    if (settledAs) throw settled(settledAs);
  }

  /**
   * Optimistic first; when the SKUs are too contended (the activity says so, or it ran out of CAS
   * attempts), the reservation goes to a serial lane: a task queue whose worker runs one task at a
   * time. Nothing is dropped: the lane retries until it decides (reserved or a business failure).
   */
  async function reserve(lines: string): Promise<void> {
    const req = { orderId, customerId: order.customerId, items: order.items };
    let why: string;
    try {
      const r = await act(inventoryOpts, 'reserveInventory', `reserve ${lines} (CAS)`, req);
      state.attempts.reserveCas = r.attempts;
      if (r.outcome !== 'route-to-lane') return;
      why = r.reason;
    } catch (err) {
      if (failureType(err) !== 'ContentionExhausted' || !patched('serial-lane-fallback')) throw err;
      why = describe(err);
    }
    const lane = laneFor(order.items.map((i) => i.sku), cfg.inventoryLanes);
    state.attempts.reserveLane = (state.attempts.reserveLane ?? 0) + 1;
    log.info('reservation sent to the serial lane', { orderId, lane, why });
    // A lane no worker polls must not hold the saga past its deadline.
    const untilDeadline = Math.max(1_000, cfg.deadlineMs - (Date.now() - sagaStart));
    await act(
      { ...laneOpts, taskQueue: laneTaskQueue(workflowInfo().taskQueue, lane), scheduleToStartTimeout: untilDeadline, scheduleToCloseTimeout: untilDeadline },
      'reserveInventorySerial',
      `reserve ${lines} (serial lane ${lane}: ${why})`,
      req,
    );
  }

  /**
   * Backward recovery: compensate LIFO, then end FAILED or CANCELLED with the reason. New runs then
   * fail the workflow, so the Web UI's list tells the outcome at a glance: a benign ApplicationFailure
   * whose type is the business reason (`why`) and whose details carry the result (client.ts reads it
   * back), or, for a Temporal cancellation, Canceled.
   */
  function backward(reason: string, cancelled: boolean, why: string): Promise<OrderResult> {
    log.warn('saga failed before the pivot; compensating', { orderId, reason });
    unwinding = reason;
    return CancellationScope.nonCancellable(async () => {
      await compensate(reason);
      await setStatus(cancelled ? 'CANCELLED' : 'FAILED', reason);
      await condition(allHandlersFinished);
      const result: OrderResult = { orderId, status: state.status, reason };
      if (!patched(FAILED_OUTCOMES)) return result;
      if (why === TEMPORAL_CANCELLATION) throw new CancelledFailure(reason);
      throw ApplicationFailure.create({
        type: why,
        message: `order ${orderId} ${state.status}: ${reason}`,
        nonRetryable: true,
        details: [result],
        category: ApplicationFailureCategory.BENIGN,
      });
    });
  }

  // Global deadline: an in-workflow timer, since a server-side timeout could not compensate. Shielded
  // from a Temporal cancellation; its own scope is cancelled when the saga ends (endDeadline).
  // (Older histories: without the patch, the timer runs on after the end, as they recorded it.)
  let deadlineTimer: CancellationScope | undefined;
  const timerEnds = patched(DEADLINE_TIMER_ENDS);
  void CancellationScope.nonCancellable(async () => {
    const summary = `saga deadline (${duration(cfg.deadlineMs)}): an order not shipped by then is compensated`;
    if (timerEnds) {
      deadlineTimer = new CancellationScope();
      try {
        await deadlineTimer.run(() => sleep(cfg.deadlineMs, { summary }));
      } catch (err) {
        if (isCancellation(err)) return; // the saga ended first
        throw err;
      }
    } else {
      await sleep(cfg.deadlineMs, { summary });
    }
    overdue = true;
    if (!pivotStarted && state.unknowns.length === 0 && !isFinal(state.status)) {
      log.warn('saga deadline passed before the pivot; compensating', { orderId });
      preScope.cancel();
    }
  });

  upsertSearchAttributes([
    { key: OrderStatusKey, value: 'PENDING' },
    { key: CustomerIdKey, value: order.customerId },
    { key: TotalCentsKey, value: orderTotalCents(order) },
    { key: NeedsAttentionKey, value: false },
  ]);

  /** Leaves NEEDS_ATTENTION for the status the row escalated from; returns it. */
  async function resumeRow(): Promise<OrderStatus> {
    const now = await act(statusOpts, 'setOrderStatus', `order ${orderId} → back from NEEDS_ATTENTION`, { orderId, status: state.status, resume: true });
    mirror(now ?? state.status);
    return state.status;
  }

  /**
   * A step before the pivot was refused because another run of this order (reset, or terminated and
   * started again) has moved the row on. Decides which way this run goes from where the row stands:
   * `forward` when the row is charged or shipped (no way back), else `backward`. An escalation that
   * run left is taken as the operator's retry.
   */
  async function catchUp(err: unknown): Promise<'forward' | 'backward'> {
    let status = conflictStatus(err);
    if (failureType(err) !== 'OrderStateConflict' || status === undefined) return 'backward';
    if (status === 'NEEDS_ATTENTION') status = await resumeRow();
    if (status === 'UNKNOWN_PAYMENT' && cancelReason === undefined && !overdue) {
      const verdict = await inquireUntilKnown();
      if (verdict !== 'succeeded') return 'backward';
      await setStatus('CHARGED');
      status = 'CHARGED';
    }
    const stopped = cancelReason !== undefined || overdue;
    if (status !== 'SHIPPED' && (status !== 'CHARGED' || stopped)) return 'backward';
    log.warn('order already charged or shipped by another run; carrying on forward', { orderId, status });
    mirror(status);
    return 'forward';
  }

  /** Another run settled this order: this run ends at once, with the order's status, and changes nothing more. */
  async function alreadySettled(status: OrderStatus): Promise<OrderResult> {
    log.warn('order already settled by another run; this run stops', { orderId, status });
    compensations.length = 0;
    state.compensations = [];
    state.step = 'already settled';
    settledElsewhere = true;
    state.awaiting = undefined; // nothing here is waiting for a person any more
    mirror(status, `order ${orderId} is already ${status}: settled by another run; this run stopped without effects`);
    await condition(allHandlersFinished);
    return { orderId, status: 'ALREADY_SETTLED', orderStatus: status, reason: state.reason };
  }

  try {
    return await sagaSteps();
  } catch (err) {
    const status = failureType(err) === 'OrderSettled' ? settledStatus(err) : undefined;
    if (status) return CancellationScope.nonCancellable(() => alreadySettled(status));
    throw err;
  } finally {
    // The saga has ended: its deadline timer stops, so the timeline shows it only while the saga ran.
    deadlineTimer?.cancel();
  }

  async function sagaSteps(): Promise<OrderResult> {
    const lines = order.items.map((i) => `${i.qty}×${i.sku}`).join(', ');
    const registerRefund = (): void => {
      compensations.push({
        name: 'refundPayment',
        run: () => act(compensationOpts(cfg.compensationRetryMaxMs), 'refundPayment', `compensate: refund ${orderId}:charge (key ${orderId}:charge:refund)`, { orderId }),
      });
      state.compensations.push('refundPayment');
    };

    // ---- Before the pivot: backward recovery ----------------------------------------------------
    try {
      await preScope.run(async () => {
        // Under the lock not cancellable: once sent, the row exists, so a cancel compensates it.
        const createSummary = `create order ${orderId} (PENDING)`;
        const create = () => (lean ? actLocalFirst(orderOpts, 'createOrder', createSummary, order) : act(orderOpts, 'createOrder', createSummary, order));
        const created = await step('createOrder', () => (locked ? CancellationScope.nonCancellable(create) : create()));
        if (locked && created?.outcome === 'settled') throw settled(created.status);
        if (locked && created?.outcome === 'owned') mirror(created.status); // an open order this run took over
        compensations.push({
          name: 'releaseInventory',
          run: () => act(compensationOpts(cfg.compensationRetryMaxMs), 'releaseInventory', `compensate: release ${lines}`, { orderId }),
        });
        state.compensations.push('releaseInventory');
        // Under the lock, the refund is registered before the reservation too: a run that meets an
        // order another run has moved on cannot know whether it was charged, so its backward recovery
        // always asks the provider (the refund is a no-op when nothing was charged).
        if (locked) registerRefund();
        // Not cancellable: its release must never run before a late commit of the reservation.
        await step('reserveInventory', () => CancellationScope.nonCancellable(() => reserve(lines)));
        if (locked) mirror('RESERVED'); // the reservation's own transaction moved the row
        else await setStatus('RESERVED');
        if (!locked) registerRefund();
        const charged = await step('chargePayment', charge);
        if (charged === 'row-charged') mirror('CHARGED'); // the charge activity moved the row
        else await setStatus('CHARGED');
      });
      // A cancel that arrived while a non-cancellable step ran still wins before the pivot.
      if (preScope.consideredCancelled) throw new CancelledFailure(cancelReason ?? 'cancelled');
    } catch (err) {
      if (state.stepsDone.length === 0 && (locked || failureType(err) === 'InvalidOrder')) {
        // createOrder did not succeed in this run (under the lock it runs even after a cancel and
        // cannot be cut off once sent): nothing to compensate, and the row, if any, is not this run's.
        throw err;
      }
      if (failureType(err) === 'OrderSettled' && compensations.length === 0) throw err;
      const cancelled = isCancellation(err);
      const reason = cancelled ? stopReason() : describe(err);
      const ahead = locked ? await CancellationScope.nonCancellable(() => catchUp(err)) : undefined;
      if (ahead !== 'forward') {
        const stopped = cancelled || cancelReason !== undefined;
        const why = !stopped ? (failureType(err) ?? 'SagaFailed') : cancelReason !== undefined ? 'OrderCancelled' : overdue ? 'DeadlineExceeded' : TEMPORAL_CANCELLATION;
        return backward(reason, stopped, why);
      }
    }

    // ---- The pivot -------------------------------------------------------------------------------
    pivotStarted = true;
    const forward = forwardOpts(cfg.forwardRetryLimitMs);
    /** A forward step: local first in lean runs; the regular activity retries for the forward limit. */
    const forwardAct = <K extends 'createShipment' | 'sendConfirmation'>(name: K, summary: string, ...args: Args<K>): Promise<Ret<K>> =>
      lean ? actLocalFirst(forward, name, summary, ...args) : act(forward, name, summary, ...args);
    let tracking = '';
    try {
      await CancellationScope.nonCancellable(() =>
        step('createShipment', async () => {
          let byOperator = false;
          for (;;) {
            try {
              const summary = byOperator ? `record the shipment made by hand for ${orderId} (pivot)` : `create shipment for ${orderId} (pivot)`;
              tracking = (await forwardAct('createShipment', summary, locked ? { orderId, byOperator } : { orderId })).trackingNumber;
              return;
            } catch (err) {
              if (failureType(err) === 'OrderSettled') throw err;
              // A rejection (or a row that forbids shipping) means the shipment was not created: no pivot.
              if (failureType(err) === 'ShipmentRejected') throw err;
              if (locked && failureType(err) === 'OrderStateConflict') {
                // An escalation this run did not make (its waiting run was reset or terminated): the
                // restart counts as the operator's retry, from where the row stood.
                if (conflictStatus(err) === 'NEEDS_ATTENTION' && ['CHARGED', 'SHIPPED'].includes(await resumeRow())) continue;
                throw err;
              }
              // Anything else may have shipped: never compensate, escalate.
              if ((await escalate('forward-step', `createShipment failed at the pivot: ${describe(err)}`)) === 'mark-resolved') {
                // Shipped by hand: the same bookkeeping (lines SOLD, order SHIPPED), so nothing stays HELD.
                if (!locked) return;
                byOperator = true;
              }
            }
          }
        }),
      );
    } catch (err) {
      if (failureType(err) === 'OrderSettled') throw err;
      return backward(describe(err), false, failureType(err) ?? 'SagaFailed');
    }

    // ---- After the pivot: forward recovery only --------------------------------------------------
    return CancellationScope.nonCancellable(async () => {
      state.pivotPassed = true;
      state.compensations = [];
      compensations.length = 0;
      if (locked) mirror('SHIPPED'); // the shipment's own transaction moved the row
      else await setStatus('SHIPPED');
      let confirmed = false;
      await step('sendConfirmation', async () => {
        for (;;) {
          try {
            await forwardAct('sendConfirmation', `send confirmation for ${orderId}`, { orderId, trackingNumber: tracking });
            confirmed = true;
            return;
          } catch (err) {
            if (failureType(err) === 'OrderSettled') throw err;
            if ((await escalate('forward-step', `sendConfirmation failed after the pivot: ${describe(err)}`)) === 'mark-resolved') return;
          }
        }
      });
      if (locked && confirmed) mirror('COMPLETED'); // the confirmation's own transaction completed the order
      else await setStatus('COMPLETED');
      await condition(allHandlersFinished);
      return { orderId, status: state.status, ...(state.reason ? { reason: state.reason } : {}) };
    });
  }
}

const isFinal = (status: OrderStatus): boolean => TERMINAL_STATUSES.includes(status);

/** "90 s", "15 min", "24 h": durations as a timer's summary says them. */
const duration = (ms: number): string =>
  ms < 1_000 ? `${ms} ms` : ms < 120_000 ? `${Math.round(ms / 1000)} s` : ms < 2 * 3_600_000 ? `${Math.round(ms / 60_000)} min` : `${Math.round(ms / 3_600_000)} h`;

const TEMPORAL_CANCELLATION = 'TemporalCancellation';
