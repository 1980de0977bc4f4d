/**
 * After the soak: a per-order audit against the provider's ledger (every order's final money and
 * stock are what its status says, and what was placed; an order of the authorization era by its holds
 * and captures, one of the charge era by its charge), and a read of every run's history (the saga
 * log) for what the sagas went through: UNKNOWN_PAYMENT, and compensations that met a fault.
 */
import type { Client } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import type { Pool } from 'pg';
import { WorkflowNames } from '../../domain/names';
import { isPastPivot, isTerminal, orderTotalCents, type OrderStatus } from '../../domain/order';
import type { ChaosOrder } from './orders';
import { decodeHistoryPayload } from '../../platform/payload-codec';
import { SDK_UPDATE_BUG, taskFailureMessage } from '../../platform/task-failures';
import type { PeopleViolation } from './people';
import { UNREADABLE_KEY_ID } from './people/terminate';

interface AuditRow {
  order_id: string;
  status: OrderStatus;
  total_cents: string;
  customer_id: string;
  payment_method: string;
  items: { sku: string; qty: number }[];
  payment_flow: 'charge' | 'authorization';
  /** Money taken: the charge's (charge era), or the succeeded captures of the order's holds. */
  taken: string;
  refunded: string;
  refunds: number;
  /** The order's holds the provider still keeps open (authorized, unexpired, not voided nor captured). */
  open_holds: string[];
  held: { sku: string; qty: number }[];
  sold: { sku: string; qty: number }[];
  shipped: boolean;
  /** A capture of the order's that the provider wrote before the shipment's row (one Postgres, one clock). */
  captured_before_shipment: boolean;
}

