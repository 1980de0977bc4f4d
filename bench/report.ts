/**
 * The bench's report: each section's table, as `npm run bench` prints it, and the targets' table.
 */
import { costTable } from './saga-cost';
import type { CliStartupResult } from './cli-startup';
import type { CommitPathResult } from './commit-path';
import { enginesTable, type EngineSide, type EnginesOptions } from './engines';
import type { IdleStep } from './idle-latency';
import type { LockQueueCase } from './lock-queue';
import { ratio, say } from './measure';
import { LANES, LOGIC_MS, WORKERS } from './options';
import type { SagaOverheadResult } from './saga-overhead';
import type { BurstResult, CellResult } from './strategies';
import type { StorefrontResult } from './storefront';
import { estimateSweep, type SweepBenchResult } from './sweep';
import type { Target } from './targets';
import type { TraceResult } from './trace';
import { formatTimeTable } from './waterfall';

export function reportCliStartup(cli: CliStartupResult): void {
  say(
    `\nThe command line's start-up (each command a process, spawn to exit; against this bench's own dev server, provider and worker; ${cli.temporal}):\n`,
  );
  say('| command | p50 ms | max ms | runs |');
  say('|---|---:|---:|---:|');
  for (const r of cli.rows) say(`| \`${r.command}\` | ${r.p50} | ${r.max} | ${r.runs} |`);
  say(
    `\nbin/client place, whole command p50 ${cli.place.wholeP50} ms; its orders' own end-to-end time (start to close, server's clock) p50 ${cli.place.orderP50} ms (${cli.place.runs} orders): the command adds ${cli.place.wholeP50 - cli.place.orderP50} ms. bin/client's build, on its first run after a change: ${cli.buildMs} ms.`,
  );
}

/** The engines' table, with the Temporal saga's row from the saga-overhead section when it ran. */
export function reportEngines(engines: EngineSide[] | string, opts: EnginesOptions, saga?: SagaOverheadResult): void {
  say(
    `\nEngines: the saga's essential work (createOrder, reserve, authorize through the provider, ship, capture through the provider, confirm: the project's own activities) on each engine, same Postgres and provider; ${opts.idleOrders} orders one at a time, then ${opts.rounds} rounds of ${opts.orders} with ${opts.concurrency} in flight (ABBA); CPU per order by process:\n`,
  );
  if (typeof engines === 'string') {
    say(`not measured: ${engines}`);
    return;
  }
  const sides: EngineSide[] = saga
    ? [
        {
          engine: 'Temporal saga (dev server; saga-overhead section)',
          idle: { p50: saga.idle.saga, p90: saga.idleSagaP90 },
          perSecond: saga.saga.perSecond,
          cpuMsPerOrder: saga.saga.cpuMs,
          cpuTotal: saga.saga.cpuTotal,
          persists:
            "every event of the run's history in the dev server's SQLite file (WAL, synchronous=normal: kept across a crash of the process, not a power cut)",
        },
        ...engines,
      ]
    : engines;
  say(enginesTable(sides, opts));
}

