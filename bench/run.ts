/**
 * `npm run bench [-- --quick|--smoke]`: every measurement in one run, side by side, on this machine.
 *   contention     the contention matrix (contention.ts): 5 strategies × 1, 10, 1000 hot SKUs, 20
 *                  workers, 20 ms of logic each
 *   idle-latency   one order at a time on an idle stack (idle-latency.ts): the dev server's defaults,
 *                  then each latency setting of servers/latency.ts added in turn
 *   saga-overhead  the saga's overhead (saga-overhead.ts): the full saga against the essential-work
 *                  floor (the six steps as no-op activities), the cheapest floor (the six as no-op
 *                  local activities) and the like-for-like floor (the same steps local or regular as
 *                  the saga runs them), dev server (and, with --temporal server, the real server too,
 *                  report only); the saga without the payload codec; CPU per workflow by process
 *   engines        the saga's essential work on other engines (engines.ts): plain Node, DBOS and
 *                  Restate, on the same Postgres and provider (bench/engines/, installed on first use);
 *                  with saga-overhead, the saga's cost side by side with the floors and the engines
 *   trace          one order traced end to end (trace.ts): where its milliseconds go, and the
 *                  waterfall of its spans (bench/results/latest-trace.svg)
 *   commit-path    the commit path (commit-path.ts): CAS against pgbench's single-row UPDATE, same
 *                  database
 *   lock-queue     the lock queue (lock-queue.ts): 100 × 200 ms and 20 × 50 ms on one hot row, FOR
 *                  UPDATE held across the logic (requests queue behind each other's logic) vs adaptive
 *   cli            the command line's start-up (cli-startup.ts): --help, status and place as processes,
 *                  bin/client and npx tsx client.ts, beside the Temporal CLI's --help
 *   storefront     the storefront's edges (storefront.ts): POST /v1/orders to its early answer beside
 *                  client.ts place's, and the order events one relay delivers per second
 *   sweep          one sweep over 1k and 10k open orders (sweep.ts): time per sweep and per pass,
 *                  Temporal calls and database queries per order, the time to reach a fresh
 *                  stranding, and what 100k would cost by the same measure
 * --smoke runs every section at its smallest size and fails (exit 1) when one does not print its
 * table: what CI runs, for the bench's code, not its figures.
 * This file is the entry: it runs the sections the arguments ask for (options.ts), prints their tables
 * (report.ts) and targets (targets.ts), and writes the results files (bench/results/latest.json and
 * latest.svg, from a full run of every section).
 */
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { installRuntime } from '../platform/runtime';
import { migrateAll } from '../db/migrate';
import { createPool } from '../db/pool';
import { ensurePostgres } from '../servers/postgres';
import { renderChart } from './chart';
import { measureCommitPath } from './commit-path';
import { measureContention } from './contention';
import { measureCliStartup } from './cli-startup';
import { measureLockQueue } from './lock-queue';
import { say } from './measure';
import { measureEngines, type EngineSide } from './engines';
import { measureIdleLatency } from './idle-latency';
import {
  benchOptions,
  LANES,
  LOGIC_MS,
  POOL_SIZE,
  SECTIONS,
  SKU_LEVELS,
  SMOKE_LIMIT_MS,
  WORKERS,
  type Section,
} from './options';
import {
  reportCliStartup,
  reportCommitPath,
  reportContention,
  reportEngines,
  reportIdleLatency,
  reportLockQueue,
  reportSagaCost,
  reportSagaOverhead,
  reportStorefront,
  reportSweep,
  reportTargets,
  reportTrace,
} from './report';
import { measureSagaOverhead, type SagaOverheadResult } from './saga-overhead';
import { measureStorefront, type StorefrontResult } from './storefront';
import { measureSweep, type SweepBenchResult } from './sweep';
import { targets } from './targets';
import { traceOneOrder, type TraceResult } from './trace';
import { renderWaterfall } from './waterfall';

const ROOT = path.resolve(__dirname, '..');

