/** `findings`: the last reconciliation run's findings, read through the read-only role. */
import type { Command } from '@commander-js/extra-typings';
import { EXIT, type CliContext } from './context';
import { jsonOption } from './options';

async function findings(opts: { json?: boolean }, ctx: CliContext): Promise<number> {
  const { io } = ctx;
  const store = ctx.needStore('reader', 'findings');
  let last;
  try {
    last = await store.lastReconciliation();
  } finally {
    await store.close();
  }
  if (!last) {
    if (opts.json) io.out(JSON.stringify({ run: null, findings: [] }));
    else io.out('no reconciliation has run yet (client.ts schedule reconcile)');
    return EXIT.ok;
  }
  if (opts.json) io.out(JSON.stringify(last));
  else {
    io.out(
      `reconciliation ${last.run.runId} at ${last.run.at}: ${last.run.orders} orders, ${last.findings.length} finding(s)`,
    );
    for (const f of last.findings)
      io.out(`  ${f.rule}: ${f.detail}${f.orderIds.length ? ` [orders: ${f.orderIds.join(', ')}]` : ''}`);
  }
  return last.findings.length === 0 ? EXIT.ok : EXIT.notCompleted;
}

export function register(cli: Command, ctx: CliContext): void {
  cli
    .command('findings')
    .summary("the last reconciliation run's findings")
    .description(
      "Prints the last reconciliation run's findings (read through the read-only role). Exit code 1 when it found any.",
    )
    .addOption(jsonOption())
    .action(async (opts) => ctx.done(await findings(opts, ctx)));
}
