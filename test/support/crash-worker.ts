/**
 * A worker process for the crash-safety tests: the real worker, except that at CRASH_POINT it writes
 * the file CRASH_MARKER and then hangs, so the test can SIGKILL it at exactly that point.
 *   after-reserve-commit  the reservation has committed; the activity has not completed
 *   after-release-commit  the release has committed; the activity has not completed
 *   workflows-only        no crash point: it runs workflow tasks and their local activities only
 *                         (the test runs the regular activities)
 *   in-lane               it polls the serial lanes too (INVENTORY_LANE_SKUS pins SKUs to them), and
 *                         its first lane task hangs holding its lane, still renewing the lane's lease,
 *                         so the test can SIGSTOP it there
 * (The charge case needs no hook: the provider's hang fault commits and never answers.)
 */
import { writeFileSync } from 'node:fs';
import { NativeConnection, Worker } from '@temporalio/worker';
import { createActivities } from '../../activities';
import { DEFAULT_SAGA_CONFIG } from '../../workflows/saga-config';
import { laneTaskQueue } from '../../domain/lanes';
import { createPool } from '../../db/pool';
import { readConfig } from '../../ops/config';
import { PRELOAD_MODULES, WORKFLOWS_PATH } from '../../ops/workflow-bundle';
import { dataConverterFor, requirePayloadKeys } from '../../platform/payload-codec';
import { createProviderClient } from '../../provider/client';

async function main(): Promise<void> {
  const cfg = readConfig(process.env);
  const point = process.env.CRASH_POINT ?? '';
  const marker = process.env.CRASH_MARKER ?? '';
  const db = createPool(cfg.databaseUrl!);
  let held = false;
  const real = createActivities({
    db,
    provider: createProviderClient({ baseUrl: cfg.providerUrl, apiKey: cfg.providerApiKey, timeoutMs: 10_000 }),
    cas: { laneSkus: cfg.laneSkus },
    // Runs inside the lane (the lock held, its lease renewed), before the commit.
    ...(point === 'in-lane' && {
      reserveLogic: async () => {
        if (held) return;
        held = true;
        writeFileSync(marker, point);
        await new Promise<never>(() => undefined);
      },
    }),
  });
  /** Runs the real activity; at this crash point, marks the file and never completes. */
  const hangAfter =
    <A extends unknown[], R>(at: string, fn: (...args: A) => Promise<R>) =>
    async (...args: A): Promise<R> => {
      const r = await fn(...args);
      if (point === at) {
        writeFileSync(marker, at);
        await new Promise<never>(() => undefined);
      }
      return r;
    };
  const activities = {
    ...real,
    reserveInventory: hangAfter('after-reserve-commit', real.reserveInventory),
    releaseInventory: hangAfter('after-release-commit', real.releaseInventory),
  };
  const connection = await NativeConnection.connect(cfg.temporal.connection);
  const worker = await Worker.create({
    connection,
    dataConverter: dataConverterFor(requirePayloadKeys()),
    taskQueue: cfg.taskQueue,
    ...(process.env.WORKFLOW_BUNDLE
      ? { workflowBundle: { codePath: process.env.WORKFLOW_BUNDLE } }
      : { workflowsPath: WORKFLOWS_PATH, bundlerOptions: { preloadModules: PRELOAD_MODULES } }),
    activities,
    enableNonLocalActivities: point !== 'workflows-only',
  });
  const lanes =
    point === 'in-lane'
      ? await Promise.all(
          Array.from({ length: DEFAULT_SAGA_CONFIG.inventoryLanes }, (_, n) =>
            Worker.create({
              connection,
              dataConverter: dataConverterFor(requirePayloadKeys()),
              taskQueue: laneTaskQueue(cfg.taskQueue, n),
              activities: { reserveInventorySerial: real.reserveInventorySerial },
              maxConcurrentActivityTaskExecutions: 1,
            }),
          ),
        )
      : [];
  process.stdout.write('crash-worker: ready\n');
  await Promise.all([worker, ...lanes].map((w) => w.run()));
}

main().catch((err: Error) => {
  process.stderr.write(`crash-worker: ${err.stack ?? err.message}\n`);
  process.exit(1);
});
