/**
 * The provider's HTTP routes: the payment API and the admin API as hono apps, with their auth,
 * request validation, injected faults, and the status code of each answer.
 */
import { parseWith } from '../domain/validation';
import { HttpError, jsonApp, jsonBody, rawPath, readJson } from '../platform/http';
import { healthRoutes, type Readiness } from '../platform/health';
import { ChargeRequestSchema, RefundRequestSchema, type Charge } from './api';
import { authorizationRoutes } from './authorization-routes';
import {
  bad,
  bearer,
  callFaults,
  emptyBody,
  MAX_BODY,
  pathKey,
  replayed,
  requireIdempotencyKey,
  type KeyedEnv,
} from './edge';
import { parseFaultRequest, type FaultBook } from './faults';
import { sha256 } from './idempotency';
import type { Ledger } from './ledger';
import { log } from './log';

/** A declined charge is answered 402, any other 201 (a replay as the first time). */
const chargeHttpStatus = (c: Charge): 201 | 402 => (c.status === 'failed' ? 402 : 201);

/**
 * The payment API: POST /v1/charges, GET /v1/charges/:key (the inquiry), POST /v1/charges/:key/cancel
 * (the technical cancel), POST /v1/refunds (of a charge or a capture); the authorizations
 * (authorization-routes.ts); GET /healthz and GET /readyz (its database answers).
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
  app.post('/v1/charges', requireIdempotencyKey, jsonBody(MAX_BODY), async (c) => {
    const key = c.get('key');
    const body = parseWith(ChargeRequestSchema, await readJson(c), bad, 'body');
    const f = callFaults(faults, 'charges', key, c);
    return f.run(async () => {
      await f.before(false);
      const r = await ledger.createCharge(key, body, f.decisionDelay());
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

  authorizationRoutes(app, ledger, faults);

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
