/** `sweeps`: what the sweeper did, newest first, or the open orders it found stalled; read through the read-only role. */
import type { Command } from '@commander-js/extra-typings';
import type { SweeperActionRow } from '../orders/order-store';
import { EXIT, type CliContext } from './context';
import { idArg, jsonOption, positiveInt } from './options';

const line = (r: SweeperActionRow): string =>
  `${r.at}  ${r.action.padEnd(7)} ${r.orderId}${r.cause ? ` [${r.cause}]` : ''}: ${r.reason}${r.newRunId ? ` (new run ${r.newRunId})` : ''}`;

async function sweeps(
  opts: { json?: boolean; order?: string; limit: number; stalled?: boolean },
  ctx: CliContext,
): Promise<number> {
  const { io } = ctx;
  const store = ctx.needStore('reader', 'sweeps');
  try {
    if (opts.stalled) {
      const rows = await store.stalledOrders();
      if (opts.json) io.out(JSON.stringify({ stalled: rows }));
      else if (rows.length === 0) io.out('no open order the sweeper found stalled');
      else for (const r of rows) io.out(`${r.status.padEnd(15)} ${line(r)}`);
      return EXIT.ok;
    }
    const rows = await store.sweeperActions({ limit: opts.limit, ...(opts.order ? { orderId: opts.order } : {}) });
    if (opts.json) io.out(JSON.stringify({ actions: rows }));
    else if (rows.length === 0) io.out('the sweeper has done nothing yet (client.ts schedule sweep)');
    else for (const r of rows) io.out(line(r));
    return EXIT.ok;
  } finally {
    await store.close();
  }
}

export function register(cli: Command, ctx: CliContext): void {
  cli
    .command('sweeps')
    .summary('what the sweeper did, newest first; --stalled: the open orders it found not moving')
    .description(
      "Prints the sweeper's latest actions (read through the read-only role), each with its cause: restart (a stranded order's saga started again, or a run that could not go on replaced), reset (a run whose workflow task kept failing or timing out), remove-override (a versioning override to a version nobody polls), person (handed to a person, with the reason and the order's money and stock), alert (NEEDS_ATTENTION too long). With --stalled: the open orders whose latest action was for a run that had stopped moving (a stuck run cannot update its own search attributes, so this list comes from the sweeper's records).",
    )
    .option('--order <orderId>', 'only this order', idArg('an order ID'))
    .option('--limit <n>', 'how many', positiveInt, 20)
    .option('--stalled', 'the open orders the sweeper last found stalled, and what it did')
    .addOption(jsonOption())
    .action(async (opts) => ctx.done(await sweeps(opts, ctx)));
}
