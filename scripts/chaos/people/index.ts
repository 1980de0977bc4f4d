/**
 * The people in the chaos soak's loop, each through the interface a person has, one module a family:
 *   - a storefront places about a third of the orders through the orders API, sending a request
 *     again with its key until it is answered, and checks a replay's answer (storefront.ts);
 *   - customers and support cancel with `client.ts cancel`, at chosen moments (cancels.ts);
 *   - operators resolve every NEEDS_ATTENTION saga with `client.ts resolve`, choosing the action the
 *     provider's ledger supports (and, now and then, first the one it does not: it must be refused);
 *     a hold an operator voids by hand is voided through the provider's API by the saga's own key
 *     (operators.ts);
 *   - someone presses the Web UI's Reset (the same ResetWorkflowExecution call) on open and closed runs;
 *   - someone starts a closed order's workflow ID again (as `temporal workflow start` would), with the
 *     same input and with other input, and places the same order file again with `client.ts place`
 *     (reset-and-start-again.ts);
 *   - someone presses what Temporal lets them press and the sweeper must see through: deletes the
 *     history of an order whose cancel was accepted (delete-after-cancel.ts), sends a cancel Signal no
 *     key can open and terminates the run (terminate.ts), pauses a running activity and unpauses it a
 *     while later (pause-activity.ts), pins a run to a build no worker runs (override.ts), and pauses
 *     the sweep Schedule (sweep-schedule.ts).
 * Each action is counted as sent, accepted or refused; an outcome that breaks a promise is recorded
 * as a violation with its order ID (base.ts: the tallies, and the tools and waits every person uses).
 */
import { workflowIdFor } from '../../../domain/order';
import type { ChaosOrder } from '../orders';
import { PeopleBase } from './base';
import { cancel } from './cancels';
import { deleteAfterCancel } from './delete-after-cancel';
import { Operators } from './operators';
import { overrideNoBuild } from './override';
import { pauseActivity } from './pause-activity';
import { placeAgain, reset, resetWhileOpen, startAgainClosed } from './reset-and-start-again';
import { placeThroughApi } from './storefront';
import { pauseSweepSchedule } from './sweep-schedule';
import { terminate, unreadableSignal } from './terminate';

export type { PeopleViolation, Tally } from './base';

export class People extends PeopleBase {
  private readonly operators = new Operators(this);

  /**
   * One order's life: it is placed, the person (if any) meddles, and it runs until its latest run
   * closes. Returns false if it did not close within `limitMs`.
   */
  async drive(o: ChaosOrder, limitMs: number): Promise<boolean> {
    const { input, meddle } = o;
    const id = input.orderId;
    const wid = workflowIdFor(id);
    if (o.viaApi) await placeThroughApi(this, o);
    else await this.start(input);
    if (meddle.startsWith('cancel-')) await cancel(this, o);
    if (meddle === 'reset-open') await resetWhileOpen(this, o);
    if (meddle === 'terminate') return terminate(this, o, limitMs);
    if (meddle === 'delete-after-cancel') return deleteAfterCancel(this, o, limitMs);
    if (meddle === 'unreadable-signal') return unreadableSignal(this, o, limitMs);
    if (meddle === 'pause-activity') await pauseActivity(this, o);
    if (meddle === 'override-no-build') await overrideNoBuild(this, o);
    if (!(await this.closed(wid, limitMs))) return false;
    if (meddle === 'reset-closed') {
      await reset(this, id, 'reset a closed run');
      if (!(await this.closed(wid, limitMs))) return false;
    }
    if (meddle === 'start-again-same' || meddle === 'start-again-other')
      await startAgainClosed(this, input, meddle === 'start-again-other', limitMs);
    if (meddle === 'place-again') await placeAgain(this, input);
    return true;
  }

  /**
   * An operator pauses the `sweep` Schedule for `ms` while the soak's own sweeps stop as long
   * (sweep-schedule.ts).
   */
  pauseSweepSchedule(pauseSweeps: (ms: number) => void, ms: number): Promise<void> {
    return pauseSweepSchedule(this, pauseSweeps, ms);
  }

  /** Resolves NEEDS_ATTENTION sagas until stop(); each order is handled by one operator at a time. */
  operate(): Promise<void> {
    return this.operators.operate();
  }

  stop(): void {
    this.operators.stop();
  }
}
