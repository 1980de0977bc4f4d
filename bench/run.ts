/**
 * `npm run bench [-- --quick]`: every measurement in one run, side by side, on this machine.
 *   contention     the contention matrix (contention.ts): 5 strategies × 1, 10, 1000 hot SKUs, 20
 *                  workers, 20 ms of logic each
 *   saga-overhead  the saga's overhead (saga-overhead.ts): the full saga against the essential-work
 *                  floor, the five steps as no-op activities (dev server), and the saga without the
 *                  payload codec
 *   commit-path    the commit path (commit-path.ts): CAS against pgbench's single-row UPDATE, same
 *                  database
 *   lock-queue     the lock queue (lock-queue.ts): 100 × 200 ms and 20 × 50 ms on one hot row, FOR
 *                  UPDATE held across the logic (requests queue behind each other's logic) vs adaptive
 * This file is the entry: the arguments, which sections run, the targets, the report, and the results
 * files (bench/results/latest.json and latest.svg, from a full run of every section).
 */
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { installRuntime } from '../platform/runtime';
import { migrateAll } from '../db/migrate';
import { createPool } from '../db/pool';
import { ensurePostgres } from '../servers/postgres';
import { renderChart } from './chart';
import { measureCommitPath } from './commit-path';
import { measureContention } from './contention';
import { LOCK_QUEUE_CASES, measureLockQueue } from './lock-queue';
import { say } from './measure';
import { measureSagaOverhead, type SagaOverheadResult } from './saga-overhead';
import type { CellResult } from './strategies';

const ROOT = path.resolve(__dirname, '..');
const POOL_SIZE = 24; // one pool size for every strategy: 20 workers + 4 lane slots
const WORKERS = 20;
const LOGIC_MS = 20;
const LANES = 4;
const SKU_LEVELS = [1, 10, 1000];

/** The values of --only, one per section. */
const SECTIONS = ['contention', 'saga-overhead', 'commit-path', 'lock-queue'] as const;
type Section = (typeof SECTIONS)[number];

interface Target {
  name: string;
  pass: boolean;
  detail: string;
}

function targets(
  cells: CellResult[] | undefined,
  saga: SagaOverheadResult | undefined,
  commit: { ratio?: number } | undefined,
): Target[] {
  return [
    ...(cells ? contentionTargets(cells) : []),
    ...(saga ? sagaOverheadTargets(saga) : []),
    ...(commit ? [commitPathTarget(commit)] : []),
  ];
}

