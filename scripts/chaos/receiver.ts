/**
 * A real webhook receiver for the order events (the chaos soak's, which flaps, and the tests'): an
 * HTTP server on loopback that checks each
 * signature (platform/webhook-signature.ts) over the raw body, records what it took, and answers as
 * told: `ok`, `fail` (500), `stall` (no answer until told otherwise) or `down` (the socket closed).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { SIGNATURE_HEADER, signatureProblem } from '../../platform/webhook-signature';
import type { OrderEventBody } from '../../ops/event-relay';

export type ReceiverMode = 'ok' | 'fail' | 'stall' | 'down';

export interface Receiver {
  url: string;
  /** Every delivery it took (2xx), in arrival order, and every request it saw. */
  taken: OrderEventBody[];
  seen: number;
  /** Requests whose signature it refused (each answered 400). */
  refused: string[];
  /** Stalled requests waiting now. */
  stalled: number;
  mode: ReceiverMode;
  /** Answers the stalled requests per the current mode. */
  release(): void;
  close(): Promise<void>;
}

export async function startReceiver(secret: string, mode: ReceiverMode = 'ok'): Promise<Receiver> {
  const waiting: (() => void)[] = [];
  const r: Receiver = {
    url: '',
    taken: [],
    seen: 0,
    refused: [],
    stalled: 0,
    mode,
    release: () => waiting.splice(0).forEach((f) => f()),
    close: async () => {
      r.release();
      server.closeAllConnections();
      await new Promise<void>((res) => server.close(() => res()));
    },
  };
  const answer = (req: IncomingMessage, res: ServerResponse, body: string): void => {
    if (r.mode === 'stall') {
      r.stalled++;
      waiting.push(() => {
        r.stalled--;
        answer(req, res, body);
      });
      return;
    }
    if (r.mode === 'down') return void req.socket.destroy();
    if (r.mode === 'fail') return void res.writeHead(500).end('receiver failing on purpose');
    const problem = signatureProblem(secret, req.headers[SIGNATURE_HEADER.toLowerCase()] as string | undefined, body);
    if (problem) {
      r.refused.push(problem);
      return void res.writeHead(400).end(problem);
    }
    r.taken.push(JSON.parse(body) as OrderEventBody);
    res.writeHead(204).end();
  };
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      r.seen++;
      answer(req, res, Buffer.concat(chunks).toString('utf8'));
    });
  });
  await new Promise<void>((res) => server.listen(0, '127.0.0.1', res));
  r.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks/orders`;
  return r;
}
