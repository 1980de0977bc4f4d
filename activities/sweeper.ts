/**
 * The sweeper: no order is ever stranded. Run by the `sweep` Schedule (workflows/sweeper.ts), it
 * looks at every open order (not terminal) and the latest run of its workflow `order:<id>`:
 * - the run is closed (terminated, failed, timed out, canceled) or missing: it starts the saga again
 *   with the order's own input, read from the row (the order row is the lock, so the new run catches
 *   up from where the row stands); at most `maxRestarts` times per order, then a person;
 * - the run is open but its workflow task keeps failing (a nondeterminism error, a bug): it resets the
 *   run to its last completed workflow task, once; if it fails again, a person. A failure of the SDK's
 *   Update-ordering bug is the exception: a reset would replay it, so the run is terminated and started
 *   again from the row (a restart, bounded as above);
 * - the order has been in NEEDS_ATTENTION longer than `attentionAgeMs`: an alert.
 * It never compensates or charges: every effect is the saga's. Each action is a row in
 * `sweeper_actions`, an ALERT or info log line and a counter (`SweeperStats`).
 */
import { randomUUID } from 'node:crypto';
import { heartbeat, log } from '@temporalio/activity';
import { WorkflowExecutionAlreadyStartedError, WorkflowNotFoundError, type Client } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import type { Pool } from 'pg';
import { decodeHistoryPayload } from '../platform/payload-codec';
import { SDK_UPDATE_BUG, taskFailureMessage } from '../platform/task-failures';
import { TERMINAL_STATUSES, workflowIdFor, type OrderInput, type OrderStatus } from '../domain/order';

/** How the sweeper reaches Temporal: a client (made on first use) and the saga's task queue. */
export interface SweeperTemporal {
  client: () => Promise<Client>;
  taskQueue: string;
}

/** The sweeper's counters, read by the worker's Prometheus endpoint. */
export class SweeperStats {
  healed = 0;
  resets = 0;
  handedToPerson = 0;
  alerts = 0;
  /** Age of the oldest open order with no live run at the last sweep, in ms (0: none). */
  oldestStrandedMs = 0;
}

export interface SweepOptions {
  /** An order younger than this (since its row last changed) is left alone: its run may be starting. */
  graceMs: number;
  /** Restarts per order before a person is told instead. */
  maxRestarts: number;
  /** A workflow task failing this many attempts in a row counts as failing for good. */
  failedTaskAttempts: number;
  /** An order in NEEDS_ATTENTION longer than this is alerted (again after as long). */
  attentionAgeMs: number;
  /** Only these orders (an operator healing one order now); every open order when absent. */
  orderIds?: string[];
}

export const DEFAULT_SWEEP: SweepOptions = {
  graceMs: 30_000,
  maxRestarts: 3,
  failedTaskAttempts: 3,
  attentionAgeMs: 3_600_000,
};

export interface SweepAction {
  orderId: string;
  action: 'restart' | 'reset' | 'person' | 'alert';
  reason: string;
  runId?: string;
  newRunId?: string;
}

export interface SweepReport {
  open: number;
  stranded: number;
  actions: SweepAction[];
}

interface OpenOrderRow {
  order_id: string;
  status: OrderStatus;
  customer_id: string;
  currency: string;
  payment_method: string;
  items: OrderInput['items'];
  age_ms: string;
}

const { EventType } = temporal.api.enums.v1;

