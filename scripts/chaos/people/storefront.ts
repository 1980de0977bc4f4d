/**
 * A storefront placing an order through the orders API (api/), as a shop's checkout does: `POST
 * /v1/orders` with an Idempotency-Key of its own, sent again with the same key and body while the API
 * cannot answer yet — a `503` (no early answer in time, or Temporal out of reach), a `409
 * request_in_flight` (its first request's process was killed and the lease still runs), another 5xx,
 * or no answer at all (the API process, Postgres or Temporal restarting). Its answer must then be a
 * `202` or one of the saga's refusals. Half of the orders ('replay') are then sent once more with the
 * same key: the first answer must come back, marked as a replay. Anything else is a violation. The
 * customer's cancel of such an order goes through the API too (`POST /v1/orders/{id}/cancel`, with a
 * key, sent again in the same way).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { REPLAY_HEADER } from '../../../api/app';
import type { ChaosOrder } from '../orders';
import type { PeopleBase } from './base';

/** The refusals the saga may give a soak order at its boundary (api/app.ts, REFUSALS). */
const REFUSALS = new Set(['409 out_of_stock', '422 purchase_limit_exceeded', '409 order_failed']);
/** The 409s that ask for the same request again: the first still in flight, the order's row not yet written. */
const AGAIN_409 = new Set(['request_in_flight', 'not_ready']);
/** How long the storefront keeps sending the request before the driver gives up on the order. */
const GIVE_UP_MS = 4 * 60_000;

interface Answer {
  status: number;
  body: string;
  replayed: boolean;
}

/**
 * Places the order through the API; resolves once it was answered (accepted or refused), so its
 * saga exists. Throws (a driver error) if no answer came within GIVE_UP_MS.
 */
export async function placeThroughApi(p: PeopleBase, o: ChaosOrder): Promise<void> {
  const id = o.input.orderId;
  const key = `checkout-${id}`;
  const body = JSON.stringify(o.input);
  const answered = (): Promise<Answer> => untilAnswered(p, '/v1/orders', key, body);
  p.count('api place', 'sent');
  const first = await answered();
  if (first.status === 202) p.count('api place', 'accepted');
  else if (isRefusal(first)) {
    p.count('api place', 'refused');
    p.apiRefused.add(id);
  } else return p.violation('api-answer', id, `POST /v1/orders answered ${first.status} ${first.body}`);
  if (o.viaApi !== 'replay') return;
  p.count('api replay', 'sent');
  const again = await answered();
  if (again.replayed && again.status === first.status && again.body === first.body) p.count('api replay', 'accepted');
  else
    p.violation(
      'api-replay',
      id,
      `the same key and body again answered ${again.status} ${again.body} (replayed: ${again.replayed}); first ${first.status} ${first.body}`,
    );
}
/** The customer's cancel through the API, as `client.ts cancel` answers it: code 0 accepted, else why. */
export async function cancelThroughApi(
  p: PeopleBase,
  orderId: string,
  reason: string,
): Promise<{ code: number; err: string }> {
  const path = `/v1/orders/${encodeURIComponent(orderId)}/cancel`;
  const refused = (a: Answer): boolean => a.status === 409 && CANCEL_REFUSALS.has(errorOf(a) ?? '');
  const a = await untilAnswered(p, path, `cancel-${orderId}`, JSON.stringify({ reason }));
  if (a.status === 202) return { code: 0, err: '' };
  return { code: 1, err: `${refused(a) ? 'refused' : 'failed'}: ${a.status} ${a.body}` };
}

/** The cancel's refusals (api/app.ts): the order past its pivot, ended, or already compensating. */
const CANCEL_REFUSALS = new Set(['past_pivot', 'already_ended', 'already_compensating']);

/**
 * POSTs `body` with the storefront's key and `key` until the answer is one to keep: after no answer,
 * a 5xx or a 409 that asks for it, the same request again a second later.
 */
async function untilAnswered(p: PeopleBase, path: string, key: string, body: string): Promise<Answer> {
  for (const until = Date.now() + GIVE_UP_MS; ; await sleep(1_000)) {
    if (Date.now() > until) throw new Error(`POST ${path}: no answer within ${GIVE_UP_MS / 60_000} min`);
    let a: Answer | undefined;
    try {
      const r = await fetch(`${p.stack.api.url}${path}`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${p.stack.api.key}`,
          'idempotency-key': key,
          'content-type': 'application/json',
        },
        body,
        signal: AbortSignal.timeout(30_000),
      });
      a = { status: r.status, body: await r.text(), replayed: r.headers.get(REPLAY_HEADER) === 'true' };
    } catch {
      a = undefined; // no answer: the process restarting, or the request cut
    }
    if (a && a.status < 500 && !(a.status === 409 && AGAIN_409.has(errorOf(a) ?? ''))) return a;
    p.count('api sent again', 'sent');
  }
}

function errorOf(a: Answer): string | undefined {
  try {
    return (JSON.parse(a.body) as { error?: string }).error;
  } catch {
    return undefined;
  }
}

function isRefusal(a: Answer): boolean {
  return (a.status === 409 || a.status === 422) && REFUSALS.has(`${a.status} ${errorOf(a)}`);
}
