/**
 * The provider's HTTP routes: the payment API and the admin API as hono apps, with their auth,
 * request validation, injected faults, and the status code of each answer.
 */
import { timingSafeEqual } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { RESPONSE_ALREADY_SENT } from '@hono/node-server/utils/response';
import type { Context, MiddlewareHandler } from 'hono';
import * as v from 'valibot';
import { parseWith } from '../domain/validation';
import { HttpError, jsonApp, jsonBody, rawPath, readJson, type JsonEnv } from '../platform/http';
import { healthRoutes, type Readiness } from '../platform/health';
import {
  ChargeRequestSchema,
  IDEMPOTENCY_HEADER,
  IdempotencyKeySchema,
  REPLAY_HEADER,
  RefundRequestSchema,
  type Charge,
} from './api';
import { ClientNameSchema, parseFaultRequest, type FaultBook, type FaultKind, type FaultTarget } from './faults';
import { sha256, type Ledger } from './ledger';
import { log } from './log';

/** Compares a presented key with the configured ones in constant time per key. */
function keyMatches(given: string, hashes: Buffer[]): boolean {
  const g = Buffer.from(sha256(given));
  let ok = false;
  for (const h of hashes) ok = timingSafeEqual(g, h) || ok;
  return ok;
}

/** Bodies over 64 KiB are refused (by their Content-Length before reading). */
const MAX_BODY = 64 * 1024;

function bad(field: string, message: string): never {
  throw new HttpError(400, { error: 'invalid_request', field, message: `${field}: ${message}` });
}

/** A Bearer key that must be one of `hashes` (compared in constant time), else 401 with these messages. */
function bearer(hashes: Buffer[], missing: string, unknown: string): MiddlewareHandler {
  return async (c, next) => {
    const header = c.req.header('authorization') ?? '';
    const key = header.startsWith('Bearer ') ? header.slice(7) : '';
    if (!key) throw new HttpError(401, { error: 'unauthenticated', message: missing });
    if (!keyMatches(key, hashes)) throw new HttpError(401, { error: 'unauthenticated', message: unknown });
    await next();
  };
}

type KeyedEnv = JsonEnv & { Variables: { key: string } };

/**
 * No body, or an empty JSON object: the technical cancel takes nothing but its path. A body must be
 * `application/json` (else 415), at most `maxBytes` (else 413), and `{}` (else 400).
 */
function emptyBody(maxBytes: number): MiddlewareHandler {
  const json = jsonBody(maxBytes);
  return async (c, next) => {
    const length = c.req.header('content-length');
    if (c.req.header('transfer-encoding') === undefined && (length === undefined || length === '0')) return next();
    return json(c, async () => {
      const body = await readJson(c);
      if (typeof body !== 'object' || body === null || Array.isArray(body) || Object.keys(body).length > 0)
        bad('body', 'must be empty or {}');
      await next();
    });
  };
}

/** The Idempotency-Key header, required: the route reads it as c.get('key'). */
const requireIdempotencyKey: MiddlewareHandler<KeyedEnv> = async (c, next) => {
  const key = c.req.header(IDEMPOTENCY_HEADER);
  if (key === undefined) bad('Idempotency-Key', 'header is required');
  c.set('key', parseWith(IdempotencyKeySchema, key, bad, 'Idempotency-Key'));
  await next();
};

/**
 * A charge key in the path (the inquiry's, the cancel's): its segment as sent, between `prefix` and
 * `suffix`, percent-decoded, held to the Idempotency-Key rule.
 */
function pathKey(c: Context, prefix: string, suffix = ''): string {
  let key: string;
  try {
    const path = rawPath(c);
    key = decodeURIComponent(path.slice(prefix.length, path.length - suffix.length));
  } catch {
    throw new HttpError(400, {
      error: 'invalid_path',
      field: 'key',
      message: 'key: the path has a malformed % escape',
    });
  }
  return parseWith(IdempotencyKeySchema, key, bad, 'key');
}

