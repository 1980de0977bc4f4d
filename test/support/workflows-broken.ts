/**
 * A planted bug for test/sweeper.devserver.test.ts: a workflow `orderSaga` whose first workflow task
 * completes (it starts a 1 ms timer) and whose every later workflow task fails (a TypeError, as a
 * bug in workflow code would), so the run stays open with its workflow task failing for good.
 */
import { sleep } from '@temporalio/workflow';

export async function orderSaga(): Promise<never> {
  await sleep(1);
  throw new TypeError('planted bug: cannot read properties of undefined');
}
