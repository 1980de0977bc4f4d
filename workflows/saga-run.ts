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
  isCancellation,
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
  actLocalFirst,
  duration,
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

/** A compensation: its name (as the state shows it) and the activity that undoes its step. */
export interface Compensation {
  name: string;
  run: () => Promise<unknown>;
}

/** What the row's status did, as `SagaRun.status` takes it. */
export type StatusChange =
  /** A step's own transaction moved the row (or found it further along): mirror it, write nothing. */
  | { seen: OrderStatus; reason?: string }
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
   * main path runs in the shield): the steps before the pivot read it between them (`stopRequested`).
   */
  private readonly root = CancellationScope.current();
  /** The deadline passed before the pivot, with nothing unknown: the steps before the pivot stop. */
  private deadlineStop = false;
  /**
   * The run's one non-cancellable scope (`shielded`): what runs in it finishes whatever a Temporal
   * cancellation asks. The main path runs in it from start to end (`OrderSaga.run`); one scope for the
   * run rather than a new one per call, since each new scope makes three promises, each run in one two
   * more, and the SDK records a stack trace for every promise.
   */
  private readonly shield = new CancellationScope({ cancellable: false });
  /** Where the run stands: read with `phase`, changed with `enter`. */
  private current: Phase = { name: 'forward' };
  /** The cancel recorded on the order row (Postgres decided it), as this run has learnt of it. */
  cancel: RecordedCancel | undefined;
  /** The cancels and resolves a person sent, and the answers to them. */
  readonly inbox: SagaInbox;
  /**
   * A step after the pivot a person marked done by hand (`mark-resolved`) in an escalation another
   * run left, applied by this run (`Recovery.answerLeft`): it is recorded as done, not run again.
   */
  byHand: 'createShipment' | 'sendConfirmation' | undefined;
  private deadlineTimer: CancellationScope | undefined;
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

  /**
   * Runs `fn` shielded from a Temporal cancellation (as `CancellationScope.nonCancellable` does). On the
   * main path, which runs in the shield already, `fn` is called as it is; a message handler's call
   * (the root scope) enters the shield.
   */
  shielded<T>(fn: () => Promise<T>): Promise<T> {
    return CancellationScope.current() === this.shield ? fn() : this.shield.run(fn);
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
   * The one way the run changes the order's status. `seen` mirrors what a step's own transaction did,
   * at once; `to` and `resume` write the row (not cancellable) and mirror its answer, which may be
   * further along than this run knows. Returns the row's status. Mirroring sets the saga's own view
   * (the `state` query, the current details) and the Web UI's search attributes; it writes nothing.
   */
  status(change: Extract<StatusChange, { seen: OrderStatus }>): OrderStatus;
  status(change: Exclude<StatusChange, { seen: OrderStatus }>): Promise<OrderStatus>;
  status(change: StatusChange): OrderStatus | Promise<OrderStatus> {
    if ('seen' in change) {
      this.mirror(change.seen, change.reason);
      return change.seen;
    }
    if ('resume' in change)
      return this.shielded(() => this.resumeRow(change.resume, change.reason, change.backward ?? false));
    return this.writeRow(change.to, change.reason, change.step);
  }

  private async writeRow(status: OrderStatus, reason: string | undefined, step?: string): Promise<OrderStatus> {
    const write = reason ?? this.state.reason;
    const now = await this.shielded(() =>
      this.act(statusOpts, 'setOrderStatus', `order ${this.orderId} → ${status}`, {
        orderId: this.orderId,
        status,
        reason: write,
        ...(step !== undefined ? { step } : {}),
      }),
    );
    this.mirror(now, now === status ? reason : undefined);
    return now;
  }

  private async resumeRow(status: OrderStatus, reason: string | undefined, backward: boolean): Promise<OrderStatus> {
    const now = await this.act(statusOpts, 'setOrderStatus', `order ${this.orderId} → back from NEEDS_ATTENTION`, {
      orderId: this.orderId,
      status,
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
   * Before the run waits (a round trip to the server, a timer, a condition) and when it ends: the search
   * attributes catch up with the status, in one update, and only when they differ from what they show.
   */
  flush(): void {
    const status = this.state.status;
    if (this.toPublish) {
      this.toPublish = false;
      this.shown = status;
      upsertSearchAttributes(newOrderSearchAttributes(this.order, status));
      return;
    }
    if (status === this.shown) return;
    this.shown = status;
    upsertSearchAttributes([
      { key: OrderStatusKey, value: status },
      { key: NeedsAttentionKey, value: status === 'NEEDS_ATTENTION' },
    ]);
  }

  /** A row that refused NEEDS_ATTENTION: the run is in the needs-attention view all the same. */
  showNeedsAttention(): void {
    this.flush();
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

  /** Whether a cancel sent as a Signal waits to be recorded (`recordQueuedCancels`). */
  get cancelsQueued(): boolean {
    return this.inbox.hasQueuedCancel();
  }

  /**
   * Records in Postgres each cancel that came as a Signal (a Signal only wakes the run; one from
   * client.ts is recorded already, and recording it again returns its first answer), and learns the
   * decision: accepted (the order will not ship) or refused. Shielded from a Temporal cancellation (a
   * cancel already at the row must be learnt). Callers ask `cancelsQueued` first, so the happy path,
   * which asks before every step, makes no scope and no promise for it (awaiting even an undefined
   * makes two).
   */
  recordQueuedCancels(): Promise<void> {
    return this.shielded(() => this.recordEachCancel());
  }

  private async recordEachCancel(): Promise<void> {
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
    return this.cancel !== undefined || this.deadlineStop || this.root.consideredCancelled;
  }
  /** After a cancel or the deadline, no new charge request goes out. */
  stopCharging(): boolean {
    return this.stopRequested() || this.phase.name === 'overdue';
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
   * The global deadline: an in-workflow timer, since a server-side timeout could not compensate.
   * Shielded from a Temporal cancellation; `stopDeadline` cancels it when the saga ends.
   */
  startDeadline(): void {
    const summary = `saga deadline (${duration(this.cfg.deadlineMs)}): an order not shipped by then is compensated`;
    this.deadlineTimer = new CancellationScope({ cancellable: true, parent: this.shield });
    void this.deadlineTimer
      .run(() => sleep(this.cfg.deadlineMs, { summary }))
      .then(
        () => this.deadlinePassed(),
        (err: unknown) => {
          if (!isCancellation(err)) throw err; // cancelled: the saga ended first
        },
      );
  }

  /** The deadline fired: it only marks the run and stops the steps before the pivot, and starts nothing itself. */
  private deadlinePassed(): void {
    if (this.phase.name === 'forward') this.enter({ name: 'overdue' });
    if (!pivotAsked(this.phase) && this.state.unknowns.length === 0 && !isTerminal(this.state.status)) {
      log.warn('saga deadline passed before the pivot; compensating', { orderId: this.orderId });
      this.deadlineStop = true;
    }
  }

  /** The saga has ended: its deadline timer stops, so the timeline shows it only while the saga ran. */
  stopDeadline(): void {
    this.deadlineTimer?.cancel();
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
    const settledElsewhere = (): boolean => this.phase.name === 'settled-elsewhere';
    // Waits are shielded from a Temporal cancellation: the saga's own end answers them.
    await this.shielded(() =>
      condition(() => reserved() || this.phase.name === 'unwinding' || settledElsewhere() || isTerminal(state.status)),
    );
    if (settledElsewhere()) return { orderId, accepted: false, status: 'ALREADY_SETTLED', reason: state.reason };
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
