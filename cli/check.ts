/**
 * `check`: the invariant checker over the database, the provider's ledger and Temporal's visibility,
 * through the read-only role; then the machinery that keeps orders moving (ops/machinery.ts).
 */
import path from 'node:path';
import type { Command } from '@commander-js/extra-typings';
import { EVENTS_GRACE_MS, formatReport, RULES, temporalLookup } from '../db/invariants';
import { checkMachinery, formatMachinery, unreachableReport, type MachineryReport } from '../ops/machinery';
import { APP_SCHEDULES } from '../ops/schedules';
import { requirePayloadKeys } from '../platform/payload-codec';
import { DEFAULT_SAGA_CONFIG } from '../workflows/order-saga';
import { EXIT, type CliContext } from './context';
import { jsonOption } from './options';

/** Which keys this process opens payloads with, for the report (IDs only, never a key). */
function keysAtHand(): string {
  const k = requirePayloadKeys();
  const where = k.source === 'PAYLOAD_KEYS' ? k.source : `key file ${path.relative(process.cwd(), k.source)}`;
  return `${where}: ${[...k.keys.keys()].join(', ')}`;
}

async function check(opts: { json?: boolean; dataOnly?: boolean }, ctx: CliContext): Promise<number> {
  const { io, cfg } = ctx;
  const store = ctx.needStore('reader', 'check'); // read-only: it reads the provider's ledger too
  try {
    // Temporal's visibility tells an open order whose workflow has closed (that rule needs the server).
    let unreachable = '';
    const client = await ctx.temporal().catch((err: Error) => {
      unreachable = err.message;
      io.err(`note: ${err.message}; the rule "${RULES.closedRunTerminal}" is not checked`);
      return undefined;
    });
    const report = await store.checkInvariants({
      deadlineMs: DEFAULT_SAGA_CONFIG.deadlineMs,
      ...(client ? { workflows: temporalLookup(client) } : {}),
      // The order events' rule where the worker relays them (the same environment names the endpoint).
      ...(cfg.orderEventsUrl ? { eventsGraceMs: EVENTS_GRACE_MS } : {}),
    });
    let machinery: MachineryReport | undefined;
    if (!opts.dataOnly) {
      machinery = client
        ? await checkMachinery(client, {
            taskQueue: cfg.taskQueue,
            openOrderIds: await store.openOrderIds(),
            keys: keysAtHand(),
          }).catch((err: Error) =>
            unreachableReport(`asking Temporal at ${cfg.temporalAddress} failed: ${err.message}`),
          )
        : unreachableReport(unreachable);
    }
    if (opts.json) io.out(JSON.stringify({ ...report, ...(machinery ? { machinery } : {}) }));
    else for (const line of [...formatReport(report), ...(machinery ? formatMachinery(machinery) : [])]) io.out(line);
    return report.violations.length === 0 && (machinery?.ok ?? true) ? EXIT.ok : EXIT.notCompleted;
  } finally {
    await store.close();
  }
}

export function register(cli: Command, ctx: CliContext): void {
  cli
    .command('check')
    .summary('invariant check of the data, and of the Schedules, workers and payload keys')
    .description(
      `Reads the application database and the provider's ledger in one snapshot, through the read-only role (READER_DATABASE_URL; else DATABASE_URL), and reports every violation with its order IDs. The rules (the last one asks Temporal):
${Object.values(RULES)
  .map((r) => `  - ${r}`)
  .join('\n')}

Then the machinery, asking Temporal:
  - each Schedule (${APP_SCHEDULES.map((s) => s.scheduleId).join(', ')}) exists, is not paused, starts its workflow on TASK_QUEUE, and its last finished run completed within three of its intervals (a new one has three intervals for its first run);
  - a worker of the build new sagas go to (the Worker Deployment's current version; unversioned workers when none is current) polled TASK_QUEUE in the last 90 s;
  - every open order's run opens with the payload keys at hand (PAYLOAD_KEYS or the key file); an order it cannot read is named, with the key ID it needs.

Exit code 0 when the data is clean and the machinery is in place; 1 when there are violations, or a machinery problem (each line says what is wrong), or Temporal cannot be reached (then the data is still checked, without the Temporal rule, and the machinery is a problem: nothing keeps the orders moving). --data-only checks the data alone, as on a copy of the database.`,
    )
    .option('--data-only', 'check the data only: not the Schedules, the workers or the payload keys')
    .addOption(
      jsonOption('print JSON instead of text: the report, with `machinery: { ok, checks }` unless --data-only'),
    )
    .action(async (opts) => ctx.done(await check(opts, ctx)));
}