export function reportSagaOverhead(o: SagaOverheadResult, orders: number, rounds: number, concurrency: number): void {
  say(
    `\nSaga overhead (dev server, history in a SQLite file as npm start keeps it, ${orders} workflows × ${rounds} rounds, ${concurrency} in flight, rounds in ABBA order; the floors are the six essential steps as no-ops: all regular activities, and like for like, local or regular as the saga runs them):\n`,
  );
  say('| workflow | per s | p50 ms | p99 ms | one order, idle stack (ms) | history events |');
  say('|---|---:|---:|---:|---:|---:|');
  const row = (name: string, x: SagaOverheadResult['saga'], idle: number, events: number | string) =>
    say(`| ${name} | ${x.perSecond} | ${x.p50} | ${x.p99} | ${idle} | ${events} |`);
  const rel = (name: string, a: SagaOverheadResult['saga'], b: SagaOverheadResult['saga'], ia: number, ib: number) =>
    say(
      `| ${name} | ${ratio(a.perSecond, b.perSecond)}× | ${ratio(a.p50, b.p50)}× | ${ratio(a.p99, b.p99)}× | ${ratio(ia, ib)}× | |`,
    );
  row('full saga', o.saga, o.idle.saga, o.historyEvents.saga);
  row('essential-work floor (6 regular)', o.floor, o.idle.floor, o.historyEvents.floor);
  row('like-for-like floor', o.like, o.idle.like, o.historyEvents.like);
  rel('saga / essential-work floor', o.saga, o.floor, o.idle.saga, o.idle.floor);
  rel('saga / like-for-like floor', o.saga, o.like, o.idle.saga, o.idle.like);
  row('saga, no payload codec', o.plain, o.idle.plain, '');
  rel("codec's cost: with / without", o.saga, o.plain, o.idle.saga, o.idle.plain);
  say(
    `\nSaga against the like-for-like floor, round by round: throughput ${o.likeSpread.throughput.min}–${o.likeSpread.throughput.max}×, p50 ${o.likeSpread.p50.min}–${o.likeSpread.p50.max}×`,
  );
  say(
    `\nThe saga's own cost, counted (promises: median of one workflow at a time, workflow code in a counting process of its own):\n`,
  );
  for (const line of costTable(o.cost.saga, o.cost.like)) say(line);
  const procs = Object.keys(o.saga.cpuMs);
  say(
    '\nCPU per workflow by process, ms (during the rounds under load; worker = the bench process: worker and load generator):\n',
  );
  say(`| workflow | ${procs.join(' | ')} | total |`);
  say(`|---|${procs.map(() => '---:').join('|')}|---:|`);
  for (const [name, x] of [
    ['full saga', o.saga],
    ['essential-work floor (6 regular)', o.floor],
    ['like-for-like floor', o.like],
    ['saga, no payload codec', o.plain],
  ] as const)
    say(`| ${name} | ${procs.map((p) => x.cpuMs[p]).join(' | ')} | ${x.cpuTotal} |`);
}

/** The contention matrix: a row per strategy and SKU level. */
export function reportContention(cells: CellResult[], cellMs: number): void {
  say(
    `Contention matrix: ${WORKERS} concurrent workers, ${LOGIC_MS} ms of logic per task, ${cellMs / 1000} s per cell, ${LANES} serial lanes for adaptive\n`,
  );
  say('| strategy | SKUs | units/s | p50 ms | p99 ms | abort rate | attempts | lane | gave up | lost updates |');
  say('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const c of cells) {
    say(
      `| ${c.strategy} | ${c.skus} | ${c.throughput} | ${c.p50} | ${c.p99} | ${(c.abortRate * 100).toFixed(1)} % | ${c.attempts} | ${c.laneCommits} | ${c.gaveUp} | ${c.lostUpdates} |`,
    );
  }
}

/** The lock queue: each case, FOR UPDATE with the logic inside against adaptive. */
export function reportLockQueue(lockQueue: BurstResult[], cases: readonly LockQueueCase[]): void {
  say(`\nLock queue (one row, every request at once, a connection each; adaptive: ${LANES} serial lanes):\n`);
  say(
    '| requests × logic | expected (FOR UPDATE, logic in tx) | FOR UPDATE measured: last request done | p50 ms | adaptive: last request done | p50 ms | units taken (each) |',
  );
  say('|---|---|---:|---:|---:|---:|---:|');
  for (const c of cases) {
    const [lock, adaptive] = ['for-update-logic-in-tx', 'adaptive'].map((st) =>
      lockQueue.find((b) => b.strategy === st && b.requests === c.requests)!,
    );
    say(
      `| ${c.requests} × ${c.logicMs} ms | ${c.expected} | ${(lock!.makespanMs / 1000).toFixed(2)} s | ${lock!.p50} | ${(adaptive!.makespanMs / 1000).toFixed(2)} s | ${adaptive!.p50} | ${lock!.taken}, ${adaptive!.taken} |`,
    );
  }
}

