/**
 * The order events' signature (ops/event-relay.ts signs; a receiver checks), in the form Stripe's
 * webhooks use: a header `Order-Saga-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256>`, the HMAC
 * keyed with the endpoint's secret over `<t>.<raw body>`. A receiver recomputes it over the raw body
 * it got, compares in constant time, and refuses a timestamp older than its tolerance (a replay).
 */
import { createHmac, timingSafeEqual } from 'node:crypto';

export const SIGNATURE_HEADER = 'Order-Saga-Signature';
/** How old a signature a receiver accepts by default (5 minutes, as Stripe's libraries). */
export const SIGNATURE_TOLERANCE_S = 300;

const mac = (secret: string, t: number, body: string): string =>
  createHmac('sha256', secret).update(`${t}.${body}`).digest('hex');

/** The header's value for `body`, signed at `nowS` (unix seconds). */
export const signBody = (secret: string, body: string, nowS = Math.floor(Date.now() / 1000)): string =>
  `t=${nowS},v1=${mac(secret, nowS, body)}`;

/** Why a signature is refused, or undefined when it is good. */
export function signatureProblem(
  secret: string,
  header: string | null | undefined,
  body: string,
  { nowS = Math.floor(Date.now() / 1000), toleranceS = SIGNATURE_TOLERANCE_S } = {},
): string | undefined {
  if (!header) return `no ${SIGNATURE_HEADER} header`;
  const parts = new Map(
    header.split(',').map((p) => {
      const i = p.indexOf('=');
      return [p.slice(0, i).trim(), p.slice(i + 1).trim()] as const;
    }),
  );
  const t = Number(parts.get('t'));
  const v1 = parts.get('v1') ?? '';
  if (!Number.isInteger(t) || !/^[0-9a-f]{64}$/.test(v1)) return 'malformed signature header';
  if (Math.abs(nowS - t) > toleranceS) return `signature timestamp ${t} is outside the ${toleranceS} s tolerance`;
  const want = Buffer.from(mac(secret, t, body), 'hex');
  if (!timingSafeEqual(want, Buffer.from(v1, 'hex'))) return 'signature does not match';
  return undefined;
}
