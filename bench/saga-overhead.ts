/**
 * The saga's overhead: the full order saga against three floors of the essential work
 * (`workflows.ts`): the six essential steps as no-op regular activities, as no-op local activities (the
 * cheapest floor: the cheapest shape Temporal offers for them), and like for like (the same steps local
 * or regular as the saga runs them), on the dev server — or on the real Temporal server on Postgres
 * (`temporal: 'server'`, as `npm start -- --temporal server` runs it) — with one worker of the
 * production worker's settings; and the same saga without the payload codec, for the codec's cost. CPU
 * per workflow by process (Temporal server, worker, provider, Postgres) for each, from /proc (`cpu.ts`).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Worker, type WorkerOptions } from '@temporalio/worker';
import { createPool } from '../db/pool';
import { stopProcess } from '../platform/processes';
import { startDevServer } from '../servers/temporal-dev';
import { realServerPortBlock, startRealTemporal } from '../servers/temporal-server';
import { WORKER_TUNING } from '../worker';
import { cpuMsByTree, cpuMsPer, cpuTotal, findDescendant, postmasterPid } from './cpu';
import { concurrentLoops, median, percentile, progress, ratio } from './measure';
import { historyCost, type Cost } from './saga-cost';
import {
  benchDataConverter,
  benchWorkflowActivities,
  bundleBenchWorkflows,
  EAGER_START,
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
  /** The Temporal server the section ran on: the dev server (history in a SQLite file) or the real one. */
  temporal: 'dev' | 'server';
  saga: Side;
  floor: Side;
  /** The cheapest floor: the essential steps as no-op local activities, no timer, no search attributes. */
  cheap: Side;
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
  likeSpread: { throughput: Spread; p50: Spread; cpu: Spread };
  /** The same spread against the essential-work floor. */
  floorSpread: { throughput: Spread; p50: Spread; cpu: Spread };
  likeCpuRatio: number;
  /** One order on an idle stack, end to end (median of a few, one at a time). */
  idle: { saga: number; floor: number; cheap: number; like: number; plain: number };
  /** The saga's idle p90 (the engines table gives p50 and p90). */
  idleSagaP90: number;
  /** Events in one happy-path saga's history, and in one run of each floor. */
  historyEvents: { saga: number; floor: number; cheap: number; like: number };
  /**
   * Local-activity markers and scheduled activities in one saga's history, one like-for-like floor's
   * (equal to the saga's when that floor runs the saga's kinds of steps) and one cheapest floor's.
   */
  kinds: {
    saga: { local: number; regular: number };
    like: { local: number; regular: number };
    cheap: { local: number; regular: number };
  };
  /** The saga's own cost per order, counted from one history each (`saga-cost.ts`). */
  cost: { saga: Cost; like: Cost; cheap: Cost };
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
  /** The dev server (default), or the real Temporal server on the bench's Postgres. */
  temporal?: 'dev' | 'server';
}

const KINDS = ['floor', 'cheap', 'like', 'saga', 'plain'] as const;
/** Orders of each kind one at a time on the idle stack, after a warm-up of each. */
const IDLE_ORDERS = 20;
type Kind = (typeof KINDS)[number];

/** The Temporal server the section runs on, with what the workers and clients connect with. */
interface TemporalStack {
  address: string;
  namespace: string;
  connection: Connection;
  nativeConnection: NativeConnection;
  /** The Temporal server's process, for its CPU. */
  serverPid: number;
  /** The real server's Web UI server, a process of its own, counted with the server (the dev server's UI is in it). */
  uiPid?: number;
  teardown(): Promise<void>;
}

