/**
 * The saga's overhead: the full order saga against two floors of the essential work (`workflows.ts`):
 * the six essential steps as no-op regular activities, and the like-for-like floor (the same steps
 * local or regular as the saga runs them), on the dev server, with one worker of the production
 * worker's settings; and the same saga without the payload codec, for the codec's cost. CPU per
 * workflow by process (dev server, worker, provider, Postgres) for each, from /proc (`cpu.ts`).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client } from '@temporalio/client';
import { Worker, type WorkerOptions } from '@temporalio/worker';
import { createPool } from '../db/pool';
import { stopProcess } from '../platform/processes';
import { startDevServer } from '../servers/temporal-dev';
import { WORKER_TUNING } from '../worker';
import { cpuMsByTree, cpuMsPer, cpuTotal, findDescendant, postmasterPid } from './cpu';
import { concurrentLoops, median, percentile, progress, ratio } from './measure';
import { countPromises, historyCost, type Cost } from './saga-cost';
import {
  benchDataConverter,
  benchWorkflowActivities,
  bundleBenchWorkflows,
  insertBenchProducts,
  runBenchWorkflow,
  startBenchProvider,
} from './stack';

/** One kind of workflow under load: completed per second, and the latency percentiles (ms). */
export interface Side {
  perSecond: number;
  p50: number;
  p99: number;
  /** CPU-ms per workflow by process during this kind's rounds, and their sum. */
  cpuMs: Record<string, number>;
  cpuTotal: number;
}

/** One ratio of the saga to a floor per round (round i of each, run next to each other): the spread. */
export interface Spread {
  min: number;
  max: number;
}

export interface SagaOverheadResult {
  saga: Side;
  floor: Side;
  /** The like-for-like floor: the essential steps local or regular as the saga runs them. */
  like: Side;
  /** The same saga with no payload codec (payloads in the clear), on a worker and client of its own. */
  plain: Side;
  /** The codec's cost: saga throughput with the codec over without it (1 = free). */
  codecRatio: number;
  /** Saga throughput over the floor's, and saga p50 over the floor's. */
  ratio: number;
  p50Ratio: number;
  /** The same against the like-for-like floor, with the per-round spread of each, and CPU total over its. */
  likeRatio: number;
  likeP50Ratio: number;
  likeSpread: { throughput: Spread; p50: Spread };
  /** The same spread against the essential-work floor. */
  floorSpread: { throughput: Spread; p50: Spread };
  likeCpuRatio: number;
  /** One order on an idle stack, end to end (median of a few, one at a time). */
  idle: { saga: number; floor: number; like: number; plain: number };
  /** The saga's idle p90 (the engines table gives p50 and p90). */
  idleSagaP90: number;
  /** Events in one happy-path saga's history, and in one run of each floor. */
  historyEvents: { saga: number; floor: number; like: number };
  /**
   * Local-activity markers and scheduled activities in one saga's history and in one like-for-like
   * floor's: equal when that floor runs the saga's kinds of steps.
   */
  kinds: { saga: { local: number; regular: number }; like: { local: number; regular: number } };
  /** The saga's own cost per order, counted (`saga-cost.ts`): the saga and the like-for-like floor. */
  cost: { saga: Cost; like: Cost };
}

export interface SagaOverheadOptions {
  /** Workflows per round of each kind. */
  orders: number;
  /** Workflows in flight at once. */
  concurrency: number;
  /** Rounds of each kind; even, for the ABBA order. */
  rounds: number;
  /** Orders of each kind one at a time on the idle stack (IDLE_ORDERS unless given). */
  idleOrders?: number;
}

const KINDS = ['floor', 'like', 'saga', 'plain'] as const;
/** Orders of each kind one at a time on the idle stack, after a warm-up of each. */
const IDLE_ORDERS = 20;
/** Workflows of each kind whose promises are counted, one at a time (the median is kept). */
const COUNTED = 5;
type Kind = (typeof KINDS)[number];

/** One round of one kind: its throughput, its latencies, and CPU-ms per workflow by process. */
interface Batch {
  perSecond: number;
  latencies: number[];
  cpu: Record<string, number>;
}

/**
 * Starts its own dev server, provider and workers on the database at `pg.url`, measures, and stops
 * them. `pg.dataDir` is the Postgres server's, for its CPU time.
 */
