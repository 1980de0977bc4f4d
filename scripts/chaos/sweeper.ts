/**
 * The sweeper, as npm start's Schedule runs it but every few seconds (the soak is minutes long): the
 * sagas a person terminated are its to heal, and nobody else in the soak touches them.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { SweepReport } from '../../activities/sweeper';
import { sweeperWorkflow } from '../../workflows/sweeper';
import { say } from './say';
import type { ChaosStack } from './stack';

/** What the sweeps did, added up over the soak. */
export interface SweepCounts {
  runs: number;
  restarts: number;
  resets: number;
  persons: number;
  /** Versioning overrides it removed from runs pinned to a build no worker runs. */
  overridesRemoved: number;
  /** What it did, by cause (stranded, a paused activity, an override, unreadable, …). */
  byCause: Map<string, number>;
  /** Orders it could not read (each handed to a person), summed over the sweeps. */
  unreadable: number;
  /** When each order was first restarted by a sweep (to time the heal from its terminate). */
  restartedAt: Map<string, number>;
}

/** A sweeper loop that is running; stop() waits for its sweep in progress and returns the counts. */
export interface Sweeper {
  /** No sweep for `ms` (as while an operator has the `sweep` Schedule paused). */
  pauseFor(ms: number): void;
  stop(): Promise<SweepCounts>;
}

/** Runs the sweeper workflow on the soak's task queue every `everyMs` until stopped; counts what it did. */
export function sweepEvery(stack: ChaosStack, everyMs: number): Sweeper {
  const out: SweepCounts = {
    runs: 0,
    restarts: 0,
    resets: 0,
    persons: 0,
    overridesRemoved: 0,
    byCause: new Map<string, number>(),
    unreadable: 0,
    restartedAt: new Map<string, number>(),
  };
  let stopped = false;
  let pausedUntil = 0;
  const loop = (async () => {
    for (let n = 0; !stopped; n++) {
      if (Date.now() < pausedUntil) {
        await sleep(Math.min(everyMs, pausedUntil - Date.now()));
        continue;
      }
      try {
        const report: SweepReport = await stack.env.client.workflow.execute(sweeperWorkflow, {
          taskQueue: stack.taskQueue,
          workflowId: `chaos-sweep-${n}-${randomUUID().slice(0, 6)}`,
          // Runs that stop moving for 15 s (a paused activity, a run pinned to a build no worker runs) are its too.
          args: [{ graceMs: 2_000, attentionAgeMs: 10 * 60_000, stallAfterMs: 15_000 }],
          workflowExecutionTimeout: '2m',
        });
        out.runs++;
        out.unreadable += report.unreadable;
        for (const a of report.actions) {
          if (a.action === 'restart') {
            out.restarts++;
            if (!out.restartedAt.has(a.orderId)) out.restartedAt.set(a.orderId, Date.now());
          }
          if (a.action === 'reset') out.resets++;
          if (a.action === 'person') out.persons++;
          if (a.action === 'remove-override') out.overridesRemoved++;
          const key = `${a.action} (${a.cause})`;
          out.byCause.set(key, (out.byCause.get(key) ?? 0) + 1);
        }
      } catch (err) {
        say(`sweep ${n} failed: ${(err as Error).message}`); // a worker killed mid-sweep, say: the next one goes on
      }
      await sleep(everyMs);
    }
  })();
  return {
    pauseFor: (ms) => {
      pausedUntil = Date.now() + ms;
    },
    stop: async () => {
      stopped = true;
      await loop;
      return out;
    },
  };
}