/** A declined charge is answered 402, any other 201 (a replay as the first time). */
const chargeHttpStatus = (c: Charge): 201 | 402 => (c.status === 'failed' ? 402 : 201);

/**
 * The faults matched for one call. Each is counted (and logged as `fault applied`) only where it
 * takes effect: a call refused before it, or a replay that never waits, does not count.
 */
function callFaults(book: FaultBook, target: FaultTarget, key: string, c: Context<KeyedEnv>) {
  const name = c.req.header('x-client-name');
  const client = typeof name === 'string' && v.is(ClientNameSchema, name) ? { client: name } : {};
  const fired = book.take(target, key, client.client);
  const done = new Set<FaultKind>();
  const applied = (kind: FaultKind, fields: Record<string, unknown> = {}): void => {
    done.add(kind);
    book.apply(target, kind);
    log('fault applied', { target, kind, key, ...client, ...fields });
  };
  return {
    /** Runs the call, then gives back to their rules the matched faults it did not apply. */
    async run(call: () => Promise<Response>): Promise<Response> {
      try {
        return await call();
      } finally {
        for (const [kind, rule] of fired) if (!done.has(kind)) book.release(rule);
      }
    },
    /** An outage or a 5xx before any work; before them, a delay unless the work itself applies it. */
    async before(delayHere = true): Promise<void> {
      if (fired.has('outage')) {
        applied('outage');
        throw new HttpError(503, { error: 'unavailable', message: 'injected fault: provider outage, nothing written' });
      }
      const delay = fired.get('delay');
      if (delayHere && delay?.delayMs) {
        applied('delay', { delayMs: delay.delayMs });
        await sleep(delay.delayMs);
      }
      if (fired.has('fail-before-commit')) {
        applied('fail-before-commit');
        throw new HttpError(503, {
          error: 'unavailable',
          message: 'injected fault: failed before commit, nothing written',
        });
      }
    },
    /** A charge's delay: applied by createCharge, only when it inserted the charge and waits. */
    chargeDelay(): { ms: number; applied: () => void } | undefined {
      const delay = fired.get('delay');
      return delay?.delayMs
        ? { ms: delay.delayMs, applied: () => applied('delay', { delayMs: delay.delayMs }) }
        : undefined;
    },
    processing(): boolean {
      if (!fired.has('processing')) return false;
      applied('processing');
      return true;
    },
    /**
     * The work is done; the caller never hears of it: the one place that needs the raw socket. Returns
     * the non-answer for the route to return (nothing is written), or undefined to answer as usual.
     */
    loseResponse(): Response | undefined {
      const rule = fired.get('lose-response-after-commit');
      if (!rule) return undefined;
      applied('lose-response-after-commit', { mode: rule.mode ?? 'drop' });
      const res = c.env.outgoing;
      if (rule.mode === 'hang') {
        const t = setTimeout(() => res.socket?.destroy(), 300_000);
        res.once('close', () => clearTimeout(t));
      } else {
        res.socket?.destroy();
      }
      return RESPONSE_ALREADY_SENT;
    },
  };
}

/**
 * The payment API: POST /v1/charges, GET /v1/charges/:key (the inquiry), POST /v1/charges/:key/cancel
 * (the technical cancel), POST /v1/refunds; GET /healthz and GET /readyz (its database answers).
 */
