/**
 * The saga's inbox: the cancel and resolve Signals a person sends, and the answers read back with the
 * `answer` query (workflows/messages.ts says why they are Signals). A cancel is decided in Postgres,
 * not here (activities/order-requests.ts): the handler queues it for the main path, which records it
 * there (client.ts has already, for its own) and learns the decision; the handler refuses at once only
 * what this run itself knows the row refuses (shipped, ended, compensating). A resolve is queued for
 * the main path, which checks it against the ledger. Nothing here issues a command: on replay a Signal
 * can meet the workflow's code at another point among the activity completions of its workflow task
 * than it did in the run (docs/decisions.md), and a command from a handler would then be out of place.
 */
import { setHandler } from '@temporalio/workflow';
import { isPastPivot, isTerminal, RESOLVE_ACTIONS_FOR } from '../domain/order';
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
import type { Phase } from './saga-phase';

/** Answers kept for the `answer` query. */
const ANSWERS_KEPT = 50;

/** What the inbox reads of the saga to answer or refuse a request. */
export interface SagaView {
  readonly orderId: string;
  snapshot(): SagaState;
  /** Where the run stands (workflows/saga-phase.ts). */
  phase(): Phase;
  /** The cancel recorded on the order row, as this run knows it. */
  cancel(): { requestId: string; reason: string } | undefined;
}

export interface Resolution {
  requestId: string;
  action: ResolveAction;
  note?: string;
  reference?: string;
}

/** A cancel Signal waiting for the main path to record it in Postgres. */
export interface QueuedCancel {
  requestId: string;
  reason: string;
}

export class SagaInbox {
  /** Cancels sent as Signals, not yet recorded by the main path (`nextCancel`, then `cancelDecided`). */
  private readonly queued: QueuedCancel[] = [];
  /** Cancels Postgres accepted: their answer follows the order (accepted once it ends CANCELLED). */
  private readonly acceptedCancels = new Set<string>();
  /** The resolve waiting for the main path, which answers it with `answerResolve` (until then it is pending). */
  resolution: Resolution | undefined;
  /**
   * A resolve the order row holds for an escalation another run made (`carry`): the main path checks
   * and applies it, then answers it (`answerCarried`). Its Signal, reapplied by a Reset, is the same request.
   */
  private carried: Resolution | undefined;
  private readonly answers = new Map<string, { refused?: string }>();
  /** Names requests sent without an ID (a Signal from the Web UI). */
  private requestSeq = 0;

  constructor(private readonly saga: SagaView) {}

  listen(): void {
    setHandler(answerQuery, (requestId) => this.answerTo(requestId));
    setHandler(cancelSignal, (req) => this.cancel(req));
    setHandler(resolveSignal, (req) => this.resolve(req));
  }

  /** Is a cancel Signal waiting to be recorded? (The main path wakes on it.) */
  hasQueuedCancel(): boolean {
    return this.queued.length > 0;
  }

  /** The next cancel Signal to record in Postgres, if any. */
  nextCancel(): QueuedCancel | undefined {
    return this.queued[0];
  }

  /** Postgres's decision on the cancel `nextCancel` gave: its answer from now on. */
  cancelDecided(requestId: string, refused?: string): void {
    this.queued.splice(
      this.queued.findIndex((q) => q.requestId === requestId),
      1,
    );
    if (refused !== undefined) this.answered(requestId, refused);
    else this.acceptedCancels.add(requestId);
  }

  /** The main path's answer to the recorded resolve: applied, or refused and why. */
  answerResolve(refused?: string): void {
    if (!this.resolution) return;
    this.answered(this.resolution.requestId, refused);
    this.resolution = undefined;
  }

  /**
   * A resolve recorded in Postgres for the escalation this run found on the row: pending until the
   * main path answers it. Postgres's record wins over an answer this run gave its Signal (a Signal a
   * Reset reapplied before the run knew of the escalation is refused as "nothing to resolve").
   */
  carry(resolution: Resolution): void {
    this.answers.delete(resolution.requestId);
    this.carried = resolution;
  }

