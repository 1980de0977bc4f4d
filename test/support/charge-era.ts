/**
 * The charge era's build: the project as it stood at its last commit before the authorization era
 * (CHARGE_ERA_COMMIT: the saga charged at step 3 and refunded as its compensation). It comes from this
 * repository's own history (`git archive`), extracted once per clone into the temporary folder,
 * with this tree's node_modules (the same dependencies, pinned in package.json then and now). Used by
 * the deploy test (its build A: a worker process of that tree) and by the replay of the charge era's
 * histories (test/fixtures/histories/charge-era, replayed on that tree's workflow bundle).
 *
 * It stays while runs of that build can be open: pinned runs finish on the build that started them
 * (docs/versioning.md), and the charge era's fixtures go with it once no such run is left.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, renameSync, rmSync, symlinkSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { startProcess } from '../../platform/processes';

const ROOT = path.resolve(__dirname, '../..');

/** The last commit of the charge era (the build before "authorize, ship, capture"). */
export const CHARGE_ERA_COMMIT = 'baf7f34ea52d7c94c5fdc39a5670da476cd39a80';
/** The build ID the deploy test gives it. */
export const CHARGE_ERA_BUILD_ID = `0.1.0+${CHARGE_ERA_COMMIT.slice(0, 7)}`;

/** The charge era's tree, extracted once; throws naming the commit when this clone does not hold it. */
export function chargeEraTree(): string {
  // One per clone: its node_modules is a link into this clone's.
  const clone = createHash('sha256').update(ROOT).digest('hex').slice(0, 8);
  const dir = path.join(os.tmpdir(), `order-saga-charge-era-${CHARGE_ERA_COMMIT.slice(0, 12)}-${clone}`);
  if (existsSync(path.join(dir, 'node_modules'))) return dir;
  try {
    execFileSync('git', ['-C', ROOT, 'cat-file', '-e', `${CHARGE_ERA_COMMIT}^{commit}`], { stdio: 'ignore' });
  } catch {
    throw new Error(
      `the charge era's build is commit ${CHARGE_ERA_COMMIT}, which this clone does not hold: fetch the full history (git fetch --unshallow)`,
    );
  }
  // Extracted beside its final place, then renamed: two test files asking at once never see half a tree.
  const part = `${dir}.part-${process.pid}`;
  rmSync(part, { recursive: true, force: true });
  mkdirSync(part, { recursive: true });
  execFileSync('sh', [
    '-c',
    `git -C "$1" archive --format=tar "$2" | tar -x -C "$3"`,
    'sh',
    ROOT,
    CHARGE_ERA_COMMIT,
    part,
  ]);
  symlinkSync(path.join(ROOT, 'node_modules'), path.join(part, 'node_modules'), 'dir');
  try {
    renameSync(part, dir);
  } catch {
    rmSync(part, { recursive: true, force: true }); // another file's extraction won
  }
  return dir;
}

/** The charge era's workflows, to bundle (bundleWorkflows of test/support/temporal-env.ts). */
export const chargeEraWorkflows = (): string => path.join(chargeEraTree(), 'workflows', 'index.ts');

/**
 * A worker process of the charge era's build: its own worker.ts, activities and workflows, on this
 * server and database. Resolves once it polls.
 */
export async function startChargeEraWorker(env: NodeJS.ProcessEnv): Promise<ChildProcess> {
  const root = chargeEraTree();
  const { child } = await startProcess(
    process.execPath,
    ['--import', 'tsx', path.join(root, 'worker.ts')],
    { BUILD_ID: CHARGE_ERA_BUILD_ID, WORKER_METRICS_PORT: '0', TEMPORAL_METRICS_ADDRESS: 'off', ...env },
    /polling task queue/,
    { cwd: root, readyTimeoutMs: 120_000 },
  );
  return child;
}
