/** `sweeps`: what the sweeper did, newest first, read through the read-only role. */
import type { Command } from '@commander-js/extra-typings';
import { EXIT, type CliContext } from './context';
import { idArg, jsonOption, positiveInt } from './options';

async function sweeps(opts: { json?: boolean; order?: string; limit: number }, ctx: CliContext): Promise<number> {
  const { io } = ctx;
  const store = ctx.needStore('reader', 'sweeps');
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

export function register(cli: Command, ctx: CliContext): void {
  cli
    .command('sweeps')
    .summary('what the sweeper did, newest first')
    .description(
      "Prints the sweeper's latest actions (read through the read-only role): restart (a stranded order's saga started again), reset (a run whose workflow task kept failing), person (handed to a person, with the reason), alert (NEEDS_ATTENTION too long).",
    )
    .option('--order <orderId>', 'only this order', idArg('an order ID'))
    .option('--limit <n>', 'how many', positiveInt, 20)
    .addOption(jsonOption())
    .action(async (opts) => ctx.done(await sweeps(opts, ctx)));
}
