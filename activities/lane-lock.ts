/**
 * One transaction at a time per serial lane, across every worker process. Each process runs a lane's
 * rounds one at a time (a round: every reservation waiting for the lane, in one transaction; see
 * lane-group.ts); with N processes that alone would be N at once. So a round first takes the lane's
 * Postgres advisory lock, on a connection of its own (the lane's session), does its work on that
 * session, and holds the lock until it is done. If the process holding it dies, Postgres ends its
 * session and the lane is free at once (a dead host: within about 25 s, by TCP keepalive); the tasks
 * are retried by Temporal (their heartbeat stops), and the commit is idempotent.
 *
 * A process that is stopped (SIGSTOP, docker pause) or stuck in its event loop keeps its session: its
 * kernel still answers the keepalives. So the holder proves it is alive: while it holds the lane it
 * renews its session's lease (lane_leases) on the database's clock, from another connection, and a task waiting for the lane that
 * finds the lease over, on the database's clock too, ends the holder's session with
 * pg_terminate_backend (every worker connects as one role, which may end its own sessions). That frees
 * the lock and rolls back whatever the holder had in flight on the session; the frozen process, when
 * it runs again, finds its session gone and its task fails, to be retried. The takeover is logged and
 * recorded in lane_takeovers.
 */
import type { Pool, PoolClient } from 'pg';
import { WORKER_IDENTITY } from '../platform/identity';

/** The process's worker identity (worker.ts gives it to its workers), so a lane_tasks row names the worker the Web UI shows. */
const WORKER = WORKER_IDENTITY;
/** Each wait for the lock, between heartbeats (the lane's heartbeat timeout is 10 s). */
const LOCK_WAIT = '4s';

export interface LaneLease {
  /** How long a lease lasts after its last renewal, on the database's clock. */
  ms: number;
  /** How often the holder renews it. */
  renewMs: number;
}

/**
 * 8 s, renewed every 2 s: a holder is taken over only after four renewals in a row are missed (an
 * event loop stalled 6 s is still not), and a frozen holder is found within 8 s + one lock wait (4 s),
 * 12 s: under the sweeper's stall bound (5 min; 15 s in the soak), and before Temporal retries the
 * frozen holder's own task (heartbeat timeout 10 s), so that retry does not queue behind it.
 */
export const LANE_LEASE: LaneLease = { ms: 8_000, renewMs: 2_000 };

export interface LaneIo {
  heartbeat(): void;
  /** The activity's cancellation (a cancel, a timeout, the worker shutting down): stop waiting. */
  signal?: AbortSignal;
  log?: (message: string, fields: Record<string, unknown>) => void;
}

/** What a waiting task learns when it ended a holder whose lease was over. */
interface Takeover {
  holder_pid: number;
  worker: string;
  taken_at: Date;
  expires_at: Date;
  ended: boolean;
}

/**
 * Runs fn holding the lane, on the lane's session (`session`: fn's statements run there, so ending the
 * session of a holder that stopped also rolls back what it had in flight). `orders`: the order, or the
 * orders of a group commit (asked again when the holding is recorded, one lane_tasks row each).
 */
