/** The real Temporal servers the test files start, and the workflow bundle they share per file. */
import path from 'node:path';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { bundleWorkflowCode, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { devServerExecutable, registerSearchAttributes, testServerExecutable } from '../lib/temporal-servers';
import { CustomerIdKey, NeedsAttentionKey, OrderStatusKey, TotalCentsKey } from '../workflows/search-attributes';

export const quietLogger = { log() {}, trace() {}, debug() {}, info() {}, warn() {}, error() {} };

/** Bundles the workflows once (per test file). */
export const bundleWorkflows = (): Promise<WorkflowBundleWithSourceMap> =>
  bundleWorkflowCode({ workflowsPath: path.resolve(__dirname, '../workflows/index.ts'), logger: quietLogger });

/** The Java time-skipping server (from the cache, or the SDK's download), with the search attributes. */
export async function startTimeSkipping(): Promise<TestWorkflowEnvironment> {
  const executable = testServerExecutable();
  const env = await TestWorkflowEnvironment.createTimeSkipping(executable ? { server: { executable } } : {});
  await registerSearchAttributes(env.connection, env.namespace ?? 'default');
  return env;
}

/** The Temporal CLI's dev server on loopback (in memory), with the search attributes and optionally the Web UI. */
export async function startDevServer(opts: { uiPort?: number } = {}): Promise<TestWorkflowEnvironment> {
  const executable = devServerExecutable();
  return TestWorkflowEnvironment.createLocal({
    server: {
      ...(executable ? { executable } : {}),
      ip: '127.0.0.1',
      ...(opts.uiPort ? { ui: true, uiPort: opts.uiPort } : {}),
      searchAttributes: [OrderStatusKey, CustomerIdKey, NeedsAttentionKey, TotalCentsKey],
      log: { format: 'pretty', level: 'error' },
    },
  });
}
