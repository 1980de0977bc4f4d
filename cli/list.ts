/** `list`: orders (up to 1000) from Temporal's visibility store, by the OrderStatus search attribute. */
import { Option, type Command } from '@commander-js/extra-typings';
import { WorkflowNames } from '../domain/names';
import { ORDER_STATUSES, orderIdOf } from '../domain/order';
import { CustomerIdKey, NeedsAttentionKey, OrderStatusKey, TotalCentsKey } from '../workflows/search-attributes';
import { EXIT, type CliContext } from './context';
import { jsonOption } from './options';

async function list(opts: { status?: string; json?: boolean }, ctx: CliContext): Promise<number> {
  const { io, links } = ctx;
  const client = await ctx.temporal();
  const query = `WorkflowType = '${WorkflowNames.orderSaga}'${opts.status ? ` AND OrderStatus = '${opts.status}'` : ''}`;
  const rows = [];
  for await (const wf of client.workflow.list({ query, pageSize: 100 })) {
    rows.push({
      workflowId: wf.workflowId,
      orderId: orderIdOf(wf.workflowId) ?? wf.workflowId,
      status: wf.typedSearchAttributes.get(OrderStatusKey) ?? 'UNKNOWN',
      customerId: wf.typedSearchAttributes.get(CustomerIdKey),
      totalCents: wf.typedSearchAttributes.get(TotalCentsKey),
      needsAttention: wf.typedSearchAttributes.get(NeedsAttentionKey) ?? false,
      execution: wf.status.name,
      startTime: wf.startTime.toISOString(),
      uiUrl: links.run(wf.workflowId, wf.runId),
    });
    if (rows.length >= 1000) break;
  }
  if (opts.json) io.out(JSON.stringify(rows));
  else if (rows.length === 0) io.out('no orders');
  else
    for (const r of rows)
      io.out(
        `${r.orderId.padEnd(28)} ${String(r.status).padEnd(16)} ${String(r.customerId ?? '').padEnd(16)} ${String(r.totalCents ?? '').padStart(10)}  ${r.uiUrl}`,
      );
  return EXIT.ok;
}

export function register(cli: Command, ctx: CliContext): void {
  cli
    .command('list')
    .summary("orders by status, from Temporal's visibility store")
    .description(
      "Lists orders (up to 1000) from Temporal's visibility store, by the OrderStatus search attribute. A running saga updates it only where a person looks (UNKNOWN_PAYMENT, NEEDS_ATTENTION, COMPENSATING, and its end): a running order in between shows PENDING, so --status RESERVED, AUTHORIZED, SHIPPED or CAPTURED finds closed orders only; `status <orderId>` follows every step.",
    )
    .addOption(new Option('--status <STATUS>', 'only orders with this status').choices(ORDER_STATUSES))
    .addOption(jsonOption())
    .action(async (opts) => ctx.done(await list(opts, ctx)));
}
