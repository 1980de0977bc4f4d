/**
 * The lane's lease (activities/lane-lock.ts) against the real Postgres, as the worker's role: a holder
 * whose session stops renewing is ended by a waiting task once its lease is over, on the database's
 * clock, and the takeover recorded; a holder that renews keeps the lane however long it holds it; a
 * waiter never ends a session that does not hold the lane. Each holder and waiter has a pool of its
 * own, as separate worker processes would.
 */
import { Client, type Pool, type PoolClient } from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { withLaneLock, type LaneIo } from '../activities/lane-lock';
import { createPool } from '../db/pool';
import { uid } from './support/helpers';

let holderPool: Pool;
let waiterPool: Pool;
beforeAll(() => {
  holderPool = createPool(inject('roleUrls').app);
  waiterPool = createPool(inject('roleUrls').app);
});
afterAll(async () => {
  await holderPool.end();
  await waiterPool.end();
});

const io = (): LaneIo & { logs: string[] } => {
  const logs: string[] = [];
  return { logs, heartbeat: () => undefined, log: (m) => void logs.push(m) };
};
const pidOf = async (c: PoolClient | Client): Promise<number> =>
  (await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
const clock = async (c: PoolClient | Pool): Promise<Date> =>
  (await c.query<{ t: Date }>('SELECT clock_timestamp() AS t')).rows[0]!.t;
const alive = async (pid: number): Promise<boolean> =>
  (await waiterPool.query({ text: 'SELECT 1 FROM pg_stat_activity WHERE pid = $1', values: [pid] })).rowCount === 1;
const takeovers = async (lane: string) =>
  (
    await waiterPool.query<{
      holder_pid: number;
      holder_worker: string;
      by_order_id: string;
      expired_at: Date;
      at: Date;
    }>({ text: 'SELECT * FROM lane_takeovers WHERE lane = $1', values: [lane] })
  ).rows;

/** A promise and its resolver, to hold a lane until the test lets go. */
function gate(): { wait: Promise<void>; open: () => void } {
  let open!: () => void;
  const wait = new Promise<void>((r) => (open = r));
  return { wait, open };
}

describe('the lane lease', () => {
  it('a lane held by a frozen process is freed: a holder that never renews is ended once its lease is over, and the waiter gets the lane', async () => {
    const lane = `lease-${uid()}`;
    const hold = gate();
    let holderPid = 0;
    let holding!: () => void;
    const held = new Promise<void>((r) => (holding = r));
    // The holder takes the lane with a 2 s lease and never renews it: a process that stopped.
    const holder = withLaneLock(
      holderPool,
      lane,
      'order-frozen',
      io(),
      async (session) => {
        holderPid = await pidOf(session);
        holding();
        await hold.wait;
        await session.query('SELECT 1'); // what the holder does when it runs again
      },
      { ms: 2_000, renewMs: 3_600_000 },
    );
    holder.catch(() => undefined);
    await held;

    const waiterIo = io();
    const t0 = Date.now();
    const got = await withLaneLock(waiterPool, lane, 'order-waiting', waiterIo, async (session) => ({
      pid: await pidOf(session),
      at: await clock(session),
    }));
    const waitedMs = Date.now() - t0;

    // The waiter got the lane while the holder's task was still "running": its session had been ended.
    expect(got.pid).not.toBe(holderPid);
    expect(await alive(holderPid)).toBe(false);
    const rows = await takeovers(lane);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ holder_pid: holderPid, by_order_id: 'order-waiting' });
    expect(rows[0]!.holder_worker).toMatch(new RegExp(`^${process.pid}@`));
    expect(rows[0]!.expired_at.getTime()).toBeLessThan(rows[0]!.at.getTime()); // both on the database's clock
    expect(rows[0]!.at.getTime()).toBeLessThanOrEqual(got.at.getTime());
    expect(waiterIo.logs.filter((m) => m.startsWith('lane taken over'))).toHaveLength(1);
    // The lease is the waiter's now, and gone once it let go.
    expect(
      (await waiterPool.query({ text: 'SELECT 1 FROM lane_leases WHERE lane = $1', values: [lane] })).rowCount,
    ).toBe(0);

    // The frozen holder, running again, finds its session gone: its task fails (and Temporal retries it).
    hold.open();
    await expect(holder).rejects.toThrow(/terminat|connection/i);
    console.log(
      `frozen holder (pid ${holderPid}, 2 s lease) taken over after ${waitedMs} ms of waiting; ` +
        `expired ${rows[0]!.at.getTime() - rows[0]!.expired_at.getTime()} ms before the takeover (database clock)`,
    );
  });

  it('a holder that renews its lease keeps the lane for as long as it holds it', async () => {
    const lane = `lease-${uid()}`;
    const hold = gate();
    let holding!: () => void;
    const held = new Promise<void>((r) => (holding = r));
    let released: Date | undefined;
    const expiries: Date[] = [];
    const holder = withLaneLock(
      holderPool,
      lane,
      'order-slow',
      io(),
      async (session) => {
        holding();
        await hold.wait;
        released = await clock(session);
        return 'done';
      },
      { ms: 1_500, renewMs: 300 },
    );
    await held;
    const waiterIo = io();
    const waiter = withLaneLock(waiterPool, lane, 'order-waiting', waiterIo, (session) => clock(session));
    // Held for 7 s: over four lease lengths, and over one of the waiter's 4 s waits with a look at the lease.
    for (let i = 0; i < 7; i++) {
      await new Promise((r) => setTimeout(r, 1_000));
      expiries.push(
        (
          await waiterPool.query<{ e: Date }>({
            text: 'SELECT expires_at AS e FROM lane_leases WHERE lane = $1',
            values: [lane],
          })
        ).rows[0]!.e,
      );
    }
    hold.open();
    expect(await holder).toBe('done');
    const gotAt = await waiter;
    expect(released).toBeDefined();
    expect(gotAt.getTime()).toBeGreaterThanOrEqual(released!.getTime()); // after the holder let go, never during
    expect(await takeovers(lane)).toHaveLength(0);
    expect(waiterIo.logs).toEqual([]);
    // The lease moved forward while it was held (one row, renewed on the database's clock).
    expect(new Set(expiries.map((e) => e.getTime())).size).toBeGreaterThanOrEqual(5);
    expect(expiries.every((e, i) => i === 0 || e >= expiries[i - 1]!)).toBe(true);
  });

  it('a holder busy in one long statement of its open transaction keeps the lane: its lease is renewed from another connection', async () => {
    const lane = `lease-${uid()}`;
    let holding!: () => void;
    const held = new Promise<void>((r) => (holding = r));
    const holder = withLaneLock(
      holderPool,
      lane,
      'order-busy',
      io(),
      async (session) => {
        await session.query('BEGIN');
        holding();
        // 6 s in one statement, in an open transaction: four lease lengths, and past the waiter's first look.
        await session.query('SELECT pg_sleep(6)');
        await session.query('COMMIT');
        return 'done';
      },
      { ms: 1_500, renewMs: 300 },
    );
    await held;
    const waiterIo = io();
    const waiter = withLaneLock(waiterPool, lane, 'order-waiting', waiterIo, (session) => clock(session));
    expect(await holder).toBe('done');
    await waiter;
    expect(await takeovers(lane)).toHaveLength(0);
    expect(waiterIo.logs).toEqual([]);
  });

  it('a waiter never ends a session that does not hold the lane, whatever an expired lease row names', async () => {
    const lane = `lease-${uid()}`;
    // The lane held without a lease (a worker of an older build), and a lapsed lease naming another session.
    const holder = new Client({ connectionString: inject('roleUrls').app });
    const bystander = new Client({ connectionString: inject('roleUrls').app });
    await holder.connect();
    await bystander.connect();
    try {
      await holder.query({ text: 'SELECT pg_advisory_lock(hashtext($1))', values: [`lane:${lane}`] });
      const bystanderPid = await pidOf(bystander);
      await waiterPool.query({
        text: `INSERT INTO lane_leases (lane, holder_pid, worker, taken_at, expires_at)
               VALUES ($1, $2, 'elsewhere', now() - interval '1 hour', now() - interval '1 minute')`,
        values: [lane, bystanderPid],
      });
      const stop = new AbortController();
      const t = setTimeout(() => stop.abort(new Error('the test stopped waiting')), 9_000); // two looks at the lease
      const waiterIo = io();
      await expect(
        withLaneLock(waiterPool, lane, 'order-waiting', { ...waiterIo, signal: stop.signal }, () =>
          Promise.resolve('ran'),
        ),
      ).rejects.toThrow('the test stopped waiting');
      clearTimeout(t);
      expect(await alive(await pidOf(holder))).toBe(true);
      expect(await alive(bystanderPid)).toBe(true);
      expect(await takeovers(lane)).toHaveLength(0);
      expect(waiterIo.logs).toEqual([]);
    } finally {
      await holder.end();
      await bystander.end();
    }
  });
});
