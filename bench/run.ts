/**
 * `npm run bench [-- --quick|--smoke]`: every measurement in one run, side by side, on this machine.
 *   contention     the contention matrix (contention.ts): 5 strategies × 1, 10, 1000 hot SKUs, 20
 *                  workers, 20 ms of logic each
 *   idle-latency   one order at a time on an idle stack (idle-latency.ts): the dev server's defaults,
 *                  then each latency setting of servers/latency.ts added in turn
 *   saga-overhead  the saga's overhead (saga-overhead.ts): the full saga against the essential-work
 *                  floor (the five steps as no-op activities) and the like-for-like floor (the same
 *                  steps local or regular as the saga runs them), dev server; the saga without the
 *                  payload codec; CPU per workflow by process
 *   engines        the saga's essential work on other engines (engines.ts): plain Node, DBOS and
 *                  Restate, on the same Postgres and provider (bench/engines/, installed on first use)
 *   trace          one order traced end to end (trace.ts): where its milliseconds go, and the
 *                  waterfall of its spans (bench/results/latest-trace.svg)
 *   commit-path    the commit path (commit-path.ts): CAS against pgbench's single-row UPDATE, same
 *                  database
 *   lock-queue     the lock queue (lock-queue.ts): 100 × 200 ms and 20 × 50 ms on one hot row, FOR
 *                  UPDATE held across the logic (requests queue behind each other's logic) vs adaptive
 *   cli            the command line's start-up (cli-startup.ts): --help, status and place as processes,
 *                  bin/client and npx tsx client.ts, beside the Temporal CLI's --help
 * --smoke runs every section at its smallest size and fails (exit 1) when one does not print its
 * table: what CI runs, for the bench's code, not its figures.
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
import { measureCliStartup, type CliStartupResult } from './cli-startup';
import { LOCK_QUEUE_CASES, measureLockQueue } from './lock-queue';
import { ratio, say } from './measure';
import { enginesTable, measureEngines, type EngineSide, type EnginesOptions } from './engines';
import { measureIdleLatency, type IdleStep } from './idle-latency';
import { costTable } from './saga-cost';
import { measureSagaOverhead, type SagaOverheadResult } from './saga-overhead';
import { traceOneOrder, type TraceResult } from './trace';
import { formatTimeTable, renderWaterfall } from './waterfall';
import type { CellResult } from './strategies';

const ROOT = path.resolve(__dirname, '..');
const POOL_SIZE = 24; // one pool size for every strategy: 20 workers + 4 lane slots
const WORKERS = 20;
const LOGIC_MS = 20;
const LANES = 4;
const SKU_LEVELS = [1, 10, 1000];
/** How long a smoke may take before it fails. */
const SMOKE_LIMIT_MS = 10 * 60_000;

/** The values of --only, one per section. */
const SECTIONS = [
  'contention',
  'idle-latency',
  'saga-overhead',
  'engines',
  'trace',
  'commit-path',
  'lock-queue',
  'cli',
] as const;
type Section = (typeof SECTIONS)[number];

interface Target {
  name: string;
  pass: boolean;
  detail: string;
}

function targets(
  cells: CellResult[] | undefined,
  idle: IdleStep[] | undefined,
  saga: SagaOverheadResult | undefined,
  commit: { ratio?: number } | undefined,
  cli: CliStartupResult | undefined,
): Target[] {
  return [
    ...(cells ? contentionTargets(cells) : []),
    ...(idle ? [idleTarget(idle)] : []),
    ...(saga ? sagaOverheadTargets(saga) : []),
    ...(commit ? [commitPathTarget(commit)] : []),
    ...(cli ? cliTargets(cli) : []),
  ];
}

function cliTargets(cli: CliStartupResult): Target[] {
  const row = (command: string) => cli.rows.find((r) => r.command === command)!;
  return [
    { command: 'bin/client --help', limit: 300 },
    { command: 'bin/client status <finished order>', limit: 500 },
  ].map(({ command, limit }) => ({
    name: `${command}: whole command p50 ≤ ${limit} ms`,
    pass: row(command).p50 <= limit,
    detail: `${row(command).p50} ms (max ${row(command).max}, ${row(command).runs} runs)`,
  }));
}

