/**
 * The machinery that heals orders (the sweeper, reconciliation) is never pinned to a build: a build
 * that is drained and stopped would take every run pinned to it along, and with it all healing. On a
 * versioned worker its runs auto-upgrade (each workflow task and activity goes to the current build);
 * on an unversioned worker (most tests, the time-skipping server) they carry no behaviour at all, since
 * an unversioned worker refuses a workflow that declares one. Workflow code: deterministic.
 */
import { setWorkflowOptions, workflowInfo } from '@temporalio/workflow';

/** Marks `fn` auto-upgrade whenever its run executes on a worker of a Worker Deployment version. */
export function neverPinned<A extends unknown[], R>(fn: (...args: A) => Promise<R>): void {
  // An unversioned worker still names a build (its bundle's checksum), but no deployment.
  const versioned = (): boolean => !!workflowInfo().currentDeploymentVersion?.deploymentName;
  setWorkflowOptions(() => (versioned() ? { versioningBehavior: 'AUTO_UPGRADE' } : {}), fn);
}
