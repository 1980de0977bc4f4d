/**
 * Verdict: the invariant checker, the per-order audit against the provider's ledger, every run's
 * history, and the coverage the soak promises; then the summary and the exit code: 0 only with no
 * violation, every saga closed and every order terminal, no driver error, and nothing missing.
 */
import {
  checkInvariants,
  formatReport,
  temporalLookup,
  type CheckReport,
  type Violation,
} from '../../../db/invariants';
import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { historyToJSON } from '@temporalio/common/lib/proto-utils';
import { percentile, progressBar } from '../../../orders/load';
import { FAULT_TARGETS } from '../../../provider/faults';
import { auditOrders, readHistories, whyOpen, type HistoryFacts } from '../audit';
import { auditEvents, eventsLine, type EventsAudit } from '../events';
import { APPLICABLE, kindsFor, SAGA_FAULT_TARGETS, STUCK_EVERY } from '../faults';
import { LIMITED_SKU, MEDDLES } from '../orders';
import { SAGA_CONFIG, type SoakOptions } from '../options';
import type { Tally } from '../people';
import { say } from '../say';
import type { SweepCounts } from '../sweeper';
import type { BroughtUp } from './bring-up';
import type { Loaded } from './load';
import type { Settled } from './settle';

/** What the checks found, for the summary and the exit code. */
interface Findings {
  report: CheckReport;
  audit: Awaited<ReturnType<typeof auditOrders>>;
  facts: HistoryFacts;
  /** The orders not completed, counted by their reason's first part (the 8 most common). */
  reasons: { reason: string; n: number }[];
  /** What the soak promised to exercise and did not. */
  missing: string[];
  /** Every violation, whatever found it. */
  violations: Violation[];
  /** Workflow tasks the saga's code failed, one violation per order. */
  taskFailed: Violation[];
  /** Orders the SDK's Update-ordering bug stopped that the sweeper did not heal. */
  sdkBugUnhealed: Violation[];
  /** The order events against what the receiver took. */
  events: EventsAudit;
}

/** Runs the checks, prints the summary, and returns the soak's exit code. */
export async function verdict(
  options: SoakOptions,
  started: number,
  up: BroughtUp,
  load: Loaded,
  settled: Settled,
): Promise<number> {
  const { stack, people } = up;
  const { placed } = load;
  const report = await checkInvariants(stack.reader, {
    deadlineMs: SAGA_CONFIG.deadlineMs!,
    workflows: temporalLookup(stack.env.client),
  });
  const audit = await auditOrders(stack.reader, placed, people);
  const historyBar = progressBar();
  const facts = await readHistories(stack.env.client, new Set(placed.map((o) => o.input.orderId)), historyBar);
  historyBar.end();
  const reasons = await stack.reader.query<{ reason: string; n: number }>({
    text: `SELECT split_part(coalesce(reason, '-'), ':', 1) AS reason, count(*)::int AS n FROM orders
             WHERE order_id = ANY($1::text[]) AND status <> 'COMPLETED' GROUP BY 1 ORDER BY 2 DESC LIMIT 8`,
    values: [placed.map((o) => o.input.orderId)],
  });
  const missing = coverageGaps(options, up, settled.swept, facts);
  const events = await auditEvents(
    stack.reader,
    stack.receiver,
    placed.map((o) => o.input.orderId),
  );
  const { taskFailed, sdkBugUnhealed, violations } = collectViolations(report, audit, up, facts, settled, events);
  const findings: Findings = {
    report,
    audit,
    facts,
    reasons: reasons.rows,
    missing,
    violations,
    taskFailed,
    sdkBugUnhealed,
    events,
  };
  const seconds = Math.round((Date.now() - started) / 1000);
  await printSummary(options, up, load, settled, findings, seconds);
  await keepHistories(
    up,
    facts,
    [...new Set(violations.flatMap((v) => v.orderIds))],
    othersRestartedIds(people.terminated, settled.swept),
  );
  const ok =
    violations.length === 0 &&
    settled.running === 0 &&
    audit.notTerminal.length === 0 &&
    load.unsettled.length === 0 &&
    load.errors.length === 0 &&
    missing.length === 0;
  return ok ? 0 : 1;
}

/** Where the histories of runs with a failed workflow task are kept (git-ignored), to be replayed. */
const KEPT_DIR = path.resolve(__dirname, '..', '..', '..', 'artifacts', 'chaos');

/**
 * Writes to artifacts/chaos/ each run whose workflow task failed (the saga's code or the SDK's
 * Update-ordering bug), every run of an order with a violation (the first 10) and of an order the
 * sweeper restarted though no person had terminated it (the first 5), with this soak's
 * payload key beside them (mode 0600): the payloads stay sealed as the server held them.
 */
