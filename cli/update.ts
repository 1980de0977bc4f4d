/** Cancel and resolve (cli/cancel.ts, cli/resolve.ts): the Signal, then the saga's answer, bounded by --wait. */
import { QueryNotRegisteredError, ServiceError, WorkflowNotFoundError } from '@temporalio/client';
import { workflowIdFor } from '../domain/order';
import { sendRequest, type SagaRequest } from '../lib/saga-requests';
import { OrderStatusKey } from '../workflows/search-attributes';
import { CliError, EXIT, type CliContext } from './context';
import { noOrder, printState } from './status';

/** Sends a cancel or a resolve and prints the saga's answer, bounded by waitSeconds. */
export async function update(
  orderId: string,
  req: SagaRequest,
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
    const { sent, answer, lastError } = await sendRequest(handle, req, { waitMs: opts.waitSeconds * 1000 });
    if (!sent) {
      throw new CliError(
        `${command}: the server did not take the request for order ${orderId} within ${opts.waitSeconds} s; see client.ts status ${orderId} before sending it again`,
        EXIT.notCompleted,
      );
    }
    // A run pinned to a build from before cancel and resolve were Signals cannot answer one.
    if (answer === undefined && lastError instanceof QueryNotRegisteredError) {
      throw new CliError(
        `${command}: order ${orderId}'s run never answered by query within ${opts.waitSeconds} s; its build may predate cancel and resolve as Signals (${lastError.message}); see client.ts status ${orderId}`,
        EXIT.notCompleted,
      );
    }
    if (answer === undefined) {
      throw new CliError(
        `${command}: no answer from order ${orderId} within ${opts.waitSeconds} s (is a worker running?${lastError ? ` last: ${lastError.message}` : ''}); the request is in the run's history and applies when a worker runs it: ` +
          `check client.ts status ${orderId}, or the run in the Web UI: ${ctx.links.run(workflowIdFor(orderId))}`,
        EXIT.notCompleted,
      );
    }
    if (answer.outcome === 'refused') throw new CliError(`${command} refused: ${answer.message}`, EXIT.notCompleted);
    if (answer.outcome === 'pending') {
      ctx.io.out(
        `order ${orderId}: ${command} accepted; the saga is still working on it after ${opts.waitSeconds} s (client.ts status ${orderId})`,
      );
      return EXIT.ok;
    }
    printState(ctx, !!opts.json, answer.state);
    return EXIT.ok;
  } catch (err) {
    // The run ended between the describe and the Signal: the server answers "not found" for it.
    if (err instanceof WorkflowNotFoundError && found) throw await ended();
    if (err instanceof WorkflowNotFoundError) throw noOrder(orderId);
    // The server refused the Signal (unreachable, or overloaded, say).
    if (err instanceof ServiceError)
      throw new CliError(
        `${command}: the server gave no answer for order ${orderId} (${err.cause?.message ?? err.message}); ` +
          `see client.ts status ${orderId} before sending it again`,
        EXIT.notCompleted,
      );
    throw err;
  }
}
