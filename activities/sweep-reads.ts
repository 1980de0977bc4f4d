/**
 * What the sweeper reads, beside the open rows' own columns: the sagas that run with no open row
 * (settled orders whose run is still open, runs that have not written their row); of one run its
 * pending activities, its last event, its task queue's pollers (and the worker stops recorded), its
 * last workflow tasks and its start config; the order's money and stock for a person's message; and
 * whether a failure means Temporal is out of reach. Read only: every write is activities/sweeper.ts's.
 */
import { isGrpcServiceError, type Client } from '@temporalio/client';
import { Context, heartbeat, log } from '@temporalio/activity';
import type { google } from '@temporalio/proto';
import { temporal } from '@temporalio/proto';
import type { Pool } from 'pg';
import { decodeHistoryPayload } from '../platform/payload-codec';
import { taskFailureMessage } from '../platform/task-failures';
import { WorkflowNames } from '../domain/names';
import { orderIdOf, TERMINAL_STATUSES, workflowIdFor, type OrderInput, type OrderStatus } from '../domain/order';
import { NO_ROW, type PendingActivityFacts, type RunFacts } from './sweep-classify';

const { EventType, PendingActivityState, TaskQueueKind, TaskQueueType, WorkerVersioningMode } = temporal.api.enums.v1;

/** An order as the sweeper reads its row (status NO_ROW: a running saga with no row, runningWithoutOpenRow). */
export interface OpenOrderRow {
  order_id: string;
  status: OrderStatus | typeof NO_ROW;
  customer_id: string;
  currency: string;
  payment_method: string;
  items: OrderInput['items'];
  age_ms: string;
}

/** The columns the sweeper reads of an order, with its age on Postgres's clock. */
export const ORDER_COLUMNS = `order_id, status, customer_id, currency, payment_method, items,
                      (extract(epoch FROM now() - updated_at) * 1000)::bigint AS age_ms`;

/**
 * "The order is open", as a literal list: so Postgres sees it implies the partial indexes on open
 * orders (migrations/0014_sweep_pages.sql), which a parameter would hide from it.
 */
export const OPEN_ORDER = `status NOT IN (${TERMINAL_STATUSES.map((s) => `'${s}'`).join(', ')})`;

/** How late a closed run may show in the visibility store: a run closed up to this before the last sweep is looked at again. */
export const VISIBILITY_LAG_MS = 60_000;

/** The fresh part of a sweep holds at most this many pages' worth of orders (a mass terminate, say). */
export const FRESH_PAGES = 10;

/** Where the sweep stands across sweeps (the one row of sweep_cursor). */
export interface SweepCursor {
  /** The backlog's next page starts after this order ID; '' starts a new pass. */
  backlogAfter: string;
  /** When the last finished sweep read the orders, on Postgres's clock (undefined: never). */
  seenAt?: string;
  /** The same moment on the Temporal server's clock, in ms (undefined: never). */
  seenServerMs?: number;
}

/** One sweep's page: what may have changed since the last sweep first, then the backlog's next page. */
export interface SweepPage {
  /** Open orders whose run closed since the last sweep, or whose age crossed the stall or attention bound. */
  fresh: OpenOrderRow[];
  /** The next orders of the pass over every open order, by order ID. */
  backlog: OpenOrderRow[];
  /** This page starts a pass (the sagas that run with no open row are listed once per pass). */
  passStarts: boolean;
  /** This page ends the pass: the next one starts from the first open order again. */
  passEnds: boolean;
  /** More orders were fresh than a sweep takes: the next sweep looks at the same window again. */
  freshCut: boolean;
  /** Now, on Postgres's clock, as the page was read (the next sweep's seenAt). */
  readAt: string;
}

export async function readSweepCursor(db: Pool): Promise<SweepCursor> {
  const { rows } = await db.query<{ backlog_after: string; seen_at: string | null; seen_server_ms: string | null }>(
    `SELECT backlog_after, seen_at::text, seen_server_ms FROM sweep_cursor`,
  );
  const r = rows[0];
  return {
    backlogAfter: r?.backlog_after ?? '',
    ...(r?.seen_at ? { seenAt: r.seen_at } : {}),
    ...(r?.seen_server_ms != null ? { seenServerMs: Number(r.seen_server_ms) } : {}),
  };
}

/**
 * The order IDs whose run closed after `sinceMs` (the server's clock), less `marginMs` (visibility's
 * lag, and the grace an order was still in then): a run terminated, timed out or failed leaves its
 * order without a live run, and is looked at in the next sweep whatever the backlog. Runs that
 * completed are not listed: a saga completes only after its order settles. The whole window, up to
 * `cap` IDs; `complete` is false when the list was cut there or visibility did not answer (the next
 * sweep then looks at the same window again; the backlog's pass comes to them in any case).
 */
