/**
 * The order's outcome, from the client's side. A saga that ends FAILED or CANCELLED after its
 * compensations fails its workflow (so the Web UI's list shows it apart from a completed one): with a
 * benign ApplicationFailure whose type is the business reason and whose details carry the result, or,
 * for a Temporal cancellation, as Canceled. This turns those back into the saga's OrderResult.
 */
import { WorkflowFailedError } from '@temporalio/client';
import { ApplicationFailure, CancelledFailure } from '@temporalio/common';
import { orderIdOf, type OrderResult } from '../domain/order';

const isResult = (v: unknown): v is OrderResult =>
  typeof v === 'object' &&
  v !== null &&
  typeof (v as OrderResult).orderId === 'string' &&
  ['FAILED', 'CANCELLED'].includes((v as OrderResult).status);

/** The OrderResult an ended saga's workflow failure stands for, or undefined for any other failure. */
export function outcomeOf(err: unknown, workflowId: string): OrderResult | undefined {
  if (!(err instanceof WorkflowFailedError)) return undefined;
  const cause = err.cause;
  if (cause instanceof ApplicationFailure && isResult(cause.details?.[0])) return cause.details[0];
  if (cause instanceof CancelledFailure) {
    return {
      orderId: orderIdOf(workflowId) ?? workflowId,
      status: 'CANCELLED',
      reason: 'cancelled by a Temporal cancellation request',
    };
  }
  return undefined;
}

/** Waits for the saga and returns its OrderResult, whether its workflow completed or failed with an outcome. */
export async function orderOutcome(handle: { workflowId: string; result(): Promise<unknown> }): Promise<OrderResult> {
  try {
    return (await handle.result()) as OrderResult;
  } catch (err) {
    const outcome = outcomeOf(err, handle.workflowId);
    if (outcome) return outcome;
    throw err;
  }
}
