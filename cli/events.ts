/**
 * `events`: an order's events and their delivery to the webhook endpoint (read through the read-only
 * role); `--dead`: every dead-lettered event; `--resend`: an order's dead-lettered events sent again.
 */
import type { Command } from '@commander-js/extra-typings';
import type { OrderEventRow } from '../orders/order-store';
import { CliError, EXIT, type CliContext } from './context';
import { idArg, jsonOption, positiveInt } from './options';

const line = (e: OrderEventRow): string =>
  `${e.id.padEnd(24)} ${e.kind.padEnd(22)} ${e.state.padEnd(13)} ${e.attempts} tr${e.attempts === 1 ? 'y' : 'ies'}, ` +
  `${e.state === 'pending' ? 'next at' : 'at'} ${e.at}${e.lastError ? ` (last: ${e.lastError})` : ''}`;

async function events(
  orderId: string | undefined,
  opts: { json?: boolean; dead?: boolean; resend?: boolean; limit: number },
  ctx: CliContext,
): Promise<number> {
  const { io } = ctx;
  if (!orderId && !opts.dead)
    throw new CliError(
      'invalid input: orderId: name an order, or use --dead for every dead-lettered event',
      EXIT.invalid,
    );
  if (opts.resend) {
    if (!orderId) throw new CliError("invalid input: orderId: --resend sends one order's events again", EXIT.invalid);
    const store = ctx.needStore('app', 'events --resend');
    try {
      const n = await store.resendEvents(orderId);
      if (opts.json) io.out(JSON.stringify({ orderId, resent: n }));
      else
        io.out(
          n
            ? `${n} dead-lettered event(s) of order ${orderId} sent again`
            : `order ${orderId} has no dead-lettered event`,
        );
      return EXIT.ok;
    } finally {
      await store.close();
    }
  }
  const store = ctx.needStore('reader', 'events');
  try {
    const rows = await store.orderEvents({
      limit: opts.limit,
      ...(orderId ? { orderId } : {}),
      ...(opts.dead ? { dead: true } : {}),
    });
    if (opts.json) io.out(JSON.stringify({ events: rows }));
    else if (rows.length === 0) io.out(opts.dead ? 'no dead-lettered event' : `order ${orderId} has no event`);
    else for (const r of rows) io.out(line(r));
    return EXIT.ok;
  } finally {
    await store.close();
  }
}

export function register(cli: Command, ctx: CliContext): void {
  cli
    .command('events')
    .summary("an order's events and their delivery; --dead: the dead-lettered ones; --resend: send them again")
    .description(
      "Prints an order's events (accepted, needs attention, shipped, completed, cancelled, failed, refunded), in order, each with its ID (`<orderId>:<seq>`, what a receiver deduplicates on) and its delivery to ORDER_EVENTS_WEBHOOK_URL: delivered, pending (with its tries and the next one) or dead-lettered (every try failed; a person is told). --dead lists every dead-lettered event; --resend sends an order's dead-lettered events again, at once and in order.",
    )
    .argument('[orderId]', 'the order', idArg('an order ID'))
    .option('--dead', 'every dead-lettered event, oldest first')
    .option('--resend', "send the order's dead-lettered events again")
    .option('--limit <n>', 'how many', positiveInt, 100)
    .addOption(jsonOption())
    .action(async (orderId, opts) => ctx.done(await events(orderId, opts, ctx)));
}
