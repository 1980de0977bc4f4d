/**
 * `npm run chaos [-- --quick]`: the chaos soak. Brings up the real stack on loopback (its own
 * Postgres, the Temporal dev server, the provider, two worker processes), then places orders like
 * real ones while:
 *   - the provider fails charges, refunds and inquiries (lost response after commit, 5xx before
 *     commit, slower than the worker's timeout, and `processing` for inquiries), has one outage
 *     window in which every call fails, and for a few orders loses the charge's answer and then says
 *     `processing` for a while (those sagas reach UNKNOWN_PAYMENT and a person);
 *   - each worker process is SIGKILLed on its own schedule and restarted; Postgres is restarted once
 *     and the provider once, each confirmed;
 *   - people meddle, through client.ts and the Temporal client (scripts/chaos/people.ts): cancels at
 *     chosen moments, Resets of open and closed runs, second starts of closed orders, and operators
 *     who resolve every NEEDS_ATTENTION saga as the provider's ledger supports.
 * Then it waits until every saga has closed, runs the invariant checker and a per-order audit
 * against the provider's ledger, reads every run's history, and prints the summary. Exit code 0 only
 * with 0 violations, every order terminal, and every fault kind and operator action exercised.
 * Bounded: --orders (500; --quick 70) and --max-minutes of load (8; --quick 2), then at most 3
 * minutes to settle.
 */
import { randomUUID } from 'node:crypto';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { chargeKeyFor } from '../domain/order';
import { checkInvariants, formatReport, temporalLookup } from '../db/invariants';
import { concurrentLoops, percentile, progressBar } from '../lib/load';
import { readConfig } from '../lib/config';
import { FAULT_KINDS, FAULT_TARGETS, type FaultRequest } from '../provider/faults';
import type { SweepReport } from '../activities/sweeper';
import type { SagaConfig } from '../workflows/order-saga';
import { sweeperWorkflow } from '../workflows/sweeper';
import { auditOrders, readHistories, whyOpen } from './chaos/audit';
import { LIMITED_SKU, makeOrders, MEDDLES, stockCatalogue, type ChaosOrder } from './chaos/orders';
import { People } from './chaos/people';
import { ChaosStack, OPERATOR_CLIENT } from './chaos/stack';

const say = (s: string): void => void process.stdout.write(`[chaos] ${s}\n`);

/** Short timers, so that what takes hours in production (escalation, the deadline) happens within the soak. */
const SAGA_CONFIG: Partial<SagaConfig> = {
  deadlineMs: 120_000,
  compensationRetryMaxMs: 5_000,
  unknownEscalationMs: 6_000,
  inquiryBaseMs: 1_000,
  inquiryMaxMs: 4_000,
  forwardRetryLimitMs: 15_000,
};

/** Every fault kind that applies to a target (the outage window is one, over all targets). */
const APPLICABLE = FAULT_TARGETS.flatMap((target) =>
  FAULT_KINDS.filter((kind) => kind !== 'outage' && (kind !== 'processing' || target === 'inquiries')).map((kind) => ({
    target,
    kind,
  })),
);

/** Every `1 in STUCK_EVERY` order: the charge's answer is lost, then the provider says `processing` for a while. */
const STUCK_EVERY = 25;

