/**
 * The order saga's command line. `npx tsx client.ts --help` lists the commands.
 * Exit codes: 0 success (place: the order COMPLETED), 1 the order ended otherwise or the command
 * failed, 2 invalid input (nothing started, nothing written), 3 duplicate order ID.
 */
import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import {
  Client,
  Connection,
  ScheduleAlreadyRunning,
  ScheduleOverlapPolicy,
  WithStartWorkflowOperation,
  WorkflowExecutionAlreadyStartedError,
  WorkflowFailedError,
  WorkflowNotFoundError,
  WorkflowUpdateFailedError,
  WorkflowUpdateStage,
  type WorkflowHandleWithFirstExecutionRunId,
} from '@temporalio/client';
import { WorkflowIdConflictPolicy, WorkflowIdReusePolicy, type Duration } from '@temporalio/common';
import { Pool } from 'pg';
import { ABORT_RATE_CRITICAL, ABORT_RATE_HEALTHY, type SkuStats } from './activities/inventory-metrics';
import { checkAgainstCatalogue } from './activities/orders';
import { createPool } from './db/pool';
import { ORDER_STATUSES, OrderValidationError, orderSummary, orderTotalCents, parseOrder, workflowIdFor, type OrderInput, type OrderResult } from './domain/order';
import { listUrl, operatorViews, readConfig, runUrl, type AppConfig } from './lib/config';
import { checkInvariants, formatReport, RULES, temporalLookup } from './lib/invariants';
import { progressBar, runLoad, workerProcesses } from './lib/load';
import { orderOutcome } from './lib/order-outcome';
import { DEFAULT_SAGA_CONFIG } from './workflows/order-saga';
import { acceptedUpdate, cancelUpdate, RESOLVE_ACTIONS, resolveUpdate, stateQuery, type Acceptance, type ResolveAction, type SagaState } from './workflows/messages';
import { CustomerIdKey, NeedsAttentionKey, OrderStatusKey, TotalCentsKey } from './workflows/search-attributes';

export const EXIT = { ok: 0, notCompleted: 1, invalid: 2, duplicate: 3 } as const;
const LATE = Symbol('late');

/** A user error: printed on stderr, naming the field, with the given exit code. */
export class CliError extends Error {
  constructor(
    message: string,
    readonly code: number,
  ) {
    super(message);
  }
}