export async function closedSince(
  client: Client,
  sinceMs: number,
  marginMs: number,
  cap: number,
): Promise<{ ids: string[]; complete: boolean }> {
  const since = new Date(sinceMs - marginMs).toISOString();
  // Any workflow type: an order's run is known by its ID (`order:<id>`), and its row decides.
  const query = `ExecutionStatus != 'Running' AND ExecutionStatus != 'Completed' AND CloseTime > '${since}'`;
  const ids = new Set<string>();
  try {
    for await (const wf of client.workflow.list({ query, pageSize: 1000 })) {
      const id = orderIdOf(wf.workflowId);
      if (id !== undefined) ids.add(id);
      if (ids.size >= cap) return { ids: [...ids], complete: false };
    }
  } catch (err) {
    log.warn('sweep: could not list the runs closed since the last sweep; looked for again next sweep', {
      error: err instanceof Error ? err.message : String(err),
    });
    return { ids: [...ids], complete: false };
  }
  return { ids: [...ids], complete: true };
}

/**
 * One sweep's page of open orders (past the grace): the fresh ones, at most FRESH_PAGES pages of them,
 * then the backlog's share: the rest of the page, and never less than half of it, so a storm of fresh
 * orders never stops the pass. `closed`: order IDs whose run closed since the last sweep (closedSince).
 */
export async function pageOfOrders(
  db: Pool,
  cursor: SweepCursor,
  closed: string[],
  o: { graceMs: number; stallAfterMs: number; attentionAgeMs: number; pageSize: number },
): Promise<SweepPage> {
  const grace = `updated_at < now() - ($1::bigint * interval '1 millisecond')`;
  // The bounds crossed since the last sweep: (seen - bound, now - bound].
  const crossed = (n: number) =>
    `(updated_at > $2::timestamptz - ($${n}::bigint * interval '1 millisecond') AND updated_at <= now() - ($${n}::bigint * interval '1 millisecond'))`;
  const fresh = await db.query<OpenOrderRow & { read_at: string }>({
    text: `SELECT ${ORDER_COLUMNS}, now()::text AS read_at FROM orders
            WHERE ${OPEN_ORDER} AND ${grace}
              AND (order_id = ANY ($3::text[]) OR ($2::timestamptz IS NOT NULL AND (${crossed(4)} OR ${crossed(5)})))
            ORDER BY updated_at LIMIT $6`,
    values: [o.graceMs, cursor.seenAt ?? null, closed, o.stallAfterMs, o.attentionAgeMs, FRESH_PAGES * o.pageSize + 1],
  });
  const freshCut = fresh.rows.length > FRESH_PAGES * o.pageSize;
  if (freshCut) fresh.rows.pop();
  const freshIds = fresh.rows.map((r) => r.order_id);
  const share = Math.max(o.pageSize - freshIds.length, Math.ceil(o.pageSize / 2));
  // One more than the share: whether the pass ends with this page.
  const backlog = await db.query<OpenOrderRow & { read_at: string }>({
    text: `SELECT ${ORDER_COLUMNS}, now()::text AS read_at FROM orders
            WHERE ${OPEN_ORDER} AND ${grace} AND order_id > $2 AND order_id <> ALL ($3::text[])
            ORDER BY order_id LIMIT $4`,
    values: [o.graceMs, cursor.backlogAfter, freshIds, share + 1],
  });
  const passEnds = backlog.rows.length <= share;
  if (!passEnds) backlog.rows.pop();
  const readAt =
    fresh.rows[0]?.read_at ??
    backlog.rows[0]?.read_at ??
    (await db.query<{ now: string }>('SELECT now()::text AS now')).rows[0]!.now;
  const strip = ({ read_at: _, ...row }: OpenOrderRow & { read_at: string }): OpenOrderRow => row;
  return {
    fresh: fresh.rows.map(strip),
    backlog: backlog.rows.map(strip),
    passStarts: cursor.backlogAfter === '',
    passEnds,
    freshCut,
    readAt,
  };
}

