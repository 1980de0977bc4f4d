/**
 * Someone presses the Web UI's Reset (the same ResetWorkflowExecution call) on open and closed runs;
 * someone starts a closed order's workflow ID again (as `temporal workflow start` would), with the
 * same input and with other input, and places the same order file again with `client.ts place`.
 * A second start must change nothing: ALREADY_SETTLED or refused, and exit code 3 for `place`.
 */
import { randomUUID } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { temporal } from '@temporalio/proto';
import { ErrorTypes } from '../../../domain/failures';
import { workflowIdFor, type OrderInput, type OrderResult } from '../../../domain/order';
import type { ChaosOrder } from '../orders';
import type { PeopleBase } from './base';

const WFT_COMPLETED = temporal.api.enums.v1.EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED;

/** Watches until the saga has done 1 or 2 steps (or ended), then presses Reset. */
export async function resetWhileOpen(p: PeopleBase, o: ChaosOrder): Promise<void> {
  const id = o.input.orderId;
  const wid = workflowIdFor(id);
  // After its first step or two: the authorization, slowed for it (faults.ts, RESET_OPEN_HOLD_MS), keeps the run open.
  const steps = 1 + Math.floor(o.when * 2);
  for (const until = Date.now() + 20_000; Date.now() < until; await sleep(100)) {
    const s = await p.state(id);
    if (!s || s.stepsDone.length >= steps || !(await p.running(wid))) break;
  }
  await reset(p, id, (await p.running(wid)) ? 'reset an open run' : 'reset a closed run');
}

/** The Web UI's Reset: to a random completed workflow task of the latest run. */
export async function reset(p: PeopleBase, orderId: string, action: string): Promise<void> {
  const wid = workflowIdFor(orderId);
  const handle = p.client.workflow.getHandle(wid);
  const { runId } = await handle.describe();
  const history = await p.client.workflow.getHandle(wid, runId).fetchHistory();
  const points = (history.events ?? []).filter((e) => e.eventType === WFT_COMPLETED).map((e) => Number(e.eventId));
  p.count(action, 'sent');
  p.meddled.add(orderId);
  if (points.length === 0) return p.count(action, 'refused');
  const eventId = points[Math.floor(Math.random() * points.length)]!;
  try {
    await p.client.workflowService.resetWorkflowExecution({
      namespace: p.client.options.namespace,
      workflowExecution: { workflowId: wid, runId },
      workflowTaskFinishEventId: eventId as never, // an int64: protobufjs takes a number
      requestId: randomUUID(),
      reason: `chaos: ${action} to event ${eventId}`,
    });
    p.count(action, 'accepted');
  } catch {
    p.count(action, 'refused');
  }
}

/** A closed order's ID started again: `other`, with another quantity of its first item. */
export async function startAgainClosed(
  p: PeopleBase,
  input: OrderInput,
  other: boolean,
  limitMs: number,
): Promise<void> {
  const again: OrderInput = other
    ? { ...input, items: input.items.map((it, i) => (i === 0 ? { ...it, qty: it.qty + 1 } : it)) }
    : input;
  await startAgain(p, again, other ? 'start again, other input' : 'start again, same input', limitMs);
}

/** A second start of a closed order: it must end ALREADY_SETTLED (or be refused) and change nothing. */
async function startAgain(p: PeopleBase, input: OrderInput, action: string, limitMs: number): Promise<void> {
  p.count(action, 'sent');
  p.meddled.add(input.orderId);
  const handle = await p.start(input, true);
  let outcome: string;
  try {
    const r = (await p.resultWithin(handle, limitMs)) as OrderResult | undefined;
    outcome = r?.status ?? 'still running';
  } catch (err) {
    const types: string[] = [];
    for (let e: unknown = err; e instanceof Error; e = (e as { cause?: unknown }).cause)
      types.push((e as { type?: string }).type ?? e.name);
    outcome =
      types.includes(ErrorTypes.OrderMismatch) || types.includes(ErrorTypes.InvalidOrder)
        ? 'refused'
        : `failed (${types.join(' ← ')})`;
  }
  if (outcome === 'ALREADY_SETTLED' || outcome === 'refused') return p.count(action, 'refused');
  p.count(action, 'accepted');
  p.violation(
    'a closed order started again changes nothing',
    input.orderId,
    `${action}: the new run ended ${outcome}, not ALREADY_SETTLED`,
  );
}

/** `client.ts place` of the same order file again: exit code 3, nothing started. */
export async function placeAgain(p: PeopleBase, input: OrderInput): Promise<void> {
  const file = path.join(p.tmp, `${input.orderId}.json`);
  writeFileSync(file, JSON.stringify(input));
  p.count('place again (client.ts)', 'sent');
  const r = await p.cli(['place', '--file', file, '--json']);
  if (r.code === 3) return p.count('place again (client.ts)', 'refused');
  p.count('place again (client.ts)', 'accepted');
  p.violation(
    'a duplicate order ID gets exit code 3',
    input.orderId,
    `client.ts place exited ${r.code}: ${r.out || r.err}`,
  );
}
