/**
 * The order saga, workflow ID `order:<orderId>`; its history is the saga log. `OrderSaga.run()` reads
 * as the saga's phases, each answering with an outcome (saga-phase.ts) that `run()` alone acts on:
 * the steps before the pivot, the pivot and after it, backward recovery, and the end. Each step's
 * method shows its activity options, the compensation it registers and its idempotency key. Backward
 * recovery before the pivot (the shipment), forward only after it.
 *
 * The six steps: validate and create the order, reserve, authorize (compensation: the void), ship
 * (the pivot), capture (forward only), confirm. An order of the charge era (its row says so, written
 * by an older build) is charged at step 3 and refunded as its compensation, with no capture.
 *
 * The rooms: this file has `run()` and the steps; authorization-protocol.ts the money path (hold,
 * inquiry, void, capture), charge-protocol.ts the charge era's (charge, inquiry, refund); recovery.ts what a run does when a step fails or a person is needed; saga-run.ts
 * what they share (the state, the phase, the order's status, the cancels, the deadline, the messages).
 *
 * The order row is the only truth: whenever a write is refused, or a step finds the order further
 * along, the run reads the row and decides from it (past the pivot forward, before it backward), or
 * asks a person. Message handlers only record a request; every command comes from the main path.
 * Deploys are pinned (Worker Versioning): a run finishes on the build that started it, so there are
 * no patch branches for old runs (docs/versioning.md).
 */
import {
  allHandlersFinished,
  ApplicationFailure,
  CancellationScope,
  CancelledFailure,
  log,
  workflowInfo,
} from '@temporalio/workflow';
import { ErrorTypes, SagaFailureTypes } from '../domain/failures';
import { laneFor, laneTaskQueue } from '../domain/lanes';
import {
  chargeKeyFor,
  escalatedForward,
  isPastPivot,
  OrderValidationError,
  parseOrder,
  workflowIdFor,
  type OrderInput,
  type OrderResult,
  type OrderStatus,
  type PaymentFlow,
} from '../domain/order';
import { AuthorizationProtocol, type MoneyPath } from './authorization-protocol';
import { ChargeProtocol } from './charge-protocol';
import { Recovery } from './recovery';
import {
  compensationOpts,
  conflictStatus,
  escalationIn,
  failureMessage,
  failureType,
  forwardOpts,
  inventoryOpts,
  laneOpts,
  orderOpts,
  recordedCancelIn,
  endedElsewhere,
} from './saga-activities';
import { parseSagaConfig, type SagaConfig } from './saga-config';
import { ending, pivotAsked, type Outcome } from './saga-phase';
import { SagaRun } from './saga-run';

/** A charge a person answered `charge-failed` for (checked against the provider): the order compensates. */
const chargeFailedByOperator = (orderId: string): ApplicationFailure =>
  ApplicationFailure.create({
    type: ErrorTypes.PaymentDeclined,
    message: `charge ${chargeKeyFor(orderId)} failed: the operator resolved charge-failed, and the provider agreed`,
    nonRetryable: true,
  });

export { DEFAULT_SAGA_CONFIG, parseSagaConfig, type SagaConfig } from './saga-config';

/** The order saga. */
export async function orderSaga(input: OrderInput, config: Partial<SagaConfig> = {}): Promise<OrderResult> {
  return OrderSaga.start(input, config).run();
}

/** What a step before the pivot found: go on to the next, or the row is past the pivot (another run shipped it). */
type StepEnd = 'next' | 'past-pivot';

