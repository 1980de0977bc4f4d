/** The HTTP edge shared by the provider and the worker's metrics endpoint: every answer is JSON. */
import http, { STATUS_CODES, type IncomingMessage, type ServerResponse } from 'node:http';

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify(body));
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
    const body = JSON.stringify({ error: 'bad_request', message: 'malformed HTTP request' });
    socket.end(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
    );
  });
  return server;
}
