/**
 * The lock queue: one hot row, every request at once with a connection of its own, each with some
 * business logic. With FOR UPDATE held across the logic, the row lock is the only queue, so request n
 * waits for the logic of the n − 1 before it and the last one ends after about requests × logic. The
 * adaptive path runs the logic outside any lock and queues only the short commit.
 * (`--only lock-queue`; its results are the key `lockQueue` of latest.json.)
 */
import { createPool } from '../db/pool';
import { progress } from './measure';
import { runBurst, setupBenchTable, type BurstResult } from './strategies';

export interface LockQueueCase {
  requests: number;
  logicMs: number;
  expected: string;
}

/** The two cases, each with what the queue's arithmetic expects for FOR UPDATE with the logic inside. */
export const LOCK_QUEUE_CASES: readonly LockQueueCase[] = [
  { requests: 100, logicMs: 200, expected: '99 × 200 ms ≈ 20 s' },
  { requests: 20, logicMs: 50, expected: '19 × 50 ms ≈ 1 s' },
];

/** Each case (both unless given), FOR UPDATE with the logic in the transaction and then adaptive with `lanes` serial lanes. */
export async function measureLockQueue(
  url: string,
  lanes: number,
  cases: readonly LockQueueCase[] = LOCK_QUEUE_CASES,
): Promise<BurstResult[]> {
  // A connection per request: the row lock is the only queue, as the arithmetic assumes.
  const db = createPool(url, { max: Math.max(...cases.map((c) => c.requests)) + lanes });
  try {
    await setupBenchTable(db); // its own table, also when it runs alone (--only lock-queue)
    const out: BurstResult[] = [];
    for (const c of cases) {
      for (const strategy of ['for-update-logic-in-tx', 'adaptive'] as const) {
        progress(`lock queue: ${c.requests} requests × ${c.logicMs} ms, ${strategy}…`);
        out.push(await runBurst(db, strategy, c.requests, c.logicMs, lanes));
      }
    }
    progress('');
    return out;
  } finally {
    await db.end();
  }
}