export function sweeperActivities({
  db,
  temporal: tc,
  stats = new SweeperStats(),
}: {
  db: Pool;
  temporal?: SweeperTemporal;
  stats?: SweeperStats;
}) {
  const count = async (orderId: string, action: SweepAction['action'], sinceMs?: number): Promise<number> => {
    const { rows } = await db.query<{ n: string }>({
      text: `SELECT count(*) AS n FROM sweeper_actions WHERE order_id = $1 AND action = $2
               AND ($3::bigint IS NULL OR at > now() - ($3::bigint * interval '1 millisecond'))`,
      values: [orderId, action, sinceMs ?? null],
    });
    return Number(rows[0]!.n);
  };
  const record = async (a: SweepAction): Promise<SweepAction> => {
    await db.query({
      text: 'INSERT INTO sweeper_actions (order_id, action, reason, run_id, new_run_id) VALUES ($1, $2, $3, $4, $5)',
      values: [a.orderId, a.action, a.reason, a.runId ?? null, a.newRunId ?? null],
    });
    const line = a.action === 'person' || a.action === 'alert' ? log.error : log.warn;
    line(`${a.action === 'person' || a.action === 'alert' ? 'ALERT ' : ''}sweeper ${a.action}`, { ...a });
    if (a.action === 'restart') stats.healed++;
    if (a.action === 'reset') stats.resets++;
    if (a.action === 'person') stats.handedToPerson++;
    if (a.action === 'alert') stats.alerts++;
    return a;
  };
  /** Once per order and cause: a person is told (again only after another restart or reset). */
  const handToPerson = async (orderId: string, reason: string, runId?: string): Promise<SweepAction | undefined> => {
    const { rows } = await db.query<{ action: string }>({
      text: `SELECT action FROM sweeper_actions WHERE order_id = $1 AND action <> 'alert' ORDER BY at DESC, id DESC LIMIT 1`,
      values: [orderId],
    });
    if (rows[0]?.action === 'person') return undefined; // already told, nothing new since
    return record({ orderId, action: 'person', reason, ...(runId ? { runId } : {}) });
  };

  return {
    /** One sweep over every open order; returns what it found and did. */
    async sweepOrders(opts: Partial<SweepOptions> = {}): Promise<SweepReport> {
      if (!tc) throw new Error('sweepOrders: this worker has no Temporal client for the sweeper');
      const o = { ...DEFAULT_SWEEP, ...opts };
      const client = await tc.client();
      const { rows } = await db.query<OpenOrderRow>({
        text: `SELECT order_id, status, customer_id, currency, payment_method, items,
                      (extract(epoch FROM now() - updated_at) * 1000)::bigint AS age_ms
                 FROM orders WHERE status <> ALL ($1::text[]) AND updated_at < now() - ($2::bigint * interval '1 millisecond')
                   AND ($3::text[] IS NULL OR order_id = ANY ($3::text[]))
                 ORDER BY updated_at`,
        values: [TERMINAL_STATUSES, o.graceMs, o.orderIds ?? null],
      });
      const actions: SweepAction[] = [];
      let stranded = 0;
      let oldest = 0;
      for (const [i, row] of rows.entries()) {
        heartbeat({ done: i, of: rows.length });
        const orderId = row.order_id;
        const workflowId = workflowIdFor(orderId);
        let desc: Awaited<ReturnType<ReturnType<Client['workflow']['getHandle']>['describe']>> | undefined;
        try {
          desc = await client.workflow.getHandle(workflowId).describe();
        } catch (err) {
          if (!(err instanceof WorkflowNotFoundError)) throw err;
        }
        const running = desc?.status.name === 'RUNNING';
        /** Set when this sweep closed a failing run itself, to start it again below. */
        let healing: string | undefined;
        if (running && desc) {
          // Open: is its workflow task failing for good?
          const pending = desc.raw.pendingWorkflowTask;
          if (pending && (pending.attempt ?? 0) >= o.failedTaskAttempts) {
            const runId = desc.runId;
            const { eventId, lastFailed, message } = await lastCompletedTask(client, workflowId, runId);
            // Timed-out tasks (workers coming and going) are not a bug: only a task that failed counts.
            if (!lastFailed) continue;
            if (SDK_UPDATE_BUG.test(message)) {
              // A reset would replay the same events and fail the same way: a new run from the row heals it.
              if ((await count(orderId, 'restart')) >= o.maxRestarts) {
                const told = await handToPerson(
                  orderId,
                  `its workflow task fails on the SDK's Update-ordering bug, and it was restarted ${o.maxRestarts} times`,
                  runId,
                );
                if (told) actions.push(told);
                continue;
              }
              try {
                await client.workflow
                  .getHandle(workflowId, runId)
                  .terminate(
                    `sweeper: its workflow task fails on the SDK's Update-ordering bug (sdk-core#1146); restarting from the order row`,
                  );
              } catch (err) {
                if (!(err instanceof WorkflowNotFoundError)) throw err;
                continue; // it closed meanwhile: the next sweep sees it as it is
              }
              healing = `its run ${runId} failed every workflow task on the SDK's Update-ordering bug (sdk-core#1146), so the sweeper terminated it`;
            } else {
              if ((await count(orderId, 'reset')) >= 1) {
                const told = await handToPerson(
                  orderId,
                  `its workflow task keeps failing (attempt ${pending.attempt}) after the sweeper's reset`,
                  runId,
                );
                if (told) actions.push(told);
                continue;
              }
              if (eventId === undefined) {
                const told = await handToPerson(
                  orderId,
                  'its workflow task keeps failing and it has no task to reset to',
                  runId,
                );
                if (told) actions.push(told);
                continue;
              }
              const reset = (await client.workflowService.resetWorkflowExecution({
                namespace: client.options.namespace,
                workflowExecution: { workflowId, runId },
                workflowTaskFinishEventId: eventId as never, // an int64: protobufjs takes a number
                requestId: randomUUID(),
                reason: `sweeper: workflow task failing (attempt ${pending.attempt}); reset to event ${eventId}`,
              })) as temporal.api.workflowservice.v1.IResetWorkflowExecutionResponse;
              actions.push(
                await record({
                  orderId,
                  action: 'reset',
                  reason: `workflow task failing (attempt ${pending.attempt}); reset to event ${eventId}`,
                  runId,
                  ...(reset.runId ? { newRunId: reset.runId } : {}),
                }),
              );
              continue;
            }
          } else {
            if (row.status === 'NEEDS_ATTENTION' && Number(row.age_ms) > o.attentionAgeMs) {
              if ((await count(orderId, 'alert', o.attentionAgeMs)) === 0) {
                actions.push(
                  await record({
                    orderId,
                    action: 'alert',
                    reason: `in NEEDS_ATTENTION for ${Math.round(Number(row.age_ms) / 60_000)} min`,
                    runId: desc.runId,
                  }),
                );
              }
            }
            continue;
          }
        }
        // Closed or missing. The run may have settled the order after the rows above were read (its
        // last local activity commits just before the run closes): the row decides, read again now.
        const now = await db.query<{ status: OrderStatus }>({
          text: 'SELECT status FROM orders WHERE order_id = $1',
          values: [orderId],
        });
        if (!healing && (!now.rowCount || TERMINAL_STATUSES.includes(now.rows[0]!.status))) continue;
        // Stranded.
        stranded++;
        oldest = Math.max(oldest, Number(row.age_ms));
        const why =
          healing ??
          (desc
            ? `its run ${desc.runId} is ${desc.status.name.toLowerCase().replace(/_/g, ' ')}`
            : 'it has no workflow');
        if ((await count(orderId, 'restart')) >= o.maxRestarts) {
          const told = await handToPerson(orderId, `${why}, and it was restarted ${o.maxRestarts} times`, desc?.runId);
          if (told) actions.push(told);
          continue;
        }
        const input: OrderInput = {
          orderId,
          customerId: row.customer_id,
          currency: row.currency as OrderInput['currency'],
          paymentMethod: row.payment_method,
          items: row.items.map((i) => ({ sku: i.sku, qty: i.qty, unitPriceCents: i.unitPriceCents })),
        };
        // What the closed run knew beyond the row: its saga config, and a cancel it had not refused.
        const before = desc ? await closedRun(client, workflowId, desc.runId) : {};
        // Not workflows/saga-start.ts's sagaStartOptions: activities/ lies below workflows/, and a restart
        // differs from a placement on purpose: the closed run's ID again (ALLOW_DUPLICATE), its config,
        // a summary and details that say why; the new run sets its search attributes itself.
        try {
          const handle = await client.workflow.start('orderSaga', {
            taskQueue: tc.taskQueue,
            workflowId,
            args: before.config === undefined ? [input] : [input, before.config],
            workflowIdReusePolicy: 'ALLOW_DUPLICATE',
            staticSummary: `order ${orderId}, restarted by the sweeper: ${why}`,
            staticDetails: `The sweeper started this run because the order was ${row.status} while ${why}. It catches up from the order row.`,
          });
          // A cancel the closed run was sent and did not refuse is the customer's: the new run gets it
          // too, under the same request ID (a client still reading the answer reads the new run's), and
          // decides it from the row (it refuses it there if the row is past the pivot). The restart is
          // recorded first: a cancel that cannot be delivered is then said in its record, not lost.
          const cancel = before.cancel;
          const restart = await record({
            orderId,
            action: 'restart',
            reason: `${row.status} while ${why}${cancel ? `; its cancel (${cancel.reason}) carried over` : ''}`,
            ...(desc ? { runId: desc.runId } : {}),
            newRunId: handle.firstExecutionRunId,
          });
          actions.push(restart);
          if (cancel !== undefined) {
            let lastErr: Error | undefined;
            for (let attempt = 1; attempt <= 3; attempt++) {
              try {
                await handle.signal('cancel', cancel);
                lastErr = undefined;
                break;
              } catch (err) {
                lastErr = err as Error;
                await new Promise((r) => setTimeout(r, 500 * attempt));
              }
            }
            if (lastErr) {
              actions.push(
                await record({
                  orderId,
                  action: 'person',
                  reason: `restarted, but its cancel (${cancel.reason}) could not be carried over: ${lastErr.message}`,
                  newRunId: handle.firstExecutionRunId,
                }),
              );
            }
          }
        } catch (err) {
          if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err; // someone started it meanwhile
        }
      }
      stats.oldestStrandedMs = oldest;
      // Every minute in npm start: quiet unless it found something.
      (actions.length || stranded ? log.info : log.debug)('sweep done', {
        open: rows.length,
        stranded,
        actions: actions.length,
      });
      return { open: rows.length, stranded, actions };
    },
  };
}

