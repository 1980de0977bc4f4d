/**
 * The relay of order events (migrations/0016_order_events.sql) to the configured webhook endpoint:
 * one per worker process. Each round takes, in one transaction, the events that are due and whose
 * order has no earlier event still undelivered, locked with SKIP LOCKED: so several relays never
 * deliver one event at once, an order's events go one at a time and in order, and a relay killed
 * mid-delivery rolls back and loses nothing (another relay, or this one restarted, sends it again: at
 * least once, each with its ID to deduplicate on). A failure (an error, a non-2xx, no answer within the
 * timeout) is tried again after a jittered exponential backoff; after the last attempt the event is
 * dead-lettered and a person is told (an ALERT log line; `client.ts events --dead`). An order's later
 * events go on past a dead-lettered one, so one sent again (`client.ts events --resend`) arrives after
 * them: a receiver orders an order's events by `seq`. A round's transaction stays open while it
 * delivers (at most `timeoutMs`): a server's idle_in_transaction_session_timeout must be longer.
 */
import type { Pool, PoolClient } from 'pg';
import { SIGNATURE_HEADER, signBody } from '../platform/webhook-signature';

export interface EventEndpoint {
  url: string;
  secret: string;
}

export interface RelayOptions {
  /** Events per round. */
  batch: number;
  /** Tries before an event is dead-lettered. */
  maxAttempts: number;
  /** The backoff after the first failure, doubled each time up to maxDelayMs, with ±50 % jitter. */
  baseDelayMs: number;
  maxDelayMs: number;
  /** One delivery's bound. */
  timeoutMs: number;
  /** How long an idle relay waits before it looks again. */
  idleMs: number;
}

/** 20 tries, 1 s, 2 s, … then 10 min apart: about 1.8 h of backoff (at most 2.7 h with the jitter). */
export const DEFAULT_RELAY: RelayOptions = {
  batch: 50,
  maxAttempts: 20,
  baseDelayMs: 1_000,
  maxDelayMs: 600_000,
  timeoutMs: 10_000,
  idleMs: 1_000,
};

/** The body a receiver gets: the event's ID (to deduplicate on), kind, order, number and data. */
export interface OrderEventBody {
  id: string;
  type: string;
  orderId: string;
  seq: number;
  createdAt: string;
  data: Record<string, unknown>;
}

export class RelayStats {
  delivered = 0;
  failures = 0;
  deadLettered = 0;
}

interface DueEvent {
  order_id: string;
  seq: number;
  kind: string;
  data: Record<string, unknown>;
  created_at: Date;
  attempts: number;
}

type Log = (level: 'info' | 'warn' | 'error', message: string, fields: Record<string, unknown>) => void;

/** The backoff before try `attempt + 1` (attempt ≥ 1), jittered ±50 %. */
export const backoffMs = (o: Pick<RelayOptions, 'baseDelayMs' | 'maxDelayMs'>, attempt: number): number =>
  Math.round(Math.min(o.maxDelayMs, o.baseDelayMs * 2 ** (attempt - 1)) * (0.5 + Math.random()));

/** The event as its receiver gets it. */
export const eventBody = (e: Pick<DueEvent, 'order_id' | 'seq' | 'kind' | 'data' | 'created_at'>): OrderEventBody => ({
  id: `${e.order_id}:${e.seq}`,
  type: e.kind,
  orderId: e.order_id,
  seq: e.seq,
  createdAt: e.created_at.toISOString(),
  data: e.data,
});

/** Sends one event; resolves to undefined when the endpoint took it (2xx), else to why not. */
async function deliver(endpoint: EventEndpoint, e: DueEvent, timeoutMs: number): Promise<string | undefined> {
  const body = JSON.stringify(eventBody(e));
  try {
    const res = await fetch(endpoint.url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        [SIGNATURE_HEADER]: signBody(endpoint.secret, body),
        'Order-Saga-Event-Id': `${e.order_id}:${e.seq}`,
      },
      body,
      signal: AbortSignal.timeout(timeoutMs),
      redirect: 'manual',
    });
    await res.arrayBuffer().catch(() => undefined);
    return res.ok ? undefined : `HTTP ${res.status}`;
  } catch (err) {
    const e2 = err as Error & { cause?: Error };
    return e2.name === 'TimeoutError' ? `no answer within ${timeoutMs} ms` : (e2.cause?.message ?? e2.message);
  }
}

