/**
 * The recovery of the order saga: what a run does when a step before the pivot fails or is stopped,
 * when a refused shipment turns it back, or when it needs a person. It decides from the order row
 * (charged or shipped by another run: forward; else backward), runs the compensations LIFO in a
 * non-cancellable scope, ends the order FAILED or CANCELLED, and escalates to NEEDS_ATTENTION what
 * only a person can settle. Each method answers with an outcome (saga-phase.ts) that
 * `OrderSaga.run()` acts on: nothing here calls back into the steps. Workflow code: deterministic.
 */
import { ApplicationFailureCategory } from '@temporalio/common';
import { allHandlersFinished, ApplicationFailure, CancelledFailure, isCancellation, log } from '@temporalio/workflow';
import { ErrorTypes, SagaFailureTypes } from '../domain/failures';
import { awaitingFrom, isAtPivot, isPastPivot, type OrderResult, type OrderStatus } from '../domain/order';
import type { MoneyPath } from './authorization-protocol';
import { checkAnswer, type Answer } from './charge-protocol';
import type { ResolveAction, SagaState } from './messages';
import {
  conflictStatus,
  escalationIn,
  failureMessage,
  failureType,
  pastPivotStatus,
  recordedCancelIn,
  endedElsewhereStatus,
  type EscalationLeft,
} from './saga-activities';
import type { Resolution } from './saga-inbox';
import { ending, TEMPORAL_CANCELLATION, type Backward, type Outcome } from './saga-phase';
import type { SagaRun } from './saga-run';

/** How many times one run re-reads the row after a refusal before it asks a person. */
const MAX_REDECISIONS = 5;

export class Recovery {
  private redecisions = 0;

  constructor(
    private readonly saga: SagaRun,
    /** The order's money path (charge or authorization era, from its row). */
    private readonly money: () => MoneyPath,
  ) {}

  /**
   * A step before the pivot failed (or a cancel, the deadline or a Temporal cancellation stopped it):
   * `forward` when the row is charged or shipped by another run, else `backward` with how the order ends.
   */
  async afterStop(err: unknown): Promise<Outcome> {
    const { saga } = this;
    // createOrder did not succeed in this run (it runs even after a cancel and cannot be cut off once
    // sent): nothing to compensate, and the row, if any, is not this run's.
    if (saga.state.stepsDone.length === 0) return ending(err);
    if (failureType(err) === SagaFailureTypes.OrderSettled && saga.compensations.length === 0) return ending(err);
    saga.learnCancel(err);
    await saga.recordQueuedCancels();
    // Stopped by a cancel, the deadline or a Temporal cancellation, or refused because a cancel is recorded.
    const cancelled = isCancellation(err) || recordedCancelIn(err) !== undefined;
    const reason = cancelled ? saga.stopReason() : failureMessage(err);
    const ahead = await this.fromRow(err);
    if (ahead === 'forward') return { kind: 'forward' };
    const stopped = cancelled || saga.cancel !== undefined;
    const why = !stopped
      ? (failureType(err) ?? SagaFailureTypes.SagaFailed)
      : saga.cancel !== undefined
        ? SagaFailureTypes.OrderCancelled
        : saga.phase.name === 'overdue'
          ? SagaFailureTypes.DeadlineExceeded
          : TEMPORAL_CANCELLATION;
    return { kind: 'backward', reason, ends: stopped ? 'CANCELLED' : 'FAILED', failureType: why };
  }

  /**
   * The shipment failed: a refusal (nothing shipped) is the last backward way; so is a cancel recorded
   * on the row before the shipment, which the shipment's write refuses.
   */
  shipmentFailed(err: unknown): Outcome {
    const { saga } = this;
    if (failureType(err) === SagaFailureTypes.OrderSettled) return ending(err);
    if (saga.learnCancel(err))
      return {
        kind: 'backward',
        reason: saga.stopReason(),
        ends: 'CANCELLED',
        failureType: SagaFailureTypes.OrderCancelled,
      };
    return {
      kind: 'backward',
      reason: failureMessage(err),
      ends: 'FAILED',
      failureType: failureType(err) ?? SagaFailureTypes.SagaFailed,
    };
  }