/** Runs one phase; a failure it throws ends it as an outcome too (ended elsewhere, or failed with it). */
function outcomeOf(phase: () => Promise<Outcome>): Promise<Outcome> {
  return phase().catch(ending);
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

  private readonly saga: SagaRun;
  private readonly charge: ChargeProtocol;
  private readonly auth: AuthorizationProtocol;
  private readonly recovery: Recovery;
  /** How this order's money moves, from its row (createOrder): an order of this build is authorized. */
  private flow: PaymentFlow = 'authorization';
  /** The shipment's tracking number, for the confirmation. */
  private tracking = '';

  private constructor(order: OrderInput, cfg: SagaConfig) {
    this.saga = new SagaRun(order, cfg);
    this.charge = new ChargeProtocol(this.saga, (reason) => this.recovery.escalate('charge-outcome', reason));
    this.auth = new AuthorizationProtocol(
      this.saga,
      (reason) => this.recovery.escalate('charge-outcome', reason, 'authorizePayment'),
      async (reason) =>
        (await this.recovery.escalate('capture', reason, 'capturePayment')) === 'mark-resolved'
          ? 'mark-resolved'
          : 'retry',
    );
    this.recovery = new Recovery(this.saga, () => this.money());
  }

  /** The order's money path: the charge era's for an order whose row says so, else the authorization's. */
  private money(): MoneyPath {
    return this.flow === 'charge' ? this.charge : this.auth;
  }

  /**
   * The saga: each phase answers with an outcome, and this loop alone decides what comes next. Every
   * way the run ends is here: completed, failed (after the compensations), or ended by another run.
   */
  run(): Promise<OrderResult> {
    // No wait of the saga is cut short by a Temporal cancellation: it stops the steps before the
    // pivot between them instead (`step`), so the whole path runs non-cancellably.
    return CancellationScope.nonCancellable(() => this.main());
  }

  private async main(): Promise<OrderResult> {
    const { saga, recovery } = this;
    saga.listen();
    saga.publishSearchAttributes();
    try {
      let next = await outcomeOf(() => this.beforePivot());
      for (;;) {
        const now = next;
        switch (now.kind) {
          case 'forward': // the pivot, then forward only; a refused shipment turns back
            next = await outcomeOf(() => this.fromPivot());
            break;
          case 'backward': // compensate LIFO; forward instead when the row is found past the pivot
            next = await outcomeOf(() => recovery.backward(now));
            break;
          case 'completed':
            return now.result;
          case 'failed':
            throw now.failure;
          case 'ended-elsewhere':
            return recovery.endedElsewhere(now.status);
        }
      }
    } finally {
      saga.flush(true); // the search attributes show how it ended
    }
  }

  /**
   * Steps 1–3, backward recovery's side of the pivot. A stop (a cancel, the deadline, a Temporal
   * cancellation) or a failure goes to the recovery, which decides from the row.
   */
  private async beforePivot(): Promise<Outcome> {
    const { saga } = this;
    try {
      // A stop (a cancel, the deadline, a Temporal cancellation) takes effect between the steps (`step`).
      if (
        (await this.createOrder()) === 'past-pivot' ||
        (await this.reserveInventory()) === 'past-pivot' ||
        (await this.holdPayment()) === 'past-pivot'
      )
        return { kind: 'forward' };
      // A cancel that arrived while a non-cancellable step ran still wins before the pivot.
      await saga.recordQueuedCancels();
      if (saga.stopRequested()) return this.recovery.afterStop(new CancelledFailure(saga.stopReason()));
      return { kind: 'forward' };
    } catch (err) {
      return this.recovery.afterStop(err);
    }
  }

  /**
   * Step 4, the pivot, then steps 5 (the capture, authorization era) and 6: forward only. A refused
   * shipment (nothing shipped) is the last way back.
   */
  private async fromPivot(): Promise<Outcome> {
    this.saga.enter({ name: 'pivot' });
    try {
      await this.createShipment();
    } catch (err) {
      return this.recovery.shipmentFailed(err);
    }
    const { saga } = this;
    saga.enter({ name: 'shipped' });
    await saga.recordQueuedCancels(); // sent while the shipment ran: the row refuses them now
    saga.compensations.length = 0;
    saga.seen('SHIPPED'); // the shipment's own transaction moved the row
    if (this.flow === 'authorization') await this.capturePayment();
    if (await this.sendConfirmation())
      saga.seen('COMPLETED'); // the confirmation's own transaction completed the order
    else await saga.status({ to: 'COMPLETED' });
    // A message handler still running gets its answer first; none running (the usual case): no wait.
    if (!allHandlersFinished()) await saga.condition(allHandlersFinished);
    const { status, reason } = saga.state;
    return { kind: 'completed', result: { orderId: saga.orderId, status, ...(reason ? { reason } : {}) } };
  }

  // ---- The steps ------------------------------------------------------------------------------

  /**
   * 1. The order row, PENDING: the semantic lock, owned by this run. Key: the order ID (a second
   * create finds the row: ended → this run stops; open with the same contents → this run owns it,
   * and goes on from where the row stands). Registers the release and the refund before the
   * reservation runs: a run that takes over an order cannot know whether it was charged, so its
   * backward recovery always asks the provider (the refund closes the key when nothing was charged).
   */
  private async createOrder(): Promise<StepEnd> {
    const { saga } = this;
    const summary = `create order ${saga.orderId} (PENDING)`;
    // Not cancellable: once sent, the row exists, so a cancel compensates it.
    const created = await this.step('createOrder', () =>
      saga.actLocalFirst(orderOpts, 'createOrder', summary, saga.order),
    );
    if (created.outcome === 'settled') throw endedElsewhere(created.status);
    if (created.cancel) saga.cancel = created.cancel; // a cancel recorded before this run took the order over
    this.flow = created.paymentFlow; // the row's era: a charge-era order keeps the charge path
    saga.register('releaseInventory', () =>
      saga.act(
        compensationOpts(saga.cfg.compensationRetryMaxMs),
        'releaseInventory',
        `compensate: release ${saga.lines}`,
        {
          orderId: saga.orderId,
        },
      ),
    );
    if (this.flow === 'charge') this.charge.registerRefund();
    else this.auth.registerVoid();
    if (created.outcome !== 'owned') return 'next';
    // An open order this run took over (a Reset, a new start after a Terminate): the row says where
    // it is. An escalation the old run left counts as the operator's retry, from where it stood; one
    // made at the pivot (from CHARGED) goes back to the pivot, never backward.
    saga.seen(created.status);
    let status = created.status;
    if (status === 'NEEDS_ATTENTION') {
      // A resolve a person gave the run that escalated, not yet applied, is applied here (recovery.ts).
      const left = await this.recovery.answerLeft({
        ...(created.attentionFrom ? { from: created.attentionFrom } : {}),
        ...(created.attentionStep ? { step: created.attentionStep } : {}),
        ...(created.resolve ? { resolve: created.resolve } : {}),
      });
      if (left.action === 'charge-failed') throw chargeFailedByOperator(saga.orderId);
      status = left.status;
    }
    const pastPivot =
      isPastPivot(status) || (created.status === 'NEEDS_ATTENTION' && escalatedForward(created.attentionFrom));
    return pastPivot ? 'past-pivot' : 'next';
  }

  /** 2. Reserve the stock: optimistic (CAS), else the serial lane. Key: (order ID, SKU). Compensation: release (registered in 1). */
  private async reserveInventory(): Promise<StepEnd> {
    // Not cancellable: its release must never run before a late commit of the reservation.
    const status = await this.step('reserveInventory', () => this.reserve());
    this.saga.seen(status); // the reservation's own transaction moved the row (or found it further along)
    return isPastPivot(status) ? 'past-pivot' : 'next';
  }

  /**
   * 3. Authorize: a hold for the order's total (authorization-protocol.ts). Key: `<orderId>:authorize`.
   * The saga's one round trip on the happy path (a regular activity): the workflow task ends with it,
   * so the early answer (reserved) goes out, and a cancel sent as a Signal or a Temporal cancellation
   * during steps 1–3 is read before the shipment (docs/saga.md#round-trips-which-activities-are-local-and-why).
   * Compensation: the void (registered in 1). A charge-era order is charged instead (charge-protocol.ts,
   * key `<orderId>:charge`, compensation the refund).
   */
  private async holdPayment(): Promise<StepEnd> {
    const status =
      this.flow === 'charge'
        ? await this.step('chargePayment', () => this.charge.charge())
        : await this.step('authorizePayment', () => this.auth.authorize());
    this.saga.seen(status);
    return isPastPivot(status) ? 'past-pivot' : 'next';
  }

  /**
   * 4. The pivot: ship (the row moves to SHIPPED, the lines to SOLD, in one transaction). Key: the order
   * ID (the tracking number derives from it). A rejection means nothing shipped (the run turns back:
   * `Recovery.shipmentFailed`), and so does a cancel recorded before it or a row another run
   * compensated; anything else goes forward (`forwardStep`), and nothing ever compensates it.
   */
  private async createShipment(): Promise<void> {
    const { saga } = this;
    const opts = forwardOpts(saga.cfg.forwardRetryLimitMs);
    const nothingShipped = (err: unknown): boolean =>
      failureType(err) === ErrorTypes.ShipmentRejected ||
      recordedCancelIn(err) !== undefined ||
      (failureType(err) === ErrorTypes.OrderStateConflict && conflictStatus(err) === 'COMPENSATING');
    await this.forwardStep('createShipment', nothingShipped, async (byHand) => {
      // Shipped by hand (a person's mark-resolved): the same bookkeeping (lines SOLD, order SHIPPED).
      const summary = byHand
        ? `record the shipment made by hand for ${saga.orderId} (pivot)`
        : `create shipment for ${saga.orderId} (pivot)`;
      const req = { orderId: saga.orderId, byOperator: byHand };
      this.tracking = (await saga.actLocalFirst(opts, 'createShipment', summary, req)).trackingNumber;
    });
  }

  /**
   * 5. Capture the hold, forward only (authorization-protocol.ts): retried within the forward window,
   * inquired by key on a timeout, never compensated; a capture that fails for good, or outlives the
   * window, goes to a person (NEEDS_ATTENTION from SHIPPED: shipped, not yet captured). Key
   * `<orderId>:capture`.
   */
  private async capturePayment(): Promise<void> {
    const status = await this.step('capturePayment', () => this.auth.capture());
    this.saga.seen(status);
  }

  /**
   * 6. Confirm (an outbox row keyed by order and kind; the row moves to COMPLETED), forward only
   * (`forwardStep`). False when a person marked it done by hand: nothing was sent.
   */
  private async sendConfirmation(): Promise<boolean> {
    const { saga } = this;
    const opts = forwardOpts(saga.cfg.forwardRetryLimitMs);
    const summary = `send confirmation for ${saga.orderId}`;
    const req = { orderId: saga.orderId, trackingNumber: this.tracking };
    return this.forwardStep(
      'sendConfirmation',
      () => false,
      async () => {
        await saga.actLocalFirst(opts, 'sendConfirmation', summary, req);
      },
    );
  }

  /**
   * A step at the pivot or after it (the shipment, the confirmation): local first, then retried for the
   * forward window, then escalated to a person; never compensated. An escalation another run left
   * (reset or terminated while it waited) is answered first (`Recovery.answerLeft`: the resolve a
   * person gave it, or else the operator's retry). A step a person marks done by hand (`mark-resolved`)
   * is not tried again: the shipment records the bookkeeping of one made by hand, the confirmation is
   * not sent. `turnsBack`: the failures that mean the step did nothing and the run goes back (thrown
   * as they are). Returns false when the step was done by hand.
   */
  private async forwardStep(
    name: 'createShipment' | 'sendConfirmation',
    turnsBack: (err: unknown) => boolean,
    send: (byHand: boolean) => Promise<void>,
  ): Promise<boolean> {
    const { saga } = this;
    const recordsByHand = name === 'createShipment';
    let byHand = saga.byHand === name;
    if (byHand && !recordsByHand) return false;
    await this.step(name, async () => {
      for (;;) {
        try {
          await send(byHand);
          return;
        } catch (err) {
          if (failureType(err) === SagaFailureTypes.OrderSettled || turnsBack(err)) throw err;
          if (conflictStatus(err) === 'NEEDS_ATTENTION') {
            const left = await this.recovery.answerLeft(escalationIn(err));
            if (escalatedForward(left.status)) {
              byHand ||= saga.byHand === name; // a mark-resolved this run was given stays
              if (byHand && !recordsByHand) return;
              continue;
            }
          }
          // Anything else may have happened, or the row cannot say: never compensate, ask a person.
          const why = `${name} failed ${recordsByHand ? 'at' : 'after'} the pivot: ${failureMessage(err)}`;
          if ((await this.recovery.escalate('forward-step', why, name)) === 'mark-resolved') {
            byHand = true;
            if (!recordsByHand) return;
          }
        }
      }
    });
    return !byHand;
  }

  /** A step: refused before the pivot once a stop was asked for; counts its attempts; records it done. */
  private async step<T>(name: string, fn: () => Promise<T>): Promise<T> {
    const { saga } = this;
    // Steps before the pivot run their activities non-cancellably; a stop takes effect between steps.
    // createOrder runs even then: the run must own the row to settle it.
    if (!pivotAsked(saga.phase) && name !== 'createOrder') {
      await saga.recordQueuedCancels();
      if (saga.stopRequested()) throw new CancelledFailure(saga.stopReason());
    }
    saga.state.step = name;
    saga.state.attempts[name] = (saga.state.attempts[name] ?? 0) + 1;
    saga.refresh();
    const out = await fn();
    saga.state.stepsDone.push(name);
    saga.refresh();
    return out;
  }

  // ---- The reservation in detail --------------------------------------------------------------

  /**
   * Optimistic first; when the SKUs are too contended (the activity says so, or it ran out of CAS
   * attempts), the reservation goes to a serial lane: a task queue whose worker runs one task at a
   * time. Nothing is dropped: the lane retries until it decides (reserved or a business failure).
   * Returns the row's status afterwards.
   */
  private async reserve(): Promise<OrderStatus> {
    const req = { orderId: this.saga.orderId, customerId: this.saga.order.customerId, items: this.saga.order.items };
    let why: string;
    try {
      // Local first (inside the workflow task); a charge-era order's reservation stays a regular
      // activity, so a cancel sent as a Signal meanwhile is read before its charge (docs/decisions.md).
      const summary = `reserve ${this.saga.lines} (CAS)`;
      const r =
        this.flow === 'charge'
          ? await this.saga.act(inventoryOpts, 'reserveInventory', summary, req)
          : await this.saga.actLocalFirst(inventoryOpts, 'reserveInventory', summary, req);
      this.saga.state.attempts.reserveCas = r.attempts;
      if (r.outcome !== 'route-to-lane') return r.status;
      why = r.reason;
    } catch (err) {
      if (failureType(err) !== ErrorTypes.ContentionExhausted) throw err;
      why = failureMessage(err);
    }
    const lane = laneFor(
      this.saga.order.items.map((i) => i.sku),
      this.saga.cfg.inventoryLanes,
    );
    this.saga.state.attempts.reserveLane = (this.saga.state.attempts.reserveLane ?? 0) + 1;
    log.info('reservation sent to the serial lane', { orderId: this.saga.orderId, lane, why });
    // A lane no worker polls must not hold the saga past its deadline.
    const untilDeadline = this.saga.untilDeadline(1_000);
    const r = await this.saga.act(
      {
        ...laneOpts,
        taskQueue: laneTaskQueue(workflowInfo().taskQueue, lane),
        // Its own schedule-to-start bound: a lane task keeps its place in the queue (never sent again).
        scheduleToStartTimeout: untilDeadline,
        scheduleToCloseTimeout: untilDeadline,
      },
      'reserveInventorySerial',
      `reserve ${this.saga.lines} (serial lane ${lane}: ${why})`,
      req,
    );
    if (r.outcome === 'route-to-lane') throw new Error('the serial lane cannot route to itself'); // never happens
    return r.status;
  }
}
