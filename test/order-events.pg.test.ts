/**
 * The order events (activities/order-events.ts, activities/order-lock.ts) and their relay
 * (ops/event-relay.ts) against the real Postgres, in a database of the file's own (a relay takes every
 * due event), and a real receiver over HTTP (test/support/event-receiver.ts) that checks each
 * signature: events written with the write that makes them true, numbered per order; delivered signed,
 * in order per order, at least once, by several relays at once; retried, dead-lettered and told; and a
 * relay process killed in the middle of a delivery loses nothing.
 */
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { recordRefunded } from '../activities/order-events';
import { checkInvariants, RULES } from '../db/invariants';
import { transition } from '../activities/order-lock';
import { readOrderEventsEndpoint } from '../ops/config';
import { DUE_EVENTS_SQL, startEventRelay, type OrderEventBody } from '../ops/event-relay';
import { startTsProcess, stopProcess } from '../platform/processes';
import { signatureProblem, signBody } from '../platform/webhook-signature';
import { startReceiver } from '../scripts/chaos/receiver';
import { uid } from './support/helpers';
import { ownDatabase, type OwnDatabase } from './support/own-database';

const SECRET = 'whsec-test-0123456789abcdef';
let own: OwnDatabase;
let db: Pool;
beforeAll(async () => {
  own = await ownDatabase('events');
  db = own.owner;
});
afterAll(async () => {
  await own?.drop();
});

async function order(id: string, status = 'PENDING'): Promise<void> {
  await db.query({
    text: `INSERT INTO orders (order_id, customer_id, status, currency, total_cents, items, payment_method, workflow_id)
           VALUES ($1, 'cust-1', $2, 'USD', 2500, '[]'::jsonb, 'tok_visa', $3)`,
    values: [id, status, `order:${id}`],
  });
}

/** `n` orders with `per` events each, due now; returns their event IDs. */
async function pending(prefix: string, n: number, per: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const id = `${prefix}-${i}`;
    await order(id);
    for (let seq = 1; seq <= per; seq++) {
      await db.query({
        text: `INSERT INTO order_events (order_id, seq, kind, data) VALUES ($1, $2, 'order.accepted', '{}'::jsonb)`,
        values: [id, seq],
      });
      ids.push(`${id}:${seq}`);
    }
  }
  return ids;
}

/** What the receiver took of these events (a relay also delivers other tests' events: the database is shared by the file). */
const ofThese = (taken: OrderEventBody[], ids: string[]): OrderEventBody[] => taken.filter((e) => ids.includes(e.id));

