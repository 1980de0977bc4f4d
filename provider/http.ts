/** The HTTP edge of the provider, shared with the worker's metrics endpoint: every answer is JSON. */
import http, { STATUS_CODES, type IncomingMessage, type ServerResponse } from 'node:http';

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify(body));
}

/** A whole HTTP response, for a socket no ServerResponse is attached to. */
function rawJson(status: number, body: unknown): string {
  const text = JSON.stringify(body);
  return `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(text)}\r\nconnection: close\r\n\r\n${text}`;
}

/**
 * An HTTP server whose answer to a request Node cannot even parse (a bad request line, a header
 * with forbidden bytes, headers too large, a broken chunked body) is a JSON 4xx too, instead of
 * Node's plain-text one.
 */
export function jsonServer(handler: (req: IncomingMessage, res: ServerResponse) => void): http.Server {
  // Without a Host header Node would answer a plain-text 400 itself; nothing here needs the header.
  const server = http.createServer({ requireHostHeader: false }, handler);
  server.on('clientError', (err: NodeJS.ErrnoException, socket) => {
    // A response already under way (a body that broke after its headers were read) is cut, not doubled.
    const inFlight = (socket as unknown as { _httpMessage?: { headersSent: boolean } })._httpMessage;
    if (!socket.writable || err.code === 'ECONNRESET' || inFlight?.headersSent) return void socket.destroy();
    const status = err.code === 'HPE_HEADER_OVERFLOW' ? 431 : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 408 : 400;
    socket.end(rawJson(status, { error: 'bad_request', message: 'malformed HTTP request' }));
  });
  // An Expect header other than 100-continue, and CONNECT, never reach the handler: answer them here.
  server.on('checkExpectation', (_req, res: ServerResponse) => sendJson(res, 417, { error: 'expectation_failed', message: 'only Expect: 100-continue is supported' }));
  server.on('connect', (_req, socket) => {
    // Node has taken its own handlers off this socket: a reset must not become an uncaught error.
    socket.on('error', () => socket.destroy());
    socket.end(rawJson(405, { error: 'method_not_allowed', message: 'CONNECT is not allowed' }), () => socket.destroy());
  });
  return server;
}
