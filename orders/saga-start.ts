/**
 * How a saga is started from outside: the options of `client.workflow.start` (or of a
 * WithStartWorkflowOperation) for one order, used by `client.ts place`, the load generator and the
 * chaos soak's people. Only types come from the client SDK: this file is not part of the workflow
 * bundle (workflows/index.ts does not export it), but it sits here beside the saga's search
 * attributes and config, which it uses.
 *
 * The sweeper's restart (activities/sweeper.ts) does not use it: activities/ lies below workflows/, and
 * a restart differs from a placement anyway (its own summary and details, the closed run's config).
 */
import type { WorkflowStartOptions } from '@temporalio/client';
import { WorkflowNames } from '../domain/names';
import { orderSummary, workflowIdFor, type OrderInput } from '../domain/order';
import type * as workflows from '../workflows/index';
import type { orderSaga } from '../workflows/order-saga';
import type { SagaConfig } from '../workflows/saga-config';
import { newOrderSearchAttributes } from '../workflows/search-attributes';

/**
 * The saga's workflow type. `satisfies` has tsc check that every workflow type in domain/names.ts is
 * the name of a function workflows/index.ts exports.
 */
export const ORDER_SAGA = (WorkflowNames satisfies Record<string, keyof typeof workflows>).orderSaga;

/** The ID policies a caller may choose; those it leaves out are the server's defaults. */
export type SagaIdPolicies = Pick<WorkflowStartOptions, 'workflowIdReusePolicy' | 'workflowIdConflictPolicy'>;

export interface SagaStartChoices<P extends SagaIdPolicies> {
  /** The saga's config, its second argument; left out, the saga runs with its defaults. */
  config?: Partial<SagaConfig>;
  /**
   * Put the new order's search attributes (PENDING, customer, total) in the start request, so the
   * order is listed from the start on, before a worker has run its first task, and the saga has one
   * update of them fewer to make. Without them the saga sets the same values with its first update.
   */
  searchAttributesAtStart?: boolean;
  /** How a start meets an existing workflow with this order's ID; each caller says why it sets them. */
  policies?: P;
}

/**
 * The start options of one order's saga: workflow ID `order:<orderId>`, the task queue, the
 * arguments [order] or [order, config], the static summary of domain/order.ts, and what `choices`
 * adds. The returned type carries the policies given, so a WithStartWorkflowOperation (which needs
 * a conflict policy) accepts it.
 */
export function sagaStartOptions<P extends SagaIdPolicies = Record<never, never>>(
  order: OrderInput,
  taskQueue: string,
  choices: SagaStartChoices<P> = {},
): WorkflowStartOptions<typeof orderSaga> & P {
  const { config, searchAttributesAtStart = false, policies } = choices;
  return {
    taskQueue,
    workflowId: workflowIdFor(order.orderId),
    args: config === undefined ? [order] : [order, config],
    ...(policies as P),
    ...(searchAttributesAtStart ? { typedSearchAttributes: newOrderSearchAttributes(order) } : {}),
    staticSummary: orderSummary(order),
  };
}
