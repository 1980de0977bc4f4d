/** `load`: N orders with C in flight, a share on K hot SKUs, on products the run creates; then throughput, latency and aborts. */
import type { Command } from '@commander-js/extra-typings';
import {
  awaitWorkerProcesses,
  LoadOptionsError,
  parseLoadOptions,
  progressBar,
  runLoad,
  workerProcesses,
  type LoadOptions,
} from '../orders/load';
import { CliError, EXIT, type CliContext } from './context';
import { jsonOption, number, whole } from './options';
import { band, fetchStats, pct } from './stats';

interface LoadCliOptions {
  orders: number;
  concurrency: number;
  hotSkus: number;
  hotShare: number;
  declineShare: number;
  workers?: number;
  json?: boolean;
}

/** How long `--workers` waits for the worker processes to be seen (each poll reaches one partition of several). */
const WORKERS_WAIT_MS = 75_000;

async function load(opts: LoadCliOptions, ctx: CliContext): Promise<number> {
  const { cfg, io } = ctx;
  const { orders, concurrency, hotSkus, hotShare, declineShare } = opts;
  let loadOpts: LoadOptions;
  try {
    // First, before anything is reached: the options' rules are the schema's, and its error names the option.
    loadOpts = parseLoadOptions({ orders, concurrency, hotSkus, hotShare, declineShare, taskQueue: cfg.taskQueue });
  } catch (err) {
    if (err instanceof LoadOptionsError) throw new CliError(`invalid input: ${err.message}`, EXIT.invalid);
    throw err;
  }
  const store = ctx.needStore('app', 'load', 2); // it creates its products
  try {
    const client = await ctx.temporal();
    const workers =
      opts.workers === undefined
        ? await workerProcesses(client, cfg.taskQueue)
        : await awaitWorkerProcesses(client, cfg.taskQueue, opts.workers, {
            waitMs: WORKERS_WAIT_MS,
            everyMs: 5_000,
            onWait: (seen) =>
              io.err(
                `load --workers ${opts.workers}: ${seen} worker process(es) seen polling ${cfg.taskQueue} so far; asking again (up to ${WORKERS_WAIT_MS / 1000} s)`,
              ),
          });
    if (opts.workers !== undefined && workers.length < opts.workers) {
      throw new CliError(
        `load --workers ${opts.workers}: ${workers.length} worker process(es) poll task queue ${cfg.taskQueue}${workers.length ? ` (${workers.join(', ')})` : ''}; start them with npm start -- --workers ${opts.workers}`,
        EXIT.notCompleted,
      );
    }
    const bar = progressBar();
    const summary = await runLoad(client, store, { ...loadOpts, onProgress: bar, stats: () => fetchStats(cfg) });
    bar.end();
    const { orderIds: _ids, ...printable } = summary;
    // With several workers the abort rate is the one worker's at WORKER_METRICS_URL: the JSON says which.
    const abortRateFrom = summary.abortRate !== undefined ? { abortRateFrom: cfg.workerMetricsUrl } : {};
    if (opts.json) io.out(JSON.stringify({ ...printable, ...abortRateFrom, workers: workers.length }));
    else {
      io.out(
        `load ${summary.runId}: ${summary.orders} orders, concurrency ${concurrency}, ${hotSkus} hot SKU(s) taking ${pct(hotShare)}, ${workers.length} worker process(es) polling`,
      );
      io.out(`  throughput:   ${summary.ordersPerSecond} orders/s over ${summary.seconds} s`);
      io.out(
        `  saga latency: p50 ${summary.latencyMs.p50} ms, p99 ${summary.latencyMs.p99} ms, max ${summary.latencyMs.max} ms`,
      );
      io.out(
        `  statuses:     ${
          Object.entries(summary.statuses)
            .map(([k, v]) => `${k} ${v}`)
            .join(', ') || '-'
        }${summary.errors ? `; errors ${summary.errors}` : ''}`,
      );
      if (summary.abortRate !== undefined) {
        io.out(
          `  abort rate:   ${pct(summary.abortRate)} (${band(summary.abortRate)}) over ${summary.casAttempts} CAS attempts; ${summary.fallbacks} sent to the serial lane${workers.length > 1 ? ` (the worker at ${cfg.workerMetricsUrl} only, one of ${workers.length})` : ''}`,
        );
      }
      for (const e of summary.firstErrors) io.err(`  error: ${e}`);
    }
    return summary.errors === 0 ? EXIT.ok : EXIT.notCompleted;
  } finally {
    await store.close();
  }
}

export function register(cli: Command, ctx: CliContext): void {
  cli
    .command('load')
    .summary('a load: N orders, C in flight, K hot SKUs')
    .description(
      `Places N orders (1 line, 1 unit each) with C in flight, a share of them on K hot SKUs and the rest on 50 cold ones, on products the run creates (LOAD-<run>-…, so it needs DATABASE_URL). Shows a progress bar on a terminal, then orders/s, p50/p99 saga latency, statuses, the abort rate and the worker processes polling the task queue.`,
    )
    // Their ranges are the load options' schema's (orders/load.ts), checked before anything is reached.
    .requiredOption('--orders <N>', 'how many orders', number)
    .option('--concurrency <C>', 'orders in flight', number, 10)
    .option('--hot-skus <K>', 'how many hot SKUs', number, 1)
    .option('--hot-share <F>', 'the share of orders on the hot SKUs, 0 to 1', number, 0.3)
    .option('--decline-share <F>', 'the share of orders paid with a declined card, 0 to 1', number, 0)
    .option(
      '--workers <W>',
      `refuse to start (exit 1, nothing written) unless W worker processes poll the task queue (asked again for up to ${WORKERS_WAIT_MS / 1000} s)`,
      whole(1, 64),
    )
    .addOption(jsonOption())
    .action(async (opts) => ctx.done(await load(opts, ctx)));
}
