/**
 * `refund`: money given back after the shipment (a return, a goodwill gesture), of the capture (or,
 * for an order of the charge era, of its charge), under the refund's own key. Checked against the
 * provider's ledger before anything is written, recorded in Postgres before it is sent, and sent
 * again with the same key until the provider answers: the same command is the same refund.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Option, type Command } from '@commander-js/extra-typings';
import { chargeKeyFor, formatMoney, holdKeysFor, isRefundable, orderRefundKeyFor } from '../domain/order';
import type { OrderRefundRow, OrderStore, RefundableOrder } from '../orders/order-store';
import type { RefundRequest } from '../provider/api';
import { ProviderHttpError, type AuthorizationClient, type ProviderClient } from '../provider/client';
import { CliError, EXIT, type CliContext } from './context';
import { cents, idArg, jsonOption, orderIdArgument, waitOption } from './options';

type Provider = ProviderClient & AuthorizationClient;

/** What the provider says was taken for the order and what of it is refunded already. */
interface Taken {
  kind: 'capture' | 'charge';
  /** The capture key (or the charge key). */
  key: string;
  amountCents: number;
  refundedCents: number;
}

/**
 * The provider's refusals that are final: nothing was refunded, and the same request can never be
 * made (the same key gets the same refusal). Anything else (in flight, 5xx, no answer) is asked again.
 */
const FINAL_REFUSALS = new Set([
  'refund_exceeds_capture',
  'refund_exceeds_charge',
  'capture_not_refundable',
  'charge_not_refundable',
  'capture_not_found',
  'charge_not_found',
  'idempotency_key_reused',
]);

/** The field a final refusal is about, as the command line names it. */
const fieldOf = (error: string): string =>
  error.startsWith('idempotency_key_reused') ? '--key' : error.startsWith('refund_exceeds_') ? '--amount' : 'orderId';

const refused = (message: string): CliError => new CliError(`refund refused: ${message}`, EXIT.notCompleted);

/** Asks the provider; its being out of reach before anything is written is said so, not a refund failed. */
async function ask<T>(what: string, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    throw new CliError(
      `refund: cannot read ${what} from the payment provider (${(err as Error).message}); nothing was refunded or recorded`,
      EXIT.notCompleted,
    );
  }
}

/**
 * What was taken for the order, as the provider's ledger says: the charge of an order of the charge
 * era; the capture of the authorization era (the first hold's, else the fresh hold's). A string
 * says why there is nothing to refund.
 */
async function moneyTaken(provider: Provider, order: RefundableOrder): Promise<Taken | string> {
  const { orderId } = order;
  if (order.paymentFlow === 'charge') {
    const key = chargeKeyFor(orderId);
    const c = await ask(`charge ${key}`, () => provider.getCharge(key));
    if (!c) return `the provider has no charge ${key}`;
    if (c.status !== 'succeeded') return `charge ${key} is ${c.status}; nothing was taken`;
    return { kind: 'charge', key, amountCents: c.amountCents, refundedCents: c.refundedCents };
  }
  const seen: string[] = [];
  for (const { captureKey } of holdKeysFor(orderId)) {
    const c = await ask(`capture ${captureKey}`, () => provider.getCapture(captureKey));
    if (c?.status === 'succeeded')
      return { kind: 'capture', key: captureKey, amountCents: c.amountCents, refundedCents: c.refundedCents };
    if (c) seen.push(`capture ${captureKey} ${c.status}${c.failureCode ? ` (${c.failureCode})` : ''}`);
  }
  return `nothing was captured${seen.length ? ` (${seen.join('; ')})` : ''}: a hold is released, not refunded`;
}

/** The ledger's figures after the refund, if the provider answers; else the row's sum stands. */
async function ledgerAfter(provider: Provider, refund: OrderRefundRow): Promise<Taken | undefined> {
  try {
    if (refund.sourceKind === 'charge') {
      const c = await provider.getCharge(refund.sourceKey);
      return c && c.status !== 'closed'
        ? { kind: 'charge', key: refund.sourceKey, amountCents: c.amountCents, refundedCents: c.refundedCents }
        : undefined;
    }
    const c = await provider.getCapture(refund.sourceKey);
    return c && { kind: 'capture', key: refund.sourceKey, amountCents: c.amountCents, refundedCents: c.refundedCents };
  } catch {
    return undefined;
  }
}

type Sent =
  | { outcome: 'made' }
  | { outcome: 'refused'; error: string; message: string }
  | { outcome: 'unknown'; problem: string };

/**
 * Sends the refund, and the same request again (same key: the provider's idempotency replays a refund
 * it made) while the answer is unknown (no answer, a lost response, in flight, 5xx), until `untilMs`.
 */
