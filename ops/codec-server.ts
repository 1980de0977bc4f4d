/**
 * The codec server: Temporal's remote codec protocol (POST /encode, POST /decode, a JSON body
 * `{ "payloads": [Payload…] }` with base64 metadata values and data, the same shape back), over the
 * project's payload codec, so the Web UI (and `temporal … --codec-endpoint`) can show payloads that
 * the server only holds encrypted.
 *
 * Who may call it:
 *  - a bearer token: `Authorization: Bearer <token>` (the Temporal CLI's `--codec-auth`), or the token
 *    as the first path segment, `/<token>/decode` (the Web UI calls `<endpoint>/decode` and cannot
 *    send a header of its own: its endpoint is `http://host:port/<token>`). Anything else gets 401;
 *  - from a browser, only the Web UI's origins (CORS); another origin gets 403 and no CORS headers.
 */
import { timingSafeEqual } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Payload, PayloadCodec } from '@temporalio/common';

export interface CodecServerOptions {
  codec: PayloadCodec;
  /** The secret every request must carry (at least 16 characters). */
  token: string;
  /** The Web UI's origins, e.g. http://127.0.0.1:8233; a browser on any other origin is refused. */
  allowOrigins: string[];
  host?: string;
  /** 0: any free port. */
  port?: number;
  /** Largest request body, in bytes (the Web UI sends a page of history at a time). */
  maxBodyBytes?: number;
  log?: (line: string) => void;
}

export interface CodecServer {
  /** http://host:port, the address for `--codec-endpoint` with `--codec-auth "Bearer <token>"`. */
  url: string;
  /** The endpoint for the Web UI: url/<token>. */
  uiEndpoint: string;
  token: string;
  close(): Promise<void>;
}

interface JsonPayload {
  metadata?: Record<string, string>;
  data?: string;
}

const fromJson = (p: JsonPayload, at: number): Payload => {
  if (!p || typeof p !== 'object') throw new BadRequest(`payloads[${at}] must be an object`);
  const metadata: Record<string, Uint8Array> = {};
  for (const [k, v] of Object.entries(p.metadata ?? {})) {
    if (typeof v !== 'string') throw new BadRequest(`payloads[${at}].metadata.${k} must be a base64 string`);
    metadata[k] = Buffer.from(v, 'base64');
  }
  if (p.data !== undefined && typeof p.data !== 'string')
    throw new BadRequest(`payloads[${at}].data must be a base64 string`);
  return { metadata, data: Buffer.from(p.data ?? '', 'base64') };
};

const toJson = (p: Payload): JsonPayload => ({
  metadata: Object.fromEntries(
    Object.entries(p.metadata ?? {}).map(([k, v]) => [k, Buffer.from(v ?? []).toString('base64')]),
  ),
  data: Buffer.from(p.data ?? []).toString('base64'),
});

class BadRequest extends Error {}

const sameSecret = (a: string, b: string): boolean => {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
};

export function startCodecServer(opts: CodecServerOptions): Promise<CodecServer> {
  if (opts.token.length < 16) throw new Error('the codec server token must be at least 16 characters');
  const origins = new Set(opts.allowOrigins.map((o) => o.replace(/\/$/, '')));
  const maxBody = opts.maxBodyBytes ?? 4 * 1024 * 1024;
  const log = opts.log ?? (() => undefined);

  const server = http.createServer((req, res) => {
    const origin = req.headers.origin;
    const send = (status: number, body?: unknown, extra: Record<string, string> = {}): void => {
      const cors: Record<string, string> =
        origin && origins.has(origin) ? { 'access-control-allow-origin': origin, vary: 'Origin' } : {};
      res.writeHead(status, {
        ...cors,
        ...extra,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        'cache-control': 'no-store',
      });
      res.end(body === undefined ? undefined : JSON.stringify(body));
    };
    if (origin && !origins.has(origin)) {
      send(403, { error: 'origin_refused', message: `origin ${origin} may not call this codec server` });
      return;
    }
    const url = new URL(req.url ?? '/', 'http://codec');
    // Alive and ready are one here: it needs nothing but its keys, which it had to start.
    if (req.method === 'GET' && (url.pathname === '/healthz' || url.pathname === '/readyz')) {
      send(200, { ok: true });
      return;
    }
    const segments = url.pathname.split('/').filter(Boolean);
    if (req.method === 'OPTIONS') {
      send(204, undefined, {
        'access-control-allow-methods': 'POST, OPTIONS',
        'access-control-allow-headers': 'content-type, x-namespace, authorization',
        'access-control-max-age': '600',
      });
      return;
    }
    // The token: the bearer header, or the first path segment (then the action follows it).
    const bearer = /^Bearer (.+)$/i.exec(req.headers.authorization ?? '')?.[1];
    let action = segments.length === 1 ? segments[0] : undefined;
    let authorized = bearer !== undefined && sameSecret(bearer, opts.token);
    if (!authorized && segments.length === 2 && sameSecret(segments[0]!, opts.token)) {
      authorized = true;
      action = segments[1];
    }
    if (!authorized) {
      send(401, { error: 'unauthorized', message: 'a codec server token is required (Authorization: Bearer …)' });
      return;
    }
    if (action !== 'encode' && action !== 'decode') {
      send(404, { error: 'not_found', message: 'the codec server answers POST /encode and POST /decode' });
      return;
    }
    if (req.method !== 'POST') {
      send(405, { error: 'method_not_allowed', message: `${req.method} is not allowed; use POST` }, { allow: 'POST' });
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    let tooBig = false;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > maxBody) tooBig = true;
      else chunks.push(c);
    });
    req.on('end', () => {
      void (async () => {
        if (tooBig) {
          send(413, { error: 'too_large', message: `a request body of at most ${maxBody} bytes` });
          return;
        }
        try {
          let body: { payloads?: JsonPayload[] };
          try {
            body = JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}') as { payloads?: JsonPayload[] };
          } catch {
            throw new BadRequest('the body must be JSON: { "payloads": [...] }');
          }
          // Protobuf's JSON leaves an empty list out: `{}` is no payloads (the Temporal CLI sends it).
          const list = body?.payloads ?? [];
          if (!Array.isArray(list)) throw new BadRequest('"payloads" must be an array');
          const payloads = list.map(fromJson);
          const out = action === 'encode' ? await opts.codec.encode(payloads) : await opts.codec.decode(payloads);
          send(200, { payloads: out.map(toJson) });
        } catch (err) {
          const status = err instanceof BadRequest ? 400 : 422;
          log(`codec server: ${action} refused: ${(err as Error).message}`);
          send(status, { error: status === 400 ? 'bad_request' : 'cannot_decode', message: (err as Error).message });
        }
      })();
    });
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, opts.host ?? '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      const url = `http://${opts.host ?? '127.0.0.1'}:${port}`;
      resolve({
        url,
        uiEndpoint: `${url}/${opts.token}`,
        token: opts.token,
        close: () => new Promise((done) => server.close(() => done())),
      });
    });
  });
}
