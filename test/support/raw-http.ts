/**
 * HTTP over raw sockets for the fuzz tests: the bytes sent are exactly the test's (a malformed request
 * line or header included), and the one response is read until the server closes. And a small seeded
 * generator, so a failure reproduces.
 */
import net from 'node:net';

export interface Reply {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** Sends exactly these bytes on a new connection and reads the one response until the server closes. */
export function raw(port: number, head: string, body: Buffer = Buffer.alloc(0)): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => {
      sock.destroy();
      reject(new Error(`no answer within 10 s to ${JSON.stringify(head.slice(0, 120))}`));
    }, 10_000);
    sock.on('data', (c: Buffer) => chunks.push(c));
    sock.on('error', () => undefined); // EPIPE/ECONNRESET once the server has answered early (413)
    sock.on('close', () => {
      clearTimeout(timer);
      const all = Buffer.concat(chunks);
      const split = all.indexOf('\r\n\r\n');
      const m = /^HTTP\/1\.1 (\d{3})/.exec(all.toString('latin1'));
      if (split < 0 || !m)
        return reject(
          new Error(
            `no HTTP response to ${JSON.stringify(head.slice(0, 120))}: ${JSON.stringify(all.toString('latin1').slice(0, 200))}`,
          ),
        );
      const headers: Record<string, string> = {};
      for (const line of all.subarray(0, split).toString('latin1').split('\r\n').slice(1)) {
        const i = line.indexOf(':');
        headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
      }
      let rest = all.subarray(split + 4);
      if (headers['transfer-encoding'] === 'chunked') {
        const parts: Buffer[] = [];
        for (;;) {
          const eol = rest.indexOf('\r\n');
          const size = parseInt(rest.subarray(0, eol).toString('latin1'), 16);
          if (!size) break;
          parts.push(rest.subarray(eol + 2, eol + 2 + size));
          rest = rest.subarray(eol + 2 + size + 2);
        }
        rest = Buffer.concat(parts);
      }
      resolve({ status: Number(m[1]), headers, body: rest.toString('utf8') });
    });
    sock.write(head);
    // A large body goes in pieces, and stops once the server has answered and closed.
    let offset = 0;
    const more = (): void => {
      while (offset < body.length && !sock.destroyed) {
        const piece = body.subarray(offset, offset + 65_536);
        offset += piece.length;
        if (!sock.write(piece)) return void sock.once('drain', more);
      }
    };
    more();
  });
}

export interface Req {
  method: string;
  path: string;
  headers?: Record<string, string>;
  body?: Buffer | string;
  /** Send the body chunked (no Content-Length). */
  chunked?: boolean;
}

export function request(port: number, r: Req): Promise<Reply> {
  const body = typeof r.body === 'string' ? Buffer.from(r.body) : (r.body ?? Buffer.alloc(0));
  const lines = [`${r.method} ${r.path} HTTP/1.1`, 'host: 127.0.0.1', 'connection: close'];
  for (const [k, v] of Object.entries(r.headers ?? {})) lines.push(`${k}: ${v}`);
  if (r.body !== undefined && !r.chunked) lines.push(`content-length: ${body.length}`);
  if (r.chunked) {
    lines.push('transfer-encoding: chunked');
    const framed = Buffer.concat([Buffer.from(`${body.length.toString(16)}\r\n`), body, Buffer.from('\r\n0\r\n\r\n')]);
    return raw(port, `${lines.join('\r\n')}\r\n\r\n`, framed);
  }
  return raw(port, `${lines.join('\r\n')}\r\n\r\n`, body);
}

/** mulberry32: a small seeded generator. */
export function rng(seed: number): { int(n: number): number; pick<T>(xs: readonly T[]): T } {
  let a = seed >>> 0;
  const next = (): number => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return { int: (n) => Math.floor(next() * n), pick: (xs) => xs[Math.floor(next() * xs.length)]! };
}

/** Pieces of a malformed path segment: bad and overlong % escapes, control bytes, dots, slashes. */
