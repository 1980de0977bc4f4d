/** Workflows of the benchmark's P2: the real saga, and a floor with the same number of no-op activities. */
import { proxyActivities } from '@temporalio/workflow';

export { orderSaga } from '../workflows';

/** As many activities as a completed saga runs (create, reserve, 4 status updates, charge, ship, confirm). */
export const SAGA_ACTIVITY_COUNT = 9;

const { noop } = proxyActivities<{ noop(): Promise<void> }>({ startToCloseTimeout: '10s' });

export async function noopSaga(): Promise<string> {
  for (let i = 0; i < SAGA_ACTIVITY_COUNT; i++) await noop();
  return 'done';
}
