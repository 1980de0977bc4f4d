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
import { sagaCostTargets, type Target } from './targets';
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

/** Which Temporal server a saga-overhead run measured, in words. */
const serverWords = (o: SagaOverheadResult): string =>
  o.temporal === 'dev'
    ? 'dev server, history in a SQLite file as npm start keeps it'
    : 'the real Temporal server on the bench’s Postgres, as npm start -- --temporal server runs it';

export function reportSagaOverhead(o: SagaOverheadResult, orders: number, rounds: number, concurrency: number): void {
  say(
    `\nSaga overhead (${serverWords(o)}, ${orders} workflows × ${rounds} rounds, ${concurrency} in flight, rounds in ABBA order; the floors are the six essential steps as no-ops: all regular activities, all local activities (the cheapest floor), and like for like, local or regular as the saga runs them)${o.temporal === 'server' ? ' — report only' : ''}:\n`,
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
  row('cheapest floor (6 local)', o.cheap, o.idle.cheap, o.historyEvents.cheap);
  row('like-for-like floor', o.like, o.idle.like, o.historyEvents.like);
  rel('saga / essential-work floor', o.saga, o.floor, o.idle.saga, o.idle.floor);
  rel('saga / like-for-like floor', o.saga, o.like, o.idle.saga, o.idle.like);
  row('saga, no payload codec', o.plain, o.idle.plain, '');
  rel("codec's cost: with / without", o.saga, o.plain, o.idle.saga, o.idle.plain);
  say(
    `\nSaga against the like-for-like floor, round by round: throughput ${o.likeSpread.throughput.min}–${o.likeSpread.throughput.max}×, p50 ${o.likeSpread.p50.min}–${o.likeSpread.p50.max}×, CPU ${o.likeSpread.cpu.min}–${o.likeSpread.cpu.max}×`,
  );
  say(
    `cheapest floor's history: ${o.kinds.cheap.local} local activities, ${o.kinds.cheap.regular} regular, ${o.cost.cheap.timers} timers, ${o.cost.cheap.searchAttributeUpdates} search attribute updates`,
  );
  say(`\nThe saga's own cost, counted from one history of each:\n`);
  for (const line of costTable(o.cost.saga, o.cost.like, o.cost.cheap)) say(line);
  const procs = Object.keys(o.saga.cpuMs);
  say(
    '\nCPU per workflow by process, ms (during the rounds under load; worker = the bench process: worker and load generator):\n',
  );
  say(`| workflow | ${procs.join(' | ')} | total |`);
  say(`|---|${procs.map(() => '---:').join('|')}|---:|`);
  for (const [name, x] of [
    ['full saga', o.saga],
    ['essential-work floor (6 regular)', o.floor],
    ['cheapest floor (6 local)', o.cheap],
    ['like-for-like floor', o.like],
    ['saga, no payload codec', o.plain],
  ] as const)
    say(`| ${name} | ${procs.map((p) => x.cpuMs[p]).join(' | ')} | ${x.cpuTotal} |`);
}

/**
 * The saga's cost, side by side: the saga, the cheapest floor and the like-for-like floor (the
 * saga-overhead section) beside plain Node, DBOS and Restate (the engines section), same run; then the
 * saga-cost targets' lines, and the like-for-like ratio as a regression guard (report only) with the
 * rounds' spread as its tolerance. A run on the real server (`reportOnly`) prints the same, its lines
 * marked report only.
 */
export function reportSagaCost(
  o: SagaOverheadResult,
  engines: EngineSide[],
  concurrency: number,
  reportOnly = false,
): void {
  const procs = ['server', 'worker', 'provider', 'postgres'];
  say(
    `\nThe saga's cost, side by side (Temporal: ${serverWords(o)}; the engines on the same Postgres and provider; same run)${reportOnly ? ' — report only' : ''}:\n`,
  );
  say(
    `| workflow | CPU-ms per order: ${procs.join(' | ')} | total | orders/s at ${concurrency} in flight | one order idle p50 ms |`,
  );
  say(`|---|${procs.map(() => '---:').join('|')}|---:|---:|---:|`);
  const cell = (cpu: Record<string, number>, k: string): string => (cpu[k] === undefined ? '–' : String(cpu[k]));
  const rows: [string, Record<string, number>, number, number, number][] = [
    ['saga', o.saga.cpuMs, o.saga.cpuTotal, o.saga.perSecond, o.idle.saga],
    ['cheapest floor (6 local no-ops)', o.cheap.cpuMs, o.cheap.cpuTotal, o.cheap.perSecond, o.idle.cheap],
    ['like-for-like floor', o.like.cpuMs, o.like.cpuTotal, o.like.perSecond, o.idle.like],
    ...engines.map((e): [string, Record<string, number>, number, number, number] => [
      e.engine,
      e.cpuMsPerOrder,
      e.cpuTotal,
      e.perSecond,
      e.idle.p50,
    ]),
  ];
  for (const [name, cpu, total, perSecond, idle] of rows)
    say(`| ${name} | ${procs.map((p) => cell(cpu, p)).join(' | ')} | ${total} | ${perSecond} | ${idle} |`);
  if (o.temporal === 'server')
    say('(the real server keeps its history in the same Postgres: its writes are in the postgres column)');
  say('');
  for (const t of sagaCostTargets(o, engines))
    say(
      `- ${reportOnly ? `report only, ${t.pass ? 'met' : 'not met'}` : t.pass ? 'PASS' : 'FAIL'}: ${t.name}: ${t.detail}`,
    );
  const sp = o.likeSpread;
  say(
    `- regression guard, report only: saga / like-for-like floor: CPU ${o.likeCpuRatio}× (rounds ${sp.cpu.min}–${sp.cpu.max}×), throughput ${o.likeRatio}× (rounds ${sp.throughput.min}–${sp.throughput.max}×), p50 ${o.likeP50Ratio}× (rounds ${sp.p50.min}–${sp.p50.max}×), one idle order ${ratio(o.idle.saga, o.idle.like)}×\n`,
  );
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
