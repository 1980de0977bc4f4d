/**
 * `npm run bench [-- --quick]`: every measurement in one run, side by side, on this machine.
 *   P1  the contention matrix: 5 strategies × 1, 10, 1000 hot SKUs, 20 workers, 20 ms of logic each
 *   seed 003's two cases: 100 × 200 ms and 20 × 50 ms on one row, FOR UPDATE with logic in tx vs adaptive
 *   P2  the full saga against the essential-work floor: the five steps as no-op activities (dev server)
 *   P3  the CAS commit path against pgbench's single-row UPDATE, same database
 * Prints a table and PASS/FAIL per target; writes bench/results/latest.json and latest.svg.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync, chmodSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { randomBytes } from 'node:crypto';
import { Client } from '@temporalio/client';
import { bundleWorkflowCode, DefaultLogger, Runtime, Worker, type WorkerOptions } from '@temporalio/worker';
import { createActivities } from '../activities';
import { migrateAll } from '../db/migrate';
import { createPool } from '../db/pool';
import { workflowIdFor, type OrderInput } from '../domain/order';
import { percentile } from '../lib/load';
import { dataConverterFor, parseKeyList } from '../platform/payload-codec';
import { startProviderProcess, stopProcess } from '../platform/processes';
import { createProviderClient } from '../provider/client';
import { ensurePostgres } from '../servers/postgres';
import { startDevServer } from '../servers/temporal-dev';
import { renderChart } from './chart';
import { WORKER_TUNING } from '../worker';
import {
  casCommitThroughput,
  runBurst,
  runCell,
  setupBenchTable,
  STRATEGIES,
  type BurstResult,
  type CellResult,
} from './strategies';

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

async function p3(
  db: ReturnType<typeof createPool>,
  url: string,
  seconds: number,
): Promise<{ cas: number; pgbench?: number; ratio?: number; note?: string }> {
  progress('P3: CAS commit path…');
  const cas = await casCommitThroughput(db, { clients: WORKERS, keys: 1000, durationMs: seconds * 1000 });
  const pgbench = findPgbench();
  if (!pgbench)
    return { cas: cas.tps, note: 'pgbench not found (install Debian postgresql-15 or set PATH); P3 not compared' };
  const u = new URL(url);
  const dir = mkdtempSync(path.join(os.tmpdir(), 'order-saga-pgbench-'));
  const script = path.join(dir, 'update.sql');
  writeFileSync(
    script,
    '\\set id random(1, 1000)\nUPDATE bench.stock SET stock = stock - 1, version = version + 1 WHERE id = :id;\n',
  );
  chmodSync(dir, 0o755);
  progress('P3: pgbench…');
  const out = execFileSync(
    pgbench,
    [
      '-n',
      '-c',
      String(WORKERS),
      '-j',
      '2',
      '-T',
      String(seconds),
      '-f',
      script,
      '-h',
      u.hostname,
      '-p',
      u.port,
      '-U',
      decodeURIComponent(u.username),
      u.pathname.slice(1),
    ],
    { env: { ...process.env, PGPASSWORD: decodeURIComponent(u.password) }, encoding: 'utf8' },
  );
  rmSync(dir, { recursive: true, force: true });
  const tps = Number(/tps = ([\d.]+)/.exec(out)?.[1] ?? NaN);
  progress('');
  return { cas: cas.tps, pgbench: Math.round(tps), ratio: Math.round((cas.tps / tps) * 100) / 100 };
}

interface Side {
  perSecond: number;
  p50: number;
  p99: number;
}
export interface P2Result {
  saga: Side;
  floor: Side;
  /** The same saga with no payload codec (payloads in the clear), on a worker and client of its own. */
  plain: Side;
  /** The codec's cost: saga throughput with the codec over without it (1 = free). */
  codecRatio: number;
  /** Saga throughput over the floor's, and saga p50 over the floor's. */
  ratio: number;
  p50Ratio: number;
  /** One order on an idle stack, end to end (median of a few, one at a time). */
  idle: { saga: number; floor: number; plain: number };
  /** Events in one happy-path saga's history, and in one floor run's. */
  historyEvents: { saga: number; floor: number };
}