export async function withLaneLock<T>(
  db: Pool,
  lane: string,
  orders: string | (() => string[]),
  io: LaneIo,
  fn: (session: PoolClient) => Promise<T>,
  lease: LaneLease = LANE_LEASE,
): Promise<T> {
  const c = await db.connect();
  let broken = false;
  const lost = (): void => void (broken = true);
  c.on('error', lost);
  // The lease's own connection, taken before the lane: a renewal never waits for the pool (a burst of
  // other activities) nor behind the lane's statements.
  let renewer: PoolClient;
  try {
    renewer = await db.connect();
  } catch (err) {
    c.off('error', lost);
    c.release();
    throw err;
  }
  let renewerBroken = false;
  const renewerLost = (): void => void (renewerBroken = true);
  renewer.on('error', renewerLost);
  const key = `lane:${lane}`;
  const orderIds = (): string[] => (typeof orders === 'string' ? [orders] : orders());
  const orderId = (): string => orderIds().join(',');
  try {
    // If this worker's host dies, Postgres finds out within about 25 s (not the kernel's two hours)
    // and ends the session, which frees the lane. And wait for the lock in steps, heartbeating in
    // between, so a long queue is not mistaken for a stuck task. One round trip for all of it.
    await c.query(
      `SET tcp_keepalives_idle = 10; SET tcp_keepalives_interval = 5; SET tcp_keepalives_count = 3; SET lock_timeout = '${LOCK_WAIT}'`,
    );
    let started: Date;
    let pid: number;
    for (;;) {
      if (io.signal?.aborted) throw io.signal.reason ?? new Error('lane task cancelled while waiting for the lane');
      try {
        // The lock, then the lease in the same statement (no moment where this session holds the lane
        // under another holder's lease); its start is on the database's clock.
        ({ t: started, pid } = (
          await c.query<{ t: Date; pid: number }>({
            text: `WITH got AS (SELECT pg_advisory_lock(hashtext($2)))
                   INSERT INTO lane_leases AS l (lane, holder_pid, worker, taken_at, expires_at)
                   SELECT $1, pg_backend_pid(), $3, clock_timestamp(), clock_timestamp() + make_interval(secs => $4) FROM got
                   ON CONFLICT (lane) DO UPDATE SET holder_pid = excluded.holder_pid, worker = excluded.worker,
                     taken_at = excluded.taken_at, expires_at = excluded.expires_at
                   RETURNING l.taken_at AS t, l.holder_pid AS pid`,
            values: [lane, key, WORKER, lease.ms / 1000],
          })
        ).rows[0]!);
        break;
      } catch (err) {
        if ((err as { code?: string }).code !== '55P03') throw err; // lock_not_available: still queued
        io.heartbeat();
        await endStaleHolder(c, lane, key, orderId(), io);
      }
    }
    await c.query('RESET lock_timeout'); // fn's statements, and the pool's later users, wait as long as they must
    // Prove this process is alive while it holds the lane. One renewal at a time; none once the task is
    // cancelled or timed out (its work is no longer wanted, so it may be ended like a stopped one): the
    // SDK times out on its own a task whose heartbeat is late, so a task stuck inside the lane in a live
    // process stops renewing too, and loses the lane. Renewed on the lease's own connection, in its own
    // transaction: on the lane's session a renewal would wait behind fn's statements (a long one would
    // lose the lane of a live holder), and inside fn's open transaction nobody would see it.
    let renewing: Promise<void> | undefined;
    const renew = setInterval(() => {
      if (renewing || broken || renewerBroken || io.signal?.aborted) return;
      renewing = renewer
        .query({
          text: `UPDATE lane_leases SET expires_at = clock_timestamp() + make_interval(secs => $2)
                 WHERE lane = $1 AND holder_pid = $3`,
          values: [lane, lease.ms / 1000, pid],
        })
        .then(
          (r) => {
            if (r.rowCount === 0) {
              broken = true; // another task took the lane over: this session must not go back to the pool
              io.log?.('lane lease lost: another task took the lane over', { lane, orderId: orderId() });
            }
          },
          (err: Error) => io.log?.('lane lease not renewed', { lane, orderId: orderId(), error: err.message }),
        )
        .finally(() => (renewing = undefined));
    }, lease.renewMs);
    try {
      return await fn(c);
    } finally {
      clearInterval(renew);
      await renewing;
      // The record must not replace the task's own outcome: a failure to write it is only logged. One row
      // per order the holding served, each with the holding's start and end.
      await c
        .query({
          text: `WITH t AS (SELECT clock_timestamp() AS ended)
                 INSERT INTO lane_tasks (lane, order_id, worker, started_at, ended_at)
                 SELECT $1, o, $3, $4, t.ended FROM unnest($2::text[]) o, t`,
          values: [lane, orderIds(), WORKER, started],
        })
        .catch((err: Error) => io.log?.('lane task not recorded', { lane, orderId: orderId(), error: err.message }));
      await c
        .query({
          text: `WITH gone AS (DELETE FROM lane_leases WHERE lane = $1 AND holder_pid = pg_backend_pid())
                 SELECT pg_advisory_unlock(hashtext($2))`,
          values: [lane, key],
        })
        .catch(() => (broken = true));
    }
  } catch (err) {
    broken = true; // a lock may still be held on this session: never hand it back to the pool
    throw err;
  } finally {
    c.off('error', lost);
    c.release(broken ? new Error('lane lock session closed') : undefined);
    renewer.off('error', renewerLost);
    renewer.release(renewerBroken ? new Error('lane lease connection closed') : undefined);
  }
}

/**
 * A waiting task's look at the lane's holder: when its lease is over (on the database's clock) and its
 * session still holds the lane's lock, end that session, which frees the lock, then log and record it.
 * A holder without a lease (a worker of an older build) is never ended.
 */
async function endStaleHolder(c: PoolClient, lane: string, key: string, orderId: string, io: LaneIo): Promise<void> {
  let found: Takeover[];
  try {
    // An advisory lock on one bigint shows in pg_locks as its high and low 32 bits (objsubid 1).
    ({ rows: found } = await c.query<Takeover>({
      text: `SELECT l.holder_pid, l.worker, l.taken_at, l.expires_at, pg_terminate_backend(l.holder_pid) AS ended
               FROM lane_leases l
               JOIN pg_locks k ON k.pid = l.holder_pid AND k.locktype = 'advisory' AND k.granted AND k.objsubid = 1
                AND k.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                AND ((k.classid::int8 << 32) | k.objid::int8) = hashtext($2)::int8
              WHERE l.lane = $1 AND l.expires_at < clock_timestamp()`,
      values: [lane, key],
    }));
  } catch (err) {
    // A holder of another role (42501): this role may not end it. Keep waiting, and say so.
    io.log?.('lane holder past its lease not ended', { lane, orderId, error: (err as Error).message });
    return;
  }
  for (const h of found.filter((f) => f.ended)) {
    io.log?.('lane taken over: its holder stopped renewing its lease, its session was ended', {
      lane,
      orderId,
      holderPid: h.holder_pid,
      holderWorker: h.worker,
      heldSince: h.taken_at.toISOString(),
      expiredAt: h.expires_at.toISOString(),
    });
    await c
      .query({
        text: `INSERT INTO lane_takeovers (lane, holder_pid, holder_worker, held_since, expired_at, by_worker, by_order_id)
               VALUES ($1, $2, $3, $4, $5, $6, $7)`,
        values: [lane, h.holder_pid, h.worker, h.taken_at, h.expires_at, WORKER, orderId],
      })
      .catch((err: Error) => io.log?.('lane takeover not recorded', { lane, orderId, error: err.message }));
  }
}

/**
 * The lane's holdings from lane_tasks rows: the rows of one group commit (one per order it took) share
 * their worker, start and end, and are one holding.
 */
export function laneHoldings<R extends { worker: string; started_at: Date; ended_at: Date }>(rows: R[]): R[] {
  const seen = new Map<string, R>();
  for (const r of rows) seen.set(`${r.worker} ${r.started_at.toISOString()} ${r.ended_at.toISOString()}`, r);
  return [...seen.values()];
}

/**
 * The most tasks (or holdings) of one lane that ran at the same time, from lane_tasks rows (a sweep over
 * their starts and ends; an end at the same instant as a start counts first).
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
