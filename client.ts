/**
 * The order saga's command line: its commands, options and help are declared with commander below;
 * the database is reached only through lib/order-store.ts. `npx tsx client.ts --help` lists them.
 * Exit codes: 0 success (place: the order COMPLETED), 1 the order ended otherwise or the command
 * failed, 2 invalid input (nothing started, nothing written), 3 duplicate order ID.
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Command, CommanderError, InvalidArgumentError, Option } from '@commander-js/extra-typings';
import {
  Client,
  Connection,
  ServiceError,
  WithStartWorkflowOperation,
  WorkflowExecutionAlreadyStartedError,
  WorkflowFailedError,
  WorkflowNotFoundError,
  WorkflowUpdateFailedError,
  WorkflowUpdateStage,
  type WorkflowHandleWithFirstExecutionRunId,
} from '@temporalio/client';
import { WorkflowIdConflictPolicy, WorkflowIdReusePolicy } from '@temporalio/common';
import type { GenericSchema, InferOutput } from 'valibot';
import { ABORT_RATE_CRITICAL, ABORT_RATE_HEALTHY, type SkuStats } from './activities/inventory-metrics';
import { DEFAULT_KEY_FILE, dataConverterFor, requirePayloadKeys, rotateKeyFile } from './platform/payload-codec';
import {
  IdSchema,
  ORDER_STATUSES,
  OrderValidationError,
  orderSummary,
  orderTotalCents,
  parseOrder,
  workflowIdFor,
  type OrderInput,
  type OrderResult,
} from './domain/order';
import { parseWith, wholeNumber } from './domain/validation';
import { listUrl, operatorViews, readConfig, runUrl, type AppConfig } from './lib/config';
import { formatReport, RULES, temporalLookup } from './db/invariants';
import {
  LoadOptionsError,
  parseLoadOptions,
  progressBar,
  runLoad,
  workerProcesses,
  type LoadOptions,
} from './lib/load';
import { closedRunState } from './lib/closed-run';
import { RECONCILE_SCHEDULE_ID, SWEEP_SCHEDULE_ID, upsertSchedule } from './lib/schedules';
import { orderOutcome } from './lib/order-outcome';
import { openOrderStore, type OrderStore, type StoreRole } from './lib/order-store';
import { DEFAULT_SAGA_CONFIG } from './workflows/order-saga';
import {
  acceptedUpdate,
  cancelUpdate,
  RESOLVE_ACTIONS,
  resolveUpdate,
  stateQuery,
  type Acceptance,
  type ResolveAction,
  type SagaState,
} from './workflows/messages';
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

interface Out {
  out(line: string): void;
  err(line: string): void;
}

/** The configuration, plus a Temporal client to reuse (a long-lived caller, such as the chaos soak's operators). */
type CliConfig = AppConfig & { client?: Client };

async function connect(cfg: CliConfig): Promise<Client> {
  if (cfg.client) return cfg.client;
  let dataConverter;
  try {
    dataConverter = dataConverterFor(requirePayloadKeys());
  } catch (err) {
    throw new CliError((err as Error).message, EXIT.notCompleted);
  }
  try {
    const connection = await Connection.connect({ address: cfg.temporalAddress, connectTimeout: '5s' });
    return new Client({ connection, namespace: cfg.namespace, dataConverter });
  } catch (err) {
    throw new CliError(
      `cannot reach Temporal at ${cfg.temporalAddress}: ${(err as Error).message} (is "npm start" running?)`,
      EXIT.notCompleted,
    );
  }
}

/** The store of `role` for `command`; without a URL for it the command cannot run (exit 1). */
function needStore(cfg: AppConfig, role: StoreRole, command: string, max = 1): OrderStore {
  const store = openOrderStore(cfg, role, { max });
  if (store) return store;
  const variable = role === 'reader' ? 'READER_DATABASE_URL or DATABASE_URL' : 'DATABASE_URL';
  throw new CliError(`${command} needs ${variable} (or a running "npm start")`, EXIT.notCompleted);
}

// ---- Option values: each parser names what it wants; commander names the option ----------------

/** A whole number from min to max (the shared rule of domain/validation.ts). */
const whole =
  (min: number, max: number) =>
  (text: string): number =>
    checked(wholeNumber(min, max, `Expected a whole number from ${min} to ${max}.`), number(text));

/** Text to a number; what range it must be in is the schema's to say (lib/load.ts for load's options). */
function number(text: string): number {
  const n = Number(text);
  if (text.trim() === '' || !Number.isFinite(n)) throw new InvalidArgumentError('Expected a number.');
  return n;
}

/** The value, if `schema` accepts it; else its problem, for commander to print after the option's name. */
function checked<S extends GenericSchema>(schema: S, value: unknown, what = ''): InferOutput<S> {
  return parseWith(schema, value, (_field, problem) => {
    throw new InvalidArgumentError(what ? `Expected ${what}: it ${problem}.` : problem);
  });
}

const idArg =
  (what: string) =>
  (text: string): string =>
    checked(IdSchema, text, what);

/** A Schedule interval: a whole number of s, m, h or d, at least a minute. */
function interval(v: string): string {
  if (!/^\d+(s|m|h|d)$/.test(v) || Number.parseInt(v, 10) === 0 || (v.endsWith('s') && Number.parseInt(v, 10) < 60)) {
    throw new InvalidArgumentError('Expected a duration such as 15m, 1h or 1d (at least 60s).');
  }
  return v;
}