  /**
   * A step before the pivot was refused because another run of this order (reset, or terminated and
   * started again) has moved the row on, or a cancel stopped it. Decides from where the row stands:
   * `forward` when the row is charged (and no cancel) or shipped, else `backward`. An escalation that
   * run left is taken as the operator's retry.
   */
  private async fromRow(err: unknown): Promise<'forward' | 'backward'> {
    const { saga } = this;
    for (let e = err; ;) {
      saga.learnCancel(e);
      let status = conflictStatus(e);
      if (failureType(e) !== ErrorTypes.OrderStateConflict || status === undefined) return 'backward';
      // Escalated at or after the pivot (or shipped): never backward, whatever was asked. A resolve a
      // person gave that escalation, not yet applied, is applied now (a later step would not know it).
      const ahead = pastPivotStatus(e);
      const left = escalationIn(e);
      if (ahead === 'NEEDS_ATTENTION' && left.resolve) return this.carryForward((await this.answerLeft(left)).status);
      if (ahead) return this.carryForward(ahead);
      try {
        if (status === 'NEEDS_ATTENTION') {
          const left = await this.answerLeft(escalationIn(e));
          if (left.action === 'charge-failed') return 'backward';
          status = left.status;
        }
        if (status === 'UNKNOWN_PAYMENT' && !saga.stopRequested()) {
          const verdict = await this.money().inquireUntilKnown();
          if (verdict !== 'succeeded') return 'backward';
          status = await saga.status({ to: this.money().held });
        }
      } catch (inner) {
        // The row moved again meanwhile (another run): read it again, a bounded number of times.
        if (failureType(inner) !== ErrorTypes.OrderStateConflict || ++this.redecisions > MAX_REDECISIONS) throw inner;
        e = inner;
        continue;
      }
      if (!isPastPivot(status) && (!isAtPivot(status) || saga.stopRequested())) return 'backward';
      log.warn('order already charged or shipped by another run; carrying on forward', {
        orderId: saga.orderId,
        status,
      });
      saga.seen(status);
      return 'forward';
    }
  }

  /** The row is past the pivot (another run shipped it, or escalated at the pivot): the run goes forward. */
  private carryForward(status: OrderStatus): 'forward' {
    log.warn('the order row is past the pivot; carrying it forward', { orderId: this.saga.orderId, status });
    this.saga.seen(status);
    return 'forward';
  }

  /**
   * Backward recovery: compensate LIFO, then end FAILED or CANCELLED with the reason, and fail the
   * workflow, so the Web UI's list tells the outcome at a glance: a benign ApplicationFailure whose
   * type is the business reason and whose details carry the result (client.ts reads it back), or, for
   * a Temporal cancellation, Canceled. A row found past the pivot meanwhile (another run shipped it)
   * turns the run forward instead.
   */
  async backward({ reason, ends, failureType: why }: Backward): Promise<Outcome> {
    const { saga } = this;
    log.warn('saga failed before the pivot; compensating', { orderId: saga.orderId, reason });
    saga.enter({ name: 'unwinding', reason, shipmentRefused: saga.phase.name === 'pivot' });
    const stopped = await this.compensate(reason);
    if (stopped) return stopped;
    await saga.status({ to: ends, reason });
    await saga.condition(allHandlersFinished);
    const result: OrderResult = { orderId: saga.orderId, status: saga.state.status, reason };
    if (why === TEMPORAL_CANCELLATION) return { kind: 'failed', failure: new CancelledFailure(reason) };
    const failure = ApplicationFailure.create({
      type: why,
      message: `order ${saga.orderId} ${saga.state.status}: ${reason}`,
      nonRetryable: true,
      details: [result],
      category: ApplicationFailureCategory.BENIGN,
    });
    return { kind: 'failed', failure };
  }

