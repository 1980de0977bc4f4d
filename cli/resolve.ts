/** `resolve`: the "resolve" Signal, an operator's action on a saga that waits for one (an UNKNOWN charge, a failed step). */
import { Option, type Command } from '@commander-js/extra-typings';
import { RESOLVE_ACTIONS } from '../workflows/messages';
import { CliError, EXIT, type CliContext } from './context';
import { jsonOption, orderIdArgument, waitOption } from './options';
import { update } from './update';

export function register(cli: Command, ctx: CliContext): void {
  cli
    .command('resolve')
    .summary('operator action on an UNKNOWN charge or a saga that needs attention')
    .description(
      `Sends the "resolve" Signal to a saga that waits for an operator, and reads its answer back:
  charge-succeeded / charge-failed   settle an UNKNOWN charge after checking with the provider
  retry                              retry the failed compensation or forward step
  mark-resolved                      the failed step was done by hand; carry on
  settled-elsewhere                  a failed compensation was settled outside the saga (needs --reference)
The request is recorded in Postgres first; the saga checks it against the ledger before it moves
money or closes the order: mark-resolved of a refund the provider says was not made (or of a release
while stock is still held) is refused with the figures. Money returned outside the provider (a bank
transfer, a voucher) is said with settled-elsewhere and its reference, which the invariant checker
(client.ts check) lists as a named exception. Exit code 1 when refused.`,
    )
    .argument(...orderIdArgument)
    .addOption(new Option('--action <action>', 'what to do').choices(RESOLVE_ACTIONS).makeOptionMandatory())
    .option('--note <text>', "the operator's note, recorded with the action")
    .option('--reference <ref>', 'settled-elsewhere: where it was settled (a ticket, a transfer ID)')
    .addOption(waitOption('seconds to wait for the saga, as for cancel'))
    .addOption(jsonOption("print the saga's state as JSON"))
    .action(async (orderId, { action, note, reference, wait, json }) => {
      if (action === 'settled-elsewhere' && !reference?.trim())
        throw new CliError(
          '--reference: settled-elsewhere needs where it was settled (a ticket, a transfer ID)',
          EXIT.invalid,
        );
      if (reference !== undefined && reference.length > 200)
        throw new CliError('--reference: at most 200 characters', EXIT.invalid);
      return ctx.done(
        await update(
          orderId,
          { command: 'resolve', action, ...(note ? { note } : {}), ...(reference ? { reference } : {}) },
          { json: !!json, waitSeconds: wait },
          ctx,
        ),
      );
    });
}
