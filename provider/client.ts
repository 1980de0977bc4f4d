/** A small typed HTTP client for the payment provider. worker.ts builds it; activities receive it. */
import type { FaultCounts, FaultRequest } from './faults';
import {
  IDEMPOTENCY_HEADER,
  REPLAY_HEADER,
  type ApiError,
  type Authorization,
  type AuthorizationCancelResult,
  type AuthorizationInquiry,
  type AuthorizationRequest,
  type CancelResult,
  type Capture,
  type CaptureRequest,
  type Charge,
  type ChargeRequest,
  type Inquiry,
  type Refund,
  type RefundRequest,
} from './api';

export interface ProviderClientOptions {
  baseUrl: string;
  apiKey: string;
  /** Per-request timeout; a timed-out charge may still have happened (inquire before deciding). */
  timeoutMs?: number;
  /** Sent as the `X-Client-Name` header, which the provider's log lines carry (who met a fault). */
  clientName?: string;
}

/** The provider answered with an HTTP error (4xx/5xx). */
export class ProviderHttpError extends Error {
  constructor(
    readonly status: number,
    readonly body: ApiError,
  ) {
    super(`provider answered ${status}: ${body.error}: ${body.message}`);
    this.name = 'ProviderHttpError';
  }
}

/** No answer: connection refused or reset, or the request timed out. The outcome is unknown. */
export class ProviderUnreachableError extends Error {
  constructor(
    message: string,
    readonly timedOut: boolean,
  ) {
    super(message);
    this.name = 'ProviderUnreachableError';
  }
}

export type ChargeOutcome = { http: 201 | 402; charge: Charge; replayed: boolean };

/** The technical cancel's answer: the key is closed (no charge was made, none can be), or its charge. */
export type CancelOutcome = { outcome: 'closed' } | { outcome: 'found'; charge: Charge };

export type AuthorizationOutcome = { http: 201 | 402; authorization: Authorization; replayed: boolean };

/**
 * The technical cancel of an authorization: the key is closed (none was made, none can be), or the
 * authorization, as it is after the cancel (a hold it found is voided).
 */
export type AuthorizationCancelOutcome = { outcome: 'closed' } | { outcome: 'found'; authorization: Authorization };

/** The default per-request timeout. */
export const DEFAULT_PROVIDER_TIMEOUT_MS = 10_000;

export interface ProviderClient {
  /** Each request's timeout, in milliseconds (the worker checks it against the charge attempt's). */
  readonly timeoutMs: number;
  /** A charge under a closed key is refused: ProviderHttpError 410 `key_closed`. */
  charge(key: string, req: ChargeRequest): Promise<ChargeOutcome>;
  /**
   * The inquiry: the charge, a closed key (`status: 'closed'`), or undefined on 404 (not seen yet:
   * right after a timeout that means "not yet", not "never").
   */
  getCharge(key: string): Promise<Inquiry | undefined>;
  /**
   * The technical cancel: the charge made under the key (unchanged), or else the key is closed for
   * good, so a request still on its way can no longer take money. Idempotent.
   */
  cancelCharge(key: string): Promise<CancelOutcome>;
  /** A refund of a charge (`chargeKey`) or of a capture (`captureKey`). */
  refund(key: string, req: RefundRequest): Promise<{ refund: Refund; replayed: boolean }>;
}

/**
 * The authorization calls: a hold, its capture and its void, with an inquiry for each and the
 * technical cancel. As for a charge, a timed-out authorization or capture may still have happened:
 * inquire by its key before deciding (a 404 right after a timeout means "not yet", not "never").
 */