const HELP: Record<string, string> = {
  main: `Usage: npx tsx client.ts <command> [options]

Commands:
  place --file <order.json> [--json] [--no-wait]   start an order saga; its early answer, then its end
  status <orderId> [--json]                        the saga's state (its state query) and Web UI link
  cancel <orderId> [--reason <text>] [--wait <s>]  cancel before the pivot (runs the compensations)
  resolve <orderId> --action <action> [--note <t>] operator action on an UNKNOWN charge or NEEDS_ATTENTION
  list [--status <STATUS>] [--json]                orders by status, from Temporal's visibility store
  stats [--json]                                   per-SKU CAS attempts, aborts, abort rate, fallbacks
  check [--json]                                   invariant check of the database and the provider's ledger
  schedule reconcile [--every 1h]                  create (or update) the reconciliation Schedule
  findings [--json]                                the last reconciliation run's findings
  load --orders N --concurrency C --hot-skus K     a load: N orders, C in flight, K hot SKUs
  views [--customer <id>] [--json]                 the Web UI list URLs an operator uses

Run "npx tsx client.ts <command> --help" for a command's details.
Environment: TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TASK_QUEUE, TEMPORAL_UI_URL, DATABASE_URL (the app role), READER_DATABASE_URL (the read-only role: check, findings)
(defaults: what a running "npm start" recorded in .data/runtime.json, else 127.0.0.1 loopback).`,
  place: `Usage: npx tsx client.ts place --file <order.json> [--json] [--no-wait]

Validates the order (the same schema the workflow checks), then starts workflow order:<orderId> with
an Update-with-Start: one call starts the saga and gets its early answer, accepted (validated, stock
reserved) or refused with the reason. Without --no-wait it then waits for the end. Prints the order
ID, the status and the run's Web UI URL.
  --file     the order, as JSON (see examples/order.json)
  --json     print one JSON object: orderId, workflowId, runId, status, reason, uiUrl (with
             --no-wait also accepted and answerMs, the time to the early answer)
  --no-wait  return with the early answer (status RESERVED when accepted)
  --wait     seconds to wait for the early answer (60): with none by then (no worker?), exit 1
Exit codes: 0 COMPLETED (with --no-wait: accepted), 1 ended otherwise (refused), 2 invalid input
(including a currency the catalogue does not price the items in), 3 duplicate order ID (or
ALREADY_SETTLED: the order was settled by an earlier run, and this one changed nothing).`,
  status: `Usage: npx tsx client.ts status <orderId> [--json]

Prints the saga's status, current step, steps done, compensation stack, unknowns and attempts
(from its "state" query), and its Web UI URL. Exit code 1 when there is no such order.`,
  cancel: `Usage: npx tsx client.ts cancel <orderId> [--reason <text>]

Sends the "cancel" Update. Accepted before the pivot (the shipment): the compensations run and the
order ends CANCELLED. After the pivot it is refused with the reason. Exit code 1 when refused.
  --wait  seconds to wait for the saga (60): with no answer by then, exit 1 and say so; accepted but
          still compensating by then, exit 0 and say so.`,
  resolve: `Usage: npx tsx client.ts resolve <orderId> --action <action> [--note <text>]

Sends the "resolve" Update. Actions: ${RESOLVE_ACTIONS.join(', ')}.
  charge-succeeded / charge-failed   settle an UNKNOWN charge after checking with the provider
  retry                              retry the failed compensation or forward step
  mark-resolved                      the failed step was done by hand; carry on
Exit code 1 when refused (the saga is not waiting for that action). --wait <seconds> as for cancel (60).`,
  stats: `Usage: npx tsx client.ts stats [--json]

Per-SKU inventory metrics from the worker (WORKER_METRICS_URL, default http://127.0.0.1:9465):
CAS attempts, aborts, abort rate (aborted attempts over task executions), recent abort rate,
fallbacks to the serial lane and lane commits, with seed 000's health band
(healthy < 10 %, critical > 30 %). Counted in the worker's memory since it started.`,
  load: `Usage: npx tsx client.ts load --orders N --concurrency C --hot-skus K [--hot-share F] [--decline-share F] [--workers W] [--json]

Places N orders (1 line, 1 unit each) with C in flight. A share F of them (default 0.3) goes to
K hot SKUs; the rest spread over 50 cold SKUs. The run creates its own products (LOAD-<run>-…).
Shows a progress bar on a terminal, then orders/s, p50/p99 saga latency, statuses, the abort
rate and how many worker processes poll the task queue. With --workers W it refuses to start unless
at least W worker processes poll it (npm start -- --workers W), so a figure is measured with the
workers it claims. Needs DATABASE_URL (or a running "npm start").`,
  check: `Usage: npx tsx client.ts check [--json]

Reads the application database and the provider's ledger in one snapshot, through the read-only
role (READER_DATABASE_URL; else DATABASE_URL), and reports every violation with its order IDs: double charges, refunds without or above a charge, charged
FAILED/CANCELLED orders without exactly one refund, stock + held + sold ≠ initial, orders neither
decided nor within their deadline, HELD reservations on failed orders, charges with no order,
shipped orders without exactly one succeeded unrefunded charge of their total, refunds on shipped
orders, shipments that do not match SOLD reservations, purchase quota ≠ what reservations hold, and
(asking Temporal) open orders whose workflow has closed. Needs a database URL and Temporal.
Exit code 0 when clean, 1 when there are violations.`,
  schedule: `Usage: npx tsx client.ts schedule reconcile [--every <duration>]

Creates the Temporal Schedule "reconcile" (or updates its interval if it exists) that runs the
reconcileWorkflow every <duration> (default 1h; for example 15m, 6h). Each run checks every
invariant, sweeps for orphan charges and overdue sagas, and records findings; it never compensates.`,
  findings: `Usage: npx tsx client.ts findings [--json]

Prints the last reconciliation run's findings (from the database). Exit code 1 when it found any.`,
  views: `Usage: npx tsx client.ts views [--customer <customerId>] [--json]

Prints the Web UI list views an operator uses, each as its visibility query and its URL: sagas that
need attention, failed in the last hour (times computed now), cancelled in the last hour, waiting on
an unknown charge, and one customer's orders.`,
  list: `Usage: npx tsx client.ts list [--status <STATUS>] [--json]

Lists order sagas from Temporal's visibility store (search attribute OrderStatus).
STATUS is one of ${ORDER_STATUSES.join(', ')}.`,
};

interface Out {
  out(line: string): void;
  err(line: string): void;
}

/** The configuration, plus a Temporal client to reuse (a long-lived caller, such as the chaos soak's operators). */
type CliConfig = AppConfig & { client?: Client };

async function connect(cfg: CliConfig): Promise<Client> {
  if (cfg.client) return cfg.client;
  try {
    const connection = await Connection.connect({ address: cfg.temporalAddress, connectTimeout: '5s' });
    return new Client({ connection, namespace: cfg.namespace });
  } catch (err) {
    throw new CliError(`cannot reach Temporal at ${cfg.temporalAddress}: ${(err as Error).message} (is "npm start" running?)`, 1);
  }
}

