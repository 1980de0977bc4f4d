/**
 * The charge protocol: the money path of the order saga, in one file. Every charge request is the
 * saga's own decision (the activity is never retried by the server); a timeout or a 5xx is followed
 * by an inquiry by key, on durable timers, until the provider knows, and an outcome that stays unknown
 * escalates to a person, never to a blind refund. The refund (the charge's compensation) first closes
 * the key at the provider: the technical cancel. An operator's answer is checked against the ledger
 * before the saga acts on it. Workflow code: deterministic.
 */
import { ApplicationFailure, CancelledFailure, log } from '@temporalio/workflow';
import { ErrorTypes, FINAL_CHARGE_ANSWERS, SagaFailureTypes } from '../domain/failures';
import {
  chargeKeyFor,
  formatMoney,
  isPastPivot,
  orderTotalCents,
  refundKeyFor,
  type OrderStatus,
} from '../domain/order';
import type { SagaState } from './messages';
import {
  CHARGE_ROUNDS,
  chargeOnceOpts,
  compensationOpts,
  duration,
  failureMessage,
  failureType,
  inquiryOpts,
  type Ret,
} from './saga-activities';
import type { Resolution } from './saga-inbox';
import type { SagaRun } from './saga-run';

/** What the provider (or, in the end, a person) says of the charge. */
export type ChargeVerdict = 'succeeded' | 'failed' | 'not_found' | 'refunded' | 'closed' | 'cancelled';

/** A person's answer to an escalation: the action they resolved with, or 'cancelled' (a cancel ended the wait). */
export type Answer = Resolution['action'] | 'cancelled';

/** Escalates an unknown charge to NEEDS_ATTENTION and waits for a person (the recovery's escalation). */
export type AskAboutCharge = (reason: string) => Promise<Answer>;

/** A money request of step 3 (a charge, or a hold) as `requestMoney` sends it, round after round. */
export interface MoneyRequest {
  /** What it is called in the log, the pause's summary and the last failure: charge, authorization. */
  noun: string;
  /** Its counter in the state's attempts. */
  attempt: 'charge' | 'authorize';
  /** The row's status once the money is taken or held. */
  held: OrderStatus;
  /** What never happened, when every round found nothing: "charge not taken". */
  unavailable: string;
  /** Request `round` (a regular activity, not cancellable): the row's status afterwards. */
  send(round: number): Promise<OrderStatus>;
  /** Asks the provider by key until it knows. */
  inquireUntilKnown(): Promise<ChargeVerdict>;
  /** The failure for a verdict that ends the step: declined, released since, or the key closed. */
  refusal(verdict: 'failed' | 'refunded' | 'closed'): ApplicationFailure;
}

/**
 * Step 3's rounds, for a charge and a hold alike: a timeout or 5xx is followed by an inquiry; only
 * `not_found` (nothing taken) allows another request, after a pause, and only while no cancel or
 * deadline has come. A cancel waits for a request's answer (it may already be at the provider).
 */
export async function requestMoney(saga: SagaRun, m: MoneyRequest): Promise<OrderStatus> {
  for (let round = 1; ; round++) {
    await saga.recordQueuedCancels();
    if (saga.stopCharging()) throw new CancelledFailure(saga.stopReason());
    saga.state.attempts[m.attempt] = round;
    try {
      return await m.send(round);
    } catch (err) {
      saga.learnCancel(err);
      if (FINAL_CHARGE_ANSWERS.includes(failureType(err) ?? '')) throw err;
      log.warn(`${m.noun} timed out or failed; inquiring before deciding`, {
        orderId: saga.orderId,
        error: failureMessage(err),
      });
    }
    const verdict = await m.inquireUntilKnown();
    if (verdict === 'succeeded') return saga.status({ to: m.held });
    if (verdict === 'cancelled') throw new CancelledFailure(saga.stopReason());
    if (verdict !== 'not_found') throw m.refusal(verdict);
    if (round >= CHARGE_ROUNDS) {
      throw ApplicationFailure.create({
        type: SagaFailureTypes.PaymentUnavailable,
        message: `${m.unavailable} after ${round} requests`,
        nonRetryable: true,
      });
    }
    // not_found: nothing taken yet. Pause, cut short at the deadline (no timer marks it:
    // `SagaRun.untilDeadline`), unless a cancel comes first.
    const pauseMs = Math.min(saga.cfg.inquiryMaxMs, 1000 * 2 ** (round - 1), saga.untilDeadline());
    await saga.condition(() => saga.stopCharging() || saga.inbox.hasQueuedCancel(), pauseMs, {
      summary: `the provider never took ${m.noun} request ${round}; request ${round + 1} in ${duration(pauseMs)} unless cancelled`,
    });
  }
}

export class ChargeProtocol {
  /** The status of an order whose money the charge took (the recovery's MoneyPath). */
  readonly held = 'CHARGED' as const;

  constructor(
    private readonly saga: SagaRun,
    private readonly askAboutCharge: AskAboutCharge,
  ) {}

  /** The charge, in `requestMoney`'s rounds: the row's status afterwards (CHARGED, or further along). */
  async charge(): Promise<OrderStatus> {
    const { saga } = this;
    const { order } = saga;
    const key = chargeKeyFor(saga.orderId);
    const request = {
      orderId: saga.orderId,
      amountCents: orderTotalCents(order),
      currency: order.currency,
      paymentMethod: order.paymentMethod,
      idempotencyKey: key,
      markCharged: true,
    };
    return requestMoney(saga, {
      noun: 'charge',
      attempt: 'charge',
      held: 'CHARGED',
      unavailable: 'charge not taken',
      // A regular activity: a charge moves money at once, so the run learns of a cancel sent as a
      // Signal at the round trip before it (docs/decisions.md).
      send: async (round) => {
        const r = await saga.act(
          chargeOnceOpts,
          'chargePayment',
          `charge ${formatMoney(request.amountCents, order.currency)} (key ${key}, request ${round})`,
          request,
        );
        return r.status ?? 'CHARGED';
      },
      inquireUntilKnown: () => this.inquireUntilKnown(),
      refusal: (verdict) => refusal(verdict, key),
    });
  }

