import { describe, expect, it } from 'vitest';
import { OrderValidationError, parseOrder } from '../domain/order';
import { MALFORMED_ORDERS, VALID_ORDER } from './support/malformed-orders';

describe('order input schema', () => {
  it('accepts a valid order and returns a clean copy', () => {
    expect(parseOrder(VALID_ORDER)).toEqual(VALID_ORDER);
  });

  it.each(MALFORMED_ORDERS)('rejects $name, naming the field', ({ order, field }) => {
    let caught: unknown;
    try {
      parseOrder(order);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(OrderValidationError);
    expect((caught as OrderValidationError).message).toMatch(field);
  });

  it('covers at least 30 malformed orders', () => {
    expect(MALFORMED_ORDERS.length).toBeGreaterThanOrEqual(30);
  });
});
