/**
 * The promise count of the saga-overhead section (saga-cost.ts), in a process of its own, which
 * saga-overhead.ts starts after its rounds (`countPromises`). Counting needs a worker in `debugMode`
 * (workflow code in the main thread, where the hook sees it), and such a worker installs the SDK's
 * own promise hook in its process's main thread for good: from then on every promise of the process
 * (the activities', the codec's, the load generator's) costs a stack trace. The process that measures
 * CPU must never run one.
 *
 * Input, from the environment: COUNT_ADDRESS and COUNT_NAMESPACE (the bench's dev server),
 * DATABASE_URL, PROVIDER_URL (the bench provider), COUNT_SKU (the products' prefix), COUNT_TIMES (runs
 * of each workflow, the median kept). Output: one line, `{"saga":N,"like":N}`.
 */
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import { createPool } from '../db/pool';
import { WORKER_TUNING } from '../worker';
import { sandboxPromises } from './saga-cost';
import { benchDataConverter, benchWorkflowActivities, bundleBenchWorkflows, runBenchWorkflow } from './stack';

const need = (name: string): string => {
  const v = process.env[name];
  if (!v) throw new Error(`count-promises: ${name} is not set`);
  return v;
};

async function main(): Promise<void> {
  const address = need('COUNT_ADDRESS');
  const namespace = need('COUNT_NAMESPACE');
  const sku = need('COUNT_SKU');
  const times = Number(need('COUNT_TIMES'));
  if (!Number.isInteger(times) || times < 1) throw new Error(`count-promises: COUNT_TIMES must be a whole number ≥ 1`);
  const db = createPool(need('DATABASE_URL'), { max: 4 });
  const dataConverter = benchDataConverter();
  const native = await NativeConnection.connect({ address });
  const connection = await Connection.connect({ address });
  try {
    const taskQueue = 'bench-saga-count';
    const worker = await Worker.create({
      ...WORKER_TUNING,
      connection: native,
      namespace,
      taskQueue,
      dataConverter,
      debugMode: true,
      activities: benchWorkflowActivities(db, need('PROVIDER_URL')),
      workflowBundle: await bundleBenchWorkflows(dataConverter.failureConverterPath),
    });
    const client = new Client({ connection, namespace, dataConverter });
    let i = 0;
    const counts = await worker.runUntil(async () => ({
      saga: await sandboxPromises(times, () => runBenchWorkflow(client, 'saga', taskQueue, sku, i++)),
      like: await sandboxPromises(times, () => runBenchWorkflow(client, 'like', taskQueue, sku, i++)),
    }));
    process.stdout.write(`${JSON.stringify(counts)}\n`);
  } finally {
    await connection.close();
    await native.close();
    await db.end();
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`count-promises: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