export interface AuthorizationClient {
  /** 201 authorized, 402 declined. A closed key is refused: ProviderHttpError 410 `key_closed`. */
  authorize(key: string, req: AuthorizationRequest): Promise<AuthorizationOutcome>;
  /** The inquiry: the authorization, a closed key (`status: 'closed'`), or undefined on 404 (not seen yet). */
  getAuthorization(key: string): Promise<AuthorizationInquiry | undefined>;
  /**
   * Captures the authorization under `authorizationKey`, once per `captureKey`. A refusal is a
   * ProviderHttpError: 409 `authorization_expired`, `authorization_voided`, `authorization_declined`
   * or `already_captured` for good (the capture key then answers the same, and its inquiry says
   * `failed`), 409 `authorization_processing` (retry), 422 `capture_exceeds_authorization`, 404.
   */
  capture(
    authorizationKey: string,
    captureKey: string,
    req: CaptureRequest,
  ): Promise<{ capture: Capture; replayed: boolean }>;
  /** The capture's inquiry: the capture (`succeeded`, `failed`, `processing`), or undefined on 404. */
  getCapture(captureKey: string): Promise<Capture | undefined>;
  /**
   * Releases the hold. Idempotent (a voided one answers again, `replayed`); a declined one comes back
   * as it is. A captured one is refused: ProviderHttpError 409 `authorization_captured`.
   */
  voidAuthorization(key: string): Promise<{ authorization: Authorization; replayed: boolean }>;
  /**
   * The technical cancel: the authorization made under the key, its hold released, or else the key is
   * closed for good, so a request still on its way can no longer hold money. Idempotent.
   */
  cancelAuthorization(key: string): Promise<AuthorizationCancelOutcome>;
}