/** A whole number from 1 to 100 (a count an operator sets). */
function positiveInt(text: string): number {
  const n = Number(text);
  if (!/^\d+$/.test(text.trim()) || n < 1 || n > 100)
    throw new InvalidArgumentError('Expected a whole number from 1 to 100.');
  return n;
}

/** An interval() duration (60s, 15m, 1h, 1d) in milliseconds. */
function durationMs(v: string): number {
  const unit = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 }[v.slice(-1) as 's' | 'm' | 'h' | 'd'];
  return Number.parseInt(v, 10) * unit;
}

/** Resolves to LATE after ms, without holding the process open. */
const lateAfter = (ms: number): Promise<typeof LATE> => sleep(Math.max(0, ms), LATE, { ref: false });

/** Reads and validates an order file. Throws CliError(2) naming the field; with a store, also checks the catalogue and duplicates (3). */
export async function loadOrder(
  file: string,
  store?: Pick<OrderStore, 'catalogueProblem' | 'orderExists'>,
): Promise<OrderInput> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    throw new CliError(
      `invalid input: file: cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
      EXIT.invalid,
    );
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
  if (store) {
    const problem = await store.catalogueProblem(order);
    if (problem) throw new CliError(`invalid order: ${problem.field}: ${problem.problem}`, EXIT.invalid);
    if (await store.orderExists(order.orderId))
      throw new CliError(`duplicate order: orderId: ${order.orderId} already exists`, EXIT.duplicate);
  }
  return order;
}

function printResult(
  io: Out,
  json: boolean,
  r: {
    orderId: string;
    workflowId: string;
    runId?: string;
    status: string;
    reason?: string;
    uiUrl: string;
    accepted?: boolean;
    answerMs?: number;
    durationMs?: number;
  },
): void {
  if (json) return io.out(JSON.stringify(r));
  const early = r.accepted === undefined ? '' : r.accepted ? ' — accepted, the saga runs on' : ' — refused';
  const took =
    r.answerMs !== undefined
      ? ` [answer in ${r.answerMs} ms]`
      : r.durationMs !== undefined
        ? ` [end to end in ${r.durationMs} ms]`
        : '';
  io.out(`order ${r.orderId}: ${r.status}${r.reason ? ` (${r.reason})` : ''}${early}${took}`);
  io.out(`  workflow: ${r.workflowId}${r.runId ? ` run ${r.runId}` : ''}`);
  io.out(`  web ui:   ${r.uiUrl}`);
}

async function place(
  opts: { file: string; json?: boolean; noWait: boolean; waitSeconds: number },
  cfg: CliConfig,
  io: Out,
): Promise<number> {
  const store = openOrderStore(cfg, 'app'); // without DATABASE_URL the workflow's boundary checks the catalogue
  let order: OrderInput;
  try {
    order = await loadOrder(opts.file, store);
  } finally {
    await store?.close();
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
  const waitMs = opts.waitSeconds * 1000;
  // The call waits for the saga's early answer; past --wait it is cut, not left to the server's long poll.
  const cut = new AbortController();
  let acceptance: Acceptance | typeof LATE | Error;
  try {
    acceptance = await Promise.race([
      client.withAbortSignal(cut.signal, () =>
        client.workflow.executeUpdateWithStart(acceptedUpdate, { startWorkflowOperation: start }),
      ),
      lateAfter(waitMs),
    ]);
  } catch (err) {
    if (err instanceof WorkflowExecutionAlreadyStartedError) {
      throw new CliError(
        `duplicate order: orderId: ${order.orderId} already has workflow ${workflowId}`,
        EXIT.duplicate,
      );
    }
    // The saga started but ended before it could answer (it failed at its boundary, say): its outcome says why.
    if (!(err instanceof WorkflowUpdateFailedError)) throw err;
    acceptance = err;
  }
  const answerMs = Date.now() - sent;
  if (acceptance === LATE) {
    cut.abort();
    start.workflowHandle().catch(() => undefined); // cut with the call
    const run = await client.workflow
      .getHandle(workflowId)
      .describe()
      .catch(() => undefined);
    throw new CliError(
      run
        ? `order ${order.orderId}: started, but no answer within ${opts.waitSeconds} s (is a worker running?); see ${runUrl(cfg, workflowId, run.runId)}`
        : `order ${order.orderId}: no answer within ${opts.waitSeconds} s, and the server does not show it started; see client.ts status ${order.orderId}`,
      EXIT.notCompleted,
    );
  }
  const handle = await start.workflowHandle();
  // The start's run ID, when the server's answer carried it; else as the server describes the run.
  const runId =
    (handle as Partial<WorkflowHandleWithFirstExecutionRunId>).firstExecutionRunId || (await handle.describe()).runId;
  const base = { orderId: order.orderId, workflowId, runId, uiUrl: runUrl(cfg, workflowId, runId) };
  // With --no-wait, the early answer: accepted (RESERVED) and running on, or refused with the reason.
  // A saga that ended before it could answer: wait for the end, which says why (an invalid order is
  // exit 2, as if the client had caught it).
  if (opts.noWait && !(acceptance instanceof Error)) {
    printResult(io, !!opts.json, {
      ...base,
      status: acceptance.status,
      ...(acceptance.reason ? { reason: acceptance.reason } : {}),
      accepted: acceptance.accepted,
      answerMs,
    });
    if (acceptance.status === 'ALREADY_SETTLED') return EXIT.duplicate;
    return acceptance.accepted ? EXIT.ok : EXIT.notCompleted;
  }
  let result: OrderResult;
  try {
    result = await orderOutcome(handle); // a FAILED or CANCELLED order fails its workflow: read back as a result
  } catch (err) {
    if (!(err instanceof WorkflowFailedError)) throw err;
    const cause: (Error & { type?: string }) | undefined = err.cause;
    const reason = cause?.message ?? err.message;
    // Without DATABASE_URL the client cannot check the catalogue; the workflow's boundary did.
    if (cause?.type === 'InvalidOrder') throw new CliError(`invalid order: ${reason}`, EXIT.invalid);
    printResult(io, !!opts.json, { ...base, status: 'FAILED', reason, durationMs: Date.now() - sent });
    return EXIT.notCompleted;
  }
  // End to end: from the start request until the saga's outcome is known.
  printResult(io, !!opts.json, {
    ...base,
    status: result.status,
    ...(result.reason ? { reason: result.reason } : {}),
    durationMs: Date.now() - sent,
  });
  if (result.status === 'ALREADY_SETTLED') return EXIT.duplicate; // another run had settled this order
  return result.status === 'COMPLETED' ? EXIT.ok : EXIT.notCompleted;
}

function printState(io: Out, json: boolean, cfg: AppConfig, s: SagaState): void {
  const workflowId = workflowIdFor(s.orderId);
  if (json) return io.out(JSON.stringify({ ...s, workflowId, uiUrl: runUrl(cfg, workflowId) }));
  io.out(`order ${s.orderId}: ${s.status}${s.reason ? ` (${s.reason})` : ''}`);
  io.out(`  step:          ${s.step}${s.awaiting ? ` (awaiting operator: ${s.awaiting})` : ''}`);
  io.out(`  steps done:    ${s.stepsDone.join(' → ') || '-'}`);
  io.out(
    `  compensations: ${s.compensations.length ? [...s.compensations].reverse().join(' ← ') : '-'}${s.compensationsRun.length ? ` (ran: ${s.compensationsRun.join(', ')})` : ''}`,
  );
  io.out(`  unknowns:      ${s.unknowns.join(', ') || '-'}`);
  io.out(
    `  attempts:      ${
      Object.entries(s.attempts)
        .map(([k, v]) => `${k}=${v}`)
        .join(' ') || '-'
    }`,
  );
  io.out(`  web ui:        ${runUrl(cfg, workflowId)}`);
}

const noOrder = (orderId: string): CliError =>
  new CliError(`no order ${orderId} (no workflow ${workflowIdFor(orderId)})`, EXIT.notCompleted);

async function status(orderId: string, opts: { json?: boolean }, cfg: CliConfig, io: Out): Promise<number> {
  const client = await connect(cfg);
  try {
    const handle = client.workflow.getHandle(workflowIdFor(orderId));
    const described = await handle.describe();
    // An open run's workers answer its query; a closed one may be pinned to a build already drained
    // and removed, so its state comes from the server (description, result, history) instead.
    const state =
      described.status.name === 'RUNNING'
        ? await handle.query(stateQuery)
        : await closedRunState(client, orderId, described);
    printState(io, !!opts.json, cfg, state);
    return EXIT.ok;
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) throw noOrder(orderId);
    throw err;
  }
}

type UpdateRequest =
  { command: 'cancel'; reason: string } | { command: 'resolve'; action: ResolveAction; note?: string };

/** The cancel and resolve Updates, bounded by waitSeconds. */
async function update(
  orderId: string,
  req: UpdateRequest,
  opts: { json?: boolean; waitSeconds: number },
  cfg: CliConfig,
  io: Out,
): Promise<number> {
  const { command } = req;
  const client = await connect(cfg);
  const handle = client.workflow.getHandle(workflowIdFor(orderId));
  const ended = async (): Promise<CliError> => {
    const described = await handle.describe();
    const status = described.typedSearchAttributes.get(OrderStatusKey) ?? described.status.name;
    return new CliError(
      `${command} refused: order ${orderId} has ended (${status}); there is nothing to ${command}`,
      EXIT.notCompleted,
    );
  };
  let found = false;
  try {
    const described = await handle.describe();
    found = true;
    if (described.status.name !== 'RUNNING') throw await ended();
    // Bounded: a saga that cannot answer (no worker, or its workflow task failing) gets a clear
    // message instead of a command that never returns.
    const until = Date.now() + opts.waitSeconds * 1000;
    const late = <T>(p: Promise<T>): Promise<T | typeof LATE> => Promise.race([p, lateAfter(until - Date.now())]);
    const started =
      req.command === 'cancel'
        ? await late(
            handle.startUpdate(cancelUpdate, { args: [req.reason], waitForStage: WorkflowUpdateStage.ACCEPTED }),
          )
        : await late(
            handle.startUpdate(resolveUpdate, {
              args: [{ action: req.action, ...(req.note ? { note: req.note } : {}) }],
              waitForStage: WorkflowUpdateStage.ACCEPTED,
            }),
          );
    if (started === LATE) {
      throw new CliError(
        `${command}: no answer from order ${orderId} within ${opts.waitSeconds} s (is a worker running?); the request may still apply when it is: ` +
          `check client.ts status ${orderId}, or the run in the Web UI: ${runUrl(cfg, workflowIdFor(orderId))}`,
        EXIT.notCompleted,
      );
    }
    const state = await late(started.result());
    if (state === LATE) {
      io.out(
        `order ${orderId}: ${command} accepted; the saga is still working on it after ${opts.waitSeconds} s (client.ts status ${orderId})`,
      );
      return EXIT.ok;
    }
    printState(io, !!opts.json, cfg, state);
    return EXIT.ok;
  } catch (err) {
    // The run ended between the describe and the Update: the server answers "not found" for it.
    if (err instanceof WorkflowNotFoundError && found) throw await ended();
    if (err instanceof WorkflowNotFoundError) throw noOrder(orderId);
    if (err instanceof WorkflowUpdateFailedError)
      throw new CliError(`${command} refused: ${err.cause?.message ?? err.message}`, EXIT.notCompleted);
    // The server dropped the request before the saga answered it (the run was reset or closed, say).
    if (err instanceof ServiceError)
      throw new CliError(
        `${command}: the server gave no answer for order ${orderId} (${err.cause?.message ?? err.message}); ` +
          `see client.ts status ${orderId} before sending it again`,
        EXIT.notCompleted,
      );
    throw err;
  }
}

async function list(opts: { status?: string; json?: boolean }, cfg: CliConfig, io: Out): Promise<number> {
  const client = await connect(cfg);
  const query = `WorkflowType = 'orderSaga'${opts.status ? ` AND OrderStatus = '${opts.status}'` : ''}`;
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
  if (opts.json) io.out(JSON.stringify(rows));
  else if (rows.length === 0) io.out('no orders');
  else
    for (const r of rows)
      io.out(
        `${r.orderId.padEnd(28)} ${String(r.status).padEnd(16)} ${String(r.customerId ?? '').padEnd(16)} ${String(r.totalCents ?? '').padStart(10)}  ${r.uiUrl}`,
      );
  return EXIT.ok;
}

async function check(opts: { json?: boolean }, cfg: CliConfig, io: Out): Promise<number> {
  const store = needStore(cfg, 'reader', 'check'); // read-only: it reads the provider's ledger too
  try {
    // Temporal's visibility tells an open order whose workflow has closed (that rule needs the server).
    const client = await connect(cfg).catch((err: Error) => {
      io.err(`note: ${err.message}; the rule "${RULES.closedRunTerminal}" is not checked`);
      return undefined;
    });
    const report = await store.checkInvariants({
      deadlineMs: DEFAULT_SAGA_CONFIG.deadlineMs,
      ...(client ? { workflows: temporalLookup(client) } : {}),
    });
    if (opts.json) io.out(JSON.stringify(report));
    else for (const line of formatReport(report)) io.out(line);
    return report.violations.length === 0 ? EXIT.ok : EXIT.notCompleted;
  } finally {
    await store.close();
  }
}

export { RECONCILE_SCHEDULE_ID, SWEEP_SCHEDULE_ID } from './lib/schedules';

/** Creates (or updates) one of the application's Schedules and says where to see it. */
async function schedule(
  req: { scheduleId: string; workflowType: string; every: string; args?: unknown[]; json?: boolean },
  cfg: CliConfig,
  io: Out,
): Promise<number> {
  const client = await connect(cfg);
  const { created } = await upsertSchedule(client, { ...req, taskQueue: cfg.taskQueue });
  const url = `${cfg.uiUrl}/namespaces/${encodeURIComponent(cfg.namespace)}/schedules/${req.scheduleId}`;
  if (req.json) io.out(JSON.stringify({ scheduleId: req.scheduleId, every: req.every, created, uiUrl: url }));
  else io.out(`schedule ${req.scheduleId}: ${created ? 'created' : 'updated'}, every ${req.every}\n  web ui: ${url}`);
  return EXIT.ok;
}

async function findings(opts: { json?: boolean }, cfg: CliConfig, io: Out): Promise<number> {
  const store = needStore(cfg, 'reader', 'findings');
  let last;
  try {
    last = await store.lastReconciliation();
  } finally {
    await store.close();
  }
  if (!last) {
    if (opts.json) io.out(JSON.stringify({ run: null, findings: [] }));
    else io.out('no reconciliation has run yet (client.ts schedule reconcile)');
    return EXIT.ok;
  }
  if (opts.json) io.out(JSON.stringify(last));
  else {
    io.out(
      `reconciliation ${last.run.runId} at ${last.run.at}: ${last.run.orders} orders, ${last.findings.length} finding(s)`,
    );
    for (const f of last.findings)
      io.out(`  ${f.rule}: ${f.detail}${f.orderIds.length ? ` [orders: ${f.orderIds.join(', ')}]` : ''}`);
  }
  return last.findings.length === 0 ? EXIT.ok : EXIT.notCompleted;
}

async function sweeps(
  opts: { json?: boolean; order?: string; limit: number },
  cfg: CliConfig,
  io: Out,
): Promise<number> {
  const store = needStore(cfg, 'reader', 'sweeps');
  let rows;
  try {
    rows = await store.sweeperActions({ limit: opts.limit, ...(opts.order ? { orderId: opts.order } : {}) });
  } finally {
    await store.close();
  }
  if (opts.json) io.out(JSON.stringify({ actions: rows }));
  else if (rows.length === 0) io.out('the sweeper has done nothing yet (client.ts schedule sweep)');
  else
    for (const r of rows)
      io.out(`${r.at}  ${r.action.padEnd(7)} ${r.orderId}: ${r.reason}${r.newRunId ? ` (new run ${r.newRunId})` : ''}`);
  return EXIT.ok;
}

/** `keys`: the payload keys this process would use; `keys rotate`: a new current key in the key file. */
function keys(action: string | undefined, opts: { json?: boolean }, io: Out): number {
  if (action !== undefined && action !== 'rotate')
    throw new CliError(`keys: unknown action "${action}" (expected nothing, to list, or "rotate")`, EXIT.invalid);
  try {
    if (action === 'rotate') {
      if (process.env.PAYLOAD_KEYS?.trim())
        throw new CliError(
          'keys rotate changes the key file, but PAYLOAD_KEYS is set: add the new key at the front of PAYLOAD_KEYS instead (docs: SECURITY.md)',
          EXIT.notCompleted,
        );
      const file = process.env.PAYLOAD_KEY_FILE ? path.resolve(process.env.PAYLOAD_KEY_FILE) : DEFAULT_KEY_FILE;
      const r = rotateKeyFile(file);
      if (opts.json) io.out(JSON.stringify({ file, ...r }));
      else {
        io.out(`new current key ${r.current} in ${file} (${r.count} keys; ${r.previous} and older ones still decode)`);
        io.out('restart the workers, the codec server (npm start) and any long-lived client so they seal with it');
      }
      return EXIT.ok;
    }
    const k = requirePayloadKeys();
    const ids = [...k.keys.keys()];
    if (opts.json) io.out(JSON.stringify({ source: k.source, current: k.current, keys: ids }));
    else io.out(`payload keys from ${k.source}: current ${k.current}; can decode ${ids.join(', ')}`);
    return EXIT.ok;
  } catch (err) {
    if (err instanceof CliError) throw err;
    throw new CliError((err as Error).message, EXIT.notCompleted);
  }
}

async function fetchStats(cfg: AppConfig): Promise<SkuStats[]> {
  let res: Response;
  try {
    res = await fetch(`${cfg.workerMetricsUrl}/stats`, { signal: AbortSignal.timeout(5_000) });
  } catch (err) {
    throw new CliError(
      `cannot reach the worker's metrics at ${cfg.workerMetricsUrl}: ${(err as Error).message} (is the worker running?)`,
      EXIT.notCompleted,
    );
  }
  return ((await res.json()) as { skus: SkuStats[] }).skus;
}

