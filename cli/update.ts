/**
 * Cancel and resolve (cli/cancel.ts, cli/resolve.ts). The promise goes to Postgres first: a cancel is
 * decided there against the pivot and recorded (accepted means the order will not ship, whatever
 * happens to its run's history); a resolve is recorded as pending, for the run to check against the
 * ledger. Then the Signal wakes the run, and its answer is read back, bounded by --wait.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { QueryNotRegisteredError, ServiceError, WorkflowNotFoundError } from '@temporalio/client';
import { isConnectionError } from '../db/pool';
import { workflowIdFor } from '../domain/order';
import { sendRequest, type SagaRequest } from '../orders/saga-requests';
import { OrderStatusKey } from '../workflows/search-attributes';
import { CliError, EXIT, type CliContext } from './context';
import { noOrder, printState } from './status';

/**
 * Records the request in Postgres. A cancel: `recorded` when Postgres accepted it (a refusal throws),
 * with a note to tell; not recorded when the order has no row yet after `waitMs` (its run has not
 * written it: the Signal goes without a record, and the run decides it when it does).
 */
async function recordFirst(
  orderId: string,
  requestId: string,
  req: SagaRequest,
  ctx: CliContext,
  waitMs: number,
): Promise<{ recorded: boolean; note: string }> {
  const store = ctx.needStore('app', req.command);
  // Each write is idempotent by request ID: sent again after a lost connection (a Postgres restart),
  // it returns the first answer. Bounded by --wait (at most 30 s); then nothing was promised.
  const until = Date.now() + Math.min(waitMs, 30_000);
  const again = async <T>(write: () => Promise<T>): Promise<T> => {
    for (let attempt = 1; ; attempt++) {
      try {
        return await write();
      } catch (err) {
        if (!isConnectionError(err)) throw err;
        if (Date.now() >= until)
          throw new CliError(
            `${req.command}: the database did not answer (${(err as Error).message}); it may not be recorded: send it again`,
            EXIT.notCompleted,
          );
        await sleep(Math.min(250 * attempt, 2_000));
      }
    }
  };
  try {
    if (req.command === 'resolve') {
      const resolve = {
        orderId,
        requestId,
        action: req.action,
        ...(req.note ? { note: req.note } : {}),
        ...(req.reference ? { reference: req.reference } : {}),
      };
      const { recorded } = await again(() => store.recordResolve(resolve));
      if (!recorded) throw noOrder(orderId);
      return { recorded: true, note: '' };
    }
    // Placed a moment ago, its run may not have written the row yet (its first step): wait, bounded.
    for (const rowBy = Date.now() + Math.min(waitMs, 10_000); !(await again(() => store.orderExists(orderId)));) {
      if (Date.now() >= rowBy) return { recorded: false, note: '' };
      await sleep(100);
    }
    const decision = await again(() => store.decideCancel({ orderId, requestId, reason: req.reason }));
    if (decision.outcome === 'refused') throw new CliError(`cancel refused: ${decision.message}`, EXIT.notCompleted);
    return { recorded: true, note: decision.message ? ` (${decision.message})` : '' };
  } finally {
    await store.close();
  }
}