export function createProviderClient(opts: ProviderClientOptions): ProviderClient & AuthorizationClient {
  const timeoutMs = opts.timeoutMs ?? DEFAULT_PROVIDER_TIMEOUT_MS;
  async function call(
    method: string,
    path: string,
    key?: string,
    body?: unknown,
  ): Promise<{ status: number; json: unknown; replayed: boolean }> {
    const headers: Record<string, string> = { authorization: `Bearer ${opts.apiKey}` };
    if (opts.clientName) headers['x-client-name'] = opts.clientName;
    if (key) headers[IDEMPOTENCY_HEADER] = key;
    if (body !== undefined) headers['content-type'] = 'application/json';
    let res: Response;
    try {
      res = await fetch(new URL(path, opts.baseUrl), {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(timeoutMs),
      });
    } catch (err) {
      const e = err as Error;
      const timedOut = e.name === 'TimeoutError' || e.name === 'AbortError';
      throw new ProviderUnreachableError(
        `provider ${method} ${path}: ${timedOut ? `no answer in ${timeoutMs} ms` : e.message}`,
        timedOut,
      );
    }
    let json: unknown;
    try {
      json = await res.json();
    } catch (err) {
      throw new ProviderUnreachableError(
        `provider ${method} ${path}: response lost (${(err as Error).message})`,
        false,
      );
    }
    return { status: res.status, json, replayed: res.headers.get(REPLAY_HEADER) === 'true' };
  }
  return {
    timeoutMs,
    async charge(key, req) {
      const r = await call('POST', '/v1/charges', key, req);
      if (r.status === 201 || r.status === 402)
        return { http: r.status, charge: r.json as Charge, replayed: r.replayed };
      throw new ProviderHttpError(r.status, r.json as ApiError);
    },
    async getCharge(key) {
      const r = await call('GET', `/v1/charges/${encodeURIComponent(key)}`);
      if (r.status === 200) return r.json as Inquiry;
      if (r.status === 404) return undefined;
      throw new ProviderHttpError(r.status, r.json as ApiError);
    },
    async cancelCharge(key) {
      const r = await call('POST', `/v1/charges/${encodeURIComponent(key)}/cancel`);
      if (r.status !== 200) throw new ProviderHttpError(r.status, r.json as ApiError);
      const answer = r.json as CancelResult;
      if (answer.outcome === 'closed') return { outcome: 'closed' };
      if (answer.outcome === 'found' && typeof answer.charge === 'object')
        return { outcome: 'found', charge: answer.charge };
      // Never read an answer we do not know as "closed": that would skip a refund.
      throw new Error(`provider POST /v1/charges/…/cancel: unexpected answer ${JSON.stringify(answer).slice(0, 200)}`);
    },
    async refund(key, req) {
      const r = await call('POST', '/v1/refunds', key, req);
      if (r.status === 201) return { refund: r.json as Refund, replayed: r.replayed };
      throw new ProviderHttpError(r.status, r.json as ApiError);
    },
    async authorize(key, req) {
      const r = await call('POST', '/v1/authorizations', key, req);
      if (r.status === 201 || r.status === 402)
        return { http: r.status, authorization: r.json as Authorization, replayed: r.replayed };
      throw new ProviderHttpError(r.status, r.json as ApiError);
    },
    async getAuthorization(key) {
      const r = await call('GET', `/v1/authorizations/${encodeURIComponent(key)}`);
      if (r.status === 200) return r.json as AuthorizationInquiry;
      if (r.status === 404) return undefined;
      throw new ProviderHttpError(r.status, r.json as ApiError);
    },
    async capture(authorizationKey, captureKey, req) {
      const r = await call(
        'POST',
        `/v1/authorizations/${encodeURIComponent(authorizationKey)}/capture`,
        captureKey,
        req,
      );
      if (r.status === 201) return { capture: r.json as Capture, replayed: r.replayed };
      throw new ProviderHttpError(r.status, r.json as ApiError);
    },
    async getCapture(captureKey) {
      const r = await call('GET', `/v1/captures/${encodeURIComponent(captureKey)}`);
      if (r.status === 200) return r.json as Capture;
      if (r.status === 404) return undefined;
      throw new ProviderHttpError(r.status, r.json as ApiError);
    },
    async voidAuthorization(key) {
      const r = await call('POST', `/v1/authorizations/${encodeURIComponent(key)}/void`);
      if (r.status === 200) return { authorization: r.json as Authorization, replayed: r.replayed };
      throw new ProviderHttpError(r.status, r.json as ApiError);
    },
    async cancelAuthorization(key) {
      const r = await call('POST', `/v1/authorizations/${encodeURIComponent(key)}/cancel`);
      if (r.status !== 200) throw new ProviderHttpError(r.status, r.json as ApiError);
      const answer = r.json as AuthorizationCancelResult;
      if (answer.outcome === 'closed') return { outcome: 'closed' };
      if (answer.outcome === 'found' && typeof answer.authorization === 'object')
        return { outcome: 'found', authorization: answer.authorization };
      // Never read an answer we do not know as "closed": that would leave a hold in place.
      throw new Error(
        `provider POST /v1/authorizations/…/cancel: unexpected answer ${JSON.stringify(answer).slice(0, 200)}`,
      );
    },
  };
}

export interface FaultsState {
  rules: (FaultRequest & { id: number; remaining?: number })[];
  /** Faults applied, per kind (all targets). */
  injected: Record<string, number>;
  /** Faults applied, per target and kind. */
  applied: FaultCounts;
}

/** The provider's admin API (fault switches). */
export function createProviderAdmin(opts: { baseUrl: string; adminKey: string }) {
  async function call(method: string, body?: unknown): Promise<unknown> {
    const res = await fetch(new URL('/admin/faults', opts.baseUrl), {
      method,
      headers: { authorization: `Bearer ${opts.adminKey}`, ...(body ? { 'content-type': 'application/json' } : {}) },
      body: body ? JSON.stringify(body) : undefined,
      signal: AbortSignal.timeout(5_000),
    });
    const json = await res.json();
    if (!res.ok) throw new ProviderHttpError(res.status, json as ApiError);
    return json;
  }
  return {
    set: (rule: FaultRequest) => call('POST', rule),
    clear: () => call('DELETE') as Promise<FaultsState>,
    list: () => call('GET') as Promise<FaultsState>,
  };
}
export type ProviderAdmin = ReturnType<typeof createProviderAdmin>;
