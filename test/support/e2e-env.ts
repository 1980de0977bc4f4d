/**
 * What the end-to-end test files share (test/e2e-*.devserver.test.ts): `useE2eEnv` starts the file's
 * Temporal server (the dev server; under `npm run test:server` the real server on Postgres with its
 * standalone Web UI) and its worker (in this process; under test:server three worker processes), with
 * the pool, the config and the environment client.ts runs with; `cli` runs client.ts as a process and
 * `orderFile` writes an order for it to read.
 */
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { Pool } from 'pg';
import { afterAll, beforeAll, inject } from 'vitest';
import { readConfig, type AppConfig } from '../../ops/config';
import { createOrderWorkers, type OrderWorkers } from '../../worker';
import { freePort, runProcess, startWorkerProcess, stopProcess } from '../../platform/processes';
import { bundleWorkflows, startE2eServer } from './temporal-env';
import { testAdmin, testPool, uid } from './helpers';

const ROOT = path.resolve(__dirname, '..', '..');
// Set in beforeAll by useE2eEnv: the file's server, its environment, the pool and client.ts's config.
export let env: TestWorkflowEnvironment;
export let server: Awaited<ReturnType<typeof startE2eServer>> | undefined;
export let db: Pool;
let workers: OrderWorkers | undefined;
let running: Promise<void> | undefined;
/** Under test:server: the worker processes (the dev tier runs one worker in this process). */
let workerProcesses: ChildProcess[] = [];
export let cfg: AppConfig;
let childEnv: NodeJS.ProcessEnv;
export const tmp = mkdtempSync(path.join(os.tmpdir(), 'order-saga-e2e-'));
export const admin = testAdmin();

/** The file's server and worker, started before its tests and stopped after them. */
export function useE2eEnv(): void {
  beforeAll(async () => {
    server = await startE2eServer({ uiPort: await freePort() });
    env = server.env;
    db = testPool();
    childEnv = {
      TEMPORAL_ADDRESS: env.address,
      TEMPORAL_NAMESPACE: 'default',
      TASK_QUEUE: `e2e-${uid()}`,
      TEMPORAL_UI_URL: server.uiUrl!,
      // The worker and client.ts run with the roles npm start gives them (db/roles.ts).
      DATABASE_URL: inject('roleUrls').app,
      READER_DATABASE_URL: inject('roleUrls').reader,
      PROVIDER_URL: inject('providerUrl'),
      PROVIDER_API_KEY: inject('providerApiKey'),
    };
    cfg = readConfig(childEnv);
    const workflowBundle = await bundleWorkflows();
    if (server.real) {
      console.log(
        `e2e on the real Temporal server at ${env.address} (Web UI ${server.uiUrl}), with 3 worker processes`,
      );
      const bundlePath = path.join(tmp, 'bundle.js');
      writeFileSync(bundlePath, workflowBundle.code);
      const env3 = {
        ...childEnv,
        WORKFLOW_BUNDLE: bundlePath,
        WORKER_METRICS_PORT: '0',
        TEMPORAL_METRICS_ADDRESS: 'off',
        WORKER_VERSIONING: 'off', // unversioned, like the dev tier's in-process worker (a deploy: deploy.devserver.test.ts)
      };
      workerProcesses = await Promise.all([1, 2, 3].map(() => startWorkerProcess(env3)));
    } else {
      workers = await createOrderWorkers(cfg, env.nativeConnection, { workflowBundle });
      running = workers.run();
    }
  });

  afterAll(async () => {
    await admin.clear();
    workers?.shutdown();
    await running;
    await Promise.all(workerProcesses.map((w) => stopProcess(w)));
    await workers?.db.end();
    await workers?.reader.end();
    await db?.end();
    await server?.stop();
  });
}

/** Runs `npx tsx client.ts …` as its own process, as a person would. */
export async function cli(
  args: string[],
  extraEnv: NodeJS.ProcessEnv = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  const r = await runProcess(process.execPath, [require.resolve('tsx/cli'), path.join(ROOT, 'client.ts'), ...args], {
    ...childEnv,
    ...extraEnv,
  });
  return { code: r.code ?? -1, stdout: r.stdout, stderr: r.stderr };
}

export function orderFile(order: unknown): string {
  const file = path.join(tmp, `${uid()}.json`);
  writeFileSync(file, typeof order === 'string' ? order : JSON.stringify(order));
  return file;
}
