/**
 * A worker process for the crash-safety tests: the real worker, except that at CRASH_POINT it writes
 * the file CRASH_MARKER and then hangs, so the test can SIGKILL it at exactly that point.
 *   after-reserve-commit  the reservation has committed; the activity has not completed
 *   after-release-commit  the release has committed; the activity has not completed
 *   workflows-only        no crash point: it runs workflow tasks and their local activities only
 *                         (the test runs the regular activities)
 * (The charge case needs no hook: the provider's hang fault commits and never answers.)
 */
import { writeFileSync } from 'node:fs';
import { NativeConnection, Worker } from '@temporalio/worker';
import { createActivities } from '../../activities';
import { createPool } from '../../db/pool';
import { readConfig } from '../../lib/config';
import { dataConverterFor, requirePayloadKeys } from '../../platform/payload-codec';
import { createProviderClient } from '../../provider/client';

async function main(): Promise<void> {
  const cfg = readConfig(process.env);
  const point = process.env.CRASH_POINT ?? '';
  const marker = process.env.CRASH_MARKER ?? '';
  const db = createPool(cfg.databaseUrl!);
  const real = createActivities({
    db,
    provider: createProviderClient({ baseUrl: cfg.providerUrl, apiKey: cfg.providerApiKey, timeoutMs: 10_000 }),
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
    workflowsPath: require.resolve('../../workflows'),
    activities,
    enableNonLocalActivities: point !== 'workflows-only',
  });
  process.stdout.write('crash-worker: ready\n');
  await worker.run();
}

main().catch((err: Error) => {
  process.stderr.write(`crash-worker: ${err.stack ?? err.message}\n`);
  process.exit(1);
});
