/**
 * The provider's HTTP edge, shared by its routes: API-key auth, bodies, the Idempotency-Key header,
 * keys in the path, and the faults matched for one call.
 */
import { timingSafeEqual } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { RESPONSE_ALREADY_SENT } from '@hono/node-server/utils/response';
import type { Context, MiddlewareHandler } from 'hono';
import * as v from 'valibot';
import { parseWith } from '../domain/validation';
import { HttpError, jsonBody, rawPath, readJson, type JsonEnv } from '../platform/http';
import { IDEMPOTENCY_HEADER, IdempotencyKeySchema, REPLAY_HEADER } from './api';
import { ClientNameSchema, type FaultBook, type FaultKind, type FaultTarget } from './faults';
import { sha256 } from './idempotency';
import { log } from './log';

/** Compares a presented key with the configured ones in constant time per key. */
function keyMatches(given: string, hashes: Buffer[]): boolean {
  const g = Buffer.from(sha256(given));
  let ok = false;
  for (const h of hashes) ok = timingSafeEqual(g, h) || ok;
  return ok;
}

/** Bodies over 64 KiB are refused (by their Content-Length before reading). */
export const MAX_BODY = 64 * 1024;

export function bad(field: string, message: string): never {
  throw new HttpError(400, { error: 'invalid_request', field, message: `${field}: ${message}` });
}

/** A Bearer key that must be one of `hashes` (compared in constant time), else 401 with these messages. */
export function bearer(hashes: Buffer[], missing: string, unknown: string): MiddlewareHandler {
  return async (c, next) => {
    const header = c.req.header('authorization') ?? '';
    const key = header.startsWith('Bearer ') ? header.slice(7) : '';
    if (!key) throw new HttpError(401, { error: 'unauthenticated', message: missing });
    if (!keyMatches(key, hashes)) throw new HttpError(401, { error: 'unauthenticated', message: unknown });
    await next();
  };
}

export type KeyedEnv = JsonEnv & { Variables: { key: string } };

/**
 * No body, or an empty JSON object: the technical cancel takes nothing but its path. A body must be
 * `application/json` (else 415), at most `maxBytes` (else 413), and `{}` (else 400).
 */
export function emptyBody(maxBytes: number): MiddlewareHandler {
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
export const requireIdempotencyKey: MiddlewareHandler<KeyedEnv> = async (c, next) => {
  const key = c.req.header(IDEMPOTENCY_HEADER);
  if (key === undefined) bad('Idempotency-Key', 'header is required');
  c.set('key', parseWith(IdempotencyKeySchema, key, bad, 'Idempotency-Key'));
  await next();
};

/**
 * A charge key in the path (the inquiry's, the cancel's): its segment as sent, between `prefix` and
 * `suffix`, percent-decoded, held to the Idempotency-Key rule.
 */
export function pathKey(c: Context, prefix: string, suffix = ''): string {
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

/**
 * The faults matched for one call. Each is counted (and logged as `fault applied`) only where it
 * takes effect: a call refused before it, or a replay that never waits, does not count.
 */
export function callFaults(book: FaultBook, target: FaultTarget, key: string, c: Context<KeyedEnv>) {
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
    /**
     * A charge's (or an authorization's) delay: applied by the ledger, only when it inserted the
     * charge and waits, deciding it after the delay.
     */
    decisionDelay(): { ms: number; applied: () => void } | undefined {
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

/** The Idempotent-Replayed header of an answer that repeats the first one. */
export const replayed = (yes: boolean): Record<string, string> => (yes ? { [REPLAY_HEADER]: 'true' } : {});
