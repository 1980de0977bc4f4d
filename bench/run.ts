/**
 * `npm run bench [-- --quick]`: every measurement in one run, side by side, on this machine.
 *   P1  the contention matrix: 5 strategies × 1, 10, 1000 hot SKUs, 20 workers, 20 ms of logic each
 *   P2  the full saga against a no-op workflow with as many no-op activities (dev server)
 *   P3  the CAS commit path against pgbench's single-row UPDATE, same database
 * Prints a table and PASS/FAIL per target; writes bench/results/latest.json and latest.svg.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync, chmodSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { bundleWorkflowCode, DefaultLogger, Runtime, Worker } from '@temporalio/worker';
import { createActivities } from '../activities';
import { migrateAll } from '../db/migrate';
import { createPool } from '../db/pool';
import { ensurePostgres } from '../db/postgres';
import { workflowIdFor, type OrderInput } from '../domain/order';
import { percentile } from '../lib/load';
import { startProviderProcess, stopProcess } from '../lib/processes';
import { devServerExecutable } from '../lib/temporal-servers';
import { createProviderClient } from '../provider/client';
import { CustomerIdKey, NeedsAttentionKey, OrderStatusKey, TotalCentsKey } from '../workflows/search-attributes';
import { renderChart } from './chart';
import { casCommitThroughput, runCell, setupBenchTable, STRATEGIES, type CellResult } from './strategies';

const ROOT = path.resolve(__dirname, '..');
const POOL_SIZE = 24; // one pool size for every strategy: 20 workers + 4 lane slots
const WORKERS = 20;
const LOGIC_MS = 20;
const LANES = 4;
const SKU_LEVELS = [1, 10, 1000];

const say = (s: string): void => void process.stdout.write(`${s}\n`);
const progress = (s: string): void => void process.stderr.write(process.stderr.isTTY ? `\r\x1b[K${s}` : `${s}\n`);

interface Target {
  name: string;
  pass: boolean;
  detail: string;
}

function findPgbench(): string | undefined {
  const fromPath = spawnSync('sh', ['-c', 'command -v pgbench'], { encoding: 'utf8' }).stdout.trim();
  if (fromPath) return fromPath;
  const base = '/usr/lib/postgresql';
  if (existsSync(base)) {
    for (const v of readdirSync(base).sort().reverse()) {
      const p = path.join(base, v, 'bin', 'pgbench');
      if (existsSync(p)) return p;
    }
  }
  return undefined;
}

async function p1(db: ReturnType<typeof createPool>, durationMs: number): Promise<CellResult[]> {
  await setupBenchTable(db);
  const cells: CellResult[] = [];
  const total = SKU_LEVELS.length * STRATEGIES.length;
  for (const skus of SKU_LEVELS) {
    for (const strategy of STRATEGIES) {
      progress(`P1 ${cells.length + 1}/${total}: ${strategy} on ${skus} SKU(s)…`);
      cells.push(await runCell(db, strategy, skus, { workers: WORKERS, logicMs: LOGIC_MS, durationMs, lanes: LANES }));
    }
  }
  progress('');
  return cells;
}

async function p3(db: ReturnType<typeof createPool>, url: string, seconds: number): Promise<{ cas: number; pgbench?: number; ratio?: number; note?: string }> {
  progress('P3: CAS commit path…');
  const cas = await casCommitThroughput(db, { clients: WORKERS, keys: 1000, durationMs: seconds * 1000 });
  const pgbench = findPgbench();
  if (!pgbench) return { cas: cas.tps, note: 'pgbench not found (install Debian postgresql-15 or set PATH); P3 not compared' };
  const u = new URL(url);
  const dir = mkdtempSync(path.join(os.tmpdir(), 'order-saga-pgbench-'));
  const script = path.join(dir, 'update.sql');
  writeFileSync(script, '\\set id random(1, 1000)\nUPDATE bench.stock SET stock = stock - 1, version = version + 1 WHERE id = :id;\n');
  chmodSync(dir, 0o755);
  progress('P3: pgbench…');
  const out = execFileSync(
    pgbench,
    ['-n', '-c', String(WORKERS), '-j', '2', '-T', String(seconds), '-f', script, '-h', u.hostname, '-p', u.port, '-U', decodeURIComponent(u.username), u.pathname.slice(1)],
    { env: { ...process.env, PGPASSWORD: decodeURIComponent(u.password) }, encoding: 'utf8' },
  );
  rmSync(dir, { recursive: true, force: true });
  const tps = Number(/tps = ([\d.]+)/.exec(out)?.[1] ?? NaN);
  progress('');
  return { cas: cas.tps, pgbench: Math.round(tps), ratio: Math.round((cas.tps / tps) * 100) / 100 };
}

async function p2(url: string, orders: number, concurrency: number): Promise<{ saga: number; floor: number; ratio: number; sagaP50: number; floorP50: number }> {
  progress('P2: starting the dev server and the provider…');
  const executable = devServerExecutable();
  const env = await TestWorkflowEnvironment.createLocal({
    server: { ...(executable ? { executable } : {}), ip: '127.0.0.1', searchAttributes: [OrderStatusKey, CustomerIdKey, NeedsAttentionKey, TotalCentsKey], log: { format: 'pretty', level: 'error' } },
  });
  const provider = await startProviderProcess({ DATABASE_URL: url, PROVIDER_PORT: '0', PROVIDER_ADMIN_PORT: '0', PROVIDER_API_KEY: 'bench-key', PROVIDER_ADMIN_KEY: 'bench-admin' });
  const db = createPool(url, { max: 20 });
  try {
    const quiet = { log() {}, trace() {}, debug() {}, info() {}, warn() {}, error() {} };
    const workflowBundle = await bundleWorkflowCode({ workflowsPath: path.join(ROOT, 'bench', 'workflows.ts'), logger: quiet });
    const taskQueue = 'bench-p2';
    // One worker, the same settings, serving both workflows.
    const worker = await Worker.create({
      connection: env.nativeConnection,
      taskQueue,
      workflowBundle,
      activities: { ...createActivities({ db, provider: createProviderClient({ baseUrl: provider.url, apiKey: 'bench-key' }) }), noop: async () => undefined },
    });
    const sku = `BENCH-P2-${Date.now()}`;
    await db.query({ text: `INSERT INTO products (sku, name, price_cents, stock, initial_stock) SELECT $1 || '-' || g, 'bench', 100, 1000000, 1000000 FROM generate_series(0, 99) g`, values: [sku] });
    let seq = 0;
    const runBatch = async (kind: 'saga' | 'floor'): Promise<{ perSecond: number; latencies: number[] }> => {
      let next = 0;
      const latencies: number[] = [];
      const started = Date.now();
      await Promise.all(
        Array.from({ length: concurrency }, async () => {
          while (next < orders) {
            next++;
            const i = seq++;
            const t = Date.now();
            if (kind === 'floor') {
              await env.client.workflow.execute('noopSaga', { taskQueue, workflowId: `bench-floor-${Date.now()}-${i}` });
            } else {
              const order: OrderInput = { orderId: `bench-${Date.now()}-${i}`, customerId: `bench-${i % 50}`, currency: 'USD', paymentMethod: 'tok_visa', items: [{ sku: `${sku}-${i % 100}`, qty: 1, unitPriceCents: 100 }] };
              const r = (await env.client.workflow.execute('orderSaga', { taskQueue, workflowId: workflowIdFor(order.orderId), args: [order] })) as { status: string };
              if (r.status !== 'COMPLETED') throw new Error(`bench saga ended ${r.status}`);
            }
            latencies.push(Date.now() - t);
          }
        }),
      );
      return { perSecond: orders / ((Date.now() - started) / 1000), latencies };
    };
    return await worker.runUntil(async () => {
      // Alternate, so drift on a noisy machine hits both sides alike.
      const sagaRuns: { perSecond: number; latencies: number[] }[] = [];
      const floorRuns: { perSecond: number; latencies: number[] }[] = [];
      for (let round = 0; round < 2; round++) {
        progress(`P2 round ${round + 1}/2: no-op floor…`);
        floorRuns.push(await runBatch('floor'));
        progress(`P2 round ${round + 1}/2: full saga…`);
        sagaRuns.push(await runBatch('saga'));
      }
      progress('');
      const mean = (xs: { perSecond: number }[]): number => xs.reduce((a, x) => a + x.perSecond, 0) / xs.length;
      const p50 = (xs: { latencies: number[] }[]): number => percentile(xs.flatMap((x) => x.latencies).sort((a, b) => a - b), 50);
      const saga = mean(sagaRuns);
      const floor = mean(floorRuns);
      return { saga: Math.round(saga * 10) / 10, floor: Math.round(floor * 10) / 10, ratio: Math.round((saga / floor) * 100) / 100, sagaP50: p50(sagaRuns), floorP50: p50(floorRuns) };
    });
  } finally {
    await db.end();
    await stopProcess(provider.child);
    await env.teardown();
  }
}

function targets(cells: CellResult[], p2r: { ratio: number }, p3r: { ratio?: number }): Target[] {
  const cell = (s: string, k: number): CellResult => cells.find((c) => c.strategy === s && c.skus === k)!;
  const out: Target[] = [];
  for (const k of SKU_LEVELS) {
    const best = ['for-update-logic-in-tx', 'for-update-short', 'cas'].map((s) => cell(s, k)).sort((a, b) => b.throughput - a.throughput)[0]!;
    const a = cell('adaptive', k);
    out.push({ name: `adaptive ≥ 0.9× best pure (${best.strategy}) at ${k} SKU(s)`, pass: a.throughput >= 0.9 * best.throughput, detail: `${a.throughput} vs ${best.throughput} (${(a.throughput / best.throughput).toFixed(2)}×)` });
  }
  const a1 = cell('adaptive', 1);
  const lock1 = cell('for-update-logic-in-tx', 1);
  out.push({ name: 'at 1 SKU: adaptive throughput ≥ 3× FOR UPDATE with logic in tx', pass: a1.throughput >= 3 * lock1.throughput, detail: `${a1.throughput} vs ${lock1.throughput} (${(a1.throughput / lock1.throughput).toFixed(1)}×)` });
  out.push({ name: 'at 1 SKU: adaptive p99 ≤ 1/3 of FOR UPDATE with logic in tx', pass: a1.p99 * 3 <= lock1.p99, detail: `${a1.p99} ms vs ${lock1.p99} ms` });
  out.push({ name: 'at 1 SKU: adaptive abort rate ≤ 30 %', pass: a1.abortRate <= 0.3, detail: `${(a1.abortRate * 100).toFixed(1)} % (pure CAS: ${(cell('cas', 1).abortRate * 100).toFixed(1)} %)` });
  const a1000 = cell('adaptive', 1000);
  const cas1000 = cell('cas', 1000);
  out.push({ name: 'at 1000 SKUs: adaptive ≥ 0.9× pure CAS', pass: a1000.throughput >= 0.9 * cas1000.throughput, detail: `${a1000.throughput} vs ${cas1000.throughput} (${(a1000.throughput / cas1000.throughput).toFixed(2)}×)` });
  out.push({ name: 'at 1000 SKUs: adaptive abort rate < 10 %', pass: a1000.abortRate < 0.1, detail: `${(a1000.abortRate * 100).toFixed(1)} %` });
  const lostElsewhere = cells.filter((c) => c.strategy !== 'naive' && c.lostUpdates !== 0);
  out.push({ name: 'lost updates: 0 for every non-naive strategy', pass: lostElsewhere.length === 0, detail: lostElsewhere.length ? lostElsewhere.map((c) => `${c.strategy}@${c.skus}: ${c.lostUpdates}`).join(', ') : 'none' });
  const n1 = cell('naive', 1).lostUpdates;
  const n10 = cell('naive', 10).lostUpdates;
  out.push({ name: 'naive loses updates at 1 and 10 SKUs (the bench contends)', pass: n1 > 0 && n10 > 0, detail: `${n1} at 1, ${n10} at 10` });
  out.push({ name: 'P2: saga ≥ 0.8 of the no-op floor', pass: p2r.ratio >= 0.8, detail: `${p2r.ratio}×` });
  out.push({ name: 'P3: CAS commit path ≥ 0.5 of pgbench', pass: p3r.ratio !== undefined && p3r.ratio >= 0.5, detail: p3r.ratio === undefined ? 'not measured' : `${p3r.ratio}×` });
  return out;
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { quick: { type: 'boolean' }, help: { type: 'boolean' } } });
  if (values.help) {
    say('Usage: npm run bench [-- --quick]   (quick: under 3 minutes; the full run takes about 8)');
    return;
  }
  Runtime.install({ logger: new DefaultLogger('ERROR') });
  const quick = !!values.quick;
  const cellMs = quick ? 2_500 : 8_000;
  const p3Seconds = quick ? 4 : 10;
  const p2Orders = quick ? 30 : 120;
  const started = Date.now();
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'order-saga-bench-'));
  chmodSync(tmp, 0o755);
  const pg = await ensurePostgres({ dataDir: path.join(tmp, 'pg'), port: 55000 + (process.pid % 900), database: 'bench', persistent: false });
  const db = createPool(pg.url, { max: POOL_SIZE });
  try {
    await migrateAll(db);
    const cells = await p1(db, cellMs);
    const p3r = await p3(db, pg.url, p3Seconds);
    const p2r = await p2(pg.url, p2Orders, 20);
    const machine = `${os.cpus().length} × ${os.cpus()[0]?.model.trim() ?? 'cpu'}, ${Math.round(os.totalmem() / 2 ** 30)} GiB, Node ${process.version}`;
    const checks = targets(cells, p2r, p3r);

    say(`\n## Benchmark (${quick ? 'quick' : 'full'}) — ${new Date().toISOString()}`);
    say(`machine: ${machine}; Postgres from the embedded binaries; pool size ${POOL_SIZE} for every strategy`);
    say(`P1: ${WORKERS} concurrent workers, ${LOGIC_MS} ms of logic per task, ${cellMs / 1000} s per cell, ${LANES} serial lanes for adaptive\n`);
    say('| strategy | SKUs | units/s | p50 ms | p99 ms | abort rate | attempts | lane | gave up | lost updates |');
    say('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
    for (const c of cells) {
      say(`| ${c.strategy} | ${c.skus} | ${c.throughput} | ${c.p50} | ${c.p99} | ${(c.abortRate * 100).toFixed(1)} % | ${c.attempts} | ${c.laneCommits} | ${c.gaveUp} | ${c.lostUpdates} |`);
    }
    say(`\nP2 (dev server, ${p2Orders} workflows × 2 rounds, 20 in flight): saga ${p2r.saga}/s (p50 ${p2r.sagaP50} ms), no-op floor ${p2r.floor}/s (p50 ${p2r.floorP50} ms) → ratio ${p2r.ratio}`);
    say(`P3 (1000 keys, ${WORKERS} clients, ${p3Seconds} s): CAS commit path ${p3r.cas} tps, pgbench ${p3r.pgbench ?? '-'} tps → ratio ${p3r.ratio ?? '-'}${p3r.note ? ` (${p3r.note})` : ''}\n`);
    say('| target | result | measured |');
    say('|---|---|---|');
    for (const t of checks) say(`| ${t.name} | ${t.pass ? 'PASS' : 'FAIL'} | ${t.detail} |`);
    say(`\n${checks.filter((t) => t.pass).length}/${checks.length} targets met; ${Math.round((Date.now() - started) / 1000)} s`);

    const dir = path.join(ROOT, 'bench', 'results');
    mkdirSync(dir, { recursive: true });
    writeFileSync(path.join(dir, 'latest.json'), `${JSON.stringify({ quick, machine, poolSize: POOL_SIZE, workers: WORKERS, logicMs: LOGIC_MS, lanes: LANES, cells, p2: p2r, p3: p3r, targets: checks, at: new Date().toISOString() }, null, 2)}\n`);
    writeFileSync(path.join(dir, 'latest.svg'), renderChart(cells, `P1: ${WORKERS} workers × ${LOGIC_MS} ms logic, pool ${POOL_SIZE}, ${cellMs / 1000} s per cell — ${machine}`));
    say('wrote bench/results/latest.json and bench/results/latest.svg');
  } finally {
    await db.end();
    await pg.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
}

main().catch((err: Error) => {
  process.stderr.write(`bench: ${err.stack ?? err.message}\n`);
  process.exit(1);
});