/** Records a cancel or a resolve, wakes the saga and prints its answer, bounded by waitSeconds. */
export async function update(
  orderId: string,
  req: SagaRequest,
  opts: { json?: boolean; waitSeconds: number },
  ctx: CliContext,
): Promise<number> {
  const { command } = req;
  const requestId = randomUUID();
  const { recorded, note } = await recordFirst(orderId, requestId, req, ctx, opts.waitSeconds * 1000);
  /** A cancel Postgres accepted: it stands whatever the run does. (One sent without a record is the run's to decide.) */
  const cancel = command === 'cancel' && recorded;
  const client = await ctx.temporal();
  const handle = client.workflow.getHandle(workflowIdFor(orderId));
  /** The run is gone or closed: a cancel stands (recorded on the order); a resolve has nothing to apply to. */
  const runGone = async (what: string): Promise<number> => {
    if (!cancel)
      throw new CliError(
        `${command} refused: order ${orderId}'s ${what}; there is nothing to ${command}`,
        EXIT.notCompleted,
      );
    ctx.io.out(
      `order ${orderId}: cancel accepted and recorded on the order${note}; its ${what}: the sweeper starts its saga again from the order row, which honours the cancel (client.ts status ${orderId})`,
    );
    return EXIT.ok;
  };
  const ended = async (): Promise<string> => {
    const described = await handle.describe();
    const status = described.typedSearchAttributes.get(OrderStatusKey) ?? described.status.name;
    return `run has ended (${status}, run ${described.status.name.toLowerCase()})`;
  };
  const settle = async (outcome: 'accepted' | 'refused', message?: string): Promise<void> => {
    if (command === 'cancel') return;
    const store = ctx.openStore('app');
    if (!store) return;
    try {
      await store.settleRequest({ orderId, requestId, outcome, ...(message ? { message } : {}) });
    } finally {
      await store.close();
    }
  };
  /** The run could not be told: an accepted cancel stands all the same (exit 0); a resolve did not reach it (exit 1). */
  const standsOrFails = (problem: string): number => {
    if (!cancel) throw new CliError(`${command}: ${problem}`, EXIT.notCompleted);
    ctx.io.out(`order ${orderId}: cancel accepted and recorded on the order${note}, but ${problem}`);
    return EXIT.ok;
  };
  let found = false;
  try {
    const described = await handle.describe();
    found = true;
    if (described.status.name !== 'RUNNING') {
      await settle('refused', 'the run had ended');
      return await runGone(await ended());
    }
    // Bounded: a saga that cannot answer (no worker, or its workflow task failing) gets a clear
    // message instead of a command that never returns.
    const { sent, answer, lastError } = await sendRequest(handle, req, {
      waitMs: opts.waitSeconds * 1000,
      requestId,
    });
    const accepted = cancel ? `cancel accepted and recorded on the order${note}` : `${command} recorded`;
    if (!sent) {
      return standsOrFails(
        `the server did not take the Signal for order ${orderId} within ${opts.waitSeconds} s; see client.ts status ${orderId}`,
      );
    }
    // A run pinned to a build from before cancel and resolve were Signals cannot answer one.
    if (answer === undefined && lastError instanceof QueryNotRegisteredError) {
      return standsOrFails(
        `order ${orderId}'s run never answered by query within ${opts.waitSeconds} s; its build may predate cancel and resolve as Signals (${lastError.message}); see client.ts status ${orderId}`,
      );
    }
    if (answer === undefined) {
      if (cancel) {
        ctx.io.out(
          `order ${orderId}: ${accepted}; the saga has not read it yet after ${opts.waitSeconds} s (is a worker running?${lastError ? ` last: ${lastError.message}` : ''}): check client.ts status ${orderId}, or the run in the Web UI: ${ctx.links.run(workflowIdFor(orderId))}`,
        );
        return EXIT.ok;
      }
      throw new CliError(
        `${command}: no answer from order ${orderId} within ${opts.waitSeconds} s (is a worker running?${lastError ? ` last: ${lastError.message}` : ''}); the request is ${recorded ? 'recorded and ' : ''}in the run's history, and applies when a worker runs it: ` +
          `check client.ts status ${orderId}, or the run in the Web UI: ${ctx.links.run(workflowIdFor(orderId))}`,
        EXIT.notCompleted,
      );
    }
    if (answer.outcome === 'refused') {
      await settle('refused', answer.message);
      throw new CliError(`${command} refused: ${answer.message}`, EXIT.notCompleted);
    }
    // Sent without a record (the order had no row yet): only the run's decision counts, and it has none yet.
    if (answer.outcome === 'pending' && command === 'cancel' && !recorded)
      throw new CliError(
        `cancel: sent, but order ${orderId} had no order row and its saga has not decided the cancel within ${opts.waitSeconds} s (is a worker running?); check client.ts status ${orderId}`,
        EXIT.notCompleted,
      );
    // A resolve is the saga's to accept, after it checks it against the ledger: undecided is not accepted.
    if (answer.outcome === 'pending' && !cancel)
      throw new CliError(
        `${command}: recorded, but order ${orderId}'s saga has not decided it within ${opts.waitSeconds} s (it checks it against the ledger first, and may still refuse it): see client.ts status ${orderId}, and send it again if the saga still awaits an operator`,
        EXIT.notCompleted,
      );
    if (answer.outcome === 'pending') {
      ctx.io.out(
        `order ${orderId}: ${accepted}; the saga is still working on it after ${opts.waitSeconds} s (client.ts status ${orderId})`,
      );
      return EXIT.ok;
    }
    printState(ctx, !!opts.json, answer.state);
    return EXIT.ok;
  } catch (err) {
    // The run ended between the describe and the Signal: the server answers "not found" for it.
    if (err instanceof WorkflowNotFoundError && found) return runGone(await ended());
    // No run at all (its history deleted, or purged by retention): the row still holds the order.
    if (err instanceof WorkflowNotFoundError) {
      if (!recorded) throw noOrder(orderId); // no row and no run
      return runGone('run is missing from Temporal');
    }
    // The server refused the Signal (unreachable, or overloaded, say).
    if (err instanceof ServiceError)
      return standsOrFails(
        `the server gave no answer for order ${orderId} (${err.cause?.message ?? err.message}); see client.ts status ${orderId}`,
      );
    throw err;
  }
}
