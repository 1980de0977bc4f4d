/**
 * The contention matrix's five ways to take one unit of stock under contention, at the activity layer
 * (no Temporal), on a real Postgres. Each task carries `logicMs` of simulated business logic.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Pool } from 'pg';
import { backoffMs, DEFAULT_CAS } from '../activities/inventory';
import { InventoryMetrics } from '../activities/inventory-metrics';
import { LaneGroup, type Outcome } from '../activities/lane-group';
import { withTransaction } from '../db/pool';
import { concurrentLoops, percentile } from './measure';

export const STRATEGIES = ['naive', 'for-update-logic-in-tx', 'for-update-short', 'cas', 'adaptive'] as const;
export type Strategy = (typeof STRATEGIES)[number];

export interface CellResult {
  strategy: Strategy;
  skus: number;
  seconds: number;
  done: number;
  gaveUp: number;
  throughput: number;
  p50: number;
  p99: number;
  attempts: number;
  aborts: number;
  laneCommits: number;
  abortRate: number;
  lostUpdates: number;
}

const INITIAL = 1_000_000_000;

export async function setupBenchTable(db: Pool): Promise<void> {
  await db.query('CREATE SCHEMA IF NOT EXISTS bench');
  await db.query(
    'CREATE TABLE IF NOT EXISTS bench.stock (id integer PRIMARY KEY, stock bigint NOT NULL CHECK (stock >= 0), version bigint NOT NULL DEFAULT 0)',
  );
}

async function resetStock(db: Pool, skus: number): Promise<void> {
  await db.query('TRUNCATE bench.stock');
  await db.query({
    text: 'INSERT INTO bench.stock (id, stock) SELECT g, $2 FROM generate_series(1, $1) g',
    values: [skus, INITIAL],
  });
  await db.query('VACUUM ANALYZE bench.stock');
}

/**
 * One serial lane, in process, as the saga's lane does it (activities/lane-group.ts, the same code): one
 * round at a time, each taking every reservation waiting for the lane into one short transaction (a
 * group commit) — the rows locked in primary-key order, then each reservation under a savepoint of its
 * own, all or nothing (its update guarded by the stock: none left, it takes nothing and is refused).
 * (The saga's round also takes the lane's advisory lock, for other processes; here there is one.)
 *
 * Round trips: every strategy here sends what it can together, as one multi-statement query — the
 * round sends its whole transaction in one (its ids are integers of ours, sent as literals), and the
 * short FOR UPDATE sends BEGIN with its locking SELECT, and its UPDATE with the COMMIT. The saga's
 * round sends its statements one at a time, a few per reservation.
 */
function serialLane(db: Pool): LaneGroup<number, boolean> {
  return new LaneGroup<number, boolean>(async (round) => {
    const ids = round.take().map((id) => Math.trunc(id));
    const keys = [...new Set(ids)].sort((a, b) => a - b).join(', ');
    const sql = [
      'BEGIN',
      `SELECT id FROM bench.stock WHERE id IN (${keys}) ORDER BY id FOR UPDATE`,
      ...ids.map(
        (id) =>
          `SAVEPOINT lane_reservation; UPDATE bench.stock SET stock = stock - 1, version = version + 1 WHERE id = ${id} AND stock >= 1; RELEASE SAVEPOINT lane_reservation`,
      ),
      'COMMIT',
    ].join('; ');
    const c = await db.connect();
    try {
      const results = (await c.query(sql)) as unknown as { command: string; rowCount: number | null }[];
      // Each reservation's UPDATE, in order: one row taken, or none left for it.
      const updates = results.filter((r) => r.command === 'UPDATE');
      return ids.map((_, i): Outcome<boolean> => ({ ok: true, value: updates[i]!.rowCount === 1 }));
    } catch (err) {
      await c.query('ROLLBACK').catch(() => undefined);
      throw err;
    } finally {
      c.release();
    }
  });
}

