/**
 * The saga test environment of one test file: a Temporal server (the Java time-skipping server or the
 * dev server, each with the search attributes and the tests' data converter), the workflow bundle, a
 * pool on the tests' Postgres and, given activities, one worker running them on the file's task queue
 * until stop(). Files that start a saga worker per test take `env` and `bundle` and give no activities.
 * A test file sets it up with `useSagaTestEnv`: started before its tests, stopped after them.
 */
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import type { Pool } from 'pg';
import { afterAll, beforeAll } from 'vitest';
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

export interface SagaTestEnvOptions {
  server: 'timeskip' | 'dev';
  /** The worker's task queue: `saga-<uid>` unless given. */
  taskQueue?: string;
  /** The worker's activities; without them no worker is started. */
  activities?: (ctx: SagaTestContext) => OrderActivities;
}

/**
 * The test file's saga test environment: started in `beforeAll`, then handed to `started` (for the
 * file's own variables and workers); in `afterAll`, `stopping` runs first (the file's own workers),
 * then the environment stops, whatever `stopping` did.
 */
export function useSagaTestEnv(
  opts: SagaTestEnvOptions,
  hooks: { started?: (saga: SagaTestEnv) => unknown; stopping?: () => Promise<void> } = {},
): void {
  let saga: SagaTestEnv | undefined;
  beforeAll(async () => {
    saga = await sagaTestEnv(opts);
    await hooks.started?.(saga);
  });
  afterAll(async () => {
    try {
      await hooks.stopping?.();
    } finally {
      await saga?.stop();
    }
  });
}

export async function sagaTestEnv(opts: SagaTestEnvOptions): Promise<SagaTestEnv> {
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
