/**
 * The Temporal server's latency settings: dynamic config values that shorten one order's path on an
 * idle server, each with its reason. The dev server (`npm start`, the tests, the soak, the bench) gets
 * them as `--dynamic-config-value`s; the real server reads the same values from
 * temporal/dynamicconfig/order-saga.yaml (a test checks that the two agree). Their measured effect,
 * step by step, is the bench's idle-latency table (docs/benchmark.md).
 */
export interface LatencySetting {
  name: string;
  values: Record<string, unknown>;
  reason: string;
}

export const LATENCY_SETTINGS: LatencySetting[] = [
  {
    name: 'transfer queue reads 1000/s',
    values: { 'history.transferProcessorMaxPollRPS': 1000 },
    reason:
      'Every dispatch of a workflow or activity task is a transfer task, read from the shard by a reader limited to 20 reads a second by default: with one shard (the dev server) each dispatch waits up to 50 ms for its turn.',
  },
  {
    name: 'eager activities',
    values: { 'system.enableActivityEagerExecution': true },
    reason:
      'A workflow task that schedules an activity gets that activity back in its own completion, to run on the same worker at once, instead of through the transfer queue and matching.',
  },
  {
    name: 'timer queue reads 1000/s',
    values: { 'history.timerProcessorMaxPollRPS': 1000 },
    reason:
      "An activity's retry backoff and the saga's timers fire through the timer queue, limited like the transfer queue.",
  },
];

/** Every setting's values at once: what the dev server gets unless told otherwise. */
export const latencyDynamicConfig = (): Record<string, unknown> =>
  Object.assign({}, ...LATENCY_SETTINGS.map((s) => s.values)) as Record<string, unknown>;
