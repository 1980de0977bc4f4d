/**
 * The sweeper: no order is ever stranded. Run by the `sweep` Schedule (workflows/sweeper.ts), it
 * looks at every open order (not terminal), every settled order whose run is still open, and every
 * saga that runs with no order row yet, with the latest run of its workflow `order:<id>`; it gathers
 * what it knows of each (the row, its own record, the run's description and pending tasks, the time
 * since the run's last event, the task queue's pollers), lets activities/sweep-classify.ts pick one
 * case, and runs that case's handler:
 * - restart: the run is closed or missing; the saga starts again with the order's own input, read
 *   from the row (the row is the lock: the new run catches up from where it stands);
 * - replace: the run cannot go on (its workflow task fails on the SDK's Update-ordering bug, or the
 *   version its tasks go to has no workers); it is terminated and the saga starts again from the row;
 * - reset: its workflow task fails, or times out, again and again; once, to its last completed task;
 * - remove-override: a versioning override sends its tasks to a version nobody polls;
 * - alert: NEEDS_ATTENTION for longer than the attention age;
 * - person: everything it must not or cannot heal (an activity an operator paused, one retrying past
 *   the bound, a bound reached, a stall it cannot explain, an order it cannot read), with the reason.
 * Each order is swept on its own: one it cannot read is handed to a person and the sweep goes on; a
 * sweep that cannot reach Temporal at all fails as a whole and is retried. It never compensates or
 * charges: every effect is the saga's. Each action is a row in `sweeper_actions`, an ALERT or warn
 * log line and a counter (`SweeperStats`). What it reads of Temporal beyond a run's description is in
 * activities/sweep-reads.ts.
 */
import { randomUUID } from 'node:crypto';
import { Context, heartbeat, log } from '@temporalio/activity';
import {
  WorkflowExecutionAlreadyStartedError,
  WorkflowNotFoundError,
  type Client,
  type WorkflowExecutionDescription,
} from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import type { Pool } from 'pg';
import { WorkflowNames } from '../domain/names';
import { isTerminal, workflowIdFor, type OrderInput, type OrderStatus } from '../domain/order';
import {
  classifyOrder,
  STALL_CAUSES,
  type OrderFacts,
  type RunFacts,
  type SweepBounds,
  type SweepCase,
  type SweepCause,
} from './sweep-classify';
import {
  activityFacts,
  closedSince,
  FRESH_PAGES,
  OPEN_ORDER,
  ORDER_COLUMNS,
  pageOfOrders,
  readSweepCursor,
  serverClock,
  holdings,
  lastEventMs,
  lastTasks,
  millis,
  pollersOf,
  runningWithoutOpenRow,
  startConfig,
  unreachable,
  type OpenOrderRow,
  type SweepPage,
  VISIBILITY_LAG_MS,
} from './sweep-reads';

/** How the sweeper reaches Temporal: a client (made on first use) and the saga's task queue. */
export interface SweeperTemporal {
  client: () => Promise<Client>;
  taskQueue: string;
}

/** The sweeper's counters, read by the worker's Prometheus endpoint. */
export class SweeperStats {
  healed = 0;
  resets = 0;
  overridesRemoved = 0;
  handedToPerson = 0;
  alerts = 0;
  /** Orders it could not read (an undecodable payload, a history or description it could not fetch). */
  unreadable = 0;
  /** Age of the oldest open order with no live run at the last sweep, in ms (0: none). */
  oldestStrandedMs = 0;
  /** Orders whose run had stopped moving, at the last sweep (open ones, and runs with no open row). */
  stalled = 0;
}

export interface SweepOptions extends SweepBounds {
  /** An order younger than this (since its row last changed) is left alone: its run may be starting. */
  graceMs: number;
  /**
   * Only these orders (an operator healing one order now), whatever the page; absent: a page of the
   * open orders, as the cursor across sweeps says (sweep_cursor).
   */
  orderIds?: string[];
  /**
   * At most this many fresh orders per sweep (a run closed, or a bound crossed, since the last sweep),
   * and then the backlog's next page: the rest of the page, never less than half of it.
   */
  pageSize: number;
}