const KINDS = ['floor', 'saga', 'plain'] as const;
type Kind = (typeof KINDS)[number];

async function p2(url: string, orders: number, concurrency: number, rounds: number): Promise<P2Result> {
  progress('P2: starting the dev server and the provider…');
  // The saga and the floor run with the project's payload codec (a key of the bench's own); `plain`
  // runs the same saga without it, side by side, for the codec's cost.
  const dataConverter = dataConverterFor(
    parseKeyList(`bench-1:${randomBytes(32).toString('base64')}`, 'the bench key'),
  );
  const env = await startDevServer({ logLevel: 'error', client: { dataConverter } });
  const provider = await startProviderProcess({
    DATABASE_URL: url,
    PROVIDER_PORT: '0',
    PROVIDER_ADMIN_PORT: '0',
    PROVIDER_API_KEY: 'bench-key',
    PROVIDER_ADMIN_KEY: 'bench-admin',
  });
  const db = createPool(url, { max: 20 });
  try {
    const quiet = { log() {}, trace() {}, debug() {}, info() {}, warn() {}, error() {} };
    const bundle = (failureConverterPath?: string) =>
      bundleWorkflowCode({
        workflowsPath: path.join(ROOT, 'bench', 'workflows.ts'),
        logger: quiet,
        ...(failureConverterPath ? { failureConverterPath } : {}),
      });
    const taskQueue = 'bench-p2';
    const plainQueue = 'bench-p2-plain';
    const activities = {
      ...createActivities({ db, provider: createProviderClient({ baseUrl: provider.url, apiKey: 'bench-key' }) }),
      noop: async () => undefined,
    };
    // One worker with the production worker's settings, serving both workflows; its twin without the codec.
    const workerOptions = {
      ...WORKER_TUNING,
      // BENCH_WORKER_OPTIONS: worker options (JSON) to measure, given to every side alike.
      ...(process.env.BENCH_WORKER_OPTIONS
        ? (JSON.parse(process.env.BENCH_WORKER_OPTIONS) as Partial<WorkerOptions>)
        : {}),
      connection: env.nativeConnection,
      activities,
    };
    const worker = await Worker.create({
      ...workerOptions,
      taskQueue,
      dataConverter,
      workflowBundle: await bundle(dataConverter.failureConverterPath),
    });
    const plainWorker = await Worker.create({
      ...workerOptions,
      taskQueue: plainQueue,
      workflowBundle: await bundle(),
    });
    const plainClient = new Client({ connection: env.connection, namespace: env.namespace ?? 'default' });
    const sku = `BENCH-P2-${Date.now()}`;
    await db.query({
      text: `INSERT INTO products (sku, name, price_cents, stock, initial_stock) SELECT $1 || '-' || g, 'bench', 100, 1000000, 1000000 FROM generate_series(0, 99) g`,
      values: [sku],
    });
    let seq = 0;
    let lastSagaId = '';
    let lastFloorId = '';
    /** One workflow, start to result; returns its latency in ms. */
    const one = async (kind: Kind): Promise<number> => {
      const i = seq++;
      const t = Date.now();
      if (kind === 'floor') {
        lastFloorId = `bench-floor-${Date.now()}-${i}`;
        await env.client.workflow.execute('noopSaga', { taskQueue, workflowId: lastFloorId });
      } else {
        const order: OrderInput = {
          orderId: `bench-${Date.now()}-${i}`,
          customerId: `bench-${i % 50}`,
          currency: 'USD',
          paymentMethod: 'tok_visa',
          items: [{ sku: `${sku}-${i % 100}`, qty: 1, unitPriceCents: 100 }],
        };
        const r = (await (kind === 'plain' ? plainClient : env.client).workflow.execute('orderSaga', {
          taskQueue: kind === 'plain' ? plainQueue : taskQueue,
          workflowId: workflowIdFor(order.orderId),
          args: [order],
        })) as { status: string };
        if (r.status !== 'COMPLETED') throw new Error(`bench saga ended ${r.status}`);
        if (kind === 'saga') lastSagaId = workflowIdFor(order.orderId);
      }
      return Date.now() - t;
    };
    const runBatch = async (kind: Kind): Promise<{ perSecond: number; latencies: number[] }> => {
      let next = 0;
      const latencies: number[] = [];
      const started = Date.now();
      await Promise.all(
        Array.from({ length: concurrency }, async () => {
          while (next < orders) {
            next++;
            latencies.push(await one(kind));
          }
        }),
      );
      return { perSecond: orders / ((Date.now() - started) / 1000), latencies };
    };
    const plainRunning = plainWorker.run();
    try {
      return await worker.runUntil(async () => {
        // The idle stack first: one order at a time, alternating, after one warm-up of each.
        const idle = { saga: [] as number[], floor: [] as number[], plain: [] as number[] };
        for (const kind of KINDS) await one(kind);
        for (let i = 0; i < 5; i++) {
          progress(`P2 idle ${i + 1}/5: one order at a time…`);
          for (const kind of KINDS) idle[kind].push(await one(kind));
        }
        // Under load: rounds in ABBA order (floor, saga, plain, then the reverse, …), so a drift over the
        // run (a noisy machine, a server whose store grows) hits every side alike instead of always the last.
        const runs: Record<Kind, { perSecond: number; latencies: number[] }[]> = { saga: [], floor: [], plain: [] };
        const names: Record<Kind, string> = {
          saga: 'full saga',
          floor: 'essential-work floor',
          plain: 'saga, no codec',
        };
        for (let round = 0; round < rounds; round++) {
          const order = round % 2 === 0 ? KINDS : [...KINDS].reverse();
          for (const kind of order) {
            progress(`P2 round ${round + 1}/${rounds}: ${names[kind]}…`);
            runs[kind].push(await runBatch(kind));
          }
        }
        const { saga: sagaRuns, floor: floorRuns, plain: plainRuns } = runs;
        progress('');
        const side = (xs: { perSecond: number; latencies: number[] }[]): Side => {
          const all = xs.flatMap((x) => x.latencies).sort((a, b) => a - b);
          return {
            perSecond: Math.round((xs.reduce((a, x) => a + x.perSecond, 0) / xs.length) * 10) / 10,
            p50: percentile(all, 50),
            p99: percentile(all, 99),
          };
        };
        const median = (xs: number[]): number =>
          percentile(
            [...xs].sort((a, b) => a - b),
            50,
          );
        const events = async (workflowId: string): Promise<number> =>
          (await env.client.workflow.getHandle(workflowId).fetchHistory()).events?.length ?? 0;
        const saga = side(sagaRuns);
        const floor = side(floorRuns);
        const plain = side(plainRuns);
        return {
          saga,
          floor,
          plain,
          codecRatio: Math.round((saga.perSecond / plain.perSecond) * 100) / 100,
          ratio: Math.round((saga.perSecond / floor.perSecond) * 100) / 100,
          p50Ratio: Math.round((saga.p50 / floor.p50) * 100) / 100,
          idle: { saga: median(idle.saga), floor: median(idle.floor), plain: median(idle.plain) },
          historyEvents: { saga: await events(lastSagaId), floor: await events(lastFloorId) },
        };
      });
    } finally {
      plainWorker.shutdown();
      await plainRunning;
    }
  } finally {
    await db.end();
    await stopProcess(provider.child);
    await env.teardown();
  }
}

