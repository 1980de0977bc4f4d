/**
 * Run-time fault injection for the payment provider, set over its admin API. A rule applies to the
 * next `count` matching calls, or at a `rate`, or for `forMs` milliseconds; `keyPrefix` limits it to
 * idempotency keys that start with the prefix, `exceptClient` leaves alone the calls of one caller (by
 * its X-Client-Name). A rule that matches a call is used up by it; the call
 * counts as a fault only where the fault was applied (a call refused before, or replayed, is not).
 */
import * as v from 'valibot';
import { parseWith, record, wholeNumber } from '../domain/validation';

export const FAULT_KINDS = [
  'lose-response-after-commit',
  'fail-before-commit',
  'delay',
  'processing',
  'outage',
] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];
/**
 * The calls of the charge API, which the saga makes today. `cancels`: the technical cancel (POST
 * /v1/charges/{key}/cancel), which the refund step sends first. `refunds` covers the refunds of
 * captures too (one endpoint).
 */
export const CHARGE_FAULT_TARGETS = ['charges', 'refunds', 'inquiries', 'cancels'] as const;
/**
 * The calls of the authorization API: POST /v1/authorizations (`authorizations`), its capture
 * (`captures`), void (`voids`) and technical cancel (`authorization-cancels`), and the inquiries GET
 * /v1/authorizations/{key} (`authorization-inquiries`) and GET /v1/captures/{key} (`capture-inquiries`).
 */
export const AUTHORIZATION_FAULT_TARGETS = [
  'authorizations',
  'captures',
  'voids',
  'authorization-cancels',
  'authorization-inquiries',
  'capture-inquiries',
] as const;
export const FAULT_TARGETS = [...CHARGE_FAULT_TARGETS, ...AUTHORIZATION_FAULT_TARGETS] as const;
export type FaultTarget = (typeof FAULT_TARGETS)[number];
/** The targets whose answer can say `processing`: the inquiries and the technical cancels. */
export const PROCESSING_TARGETS: readonly FaultTarget[] = [
  'inquiries',
  'cancels',
  'authorization-inquiries',
  'capture-inquiries',
  'authorization-cancels',
];

export interface FaultRule {
  id: number;
  kind: FaultKind;
  target: FaultTarget;
  /** Calls left; undefined = unlimited (until cleared, or while `until` has not passed). */
  remaining?: number;
  rate: number;
  until?: number;
  keyPrefix?: string;
  /** Calls whose X-Client-Name is this are left alone (a test's own operators, say). */
  exceptClient?: string;
  delayMs?: number;
  /** lose-response-after-commit: `drop` closes the connection, `hang` answers nothing until the caller gives up. */
  mode?: 'drop' | 'hang';
}

const DEFAULT_TARGET: Record<FaultKind, FaultTarget> = {
  'lose-response-after-commit': 'charges',
  'fail-before-commit': 'charges',
  delay: 'charges',
  processing: 'inquiries',
  outage: 'charges',
};

/** Applied faults, per target and kind. */
export type FaultCounts = Record<FaultTarget, Record<FaultKind, number>>;
const zeroCounts = (): FaultCounts =>
  Object.fromEntries(FAULT_TARGETS.map((t) => [t, Object.fromEntries(FAULT_KINDS.map((k) => [k, 0]))])) as FaultCounts;

/** A caller's X-Client-Name, as `exceptClient` names it. */
const CLIENT_NAME_MESSAGE = 'must be a client name (letters, digits, "_", ".", "-"; at most 64)';
export const ClientNameSchema = v.pipe(v.string(CLIENT_NAME_MESSAGE), v.regex(/^[\w.-]{1,64}$/, CLIENT_NAME_MESSAGE));

const rateMessage = 'must be a number in (0, 1]';
const modeMessage = 'drop or hang, only for lose-response-after-commit';