function reportCliStartup(cli: CliStartupResult): void {
  say(
    `\nThe command line's start-up (each command a process, spawn to exit; against this bench's own dev server, provider and worker; ${cli.temporal}):\n`,
  );
  say('| command | p50 ms | max ms | runs |');
  say('|---|---:|---:|---:|');
  for (const r of cli.rows) say(`| \`${r.command}\` | ${r.p50} | ${r.max} | ${r.runs} |`);
  say(
    `\nbin/client place, whole command p50 ${cli.place.wholeP50} ms; its orders' own end-to-end time (start to close, server's clock) p50 ${cli.place.orderP50} ms (${cli.place.runs} orders): the command adds ${cli.place.wholeP50 - cli.place.orderP50} ms. bin/client's build, on its first run after a change: ${cli.buildMs} ms.`,
  );
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

function idleTarget(steps: IdleStep[]): Target {
  const last = steps[steps.length - 1]!;
  return {
    name: 'one order on an idle stack (file-backed dev server, as npm start), every latency setting: p50 ≤ 80 ms',
    pass: last.p50 <= 80,
    detail: `${last.p50} ms (p90 ${last.p90}; the dev server's defaults: ${steps[0]!.p50} ms)`,
  };
}

function sagaOverheadTargets(saga: SagaOverheadResult): Target[] {
  const out: Target[] = [];
  /**
   * The rounds' spread; a verdict whose rounds fall on both sides of its threshold is marked unstable.
   * `at-least`: the target is ratio ≥ threshold (throughput); `at-most`: ratio ≤ threshold (p50).
   */
  const spread = (x: { min: number; max: number }, threshold: number, kind: 'at-least' | 'at-most'): string => {
    const both =
      kind === 'at-least' ? x.min < threshold && x.max >= threshold : x.min <= threshold && x.max > threshold;
    return `rounds ${x.min}–${x.max}×${both ? '; unstable: the rounds fall on both sides' : ''}`;
  };
  out.push({
    name: 'like-for-like floor: its local and regular steps are the saga’s (a completed saga’s history)',
    pass: saga.kinds.like.local === saga.kinds.saga.local && saga.kinds.like.regular === saga.kinds.saga.regular,
    detail: `saga ${saga.kinds.saga.local} local + ${saga.kinds.saga.regular} regular, floor ${saga.kinds.like.local} + ${saga.kinds.like.regular}`,
  });
  out.push({
    name: 'saga throughput ≥ 0.8× the like-for-like floor',
    pass: saga.likeRatio >= 0.8,
    detail: `${saga.saga.perSecond}/s vs ${saga.like.perSecond}/s (${saga.likeRatio}×; ${spread(saga.likeSpread.throughput, 0.8, 'at-least')})`,
  });
  out.push({
    name: 'saga p50 ≤ 1.5× the like-for-like floor’s',
    pass: saga.likeP50Ratio <= 1.5,
    detail: `${saga.saga.p50} ms vs ${saga.like.p50} ms (${saga.likeP50Ratio}×; ${spread(saga.likeSpread.p50, 1.5, 'at-most')})`,
  });
  out.push({
    name: 'saga CPU per order ≤ 1.5× the like-for-like floor’s (all processes)',
    pass: saga.likeCpuRatio <= 1.5,
    detail: `${saga.saga.cpuTotal} ms vs ${saga.like.cpuTotal} ms (${saga.likeCpuRatio}×)`,
  });
  out.push({
    name: 'saga overhead: saga throughput ≥ 0.9× the essential-work floor',
    pass: saga.ratio >= 0.9,
    detail: `${saga.saga.perSecond}/s vs ${saga.floor.perSecond}/s (${saga.ratio}×; ${spread(saga.floorSpread.throughput, 0.9, 'at-least')})`,
  });
  out.push({
    name: "saga overhead: saga p50 ≤ 1.25× the essential-work floor's",
    pass: saga.p50Ratio <= 1.25,
    detail: `${saga.saga.p50} ms vs ${saga.floor.p50} ms (${saga.p50Ratio}×; ${spread(saga.floorSpread.p50, 1.25, 'at-most')})`,
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

/** The engines' table, with the Temporal saga's row from the saga-overhead section when it ran. */
function reportEngines(engines: EngineSide[] | string, opts: EnginesOptions, saga?: SagaOverheadResult): void {
  say(
    `\nEngines: the saga's essential work (createOrder, reserve, charge through the provider, ship, confirm: the project's own activities) on each engine, same Postgres and provider; ${opts.idleOrders} orders one at a time, then ${opts.rounds} rounds of ${opts.orders} with ${opts.concurrency} in flight (ABBA); CPU per order by process:\n`,
  );
  if (typeof engines === 'string') {
    say(`not measured: ${engines}`);
    return;
  }
  const sides: EngineSide[] = saga
    ? [
        {
          engine: 'Temporal saga (dev server; saga-overhead section)',
          idle: { p50: saga.idle.saga, p90: saga.idleSagaP90 },
          perSecond: saga.saga.perSecond,
          cpuMsPerOrder: saga.saga.cpuMs,
          cpuTotal: saga.saga.cpuTotal,
          persists:
            "every event of the run's history in the dev server's SQLite file (WAL, synchronous=normal: kept across a crash of the process, not a power cut)",
        },
        ...engines,
      ]
    : engines;
  say(enginesTable(sides, opts));
}

function reportSagaOverhead(o: SagaOverheadResult, orders: number, rounds: number, concurrency: number): void {
  say(
    `\nSaga overhead (dev server, history in a SQLite file as npm start keeps it, ${orders} workflows × ${rounds} rounds, ${concurrency} in flight, rounds in ABBA order; the floors are the five essential steps as no-ops: all regular activities, and like for like, local or regular as the saga runs them):\n`,
  );
  say('| workflow | per s | p50 ms | p99 ms | one order, idle stack (ms) | history events |');
  say('|---|---:|---:|---:|---:|---:|');
  const row = (name: string, x: SagaOverheadResult['saga'], idle: number, events: number | string) =>
    say(`| ${name} | ${x.perSecond} | ${x.p50} | ${x.p99} | ${idle} | ${events} |`);
  const rel = (name: string, a: SagaOverheadResult['saga'], b: SagaOverheadResult['saga'], ia: number, ib: number) =>
    say(
      `| ${name} | ${ratio(a.perSecond, b.perSecond)}× | ${ratio(a.p50, b.p50)}× | ${ratio(a.p99, b.p99)}× | ${ratio(ia, ib)}× | |`,
    );
  row('full saga', o.saga, o.idle.saga, o.historyEvents.saga);
  row('essential-work floor (5 regular)', o.floor, o.idle.floor, o.historyEvents.floor);
  row('like-for-like floor', o.like, o.idle.like, o.historyEvents.like);
  rel('saga / essential-work floor', o.saga, o.floor, o.idle.saga, o.idle.floor);
  rel('saga / like-for-like floor', o.saga, o.like, o.idle.saga, o.idle.like);
  row('saga, no payload codec', o.plain, o.idle.plain, '');
  rel("codec's cost: with / without", o.saga, o.plain, o.idle.saga, o.idle.plain);
  say(
    `\nSaga against the like-for-like floor, round by round: throughput ${o.likeSpread.throughput.min}–${o.likeSpread.throughput.max}×, p50 ${o.likeSpread.p50.min}–${o.likeSpread.p50.max}×`,
  );
  say(`\nThe saga's own cost, counted (promises: median of one workflow at a time, workflow code in this process):\n`);
  for (const line of costTable(o.cost.saga, o.cost.like)) say(line);
  const procs = Object.keys(o.saga.cpuMs);
  say(
    '\nCPU per workflow by process, ms (during the rounds under load; worker = the bench process: worker and load generator):\n',
  );
  say(`| workflow | ${procs.join(' | ')} | total |`);
  say(`|---|${procs.map(() => '---:').join('|')}|---:|`);
  for (const [name, x] of [
    ['full saga', o.saga],
    ['essential-work floor (5 regular)', o.floor],
    ['like-for-like floor', o.like],
    ['saga, no payload codec', o.plain],
  ] as const)
    say(`| ${name} | ${procs.map((p) => x.cpuMs[p]).join(' | ')} | ${x.cpuTotal} |`);
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      quick: { type: 'boolean' },
      smoke: { type: 'boolean' },
      only: { type: 'string' },
      help: { type: 'boolean' },
    },
  });
  if (values.help) {
    say(`Usage: npm run bench [-- --quick|--smoke] [-- --only ${SECTIONS.join('|')}]`);
    say('  quick: about 5 minutes; the full run about 8. --only runs one section and prints its targets;');
    say("  it does not write bench/results/ (that is the full table's).");
    say('  smoke: every section at its smallest size (a few minutes), for CI: exit 1 when a section');
    say('  breaks or prints no table; its figures mean nothing and nothing is written.');
    return;
  }
  if (values.only !== undefined && !(SECTIONS as readonly string[]).includes(values.only)) {
    process.stderr.write(`bench: --only must be one of ${SECTIONS.join(', ')}, not ${JSON.stringify(values.only)}\n`);
    process.exit(2);
  }
  const wanted = (section: Section): boolean => values.only === undefined || values.only === section;
  installRuntime('ERROR');
  const smoke = !!values.smoke;
  const quick = !!values.quick;
  const size = <T>(full: T, q: T, s: T): T => (smoke ? s : quick ? q : full);
  const cellMs = size(8_000, 2_500, 300);
  const commitSeconds = size(10, 4, 1);
  const sagaOrders = size(120, 30, 4);
  const sagaRounds = size(4, 4, 2); // even: ABBA order; a quick run has as many rounds, shorter, for the spread
  const sagaConcurrency = size(20, 20, 4);
  const idleOrders = size(20, 8, 1);
  const cliRuns = size(10, 5, 1);
  const started = Date.now();
  /** The sections whose table was printed (a smoke fails on any other it ran). */
  const printed = new Set<Section>();
  if (smoke) {
    setTimeout(() => {
      process.stderr.write(`bench smoke: not finished within ${SMOKE_LIMIT_MS / 60_000} minutes\n`);
      process.exit(1);
    }, SMOKE_LIMIT_MS).unref();
  }
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
    const lockQueueCases = smoke ? LOCK_QUEUE_CASES.slice(-1) : LOCK_QUEUE_CASES;
    const lockQueue = wanted('lock-queue') ? await measureLockQueue(pg.url, LANES, lockQueueCases) : undefined;
    const idleLatency = wanted('idle-latency') ? await measureIdleLatency(pg.url, { orders: idleOrders }) : undefined;
    const sagaOverhead = wanted('saga-overhead')
      ? await measureSagaOverhead(
          { url: pg.url, ...(pg.dataDir ? { dataDir: pg.dataDir } : {}) },
          { orders: sagaOrders, concurrency: sagaConcurrency, rounds: sagaRounds, idleOrders: size(20, 20, 1) },
        )
      : undefined;
    const enginesOpts: EnginesOptions = size(
      { idleOrders: 20, orders: 120, concurrency: 20, rounds: 4 }, // as the saga's rounds
      { idleOrders: 10, orders: 40, concurrency: 20, rounds: 2 },
      { idleOrders: 1, orders: 4, concurrency: 4, rounds: 2 },
    );
    let engines: EngineSide[] | string | undefined;
    if (wanted('engines')) {
      try {
        engines = await measureEngines({ url: pg.url, ...(pg.dataDir ? { dataDir: pg.dataDir } : {}) }, enginesOpts);
      } catch (err) {
        engines = (err as Error).message; // reported, and a failed target
      }
    }
    const traceWarmUps = size(5, 5, 1);
    const trace: TraceResult | undefined = wanted('trace')
      ? await traceOneOrder(pg.url, { warmUps: traceWarmUps })
      : undefined;
    const cli = wanted('cli') ? await measureCliStartup(pg.url, { runs: cliRuns }) : undefined;
    const machine = `${os.cpus().length} × ${os.cpus()[0]?.model.trim() ?? 'cpu'}, ${Math.round(os.totalmem() / 2 ** 30)} GiB, Node ${process.version}`;
    const checks = [
      ...targets(cells, idleLatency, sagaOverhead, commitPath, cli),
      ...(engines === undefined
        ? []
        : [
            {
              name: 'engines: every engine measured',
              pass: typeof engines !== 'string',
              detail: typeof engines === 'string' ? engines : engines.map((e) => e.engine).join(', '),
            },
          ]),
    ];

    say(`\n## Benchmark (${size('full', 'quick', 'smoke')}) — ${new Date().toISOString()}`);
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
      printed.add('contention');
    }
    if (lockQueue) {
      say(`\nLock queue (one row, every request at once, a connection each; adaptive: ${LANES} serial lanes):\n`);
      say(
        '| requests × logic | expected (FOR UPDATE, logic in tx) | FOR UPDATE measured: last request done | p50 ms | adaptive: last request done | p50 ms | units taken (each) |',
      );
      say('|---|---|---:|---:|---:|---:|---:|');
      for (const c of lockQueueCases) {
        const [lock, adaptive] = ['for-update-logic-in-tx', 'adaptive'].map((st) =>
          lockQueue.find((b) => b.strategy === st && b.requests === c.requests)!,
        );
        say(
          `| ${c.requests} × ${c.logicMs} ms | ${c.expected} | ${(lock!.makespanMs / 1000).toFixed(2)} s | ${lock!.p50} | ${(adaptive!.makespanMs / 1000).toFixed(2)} s | ${adaptive!.p50} | ${lock!.taken}, ${adaptive!.taken} |`,
        );
      }
      printed.add('lock-queue');
    }
    if (idleLatency) {
      say(
        `\nIdle latency (one order at a time, ${idleOrders} each after a warm-up; a fresh dev server per row, history in a SQLite file as npm start keeps it; each row adds one setting of servers/latency.ts to the row above):\n`,
      );
      say('| setting | saga p50 ms | saga p90 ms | five no-op regular activities, p50 ms |');
      say('|---|---:|---:|---:|');
      for (const st of idleLatency) {
        const what = st.setting === 'defaults' ? "the dev server's defaults" : `+ ${st.setting}`;
        say(`| ${what} | ${st.p50} | ${st.p90} | ${st.floorP50} |`);
      }
      printed.add('idle-latency');
    }
    if (sagaOverhead) {
      reportSagaOverhead(sagaOverhead, sagaOrders, sagaRounds, sagaConcurrency);
      printed.add('saga-overhead');
    }
    if (engines !== undefined) {
      reportEngines(engines, enginesOpts, sagaOverhead);
      if (typeof engines !== 'string') printed.add('engines');
    }
    if (trace) {
      // The waterfall is the trace section's own file: written by --only trace too.
      const svg = path.join(ROOT, 'bench', 'results', 'latest-trace.svg');
      mkdirSync(path.dirname(svg), { recursive: true });
      writeFileSync(svg, renderWaterfall(trace, `One order, traced: ${trace.spans.length} spans — ${machine}`));
      say(`\nwrote bench/results/latest-trace.svg`);
      say(
        `\nOne order, traced (dev server with the latency settings, after ${traceWarmUps} warm-up orders; trace ${trace.traceId}; one sample):\n`,
      );
      say(formatTimeTable(trace));
      say(`\nlargest span: ${trace.largest.name}, ${trace.largest.durationMs} ms`);
      printed.add('trace');
    }
    if (cli) {
      reportCliStartup(cli);
      printed.add('cli');
    }
    if (commitPath) {
      say(
        `\nCommit path (1000 keys, ${WORKERS} clients, ${commitSeconds} s): CAS commit path ${commitPath.cas} tps, pgbench ${commitPath.pgbench ?? '-'} tps → ratio ${commitPath.ratio ?? '-'}${commitPath.note ? ` (${commitPath.note})` : ''}\n`,
      );
      printed.add('commit-path');
    }
    say('| target | result | measured |');
    say('|---|---|---|');
    for (const t of checks) say(`| ${t.name} | ${t.pass ? 'PASS' : 'FAIL'} | ${t.detail} |`);
    say(
      `\n${checks.filter((t) => t.pass).length}/${checks.length} targets met; ${Math.round((Date.now() - started) / 1000)} s`,
    );
    if (smoke) {
      const missing = SECTIONS.filter((s) => wanted(s) && !printed.has(s));
      if (missing.length) {
        process.stderr.write(`bench smoke: no table from ${missing.join(', ')}\n`);
        process.exitCode = 1;
      } else say(`bench smoke: every section printed its table (${printed.size})`);
      return;
    }
    if (values.only !== undefined || !cells) return;

    const dir = path.join(ROOT, 'bench', 'results');
    mkdirSync(dir, { recursive: true });
    writeFileSync(
      path.join(dir, 'latest.json'),
      `${JSON.stringify({ quick, machine, poolSize: POOL_SIZE, workers: WORKERS, logicMs: LOGIC_MS, lanes: LANES, cells, lockQueue, idleLatency, sagaOverhead, engines, trace, commitPath, targets: checks, at: new Date().toISOString() }, null, 2)}\n`,
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
