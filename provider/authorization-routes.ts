/**
 * The authorization routes of the payment API: a hold on the card, its capture, its void, the inquiry
 * of each, and the technical cancel of an ambiguous authorization. Each call meets the fault switch
 * under its own target.
 */
import type { Hono } from 'hono';
import { parseWith } from '../domain/validation';
import { jsonBody, readJson } from '../platform/http';
import {
  AuthorizationRequestSchema,
  CaptureRequestSchema,
  type Authorization,
  type AuthorizationCancelResult,
  type Capture,
} from './api';
import { bad, callFaults, emptyBody, MAX_BODY, pathKey, replayed, requireIdempotencyKey, type KeyedEnv } from './edge';
import type { FaultBook } from './faults';
import { CAPTURE_FAILURE_MESSAGES } from './holds';
import type { Ledger } from './ledger';

/** A gateway still deciding: what the `processing` fault answers in place of the authorization. */
const processingAuthorization = (key: string): Authorization => ({
  idempotencyKey: key,
  status: 'processing',
  amountCents: 0,
  currency: '',
  capturedCents: 0,
  refundedCents: 0,
});

/**
 * POST /v1/authorizations, GET /v1/authorizations/:key (the inquiry), POST
 * /v1/authorizations/:key/capture, POST /v1/authorizations/:key/void, POST
 * /v1/authorizations/:key/cancel (the technical cancel), GET /v1/captures/:key (the capture's inquiry).
 */
export function authorizationRoutes(app: Hono<KeyedEnv>, ledger: Ledger, faults: FaultBook): void {
  app.post('/v1/authorizations', requireIdempotencyKey, jsonBody(MAX_BODY), async (c) => {
    const key = c.get('key');
    const body = parseWith(AuthorizationRequestSchema, await readJson(c), bad, 'body');
    const f = callFaults(faults, 'authorizations', key, c);
    return f.run(async () => {
      await f.before(false);
      const r = await ledger.createAuthorization(key, body, f.decisionDelay());
      // A declined card is a 402, every time; a replay answers as the first time, with the
      // authorization as it is now (voided, captured or expired since).
      const status = r.authorization.status === 'declined' ? 402 : 201;
      return f.loseResponse() ?? c.json(r.authorization, status, replayed(r.replayed));
    });
  });

  app.get('/v1/authorizations/:key', async (c) => {
    const key = pathKey(c, '/v1/authorizations/');
    const f = callFaults(faults, 'authorization-inquiries', key, c);
    return f.run(async () => {
      await f.before();
      if (f.processing()) return c.json(processingAuthorization(key), 200);
      const found = await ledger.getAuthorization(key);
      return (
        f.loseResponse() ??
        (found ? c.json(found, 200) : c.json({ error: 'not_found', message: 'no authorization with that key' }, 404))
      );
    });
  });

  // The capture is keyed by its own Idempotency-Key (the fault rules match it); the path names the hold.
  app.post('/v1/authorizations/:key/capture', requireIdempotencyKey, jsonBody(MAX_BODY), async (c) => {
    const authorizationKey = pathKey(c, '/v1/authorizations/', '/capture');
    const key = c.get('key');
    const body = parseWith(CaptureRequestSchema, await readJson(c), bad, 'body');
    const f = callFaults(faults, 'captures', key, c);
    return f.run(async () => {
      await f.before();
      const r = await ledger.createCapture(authorizationKey, key, body);
      const lost = f.loseResponse();
      if (lost) return lost;
      const { capture } = r;
      if (capture.status === 'failed' && capture.failureCode) {
        const failure = capture.failureCode;
        return c.json({ error: failure, message: CAPTURE_FAILURE_MESSAGES[failure] }, 409, replayed(r.replayed));
      }
      return c.json(capture, 201, replayed(r.replayed));
    });
  });

  app.post('/v1/authorizations/:key/void', emptyBody(MAX_BODY), async (c) => {
    const key = pathKey(c, '/v1/authorizations/', '/void');
    const f = callFaults(faults, 'voids', key, c);
    return f.run(async () => {
      await f.before();
      const r = await ledger.voidAuthorization(key);
      return f.loseResponse() ?? c.json(r.authorization, 200, replayed(r.replayed));
    });
  });

  // The technical cancel: the authorization under the key, its hold released, or the key closed for good.
  app.post('/v1/authorizations/:key/cancel', emptyBody(MAX_BODY), async (c) => {
    const key = pathKey(c, '/v1/authorizations/', '/cancel');
    const f = callFaults(faults, 'authorization-cancels', key, c);
    return f.run(async () => {
      await f.before();
      // A gateway still deciding an authorization under this key: the caller must not assume it void.
      if (f.processing()) {
        return c.json(
          { outcome: 'found', authorization: processingAuthorization(key) } satisfies AuthorizationCancelResult,
          200,
        );
      }
      const r = await ledger.cancelAuthorization(key);
      return f.loseResponse() ?? c.json(r, 200);
    });
  });

  app.get('/v1/captures/:key', async (c) => {
    const key = pathKey(c, '/v1/captures/');
    const f = callFaults(faults, 'capture-inquiries', key, c);
    return f.run(async () => {
      await f.before();
      if (f.processing()) {
        const processing: Capture = {
          idempotencyKey: key,
          authorizationKey: '',
          status: 'processing',
          amountCents: 0,
          currency: '',
          refundedCents: 0,
        };
        return c.json(processing, 200);
      }
      const capture = await ledger.getCapture(key);
      return (
        f.loseResponse() ??
        (capture ? c.json(capture, 200) : c.json({ error: 'not_found', message: 'no capture with that key' }, 404))
      );
    });
  });
}