export const DEFAULT_SWEEP: SweepOptions = {
  graceMs: 30_000,
  maxRestarts: 3,
  failedTaskAttempts: 3,
  attentionAgeMs: 3_600_000,
  stallAfterMs: 300_000,
  pageSize: 1_000,
};

export interface SweepAction {
  orderId: string;
  action: 'restart' | 'reset' | 'remove-override' | 'person' | 'alert';
  cause: SweepCause;
  reason: string;
  runId?: string;
  newRunId?: string;
}

export interface SweepReport {
  open: number;
  /** Open orders with no live run. */
  stranded: number;
  /** Orders whose run is running but not moving (open ones, and runs with no open row). */
  stalled: number;
  /** Orders it could not read, each handed to a person. */
  unreadable: number;
  /** Orders another sweep was at: left to it (two sweeps never act on one order at once). */
  busy: number;
  /** What this sweep's page held (absent when an operator named the orders). */
  page?: { fresh: number; backlog: number; passStarts: boolean; passEnds: boolean };
  actions: SweepAction[];
}

/**
 * The advisory-lock class of an order a sweep is at (the second key is the order ID's hash): one
 * sweep at a time per order, whichever started it (the Schedule, `client.ts sweep`, a retried
 * attempt whose first still runs). A session that ends frees it.
 */
const SWEEP_LOCK_CLASS = 0x53574550;

const { PendingWorkflowTaskState } = temporal.api.enums.v1;

/** What the handlers of one sweep share. */
interface Sweep {
  client: Client;
  o: SweepOptions;
  report: SweepReport;
  oldestStranded: number;
  /** The versions polling each task queue, asked once per sweep. */
  pollers: Map<string, Promise<string[]>>;
  /** The Temporal server's clock (serverClock): every time compared with the server's timestamps. */
  now: () => number;
}

/**
 * What stopped the run this time: its paused activity's pause (a second pause is another), else the
 * length of its history (a run that moved on and stopped again has a longer one).
 */
export function episodeOf(
  raw: temporal.api.workflowservice.v1.IDescribeWorkflowExecutionResponse | undefined,
): string | undefined {
  const paused = raw?.pendingActivities?.find((a) => a.paused);
  if (paused) return `activity ${paused.activityId} paused at ${millis(paused.pauseInfo?.pauseTime) ?? '?'}`;
  const events = raw?.workflowExecutionInfo?.historyLength;
  return events == null ? undefined : `${Number(events)} events`;
}

/** One order being swept; `step` names what it was doing, for the reason when that fails. */
interface OrderAtHand {
  row: OpenOrderRow;
  workflowId: string;
  desc?: WorkflowExecutionDescription;
  step: string;
}

/**
 * A worker process that stopped gracefully records it, once its workers no longer poll: the sweeper
 * then counts its pollers as gone at once (sweep-reads.ts, pollerLive), so runs pinned to a build a
 * deploy stopped are healed without waiting out the poll interval. Prunes what the server no longer lists.
 */
export async function recordWorkerStop(db: Pool, identities: string[]): Promise<void> {
  await db.query(`DELETE FROM worker_stops WHERE stopped_at < clock_timestamp() - interval '10 minutes'`);
  await db.query({
    text: `INSERT INTO worker_stops (identity) SELECT DISTINCT unnest($1::text[])
           ON CONFLICT (identity) DO UPDATE SET stopped_at = clock_timestamp()`,
    values: [identities],
  });
}

