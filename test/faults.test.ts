/** The provider's fault book: a matched fault is counted only once it is applied, and given back otherwise. */
import { describe, expect, it } from 'vitest';
import {
  AUTHORIZATION_FAULT_TARGETS,
  CHARGE_FAULT_TARGETS,
  FAULT_TARGETS,
  FaultBook,
  parseFaultRequest,
} from '../provider/faults';

describe('fault book', () => {
  it('counts a fault only when the caller applies it, per target and kind', () => {
    const book = new FaultBook();
    book.add({ kind: 'fail-before-commit', target: 'refunds', rate: 1 });
    const fired = book.take('refunds', 'k1');
    expect([...fired.keys()]).toEqual(['fail-before-commit']);
    expect(book.applied.refunds['fail-before-commit']).toBe(0); // matched, not yet applied
    book.apply('refunds', 'fail-before-commit');
    expect(book.applied.refunds['fail-before-commit']).toBe(1);
    expect(book.applied.charges['fail-before-commit']).toBe(0);
    expect(book.injected['fail-before-commit']).toBe(1);
  });

  it('a matched call that was not applied goes back to its rule; an applied one uses it up', () => {
    const book = new FaultBook();
    const rule = book.add({ kind: 'lose-response-after-commit', target: 'charges', count: 1 });
    expect(book.take('charges', 'k1').get('lose-response-after-commit')).toBe(rule);
    expect(book.take('charges', 'k2').size).toBe(0); // the one call is taken meanwhile
    book.release(rule); // k1 was refused before the fault took effect
    expect(book.list()).toHaveLength(1);
    expect(book.take('charges', 'k3').get('lose-response-after-commit')).toBe(rule);
    book.apply('charges', 'lose-response-after-commit');
    expect(book.list()).toHaveLength(0);
    expect(book.take('charges', 'k4').size).toBe(0);
    expect(book.injected['lose-response-after-commit']).toBe(1);
  });

  it('respects target, key prefix, rate and time window', () => {
    const book = new FaultBook();
    book.add({ kind: 'processing', target: 'inquiries', count: 5, keyPrefix: 'order-1:' });
    book.add({ kind: 'delay', target: 'refunds', delayMs: 10, rate: 0.5 });
    book.add({ kind: 'outage', target: 'charges', forMs: 1_000 }, Date.now() - 2_000); // already over
    expect(book.take('inquiries', 'order-2:charge').size).toBe(0);
    expect(book.take('inquiries', 'order-1:charge').has('processing')).toBe(true);
    expect(book.take('refunds', 'x', undefined, () => 0.7).size).toBe(0);
    expect(book.take('refunds', 'x', undefined, () => 0.2).has('delay')).toBe(true);
    expect(book.take('charges', 'x').size).toBe(0);
  });

  it('exceptClient leaves one caller alone: its calls do not use the rule up', () => {
    const book = new FaultBook();
    const rule = book.add(
      parseFaultRequest({
        kind: 'lose-response-after-commit',
        target: 'refunds',
        count: 1,
        exceptClient: 'chaos-operator',
      }),
    );
    expect(book.take('refunds', 'k1', 'chaos-operator').size).toBe(0);
    expect(book.take('refunds', 'k1', 'chaos-operator').size).toBe(0);
    expect(book.take('refunds', 'k1').get('lose-response-after-commit')).toBe(rule); // still there for the saga
    expect(book.take('refunds', 'k2').size).toBe(0);
    expect(() => parseFaultRequest({ kind: 'outage', count: 1, exceptClient: 'bad name' })).toThrow(/^exceptClient: /);
  });

  it('parses every kind for the targets it applies to, naming a bad field', () => {
    expect(parseFaultRequest({ kind: 'outage', target: 'refunds', forMs: 5_000 })).toMatchObject({
      kind: 'outage',
      target: 'refunds',
    });
    expect(parseFaultRequest({ kind: 'lose-response-after-commit', target: 'inquiries', count: 1 })).toMatchObject({
      target: 'inquiries',
    });
    expect(() => parseFaultRequest({ kind: 'processing', target: 'charges', count: 1 })).toThrow(/^target: /);
    expect(() => parseFaultRequest({ kind: 'outage' })).toThrow(/^count: give count, rate or forMs/);
    expect(() => parseFaultRequest({ kind: 'delay', count: 1 })).toThrow(/^delayMs: /);
  });

  it('the authorization API has targets of its own, counted apart from the charge API', () => {
    expect(FAULT_TARGETS).toEqual([...CHARGE_FAULT_TARGETS, ...AUTHORIZATION_FAULT_TARGETS]);
    expect(AUTHORIZATION_FAULT_TARGETS).toEqual([
      'authorizations',
      'captures',
      'voids',
      'authorization-cancels',
      'authorization-inquiries',
      'capture-inquiries',
    ]);
    const book = new FaultBook();
    book.add(parseFaultRequest({ kind: 'delay', target: 'captures', delayMs: 10, count: 1 }));
    book.add(parseFaultRequest({ kind: 'processing', target: 'capture-inquiries', count: 1 }));
    expect(book.take('charges', 'k1').size).toBe(0);
    expect(book.take('authorizations', 'k1').size).toBe(0);
    expect(book.take('captures', 'k1').has('delay')).toBe(true);
    expect(book.take('inquiries', 'k1').size).toBe(0);
    expect(book.take('capture-inquiries', 'k1').has('processing')).toBe(true);
    book.apply('captures', 'delay');
    expect(book.applied.captures.delay).toBe(1);
    expect(book.applied.charges.delay).toBe(0);
    expect(book.injected.delay).toBe(1);
    for (const target of ['authorization-inquiries', 'capture-inquiries', 'authorization-cancels'])
      expect(parseFaultRequest({ kind: 'processing', target, count: 1 }).target).toBe(target);
    for (const target of ['authorizations', 'captures', 'voids'])
      expect(() => parseFaultRequest({ kind: 'processing', target, count: 1 })).toThrow(
        /^target: processing applies to /,
      );
    expect(() => parseFaultRequest({ kind: 'outage', target: 'holds', count: 1 })).toThrow(
      /^target: must be one of .*capture-inquiries/,
    );
  });
});