/**
 * The sagas that run with no open row: settled orders whose run is still open, and runs that have not
 * written their order's row yet. Both are listed from visibility (the runs of order sagas started
 * before the grace), once per pass, after the open rows.
 *
 * - Settled: the row is terminal, but the run never closed (a versioning override sent its last
 *   workflow task to a build nobody polls, say). The order's money and stock are settled; its run still
 *   reads RUNNING in the Web UI, so it is swept like an open order's: past the grace and the stall
 *   bound, the same cases heal it or tell a person.
 * - Rowless: the run's first step never committed (its first workflow task fails, or waits for a build
 *   nobody polls, say an override set before a worker took it). Nothing was reserved or charged for it,
 *   and no row tells the sweeper anything: its status reads NO_ROW and its age is the run's, and only
 *   the run is healed (sweep-classify.ts).
 */
export async function runningWithoutOpenRow(
  db: Pool,
  client: Client,
  o: { graceMs: number; orderIds?: string[] },
  now: () => number,
): Promise<{ settled: OpenOrderRow[]; rowless: OpenOrderRow[] }> {
  const startedBefore = new Date(now() - o.graceMs).toISOString();
  const started = new Map<string, number>();
  // Only these orders' runs when an operator sweeps a few (their IDs are plain identifiers: quoted as they are).
  const only = o.orderIds ? ` AND WorkflowId IN (${o.orderIds.map((id) => `'${workflowIdFor(id)}'`).join(', ')})` : '';
  const query = `WorkflowType = '${WorkflowNames.orderSaga}' AND ExecutionStatus = 'Running' AND StartTime < '${startedBefore}'${only}`;
  try {
    for await (const wf of client.workflow.list({ query })) {
      const id = orderIdOf(wf.workflowId);
      if (id !== undefined) started.set(id, wf.startTime.getTime());
      heartbeat({ listing: started.size }); // a long list of running sagas is progress too
    }
  } catch (err) {
    // Visibility out of order must not stop the sweep of the open orders: they come first.
    log.warn('sweep: could not list the running sagas; those with no open row are looked at next time', {
      error: err instanceof Error ? err.message : String(err),
    });
    return { settled: [], rowless: [] };
  }
  if (started.size === 0) return { settled: [], rowless: [] };
  const ids = [...started.keys()];
  const { rows: settled } = await db.query<OpenOrderRow>({
    text: `SELECT ${ORDER_COLUMNS}
             FROM orders WHERE order_id = ANY ($1::text[]) AND status = ANY ($2::text[])
               AND updated_at < now() - ($3::bigint * interval '1 millisecond')
             ORDER BY updated_at`,
    values: [ids, TERMINAL_STATUSES, o.graceMs],
  });
  const { rows: missing } = await db.query<{ id: string }>({
    text: `SELECT id FROM unnest($1::text[]) AS id WHERE NOT EXISTS (SELECT 1 FROM orders WHERE order_id = id)`,
    values: [ids],
  });
  const rowless = missing.map(({ id }): OpenOrderRow => ({
    order_id: id,
    status: NO_ROW,
    customer_id: '',
    currency: '',
    payment_method: '',
    items: [],
    age_ms: String(Math.max(0, now() - started.get(id)!)),
  }));
  return { settled, rowless };
}

/**
 * The Temporal server's clock, as the running sweep knows it: the server's timestamp of this attempt's
 * scheduling, moved on by the time this process has measured since then (monotonic). The sweep compares
 * it with the server's own timestamps (a run's last event, a heartbeat, a poll), never this host's wall
 * clock with the server's: a worker whose clock is off judges stalls as one whose clock is right. It runs
 * behind the server by the attempt's pickup latency, which makes a stall look younger, never older.
 */
export function serverClock(
  scheduledAtMs: number = Context.current().info.currentAttemptScheduledTimestampMs,
  monotonic: () => number = () => performance.now(),
): () => number {
  const t0 = monotonic();
  return () => scheduledAtMs + (monotonic() - t0);
}

export const millis = (t: google.protobuf.ITimestamp | null | undefined): number | undefined =>
  t?.seconds == null ? undefined : Number(t.seconds) * 1000 + Math.floor((t.nanos ?? 0) / 1e6);
const iso = (t: google.protobuf.ITimestamp | null | undefined): string | undefined => {
  const ms = millis(t);
  return ms === undefined ? undefined : new Date(ms).toISOString();
};

/** A pending activity as the classifier sees it: its pause (who, when, why) and its last failure, decoded. */
export async function activityFacts(
  client: Client,
  a: temporal.api.workflow.v1.IPendingActivityInfo,
  now: number,
): Promise<PendingActivityFacts> {
  const out: PendingActivityFacts = {
    type: a.activityType?.name ?? '',
    attempt: a.attempt ?? 1,
    lastFailure: await taskFailureMessage(client.options.loadedDataConverter, a.lastFailure),
  };
  const overdue = a.paused ? undefined : overdueOf(a, now);
  if (overdue) out.overdue = overdue;
  if (a.paused) {
    const by = a.pauseInfo?.manual ?? a.pauseInfo?.rule;
    const at = iso(a.pauseInfo?.pauseTime);
    out.paused = {
      ...(by?.identity ? { by: by.identity } : {}),
      ...(by?.reason ? { reason: by.reason } : {}),
      ...(at ? { at } : {}),
    };
  }
  return out;
}