/** Every order's end, checked on its own: money and goods as its status says, contents as placed. */
export async function auditOrders(
  db: Pool,
  orders: ChaosOrder[],
  expect: { cancelAccepted: Set<string>; apiRefused: Set<string>; stoppedBeforeRow: Set<string> },
): Promise<{ violations: PeopleViolation[]; statuses: Record<string, number>; notTerminal: string[] }> {
  const { rows } = await db.query<AuditRow>({
    text: `SELECT o.order_id, o.status, o.total_cents, o.customer_id, o.payment_method, o.items, o.payment_flow,
                  CASE WHEN o.payment_flow = 'charge'
                    THEN COALESCE((SELECT c.amount_cents FROM provider.charges c WHERE c.idempotency_key = o.order_id || ':charge' AND c.status = 'succeeded'), 0)
                    ELSE COALESCE((SELECT sum(c.amount_cents) FROM provider.captures c JOIN provider.authorizations a ON a.idempotency_key = c.authorization_key
                                   WHERE a.reference = o.order_id AND c.status = 'succeeded'), 0)
                  END AS taken,
                  COALESCE((SELECT sum(r.amount_cents) FROM provider.refunds r WHERE r.charge_key = o.order_id || ':charge'
                              OR r.capture_key IN (SELECT c.idempotency_key FROM provider.captures c JOIN provider.authorizations a ON a.idempotency_key = c.authorization_key WHERE a.reference = o.order_id)), 0) AS refunded,
                  (SELECT count(*)::int FROM provider.refunds r WHERE r.charge_key = o.order_id || ':charge'
                     OR r.capture_key IN (SELECT c.idempotency_key FROM provider.captures c JOIN provider.authorizations a ON a.idempotency_key = c.authorization_key WHERE a.reference = o.order_id)) AS refunds,
                  COALESCE((SELECT array_agg(a.idempotency_key) FROM provider.authorizations a
                            WHERE a.reference = o.order_id AND a.status = 'authorized' AND a.expires_at > clock_timestamp()
                              AND NOT EXISTS (SELECT 1 FROM provider.voids v WHERE v.authorization_key = a.idempotency_key)
                              AND NOT EXISTS (SELECT 1 FROM provider.captures c WHERE c.authorization_key = a.idempotency_key AND c.status = 'succeeded')), '{}') AS open_holds,
                  COALESCE((SELECT json_agg(json_build_object('sku', sku, 'qty', qty)) FROM reservations WHERE order_id = o.order_id AND status = 'HELD'), '[]') AS held,
                  COALESCE((SELECT json_agg(json_build_object('sku', sku, 'qty', qty)) FROM reservations WHERE order_id = o.order_id AND status = 'SOLD'), '[]') AS sold,
                  EXISTS (SELECT 1 FROM shipments s WHERE s.order_id = o.order_id) AS shipped,
                  EXISTS (SELECT 1 FROM provider.captures c JOIN provider.authorizations a ON a.idempotency_key = c.authorization_key
                          JOIN shipments s ON s.order_id = o.order_id
                          WHERE a.reference = o.order_id AND c.status = 'succeeded' AND c.created_at < s.created_at) AS captured_before_shipment
           FROM orders o
           WHERE o.order_id = ANY($1::text[])`,
    values: [orders.map((o) => o.input.orderId)],
  });
  const byId = new Map(rows.map((r) => [r.order_id, r]));
  const violations: PeopleViolation[] = [];
  const statuses: Record<string, number> = {};
  const notTerminal: string[] = [];
  const bad = (rule: string, id: string, detail: string): void =>
    void violations.push({ rule, orderIds: [id], detail });
  const lines = (l: { sku: string; qty: number }[]): string =>
    JSON.stringify([...l].sort((a, b) => (a.sku < b.sku ? -1 : 1)).map((i) => [i.sku, i.qty]));
  const moved = await movedWithoutRow(
    db,
    orders.map((o) => o.input.orderId).filter((id) => !byId.has(id)),
  );
  for (const o of orders) {
    const id = o.input.orderId;
    const row = byId.get(id);
    if (!row) {
      // A run a person stopped before it wrote the row did nothing: its order never happened.
      if (!expect.stoppedBeforeRow.has(id))
        bad('every placed order has its row', id, 'no order row (every chaos order is valid)');
      else if (moved.has(id))
        bad('an order stopped before its row moved nothing', id, `no order row, yet ${moved.get(id)}`);
      continue;
    }
    statuses[row.status] = (statuses[row.status] ?? 0) + 1;
    if (!isTerminal(row.status)) notTerminal.push(id);
    const total = orderTotalCents(o.input);
    if (
      Number(row.total_cents) !== total ||
      lines(row.items) !== lines(o.input.items) ||
      row.payment_method !== o.input.paymentMethod
    ) {
      bad(
        'the order row says what was placed',
        id,
        `row total ${row.total_cents}, lines ${lines(row.items)}, card ${row.payment_method}; placed ${total}, ${lines(o.input.items)}, ${o.input.paymentMethod}`,
      );
    }
    const taken = Number(row.taken);
    const kept = taken - Number(row.refunded);
    // What the order's status says of its money: a charge-era order is paid once its charge is made
    // (before the shipment); an authorization-era one once captured (after it).
    const paidBy: readonly OrderStatus[] =
      row.payment_flow === 'charge' ? ['SHIPPED', 'COMPLETED'] : ['CAPTURED', 'COMPLETED'];
    if (taken > 0 && !row.shipped && row.payment_flow === 'authorization')
      bad('no capture without a shipment', id, `${row.status}: captured ${taken}, no shipment`);
    if (row.captured_before_shipment)
      bad('no capture without a shipment', id, `${row.status}: captured before its shipment was written`);
    if (Number(row.refunded) > taken)
      bad('no refund on money never taken', id, `${row.status}: taken ${taken}, refunded ${row.refunded}`);
    if (isTerminal(row.status) && row.open_holds.length > 0)
      bad('no hold left open on a closed order', id, `${row.status}: holds still open ${row.open_holds.join(', ')}`);
    if (paidBy.includes(row.status) && (taken !== total || Number(row.refunded) !== 0))
      bad(
        'a shipped order is paid once, in full',
        id,
        `${row.status}: taken ${taken}, refunded ${row.refunded}, total ${total}`,
      );
    if (row.status === 'SHIPPED' && row.payment_flow === 'authorization' && taken !== 0)
      bad('a shipped order is paid once, in full', id, `SHIPPED (not yet captured) with ${taken} captured`);
    if (isPastPivot(row.status)) {
      if (lines(row.sold) !== lines(o.input.items) || row.held.length > 0 || !row.shipped) {
        bad(
          'a shipped order sold exactly its lines',
          id,
          `${row.status}: sold ${lines(row.sold)}, held ${lines(row.held)}, shipment ${row.shipped}`,
        );
      }
      if (o.input.paymentMethod === 'tok_declined')
        bad('a declined card never ships', id, `${row.status} with a declined card`);
    }
    if (row.status === 'FAILED' || row.status === 'CANCELLED') {
      if (kept !== 0 || row.refunds > 1 || (row.payment_flow === 'authorization' && taken !== 0))
        bad(
          'a failed order keeps no money',
          id,
          `${row.status}: taken ${taken}, refunded ${row.refunded} in ${row.refunds} refund(s)`,
        );
      if (row.held.length > 0 || row.sold.length > 0 || row.shipped)
        bad(
          'a failed order holds no stock',
          id,
          `${row.status}: held ${lines(row.held)}, sold ${lines(row.sold)}, shipment ${row.shipped}`,
        );
    }
    if (expect.cancelAccepted.has(id) && row.status !== 'CANCELLED')
      bad('an accepted cancel ends CANCELLED', id, `cancel accepted, order ${row.status}`);
    if (expect.apiRefused.has(id) && row.status !== 'FAILED' && row.status !== 'CANCELLED')
      bad('an order the API refused never goes on', id, `refused by POST /v1/orders, order ${row.status}`);
  }
  return { violations, statuses, notTerminal };
}

