/**
 * Worker Versioning (Worker Deployments): every worker of one build declares the version
 * `order-saga:<build ID>`, and each saga is PINNED to the build that started it. A new build's workers
 * start beside the old ones and receive nothing new until their version is made current, which
 * `makeVersionCurrent` does once their task queues are polled (npm start, the chaos soak, the deploy
 * test and a person deploying all use it). The policy: docs/versioning.md.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Connection } from '@temporalio/client';
import type { WorkerDeploymentVersion } from '@temporalio/common';
import { temporal } from '@temporalio/proto';
import { laneTaskQueue } from '../domain/lanes';

const ROOT = path.resolve(__dirname, '..');

/** The Worker Deployment every order-saga worker belongs to. */
export const DEPLOYMENT_NAME = 'order-saga';

/** How a version is written: `order-saga:0.1.0+1a2b3c4` (as the CLI and the Web UI show it). */
export const versionName = (v: WorkerDeploymentVersion): string => `${v.deploymentName}:${v.buildId}`;

/** The task queues one worker process (createOrderWorkers) polls: the main one and its serial lanes. */
export function orderTaskQueues(taskQueue: string, lanes: number): { workflow: string; activity: string[] } {
  return { workflow: taskQueue, activity: Array.from({ length: lanes }, (_, n) => laneTaskQueue(taskQueue, n)) };
}

const sha = (parts: (string | Buffer)[]): string => {
  const h = createHash('sha256');
  for (const p of parts) h.update(p).update('\0');
  return h.digest('hex');
};

function git(args: string[], root: string): Buffer {
  return execFileSync('git', args, { cwd: root, stdio: ['ignore', 'pipe', 'ignore'], maxBuffer: 256 * 1024 * 1024 });
}

/** Every file under `dir` (recursively), sorted, as root-relative paths. */
function filesUnder(dir: string, root: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir).sort()) {
    const full = path.join(dir, name);
    if (statSync(full).isDirectory()) out.push(...filesUnder(full, root));
    else out.push(path.relative(root, full));
  }
  return out;
}

/**
 * The build ID of the code in `root`:
 *  - `BUILD_ID` when set (a CI pipeline or an image names its builds);
 *  - else `<package version>+<short commit>` (`0.1.0+1a2b3c4`), with `.dirty.<hash of the changes>`
 *    when the work tree differs from the commit (tracked changes and untracked files), so two
 *    different uncommitted builds never share an ID;
 *  - without git (an image built from a copy): `<package version>+wf.<hash of workflows/ and domain/>`,
 *    the code a workflow bundle is made of.
 * A caller that starts several workers (npm start, the chaos soak) computes it once and passes it
 * on as BUILD_ID, so a file edited meanwhile cannot split one deploy into two versions.
 */
export function resolveBuildId(env: NodeJS.ProcessEnv = process.env, root = ROOT): string {
  const given = env.BUILD_ID?.trim();
  if (given) return given;
  const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { version?: string };
  const version = pkg.version ?? '0.0.0';
  try {
    const commit = git(['rev-parse', '--short=7', 'HEAD'], root).toString().trim();
    // Read-only git: what differs from HEAD (tracked) and which files are new (untracked, not ignored).
    const diff = git(['diff', 'HEAD', '--binary', '--no-ext-diff', '--no-color'], root);
    const untracked = git(['ls-files', '--others', '--exclude-standard', '-z'], root)
      .toString()
      .split('\0')
      .filter(Boolean)
      .sort();
    if (diff.length === 0 && untracked.length === 0) return `${version}+${commit}`;
    const contents = untracked.flatMap((f) => {
      try {
        return [f, readFileSync(path.join(root, f))];
      } catch {
        return [f]; // gone since it was listed
      }
    });
    return `${version}+${commit}.dirty.${sha([diff, ...contents]).slice(0, 8)}`;
  } catch {
    const files = ['workflows', 'domain'].flatMap((d) => filesUnder(path.join(root, d), root));
    return `${version}+wf.${sha(files.flatMap((f) => [f, readFileSync(path.join(root, f))])).slice(0, 12)}`;
  }
}

type WorkflowService = Pick<Connection, 'workflowService'>['workflowService'];

const STATUS = { notFound: 5, failedPrecondition: 9, resourceExhausted: 8, aborted: 10, unavailable: 14 } as const;
/** Errors that mean "not yet" while a version registers and its routing propagates. */
const retryable = (err: unknown): boolean =>
  (Object.values(STATUS) as number[]).includes((err as { code?: number }).code ?? -1);

const sameVersion = (a: WorkerDeploymentVersion, b: { deploymentName?: string | null; buildId?: string | null }) =>
  a.deploymentName === b.deploymentName && a.buildId === b.buildId;