const band = (rate: number): string =>
  rate < ABORT_RATE_HEALTHY ? 'healthy' : rate > ABORT_RATE_CRITICAL ? 'CRITICAL' : 'warning';
const pct = (x: number): string => `${(x * 100).toFixed(1)} %`;

async function stats(opts: { json?: boolean }, cfg: CliConfig, io: Out): Promise<number> {
  const skus = await fetchStats(cfg);
  if (opts.json)
    return (io.out(JSON.stringify({ skus: skus.map((s) => ({ ...s, health: band(s.abortRate) })) })), EXIT.ok);
  if (skus.length === 0) return (io.out('no reservations yet'), EXIT.ok);
  io.out(
    `${'sku'.padEnd(28)} ${'attempts'.padStart(9)} ${'aborts'.padStart(8)} ${'abort rate'.padStart(11)} ${'recent'.padStart(8)} ${'fallbacks'.padStart(10)} ${'lane'.padStart(6)}  health`,
  );
  for (const s of skus) {
    io.out(
      `${s.sku.padEnd(28)} ${String(s.attempts).padStart(9)} ${String(s.aborts).padStart(8)} ${pct(s.abortRate).padStart(11)} ${pct(s.recentAbortRate).padStart(8)} ${String(s.fallbacks).padStart(10)} ${String(s.laneCommits).padStart(6)}  ${band(s.abortRate)}`,
    );
  }
  return EXIT.ok;
}

