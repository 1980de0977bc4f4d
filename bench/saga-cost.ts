/**
 * The saga's own cost per order, counted (not timed): what one happy-path order adds to Temporal's
 * history (events, workflow tasks, search attribute updates, timers) and how many promises the
 * workflow code creates, against the like-for-like floor doing the same six steps.
 *
 * Promises are counted with a V8 promise hook (`v8.promiseHooks`, the hook the SDK itself uses for
 * stack traces) while one workflow runs at a time on a worker in `debugMode`, which runs workflow
 * code in its process's main thread instead of a worker thread; in a process of its own
 * (count-promises.ts, started by `countPromises`), since that worker leaves the SDK's hook on every
 * promise of its process. A promise counts when it was made
 * in the workflow sandbox (its constructor is the sandbox's `Promise`, not this realm's): the
 * workflow's code and the SDK's workflow library bundled with it, nothing of the worker's own or of
 * the activities.
 */
import v8 from 'node:v8';
import type { temporal } from '@temporalio/proto';
import { temporal as proto } from '@temporalio/proto';
import { exited, startTsProcess, stopProcess } from '../platform/processes';

type HistoryEvent = temporal.api.history.v1.IHistoryEvent;
const { EventType } = proto.api.enums.v1;

/** One workflow's cost. */
export interface Cost {
  events: number;
  workflowTasks: number;
  searchAttributeUpdates: number;
  timers: number;
  /** Promises created in the workflow sandbox, per workflow (median of the runs counted). */
  promises: number;
}

/** What a run's history says of its cost (promises are counted apart). */
export function historyCost(events: HistoryEvent[]): Omit<Cost, 'promises'> {
  const count = (t: temporal.api.enums.v1.EventType): number => events.filter((e) => e.eventType === t).length;
  return {
    events: events.length,
    workflowTasks: count(EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED),
    searchAttributeUpdates: count(EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES),
    timers: count(EventType.EVENT_TYPE_TIMER_STARTED),
  };
}

/**
 * Runs `one` (one workflow, start to result) `times` times, one after another, and returns the
 * promises created in workflow sandboxes during each: the median. The workflow must run on a worker
 * in `debugMode` in this process, and nothing else may run workflows meanwhile.
 */
export async function sandboxPromises(times: number, one: () => Promise<unknown>): Promise<number> {
  let made = 0;
  const stop = v8.promiseHooks.createHook({
    init(promise) {
      if ((promise as { constructor?: unknown }).constructor !== Promise) made++;
    },
  }) as () => void;
  const counts: number[] = [];
  try {
    for (let i = 0; i < times; i++) {
      made = 0;
      await one();
      counts.push(made);
    }
  } finally {
    stop();
  }
  counts.sort((a, b) => a - b);
  return counts[Math.floor(counts.length / 2)] ?? 0;
}

/** Where count-promises.ts finds the stack it counts on. */
export interface CountStack {
  /** The dev server's address and namespace. */
  address: string;
  namespace: string;
  databaseUrl: string;
  providerUrl: string;
  /** The bench products' prefix (insertBenchProducts). */
  sku: string;
  /** Runs of each workflow, one at a time; the median is kept. */
  times: number;
}

/** How long count-promises.ts may take to exit once it has printed its counts. */
const COUNT_EXIT_MS = 30_000;

/** The promises one saga and one like-for-like floor make, counted in a process of its own (count-promises.ts). */
export async function countPromises(stack: CountStack): Promise<{ saga: number; like: number }> {
  const { child, match } = await startTsProcess(
    'bench/count-promises.ts',
    {
      COUNT_ADDRESS: stack.address,
      COUNT_NAMESPACE: stack.namespace,
      DATABASE_URL: stack.databaseUrl,
      PROVIDER_URL: stack.providerUrl,
      COUNT_SKU: stack.sku,
      COUNT_TIMES: String(stack.times),
    },
    /^\{"saga":(\d+),"like":(\d+)\}$/,
    { readyTimeoutMs: 120_000 + stack.times * 20_000 },
  );
  // It has printed its counts; it must now exit by itself, promptly and cleanly.
  const exit = exited(child);
  const late = new Promise<'late'>((r) => setTimeout(() => r('late'), COUNT_EXIT_MS).unref());
  const end = await Promise.race([exit, late]);
  if (end === 'late') {
    await stopProcess(child);
    throw new Error(`bench/count-promises.ts did not exit within ${COUNT_EXIT_MS / 1000} s of printing its counts`);
  }
  if (end.code !== 0) throw new Error(`bench/count-promises.ts exited ${end.code ?? end.signal} after its counts`);
  return { saga: Number(match[1]), like: Number(match[2]) };
}

/** The cost table's lines: the saga, the floor, and what the saga adds. */
export function costTable(saga: Cost, floor: Cost): string[] {
  const rows: [string, keyof Cost][] = [
    ['history events', 'events'],
    ['workflow tasks', 'workflowTasks'],
    ['search attribute updates', 'searchAttributeUpdates'],
    ['timers started', 'timers'],
    ['promises made by workflow code', 'promises'],
  ];
  const w = Math.max(...rows.map(([l]) => l.length));
  return [
    `${'per order'.padEnd(w)}  saga  like-for-like floor  saga's own`,
    ...rows.map(
      ([label, k]) =>
        `${label.padEnd(w)}  ${String(saga[k]).padStart(4)}  ${String(floor[k]).padStart(19)}  ${String(saga[k] - floor[k]).padStart(10)}`,
    ),
  ];
}
