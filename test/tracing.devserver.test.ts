/**
 * Tracing on, across real processes: `worker.ts` (a prebuilt bundle with the tracing interceptors, as
 * npm start makes it), `provider/server.ts` and `client.ts place`, each with OTEL_EXPORTER_OTLP_ENDPOINT
 * pointing at a receiver of the test's own; one order makes one trace through all three.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ChildProcess } from 'node:child_process';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { bundleWorkflowCode } from '@temporalio/worker';
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { startOtlpReceiver, type OtlpReceiver, type RawSpan } from '../bench/trace-model';
import { workflowBundleOptions, WORKFLOWS_PATH } from '../ops/workflow-bundle';
import { runProcess, startProviderProcess, startWorkerProcess, stopProcess } from '../platform/processes';
import { tracingWorkflowModules } from '../platform/tracing';
import { createProduct, makeOrder, testPool, uid } from './support/helpers';
import { quietLogger, startDevServer } from './support/temporal-env';

const ROOT = path.resolve(__dirname, '..');
let receiver: OtlpReceiver;
let env: TestWorkflowEnvironment;
let db: Pool;
let provider: { child: ChildProcess; url: string } | undefined;
let worker: ChildProcess | undefined;
let childEnv: NodeJS.ProcessEnv;
const tmp = mkdtempSync(path.join(os.tmpdir(), 'order-saga-tracing-'));

beforeAll(async () => {
  receiver = await startOtlpReceiver();
  const otel = { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_BSP_SCHEDULE_DELAY: '100' };
  env = await startDevServer();
  db = testPool();
  provider = await startProviderProcess({
    ...otel,
    DATABASE_URL: inject('roleUrls').provider,
    PROVIDER_PORT: '0',
    PROVIDER_ADMIN_PORT: '0',
    PROVIDER_API_KEY: 'trace-test-key',
    PROVIDER_ADMIN_KEY: 'trace-test-admin',
  });
  childEnv = {
    ...otel,
    TEMPORAL_ADDRESS: env.address,
    TEMPORAL_NAMESPACE: 'default',
    TASK_QUEUE: `tracing-${uid()}`,
    DATABASE_URL: inject('roleUrls').app,
    READER_DATABASE_URL: inject('roleUrls').reader,
    PROVIDER_URL: provider.url,
    PROVIDER_API_KEY: 'trace-test-key',
  };
  const bundle = await bundleWorkflowCode({
    workflowsPath: WORKFLOWS_PATH,
    logger: quietLogger,
    ...workflowBundleOptions(),
    workflowInterceptorModules: tracingWorkflowModules(otel),
  });
  const bundlePath = path.join(tmp, 'bundle.js');
  writeFileSync(bundlePath, bundle.code);
  worker = await startWorkerProcess({
    ...childEnv,
    WORKFLOW_BUNDLE: bundlePath,
    WORKER_METRICS_PORT: '0',
    TEMPORAL_METRICS_ADDRESS: 'off',
    WORKER_VERSIONING: 'off',
  });
});

afterAll(async () => {
  await stopProcess(worker);
  await stopProcess(provider?.child);
  await db?.end();
  await env?.teardown();
  await receiver?.close();
  rmSync(tmp, { recursive: true, force: true });
});

describe('tracing across the processes (dev server)', () => {
  it('one order placed by client.ts is one trace: client, workflow, activities, SQL, provider', async () => {
    const { sku, priceCents } = await createProduct(db, { stock: 5 });
    const order = makeOrder([{ sku, qty: 1, unitPriceCents: priceCents }]);
    const file = path.join(tmp, `${order.orderId}.json`);
    writeFileSync(file, JSON.stringify(order));
    const r = await runProcess(
      process.execPath,
      [require.resolve('tsx/cli'), path.join(ROOT, 'client.ts'), 'place', '--file', file, '--json'],
      childEnv,
    );
    expect(r.code, r.stderr).toBe(0);

    // client.ts has flushed before exiting; the worker and the provider send within ~100 ms.
    const byService = (spans: RawSpan[], service: string): string[] =>
      spans.filter((s) => s.service === service).map((s) => s.name);
    let trace: RawSpan[] = [];
    for (let i = 0; i < 60; i++) {
      const root = receiver.spans.find(
        (s) => s.service === 'order-saga-client' && s.attributes.temporalWorkflowId === `order:${order.orderId}`,
      );
      trace = root ? receiver.trace(root.traceId) : [];
      // The workflow's own spans (RunWorkflow ends with the run) may come after the last activity's.
      const worker = byService(trace, 'order-saga-worker');
      if (
        ['RunActivity:sendConfirmation', 'RunWorkflow:orderSaga', 'StartActivity:capturePayment'].every((n) =>
          worker.includes(n),
        ) &&
        byService(trace, 'order-saga-provider').length > 0
      )
        break;
      await sleep(250);
    }
    const client = byService(trace, 'order-saga-client');
    const worker = byService(trace, 'order-saga-worker');
    const provider = byService(trace, 'order-saga-provider');
    // The command is one span, its Temporal calls under it.
    expect(client, JSON.stringify(receiver.spans.map((s) => [s.service, s.name]))).toEqual(
      expect.arrayContaining(['client.ts place', 'UpdateWithStartWorkflow:accepted']),
    );
    expect(worker).toEqual(
      expect.arrayContaining([
        'RunWorkflow:orderSaga',
        'StartActivity:authorizePayment',
        'StartActivity:capturePayment',
        'RunActivity:createOrder',
        'RunActivity:reserveInventory',
        'RunActivity:authorizePayment',
        'RunActivity:capturePayment',
        'RunActivity:sendConfirmation',
      ]),
    );
    expect(worker.some((n) => n.startsWith('pg.query'))).toBe(true);
    expect(provider.some((n) => n.startsWith('pg.query'))).toBe(true);
    // The provider's request is a child of the worker's HTTP call (traceparent), itself under the hold or the capture.
    const ids = new Map(trace.map((s) => [s.spanId, s]));
    const served = trace.find((s) => s.service === 'order-saga-provider' && s.kind === 'server')!;
    const call = ids.get(served.parentSpanId!)!;
    expect(call).toMatchObject({ service: 'order-saga-worker', kind: 'client' });
    expect(ids.get(call.parentSpanId!)?.name).toMatch(/^RunActivity:(authorize|capture)Payment$/);
  });
});