export async function measureSagaOverhead(
  pg: { url: string; dataDir?: string },
  opts: SagaOverheadOptions,
): Promise<SagaOverheadResult> {
  const url = pg.url;
  const { orders, concurrency, rounds, idleOrders = IDLE_ORDERS } = opts;
  progress('saga overhead: starting the dev server and the provider…');
  // The saga and the floor run with the project's payload codec (a key of the bench's own); `plain`
  // runs the same saga without it, side by side, for the codec's cost.
  const dataConverter = benchDataConverter();
  // History in a SQLite file, as npm start keeps it (the engines beside it sync every step too).
  const historyDir = mkdtempSync(path.join(os.tmpdir(), 'order-saga-bench-history-'));
  const env = await startDevServer({
    logLevel: 'error',
    // BENCH_LATENCY_SETTINGS=off: the dev server's own defaults, to measure the settings under load.
    latencySettings: process.env.BENCH_LATENCY_SETTINGS !== 'off',
    dbFilename: path.join(historyDir, 'temporal.db'),
    client: { dataConverter },
  });
  const provider = await startBenchProvider(url);
  const db = createPool(url, { max: 20 });
  const server = findDescendant(process.pid, /server start-dev/);
  if (!server) throw new Error('saga overhead: the dev server process was not found among this process’s children');
  // Postgres's CPU only when the bench runs it (with DATABASE_URL it may be another machine's).
  const roots: Record<string, number> = {
    server,
    worker: process.pid,
    provider: provider.child.pid!,
    ...(pg.dataDir ? { postgres: postmasterPid(pg.dataDir) } : {}),
  };
  try {
    const taskQueue = 'bench-saga';
    const plainQueue = 'bench-saga-plain';
    const activities = benchWorkflowActivities(db, provider.url);
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
      workflowBundle: await bundleBenchWorkflows(dataConverter.failureConverterPath),
    });
    const plainWorker = await Worker.create({
      ...workerOptions,
      taskQueue: plainQueue,
      workflowBundle: await bundleBenchWorkflows(),
    });
    const plainClient = new Client({ connection: env.connection, namespace: env.namespace ?? 'default' });
    const sku = `BENCH-SAGA-${Date.now()}`;
    await insertBenchProducts(db, sku, 100);
    let seq = 0;
    let lastSagaId = '';
    let lastFloorId = '';
    let lastLikeId = '';
    /** One workflow, start to result; returns its latency in ms. */
    const one = async (kind: Kind): Promise<number> => {
      const t = Date.now();
      const id = await (kind === 'plain'
        ? runBenchWorkflow(plainClient, 'saga', plainQueue, sku, seq++)
        : runBenchWorkflow(env.client, kind, taskQueue, sku, seq++));
      if (kind === 'saga') lastSagaId = id;
      else if (kind === 'floor') lastFloorId = id;
      else if (kind === 'like') lastLikeId = id;
      return Date.now() - t;
    };
    /** `orders` workflows of one kind, `concurrency` in flight, and the CPU each process used meanwhile. */
    const runBatch = async (kind: Kind): Promise<Batch> => {
      let next = 0;
      const latencies: number[] = [];
      const cpuBefore = cpuMsByTree(roots);
      const started = Date.now();
      await concurrentLoops(
        concurrency,
        Infinity,
        async () => {
          next++;
          latencies.push(await one(kind));
        },
        () => next < orders,
      );
      const perSecond = orders / ((Date.now() - started) / 1000);
      return { perSecond, latencies, cpu: cpuMsPer(cpuBefore, cpuMsByTree(roots), orders) };
    };
    const plainRunning = plainWorker.run();
    try {
      return await worker.runUntil(async () => {
        // The idle stack first: one order at a time, alternating, after one warm-up of each.
        const idle: Record<Kind, number[]> = { saga: [], floor: [], like: [], plain: [] };
        for (const kind of KINDS) await one(kind);
        for (let i = 0; i < idleOrders; i++) {
          progress(`saga overhead idle ${i + 1}/${idleOrders}: one order at a time…`);
          for (const kind of KINDS) idle[kind].push(await one(kind));
        }
        // Under load: rounds in ABBA order (floor, saga, plain, then the reverse, …), so a drift over the
        // run (a noisy machine, a server whose store grows) hits every side alike instead of always the last.
        const runs: Record<Kind, Batch[]> = { saga: [], floor: [], like: [], plain: [] };
        const names: Record<Kind, string> = {
          saga: 'full saga',
          floor: 'essential-work floor',
          like: 'like-for-like floor',
          plain: 'saga, no codec',
        };
        for (let round = 0; round < rounds; round++) {
          const order = round % 2 === 0 ? KINDS : [...KINDS].reverse();
          for (const kind of order) {
            progress(`saga overhead round ${round + 1}/${rounds}: ${names[kind]}…`);
            runs[kind].push(await runBatch(kind));
          }
        }
        // The counts: one workflow at a time, nothing else running, in a process of its own.
        progress('saga overhead: counting the promises of workflow code…');
        const promises = await countPromises({
          address: env.address,
          namespace: env.namespace ?? 'default',
          databaseUrl: url,
          providerUrl: provider.url,
          sku,
          times: COUNTED,
        });
        progress('');
        const side = (xs: Batch[]): Side => {
          const all = xs.flatMap((x) => x.latencies).sort((a, b) => a - b);
          const cpuMs = Object.fromEntries(
            Object.keys(roots).map((k) => [
              k,
              Math.round((xs.reduce((a, x) => a + x.cpu[k]!, 0) / xs.length) * 10) / 10,
            ]),
          );
          return {
            perSecond: Math.round((xs.reduce((a, x) => a + x.perSecond, 0) / xs.length) * 10) / 10,
            p50: percentile(all, 50),
            p99: percentile(all, 99),
            cpuMs,
            cpuTotal: cpuTotal(cpuMs),
          };
        };
        const history = async (workflowId: string) =>
          (await env.client.workflow.getHandle(workflowId).fetchHistory()).events ?? [];
        const kindsOf = (events: Awaited<ReturnType<typeof history>>) => ({
          local: events.filter((e) => e.markerRecordedEventAttributes?.markerName === 'core_local_activity').length,
          regular: events.filter((e) => e.activityTaskScheduledEventAttributes).length,
        });
        const p50Of = (b: Batch): number => median(b.latencies);
        /** Round i's ratio of the saga to a floor, for each round: min and max. */
        const spread = (floorRuns: Batch[], f: (saga: Batch, floor: Batch) => number): Spread => {
          const xs = runs.saga.map((b, i) => f(b, floorRuns[i]!));
          return { min: Math.min(...xs), max: Math.max(...xs) };
        };
        const spreads = (floorRuns: Batch[]): { throughput: Spread; p50: Spread } => ({
          throughput: spread(floorRuns, (a, b) => ratio(a.perSecond, b.perSecond)),
          p50: spread(floorRuns, (a, b) => ratio(p50Of(a), p50Of(b))),
        });
        const saga = side(runs.saga);
        const floor = side(runs.floor);
        const like = side(runs.like);
        const plain = side(runs.plain);
        const [sagaEvents, floorEvents, likeEvents] = await Promise.all(
          [lastSagaId, lastFloorId, lastLikeId].map(history),
        );
        return {
          saga,
          floor,
          like,
          plain,
          codecRatio: ratio(saga.perSecond, plain.perSecond),
          ratio: ratio(saga.perSecond, floor.perSecond),
          p50Ratio: ratio(saga.p50, floor.p50),
          likeRatio: ratio(saga.perSecond, like.perSecond),
          likeP50Ratio: ratio(saga.p50, like.p50),
          floorSpread: spreads(runs.floor),
          likeSpread: spreads(runs.like),
          likeCpuRatio: ratio(saga.cpuTotal, like.cpuTotal),
          idle: {
            saga: median(idle.saga),
            floor: median(idle.floor),
            like: median(idle.like),
            plain: median(idle.plain),
          },
          idleSagaP90: percentile(
            [...idle.saga].sort((a, b) => a - b),
            90,
          ),
          historyEvents: { saga: sagaEvents!.length, floor: floorEvents!.length, like: likeEvents!.length },
          kinds: { saga: kindsOf(sagaEvents!), like: kindsOf(likeEvents!) },
          cost: {
            saga: { ...historyCost(sagaEvents!), promises: promises.saga },
            like: { ...historyCost(likeEvents!), promises: promises.like },
          },
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
    rmSync(historyDir, { recursive: true, force: true });
  }
}
