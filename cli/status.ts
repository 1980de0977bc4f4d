/**
 * `status`: the saga's state and its Web UI link; also how a saga's state prints (status, cancel
 * and resolve print it alike) and the error for an order that has no workflow.
 */
import type { Command } from '@commander-js/extra-typings';
import { WorkflowNotFoundError } from '@temporalio/client';
import { isTerminal, workflowIdFor, type OrderStatus } from '../domain/order';
import { closedRunState } from '../orders/closed-run';
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
        ? await handle.query(stateQuery)
        : await closedRunState(client, orderId, described, await rowOf(orderId, ctx));
    printState(ctx, !!opts.json, state);
    return EXIT.ok;
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return rowOnly(orderId, !!opts.json, ctx);
    throw err;
  }
}

/** The order's row (status, reason) when the order store can be opened here, else undefined. */
async function rowOf(orderId: string, ctx: CliContext): Promise<{ status: OrderStatus; reason?: string } | undefined> {
  const store = ctx.openStore('reader');
  if (!store) return undefined;
  try {
    const row = await store.orderRow(orderId);
    return row ? { status: row.status, ...(row.reason ? { reason: row.reason } : {}) } : undefined;
  } finally {
    await store.close();
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