/** Reads and validates an order file. Throws CliError(2) naming the field. */
export async function loadOrder(file: string, db?: Pool): Promise<OrderInput> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    throw new CliError(`invalid input: file: cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, EXIT.invalid);
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new CliError(`invalid input: file: ${file} is not valid JSON: ${(err as Error).message}`, EXIT.invalid);
  }
  let order: OrderInput;
  try {
    order = parseOrder(raw);
  } catch (err) {
    if (err instanceof OrderValidationError) throw new CliError(err.message, EXIT.invalid);
    throw err;
  }
  if (db) {
    const problem = await checkAgainstCatalogue(db, order);
    if (problem) throw new CliError(`invalid order: ${problem.field}: ${problem.problem}`, EXIT.invalid);
    const existing = await db.query({ text: 'SELECT status FROM orders WHERE order_id = $1', values: [order.orderId] });
    if (existing.rowCount) throw new CliError(`duplicate order: orderId: ${order.orderId} already exists`, EXIT.duplicate);
  }
  return order;
}

function printResult(
  io: Out,
  json: boolean,
  r: { orderId: string; workflowId: string; runId?: string; status: string; reason?: string; uiUrl: string; accepted?: boolean; answerMs?: number },
): void {
  if (json) return io.out(JSON.stringify(r));
  const early = r.accepted === undefined ? '' : r.accepted ? ' — accepted, the saga runs on' : ' — refused';
  io.out(`order ${r.orderId}: ${r.status}${r.reason ? ` (${r.reason})` : ''}${early}${r.answerMs !== undefined ? ` [answer in ${r.answerMs} ms]` : ''}`);
  io.out(`  workflow: ${r.workflowId}${r.runId ? ` run ${r.runId}` : ''}`);
  io.out(`  web ui:   ${r.uiUrl}`);
}

async function place(args: string[], cfg: AppConfig, io: Out): Promise<number> {
  const { values } = parseArgs({
    args,
    options: { file: { type: 'string' }, json: { type: 'boolean' }, 'no-wait': { type: 'boolean' }, wait: { type: 'string' }, help: { type: 'boolean' } },
  });
  if (values.help) return io.out(HELP.place!), EXIT.ok;
  if (!values.file) throw new CliError('invalid input: --file: an order file is required', EXIT.invalid);
  const db = cfg.databaseUrl ? createPool(cfg.databaseUrl, { max: 1 }) : undefined;
  let order: OrderInput;
  try {
    order = await loadOrder(values.file, db);
  } finally {
    await db?.end();
  }
  const client = await connect(cfg);
  const workflowId = workflowIdFor(order.orderId);
  // Update-with-Start: one call starts the saga and returns its early answer (stock reserved, or refused).
  const start = new WithStartWorkflowOperation('orderSaga', {
    taskQueue: cfg.taskQueue,
    workflowId,
    args: [order],
    workflowIdReusePolicy: WorkflowIdReusePolicy.REJECT_DUPLICATE,
    workflowIdConflictPolicy: WorkflowIdConflictPolicy.FAIL,
    typedSearchAttributes: [
      { key: OrderStatusKey, value: 'PENDING' },
      { key: CustomerIdKey, value: order.customerId },
      { key: TotalCentsKey, value: orderTotalCents(order) },
      { key: NeedsAttentionKey, value: false },
    ],
    staticSummary: orderSummary(order),
  });
  const sent = Date.now();
  const waitMs = whole(values.wait ?? '60', '--wait', 1, 3600) * 1000;
  let acceptance: Acceptance | typeof LATE | Error;
  try {
    acceptance = await Promise.race([
      client.workflow.executeUpdateWithStart(acceptedUpdate, { startWorkflowOperation: start }),
      new Promise<typeof LATE>((r) => setTimeout(() => r(LATE), waitMs).unref()),
    ]);
  } catch (err) {
    if (err instanceof WorkflowExecutionAlreadyStartedError) {
      throw new CliError(`duplicate order: orderId: ${order.orderId} already has workflow ${workflowId}`, EXIT.duplicate);
    }
    // The saga started but ended before it could answer (it failed at its boundary, say): its outcome says why.
    if (!(err instanceof WorkflowUpdateFailedError)) throw err;
    acceptance = err;
  }
  const answerMs = Date.now() - sent;
  const handle = await start.workflowHandle();
  // The start's run ID, when the server's answer carried it; else as the server describes the run.
  const runId = (handle as Partial<WorkflowHandleWithFirstExecutionRunId>).firstExecutionRunId || (await handle.describe()).runId;
  const base = { orderId: order.orderId, workflowId, runId, uiUrl: runUrl(cfg, workflowId, runId) };
  if (acceptance === LATE) {
    throw new CliError(`order ${order.orderId}: started, but no answer within ${waitMs / 1000} s (is a worker running?); see ${base.uiUrl}`, EXIT.notCompleted);
  }
  if (acceptance instanceof Error) {
    acceptance = { orderId: order.orderId, accepted: false, status: 'FAILED', reason: (acceptance.cause as Error | undefined)?.message ?? acceptance.message };
    if (values['no-wait']) {
      // Wait for the end: it says why (an invalid order is exit 2, as if the client had caught it).
      values['no-wait'] = false;
    }
  }
  if (values['no-wait']) {
    // The early answer: accepted (RESERVED) and running on, or refused with the reason.
    printResult(io, !!values.json, { ...base, status: acceptance.status, ...(acceptance.reason ? { reason: acceptance.reason } : {}), accepted: acceptance.accepted, answerMs });
    if (acceptance.status === 'ALREADY_SETTLED') return EXIT.duplicate;
    return acceptance.accepted ? EXIT.ok : EXIT.notCompleted;
  }
  let result: OrderResult;
  try {
    result = await orderOutcome(handle); // a FAILED or CANCELLED order fails its workflow: read back as a result
  } catch (err) {
    if (!(err instanceof WorkflowFailedError)) throw err;
    const cause = err.cause as (Error & { type?: string }) | undefined;
    const reason = cause?.message ?? err.message;
    // Without DATABASE_URL the client cannot check the catalogue; the workflow's boundary did.
    if (cause?.type === 'InvalidOrder') throw new CliError(`invalid order: ${reason}`, EXIT.invalid);
    printResult(io, !!values.json, { ...base, status: 'FAILED', reason });
    return EXIT.notCompleted;
  }
  printResult(io, !!values.json, { ...base, status: result.status, ...(result.reason ? { reason: result.reason } : {}) });
  if (result.status === 'ALREADY_SETTLED') return EXIT.duplicate; // another run had settled this order
  return result.status === 'COMPLETED' ? EXIT.ok : EXIT.notCompleted;
}

function orderIdArg(positionals: string[], command: string): string {
  const id = positionals[0];
  if (!id) throw new CliError(`invalid input: orderId: required (usage: client.ts ${command} <orderId>)`, EXIT.invalid);
  if (id.length > 64 || /[\u0000-\u001f]/.test(id)) throw new CliError('invalid input: orderId: at most 64 printable characters', EXIT.invalid);
  return id;
}

function printState(io: Out, json: boolean, cfg: AppConfig, s: SagaState): void {
  const workflowId = workflowIdFor(s.orderId);
  if (json) return io.out(JSON.stringify({ ...s, workflowId, uiUrl: runUrl(cfg, workflowId) }));
  io.out(`order ${s.orderId}: ${s.status}${s.reason ? ` (${s.reason})` : ''}`);
  io.out(`  step:          ${s.step}${s.awaiting ? ` (awaiting operator: ${s.awaiting})` : ''}`);
  io.out(`  steps done:    ${s.stepsDone.join(' → ') || '-'}`);
  io.out(`  compensations: ${s.compensations.length ? [...s.compensations].reverse().join(' ← ') : '-'}${s.compensationsRun.length ? ` (ran: ${s.compensationsRun.join(', ')})` : ''}`);
  io.out(`  unknowns:      ${s.unknowns.join(', ') || '-'}`);
  io.out(`  attempts:      ${Object.entries(s.attempts).map(([k, v]) => `${k}=${v}`).join(' ') || '-'}`);
  io.out(`  web ui:        ${runUrl(cfg, workflowId)}`);
}

async function status(args: string[], cfg: AppConfig, io: Out): Promise<number> {
  const { values, positionals } = parseArgs({ args, allowPositionals: true, options: { json: { type: 'boolean' }, help: { type: 'boolean' } } });
  if (values.help) return io.out(HELP.status!), EXIT.ok;
  const orderId = orderIdArg(positionals, 'status');
  const client = await connect(cfg);
  try {
    const state = await client.workflow.getHandle(workflowIdFor(orderId)).query(stateQuery);
    printState(io, !!values.json, cfg, state);
    return EXIT.ok;
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) throw new CliError(`no order ${orderId} (no workflow ${workflowIdFor(orderId)})`, EXIT.notCompleted);
    throw err;
  }
}

async function update(command: 'cancel' | 'resolve', args: string[], cfg: AppConfig, io: Out): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: { reason: { type: 'string' }, action: { type: 'string' }, note: { type: 'string' }, wait: { type: 'string' }, json: { type: 'boolean' }, help: { type: 'boolean' } },
  });
  const waitMs = whole(values.wait ?? '60', '--wait', 1, 3600) * 1000;
  if (values.help) return io.out(HELP[command]!), EXIT.ok;
  const orderId = orderIdArg(positionals, command);
  if (command === 'resolve' && !RESOLVE_ACTIONS.includes(values.action as ResolveAction)) {
    throw new CliError(`invalid input: --action: must be one of ${RESOLVE_ACTIONS.join(', ')}`, EXIT.invalid);
  }
  const client = await connect(cfg);
  const handle = client.workflow.getHandle(workflowIdFor(orderId));
  const ended = async (): Promise<CliError> => {
    const described = await handle.describe();
    const status = described.typedSearchAttributes.get(OrderStatusKey) ?? described.status.name;
    return new CliError(`${command} refused: order ${orderId} has ended (${status}); there is nothing to ${command}`, EXIT.notCompleted);
  };
  let found = false;
  try {
    const described = await handle.describe();
    found = true;
    if (described.status.name !== 'RUNNING') throw await ended();
    // Bounded: a saga that cannot answer (no worker, or its workflow task failing) gets a clear
    // message instead of a command that never returns.
    const until = Date.now() + waitMs;
    const late = <T>(p: Promise<T>): Promise<T | typeof LATE> =>
      Promise.race([p, new Promise<typeof LATE>((r) => setTimeout(() => r(LATE), Math.max(0, until - Date.now())).unref())]);
    const started =
      command === 'cancel'
        ? await late(handle.startUpdate(cancelUpdate, { args: [values.reason ?? 'cancelled by operator'], waitForStage: WorkflowUpdateStage.ACCEPTED }))
        : await late(handle.startUpdate(resolveUpdate, { args: [{ action: values.action as ResolveAction, ...(values.note ? { note: values.note } : {}) }], waitForStage: WorkflowUpdateStage.ACCEPTED }));
    if (started === LATE) {
      throw new CliError(
        `${command}: no answer from order ${orderId} within ${waitMs / 1000} s (is a worker running?); the request may still apply when it is: ` +
          `check client.ts status ${orderId}, or the run in the Web UI: ${runUrl(cfg, workflowIdFor(orderId))}`,
        EXIT.notCompleted,
      );
    }
    const state = await late(started.result());
    if (state === LATE) {
      io.out(`order ${orderId}: ${command} accepted; the saga is still working on it after ${waitMs / 1000} s (client.ts status ${orderId})`);
      return EXIT.ok;
    }
    printState(io, !!values.json, cfg, state);
    return EXIT.ok;
  } catch (err) {
    // The run ended between the describe and the Update: the server answers "not found" for it.
    if (err instanceof WorkflowNotFoundError && found) throw await ended();
    if (err instanceof WorkflowNotFoundError) throw new CliError(`no order ${orderId} (no workflow ${workflowIdFor(orderId)})`, EXIT.notCompleted);
    if (err instanceof WorkflowUpdateFailedError) throw new CliError(`${command} refused: ${(err.cause as Error | undefined)?.message ?? err.message}`, EXIT.notCompleted);
    throw err;
  }
}

async function list(args: string[], cfg: AppConfig, io: Out): Promise<number> {
  const { values } = parseArgs({ args, options: { status: { type: 'string' }, json: { type: 'boolean' }, help: { type: 'boolean' } } });
  if (values.help) return io.out(HELP.list!), EXIT.ok;
  if (values.status && !(ORDER_STATUSES as readonly string[]).includes(values.status)) {
    throw new CliError(`invalid input: --status: must be one of ${ORDER_STATUSES.join(', ')}`, EXIT.invalid);
  }
  const client = await connect(cfg);
  const query = `WorkflowType = 'orderSaga'${values.status ? ` AND OrderStatus = '${values.status}'` : ''}`;
  const rows = [];
  for await (const wf of client.workflow.list({ query, pageSize: 100 })) {
    rows.push({
      workflowId: wf.workflowId,
      orderId: wf.workflowId.replace(/^order:/, ''),
      status: wf.typedSearchAttributes.get(OrderStatusKey) ?? 'UNKNOWN',
      customerId: wf.typedSearchAttributes.get(CustomerIdKey),
      totalCents: wf.typedSearchAttributes.get(TotalCentsKey),
      needsAttention: wf.typedSearchAttributes.get(NeedsAttentionKey) ?? false,
      execution: wf.status.name,
      startTime: wf.startTime.toISOString(),
      uiUrl: runUrl(cfg, wf.workflowId, wf.runId),
    });
    if (rows.length >= 1000) break;
  }
  if (values.json) io.out(JSON.stringify(rows));
  else if (rows.length === 0) io.out('no orders');
  else for (const r of rows) io.out(`${r.orderId.padEnd(28)} ${String(r.status).padEnd(16)} ${String(r.customerId ?? '').padEnd(16)} ${String(r.totalCents ?? '').padStart(10)}  ${r.uiUrl}`);
  return EXIT.ok;
}

async function check(args: string[], cfg: AppConfig, io: Out): Promise<number> {
  const { values } = parseArgs({ args, options: { json: { type: 'boolean' }, help: { type: 'boolean' } } });
  if (values.help) return io.out(HELP.check!), EXIT.ok;
  if (!cfg.readerDatabaseUrl) throw new CliError('check needs READER_DATABASE_URL or DATABASE_URL (or a running "npm start")', 1);
  const db = createPool(cfg.readerDatabaseUrl, { max: 1 }); // read-only: it reads the provider's ledger too
  try {
    // Temporal's visibility tells an open order whose workflow has closed (that rule needs the server).
    const client = await connect(cfg).catch((err: Error) => {
      io.err(`note: ${err.message}; the rule "${RULES.closedRunTerminal}" is not checked`);
      return undefined;
    });
    const report = await checkInvariants(db, { deadlineMs: DEFAULT_SAGA_CONFIG.deadlineMs, ...(client ? { workflows: temporalLookup(client) } : {}) });
    if (values.json) io.out(JSON.stringify(report));
    else for (const line of formatReport(report)) io.out(line);
    return report.violations.length === 0 ? EXIT.ok : EXIT.notCompleted;
  } finally {
    await db.end();
  }
}

export const RECONCILE_SCHEDULE_ID = 'reconcile';

async function schedule(args: string[], cfg: AppConfig, io: Out): Promise<number> {
  const { values, positionals } = parseArgs({ args, allowPositionals: true, options: { every: { type: 'string' }, json: { type: 'boolean' }, help: { type: 'boolean' } } });
  if (values.help) return io.out(HELP.schedule!), EXIT.ok;
  if (positionals[0] !== 'reconcile') throw new CliError('invalid input: schedule: the only schedule is "reconcile"', EXIT.invalid);
  const every = values.every ?? '1h';
  if (!/^\d+(s|m|h|d)$/.test(every) || Number.parseInt(every, 10) === 0 || (every.endsWith('s') && Number.parseInt(every, 10) < 60)) {
    throw new CliError('invalid input: --every: a duration such as 15m, 1h or 1d (at least 60s)', EXIT.invalid);
  }
  const client = await connect(cfg);
  const spec = { intervals: [{ every: every as Duration }] };
  let created = true;
  try {
    await client.schedule.create({
      scheduleId: RECONCILE_SCHEDULE_ID,
      spec,
      action: { type: 'startWorkflow', workflowType: 'reconcileWorkflow', taskQueue: cfg.taskQueue, workflowId: 'reconcile' },
      policies: { overlap: ScheduleOverlapPolicy.SKIP, catchupWindow: '1h' },
    });
  } catch (err) {
    if (!(err instanceof ScheduleAlreadyRunning)) throw err;
    created = false;
    await client.schedule.getHandle(RECONCILE_SCHEDULE_ID).update((prev) => ({ ...prev, spec }));
  }
  const url = `${cfg.uiUrl}/namespaces/${encodeURIComponent(cfg.namespace)}/schedules/${RECONCILE_SCHEDULE_ID}`;
  if (values.json) io.out(JSON.stringify({ scheduleId: RECONCILE_SCHEDULE_ID, every, created, uiUrl: url }));
  else io.out(`schedule ${RECONCILE_SCHEDULE_ID}: ${created ? 'created' : 'updated'}, every ${every}\n  web ui: ${url}`);
  return EXIT.ok;
}

async function findings(args: string[], cfg: AppConfig, io: Out): Promise<number> {
  const { values } = parseArgs({ args, options: { json: { type: 'boolean' }, help: { type: 'boolean' } } });
  if (values.help) return io.out(HELP.findings!), EXIT.ok;
  if (!cfg.readerDatabaseUrl) throw new CliError('findings needs READER_DATABASE_URL or DATABASE_URL (or a running "npm start")', 1);
  const db = createPool(cfg.readerDatabaseUrl, { max: 1 });
  try {
    const run = await db.query<{ run_id: string; started_at: Date; orders: number; violations: number }>(
      'SELECT run_id, started_at, orders, violations FROM reconciliation_runs ORDER BY started_at DESC LIMIT 1',
    );
    const last = run.rows[0];
    if (!last) {
      if (values.json) io.out(JSON.stringify({ run: null, findings: [] }));
      else io.out('no reconciliation has run yet (client.ts schedule reconcile)');
      return EXIT.ok;
    }
    const rows = await db.query<{ rule: string; order_ids: string[]; detail: string }>({
      text: 'SELECT rule, order_ids, detail FROM reconciliation_findings WHERE run_id = $1 ORDER BY id',
      values: [last.run_id],
    });
    const out = { run: { runId: last.run_id, at: last.started_at.toISOString(), orders: last.orders, violations: last.violations }, findings: rows.rows.map((r) => ({ rule: r.rule, orderIds: r.order_ids, detail: r.detail })) };
    if (values.json) io.out(JSON.stringify(out));
    else {
      io.out(`reconciliation ${out.run.runId} at ${out.run.at}: ${out.run.orders} orders, ${out.findings.length} finding(s)`);
      for (const f of out.findings) io.out(`  ${f.rule}: ${f.detail}${f.orderIds.length ? ` [orders: ${f.orderIds.join(', ')}]` : ''}`);
    }
    return out.findings.length === 0 ? EXIT.ok : EXIT.notCompleted;
  } finally {
    await db.end();
  }
}

async function fetchStats(cfg: AppConfig): Promise<SkuStats[]> {
  let res: Response;
  try {
    res = await fetch(`${cfg.workerMetricsUrl}/stats`, { signal: AbortSignal.timeout(5_000) });
  } catch (err) {
    throw new CliError(`cannot reach the worker's metrics at ${cfg.workerMetricsUrl}: ${(err as Error).message} (is the worker running?)`, 1);
  }
  return ((await res.json()) as { skus: SkuStats[] }).skus;
}