/** Seed 003's two cases: FOR UPDATE with the logic in the transaction, against the adaptive path. */
const SEED_003_CASES = [
  { requests: 100, logicMs: 200, seedSays: '99 × 200 ms ≈ 20 s' },
  { requests: 20, logicMs: 50, seedSays: '19 × 50 ms ≈ 1 s' },
];

async function seed003(url: string): Promise<BurstResult[]> {
  // A connection per request: the row lock is the only queue, as in the seed's arithmetic.
  const db = createPool(url, { max: Math.max(...SEED_003_CASES.map((c) => c.requests)) + LANES });
  try {
    const out: BurstResult[] = [];
    for (const c of SEED_003_CASES) {
      for (const strategy of ['for-update-logic-in-tx', 'adaptive'] as const) {
        progress(`seed 003: ${c.requests} requests × ${c.logicMs} ms, ${strategy}…`);
        out.push(await runBurst(db, strategy, c.requests, c.logicMs, LANES));
      }
    }
    progress('');
    return out;
  } finally {
    await db.end();
  }
}

function targets(
  cells: CellResult[] | undefined,
  p2r: P2Result | undefined,
  p3r: { ratio?: number } | undefined,
): Target[] {
  return [...(cells ? p1Targets(cells) : []), ...(p2r ? p2Targets(p2r) : []), ...(p3r ? [p3Target(p3r)] : [])];
}