  /**
   * When the charge's outcome is unknown: ask the provider by key until it knows, on durable timers.
   * How long it has been unknown is the sum of the timers slept (never the workflow clock); the
   * inquiries' own time is not counted.
   */
  async inquireUntilKnown(): Promise<ChargeVerdict> {
    const { saga } = this;
    const { state, cfg } = saga;
    state.unknowns = ['charge'];
    saga.refresh();
    let slept = 0;
    for (let n = 0; ; n++) {
      try {
        const r = await this.inquire(`inquire charge ${chargeKeyFor(saga.orderId)}`);
        state.attempts.inquiry = n + 1;
        if (r.status !== 'processing') {
          state.unknowns = [];
          // A charge the provider has refunded does not count as paid.
          return r.status === 'succeeded' && (r.refundedCents ?? 0) > 0 ? 'refunded' : r.status;
        }
      } catch (err) {
        log.warn('inquiry failed; charge outcome unknown', { orderId: saga.orderId, error: failureMessage(err) });
      }
      if (state.status !== 'UNKNOWN_PAYMENT') {
        // The row already CHARGED (the charge's own write committed, its answer was lost): it is paid.
        const now = await saga.status({ to: 'UNKNOWN_PAYMENT' });
        if (now === 'CHARGED' || isPastPivot(now)) {
          state.unknowns = [];
          return 'succeeded';
        }
      }
      const wait = Math.min(cfg.inquiryMaxMs, cfg.inquiryBaseMs * 2 ** n);
      const overdue = saga.overdue();
      if (overdue || slept + wait > cfg.unknownEscalationMs) {
        const why = overdue ? 'saga deadline passed' : `no answer after ${duration(slept)}`;
        // Never refund blindly: a person settles it (after checking the provider's dashboard), or the
        // customer cancels (the refund then closes the key, or refunds what the provider took).
        const action = await this.askAboutCharge(`charge ${chargeKeyFor(saga.orderId)} outcome unknown (${why})`);
        state.unknowns = [];
        return action === 'cancelled' ? 'cancelled' : action === 'charge-succeeded' ? 'succeeded' : 'failed';
      }
      // A durable timer (the caller runs this loop non-cancellably: an unknown charge is settled first).
      await saga.sleep(wait, { summary: `charge outcome unknown; next inquiry in ${duration(wait)}` });
      slept += wait;
    }
  }

  /** What the provider knows of `<orderId>:charge`, asked by its key. */
  private inquire(summary: string): Promise<Ret<'inquireCharge'>> {
    const { orderId } = this.saga;
    return this.saga.act(inquiryOpts, 'inquireCharge', summary, { orderId, chargeKey: chargeKeyFor(orderId) });
  }

  /**
   * Registers the charge's compensation, the refund, key `<orderId>:charge:refund`. It first closes
   * the charge's key at the provider (the technical cancel): a charge found there is refunded as
   * usual; a key never used is closed, so a request still on its way can never take money. It
   * refunds only what the provider says was charged.
   */
  registerRefund(): void {
    const { saga } = this;
    const keys = { chargeKey: chargeKeyFor(saga.orderId), idempotencyKey: refundKeyFor(saga.orderId) };
    saga.register('refundPayment', () =>
      saga.act(
        compensationOpts(saga.cfg.compensationRetryMaxMs),
        'refundPayment',
        `compensate: close key ${keys.chargeKey} at the provider, refund what it took (key ${keys.idempotencyKey})`,
        { orderId: saga.orderId, ...keys },
      ),
    );
  }
}

/** A charge the provider refused for good: why, as the failure the saga compensates with. */
function refusal(verdict: 'failed' | 'refunded' | 'closed', key: string): ApplicationFailure {
  const [type, message] =
    verdict === 'refunded'
      ? [ErrorTypes.ChargeRefunded, `charge ${key} was refunded`]
      : verdict === 'closed'
        ? [ErrorTypes.ChargeClosed, `charge key ${key} is closed at the provider; no money can be taken under it`]
        : [ErrorTypes.PaymentDeclined, 'charge failed at the provider'];
  return ApplicationFailure.create({ type, message, nonRetryable: true });
}

/**
 * Checks an operator's resolve against the ledger (the provider's for the money, the reservations for
 * the stock) and records it in Postgres: the refusal, with the figures, or undefined when it agrees.
 */
export async function checkAnswer(
  saga: SagaRun,
  request: Resolution,
  awaiting: NonNullable<SagaState['awaiting']>,
  compensation: string | undefined,
): Promise<string | undefined> {
  const { requestId, action, note, reference } = request;
  try {
    const r = await saga.act(inquiryOpts, 'checkResolution', `resolve ${action}: check it against the ledger`, {
      orderId: saga.orderId,
      requestId,
      action,
      awaiting,
      ...(note !== undefined ? { note } : {}),
      ...(reference !== undefined ? { reference } : {}),
      ...(compensation !== undefined ? { compensation } : {}),
    });
    return r.refused;
  } catch (err) {
    return `cannot check ${action} against the ledger: ${failureMessage(err)}`;
  }
}