function faultRules(orders: ChaosOrder[], slowMs: number): FaultRequest[] {
  const always = 86_400_000;
  const rate: Record<string, Record<string, number>> = {
    charges: { 'lose-response-after-commit': 0.1, 'fail-before-commit': 0.08, delay: 0.06 },
    inquiries: { processing: 0.2, 'fail-before-commit': 0.1, delay: 0.05, 'lose-response-after-commit': 0.05 },
    refunds: { 'lose-response-after-commit': 0.2, 'fail-before-commit': 0.2, delay: 0.1 },
    // The technical cancel, which every refund step sends first (so on every backward path).
    cancels: { processing: 0.2, 'lose-response-after-commit': 0.1, 'fail-before-commit': 0.1, delay: 0.05 },
  };
  const rules: FaultRequest[] = [];
  for (const [target, kinds] of Object.entries(rate)) {
    for (const [kind, r] of Object.entries(kinds)) {
      const base = { kind, target, ...(kind === 'delay' ? { delayMs: slowMs } : {}) } as FaultRequest;
      // The first calls of the saga meet each fault for sure (the operators' own calls, with the saga's
      // keys, must not use these up), then the rate, for everyone. A 5xx before the work hides the
      // call's other faults, so it takes one call, not two: refunds are few (a cancel after the charge
      // mostly comes after the pivot), and the second refund call must still meet the lost response.
      rules.push({ ...base, count: kind === 'fail-before-commit' ? 1 : 2, exceptClient: OPERATOR_CLIENT });
      rules.push({ ...base, rate: r, forMs: always });
    }
  }
  for (const o of orders) {
    // The customer who cancels during the charge meets a slow charge: it is taken (after the request
    // timed out), the inquiry finds it, and the cancel then refunds it. Refunds are otherwise few, and
    // the soak must see every refund fault.
    if (o.meddle === 'cancel-in-charge')
      rules.unshift({
        kind: 'delay',
        target: 'charges',
        keyPrefix: chargeKeyFor(o.input.orderId),
        count: 1,
        delayMs: slowMs,
      });
  }
  for (const [i, o] of orders.entries()) {
    if (i % STUCK_EVERY !== STUCK_EVERY - 1) continue;
    const keyPrefix = chargeKeyFor(o.input.orderId);
    rules.push({ kind: 'lose-response-after-commit', target: 'charges', keyPrefix, count: 1 });
    rules.push({ kind: 'processing', target: 'inquiries', keyPrefix, count: 4 });
  }
  // And its mirror: the charge fails before the provider writes anything, then the inquiries say
  // `processing` until the saga escalates. The provider holds no charge, so the person who checks it
  // answers `charge-failed`. Without these orders that answer is met only by chance (an escalation
  // with nothing charged needs a 5xx on the charge and then failing inquiries on the same order).
  // Orders nobody meddles with, on a card that is not declined, so nothing else settles it first.
  const quiet = orders.filter((o) => o.meddle === 'none' && o.input.paymentMethod !== 'tok_declined');
  for (const [j, o] of quiet.entries()) {
    if (j % STUCK_EVERY !== 1) continue;
    const keyPrefix = chargeKeyFor(o.input.orderId);
    rules.unshift({ kind: 'fail-before-commit', target: 'charges', keyPrefix, count: 1 });
    rules.push({ kind: 'processing', target: 'inquiries', keyPrefix, count: 4 });
  }
  return rules;
}

/** Runs the sweeper workflow on the soak's task queue every `everyMs` until stopped; counts what it did. */
function sweepEvery(stack: ChaosStack, everyMs: number) {
  const out = { runs: 0, restarts: 0, resets: 0, persons: 0, restartedAt: new Map<string, number>() };
  let stopped = false;
  const loop = (async () => {
    for (let n = 0; !stopped; n++) {
      try {
        const report: SweepReport = await stack.env.client.workflow.execute(sweeperWorkflow, {
          taskQueue: stack.taskQueue,
          workflowId: `chaos-sweep-${n}-${randomUUID().slice(0, 6)}`,
          args: [{ graceMs: 2_000, attentionAgeMs: 10 * 60_000 }],
          workflowExecutionTimeout: '2m',
        });
        out.runs++;
        for (const a of report.actions) {
          if (a.action === 'restart') {
            out.restarts++;
            if (!out.restartedAt.has(a.orderId)) out.restartedAt.set(a.orderId, Date.now());
          }
          if (a.action === 'reset') out.resets++;
          if (a.action === 'person') out.persons++;
        }
      } catch (err) {
        say(`sweep ${n} failed: ${(err as Error).message}`); // a worker killed mid-sweep, say: the next one goes on
      }
      await sleep(everyMs);
    }
  })();
  return {
    stop: async () => {
      stopped = true;
      await loop;
      return out;
    },
  };
}

