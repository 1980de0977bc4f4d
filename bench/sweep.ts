/**
 * One sweep over a backlog of open orders (activities/sweeper.ts), at each backlog size: the orders
 * wait in NEEDS_ATTENTION, each with a run that waits for a person's word and has nothing pending
 * (bench/workflows.ts's parkedOrder, on a worker of its own), so the sweep leaves them all, as it
 * leaves such orders in production. The sweep is the product's activity, run as its worker runs it,
 * against a dev server and Postgres on loopback; its calls to Temporal are counted on the connection
 * (a gRPC interceptor) and its database queries on the pool.
 *
 * For each size it sweeps one whole pass (page after page, as the Schedule's runs would), then
 * terminates the run of an order at the backlog's end, and times how long the next sweep takes to
 * restart it: the time to reach a fresh stranding, which must not grow with the backlog (the median
 * of REACH_TRIES such strandings, one after another).
 */
import { Connection, Client, type ConnectionOptions } from '@temporalio/client';
import { MockActivityEnvironment } from '@temporalio/testing';
import { Worker } from '@temporalio/worker';
import type { Pool, PoolClient } from 'pg';
import { sweeperActivities, type SweepReport } from '../activities/sweeper';
import { createPool } from '../db/pool';
import { workflowIdFor } from '../domain/order';
import { startDevServer } from '../servers/temporal-dev';
import { concurrentLoops, median, progress } from './measure';
import { benchDataConverter, bundleBenchWorkflows } from './stack';

export interface SweepOptionsBench {
  /** The backlog sizes, smallest first. */
  backlogs: number[];
  /** The sweep's page size (the Schedule's default unless a run asks for less). */
  pageSize: number;
}

export interface SweepSide {
  openOrders: number;
  /** Sweeps in one pass over every open order. */
  sweepsPerPass: number;
  /** One sweep of the pass, p50 (the first included), and the first (it also lists the running sagas), ms. */
  sweepP50Ms: number;
  firstSweepMs: number;
  /** The whole pass, ms. */
  passMs: number;
  /** Calls to Temporal and database queries per open order, over the pass. */
  temporalPerOrder: number;
  dbPerOrder: number;
  /** The visibility list calls of the pass (the running sagas of settled orders: once per pass). */
  listCalls: number;
  /** From the terminate of the run the backlog comes to last, to the sweep's restart of it, ms. */
  reachMs: number;
  /** Sweeps it took to reach it (1: the next sweep). */
  reachSweeps: number;
}

export interface SweepBenchResult {
  pageSize: number;
  sides: SweepSide[];
}

/** Fresh strandings timed at each size; the median is reported. */
const REACH_TRIES = 3;
const quiet = { log() {}, trace() {}, debug() {}, info() {}, warn() {}, error() {} };

/** `pool` with its queries counted (its own and those of the clients it hands out). */
function counted(pool: Pool, n: { db: number }): Pool {
  const countQuery = <T extends Pool | PoolClient>(target: T) =>
    new Proxy(target, {
      get(t, p) {
        if (p === 'query')
          return (...args: unknown[]) => {
            n.db++;
            return (t.query as (...a: unknown[]) => unknown)(...args);
          };
        if (p === 'connect' && t === pool) return async () => countQuery<PoolClient>(await pool.connect());
        const v = Reflect.get(t, p) as unknown;
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(t) : v;
      },
    });
  return countQuery(pool);
}

