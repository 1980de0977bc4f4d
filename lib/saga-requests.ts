/**
 * Cancel and resolve from a client: the Signal, named by a request ID, then the saga's answer read
 * back with the `answer` query (workflows/messages.ts says why they are Signals and not Updates).
 * Used by `client.ts cancel` and `client.ts resolve`, and by the tests.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { WorkflowNotFoundError, type WorkflowHandle } from '@temporalio/client';
import {
  answerQuery,
  cancelSignal,
  resolveSignal,
  type RequestAnswer,
  type ResolveAction,
  type SagaState,
} from '../workflows/messages';

export type SagaRequest =
  { command: 'cancel'; reason: string } | { command: 'resolve'; action: ResolveAction; note?: string };

/** Pauses between two reads of the answer: quick at first, then every 250 ms. */
const POLL_MS = [10, 20, 50, 100, 200, 250];

/**
 * Sends the request and reads its answer until the saga has decided or `waitMs` has passed. Returns
 * the last answer read: undefined when the saga has not seen the request by then (no worker, or its
 * workflow task failing; the Signal is in the history and applies when a worker runs), `pending`
 * when it is still working on it. A run that has closed throws WorkflowNotFoundError, as the Signal does.
 */
export async function sendRequest(
  handle: WorkflowHandle,
  req: SagaRequest,
  {
    waitMs,
    requestId = randomUUID(),
    untilSeen = false,
  }: {
    waitMs: number;
    requestId?: string;
    /** Return once the saga has seen the request (recorded, refused or decided), not only once decided. */
    untilSeen?: boolean;
  },
): Promise<{ requestId: string; answer: RequestAnswer | undefined; lastError?: Error }> {
  const until = Date.now() + waitMs;
  if (req.command === 'cancel') await handle.signal(cancelSignal, { requestId, reason: req.reason });
  else await handle.signal(resolveSignal, { requestId, action: req.action, ...(req.note ? { note: req.note } : {}) });
  let answer: RequestAnswer | undefined;
  let lastError: Error | undefined;
  for (let i = 0; ; i++) {
    try {
      answer = await handle.query(answerQuery, requestId);
      lastError = undefined;
      if (answer && (untilSeen || answer.outcome !== 'pending')) break;
    } catch (err) {
      if (err instanceof WorkflowNotFoundError) throw err;
      lastError = err as Error; // no worker yet, or its workflow task failing: read again until the deadline
    }
    const left = until - Date.now();
    if (left <= 0) break;
    await sleep(Math.min(POLL_MS[Math.min(i, POLL_MS.length - 1)]!, left));
  }
  return { requestId, answer, ...(lastError ? { lastError } : {}) };
}

/** The saga refused a cancel or a resolve; the message is the saga's. */
export class RequestRefusedError extends Error {
  constructor(
    readonly command: SagaRequest['command'],
    message: string,
  ) {
    super(message);
    this.name = 'RequestRefusedError';
  }
}

/** Sends the request and returns the saga's state once it accepted it; throws RequestRefusedError, or on no answer in time. */
export async function request(handle: WorkflowHandle, req: SagaRequest, waitMs = 60_000): Promise<SagaState> {
  const { answer, lastError } = await sendRequest(handle, req, { waitMs });
  if (answer?.outcome === 'accepted') return answer.state;
  if (answer?.outcome === 'refused') throw new RequestRefusedError(req.command, answer.message);
  throw new Error(
    `${req.command}: no answer from ${handle.workflowId} within ${waitMs} ms (${answer ? 'still pending' : (lastError?.message ?? 'not seen yet')})`,
  );
}
