/**
 * The order saga, workflow ID `order:<orderId>`; its history is the saga log. `OrderSaga.run()` reads
 * as the five steps; each step's method shows its activity options, the compensation it registers and
 * its idempotency key. Backward recovery before the pivot (the shipment), forward only after it.
 *
 * The order row is the only truth: whenever a write is refused, or a step finds the order further
 * along, the run reads the row and decides from it (past the pivot forward, before it backward), or
 * asks a person. Message handlers only record a request; every command comes from the main path.
 * Deploys are pinned (Worker Versioning): a run finishes on the build that started it, so there are
 * no patch branches for old runs (docs/versioning.md).
 */
import { ApplicationFailureCategory } from '@temporalio/common';
import {
  allHandlersFinished,
  ApplicationFailure,
  CancellationScope,
  CancelledFailure,
  condition,
  isCancellation,
  log,
  setCurrentDetails,
  setHandler,
  sleep,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import { ErrorTypes, FINAL_CHARGE_ANSWERS, SagaFailureTypes } from '../domain/failures';
import { laneFor, laneTaskQueue } from '../domain/lanes';
import {
  chargeKeyFor,
  formatMoney,
  isPastPivot,
  isTerminal,
  OrderValidationError,
  orderTotalCents,
  parseOrder,
  refundKeyFor,
  workflowIdFor,
  type OrderInput,
  type OrderResult,
  type OrderStatus,
} from '../domain/order';
import type { RecordedCancel } from '../activities/order-lock';
import { currentDetails } from './details';
import { acceptedUpdate, stateQuery, type Acceptance, type SagaState } from './messages';
import {
  act,
  actLocalFirst,
  CHARGE_ROUNDS,
  chargeOnceOpts,
  compensationOpts,
  conflictStatus,
  duration,
  failureMessage,
  failureType,
  forwardOpts,
  inquiryOpts,
  inventoryOpts,
  laneOpts,
  orderOpts,
  pastPivotStatus,
  recordedCancelIn,
  settled,
  settledStatus,
  statusOpts,
} from './saga-activities';
import { parseSagaConfig, type SagaConfig } from './saga-config';
import { SagaInbox, type Resolution } from './saga-inbox';
import { NeedsAttentionKey, OrderStatusKey, newOrderSearchAttributes } from './search-attributes';

export { DEFAULT_SAGA_CONFIG, parseSagaConfig, type SagaConfig } from './saga-config';

const TEMPORAL_CANCELLATION = 'TemporalCancellation';
/** How many times one run re-reads the row after a refusal before it asks a person. */
const MAX_REDECISIONS = 5;

/** The order saga. */
export async function orderSaga(input: OrderInput, config: Partial<SagaConfig> = {}): Promise<OrderResult> {
  return OrderSaga.start(input, config).run();
}

type Compensation = { name: string; run: () => Promise<unknown> };
type ChargeVerdict = 'succeeded' | 'failed' | 'not_found' | 'refunded' | 'closed' | 'cancelled';

/** Thrown inside the saga when the row is past the pivot: the run carries the order forward. */
class RowPastPivot extends Error {
  constructor(readonly status: OrderStatus) {
    super(`the order row is ${status}, past the pivot`);
  }
}

class OrderSaga {
  /** Checks the input (the workflow boundary checks again what the client checked), then the workflow ID. */
  static start(input: OrderInput, config: Partial<SagaConfig>): OrderSaga {
    let order: OrderInput;
    let cfg: SagaConfig;
    try {
      order = parseOrder(input);
      cfg = parseSagaConfig(config);
    } catch (err) {
      if (err instanceof OrderValidationError) {
        throw ApplicationFailure.create({
          type: ErrorTypes.InvalidOrder,
          message: err.message,
          nonRetryable: true,
          details: [{ field: err.field }],
        });
      }
      throw err;
    }
    const expected = workflowIdFor(order.orderId);
    if (workflowInfo().workflowId !== expected) {
      throw ApplicationFailure.create({
        type: ErrorTypes.InvalidOrder,
        message: `workflowId: an order saga runs as ${expected}, not ${workflowInfo().workflowId}; nothing was done`,
        nonRetryable: true,
        details: [{ field: 'workflowId' }],
      });
    }
    return new OrderSaga(order, cfg);
  }

  private readonly orderId: string;
  private readonly lines: string;
  /** Read only for the lane activity's timeouts (not compared on replay), never for a decision. */
  // eslint-disable-next-line no-restricted-properties -- see above
  private readonly started = Date.now();
  private readonly state: Omit<SagaState, 'compensations'>;
  /** The one list of compensations, bottom first; they run from the top (LIFO). */
  private readonly compensations: Compensation[] = [];
  /** Cancelled by a Temporal cancellation request or the deadline: ends the steps before the pivot. */
  private readonly preScope = new CancellationScope();
  private pivotStarted = false;
  /** Backward recovery has begun, for this reason: the order will end FAILED or CANCELLED whatever comes. */
  private unwinding: string | undefined;
  private overdue = false;
  /** The cancel recorded on the order row (Postgres decided it), as this run has learnt of it. */
  private cancel: RecordedCancel | undefined;
  /** The cancels and resolves a person sent, and the answers to them. */
  private readonly inbox: SagaInbox;
  private settledElsewhere = false;
  private redecisions = 0;
  private deadlineTimer: CancellationScope | undefined;
  private tracking = '';

  private constructor(
    private readonly order: OrderInput,
    private readonly cfg: SagaConfig,
  ) {
    this.orderId = order.orderId;
    this.lines = order.items.map((i) => `${i.qty}×${i.sku}`).join(', ');
    this.inbox = new SagaInbox({
      orderId: this.orderId,
      snapshot: () => this.snapshot(),
      cancel: () => this.cancel,
      unwinding: () => this.unwinding,
      settledElsewhere: () => this.settledElsewhere,
    });
    this.state = {
      orderId: this.orderId,
      status: 'PENDING',
      step: 'start',
      stepsDone: [],
      compensationsRun: [],
      unknowns: [],
      attempts: {},
      pivotPassed: false,
    };
  }

  async run(): Promise<OrderResult> {
    this.listen();
    this.startDeadline();
    this.publishSearchAttributes();
    try {
      // ---- Before the pivot: backward recovery ----
      try {
        await this.preScope.run(async () => {
          await this.createOrder();
          await this.reserveInventory();
          await this.chargePayment();
        });
        // A cancel that arrived while a non-cancellable step ran still wins before the pivot.
        await this.recordQueuedCancels();
        if (this.stopRequested()) throw new CancelledFailure(this.stopReason());
      } catch (err) {
        if (err instanceof RowPastPivot) return await this.fromPivot();
        const ended = await this.recoverBeforePivot(err);
        if (ended) return ended;
      }
      return await this.fromPivot();
    } catch (err) {
      const status = failureType(err) === SagaFailureTypes.OrderSettled ? settledStatus(err) : undefined;
      if (status) return CancellationScope.nonCancellable(() => this.alreadySettled(status));
      throw err;
    } finally {
      // The saga has ended: its deadline timer stops, so the timeline shows it only while the saga ran.
      this.deadlineTimer?.cancel();
    }
  }

  /**
   * The pivot, then forward only. A rejected shipment (nothing shipped) is the last backward way; so is
   * a cancel recorded on the row before the shipment, which the shipment's write refuses.
   */
  private async fromPivot(): Promise<OrderResult> {
    try {
      await this.createShipment();
    } catch (err) {
      if (failureType(err) === SagaFailureTypes.OrderSettled) throw err;
      if (this.learnCancel(err)) return await this.backward(this.stopReason(), true, SagaFailureTypes.OrderCancelled);
      return await this.backward(failureMessage(err), false, failureType(err) ?? SagaFailureTypes.SagaFailed);
    }
    return await this.afterPivot();
  }

  // ---- The steps ------------------------------------------------------------------------------

  /**
   * 1. The order row, PENDING: the semantic lock, owned by this run. Key: the order ID (a second
   * create finds the row: settled → this run stops; open with the same contents → this run owns it,
   * and goes on from where the row stands). Registers the release and the refund before the
   * reservation runs: a run that takes over an order cannot know whether it was charged, so its
   * backward recovery always asks the provider (the refund closes the key when nothing was charged).
   */
  private async createOrder(): Promise<void> {
    const summary = `create order ${this.orderId} (PENDING)`;
    // Not cancellable: once sent, the row exists, so a cancel compensates it.
    const created = await this.step('createOrder', () =>
      CancellationScope.nonCancellable(() => actLocalFirst(orderOpts, 'createOrder', summary, this.order)),
    );
    if (created.outcome === 'settled') throw settled(created.status);
    if (created.cancel) this.cancel = created.cancel; // a cancel recorded before this run took the order over
    this.register('releaseInventory', () =>
      act(compensationOpts(this.cfg.compensationRetryMaxMs), 'releaseInventory', `compensate: release ${this.lines}`, {
        orderId: this.orderId,
      }),
    );
    this.registerRefund();
    if (created.outcome === 'owned') {
      // An open order this run took over (a Reset, a new start after a Terminate): the row says where
      // it is. An escalation the old run left counts as the operator's retry, from where it stood; one
      // made at the pivot (from CHARGED) goes back to the pivot, never backward.
      this.mirror(created.status);
      const status =
        created.status === 'NEEDS_ATTENTION'
          ? await CancellationScope.nonCancellable(() => this.resumeRow())
          : created.status;
      if (isPastPivot(status) || (created.status === 'NEEDS_ATTENTION' && created.attentionFrom === 'CHARGED'))
        throw new RowPastPivot(status);
    }
  }

  /** 2. Reserve the stock: optimistic (CAS), else the serial lane. Key: (order ID, SKU). Compensation: release (registered in 1). */
  private async reserveInventory(): Promise<void> {
    // Not cancellable: its release must never run before a late commit of the reservation.
    const status = await this.step('reserveInventory', () => CancellationScope.nonCancellable(() => this.reserve()));
    this.mirror(status); // the reservation's own transaction moved the row (or found it further along)
    if (isPastPivot(status)) throw new RowPastPivot(status);
  }

  /** 3. Charge. Key: `<orderId>:charge`, computed here. Compensation: the refund (registered in 1). */
  private async chargePayment(): Promise<void> {
    const status = await this.step('chargePayment', () => this.charge());
    this.mirror(status);
    if (isPastPivot(status)) throw new RowPastPivot(status);
  }

  /**
   * 4. The pivot: ship (the row moves to SHIPPED, the lines to SOLD, in one transaction). Key: the order
   * ID (the tracking number derives from it). Retried for the forward limit, then escalated; a
   * rejection means nothing shipped (the caller compensates); nothing else ever compensates.
   */
  private async createShipment(): Promise<void> {
    this.pivotStarted = true;
    const opts = forwardOpts(this.cfg.forwardRetryLimitMs);
    await CancellationScope.nonCancellable(() =>
      this.step('createShipment', async () => {
        let byOperator = false;
        for (;;) {
          try {
            const summary = byOperator
              ? `record the shipment made by hand for ${this.orderId} (pivot)`
              : `create shipment for ${this.orderId} (pivot)`;
            const req = { orderId: this.orderId, byOperator };
            this.tracking = (await actLocalFirst(opts, 'createShipment', summary, req)).trackingNumber;
            return;
          } catch (err) {
            if (failureType(err) === SagaFailureTypes.OrderSettled) throw err;
            // A rejection (or a row that forbids shipping) means the shipment was not created: no pivot.
            if (failureType(err) === ErrorTypes.ShipmentRejected) throw err;
            // A cancel recorded before the shipment: the write refused it, nothing shipped.
            if (recordedCancelIn(err)) throw err;
            if (failureType(err) === ErrorTypes.OrderStateConflict) {
              const row = conflictStatus(err);
              // An escalation this run did not make (its waiting run was reset or terminated): the
              // restart counts as the operator's retry, from where the row stood.
              if (row === 'NEEDS_ATTENTION' && ['CHARGED', 'SHIPPED'].includes(await this.resumeRow())) continue;
              // The row went backward (another run compensated it): nothing shipped.
              if (row === 'COMPENSATING') throw err;
            }
            // Anything else may have shipped, or the row cannot say: never compensate, escalate.
            if (
              (await this.escalate('forward-step', `createShipment failed at the pivot: ${failureMessage(err)}`)) ===
              'mark-resolved'
            ) {
              // Shipped by hand: the same bookkeeping (lines SOLD, order SHIPPED), so nothing stays HELD.
              byOperator = true;
            }
          }
        }
      }),
    );
  }

  /**
   * 5. Confirm (an outbox row keyed by order and kind; the row moves to COMPLETED), forward only:
   * retried for the forward limit, then escalated.
   */
  private async sendConfirmation(): Promise<boolean> {
    const opts = forwardOpts(this.cfg.forwardRetryLimitMs);
    const summary = `send confirmation for ${this.orderId}`;
    const req = { orderId: this.orderId, trackingNumber: this.tracking };
    let confirmed = false;
    await this.step('sendConfirmation', async () => {
      for (;;) {
        try {
          await actLocalFirst(opts, 'sendConfirmation', summary, req);
          confirmed = true;
          return;
        } catch (err) {
          if (failureType(err) === SagaFailureTypes.OrderSettled) throw err;
          // An escalation another run left (reset or terminated while it waited): the operator's retry.
          if (conflictStatus(err) === 'NEEDS_ATTENTION' && (await this.resumeRow()) === 'SHIPPED') continue;
          if (
            (await this.escalate('forward-step', `sendConfirmation failed after the pivot: ${failureMessage(err)}`)) ===
            'mark-resolved'
          )
            return;
        }
      }
    });
    return confirmed;
  }

  private afterPivot(): Promise<OrderResult> {
    return CancellationScope.nonCancellable(async () => {
      this.state.pivotPassed = true;
      await this.recordQueuedCancels(); // sent while the shipment ran: the row refuses them now
      this.compensations.length = 0;
      this.mirror('SHIPPED'); // the shipment's own transaction moved the row
      const confirmed = await this.sendConfirmation();
      if (confirmed)
        this.mirror('COMPLETED'); // the confirmation's own transaction completed the order
      else await this.setStatus('COMPLETED');
      await condition(allHandlersFinished);
      return {
        orderId: this.orderId,
        status: this.state.status,
        ...(this.state.reason ? { reason: this.state.reason } : {}),
      };
    });
  }

  // ---- Compensations and backward recovery ---------------------------------------------------

  private register(name: string, run: () => Promise<unknown>): void {
    this.compensations.push({ name, run });
  }

  /**
   * The refund's key is `<orderId>:charge:refund`. It first closes the charge's key at the provider
   * (a technical cancel): a charge found there is refunded as usual; a key never used is closed, so a
   * request still on its way can never take money. It refunds only what the provider says was charged.
   */
  private registerRefund(): void {
    const keys = { chargeKey: chargeKeyFor(this.orderId), idempotencyKey: refundKeyFor(this.orderId) };
    this.register('refundPayment', () =>
      act(
        compensationOpts(this.cfg.compensationRetryMaxMs),
        'refundPayment',
        `compensate: close key ${keys.chargeKey} at the provider, refund what it took (key ${keys.idempotencyKey})`,
        { orderId: this.orderId, ...keys },
      ),
    );
  }

  /**
   * A step before the pivot failed (or a cancel or the deadline stopped it). Returns the end of the
   * saga when it goes backward; undefined when this run carries the order on forward (the row is
   * charged or shipped by another run).
   */
  private async recoverBeforePivot(err: unknown): Promise<OrderResult | undefined> {
    if (this.state.stepsDone.length === 0) {
      // createOrder did not succeed in this run (it runs even after a cancel and cannot be cut off once
      // sent): nothing to compensate, and the row, if any, is not this run's.
      throw err;
    }
    if (failureType(err) === SagaFailureTypes.OrderSettled && this.compensations.length === 0) throw err;
    this.learnCancel(err);
    await CancellationScope.nonCancellable(() => this.recordQueuedCancels());
    // Stopped by a cancel, the deadline or a Temporal cancellation, or refused because a cancel is recorded.
    const cancelled = isCancellation(err) || recordedCancelIn(err) !== undefined;
    const reason = cancelled ? this.stopReason() : failureMessage(err);
    const ahead = await CancellationScope.nonCancellable(() => this.catchUp(err));
    if (ahead === 'forward') return undefined;
    const stopped = cancelled || this.cancel !== undefined;
    const why = !stopped
      ? (failureType(err) ?? SagaFailureTypes.SagaFailed)
      : this.cancel !== undefined
        ? SagaFailureTypes.OrderCancelled
        : this.overdue
          ? SagaFailureTypes.DeadlineExceeded
          : TEMPORAL_CANCELLATION;
    return this.backward(reason, stopped, why);
  }

  /**
   * Backward recovery: compensate LIFO, then end FAILED or CANCELLED with the reason, and fail the
   * workflow, so the Web UI's list tells the outcome at a glance: a benign ApplicationFailure whose
   * type is the business reason (`why`) and whose details carry the result (client.ts reads it back),
   * or, for a Temporal cancellation, Canceled. A row found past the pivot meanwhile (another run
   * shipped it) turns the run forward instead.
   */
  private async backward(reason: string, cancelled: boolean, why: string): Promise<OrderResult> {
    log.warn('saga failed before the pivot; compensating', { orderId: this.orderId, reason });
    this.unwinding = reason;
    try {
      await CancellationScope.nonCancellable(() => this.compensate(reason));
    } catch (err) {
      if (!(err instanceof RowPastPivot)) throw err;
      this.unwinding = undefined;
      log.warn('the order row is past the pivot; carrying it forward', { orderId: this.orderId, status: err.status });
      this.mirror(err.status);
      return this.fromPivot();
    }
    return CancellationScope.nonCancellable(async () => {
      await this.setStatus(cancelled ? 'CANCELLED' : 'FAILED', reason);
      await condition(allHandlersFinished);
      const result: OrderResult = { orderId: this.orderId, status: this.state.status, reason };
      if (why === TEMPORAL_CANCELLATION) throw new CancelledFailure(reason);
      throw ApplicationFailure.create({
        type: why,
        message: `order ${this.orderId} ${this.state.status}: ${reason}`,
        nonRetryable: true,
        details: [result],
        category: ApplicationFailureCategory.BENIGN,
      });
    });
  }

  /**
   * Runs the compensations LIFO. If another run has already settled the order (terminal), the
   * compensations still run (each is safe when there is nothing to undo, and never acts on a shipped
   * order), then the saga stops with OrderSettled. A row past the pivot stops them: RowPastPivot.
   */
  private async compensate(reason: string): Promise<void> {
    let settledAs: OrderStatus | undefined;
    try {
      await this.setStatus('COMPENSATING', reason);
    } catch (err) {
      settledAs = settledStatus(err);
      const ahead = pastPivotStatus(err);
      if (ahead) throw new RowPastPivot(ahead);
      if (!settledAs) throw err;
    }
    while (this.compensations.length > 0) {
      const c = this.compensations[this.compensations.length - 1]!;
      this.state.step = `compensate:${c.name}`;
      this.refresh();
      try {
        await c.run();
      } catch (err) {
        settledAs = settledStatus(err);
        if (settledAs) break; // shipped and settled elsewhere: nothing here may be undone
        const ahead = pastPivotStatus(err);
        if (ahead) throw new RowPastPivot(ahead);
        const action = await this.escalate(
          'compensation',
          `compensation ${c.name} failed: ${failureMessage(err)}`,
          c.name,
        );
        if (action === 'retry') continue;
      }
      this.compensations.pop();
      this.state.compensationsRun.push(c.name);
      this.refresh();
    }
    if (settledAs) throw settled(settledAs);
  }

  /**
   * A step before the pivot was refused because another run of this order (reset, or terminated and
   * started again) has moved the row on, or a cancel stopped it. Decides from where the row stands:
   * `forward` when the row is charged (and no cancel) or shipped, else `backward`. An escalation that
   * run left is taken as the operator's retry.
   */
  private async catchUp(err: unknown): Promise<'forward' | 'backward'> {
    for (let e = err; ;) {
      this.learnCancel(e);
      let status = conflictStatus(e);
      if (failureType(e) !== ErrorTypes.OrderStateConflict || status === undefined) return 'backward';
      // Escalated at or after the pivot (or shipped): never backward, whatever was asked.
      const ahead = pastPivotStatus(e);
      if (ahead) {
        log.warn('the order row is past the pivot; carrying it forward', { orderId: this.orderId, status: ahead });
        this.mirror(ahead);
        return 'forward';
      }
      try {
        if (status === 'NEEDS_ATTENTION') status = await this.resumeRow();
        if (status === 'UNKNOWN_PAYMENT' && !this.stopRequested()) {
          const verdict = await this.inquireUntilKnown();
          if (verdict !== 'succeeded') return 'backward';
          status = await this.setStatus('CHARGED');
        }
      } catch (inner) {
        // The row moved again meanwhile (another run): read it again, a bounded number of times.
        if (failureType(inner) !== ErrorTypes.OrderStateConflict || ++this.redecisions > MAX_REDECISIONS) throw inner;
        e = inner;
        continue;
      }
      if (!isPastPivot(status) && (status !== 'CHARGED' || this.stopRequested())) return 'backward';
      log.warn('order already charged or shipped by another run; carrying on forward', {
        orderId: this.orderId,
        status,
      });
      this.mirror(status);
      return 'forward';
    }
  }

  /** Another run settled this order: this run ends at once, with the order's status, and changes nothing more. */
  private async alreadySettled(status: OrderStatus): Promise<OrderResult> {
    log.warn('order already settled by another run; this run stops', { orderId: this.orderId, status });
    this.compensations.length = 0;
    this.state.step = 'already settled';
    this.settledElsewhere = true;
    this.state.awaiting = undefined; // nothing here is waiting for a person any more
    this.mirror(
      status,
      `order ${this.orderId} is already ${status}: settled by another run; this run stopped without effects`,
    );
    await condition(allHandlersFinished);
    return { orderId: this.orderId, status: 'ALREADY_SETTLED', orderStatus: status, reason: this.state.reason };
  }

  // ---- Reservation and charge in detail ------------------------------------------------------

  /**
   * Optimistic first; when the SKUs are too contended (the activity says so, or it ran out of CAS
   * attempts), the reservation goes to a serial lane: a task queue whose worker runs one task at a
   * time. Nothing is dropped: the lane retries until it decides (reserved or a business failure).
   * Returns the row's status afterwards.
   */
  private async reserve(): Promise<OrderStatus> {
    const req = { orderId: this.orderId, customerId: this.order.customerId, items: this.order.items };
    let why: string;
    try {
      const r = await act(inventoryOpts, 'reserveInventory', `reserve ${this.lines} (CAS)`, req);
      this.state.attempts.reserveCas = r.attempts;
      if (r.outcome !== 'route-to-lane') return r.status;
      why = r.reason;
    } catch (err) {
      if (failureType(err) !== ErrorTypes.ContentionExhausted) throw err;
      why = failureMessage(err);
    }
    const lane = laneFor(
      this.order.items.map((i) => i.sku),
      this.cfg.inventoryLanes,
    );
    this.state.attempts.reserveLane = (this.state.attempts.reserveLane ?? 0) + 1;
    log.info('reservation sent to the serial lane', { orderId: this.orderId, lane, why });
    // A lane no worker polls must not hold the saga past its deadline.
    // eslint-disable-next-line no-restricted-properties -- an activity's timeout, not a decision
    const untilDeadline = Math.max(1_000, this.cfg.deadlineMs - (Date.now() - this.started));
    const r = await act(
      {
        ...laneOpts,
        taskQueue: laneTaskQueue(workflowInfo().taskQueue, lane),
        scheduleToStartTimeout: untilDeadline,
        scheduleToCloseTimeout: untilDeadline,
      },
      'reserveInventorySerial',
      `reserve ${this.lines} (serial lane ${lane}: ${why})`,
      req,
    );
    if (r.outcome === 'route-to-lane') throw new Error('the serial lane cannot route to itself'); // never happens
    return r.status;
  }

  /**
   * The charge: every request is the saga's own decision (the activity is never retried by the
   * server). A timeout or 5xx is followed by an inquiry; only `not_found` (nothing charged) allows
   * another request, after a pause, and only while no cancel or deadline has come. Returns the row's
   * status afterwards (CHARGED, or further along).
   */
  private async charge(): Promise<OrderStatus> {
    const key = chargeKeyFor(this.orderId);
    const request = {
      orderId: this.orderId,
      amountCents: orderTotalCents(this.order),
      currency: this.order.currency,
      paymentMethod: this.order.paymentMethod,
      idempotencyKey: key,
      markCharged: true,
    };
    for (let round = 1; ; round++) {
      await CancellationScope.nonCancellable(() => this.recordQueuedCancels());
      if (this.stopCharging()) throw new CancelledFailure(this.stopReason());
      this.state.attempts.charge = round;
      try {
        // Not cancellable: a cancel waits for this request's answer (it may already be at the provider).
        const r = await CancellationScope.nonCancellable(() =>
          act(
            chargeOnceOpts,
            'chargePayment',
            `charge ${formatMoney(request.amountCents, this.order.currency)} (key ${key}, request ${round})`,
            request,
          ),
        );
        return r.status ?? 'CHARGED';
      } catch (err) {
        this.learnCancel(err);
        if (FINAL_CHARGE_ANSWERS.includes(failureType(err) ?? '')) throw err;
        log.warn('charge timed out or failed; inquiring before deciding', {
          orderId: this.orderId,
          error: failureMessage(err),
        });
      }
      const verdict = await CancellationScope.nonCancellable(() => this.inquireUntilKnown());
      if (verdict === 'succeeded') return this.setStatus('CHARGED');
      if (verdict === 'cancelled') throw new CancelledFailure(this.stopReason());
      if (verdict !== 'not_found') throw this.chargeRefusal(verdict, key);
      if (round >= CHARGE_ROUNDS) {
        throw ApplicationFailure.create({
          type: SagaFailureTypes.PaymentUnavailable,
          message: `charge not taken after ${round} requests`,
          nonRetryable: true,
        });
      }
      // not_found: nothing was charged yet. Pause, unless a cancel or the deadline comes first.
      const pauseMs = Math.min(this.cfg.inquiryMaxMs, 1000 * 2 ** (round - 1));
      await CancellationScope.nonCancellable(() =>
        condition(() => this.stopCharging() || this.inbox.hasQueuedCancel(), pauseMs, {
          summary: `the provider never took charge request ${round}; request ${round + 1} in ${duration(pauseMs)} unless cancelled`,
        }),
      );
    }
  }

  private chargeRefusal(verdict: 'failed' | 'refunded' | 'closed', key: string): ApplicationFailure {
    const [type, message] =
      verdict === 'refunded'
        ? [ErrorTypes.ChargeRefunded, `charge ${key} was refunded`]
        : verdict === 'closed'
          ? [ErrorTypes.ChargeClosed, `charge key ${key} is closed at the provider; no money can be taken under it`]
          : [ErrorTypes.PaymentDeclined, 'charge failed at the provider'];
    return ApplicationFailure.create({ type, message, nonRetryable: true });
  }

  /** What the provider knows of `<orderId>:charge`, asked by its key. */
  private inquire(summary: string): ReturnType<typeof act<'inquireCharge'>> {
    return act(inquiryOpts, 'inquireCharge', summary, { orderId: this.orderId, chargeKey: chargeKeyFor(this.orderId) });
  }

  /**
   * When the charge's outcome is unknown: ask the provider by key until it knows, on durable timers.
   * How long it has been unknown is the sum of the timers slept (never the workflow clock); the
   * inquiries' own time is not counted.
   */
  private async inquireUntilKnown(): Promise<ChargeVerdict> {
    this.state.unknowns = ['charge'];
    this.refresh();
    let slept = 0;
    for (let n = 0; ; n++) {
      try {
        const r = await this.inquire(`inquire charge ${chargeKeyFor(this.orderId)}`);
        this.state.attempts.inquiry = n + 1;
        if (r.status !== 'processing') {
          this.state.unknowns = [];
          // A charge the provider has refunded does not count as paid.
          return r.status === 'succeeded' && (r.refundedCents ?? 0) > 0 ? 'refunded' : r.status;
        }
      } catch (err) {
        log.warn('inquiry failed; charge outcome unknown', { orderId: this.orderId, error: failureMessage(err) });
      }
      if (this.state.status !== 'UNKNOWN_PAYMENT') {
        // The row already CHARGED (the charge's own write committed, its answer was lost): it is paid.
        const now = await this.setStatus('UNKNOWN_PAYMENT');
        if (now === 'CHARGED' || isPastPivot(now)) {
          this.state.unknowns = [];
          return 'succeeded';
        }
      }
      const wait = Math.min(this.cfg.inquiryMaxMs, this.cfg.inquiryBaseMs * 2 ** n);
      if (this.overdue || slept + wait > this.cfg.unknownEscalationMs) {
        const why = this.overdue ? 'saga deadline passed' : `no answer after ${duration(slept)}`;
        // Never refund blindly: a person settles it (after checking the provider's dashboard), or the
        // customer cancels (the refund then closes the key, or refunds what the provider took).
        const action = await this.escalate(
          'charge-outcome',
          `charge ${chargeKeyFor(this.orderId)} outcome unknown (${why})`,
        );
        this.state.unknowns = [];
        return action === 'cancelled' ? 'cancelled' : action === 'charge-succeeded' ? 'succeeded' : 'failed';
      }
      // A durable timer (the caller runs this loop non-cancellably: an unknown charge is settled first).
      await sleep(wait, { summary: `charge outcome unknown; next inquiry in ${duration(wait)}` });
      slept += wait;
    }
  }

  /** A cancel, the deadline or a Temporal cancellation has asked the saga to stop before the pivot. */
  private stopRequested(): boolean {
    return this.cancel !== undefined || this.preScope.consideredCancelled;
  }
  /** After a cancel or the deadline, no new charge request goes out. */
  private stopCharging(): boolean {
    return this.stopRequested() || this.overdue;
  }
  private stopReason(): string {
    return (
      this.cancel?.reason ?? (this.overdue ? 'saga deadline passed' : 'cancelled by a Temporal cancellation request')
    );
  }

  /**
   * Records in Postgres each cancel that came as a Signal (a Signal only wakes the run; one from
   * client.ts is recorded already, and recording it again returns its first answer), and learns the
   * decision: accepted (the order will not ship) or refused. No command when nothing was sent.
   */
  private async recordQueuedCancels(): Promise<void> {
    for (let q = this.inbox.nextCancel(); q !== undefined; q = this.inbox.nextCancel()) {
      const { requestId, reason } = q;
      const decision = await act(statusOpts, 'recordCancel', `record the cancel ${requestId} of ${this.orderId}`, {
        orderId: this.orderId,
        requestId,
        reason,
      });
      if (decision.cancel) this.cancel ??= decision.cancel;
      this.inbox.cancelDecided(requestId, decision.outcome === 'refused' ? (decision.message ?? 'refused') : undefined);
      this.refresh();
    }
  }

  /** Learns of a cancel recorded on the row from a refused write; true when there is one. */
  private learnCancel(err: unknown): boolean {
    const cancel = recordedCancelIn(err);
    if (cancel) this.cancel ??= cancel;
    return cancel !== undefined;
  }

  // ---- Status, escalation, bookkeeping -------------------------------------------------------

  /** A step: refused before the pivot once a stop was asked for; counts its attempts; records it done. */
  private async step<T>(name: string, fn: () => Promise<T>): Promise<T> {
    // Steps before the pivot run their activities non-cancellably; a stop takes effect between steps.
    // createOrder runs even then: the run must own the row to settle it.
    if (!this.pivotStarted && name !== 'createOrder') {
      await CancellationScope.nonCancellable(() => this.recordQueuedCancels());
      if (this.stopRequested()) throw new CancelledFailure(this.stopReason());
    }
    this.state.step = name;
    this.state.attempts[name] = (this.state.attempts[name] ?? 0) + 1;
    this.refresh();
    const out = await fn();
    this.state.stepsDone.push(name);
    this.refresh();
    return out;
  }

  /**
   * A status-only step: a guarded transition of the order row (refused if the row does not allow it).
   * Mirrors, and returns, the row's real status afterwards.
   */
  private async setStatus(status: OrderStatus, reason?: string): Promise<OrderStatus> {
    const write = reason ?? this.state.reason;
    const now = await CancellationScope.nonCancellable(() =>
      act(statusOpts, 'setOrderStatus', `order ${this.orderId} → ${status}`, {
        orderId: this.orderId,
        status,
        reason: write,
      }),
    );
    this.mirror(now, now === status ? reason : undefined);
    return now;
  }

  /**
   * Leaves NEEDS_ATTENTION for the status the row escalated from (`status` is where this run thinks
   * it was; the row knows better); returns it.
   */
  private async resumeRow(status = this.state.status, reason?: string): Promise<OrderStatus> {
    const now = await act(statusOpts, 'setOrderStatus', `order ${this.orderId} → back from NEEDS_ATTENTION`, {
      orderId: this.orderId,
      status,
      ...(reason !== undefined ? { reason } : {}),
      resume: true,
    });
    this.mirror(now);
    return this.state.status;
  }

  /**
   * Escalates to NEEDS_ATTENTION and waits for an operator's resolve (an answer about the charge is
   * checked against the provider's ledger first, here on the main path). While it waits on an unknown
   * charge before the pivot, a cancel ends the wait: 'cancelled'.
   */
  private async escalate(
    awaiting: NonNullable<SagaState['awaiting']>,
    reason: string,
    compensation?: string,
  ): Promise<Resolution['action'] | 'cancelled'> {
    const previous = this.state.status;
    this.state.awaiting = awaiting;
    log.error('ALERT saga needs attention', { orderId: this.orderId, reason, awaiting });
    try {
      await this.setStatus('NEEDS_ATTENTION', reason);
    } catch (err) {
      // A row that cannot take NEEDS_ATTENTION (another run moved it): the run still waits for a
      // person, who sees it in the Web UI (current details, the state query); it never just ends.
      if (failureType(err) !== ErrorTypes.OrderStateConflict || settledStatus(err)) throw err;
      log.error('the order row refused NEEDS_ATTENTION; waiting for a person anyway', {
        orderId: this.orderId,
        error: failureMessage(err),
      });
      this.state.reason = reason;
      this.refresh();
      upsertSearchAttributes([{ key: NeedsAttentionKey, value: true }]); // it is in the needs-attention view
    }
    const cancellable = awaiting === 'charge-outcome';
    let request: Resolution | undefined;
    for (;;) {
      await condition(
        () =>
          this.inbox.resolution !== undefined || this.inbox.hasQueuedCancel() || (cancellable && this.stopRequested()),
      );
      if (this.inbox.resolution === undefined && this.inbox.hasQueuedCancel()) {
        // Postgres decides it: accepted only while the order may still be cancelled (an unknown charge).
        await CancellationScope.nonCancellable(() => this.recordQueuedCancels());
        if (!(cancellable && this.stopRequested())) continue;
      }
      if (this.inbox.resolution === undefined) break; // cancelled
      request = this.inbox.resolution;
      const refused = await this.checkResolution(request, awaiting, compensation);
      this.inbox.answerResolve(refused);
      if (!refused) break;
      request = undefined;
    }
    this.state.awaiting = undefined;
    if (request === undefined) {
      log.warn('cancelled while waiting for a person', { orderId: this.orderId });
      this.refresh();
      return 'cancelled';
    }
    const { action, note, reference } = request;
    log.warn('operator resolved', { orderId: this.orderId, action, note, reference });
    this.state.reason = `${reason} (operator: ${action}${reference ? `, reference ${reference}` : ''}${note ? `, ${note}` : ''})`;
    this.refresh();
    if (previous !== 'NEEDS_ATTENTION') {
      // Back to where the row stood when it escalated, which may be further than this run knows.
      await CancellationScope.nonCancellable(() => this.resumeRow(previous, this.state.reason));
    }
    return action;
  }

  /** The saga's own view and the Web UI's search attributes, set from the row's status; no database write. */
  private mirror(status: OrderStatus, reason?: string): void {
    this.state.status = status;
    if (reason !== undefined) this.state.reason = reason;
    this.refresh();
    upsertSearchAttributes([
      { key: OrderStatusKey, value: status },
      { key: NeedsAttentionKey, value: status === 'NEEDS_ATTENTION' },
    ]);
  }

  /** What the `state` query returns; the compensations are the one list's names. */
  private snapshot(): SagaState {
    return { ...this.state, compensations: this.compensations.map((c) => c.name) };
  }

  /** The run's current details in the Web UI (user metadata), kept up to date with the state. */
  private refresh(): void {
    setCurrentDetails(currentDetails(this.order, this.snapshot()));
  }

  private publishSearchAttributes(): void {
    upsertSearchAttributes(newOrderSearchAttributes(this.order));
  }

  /**
   * The global deadline: an in-workflow timer, since a server-side timeout could not compensate.
   * Shielded from a Temporal cancellation; its own scope is cancelled when the saga ends.
   */
  private startDeadline(): void {
    void CancellationScope.nonCancellable(async () => {
      const summary = `saga deadline (${duration(this.cfg.deadlineMs)}): an order not shipped by then is compensated`;
      this.deadlineTimer = new CancellationScope();
      try {
        await this.deadlineTimer.run(() => sleep(this.cfg.deadlineMs, { summary }));
      } catch (err) {
        if (isCancellation(err)) return; // the saga ended first
        throw err;
      }
      this.overdue = true;
      if (!this.pivotStarted && this.state.unknowns.length === 0 && !isTerminal(this.state.status)) {
        log.warn('saga deadline passed before the pivot; compensating', { orderId: this.orderId });
        this.preScope.cancel();
      }
    });
  }

  // ---- Messages: the state query, the early answer; cancel and resolve are the inbox's ----------
  // The handlers record a request or wait for the main path; they issue no command.

  private listen(): void {
    setHandler(stateQuery, () => this.snapshot());
    setHandler(acceptedUpdate, () => this.accepted());
    this.inbox.listen(); // cancel, resolve and their answers
  }

  /** The early answer: reserved (or found already further along), or refused and why. */
  private async accepted(): Promise<Acceptance> {
    const { orderId, state } = this;
    const reserved = (): boolean =>
      state.stepsDone.includes('reserveInventory') ||
      this.pivotStarted ||
      state.status === 'CHARGED' ||
      isPastPivot(state.status);
    // Waits are shielded from a Temporal cancellation: the saga's own end answers them.
    await CancellationScope.nonCancellable(() =>
      condition(() => reserved() || this.unwinding !== undefined || this.settledElsewhere || isTerminal(state.status)),
    );
    if (this.settledElsewhere) return { orderId, accepted: false, status: 'ALREADY_SETTLED', reason: state.reason };
    if (reserved()) return { orderId, accepted: true, status: state.status };
    return { orderId, accepted: false, status: state.status, reason: this.unwinding ?? state.reason };
  }

  /**
   * Checks an operator's resolve against the ledger (the provider's for the money, the reservations for
   * the stock) and records it in Postgres: the refusal, with the figures, or undefined when it agrees.
   */
  private async checkResolution(
    request: Resolution,
    awaiting: NonNullable<SagaState['awaiting']>,
    compensation: string | undefined,
  ): Promise<string | undefined> {
    const { requestId, action, note, reference } = request;
    try {
      const r = await act(inquiryOpts, 'checkResolution', `resolve ${action}: check it against the ledger`, {
        orderId: this.orderId,
        requestId,
        action,
        awaiting,
        ...(note !== undefined ? { note } : {}),
        ...(reference !== undefined ? { reference } : {}),
        ...(compensation !== undefined ? { compensation } : {}),
      });
      return r.refused;
    } catch (err) {
      return `cannot check ${action} against the ledger: ${failureMessage(err)}`;
    }
  }
}