/**
 * The due events, each its order's first event still to go, in the order they became due; locked, and
 * those another relay holds skipped. The first-to-go test is a subquery per candidate that reads the
 * order's own few events by the primary key, whatever the table's statistics say: as a NOT EXISTS, the
 * planner may turn it into a join that reads every pending event for each candidate (a backlog of
 * 4000 events written at once, not yet analyzed: about a second a round). `coalesce(…) IS NULL` says
 * "not delivered nor dead-lettered" in a form the partial index on pending events cannot serve, so
 * the subquery is not drawn to that index and its scan of every pending event.
 */
export const DUE_EVENTS_SQL = `SELECT e.order_id, e.seq, e.kind, e.data, e.created_at, e.attempts FROM order_events e
  WHERE e.delivered_at IS NULL AND e.dead_at IS NULL AND e.next_attempt_at <= now()
    AND e.seq = (SELECT p.seq FROM order_events p
                  WHERE p.order_id = e.order_id AND coalesce(p.delivered_at, p.dead_at) IS NULL
                  ORDER BY p.seq LIMIT 1)
  ORDER BY e.next_attempt_at LIMIT $1
  FOR UPDATE OF e SKIP LOCKED`;

/** One round: the due events taken, sent, and their outcome written; returns how many it took. */
export async function relayRound(
  db: Pool,
  endpoint: EventEndpoint,
  o: RelayOptions,
  stats: RelayStats,
  log: Log,
): Promise<number> {
  const c: PoolClient = await db.connect();
  let broken = false;
  const lost = (): void => void (broken = true);
  c.on('error', lost);
  try {
    await c.query('BEGIN');
    const { rows } = await c.query<DueEvent>({
      text: DUE_EVENTS_SQL,
      values: [o.batch],
    });
    const outcomes = await Promise.all(rows.map((e) => deliver(endpoint, e, o.timeoutMs)));
    for (const [i, e] of rows.entries()) {
      const problem = outcomes[i];
      const attempts = e.attempts + 1;
      if (problem === undefined) {
        stats.delivered++;
        await c.query({
          text: `UPDATE order_events SET attempts = $3, delivered_at = now(), last_error = NULL WHERE order_id = $1 AND seq = $2`,
          values: [e.order_id, e.seq, attempts],
        });
      } else if (attempts >= o.maxAttempts) {
        stats.failures++;
        stats.deadLettered++;
        await c.query({
          text: `UPDATE order_events SET attempts = $3, dead_at = now(), last_error = $4 WHERE order_id = $1 AND seq = $2`,
          values: [e.order_id, e.seq, attempts, problem],
        });
        log(
          'error',
          'ALERT order event dead-lettered: it was not delivered; send it again with client.ts events --resend',
          {
            eventId: `${e.order_id}:${e.seq}`,
            kind: e.kind,
            attempts,
            lastError: problem,
          },
        );
      } else {
        stats.failures++;
        await c.query({
          text: `UPDATE order_events SET attempts = $3, last_error = $4,
                        next_attempt_at = now() + $5::bigint * interval '1 millisecond' WHERE order_id = $1 AND seq = $2`,
          values: [e.order_id, e.seq, attempts, problem, backoffMs(o, attempts)],
        });
      }
    }
    await c.query('COMMIT');
    return rows.length;
  } catch (err) {
    broken = true; // the transaction may be open: never hand this session back
    throw err;
  } finally {
    c.off('error', lost);
    c.release(broken ? new Error('relay session ended') : undefined);
  }
}

/** A relay that runs until stopped: rounds back to back while there is work, idleMs apart when not. */
export function startEventRelay(
  db: Pool,
  endpoint: EventEndpoint,
  opts: Partial<RelayOptions> = {},
  log: Log = () => undefined,
): { stats: RelayStats; stop(): Promise<void> } {
  const o = { ...DEFAULT_RELAY, ...opts };
  const stats = new RelayStats();
  let stopping = false;
  let wake: (() => void) | undefined;
  const nap = (ms: number) =>
    new Promise<void>((r) => {
      const t = setTimeout(r, ms);
      wake = () => (clearTimeout(t), r());
    });
  const loop = (async () => {
    while (!stopping) {
      let took = 0;
      try {
        took = await relayRound(db, endpoint, o, stats, log);
      } catch (err) {
        log('warn', 'order event relay: a round failed; trying again', { error: (err as Error).message });
      }
      if (took < o.batch && !stopping) await nap(took === 0 ? o.idleMs : 0);
    }
  })();
  return {
    stats,
    async stop() {
      stopping = true;
      wake?.();
      await loop;
    },
  };
}
