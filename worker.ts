/**
 * The worker: runs the order saga's workflows and activities on the `orders` task queue.
 * The one place that builds the Postgres pool and the provider's HTTP client.
 *   DATABASE_URL=… npx tsx worker.ts      (npm start runs it for you)
 */
import { NativeConnection, Worker } from '@temporalio/worker';
import type { Pool } from 'pg';
import { createActivities } from './activities';
import { createPool } from './db/pool';
import { readConfig, type AppConfig } from './lib/config';
import { createProviderClient } from './provider/client';

export async function createOrderWorker(
  cfg: AppConfig,
  connection: NativeConnection,
  extra: { db?: Pool; workflowBundle?: { code: string } } = {},
): Promise<{ worker: Worker; db: Pool }> {
  if (!cfg.databaseUrl && !extra.db) throw new Error('DATABASE_URL is required');
  const db = extra.db ?? createPool(cfg.databaseUrl!);
  const provider = createProviderClient({ baseUrl: cfg.providerUrl, apiKey: cfg.providerApiKey, timeoutMs: 10_000 });
  const worker = await Worker.create({
    connection,
    namespace: cfg.namespace,
    taskQueue: cfg.taskQueue,
    ...(extra.workflowBundle ? { workflowBundle: extra.workflowBundle } : { workflowsPath: require.resolve('./workflows') }),
    activities: createActivities({ db, provider }),
  });
  return { worker, db };
}

async function main(): Promise<void> {
  const cfg = readConfig();
  const connection = await NativeConnection.connect({ address: cfg.temporalAddress });
  const { worker, db } = await createOrderWorker(cfg, connection);
  process.stdout.write(`worker: polling task queue "${cfg.taskQueue}" on ${cfg.temporalAddress} (namespace ${cfg.namespace})\n`);
  try {
    await worker.run(); // SIGINT/SIGTERM shut it down gracefully (the SDK installs those handlers)
  } finally {
    await db.end();
    await connection.close();
  }
}

if (require.main === module) {
  main().catch((err: Error) => {
    process.stderr.write(`worker: ${err.stack ?? err.message}\n`);
    process.exit(1);
  });
}