async function main(): Promise<number> {
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
  if (values.help) {
    say(
      'usage: npm run chaos [-- --quick] [-- --orders N] [-- --max-minutes M] [-- --temporal dev|server] [-- --workers N]',
    );
    return 0;
  }
  const temporal = values.temporal ?? 'dev';
  if (temporal !== 'dev' && temporal !== 'server') throw new Error(`--temporal: dev or server, not "${temporal}"`);
  const workerCount = Number(values.workers ?? '2');
  if (!Number.isInteger(workerCount) || workerCount < 1 || workerCount > 8)
    throw new Error('--workers: a whole number from 1 to 8');
  Runtime.install({ logger: new DefaultLogger('ERROR') });
  const quick = !!values.quick;
  const count = Number(values.orders ?? (quick ? 140 : 500));
  const maxMinutes = Number(values['max-minutes'] ?? (quick ? 4 : 8));
  if (!Number.isInteger(count) || count < 1 || count > 5000) throw new Error('--orders: a whole number from 1 to 5000');
  if (!(maxMinutes > 0 && maxMinutes <= 60)) throw new Error('--max-minutes: a number from 1 to 60');
  const killEveryMs = quick ? 9_000 : 10_000;
  const outageMs = quick ? 10_000 : 12_000;
  const concurrency = 20;
  const started = Date.now();
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'order-saga-chaos-'));
  chmodSync(tmp, 0o755);
  const stack = new ChaosStack(
    { dataDir: path.join(tmp, 'pg'), port: 56000 + (process.pid % 900), database: 'chaos', persistent: true },
    temporal,
  );
  let people: People | undefined;
  let cleaned: Promise<void> | undefined;
  const cleanup = (): Promise<void> =>
    (cleaned ??= (async () => {
      people?.stop();
      people?.close();
      await stack.stop();
      rmSync(tmp, { recursive: true, force: true });
    })());
  // Ctrl-C or a kill stops every process the soak started.
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      say(`${signal}: stopping everything the soak started…`);
      void cleanup().finally(() => process.exit(130));
    });
  }
  try {
    say(
      `starting: Postgres, ${stack.temporalName}, provider, ${workerCount} worker processes; ${count} orders, ${concurrency} in flight`,
    );
    await stack.start(workerCount);
    const tag = randomUUID().slice(0, 6);
    const catalogue = await stockCatalogue(stack.db, tag, count);
    const orders = makeOrders(count, tag, catalogue);
    await stack.setFaults(faultRules(orders, stack.providerTimeoutMs + 500));
    const cliCfg = readConfig({
      TEMPORAL_ADDRESS: stack.env.address,
      TASK_QUEUE: stack.taskQueue,
      DATABASE_URL: stack.urls.app,
      READER_DATABASE_URL: stack.urls.reader,
      PROVIDER_URL: stack.providerUrl,
      PROVIDER_API_KEY: stack.apiKey,
    });
    people = new People(stack, cliCfg, SAGA_CONFIG);
    const operators = people.operate();
    const killing = stack.killWorkers(killEveryMs);
    // The sweeper, as npm start's Schedule runs it but every few seconds (the soak is minutes long):
    // the terminated sagas are its to heal; nobody else here touches them.
    const sweeper = sweepEvery(stack, 3_000);

    // ---- The load, with the outage and the two restarts at fixed points of its progress ----------
    const events: Promise<void>[] = [];
    const outage: { at?: number; ms?: number } = {};
    const at = (share: number, what: () => Promise<void>): (() => void) => {
      let fired = false;
      return () => {
        if (fired || done < share * count) return;
        fired = true;
        events.push(what().catch((err: Error) => say(`event failed: ${err.message}`)));
      };
    };
    const triggers = [
      at(0.2, async () => {
        outage.at = Date.now();
        outage.ms = outageMs;
        for (const target of FAULT_TARGETS) await stack.admin.set({ kind: 'outage', target, forMs: outageMs });
      }),
      at(0.45, async () => void (await stack.restartPostgres())),
      at(0.7, async () => void (await stack.restartProvider())),
      // On the real server, the server process itself is stopped and started again mid-load.
      ...(temporal === 'server' ? [at(0.55, async () => void (await stack.restartTemporal()))] : []),
    ];
    const latencies: number[] = [];
    const slowest: { id: string; ms: number }[] = [];
    const unsettled: string[] = [];
    const errors: string[] = [];
    let next = 0;
    let done = 0;
    const bar = progressBar();
    const loadUntil = started + maxMinutes * 60_000;
    const driveOne = async (): Promise<void> => {
      const o = orders[next++]!;
      const t = Date.now();
      try {
        if (await people!.drive(o, 5 * 60_000)) {
          latencies.push(Date.now() - t);
          slowest.push({ id: o.input.orderId, ms: Date.now() - t });
        } else unsettled.push(o.input.orderId);
      } catch (err) {
        errors.push(`${o.input.orderId}: ${(err as Error).message}`);
      }
      done++;
      bar(done, orders.length);
      for (const trigger of triggers) trigger();
    };
    await Promise.race([concurrentLoops(concurrency, loadUntil, driveOne, () => next < orders.length), killing]);
    bar.end();
    await Promise.all(events);
    const placed = orders.slice(0, next);
    const loadSeconds = (Date.now() - started) / 1000;
    await stack.stopKilling();
    await stack.clearFaults();

    say('load done; waiting until every saga has closed (operators keep resolving)…');
    const settleUntil = Date.now() + 3 * 60_000;
    let running = -1;
    while (Date.now() < settleUntil) {
      running = (await stack.env.client.workflow.count(`WorkflowType = 'orderSaga' AND ExecutionStatus = 'Running'`))
        .count;
      if (running === 0) break;
      await sleep(1_000);
    }
    people.stop();
    await operators;
    const swept = await sweeper.stop();
    // Stranded: an open order (row not terminal) whose latest run is not running.
    const openRows = await stack.reader.query<{ order_id: string }>({
      text: `SELECT order_id FROM orders WHERE order_id = ANY($1::text[]) AND status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED')`,
      values: [orders.slice(0, next).map((o) => o.input.orderId)],
    });
    const runsOfOpen = await temporalLookup(stack.env.client)(openRows.rows.map((r) => `order:${r.order_id}`));
    const stranded = openRows.rows
      .filter((r) => runsOfOpen.get(`order:${r.order_id}`) !== 'RUNNING')
      .map((r) => r.order_id);

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

    // ---- Coverage: what the soak promises to exercise --------------------------------------------
    const missing: string[] = [];
    for (const { target, kind } of APPLICABLE)
      if (!stack.applied.get(`${target} ${kind}`)) missing.push(`fault ${kind} on ${target}`);
    if (!FAULT_TARGETS.some((t) => stack.applied.get(`${t} outage`))) missing.push('a call refused by the outage');
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
    ];
    for (const a of mustAct) if (!people.actions.get(a)?.sent) missing.push(`operator action ${a}`);
    if (!people.actions.get('cancel')?.accepted) missing.push('an accepted cancel');
    if (people.terminated.size > 0 && swept.restarts === 0) missing.push('an order the sweeper healed');
    if (!people.cancels.get('after the pivot')?.sent) missing.push('a cancel after the pivot');
    if (stack.restarts.length < (temporal === 'server' ? 3 : 2))
      missing.push(`the Postgres, provider${temporal === 'server' ? ' and Temporal server' : ''} restarts`);
    const fullTargets = !quick && count >= 500;
    if (fullTargets && facts.unknownPayment.size < 20)
      missing.push(`20 sagas in UNKNOWN_PAYMENT (${facts.unknownPayment.size})`);
    if (fullTargets && facts.compensationsFaulted.size < 20)
      missing.push(`20 compensations meeting a fault (${facts.compensationsFaulted.size})`);

    const taskFailed = [...facts.taskFailures].map(([orderId, failures]) => ({
      rule: 'the saga code never fails a workflow task',
      detail: `${failures.length} failed task(s); first: ${failures[0]}`,
      orderIds: [orderId],
    }));
    // The SDK's Update-ordering bug is counted apart; an order it hit must have been healed (not stranded).
    const sdkBugUnhealed = [...facts.sdkBugTaskFailures.keys()]
      .filter((orderId) => stranded.includes(orderId))
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
    ];
    const stillAttention = audit.notTerminal;
    const seconds = Math.round((Date.now() - started) / 1000);
    const fmt = (m: Map<string, { sent: number; accepted: number; refused: number }>): string[] =>
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
    say(`not completed, by reason: ${reasons.rows.map((r) => `${r.reason} × ${r.n}`).join('; ') || '-'}`);
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
    for (const target of FAULT_TARGETS) {
      say(
        `  ${target.padEnd(10)} ${FAULT_KINDS.filter((k) => k !== 'processing' || target === 'inquiries')
          .map((k) => `${k} ${stack.applied.get(`${target} ${k}`) ?? 0}`)
          .join(', ')}`,
      );
    }
    const opFaults = [...stack.appliedToOperators.values()].reduce((a, b) => a + b, 0);
    say(
      `  (not counted above: ${opFaults} fault(s) met by the operators' own calls, ${[...stack.appliedToOperators].map(([k, v]) => `${k} ${v}`).join(', ') || 'none'})`,
    );
    say(
      `  outage window: ${outage.ms ? `${outage.ms / 1000} s from ${new Date(outage.at!).toISOString()}` : 'did not happen'}; stuck charges (answer lost, then processing): every ${STUCK_EVERY}th order; failed charges then processing: every ${STUCK_EVERY}th quiet order`,
    );
    say(
      `worker faults: SIGKILLs per worker process ${stack.workerKills.join(' and ')} (each about every ${killEveryMs / 1000} s, restarted)`,
    );
    for (const r of stack.restarts) say(`  ${r.what} restarted in ${r.ms} ms, confirmed: ${r.evidence}`);
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
        `orders healed by a restart ${swept.restarts} (${heal.length} of the terminated); heal time p50 ${percentile(heal, 50)} ms, p99 ${percentile(heal, 99)} ms; ` +
        `runs reset ${swept.resets}; handed to a person ${swept.persons}`,
    );
    say(
      `task failures of the SDK's Update-ordering bug (sdk-core#1146), counted apart: ${facts.sdkBugTaskFailures.size} order(s)${facts.sdkBugTaskFailures.size ? `, healed ${facts.sdkBugTaskFailures.size - sdkBugUnhealed.length} (${[...facts.sdkBugTaskFailures.keys()].join(', ')})` : ''}`,
    );
    say(`stranded at the end: ${stranded.length}${stranded.length ? ` (${stranded.join(', ')})` : ''}`);
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
    const ok =
      violations.length === 0 &&
      running === 0 &&
      stillAttention.length === 0 &&
      unsettled.length === 0 &&
      errors.length === 0 &&
      missing.length === 0;
    return ok ? 0 : 1;
  } finally {
    await cleanup();
  }
}

main().then(
  (code) => process.exit(code),
  (err: Error) => {
    process.stderr.write(`chaos: ${err.stack ?? err.message}\n`);
    process.exit(1);
  },
);
