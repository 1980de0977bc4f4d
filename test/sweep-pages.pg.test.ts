/**
 * The sweep in pages (activities/sweeper.ts, activities/sweep-reads.ts): a cursor across sweeps
 * through the backlog of open orders, what may have changed since the last sweep first (a run that
 * closed, a bound crossed), a cancelled sweep that keeps its place, and two sweeps that never act on
 * one order at once. The rows are real, in a database of the file's own (a sweep reads every open
 * order); Temporal is a stand-in that records which orders the sweep described.
 */
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { CancelledFailure } from '@temporalio/common';
import { MockActivityEnvironment } from '@temporalio/testing';
import type { Pool } from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { sweeperActivities, type SweepOptions, type SweepReport } from '../activities/sweeper';
import { TERMINAL_STATUSES } from '../domain/order';
import { ownDatabase, type OwnDatabase } from './support/own-database';

let own: OwnDatabase;
let db: Pool;
beforeAll(async () => {
  own = await ownDatabase('pages');
  db = own.owner;
});
afterAll(async () => {
  await own?.drop();
});
beforeEach(async () => {
  await db.query('DELETE FROM orders');
  await db.query('DELETE FROM sweeper_actions');
  await db.query(`DELETE FROM sweep_cursor`);
  await db.query(`INSERT INTO sweep_cursor DEFAULT VALUES`);
});

/** Open orders waiting for a person, their rows last changed `ageMin` minutes ago. */
async function waiting(ids: string[], ageMin = 10): Promise<void> {
  for (const id of ids)
    await db.query({
      text: `INSERT INTO orders (order_id, customer_id, status, currency, total_cents, items, payment_method, workflow_id, created_at, updated_at)
             VALUES ($1, 'c', 'NEEDS_ATTENTION', 'USD', 1000, '[]'::jsonb, 'tok_visa', $2,
                     now() - $3::int * interval '1 minute', now() - $3::int * interval '1 minute')`,
      values: [id, `order:${id}`, ageMin],
    });
}

/**
 * Temporal as the sweep sees it: every run RUNNING with nothing pending (it waits on purpose), but
 * those in `closed`: listed as closed since the last sweep, and gone (terminated, then deleted in the
 * Web UI), so that a restart reads nothing of them. `onDescribe` runs first.
 */
function standIn(onDescribe: (orderId: string) => Promise<void> = async () => undefined) {
  const described: string[] = [];
  const starts: string[] = [];
  /** Closed runs, by order ID, with their close time (ms). */
  const closedAt = new Map<string, number>();
  const closed = { add: (id: string) => closedAt.set(id, Date.now()), has: (id: string) => closedAt.has(id) };
  let runningLists = 0;
  const client = {
    options: { namespace: 'default' },
    workflow: {
      list: async function* ({ query }: { query: string }) {
        const window = /CloseTime > '([^']+)'/.exec(query);
        if (!window) {
          runningLists++; // the running sagas of settled orders: none
          return;
        }
        const since = Date.parse(window[1]!);
        for (const [id, at] of closedAt) if (at > since) yield { workflowId: `order:${id}` };
      },
      getHandle: (workflowId: string) => ({
        describe: async () => {
          const id = workflowId.slice('order:'.length);
          described.push(id);
          await onDescribe(id);
          if (closed.has(id)) throw new WorkflowNotFoundError('not found', workflowId, undefined);
          return {
            runId: `run-${id}`,
            status: { name: 'RUNNING' },
            raw: { workflowExecutionInfo: {}, pendingActivities: [] },
          };
        },
      }),
      start: async (_type: string, opts: { workflowId: string }) => {
        starts.push(opts.workflowId);
        return { firstExecutionRunId: `new-${opts.workflowId}` };
      },
    },
  } as unknown as Client;
  return { client, described, starts, closed, runningLists: () => runningLists };
}

type StandIn = ReturnType<typeof standIn>;
const BOUNDS: Partial<SweepOptions> = { graceMs: 0, attentionAgeMs: 86_400_000, stallAfterMs: 300_000 };

