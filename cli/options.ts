/**
 * The option and argument parsers the commands share: each parser names what it wants, commander
 * names the option; and the options several commands take (--json, --wait, <orderId>).
 */
import { InvalidArgumentError, Option } from '@commander-js/extra-typings';
import type { GenericSchema, InferOutput } from 'valibot';
import { IdSchema, LIMITS } from '../domain/order';
import { parseWith, wholeNumber } from '../domain/validation';

/** A whole number from min to max (the shared rule of domain/validation.ts). */
export const whole =
  (min: number, max: number) =>
  (text: string): number =>
    checked(wholeNumber(min, max, `Expected a whole number from ${min} to ${max}.`), number(text));

/** An amount of money: a whole number of cents, at least 1 and at most an order's largest total. */
export function cents(text: string): number {
  const n = Number(text);
  if (!/^\d+$/.test(text.trim()) || n < 1 || n > LIMITS.maxTotalCents)
    throw new InvalidArgumentError(`Expected a whole number of cents from 1 to ${LIMITS.maxTotalCents}.`);
  return n;
}

/** Text to a number; what range it must be in is the schema's to say (orders/load.ts for load's options). */
export function number(text: string): number {
  const n = Number(text);
  if (text.trim() === '' || !Number.isFinite(n)) throw new InvalidArgumentError('Expected a number.');
  return n;
}

/** The value, if `schema` accepts it; else its problem, for commander to print after the option's name. */
export function checked<S extends GenericSchema>(schema: S, value: unknown, what = ''): InferOutput<S> {
  return parseWith(schema, value, (_field, problem) => {
    throw new InvalidArgumentError(what ? `Expected ${what}: it ${problem}.` : problem);
  });
}

export const idArg =
  (what: string) =>
  (text: string): string =>
    checked(IdSchema, text, what);

/** A Schedule interval: a whole number of s, m, h or d, at least a minute. */
export function interval(v: string): string {
  if (!/^\d+(s|m|h|d)$/.test(v) || Number.parseInt(v, 10) === 0 || (v.endsWith('s') && Number.parseInt(v, 10) < 60)) {
    throw new InvalidArgumentError('Expected a duration such as 15m, 1h or 1d (at least 60s).');
  }
  return v;
}

/** A whole number from 1 to 100 (a count an operator sets). */
export function positiveInt(text: string): number {
  const n = Number(text);
  if (!/^\d+$/.test(text.trim()) || n < 1 || n > 100)
    throw new InvalidArgumentError('Expected a whole number from 1 to 100.');
  return n;
}

/** An interval() duration (60s, 15m, 1h, 1d) in milliseconds. */
export function durationMs(v: string): number {
  const unit = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 }[v.slice(-1) as 's' | 'm' | 'h' | 'd'];
  return Number.parseInt(v, 10) * unit;
}

export const jsonOption = (what = 'print JSON instead of text') => new Option('--json', what);
export const waitOption = (what: string) => new Option('--wait <seconds>', what).argParser(whole(1, 3600)).default(60);
export const orderIdArgument = ['<orderId>', 'the order', idArg('an order ID')] as const;
