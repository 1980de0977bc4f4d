/** The cancel and resolve Updates (cli/cancel.ts, cli/resolve.ts), each bounded by --wait. */
import {
  ServiceError,
  WorkflowNotFoundError,
  WorkflowUpdateFailedError,
  WorkflowUpdateStage,
} from '@temporalio/client';
import { workflowIdFor } from '../domain/order';
import { cancelUpdate, resolveUpdate, type ResolveAction } from '../workflows/messages';
import { OrderStatusKey } from '../workflows/search-attributes';
import { CliError, EXIT, LATE, lateAfter, type CliContext } from './context';
import { noOrder, printState } from './status';

export type UpdateRequest =
  { command: 'cancel'; reason: string } | { command: 'resolve'; action: ResolveAction; note?: string };

/** The cancel and resolve Updates, bounded by waitSeconds. */
export async function update(
  orderId: string,
  req: UpdateRequest,
  opts: { json?: boolean; waitSeconds: number },
  ctx: CliContext,
): Promise<number> {
  const { command } = req;
  const client = await ctx.temporal();
  const handle = client.workflow.getHandle(workflowIdFor(orderId));
  const ended = async (): Promise<CliError> => {
    const described = await handle.describe();
    const status = described.typedSearchAttributes.get(OrderStatusKey) ?? described.status.name;
    return new CliError(
      `${command} refused: order ${orderId} has ended (${status}); there is nothing to ${command}`,
      EXIT.notCompleted,
    );
  };
  let found = false;
  try {
    const described = await handle.describe();
    found = true;
    if (described.status.name !== 'RUNNING') throw await ended();
    // Bounded: a saga that cannot answer (no worker, or its workflow task failing) gets a clear
    // message instead of a command that never returns.
    const until = Date.now() + opts.waitSeconds * 1000;
    const late = <T>(p: Promise<T>): Promise<T | typeof LATE> => Promise.race([p, lateAfter(until - Date.now())]);
    const started =
      req.command === 'cancel'
        ? await late(
            handle.startUpdate(cancelUpdate, { args: [req.reason], waitForStage: WorkflowUpdateStage.ACCEPTED }),
          )
        : await late(
            handle.startUpdate(resolveUpdate, {
              args: [{ action: req.action, ...(req.note ? { note: req.note } : {}) }],
              waitForStage: WorkflowUpdateStage.ACCEPTED,
            }),
          );
    if (started === LATE) {
      throw new CliError(
        `${command}: no answer from order ${orderId} within ${opts.waitSeconds} s (is a worker running?); the request may still apply when it is: ` +
          `check client.ts status ${orderId}, or the run in the Web UI: ${ctx.links.run(workflowIdFor(orderId))}`,
        EXIT.notCompleted,
      );
    }
    const state = await late(started.result());
    if (state === LATE) {
      ctx.io.out(
        `order ${orderId}: ${command} accepted; the saga is still working on it after ${opts.waitSeconds} s (client.ts status ${orderId})`,
      );
      return EXIT.ok;
    }
    printState(ctx, !!opts.json, state);
    return EXIT.ok;
  } catch (err) {
    // The run ended between the describe and the Update: the server answers "not found" for it.
    if (err instanceof WorkflowNotFoundError && found) throw await ended();
    if (err instanceof WorkflowNotFoundError) throw noOrder(orderId);
    if (err instanceof WorkflowUpdateFailedError)
      throw new CliError(`${command} refused: ${err.cause?.message ?? err.message}`, EXIT.notCompleted);
    // The server dropped the request before the saga answered it (the run was reset or closed, say).
    if (err instanceof ServiceError)
      throw new CliError(
        `${command}: the server gave no answer for order ${orderId} (${err.cause?.message ?? err.message}); ` +
          `see client.ts status ${orderId} before sending it again`,
        EXIT.notCompleted,
      );
    throw err;
  }
}