  /**
   * Runs the compensations LIFO; undefined once they all ran. If another run has already ended the
   * order (terminal), the compensations still run (each is safe when there is nothing to undo, and
   * never acts on a shipped order), then the run stops: `ended-elsewhere`. A row past the pivot stops them:
   * `forward`.
   */
  private async compensate(reason: string): Promise<Outcome | undefined> {
    const { saga } = this;
    let settledAs: OrderStatus | undefined;
    try {
      await saga.status({ to: 'COMPENSATING', reason });
    } catch (err) {
      settledAs = endedElsewhereStatus(err);
      const ahead = pastPivotStatus(err);
      if (ahead) return { kind: this.carryForward(ahead) };
      if (!settledAs) throw err;
    }
    while (saga.compensations.length > 0) {
      const c = saga.compensations[saga.compensations.length - 1]!;
      saga.state.step = `compensate:${c.name}`;
      saga.refresh();
      try {
        await c.run();
      } catch (err) {
        settledAs = endedElsewhereStatus(err);
        if (settledAs) break; // shipped and settled elsewhere: nothing here may be undone
        const ahead = pastPivotStatus(err);
        if (ahead) return { kind: this.carryForward(ahead) };
        const action = await this.escalate(
          'compensation',
          `compensation ${c.name} failed: ${failureMessage(err)}`,
          c.name,
        );
        if (action === 'retry') continue;
      }
      saga.compensations.pop();
      saga.state.compensationsRun.push(c.name);
      saga.refresh();
    }
    return settledAs ? { kind: 'ended-elsewhere', status: settledAs } : undefined;
  }

  /** Another run ended this order: this run ends at once, with the order's status, and changes nothing more. */
  async endedElsewhere(status: OrderStatus): Promise<OrderResult> {
    const { saga } = this;
    log.warn('order already ended by another run; this run stops', { orderId: saga.orderId, status });
    saga.compensations.length = 0;
    saga.state.step = 'ended by another run';
    saga.enter({ name: 'ended-elsewhere' });
    saga.state.awaiting = undefined; // nothing here is waiting for a person any more
    saga.seen(
      status,
      `order ${saga.orderId} is already ${status}: ended by another run; this run stopped without effects`,
    );
    await saga.condition(allHandlersFinished);
    return { orderId: saga.orderId, status: 'ALREADY_SETTLED', orderStatus: status, reason: saga.state.reason };
  }

  /**
   * The row stands in an escalation this run did not make (the run that waited there was reset,
   * terminated, or lost with its history). A resolve recorded there and not yet applied (a person
   * answered that run) is applied now, checked against the ledger as it would have been there;
   * refused, this run waits for a person as that run would have; without one, the escalation counts
   * as the operator's retry. The run leaves
   * NEEDS_ATTENTION (which spends the resolve) for where the row escalated from, or, after
   * `charge-failed`, for COMPENSATING (the caller then goes backward). A compensation the person
   * settled by hand or elsewhere is not run again.
   */
  async answerLeft(left: EscalationLeft): Promise<{ action: Answer; status: OrderStatus }> {
    const { saga } = this;
    const { state, inbox } = saga;
    let action: Answer = 'retry';
    let reason: string | undefined;
    if (left.resolve) {
      const awaiting = awaitingFrom(left.from, left.step);
      const request = { ...left.resolve, action: left.resolve.action as ResolveAction };
      inbox.carry(request);
      const refused = await checkAnswer(saga, request, awaiting, awaiting === 'compensation' ? left.step : undefined);
      inbox.answerCarried(refused);
      if (!refused) {
        action = request.action;
        const { reference, note } = request;
        log.warn('operator resolved the escalation another run left', { orderId: saga.orderId, action, reference });
        reason = `${state.reason ?? 'the escalation another run left'} (operator: ${action}${reference ? `, reference ${reference}` : ''}${note ? `, ${note}` : ''})`;
        state.reason = reason;
      } else {
        // Refused, as the run it was sent to would have refused it: this run waits for a person in its
        // place (the row stays in NEEDS_ATTENTION), and acts on the answer it gets.
        saga.seen('NEEDS_ATTENTION');
        action = await this.escalate(
          awaiting,
          `the escalation another run left; the resolve ${request.requestId} given to it was refused: ${refused}`,
          left.step,
        );
        reason = state.reason;
      }
      if (awaiting === 'compensation' && left.step && (action === 'mark-resolved' || action === 'settled-elsewhere'))
        this.settledByHand(left.step);
      // At the shipment (from CHARGED) or after it (from SHIPPED): the step is recorded as done by hand.
      if (action === 'mark-resolved' && awaiting === 'forward-step')
        saga.byHand = isAtPivot(left.from) ? 'createShipment' : 'sendConfirmation';
      saga.refresh();
    }
    const status = await saga.status({
      resume: state.status,
      ...(reason !== undefined ? { reason } : {}),
      ...(action === 'charge-failed' ? { backward: true } : {}),
    });
    return { action, status };
  }

