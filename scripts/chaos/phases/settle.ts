/**
 * Settle: with the faults and the kills stopped, wait (at most 3 minutes) until no saga is running
 * while the operators keep resolving; then stop the operators and the sweeper, and find the stranded
 * orders.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { temporalLookup } from '../../../db/invariants';
import { WorkflowNames } from '../../../domain/names';
import { TERMINAL_STATUSES } from '../../../domain/order';
import { waitEventsOut } from '../events';
import { say } from '../say';
import type { SweepCounts } from '../sweeper';
import type { BroughtUp } from './bring-up';
import type { Loaded } from './load';

export interface Settled {
  /** Sagas still running when the wait ended (0: every saga closed; -1: not counted at all). */
  running: number;
  /** What the sweeper did over the whole soak. */
  swept: SweepCounts;
  /** Orders open (row not terminal) at the end, with a live run or not. */
  open: string[];
  /** Of those, the ones whose latest run is not running: nothing will finish them. */
  stranded: string[];
  /** Order events still waiting to be delivered after the wait (0: every one delivered or dead-lettered). */
  eventsPending: number;
}

export async function settle({ stack, people }: BroughtUp, { placed, operators, sweeper }: Loaded): Promise<Settled> {
  say('load done; waiting until every saga has closed (operators keep resolving)…');
  const settleUntil = Date.now() + 3 * 60_000;
  let running = -1;
  while (Date.now() < settleUntil) {
    running = (
      await stack.env.client.workflow.count(
        `WorkflowType = '${WorkflowNames.orderSaga}' AND ExecutionStatus = 'Running'`,
      )
    ).count;
    if (running === 0) break;
    await sleep(1_000);
  }
  people.stop();
  await operators;
  const swept = await sweeper.stop();
  const openRows = await stack.reader.query<{ order_id: string }>({
    text: `SELECT order_id FROM orders WHERE order_id = ANY($1::text[]) AND NOT (status = ANY ($2::text[]))`,
    values: [placed.map((o) => o.input.orderId), TERMINAL_STATUSES],
  });
  const runsOfOpen = await temporalLookup(stack.env.client)(openRows.rows.map((r) => `order:${r.order_id}`));
  const stranded = openRows.rows
    .filter((r) => runsOfOpen.get(`order:${r.order_id}`) !== 'RUNNING')
    .map((r) => r.order_id);
  // The receiver is up for good now: every event goes out within a few tries (2 s apart at most).
  say('waiting until every order event is delivered…');
  const eventsPending = await waitEventsOut(
    stack.reader,
    placed.map((o) => o.input.orderId),
    90_000,
  );
  return { running, swept, open: openRows.rows.map((r) => r.order_id), stranded, eventsPending };
}