async function main(): Promise<void> {
  const opts = benchOptions();
  if (!opts) return;
  const { smoke, quick, wanted } = opts;
  installRuntime('ERROR');
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
          durationMs: opts.cellMs,
        })
      : undefined;
    const commitPath = wanted('commit-path')
      ? await measureCommitPath(db, pg.url, { clients: WORKERS, seconds: opts.commitSeconds })
      : undefined;
    const lockQueue = wanted('lock-queue') ? await measureLockQueue(pg.url, LANES, opts.lockQueueCases) : undefined;
    const idleLatency = wanted('idle-latency')
      ? await measureIdleLatency(pg.url, { orders: opts.idleOrders })
      : undefined;
    const sagaOptions = {
      orders: opts.sagaOrders,
      concurrency: opts.sagaConcurrency,
      rounds: opts.sagaRounds,
      idleOrders: opts.sagaIdleOrders,
    };
    const pgSide = { url: pg.url, ...(pg.dataDir ? { dataDir: pg.dataDir } : {}) };
    if (wanted('saga-overhead') && opts.realServer) {
      // The real server's binaries, built once as npm start -- --temporal server builds them.
      const built = spawnSync('bash', [path.join(ROOT, 'scripts', 'ensure-servers.sh'), 'server'], {
        stdio: 'inherit',
      });
      if (built.status !== 0)
        throw new Error('could not build the Temporal server (scripts/ensure-servers.sh server failed)');
    }
    const sagaOverhead = wanted('saga-overhead') ? await measureSagaOverhead(pgSide, sagaOptions) : undefined;
    // --temporal server: the same section on the real Temporal server, report only.
    const sagaOnServer: SagaOverheadResult | undefined =
      wanted('saga-overhead') && opts.realServer
        ? await measureSagaOverhead(pgSide, { ...sagaOptions, temporal: 'server' })
        : undefined;
    let engines: EngineSide[] | string | undefined;
    if (wanted('engines')) {
      try {
        engines = await measureEngines(pgSide, opts.engines);
      } catch (err) {
        engines = (err as Error).message; // reported, and a failed target
      }
    }
    const trace: TraceResult | undefined = wanted('trace')
      ? await traceOneOrder(pg.url, { warmUps: opts.traceWarmUps })
      : undefined;
    const cli = wanted('cli') ? await measureCliStartup(pg.url, { runs: opts.cliRuns }) : undefined;
    const sweep: SweepBenchResult | undefined = wanted('sweep') ? await measureSweep(pg.url, opts.sweep) : undefined;
    const storefront: StorefrontResult | undefined = wanted('storefront')
      ? await measureStorefront(pg.url, opts.storefront)
      : undefined;
    const machine = `${os.cpus().length} × ${os.cpus()[0]?.model.trim() ?? 'cpu'}, ${Math.round(os.totalmem() / 2 ** 30)} GiB, Node ${process.version}`;
    const checks = targets(cells, idleLatency, sagaOverhead, commitPath, cli, engines, sweep);

    say(`\n## Benchmark (${opts.kind}) — ${new Date().toISOString()}`);
    say(`machine: ${machine}; Postgres from the embedded binaries; pool size ${POOL_SIZE} for every strategy`);
    if (cells) {
      reportContention(cells, opts.cellMs);
      printed.add('contention');
    }
    if (lockQueue) {
      reportLockQueue(lockQueue, opts.lockQueueCases);
      printed.add('lock-queue');
    }
    if (idleLatency) {
      reportIdleLatency(idleLatency, opts.idleOrders);
      printed.add('idle-latency');
    }
    if (sagaOverhead) {
      reportSagaOverhead(sagaOverhead, opts.sagaOrders, opts.sagaRounds, opts.sagaConcurrency);
      printed.add('saga-overhead');
    }
    if (sagaOnServer) reportSagaOverhead(sagaOnServer, opts.sagaOrders, opts.sagaRounds, opts.sagaConcurrency);
    if (engines !== undefined) {
      reportEngines(engines, opts.engines, sagaOverhead);
      if (typeof engines !== 'string') printed.add('engines');
    }
    if (Array.isArray(engines)) {
      if (sagaOverhead) reportSagaCost(sagaOverhead, engines, opts.sagaConcurrency);
      if (sagaOnServer) reportSagaCost(sagaOnServer, engines, opts.sagaConcurrency, true);
    }
    if (trace) {
      // The waterfall is the trace section's own file: written by --only trace too.
      const svg = path.join(ROOT, 'bench', 'results', 'latest-trace.svg');
      mkdirSync(path.dirname(svg), { recursive: true });
      writeFileSync(svg, renderWaterfall(trace, `One order, traced: ${trace.spans.length} spans — ${machine}`));
      say(`\nwrote bench/results/latest-trace.svg`);
      reportTrace(trace, opts.traceWarmUps);
      printed.add('trace');
    }
    if (cli) {
      reportCliStartup(cli);
      printed.add('cli');
    }
    if (commitPath) {
      reportCommitPath(commitPath, opts.commitSeconds);
      printed.add('commit-path');
    }
    if (sweep) {
      reportSweep(sweep);
      printed.add('sweep');
    }
    if (storefront) {
      reportStorefront(storefront);
      printed.add('storefront');
    }
    reportTargets(checks, started);
    if (smoke) {
      const missing = SECTIONS.filter((s) => wanted(s) && !printed.has(s));
      if (missing.length) {
        process.stderr.write(`bench smoke: no table from ${missing.join(', ')}\n`);
        process.exitCode = 1;
      } else say(`bench smoke: every section printed its table (${printed.size})`);
      return;
    }
    if (opts.only !== undefined || !cells) return;

    const dir = path.join(ROOT, 'bench', 'results');
    mkdirSync(dir, { recursive: true });
    writeFileSync(
      path.join(dir, 'latest.json'),
      `${JSON.stringify({ quick, machine, poolSize: POOL_SIZE, workers: WORKERS, logicMs: LOGIC_MS, lanes: LANES, cells, lockQueue, idleLatency, sagaOverhead, sagaOnServer, engines, trace, commitPath, sweep, storefront, targets: checks, at: new Date().toISOString() }, null, 2)}\n`,
    );
    writeFileSync(
      path.join(dir, 'latest.svg'),
      renderChart(
        cells,
        `Contention matrix: ${WORKERS} workers × ${LOGIC_MS} ms logic, pool ${POOL_SIZE}, ${opts.cellMs / 1000} s per cell — ${machine}`,
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