interface LoadCliOptions {
  orders: number;
  concurrency: number;
  hotSkus: number;
  hotShare: number;
  declineShare: number;
  workers?: number;
  json?: boolean;
}

async function load(opts: LoadCliOptions, cfg: CliConfig, io: Out): Promise<number> {
  const { orders, concurrency, hotSkus, hotShare, declineShare } = opts;
  let loadOpts: LoadOptions;
  try {
    // First, before anything is reached: the options' rules are the schema's, and its error names the option.
    loadOpts = parseLoadOptions({ orders, concurrency, hotSkus, hotShare, declineShare, taskQueue: cfg.taskQueue });
  } catch (err) {
    if (err instanceof LoadOptionsError) throw new CliError(`invalid input: ${err.message}`, EXIT.invalid);
    throw err;
  }
  const store = needStore(cfg, 'app', 'load', 2); // it creates its products
  try {
    const client = await connect(cfg);
    const workers = await workerProcesses(client, cfg.taskQueue);
    if (opts.workers !== undefined && workers.length < opts.workers) {
      throw new CliError(
        `load --workers ${opts.workers}: ${workers.length} worker process(es) poll task queue ${cfg.taskQueue}${workers.length ? ` (${workers.join(', ')})` : ''}; start them with npm start -- --workers ${opts.workers}`,
        EXIT.notCompleted,
      );
    }
    const bar = progressBar();
    const summary = await runLoad(client, store, { ...loadOpts, onProgress: bar, stats: () => fetchStats(cfg) });
    bar.end();
    const { orderIds: _ids, ...printable } = summary;
    if (opts.json) io.out(JSON.stringify({ ...printable, workers: workers.length }));
    else {
      io.out(
        `load ${summary.runId}: ${summary.orders} orders, concurrency ${concurrency}, ${hotSkus} hot SKU(s) taking ${pct(hotShare)}, ${workers.length} worker process(es) polling`,
      );
      io.out(`  throughput:   ${summary.ordersPerSecond} orders/s over ${summary.seconds} s`);
      io.out(
        `  saga latency: p50 ${summary.latencyMs.p50} ms, p99 ${summary.latencyMs.p99} ms, max ${summary.latencyMs.max} ms`,
      );
      io.out(
        `  statuses:     ${
          Object.entries(summary.statuses)
            .map(([k, v]) => `${k} ${v}`)
            .join(', ') || '-'
        }${summary.errors ? `; errors ${summary.errors}` : ''}`,
      );
      if (summary.abortRate !== undefined) {
        io.out(
          `  abort rate:   ${pct(summary.abortRate)} (${band(summary.abortRate)}) over ${summary.casAttempts} CAS attempts; ${summary.fallbacks} sent to the serial lane`,
        );
      }
      for (const e of summary.firstErrors) io.err(`  error: ${e}`);
    }
    return summary.errors === 0 ? EXIT.ok : EXIT.notCompleted;
  } finally {
    await store.close();
  }
}

