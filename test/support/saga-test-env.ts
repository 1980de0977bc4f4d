/**
 * The saga test environment of one test file: a Temporal server (the Java time-skipping server or the
 * dev server, each with the search attributes and the tests' data converter), the workflow bundle, a
 * pool on the tests' Postgres and, given activities, one worker running them on the file's task queue
 * until stop(). Files that start a saga worker per test take `env` and `bundle` and give no activities.
 */
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import type { Pool } from 'pg';
import type { OrderActivities } from '../../activities';
import { testPool, uid } from './helpers';
import { bundleWorkflows, dataConverter, startDevServer, startTimeSkipping } from './temporal-env';

/** What the file's activities are built from. */
export interface SagaTestContext {
  env: TestWorkflowEnvironment;
  db: Pool;
  taskQueue: string;
}

export interface SagaTestEnv extends SagaTestContext {
  bundle: WorkflowBundleWithSourceMap;
  /** The file's worker (today's workflows and the given activities); none without activities. */
  worker: Worker | undefined;
  /** Stops the worker and waits for it, closes the pool, then tears the server down. */
  stop(): Promise<void>;
}

export async function sagaTestEnv(opts: {
  server: 'timeskip' | 'dev';
  /** The worker's task queue: `saga-<uid>` unless given. */
  taskQueue?: string;
  /** The worker's activities; without them no worker is started. */
  activities?: (ctx: SagaTestContext) => OrderActivities;
}): Promise<SagaTestEnv> {
  const taskQueue = opts.taskQueue ?? `saga-${uid()}`;
  const env = opts.server === 'timeskip' ? await startTimeSkipping() : await startDevServer();
  const db = testPool(); // connects on its first query
  try {
    const bundle = await bundleWorkflows();
    const worker = opts.activities
      ? await Worker.create({
          dataConverter: dataConverter(),
          connection: env.nativeConnection,
          taskQueue,
          workflowBundle: bundle,
          activities: opts.activities({ env, db, taskQueue }),
        })
      : undefined;
    const running = worker?.run();
    return {
      env,
      db,
      taskQueue,
      bundle,
      worker,
      stop: async () => {
        worker?.shutdown();
        await running;
        await db.end();
        await env.teardown();
      },
    };
  } catch (err) {
    // Nothing is returned to stop: what was started stops here.
    await db.end().catch(() => undefined);
    await env.teardown().catch(() => undefined);
    throw err;
  }
}