export interface MakeCurrentOptions {
  namespace: string;
  version: WorkerDeploymentVersion;
  /** The task queues this version's workers poll (orderTaskQueues): it is made current only once each is registered. */
  taskQueues: { workflow: string; activity: string[] };
  /** How long to wait for the workers' polls and the routing to settle (default 60 s). */
  timeoutMs?: number;
  identity?: string;
  /**
   * Make it current even when the current version polled task queues this one does not (see the
   * server's `ignoreMissingTaskQueues`). Off by default: a missing poller is a broken deploy.
   */
  ignoreMissingTaskQueues?: boolean;
  log?: (line: string) => void;
}

export interface MadeCurrent {
  /** The version that was current before (undefined: none, unversioned workers, or this one already). */
  previous?: WorkerDeploymentVersion;
  /** It was current already (a restart of the same build): nothing changed. */
  alreadyCurrent: boolean;
  /** From the call until every task queue routes to the new version. */
  waitedMs: number;
  /** Of that: until every task queue was registered (polled), then until the server made it current. */
  registeredMs: number;
  currentMs: number;
}

/**
 * Makes `version` the deployment's current version, after its workers have polled every one of its
 * task queues, and returns once each of those task queues routes new work to it. Until then a
 * versioned worker gets no task: new workflows go to the current version (or unversioned workers).
 * Running pinned workflows stay on their own build whatever is current.
 */
export async function makeVersionCurrent(
  connection: { workflowService: WorkflowService },
  opts: MakeCurrentOptions,
): Promise<MadeCurrent> {
  const svc = connection.workflowService;
  const t0 = Date.now();
  const deadline = t0 + (opts.timeoutMs ?? 60_000);
  const { namespace, version } = opts;
  const name = versionName(version);
  const say = opts.log ?? (() => undefined);
  const types = temporal.api.enums.v1.TaskQueueType;
  const expected = [
    { name: opts.taskQueues.workflow, type: types.TASK_QUEUE_TYPE_WORKFLOW },
    ...opts.taskQueues.activity.map((tq) => ({ name: tq, type: types.TASK_QUEUE_TYPE_ACTIVITY })),
  ];
  const late = (what: string, last: Error | undefined): Error =>
    new Error(
      `${name}: ${what} within ${Math.round((Date.now() - t0) / 1000)} s${last ? ` (last: ${last.message})` : ''}`,
    );

  // 1. Registered: the server has seen this version poll each of its task queues.
  let last: Error | undefined;
  for (;;) {
    try {
      // Asked for by name only once the deployment lists it: the server logs an error for each
      // describe of a version it does not know, which would be the first thing npm start shows.
      if (!(await deploymentLists(connection, namespace, version))) throw new Error('not registered yet');
      const d = await svc.describeWorkerDeploymentVersion({ namespace, deploymentVersion: version });
      const seen = new Set((d.workerDeploymentVersionInfo?.taskQueueInfos ?? []).map((q) => `${q.type}/${q.name}`));
      const missing = expected.filter((q) => !seen.has(`${q.type}/${q.name}`));
      if (missing.length === 0) break;
      last = new Error(`not polled yet: ${missing.map((q) => q.name).join(', ')}`);
    } catch (err) {
      if (!retryable(err) && (err as Error).message !== 'not registered yet') throw err;
      last = err as Error;
    }
    if (Date.now() > deadline) throw late('its workers did not poll every task queue', last);
    await sleep(250);
  }

  const registeredMs = Date.now() - t0;

  // 2. Current (the call is refused while the deployment is busy, or the pollers are not counted yet).
  let previous: WorkerDeploymentVersion | undefined;
  for (;;) {
    try {
      const r = await svc.setWorkerDeploymentCurrentVersion({
        namespace,
        deploymentName: version.deploymentName,
        buildId: version.buildId,
        identity: opts.identity ?? 'order-saga deploy',
        ignoreMissingTaskQueues: opts.ignoreMissingTaskQueues ?? false,
      });
      const p = r.previousDeploymentVersion;
      if (p?.buildId) previous = { deploymentName: p.deploymentName ?? version.deploymentName, buildId: p.buildId };
      break;
    } catch (err) {
      if (!retryable(err)) throw err;
      last = err as Error;
    }
    if (Date.now() > deadline) throw late('could not be made current', last);
    await sleep(500);
  }

  const currentMs = Date.now() - t0;

  // 3. Propagated: each task queue routes new work to it (the root partition's routing).
  for (;;) {
    const pending: string[] = [];
    let failed: Error | undefined;
    for (const q of expected) {
      try {
        const d = await svc.describeTaskQueue({ namespace, taskQueue: { name: q.name }, taskQueueType: q.type });
        if (!sameVersion(version, d.versioningInfo?.currentDeploymentVersion ?? {})) pending.push(q.name);
      } catch (err) {
        if (!retryable(err)) throw err;
        failed = err as Error;
        pending.push(q.name);
      }
    }
    if (pending.length === 0) break;
    if (Date.now() > deadline)
      throw late(
        'was made current, but its task queues did not route to it',
        failed ?? new Error(`not routed yet: ${pending.join(', ')}`),
      );
    await sleep(250);
  }
  const waitedMs = Date.now() - t0;
  // The server answers a call that changes nothing with this version as the previous one.
  const alreadyCurrent = previous !== undefined && sameVersion(version, previous);
  if (alreadyCurrent) previous = undefined;
  say(
    `${name} is ${alreadyCurrent ? 'current already' : 'now current'}${previous ? ` (was ${versionName(previous)})` : ''}; its ${expected.length} task queue(s) route to it ` +
      `(polled after ${registeredMs} ms, current after ${currentMs} ms, routed after ${waitedMs} ms)`,
  );
  return { ...(previous ? { previous } : {}), alreadyCurrent, waitedMs, registeredMs, currentMs };
}

