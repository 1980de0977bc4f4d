/**
 * What the rooms of one saga run share (the steps in order-saga.ts, the charge protocol in
 * charge-protocol.ts, the recovery in recovery.ts): the order, the run's state as the `state` query
 * shows it, its phase, the one way to change the order's status, the compensation list, the cancels
 * and the stop they ask for, the deadline, and the handlers of the run's messages. Workflow code:
 * deterministic.
 */
import {
  CancellationScope,
  condition,
  log,
  setCurrentDetails,
  setHandler,
  sleep,
  upsertSearchAttributes,
  workflowInfo,
  type ActivityOptions,
} from '@temporalio/workflow';
import { isAtPivot, isPastPivot, isTerminal, type OrderInput, type OrderStatus } from '../domain/order';
import type { RecordedCancel } from '../activities/order-lock';
import { currentDetails } from './details';
import { acceptedUpdate, stateQuery, type Acceptance, type SagaState } from './messages';
import {
  act,
  actLocal,
  actLocalFirst,
  recordedCancelIn,
  statusOpts,
  type ActName,
  type Args,
  type Ret,
} from './saga-activities';
import type { SagaConfig } from './saga-config';
import { SagaInbox } from './saga-inbox';
import { pivotAsked, type Phase } from './saga-phase';
import {
  CustomerIdKey,
  NeedsAttentionKey,
  OrderStatusKey,
  TotalCentsKey,
  newOrderSearchAttributes,
} from './search-attributes';

/** The statuses a person acts on: the Web UI's list shows them while the run is in them. */
const PERSON_ACTS_ON: readonly OrderStatus[] = ['UNKNOWN_PAYMENT', 'NEEDS_ATTENTION', 'COMPENSATING'];

/** A compensation: its name (as the state shows it) and the activity that undoes its step. */
export interface Compensation {
  name: string;
  run: () => Promise<unknown>;
}

/** A change of the row's status, as `SagaRun.status` writes it. */
export type StatusChange =
  /** A guarded transition of the row (refused if the row does not allow it); `step`: what an escalation is about. */
  | { to: OrderStatus; reason?: string; step?: string }
  /**
   * Leave NEEDS_ATTENTION for the status the row escalated from (`resume`: where this run thinks it
   * was), or, `backward`, for COMPENSATING (a charge a person said failed).
   */
  | { resume: OrderStatus; reason?: string; backward?: boolean };

/** One run of the saga: what its rooms read and change. The main path alone issues commands through it. */
export class SagaRun {
  readonly orderId: string;
  /** The order's lines, `2×SKU-1, 1×SKU-2`, for the activities' summaries. */
  readonly lines: string;
  readonly state: Omit<SagaState, 'compensations'>;
  /** The one list of compensations, bottom first; they run from the top (LIFO). */
  readonly compensations: Compensation[] = [];
  /**
   * The workflow's root scope, which a Temporal cancellation request cancels. Nothing runs in it (the
   * main path runs non-cancellably, `OrderSaga.run`): the steps before the pivot read it between them
   * (`stopRequested`).
   */
  private readonly root = CancellationScope.current();
  /**
   * When the run began, on the workflow clock: `Date.now()` in a workflow is the recorded time of the
   * current workflow task, the same on every replay, and it never goes back. The deadline counts from it.
   */
  // eslint-disable-next-line no-restricted-properties -- the workflow clock, recorded in the history
  private readonly startedAt = Date.now();
  /** The run has seen the deadline pass before the pivot (`checkDeadline`). */
  private deadlineSeen = false;
  /** The deadline passed before the pivot, with nothing unknown: the steps before the pivot stop. */
  private deadlineStop = false;
  /** Where the run stands: read with `phase`, changed with `enter`. */
  private current: Phase = { name: 'before-pivot' };
  /** The cancel recorded on the order row (Postgres decided it), as this run has learnt of it. */
  cancel: RecordedCancel | undefined;
  /** The cancels and resolves a person sent, and the answers to them. */
  readonly inbox: SagaInbox;
  /**
   * A step after the pivot a person marked done by hand (`mark-resolved`) in an escalation another
   * run left, applied by this run (`Recovery.answerLeft`): it is recorded as done, not run again.
   */
  byHand: 'createShipment' | 'sendConfirmation' | undefined;
  /** The status the Web UI's search attributes show (the next wait brings them to `state.status`). */
  private shown: OrderStatus | undefined;
  /** NeedsAttention was set by hand (the row refused NEEDS_ATTENTION): cleared when the wait is over. */
  private attentionForced = false;
  /** The new order's attributes are still to be set (its start request did not carry them). */
  private toPublish = false;

