/** `views`: the Web UI list views an operator uses, each as its visibility query and its URL. */
import type { Command } from '@commander-js/extra-typings';
import { WorkflowNames } from '../domain/names';
import { workflowIdFor } from '../domain/order';
import { operatorViews } from '../ops/config';
import { EXIT, type CliContext } from './context';
import { idArg, jsonOption } from './options';

/**
 * The view of the orders the sweeper last found stalled: named from its records, since a stuck run
 * cannot update its own search attributes. Undefined when there is none or no database to ask.
 */
async function stalledView(ctx: CliContext): Promise<{ name: string; query: string } | { note: string } | undefined> {
  const store = ctx.openStore('reader');
  if (!store) return undefined;
  try {
    const rows = await store.stalledOrders();
    if (rows.length === 0) return undefined;
    const ids = rows.map((r) => `'${workflowIdFor(r.orderId)}'`).join(', ');
    return {
      name: `stalled: ${rows.map((r) => `${r.orderId} (${r.cause})`).join(', ')} (client.ts sweeps --stalled)`,
      query: `WorkflowType = '${WorkflowNames.orderSaga}' AND WorkflowId IN (${ids})`,
    };
  } catch (err) {
    return { note: `stalled orders: the sweeper's records cannot be read (${(err as Error).message})` };
  } finally {
    await store.close();
  }
}

async function views(opts: { customer?: string; json?: boolean }, ctx: CliContext): Promise<number> {
  const { io } = ctx;
  const stalled = await stalledView(ctx);
  const list = operatorViews(new Date(), opts.customer);
  if (stalled && 'query' in stalled) list.unshift(stalled);
  const rows = list.map((v) => ({ ...v, url: ctx.links.list(v.query) }));
  if (opts.json) io.out(JSON.stringify(rows));
  else {
    for (const r of rows) io.out(`${r.name}:\n  ${r.query}\n  ${r.url}`);
    if (stalled && 'note' in stalled) io.out(stalled.note);
  }
  return EXIT.ok;
}

export function register(cli: Command, ctx: CliContext): void {
  cli
    .command('views')
    .summary('the Web UI list URLs an operator uses')
    .description(
      `The Web UI list views an operator uses, each as its visibility query and its URL: the orders the sweeper found stalled (from its records, when the database is reachable), sagas that need attention, failed or cancelled in the last hour (times computed now), waiting on an unknown charge, and one customer's orders.`,
    )
    .option('--customer <customerId>', 'the customer for the last view', idArg('a customer ID'))
    .addOption(jsonOption())
    .action(async (opts) => ctx.done(await views(opts, ctx)));
}
