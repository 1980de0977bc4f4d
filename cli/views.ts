/** `views`: the Web UI list views an operator uses, each as its visibility query and its URL. */
import type { Command } from '@commander-js/extra-typings';
import { operatorViews } from '../lib/config';
import { EXIT, type CliContext } from './context';
import { idArg, jsonOption } from './options';

function views(opts: { customer?: string; json?: boolean }, ctx: CliContext): number {
  const { io } = ctx;
  const rows = operatorViews(new Date(), opts.customer).map((v) => ({ ...v, url: ctx.links.list(v.query) }));
  if (opts.json) io.out(JSON.stringify(rows));
  else for (const r of rows) io.out(`${r.name}:\n  ${r.query}\n  ${r.url}`);
  return EXIT.ok;
}

export function register(cli: Command, ctx: CliContext): void {
  cli
    .command('views')
    .summary('the Web UI list URLs an operator uses')
    .description(
      `The Web UI list views an operator uses, each as its visibility query and its URL: sagas that need attention, failed or cancelled in the last hour (times computed now), waiting on an unknown charge, and one customer's orders.`,
    )
    .option('--customer <customerId>', 'the customer for the last view', idArg('a customer ID'))
    .addOption(jsonOption())
    .action((opts) => ctx.done(views(opts, ctx)));
}
