/** `check`: the invariant checker over the database, the provider's ledger and Temporal's visibility, through the read-only role. */
import type { Command } from '@commander-js/extra-typings';
import { formatReport, RULES, temporalLookup } from '../db/invariants';
import { DEFAULT_SAGA_CONFIG } from '../workflows/order-saga';
import { EXIT, type CliContext } from './context';
import { jsonOption } from './options';

async function check(opts: { json?: boolean }, ctx: CliContext): Promise<number> {
  const { io } = ctx;
  const store = ctx.needStore('reader', 'check'); // read-only: it reads the provider's ledger too
  try {
    // Temporal's visibility tells an open order whose workflow has closed (that rule needs the server).
    const client = await ctx.temporal().catch((err: Error) => {
      io.err(`note: ${err.message}; the rule "${RULES.closedRunTerminal}" is not checked`);
      return undefined;
    });
    const report = await store.checkInvariants({
      deadlineMs: DEFAULT_SAGA_CONFIG.deadlineMs,
      ...(client ? { workflows: temporalLookup(client) } : {}),
    });
    if (opts.json) io.out(JSON.stringify(report));
    else for (const line of formatReport(report)) io.out(line);
    return report.violations.length === 0 ? EXIT.ok : EXIT.notCompleted;
  } finally {
    await store.close();
  }
}

export function register(cli: Command, ctx: CliContext): void {
  cli
    .command('check')
    .summary("invariant check of the database and the provider's ledger")
    .description(
      `Reads the application database and the provider's ledger in one snapshot, through the read-only role (READER_DATABASE_URL; else DATABASE_URL), and reports every violation with its order IDs. Exit code 0 when clean, 1 when there are violations. The rules (the last one asks Temporal):
${Object.values(RULES)
  .map((r) => `  - ${r}`)
  .join('\n')}`,
    )
    .addOption(jsonOption())
    .action(async (opts) => ctx.done(await check(opts, ctx)));
}