function p1Targets(cells: CellResult[]): Target[] {
  const cell = (s: string, k: number): CellResult => cells.find((c) => c.strategy === s && c.skus === k)!;
  const out: Target[] = [];
  for (const k of SKU_LEVELS) {
    const best = ['for-update-logic-in-tx', 'for-update-short', 'cas']
      .map((s) => cell(s, k))
      .sort((a, b) => b.throughput - a.throughput)[0]!;
    const a = cell('adaptive', k);
    out.push({
      name: `adaptive ≥ 0.9× best pure (${best.strategy}) at ${k} SKU(s)`,
      pass: a.throughput >= 0.9 * best.throughput,
      detail: `${a.throughput} vs ${best.throughput} (${(a.throughput / best.throughput).toFixed(2)}×)`,
    });
    const tail = ['for-update-logic-in-tx', 'for-update-short', 'cas']
      .map((s) => cell(s, k))
      .sort((a, b) => a.p99 - b.p99)[0]!;
    out.push({
      name: `adaptive p99 ≤ 2× best non-naive p99 (${tail.strategy}) at ${k} SKU(s)`,
      pass: a.p99 <= 2 * tail.p99,
      detail: `${a.p99} ms vs ${tail.p99} ms (${(a.p99 / tail.p99).toFixed(2)}×)`,
    });
  }
  const a1 = cell('adaptive', 1);
  const lock1 = cell('for-update-logic-in-tx', 1);
  out.push({
    name: 'at 1 SKU: adaptive throughput ≥ 3× FOR UPDATE with logic in tx',
    pass: a1.throughput >= 3 * lock1.throughput,
    detail: `${a1.throughput} vs ${lock1.throughput} (${(a1.throughput / lock1.throughput).toFixed(1)}×)`,
  });
  out.push({
    name: 'at 1 SKU: adaptive p99 ≤ 1/3 of FOR UPDATE with logic in tx',
    pass: a1.p99 * 3 <= lock1.p99,
    detail: `${a1.p99} ms vs ${lock1.p99} ms`,
  });
  out.push({
    name: 'at 1 SKU: adaptive abort rate ≤ 30 %',
    pass: a1.abortRate <= 0.3,
    detail: `${(a1.abortRate * 100).toFixed(1)} % (pure CAS: ${(cell('cas', 1).abortRate * 100).toFixed(1)} %)`,
  });
  const a1000 = cell('adaptive', 1000);
  const cas1000 = cell('cas', 1000);
  out.push({
    name: 'at 1000 SKUs: adaptive ≥ 0.9× pure CAS',
    pass: a1000.throughput >= 0.9 * cas1000.throughput,
    detail: `${a1000.throughput} vs ${cas1000.throughput} (${(a1000.throughput / cas1000.throughput).toFixed(2)}×)`,
  });
  out.push({
    name: 'at 1000 SKUs: adaptive abort rate < 10 %',
    pass: a1000.abortRate < 0.1,
    detail: `${(a1000.abortRate * 100).toFixed(1)} %`,
  });
  const lostElsewhere = cells.filter((c) => c.strategy !== 'naive' && c.lostUpdates !== 0);
  out.push({
    name: 'lost updates: 0 for every non-naive strategy',
    pass: lostElsewhere.length === 0,
    detail: lostElsewhere.length
      ? lostElsewhere.map((c) => `${c.strategy}@${c.skus}: ${c.lostUpdates}`).join(', ')
      : 'none',
  });
  const n1 = cell('naive', 1).lostUpdates;
  const n10 = cell('naive', 10).lostUpdates;
  out.push({
    name: 'naive loses updates at 1 and 10 SKUs (the bench contends)',
    pass: n1 > 0 && n10 > 0,
    detail: `${n1} at 1, ${n10} at 10`,
  });
  return out;
}

