/**
 * The soak's fault plan for the provider: which faults every target meets, at what rate, and the
 * orders singled out for a fault of their own (a slow charge for the customer who cancels during
 * it, a lost charge answer or a failed charge followed by `processing` inquiries).
 */
import { chargeKeyFor } from '../../domain/order';
import { CHARGE_FAULT_TARGETS, FAULT_KINDS, type FaultRequest } from '../../provider/faults';
import type { ChaosOrder } from './orders';
import { OPERATOR_CLIENT } from './stack';

/**
 * Every fault kind that applies to a target the saga calls (the outage window is one, over all
 * targets). The saga charges today: the authorization API's targets are not met by the soak.
 */
export const APPLICABLE = CHARGE_FAULT_TARGETS.flatMap((target) =>
  FAULT_KINDS.filter((kind) => kind !== 'outage' && (kind !== 'processing' || target === 'inquiries')).map((kind) => ({
    target,
    kind,
  })),
);

/** How long the charge of an order whose open run is reset is held (below the worker's request timeout). */
export const RESET_OPEN_CHARGE_MS = 1_000;

/** Every `1 in STUCK_EVERY` order: the charge's answer is lost, then the provider says `processing` for a while. */
export const STUCK_EVERY = 25;

/** The provider's fault rules for these orders; `slowMs` is a delay past the worker's request timeout. */
export function faultRules(orders: ChaosOrder[], slowMs: number): FaultRequest[] {
  const always = 86_400_000;
  const rate: Record<string, Record<string, number>> = {
    charges: { 'lose-response-after-commit': 0.1, 'fail-before-commit': 0.08, delay: 0.06 },
    inquiries: { processing: 0.2, 'fail-before-commit': 0.1, delay: 0.05, 'lose-response-after-commit': 0.05 },
    refunds: { 'lose-response-after-commit': 0.2, 'fail-before-commit': 0.2, delay: 0.1 },
    // The technical cancel, which every refund step sends first (so on every backward path).
    cancels: { processing: 0.2, 'lose-response-after-commit': 0.1, 'fail-before-commit': 0.1, delay: 0.05 },
  };
  const rules: FaultRequest[] = [];
  for (const [target, kinds] of Object.entries(rate)) {
    for (const [kind, r] of Object.entries(kinds)) {
      const base = { kind, target, ...(kind === 'delay' ? { delayMs: slowMs } : {}) } as FaultRequest;
      // The first calls of the saga meet each fault for sure (the operators' own calls, with the saga's
      // keys, must not use these up), then the rate, for everyone. A 5xx before the work hides the
      // call's other faults, so it takes one call, not two: refunds are few (a cancel after the charge
      // mostly comes after the pivot), and the second refund call must still meet the lost response.
      rules.push({ ...base, count: kind === 'fail-before-commit' ? 1 : 2, exceptClient: OPERATOR_CLIENT });
      rules.push({ ...base, rate: r, forMs: always });
    }
  }
  for (const o of orders) {
    // The customer who cancels during the charge meets a slow charge: it is taken (after the request
    // timed out), the inquiry finds it, and the cancel then refunds it. Refunds are otherwise few, and
    // the soak must see every refund fault.
    if (o.meddle === 'cancel-in-charge')
      rules.unshift({
        kind: 'delay',
        target: 'charges',
        keyPrefix: chargeKeyFor(o.input.orderId),
        count: 1,
        delayMs: slowMs,
      });
    // The person who resets an open run needs it open: the charge is held 1 s (within the worker's
    // timeout, so it is simply slow), and the Reset comes before it ends (people/reset-and-start-again.ts).
    if (o.meddle === 'reset-open')
      rules.unshift({
        kind: 'delay',
        target: 'charges',
        keyPrefix: chargeKeyFor(o.input.orderId),
        count: 1,
        delayMs: RESET_OPEN_CHARGE_MS,
      });
  }
  for (const [i, o] of orders.entries()) {
    if (i % STUCK_EVERY !== STUCK_EVERY - 1) continue;
    const keyPrefix = chargeKeyFor(o.input.orderId);
    rules.push({ kind: 'lose-response-after-commit', target: 'charges', keyPrefix, count: 1 });
    rules.push({ kind: 'processing', target: 'inquiries', keyPrefix, count: 4 });
  }
  // And its mirror: the charge fails before the provider writes anything, then the inquiries say
  // `processing` until the saga escalates. The provider holds no charge, so the person who checks it
  // answers `charge-failed`. Without these orders that answer is met only by chance (an escalation
  // with nothing charged needs a 5xx on the charge and then failing inquiries on the same order).
  // Orders nobody meddles with, on a card that is not declined, so nothing else settles it first.
  const quiet = orders.filter((o) => o.meddle === 'none' && o.input.paymentMethod !== 'tok_declined');
  for (const [j, o] of quiet.entries()) {
    if (j % STUCK_EVERY !== 1) continue;
    const keyPrefix = chargeKeyFor(o.input.orderId);
    rules.unshift({ kind: 'fail-before-commit', target: 'charges', keyPrefix, count: 1 });
    rules.push({ kind: 'processing', target: 'inquiries', keyPrefix, count: 4 });
  }
  return rules;
}
