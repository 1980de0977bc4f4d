/**
 * The bench's command line (`npm run bench [-- --quick|--smoke] [-- --only <section>[,<section>…]]
 * [-- --temporal server]`): the sections,
 * the sizes each kind of run gives them, and the fixed settings every run shares.
 */
import { parseArgs } from 'node:util';
import type { EnginesOptions } from './engines';
import { LOCK_QUEUE_CASES, type LockQueueCase } from './lock-queue';
import { say } from './measure';

export const POOL_SIZE = 24; // one pool size for every strategy: 20 workers + 4 lane slots
export const WORKERS = 20;
export const LOGIC_MS = 20;
export const LANES = 4;
export const SKU_LEVELS = [1, 10, 1000];
/** How long a smoke may take before it fails. */
export const SMOKE_LIMIT_MS = 10 * 60_000;

/** The values of --only, one per section. */
export const SECTIONS = [
  'contention',
  'idle-latency',
  'saga-overhead',
  'engines',
  'trace',
  'commit-path',
  'lock-queue',
  'cli',
  'sweep',
  'storefront',
] as const;
export type Section = (typeof SECTIONS)[number];

export interface BenchOptions {
  /** --only: the sections to run (one, or several separated by commas); undefined: every section. */
  only: Section[] | undefined;
  /**
   * --temporal server: the saga-overhead section runs again on the real Temporal server (on the bench's
   * Postgres, as `npm start -- --temporal server` runs it), reported beside the dev server's, report only.
   */
  realServer: boolean;
  smoke: boolean;
  quick: boolean;
  /** The run's name in the report: full, quick or smoke. */
  kind: 'full' | 'quick' | 'smoke';
  /** Whether the run includes `section` (all of them unless --only names others). */
  wanted(section: Section): boolean;
  cellMs: number;
  commitSeconds: number;
  sagaOrders: number;
  /** Even: ABBA order; a quick run has as many rounds, shorter, for the spread. */
  sagaRounds: number;
  sagaConcurrency: number;
  sagaIdleOrders: number;
  idleOrders: number;
  cliRuns: number;
  traceWarmUps: number;
  lockQueueCases: readonly LockQueueCase[];
  engines: EnginesOptions;
  /** The sweep section's backlog sizes and page size. */
  sweep: { backlogs: number[]; pageSize: number };
  /** The storefront section's orders each way and events for the relay. */
  storefront: { orders: number; events: number };
}

/**
 * The options from the command line; undefined after --help (the usage is printed). An --only that names no
 * section, or a --temporal other than dev or server, ends the process with exit code 2.
 */
export function benchOptions(): BenchOptions | undefined {
  const { values } = parseArgs({
    options: {
      quick: { type: 'boolean' },
      smoke: { type: 'boolean' },
      only: { type: 'string' },
      temporal: { type: 'string' },
      help: { type: 'boolean' },
    },
  });
  if (values.help) {
    say(`Usage: npm run bench [-- --quick|--smoke] [-- --only ${SECTIONS.join('|')}[,…]] [-- --temporal dev|server]`);
    say('  quick: about 8 minutes; the full run about 11. --only runs the sections it names (commas between)');
    say("  and prints their targets; it does not write bench/results/ (that is the full table's).");
    say('  --temporal server: saga-overhead also runs on the real Temporal server on Postgres (built by');
    say("  scripts/ensure-servers.sh server), its table report only; the targets stay the dev server's.");
    say('  smoke: every section at its smallest size (a few minutes), for CI: exit 1 when a section');
    say('  breaks or prints no table; its figures mean nothing and nothing is written.');
    return undefined;
  }
  const only = values.only?.split(',').map((x) => x.trim());
  const bad = only?.find((x) => !(SECTIONS as readonly string[]).includes(x));
  if (only !== undefined && (bad !== undefined || only.length === 0)) {
    process.stderr.write(
      `bench: --only must name one or more of ${SECTIONS.join(', ')}, not ${JSON.stringify(bad ?? '')}\n`,
    );
    process.exit(2);
  }
  const temporal = values.temporal ?? 'dev';
  if (temporal !== 'dev' && temporal !== 'server') {
    process.stderr.write(`bench: --temporal must be dev or server, not ${JSON.stringify(temporal)}\n`);
    process.exit(2);
  }
  const smoke = !!values.smoke;
  const quick = !!values.quick;
  const size = <T>(full: T, q: T, s: T): T => (smoke ? s : quick ? q : full);
  return {
    only: only as Section[] | undefined,
    realServer: temporal === 'server',
    smoke,
    quick,
    kind: size('full', 'quick', 'smoke'),
    wanted: (section) => only === undefined || only.includes(section),
    cellMs: size(8_000, 2_500, 300),
    commitSeconds: size(10, 4, 1),
    sagaOrders: size(120, 30, 4),
    sagaRounds: size(4, 4, 2),
    sagaConcurrency: size(20, 20, 4),
    sagaIdleOrders: size(20, 20, 1),
    idleOrders: size(20, 8, 1),
    cliRuns: size(10, 5, 1),
    traceWarmUps: size(5, 5, 1),
    lockQueueCases: smoke ? LOCK_QUEUE_CASES.slice(-1) : LOCK_QUEUE_CASES,
    engines: size(
      { idleOrders: 20, orders: 120, concurrency: 20, rounds: 4 }, // as the saga's rounds
      { idleOrders: 10, orders: 40, concurrency: 20, rounds: 2 },
      { idleOrders: 1, orders: 4, concurrency: 4, rounds: 2 },
    ),
    sweep: size(
      { backlogs: [1_000, 10_000], pageSize: 1_000 },
      { backlogs: [1_000, 10_000], pageSize: 1_000 },
      { backlogs: [50, 200], pageSize: 50 },
    ),
    storefront: size({ orders: 30, events: 4_000 }, { orders: 15, events: 2_000 }, { orders: 2, events: 100 }),
  };
}
