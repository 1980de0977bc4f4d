/**
 * The Web UI's Terminate, alone or after a cancel Signal whose payload no key opens: nobody here
 * touches the order after that, and the sweeper must find it stranded and start its saga again from
 * its row. healedBySweeper waits for that run to settle the order, and times the heal.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { SignalNames } from '../../../domain/names';
import { isTerminal, workflowIdFor, type OrderStatus } from '../../../domain/order';
import type { ChaosOrder } from '../orders';
import type { PeopleBase } from './base';

/**
 * The Web UI's Terminate, at a moment chosen by the order (after 1, 2 or 3 steps: before, during or
 * after the hold; or once it waits in NEEDS_ATTENTION). Then nobody here touches the order: the
 * sweeper must find it stranded and start its saga again, and that run must end it.
 */
export async function terminate(p: PeopleBase, o: ChaosOrder, limitMs: number): Promise<boolean> {
  const id = o.input.orderId;
  const wid = workflowIdFor(id);
  // After the order row (1 step) or the reservation (2: the authorization is next, or under way).
  const steps = 1 + Math.floor(o.when * 2);
  for (const until = Date.now() + 20_000; Date.now() < until; await sleep(50)) {
    const s = await p.state(id);
    if (s && (s.stepsDone.length >= steps || s.status === 'NEEDS_ATTENTION')) break;
    if (!(await p.running(wid))) break;
  }
  p.count('terminate', 'sent');
  p.meddled.add(id);
  const terminated = await p.client.workflow
    .getHandle(wid)
    .terminate('chaos: a person pressed Terminate')
    .then(
      () => true,
      () => false, // it had ended
    );
  p.count('terminate', terminated ? 'accepted' : 'refused');
  return healedBySweeper(p, id, terminated, limitMs);
}

/** The key ID the unreadable Signal names: no worker has it. */
export const UNREADABLE_KEY_ID = 'a-key-nobody-has';

/**
 * A cancel Signal whose payload no key opens (as `temporal workflow signal --input-meta
 * encoding=binary/encrypted` sends it), then Terminate: the sweeper must restart the order from its
 * row without reading that payload, and go on with the others.
 */
export async function unreadableSignal(p: PeopleBase, o: ChaosOrder, limitMs: number): Promise<boolean> {
  const id = o.input.orderId;
  await p.untilAuthorizing(id);
  const action = 'an unreadable cancel Signal, then Terminate';
  p.count(action, 'sent');
  p.meddled.add(id);
  const execution = { workflowId: workflowIdFor(id) };
  const sent = await p.client.workflowService
    .signalWorkflowExecution({
      namespace: p.client.options.namespace,
      workflowExecution: execution,
      signalName: SignalNames.cancel,
      identity: 'chaos: a person with the Temporal CLI',
      requestId: randomUUID(),
      input: {
        payloads: [
          {
            metadata: {
              encoding: Buffer.from('binary/encrypted'),
              'encryption-key-id': Buffer.from(UNREADABLE_KEY_ID),
            },
            data: Buffer.from('not a sealed payload'),
          },
        ],
      },
    })
    .then(
      () => true,
      () => false,
    );
  const terminated =
    sent &&
    (await p.client.workflow
      .getHandle(workflowIdFor(id))
      .terminate('chaos: a person pressed Terminate after an unreadable Signal')
      .then(
        () => true,
        () => false,
      ));
  p.count(action, terminated ? 'accepted' : 'refused');
  return healedBySweeper(p, id, terminated, limitMs);
}

/**
 * Waits for the order's row to be settled by the run the sweeper starts, and that run to close;
 * `stopped`: a person stopped its run (the sweeper must have healed it: its heal is timed), unless it
 * was stopped before it wrote the row (no row 10 s on: nothing to heal, and the audit checks nothing moved).
 */
export async function healedBySweeper(p: PeopleBase, id: string, stopped: boolean, limitMs: number): Promise<boolean> {
  const wid = workflowIdFor(id);
  const at = Date.now();
  for (const until = at + limitMs; Date.now() < until; await sleep(500)) {
    let settled: boolean;
    let none: boolean;
    try {
      const { rows } = await p.stack.reader.query<{ status: OrderStatus }>({
        text: 'SELECT status FROM orders WHERE order_id = $1',
        values: [id],
      });
      const status = rows[0]?.status;
      // Stopped before it wrote the row: nothing to heal (unless a late write appears, then it is).
      none = status === undefined && Date.now() - at > 10_000;
      settled = (none || (status !== undefined && isTerminal(status))) && !(await p.running(wid));
    } catch {
      continue; // Postgres or the Temporal server is being restarted by the soak: look again
    }
    if (settled) {
      // One stopped before its row: the audit holds it to nothing moved.
      if (stopped && none) p.stoppedBeforeRow.add(id);
      else if (stopped) p.terminated.set(id, at);
      return true;
    }
  }
  return false;
}
