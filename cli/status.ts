/**
 * `status`: the saga's state and its Web UI link; also how a saga's state prints (status, cancel
 * and resolve print it alike) and the error for an order that has no workflow.
 */
import type { Command } from '@commander-js/extra-typings';
import { WorkflowNotFoundError, type WorkflowExecutionDescription, type WorkflowHandle } from '@temporalio/client';
import { awaitingFrom, isTerminal, workflowIdFor, type OrderStatus } from '../domain/order';
import { closedRunState } from '../orders/closed-run';
import type { OrderRowView } from '../orders/order-store';
import { stateQuery, type SagaState } from '../workflows/messages';
import { CliError, EXIT, type CliContext } from './context';
import { jsonOption, orderIdArgument } from './options';

export function printState(ctx: CliContext, json: boolean, s: SagaState): void {
  const { io, links } = ctx;
  const workflowId = workflowIdFor(s.orderId);
  if (json) return io.out(JSON.stringify({ ...s, workflowId, uiUrl: links.run(workflowId) }));
  io.out(`order ${s.orderId}: ${s.status}${s.reason ? ` (${s.reason})` : ''}`);
  io.out(`  step:          ${s.step}${s.awaiting ? ` (awaiting operator: ${s.awaiting})` : ''}`);
  if (s.awaiting === 'capture') {
    // What a person needs to decide an escalated capture: where the goods and the money are.
    io.out('  situation:     the goods shipped, the money not taken (the capture was refused or outlived its window)');
    io.out(
      `  choices:       client.ts resolve ${s.orderId} --action retry (capture again, the same key); ` +
        `--action mark-resolved (only once the provider shows a capture succeeded); ` +
        `else ask the customer for another payment`,
    );
  }
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
  io.out(`  web ui:        ${links.run(workflowId)}`);
}

export const noOrder = (orderId: string): CliError =>
  new CliError(`no order ${orderId} (no workflow ${workflowIdFor(orderId)})`, EXIT.notCompleted);

async function status(orderId: string, opts: { json?: boolean }, ctx: CliContext): Promise<number> {
  const client = await ctx.temporal();
  try {
    const handle = client.workflow.getHandle(workflowIdFor(orderId));
    const described = await handle.describe();
    // An open run's workers answer its query; a closed one may be pinned to a build already drained
    // and removed, so its state comes from the order row (its status and reason, where the row can be
    // read) and the server (the steps and compensations, from the history) instead.
    const state =
      described.status.name === 'RUNNING'
        ? await liveState(handle, orderId, described, ctx)
        : await closedRunState(client, orderId, described, await rowStatus(orderId, ctx));
    printState(ctx, !!opts.json, state);
    return EXIT.ok;
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return rowOnly(orderId, !!opts.json, ctx);
    throw err;
  }
}

/** The row's status and reason, for a closed run's state. */
async function rowStatus(
  orderId: string,
  ctx: CliContext,
): Promise<{ status: OrderStatus; reason?: string } | undefined> {
  const row = await rowOf(orderId, ctx);
  return typeof row === 'object' ? { status: row.status, ...(row.reason ? { reason: row.reason } : {}) } : undefined;
}

/** The order's row when the order store can be opened here, else undefined ('no store': none is set). */
async function rowOf(orderId: string, ctx: CliContext): Promise<OrderRowView | 'no store' | undefined> {
  const store = ctx.openStore('reader');
  if (!store) return 'no store';
  try {
    return await store.orderRow(orderId);
  } finally {
    await store.close();
  }
}

/**
 * How long `status` waits for a running saga's query before it reads the row instead. A worker with
 * the run cached answers in milliseconds, and one without it replays the history in well under a
 * second. The server waits longer: 10 s for a worker killed while it held the run (the run's sticky
 * queue, before the server turns to the run's task queue), and its 30 s query deadline for a build
 * nobody polls any more.
 */
export const STATE_QUERY_WAIT_MS = 5_000;

/** gRPC's codes for a call cancelled and a call past its deadline. */
const GRPC_CANCELLED = 1;
const GRPC_DEADLINE_EXCEEDED = 4;

/**
 * The query got no answer: the server says no worker polls the run's task queue for its build, or
 * it or the wait ran out of time (`deadline`, ms: the call then ends DEADLINE_EXCEEDED, or CANCELLED
 * when the SDK cuts it there). A cancel before the deadline, or any other failure, is not this.
 */