/** The short FOR UPDATE commit: SELECT … FOR UPDATE and the write, with no business logic inside. */
async function lockedCommit(db: Pool, id: number): Promise<boolean> {
  const c = await db.connect();
  try {
    // BEGIN with the locking SELECT, and the UPDATE with the COMMIT: two round trips (id: an integer of ours).
    const [, locked] = (await c.query(
      `BEGIN; SELECT stock FROM bench.stock WHERE id = ${Math.trunc(id)} FOR UPDATE`,
    )) as unknown as [unknown, { rows: { stock: string }[] }];
    if (Number(locked.rows[0]!.stock) < 1) {
      await c.query('COMMIT');
      return false;
    }
    await c.query(
      `UPDATE bench.stock SET stock = stock - 1, version = version + 1 WHERE id = ${Math.trunc(id)}; COMMIT`,
    );
    return true;
  } catch (err) {
    await c.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    c.release();
  }
}

interface Counters {
  attempts: number;
  aborts: number;
  laneCommits: number;
}

/** Builds the per-task operation of a strategy. Returns true when one unit was taken. */
function operation(
  strategy: Strategy,
  db: Pool,
  logicMs: number,
  counters: Counters,
  lanes: number,
): (id: number) => Promise<boolean> {
  const logic = (): Promise<void> => sleep(logicMs);
  const cas = DEFAULT_CAS;
  /** One optimistic attempt: snapshot read, the logic, then the version-guarded write. */
  const casAttempt = async (id: number): Promise<boolean> => {
    counters.attempts++;
    const { rows } = await db.query<{ version: string }>({
      name: 'bench-read',
      text: 'SELECT stock, version FROM bench.stock WHERE id = $1',
      values: [id],
    });
    await logic();
    const res = await db.query({
      name: 'bench-cas',
      text: 'UPDATE bench.stock SET stock = stock - 1, version = version + 1 WHERE id = $1 AND version = $2 AND stock >= 1',
      values: [id, rows[0]!.version],
    });
    if (res.rowCount === 1) return true;
    counters.aborts++;
    return false;
  };
  switch (strategy) {
    case 'naive':
      return async (id) => {
        counters.attempts++;
        const { rows } = await db.query<{ stock: string }>({
          name: 'bench-q2',
          text: 'SELECT stock FROM bench.stock WHERE id = $1',
          values: [id],
        });
        await logic();
        await db.query({
          name: 'bench-q3',
          text: 'UPDATE bench.stock SET stock = $2 WHERE id = $1',
          values: [id, Number(rows[0]!.stock) - 1],
        });
        return true;
      };
    case 'for-update-logic-in-tx':
      return (id) =>
        withTransaction(db, async (c) => {
          counters.attempts++;
          await c.query({
            name: 'bench-q4',
            text: 'SELECT stock FROM bench.stock WHERE id = $1 FOR UPDATE',
            values: [id],
          });
          await logic(); // the anti-pattern: the lock is held while the logic runs
          await c.query({
            name: 'bench-lock-update',
            text: 'UPDATE bench.stock SET stock = stock - 1, version = version + 1 WHERE id = $1',
            values: [id],
          });
          return true;
        });
    case 'for-update-short':
      return async (id) => {
        counters.attempts++;
        await db.query({ name: 'bench-q5', text: 'SELECT stock FROM bench.stock WHERE id = $1', values: [id] });
        await logic();
        return lockedCommit(db, id);
      };
    case 'cas':
      return async (id) => {
        for (let attempt = 0; attempt < cas.maxAttempts; attempt++) {
          if (await casAttempt(id)) return true;
          await sleep(backoffMs(attempt, cas));
        }
        return false; // gave up: ContentionExhausted
      };
    case 'adaptive': {
      // The production router: per-key recent abort rate; over the threshold, or out of attempts, the
      // commit goes to a serial lane. The logic always runs in the task's own worker, outside locks.
      const metrics = new InventoryMetrics();
      const laneOf = Array.from({ length: lanes }, () => serialLane(db));
      const toLane = async (id: number): Promise<boolean> => {
        const ok = await laneOf[id % lanes]!.submit(id);
        counters.laneCommits++;
        metrics.recordLaneCommit([String(id)]);
        return ok;
      };
      return async (id) => {
        const key = [String(id)];
        for (let attempt = 0; attempt < cas.maxAttempts; attempt++) {
          if (metrics.useLane(key[0]!, cas.abortRateThreshold)) {
            metrics.recordFallback(key);
            await logic();
            return toLane(id);
          }
          const committed = await casAttempt(id);
          metrics.recordAttempt(key, !committed);
          if (committed) return true;
          if (metrics.laneAfterConflict(key, attempt + 1, cas.laneAfterConflicts)) break; // the tail goes to the lane
          await sleep(backoffMs(attempt, cas));
        }
        metrics.recordFallback(key);
        return toLane(id);
      };
    }
  }
}