/** The dev server with its history in a SQLite file, as npm start keeps it. */
async function devStack(dataConverter: ReturnType<typeof benchDataConverter>): Promise<TemporalStack> {
  const historyDir = mkdtempSync(path.join(os.tmpdir(), 'order-saga-bench-history-'));
  const env = await startDevServer({
    logLevel: 'error',
    // BENCH_LATENCY_SETTINGS=off: the dev server's own defaults, to measure the settings under load.
    latencySettings: process.env.BENCH_LATENCY_SETTINGS !== 'off',
    dbFilename: path.join(historyDir, 'temporal.db'),
    client: { dataConverter },
  });
  const teardown = async () => {
    await env.teardown();
    rmSync(historyDir, { recursive: true, force: true });
  };
  const server = findDescendant(process.pid, /server start-dev/);
  if (!server) {
    await teardown();
    throw new Error('saga overhead: the dev server process was not found among this process’s children');
  }
  return {
    address: env.address,
    namespace: env.namespace ?? 'default',
    connection: env.connection,
    nativeConnection: env.nativeConnection,
    serverPid: server,
    teardown,
  };
}

/**
 * The real Temporal server (servers/temporal-server.ts) on the bench's Postgres, as npm start --
 * --temporal server and npm run test:server start it, with its own databases and dynamic config; its
 * Web UI server runs too (startRealTemporal starts both), and is not counted.
 */
