/**
 * The orders API's routes (docs/api.md): place an order under an Idempotency-Key, read it, cancel it,
 * list a storefront's orders a page at a time; every answer JSON, every refusal naming why (and the
 * field, where there is one). Nothing is written and no saga started for a request that is refused
 * before its placement is claimed.
 */
import { createHash, randomUUID } from 'node:crypto';
import { WorkflowFailedError, WorkflowNotFoundError, type Client, type WorkflowHandle } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import type { Context, MiddlewareHandler } from 'hono';
import { cors } from 'hono/cors';
import type { Pool } from 'pg';
import * as v from 'valibot';
import { ErrorTypes } from '../domain/failures';
import {
  IdSchema,
  isPastPivot,
  isTerminal,
  orderIdOf,
  OrderValidationError,
  parseOrder,
  workflowIdFor,
  type OrderInput,
  type OrderStatus,
} from '../domain/order';
import { parseWith, record } from '../domain/validation';
import { recordNeverPlaced } from '../activities/orders';
import { verifyApiKey } from '../orders/api-keys';
import { orderStore } from '../orders/order-store';
import { placeOrder } from '../orders/place-order';
import { sendRequest } from '../orders/saga-requests';
import { databaseAnswers, healthRoutes } from '../platform/health';
import { HttpError, jsonApp, jsonBody, readJson, type JsonEnv } from '../platform/http';
import type { Acceptance } from '../workflows/messages';
import type { SagaConfig } from '../workflows/saga-config';
import { openApiDocument } from './openapi';
import { RateLimiter } from './rate-limit';
import { apiStore, carriedOn, decodeCursor, encodeCursor, isOrderStatus, type Placement } from './store';

/** An order is a few KiB at most (50 lines); anything much larger is not one. */
export const MAX_BODY_BYTES = 32 * 1024;
/** How long a refused saga is given to end, so its business reason (the failure's type) is known. */
const REFUSAL_OUTCOME_MS = 10_000;
/** How a run that closed before it wrote its order's row is named in the refusal. */
const STOPPED: Partial<Record<string, string>> = {
  TERMINATED: 'terminated',
  CANCELLED: 'cancelled',
  TIMED_OUT: 'timed out',
};
/** How long a cancel waits for the order's row when its placement is still in flight. */
const ROW_WAIT_MS = 5_000;
/** How long a cancel's Signal may take; the cancel stands, recorded, whether or not the run has it yet. */
const SIGNAL_WAIT_MS = 5_000;
const PAGE_DEFAULT = 20;
const PAGE_MAX = 100;
/** The header a replayed answer carries (Stripe's name for it). */
export const REPLAY_HEADER = 'Idempotent-Replayed';

type ApiEnv = JsonEnv & { Variables: { caller: { keyId: string; storefront: string } } };

export interface ApiDeps {
  db: Pool;
  client: Client;
  taskQueue: string;
  ratePerMinute: number;
  corsOrigins: string[];
  answerTimeoutMs: number;
  /** The config the sagas it places run with; unset, the saga's defaults. */
  sagaConfig?: Partial<SagaConfig>;
  log: (event: string, fields?: Record<string, unknown>) => void;
}

const sha256 = (s: string): string => createHash('sha256').update(s).digest('hex');
const refuse = (status: 400 | 404 | 409 | 413 | 415 | 422, error: string, message: string, field?: string): never => {
  throw new HttpError(status, { error, message, ...(field ? { field } : {}) });
};

/** The business reasons a saga refuses an order for, as the API answers them. */
const REFUSALS: Record<string, { status: 409 | 422; error: string }> = {
  [ErrorTypes.InsufficientStock]: { status: 409, error: 'out_of_stock' },
  [ErrorTypes.PurchaseLimitExceeded]: { status: 422, error: 'purchase_limit_exceeded' },
  [ErrorTypes.InvalidOrder]: { status: 422, error: 'invalid_order' },
};

/** The Idempotency-Key header: printable ASCII, 1 to 255 characters. */
function idempotencyKey(header: string | undefined): string {
  if (header === undefined || header === '')
    return refuse(400, 'missing_idempotency_key', 'Idempotency-Key: is required', 'Idempotency-Key');
  if (header.length > 255 || !/^[\x21-\x7e]+$/.test(header))
    return refuse(
      400,
      'invalid_idempotency_key',
      'Idempotency-Key: must be 1 to 255 printable ASCII characters',
      'Idempotency-Key',
    );
  return header;
}

