import { proxyActivities } from '@temporalio/workflow';
import type { OrderActivities } from '../activities';
import type { SweepOptions } from '../activities/sweeper';
import { neverPinned } from './machinery-versioning';

const { sweepOrders } = proxyActivities<OrderActivities>({
  // Every wait is bounded: taken by a worker within a minute (else the run fails and the Schedule's
  // next run starts), a sweep within 5 min, and the run itself by the Schedule's bound (ops/schedules.ts).
  scheduleToStartTimeout: '1m',
  startToCloseTimeout: '5m',
  // It heartbeats per order: a worker that dies mid-sweep is noticed within this, and another goes on.
  heartbeatTimeout: '20s',
  retry: { initialInterval: '1s', backoffCoefficient: 2, maximumInterval: '30s', maximumAttempts: 3 },
  summary: 'sweep: restart stranded orders, heal stalled or failing runs, tell a person the rest (never compensates)',
});

/**
 * The sweeper, run by the `sweep` Schedule: no open order is left without a live run or a person who
 * has been told. Every effect on an order is its saga's; the sweeper only starts, resets or terminates
 * runs and removes versioning overrides.
 */
export async function sweeperWorkflow(
  opts: Partial<SweepOptions> = {},
): Promise<Awaited<ReturnType<typeof sweepOrders>>> {
  return sweepOrders(opts);
}
neverPinned(sweeperWorkflow);