function noAnswerWithin(err: unknown, deadline: number): boolean {
  const ranOut = Date.now() >= deadline - 50;
  for (let e: unknown = err; e instanceof Error; e = (e as { cause?: unknown }).cause) {
    const details = (e as { details?: unknown }).details;
    const code = (e as { code?: unknown }).code;
    if (ranOut && (code === GRPC_CANCELLED || code === GRPC_DEADLINE_EXCEEDED)) return true;
    if (
      /no poller|worker may be down|deadline.exceeded|before a worker could process/i.test(
        `${e.message} ${typeof details === 'string' ? details : ''}`,
      )
    )
      return true;
  }
  return false;
}

/** A running saga whose query got no answer, and whose row cannot be read instead: why, and what to set. */
function unreadable(orderId: string, err: unknown, row: 'no store' | undefined): CliError {
  const why =
    row === 'no store'
      ? 'and no order store is set to read its row instead (READER_DATABASE_URL or DATABASE_URL)'
      : 'and the order store has no row for it';
  return new CliError(
    `order ${orderId}: its run's state query got no answer within ${STATE_QUERY_WAIT_MS / 1000} s, ${why} ` +
      `(the query: ${(err as Error).message})`,
    EXIT.notCompleted,
  );
}

/**
 * A running saga's `state` query. When no worker answers it within STATE_QUERY_WAIT_MS (the run is
 * pinned to a build whose workers are gone, after a deploy, while it waits for a person; or the worker
 * that held it was killed and the server still sends its query there), the same state is read as for a
 * closed run, from the row and the history, with what the row says a person is awaited for: a
 * resolve can still be sent (the sweeper moves the run once its task waits, and the row carries the
 * resolve to it).
 */
async function liveState(
  handle: WorkflowHandle,
  orderId: string,
  described: WorkflowExecutionDescription,
  ctx: CliContext,
): Promise<SagaState> {
  const client = await ctx.temporal();
  const deadline = Date.now() + STATE_QUERY_WAIT_MS;
  try {
    return await client.withDeadline(deadline, () => handle.query(stateQuery));
  } catch (err) {
    if (!noAnswerWithin(err, deadline)) throw err;
    const row = await rowOf(orderId, ctx);
    if (typeof row !== 'object') throw unreadable(orderId, err, row);
    // The history is read first: with the server itself down, its own error is what the person sees.
    const state = await closedRunState(client, orderId, described, {
      status: row.status,
      ...(row.reason ? { reason: row.reason } : {}),
    });
    ctx.io.err(
      `the run's state query got no answer within ${STATE_QUERY_WAIT_MS / 1000} s (no worker of its build polls ` +
        'any more, the worker that held the run was killed, its workers are too busy, or the server was slow to route it): ' +
        'read from the order row and the history',
    );
    if (row.status !== 'NEEDS_ATTENTION') return state;
    const awaiting = awaitingFrom(row.attentionFrom, row.attentionStep);
    const step =
      awaiting === 'compensation' && row.attentionStep
        ? `compensate:${row.attentionStep}`
        : (row.attentionStep ?? state.step);
    return { ...state, awaiting, step };
  }
}

/**
 * No run in Temporal (its history deleted, purged by retention, or lost with the server): the order
 * row still says where the order stands, and an open one waits for the sweeper to start it again.
 */
async function rowOnly(orderId: string, json: boolean, ctx: CliContext): Promise<number> {
  const store = ctx.openStore('reader');
  if (!store) throw noOrder(orderId);
  let row;
  try {
    row = await store.orderRow(orderId);
  } finally {
    await store.close();
  }
  if (!row) throw noOrder(orderId);
  const open = !isTerminal(row.status);
  const run = `no run in Temporal (workflow ${workflowIdFor(orderId)} is missing: deleted, purged or lost)`;
  const next = open ? '; the sweeper starts its saga again from this row' : '';
  if (json) ctx.io.out(JSON.stringify({ ...row, run: 'missing' }));
  else {
    ctx.io.out(`order ${orderId}: ${row.status}${row.reason ? ` (${row.reason})` : ''}, from the order row`);
    if (row.cancel) ctx.io.out(`  cancel recorded: ${row.cancel.reason} (request ${row.cancel.requestId})`);
    ctx.io.out(`  ${run}${next}`);
  }
  return EXIT.ok;
}

export function register(cli: Command, ctx: CliContext): void {
  cli
    .command('status')
    .summary("the saga's state and its Web UI link")
    .description(
      `The saga's status, current step, steps done, compensation stack, unknowns and attempts (its "state" query; for a closed run, its status and reason from the order row and the rest from its history, so no worker of its build is needed), and its Web UI URL. When Temporal has no run of the order (its history deleted or lost), the order row's status, and any cancel recorded on it. Exit code 1 when there is no such order.`,
    )
    .argument(...orderIdArgument)
    .addOption(jsonOption())
    .action(async (orderId, opts) => ctx.done(await status(orderId, opts, ctx)));
}
