/**
 * The saga's inbox: the cancel and resolve Signals a person sends, and the answers read back with the
 * `answer` query (workflows/messages.ts says why they are Signals). The handlers only record a
 * request, or refuse it at once when the saga's state rules it out; the saga's main path acts on what
 * was recorded and gives the answer. Nothing here issues a command: on replay a Signal can meet the
 * workflow's code at another point among the activity completions of its workflow task than it did in
 * the run (docs/decisions.md), and a command from a handler would then be out of place.
 */
import { setHandler } from '@temporalio/workflow';
import {
  answerQuery,
  cancelSignal,
  resolveSignal,
  type CancelRequest,
  type RequestAnswer,
  type ResolveAction,
  type ResolveRequest,
  type SagaState,
} from './messages';
import { isFinal, PAST_PIVOT } from './saga-activities';

/** Answers kept for the `answer` query. */
const ANSWERS_KEPT = 50;

/** What the inbox reads of the saga to accept or refuse a request. */
export interface SagaView {
  readonly orderId: string;
  snapshot(): SagaState;
  pivotStarted(): boolean;
  /** Backward recovery has begun, for this reason. */
  unwinding(): string | undefined;
  /** Another run had already settled the order. */
  settledElsewhere(): boolean;
}

export interface Resolution {
  requestId: string;
  action: ResolveAction;
  note?: string;
}

export class SagaInbox {
  /** A cancel was recorded: the main path acts on it, or refuses it (`refuseCancel`). */
  cancelReason: string | undefined;
  private cancelRequestId: string | undefined;
  private cancelRefused: string | undefined;
  /** The resolve waiting for the main path, which answers it with `answerResolve` (until then it is pending). */
  resolution: Resolution | undefined;
  private readonly answers = new Map<string, { refused?: string }>();
  /** Names requests sent without an ID (a Signal from the Web UI). */
  private requestSeq = 0;

  constructor(private readonly saga: SagaView) {}

  listen(): void {
    setHandler(answerQuery, (requestId) => this.answerTo(requestId));
    setHandler(cancelSignal, (req) => this.cancel(req));
    setHandler(resolveSignal, (req) => this.resolve(req));
  }

  /** The main path's no to a recorded cancel (the row is past the pivot). */
  refuseCancel(message: string): void {
    if (this.cancelReason !== undefined && this.cancelRefused === undefined) this.cancelRefused = message;
  }

  /** The main path's answer to the recorded resolve: applied, or refused and why. */
  answerResolve(refused?: string): void {
    if (!this.resolution) return;
    this.answered(this.resolution.requestId, refused);
    this.resolution = undefined;
  }

  /** A request's ID as sent, or one made up for a request sent without it. */
  private requestIdOf(requestId: unknown): string {
    return typeof requestId === 'string' && requestId ? requestId.slice(0, 200) : `signal-${++this.requestSeq}`;
  }

  private answered(requestId: string, refused?: string): void {
    this.answers.set(requestId, refused !== undefined ? { refused } : {});
    for (const key of this.answers.keys()) {
      if (this.answers.size <= ANSWERS_KEPT) break;
      this.answers.delete(key);
    }
  }

  /** The answer to one cancel or resolve; undefined when the saga has not seen it. */
  private answerTo(requestId: string): RequestAnswer | undefined {
    const { saga } = this;
    const given = this.answers.get(requestId);
    const accepted = (): RequestAnswer => ({ requestId, outcome: 'accepted', state: saga.snapshot() });
    if (given)
      return given.refused !== undefined ? { requestId, outcome: 'refused', message: given.refused } : accepted();
    if (requestId === this.cancelRequestId) {
      if (this.cancelRefused !== undefined) return { requestId, outcome: 'refused', message: this.cancelRefused };
      const { orderId } = saga;
      const { status } = saga.snapshot();
      // Accepted means the order ends CANCELLED (or is compensating for it, waiting for a person).
      // An order another run had settled, or that ended otherwise, tells the customer so.
      if (status === 'CANCELLED') return accepted();
      if (saga.settledElsewhere())
        return {
          requestId,
          outcome: 'refused',
          message: `order ${orderId} was already ${status}: settled by another run; the cancel changed nothing`,
        };
      if (isFinal(status))
        return {
          requestId,
          outcome: 'refused',
          message: `order ${orderId} ended ${status} before the cancel could apply`,
        };
      if (status === 'NEEDS_ATTENTION' && saga.unwinding() !== undefined) return accepted();
      return { requestId, outcome: 'pending' };
    }
    if (requestId === this.resolution?.requestId)
      return saga.settledElsewhere() ? accepted() : { requestId, outcome: 'pending' };
    return undefined;
  }

  /** Records the cancel, or refuses it now. */
  private cancel(req: CancelRequest | string): void {
    const { requestId: sent, reason } = typeof req === 'string' ? { requestId: undefined, reason: req } : (req ?? {});
    const requestId = this.requestIdOf(sent);
    if (this.answers.has(requestId) || requestId === this.cancelRequestId) return; // the same request again
    try {
      this.validateCancel(reason);
    } catch (err) {
      return this.answered(requestId, (err as Error).message);
    }
    this.cancelReason = reason || 'cancelled';
    this.cancelRequestId = requestId;
  }

  /** A cancel without a reason (a Signal from the Web UI with no input) is one: `cancelled`. */
  private validateCancel(reason: unknown): asserts reason is string | undefined | null {
    const { orderId } = this.saga;
    const { status } = this.saga.snapshot();
    const unwinding = this.saga.unwinding();
    if (reason !== undefined && reason !== null && (typeof reason !== 'string' || reason.length > 500))
      throw new Error('reason must be a string of at most 500 characters');
    if (this.saga.pivotStarted() || PAST_PIVOT.includes(status))
      throw new Error(`order ${orderId} has reached the shipment (the pivot); it can only move forward`);
    if (isFinal(status)) throw new Error(`order ${orderId} is already ${status}`);
    if (this.cancelReason !== undefined) throw new Error(`order ${orderId} is already being cancelled`);
    if (unwinding !== undefined)
      throw new Error(`order ${orderId} is already being compensated (${unwinding}); there is nothing left to cancel`);
  }

  /** Records the resolve, or refuses it now. */
  private resolve(req: ResolveRequest): void {
    const { action, note, requestId: sent } = req ?? {};
    const requestId = this.requestIdOf(sent);
    if (this.answers.has(requestId) || requestId === this.resolution?.requestId) return; // the same request again
    try {
      this.validateResolve(action, note);
    } catch (err) {
      return this.answered(requestId, (err as Error).message);
    }
    this.resolution = { requestId, action, ...(note !== undefined ? { note } : {}) };
  }

  private validateResolve(action: unknown, note: unknown): void {
    const { orderId } = this.saga;
    const { status, awaiting } = this.saga.snapshot();
    if (note !== undefined && (typeof note !== 'string' || note.length > 500))
      throw new Error('note must be a string of at most 500 characters');
    if (this.resolution !== undefined) throw new Error('another resolve is being applied');
    const allowed: Record<NonNullable<SagaState['awaiting']>, ResolveAction[]> = {
      'charge-outcome': ['charge-succeeded', 'charge-failed'],
      compensation: ['retry', 'mark-resolved'],
      'forward-step': ['retry', 'mark-resolved'],
    };
    if (!awaiting) throw new Error(`order ${orderId} is ${status}; there is nothing to resolve`);
    if (!allowed[awaiting].includes(action as ResolveAction)) {
      throw new Error(`action must be one of ${allowed[awaiting].join(', ')} while awaiting ${awaiting}`);
    }
  }
}
