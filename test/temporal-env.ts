/** The real Temporal servers the test files start, and the workflow bundle they share per file. */
import path from 'node:path';
import { inject } from 'vitest';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { bundleWorkflowCode, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import {
  devServerExecutable,
  fileBackedDevServer,
  registerSearchAttributes,
  testServerExecutable,
} from '../lib/temporal-servers';
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

/**
 * The Temporal CLI's dev server on loopback (in memory, or as npm start keeps it in a file), with the
 * search attributes, optionally the Web UI, and optionally dynamic config values.
 */
export async function startDevServer(
  opts: { uiPort?: number; dbFilename?: string; dynamicConfig?: Record<string, unknown> } = {},
): Promise<TestWorkflowEnvironment> {
  const executable = devServerExecutable();
  const file = opts.dbFilename ? fileBackedDevServer(opts.dbFilename) : undefined;
  // --dynamic-config-value KEY=VALUE, the value as JSON.
  const dynamic = Object.entries(opts.dynamicConfig ?? {}).flatMap(([k, v]) => [
    '--dynamic-config-value',
    `${k}=${JSON.stringify(v)}`,
  ]);
  return TestWorkflowEnvironment.createLocal({
    server: {
      ...(executable ? { executable } : {}),
      ...(file ? { dbFilename: file.dbFilename } : {}),
      ...(file || dynamic.length ? { extraArgs: [...(file?.extraArgs ?? []), ...dynamic] } : {}),
      ip: '127.0.0.1',
      ...(opts.uiPort ? { ui: true, uiPort: opts.uiPort } : {}),
      searchAttributes: [OrderStatusKey, CustomerIdKey, NeedsAttentionKey, TotalCentsKey],
      log: { format: 'pretty', level: 'error' },
    },
  });
}

/**
 * The server of the end-to-end tests. Under `npm test`: a dev server of the file's own (with the
 * Web UI on `uiPort`). Under `npm run test:server`: the real Postgres-backed Temporal server the
 * global setup started once, with its standalone Web UI (teardown leaves that server running).
 */
export async function startE2eServer(
  opts: { uiPort?: number } = {},
): Promise<{ env: TestWorkflowEnvironment; uiUrl?: string; real: boolean }> {
  const real = inject('temporalServer');
  if (real)
    return {
      env: await TestWorkflowEnvironment.createFromExistingServer({ address: real.address }),
      uiUrl: real.uiUrl,
      real: true,
    };
  const env = await startDevServer(opts);
  return { env, ...(opts.uiPort ? { uiUrl: `http://127.0.0.1:${opts.uiPort}` } : {}), real: false };
}