async function until(what: string, ok: () => boolean | Promise<boolean>, ms = 30_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await ok())) {
    if (Date.now() > end) throw new Error(`not within ${ms} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** Each order's events as the receiver took them are in order (seq ascending, none missing). */
function inOrderPerOrder(taken: OrderEventBody[]): boolean {
  const last = new Map<string, number>();
  for (const e of taken) {
    const prev = last.get(e.orderId) ?? 0;
    if (e.seq !== prev + 1 && e.seq !== prev) return false; // again (at least once) or the next one
    last.set(e.orderId, Math.max(prev, e.seq));
  }
  return true;
}

describe('order events', () => {
  it('each outcome is an event written with the status change, numbered per order; a refund once', async () => {
    const id = `ev-${uid()}`;
    await order(id);
    await transition(db, id, 'RESERVED', { runId: 'run-1' });
    await transition(db, id, 'RESERVED', { runId: 'run-1' }); // a retry: no change, no event
    await transition(db, id, 'CHARGED', { runId: 'run-1' }); // not an event
    // As the shipment step does: the move to SHIPPED first, with the tracking number, then the shipment row.
    await transition(db, id, 'SHIPPED', { runId: 'run-1', eventData: { trackingNumber: 'TRK-42' } });
    await db.query({ text: `INSERT INTO shipments (order_id, tracking_number) VALUES ($1, 'TRK-42')`, values: [id] });
    await transition(db, id, 'COMPLETED', { runId: 'run-1' });
    // A refused write writes nothing.
    await expect(transition(db, id, 'CANCELLED', { runId: 'run-1' })).rejects.toThrow(/refused/);
    expect(await recordRefunded(db, id, 2500, 2500)).toBe(true);
    expect(await recordRefunded(db, id, 2500, 2500)).toBe(false); // the refund step retried
    const { rows } = await db.query<{ seq: number; kind: string; data: Record<string, unknown> }>({
      text: 'SELECT seq, kind, data FROM order_events WHERE order_id = $1 ORDER BY seq',
      values: [id],
    });
    expect(rows.map((r) => `${r.seq} ${r.kind}`)).toEqual([
      '1 order.accepted',
      '2 order.shipped',
      '3 order.completed',
      '4 order.refunded',
    ]);
    expect(rows[1]!.data).toMatchObject({ status: 'SHIPPED', trackingNumber: 'TRK-42' });
    expect(rows[2]!.data).toMatchObject({
      status: 'COMPLETED',
      trackingNumber: 'TRK-42',
      totalCents: 2500,
      currency: 'USD',
    });
    expect(rows[3]!.data).toMatchObject({ refundedCents: 2500 });
    const seq = await db.query<{ event_seq: number }>({
      text: 'SELECT event_seq FROM orders WHERE order_id = $1',
      values: [id],
    });
    expect(seq.rows[0]!.event_seq).toBe(4);
  });

  it('the relay delivers each event signed, with its ID, in order per order', async () => {
    const receiver = await startReceiver(SECRET);
    const ids = await pending(`ok-${uid()}`, 5, 3);
    const relay = startEventRelay(db, { url: receiver.url, secret: SECRET }, { idleMs: 20 });
    try {
      await until('every event delivered', () => ofThese(receiver.taken, ids).length >= ids.length);
    } finally {
      await relay.stop();
      await receiver.close();
    }
    expect(receiver.refused).toEqual([]);
    expect(
      ofThese(receiver.taken, ids)
        .map((e) => e.id)
        .sort(),
    ).toEqual([...ids].sort());
    expect(inOrderPerOrder(receiver.taken)).toBe(true);
    const left = await db.query({
      text: `SELECT 1 FROM order_events WHERE order_id || ':' || seq = ANY ($1::text[]) AND delivered_at IS NULL`,
      values: [ids],
    });
    expect(left.rowCount).toBe(0);
  });

  it('a failing receiver: retried with backoff, then dead-lettered and a person told; later events go on', async () => {
    const receiver = await startReceiver(SECRET, 'fail');
    const prefix = `dead-${uid()}`;
    const ids = await pending(prefix, 1, 2);
    const logs: string[] = [];
    const relay = startEventRelay(
      db,
      { url: receiver.url, secret: SECRET },
      { idleMs: 20, maxAttempts: 3, baseDelayMs: 20, maxDelayMs: 40 },
      (level, message, fields) => {
        if (String(fields.eventId).startsWith(prefix)) logs.push(`${level} ${message}`);
      },
    );
    try {
      await until('both dead-lettered', async () => {
        const r = await db.query({
          text: `SELECT 1 FROM order_events WHERE order_id = $1 AND dead_at IS NOT NULL`,
          values: [`${prefix}-0`],
        });
        return r.rowCount === 2;
      });
      const dead = await db.query<{ attempts: number; last_error: string }>({
        text: `SELECT attempts, last_error FROM order_events WHERE order_id = $1 ORDER BY seq`,
        values: [`${prefix}-0`],
      });
      expect(dead.rows).toEqual([
        { attempts: 3, last_error: 'HTTP 500' },
        { attempts: 3, last_error: 'HTTP 500' },
      ]);
      expect(logs.filter((l) => l.startsWith('error ALERT order event dead-lettered'))).toHaveLength(2);
      // The receiver is back: the order's next event goes, past the dead-lettered ones.
      receiver.mode = 'ok';
      await db.query({
        text: `INSERT INTO order_events (order_id, seq, kind, data) VALUES ($1, 3, 'order.failed', '{}'::jsonb)`,
        values: [`${prefix}-0`],
      });
      await until('the next event delivered', () => receiver.taken.some((e) => e.id === `${prefix}-0:3`));
      expect(receiver.taken.filter((e) => e.orderId === `${prefix}-0`).map((e) => e.id)).toEqual([`${prefix}-0:3`]);
    } finally {
      await relay.stop();
      await receiver.close();
    }
    expect(ids).toHaveLength(2);
  });

  it('a receiver down for a while gets every event afterwards, in order per order', async () => {
    const receiver = await startReceiver(SECRET, 'down');
    const ids = await pending(`down-${uid()}`, 4, 3);
    const relay = startEventRelay(
      db,
      { url: receiver.url, secret: SECRET },
      { idleMs: 20, maxAttempts: 100, baseDelayMs: 20, maxDelayMs: 200 },
    );
    try {
      await until('tries while it is down', () => receiver.seen >= 8);
      expect(receiver.taken).toEqual([]);
      receiver.mode = 'ok';
      await until(
        'every event delivered',
        () => new Set(ofThese(receiver.taken, ids).map((e) => e.id)).size === ids.length,
      );
    } finally {
      await relay.stop();
      await receiver.close();
    }
    expect(inOrderPerOrder(receiver.taken)).toBe(true);
    expect(receiver.refused).toEqual([]);
  });

  it("a round's query probes each candidate's order by index, never reading every pending event per candidate", async () => {
    // A backlog written at once and not yet analyzed: the planner thinks the table nearly empty. As a
    // NOT EXISTS, the first-to-go test became a join that read every pending event for each candidate
    // (a 4000-event backlog: about a second a round). The plan must read each candidate's own order's events by index.
    const prefix = `plan-${uid()}`;
    await db.query({
      text: `INSERT INTO orders (order_id, customer_id, status, currency, total_cents, items, payment_method, workflow_id)
             SELECT $1 || '-' || g, 'c', 'PENDING', 'USD', 100, '[]'::jsonb, 'tok_visa', 'order:' || $1 || '-' || g
               FROM generate_series(1, 300) g`,
      values: [prefix],
    });
    await db.query({
      text: `INSERT INTO order_events (order_id, seq, kind, data)
             SELECT $1 || '-' || g, s, 'order.accepted', '{}'::jsonb FROM generate_series(1, 300) g, generate_series(1, 4) s`,
      values: [prefix],
    });
    const c = await db.connect();
    try {
      await c.query('BEGIN');
      const { rows } = await c.query<{ 'QUERY PLAN': string }>({ text: `EXPLAIN ${DUE_EVENTS_SQL}`, values: [50] });
      const plan = rows.map((r) => r['QUERY PLAN']).join('\n');
      expect(plan, plan).not.toMatch(/Join/);
      const subplan = plan.slice(plan.indexOf('SubPlan'));
      expect(subplan, plan).toMatch(/Index Cond: \(order_id = e\.order_id\)/);
      expect(subplan, plan).not.toMatch(/Seq Scan|order_events_due_idx/);
    } finally {
      await c.query('ROLLBACK');
      c.release();
      await db.query({ text: `DELETE FROM order_events WHERE order_id LIKE $1 || '-%'`, values: [prefix] });
    }
  });

  it('two relays at once never deliver one event at once: each event once, in order per order', async () => {
    const receiver = await startReceiver(SECRET);
    const ids = await pending(`two-${uid()}`, 30, 3);
    const a = startEventRelay(db, { url: receiver.url, secret: SECRET }, { idleMs: 10, batch: 7 });
    const b = startEventRelay(db, { url: receiver.url, secret: SECRET }, { idleMs: 10, batch: 7 });
    try {
      await until('every event delivered', () => ofThese(receiver.taken, ids).length >= ids.length);
      await new Promise((r) => setTimeout(r, 200)); // time for a second copy, were there one
    } finally {
      await a.stop();
      await b.stop();
      await receiver.close();
    }
    expect(
      ofThese(receiver.taken, ids)
        .map((e) => e.id)
        .sort(),
    ).toEqual([...ids].sort()); // each exactly once
    expect(inOrderPerOrder(receiver.taken)).toBe(true);
    expect(a.stats.delivered).toBeGreaterThan(0);
    expect(b.stats.delivered).toBeGreaterThan(0);
  });

  it('a relay process killed in the middle of a delivery loses nothing: another delivers it', async () => {
    const receiver = await startReceiver(SECRET, 'stall');
    const ids = await pending(`kill-${uid()}`, 3, 2);
    const { child } = await startTsProcess(
      'test/support/relay-process.ts',
      {
        DATABASE_URL: own.url,
        ORDER_EVENTS_WEBHOOK_URL: receiver.url,
        ORDER_EVENTS_WEBHOOK_SECRET: SECRET,
      },
      /relay running/,
    );
    await until('the relay process is in the middle of deliveries', () => receiver.stalled >= 3);
    await stopProcess(child, 'SIGKILL');
    receiver.mode = 'ok';
    receiver.release(); // the killed process's requests: answered to nobody
    const relay = startEventRelay(db, { url: receiver.url, secret: SECRET }, { idleMs: 20 });
    try {
      await until('every event delivered', () => ids.every((id) => receiver.taken.some((e) => e.id === id)));
    } finally {
      await relay.stop();
      await receiver.close();
    }
    const left = await db.query({
      text: `SELECT 1 FROM order_events WHERE order_id || ':' || seq = ANY ($1::text[]) AND delivered_at IS NULL`,
      values: [ids],
    });
    expect(left.rowCount).toBe(0);
    expect(inOrderPerOrder(receiver.taken)).toBe(true);
  });
});

describe('the check of the events', () => {
  it('an order that ended past the grace with its terminal event not out is a violation; delivered or dead-lettered is not', async () => {
    const id = `chk-${uid()}`;
    await order(id, 'COMPLETED');
    await db.query({
      text: `UPDATE orders SET event_seq = 1, updated_at = now() - interval '1 hour' WHERE order_id = $1`,
      values: [id],
    });
    await db.query({
      text: `INSERT INTO order_events (order_id, seq, kind, data, attempts, last_error, next_attempt_at)
             VALUES ($1, 1, 'order.completed', '{}'::jsonb, 4, 'HTTP 503', now() + interval '1 hour')`,
      values: [id],
    });
    const mine = async (graceMs: number | undefined) =>
      (
        await checkInvariants(db, {
          deadlineMs: 86_400_000,
          ...(graceMs === undefined ? {} : { eventsGraceMs: graceMs }),
        })
      ).violations.filter((v) => v.orderIds.includes(id) && v.rule === RULES.terminalEventOut);
    expect((await mine(60_000)).map((v) => `${v.rule}: ${v.detail}`)).toEqual([
      expect.stringMatching(
        new RegExp(
          `^${RULES.terminalEventOut}: COMPLETED since .*: its order.completed event is not delivered after 4 tries \\(HTTP 503\\)$`,
        ),
      ),
    ]);
    expect(await mine(7_200_000)).toEqual([]); // within the grace
    expect(await mine(undefined)).toEqual([]); // no relay configured: not checked
    await db.query({ text: `UPDATE order_events SET dead_at = now() WHERE order_id = $1`, values: [id] });
    expect(await mine(60_000)).toEqual([]); // dead-lettered: a person was told
    await db.query({ text: `DELETE FROM order_events WHERE order_id = $1`, values: [id] });
    expect((await mine(60_000)).map((v) => v.detail)).toEqual([
      expect.stringMatching(/its order.completed event is missing$/),
    ]);
  });
});

describe('the events signature and endpoint', () => {
  const body = '{"id":"o-1:1"}';
  it('a receiver accepts a good signature and refuses a tampered body, another secret, an old one, a malformed one', () => {
    const now = 1_800_000_000;
    const header = signBody(SECRET, body, now);
    expect(signatureProblem(SECRET, header, body, { nowS: now + 10 })).toBeUndefined();
    expect(signatureProblem(SECRET, header, '{"id":"o-1:2"}', { nowS: now })).toBe('signature does not match');
    expect(signatureProblem('another-secret-0123456', header, body, { nowS: now })).toBe('signature does not match');
    expect(signatureProblem(SECRET, header, body, { nowS: now + 301 })).toMatch(/outside the 300 s tolerance/);
    expect(signatureProblem(SECRET, 't=abc,v1=zz', body, { nowS: now })).toBe('malformed signature header');
    expect(signatureProblem(SECRET, undefined, body)).toMatch(/no Order-Saga-Signature header/);
  });

  it('the endpoint is checked when the worker starts, naming the variable', () => {
    expect(readOrderEventsEndpoint({})).toBeUndefined();
    expect(() => readOrderEventsEndpoint({ ORDER_EVENTS_WEBHOOK_URL: 'ftp://x' })).toThrow(/ORDER_EVENTS_WEBHOOK_URL/);
    expect(() => readOrderEventsEndpoint({ ORDER_EVENTS_WEBHOOK_URL: 'http://127.0.0.1:9/h' })).toThrow(
      /ORDER_EVENTS_WEBHOOK_SECRET must be set/,
    );
    expect(
      readOrderEventsEndpoint({
        ORDER_EVENTS_WEBHOOK_URL: 'http://127.0.0.1:9/h',
        ORDER_EVENTS_WEBHOOK_SECRET: SECRET,
      }),
    ).toEqual({ url: 'http://127.0.0.1:9/h', secret: SECRET });
  });
});
