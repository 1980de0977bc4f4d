/**
 * Customers and support cancel with `client.ts cancel` (through the orders API for an order placed
 * there, storefront.ts), at the moment the order chose: early, in the
 * authorization, after it, or after the pivot (a slow database holds the shipment so the saga is seen there).
 * Each cancel is counted by the moment it met; one that fails without a refusal is a violation.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { isTerminal } from '../../../domain/order';
import type { SagaState } from '../../../workflows/messages';
import type { ChaosOrder } from '../orders';
import type { CancelMoment, PeopleBase } from './base';
import { cancelThroughApi } from './storefront';

export async function cancel(p: PeopleBase, o: ChaosOrder): Promise<void> {
  const id = o.input.orderId;
  const moment = (s: SagaState | undefined): CancelMoment => {
    if (!s || isTerminal(s.status)) return 'after the end';
    if (s.step.startsWith('compensate')) return 'during compensation';
    if (s.pivotPassed || s.step === 'createShipment' || s.step === 'sendConfirmation') return 'after the pivot';
    if (s.stepsDone.includes('authorizePayment')) return 'after the hold';
    if (s.step === 'authorizePayment') return 'during the hold';
    return 'before the hold';
  };
  const want: Record<string, (m: CancelMoment) => boolean> = {
    'cancel-in-authorization': (m) => m !== 'before the hold',
    'cancel-after-authorization': (m) => m !== 'before the hold' && m !== 'during the hold',
    'cancel-after-pivot': (m) => m === 'after the pivot' || m === 'after the end' || m === 'during compensation',
  };
  let seen: SagaState | undefined;
  // After the pivot the saga ships and confirms in one workflow task: to see it there, a slow
  // database holds the shipment's row (an open transaction inserting it) until the saga is seen there.
  const hold = o.meddle === 'cancel-after-pivot' ? await holdShipment(p, id) : undefined;
  try {
    if (o.meddle === 'cancel-early') {
      await sleep(o.when * 600);
      seen = await p.state(id);
    } else {
      // Watch the saga (as a person refreshing the Web UI) until the moment comes, for at most 20 s.
      for (const until = Date.now() + (hold ? 40_000 : 20_000); Date.now() < until; await sleep(150)) {
        seen = await p.state(id);
        if (want[o.meddle]!(moment(seen))) break;
      }
    }
  } finally {
    if (hold) await hold.release();
  }
  const at = moment(seen);
  p.count('cancel', 'sent');
  p.count(at, 'sent', p.cancels);
  const reason = `chaos: the customer cancelled (${at})`;
  // An order the storefront placed is cancelled through its API; the others with client.ts.
  const r = o.viaApi ? await cancelThroughApi(p, id, reason) : await p.cli(['cancel', id, '--reason', reason]);
  if (r.code === 0) {
    p.count('cancel', 'accepted');
    p.count(at, 'accepted', p.cancels);
    p.cancelAccepted.add(id);
  } else {
    p.count('cancel', 'refused');
    p.count(at, 'refused', p.cancels);
    if (!/refused/.test(r.err)) p.violation('a cancel gets an answer', id, `cancel failed without a refusal: ${r.err}`);
  }
}

/**
 * Once the order row exists, an open transaction inserts its shipment row (and waits): the saga's
 * shipment, which inserts the same key, waits for it. Released (rolled back) by the caller; at most
 * 45 s. Undefined when the order ended or its row never came.
 */
async function holdShipment(p: PeopleBase, orderId: string): Promise<{ release(): Promise<void> } | undefined> {
  for (const until = Date.now() + 10_000; Date.now() < until; await sleep(50)) {
    const s = await p.state(orderId);
    if (s && isTerminal(s.status)) return undefined;
    if (s?.stepsDone.includes('createOrder')) break;
  }
  const c = await p.stack.db.connect().catch(() => undefined);
  if (!c) return undefined;
  // A Postgres restart ends this session while it is held: the hold simply ends with it.
  const ignore = (): void => undefined;
  c.on('error', ignore);
  try {
    await c.query('BEGIN');
    await c.query({
      text: "INSERT INTO shipments (order_id, tracking_number) VALUES ($1, 'CHAOS-HOLD')",
      values: [orderId],
    });
  } catch {
    await c.query('ROLLBACK').catch(() => undefined);
    c.off('error', ignore);
    c.release(true);
    return undefined; // shipped already, or the database is restarting: nothing held
  }
  let released = false;
  const release = async (): Promise<void> => {
    if (released) return;
    released = true;
    clearTimeout(timer);
    await c.query('ROLLBACK').catch(() => undefined);
    c.off('error', ignore);
    c.release(true); // a fresh connection next time: this one may have died with a restart
  };
  const timer = setTimeout(() => void release(), 45_000);
  return { release };
}
