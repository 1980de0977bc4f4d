/**
 * The money path of the authorization era: a hold on the card before the shipment (step 3, its
 * compensation a void), the capture of the hold after it (step 5, forward only). As for a charge
 * (charge-protocol.ts), every request is the saga's own decision (never retried blind by the server):
 * a timeout or a 5xx is followed by an inquiry by key, on durable timers, until the provider knows;
 * an outcome that stays unknown goes to a person, never to a blind void or a blind capture. Workflow
 * code: deterministic.
 */
import { ApplicationFailure, log } from '@temporalio/workflow';
import { ErrorTypes, FINAL_CHARGE_ANSWERS, SagaFailureTypes } from '../domain/failures';
import {
  authorizeKeyFor,
  formatMoney,
  holdKeysFor,
  isAtPivot,
  isPastPivot,
  orderTotalCents,
  type OrderStatus,
} from '../domain/order';
import { requestMoney, type AskAboutCharge, type ChargeVerdict } from './charge-protocol';
import {
  CHARGE_ROUNDS,
  chargeOnceOpts,
  compensationOpts,
  conflictStatus,
  duration,
  failureMessage,
  failureType,
  findFailure,
  inquiryOpts,
} from './saga-activities';
import type { SagaRun } from './saga-run';

/** What the provider says of the capture: taken, refused for good (and why), or not taken yet. */
export type CaptureVerdict = { kind: 'captured' } | { kind: 'refused'; code: string } | { kind: 'not_found' };

/** The capture escalated to a person: their answer (a retry, or the capture found taken after all). */
export type AskAboutCapture = (reason: string) => Promise<'retry' | 'mark-resolved'>;

/** What the saga needs of the money path, in either era (the recovery asks it about an unknown outcome). */
export interface MoneyPath {
  /** The status of an order whose money is charged or held: CHARGED or AUTHORIZED. */
  readonly held: OrderStatus;
  /** Asks the provider, by key, until it knows what became of the request (step 3). */
  inquireUntilKnown(): Promise<ChargeVerdict>;
}

export class AuthorizationProtocol implements MoneyPath {
  readonly held = 'AUTHORIZED' as const;

  constructor(
    private readonly saga: SagaRun,
    private readonly askAboutHold: AskAboutCharge,
    private readonly askAboutCapture: AskAboutCapture,
  ) {}

  /** Step 3, the hold, in `requestMoney`'s rounds: the row's status afterwards (AUTHORIZED, or further along). */
  async authorize(): Promise<OrderStatus> {
    const { saga } = this;
    const { order } = saga;
    const key = authorizeKeyFor(saga.orderId);
    const request = {
      orderId: saga.orderId,
      amountCents: orderTotalCents(order),
      currency: order.currency,
      paymentMethod: order.paymentMethod,
      idempotencyKey: key,
    };
    return requestMoney(saga, {
      noun: 'authorization',
      attempt: 'authorize',
      held: 'AUTHORIZED',
      unavailable: 'authorization not made',
      // A regular activity, the run's one round trip before the pivot: a cancel sent as a Signal or a
      // Temporal cancellation during steps 1–3 is read at it, before the shipment.
      send: async (round) => {
        const r = await saga.act(
          chargeOnceOpts,
          'authorizePayment',
          `authorize ${formatMoney(request.amountCents, order.currency)} (key ${key}, request ${round})`,
          request,
        );
        return r.status;
      },
      inquireUntilKnown: () => this.inquireUntilKnown(),
      refusal: (verdict) => holdRefusal(verdict, key),
    });
  }

  /**
   * When the hold's outcome is unknown: ask the provider by key until it knows, on durable timers
   * (the time counted is the timers slept). `succeeded`: held (or captured); `failed`: declined;
   * `refunded`: released since (voided or expired), nothing held; `closed`: the key was closed.
   */
  async inquireUntilKnown(): Promise<ChargeVerdict> {
    const { saga } = this;
    const { state, cfg } = saga;
    const key = authorizeKeyFor(saga.orderId);
    state.unknowns = ['authorization'];
    saga.refresh();
    let slept = 0;
    for (let n = 0; ; n++) {
      try {
        const r = await saga.act(inquiryOpts, 'inquireAuthorization', `inquire authorization ${key}`, {
          orderId: saga.orderId,
          authorizationKey: key,
        });
        state.attempts.inquiry = n + 1;
        if (r.status !== 'processing') {
          state.unknowns = [];
          if (r.status === 'authorized' || r.status === 'captured') return 'succeeded';
          if (r.status === 'declined') return 'failed';
          if (r.status === 'voided' || r.status === 'expired') return 'refunded';
          return r.status;
        }
      } catch (err) {
        log.warn('inquiry failed; authorization outcome unknown', {
          orderId: saga.orderId,
          error: failureMessage(err),
        });
      }
      if (state.status !== 'UNKNOWN_PAYMENT') {
        // The row already AUTHORIZED (the request's own write committed, its answer was lost): held.
        const now = await saga.status({ to: 'UNKNOWN_PAYMENT' });
        if (isAtPivot(now) || isPastPivot(now)) {
          state.unknowns = [];
          return 'succeeded';
        }
      }
      const wait = Math.min(cfg.inquiryMaxMs, cfg.inquiryBaseMs * 2 ** n);
      const overdue = saga.overdue();
      if (overdue || slept + wait > cfg.unknownEscalationMs) {
        const why = overdue ? 'saga deadline passed' : `no answer after ${duration(slept)}`;
        // Never voided blindly: a person settles it, or the customer cancels (the void then closes the key).
        const action = await this.askAboutHold(`authorization ${key} outcome unknown (${why})`);
        state.unknowns = [];
        return action === 'cancelled' ? 'cancelled' : action === 'charge-succeeded' ? 'succeeded' : 'failed';
      }
      await saga.sleep(wait, { summary: `authorization outcome unknown; next inquiry in ${duration(wait)}` });
      slept += wait;
    }
  }

