/**
 * Someone pins a run, with the Web UI's versioning override, to a build no worker runs: nothing moves
 * it but the sweeper, which must see the run stalled and heal it (remove the override, or start it
 * again), also when the order had already settled and only the run's last workflow task was left.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { temporal } from '@temporalio/proto';
import { isTerminal, workflowIdFor } from '../../../domain/order';
import type { ChaosOrder } from '../orders';
import type { PeopleBase } from './base';

/**
 * The override, during the run's authorization or at its last step (then the row may be COMPLETED while the
 * run waits for its last workflow task).
 */
export async function overrideNoBuild(p: PeopleBase, o: ChaosOrder): Promise<void> {
  const id = o.input.orderId;
  if (o.when < 0.5) await p.untilAuthorizing(id);
  else
    for (const until = Date.now() + 20_000; Date.now() < until; await sleep(20)) {
      const s = await p.state(id);
      if (
        s
          ? isTerminal(s.status) || s.step === 'sendConfirmation'
          : !(await p.running(workflowIdFor(id)).catch(() => true))
      )
        break;
    }
  const action = 'pin the run to a build with no workers';
  p.count(action, 'sent');
  p.meddled.add(id);
  const ok = await p.client.workflowService
    .updateWorkflowExecutionOptions({
      namespace: p.client.options.namespace,
      workflowExecution: { workflowId: workflowIdFor(id) },
      workflowExecutionOptions: {
        versioningOverride: {
          pinned: {
            behavior:
              temporal.api.workflow.v1.VersioningOverride.PinnedOverrideBehavior.PINNED_OVERRIDE_BEHAVIOR_PINNED,
            version: { deploymentName: p.stack.version.deploymentName, buildId: 'chaos-no-such-build' },
          },
        },
      },
      updateMask: { paths: ['versioning_override'] },
    })
    .then(
      () => true,
      () => false, // it had closed
    );
  p.count(action, ok ? 'accepted' : 'refused');
}