async function sweep(
  t: StandIn,
  opts: Partial<SweepOptions> = {},
  env = new MockActivityEnvironment(),
): Promise<{ report: SweepReport; described: string[] }> {
  const from = t.described.length;
  const report: SweepReport = await env.run(
    sweeperActivities({ db, temporal: { client: () => Promise.resolve(t.client), taskQueue: 'pages' } }).sweepOrders,
    { ...BOUNDS, ...opts },
  );
  return { report, described: t.described.slice(from) };
}

const cursor = async () =>
  (await db.query<{ backlog_after: string }>('SELECT backlog_after FROM sweep_cursor')).rows[0]?.backlog_after;

describe('the sweep in pages', () => {
  it('goes through the backlog a page at a time, with a cursor kept across sweeps, and starts again', async () => {
    await waiting(['p-a', 'p-b', 'p-c', 'p-d', 'p-e']);
    const t = standIn();
    const pages: string[][] = [];
    const marks: string[] = [];
    for (let i = 0; i < 4; i++) {
      const { report, described } = await sweep(t, { pageSize: 2 });
      pages.push(described);
      marks.push(`${report.page!.passStarts ? 'starts' : '-'}/${report.page!.passEnds ? 'ends' : '-'}`);
    }
    expect(pages).toEqual([['p-a', 'p-b'], ['p-c', 'p-d'], ['p-e'], ['p-a', 'p-b']]);
    expect(marks).toEqual(['starts/-', '-/-', '-/ends', 'starts/-']);
    // The settled orders whose run is still open are listed once per pass, not once per sweep.
    expect(t.runningLists()).toBe(2);
    expect(await cursor()).toBe('p-b');
  });

  it('a run closed since the last sweep is looked at first, ahead of the backlog, and restarted', async () => {
    await waiting(['q-a', 'q-b', 'q-c', 'q-d', 'q-e', 'q-f']);
    const t = standIn();
    expect((await sweep(t, { pageSize: 2 })).described).toEqual(['q-a', 'q-b']);
    t.closed.add('q-f'); // terminated from the Web UI, at the end of the backlog
    const { report, described } = await sweep(t, { pageSize: 2 });
    expect(described).toEqual(['q-f', 'q-c']); // fresh first; the backlog keeps half the page
    expect(report.page).toMatchObject({ fresh: 1, backlog: 1 });
    expect(t.starts).toEqual(['order:q-f']);
    expect(report.actions.map((a) => `${a.orderId} ${a.action} ${a.cause}`)).toEqual(['q-f restart missing']);
    // The backlog did not lose its place: q-d is next (q-f, closed within the window's margin, again first).
    expect((await sweep(t, { pageSize: 2 })).described).toEqual(['q-f', 'q-d']);
  });

  it('an order whose age crossed the stall bound since the last sweep is fresh', async () => {
    await waiting(['r-a', 'r-b', 'r-c', 'r-d']);
    const t = standIn();
    await sweep(t, { pageSize: 2 }); // r-a, r-b; seen_at is now
    // r-d's row last changed just under the stall bound before that sweep: it crosses the bound now.
    await db.query(
      `UPDATE orders SET updated_at = (SELECT seen_at FROM sweep_cursor) - interval '300 seconds' + interval '1 millisecond'
        WHERE order_id = 'r-d'`,
    );
    await new Promise((r) => setTimeout(r, 20));
    const { described, report } = await sweep(t, { pageSize: 2 });
    expect(described).toEqual(['r-d', 'r-c']);
    expect(report.page).toMatchObject({ fresh: 1, backlog: 1 });
  });

  it('cancelled, it stops at once, inside an order too, and the next sweep goes on from that order', async () => {
    await waiting(['s-a', 's-b', 's-c', 's-d', 's-e']);
    const env = new MockActivityEnvironment();
    const t = standIn(async (id) => {
      if (id === 's-b') env.cancel('CANCELLED'); // an operator cancels the sweep in the Web UI
    });
    const err = await sweep(t, { pageSize: 4 }, env).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CancelledFailure);
    expect(t.described).toEqual(['s-a', 's-b']); // nothing after the cancel
    expect(await cursor()).toBe('s-a'); // s-b was not finished
    expect((await sweep(t, { pageSize: 4 })).described).toEqual(['s-b', 's-c', 's-d', 's-e']);
  });

  it('a sweep that fails mid-page frees the order it was at and its retry starts there', async () => {
    await waiting(['u-a', 'u-b', 'u-c', 'u-d']);
    // Temporal out of reach at u-c: a transport error, and the cheap call fails too.
    const t = standIn(async (id) => {
      if (id === 'u-c' && failing)
        throw Object.assign(new Error('14 UNAVAILABLE: No connection established'), { code: 14 });
    });
    let failing = true;
    (t.client as unknown as { workflowService: unknown }).workflowService = {
      getSystemInfo: async () => {
        if (failing) throw new Error('No connection established');
        return {};
      },
    };
    await expect(sweep(t, { pageSize: 4 })).rejects.toThrow(/UNAVAILABLE/);
    expect(await cursor()).toBe('u-b');
    // The lock of the order it was at is free: another session takes it at once.
    const other = await db.connect();
    try {
      const got = await other.query<{ ok: boolean }>({
        text: 'SELECT pg_try_advisory_lock($1, hashtext($2)) AS ok',
        values: [0x53574550, 'u-c'],
      });
      expect(got.rows[0]!.ok).toBe(true);
      await other.query({ text: 'SELECT pg_advisory_unlock($1, hashtext($2))', values: [0x53574550, 'u-c'] });
    } finally {
      other.release();
    }
    failing = false;
    expect((await sweep(t, { pageSize: 4 })).described).toEqual(['u-c', 'u-d']);
  });

  it('a missing cursor row is made again: the sweep keeps its place', async () => {
    await waiting(['v-a', 'v-b', 'v-c']);
    await db.query('DELETE FROM sweep_cursor');
    const t = standIn();
    expect((await sweep(t, { pageSize: 2 })).described).toEqual(['v-a', 'v-b']);
    expect(await cursor()).toBe('v-b');
    expect((await sweep(t, { pageSize: 2 })).described).toEqual(['v-c']);
  });

  it('two sweeps at once never act on the same order: the second leaves it to the first', async () => {
    await waiting(['t-a']);
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let entered!: () => void;
    const inFirst = new Promise<void>((r) => (entered = r));
    let calls = 0;
    const t = standIn(async () => {
      if (calls++ > 0) return; // only the first sweep's look waits
      entered();
      await gate;
    });
    t.closed.add('t-a');
    const first = sweep(t, { orderIds: ['t-a'] });
    await inFirst;
    const second = await sweep(t, { orderIds: ['t-a'] });
    expect(second.report.busy).toBe(1);
    expect(second.described).toEqual([]);
    release();
    const done = await first;
    expect(done.report.actions.map((a) => a.action)).toEqual(['restart']);
    expect(t.starts).toEqual(['order:t-a']);
  });

  it('a page size that is not a whole number above 0 is refused, naming it', async () => {
    const t = standIn();
    await expect(sweep(t, { pageSize: 0 })).rejects.toThrow(/pageSize must be a whole number above 0, not 0/);
    expect(t.described).toEqual([]);
  });

  it("the open-orders indexes' list is domain/order.ts's TERMINAL_STATUSES", () => {
    const sql = readFileSync(path.resolve(__dirname, '../migrations/0014_sweep_pages.sql'), 'utf8');
    const lists = [...sql.matchAll(/status NOT IN \(([^)]*)\)/g)].map((m) => m[1]!.replace(/'|\s/g, '').split(','));
    expect(lists).toHaveLength(2);
    for (const l of lists) expect(l).toEqual([...TERMINAL_STATUSES]);
  });
});
