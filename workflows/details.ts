/**
 * What a person reads on a run's page in the Web UI (its user metadata): the static summary given at
 * start, and the current details the saga keeps up to date. Pure functions of the saga's state.
 */
import {
  authorizeKeyFor,
  captureKeyFor,
  chargeKeyFor,
  refundKeyFor,
  TERMINAL_STATUSES,
  type OrderInput,
} from '../domain/order';
import type { SagaState } from './messages';

const cli = (orderId: string, action: string): string =>
  `npx tsx client.ts resolve ${orderId} --action ${action} --note "<what you checked>"`;

/** What to check, and the exact commands, for each thing the saga can wait on a person for. */
export function operatorHelp(
  orderId: string,
  awaiting: NonNullable<SagaState['awaiting']>,
  step: string,
): { check: string; commands: string[] } {
  const charge = chargeKeyFor(orderId);
  const hold = authorizeKeyFor(orderId);
  if (awaiting === 'charge-outcome' && step === 'authorizePayment') {
    return {
      check:
        `Ask the provider about the authorization \`${hold}\` (its dashboard, or \`GET /v1/authorizations/${hold}\`). ` +
        'Authorized → charge-succeeded (the hold stands; the saga ships, then captures). Declined or never seen → charge-failed (it compensates: the void closes the key). ' +
        'Still processing → wait. The saga asks the provider too and refuses an answer the provider contradicts.',
      commands: [cli(orderId, 'charge-succeeded'), cli(orderId, 'charge-failed')],
    };
  }
  if (awaiting === 'capture') {
    return {
      check:
        `The goods shipped; the money was not taken: the capture of \`${hold}\` (key \`${captureKeyFor(orderId)}\`) was refused or outlived its window. ` +
        'Retry captures again with the same keys (once the provider takes it); mark it resolved only once the provider shows a capture succeeded (the saga checks). ' +
        'A hold that lapsed cannot be captured: ask the customer for another payment. Never compensated: the goods are gone.',
      commands: [cli(orderId, 'retry'), cli(orderId, 'mark-resolved')],
    };
  }
  if (awaiting === 'charge-outcome') {
    return {
      check:
        `Ask the provider about charge \`${charge}\` (its dashboard, or \`GET /v1/charges/${charge}\`). ` +
        'Succeeded and not refunded → charge-succeeded (the saga ships). Failed or never seen → charge-failed (it compensates). ' +
        'Still processing → wait. The saga asks the provider too and refuses an answer the provider contradicts.',
      commands: [cli(orderId, 'charge-succeeded'), cli(orderId, 'charge-failed')],
    };
  }
  if (awaiting === 'compensation') {
    const what = step.endsWith('voidAuthorization')
      ? `the void of the hold \`${hold}\`: check the authorization with the provider; if it is still processing, wait`
      : step.endsWith('refundPayment')
        ? `the refund of \`${charge}\` (key \`${refundKeyFor(orderId)}\`): check the charge with the provider; if it is still processing, wait`
        : 'the release of the reserved stock: check the database is reachable and the reservation rows';
    return {
      check: `A compensation failed: ${what}. Fix the cause, then retry; or do it by hand (same key) and mark it resolved. The remaining compensations still run.`,
      commands: [cli(orderId, 'retry'), cli(orderId, 'mark-resolved')],
    };
  }
  return {
    check:
      `\`${step}\` failed after the pivot (the shipment): this order is never compensated. Fix the cause and retry, ` +
      'or do the step by hand (ship it; send the confirmation) and mark it resolved.',
    commands: [cli(orderId, 'retry'), cli(orderId, 'mark-resolved')],
  };
}

/** The current details: where the saga stands, in Markdown (the Web UI renders it). */
export function currentDetails(order: OrderInput, s: SagaState): string {
  const lines: string[] = [];
  if (s.awaiting) {
    // First, so that it is what a person sees without scrolling.
    const help = operatorHelp(order.orderId, s.awaiting, s.step);
    lines.push(
      `### Needs attention: ${s.awaiting}`,
      '',
      help.check,
      '',
      'Settle it with one of:',
      '',
      '```',
      ...help.commands,
      '```',
      '',
    );
  }
  lines.push(
    `- **${s.status}** · ${TERMINAL_STATUSES.includes(s.status) ? 'last step' : 'step'}: ${s.step}`,
    `- **Steps done:** ${s.stepsDone.join(' → ') || 'none yet'}`,
    `- **Compensation stack** (runs from the left): ${[...s.compensations].reverse().join(' ← ') || 'empty'}${s.compensationsRun.length ? ` · ran: ${s.compensationsRun.join(', ')}` : ''}`,
    `- **Unknown outcomes:** ${s.unknowns.length ? s.unknowns.map((u) => (u === 'charge' ? `charge \`${chargeKeyFor(order.orderId)}\` (asking the provider)` : u === 'authorization' ? `authorization \`${authorizeKeyFor(order.orderId)}\` (asking the provider)` : u === 'capture' ? `capture \`${captureKeyFor(order.orderId)}\` (asking the provider)` : u)).join(', ') : 'none'}`,
  );
  if (s.pivotPassed) lines.push('- **Past the pivot:** shipped; only forward from here.');
  if (s.reason) lines.push(`- **Reason:** ${s.reason}`);
  // The order itself is the run's summary; its card is the one thing the summary leaves out.
  lines.push(`- **Card:** \`${order.paymentMethod}\``);
  return lines.join('\n');
}