const band = (rate: number): string => (rate < ABORT_RATE_HEALTHY ? 'healthy' : rate > ABORT_RATE_CRITICAL ? 'CRITICAL' : 'warning');
const pct = (x: number): string => `${(x * 100).toFixed(1)} %`;

async function stats(args: string[], cfg: AppConfig, io: Out): Promise<number> {
  const { values } = parseArgs({ args, options: { json: { type: 'boolean' }, help: { type: 'boolean' } } });
  if (values.help) return io.out(HELP.stats!), EXIT.ok;
  const skus = await fetchStats(cfg);
  if (values.json) return io.out(JSON.stringify({ skus: skus.map((s) => ({ ...s, health: band(s.abortRate) })) })), EXIT.ok;
  if (skus.length === 0) return io.out('no reservations yet'), EXIT.ok;
  io.out(`${'sku'.padEnd(28)} ${'attempts'.padStart(9)} ${'aborts'.padStart(8)} ${'abort rate'.padStart(11)} ${'recent'.padStart(8)} ${'fallbacks'.padStart(10)} ${'lane'.padStart(6)}  health`);
  for (const s of skus) {
    io.out(`${s.sku.padEnd(28)} ${String(s.attempts).padStart(9)} ${String(s.aborts).padStart(8)} ${pct(s.abortRate).padStart(11)} ${pct(s.recentAbortRate).padStart(8)} ${String(s.fallbacks).padStart(10)} ${String(s.laneCommits).padStart(6)}  ${band(s.abortRate)}`);
  }
  return EXIT.ok;
}

