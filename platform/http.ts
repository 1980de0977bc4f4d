/**
 * The JSON HTTP edge, for the payment provider and the worker's metrics endpoint: hono apps on Node's
 * HTTP server, and every answer is JSON, the framework's own refusals and Node's included.
 */
import http, { STATUS_CODES, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { getRequestListener, type HttpBindings } from '@hono/node-server';
import { Hono, type Context, type MiddlewareHandler } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import type { ContentfulStatusCode } from 'hono/utils/http-status';

export type JsonEnv = { Bindings: HttpBindings };

/** The body of every refusal (the provider's wire type ApiError has this shape). */
export interface ErrorBody {
  error: string;
  message: string;
  field?: string;
}

/** A refusal: the app answers it as `status` with `body` (see jsonApp). */
export class HttpError extends Error {
  constructor(
    readonly status: ContentfulStatusCode,
    readonly body: ErrorBody,
  ) {
    super(body.message);
  }
}

/** A hono app whose errors are JSON: an HttpError as it says, anything else a 500 (after `onError`). */
export function jsonApp<E extends JsonEnv = JsonEnv>(onError?: (err: Error) => void): Hono<E> {
  const app = new Hono<E>();
  app.onError((err, c) => {
    if (err instanceof HttpError) return c.json(err.body, err.status);
    onError?.(err);
    return c.json({ error: 'internal', message: 'internal error' }, 500);
  });
  return app;
}

/** The path as the client sent it (not percent-decoded). */
export const rawPath = (c: Context): string => new URL(c.req.url).pathname;

/** A JSON body: application/json, at most `maxBytes` (refused by its Content-Length before reading). */
export function jsonBody(maxBytes: number): MiddlewareHandler {
  const size = bodyLimit({
    maxSize: maxBytes,
    onError: () => {
      throw new HttpError(413, { error: 'body_too_large', message: `body over ${maxBytes / 1024} KiB` });
    },
  });
  return async (c, next) => {
    const type = (c.req.header('content-type') ?? '').split(';')[0]!.trim().toLowerCase();
    if (type !== 'application/json') {
      throw new HttpError(415, {
        error: 'unsupported_media_type',
        field: 'Content-Type',
        message: 'Content-Type: must be application/json',
      });
    }
    return size(c, next);
  };
}

/** The body, parsed (its schema checks its shape). */
export async function readJson(c: Context): Promise<unknown> {
  const text = await c.req.text();
  try {
    return JSON.parse(text);
  } catch {
    throw new HttpError(400, { error: 'invalid_json', message: 'body must be JSON' });
  }
}

/** A whole HTTP response, for a socket no ServerResponse is attached to. */
function rawJson(status: number, body: ErrorBody): string {
  const text = JSON.stringify(body);
  return `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(text)}\r\nconnection: close\r\n\r\n${text}`;
}

function sendJson(res: ServerResponse, status: number, body: ErrorBody): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

const invalidPath = (): Response =>
  new Response(JSON.stringify({ error: 'invalid_path', message: 'the request target is not a valid path' }), {
    status: 400,
    headers: { 'content-type': 'application/json' },
  });

/** How long a connection may keep sending a refused body after its answer, before it is cut. */
const LINGER_MS = 5_000;
const lingering = new WeakSet<Socket>();
const currentRequest = new WeakMap<Socket, IncomingMessage>();

/**
 * A lingering close. When Node closes a connection after its answer (Connection: close) while the
 * request's body is still arriving (a 413 refused it by its Content-Length, or after reading part
 * of a chunked one, or a 401 before reading it), closing the socket with unread bytes makes the
 * kernel send a reset, and the reset can reach the client before it has read the answer: it sees
 * none. Instead, send FIN after the answer, read and drop the rest of the body, and close when the
 * client does, or after LINGER_MS.
 */
function lingerOnRefusal(req: IncomingMessage): void {
  const socket = req.socket as Socket & { destroySoon(): void };
  currentRequest.set(socket, req);
  if (lingering.has(socket)) return;
  lingering.add(socket);
  const closeSoon = socket.destroySoon.bind(socket);
  socket.destroySoon = () => {
    const unread = currentRequest.get(socket);
    if (!unread || unread.complete || socket.destroyed) return closeSoon();
    socket.end();
    unread.removeAllListeners('data');
    unread.resume();
    socket.resume();
    const timer = setTimeout(() => socket.destroy(), LINGER_MS);
    timer.unref();
    socket.once('close', () => clearTimeout(timer));
  };
}

/**
 * Node's HTTP server running `app`, whose answer to a request Node cannot even parse (a bad request
 * line, a header with forbidden bytes, headers too large, a broken chunked body), or the adapter
 * cannot turn into a URL, is a JSON 4xx too, instead of a plain-text one.
 */
export function jsonServer<E extends JsonEnv>(app: Hono<E>): http.Server {
  // A body the app refused unread (413 by its Content-Length) is left to Node and lingerOnRefusal:
  // the adapter's own clean-up would cut the connection after 500 ms, and the reset can take the
  // answer with it.
  const listener = getRequestListener(app.fetch, { errorHandler: invalidPath, autoCleanupIncoming: false });
  // Nothing here needs the Host header: every URL is built on one origin, whatever Host says (or
  // without one, where Node would answer a plain-text 400 itself).
  const server = http.createServer({ requireHostHeader: false }, (req, res) => {
    req.headers.host = 'localhost';
    lingerOnRefusal(req);
    void listener(req, res);
  });
  server.on('clientError', (err: NodeJS.ErrnoException, socket) => {
    // A response already under way (a body that broke after its headers were read) is cut, not doubled.
    const inFlight = (socket as unknown as { _httpMessage?: { headersSent: boolean } })._httpMessage;
    if (!socket.writable || err.code === 'ECONNRESET' || inFlight?.headersSent) return void socket.destroy();
    const status = err.code === 'HPE_HEADER_OVERFLOW' ? 431 : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 408 : 400;
    socket.end(rawJson(status, { error: 'bad_request', message: 'malformed HTTP request' }));
  });
  // An Expect header other than 100-continue, and CONNECT, never reach the app: answer them here.
  server.on('checkExpectation', (_req, res: ServerResponse) =>
    sendJson(res, 417, { error: 'expectation_failed', message: 'only Expect: 100-continue is supported' }),
  );
  server.on('connect', (_req, socket) => {
    // Node has taken its own handlers off this socket: a reset must not become an uncaught error.
    socket.on('error', () => socket.destroy());
    socket.end(rawJson(405, { error: 'method_not_allowed', message: 'CONNECT is not allowed' }), () =>
      socket.destroy(),
    );
  });
  return server;
}