  /**
   * Registers the hold's compensation, the void: the technical cancel of `<orderId>:authorize`,
   * which releases a hold it finds and closes a key never used (a request still on its way can then
   * never hold money). Safe when there is nothing to undo.
   */
  registerVoid(): void {
    const { saga } = this;
    const key = authorizeKeyFor(saga.orderId);
    saga.register('voidAuthorization', () =>
      saga.act(
        compensationOpts(saga.cfg.compensationRetryMaxMs),
        'voidAuthorization',
        `compensate: void the hold ${key} (technical cancel: closes the key if none was made)`,
        { orderId: saga.orderId, authorizationKey: key },
      ),
    );
  }

  /**
   * Step 5, the capture, forward only. One request at a time, never retried blind: a timeout or an
   * unreachable provider is inquired by the capture's key. Not taken yet: a new request after a pause,
   * within the saga's forward window (`forwardRetryLimitMs`, counted as the timers slept). A refusal for
   * good (the hold expired, was voided) or a window spent goes to a person in NEEDS_ATTENTION: the
   * goods shipped, the money not taken. Returns the row's status afterwards (CAPTURED, or further).
   */
  async capture(): Promise<OrderStatus> {
    const { saga } = this;
    const [first, fresh] = holdKeysFor(saga.orderId);
    let hold = first!;
    let freshTried = false;
    let slept = 0;
    for (let round = 1; ; round++) {
      const sent = await this.captureRequest(hold, round);
      if ('status' in sent) return sent.status;
      let { why } = sent;
      // The first hold lapsed before its capture: one fresh hold with the order's card, then its capture.
      if (why?.endsWith('authorization_expired') && !freshTried && hold === first) {
        freshTried = true;
        const made = await this.freshHold(fresh!.authorizationKey);
        if (made === true) {
          hold = fresh!;
          continue;
        }
        why = `${why}; the one fresh authorization ${fresh!.authorizationKey} ${made}`;
      } else if (why !== undefined && hold !== first) {
        why = `${why} (the one fresh authorization, after ${first!.authorizationKey} expired)`;
      }
      if (why === undefined) {
        // Not taken yet (or still unknown): a new request after a pause, within the forward window.
        const wait = Math.min(saga.cfg.inquiryMaxMs, saga.cfg.inquiryBaseMs * 2 ** Math.min(round - 1, 20));
        if (slept + wait <= saga.cfg.forwardRetryLimitMs) {
          await saga.sleep(wait, { summary: `capture not taken yet; request ${round + 1} in ${duration(wait)}` });
          slept += wait;
          continue;
        }
        why = `capture ${hold.captureKey} not taken within the forward window (${duration(saga.cfg.forwardRetryLimitMs)})`;
      }
      const answer = await this.askAboutCapture(
        `${why}; the goods shipped, the money not taken (resolve retry to capture again, mark-resolved once the provider shows it captured)`,
      );
      if (answer === 'mark-resolved') return saga.status({ to: 'CAPTURED' });
      slept = 0; // the operator's retry: a fresh window
    }
  }

  /**
   * Request `round` of the capture of `hold`, inquired by its capture key when its answer is lost: the
   * row's status once captured (or further); else why not (undefined: not taken yet, or still unknown).
   */
  private async captureRequest(
    hold: { authorizationKey: string; captureKey: string },
    round: number,
  ): Promise<{ status: OrderStatus } | { why: string | undefined }> {
    const { saga } = this;
    const { authorizationKey, captureKey } = hold;
    const req = { orderId: saga.orderId, authorizationKey, captureKey };
    saga.state.attempts.capture = round;
    try {
      // The first request runs inside the workflow task (no round trip), a later one as a regular activity.
      const summary = `capture the hold ${authorizationKey} (key ${captureKey}, request ${round})`;
      const r =
        round === 1
          ? await saga.actLocal(chargeOnceOpts, 'capturePayment', summary, req)
          : await saga.act(chargeOnceOpts, 'capturePayment', summary, req);
      return { status: r.status };
    } catch (err) {
      const type = failureType(err);
      const row = conflictStatus(err);
      // Captured already, or completed (this run's own task lost after its commits and run again,
      // or another run of this order): nothing more to take; the confirmation is idempotent.
      if (row === 'CAPTURED' || row === 'COMPLETED') return { status: saga.seen(row) };
      if (type === SagaFailureTypes.OrderSettled || type === ErrorTypes.NotOrderOwner) throw err;
      if (type === ErrorTypes.CaptureRefused) return { why: `capture ${captureKey} refused: ${refusalCode(err)}` };
      if (type === ErrorTypes.OrderStateConflict || type === ErrorTypes.OrderMismatch)
        return { why: `capture ${captureKey} not sent: ${failureMessage(err)}` };
      log.warn('capture timed out or failed; inquiring before deciding', {
        orderId: saga.orderId,
        error: failureMessage(err),
      });
    }
    const verdict = await this.inquireCapture(captureKey);
    if (verdict.kind === 'captured') return { status: await saga.status({ to: 'CAPTURED' }) };
    return { why: verdict.kind === 'refused' ? `capture ${captureKey} refused: ${verdict.code}` : undefined };
  }