/** A request with a body: any length but 0, or chunked. */
const hasBody = (c: Context): boolean =>
  c.req.header('transfer-encoding') !== undefined || (c.req.header('content-length') ?? '0') !== '0';
const invalidRequest = (field: string, problem: string): never =>
  refuse(422, 'invalid_request', `${field}: ${problem}`, field);

const CancelBody = record(
  {
    reason: v.optional(
      v.pipe(
        v.string('must be a string'),
        v.minLength(1, 'must not be empty'),
        v.maxLength(200, 'must be at most 200 characters'),
      ),
    ),
  },
  'must be a JSON object',
);
const QUERY_PARAMS = ['status', 'customer', 'cursor', 'limit'];

export function createApiApp(deps: ApiDeps) {
  const { db, client, log } = deps;
  const store = apiStore(db);
  const orders = orderStore(db);
  const limiter = new RateLimiter(deps.ratePerMinute);
  const app = jsonApp<ApiEnv>((err) => log('error', { message: err.message }));
  app.notFound((c) =>
    c.json({ error: 'not_found', message: `${c.req.method} ${new URL(c.req.url).pathname} is not an endpoint` }, 404),
  );
  // No CORS headers at all unless origins are configured: a browser then calls only from those.
  if (deps.corsOrigins.length) {
    app.use(
      '*',
      cors({
        origin: deps.corsOrigins,
        allowHeaders: ['Authorization', 'Content-Type', 'Idempotency-Key'],
        exposeHeaders: ['Location', 'Retry-After', REPLAY_HEADER],
      }),
    );
  }
  const database = databaseAnswers(db);
  healthRoutes(app, async () => {
    const dbProblem = await database();
    if (dbProblem) return dbProblem;
    try {
      await client.workflowService.getSystemInfo({});
      return undefined;
    } catch (err) {
      return `Temporal does not answer: ${(err as Error).message}`;
    }
  });
  app.get('/v1/openapi.json', (c) => c.json(openApiDocument()));

  // Every order route: a key in use (a 401 says nothing more), then the key's rate limit.
  const authenticate: MiddlewareHandler<ApiEnv> = async (c, next) => {
    const header = c.req.header('authorization') ?? '';
    const caller = header.startsWith('Bearer ') ? await verifyApiKey(db, header.slice(7)) : undefined;
    if (!caller) throw new HttpError(401, { error: 'unauthenticated', message: 'unauthenticated' });
    const waitS = limiter.take(caller.keyId);
    if (waitS > 0) {
      c.header('Retry-After', String(waitS));
      throw new HttpError(429, {
        error: 'rate_limited',
        message: `over ${deps.ratePerMinute} requests a minute for this key`,
      });
    }
    c.set('caller', caller);
    await next();
  };
  app.use('/v1/orders/*', authenticate); // /v1/orders itself included

  app.post('/v1/orders', jsonBody(MAX_BODY_BYTES), async (c) => {
    const { storefront } = c.get('caller');
    const key = idempotencyKey(c.req.header('idempotency-key'));
    let order: OrderInput;
    try {
      order = parseOrder(await readJson(c));
    } catch (err) {
      if (err instanceof OrderValidationError) return refuse(422, 'invalid_order', err.message, err.field);
      throw err;
    }
    const requestHash = sha256(JSON.stringify(order));
    // A key already used answers as it did (or refuses), before anything else is checked again.
    const prior = await store.placement(storefront, key);
    if (prior && !carriedOn(prior, requestHash)) return answerPrior(c, prior, requestHash);
    if (!prior) {
      const problem = await orders.catalogueProblem(order);
      if (problem)
        return refuse(422, 'invalid_order', `invalid order: ${problem.field}: ${problem.problem}`, problem.field);
      if (await store.placedOutside(order.orderId))
        return refuse(409, 'order_exists', `orderId: ${order.orderId} is already placed`, 'orderId');
    }
    const claim = await store.claim({
      storefront,
      key,
      requestHash,
      orderId: order.orderId,
      // Longer than this request can take to answer (the early answer's wait, then a refusal's), so
      // a retry never carries on a placement whose first request is still at work.
      leaseMs: deps.answerTimeoutMs + REFUSAL_OUTCOME_MS + 5_000,
    });
    if (claim.kind === 'order-taken')
      return refuse(
        409,
        'order_exists',
        `orderId: ${order.orderId} is already placed under another Idempotency-Key`,
        'orderId',
      );
    if (claim.kind === 'existing') return answerPrior(c, claim.placement, requestHash);
    let answer;
    try {
      answer = await place(order, claim.kind === 'takeover');
    } catch (err) {
      // Temporal out of reach, say: nothing was answered, so the same request again carries it on.
      await store.release({ storefront, key });
      log('place-failed', { orderId: order.orderId, message: (err as Error).message });
      c.header('Retry-After', '5');
      throw new HttpError(503, {
        error: 'unavailable',
        message: 'the order could not be placed now; send the same request again',
      });
    }
    if (!answer) {
      await store.release({ storefront, key });
      c.header('Retry-After', '5');
      throw new HttpError(503, {
        error: 'no_answer',
        message: `no early answer from the saga within ${deps.answerTimeoutMs} ms; send the same request again`,
      });
    }
    const kept = await store.answer({ storefront, key, ...answer });
    log('placed', { storefront, orderId: order.orderId, status: kept.status });
    if (!kept.first) c.header(REPLAY_HEADER, 'true');
    if (kept.status === 202) c.header('Location', orderUrl(order.orderId));
    return c.json(kept.body as object, kept.status as 202);
  });

  const orderUrl = (orderId: string): string => `/v1/orders/${encodeURIComponent(orderId)}`;

  /** The answer to a key already used: the first answer again, or why not (another body, still in flight). */
  function answerPrior(c: Context<ApiEnv>, placement: Placement, requestHash: string): Response {
    if (placement.requestHash !== requestHash)
      return refuse(
        422,
        'idempotency_key_reused',
        'Idempotency-Key: already used with another body',
        'Idempotency-Key',
      );
    if (!placement.answer)
      return refuse(
        409,
        'request_in_flight',
        'Idempotency-Key: the first request with this key is still in flight',
        'Idempotency-Key',
      );
    c.header(REPLAY_HEADER, 'true');
    if (placement.answer.status === 202) c.header('Location', orderUrl(placement.orderId));
    return c.json(placement.answer.body as object, placement.answer.status as 202);
  }

  /** Starts the saga and turns what it came to into the answer to keep; undefined when there is none in time. */
  async function place(order: OrderInput, takeover: boolean): Promise<{ status: number; body: object } | undefined> {
    const placed = await placeOrder(client, order, deps.taskQueue, deps.answerTimeoutMs, deps.sagaConfig);
    const { orderId } = order;
    switch (placed.kind) {
      case 'late':
        return undefined;
      case 'duplicate':
        // Carrying on a placement whose process died: its saga did start; the order's row says how far it got.
        if (takeover) return fromRow(order);
        return {
          status: 409,
          body: { error: 'order_exists', field: 'orderId', message: `orderId: ${orderId} is already placed` },
        };
      case 'ended':
        // A run that ended refusing the order answers with its reason. One stopped before it answered
        // (Terminate, say) refused nothing: the row says whether the order was written, and an open
        // order goes on (the sweeper starts its saga again).
        return (await openOrder(order)) ?? (await refusal(placed.handle, undefined)) ?? fromRow(order);
      case 'answered':
        if (placed.acceptance.accepted)
          return { status: 202, body: { orderId, status: placed.acceptance.status, url: orderUrl(orderId) } };
        return refusal(placed.handle, placed.acceptance);
    }
  }

  /**
   * A refused order's answer: its business reason is the type of the failure its run ends with.
   * Without the saga's refusal (`acceptance`), a run that ended any other way (terminated, cancelled,
   * timed out, completed) or had not ended in time refused nothing: undefined.
   */
  async function refusal(handle: WorkflowHandle, acceptance: Acceptance): Promise<{ status: number; body: object }>;
  async function refusal(
    handle: WorkflowHandle,
    acceptance: undefined,
  ): Promise<{ status: number; body: object } | undefined>;
  async function refusal(
    handle: WorkflowHandle,
    acceptance: Acceptance | undefined,
  ): Promise<{ status: number; body: object } | undefined> {
    const orderId = orderIdOf(handle.workflowId) ?? handle.workflowId;
    if (acceptance?.status === 'ALREADY_SETTLED')
      return {
        status: 409,
        body: {
          error: 'already_settled',
          orderId,
          message: acceptance.reason ?? 'the order was settled by an earlier run',
        },
      };
    let type: string | undefined;
    let failed = false; // the run ended with a failure of the saga's own (an ApplicationFailure)
    let message = acceptance?.reason;
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        handle.result(),
        new Promise((_, reject) => (timer = setTimeout(() => reject(new Error('late')), REFUSAL_OUTCOME_MS))),
      ]);
    } catch (err) {
      const cause = err instanceof WorkflowFailedError ? err.cause : undefined;
      if (cause instanceof ApplicationFailure) {
        failed = true;
        type = cause.type ?? undefined;
        message ??= cause.message;
      }
    } finally {
      clearTimeout(timer);
    }
    if (!acceptance && !failed) return undefined;
    const known = type ? REFUSALS[type] : undefined;
    return {
      status: known?.status ?? 409,
      body: { error: known?.error ?? 'order_failed', orderId, message: message ?? 'the saga refused the order' },
    };
  }

  /**
   * The answer the order's row gives, for a placement carried on after its first process died or whose
   * run was stopped before it answered. No row: see neverPlaced.
   */
  async function fromRow(order: OrderInput): Promise<{ status: number; body: object } | undefined> {
    const row = await orders.orderRow(order.orderId);
    return row ? rowAnswer(order.orderId, row.status, row.reason) : neverPlaced(order);
  }

  /** The answer an order's row gives: failed or cancelled, order_failed; else accepted, with its status. */
  function rowAnswer(orderId: string, status: OrderStatus, reason: string | null): { status: number; body: object } {
    if (status === 'FAILED' || status === 'CANCELLED')
      return { status: 409, body: { error: 'order_failed', orderId, message: reason ?? `order ${status}` } };
    return { status: 202, body: { orderId, status, url: orderUrl(orderId) } };
  }

  /** An order whose row is open goes on, whatever its run came to (the sweeper starts a stopped saga again). */
  async function openOrder(order: OrderInput): Promise<{ status: number; body: object } | undefined> {
    const row = await orders.orderRow(order.orderId);
    return row && !isTerminal(row.status) ? rowAnswer(order.orderId, row.status, row.reason) : undefined;
  }

  /**
   * An order with no row. Its run still open (or gone): no answer yet. Its run failed refusing it
   * (InvalidOrder, say): that refusal. Its run closed otherwise before it wrote the row: the order is
   * marked never placed (recordNeverPlaced: its row FAILED, so a createOrder still in flight finds it
   * settled and changes nothing), and the row answers: order_failed, or the row that came first.
   */
  async function neverPlaced(order: OrderInput): Promise<{ status: number; body: object } | undefined> {
    const run = await client.workflow
      .getHandle(workflowIdFor(order.orderId))
      .describe()
      .catch((err: unknown) => {
        if (err instanceof WorkflowNotFoundError) return undefined;
        throw err;
      });
    if (!run?.closeTime) return undefined;
    if (run.status.name === 'FAILED') {
      const refused = await refusal(client.workflow.getHandle(run.workflowId, run.runId), undefined);
      if (refused) return refused;
    }
    const how = STOPPED[run.status.name] ?? `ended (${run.status.name})`;
    await recordNeverPlaced(db, order, `the order's saga was ${how} before it wrote the order; nothing was placed`);
    const row = await orders.orderRow(order.orderId);
    return row ? rowAnswer(order.orderId, row.status, row.reason) : undefined;
  }

  app.get('/v1/orders/:id', async (c) => {
    const id = c.req.param('id');
    const order = v.is(IdSchema, id) ? await store.order(c.get('caller').storefront, id) : undefined;
    if (!order) return refuse(404, 'not_found', `no order ${JSON.stringify(id)}`);
    return c.json(order);
  });

  // The cancel's body is optional ({"reason": …}); one that is sent is JSON and within the size limit.
  app.post(
    '/v1/orders/:id/cancel',
    (c, next) => (hasBody(c) ? jsonBody(MAX_BODY_BYTES)(c, next) : next()),
    async (c) => {
      const { storefront } = c.get('caller');
      const id = c.req.param('id');
      if (!v.is(IdSchema, id) || !(await store.placedBy(storefront, id)))
        return refuse(404, 'not_found', `no order ${JSON.stringify(id)}`);
      const body = hasBody(c) ? parseWith(CancelBody, await readJson(c), invalidRequest, 'body') : undefined;
      const reason = body?.reason ?? 'cancelled through the orders API';
      // The same Idempotency-Key is the same request: it gets its first decision again.
      const header = c.req.header('idempotency-key');
      const requestId = header
        ? `api-${sha256(`${storefront}\n${idempotencyKey(header)}`).slice(0, 40)}`
        : randomUUID();
      // Placed a moment ago, its saga may not have written the row yet.
      for (const by = Date.now() + ROW_WAIT_MS; !(await orders.orderExists(id));) {
        if (Date.now() >= by) return refuse(409, 'not_ready', `order ${id} has no row yet; send the cancel again`);
        await new Promise((r) => setTimeout(r, 100));
      }
      const decision = await orders.decideCancel({ orderId: id, requestId, reason });
      if (decision.outcome === 'refused') {
        const row = await orders.orderRow(id);
        const error =
          row && isTerminal(row.status) && !isPastPivot(row.status)
            ? 'already_ended'
            : row?.status === 'COMPENSATING'
              ? 'already_compensating'
              : 'past_pivot';
        return refuse(409, error, decision.message ?? 'cancel refused');
      }
      // Recorded on the order: the cancel stands whatever happens to the run. The Signal wakes it.
      try {
        await sendRequest(
          client.workflow.getHandle(workflowIdFor(id)),
          { command: 'cancel', reason },
          { waitMs: SIGNAL_WAIT_MS, requestId, untilSeen: true },
        );
      } catch (err) {
        // A closed or missing run: the sweeper starts the saga again from the row, which honours the cancel.
        if (!(err instanceof WorkflowNotFoundError))
          log('cancel-signal-failed', { orderId: id, message: (err as Error).message });
      }
      return c.json(
        { orderId: id, cancel: 'accepted', ...(decision.message ? { message: decision.message } : {}) },
        202,
      );
    },
  );

  app.get('/v1/orders', async (c) => {
    const query = c.req.queries();
    for (const [name, values] of Object.entries(query)) {
      if (!QUERY_PARAMS.includes(name)) return refuse(400, 'invalid_query', `${name}: unknown parameter`, name);
      if (values.length > 1) return refuse(400, 'invalid_query', `${name}: given more than once`, name);
    }
    const one = (name: string): string | undefined => query[name]?.[0];
    const status = one('status');
    if (status !== undefined && !isOrderStatus(status))
      return refuse(400, 'invalid_query', 'status: not an order status', 'status');
    const customer = one('customer');
    if (customer !== undefined && !v.is(IdSchema, customer))
      return refuse(400, 'invalid_query', 'customer: not a customer ID', 'customer');
    const cursorText = one('cursor');
    const cursor = cursorText === undefined ? undefined : decodeCursor(cursorText);
    if (cursorText !== undefined && !cursor)
      return refuse(400, 'invalid_query', 'cursor: not a cursor this API gave', 'cursor');
    const limitText = one('limit');
    const limit = limitText === undefined ? PAGE_DEFAULT : Number(limitText);
    if (!/^\d{1,3}$/.test(limitText ?? '1') || !Number.isInteger(limit) || limit < 1 || limit > PAGE_MAX)
      return refuse(400, 'invalid_query', `limit: a whole number from 1 to ${PAGE_MAX}`, 'limit');
    const page = await store.orders({
      storefront: c.get('caller').storefront,
      ...(status ? { status } : {}),
      ...(customer ? { customerId: customer } : {}),
      ...(cursor ? { cursor } : {}),
      limit,
    });
    return c.json({ orders: page.orders, ...(page.next ? { next: encodeCursor(page.next) } : {}) });
  });

  return app;
}