  constructor(
    readonly order: OrderInput,
    readonly cfg: SagaConfig,
  ) {
    this.orderId = order.orderId;
    this.lines = order.items.map((i) => `${i.qty}×${i.sku}`).join(', ');
    this.inbox = new SagaInbox({
      orderId: this.orderId,
      snapshot: () => this.snapshot(),
      phase: () => this.phase,
      cancel: () => this.cancel,
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

  get phase(): Phase {
    return this.current;
  }

  /** Moves the run to `phase`; past the pivot, the state says so from then on. */
  enter(phase: Phase): void {
    this.current = phase;
    if (phase.name === 'shipped') this.state.pivotPassed = true;
  }

  // ---- The order's status ---------------------------------------------------------------------

  /**
   * What a step's own transaction did to the row (or found it at, further along): the run's view
   * follows it (the `state` query, the current details); nothing is written.
   */
  seen(status: OrderStatus, reason?: string): OrderStatus {
    this.mirror(status, reason);
    return status;
  }

  /**
   * The one way the run changes the order's status: `to` is a guarded transition of the row (refused
   * if the row does not allow it), `resume` leaves NEEDS_ATTENTION. Not cancellable (the main path
   * runs non-cancellably); the run's view follows the row's answer, which may be further along than
   * this run knows. Returns the row's status.
   */
  async status(change: StatusChange): Promise<OrderStatus> {
    if ('to' in change) {
      const { to, reason, step } = change;
      const now = await this.act(statusOpts, 'setOrderStatus', `order ${this.orderId} → ${to}`, {
        orderId: this.orderId,
        status: to,
        reason: reason ?? this.state.reason,
        ...(step !== undefined ? { step } : {}),
      });
      this.mirror(now, now === to ? reason : undefined);
      return now;
    }
    const { resume, reason, backward } = change;
    const now = await this.act(statusOpts, 'setOrderStatus', `order ${this.orderId} → back from NEEDS_ATTENTION`, {
      orderId: this.orderId,
      status: resume,
      ...(reason !== undefined ? { reason } : {}),
      resume: true,
      ...(backward ? { backward } : {}),
    });
    this.mirror(now);
    return this.state.status;
  }

  /**
   * The saga's own view (the `state` query, the current details) changes at once; the Web UI's search
   * attributes at the run's next wait (`flush`): statuses passed within one workflow task (CHARGED,
   * SHIPPED, COMPLETED in the last one) would reach the server together anyway, so they go as one update.
   */
  private mirror(status: OrderStatus, reason?: string): void {
    this.state.status = status;
    if (reason !== undefined) this.state.reason = reason;
    this.refresh();
  }

  /**
   * Before the run waits (a round trip to the server, a timer, a condition) and when it ends (`end`):
   * the search attributes catch up with the status, in one update, only when someone can look at
   * them: at a status a person acts on (UNKNOWN_PAYMENT, NEEDS_ATTENTION, COMPENSATING), when the run
   * leaves one, and at the end. The statuses between (RESERVED, AUTHORIZED, SHIPPED, CAPTURED) are the
   * run's current details and its `state` query, not a visibility write each.
   */
  flush(end = false): void {
    const status = this.state.status;
    if (this.toPublish) {
      this.toPublish = false;
      this.shown = status;
      upsertSearchAttributes(newOrderSearchAttributes(this.order, status));
      return;
    }
    if (status === this.shown) return;
    const shownActedOn = this.shown === undefined || PERSON_ACTS_ON.includes(this.shown);
    if (!end && !shownActedOn && !PERSON_ACTS_ON.includes(status)) return;
    this.shown = status;
    upsertSearchAttributes([
      { key: OrderStatusKey, value: status },
      { key: NeedsAttentionKey, value: status === 'NEEDS_ATTENTION' },
    ]);
  }

  /** A row that refused NEEDS_ATTENTION: the run is in the needs-attention view all the same. */
  showNeedsAttention(): void {
    this.flush(true); // the status it stands in, beside the flag
    upsertSearchAttributes([{ key: NeedsAttentionKey, value: true }]);
    this.attentionForced = true;
  }

  /** The person answered: a NeedsAttention set by hand is cleared at the next update. */
  attentionOver(): void {
    if (!this.attentionForced) return;
    this.attentionForced = false;
    this.shown = undefined; // the next update sets both keys from the status
  }

  // ---- Waits: each lets the search attributes catch up first (the main path's only waits) --------

  act<K extends ActName>(opts: ActivityOptions, name: K, summary: string, ...args: Args<K>): Promise<Ret<K>> {
    this.flush();
    return act(opts, name, summary, ...args);
  }

  /** One local attempt (inside the workflow task, no wait): the caller decides what a failure means. */
  actLocal<K extends ActName>(opts: ActivityOptions, name: K, summary: string, ...args: Args<K>): Promise<Ret<K>> {
    return actLocal(opts, name, summary, ...args);
  }

  /** A local attempt first (inside the workflow task, no wait), then the regular activity. */
  actLocalFirst<K extends ActName>(opts: ActivityOptions, name: K, summary: string, ...args: Args<K>): Promise<Ret<K>> {
    return actLocalFirst(opts, () => this.flush(), name, summary, ...args);
  }

  sleep(ms: number, options: { summary: string }): Promise<void> {
    this.flush();
    return sleep(ms, options);
  }

  condition(fn: () => boolean): Promise<void>;
  condition(fn: () => boolean, timeout: number, options?: { summary: string }): Promise<boolean>;
  condition(fn: () => boolean, timeout?: number, options?: { summary: string }): Promise<void | boolean> {
    this.flush();
    if (timeout === undefined) return condition(fn);
    return options ? condition(fn, timeout, options) : condition(fn, timeout);
  }

  // ---- Compensations, cancels and stops ---------------------------------------------------------

  register(name: string, run: () => Promise<unknown>): void {
    this.compensations.push({ name, run });
  }

  /**
   * Records in Postgres each cancel that came as a Signal (a Signal only wakes the run; one from
   * client.ts is recorded already, and recording it again returns its first answer), and learns the
   * decision: accepted (the order will not ship) or refused. Not cancellable (a cancel already at the
   * row must be learnt). Nothing to do when no Signal waits.
   */
  async recordQueuedCancels(): Promise<void> {
    for (let q = this.inbox.nextCancel(); q !== undefined; q = this.inbox.nextCancel()) {
      const { requestId, reason } = q;
      const decision = await this.act(statusOpts, 'recordCancel', `record the cancel ${requestId} of ${this.orderId}`, {
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
  learnCancel(err: unknown): boolean {
    const cancel = recordedCancelIn(err);
    if (cancel) this.cancel ??= cancel;
    return cancel !== undefined;
  }

  /** A cancel, the deadline or a Temporal cancellation has asked the saga to stop before the pivot. */
  stopRequested(): boolean {
    this.checkDeadline();
    return this.cancel !== undefined || this.deadlineStop || this.root.consideredCancelled;
  }
  /** After a cancel or the deadline, no new charge request goes out. */
  stopCharging(): boolean {
    return this.stopRequested() || this.overdue();
  }
  stopReason(): string {
    return (
      this.cancel?.reason ??
      (this.phase.name === 'overdue' ? 'saga deadline passed' : 'cancelled by a Temporal cancellation request')
    );
  }

  // ---- What the Web UI and the queries show -----------------------------------------------------

  /** What the `state` query returns; the compensations are the one list's names. */
  snapshot(): SagaState {
    return { ...this.state, compensations: this.compensations.map((c) => c.name) };
  }

  /** The run's current details in the Web UI (user metadata), kept up to date with the state. */
  refresh(): void {
    setCurrentDetails(currentDetails(this.order, this.snapshot()));
  }

  /**
   * The new order's search attributes: already set when its start request carried them (client.ts
   * place), else set with the first update (`flush`).
   */
  publishSearchAttributes(): void {
    const given = workflowInfo().typedSearchAttributes;
    const atStart = given.get(OrderStatusKey);
    if (atStart === undefined || given.get(CustomerIdKey) === undefined || given.get(TotalCentsKey) === undefined)
      this.toPublish = true;
    else this.shown = atStart as OrderStatus;
  }

  // ---- The deadline ---------------------------------------------------------------------------

  /**
   * The global deadline, read from the workflow clock (`startedAt`): no timer on the way of an order
   * that meets it. The run reads it before each step and each charge request (`stopRequested`,
   * `stopCharging`); a wait that could outlive it is cut short at it (`untilDeadline`). The first
   * time the clock shows it passed before the pivot the run is overdue: no new money request goes
   * out, and with nothing unknown the steps before the pivot stop.
   */
  private checkDeadline(): void {
    if (this.deadlineSeen || this.current.name !== 'before-pivot') return;
    // eslint-disable-next-line no-restricted-properties -- the workflow clock, the same on every replay
    if (Date.now() - this.startedAt < this.cfg.deadlineMs) return;
    this.deadlineSeen = true;
    this.enter({ name: 'overdue' });
    if (this.state.unknowns.length === 0 && !isTerminal(this.state.status)) {
      log.warn('saga deadline passed before the pivot; compensating', { orderId: this.orderId });
      this.deadlineStop = true;
    }
  }

  /** Whether the deadline has passed before the pivot (the run is overdue). */
  overdue(): boolean {
    this.checkDeadline();
    return this.current.name === 'overdue';
  }

  /** The time left until the deadline, at least `floorMs`: the bound of a wait that must not outlive it. */
  untilDeadline(floorMs = 1): number {
    // eslint-disable-next-line no-restricted-properties -- the workflow clock, the same on every replay
    return Math.max(floorMs, this.cfg.deadlineMs - (Date.now() - this.startedAt));
  }

  // ---- Messages: the state query, the early answer; cancel and resolve are the inbox's ----------
  // The handlers record a request or wait for the main path; they issue no command.

  listen(): void {
    setHandler(stateQuery, () => this.snapshot());
    setHandler(acceptedUpdate, () => this.accepted());
    this.inbox.listen(); // cancel, resolve and their answers
  }

  /** The early answer: reserved (or found already further along), or refused and why. */
  private async accepted(): Promise<Acceptance> {
    const { orderId, state } = this;
    const reserved = (): boolean =>
      state.stepsDone.includes('reserveInventory') ||
      pivotAsked(this.phase) ||
      isAtPivot(state.status) ||
      isPastPivot(state.status);
    const endedElsewhere = (): boolean => this.phase.name === 'ended-elsewhere';
    // Not cancelled by a Temporal cancellation: the saga's own end answers it.
    await CancellationScope.nonCancellable(() =>
      condition(() => reserved() || this.phase.name === 'unwinding' || endedElsewhere() || isTerminal(state.status)),
    );
    if (endedElsewhere()) return { orderId, accepted: false, status: 'ALREADY_SETTLED', reason: state.reason };
    if (reserved()) return { orderId, accepted: true, status: state.status };
    const { phase } = this;
    return {
      orderId,
      accepted: false,
      status: state.status,
      reason: phase.name === 'unwinding' ? phase.reason : state.reason,
    };
  }
}