export async function measureSweep(url: string, opts: SweepOptionsBench): Promise<SweepBenchResult> {
  const stops: (() => Promise<unknown>)[] = [];
  const n = { db: 0, temporal: 0, list: 0 };
  try {
    progress('sweep: starting the dev server and a worker for the parked orders…');
    const dataConverter = benchDataConverter();
    const env = await startDevServer({ logLevel: 'error', client: { dataConverter } });
    stops.push(() => env.teardown());
    const taskQueue = `bench-sweep-${process.pid}`;
    const worker = await Worker.create({
      connection: env.nativeConnection,
      taskQueue,
      workflowBundle: await bundleBenchWorkflows(),
      dataConverter,
      maxCachedWorkflows: 100,
    });
    const running = worker.run();
    stops.push(async () => {
      worker.shutdown();
      await running;
    });
    // The sweeper's own connection, its calls counted.
    type Interceptor = NonNullable<ConnectionOptions['interceptors']>[number];
    const interceptors: Interceptor[] = [
      (options, next) => {
        n.temporal++;
        if (options.method_definition.path.endsWith('/ListWorkflowExecutions')) n.list++;
        return next(options) as ReturnType<Interceptor>;
      },
    ];
    const connection = await Connection.connect({ address: env.address, interceptors });
    stops.push(() => connection.close());
    const client = new Client({ connection, namespace: env.namespace ?? 'default', dataConverter });
    const owner = createPool(url, { max: 8 });
    stops.push(() => owner.end());
    const db = counted(owner, n);
    // Restarted sagas go to a queue nobody polls: the bench measures the sweep, not the saga.
    const sweep = sweeperActivities({
      db,
      temporal: { client: () => Promise.resolve(client), taskQueue: `${taskQueue}-restarts` },
    });
    const sweepOnce = (): Promise<SweepReport> =>
      new MockActivityEnvironment(undefined, { logger: quiet }).run(sweep.sweepOrders, { pageSize: opts.pageSize });

    const sides: SweepSide[] = [];
    let made = 0;
    for (const size of opts.backlogs) {
      // The backlog grows to `size`: rows in NEEDS_ATTENTION since 10 minutes, each with its run.
      const ids = Array.from({ length: size - made }, (_, i) => `bench-sweep-${String(made + i).padStart(7, '0')}`);
      await owner.query({
        text: `INSERT INTO orders (order_id, customer_id, status, currency, total_cents, items, payment_method, workflow_id, created_at, updated_at)
               SELECT id, 'bench-sweep', 'NEEDS_ATTENTION', 'USD', 100, '[]'::jsonb, 'tok_visa', 'order:' || id,
                      now() - interval '10 minutes', now() - interval '10 minutes'
                 FROM unnest($1::text[]) id`,
        values: [ids],
      });
      let next = 0;
      await concurrentLoops(
        20,
        Infinity,
        async () => {
          const i = next++;
          await env.client.workflow.start('parkedOrder', { taskQueue, workflowId: workflowIdFor(ids[i]!) });
          if ((i + 1) % 500 === 0) progress(`sweep: ${made + i + 1}/${size} parked orders started`);
        },
        () => next < ids.length,
      );
      made = size;
      // Every run has taken its first workflow task (nothing pending) before the sweep looks.
      const last = workflowIdFor(ids.at(-1)!);
      for (let i = 0; i < 600; i++) {
        const d = await env.client.workflow.getHandle(last).describe();
        if (!d.raw.pendingWorkflowTask) break;
        await new Promise((r) => setTimeout(r, 200));
      }

      // One whole pass, from a new one.
      await owner.query(`UPDATE sweep_cursor SET backlog_after = '', seen_at = NULL, seen_server_ms = NULL`);
      const times: number[] = [];
      const before = { ...n };
      for (;;) {
        const t0 = performance.now();
        const report = await sweepOnce();
        times.push(performance.now() - t0);
        progress(`sweep: ${size} open orders, sweep ${times.length} of the pass looked at ${report.open}`);
        if (report.actions.length)
          throw new Error(`the sweep acted on a parked order: ${JSON.stringify(report.actions[0])}`);
        if (report.page!.passEnds) break;
        if (times.length > size / opts.pageSize + 2) throw new Error('the pass did not end');
      }
      const passMs = times.reduce((a, b) => a + b, 0);
      const side: Omit<SweepSide, 'reachMs' | 'reachSweeps'> = {
        openOrders: size,
        sweepsPerPass: times.length,
        sweepP50Ms: Math.round(median(times)),
        firstSweepMs: Math.round(times[0]!),
        passMs: Math.round(passMs),
        temporalPerOrder: Math.round(((n.temporal - before.temporal) / size) * 100) / 100,
        dbPerOrder: Math.round(((n.db - before.db) / size) * 100) / 100,
        listCalls: n.list - before.list,
      };

      // A fresh stranding: the run of an order at the backlog's end, terminated now; REACH_TRIES of
      // them, one after another, and the median is the figure (one alone is a few ms, all noise).
      const reaches: number[] = [];
      let reachSweeps = 0;
      for (let t = 1; t <= REACH_TRIES; t++) {
        const victim = ids.at(-t)!;
        await env.client.workflow.getHandle(workflowIdFor(victim)).terminate('bench: a fresh stranding');
        const t0 = (await owner.query<{ t: string }>('SELECT clock_timestamp()::text AS t')).rows[0]!.t;
        let sweeps = 0;
        let reachMs: number | undefined;
        while (reachMs === undefined && sweeps < Math.ceil(size / opts.pageSize) + 2) {
          sweeps++;
          await sweepOnce();
          const { rows } = await owner.query<{ ms: string }>({
            text: `SELECT extract(epoch FROM at - $2::timestamptz) * 1000 AS ms FROM sweeper_actions
                    WHERE order_id = $1 AND action = 'restart' ORDER BY at LIMIT 1`,
            values: [victim, t0],
          });
          if (rows[0]) reachMs = Math.round(Number(rows[0].ms));
        }
        if (reachMs === undefined) throw new Error(`the sweep never restarted ${victim}`);
        reaches.push(reachMs);
        reachSweeps = Math.max(reachSweeps, sweeps);
        // The restarted order leaves the backlog: the next size adds to the same parked orders.
        // Its new run goes first: a saga running with no row would be the next sweeps' to look at.
        await env.client.workflow
          .getHandle(workflowIdFor(victim))
          .terminate('bench: the restarted order leaves the backlog')
          .catch(() => undefined); // it closed already
        await owner.query({ text: `DELETE FROM orders WHERE order_id = $1`, values: [victim] });
      }
      sides.push({ ...side, reachMs: Math.round(median(reaches)), reachSweeps });
      made = size; // (the IDs of the orders that left are not reused)
    }
    progress('');
    return { pageSize: opts.pageSize, sides };
  } finally {
    for (const stop of stops.reverse()) await stop().catch(() => undefined);
  }
}

/** What 100k open orders would cost by the same measure: each per-order figure of the largest size, times 100k. */
export function estimateSweep(r: SweepBenchResult, openOrders = 100_000): SweepSide {
  const big = r.sides.at(-1)!;
  const k = openOrders / big.openOrders;
  const sweepsPerPass = Math.ceil(openOrders / r.pageSize);
  // The first sweep of a pass also lists every running saga: that part grows with the backlog.
  const listPart = Math.max(0, big.firstSweepMs - big.sweepP50Ms);
  return {
    openOrders,
    sweepsPerPass,
    sweepP50Ms: big.sweepP50Ms,
    firstSweepMs: Math.round(big.sweepP50Ms + listPart * k),
    passMs: Math.round(big.passMs * k),
    temporalPerOrder: big.temporalPerOrder,
    dbPerOrder: big.dbPerOrder,
    listCalls: Math.ceil(big.listCalls * k),
    reachMs: big.reachMs,
    reachSweeps: 1,
  };
}