function p2Targets(p2r: P2Result): Target[] {
  const out: Target[] = [];
  out.push({
    name: 'P2: saga throughput ≥ 0.9× the essential-work floor',
    pass: p2r.ratio >= 0.9,
    detail: `${p2r.saga.perSecond}/s vs ${p2r.floor.perSecond}/s (${p2r.ratio}×)`,
  });
  out.push({
    name: "P2: saga p50 ≤ 1.25× the essential-work floor's",
    pass: p2r.p50Ratio <= 1.25,
    detail: `${p2r.saga.p50} ms vs ${p2r.floor.p50} ms (${p2r.p50Ratio}×)`,
  });
  return out;
}

function p3Target(p3r: { ratio?: number }): Target {
  return {
    name: 'P3: CAS commit path ≥ 0.5 of pgbench',
    pass: p3r.ratio !== undefined && p3r.ratio >= 0.5,
    detail: p3r.ratio === undefined ? 'not measured' : `${p3r.ratio}×`,
  };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: { quick: { type: 'boolean' }, only: { type: 'string' }, help: { type: 'boolean' } },
  });
  if (values.help) {
    say('Usage: npm run bench [-- --quick] [-- --only p1|p2|p3|seed003]');
    say('  quick: under 4 minutes; the full run takes about 10. --only runs one section and prints its targets;');
    say("  it does not write bench/results/ (that is the full table's).");
    return;
  }
  const SECTIONS = ['p1', 'p2', 'p3', 'seed003'] as const;
  if (values.only !== undefined && !(SECTIONS as readonly string[]).includes(values.only)) {
    process.stderr.write(`bench: --only must be one of ${SECTIONS.join(', ')}, not ${JSON.stringify(values.only)}\n`);
    process.exit(2);
  }
  const wanted = (section: (typeof SECTIONS)[number]): boolean => values.only === undefined || values.only === section;
  Runtime.install({ logger: new DefaultLogger('ERROR') });
  const quick = !!values.quick;
  const cellMs = quick ? 2_500 : 8_000;
  const p3Seconds = quick ? 4 : 10;
  const p2Orders = quick ? 30 : 120;
  const p2Rounds = quick ? 2 : 4; // even: ABBA order
  const started = Date.now();
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'order-saga-bench-'));
  chmodSync(tmp, 0o755);
  const pg = await ensurePostgres({
    dataDir: path.join(tmp, 'pg'),
    port: 55000 + (process.pid % 900),
    database: 'bench',
    persistent: false,
  });
  const db = createPool(pg.url, { max: POOL_SIZE });
  try {
    await migrateAll(db);
    const cells = wanted('p1') ? await p1(db, cellMs) : undefined;
    const p3r = wanted('p3') ? await p3(db, pg.url, p3Seconds) : undefined;
    const bursts = wanted('seed003') ? await seed003(pg.url) : undefined;
    const p2r = wanted('p2') ? await p2(pg.url, p2Orders, 20, p2Rounds) : undefined;
    const machine = `${os.cpus().length} × ${os.cpus()[0]?.model.trim() ?? 'cpu'}, ${Math.round(os.totalmem() / 2 ** 30)} GiB, Node ${process.version}`;
    const checks = targets(cells, p2r, p3r);

    say(`\n## Benchmark (${quick ? 'quick' : 'full'}) — ${new Date().toISOString()}`);
    say(`machine: ${machine}; Postgres from the embedded binaries; pool size ${POOL_SIZE} for every strategy`);
    if (cells) {
      say(
        `P1: ${WORKERS} concurrent workers, ${LOGIC_MS} ms of logic per task, ${cellMs / 1000} s per cell, ${LANES} serial lanes for adaptive\n`,
      );
      say('| strategy | SKUs | units/s | p50 ms | p99 ms | abort rate | attempts | lane | gave up | lost updates |');
      say('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
      for (const c of cells) {
        say(
          `| ${c.strategy} | ${c.skus} | ${c.throughput} | ${c.p50} | ${c.p99} | ${(c.abortRate * 100).toFixed(1)} % | ${c.attempts} | ${c.laneCommits} | ${c.gaveUp} | ${c.lostUpdates} |`,
        );
      }
    }
    if (bursts) {
      say(
        `\nSeed 003's arithmetic (one row, every request at once, a connection each; adaptive: ${LANES} serial lanes):\n`,
      );
      say(
        '| requests × logic | seed says (FOR UPDATE, logic in tx) | FOR UPDATE measured: last request done | p50 ms | adaptive: last request done | p50 ms | units taken (each) |',
      );
      say('|---|---|---:|---:|---:|---:|---:|');
      for (const c of SEED_003_CASES) {
        const [lock, adaptive] = ['for-update-logic-in-tx', 'adaptive'].map((st) =>
          bursts.find((b) => b.strategy === st && b.requests === c.requests)!,
        );
        say(
          `| ${c.requests} × ${c.logicMs} ms | ${c.seedSays} | ${(lock!.makespanMs / 1000).toFixed(2)} s | ${lock!.p50} | ${(adaptive!.makespanMs / 1000).toFixed(2)} s | ${adaptive!.p50} | ${lock!.taken}, ${adaptive!.taken} |`,
        );
      }
    }
    if (p2r) {
      say(
        `\nP2 (dev server, ${p2Orders} workflows × ${p2Rounds} rounds, 20 in flight, rounds in ABBA order; the floor is the five essential steps as no-op activities):\n`,
      );
      say('| workflow | per s | p50 ms | p99 ms | one order, idle stack (ms) | history events |');
      say('|---|---:|---:|---:|---:|---:|');
      say(
        `| full saga | ${p2r.saga.perSecond} | ${p2r.saga.p50} | ${p2r.saga.p99} | ${p2r.idle.saga} | ${p2r.historyEvents.saga} |`,
      );
      say(
        `| essential-work floor | ${p2r.floor.perSecond} | ${p2r.floor.p50} | ${p2r.floor.p99} | ${p2r.idle.floor} | ${p2r.historyEvents.floor} |`,
      );
      say(
        `| saga / floor | ${p2r.ratio}× | ${p2r.p50Ratio}× | ${(p2r.saga.p99 / p2r.floor.p99).toFixed(2)}× | ${(p2r.idle.saga / p2r.idle.floor).toFixed(2)}× | |`,
      );
      say(
        `| saga, no payload codec | ${p2r.plain.perSecond} | ${p2r.plain.p50} | ${p2r.plain.p99} | ${p2r.idle.plain} | |`,
      );
      say(
        `| codec's cost: with / without | ${p2r.codecRatio}× | ${(p2r.saga.p50 / p2r.plain.p50).toFixed(2)}× | ${(p2r.saga.p99 / p2r.plain.p99).toFixed(2)}× | ${(p2r.idle.saga / p2r.idle.plain).toFixed(2)}× | |`,
      );
    }
    if (p3r)
      say(
        `\nP3 (1000 keys, ${WORKERS} clients, ${p3Seconds} s): CAS commit path ${p3r.cas} tps, pgbench ${p3r.pgbench ?? '-'} tps → ratio ${p3r.ratio ?? '-'}${p3r.note ? ` (${p3r.note})` : ''}\n`,
      );
    say('| target | result | measured |');
    say('|---|---|---|');
    for (const t of checks) say(`| ${t.name} | ${t.pass ? 'PASS' : 'FAIL'} | ${t.detail} |`);
    say(
      `\n${checks.filter((t) => t.pass).length}/${checks.length} targets met; ${Math.round((Date.now() - started) / 1000)} s`,
    );
    if (values.only !== undefined || !cells) return;

    const dir = path.join(ROOT, 'bench', 'results');
    mkdirSync(dir, { recursive: true });
    writeFileSync(
      path.join(dir, 'latest.json'),
      `${JSON.stringify({ quick, machine, poolSize: POOL_SIZE, workers: WORKERS, logicMs: LOGIC_MS, lanes: LANES, cells, seed003: bursts, p2: p2r, p3: p3r, targets: checks, at: new Date().toISOString() }, null, 2)}\n`,
    );
    writeFileSync(
      path.join(dir, 'latest.svg'),
      renderChart(
        cells,
        `P1: ${WORKERS} workers × ${LOGIC_MS} ms logic, pool ${POOL_SIZE}, ${cellMs / 1000} s per cell — ${machine}`,
      ),
    );
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
