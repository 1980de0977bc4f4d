/**
 * Load and meddle: the operators, the worker kills and the sweeper start; then the orders are placed,
 * `concurrency` at a time, each driven by the people until its last run closes, with the outage
 * window and the restarts fired at fixed points of the load's progress. The load ends when every
 * order is placed or `maxMinutes` after the soak's start; then the kills and the faults stop. The
 * operators and the sweeper go on: the settle phase stops them.
 */
import { concurrentLoops, progressBar } from '../../../orders/load';
import { FAULT_TARGETS } from '../../../provider/faults';
import type { ChaosOrder } from '../orders';
import type { SoakOptions } from '../options';
import { watchMoved } from '../moved';
import { say } from '../say';
import type { Restart } from '../stack';
import { sweepEvery, type Sweeper } from '../sweeper';
import type { BroughtUp } from './bring-up';

/** How long the old build's workers keep running after a deploy while sagas pinned to it are open. */
const DRAIN_WAIT_MS = 60_000;

export interface Loaded {
  /** The orders placed, a prefix of the soak's orders. */
  placed: ChaosOrder[];
  /** From the soak's start (bring-up included) to the end of the load. */
  loadSeconds: number;
  /** Per order that closed: from its start to its last run closed, in ms. */
  latencies: number[];
  slowest: { id: string; ms: number }[];
  /** Orders whose runs did not all close within the driver's limit. */
  unsettled: string[];
  /** The driver's own errors, per order. */
  errors: string[];
  /** When the outage window began and how long it lasted (both unset: it did not happen). */
  outage: { at?: number; ms?: number };
  /** The operators, still resolving NEEDS_ATTENTION sagas until the people stop. */
  operators: Promise<void>;
  /** The sweeper loop, still sweeping. */
  sweeper: Sweeper;
  /** The measures of how long each restart held the open orders (each ends within 4 min of its restart). */
  recoveries: Promise<void>[];
}

export async function loadAndMeddle(
  { stack, orders, people }: BroughtUp,
  options: SoakOptions,
  started: number,
): Promise<Loaded> {
  const { count, concurrency } = options;
  const operators = people.operate();
  const killing = stack.killWorkers(options.killEveryMs);
  const flapping = stack.flapReceiver(); // the order events' receiver fails, goes down and stalls in turn
  const sweeper = sweepEvery(stack, 3_000);

  // The outage and the restarts, each fired once, by the first order to finish past its share of the load.
  const events: Promise<void>[] = [];
  // After each restart, how long until every open order moved again: measured beside the load.
  const recoveries: Promise<void>[] = [];
  const watched = async (restart: Promise<Restart>): Promise<void> => {
    const r = await restart;
    recoveries.push(watchMoved(stack.reader, r).catch((err: Error) => void (r.moved = `not measured: ${err.message}`)));
  };
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
      outage.ms = options.outageMs;
      for (const target of FAULT_TARGETS) await stack.admin.set({ kind: 'outage', target, forMs: options.outageMs });
    }),
    at(0.35, () => people.pauseSweepSchedule((ms) => sweeper.pauseFor(ms), 20_000)),
    at(0.45, () => watched(stack.restartPostgres())),
    at(0.7, () => watched(stack.restartProvider())),
    // The orders API's process killed mid-load: a storefront's request it held is sent again with its key.
    at(0.6, async () => {
      const r = await stack.restartApi();
      r.moved = 'no saga waits on the API: the storefront sends a cut request again (api sent again)';
    }),
    // A new build made current; the old build's workers stop after the drain decision.
    at(0.3, () => watched(stack.deploy(DRAIN_WAIT_MS))),
    // On the real server, the server process itself is stopped and started again mid-load.
    ...(options.temporal === 'server' ? [at(0.55, () => watched(stack.restartTemporal()))] : []),
  ];

  const latencies: number[] = [];
  const slowest: { id: string; ms: number }[] = [];
  const unsettled: string[] = [];
  const errors: string[] = [];
  let next = 0;
  let done = 0;
  const bar = progressBar();
  const loadUntil = started + options.maxMinutes * 60_000;
  const driveOne = async (): Promise<void> => {
    const o = orders[next++]!;
    const t = Date.now();
    try {
      if (await people.drive(o, 5 * 60_000)) {
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
  // The kills never resolve; a worker that cannot be brought back ends the soak.
  await Promise.race([
    concurrentLoops(concurrency, loadUntil, driveOne, () => next < orders.length),
    killing,
    flapping,
  ]);
  bar.end();
  await Promise.all(events);
  const placed = orders.slice(0, next);
  const loadSeconds = (Date.now() - started) / 1000;
  await stack.stopKilling();
  await stack.clearFaults();
  return { placed, loadSeconds, latencies, slowest, unsettled, errors, outage, operators, sweeper, recoveries };
}
