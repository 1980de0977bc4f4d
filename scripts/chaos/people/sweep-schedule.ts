/**
 * An operator pauses the sweep Schedule for a while: `client.ts check` must name it meanwhile.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { WorkflowNames } from '../../../domain/names';
import { SWEEP_SCHEDULE_ID, upsertSchedule } from '../../../ops/schedules';
import type { PeopleBase } from './base';

/**
 * An operator pauses the `sweep` Schedule (`temporal schedule toggle --pause`) for `ms`, and the
 * soak's own sweeps stop as long: `client.ts check` must name the paused Schedule meanwhile (exit 1),
 * and the orders stranded meanwhile must still be healed once it runs again.
 */
export async function pauseSweepSchedule(p: PeopleBase, pauseSweeps: (ms: number) => void, ms: number): Promise<void> {
  const action = 'pause the sweep Schedule (check must name it)';
  p.count(action, 'sent');
  // The Schedule as npm start creates it, on the soak's queue (every hour: the soak's loop sweeps).
  await upsertSchedule(p.client, {
    scheduleId: SWEEP_SCHEDULE_ID,
    workflowType: WorkflowNames.sweeper,
    taskQueue: p.stack.taskQueue,
    every: '1h',
  });
  const handle = p.client.schedule.getHandle(SWEEP_SCHEDULE_ID);
  await handle.pause('chaos: an operator paused the sweeper');
  pauseSweeps(ms);
  try {
    const r = await p.cli(['check']);
    const named = r.code === 1 && /PROBLEM schedule sweep: paused/.test(r.out + r.err);
    p.count(action, named ? 'accepted' : 'refused');
    if (!named)
      p.violation(
        'client.ts check names a paused sweep Schedule',
        SWEEP_SCHEDULE_ID,
        `check exited ${r.code}: ${
          `${r.out}\n${r.err}`
            .split('\n')
            .filter((l) => /schedule|PROBLEM|error|needs/i.test(l))
            .slice(0, 5)
            .join(' | ') || `${r.out}${r.err}`.slice(0, 300)
        }`,
      );
    await sleep(ms);
  } finally {
    await handle.unpause('chaos: the operator unpaused the sweeper').catch(() => undefined);
    await handle.delete().catch(() => undefined);
  }
}