  /** The main path's answer to the carried resolve: applied, or refused and why. */
  answerCarried(refused?: string): void {
    if (!this.carried) return;
    this.answered(this.carried.requestId, refused);
    this.carried = undefined;
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
    const phase = saga.phase().name;
    const given = this.answers.get(requestId);
    const accepted = (): RequestAnswer => ({ requestId, outcome: 'accepted', state: saga.snapshot() });
    if (given)
      return given.refused !== undefined ? { requestId, outcome: 'refused', message: given.refused } : accepted();
    if (this.acceptedCancels.has(requestId) || requestId === saga.cancel()?.requestId) {
      const { orderId } = saga;
      const { status } = saga.snapshot();
      // Accepted in Postgres: the order will not ship. It ends CANCELLED (or waits for a person while
      // compensating); one another run had ended, or that ended otherwise, tells the customer so.
      if (status === 'CANCELLED') return accepted();
      if (phase === 'ended-elsewhere')
        return {
          requestId,
          outcome: 'refused',
          message: `order ${orderId} was already ${status}: ended by another run; the cancel changed nothing`,
        };
      if (isTerminal(status))
        return {
          requestId,
          outcome: 'refused',
          message: `order ${orderId} ended ${status} before the cancel could apply`,
        };
      if (status === 'NEEDS_ATTENTION' && phase === 'unwinding') return accepted();
      return { requestId, outcome: 'pending' };
    }
    if (this.queued.some((q) => q.requestId === requestId)) return { requestId, outcome: 'pending' };
    if (requestId === this.carried?.requestId) return { requestId, outcome: 'pending' };
    if (requestId === this.resolution?.requestId)
      return phase === 'ended-elsewhere' ? accepted() : { requestId, outcome: 'pending' };
    return undefined;
  }

  /** Queues the cancel for the main path to record, or refuses it now. */
  private cancel(req: CancelRequest | string): void {
    const { requestId: sent, reason } = typeof req === 'string' ? { requestId: undefined, reason: req } : (req ?? {});
    const requestId = this.requestIdOf(sent);
    // The same request again
    if (this.answers.has(requestId) || this.acceptedCancels.has(requestId)) return;
    if (this.queued.some((q) => q.requestId === requestId)) return;
    try {
      this.validateCancel(reason);
    } catch (err) {
      return this.answered(requestId, (err as Error).message);
    }
    // Compensating for a cancel already recorded on the order: this one is the same promise.
    if (this.saga.phase().name === 'unwinding' && this.saga.cancel() !== undefined) {
      this.acceptedCancels.add(requestId);
      return;
    }
    this.queued.push({ requestId, reason: reason || 'cancelled' });
  }

  /**
   * A cancel without a reason (a Signal from the Web UI with no input) is one: `cancelled`. Refused
   * here only where this run knows the row refuses it too: past the pivot, ended, compensating.
   */
  private validateCancel(reason: unknown): asserts reason is string | undefined | null {
    const { orderId } = this.saga;
    const { status } = this.saga.snapshot();
    const phase = this.saga.phase();
    if (reason !== undefined && reason !== null && (typeof reason !== 'string' || reason.length > 500))
      throw new Error('reason must be a string of at most 500 characters');
    if (phase.name === 'shipped' || isPastPivot(status))
      throw new Error(`order ${orderId} has reached the shipment (the pivot); it can only move forward`);
    if (isTerminal(status)) throw new Error(`order ${orderId} is already ${status}`);
    if (phase.name === 'unwinding' && this.saga.cancel() === undefined)
      throw new Error(
        `order ${orderId} is already being compensated (${phase.reason}); there is nothing left to cancel`,
      );
  }

  /** Records the resolve, or refuses it now. */
  private resolve(req: ResolveRequest): void {
    const { action, note, reference, requestId: sent } = req ?? {};
    const requestId = this.requestIdOf(sent);
    // The same request again (a Reset reapplies Signals; the row may have carried it in already)
    if (
      this.answers.has(requestId) ||
      requestId === this.resolution?.requestId ||
      requestId === this.carried?.requestId
    )
      return;
    try {
      this.validateResolve(action, note, reference);
    } catch (err) {
      return this.answered(requestId, (err as Error).message);
    }
    this.resolution = {
      requestId,
      action,
      ...(note !== undefined ? { note } : {}),
      ...(reference !== undefined ? { reference } : {}),
    };
  }

  private validateResolve(action: unknown, note: unknown, reference: unknown): void {
    const { orderId } = this.saga;
    const { status, awaiting } = this.saga.snapshot();
    if (note !== undefined && (typeof note !== 'string' || note.length > 500))
      throw new Error('note must be a string of at most 500 characters');
    if (reference !== undefined && (typeof reference !== 'string' || reference.length > 200))
      throw new Error('reference must be a string of at most 200 characters');
    if (this.resolution !== undefined) throw new Error('another resolve is being applied');
    if (!awaiting) throw new Error(`order ${orderId} is ${status}; there is nothing to resolve`);
    const allowed = RESOLVE_ACTIONS_FOR[awaiting];
    if (!allowed.includes(action as ResolveAction)) {
      throw new Error(`action must be one of ${allowed.join(', ')} while awaiting ${awaiting}`);
    }
    if (action === 'settled-elsewhere' && (typeof reference !== 'string' || !reference.trim()))
      throw new Error('reference: settled-elsewhere needs a reference to where it was settled (--reference)');
  }
}
