/**
 * One task at a time per serial lane, across every worker process. Each process runs a lane's task
 * queue one task at a time; with N processes that alone would be N at once. So a lane task first takes
 * the lane's Postgres advisory lock, on a connection of its own, and holds it until it is done. If the
 * process holding it dies, Postgres ends its session and the lane is free at once (a dead host: within
 * about 25 s, by TCP keepalive); the task itself is retried by Temporal (its heartbeat stops), and its
 * commit is idempotent.
 */
import os from 'node:os';
import type { Pool } from 'pg';

/** The SDK's default worker identity, so a lane_tasks row names the worker the Web UI shows. */
const WORKER = `${process.pid}@${os.hostname()}`;
/** Each wait for the lock, between heartbeats (the lane's heartbeat timeout is 10 s). */
const LOCK_WAIT = '4s';

export interface LaneIo {
  heartbeat(): void;
  /** The activity's cancellation (a cancel, a timeout, the worker shutting down): stop waiting. */
  signal?: AbortSignal;
  log?: (message: string, fields: Record<string, unknown>) => void;
}

export async function withLaneLock<T>(
  db: Pool,
  lane: string,
  orderId: string,
  io: LaneIo,
  fn: () => Promise<T>,
): Promise<T> {
  const c = await db.connect();
  let broken = false;
  const lost = (): void => void (broken = true);
  c.on('error', lost);
  const key = `lane:${lane}`;
  try {
    // If this worker's host dies, Postgres finds out within about 25 s (not the kernel's two hours)
    // and ends the session, which frees the lane. And wait for the lock in steps, heartbeating in
    // between, so a long queue is not mistaken for a stuck task. One round trip for all of it.
    await c.query(
      `SET tcp_keepalives_idle = 10; SET tcp_keepalives_interval = 5; SET tcp_keepalives_count = 3; SET lock_timeout = '${LOCK_WAIT}'`,
    );
    let started: Date;
    for (;;) {
      if (io.signal?.aborted) throw io.signal.reason ?? new Error('lane task cancelled while waiting for the lane');
      try {
        // The start is read on the database's clock in the same statement that takes the lock.
        started = (
          await c.query<{ t: Date }>({
            text: 'SELECT pg_advisory_lock(hashtext($1)), clock_timestamp() AS t',
            values: [key],
          })
        ).rows[0]!.t;
        break;
      } catch (err) {
        if ((err as { code?: string }).code !== '55P03') throw err; // lock_not_available: still queued
        io.heartbeat();
      }
    }
    await c.query('RESET lock_timeout'); // the session goes back to the pool: no 4 s limit for others
    try {
      return await fn();
    } finally {
      // The record must not replace the task's own outcome: a failure to write it is only logged.
      await c
        .query({
          text: 'INSERT INTO lane_tasks (lane, order_id, worker, started_at, ended_at) VALUES ($1, $2, $3, $4, clock_timestamp())',
          values: [lane, orderId, WORKER, started],
        })
        .catch((err: Error) => io.log?.('lane task not recorded', { lane, orderId, error: err.message }));
      await c.query({ text: 'SELECT pg_advisory_unlock(hashtext($1))', values: [key] }).catch(() => (broken = true));
    }
  } catch (err) {
    broken = true; // a lock may still be held on this session: never hand it back to the pool
    throw err;
  } finally {
    c.off('error', lost);
    c.release(broken ? new Error('lane lock session closed') : undefined);
  }
}

/**
 * The most tasks of one lane that ran at the same time, from lane_tasks rows (a sweep over their
 * starts and ends; an end at the same instant as a start counts first).
 */
export function maxOverlap(rows: { started_at: Date; ended_at: Date }[]): number {
  const events = rows.flatMap((r) => [
    { t: r.started_at.getTime(), d: 1 },
    { t: r.ended_at.getTime(), d: -1 },
  ]);
  events.sort((a, b) => a.t - b.t || a.d - b.d);
  let now = 0;
  let max = 0;
  for (const e of events) max = Math.max(max, (now += e.d));
  return max;
}
