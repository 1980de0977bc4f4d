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
  setHandler,
  sleep,
  upsertSearchAttributes,
  workflowInfo,
  type ActivityFunctionWithOptions,
  type ActivityOptions,
} from '@temporalio/workflow';
import type { OrderActivities } from '../activities';
import { laneFor, laneTaskQueue } from '../domain/lanes';
import {
  OrderValidationError,
  orderTotalCents,
  parseOrder,
  TERMINAL_STATUSES,
  type OrderInput,
  type OrderResult,
  type OrderStatus,
} from '../domain/order';
import { cancelUpdate, resolveUpdate, stateQuery, type ResolveAction, type SagaState } from './messages';
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
}

const HOUR = 3_600_000;
export const DEFAULT_SAGA_CONFIG: SagaConfig = {
  deadlineMs: 24 * HOUR,
  unknownEscalationMs: 6 * HOUR,
  inquiryBaseMs: 5_000,
  inquiryMaxMs: 15 * 60_000,
  forwardRetryLimitMs: 3 * 24 * HOUR,
  inventoryLanes: 2,
};

// ---- Named activity option groups: every activity has a timeout and an explicit retry policy ----
const NON_RETRYABLE = [
  'InvalidOrder', 'InsufficientStock', 'ContentionExhausted', 'PurchaseLimitExceeded',
  'PaymentDeclined', 'PaymentRejected', 'RefundRejected', 'ShipmentRejected',
];

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
const inquiryOpts: ActivityOptions = {
  startToCloseTimeout: '10s',
  retry: { initialInterval: '1s', backoffCoefficient: 2, maximumInterval: '5s', maximumAttempts: 3, nonRetryableErrorTypes: NON_RETRYABLE },
};
/** The serial lane: a task waits its turn as long as it takes (never dropped); each try is bounded. */
const laneOpts: ActivityOptions = {
  startToCloseTimeout: '30s',
  retry: { initialInterval: '1s', backoffCoefficient: 2, maximumInterval: '30s', nonRetryableErrorTypes: NON_RETRYABLE },
};
/** Compensations retry until they succeed; only a non-retryable failure stops them. */
const compensationOpts: ActivityOptions = {
  startToCloseTimeout: '15s',
  retry: { initialInterval: '1s', backoffCoefficient: 2, maximumInterval: '5m', nonRetryableErrorTypes: NON_RETRYABLE },
};
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
  return fn.executeWithOptions({ ...opts, summary }, args) as Promise<Ret<K>>;
}

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
  const cfg: SagaConfig = { ...DEFAULT_SAGA_CONFIG, ...config };
  let order: OrderInput;
  try {
    order = parseOrder(input); // the workflow boundary checks again what the client checked
  } catch (err) {
    if (err instanceof OrderValidationError) {
      throw ApplicationFailure.create({ type: 'InvalidOrder', message: err.message, nonRetryable: true, details: [{ field: err.field }] });
    }
    throw err;
  }
  const orderId = order.orderId;

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
  let cancelReason: string | undefined;
  let overdue = false;
  let resolution: { action: ResolveAction; note?: string } | undefined;
  const preScope = new CancellationScope();

  setHandler(stateQuery, () => state);
  setHandler(
    cancelUpdate,
    async (reason) => {
      cancelReason = reason || 'cancelled';
      preScope.cancel();
      await condition(() => isFinal(state.status) || state.status === 'NEEDS_ATTENTION');
      return state;
    },
    {
      validator: (reason) => {
        if (typeof reason !== 'string' || reason.length > 500) throw new Error('reason must be a string of at most 500 characters');
        if (pivotStarted) throw new Error(`order ${orderId} has reached the shipment (the pivot); it can only move forward`);
        if (isFinal(state.status)) throw new Error(`order ${orderId} is already ${state.status}`);
        if (cancelReason !== undefined) throw new Error(`order ${orderId} is already being cancelled`);
      },
    },
  );
  setHandler(
    resolveUpdate,
    async ({ action, note }) => {
      resolution = { action, note };
      await condition(() => resolution === undefined);
      return state;
    },
    {
      validator: ({ action, note }) => {
        if (note !== undefined && (typeof note !== 'string' || note.length > 500)) throw new Error('note must be a string of at most 500 characters');
        if (resolution !== undefined) throw new Error('another resolve is being applied');
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

  async function setStatus(status: OrderStatus, reason?: string): Promise<void> {
    state.status = status;
    if (reason !== undefined) state.reason = reason;
    upsertSearchAttributes([
      { key: OrderStatusKey, value: status },
      { key: NeedsAttentionKey, value: status === 'NEEDS_ATTENTION' },
    ]);
    await CancellationScope.nonCancellable(() =>
      act(statusOpts, 'setOrderStatus', `order ${orderId} → ${status}`, { orderId, status, reason: state.reason }),
    );
  }

  async function step<T>(name: string, fn: () => Promise<T>): Promise<T> {
    // Steps before the pivot run their activities non-cancellably; a cancel takes effect between steps.
    if (!pivotStarted && preScope.consideredCancelled) throw new CancelledFailure(cancelReason ?? 'cancelled');
    state.step = name;
    state.attempts[name] = (state.attempts[name] ?? 0) + 1;
    const out = await fn();
    state.stepsDone.push(name);
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
    if (previous !== 'NEEDS_ATTENTION') await setStatus(previous);
    return action;
  }

  /** When the charge's outcome is unknown: ask the provider by key until it knows, on durable timers. */
  async function inquireUntilKnown(): Promise<'succeeded' | 'failed' | 'not_found'> {
    state.unknowns = ['charge'];
    const started = Date.now();
    for (let n = 0; ; n++) {
      try {
        const r = await act(inquiryOpts, 'inquireCharge', `inquire charge ${orderId}:charge`, { orderId });
        state.attempts.inquiry = n + 1;
        if (r.status !== 'processing') {
          state.unknowns = [];
          return r.status;
        }
      } catch (err) {
        log.warn('inquiry failed; charge outcome unknown', { orderId, error: describe(err) });
      }
      if (state.status !== 'UNKNOWN_PAYMENT') await setStatus('UNKNOWN_PAYMENT');
      const wait = Math.min(cfg.inquiryMaxMs, cfg.inquiryBaseMs * 2 ** n);
      if (overdue || Date.now() - started + wait > cfg.unknownEscalationMs) {
        const why = overdue ? 'saga deadline passed' : `no answer after ${Math.round((Date.now() - started) / 60_000)} min`;
        // Never refund blindly: a person settles it (after checking the provider's dashboard).
        const action = await escalate('charge-outcome', `charge ${orderId}:charge outcome unknown (${why})`);
        state.unknowns = [];
        return action === 'charge-succeeded' ? 'succeeded' : 'failed';
      }
      // A durable timer (the caller runs this loop non-cancellably: an unknown charge is settled first).
      await sleep(wait, { summary: `charge outcome unknown; next inquiry in ${Math.round(wait / 1000)} s` });
    }
  }

  async function charge(): Promise<void> {
    const request = { orderId, amountCents: orderTotalCents(order), currency: order.currency, paymentMethod: order.paymentMethod };
    for (let round = 1; ; round++) {
      state.attempts.charge = round;
      try {
        // Not cancellable: a cancel waits for the charge's answer, so the refund that follows knows it.
        await CancellationScope.nonCancellable(() =>
          act(paymentOpts, 'chargePayment', `charge ${request.amountCents} ${order.currency} (key ${orderId}:charge)`, request),
        );
        return;
      } catch (err) {
        const type = failureType(err);
        if (type === 'PaymentDeclined' || type === 'PaymentRejected') throw err;
        log.warn('charge timed out or failed; inquiring before deciding', { orderId, error: describe(err) });
      }
      // Not cancellable either: a cancel waits until the charge's outcome is known (or escalated).
      const verdict = await CancellationScope.nonCancellable(() => inquireUntilKnown());
      if (verdict === 'succeeded') return;
      if (verdict === 'failed') throw ApplicationFailure.create({ type: 'PaymentDeclined', message: 'charge failed at the provider', nonRetryable: true });
      if (round >= 3) {
        throw ApplicationFailure.create({ type: 'PaymentUnavailable', message: `charge not taken after ${round} rounds`, nonRetryable: true });
      }
      // not_found: nothing was charged; retry with the same key.
    }
  }

  async function compensate(reason: string): Promise<void> {
    await setStatus('COMPENSATING', reason);
    while (compensations.length > 0) {
      const c = compensations[compensations.length - 1]!;
      state.step = `compensate:${c.name}`;
      try {
        await c.run();
      } catch (err) {
        const action = await escalate('compensation', `compensation ${c.name} failed: ${describe(err)}`);
        if (action === 'retry') continue;
      }
      compensations.pop();
      state.compensations.pop();
      state.compensationsRun.push(c.name);
    }
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
    await act({ ...laneOpts, taskQueue: laneTaskQueue(workflowInfo().taskQueue, lane) }, 'reserveInventorySerial', `reserve ${lines} (serial lane ${lane}: ${why})`, req);
  }

  /** Backward recovery: compensate LIFO, then end FAILED or CANCELLED with the reason. */
  function backward(reason: string, cancelled: boolean): Promise<OrderResult> {
    log.warn('saga failed before the pivot; compensating', { orderId, reason });
    return CancellationScope.nonCancellable(async () => {
      await compensate(reason);
      await setStatus(cancelled ? 'CANCELLED' : 'FAILED', reason);
      await condition(allHandlersFinished);
      return { orderId, status: state.status, reason };
    });
  }

  // Global deadline: an in-workflow timer, since a server-side timeout could not compensate.
  void CancellationScope.nonCancellable(async () => {
    await sleep(cfg.deadlineMs, { summary: 'saga deadline' });
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

  // ---- Before the pivot: backward recovery ------------------------------------------------------
  try {
    await preScope.run(async () => {
      await step('createOrder', () => act(orderOpts, 'createOrder', `create order ${orderId} (PENDING)`, order));
      const lines = order.items.map((i) => `${i.qty}×${i.sku}`).join(', ');
      compensations.push({
        name: 'releaseInventory',
        run: () => act(compensationOpts, 'releaseInventory', `compensate: release ${lines}`, { orderId }),
      });
      state.compensations.push('releaseInventory');
      // Not cancellable: its release must never run before a late commit of the reservation.
      await step('reserveInventory', () => CancellationScope.nonCancellable(() => reserve(lines)));
      await setStatus('RESERVED');
      compensations.push({
        name: 'refundPayment',
        run: () => act(compensationOpts, 'refundPayment', `compensate: refund ${orderId}:charge (key ${orderId}:charge:refund)`, { orderId }),
      });
      state.compensations.push('refundPayment');
      await step('chargePayment', charge);
      await setStatus('CHARGED');
    });
    // A cancel that arrived while a non-cancellable step ran still wins before the pivot.
    if (preScope.consideredCancelled) throw new CancelledFailure(cancelReason ?? 'cancelled');
  } catch (err) {
    if (failureType(err) === 'InvalidOrder' && state.stepsDone.length === 0) {
      // Nothing was written: no order row, nothing to compensate.
      throw err;
    }
    const cancelled = isCancellation(err);
    const reason = cancelled ? (cancelReason ?? (overdue ? 'saga deadline passed' : 'cancelled by a Temporal cancellation request')) : describe(err);
    return backward(reason, cancelled || cancelReason !== undefined);
  }

  // ---- The pivot ---------------------------------------------------------------------------------
  pivotStarted = true;
  const forward = forwardOpts(cfg.forwardRetryLimitMs);
  let tracking = '';
  try {
    await CancellationScope.nonCancellable(() =>
      step('createShipment', async () => {
        for (;;) {
          try {
            tracking = (await act(forward, 'createShipment', `create shipment for ${orderId} (pivot)`, { orderId })).trackingNumber;
            return;
          } catch (err) {
            // A rejection means the shipment was not created: the pivot did not happen.
            if (failureType(err) === 'ShipmentRejected') throw err;
            // Anything else may have shipped: never compensate, escalate.
            if ((await escalate('forward-step', `createShipment failed at the pivot: ${describe(err)}`)) === 'mark-resolved') return;
          }
        }
      }),
    );
  } catch (err) {
    return backward(describe(err), false);
  }

  // ---- After the pivot: forward recovery only ----------------------------------------------------
  return CancellationScope.nonCancellable(async () => {
    state.pivotPassed = true;
    state.compensations = [];
    compensations.length = 0;
    await setStatus('SHIPPED');
    await step('sendConfirmation', async () => {
      for (;;) {
        try {
          await act(forward, 'sendConfirmation', `send confirmation for ${orderId}`, { orderId, trackingNumber: tracking });
          return;
        } catch (err) {
          if ((await escalate('forward-step', `sendConfirmation failed after the pivot: ${describe(err)}`)) === 'mark-resolved') return;
        }
      }
    });
    await setStatus('COMPLETED');
    await condition(allHandlersFinished);
    return { orderId, status: state.status, ...(state.reason ? { reason: state.reason } : {}) };
  });
}

const isFinal = (status: OrderStatus): boolean => TERMINAL_STATUSES.includes(status);
