/**
 * The saga-overhead section's workflows: the real saga, and three floors of the essential work only:
 * six no-op regular activities; six no-op local activities (the cheapest shape Temporal offers for the
 * six steps); and the same six steps of the kinds the saga runs them (local or regular,
 * `SAGA_STEP_KINDS`), so that the saga's ratio to it measures the saga's own work.
 */
import { condition, defineSignal, proxyActivities, proxyLocalActivities, setHandler } from '@temporalio/workflow';

export { orderSaga } from '../workflows';

/**
 * The work an order really needs, and nothing of our own: create, reserve, authorize, ship, capture,
 * confirm (the six steps of a new order, workflows/order-saga.ts).
 */
export const ESSENTIAL_STEPS = [
  'createOrder',
  'reserveInventory',
  'authorizePayment',
  'createShipment',
  'capturePayment',
  'sendConfirmation',
] as const;

/**
 * How the saga runs each essential step on its happy path (workflows/order-saga.ts and
 * workflows/authorization-protocol.ts; docs/saga.md, "Round trips"): local first, or a regular
 * activity. The hold is the one regular activity (the round trip before the pivot); the reservation
 * runs in the first task, the shipment, the capture and the confirmation in the task that receives
 * the hold's result. The bench checks this against a completed saga's history.
 */
export const SAGA_STEP_KINDS: Record<(typeof ESSENTIAL_STEPS)[number], 'local' | 'regular'> = {
  createOrder: 'local',
  reserveInventory: 'local',
  authorizePayment: 'regular',
  createShipment: 'local',
  capturePayment: 'local',
  sendConfirmation: 'local',
};

const { noop } = proxyActivities<{ noop(step: string): Promise<void> }>({ startToCloseTimeout: '10s' });
const local = proxyLocalActivities<{ noop(step: string): Promise<void> }>({ startToCloseTimeout: '10s' });

/** The essential-work floor: one no-op regular activity per essential step, one after another. */
export async function noopSaga(): Promise<string> {
  for (const step of ESSENTIAL_STEPS) await noop(step);
  return 'done';
}

/**
 * The cheapest floor: one no-op local activity per essential step, one after another, no timer and
 * no search attributes: the least Temporal can do for the six steps (one workflow task, six markers).
 */
export async function noopSagaLocal(): Promise<string> {
  for (const step of ESSENTIAL_STEPS) await local.noop(step);
  return 'done';
}

/** The like-for-like floor: one no-op per essential step, local or regular as the saga runs it. */
export async function noopSagaLikeForLike(): Promise<string> {
  for (const step of ESSENTIAL_STEPS) await (SAGA_STEP_KINDS[step] === 'local' ? local : { noop }).noop(step);
  return 'done';
}

/**
 * The sweep section's open order (bench/sweep.ts): a run that waits for a person's word with nothing
 * pending, as the saga's run of an order in NEEDS_ATTENTION does.
 */
export async function parkedOrder(): Promise<void> {
  let answered = false;
  setHandler(defineSignal('resolve'), () => void (answered = true));
  await condition(() => answered);
}
