/**
 * Where a saga run stands, and where it goes next: the two small values `OrderSaga.run()` is written
 * in. The phase is the one thing the steps, the recovery, the deadline and the inbox ask about the
 * run's position; each phase of `run()` answers with an outcome, and `run()` alone decides what
 * comes next from it. Workflow code: deterministic.
 */
import { SagaFailureTypes } from '../domain/failures';
import type { OrderResult, OrderStatus } from '../domain/order';
import { failureType, endedElsewhereStatus } from './saga-activities';

/**
 * Where the run stands:
 *  - `before-pivot`: steps 1–3;
 *  - `overdue`: still before the pivot, but the saga deadline has passed: no new charge request goes
 *    out (and the deadline has stopped the steps, unless a charge's outcome was unknown);
 *  - `pivot`: the shipment has been asked for; only its refusal (nothing shipped) can turn the run back;
 *  - `shipped`: past the pivot, forward only;
 *  - `unwinding`: backward recovery has begun, for `reason`: the order ends FAILED or CANCELLED
 *    whatever comes, unless the row turns out to be past the pivot. `shipmentRefused` when a refused
 *    shipment turned the run back (the pivot had been asked for);
 *  - `ended-elsewhere`: another run had ended the order (its row is terminal); this run changes nothing more.
 */
export type Phase =
  | { name: 'before-pivot' }
  | { name: 'overdue' }
  | { name: 'pivot' }
  | { name: 'shipped' }
  | { name: 'unwinding'; reason: string; shipmentRefused: boolean }
  | { name: 'ended-elsewhere' };

/** Has the shipment been asked for (whether or not it was refused since)? */
export const pivotAsked = (phase: Phase): boolean =>
  phase.name === 'pivot' || phase.name === 'shipped' || (phase.name === 'unwinding' && phase.shipmentRefused);

/** The failure type of a backward end that a Temporal cancellation caused: the run ends Canceled. */
export const TEMPORAL_CANCELLATION = 'TemporalCancellation';

/** How a backward recovery ends the order: its status, the reason, and the workflow's failure type. */
export interface Backward {
  reason: string;
  ends: 'FAILED' | 'CANCELLED';
  /** The business reason the workflow fails with (SagaFailureTypes or ErrorTypes), or TEMPORAL_CANCELLATION. */
  failureType: string;
}

/**
 * What a phase of the saga ends with:
 *  - `forward`: on to the pivot (from the steps, or because the row is charged or shipped already);
 *  - `backward`: compensate LIFO and end the order as `Backward` says;
 *  - `completed`: the order is COMPLETED; the run returns `result`;
 *  - `ended-elsewhere`: another run had ended the order (its row is `status`): stop, change nothing;
 *  - `failed`: the run fails with `failure` (a backward end, or a failure no recovery covers).
 */
export type Outcome =
  | { kind: 'forward' }
  | ({ kind: 'backward' } & Backward)
  | { kind: 'completed'; result: OrderResult }
  | { kind: 'ended-elsewhere'; status: OrderStatus }
  | { kind: 'failed'; failure: unknown };

/** A failure that ends a phase: `ended-elsewhere` when it says another run ended the order, else `failed` with it. */
export function ending(err: unknown): Outcome {
  const status = failureType(err) === SagaFailureTypes.OrderSettled ? endedElsewhereStatus(err) : undefined;
  return status ? { kind: 'ended-elsewhere', status } : { kind: 'failed', failure: err };
}
