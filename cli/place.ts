/**
 * `place`: validates an order file, starts its saga with an Update-with-Start, prints the early
 * answer and (unless --no-wait) the end. Also `loadOrder`, the order file's reader.
 */
import { readFile } from 'node:fs/promises';
import type { Command } from '@commander-js/extra-typings';
import { WorkflowFailedError } from '@temporalio/client';
import { ErrorTypes } from '../domain/failures';
import { OrderValidationError, parseOrder, workflowIdFor, type OrderInput, type OrderResult } from '../domain/order';
import { orderOutcome } from '../orders/order-outcome';
import type { OrderStore } from '../orders/order-store';
import { placeOrder } from '../orders/place-order';
import { CliError, EXIT, type CliContext, type Out } from './context';
import { jsonOption, waitOption } from './options';

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
  ctx: CliContext,
): Promise<number> {
  const { cfg, io, links } = ctx;
  const store = ctx.openStore('app'); // without DATABASE_URL the workflow's boundary checks the catalogue
  let order: OrderInput;
  try {
    order = await loadOrder(opts.file, store);
  } finally {
    await store?.close();
  }
  const client = await ctx.temporal();
  const workflowId = workflowIdFor(order.orderId);
  const sent = Date.now();
  // Update-with-Start (orders/place-order.ts): one call starts the saga and returns its early answer.
  const placed = await placeOrder(client, order, cfg.taskQueue, opts.waitSeconds * 1000);
  if (placed.kind === 'duplicate')
    throw new CliError(`duplicate order: orderId: ${order.orderId} already has workflow ${workflowId}`, EXIT.duplicate);
  if (placed.kind === 'late') {
    throw new CliError(
      placed.runId
        ? `order ${order.orderId}: started, but no answer within ${opts.waitSeconds} s (is a worker running?); see ${links.run(workflowId, placed.runId)}`
        : `order ${order.orderId}: no answer within ${opts.waitSeconds} s, and the server does not show it started; see client.ts status ${order.orderId}`,
      EXIT.notCompleted,
    );
  }
  const { handle, runId, answerMs } = placed;
  const acceptance = placed.kind === 'answered' ? placed.acceptance : placed.error;
  const base = { orderId: order.orderId, workflowId, runId, uiUrl: links.run(workflowId, runId) };
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
    if (cause?.type === ErrorTypes.InvalidOrder) throw new CliError(`invalid order: ${reason}`, EXIT.invalid);
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

export function register(cli: Command, ctx: CliContext): void {
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
    ctx.done(await place({ file: opts.file, json: !!opts.json, noWait, waitSeconds }, ctx)),
  );
}