/** What the server says of one version: its status and, once it is no longer current, its drainage. */
export interface VersionReport {
  version: string;
  /** INACTIVE, CURRENT, RAMPING, DRAINING, DRAINED (or UNSPECIFIED). */
  status: string;
  /** DRAINING (pinned runs are open) or DRAINED (none left); undefined while it is current. */
  drainage?: string;
  taskQueues: string[];
}

export async function describeVersion(
  connection: { workflowService: WorkflowService },
  namespace: string,
  version: WorkerDeploymentVersion,
): Promise<VersionReport> {
  const d = await connection.workflowService.describeWorkerDeploymentVersion({ namespace, deploymentVersion: version });
  const info = d.workerDeploymentVersionInfo;
  const status = temporal.api.enums.v1.WorkerDeploymentVersionStatus[info?.status ?? 0] ?? 'UNSPECIFIED';
  const drainage = info?.drainageInfo?.status
    ? temporal.api.enums.v1.VersionDrainageStatus[info.drainageInfo.status]
    : undefined;
  return {
    version: versionName(version),
    status: status.replace('WORKER_DEPLOYMENT_VERSION_STATUS_', ''),
    ...(drainage ? { drainage: drainage.replace('VERSION_DRAINAGE_STATUS_', '') } : {}),
    taskQueues: [...new Set((info?.taskQueueInfos ?? []).map((q) => q.name ?? ''))].sort(),
  };
}

/**
 * The version a workflow run is on, from its description (`raw.workflowExecutionInfo.versioningInfo`):
 * `order-saga:<build>` with its behavior (PINNED), or undefined for a run of unversioned workers.
 */
export function runVersion(
  raw: temporal.api.workflowservice.v1.IDescribeWorkflowExecutionResponse,
): { version: string; buildId: string; behavior: string } | undefined {
  const info = raw.workflowExecutionInfo?.versioningInfo;
  const v = info?.deploymentVersion;
  if (!v?.buildId) return undefined;
  const behavior = temporal.api.enums.v1.VersioningBehavior[info?.behavior ?? 0] ?? 'UNSPECIFIED';
  return {
    version: versionName({ deploymentName: v.deploymentName ?? '', buildId: v.buildId }),
    buildId: v.buildId,
    behavior: behavior.replace('VERSIONING_BEHAVIOR_', ''),
  };
}

/** The visibility query of a version's open pinned runs: the one the server's drainage check counts. */
export const openPinnedRunsQuery = (v: WorkerDeploymentVersion): string =>
  `BuildIds = 'pinned:${versionName(v)}' AND ExecutionStatus = 'Running'`;

/** How many runs pinned to `v` are still open (0: nothing left for that build to finish). */
export async function openPinnedRuns(
  connection: { workflowService: WorkflowService },
  namespace: string,
  v: WorkerDeploymentVersion,
): Promise<number> {
  const r = await connection.workflowService.countWorkflowExecutions({ namespace, query: openPinnedRunsQuery(v) });
  return Number(r.count ?? 0);
}

/** Whether the Worker Deployment exists and lists this version (calls that the server never logs as errors). */
async function deploymentLists(
  connection: { workflowService: WorkflowService },
  namespace: string,
  version: WorkerDeploymentVersion,
): Promise<boolean> {
  const svc = connection.workflowService;
  const { workerDeployments } = await svc.listWorkerDeployments({ namespace, pageSize: 1000 });
  if (!(workerDeployments ?? []).some((d) => d.name === version.deploymentName)) return false;
  const d = await svc.describeWorkerDeployment({ namespace, deploymentName: version.deploymentName });
  return (d.workerDeploymentInfo?.versionSummaries ?? []).some((v) => v.deploymentVersion?.buildId === version.buildId);
}
