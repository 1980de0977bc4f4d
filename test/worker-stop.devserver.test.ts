/**
 * A worker process stopped gracefully (SIGTERM, as a deploy stops the old build's) records its stop
 * once its workers no longer poll (worker.ts, worker_stops), and the sweeper then counts its poller as
 * gone at once (activities/sweep-reads.ts, pollersOf), though the server still lists it as having
 * polled moments ago. One real worker process, on the file's own Temporal server and task queue.
 */
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POLLER_GONE_MS, pollersOf } from '../activities/sweep-reads';
import { startWorkerProcess, stopProcess } from '../platform/processes';
import { bundleWorkflows, startE2eServer } from './support/temporal-env';
import { testPool, uid, workerProcessEnv } from './support/helpers';

let env: TestWorkflowEnvironment;
let db: Pool;
let worker: ChildProcess | undefined;
const tmp = mkdtempSync(path.join(os.tmpdir(), 'order-saga-worker-stop-'));

beforeAll(async () => {
  ({ env } = await startE2eServer());
  db = testPool();
});
afterAll(async () => {
  await stopProcess(worker);
  await db?.end();
  await env?.teardown();
  rmSync(tmp, { recursive: true, force: true });
});

describe('a worker process stopped gracefully', () => {
  it('records its stop, and the sweeper counts its poller as gone at once', async () => {
    const taskQueue = `worker-stop-${uid()}`;
    const bundle = path.join(tmp, 'bundle.js');
    writeFileSync(bundle, (await bundleWorkflows()).code);
    worker = await startWorkerProcess(workerProcessEnv(env.address, taskQueue, bundle));
    const pid = worker.pid!;
    const polled = () => pollersOf(env.client, db, taskQueue, Date.now());
    for (let i = 0; i < 100 && (await polled()).length === 0; i++) await sleep(100);
    expect(await polled()).toEqual(['']); // an unversioned worker, polling

    await stopProcess(worker, 'SIGTERM');
    expect(worker.exitCode).toBe(0);
    // Its identity: the SDK's `<pid>@<host>`, with a suffix of its own (platform/identity.ts).
    const { rows } = await db.query<{ identity: string; ago_ms: number }>({
      text: `SELECT identity, (extract(epoch FROM clock_timestamp() - stopped_at) * 1000)::int AS ago_ms
               FROM worker_stops WHERE starts_with(identity, $1)`,
      values: [`${pid}@${os.hostname()}/`],
    });
    expect(rows).toHaveLength(1);
    expect(rows[0]!.ago_ms).toBeLessThan(60_000);
    const identity = rows[0]!.identity;
    expect(identity).toMatch(/\/[0-9a-f]{6}$/);
    // The server still lists its last poll, well within the bound a live poller is given...
    const listed = await env.client.workflowService.describeTaskQueue({
      namespace: env.client.options.namespace,
      taskQueue: { name: taskQueue },
      taskQueueType: 1, // workflow tasks
    });
    const last = listed.pollers?.find((p) => p.identity === identity)?.lastAccessTime;
    expect(last).toBeDefined();
    expect(Date.now() - Number(last!.seconds) * 1000).toBeLessThan(POLLER_GONE_MS);
    // ...and the sweeper counts it gone all the same.
    expect(await polled()).toEqual([]);
  });
});