/** What moved for orders that have no row (stock held or sold, a hold, a charge, a shipment), by order. */
async function movedWithoutRow(db: Pool, ids: string[]): Promise<Map<string, string>> {
  if (ids.length === 0) return new Map();
  const { rows } = await db.query<{ order_id: string; what: string }>({
    text: `SELECT t.id AS order_id, concat_ws(', ',
                    CASE WHEN EXISTS (SELECT 1 FROM reservations r WHERE r.order_id = t.id) THEN 'stock reserved' END,
                    CASE WHEN EXISTS (SELECT 1 FROM provider.authorizations a WHERE a.reference = t.id) THEN 'a hold asked for' END,
                    CASE WHEN EXISTS (SELECT 1 FROM provider.charges c WHERE c.idempotency_key = t.id || ':charge') THEN 'a charge asked for' END,
                    CASE WHEN EXISTS (SELECT 1 FROM shipments s WHERE s.order_id = t.id) THEN 'a shipment' END) AS what
             FROM unnest($1::text[]) AS t(id)`,
    values: [ids],
  });
  return new Map(rows.filter((r) => r.what !== '').map((r) => [r.order_id, r.what]));
}

const T = temporal.api.enums.v1.EventType;
const COMPENSATIONS = new Set(['refundPayment', 'voidAuthorization', 'releaseInventory']);

/** What the saga log (every run of every order) shows. */
export interface HistoryFacts {
  runs: number;
  /** Orders whose saga wrote UNKNOWN_PAYMENT. */
  unknownPayment: Set<string>;
  /** Compensations (order and activity) that met a fault: an attempt failed or timed out, or it escalated. */
  compensationsFaulted: Set<string>;
  compensationsRun: Set<string>;
  /** Orders with a compensation that met a fault. */
  compensatedUnderFault: Set<string>;
  /**
   * Workflow tasks the saga's own code failed (an error thrown in workflow code, a nondeterminism, a
   * deadlock), by order: a bug, since such a task fails again on every retry and the run is stuck.
   * The server's own (a Reset's, a terminate's or timeout's force close, an unhandled message's) are
   * not counted.
   */
  taskFailures: Map<string, string[]>;
  /** Task failures of the SDK's Update-ordering bug (sdk-core issue 1146), by order: counted apart. */
  sdkBugTaskFailures: Map<string, string[]>;
  /** The histories of the runs with either kind of task failure, kept to be replayed. */
  failedHistories: { orderId: string; runId: string; history: temporal.api.history.v1.IHistory }[];
}

const WFT = temporal.api.enums.v1.WorkflowTaskFailedCause;
/** Failed workflow tasks that are part of normal operation, not the code's fault. */
const BENIGN_TASK_FAILURES = new Set<number>([
  WFT.WORKFLOW_TASK_FAILED_CAUSE_RESET_WORKFLOW,
  WFT.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND,
  WFT.WORKFLOW_TASK_FAILED_CAUSE_RESET_STICKY_TASK_QUEUE,
  WFT.WORKFLOW_TASK_FAILED_CAUSE_FORCE_CLOSE_COMMAND,
]);

