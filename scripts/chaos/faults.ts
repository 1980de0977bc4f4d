/**
 * The soak's fault plan for the provider: which faults every target meets, at what rate, and the
 * orders singled out for a fault of their own (a slow authorization for the customer who cancels
 * during it, a lost authorization answer or a failed one followed by `processing` inquiries).
 */
import { authorizeKeyFor } from '../../domain/order';
import { FAULT_KINDS, PROCESSING_TARGETS, type FaultRequest, type FaultTarget } from '../../provider/faults';
import type { ChaosOrder } from './orders';
import { OPERATOR_CLIENT } from './stack';

/**
 * The provider calls the saga makes for an order of the authorization era (every order the soak
 * places): the hold, its inquiry, its void (the technical cancel of the key, which releases a hold
 * and closes a key never used), the capture and its inquiry. The charge API's calls are made only for
 * orders of the charge era, which the soak does not place.
 */
export const SAGA_FAULT_TARGETS: readonly FaultTarget[] = [
  'authorizations',
  'authorization-inquiries',
  'authorization-cancels',
  'captures',
  'capture-inquiries',
];

/** The fault kinds a target can meet (`processing` only where an answer can say it). */
export const kindsFor = (target: FaultTarget): string[] =>
  FAULT_KINDS.filter((kind) => kind !== 'outage' && (kind !== 'processing' || PROCESSING_TARGETS.includes(target)));

/** Every fault kind that applies to a target the saga calls (the outage window is one, over all targets). */
export const APPLICABLE = SAGA_FAULT_TARGETS.flatMap((target) => kindsFor(target).map((kind) => ({ target, kind })));

/** How long the authorization of an order whose open run is reset is held (below the worker's request timeout). */
export const RESET_OPEN_HOLD_MS = 1_000;

/** Every `1 in STUCK_EVERY` order: the authorization's answer is lost, then the provider says `processing` for a while. */
export const STUCK_EVERY = 25;

/** The provider's fault rules for these orders; `slowMs` is a delay past the worker's request timeout. */
export function faultRules(orders: ChaosOrder[], slowMs: number): FaultRequest[] {
  const always = 86_400_000;
  const rate: Record<string, Record<string, number>> = {
    authorizations: { 'lose-response-after-commit': 0.1, 'fail-before-commit': 0.08, delay: 0.06 },
    'authorization-inquiries': {
      processing: 0.2,
      'fail-before-commit': 0.1,
      delay: 0.05,
      'lose-response-after-commit': 0.05,
    },
    // The void: the technical cancel of the hold's key, the compensation on every backward path after
    // the hold was asked for.
    'authorization-cancels': {
      processing: 0.2,
      'lose-response-after-commit': 0.2,
      'fail-before-commit': 0.2,
      delay: 0.1,
    },
    captures: { 'lose-response-after-commit': 0.1, 'fail-before-commit': 0.08, delay: 0.06 },
    'capture-inquiries': {
      processing: 0.2,
      'fail-before-commit': 0.1,
      delay: 0.05,
      'lose-response-after-commit': 0.05,
    },
  };
  const rules: FaultRequest[] = [];
  for (const [target, kinds] of Object.entries(rate)) {
    for (const [kind, r] of Object.entries(kinds)) {
      const base = { kind, target, ...(kind === 'delay' ? { delayMs: slowMs } : {}) } as FaultRequest;
      // The first calls of the saga meet each fault for sure (the operators' own calls, with the saga's
      // keys, must not use these up), then the rate, for everyone. A 5xx before the work hides the
      // call's other faults, so it takes one call, not two: voids are few (a cancel after the hold
      // mostly comes after the pivot), and the second void call must still meet the lost response.
      rules.push({ ...base, count: kind === 'fail-before-commit' ? 1 : 2, exceptClient: OPERATOR_CLIENT });
      rules.push({ ...base, rate: r, forMs: always });
    }
  }
  for (const o of orders) {
    // The customer who cancels during the authorization meets a slow one: the hold is made (after the
    // request timed out), the inquiry finds it, and the cancel then voids it. Voids are otherwise few,
    // and the soak must see every void fault.
    if (o.meddle === 'cancel-in-authorization')
      rules.unshift({
        kind: 'delay',
        target: 'authorizations',
        keyPrefix: authorizeKeyFor(o.input.orderId),
        count: 1,
        delayMs: slowMs,
      });
    // The person who resets an open run needs it open: the authorization takes 1 s (within the
    // worker's timeout, so it is simply slow), and the Reset comes before it ends
    // (people/reset-and-start-again.ts).
    if (o.meddle === 'reset-open')
      rules.unshift({
        kind: 'delay',
        target: 'authorizations',
        keyPrefix: authorizeKeyFor(o.input.orderId),
        count: 1,
        delayMs: RESET_OPEN_HOLD_MS,
      });
  }
  for (const [i, o] of orders.entries()) {
    if (i % STUCK_EVERY !== STUCK_EVERY - 1) continue;
    const keyPrefix = authorizeKeyFor(o.input.orderId);
    rules.push({ kind: 'lose-response-after-commit', target: 'authorizations', keyPrefix, count: 1 });
    rules.push({ kind: 'processing', target: 'authorization-inquiries', keyPrefix, count: 4 });
  }
  // And its mirror: the authorization fails before the provider writes anything, then the inquiries
  // say `processing` until the saga escalates. The provider holds nothing, so the person who checks it
  // answers `charge-failed`. Without these orders that answer is met only by chance (an escalation
  // with nothing held needs a 5xx on the hold and then failing inquiries on the same order).
  // Orders nobody meddles with, on a card that is not declined, so nothing else settles it first.
  const quiet = orders.filter((o) => o.meddle === 'none' && o.input.paymentMethod !== 'tok_declined');
  for (const [j, o] of quiet.entries()) {
    if (j % STUCK_EVERY !== 1) continue;
    const keyPrefix = authorizeKeyFor(o.input.orderId);
    rules.unshift({ kind: 'fail-before-commit', target: 'authorizations', keyPrefix, count: 1 });
    rules.push({ kind: 'processing', target: 'authorization-inquiries', keyPrefix, count: 4 });
  }
  return rules;
}
