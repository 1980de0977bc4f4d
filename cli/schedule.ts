/** `schedule reconcile` and `schedule sweep`: create (or update) one of the application's Temporal Schedules. */
import type { Command } from '@commander-js/extra-typings';
import { WorkflowNames } from '../domain/names';
import { RECONCILE_SCHEDULE_ID, SWEEP_SCHEDULE_ID, upsertSchedule } from '../ops/schedules';
import { EXIT, type CliContext } from './context';
import { durationMs, interval, jsonOption, positiveInt } from './options';

/** Creates (or updates) one of the application's Schedules and says where to see it. */
async function schedule(
  req: { scheduleId: string; workflowType: string; every: string; args?: unknown[]; json?: boolean },
  ctx: CliContext,
): Promise<number> {
  const { cfg, io } = ctx;
  const client = await ctx.temporal();
  const { created } = await upsertSchedule(client, { ...req, taskQueue: cfg.taskQueue });
  const url = ctx.links.schedule(req.scheduleId);
  if (req.json) io.out(JSON.stringify({ scheduleId: req.scheduleId, every: req.every, created, uiUrl: url }));
  else io.out(`schedule ${req.scheduleId}: ${created ? 'created' : 'updated'}, every ${req.every}\n  web ui: ${url}`);
  return EXIT.ok;
}

export function register(cli: Command, ctx: CliContext): void {
  const schedules = cli
    .command('schedule')
    .summary('reconcile | sweep: create (or update) one of the Schedules')
    .description('Temporal Schedules of this application: reconcile (the invariant check) and sweep (the sweeper).');
  schedules
    .command('reconcile')
    .summary('create (or update) the Schedule that runs the reconciliation')
    .description(
      `Creates the Temporal Schedule "reconcile" (or updates its interval) that runs the reconciliation workflow every <duration>. Each run checks every invariant, sweeps for orphan charges and overdue sagas, and records findings (client.ts findings); it never compensates.`,
    )
    .option('--every <duration>', 'how often, for example 15m, 6h, 1d (at least 60s)', interval, '1h')
    .addOption(jsonOption())
    .action(async (opts) =>
      ctx.done(
        await schedule(
          {
            scheduleId: RECONCILE_SCHEDULE_ID,
            workflowType: WorkflowNames.reconcile,
            every: opts.every,
            json: opts.json,
          },
          ctx,
        ),
      ),
    );
  schedules
    .command('sweep')
    .summary('create (or update) the Schedule that runs the sweeper')
    .description(
      `Creates the Temporal Schedule "sweep" (or updates it) that runs the sweeper every <duration>: an open order whose saga has closed (terminated, failed) or is missing gets its saga started again from the order row (at most --max-restarts times, then a person is told); a run whose workflow task keeps failing is reset once to its last completed workflow task, then a person; a running run with no new event for longer than --stall-after is diagnosed (a versioning override or a build nobody polls is healed, a paused or long-retrying activity goes to a person, workflow tasks timing out are reset once); an order in NEEDS_ATTENTION for longer than --attention-age is alerted; an order it cannot read goes to a person and the sweep goes on. Each sweep looks at one page: first the orders that may have changed since the last sweep (a run closed, a bound crossed), then the next --page-size orders of the rest, where the last sweep stopped. It never compensates, charges or unpauses. What it did: client.ts sweeps; the stalled orders: client.ts stalled.`,
    )
    .option('--every <duration>', 'how often, for example 1m, 5m (at least 60s)', interval, '1m')
    .option('--max-restarts <n>', 'restarts per order before a person is told', positiveInt, 3)
    .option('--attention-age <duration>', 'alert an order in NEEDS_ATTENTION this long', interval, '1h')
    .option('--stall-after <duration>', 'a running run with no new event this long has stopped moving', interval, '5m')
    .option('--page-size <n>', 'orders per sweep (a pass over N open orders takes N / n sweeps)', positiveInt, 1000)
    .addOption(jsonOption())
    .action(async (opts) =>
      ctx.done(
        await schedule(
          {
            scheduleId: SWEEP_SCHEDULE_ID,
            workflowType: WorkflowNames.sweeper,
            every: opts.every,
            args: [
              {
                maxRestarts: opts.maxRestarts,
                attentionAgeMs: durationMs(opts.attentionAge),
                stallAfterMs: durationMs(opts.stallAfter),
                pageSize: opts.pageSize,
              },
            ],
            json: opts.json,
          },
          ctx,
        ),
      ),
    );
}