export async function readHistories(
  client: Client,
  orderIds: Set<string>,
  onProgress?: (done: number, total: number) => void,
): Promise<HistoryFacts> {
  const facts: HistoryFacts = {
    runs: 0,
    unknownPayment: new Set(),
    compensationsFaulted: new Set(),
    compensationsRun: new Set(),
    compensatedUnderFault: new Set(),
    taskFailures: new Map(),
    sdkBugTaskFailures: new Map(),
    failedHistories: [],
  };
  const runs: { workflowId: string; runId: string }[] = [];
  for await (const wf of client.workflow.list({ query: `WorkflowType = '${WorkflowNames.orderSaga}'` })) {
    if (orderIds.has(wf.workflowId.replace(/^order:/, ''))) runs.push({ workflowId: wf.workflowId, runId: wf.runId });
  }
  facts.runs = runs.length;
  let done = 0;
  const one = async (): Promise<void> => {
    for (let run = runs.shift(); run; run = runs.shift()) {
      const orderId = run.workflowId.replace(/^order:/, '');
      const history = await client.workflow.getHandle(run.workflowId, run.runId).fetchHistory();
      const compensation = new Map<number, string>(); // scheduled event id → `order/activity id`
      for (const e of history.events ?? []) {
        const sched = e.activityTaskScheduledEventAttributes;
        if (e.eventType === T.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED && sched) {
          const name = sched.activityType?.name ?? '';
          if (COMPENSATIONS.has(name)) {
            // A Reset copies the events before its point: the same compensation is counted once.
            compensation.set(Number(e.eventId), `${orderId}/${sched.activityId}`);
            facts.compensationsRun.add(`${orderId}/${sched.activityId}`);
          }
          if (name === 'setOrderStatus') {
            // The history holds it sealed: open it with the client's codec.
            const input = (await decodeHistoryPayload(
              client.options.loadedDataConverter,
              sched.input?.payloads?.[0],
            )) as { status?: string } | undefined;
            if (input?.status === 'UNKNOWN_PAYMENT') facts.unknownPayment.add(orderId);
          }
        }
        const wft = e.workflowTaskFailedEventAttributes;
        const message = wft ? await taskFailureMessage(client.options.loadedDataConverter, wft.failure) : undefined;
        // The person's unreadable Signal, met by a worker before the Terminate that followed it: the
        // worker cannot open it (no key), which is what the person sent, not the saga code failing.
        const unreadableSignal = message?.includes(`key ID "${UNREADABLE_KEY_ID}"`) ?? false;
        if (wft && message !== undefined && !BENIGN_TASK_FAILURES.has(wft.cause ?? 0) && !unreadableSignal) {
          const cause = WFT[wft.cause ?? 0] ?? String(wft.cause);
          const what = `run ${run.runId} event ${String(e.eventId)}: ${cause.replace('WORKFLOW_TASK_FAILED_CAUSE_', '')}: ${message.slice(0, 300)}`;
          const into = SDK_UPDATE_BUG.test(message) ? facts.sdkBugTaskFailures : facts.taskFailures;
          into.set(orderId, [...(into.get(orderId) ?? []), what]);
          if (!facts.failedHistories.some((h) => h.runId === run.runId))
            facts.failedHistories.push({ orderId, runId: run.runId, history });
        }
        const started = e.activityTaskStartedEventAttributes;
        const failed = e.activityTaskFailedEventAttributes ?? e.activityTaskTimedOutEventAttributes;
        const comp = compensation.get(Number((started ?? failed)?.scheduledEventId ?? -1));
        if (comp && (failed || (started?.attempt ?? 1) > 1)) {
          facts.compensationsFaulted.add(comp);
          facts.compensatedUnderFault.add(orderId);
        }
      }
      onProgress?.(++done, facts.runs);
    }
  };
  await Promise.all(Array.from({ length: 8 }, one));
  return facts;
}

/**
 * Why an order's latest run is still open: its pending workflow task (state and attempt) and the last
 * events of its history, with a failed task's cause and message.
 */
export async function whyOpen(client: Client, orderId: string): Promise<string> {
  try {
    const handle = client.workflow.getHandle(`order:${orderId}`);
    const d = await handle.describe();
    const wft = d.raw.pendingWorkflowTask;
    const task = wft
      ? `workflow task ${temporal.api.enums.v1.PendingWorkflowTaskState[wft.state ?? 0]} attempt ${wft.attempt}`
      : 'no workflow task pending';
    const events = (await handle.fetchHistory()).events ?? [];
    const last = events.slice(-8).map((e) => {
      const name = T[e.eventType ?? 0]?.replace('EVENT_TYPE_', '') ?? String(e.eventType);
      const failed = e.workflowTaskFailedEventAttributes;
      const cause = failed ? WFT[failed.cause ?? 0]?.replace('WORKFLOW_TASK_FAILED_CAUSE_', '') : undefined;
      return failed ? `${name}(${cause}: ${(failed.failure?.message ?? '').slice(0, 200)})` : name;
    });
    return `${orderId}: ${d.status.name}, ${task}, ${events.length} events; last: ${last.join(' → ')}`;
  } catch (err) {
    return `${orderId}: cannot describe: ${(err as Error).message}`;
  }
}