/** Runs one cell: `workers` concurrent loops for `durationMs`, each task on a random one of `skus` keys. */
export async function runCell(
  db: Pool,
  strategy: Strategy,
  skus: number,
  opts: { workers: number; logicMs: number; durationMs: number; lanes: number },
): Promise<CellResult> {
  await resetStock(db, skus);
  const counters: Counters = { attempts: 0, aborts: 0, laneCommits: 0 };
  const op = operation(strategy, db, opts.logicMs, counters, opts.lanes);
  const latencies: number[] = [];
  let done = 0;
  let gaveUp = 0;
  const started = Date.now();
  await concurrentLoops(opts.workers, started + opts.durationMs, async () => {
    const id = 1 + Math.floor(Math.random() * skus);
    const t = Date.now();
    if (await op(id)) {
      done++;
      latencies.push(Date.now() - t);
    } else gaveUp++;
  });
  const seconds = (Date.now() - started) / 1000;
  const { rows } = await db.query<{ taken: string }>({
    text: 'SELECT ($1::bigint * count(*) - sum(stock))::bigint AS taken FROM bench.stock',
    values: [INITIAL],
  });
  latencies.sort((a, b) => a - b);
  const executions = counters.attempts + counters.laneCommits;
  return {
    strategy,
    skus,
    seconds: Math.round(seconds * 10) / 10,
    done,
    gaveUp,
    throughput: Math.round((done / seconds) * 10) / 10,
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    attempts: counters.attempts,
    aborts: counters.aborts,
    laneCommits: counters.laneCommits,
    abortRate: executions === 0 ? 0 : Math.round((counters.aborts / executions) * 1000) / 1000,
    // Units the tasks believe they took, minus the units the table lost.
    lostUpdates: done - Number(rows[0]!.taken),
  };
}

export interface BurstResult {
  strategy: Strategy;
  requests: number;
  logicMs: number;
  /** From the first request's start until the last one ends. */
  makespanMs: number;
  p50: number;
  p99: number;
  taken: number;
  laneCommits: number;
}

/**
 * The lock queue's arithmetic: `requests` arrive at once for one row, each with `logicMs` of logic.
 * Every request gets its own connection, so the only queue is the row lock (or the lane).
 */
export async function runBurst(
  db: Pool,
  strategy: Strategy,
  requests: number,
  logicMs: number,
  lanes: number,
): Promise<BurstResult> {
  await resetStock(db, 1);
  const counters: Counters = { attempts: 0, aborts: 0, laneCommits: 0 };
  const op = operation(strategy, db, logicMs, counters, lanes);
  const latencies: number[] = [];
  let taken = 0;
  const started = Date.now();
  await Promise.all(
    Array.from({ length: requests }, async () => {
      const t = Date.now();
      if (await op(1)) taken++;
      latencies.push(Date.now() - t);
    }),
  );
  const makespanMs = Date.now() - started;
  latencies.sort((a, b) => a - b);
  return {
    strategy,
    requests,
    logicMs,
    makespanMs,
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    taken,
    laneCommits: counters.laneCommits,
  };
}

/** The commit path's CAS, no logic: read the version, then the conditional single-row UPDATE. */
export async function casCommitThroughput(
  db: Pool,
  opts: { clients: number; keys: number; durationMs: number },
): Promise<{ tps: number; done: number; aborts: number }> {
  await resetStock(db, opts.keys);
  let done = 0;
  let aborts = 0;
  const started = Date.now();
  await concurrentLoops(opts.clients, started + opts.durationMs, async () => {
    const id = 1 + Math.floor(Math.random() * opts.keys);
    const { rows } = await db.query<{ version: string }>({
      name: 'bench-read-version',
      text: 'SELECT version FROM bench.stock WHERE id = $1',
      values: [id],
    });
    const res = await db.query({
      name: 'bench-cas',
      text: 'UPDATE bench.stock SET stock = stock - 1, version = version + 1 WHERE id = $1 AND version = $2 AND stock >= 1',
      values: [id, rows[0]!.version],
    });
    if (res.rowCount === 1) done++;
    else aborts++;
  });
  return { tps: Math.round(done / ((Date.now() - started) / 1000)), done, aborts };
}
