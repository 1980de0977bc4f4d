/**
 * Run-time fault injection for the payment provider, set over its admin API. A rule applies to the
 * next `count` matching calls, or at a `rate`, or for `forMs` milliseconds; `keyPrefix` limits it to
 * idempotency keys that start with the prefix, `exceptClient` leaves alone the calls of one caller (by
 * its X-Client-Name). A rule that matches a call is used up by it; the call
 * counts as a fault only where the fault was applied (a call refused before, or replayed, is not).
 */

export const FAULT_KINDS = ['lose-response-after-commit', 'fail-before-commit', 'delay', 'processing', 'outage'] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];
export const FAULT_TARGETS = ['charges', 'refunds', 'inquiries'] as const;
export type FaultTarget = (typeof FAULT_TARGETS)[number];

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

export type FaultRequest = Omit<FaultRule, 'id' | 'remaining' | 'rate' | 'until'> & { count?: number; rate?: number; forMs?: number };

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

/** Validates an admin request; throws an Error naming the field. */
export function parseFaultRequest(body: Record<string, unknown>): FaultRequest {
  const bad = (field: string, msg: string): never => {
    throw Object.assign(new Error(`${field}: ${msg}`), { field });
  };
  for (const k of Object.keys(body)) {
    if (!['kind', 'target', 'count', 'rate', 'forMs', 'keyPrefix', 'exceptClient', 'delayMs', 'mode'].includes(k)) bad(k, 'unknown field');
  }
  if (!FAULT_KINDS.includes(body.kind as FaultKind)) bad('kind', `must be one of ${FAULT_KINDS.join(', ')}`);
  const kind = body.kind as FaultKind;
  const target = (body.target ?? DEFAULT_TARGET[kind]) as FaultTarget;
  if (!FAULT_TARGETS.includes(target)) bad('target', `must be one of ${FAULT_TARGETS.join(', ')}`);
  if (kind === 'processing' && target !== 'inquiries') bad('target', 'processing applies to inquiries');
  const req: FaultRequest = { kind, target };
  const int = (v: unknown, field: string, min: number, max: number): number => {
    if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) bad(field, `must be a whole number from ${min} to ${max}`);
    return v as number;
  };
  if (body.count !== undefined) req.count = int(body.count, 'count', 1, 1_000_000);
  if (body.forMs !== undefined) req.forMs = int(body.forMs, 'forMs', 1, 86_400_000);
  if (body.rate !== undefined) {
    if (typeof body.rate !== 'number' || !(body.rate > 0 && body.rate <= 1)) bad('rate', 'must be a number in (0, 1]');
    req.rate = body.rate as number;
  }
  if (req.count === undefined && req.rate === undefined && req.forMs === undefined) bad('count', 'give count, rate or forMs');
  if (body.keyPrefix !== undefined) {
    if (typeof body.keyPrefix !== 'string' || body.keyPrefix.length === 0 || body.keyPrefix.length > 200) bad('keyPrefix', 'must be a non-empty string');
    req.keyPrefix = body.keyPrefix as string;
  }
  if (body.exceptClient !== undefined) {
    if (typeof body.exceptClient !== 'string' || !/^[\w.-]{1,64}$/.test(body.exceptClient)) bad('exceptClient', 'must be a client name (letters, digits, "_", ".", "-"; at most 64)');
    req.exceptClient = body.exceptClient as string;
  }
  if (kind === 'delay') req.delayMs = int(body.delayMs, 'delayMs', 1, 600_000);
  else if (body.delayMs !== undefined) bad('delayMs', 'only for kind delay');
  if (body.mode !== undefined) {
    if (kind !== 'lose-response-after-commit' || !['drop', 'hang'].includes(body.mode as string)) bad('mode', 'drop or hang, only for lose-response-after-commit');
    req.mode = body.mode as 'drop' | 'hang';
  }
  return req;
}

const inForce = (r: FaultRule, now: number): boolean => (r.remaining === undefined || r.remaining > 0) && (r.until === undefined || r.until > now);

export class FaultBook {
  private rules: FaultRule[] = [];
  private nextId = 1;
  /** Faults applied, per target and kind. */
  readonly applied: FaultCounts = zeroCounts();

  /** Faults applied, per kind (all targets). */
  get injected(): Record<FaultKind, number> {
    return Object.fromEntries(FAULT_KINDS.map((k) => [k, FAULT_TARGETS.reduce((n, t) => n + this.applied[t][k], 0)])) as Record<FaultKind, number>;
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
  take(target: FaultTarget, key: string, client?: string, random: () => number = Math.random): Map<FaultKind, FaultRule> {
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
