/**
 * The names Temporal knows this project's workflows and the saga's messages by. Clients, Schedules,
 * the sweeper's restart and the message definitions (workflows/messages.ts) import them from here.
 */

/** Workflow types: the names of the functions workflows/index.ts exports (orders/saga-start.ts checks it). */
export const WorkflowNames = {
  orderSaga: 'orderSaga',
  sweeper: 'sweeperWorkflow',
  reconcile: 'reconcileWorkflow',
} as const;
export type WorkflowName = (typeof WorkflowNames)[keyof typeof WorkflowNames];

/** The saga's Signals. */
export const SignalNames = { cancel: 'cancel', resolve: 'resolve' } as const;
/** The saga's Queries. */
export const QueryNames = { state: 'state', answer: 'answer' } as const;
/** The saga's Updates. */
export const UpdateNames = { accepted: 'accepted' } as const;