/** A protobuf duration in ms (undefined or 0: not set). */
const durationMs = (d: google.protobuf.IDuration | null | undefined): number =>
  d?.seconds == null ? 0 : Number(d.seconds) * 1000 + Math.floor((d.nanos ?? 0) / 1e6);

/**
 * How far past one of its own timeouts the activity's current attempt is, by the server's own
 * description: schedule-to-start while it is scheduled (and not waiting for a retry's backoff),
 * start-to-close or heartbeat once a worker has it. Undefined when none is due yet, or none is set.
 */
export function overdueOf(
  a: temporal.api.workflow.v1.IPendingActivityInfo,
  now: number,
): PendingActivityFacts['overdue'] {
  const opts = a.activityOptions;
  const due: { at: number; timeout: 'schedule-to-start' | 'start-to-close' | 'heartbeat' }[] = [];
  if (a.state === PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED) {
    const scheduled = millis(a.scheduledTime);
    const backoffUntil = millis(a.nextAttemptScheduleTime) ?? 0;
    const s2s = durationMs(opts?.scheduleToStartTimeout);
    if (scheduled && s2s && backoffUntil <= now)
      due.push({ at: Math.max(scheduled, backoffUntil) + s2s, timeout: 'schedule-to-start' });
  } else if (a.state === PendingActivityState.PENDING_ACTIVITY_STATE_STARTED) {
    const started = millis(a.lastStartedTime);
    const s2c = durationMs(opts?.startToCloseTimeout);
    const hb = durationMs(opts?.heartbeatTimeout);
    if (started && s2c) due.push({ at: started + s2c, timeout: 'start-to-close' });
    if (started && hb) due.push({ at: Math.max(started, millis(a.lastHeartbeatTime) ?? 0) + hb, timeout: 'heartbeat' });
  }
  const first = due.sort((x, y) => x.at - y.at)[0];
  return first && now > first.at ? { ms: now - first.at, timeout: first.timeout } : undefined;
}

/** The time of a run's last event, in ms since the epoch: one event, read from the end. */
export async function lastEventMs(client: Client, workflowId: string, runId: string): Promise<number> {
  const res = await client.workflowService.getWorkflowExecutionHistoryReverse({
    namespace: client.options.namespace,
    execution: { workflowId, runId },
    maximumPageSize: 1,
  });
  return millis(res.history?.events?.[0]?.eventTime) ?? 0;
}

/**
 * A poller last seen longer ago than this is gone: a live worker polls again as soon as a long poll
 * (at most a minute on the server) ends, so its last poll is never much older than a minute, while the
 * server lists a stopped one for five minutes. 80 s leaves a live one 20 s of slack. A worker process
 * that stopped gracefully says so (worker_stops): its pollers are gone from then on, whatever the time.
 */
export const POLLER_GONE_MS = 80_000;

/** A poller as the server lists it: its identity, and its last poll (ms on the server's clock). */
export interface PollerSeen {
  identity: string;
  lastPollMs: number;
}

/**
 * Whether a poller is still there: it polled within POLLER_GONE_MS, and its process did not record a
 * graceful stop after that poll (`stoppedMs`: the identity's recorded stops, ms on Postgres's clock).
 */
export function pollerLive(p: PollerSeen, now: number, stoppedMs: ReadonlyMap<string, number>): boolean {
  if (now - p.lastPollMs >= POLLER_GONE_MS) return false;
  const stopped = stoppedMs.get(p.identity);
  return stopped === undefined || stopped < p.lastPollMs;
}

