/**
 * Planted bugs for test/sweeper.devserver.test.ts: a workflow `orderSaga` whose first workflow task
 * completes (it starts a 1 ms timer) and whose every later workflow task fails, so the run stays open
 * with its workflow task failing for good. By default the failure is a TypeError, as a bug in
 * workflow code would be; with `'sdk-update-bug'` it carries the message of the SDK's Update-ordering
 * bug (sdk-core#1146), which the sweeper heals with a new run instead of a reset.
 */
import { sleep } from '@temporalio/workflow';

export async function orderSaga(plant?: 'sdk-update-bug'): Promise<never> {
  await sleep(1);
  if (plant === 'sdk-update-bug')
    throw new Error(
      '[TMPRL1100] Nondeterminism error: Update machine does not handle this event: HistoryEvent(id: 57, ActivityTaskScheduled) (planted)',
    );
  throw new TypeError('planted bug: cannot read properties of undefined');
}