/**
 * The last WorkflowTaskCompleted event of a run (where a reset takes a failing run back to), whether
 * its last workflow task ended failed (not timed out), and that failure's message.
 */
async function lastCompletedTask(
  client: Client,
  workflowId: string,
  runId: string,
): Promise<{ eventId?: number; lastFailed: boolean; message: string }> {
  const history = await client.workflow.getHandle(workflowId, runId).fetchHistory();
  let eventId: number | undefined;
  let lastFailed = false;
  let failure: temporal.api.failure.v1.IFailure | null | undefined;
  for (const e of history.events ?? []) {
    if (e.eventType === EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED) eventId = Number(e.eventId);
    if (e.eventType === EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED) {
      lastFailed = true;
      failure = e.workflowTaskFailedEventAttributes?.failure;
    }
    if (
      e.eventType === EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED ||
      e.eventType === EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT
    )
      lastFailed = false;
  }
  const message = lastFailed ? await taskFailureMessage(client.options.loadedDataConverter, failure) : '';
  return { ...(eventId !== undefined ? { eventId } : {}), lastFailed, message };
}

/**
 * From a closed run's history: the saga config it was started with (its second argument), and the
 * first `cancel` Signal it did not refuse. Whether it refused one is asked with the `answer` query,
 * which a worker answers by replaying the run (at most 5 s each); a run that cannot answer (it fails
 * on replay, say) counts as not having refused it. Requests sent without an ID are named as the
 * saga names them (`signal-1`, `signal-2`, … over cancels and resolves).
 */
