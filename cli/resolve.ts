/** `resolve`: the "resolve" Signal, an operator's action on a saga that waits for one (an UNKNOWN charge, a failed step). */
import { Option, type Command } from '@commander-js/extra-typings';
import { RESOLVE_ACTIONS } from '../workflows/messages';
import type { CliContext } from './context';
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
Exit code 1 when refused (the saga is not waiting for that action).`,
    )
    .argument(...orderIdArgument)
    .addOption(new Option('--action <action>', 'what to do').choices(RESOLVE_ACTIONS).makeOptionMandatory())
    .option('--note <text>', "the operator's note, recorded with the action")
    .addOption(waitOption('seconds to wait for the saga, as for cancel'))
    .addOption(jsonOption("print the saga's state as JSON"))
    .action(async (orderId, { action, note, wait, json }) =>
      ctx.done(
        await update(
          orderId,
          { command: 'resolve', action, ...(note ? { note } : {}) },
          { json: !!json, waitSeconds: wait },
          ctx,
        ),
      ),
    );
}
