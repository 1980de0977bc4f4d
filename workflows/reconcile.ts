import { proxyActivities, workflowInfo } from '@temporalio/workflow';
import type { OrderActivities } from '../activities';
import { neverPinned } from './machinery-versioning';
import { DEFAULT_SAGA_CONFIG } from './order-saga';

const { runReconciliation } = proxyActivities<OrderActivities>({
  // Bounded like the sweep's: taken within a minute, each try within 5 min, the run by its Schedule.
  scheduleToStartTimeout: '1m',
  startToCloseTimeout: '5m',
  retry: { initialInterval: '5s', backoffCoefficient: 2, maximumInterval: '2m', maximumAttempts: 10 },
  summary: 'check invariants and sweep for orphans (records findings; never compensates)',
});

/**
 * The reconciliation safety net, run by the `reconcile` Schedule: for when a saga and its
 * compensations both failed. It only reports; a person decides.
 */
export async function reconcileWorkflow(): Promise<Awaited<ReturnType<typeof runReconciliation>>> {
  const info = workflowInfo();
  return runReconciliation({ runId: `${info.workflowId}/${info.runId}`, deadlineMs: DEFAULT_SAGA_CONFIG.deadlineMs });
}
neverPinned(reconcileWorkflow);