/** An admin request to set a rule; `target` defaults by kind. */
const FaultRequestSchema = v.pipe(
  record(
    {
      kind: v.picklist(FAULT_KINDS, `must be one of ${FAULT_KINDS.join(', ')}`),
      target: v.optional(v.picklist(FAULT_TARGETS, `must be one of ${FAULT_TARGETS.join(', ')}`)),
      count: v.optional(wholeNumber(1, 1_000_000)),
      rate: v.optional(v.pipe(v.number(rateMessage), v.gtValue(0, rateMessage), v.maxValue(1, rateMessage))),
      forMs: v.optional(wholeNumber(1, 86_400_000)),
      keyPrefix: v.optional(
        v.pipe(
          v.string('must be a non-empty string'),
          v.minLength(1, 'must be a non-empty string'),
          v.maxLength(200, 'must be a non-empty string'),
        ),
      ),
      exceptClient: v.optional(ClientNameSchema),
      delayMs: v.optional(wholeNumber(1, 600_000)),
      mode: v.optional(v.picklist(['drop', 'hang'], modeMessage)),
    },
    'must be a JSON object',
  ),
  v.forward(
    v.check(
      (r) => r.kind !== 'processing' || PROCESSING_TARGETS.includes(r.target ?? 'inquiries'),
      `processing applies to ${PROCESSING_TARGETS.join(', ')}`,
    ),
    ['target'],
  ),
  v.forward(
    v.check((r) => r.count !== undefined || r.rate !== undefined || r.forMs !== undefined, 'give count, rate or forMs'),
    ['count'],
  ),
  v.forward(
    v.check(
      (r) => r.kind !== 'delay' || r.delayMs !== undefined,
      'is required for kind delay (a whole number from 1 to 600000)',
    ),
    ['delayMs'],
  ),
  v.forward(
    v.check((r) => r.kind === 'delay' || r.delayMs === undefined, 'only for kind delay'),
    ['delayMs'],
  ),
  v.forward(
    v.check((r) => r.kind === 'lose-response-after-commit' || r.mode === undefined, modeMessage),
    ['mode'],
  ),
  v.transform((r) => ({ ...r, target: r.target ?? DEFAULT_TARGET[r.kind] })),
);
export type FaultRequest = v.InferOutput<typeof FaultRequestSchema>;

/**
 * Validates an admin request; calls `fail` with the field and the problem, by default throwing an
 * Error naming the field (`field: problem`, and a `field` property).
 */
export function parseFaultRequest(
  body: unknown,
  fail: (field: string, problem: string) => never = failWithError,
): FaultRequest {
  return parseWith(FaultRequestSchema, body, fail, 'body');
}

function failWithError(field: string, problem: string): never {
  throw Object.assign(new Error(`${field}: ${problem}`), { field });
}

const inForce = (r: FaultRule, now: number): boolean =>
  (r.remaining === undefined || r.remaining > 0) && (r.until === undefined || r.until > now);

export class FaultBook {
  private rules: FaultRule[] = [];
  private nextId = 1;
  /** Faults applied, per target and kind. */
  readonly applied: FaultCounts = zeroCounts();

  /** Faults applied, per kind (all targets). */
  get injected(): Record<FaultKind, number> {
    return Object.fromEntries(
      FAULT_KINDS.map((k) => [k, FAULT_TARGETS.reduce((n, t) => n + this.applied[t][k], 0)]),
    ) as Record<FaultKind, number>;
  }

  /** Records a fault as applied: the caller has delayed, failed, or dropped the call. */
  apply(target: FaultTarget, kind: FaultKind): void {
    this.applied[target][kind]++;
  }

  add(req: FaultRequest, now = Date.now()): FaultRule {
    const rule: FaultRule = {
      id: this.nextId++,
      kind: req.kind,
      target: req.target,
      rate: req.rate ?? 1,
      ...(req.count !== undefined ? { remaining: req.count } : {}),
      ...(req.forMs !== undefined ? { until: now + req.forMs } : {}),
      ...(req.keyPrefix ? { keyPrefix: req.keyPrefix } : {}),
      ...(req.exceptClient ? { exceptClient: req.exceptClient } : {}),
      ...(req.delayMs ? { delayMs: req.delayMs } : {}),
      ...(req.mode ? { mode: req.mode } : {}),
    };
    this.rules.push(rule);
    return rule;
  }

  clear(): void {
    this.rules = [];
  }

  /** The rules in force: calls left, window not passed. */
  list(now = Date.now()): FaultRule[] {
    return this.rules.filter((r) => inForce(r, now));
  }

  /**
   * The faults that match this call (at most one of each kind), counting their rules down. They are
   * not counted as applied here: the caller calls `apply` for each one it applies, and `release` for
   * each one it did not (a call refused before it, or a replay), which gives the call back to the rule.
   */
  take(
    target: FaultTarget,
    key: string,
    client?: string,
    random: () => number = Math.random,
  ): Map<FaultKind, FaultRule> {
    const fired = new Map<FaultKind, FaultRule>();
    const now = Date.now();
    this.rules = this.rules.filter((r) => r.until === undefined || r.until > now);
    for (const rule of this.rules) {
      if (!inForce(rule, now)) continue;
      if (rule.target !== target || fired.has(rule.kind)) continue;
      if (rule.keyPrefix && !key.startsWith(rule.keyPrefix)) continue;
      if (rule.exceptClient !== undefined && rule.exceptClient === client) continue;
      if (rule.rate < 1 && random() >= rule.rate) continue;
      if (rule.remaining !== undefined) rule.remaining--;
      fired.set(rule.kind, rule);
    }
    return fired;
  }

  /** Gives back a matched call the caller did not apply the fault to. */
  release(rule: FaultRule): void {
    if (rule.remaining !== undefined) rule.remaining++;
  }
}
