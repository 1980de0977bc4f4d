/**
 * Placing an order: its saga started with an Update-with-Start, which returns the saga's early answer
 * in the same call. One way for `client.ts place` and the orders API (api/), so both place an order
 * under the same ID policies and read the same answers.
 */
import {
  WithStartWorkflowOperation,
  WorkflowExecutionAlreadyStartedError,
  WorkflowUpdateFailedError,
  type Client,
  type WorkflowHandle,
  type WorkflowHandleWithFirstExecutionRunId,
} from '@temporalio/client';
import { WorkflowIdConflictPolicy, WorkflowIdReusePolicy } from '@temporalio/common';
import type { OrderInput } from '../domain/order';
import { acceptedUpdate, type Acceptance } from '../workflows/messages';
import type { SagaConfig } from '../workflows/saga-config';
import { ORDER_SAGA, sagaStartOptions } from './saga-start';

/** What the start came to, each a value the caller turns into its own answer. */
export type Placement =
  /** The saga's early answer: accepted (stock reserved) or refused with the reason. */
  | { kind: 'answered'; acceptance: Acceptance; handle: WorkflowHandle; runId: string; answerMs: number }
  /** The saga started but ended before it could answer (it failed at its boundary, say): its outcome says why. */
  | { kind: 'ended'; error: WorkflowUpdateFailedError; handle: WorkflowHandle; runId: string; answerMs: number }
  /** The order's ID already has a workflow, running or closed: a duplicate order. */
  | { kind: 'duplicate' }
  /** No answer within `waitMs` (no worker?); `runId` when the server shows the run started. */
  | { kind: 'late'; runId?: string };

/**
 * Starts the order's saga with an Update-with-Start and waits at most `waitMs` for its early answer.
 * An order ID is placed once: REJECT_DUPLICATE refuses the ID of a closed run and FAIL a running one.
 * The search attributes go in the start request, so the order is listed PENDING even when no worker
 * answers. `config` is the saga's second argument (left out: its defaults).
 */
export async function placeOrder(
  client: Client,
  order: OrderInput,
  taskQueue: string,
  waitMs: number,
  config?: Partial<SagaConfig>,
): Promise<Placement> {
  const start = new WithStartWorkflowOperation(
    ORDER_SAGA,
    sagaStartOptions(order, taskQueue, {
      ...(config ? { config } : {}),
      searchAttributesAtStart: true,
      policies: {
        workflowIdReusePolicy: WorkflowIdReusePolicy.REJECT_DUPLICATE,
        workflowIdConflictPolicy: WorkflowIdConflictPolicy.FAIL,
      },
    }),
  );
  const sent = Date.now();
  // The call waits for the early answer; past waitMs it is cut, not left to the server's long poll.
  const cut = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'late'>((resolve) => {
    timer = setTimeout(() => resolve('late'), Math.max(0, waitMs));
    timer.unref();
  });
  let answer: Acceptance | 'late' | WorkflowUpdateFailedError;
  try {
    answer = await Promise.race([
      client.withAbortSignal(cut.signal, () =>
        client.workflow.executeUpdateWithStart(acceptedUpdate, { startWorkflowOperation: start }),
      ),
      late,
    ]);
  } catch (err) {
    if (err instanceof WorkflowExecutionAlreadyStartedError) return { kind: 'duplicate' };
    if (!(err instanceof WorkflowUpdateFailedError)) throw err;
    answer = err;
  } finally {
    clearTimeout(timer);
  }
  const answerMs = Date.now() - sent;
  if (answer === 'late') {
    cut.abort();
    start.workflowHandle().catch(() => undefined); // cut with the call
    const run = await client.workflow
      .getHandle(sagaStartOptions(order, taskQueue).workflowId)
      .describe()
      .catch(() => undefined);
    return { kind: 'late', ...(run ? { runId: run.runId } : {}) };
  }
  const handle = await start.workflowHandle();
  // The start's run ID, when the server's answer carried it; else as the server describes the run.
  const runId =
    (handle as Partial<WorkflowHandleWithFirstExecutionRunId>).firstExecutionRunId || (await handle.describe()).runId;
  if (answer instanceof WorkflowUpdateFailedError) return { kind: 'ended', error: answer, handle, runId, answerMs };
  return { kind: 'answered', acceptance: answer, handle, runId, answerMs };
}