function contentionTargets(cells: CellResult[]): Target[] {
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

function sagaOverheadTargets(saga: SagaOverheadResult): Target[] {
  const out: Target[] = [];
  out.push({
    name: 'saga overhead: saga throughput ≥ 0.9× the essential-work floor',
    pass: saga.ratio >= 0.9,
    detail: `${saga.saga.perSecond}/s vs ${saga.floor.perSecond}/s (${saga.ratio}×)`,
  });
  out.push({
    name: "saga overhead: saga p50 ≤ 1.25× the essential-work floor's",
    pass: saga.p50Ratio <= 1.25,
    detail: `${saga.saga.p50} ms vs ${saga.floor.p50} ms (${saga.p50Ratio}×)`,
  });
  return out;
}

function commitPathTarget(commit: { ratio?: number }): Target {
  return {
    name: 'commit path: CAS ≥ 0.5 of pgbench',
    pass: commit.ratio !== undefined && commit.ratio >= 0.5,
    detail: commit.ratio === undefined ? 'not measured' : `${commit.ratio}×`,
  };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: { quick: { type: 'boolean' }, only: { type: 'string' }, help: { type: 'boolean' } },
  });
  if (values.help) {
    say(`Usage: npm run bench [-- --quick] [-- --only ${SECTIONS.join('|')}]`);
    say('  quick: under 4 minutes; the full run takes about 10. --only runs one section and prints its targets;');
    say("  it does not write bench/results/ (that is the full table's).");
    return;
  }
  if (values.only !== undefined && !(SECTIONS as readonly string[]).includes(values.only)) {
    process.stderr.write(`bench: --only must be one of ${SECTIONS.join(', ')}, not ${JSON.stringify(values.only)}\n`);
    process.exit(2);
  }
  const wanted = (section: Section): boolean => values.only === undefined || values.only === section;
  installRuntime('ERROR');
  const quick = !!values.quick;
  const cellMs = quick ? 2_500 : 8_000;
  const commitSeconds = quick ? 4 : 10;
  const sagaOrders = quick ? 30 : 120;
  const sagaRounds = quick ? 2 : 4; // even: ABBA order
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
    const cells = wanted('contention')
      ? await measureContention(db, {
          skuLevels: SKU_LEVELS,
          workers: WORKERS,
          logicMs: LOGIC_MS,
          lanes: LANES,
          durationMs: cellMs,
        })
      : undefined;
    const commitPath = wanted('commit-path')
      ? await measureCommitPath(db, pg.url, { clients: WORKERS, seconds: commitSeconds })
      : undefined;
    const lockQueue = wanted('lock-queue') ? await measureLockQueue(pg.url, LANES) : undefined;
    const sagaOverhead = wanted('saga-overhead')
      ? await measureSagaOverhead(pg.url, { orders: sagaOrders, concurrency: 20, rounds: sagaRounds })
      : undefined;
    const machine = `${os.cpus().length} × ${os.cpus()[0]?.model.trim() ?? 'cpu'}, ${Math.round(os.totalmem() / 2 ** 30)} GiB, Node ${process.version}`;
    const checks = targets(cells, sagaOverhead, commitPath);

    say(`\n## Benchmark (${quick ? 'quick' : 'full'}) — ${new Date().toISOString()}`);
    say(`machine: ${machine}; Postgres from the embedded binaries; pool size ${POOL_SIZE} for every strategy`);
    if (cells) {
      say(
        `Contention matrix: ${WORKERS} concurrent workers, ${LOGIC_MS} ms of logic per task, ${cellMs / 1000} s per cell, ${LANES} serial lanes for adaptive\n`,
      );
      say('| strategy | SKUs | units/s | p50 ms | p99 ms | abort rate | attempts | lane | gave up | lost updates |');
      say('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
      for (const c of cells) {
        say(
          `| ${c.strategy} | ${c.skus} | ${c.throughput} | ${c.p50} | ${c.p99} | ${(c.abortRate * 100).toFixed(1)} % | ${c.attempts} | ${c.laneCommits} | ${c.gaveUp} | ${c.lostUpdates} |`,
        );
      }
    }
    if (lockQueue) {
      say(`\nLock queue (one row, every request at once, a connection each; adaptive: ${LANES} serial lanes):\n`);
      say(
        '| requests × logic | expected (FOR UPDATE, logic in tx) | FOR UPDATE measured: last request done | p50 ms | adaptive: last request done | p50 ms | units taken (each) |',
      );
      say('|---|---|---:|---:|---:|---:|---:|');
      for (const c of LOCK_QUEUE_CASES) {
        const [lock, adaptive] = ['for-update-logic-in-tx', 'adaptive'].map((st) =>
          lockQueue.find((b) => b.strategy === st && b.requests === c.requests)!,
        );
        say(
          `| ${c.requests} × ${c.logicMs} ms | ${c.expected} | ${(lock!.makespanMs / 1000).toFixed(2)} s | ${lock!.p50} | ${(adaptive!.makespanMs / 1000).toFixed(2)} s | ${adaptive!.p50} | ${lock!.taken}, ${adaptive!.taken} |`,
        );
      }
    }
    if (sagaOverhead) {
      say(
        `\nSaga overhead (dev server, ${sagaOrders} workflows × ${sagaRounds} rounds, 20 in flight, rounds in ABBA order; the floor is the five essential steps as no-op activities):\n`,
      );
      say('| workflow | per s | p50 ms | p99 ms | one order, idle stack (ms) | history events |');
      say('|---|---:|---:|---:|---:|---:|');
      say(
        `| full saga | ${sagaOverhead.saga.perSecond} | ${sagaOverhead.saga.p50} | ${sagaOverhead.saga.p99} | ${sagaOverhead.idle.saga} | ${sagaOverhead.historyEvents.saga} |`,
      );
      say(
        `| essential-work floor | ${sagaOverhead.floor.perSecond} | ${sagaOverhead.floor.p50} | ${sagaOverhead.floor.p99} | ${sagaOverhead.idle.floor} | ${sagaOverhead.historyEvents.floor} |`,
      );
      say(
        `| saga / floor | ${sagaOverhead.ratio}× | ${sagaOverhead.p50Ratio}× | ${(sagaOverhead.saga.p99 / sagaOverhead.floor.p99).toFixed(2)}× | ${(sagaOverhead.idle.saga / sagaOverhead.idle.floor).toFixed(2)}× | |`,
      );
      say(
        `| saga, no payload codec | ${sagaOverhead.plain.perSecond} | ${sagaOverhead.plain.p50} | ${sagaOverhead.plain.p99} | ${sagaOverhead.idle.plain} | |`,
      );
      say(
        `| codec's cost: with / without | ${sagaOverhead.codecRatio}× | ${(sagaOverhead.saga.p50 / sagaOverhead.plain.p50).toFixed(2)}× | ${(sagaOverhead.saga.p99 / sagaOverhead.plain.p99).toFixed(2)}× | ${(sagaOverhead.idle.saga / sagaOverhead.idle.plain).toFixed(2)}× | |`,
      );
    }
    if (commitPath)
      say(
        `\nCommit path (1000 keys, ${WORKERS} clients, ${commitSeconds} s): CAS commit path ${commitPath.cas} tps, pgbench ${commitPath.pgbench ?? '-'} tps → ratio ${commitPath.ratio ?? '-'}${commitPath.note ? ` (${commitPath.note})` : ''}\n`,
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
      `${JSON.stringify({ quick, machine, poolSize: POOL_SIZE, workers: WORKERS, logicMs: LOGIC_MS, lanes: LANES, cells, lockQueue, sagaOverhead, commitPath, targets: checks, at: new Date().toISOString() }, null, 2)}\n`,
    );
    writeFileSync(
      path.join(dir, 'latest.svg'),
      renderChart(
        cells,
        `Contention matrix: ${WORKERS} workers × ${LOGIC_MS} ms logic, pool ${POOL_SIZE}, ${cellMs / 1000} s per cell — ${machine}`,
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
