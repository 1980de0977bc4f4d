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
  | { command: 'cancel'; reason: string }
  | { command: 'resolve'; action: ResolveAction; note?: string; reference?: string };

/** Pauses between two reads of the answer: quick at first, then every 250 ms. */
const POLL_MS = [10, 20, 50, 100, 200, 250];

/**
 * Sends the request and reads its answer until the saga has decided or `waitMs` has passed (each call
 * is cut at the deadline too). Returns the answer read last: undefined when the saga has not seen the
 * request by then (no worker, or its workflow task failing; the Signal is in the history and applies
 * when a worker runs the run), `pending` when it is still working on it (never undefined again once
 * seen), with the last error of a read that failed. A Signal to a run that has closed throws
 * WorkflowNotFoundError; a closed run's answer is read by replaying it.
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
): Promise<{ requestId: string; sent: boolean; answer: RequestAnswer | undefined; lastError?: Error }> {
  const until = Date.now() + waitMs;
  const late = new Error(`no answer within ${waitMs} ms`);
  /** The call, cut at the deadline. */
  const bounded = <T>(p: Promise<T>): Promise<T> => {
    let timer: NodeJS.Timeout | undefined;
    const cut = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(late), Math.max(0, until - Date.now()));
    });
    return Promise.race([p, cut]).finally(() => clearTimeout(timer));
  };
  try {
    await bounded(
      req.command === 'cancel'
        ? handle.signal(cancelSignal, { requestId, reason: req.reason })
        : handle.signal(resolveSignal, {
            requestId,
            action: req.action,
            ...(req.note ? { note: req.note } : {}),
            ...(req.reference ? { reference: req.reference } : {}),
          }),
    );
  } catch (err) {
    if (err === late) return { requestId, sent: false, answer: undefined, lastError: late };
    throw err;
  }
  let answer: RequestAnswer | undefined;
  let lastError: Error | undefined;
  for (let i = 0; ; i++) {
    try {
      const read = await bounded(handle.query(answerQuery, requestId));
      lastError = undefined;
      answer = read ?? answer; // seen once, it stays seen (a new run may not have it yet)
      if (answer && (untilSeen || answer.outcome !== 'pending')) break;
    } catch (err) {
      if (err instanceof WorkflowNotFoundError) throw err;
      // No worker yet, its workflow task failing, or a worker that has the run only partly loaded (it
      // can answer a query before the workflow's code has set its handlers): read again. A run of a
      // build without the `answer` query keeps saying so; the last error tells it at the deadline.
      if (err !== late) lastError = err as Error;
    }
    const left = until - Date.now();
    if (left <= 0) break;
    await sleep(Math.min(POLL_MS[Math.min(i, POLL_MS.length - 1)]!, left));
  }
  return { requestId, sent: true, answer, ...(lastError ? { lastError } : {}) };
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
