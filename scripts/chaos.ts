/**
 * `npm run chaos [-- --quick]`: the chaos soak. Brings up the real stack on loopback (Postgres, the
 * Temporal dev server, the provider, the worker as its own process), then places orders while:
 *   - the worker is killed with SIGKILL about every 10 s and restarted;
 *   - the provider loses the response after commit for 10 % of charges, answers 5xx before commit
 *     for 5 %, and answers slower than the worker's timeout for 5 %;
 *   - Postgres is restarted once, mid-run.
 * Then it waits for quiescence, runs the invariant checker and prints the summary.
 * Bounded: at most --orders orders (500; --quick 60) and --max-minutes of load (10; --quick 3).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { migrateAll } from '../db/migrate';
import { createPool } from '../db/pool';
import { ensurePostgres, type PostgresHandle } from '../db/postgres';
import { checkInvariants, formatReport, temporalLookup } from '../lib/invariants';
import { progressBar, runLoad } from '../lib/load';
import { startProviderProcess, stopProcess } from '../lib/processes';
import { devServerExecutable } from '../lib/temporal-servers';
import { createProviderAdmin } from '../provider/client';
import { DEFAULT_SAGA_CONFIG } from '../workflows/order-saga';
import { CustomerIdKey, NeedsAttentionKey, OrderStatusKey, TotalCentsKey } from '../workflows/search-attributes';

const ROOT = path.resolve(__dirname, '..');
const say = (s: string): void => void process.stdout.write(`[chaos] ${s}\n`);
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: { quick: { type: 'boolean' }, orders: { type: 'string' }, 'max-minutes': { type: 'string' }, help: { type: 'boolean' } },
  });
  if (values.help) {
    say('usage: npm run chaos [-- --quick] [-- --orders N] [-- --max-minutes M]');
    return 0;
  }
  Runtime.install({ logger: new DefaultLogger('ERROR') });
  const quick = !!values.quick;
  const orders = Number(values.orders ?? (quick ? 60 : 500));
  const maxMinutes = Number(values['max-minutes'] ?? (quick ? 3 : 10));
  if (!Number.isInteger(orders) || orders < 1 || orders > 5000) throw new Error('--orders: a whole number from 1 to 5000');
  const killEveryMs = quick ? 5_000 : 10_000;
  const started = Date.now();
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'order-saga-chaos-'));
  chmodSync(tmp, 0o755);
  const pgOpts = { dataDir: path.join(tmp, 'pg'), port: 56000 + (process.pid % 900), database: 'chaos', persistent: true };
  const faults = { workerKills: 0, postgresRestarts: 0 };
  let pg: PostgresHandle | undefined;
  let env: TestWorkflowEnvironment | undefined;
  let provider: ChildProcess | undefined;
  let worker: ChildProcess | undefined;
  let stopKilling = false;
  const taskQueue = 'chaos';
  try {
    say(`starting: Postgres, Temporal dev server, provider, worker (${orders} orders, SIGKILL every ${killEveryMs / 1000} s)`);
    pg = await ensurePostgres(pgOpts, {});
    const url = pg.url;
    const setupDb = createPool(url, { max: 2 });
    await migrateAll(setupDb);
    await setupDb.end();
    const executable = devServerExecutable();
    env = await TestWorkflowEnvironment.createLocal({
      server: { ...(executable ? { executable } : {}), ip: '127.0.0.1', searchAttributes: [OrderStatusKey, CustomerIdKey, NeedsAttentionKey, TotalCentsKey], log: { format: 'pretty', level: 'error' } },
    });
    const adminKey = 'chaos-admin-key';
    const prov = await startProviderProcess({ DATABASE_URL: url, PROVIDER_PORT: '0', PROVIDER_ADMIN_PORT: '0', PROVIDER_API_KEY: 'chaos-key', PROVIDER_ADMIN_KEY: adminKey });
    provider = prov.child;
    const admin = createProviderAdmin({ baseUrl: prov.adminUrl, adminKey });
    const providerTimeoutMs = 2_000;

    /** Starts the worker; resolves once it polls. Rejects with the tail of its stderr if it exits first. */
    const startOnce = (): Promise<ChildProcess> =>
      new Promise((resolve, reject) => {
        // One process (node --import tsx), so SIGKILL reaches the worker itself.
        const child = spawn(process.execPath, ['--import', 'tsx', path.join(ROOT, 'worker.ts')], {
          cwd: ROOT,
          env: {
            ...process.env,
            TEMPORAL_ADDRESS: env!.address,
            TASK_QUEUE: taskQueue,
            DATABASE_URL: url,
            PROVIDER_URL: prov.url,
            PROVIDER_API_KEY: 'chaos-key',
            PROVIDER_TIMEOUT_MS: String(providerTimeoutMs),
            WORKER_METRICS_PORT: '0',
            TEMPORAL_METRICS_ADDRESS: 'off',
          },
          stdio: ['ignore', 'pipe', 'pipe'],
        });
        let out = '';
        let err = '';
        child.stderr!.on('data', (c: Buffer) => void (err = (err + c.toString()).slice(-4_000)));
        child.stdout!.on('data', (c: Buffer) => {
          out = (out + c.toString()).slice(-4_000); // the ready line may arrive split over chunks
          if (out.includes('polling task queue')) resolve(child);
        });
        child.once('exit', (code, signal) => reject(new Error(`worker exited before it was ready (${code ?? signal}): ${err.trim().slice(-1_500)}`)));
      });
    /** A few tries: the worker may start while Postgres is restarting. */
    const startWorker = async (): Promise<ChildProcess> => {
      for (let attempt = 1; ; attempt++) {
        try {
          return await startOnce();
        } catch (err) {
          if (attempt >= 5) throw err;
          say(`worker did not start (try ${attempt}): ${(err as Error).message.split('\n')[0]}`);
          await sleep(1_000 * attempt);
        }
      }
    };
    worker = await startWorker();

    await admin.set({ kind: 'lose-response-after-commit', target: 'charges', rate: 0.1, forMs: 86_400_000 });
    await admin.set({ kind: 'fail-before-commit', target: 'charges', rate: 0.05, forMs: 86_400_000 });
    await admin.set({ kind: 'delay', target: 'charges', rate: 0.05, delayMs: providerTimeoutMs + 500, forMs: 86_400_000 });

    const killer = (async () => {
      while (!stopKilling) {
        await sleep(killEveryMs * (0.75 + Math.random() * 0.5));
        if (stopKilling) break;
        const w = worker!;
        if (w.exitCode === null && w.signalCode === null) {
          const exited = new Promise((r) => w.once('exit', r));
          w.kill('SIGKILL');
          await exited;
          faults.workerKills++;
        } else {
          say(`the worker had exited by itself (${w.exitCode ?? w.signalCode}); restarting it`);
        }
        worker = await startWorker();
      }
    })();
    // A worker that cannot be brought back ends the soak with an error, rather than a hang.
    const killerFailed = killer.then(() => new Promise<never>(() => undefined));

    const db = createPool(url, { max: 2 });
    let restarted = false;
    const bar = progressBar();
    const load = runLoad(env.client, db, {
      orders,
      concurrency: 20,
      hotSkus: 1,
      hotShare: 0.3,
      declineShare: 0.05,
      taskQueue,
      maxDurationMs: maxMinutes * 60_000,
      resultTimeoutMs: 5 * 60_000,
      onProgress: (done, total) => {
        bar(done, total);
        if (!restarted && done >= total / 2) {
          restarted = true;
          void (async () => {
            await pg!.stop();
            await sleep(1_000);
            pg = await ensurePostgres(pgOpts, {});
            faults.postgresRestarts++;
          })();
        }
      },
    });
    const summary = await Promise.race([load, killerFailed]);
    bar.end();
    stopKilling = true;
    await killer;
    await admin.clear();

    say('load done; waiting for every saga to settle…');
    const settleUntil = Date.now() + 5 * 60_000;
    let running = -1;
    while (Date.now() < settleUntil) {
      running = (await env.client.workflow.count(`WorkflowType = 'orderSaga' AND ExecutionStatus = 'Running' AND NeedsAttention = false`)).count;
      if (running === 0) break;
      await sleep(1_000);
    }
    const attention = (await env.client.workflow.count(`WorkflowType = 'orderSaga' AND ExecutionStatus = 'Running' AND NeedsAttention = true`)).count;
    const report = await checkInvariants(db, { deadlineMs: DEFAULT_SAGA_CONFIG.deadlineMs, workflows: temporalLookup(env.client) });
    const injected = (await admin.list()).injected;
    await db.end();

    const seconds = Math.round((Date.now() - started) / 1000);
    say('');
    say(`== chaos soak summary (${quick ? 'quick' : 'full'}) ==`);
    say(`orders:     ${summary.placed} placed of ${orders}; statuses ${Object.entries(summary.statuses).map(([k, v]) => `${k} ${v}`).join(', ')}; client errors ${summary.errors}`);
    say(`not completed, by reason: ${Object.entries(summary.reasons).map(([k, v]) => `${k} × ${v}`).join('; ') || '-'}`);
    say(`throughput: ${summary.ordersPerSecond} orders/s; saga latency p50 ${summary.latencyMs.p50} ms, p99 ${summary.latencyMs.p99} ms`);
    say(`faults:     worker SIGKILLs ${faults.workerKills}; Postgres restarts ${faults.postgresRestarts}; provider lost responses after commit ${injected['lose-response-after-commit']}, 5xx before commit ${injected['fail-before-commit']}, slower than the timeout ${injected.delay}`);
    say(`settled:    ${running === 0 ? 'yes' : `no (${running} still running)`}; NEEDS_ATTENTION ${attention}`);
    for (const line of formatReport(report)) say(line);
    say(`violations: ${report.violations.length}`);
    say(`time:       ${seconds} s`);
    for (const e of summary.firstErrors) say(`client error: ${e}`);
    return report.violations.length === 0 && running === 0 && summary.errors === 0 ? 0 : 1;
  } finally {
    stopKilling = true;
    await stopProcess(worker, 'SIGTERM');
    await stopProcess(provider);
    await env?.teardown();
    await pg?.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
}

main().then(
  (code) => process.exit(code),
  (err: Error) => {
    process.stderr.write(`chaos: ${err.stack ?? err.message}\n`);
    process.exit(1);
  },
);