async function keepHistories(
  { stack }: BroughtUp,
  facts: HistoryFacts,
  violating: string[],
  restarted: string[],
): Promise<void> {
  const kept = new Map(facts.failedHistories.map((h) => [`${h.orderId}-${h.runId}`, h.history]));
  for (const orderId of [...violating.slice(0, 10), ...restarted.slice(0, 5)]) {
    for await (const wf of stack.env.client.workflow.list({ query: `WorkflowId = 'order:${orderId}'` })) {
      const key = `${orderId}-${wf.runId}`;
      if (!kept.has(key))
        kept.set(key, await stack.env.client.workflow.getHandle(wf.workflowId, wf.runId).fetchHistory());
    }
  }
  if (kept.size === 0) return;
  mkdirSync(KEPT_DIR, { recursive: true });
  const keyFile = path.join(KEPT_DIR, 'PAYLOAD_KEYS');
  writeFileSync(keyFile, `${stack.payloadKeys}\n`, { mode: 0o600 });
  chmodSync(keyFile, 0o600);
  for (const [key, history] of kept) writeFileSync(path.join(KEPT_DIR, `${key}.json`), historyToJSON(history));
  say(
    `kept ${kept.size} run history(ies) (failed workflow tasks, orders with a violation, other restarts) in artifacts/chaos/; ` +
      `their payload key: artifacts/chaos/PAYLOAD_KEYS`,
  );
}

/** The orders the sweeper restarted that no person terminated. */
function othersRestartedIds(terminated: Map<string, number>, swept: SweepCounts): string[] {
  return [...swept.restartedAt.keys()].filter((id) => !terminated.has(id));
}

/** The same, as `; others: …` for the summary. */
function othersRestarted(terminated: Map<string, number>, swept: SweepCounts): string {
  const others = othersRestartedIds(terminated, swept);
  return others.length ? `; others: ${others.join(', ')}` : '';
}

/** Coverage: what the soak promises to exercise, each item it did not. */
function coverageGaps(
  { temporal, quick, count }: SoakOptions,
  { stack, people }: BroughtUp,
  swept: SweepCounts,
  facts: HistoryFacts,
): string[] {
  const missing: string[] = [];
  for (const { target, kind } of APPLICABLE)
    if (!stack.applied.get(`${target} ${kind}`)) missing.push(`fault ${kind} on ${target}`);
  if (!FAULT_TARGETS.some((t) => stack.applied.get(`${t} outage`))) missing.push('a call refused by the outage');
  if (stack.receiverFlaps === 0) missing.push('the order events receiver failing, down or stalled');
  const mustAct = [
    'cancel',
    'resolve charge-succeeded',
    'resolve charge-failed',
    'resolve retry',
    'resolve mark-resolved',
    'reset an open run',
    'reset a closed run',
    'start again, same input',
    'start again, other input',
    'place again (client.ts)',
    'terminate',
    'delete the history after an accepted cancel',
    'an unreadable cancel Signal, then Terminate',
    'pause an activity, unpause it later',
    'pin the run to a build with no workers',
    'pause the sweep Schedule (check must name it)',
  ];
  for (const a of mustAct) if (!people.actions.get(a)?.sent) missing.push(`operator action ${a}`);
  if (!people.actions.get('cancel')?.accepted) missing.push('an accepted cancel');
  if (!people.actions.get('api place')?.accepted) missing.push('an order placed through the orders API');
  if (!people.actions.get('api replay')?.accepted) missing.push('an API answer replayed for its Idempotency-Key');
  if (people.terminated.size > 0 && swept.restarts === 0) missing.push('an order the sweeper healed');
  if (!people.cancels.get('after the pivot')?.sent) missing.push('a cancel after the pivot');
  const restarted = new Set(stack.restarts.map((r) => r.what));
  for (const what of [
    'Postgres',
    'provider',
    'orders API',
    'deploy',
    ...(temporal === 'server' ? ['Temporal server'] : []),
  ])
    if (!restarted.has(what)) missing.push(what === 'deploy' ? 'the deploy' : `the ${what} restart`);
  // The counts the full soak must reach; the quick one and a short --orders are too small for them.
  const fullTargets = !quick && count >= 500;
  if (fullTargets && facts.unknownPayment.size < 20)
    missing.push(`20 sagas in UNKNOWN_PAYMENT (${facts.unknownPayment.size})`);
  if (fullTargets && facts.compensationsFaulted.size < 20)
    missing.push(`20 compensations meeting a fault (${facts.compensationsFaulted.size})`);
  return missing;
}