export function createProviderApp(ledger: Ledger, faults: FaultBook, apiKeys: string[], ready: Readiness) {
  const app = jsonApp<KeyedEnv>((err) => log('error', { message: err.message }));
  healthRoutes(app, ready);
  // Exactly the keys configured now: a key removed from the configuration stops working at restart.
  app.use(
    '*',
    bearer(
      apiKeys.map((k) => Buffer.from(sha256(k))),
      'missing API key (Authorization: Bearer …)',
      'unknown API key',
    ),
  );
  const replayed = (yes: boolean): Record<string, string> => (yes ? { [REPLAY_HEADER]: 'true' } : {});

  app.post('/v1/charges', requireIdempotencyKey, jsonBody(MAX_BODY), async (c) => {
    const key = c.get('key');
    const body = parseWith(ChargeRequestSchema, await readJson(c), bad, 'body');
    const f = callFaults(faults, 'charges', key, c);
    return f.run(async () => {
      await f.before(false);
      const r = await ledger.createCharge(key, body, f.chargeDelay());
      return f.loseResponse() ?? c.json(r.charge, chargeHttpStatus(r.charge), replayed(r.replayed));
    });
  });

  app.get('/v1/charges/:key', async (c) => {
    const key = pathKey(c, '/v1/charges/');
    const f = callFaults(faults, 'inquiries', key, c);
    return f.run(async () => {
      await f.before();
      if (f.processing()) {
        return c.json(
          {
            idempotencyKey: key,
            status: 'processing',
            amountCents: 0,
            currency: '',
            refundedCents: 0,
          } satisfies Charge,
          200,
        );
      }
      const charge = await ledger.getCharge(key);
      return (
        f.loseResponse() ??
        (charge ? c.json(charge, 200) : c.json({ error: 'not_found', message: 'no charge with that key' }, 404))
      );
    });
  });

  // The technical cancel: the charge under the key, unchanged, or the key closed for good.
  app.post('/v1/charges/:key/cancel', emptyBody(MAX_BODY), async (c) => {
    const key = pathKey(c, '/v1/charges/', '/cancel');
    const f = callFaults(faults, 'cancels', key, c);
    return f.run(async () => {
      await f.before();
      // A gateway still deciding a charge under this key: the caller must not refund blindly.
      if (f.processing()) {
        const charge: Charge = {
          idempotencyKey: key,
          status: 'processing',
          amountCents: 0,
          currency: '',
          refundedCents: 0,
        };
        return c.json({ outcome: 'found', charge }, 200);
      }
      const r = await ledger.cancelCharge(key);
      return f.loseResponse() ?? c.json(r, 200);
    });
  });

  app.post('/v1/refunds', requireIdempotencyKey, jsonBody(MAX_BODY), async (c) => {
    const key = c.get('key');
    const body = parseWith(RefundRequestSchema, await readJson(c), bad, 'body');
    const f = callFaults(faults, 'refunds', key, c);
    return f.run(async () => {
      await f.before();
      const r = await ledger.createRefund(key, body);
      return f.loseResponse() ?? c.json(r.refund, 201, replayed(r.replayed));
    });
  });

  app.notFound((c) => c.json({ error: 'not_found', message: `${c.req.method} ${rawPath(c)} is not an endpoint` }, 404));
  return app;
}

/** The admin API: GET/POST/DELETE /admin/faults, with its own key, on its own port. */
export function createAdminApp(faults: FaultBook, adminKeys: string[]) {
  const app = jsonApp();
  const message = 'missing or wrong admin key';
  app.use(
    '*',
    bearer(
      adminKeys.map((k) => Buffer.from(sha256(k))),
      message,
      message,
    ),
  );
  app.get('/admin/faults', (c) => c.json({ rules: faults.list(), injected: faults.injected, applied: faults.applied }));
  app.delete('/admin/faults', (c) => {
    faults.clear();
    log('faults cleared');
    return c.json({ rules: [], injected: faults.injected, applied: faults.applied });
  });
  app.post('/admin/faults', jsonBody(MAX_BODY), async (c) => {
    const body = await readJson(c);
    const rule = faults.add(
      parseFaultRequest(body, (field, problem) => {
        throw new HttpError(400, { error: 'invalid_request', field, message: `${field}: ${problem}` });
      }),
    );
    log('fault set', { ...rule });
    return c.json(rule, 201);
  });
  app.all('/admin/faults', (c) =>
    c.json({ error: 'method_not_allowed', message: `${c.req.method} is not allowed` }, 405),
  );
  app.notFound((c) => c.json({ error: 'not_found', message: 'only /admin/faults' }, 404));
  return app;
}
