/** What the Web UI shows of a run: the static summary and the current details (pure functions). */
import { describe, expect, it } from 'vitest';
import { formatMoney, orderSummary, type OrderInput } from '../domain/order';
import { currentDetails } from '../workflows/details';
import type { SagaState } from '../workflows/messages';

const order: OrderInput = {
  orderId: 'o-1',
  customerId: 'cust-42',
  currency: 'USD',
  paymentMethod: 'tok_visa',
  items: [
    { sku: 'SKU-A', qty: 2, unitPriceCents: 1999 },
    { sku: 'SKU-B', qty: 1, unitPriceCents: 1250 },
  ],
};
const state = (over: Partial<SagaState> = {}): SagaState => ({
  orderId: 'o-1',
  status: 'RESERVED',
  step: 'chargePayment',
  stepsDone: ['createOrder', 'reserveInventory'],
  compensations: ['releaseInventory', 'refundPayment'],
  compensationsRun: [],
  unknowns: [],
  attempts: {},
  pivotPassed: false,
  ...over,
});

describe('what a person reads in the Web UI', () => {
  it('money and the static summary read as a person writes them', () => {
    expect(formatMoney(5248, 'USD')).toBe('52.48 USD');
    expect(formatMoney(5, 'EUR')).toBe('0.05 EUR');
    expect(formatMoney(100_000, 'USD')).toBe('1000.00 USD');
    expect(orderSummary(order)).toBe('Order o-1 for cust-42: 2×SKU-A, 1×SKU-B — 52.48 USD');
  });

  it('the current details show the step, the steps done, the compensation stack and the unknowns', () => {
    const text = currentDetails(order, state({ unknowns: ['charge'] }));
    expect(text).toContain('- **RESERVED** · step: chargePayment');
    expect(text).toContain('createOrder → reserveInventory');
    expect(text).toContain('refundPayment ← releaseInventory'); // the top of the stack runs first
    expect(text).toContain('charge `o-1:charge`');
    expect(text).not.toContain('Needs attention');
  });

  it('a saga that awaits a person says what to check and the exact resolve commands', () => {
    const charge = currentDetails(
      order,
      state({ status: 'NEEDS_ATTENTION', awaiting: 'charge-outcome', reason: 'charge o-1:charge outcome unknown' }),
    );
    expect(charge).toContain('### Needs attention: charge-outcome');
    expect(charge).toContain('GET /v1/charges/o-1:charge');
    expect(charge).toContain('npx tsx client.ts resolve o-1 --action charge-succeeded --note');
    expect(charge).toContain('npx tsx client.ts resolve o-1 --action charge-failed --note');
    const comp = currentDetails(
      order,
      state({ status: 'NEEDS_ATTENTION', awaiting: 'compensation', step: 'compensate:refundPayment' }),
    );
    expect(comp).toContain('o-1:charge:refund');
    expect(comp).toContain('--action retry');
    expect(comp).toContain('--action mark-resolved');
    const fwd = currentDetails(
      order,
      state({ status: 'NEEDS_ATTENTION', awaiting: 'forward-step', step: 'sendConfirmation', pivotPassed: true }),
    );
    expect(fwd).toContain('`sendConfirmation` failed after the pivot');
    expect(fwd).not.toContain('charge-succeeded');
  });
});