async function realStack(ownerUrl: string): Promise<TemporalStack> {
  const port = realServerPortBlock(process.pid + 3);
  const spawned: ChildProcess[] = [];
  const real = await startRealTemporal({
    ownerUrl,
    port,
    uiPort: port + 21,
    metricsPort: port + 22,
    onSpawn: (child) => spawned.push(child),
  });
  try {
    const server = spawned.find((c) => /temporal-server-/.test(c.spawnfile))?.pid;
    const ui = spawned.find((c) => /temporal-ui-server-/.test(c.spawnfile))?.pid;
    if (!server) throw new Error('saga overhead: the Temporal server process was not found');
    const connection = await Connection.connect(real.connection);
    const nativeConnection = await NativeConnection.connect(real.connection);
    return {
      address: real.address,
      namespace: real.namespace,
      connection,
      nativeConnection,
      serverPid: server,
      ...(ui ? { uiPid: ui } : {}),
      async teardown() {
        await connection.close();
        await nativeConnection.close();
        await real.stop();
      },
    };
  } catch (err) {
    await real.stop();
    throw err;
  }
}

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
  const { orders, concurrency, rounds, idleOrders = IDLE_ORDERS, temporal = 'dev' } = opts;
  const what = temporal === 'dev' ? 'saga overhead' : 'saga overhead (real server)';
  progress(
    `${what}: starting the ${temporal === 'dev' ? 'dev server' : 'Temporal server on Postgres'} and the provider…`,
  );
  // The saga and the floors run with the project's payload codec (a key of the bench's own); `plain`
  // runs the same saga without it, side by side, for the codec's cost.
  const dataConverter = benchDataConverter();
  // The dev server keeps its history in a SQLite file, as npm start keeps it (the engines beside it
  // sync every step too); the real server in Postgres.
  const env = temporal === 'dev' ? await devStack(dataConverter) : await realStack(url);
  // An eager start needs the client to share the worker's connection (bench/stack.ts, EAGER_START).
  const client = new Client({
    connection: EAGER_START ? env.nativeConnection : env.connection,
    namespace: env.namespace,
    dataConverter,
  });
  const provider = await startBenchProvider(url);
  const db = createPool(url, { max: 20 });
  // Postgres's CPU only when the bench runs it (with DATABASE_URL it may be another machine's). With
  // the real server, Postgres's column also holds the server's own persistence.
  const roots: Record<string, number> = {
    server: env.serverPid,
    ...(env.uiPid ? { 'server-ui': env.uiPid } : {}),
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
      namespace: env.namespace,
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
    const plainClient = new Client({
      connection: EAGER_START ? env.nativeConnection : env.connection,
      namespace: env.namespace,
    });
    const sku = `BENCH-SAGA-${Date.now()}`;
    await insertBenchProducts(db, sku, 100);
    let seq = 0;
    let lastSagaId = '';
    let lastFloorId = '';
    let lastCheapId = '';
    let lastLikeId = '';
    /** One workflow, start to result; returns its latency in ms. */
    const one = async (kind: Kind): Promise<number> => {
      const t = Date.now();
      const id = await (kind === 'plain'
        ? runBenchWorkflow(plainClient, 'saga', plainQueue, sku, seq++)
        : runBenchWorkflow(client, kind, taskQueue, sku, seq++));
      if (kind === 'saga') lastSagaId = id;
      else if (kind === 'floor') lastFloorId = id;
      else if (kind === 'cheap') lastCheapId = id;
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
      const cpu = cpuMsPer(cpuBefore, cpuMsByTree(roots), orders);
      // The real server's Web UI server counts with the server, as the dev server's built-in UI does.
      if (cpu['server-ui'] !== undefined) {
        cpu.server = Math.round((cpu.server! + cpu['server-ui']) * 10) / 10;
        delete cpu['server-ui'];
      }
      return { perSecond, latencies, cpu };
    };
    const plainRunning = plainWorker.run();
    try {
      return await worker.runUntil(async () => {
        // The idle stack first: one order at a time, alternating, after one warm-up of each.
        const idle: Record<Kind, number[]> = { saga: [], floor: [], cheap: [], like: [], plain: [] };
        for (const kind of KINDS) await one(kind);
        for (let i = 0; i < idleOrders; i++) {
          progress(`${what} idle ${i + 1}/${idleOrders}: one order at a time…`);
          for (const kind of KINDS) idle[kind].push(await one(kind));
        }
        // Under load: rounds in ABBA order (floor, saga, plain, then the reverse, …), so a drift over the
        // run (a noisy machine, a server whose store grows) hits every side alike instead of always the last.
        const runs: Record<Kind, Batch[]> = { saga: [], floor: [], cheap: [], like: [], plain: [] };
        const names: Record<Kind, string> = {
          saga: 'full saga',
          floor: 'essential-work floor',
          cheap: 'cheapest floor',
          like: 'like-for-like floor',
          plain: 'saga, no codec',
        };
        for (let round = 0; round < rounds; round++) {
          const order = round % 2 === 0 ? KINDS : [...KINDS].reverse();
          for (const kind of order) {
            progress(`${what} round ${round + 1}/${rounds}: ${names[kind]}…`);
            runs[kind].push(await runBatch(kind));
          }
        }
        progress('');
        const side = (xs: Batch[]): Side => {
          const all = xs.flatMap((x) => x.latencies).sort((a, b) => a - b);
          const cpuMs = Object.fromEntries(
            Object.keys(roots)
              .filter((k) => k !== 'server-ui')
              .map((k) => [k, Math.round((xs.reduce((a, x) => a + x.cpu[k]!, 0) / xs.length) * 10) / 10]),
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
          (await client.workflow.getHandle(workflowId).fetchHistory()).events ?? [];
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
        const spreads = (floorRuns: Batch[]): { throughput: Spread; p50: Spread; cpu: Spread } => ({
          throughput: spread(floorRuns, (a, b) => ratio(a.perSecond, b.perSecond)),
          p50: spread(floorRuns, (a, b) => ratio(p50Of(a), p50Of(b))),
          cpu: spread(floorRuns, (a, b) => ratio(cpuTotal(a.cpu), cpuTotal(b.cpu))),
        });
        const saga = side(runs.saga);
        const floor = side(runs.floor);
        const cheap = side(runs.cheap);
        const like = side(runs.like);
        const plain = side(runs.plain);
        const [sagaEvents, floorEvents, cheapEvents, likeEvents] = await Promise.all(
          [lastSagaId, lastFloorId, lastCheapId, lastLikeId].map(history),
        );
        return {
          temporal,
          saga,
          floor,
          cheap,
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
            cheap: median(idle.cheap),
            like: median(idle.like),
            plain: median(idle.plain),
          },
          idleSagaP90: percentile(
            [...idle.saga].sort((a, b) => a - b),
            90,
          ),
          historyEvents: {
            saga: sagaEvents!.length,
            floor: floorEvents!.length,
            cheap: cheapEvents!.length,
            like: likeEvents!.length,
          },
          kinds: { saga: kindsOf(sagaEvents!), like: kindsOf(likeEvents!), cheap: kindsOf(cheapEvents!) },
          cost: { saga: historyCost(sagaEvents!), like: historyCost(likeEvents!), cheap: historyCost(cheapEvents!) },
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
