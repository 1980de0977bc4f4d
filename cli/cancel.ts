/** `cancel`: the "cancel" Signal, accepted before the pivot (the compensations run), refused after it. */
import type { Command } from '@commander-js/extra-typings';
import type { CliContext } from './context';
import { jsonOption, orderIdArgument, waitOption } from './options';
import { update } from './update';

export function register(cli: Command, ctx: CliContext): void {
  cli
    .command('cancel')
    .summary('cancel an order before its shipment (runs the compensations)')
    .description(
      `Sends the "cancel" Signal and reads the saga's answer back. Accepted before the pivot (the shipment): the compensations run and the order ends CANCELLED. After the pivot it is refused with the reason (exit 1).`,
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
      ctx.done(
        await update(
          orderId,
          { command: 'cancel', reason: opts.reason },
          { json: !!opts.json, waitSeconds: opts.wait },
          ctx,
        ),
      ),
    );
}