function share(v: string | undefined, field: string, fallback: number): number {
  if (v === undefined) return fallback;
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0 || n > 1) throw new CliError(`invalid input: ${field}: a number from 0 to 1`, EXIT.invalid);
  return n;
}

function whole(v: string | undefined, field: string, min: number, max: number): number {
  const n = Number(v);
  if (v === undefined || !Number.isInteger(n) || n < min || n > max) throw new CliError(`invalid input: ${field}: a whole number from ${min} to ${max}`, EXIT.invalid);
  return n;
}

async function load(args: string[], cfg: AppConfig, io: Out): Promise<number> {
  const { values } = parseArgs({
    args,
    options: {
      orders: { type: 'string' },
      concurrency: { type: 'string' },
      'hot-skus': { type: 'string' },
      'hot-share': { type: 'string' },
      'decline-share': { type: 'string' },
      workers: { type: 'string' },
      json: { type: 'boolean' },
      help: { type: 'boolean' },
    },
  });
  if (values.help) return io.out(HELP.load!), EXIT.ok;
  const wantWorkers = values.workers === undefined ? undefined : whole(values.workers, '--workers', 1, 64);
  const opts = {
    orders: whole(values.orders, '--orders', 1, 100_000),
    concurrency: whole(values.concurrency ?? '10', '--concurrency', 1, 500),
    hotSkus: whole(values['hot-skus'] ?? '1', '--hot-skus', 1, 1000),
    hotShare: share(values['hot-share'], '--hot-share', 0.3),
    declineShare: share(values['decline-share'], '--decline-share', 0),
  };
  if (!cfg.databaseUrl) throw new CliError('load needs DATABASE_URL (or a running "npm start") to create its products', 1);
  const client = await connect(cfg);
  const workers = await workerProcesses(client, cfg.taskQueue);
  if (wantWorkers !== undefined && workers.length < wantWorkers) {
    throw new CliError(
      `load --workers ${wantWorkers}: ${workers.length} worker process(es) poll task queue ${cfg.taskQueue}${workers.length ? ` (${workers.join(', ')})` : ''}; start them with npm start -- --workers ${wantWorkers}`,
      EXIT.notCompleted,
    );
  }
  const db = createPool(cfg.databaseUrl, { max: 2 });
  const bar = progressBar();
  try {
    const summary = await runLoad(client, db, {
      ...opts,
      taskQueue: cfg.taskQueue,
      onProgress: bar,
      stats: () => fetchStats(cfg),
    });
    bar.end();
    const { orderIds: _ids, ...printable } = summary;
    if (values.json) io.out(JSON.stringify({ ...printable, workers: workers.length }));
    else {
      io.out(`load ${summary.runId}: ${summary.orders} orders, concurrency ${opts.concurrency}, ${opts.hotSkus} hot SKU(s) taking ${pct(opts.hotShare)}, ${workers.length} worker process(es) polling`);
      io.out(`  throughput:   ${summary.ordersPerSecond} orders/s over ${summary.seconds} s`);
      io.out(`  saga latency: p50 ${summary.latencyMs.p50} ms, p99 ${summary.latencyMs.p99} ms, max ${summary.latencyMs.max} ms`);
      io.out(`  statuses:     ${Object.entries(summary.statuses).map(([k, v]) => `${k} ${v}`).join(', ') || '-'}${summary.errors ? `; errors ${summary.errors}` : ''}`);
      if (summary.abortRate !== undefined) {
        io.out(`  abort rate:   ${pct(summary.abortRate)} (${band(summary.abortRate)}) over ${summary.casAttempts} CAS attempts; ${summary.fallbacks} sent to the serial lane`);
      }
      for (const e of summary.firstErrors) io.err(`  error: ${e}`);
    }
    return summary.errors === 0 ? EXIT.ok : EXIT.notCompleted;
  } catch (err) {
    if (err instanceof CliError) throw err;
    if (/^--/.test((err as Error).message)) throw new CliError(`invalid input: ${(err as Error).message}`, EXIT.invalid);
    throw err;
  } finally {
    await db.end();
  }
}