/** Idle latency: a row per latency setting, each added to the row above. */
export function reportIdleLatency(idleLatency: IdleStep[], idleOrders: number): void {
  say(
    `\nIdle latency (one order at a time, ${idleOrders} each after a warm-up; a fresh dev server per row, history in a SQLite file as npm start keeps it; each row adds one setting of servers/latency.ts to the row above):\n`,
  );
  say('| setting | saga p50 ms | saga p90 ms | six no-op regular activities, p50 ms |');
  say('|---|---:|---:|---:|');
  for (const st of idleLatency) {
    const what = st.setting === 'defaults' ? "the dev server's defaults" : `+ ${st.setting}`;
    say(`| ${what} | ${st.p50} | ${st.p90} | ${st.floorP50} |`);
  }
}

/** One order traced: where its milliseconds went, and its largest span. */
export function reportTrace(trace: TraceResult, warmUps: number): void {
  say(
    `\nOne order, traced (dev server with the latency settings, after ${warmUps} warm-up orders; trace ${trace.traceId}; one sample):\n`,
  );
  say(formatTimeTable(trace));
  say(`\nlargest span: ${trace.largest.name}, ${trace.largest.durationMs} ms`);
}

/** The commit path: CAS against pgbench, in one line. */
export function reportCommitPath(commitPath: CommitPathResult, seconds: number): void {
  say(
    `\nCommit path (1000 keys, ${WORKERS} clients, ${seconds} s): CAS commit path ${commitPath.cas} tps, pgbench ${commitPath.pgbench ?? '-'} tps → ratio ${commitPath.ratio ?? '-'}${commitPath.note ? ` (${commitPath.note})` : ''}\n`,
  );
}

/** The targets' table, and how many were met in how long. */
export function reportTargets(checks: Target[], startedMs: number): void {
  say('| target | result | measured |');
  say('|---|---|---|');
  for (const t of checks) say(`| ${t.name} | ${t.pass ? 'PASS' : 'FAIL'} | ${t.detail} |`);
  say(
    `\n${checks.filter((t) => t.pass).length}/${checks.length} targets met; ${Math.round((Date.now() - startedMs) / 1000)} s`,
  );
}

/** The sweep section's table: each backlog size, then the estimate for 100k. */
export function reportSweep(r: SweepBenchResult): void {
  const rows = [...r.sides.map((s) => ({ s, est: false })), { s: estimateSweep(r), est: true }];
  say(
    `\nSweep over a backlog of open orders (page ${r.pageSize}; NEEDS_ATTENTION orders, each with a run that waits for a person)`,
  );
  say(
    '| open orders | sweeps per pass | one sweep p50 | first sweep of a pass | whole pass | Temporal calls / order | DB queries / order | list calls per pass | fresh stranding reached in |',
  );
  say('|---|---|---|---|---|---|---|---|---|');
  for (const { s, est } of rows)
    say(
      `| ${s.openOrders.toLocaleString('en')}${est ? ' (estimate)' : ''} | ${s.sweepsPerPass} | ${s.sweepP50Ms} ms | ${s.firstSweepMs} ms | ${(s.passMs / 1000).toFixed(1)} s | ${s.temporalPerOrder} | ${s.dbPerOrder} | ${s.listCalls} | ${s.reachMs} ms (sweep ${s.reachSweeps}) |`,
    );
  say(
    '(The estimate scales the largest size per order; the first sweep of a pass grows with it, since it lists every running saga. The time to reach a fresh stranding is the sweep that follows the terminate; on npm start add up to one Schedule interval.)',
  );
}

/** The storefront section: the API's early answer beside place's, and one relay's events per second. */
export function reportStorefront(r: StorefrontResult): void {
  say(`\nThe storefront's edges (${r.orders} orders each way, one at a time, alternating; idle stack)`);
  say('| early answer | p50 | p99 |');
  say('|---|---|---|');
  say(
    `| POST /v1/orders (the orders API, over HTTP, with its key and Idempotency-Key) | ${r.api.p50} ms | ${r.api.p99} ms |`,
  );
  say(
    `| client.ts place (the same Update-with-Start, as the command times it) | ${r.place.p50} ms | ${r.place.p99} ms |`,
  );
  say(
    `order events: one relay delivered ${r.relay.events} events in ${r.relay.seconds} s → ${r.relay.perSecond} events/s (signed; ${r.relay.redelivered} again)`,
  );
}
