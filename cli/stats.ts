/**
 * `stats`: the worker's per-SKU inventory metrics with a health band; also their fetch and the
 * band, which `load` reports too.
 */
import type { Command } from '@commander-js/extra-typings';
import { ABORT_RATE_CRITICAL, ABORT_RATE_HEALTHY, type SkuStats } from '../activities/inventory-metrics';
import type { AppConfig } from '../ops/config';
import { CliError, EXIT, type CliContext } from './context';
import { jsonOption } from './options';

export async function fetchStats(cfg: AppConfig): Promise<SkuStats[]> {
  let res: Response;
  try {
    res = await fetch(`${cfg.workerMetricsUrl}/stats`, { signal: AbortSignal.timeout(5_000) });
  } catch (err) {
    throw new CliError(
      `cannot reach the worker's metrics at ${cfg.workerMetricsUrl}: ${(err as Error).message} (is the worker running?)`,
      EXIT.notCompleted,
    );
  }
  return ((await res.json()) as { skus: SkuStats[] }).skus;
}

export const band = (rate: number): string =>
  rate < ABORT_RATE_HEALTHY ? 'healthy' : rate > ABORT_RATE_CRITICAL ? 'CRITICAL' : 'warning';
export const pct = (x: number): string => `${(x * 100).toFixed(1)} %`;

async function stats(opts: { json?: boolean }, ctx: CliContext): Promise<number> {
  const { io } = ctx;
  const skus = await fetchStats(ctx.cfg);
  if (opts.json)
    return (io.out(JSON.stringify({ skus: skus.map((s) => ({ ...s, health: band(s.abortRate) })) })), EXIT.ok);
  if (skus.length === 0) return (io.out('no reservations yet'), EXIT.ok);
  io.out(
    `${'sku'.padEnd(28)} ${'attempts'.padStart(9)} ${'aborts'.padStart(8)} ${'abort rate'.padStart(11)} ${'recent'.padStart(8)} ${'fallbacks'.padStart(10)} ${'lane'.padStart(6)}  health`,
  );
  for (const s of skus) {
    io.out(
      `${s.sku.padEnd(28)} ${String(s.attempts).padStart(9)} ${String(s.aborts).padStart(8)} ${pct(s.abortRate).padStart(11)} ${pct(s.recentAbortRate).padStart(8)} ${String(s.fallbacks).padStart(10)} ${String(s.laneCommits).padStart(6)}  ${band(s.abortRate)}`,
    );
  }
  return EXIT.ok;
}

export function register(cli: Command, ctx: CliContext): void {
  cli
    .command('stats')
    .summary('per-SKU CAS attempts, aborts, abort rate, fallbacks')
    .description(
      `Per-SKU inventory metrics from the worker (WORKER_METRICS_URL), counted since it started: CAS attempts, aborts, abort rate (aborted attempts over task executions), recent abort rate, fallbacks to the serial lane and lane commits, with a health band (healthy below ${ABORT_RATE_HEALTHY * 100}%, critical above ${ABORT_RATE_CRITICAL * 100}%).`,
    )
    .addOption(jsonOption())
    .action(async (opts) => ctx.done(await stats(opts, ctx)));
}
