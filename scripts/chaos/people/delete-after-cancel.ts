/**
 * `client.ts cancel` in the authorization, then the run's history deleted: the sweeper must start the order
 * again from its row, and that run must honour the cancel recorded there.
 */
import { workflowIdFor } from '../../../domain/order';
import type { ChaosOrder } from '../orders';
import type { PeopleBase } from './base';
import { healedBySweeper } from './terminate';

/**
 * `client.ts cancel` in the authorization, then `temporal workflow delete` of the run (what retention or a
 * lost server file also do): the cancel was recorded in Postgres, so the run the sweeper starts from
 * the row must honour it (the audit holds every accepted cancel to CANCELLED).
 */
export async function deleteAfterCancel(p: PeopleBase, o: ChaosOrder, limitMs: number): Promise<boolean> {
  const id = o.input.orderId;
  await p.untilAuthorizing(id);
  const action = 'delete the history after an accepted cancel';
  p.count(action, 'sent');
  const r = await p.cli(['cancel', id, '--reason', 'chaos: cancelled, then the history was deleted']);
  if (r.code !== 0) {
    p.count(action, 'refused'); // too late (past the pivot): nothing to delete for
    return p.closed(workflowIdFor(id), limitMs);
  }
  p.cancelAccepted.add(id);
  p.meddled.add(id);
  const deleted = await p.client.workflowService
    .deleteWorkflowExecution({
      namespace: p.client.options.namespace,
      workflowExecution: { workflowId: workflowIdFor(id) },
    })
    .then(
      () => true,
      () => false,
    );
  p.count(action, deleted ? 'accepted' : 'refused');
  return healedBySweeper(p, id, deleted, limitMs);
}
