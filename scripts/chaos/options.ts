/**
 * The soak's settings: its command line (parsed and checked before anything starts), the timings
 * that follow from --quick, and the saga's short timers.
 */
import { parseArgs } from 'node:util';
import type { SagaConfig } from '../../workflows/order-saga';

export const USAGE =
  'usage: npm run chaos [-- --quick] [-- --orders N] [-- --max-minutes M] [-- --temporal dev|server] [-- --workers N]';

export interface SoakOptions {
  quick: boolean;
  temporal: 'dev' | 'server';
  workerCount: number;
  /** Orders to place (the load may stop earlier, at maxMinutes). */
  count: number;
  /** Minutes of load, counted from the start of the soak (bring-up included). */
  maxMinutes: number;
  /** About how often each worker process is SIGKILLed. */
  killEveryMs: number;
  /** How long the outage window refuses every call to the provider. */
  outageMs: number;
  /** Orders in flight at once. */
  concurrency: number;
}

/** The command line's options, or `'help'` for --help (which wins over every other option). */
export function parseOptions(): SoakOptions | 'help' {
  const { values } = parseArgs({
    options: {
      quick: { type: 'boolean' },
      orders: { type: 'string' },
      'max-minutes': { type: 'string' },
      temporal: { type: 'string' },
      workers: { type: 'string' },
      help: { type: 'boolean' },
    },
  });
  if (values.help) return 'help';
  const temporal = values.temporal ?? 'dev';
  if (temporal !== 'dev' && temporal !== 'server') throw new Error(`--temporal: dev or server, not "${temporal}"`);
  const workerCount = Number(values.workers ?? '2');
  if (!Number.isInteger(workerCount) || workerCount < 1 || workerCount > 8)
    throw new Error('--workers: a whole number from 1 to 8');
  const quick = !!values.quick;
  const count = Number(values.orders ?? (quick ? 140 : 500));
  const maxMinutes = Number(values['max-minutes'] ?? (quick ? 4 : 8));
  if (!Number.isInteger(count) || count < 1 || count > 5000) throw new Error('--orders: a whole number from 1 to 5000');
  if (!(maxMinutes > 0 && maxMinutes <= 60)) throw new Error('--max-minutes: a number from 1 to 60');
  return {
    quick,
    temporal,
    workerCount,
    count,
    maxMinutes,
    killEveryMs: quick ? 9_000 : 10_000,
    outageMs: quick ? 10_000 : 12_000,
    concurrency: 20,
  };
}

/** Short timers, so that what takes hours in production (escalation, the deadline) happens within the soak. */
export const SAGA_CONFIG: Partial<SagaConfig> = {
  deadlineMs: 120_000,
  compensationRetryMaxMs: 5_000,
  unknownEscalationMs: 6_000,
  inquiryBaseMs: 1_000,
  inquiryMaxMs: 4_000,
  forwardRetryLimitMs: 15_000,
};
