import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import { QueryNames, SignalNames, UpdateNames } from '../domain/names';
import type { Awaiting, OrderStatus } from '../domain/order';

/** What `state` returns: enough to see where a saga is and why, from the CLI or the Web UI. */
export interface SagaState {
  orderId: string;
  status: OrderStatus;
  /** The step running now, or the last one. */
  step: string;
  stepsDone: string[];
  /** Registered compensations, bottom first; they run from the top (LIFO). */
  compensations: string[];
  compensationsRun: string[];
  /** Steps whose outcome is not known yet, for example `charge`. */
  unknowns: string[];
  /** Attempts per step, as reported by the saga (activity retries included for the last attempt). */
  attempts: Record<string, number>;
  pivotPassed: boolean;
  reason?: string;
  /** What an operator can do now with `resolve`, if anything. */
  awaiting?: Awaiting;
}

export const RESOLVE_ACTIONS = [
  'charge-succeeded',
  'charge-failed',
  'retry',
  'mark-resolved',
  'settled-elsewhere',
] as const;
export type ResolveAction = (typeof RESOLVE_ACTIONS)[number];

export const stateQuery = defineQuery<SagaState>(QueryNames.state);

/*
 * Cancel and resolve are Signals, not Updates: a Signal is an event in the history, before the workflow
 * task that reads it, so replay meets it beside the same activity completions as the run did. An
 * Update arrives as a message beside the history, and the SDK rebuilds its place on replay; where it
 * gets that wrong (the Update-ordering bug, sdk-core#1146) every replay of the run fails. The sender
 * names its request with an ID and reads the saga's answer back with the `answer` query.
 */

/**
 * Cancel before the pivot (runs the compensations); refused after it. The Signal only wakes the run:
 * client.ts has decided and recorded the cancel in Postgres before sending it, and a run records one
 * that came without a record (from the Web UI a bare reason string does) before acting on it.
 */
export interface CancelRequest {
  requestId: string;
  reason: string;
}
export const cancelSignal = defineSignal<[CancelRequest | string]>(SignalNames.cancel);
/** Operator action on an UNKNOWN charge or a NEEDS_ATTENTION saga. */
export interface ResolveRequest {
  action: ResolveAction;
  note?: string;
  /** settled-elsewhere: where the money or stock was settled outside the saga (a ticket, a transfer ID). */
  reference?: string;
  /** Names the answer to read back; the Web UI may leave it out. */
  requestId?: string;
}
export const resolveSignal = defineSignal<[ResolveRequest]>(SignalNames.resolve);

/** The saga's answer to one cancel or resolve, by its request ID. */
export type RequestAnswer =
  | { requestId: string; outcome: 'pending' }
  | { requestId: string; outcome: 'accepted'; state: SagaState }
  | { requestId: string; outcome: 'refused'; message: string };
/** undefined: the saga has not seen that request (yet). */
export const answerQuery = defineQuery<RequestAnswer | undefined, [requestId: string]>(QueryNames.answer);

/** The early answer to `place`: the order was validated and its stock reserved, or it was refused (and why). */
export interface Acceptance {
  orderId: string;
  accepted: boolean;
  /** The order's status when the answer was given (RESERVED when accepted). */
  status: OrderStatus | 'ALREADY_SETTLED';
  reason?: string;
}
/**
 * Sent with the start (Update-with-Start): answers once the stock is reserved, or the order is refused.
 * It stays an Update: it arrives with the start, in the first workflow task, before any activity.
 */
export const acceptedUpdate = defineUpdate<Acceptance>(UpdateNames.accepted);