async function closedRun(
  client: Client,
  workflowId: string,
  runId: string,
): Promise<{ config?: unknown; cancel?: { requestId: string; reason: string } }> {
  const handle = client.workflow.getHandle(workflowId, runId);
  const history = await handle.fetchHistory();
  const decode = (p: temporal.api.common.v1.IPayload | null | undefined): Promise<unknown> =>
    decodeHistoryPayload(client.options.loadedDataConverter, p);
  const out: { config?: unknown; cancel?: { requestId: string; reason: string } } = {};
  const cancels: { requestId: string; reason: string }[] = [];
  let unnamed = 0;
  for (const e of history.events ?? []) {
    const started = e.workflowExecutionStartedEventAttributes;
    if (started) {
      const config = await decode(started.input?.payloads?.[1]);
      if (config !== undefined && config !== null) out.config = config;
    }
    const signal = e.workflowExecutionSignaledEventAttributes;
    if (signal?.signalName !== 'cancel' && signal?.signalName !== 'resolve') continue;
    const req = (await decode(signal.input?.payloads?.[0])) as { requestId?: unknown; reason?: unknown } | string;
    const sent = typeof req === 'object' && req !== null ? req.requestId : undefined;
    const requestId = typeof sent === 'string' && sent ? sent.slice(0, 200) : `signal-${++unnamed}`;
    if (signal.signalName !== 'cancel') continue;
    const reason = typeof req === 'string' ? req : req?.reason;
    cancels.push({ requestId, reason: typeof reason === 'string' && reason ? reason : 'cancelled' });
  }
  for (const cancel of cancels.slice(0, 5)) {
    const answer = (await Promise.race([
      handle.query('answer', cancel.requestId).catch(() => undefined),
      new Promise((r) => setTimeout(r, 5_000)),
    ])) as { outcome?: string } | undefined;
    if (answer?.outcome === 'refused') continue;
    out.cancel = cancel;
    break;
  }
  return out;
}