/** Every violation: the checker's, the audit's, the people's, and those the saga log and the stranded orders show. */
function collectViolations(
  report: CheckReport,
  audit: Findings['audit'],
  { people }: BroughtUp,
  facts: HistoryFacts,
  { open, stranded }: Settled,
  events: EventsAudit,
): Pick<Findings, 'taskFailed' | 'sdkBugUnhealed' | 'violations'> {
  const taskFailed = [...facts.taskFailures].map(([orderId, failures]) => ({
    rule: 'the saga code never fails a workflow task',
    detail: `${failures.length} failed task(s); first: ${failures[0]}`,
    orderIds: [orderId],
  }));
  // The SDK's Update-ordering bug is counted apart; an order it hit must have been healed: terminal at the end.
  const sdkBugUnhealed = [...facts.sdkBugTaskFailures.keys()]
    .filter((orderId) => open.includes(orderId))
    .map((orderId) => ({
      rule: "a run the SDK's Update-ordering bug stopped is healed by the sweeper",
      detail: facts.sdkBugTaskFailures.get(orderId)![0]!,
      orderIds: [orderId],
    }));
  const strandedViolations = stranded.map((orderId) => ({
    rule: 'no order is stranded: open, with no live run, at the end',
    detail: 'the sweeper did not heal it',
    orderIds: [orderId],
  }));
  const violations = [
    ...report.violations,
    ...audit.violations,
    ...people.violations,
    ...taskFailed,
    ...sdkBugUnhealed,
    ...strandedViolations,
    ...events.lost.map((id) => ({
      rule: 'no order event is lost',
      detail: `event ${id} is marked delivered, and the receiver never took it`,
      orderIds: [id.slice(0, id.lastIndexOf(':'))],
    })),
    ...events.outOfOrder.map((orderId) => ({
      rule: "an order's events arrive in order",
      detail: 'an event arrived before one written before it',
      orderIds: [orderId],
    })),
    ...(events.pending
      ? [
          {
            rule: 'every order event is delivered or dead-lettered',
            detail: `${events.pending} still pending`,
            orderIds: [],
          },
        ]
      : []),
    ...(events.refused
      ? [{ rule: 'every order event is signed', detail: `${events.refused} signature(s) refused`, orderIds: [] }]
      : []),
  ];
  return { taskFailed, sdkBugUnhealed, violations };
}

