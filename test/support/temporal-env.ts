/** The real Temporal servers the test files start, and the workflow bundle they share per file. */
import { randomBytes } from 'node:crypto';
import { inject } from 'vitest';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { bundleWorkflowCode, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { registerSearchAttributes } from '../../servers/search-attributes';
import {
  startDevServer as startSagaDevServer,
  startTimeSkippingServer,
  type DevServerOptions,
} from '../../servers/temporal-dev';
import { startCodecServer } from '../../ops/codec-server';
import { existingServerOptions } from '../../ops/temporal-connection';
import { workflowBundleOptions, WORKFLOWS_PATH } from '../../ops/workflow-bundle';
import {
  dataConverterFor,
  EncryptionCodec,
  FAILURE_CONVERTER_PATH,
  requirePayloadKeys,
} from '../../platform/payload-codec';

export const quietLogger = { log() {}, trace() {}, debug() {}, info() {}, warn() {}, error() {} };

/** The payload codec and failure converter of every client and worker of the tests (the test key). */
export const dataConverter = () => dataConverterFor(requirePayloadKeys());

/**
 * Bundles the workflows once (per test file) as the workers bundle them (ops/workflow-bundle.ts); another
 * build's workflows (`workflowsPath`) with the failure converter only.
 */
export const bundleWorkflows = (workflowsPath = WORKFLOWS_PATH): Promise<WorkflowBundleWithSourceMap> =>
  bundleWorkflowCode({
    workflowsPath,
    logger: quietLogger,
    ...(workflowsPath === WORKFLOWS_PATH ? workflowBundleOptions() : { failureConverterPath: FAILURE_CONVERTER_PATH }),
  });

/** The Java time-skipping server (from the cache, or the SDK's download), with the search attributes. */
export async function startTimeSkipping(): Promise<TestWorkflowEnvironment> {
  const env = await startTimeSkippingServer({ client: { dataConverter: dataConverter() } });
  await registerSearchAttributes(env.connection, env.namespace ?? 'default');
  return env;
}

/**
 * The Temporal CLI's dev server on loopback (in memory, or as npm start keeps it in a file), with the
 * search attributes, optionally the Web UI, and optionally dynamic config values; the tests' client.
 */
export const startDevServer = (
  opts: Pick<DevServerOptions, 'uiPort' | 'dbFilename' | 'dynamicConfig' | 'codecEndpoint'> = {},
): Promise<TestWorkflowEnvironment> =>
  startSagaDevServer({ ...opts, logLevel: 'error', client: { dataConverter: dataConverter() } });

/**
 * The server of the end-to-end tests. Under `npm test`: a dev server of the file's own (with the
 * Web UI on `uiPort`). Under `npm run test:server`: the real Postgres-backed Temporal server the
 * global setup started once, with its standalone Web UI (teardown leaves that server running).
 */
export async function startE2eServer(opts: { uiPort?: number } = {}): Promise<{
  env: TestWorkflowEnvironment;
  uiUrl?: string;
  real: boolean;
  /** The codec server the Web UI decodes through (with a UI only); stop() closes one of the file's own. */
  codec?: { url: string; token: string };
  stop(): Promise<void>;
}> {
  const real = inject('temporalServer');
  if (real) {
    const env = await TestWorkflowEnvironment.createFromExistingServer({
      ...existingServerOptions(real.connection),
      client: { dataConverter: dataConverter() },
    });
    return { env, uiUrl: real.uiUrl, real: true, codec: real.codec, stop: () => env.teardown() };
  }
  if (!opts.uiPort) {
    const env = await startDevServer();
    return { env, real: false, stop: () => env.teardown() };
  }
  const uiUrl = `http://127.0.0.1:${opts.uiPort}`;
  const codec = await startCodecServer({
    codec: new EncryptionCodec(requirePayloadKeys()),
    token: randomBytes(24).toString('base64url'),
    allowOrigins: [uiUrl],
  });
  const env = await startDevServer({ uiPort: opts.uiPort, codecEndpoint: codec.uiEndpoint });
  return {
    env,
    uiUrl,
    real: false,
    codec: { url: codec.url, token: codec.token },
    stop: async () => {
      await env.teardown();
      await codec.close();
    },
  };
}