async function send(provider: Provider, refund: OrderRefundRow, untilMs: number): Promise<Sent> {
  const req: RefundRequest =
    refund.sourceKind === 'capture'
      ? { captureKey: refund.sourceKey, amountCents: refund.amountCents }
      : { chargeKey: refund.sourceKey, amountCents: refund.amountCents };
  for (let attempt = 1; ; attempt++) {
    let problem: string;
    try {
      await provider.refund(refund.refundKey, req);
      return { outcome: 'made' };
    } catch (err) {
      if (err instanceof ProviderHttpError && FINAL_REFUSALS.has(err.body.error))
        return { outcome: 'refused', error: err.body.error, message: err.body.message };
      problem = (err as Error).message;
    }
    const pause = Math.min(250 * 2 ** (attempt - 1), 5_000);
    if (Date.now() + pause >= untilMs) return { outcome: 'unknown', problem };
    await sleep(pause);
  }
}

interface Opts {
  amount: number;
  key: string;
  reason?: string;
  wait: number;
  json?: boolean;
}

async function refund(orderId: string, opts: Opts, ctx: CliContext): Promise<number> {
  const store = ctx.needStore('app', 'refund');
  try {
    return await refundWith(store, orderId, opts, ctx);
  } finally {
    await store.close();
  }
}

async function refundWith(store: OrderStore, orderId: string, opts: Opts, ctx: CliContext): Promise<number> {
  const { io } = ctx;
  const provider = ctx.provider();
  const order = await store.refundableOrder(orderId);
  if (!order) throw refused(`orderId: no order ${orderId}`);
  const money = (n: number): string => formatMoney(n, order.currency);
  const refundKey = orderRefundKeyFor(orderId, opts.key);
  const again = `client.ts refund ${orderId} --amount ${opts.amount} --key ${opts.key}`;

  let refund = await store.orderRefund(refundKey);
  if (!refund) {
    // A new refund: checked against the order and the provider's ledger; nothing is written before.
    if (!isRefundable(order.status, order.attentionFrom))
      throw refused(
        `orderId: order ${orderId} is ${order.status}${order.attentionFrom ? ` (from ${order.attentionFrom})` : ''}: ` +
          `a refund is for an order past its shipment (SHIPPED, CAPTURED, COMPLETED, or NEEDS_ATTENTION from one of them)` +
          `; before the shipment, cancel it (client.ts cancel ${orderId})`,
      );
    const pending = (await store.pendingRefunds(orderId))[0];
    if (pending) throw busy(orderId, pending, money);
    const taken = await moneyTaken(provider, order);
    if (typeof taken === 'string') throw refused(`orderId: order ${orderId} has no money to refund: ${taken}`);
    const left = taken.amountCents - taken.refundedCents;
    if (opts.amount > left)
      throw refused(
        `--amount: ${money(opts.amount)} is more than what is left to refund of order ${orderId}: ` +
          `${money(taken.amountCents)} taken under ${taken.key}, ${money(taken.refundedCents)} refunded already, ${money(left)} left`,
      );
    const recorded = await store.recordRefund({
      refundKey,
      orderId,
      sourceKind: taken.kind,
      sourceKey: taken.key,
      amountCents: opts.amount,
      ...(opts.reason ? { reason: opts.reason } : {}),
    });
    if (recorded.outcome === 'busy') throw busy(orderId, recorded.refund, money);
    refund = recorded.refund;
  }
  // The same key is the same refund: the same amount, or it is another refund under a key in use.
  if (refund.amountCents !== opts.amount)
    throw refused(
      `--key: ${opts.key} is refund ${refundKey} of ${money(refund.amountCents)} (${refund.status}); ` +
        `the same key is the same refund: give another --key for another refund`,
    );
  if (refund.status === 'refused')
    throw refused(`${fieldOf(refund.message ?? '')}: refund ${refundKey} was refused: ${refund.message ?? ''}`);

  const sent = await send(provider, refund, Date.now() + opts.wait * 1000);
  if (sent.outcome === 'refused') {
    const message = `${sent.error}: ${sent.message}`;
    await store.refundRefused({ refundKey, message });
    throw refused(
      `${fieldOf(sent.error)}: the provider refused refund ${refundKey} (${message}); nothing was refunded`,
    );
  }
  // Made before (recorded so), and the provider does not answer now: the record says what is known.
  if (sent.outcome === 'unknown' && refund.status === 'succeeded') {
    if (opts.json)
      io.out(
        JSON.stringify({
          orderId,
          refundKey,
          amountCents: refund.amountCents,
          currency: order.currency,
          status: 'succeeded',
          alreadyMade: true,
          of: { kind: refund.sourceKind, key: refund.sourceKey },
          refundedCents: order.refundedCents,
        }),
      );
    else
      io.out(
        `order ${orderId}: refund ${refundKey} of ${money(refund.amountCents)} (of ${refund.sourceKind} ${refund.sourceKey}) was already made ` +
          `(as recorded; the provider did not answer now: ${sent.problem}); the same key refunds nothing again`,
      );
    return EXIT.ok;
  }
  if (sent.outcome === 'unknown') {
    const line =
      `order ${orderId}: refund ${refundKey} of ${money(refund.amountCents)} is not known yet: the provider did not answer ` +
      `within ${opts.wait} s (${sent.problem}). It may have been made; it is recorded as pending, and no other refund of ` +
      `order ${orderId} is made until it is settled: run the same command again (${again}); the same key never refunds twice`;
    if (opts.json)
      io.out(
        JSON.stringify({
          orderId,
          refundKey,
          amountCents: refund.amountCents,
          status: 'pending',
          problem: sent.problem,
        }),
      );
    else io.out(line);
    return EXIT.notCompleted;
  }
  const ledger = await ledgerAfter(provider, refund);
  let recorded;
  try {
    recorded = await store.refundMade({
      orderId,
      refundKey,
      ...(ledger ? { takenCents: ledger.amountCents, ledgerRefundedCents: ledger.refundedCents } : {}),
    });
  } catch (err) {
    throw new CliError(
      `refund ${refundKey} of ${money(refund.amountCents)} was made by the provider, but recording it on order ${orderId} failed ` +
        `(${(err as Error).message}): run the same command again to record it (${again}); it refunds nothing twice`,
      EXIT.notCompleted,
    );
  }
  // Recorded as made before this command: the same refund again. (A replay of a pending one is its
  // first answer: an earlier request, this command's or a previous one's, had reached the provider.)
  const already = refund.status === 'succeeded';
  if (opts.json) {
    io.out(
      JSON.stringify({
        orderId,
        refundKey,
        amountCents: refund.amountCents,
        currency: order.currency,
        status: 'succeeded',
        alreadyMade: already,
        of: { kind: refund.sourceKind, key: refund.sourceKey },
        refundedCents: recorded.refundedCents,
        ...(ledger ? { takenCents: ledger.amountCents } : {}),
      }),
    );
  } else {
    const of = `${refund.sourceKind} ${refund.sourceKey}`;
    const sofar = `${money(recorded.refundedCents)}${ledger ? ` of ${money(ledger.amountCents)}` : ''} refunded so far`;
    io.out(
      already
        ? `order ${orderId}: refund ${refundKey} of ${money(refund.amountCents)} (of ${of}) was already made; the same key refunds nothing again; ${sofar}`
        : `order ${orderId}: refunded ${money(refund.amountCents)} of ${of} (refund ${refundKey}); ${sofar}`,
    );
  }
  return EXIT.ok;
}