/** The versions polling a task queue's workflow tasks (`name:build`, or `''` for an unversioned worker). */
export async function pollersOf(client: Client, db: Pool, queue: string, now: number): Promise<string[]> {
  const res = await client.workflowService.describeTaskQueue({
    namespace: client.options.namespace,
    taskQueue: { name: queue, kind: TaskQueueKind.TASK_QUEUE_KIND_NORMAL },
    taskQueueType: TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
  });
  const pollers = res.pollers ?? [];
  // The stops recorded; unreadable, none is taken as recorded (the poll interval alone decides, as it would).
  const { rows } = await db
    .query<{ identity: string; ms: string }>({
      text: `SELECT identity, (extract(epoch FROM stopped_at) * 1000)::bigint AS ms FROM worker_stops WHERE identity = ANY ($1::text[])`,
      values: [pollers.map((p) => p.identity ?? '')],
    })
    .catch((err: Error) => {
      log.warn('sweep: could not read the recorded worker stops; pollers are judged by their last poll', {
        error: err.message,
      });
      return { rows: [] };
    });
  const stopped = new Map(rows.map((r) => [r.identity, Number(r.ms)]));
  const live = pollers.filter((p) =>
    pollerLive({ identity: p.identity ?? '', lastPollMs: millis(p.lastAccessTime) ?? 0 }, now, stopped),
  );
  return live.map((p) => {
    const d = p.deploymentOptions;
    return d?.workerVersioningMode === WorkerVersioningMode.WORKER_VERSIONING_MODE_VERSIONED && d.buildId
      ? `${d.deploymentName}:${d.buildId}`
      : '';
  });
}

/**
 * How a run's pending workflow task's last attempts ended (failed or timed out, the failure's
 * message), and its last WorkflowTaskCompleted event (where a reset takes it back to).
 */
export async function lastTasks(
  client: Client,
  workflowId: string,
  runId: string,
): Promise<Pick<RunFacts['workflowTask'] & object, 'lastAttempts' | 'failure' | 'resetTo'>> {
  const history = await client.workflow.getHandle(workflowId, runId).fetchHistory();
  let resetTo: number | undefined;
  let lastAttempts: 'failed' | 'timed-out' | undefined;
  let failure: temporal.api.failure.v1.IFailure | null | undefined;
  for (const e of history.events ?? []) {
    if (e.eventType === EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED) {
      resetTo = Number(e.eventId);
      lastAttempts = undefined;
    }
    if (e.eventType === EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT) lastAttempts = 'timed-out';
    if (e.eventType === EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED) {
      lastAttempts = 'failed';
      failure = e.workflowTaskFailedEventAttributes?.failure;
    }
  }
  return {
    ...(resetTo !== undefined ? { resetTo } : {}),
    ...(lastAttempts ? { lastAttempts } : {}),
    ...(lastAttempts === 'failed'
      ? { failure: await taskFailureMessage(client.options.loadedDataConverter, failure) }
      : {}),
  };
}

/** The saga config a run was started with (its second argument), from its first event. */
export async function startConfig(client: Client, workflowId: string, runId: string): Promise<unknown> {
  const res = await client.workflowService.getWorkflowExecutionHistory({
    namespace: client.options.namespace,
    execution: { workflowId, runId },
    maximumPageSize: 1,
  });
  const started = res.history?.events?.[0]?.workflowExecutionStartedEventAttributes;
  const config = await decodeHistoryPayload(client.options.loadedDataConverter, started?.input?.payloads?.[1]);
  return config === null ? undefined : config;
}

/** The order's money and stock as its row says, for a person's message. */
export async function holdings(db: Pool, orderId: string): Promise<string> {
  const { rows } = await db.query<{ status: string; total_cents: string; currency: string; held: string | null }>({
    text: `SELECT o.status, o.total_cents, o.currency,
                  (SELECT string_agg(r.sku || ' x' || r.qty, ', ' ORDER BY r.sku) FROM reservations r
                    WHERE r.order_id = o.order_id AND r.status = 'HELD') AS held
             FROM orders o WHERE o.order_id = $1`,
    values: [orderId],
  });
  const r = rows[0];
  if (!r) return 'no order row';
  const amount = `${(Number(r.total_cents) / 100).toFixed(2)} ${r.currency}`;
  return `order ${r.status}, total ${amount}, stock held: ${r.held ?? 'none'}`;
}

/** gRPC status codes that say the server was not reached (or did not answer), not that the order is unreadable. */
const TRANSPORT_CODES = new Set([1 /* CANCELLED */, 4 /* DEADLINE_EXCEEDED */, 14 /* UNAVAILABLE */]);

/**
 * Whether an order's failure is Temporal being out of reach rather than the order: a transport error
 * (at any depth of its causes) and the server does not answer a cheap call either.
 */
export async function unreachable(client: Client, err: unknown): Promise<boolean> {
  let transport = false;
  for (let e: unknown = err, depth = 0; e && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    if (isGrpcServiceError(e) && TRANSPORT_CODES.has(e.code)) transport = true;
    if (/ECONNREFUSED|No connection established|failed to connect/i.test((e as Error).message ?? '')) transport = true;
  }
  if (!transport) return false;
  try {
    await client.workflowService.getSystemInfo({});
    return false;
  } catch {
    return true;
  }
}