  /** A compensation a person did by hand or settled elsewhere: it counts as run, and does not run again. */
  private settledByHand(name: string): void {
    const { saga } = this;
    const at = saga.compensations.findIndex((c) => c.name === name);
    if (at < 0) return;
    saga.compensations.splice(at, 1);
    saga.state.compensationsRun.push(name);
  }

  /**
   * Escalates to NEEDS_ATTENTION and waits for an operator's resolve (an answer is checked against the
   * ledger first, here on the main path). While it waits on an unknown charge before the pivot, a
   * cancel ends the wait: 'cancelled'. `step`: what it is about (the compensation that failed, the
   * shipment, the confirmation), written on the row with the escalation.
   */
  async escalate(awaiting: NonNullable<SagaState['awaiting']>, reason: string, step?: string): Promise<Answer> {
    const { saga } = this;
    const { state, inbox } = saga;
    const previous = state.status;
    state.awaiting = awaiting;
    log.error('ALERT saga needs attention', { orderId: saga.orderId, reason, awaiting });
    try {
      // The row says what the escalation is about, for a run that takes the order over.
      await saga.status({
        to: 'NEEDS_ATTENTION',
        reason,
        step: step ?? (awaiting === 'charge-outcome' ? 'chargePayment' : undefined),
      });
    } catch (err) {
      // A row that cannot take NEEDS_ATTENTION (another run moved it): the run still waits for a
      // person, who sees it in the Web UI (current details, the state query); it never just ends.
      if (failureType(err) !== ErrorTypes.OrderStateConflict || endedElsewhereStatus(err)) throw err;
      log.error('the order row refused NEEDS_ATTENTION; waiting for a person anyway', {
        orderId: saga.orderId,
        error: failureMessage(err),
      });
      state.reason = reason;
      saga.refresh();
      saga.showNeedsAttention(); // it is in the needs-attention view
    }
    const cancellable = awaiting === 'charge-outcome';
    let request: Resolution | undefined;
    for (;;) {
      await saga.condition(
        () => inbox.resolution !== undefined || inbox.hasQueuedCancel() || (cancellable && saga.stopRequested()),
      );
      if (inbox.resolution === undefined && inbox.hasQueuedCancel()) {
        // Postgres decides it: accepted only while the order may still be cancelled (an unknown charge).
        await saga.recordQueuedCancels();
        if (!(cancellable && saga.stopRequested())) continue;
      }
      if (inbox.resolution === undefined) break; // cancelled
      request = inbox.resolution;
      const refused = await checkAnswer(saga, request, awaiting, awaiting === 'compensation' ? step : undefined);
      inbox.answerResolve(refused);
      if (!refused) break;
      request = undefined;
    }
    state.awaiting = undefined;
    saga.attentionOver();
    if (request === undefined) {
      log.warn('cancelled while waiting for a person', { orderId: saga.orderId });
      saga.refresh();
      return 'cancelled';
    }
    const { action, note, reference } = request;
    log.warn('operator resolved', { orderId: saga.orderId, action, note, reference });
    state.reason = `${reason} (operator: ${action}${reference ? `, reference ${reference}` : ''}${note ? `, ${note}` : ''})`;
    saga.refresh();
    if (previous !== 'NEEDS_ATTENTION') {
      // Back to where the row stood when it escalated, which may be further than this run knows; a
      // charge that failed goes backward on the row at once, so a run that replaces this one compensates too.
      await saga.status({ resume: previous, reason: state.reason, backward: action === 'charge-failed' });
    }
    return action;
  }
}