  /**
   * One fresh hold after the shipment (the first expired): requests under its own key, each inquired
   * by that key after a timeout, for a few rounds. True once held; else what became of it.
   */
  private async freshHold(key: string): Promise<true | string> {
    const { saga } = this;
    for (let round = 1; round <= CHARGE_ROUNDS; round++) {
      saga.state.attempts.reauthorize = round;
      try {
        await saga.act(chargeOnceOpts, 'reauthorizePayment', `authorize again (key ${key}, request ${round})`, {
          orderId: saga.orderId,
          idempotencyKey: key,
        });
        return true;
      } catch (err) {
        if (FINAL_CHARGE_ANSWERS.includes(failureType(err) ?? '')) return `was refused: ${failureMessage(err)}`;
        log.warn('fresh authorization timed out or failed; inquiring', {
          orderId: saga.orderId,
          error: failureMessage(err),
        });
      }
      for (let n = 0; n < 5; n++) {
        try {
          const r = await saga.act(inquiryOpts, 'inquireAuthorization', `inquire authorization ${key}`, {
            orderId: saga.orderId,
            authorizationKey: key,
          });
          if (r.status === 'authorized' || r.status === 'captured') return true;
          if (r.status === 'declined') return 'was declined';
          if (r.status !== 'processing') break; // not made (yet): another request under the same key
        } catch (err) {
          log.warn('inquiry failed; fresh authorization unknown', {
            orderId: saga.orderId,
            error: failureMessage(err),
          });
        }
        const wait = Math.min(saga.cfg.inquiryMaxMs, saga.cfg.inquiryBaseMs * 2 ** n);
        await saga.sleep(wait, { summary: `fresh authorization unknown; next inquiry in ${duration(wait)}` });
      }
    }
    return `was not made after ${CHARGE_ROUNDS} requests`;
  }

  /** The capture's fate, by its key, until the provider knows (or the inquiries run out: not taken yet). */
  private async inquireCapture(captureKey: string): Promise<CaptureVerdict> {
    const { saga } = this;
    saga.state.unknowns = ['capture'];
    saga.refresh();
    try {
      for (let n = 0; n < 5; n++) {
        try {
          const r = await saga.act(inquiryOpts, 'inquireCapture', `inquire capture ${captureKey}`, {
            orderId: saga.orderId,
            captureKey,
          });
          if (r.status === 'succeeded') return { kind: 'captured' };
          if (r.status === 'failed') return { kind: 'refused', code: r.failureCode ?? 'failed' };
          if (r.status === 'not_found') return { kind: 'not_found' };
        } catch (err) {
          log.warn('capture inquiry failed; outcome unknown', { orderId: saga.orderId, error: failureMessage(err) });
        }
        const wait = Math.min(saga.cfg.inquiryMaxMs, saga.cfg.inquiryBaseMs * 2 ** n);
        await saga.sleep(wait, { summary: `capture outcome unknown; next inquiry in ${duration(wait)}` });
      }
      // Still processing or unreachable: the same key is safe to send again (a replay, never a second capture).
      return { kind: 'not_found' };
    } finally {
      saga.state.unknowns = [];
      saga.refresh();
    }
  }
}

/** The provider's reason for a refused capture, as the activity's failure names it. */
function refusalCode(err: unknown): string {
  const f = findFailure(err, (f) => f.type === ErrorTypes.CaptureRefused);
  const details = f?.details?.[0] as { failureCode?: string } | undefined;
  return details?.failureCode ?? failureMessage(err);
}

/** A hold the provider refused for good: why, as the failure the saga compensates with. */
function holdRefusal(verdict: 'failed' | 'refunded' | 'closed', key: string): ApplicationFailure {
  const [type, message] =
    verdict === 'refunded'
      ? [ErrorTypes.ChargeClosed, `authorization ${key} was released (voided or expired); nothing is held`]
      : verdict === 'closed'
        ? [ErrorTypes.ChargeClosed, `authorization key ${key} is closed at the provider; nothing can be held under it`]
        : [ErrorTypes.PaymentDeclined, 'authorization declined at the provider'];
  return ApplicationFailure.create({ type, message, nonRetryable: true });
}
