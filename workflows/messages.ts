import { defineQuery, defineUpdate } from '@temporalio/workflow';
import type { OrderStatus } from '../domain/order';

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
  awaiting?: 'charge-outcome' | 'compensation' | 'forward-step';
}

export const RESOLVE_ACTIONS = ['charge-succeeded', 'charge-failed', 'retry', 'mark-resolved'] as const;
export type ResolveAction = (typeof RESOLVE_ACTIONS)[number];

export const stateQuery = defineQuery<SagaState>('state');
/** Cancel before the pivot (runs the compensations). Refused by its validator after the pivot. */
export const cancelUpdate = defineUpdate<SagaState, [reason: string]>('cancel');
/** Operator action on an UNKNOWN charge or a NEEDS_ATTENTION saga. */
export interface ResolveRequest {
  action: ResolveAction;
  note?: string;
}
export const resolveUpdate = defineUpdate<SagaState, [ResolveRequest]>('resolve');

/** The early answer to `place`: the order was validated and its stock reserved, or it was refused (and why). */
export interface Acceptance {
  orderId: string;
  accepted: boolean;
  /** The order's status when the answer was given (RESERVED when accepted). */
  status: OrderStatus | 'ALREADY_SETTLED';
  reason?: string;
}
/** Sent with the start (Update-with-Start): answers once the stock is reserved, or the order is refused. */
export const acceptedUpdate = defineUpdate<Acceptance>('accepted');