/**
 * Runs one command; returns its exit code. `shared.client`: a Temporal client to use instead of
 * connecting (callers that run many commands in one process).
 */
function views(args: string[], cfg: AppConfig, io: Out): number {
  const { values } = parseArgs({ args, options: { customer: { type: 'string' }, json: { type: 'boolean' }, help: { type: 'boolean' } } });
  if (values.help) return io.out(HELP.views!), EXIT.ok;
  if (values.customer !== undefined && !/^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/.test(values.customer)) {
    throw new CliError('invalid input: --customer: a customer ID (letters, digits, "_", "-", ".")', EXIT.invalid);
  }
  const rows = operatorViews(new Date(), values.customer).map((v) => ({ ...v, url: listUrl(cfg, v.query) }));
  if (values.json) io.out(JSON.stringify(rows));
  else for (const r of rows) io.out(`${r.name}:\n  ${r.query}\n  ${r.url}`);
  return EXIT.ok;
}

export async function runCli(
  argv: string[],
  config: AppConfig = readConfig(),
  io: Out = { out: (l) => process.stdout.write(`${l}\n`), err: (l) => process.stderr.write(`${l}\n`) },
  shared: { client?: Client } = {},
): Promise<number> {
  const cfg: CliConfig = { ...config, ...(shared.client ? { client: shared.client } : {}) };
  const [command, ...rest] = argv;
  try {
    switch (command) {
      case 'place':
        return await place(rest, cfg, io);
      case 'status':
        return await status(rest, cfg, io);
      case 'cancel':
      case 'resolve':
        return await update(command, rest, cfg, io);
      case 'list':
        return await list(rest, cfg, io);
      case 'stats':
        return await stats(rest, cfg, io);
      case 'check':
        return await check(rest, cfg, io);
      case 'schedule':
        return await schedule(rest, cfg, io);
      case 'findings':
        return await findings(rest, cfg, io);
      case 'load':
        return await load(rest, cfg, io);
      case 'views':
        return views(rest, cfg, io);
      case undefined:
      case '--help':
      case '-h':
      case 'help':
        io.out(HELP.main!);
        return command === undefined ? EXIT.invalid : EXIT.ok;
      default:
        throw new CliError(`invalid input: command: unknown command "${command}" (try --help)`, EXIT.invalid);
    }
  } catch (err) {
    if (err instanceof CliError) {
      io.err(err.message);
      return err.code;
    }
    if (err instanceof TypeError && (err as NodeJS.ErrnoException).code?.startsWith('ERR_PARSE_ARGS')) {
      io.err(`invalid input: ${err.message}`);
      return EXIT.invalid;
    }
    io.err(`error: ${(err as Error).message}`);
    return EXIT.notCompleted;
  }
}

if (require.main === module) {
  runCli(process.argv.slice(2)).then((code) => process.exit(code));
}
