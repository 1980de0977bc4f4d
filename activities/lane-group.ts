/**
 * A serial lane's group commit. A lane's worker may hold several lane tasks at once, but the lane runs
 * one round at a time: a round takes the lane (withLaneLock, across worker processes), then takes every
 * task waiting for it in this process (at most `max`), and commits them together in one short
 * transaction, each all-or-nothing. Tasks that arrive while a round runs wait for the next one. Each
 * task gets its own answer; a round that fails as a whole (its session lost, say) fails every task it
 * took, and Temporal retries them (the commit is idempotent per order).
 *
 * So "one task at a time per lane" is now one transaction at a time per lane, many reservations per
 * transaction: the lane still never runs two commits at once, and it drains its queue in one round trip
 * of locks instead of one per task.
 */

/** A task's answer from its round. */
export type Outcome<R> = { ok: true; value: R } | { ok: false; error: unknown };

/** What the group needs of a task: its heartbeat, and its cancellation. */
export interface GroupTask {
  heartbeat?(): void;
  signal?: AbortSignal;
}

/** What a round gets from the group. */
export interface RoundIo<T> {
  /** Heartbeats every task in the round and every task waiting behind it (call it while waiting for the lane). */
  heartbeat(): void;
  /**
   * Aborted once no task wants the round's answer any more: before it took its tasks, when every waiting
   * task was cancelled; after, when every task it took was (a round stuck with none of its tasks alive).
   */
  signal: AbortSignal;
  /** The tasks waiting now, taken into this round. Called once, with the lane held. */
  take(): T[];
  /** The round's tasks (before take: the tasks waiting). */
  pending(): T[];
}

interface Entry<T, R> {
  item: T;
  task: GroupTask;
  taken: boolean;
  cancelled: boolean;
  settle(o: Outcome<R>): void;
}

/** Tasks one round takes at most (and the lane worker's concurrent lane tasks). */
export const LANE_GROUP_MAX = 32;

export class LaneGroup<T, R> {
  private waiting: Entry<T, R>[] = [];
  private running = false;
  private current: { ctl: AbortController; taken?: Entry<T, R>[] } | undefined;

  /** `round` answers the items it took, in the same order. */
  constructor(
    private readonly round: (io: RoundIo<T>) => Promise<Outcome<R>[]>,
    private readonly max = LANE_GROUP_MAX,
  ) {}

  /** The item's answer from the round that takes it. */
  submit(item: T, task: GroupTask = {}): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      if (task.signal?.aborted) return reject(task.signal.reason as Error);
      const entry: Entry<T, R> = {
        item,
        task,
        taken: false,
        cancelled: false,
        settle: (o) => {
          task.signal?.removeEventListener('abort', onAbort);
          if (o.ok) resolve(o.value);
          else reject(o.error instanceof Error ? o.error : new Error(String(o.error)));
        },
      };
      // Cancelled while waiting: it leaves the queue at once. Taken: its round's transaction is short,
      // so it waits for its answer (a round whose tasks were all cancelled stops renewing the lane).
      const onAbort = (): void => {
        entry.cancelled = true;
        if (!entry.taken) {
          this.waiting = this.waiting.filter((e) => e !== entry);
          entry.settle({ ok: false, error: task.signal!.reason as Error });
        }
        this.checkAbandoned();
      };
      task.signal?.addEventListener('abort', onAbort, { once: true });
      this.waiting.push(entry);
      if (!this.running) void this.drain();
    });
  }

  private checkAbandoned(): void {
    const cur = this.current;
    if (!cur || cur.ctl.signal.aborted) return;
    const members = cur.taken ?? this.waiting;
    if (members.every((e) => e.cancelled)) cur.ctl.abort(new Error('every task of this lane round was cancelled'));
  }

  private async drain(): Promise<void> {
    this.running = true;
    try {
      while (this.waiting.length > 0) {
        const cur: { ctl: AbortController; taken?: Entry<T, R>[] } = { ctl: new AbortController() };
        this.current = cur;
        try {
          const outcomes = await this.round({
            heartbeat: () => {
              for (const e of [...(cur.taken ?? []), ...this.waiting]) e.task.heartbeat?.();
            },
            signal: cur.ctl.signal,
            take: () => {
              if (cur.taken) throw new Error('a lane round takes its tasks once');
              cur.taken = this.waiting.splice(0, this.max);
              for (const e of cur.taken) e.taken = true;
              return cur.taken.map((e) => e.item);
            },
            pending: () => (cur.taken ?? this.waiting).map((e) => e.item),
          });
          const taken = cur.taken ?? [];
          taken.forEach((e, i) =>
            e.settle(outcomes[i] ?? { ok: false, error: new Error('the lane round gave this task no answer') }),
          );
        } catch (err) {
          if (cur.taken) for (const e of cur.taken) e.settle({ ok: false, error: err });
          // Before it took anyone: abandoned (every waiting task was cancelled; any that came since go in
          // the next round), or it failed for all that wait.
          else if (!cur.ctl.signal.aborted) for (const e of this.waiting.splice(0)) e.settle({ ok: false, error: err });
        }
      }
    } finally {
      this.current = undefined;
      this.running = false;
    }
  }
}
