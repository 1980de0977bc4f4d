/**
 * An operator pauses a running activity and comes back to unpause it: the sweeper must leave it
 * paused, and the order then ends.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { workflowIdFor } from '../../../domain/order';
import type { ChaosOrder } from '../orders';
import type { PeopleBase } from './base';

/**
 * `temporal activity pause` of the run's first pending activity, unpaused 3 to 33 s later (an
 * operator who paused it and came back). The sweeper must not unpause it; the order then ends.
 */
export async function pauseActivity(p: PeopleBase, o: ChaosOrder): Promise<void> {
  const id = o.input.orderId;
  const action = 'pause an activity, unpause it later';
  const execution = { workflowId: workflowIdFor(id) };
  let activityId: string | undefined;
  for (const until = Date.now() + 20_000; !activityId && Date.now() < until; await sleep(50)) {
    const d = await p.client.workflow
      .getHandle(execution.workflowId)
      .describe()
      .catch(() => undefined);
    if (!d || d.status.name !== 'RUNNING') return;
    activityId = d.raw.pendingActivities?.[0]?.activityId ?? undefined;
  }
  if (!activityId) return;
  p.count(action, 'sent');
  const request = {
    namespace: p.client.options.namespace,
    execution,
    identity: 'chaos: an operator',
    id: activityId,
  };
  const paused = await p.client.workflowService.pauseActivity({ ...request, reason: 'chaos: looking into it' }).then(
    () => true,
    () => false, // it completed meanwhile
  );
  p.count(action, paused ? 'accepted' : 'refused');
  if (!paused) return;
  p.meddled.add(id);
  // Some come back before the sweeper's bound (15 s), some after: those it must have told a person of.
  await sleep(3_000 + o.when * 30_000);
  await p.client.workflowService.unpauseActivity(request).catch(() => undefined);
}
