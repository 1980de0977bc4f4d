/** The saga-overhead section's workflows: the real saga, and a floor of the essential work only. */
import { proxyActivities } from '@temporalio/workflow';

export { orderSaga } from '../workflows';

/** The work an order really needs, and nothing of our own: create, reserve, charge, ship, confirm. */
export const ESSENTIAL_STEPS = [
  'createOrder',
  'reserveInventory',
  'chargePayment',
  'createShipment',
  'sendConfirmation',
] as const;

const { noop } = proxyActivities<{ noop(step: string): Promise<void> }>({ startToCloseTimeout: '10s' });

/** The essential-work floor: one no-op activity per essential step, one after another. */
export async function noopSaga(): Promise<string> {
  for (const step of ESSENTIAL_STEPS) await noop(step);
  return 'done';
}
