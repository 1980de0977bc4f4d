/**
 * The replay test's incompatible change (test/replay.test.ts): the real saga with one more command at
 * its start (a 1 ms durable timer), under the same workflow type `orderSaga`. A change of this kind is
 * incompatible with running histories: one the real saga recorded does not replay on it (its first
 * command differs), which is why each saga is pinned to the build that started it.
 */
import { sleep } from '@temporalio/workflow';
import { orderSaga as realSaga } from '../../workflows';

export { reconcileWorkflow } from '../../workflows';

export async function orderSaga(...args: Parameters<typeof realSaga>): ReturnType<typeof realSaga> {
  await sleep(1);
  return realSaga(...args);
}