/** Another refund of the order whose answer is not known yet: it is settled first. */
const busy = (orderId: string, pending: OrderRefundRow, money: (n: number) => string): CliError => {
  const key = pending.refundKey.slice(`${orderId}:refund:`.length);
  return refused(
    `order ${orderId} has refund ${pending.refundKey} of ${money(pending.amountCents)} whose answer is not known yet: ` +
      `settle it first by running it again (client.ts refund ${orderId} --amount ${pending.amountCents} --key ${key})`,
  );
};

export function register(cli: Command, ctx: CliContext): void {
  cli
    .command('refund')
    .summary('give money back after the shipment, of the capture (or the charge), under its own key')
    .description(
      [
        "Refunds part or all of what was taken for a shipped order: the capture of an order of the authorization era, the charge of one of the charge era. Refused (exit 1, naming the field, nothing written) unless the order is past its shipment (SHIPPED, CAPTURED, COMPLETED, or NEEDS_ATTENTION from one of them), the provider's ledger shows the money taken, and --amount is at most what is left of it (taken, less what is refunded already). Before the shipment an order is cancelled, not refunded.",
        "--key names the refund (a return's or a ticket's ID): the provider's key is <orderId>:refund:<key>, so the same command again is the same refund and never refunds twice; another refund of the order needs another key. The refund is recorded in Postgres before it is sent. When the provider does not answer, it is asked again with the same key until --wait runs out; then the refund is pending (exit 1: it may have been made) and no other refund of the order is made until the same command, run again, learns its outcome. Made, it is on the order row (refunded_cents), with an order.refunded event.",
      ].join('\n\n'),
    )
    .argument(...orderIdArgument)
    .addOption(
      new Option('--amount <cents>', 'how much to give back, in cents of the order currency')
        .argParser(cents)
        .makeOptionMandatory(),
    )
    .addOption(
      new Option('--key <key>', "the refund's own name (a return's or a ticket's ID); the same key is the same refund")
        .argParser(idArg('a refund key'))
        .makeOptionMandatory(),
    )
    .option('--reason <text>', 'why, recorded with the refund')
    .addOption(waitOption('seconds to keep asking the provider when it does not answer (the same key each time)'))
    .addOption(jsonOption('print the refund as JSON'))
    .action(async (orderId, { amount, key, reason, wait, json }) => {
      if (reason !== undefined && (reason.trim() === '' || reason.length > 200))
        throw new CliError('invalid input: --reason: must be from 1 to 200 characters', EXIT.invalid);
      return ctx.done(
        await refund(orderId, { amount, key, wait, ...(reason ? { reason } : {}), ...(json ? { json } : {}) }, ctx),
      );
    });
}