export function sweeperActivities({
  db,
  temporal: tc,
  stats = new SweeperStats(),
}: {
  db: Pool;
  temporal?: SweeperTemporal;
  stats?: SweeperStats;
}) {
  const record = async (a: SweepAction, episode?: string): Promise<SweepAction> => {
    await db.query({
      text: `INSERT INTO sweeper_actions (order_id, action, cause, reason, run_id, new_run_id, episode)
             VALUES ($1, $2, $3, $4, $5, $6, $7)`,
      values: [a.orderId, a.action, a.cause, a.reason, a.runId ?? null, a.newRunId ?? null, episode ?? null],
    });
    // A person's attention, and every run found not moving even when healed, is an alert line.
    const alert = a.action === 'person' || a.action === 'alert' || STALL_CAUSES.includes(a.cause);
    (alert ? log.error : log.warn)(`${alert ? 'ALERT ' : ''}sweeper ${a.action}`, { ...a });
    if (a.action === 'restart') stats.healed++;
    if (a.action === 'reset') stats.resets++;
    if (a.action === 'remove-override') stats.overridesRemoved++;
    if (a.action === 'person') stats.handedToPerson++;
    if (a.action === 'alert') stats.alerts++;
    return a;
  };

  /** What the sweeper did to this order before: restarts, resets, and an alert within the attention age. */
  const recordOf = async (orderId: string, attentionAgeMs: number): Promise<OrderFacts['record']> => {
    const { rows } = await db.query<{ restarts: string; resets: string; alerts: string }>({
      text: `SELECT count(*) FILTER (WHERE action = 'restart') AS restarts,
                    count(*) FILTER (WHERE action = 'reset') AS resets,
                    count(*) FILTER (WHERE action = 'alert' AND at > now() - ($2::bigint * interval '1 millisecond')) AS alerts
               FROM sweeper_actions WHERE order_id = $1`,
      values: [orderId, attentionAgeMs],
    });
    const r = rows[0]!;
    return { restarts: Number(r.restarts), resets: Number(r.resets), alertedWithinAttentionAge: Number(r.alerts) > 0 };
  };

  /**
   * A person is told once per episode: again after another action on the order (a restart, a reset),
   * for another cause or run, or when the same run stopped again (`episode`: episodeOf).
   */
  const handToPerson = async (
    orderId: string,
    cause: SweepCause,
    reason: string,
    runId?: string,
    episode?: string,
  ): Promise<SweepAction | undefined> => {
    const { rows } = await db.query<{
      action: string;
      cause: string | null;
      run_id: string | null;
      episode: string | null;
    }>({
      text: `SELECT action, cause, run_id, episode FROM sweeper_actions WHERE order_id = $1 AND action <> 'alert'
              ORDER BY at DESC, id DESC LIMIT 1`,
      values: [orderId],
    });
    const last = rows[0];
    if (
      last?.action === 'person' &&
      (last.cause ?? cause) === cause &&
      (last.run_id ?? '') === (runId ?? '') &&
      (last.episode ?? '') === (episode ?? '')
    )
      return undefined; // already told, nothing new since
    return record(
      {
        orderId,
        action: 'person',
        cause,
        reason: `${reason}; ${await holdings(db, orderId)}`,
        ...(runId ? { runId } : {}),
      },
      episode,
    );
  };

  /** Starts the saga again from the row, in place of the run `desc` (closed, or terminated by this sweep). */
  const startFromRow = async (
    s: Sweep,
    at: OrderAtHand,
    c: { cause: SweepCause; why: string },
  ): Promise<SweepAction | undefined> => {
    const { row, workflowId, desc } = at;
    const orderId = row.order_id;
    if (!tc) throw new Error('sweepOrders: this worker has no Temporal client for the sweeper');
    const input: OrderInput = {
      orderId,
      customerId: row.customer_id,
      currency: row.currency as OrderInput['currency'],
      paymentMethod: row.payment_method,
      items: row.items.map((i) => ({ sku: i.sku, qty: i.qty, unitPriceCents: i.unitPriceCents })),
    };
    // The run's saga config (its second argument) is the one thing it knew beyond the row.
    at.step = "decode its last run's start payload (the saga config)";
    const config = desc ? await startConfig(s.client, workflowId, desc.runId) : undefined;
    // Not orders/saga-start.ts's sagaStartOptions: activities/ lies below workflows/, and a restart
    // differs from a placement on purpose: the closed run's ID again (ALLOW_DUPLICATE), its config,
    // a summary and details that say why; the new run sets its search attributes itself. A cancel
    // recorded on the row stands, and a resolve recorded for the escalation the row is in and not yet
    // applied is applied by the new run (createOrder returns both), checked against the ledger.
    at.step = 'start its saga again';
    try {
      const handle = await s.client.workflow.start(WorkflowNames.orderSaga, {
        taskQueue: tc.taskQueue,
        workflowId,
        args: config === undefined ? [input] : [input, config],
        workflowIdReusePolicy: 'ALLOW_DUPLICATE',
        staticSummary: `order ${orderId}, restarted by the sweeper: ${c.why}`,
        staticDetails: `The sweeper started this run because the order was ${row.status} while ${c.why}. It catches up from the order row.`,
      });
      return record({
        orderId,
        action: 'restart',
        cause: c.cause,
        reason: `${row.status} while ${c.why}`,
        ...(desc ? { runId: desc.runId } : {}),
        newRunId: handle.firstExecutionRunId,
      });
    } catch (err) {
      if (err instanceof WorkflowExecutionAlreadyStartedError) return undefined; // someone started it meanwhile
      throw err;
    }
  };

  /** Is the row still open? The run may have settled it after the open rows were read. */
  const stillOpen = async (orderId: string): Promise<boolean> => {
    const now = await db.query<{ status: OrderStatus }>({
      text: 'SELECT status FROM orders WHERE order_id = $1',
      values: [orderId],
    });
    return !!now.rowCount && !isTerminal(now.rows[0]!.status);
  };

  /** One handler per case of sweep-classify.ts. */
  const handlers: {
    [K in SweepCase['case']]: (
      s: Sweep,
      at: OrderAtHand,
      c: Extract<SweepCase, { case: K }>,
    ) => Promise<SweepAction | undefined>;
  } = {
    leave: () => Promise.resolve(undefined),

    async restart(s, at, c) {
      // Its last local activity commits just before the run closes: the row decides, read again now.
      if (!(await stillOpen(at.row.order_id))) return undefined;
      s.report.stranded++;
      s.oldestStranded = Math.max(s.oldestStranded, Number(at.row.age_ms));
      return startFromRow(s, at, c);
    },

    async replace(s, at, c) {
      if (!(await stillOpen(at.row.order_id))) return undefined;
      const runId = at.desc!.runId;
      at.step = 'terminate its run';
      try {
        await s.client.workflow
          .getHandle(at.workflowId, runId)
          .terminate(`sweeper: ${c.why}; restarting from the order row`);
      } catch (err) {
        if (err instanceof WorkflowNotFoundError) return undefined; // it closed meanwhile: the next sweep sees it
        throw err;
      }
      s.report.stranded++;
      s.oldestStranded = Math.max(s.oldestStranded, Number(at.row.age_ms));
      return startFromRow(s, at, { cause: c.cause, why: `${c.why}, so the sweeper terminated its run ${runId}` });
    },

    async reset(s, at, c) {
      const runId = at.desc!.runId;
      at.step = 'reset its run';
      const reset = (await s.client.workflowService.resetWorkflowExecution({
        namespace: s.client.options.namespace,
        workflowExecution: { workflowId: at.workflowId, runId },
        workflowTaskFinishEventId: c.toEventId as never, // an int64: protobufjs takes a number
        requestId: randomUUID(),
        reason: `sweeper: ${c.why}; reset to event ${c.toEventId}`,
      })) as temporal.api.workflowservice.v1.IResetWorkflowExecutionResponse;
      return record({
        orderId: at.row.order_id,
        action: 'reset',
        cause: c.cause,
        reason: `${c.why}; reset to event ${c.toEventId}`,
        runId,
        ...(reset.runId ? { newRunId: reset.runId } : {}),
      });
    },

    async 'remove-override'(s, at, c) {
      const runId = at.desc!.runId;
      at.step = 'remove its versioning override';
      await s.client.workflowService.updateWorkflowExecutionOptions({
        namespace: s.client.options.namespace,
        workflowExecution: { workflowId: at.workflowId, runId },
        workflowExecutionOptions: {},
        updateMask: { paths: ['versioning_override'] },
      });
      return record({
        orderId: at.row.order_id,
        action: 'remove-override',
        cause: c.cause,
        reason: `${c.why}; override removed`,
        runId,
      });
    },

    async alert(_s, at, c) {
      return record({
        orderId: at.row.order_id,
        action: 'alert',
        cause: c.cause,
        reason: c.why,
        ...(at.desc ? { runId: at.desc.runId } : {}),
      });
    },

    async person(_s, at, c) {
      return handToPerson(at.row.order_id, c.cause, c.why, at.desc?.runId, episodeOf(at.desc?.raw));
    },
  };

  /** Everything the classifier is given about one order; Temporal is asked only what the case needs. */
  const factsOf = async (s: Sweep, at: OrderAtHand): Promise<OrderFacts> => {
    const { row, workflowId, desc } = at;
    const facts: OrderFacts = {
      status: row.status,
      ageMs: Number(row.age_ms),
      record: await recordOf(row.order_id, s.o.attentionAgeMs),
    };
    if (!desc) return facts;
    const raw = desc.raw;
    const info = raw.workflowExecutionInfo;
    const run: RunFacts = { runId: desc.runId, status: desc.status.name, activities: [] };
    facts.run = run;
    if (run.status !== 'RUNNING') return facts;
    const task = raw.pendingWorkflowTask;
    if (task) {
      run.workflowTask = {
        state: task.state === PendingWorkflowTaskState.PENDING_WORKFLOW_TASK_STATE_STARTED ? 'started' : 'scheduled',
        attempt: task.attempt ?? 1,
      };
      if (run.workflowTask.attempt >= s.o.failedTaskAttempts) {
        at.step = 'read its history';
        Object.assign(run.workflowTask, await lastTasks(s.client, workflowId, desc.runId));
      }
    }
    at.step = "decode its pending activities' failures";
    for (const a of raw.pendingActivities ?? []) run.activities.push(await activityFacts(s.client, a, s.now()));
    const versioning = info?.versioningInfo;
    const own = versioning?.deploymentVersion;
    if (own?.buildId) run.build = `${own.deploymentName}:${own.buildId}`;
    const override = versioning?.versioningOverride;
    const pinned = override?.pinned?.version;
    if (pinned?.buildId) run.override = { pinnedTo: `${pinned.deploymentName}:${pinned.buildId}` };
    else if (override?.pinnedVersion) run.override = { pinnedTo: override.pinnedVersion };
    else if (override) run.override = { autoUpgrade: true };
    // With nothing pending the run waits on a timer or a message: no clock changes its case.
    if (facts.ageMs > s.o.stallAfterMs && (run.workflowTask || run.activities.length > 0)) {
      at.step = 'read its last event';
      const last = await lastEventMs(s.client, workflowId, desc.runId);
      const beats = (raw.pendingActivities ?? []).map((a) => millis(a.lastHeartbeatTime) ?? 0);
      run.sinceProgressMs = s.now() - Math.max(last, ...beats);
      if (run.sinceProgressMs > s.o.stallAfterMs && run.workflowTask?.state === 'scheduled') {
        at.step = 'describe its task queue';
        const queue = info?.taskQueue ?? tc!.taskQueue;
        let polled = s.pollers.get(queue);
        if (!polled) {
          s.pollers.set(queue, (polled = pollersOf(s.client, db, queue, s.now())));
          polled.catch(() => s.pollers.delete(queue)); // asked again for the next order
        }
        facts.pollers = await polled;
      }
    }
    return facts;
  };

  /** Looks at one order and runs its case's handler; an order it cannot read is a person's. */
  const sweepOne = async (s: Sweep, row: OpenOrderRow): Promise<SweepAction | undefined> => {
    const at: OrderAtHand = { row, workflowId: workflowIdFor(row.order_id), step: 'describe its run' };
    try {
      try {
        at.desc = await s.client.workflow.getHandle(at.workflowId).describe();
      } catch (err) {
        if (!(err instanceof WorkflowNotFoundError)) throw err;
      }
      const c = classifyOrder(await factsOf(s, at), s.o);
      if ('cause' in c && STALL_CAUSES.includes(c.cause)) s.report.stalled++;
      return await (handlers[c.case] as (s: Sweep, at: OrderAtHand, c: SweepCase) => Promise<SweepAction | undefined>)(
        s,
        at,
        c,
      );
    } catch (err) {
      // Temporal out of reach: the whole sweep fails and is retried; nobody is told of that.
      if (await unreachable(s.client, err)) throw err;
      s.report.unreadable++;
      stats.unreadable++;
      const message = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
      return handToPerson(row.order_id, 'unreadable', `the sweeper could not ${at.step}: ${message}`, at.desc?.runId);
    }
  };

  return {
    /**
     * One sweep: the orders named, or one page of the open orders (what may have changed since the
     * last sweep first, then the backlog's next page, and once per pass the sagas that run with no
     * open row); returns what it found and did. Cancelled, it stops between two orders and keeps
     * its place in the backlog.
     */
    async sweepOrders(opts: Partial<SweepOptions> = {}): Promise<SweepReport> {
      if (!tc) throw new Error('sweepOrders: this worker has no Temporal client for the sweeper');
      const o = { ...DEFAULT_SWEEP, ...opts };
      if (!Number.isInteger(o.pageSize) || o.pageSize < 1)
        throw new Error(`sweepOrders: pageSize must be a whole number above 0, not ${o.pageSize}`);
      const client = await tc.client();
      const now = serverClock();
      const startedAtServer = now();
      let rows: OpenOrderRow[];
      let backlog: Set<string> | undefined;
      let page: SweepPage | undefined;
      let seenAll = false;
      const cursor = o.orderIds ? undefined : await readSweepCursor(db);
      if (!cursor) {
        rows = (
          await db.query<OpenOrderRow>({
            text: `SELECT ${ORDER_COLUMNS} FROM orders WHERE ${OPEN_ORDER} AND order_id = ANY ($2::text[])
                      AND updated_at < now() - ($1::bigint * interval '1 millisecond') ORDER BY updated_at`,
            values: [o.graceMs, o.orderIds],
          })
        ).rows;
      } else {
        // The runs closed since the last sweep, and while their order was still in its grace then.
        const closed =
          cursor.seenServerMs === undefined
            ? { ids: [], complete: true }
            : await closedSince(client, cursor.seenServerMs, VISIBILITY_LAG_MS + o.graceMs, FRESH_PAGES * o.pageSize);
        page = await pageOfOrders(db, cursor, closed.ids, o);
        // What was fresh and not looked at (a list cut short, or not answered) stays fresh next time.
        seenAll = closed.complete && !page.freshCut;
        rows = [...page.fresh, ...page.backlog];
        backlog = new Set(page.backlog.map((r) => r.order_id));
      }
      const open = rows.length;
      const s: Sweep = {
        client,
        o,
        report: {
          open,
          stranded: 0,
          stalled: 0,
          unreadable: 0,
          busy: 0,
          ...(page
            ? {
                page: {
                  fresh: page.fresh.length,
                  backlog: page.backlog.length,
                  passStarts: page.passStarts,
                  passEnds: page.passEnds,
                },
              }
            : {}),
          actions: [],
        },
        oldestStranded: 0,
        pollers: new Map(),
        now,
      };
      // The backlog's place: the last of its orders this sweep has been through.
      let backlogDone: string | undefined;
      // The sweep's place, written whichever way it ends: finished (the page done), or stopped (cancelled,
      // or failed: the backlog goes on from the order it stopped at). An order it cannot read is a
      // person's and the sweep goes on (sweepOne), so a failure is the whole sweep's (Temporal or
      // Postgres out of reach), and its retry starts where it stopped. One row, made again if missing.
      const keepPlace = async (finished: boolean) => {
        if (!cursor || !page) return;
        const after = finished ? (page.passEnds ? '' : (page.backlog.at(-1)?.order_id ?? '')) : backlogDone;
        const seen = finished && seenAll;
        await db.query({
          text: `INSERT INTO sweep_cursor AS c (id, backlog_after, seen_at, seen_server_ms)
                 VALUES (true, coalesce($1, ''), CASE WHEN $2 THEN $3::timestamptz END, CASE WHEN $2 THEN $4::bigint END)
                 ON CONFLICT (id) DO UPDATE SET backlog_after = coalesce($1, c.backlog_after),
                        seen_at = CASE WHEN $2 THEN $3::timestamptz ELSE c.seen_at END,
                        seen_server_ms = CASE WHEN $2 THEN $4::bigint ELSE c.seen_server_ms END, updated_at = now()`,
          values: [after ?? null, seen, page.readAt, Math.floor(startedAtServer)],
        });
      };
      const cancelled = Context.current().cancellationSignal;
      const whenCancelled = new Promise<never>((_, reject) => {
        if (cancelled.aborted) reject(cancelled.reason as Error);
        cancelled.addEventListener('abort', () => reject(cancelled.reason as Error), { once: true });
      });
      whenCancelled.catch(() => undefined);
      // The orders' advisory locks live on this session: if it breaks, or the sweep stops in the middle
      // of an order, the session is ended rather than handed back to the pool, which frees every lock.
      const locks = await db.connect();
      let broken = false;
      const lost = (): void => void (broken = true);
      locks.on('error', lost);
      let done = 0;
      const lookAt = async (batch: OpenOrderRow[], of: number) => {
        for (const row of batch) {
          heartbeat({ done: done++, of });
          if (cancelled.aborted) throw cancelled.reason;
          const key = [SWEEP_LOCK_CLASS, row.order_id];
          const took = await locks.query<{ ok: boolean }>({
            text: 'SELECT pg_try_advisory_lock($1, hashtext($2)) AS ok',
            values: key,
          });
          if (!took.rows[0]!.ok) {
            s.report.busy++;
          } else {
            broken = true; // until the lock is let go
            // A cancel (or the server timing the attempt out) stops the sweep even inside an order.
            const action = await Promise.race([sweepOne(s, row), whenCancelled]);
            if (action) s.report.actions.push(action);
            await locks.query({ text: 'SELECT pg_advisory_unlock($1, hashtext($2))', values: key });
            broken = false;
          }
          if (backlog?.has(row.order_id)) backlogDone = row.order_id;
        }
      };
      try {
        await locks.query(
          'SET tcp_keepalives_idle = 10; SET tcp_keepalives_interval = 5; SET tcp_keepalives_count = 3',
        );
        await lookAt(rows, rows.length);
        // Then, once per pass, the sagas that run with no open row (settled orders whose run is still
        // open, runs that have not written their row): listed after the open orders were looked at, so
        // a long list never holds back a fresh stranding.
        if (!page || page.passStarts) {
          const { settled, rowless } = await runningWithoutOpenRow(db, client, o, now);
          await lookAt([...settled, ...rowless], rows.length + settled.length + rowless.length);
        }
        await keepPlace(true);
      } catch (err) {
        await keepPlace(false).catch((e: Error) => void log.warn('sweep: its place not kept', { error: e.message }));
        throw err;
      } finally {
        locks.off('error', lost);
        locks.release(broken ? new Error('sweep lock session ended') : undefined);
      }
      stats.oldestStrandedMs = s.oldestStranded;
      stats.stalled = s.report.stalled;
      const { report } = s;
      // Every minute in npm start: quiet unless it found something.
      (report.actions.length || report.stranded || report.stalled || report.unreadable || report.busy
        ? log.info
        : log.debug)('sweep done', {
        open: report.open,
        stranded: report.stranded,
        stalled: report.stalled,
        unreadable: report.unreadable,
        busy: report.busy,
        actions: report.actions.length,
        ...report.page,
      });
      return report;
    },
  };
}