function views(opts: { customer?: string; json?: boolean }, cfg: AppConfig, io: Out): number {
  const rows = operatorViews(new Date(), opts.customer).map((v) => ({ ...v, url: listUrl(cfg, v.query) }));
  if (opts.json) io.out(JSON.stringify(rows));
  else for (const r of rows) io.out(`${r.name}:\n  ${r.query}\n  ${r.url}`);
  return EXIT.ok;
}

const jsonOption = (what = 'print JSON instead of text') => new Option('--json', what);
const waitOption = (what: string) => new Option('--wait <seconds>', what).argParser(whole(1, 3600)).default(60);
const orderIdArgument = ['<orderId>', 'the order', idArg('an order ID')] as const;

/** The command line, with each command's options, checks and help; `done` receives the exit code. */
function program(cfg: CliConfig, io: Out, done: (code: number) => void): Command {
  const cli = new Command('npx tsx client.ts')
    .description("The order saga's command line: place orders, follow and steer their sagas, check the data.")
    .exitOverride()
    .configureHelp({ helpWidth: 100 })
    .configureOutput({
      writeOut: (s) => io.out(s.replace(/\n$/, '')),
      writeErr: (s) => io.err(s.replace(/\n$/, '')),
      // Commander's own errors are invalid input (exit 2); each names the option or argument.
      outputError: (s, write) => write(`invalid input: ${s.replace(/^error: /, '')}`),
    })
    .showHelpAfterError('(add --help for usage)')
    .addHelpText(
      'after',
      `
Environment: TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TASK_QUEUE, TEMPORAL_UI_URL, DATABASE_URL (the
application's role), READER_DATABASE_URL (the read-only role: check, findings), WORKER_METRICS_URL
(stats). Unset: what a running "npm start" recorded in .data/runtime.json, else loopback defaults.

Exit codes: 0 success (place: the order COMPLETED); 1 the order ended otherwise, or the command
failed or was refused; 2 invalid input (named on stderr; nothing started, nothing written);
3 duplicate order ID.`,
    );

  const placeCmd = cli
    .command('place')
    .summary('start an order saga: its early answer, then its end')
    .description(
      `Validates the order (with DATABASE_URL also against the catalogue, and that its ID is new), then starts workflow order:<orderId> with an Update-with-Start: one call starts the saga and gets its early answer, accepted (stock reserved) or refused with the reason. Unless --no-wait, it then waits for the end. Prints the order ID, the status and the run's Web UI URL.
Exit codes: 0 COMPLETED (with --no-wait: accepted); 1 ended otherwise, or refused; 2 invalid input; 3 duplicate order ID, or ALREADY_SETTLED (an earlier run settled the order; this one changed nothing).`,
    )
    .requiredOption('--file <order.json>', 'the order, as JSON (see examples/order.json)')
    .addOption(
      jsonOption(
        'one JSON object: orderId, workflowId, runId, status, reason, uiUrl (with --no-wait also accepted and answerMs)',
      ),
    )
    .addOption(waitOption('seconds to wait for the early answer; with none by then (no worker?), exit 1'))
    .option('--no-wait', 'return with the early answer (status RESERVED when accepted)');
  // --wait <seconds> and --no-wait share commander's value "wait": note each as it comes.
  let noWait = false;
  let waitSeconds = 60;
  placeCmd.on('option:no-wait', () => void (noWait = true));
  placeCmd.on('option:wait', () => void (waitSeconds = Number(placeCmd.getOptionValue('wait'))));
  placeCmd.action(async (opts) =>
    done(await place({ file: opts.file, json: !!opts.json, noWait, waitSeconds }, cfg, io)),
  );

  cli
    .command('status')
    .summary("the saga's state and its Web UI link")
    .description(
      `The saga's status, current step, steps done, compensation stack, unknowns and attempts (its "state" query; for a closed run, read from its history and result, so no worker of its build is needed), and its Web UI URL. Exit code 1 when there is no such order.`,
    )
    .argument(...orderIdArgument)
    .addOption(jsonOption())
    .action(async (orderId, opts) => done(await status(orderId, opts, cfg, io)));

  cli
    .command('cancel')
    .summary('cancel an order before its shipment (runs the compensations)')
    .description(
      `Sends the "cancel" Update. Accepted before the pivot (the shipment): the compensations run and the order ends CANCELLED. After the pivot it is refused with the reason (exit 1).`,
    )
    .argument(...orderIdArgument)
    .option('--reason <text>', 'why, recorded with the order', 'cancelled by operator')
    .addOption(
      waitOption(
        'seconds to wait for the saga: no answer by then exits 1 (the request may still apply); accepted but still compensating exits 0',
      ),
    )
    .addOption(jsonOption("print the saga's state as JSON"))
    .action(async (orderId, opts) =>
      done(
        await update(
          orderId,
          { command: 'cancel', reason: opts.reason },
          { json: !!opts.json, waitSeconds: opts.wait },
          cfg,
          io,
        ),
      ),
    );

  cli
    .command('resolve')
    .summary('operator action on an UNKNOWN charge or a saga that needs attention')
    .description(
      `Sends the "resolve" Update to a saga that waits for an operator:
  charge-succeeded / charge-failed   settle an UNKNOWN charge after checking with the provider
  retry                              retry the failed compensation or forward step
  mark-resolved                      the failed step was done by hand; carry on
Exit code 1 when refused (the saga is not waiting for that action).`,
    )
    .argument(...orderIdArgument)
    .addOption(new Option('--action <action>', 'what to do').choices(RESOLVE_ACTIONS).makeOptionMandatory())
    .option('--note <text>', "the operator's note, recorded with the action")
    .addOption(waitOption('seconds to wait for the saga, as for cancel'))
    .addOption(jsonOption("print the saga's state as JSON"))
    .action(async (orderId, { action, note, wait, json }) =>
      done(
        await update(
          orderId,
          { command: 'resolve', action, ...(note ? { note } : {}) },
          { json: !!json, waitSeconds: wait },
          cfg,
          io,
        ),
      ),
    );

  cli
    .command('list')
    .summary("orders by status, from Temporal's visibility store")
    .description("Lists orders (up to 1000) from Temporal's visibility store, by the OrderStatus search attribute.")
    .addOption(new Option('--status <STATUS>', 'only orders with this status').choices(ORDER_STATUSES))
    .addOption(jsonOption())
    .action(async (opts) => done(await list(opts, cfg, io)));

  cli
    .command('stats')
    .summary('per-SKU CAS attempts, aborts, abort rate, fallbacks')
    .description(
      `Per-SKU inventory metrics from the worker (WORKER_METRICS_URL), counted since it started: CAS attempts, aborts, abort rate (aborted attempts over task executions), recent abort rate, fallbacks to the serial lane and lane commits, with a health band (healthy below ${ABORT_RATE_HEALTHY * 100}%, critical above ${ABORT_RATE_CRITICAL * 100}%).`,
    )
    .addOption(jsonOption())
    .action(async (opts) => done(await stats(opts, cfg, io)));

  cli
    .command('check')
    .summary("invariant check of the database and the provider's ledger")
    .description(
      `Reads the application database and the provider's ledger in one snapshot, through the read-only role (READER_DATABASE_URL; else DATABASE_URL), and reports every violation with its order IDs. Exit code 0 when clean, 1 when there are violations. The rules (the last one asks Temporal):
${Object.values(RULES)
  .map((r) => `  - ${r}`)
  .join('\n')}`,
    )
    .addOption(jsonOption())
    .action(async (opts) => done(await check(opts, cfg, io)));

  const schedules = cli
    .command('schedule')
    .summary('reconcile | sweep: create (or update) one of the Schedules')
    .description('Temporal Schedules of this application: reconcile (the invariant check) and sweep (the sweeper).');
  schedules
    .command('reconcile')
    .summary('create (or update) the Schedule that runs the reconciliation')
    .description(
      `Creates the Temporal Schedule "reconcile" (or updates its interval) that runs the reconciliation workflow every <duration>. Each run checks every invariant, sweeps for orphan charges and overdue sagas, and records findings (client.ts findings); it never compensates.`,
    )
    .option('--every <duration>', 'how often, for example 15m, 6h, 1d (at least 60s)', interval, '1h')
    .addOption(jsonOption())
    .action(async (opts) =>
      done(
        await schedule(
          { scheduleId: RECONCILE_SCHEDULE_ID, workflowType: 'reconcileWorkflow', every: opts.every, json: opts.json },
          cfg,
          io,
        ),
      ),
    );
  schedules
    .command('sweep')
    .summary('create (or update) the Schedule that runs the sweeper')
    .description(
      `Creates the Temporal Schedule "sweep" (or updates it) that runs the sweeper every <duration>: an open order whose saga has closed (terminated, failed) or is missing gets its saga started again from the order row (at most --max-restarts times, then a person is told); a run whose workflow task keeps failing is reset once to its last completed workflow task, then a person; an order in NEEDS_ATTENTION for longer than --attention-age is alerted. It never compensates or charges. What it did: client.ts sweeps.`,
    )
    .option('--every <duration>', 'how often, for example 1m, 5m (at least 60s)', interval, '1m')
    .option('--max-restarts <n>', 'restarts per order before a person is told', positiveInt, 3)
    .option('--attention-age <duration>', 'alert an order in NEEDS_ATTENTION this long', interval, '1h')
    .addOption(jsonOption())
    .action(async (opts) =>
      done(
        await schedule(
          {
            scheduleId: SWEEP_SCHEDULE_ID,
            workflowType: 'sweeperWorkflow',
            every: opts.every,
            args: [{ maxRestarts: opts.maxRestarts, attentionAgeMs: durationMs(opts.attentionAge) }],
            json: opts.json,
          },
          cfg,
          io,
        ),
      ),
    );

  cli
    .command('sweeps')
    .summary('what the sweeper did, newest first')
    .description(
      "Prints the sweeper's latest actions (read through the read-only role): restart (a stranded order's saga started again), reset (a run whose workflow task kept failing), person (handed to a person, with the reason), alert (NEEDS_ATTENTION too long).",
    )
    .option('--order <orderId>', 'only this order', idArg('an order ID'))
    .option('--limit <n>', 'how many', positiveInt, 20)
    .addOption(jsonOption())
    .action(async (opts) => done(await sweeps(opts, cfg, io)));

  cli
    .command('findings')
    .summary("the last reconciliation run's findings")
    .description(
      "Prints the last reconciliation run's findings (read through the read-only role). Exit code 1 when it found any.",
    )
    .addOption(jsonOption())
    .action(async (opts) => done(await findings(opts, cfg, io)));

  cli
    .command('load')
    .summary('a load: N orders, C in flight, K hot SKUs')
    .description(
      `Places N orders (1 line, 1 unit each) with C in flight, a share of them on K hot SKUs and the rest on 50 cold ones, on products the run creates (LOAD-<run>-…, so it needs DATABASE_URL). Shows a progress bar on a terminal, then orders/s, p50/p99 saga latency, statuses, the abort rate and the worker processes polling the task queue.`,
    )
    // Their ranges are the load options' schema's (lib/load.ts), checked before anything is reached.
    .requiredOption('--orders <N>', 'how many orders', number)
    .option('--concurrency <C>', 'orders in flight', number, 10)
    .option('--hot-skus <K>', 'how many hot SKUs', number, 1)
    .option('--hot-share <F>', 'the share of orders on the hot SKUs, 0 to 1', number, 0.3)
    .option('--decline-share <F>', 'the share of orders paid with a declined card, 0 to 1', number, 0)
    .option(
      '--workers <W>',
      'refuse to start (exit 1, nothing written) unless W worker processes poll the task queue',
      whole(1, 64),
    )
    .addOption(jsonOption())
    .action(async (opts) => done(await load(opts, cfg, io)));

  cli
    .command('keys')
    .summary("the payload encryption keys' IDs; rotate: a new current key")
    .description(
      'Without an action: the IDs of the payload keys this process has (from PAYLOAD_KEYS, PAYLOAD_KEY_FILE or .data/payload-keys.json) and which one is current; never the keys themselves. "keys rotate": adds a new key to the key file and makes it current; the old keys stay, so every payload they sealed still decodes. Processes read the file when they start.',
    )
    .argument('[action]', 'rotate')
    .addOption(jsonOption())
    .action((action: string | undefined, opts) => done(keys(action, opts, io)));

  cli
    .command('views')
    .summary('the Web UI list URLs an operator uses')
    .description(
      `The Web UI list views an operator uses, each as its visibility query and its URL: sagas that need attention, failed or cancelled in the last hour (times computed now), waiting on an unknown charge, and one customer's orders.`,
    )
    .option('--customer <customerId>', 'the customer for the last view', idArg('a customer ID'))
    .addOption(jsonOption())
    .action((opts) => done(views(opts, cfg, io)));

  return cli;
}

/**
 * Runs one command; returns its exit code. `shared.client`: a Temporal client to use instead of
 * connecting (callers that run many commands in one process).
 */
export async function runCli(
  argv: string[],
  config: AppConfig = readConfig(),
  io: Out = { out: (l) => process.stdout.write(`${l}\n`), err: (l) => process.stderr.write(`${l}\n`) },
  shared: { client?: Client } = {},
): Promise<number> {
  const cfg: CliConfig = { ...config, ...(shared.client ? { client: shared.client } : {}) };
  let code: number = EXIT.ok;
  try {
    await program(cfg, io, (c) => void (code = c)).parseAsync(argv, { from: 'user' });
    return code;
  } catch (err) {
    // Help asked for: 0. Any other parse error (already printed, naming the option), or no command: 2.
    if (err instanceof CommanderError) return err.exitCode === 0 ? EXIT.ok : EXIT.invalid;
    if (err instanceof CliError) {
      io.err(err.message);
      return err.code;
    }
    io.err(`error: ${(err as Error).message}`);
    return EXIT.notCompleted;
  }
}

if (require.main === module) {
  void runCli(process.argv.slice(2)).then((code) => process.exit(code));
}