/** The summary, line by line; it asks the database and Temporal about the slowest and the open orders. */
async function printSummary(
  { quick, count, concurrency, killEveryMs }: SoakOptions,
  { stack, people }: BroughtUp,
  { placed, loadSeconds, latencies, slowest, unsettled, errors, outage, recoveries }: Loaded,
  { running, swept, stranded }: Settled,
  { report, audit, facts, reasons, missing, violations, taskFailed, sdkBugUnhealed, events }: Findings,
  seconds: number,
): Promise<void> {
  const stillAttention = audit.notTerminal;
  const fmt = (m: Map<string, Tally>): string[] =>
    [...m].map(
      ([k, t]) =>
        `  ${k.padEnd(30)} sent ${String(t.sent).padStart(4)}, accepted ${String(t.accepted).padStart(4)}, refused ${String(t.refused).padStart(4)}`,
    );
  const lines = placed.map((o) => o.input.items.length);
  latencies.sort((a, b) => a - b);

  say('');
  say(`== chaos soak summary (${quick ? 'quick' : 'full'}) ==`);
  say(
    `orders:       ${placed.length} placed of ${count} (${concurrency} in flight); ${[1, 2, 3, 4, 5].map((n) => `${lines.filter((l) => l === n).length}×${n} line(s)`).join(', ')}; ` +
      `${placed.filter((o) => o.input.items.some((i) => i.sku === LIMITED_SKU)).length} with ${LIMITED_SKU}; ${placed.filter((o) => o.input.paymentMethod === 'tok_declined').length} declined cards; ` +
      `${new Set(placed.map((o) => o.input.customerId)).size} customers`,
  );
  say(
    `final status: ${Object.entries(audit.statuses)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')}`,
  );
  say(`not completed, by reason: ${reasons.map((r) => `${r.reason} × ${r.n}`).join('; ') || '-'}`);
  say(
    `throughput:   ${Math.round((placed.length / loadSeconds) * 10) / 10} orders/s over ${Math.round(loadSeconds)} s of load; per order (start to last run closed) p50 ${percentile(latencies, 50)} ms, p99 ${percentile(latencies, 99)} ms`,
  );
  const slow = slowest.sort((a, b) => b.ms - a.ms).slice(0, 3);
  const slowRows = await stack.reader.query<{ order_id: string; status: string; reason: string | null }>({
    text: 'SELECT order_id, status, reason FROM orders WHERE order_id = ANY($1::text[])',
    values: [slow.map((s) => s.id)],
  });
  for (const s of slow) {
    const row = slowRows.rows.find((r) => r.order_id === s.id);
    say(
      `  slowest: ${s.id} ${Math.round(s.ms / 1000)} s, ${row?.status ?? '?'}${row?.reason ? ` (${row.reason.slice(0, 160)})` : ''}`,
    );
  }
  say(
    "faults applied by the provider to the workers' calls (counted where applied, from its log, across its restart):",
  );
  for (const target of SAGA_FAULT_TARGETS) {
    say(
      `  ${target.padEnd(23)} ${kindsFor(target)
        .map((k) => `${k} ${stack.applied.get(`${target} ${k}`) ?? 0}`)
        .join(', ')}`,
    );
  }
  const opFaults = [...stack.appliedToOperators.values()].reduce((a, b) => a + b, 0);
  say(
    `  (not counted above: ${opFaults} fault(s) met by the operators' own calls, ${[...stack.appliedToOperators].map(([k, v]) => `${k} ${v}`).join(', ') || 'none'})`,
  );
  say(
    `  outage window: ${outage.ms ? `${outage.ms / 1000} s from ${new Date(outage.at!).toISOString()}` : 'did not happen'}; stuck authorizations (answer lost, then processing): every ${STUCK_EVERY}th order; failed authorizations then processing: every ${STUCK_EVERY}th quiet order`,
  );
  say(
    `worker faults: SIGKILLs per worker process ${stack.workerKills.join(' and ')} (each about every ${killEveryMs / 1000} s, restarted)`,
  );
  await Promise.all(recoveries);
  for (const r of stack.restarts)
    say(
      `  ${r.what} ${r.what === 'deploy' ? 'done' : 'restarted'} in ${r.ms} ms, confirmed: ${r.evidence}; ${r.moved ?? 'not measured'}`,
    );
  say(
    `saga log (${facts.runs} runs read): ${facts.unknownPayment.size} sagas reached UNKNOWN_PAYMENT; ${facts.compensationsFaulted.size} of ${facts.compensationsRun.size} compensations met a fault (in ${facts.compensatedUnderFault.size} orders)`,
  );
  say(
    `escalations:  ${people.escalated.size} orders met in NEEDS_ATTENTION by an operator; still not terminal at the end: ${stillAttention.length ? stillAttention.join(', ') : 'none'}`,
  );
  say('people in the loop (sent / accepted / refused):');
  for (const l of fmt(people.actions)) say(l);
  say('cancels by the moment they were sent:');
  for (const l of fmt(people.cancels)) say(l);
  const heal = [...people.terminated]
    .map(([id, at]) => (swept.restartedAt.get(id) ?? NaN) - at)
    .filter((ms) => Number.isFinite(ms))
    .sort((a, b) => a - b);
  say(
    `sweeper:      ${swept.runs} sweeps; terminates sent ${people.actions.get('terminate')?.sent ?? 0}, of a running run ${people.actions.get('terminate')?.accepted ?? 0}; ` +
      `orders healed by a restart ${swept.restarts} (${heal.length} of the terminated${othersRestarted(people.terminated, swept)}); ` +
      `stopped before their row was written (nothing to heal, nothing moved) ${people.stoppedBeforeRow.size}${people.stoppedBeforeRow.size ? ` (${[...people.stoppedBeforeRow].join(', ')})` : ''}; heal time p50 ${percentile(heal, 50)} ms, p99 ${percentile(heal, 99)} ms; ` +
      `runs reset ${swept.resets}; overrides removed ${swept.overridesRemoved}; handed to a person ${swept.persons}; unreadable ${swept.unreadable}`,
  );
  say(
    `task failures of the SDK's Update-ordering bug (sdk-core#1146), counted apart: ${facts.sdkBugTaskFailures.size} order(s)${facts.sdkBugTaskFailures.size ? `, healed ${facts.sdkBugTaskFailures.size - sdkBugUnhealed.length} (${[...facts.sdkBugTaskFailures.keys()].join(', ')})` : ''}`,
  );
  say(`stranded at the end: ${stranded.length}${stranded.length ? ` (${stranded.join(', ')})` : ''}`);
  say(eventsLine(events, stack.receiverFlaps));
  say(
    `settled:      ${running === 0 ? 'every saga closed' : `no: ${running} still running`}${unsettled.length ? `; not closed within 5 min: ${unsettled.join(', ')}` : ''}`,
  );
  for (const id of unsettled) say(`  open: ${await whyOpen(stack.env.client, id)}`);
  for (const line of formatReport(report)) say(line);
  for (const v of [...audit.violations, ...people.violations, ...taskFailed])
    say(`  VIOLATION ${v.rule}: ${v.detail} [orders: ${v.orderIds.join(', ')}]`);
  say(
    `coverage:     ${missing.length ? `MISSING ${missing.join('; ')}` : `every fault kind on every target, every operator action (${MEDDLES.length} meddles)`}`,
  );
  say(`violations:   ${violations.length}`);
  say(`time:         ${seconds} s`);
  for (const e of errors.slice(0, 5)) say(`driver error: ${e}`);
}
