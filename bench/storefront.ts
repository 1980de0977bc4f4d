/**
 * The storefront's edges: `POST /v1/orders` to its early answer (the orders API, api/app.ts, served
 * over HTTP on loopback with a key of its own) beside `client.ts place`'s early answer (the same
 * Update-with-Start, orders/place-order.ts, as the command measures it), one order at a time on an idle
 * stack, alternating; and the order events one relay delivers per second (ops/event-relay.ts) to a
 * receiver on loopback that checks each signature (scripts/chaos/receiver.ts). Its own dev server,
 * provider and worker (the production worker, in this process); Postgres is the bench's.
 */
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import { createApiApp } from '../api/app';
import { createPool } from '../db/pool';
import type { OrderInput } from '../domain/order';
import { createApiKey } from '../orders/api-keys';
import { startEventRelay } from '../ops/event-relay';
import { placeOrder } from '../orders/place-order';
import { jsonServer } from '../platform/http';
import { stopProcess } from '../platform/processes';
import { startReceiver } from '../scripts/chaos/receiver';
import { startDevServer } from '../servers/temporal-dev';
import { median, percentile, progress } from './measure';
import { benchDataConverter, insertBenchProducts, runBenchWorkers, startBenchProvider } from './stack';

export interface StorefrontOptions {
  /** Orders each way (API, place), one at a time. */
  orders: number;
  /** Events for the relay, over orders of 4 events each. */
  events: number;
}

export interface StorefrontResult {
  orders: number;
  api: { p50: number; p99: number };
  place: { p50: number; p99: number };
  relay: { events: number; seconds: number; perSecond: number; redelivered: number };
}

const stats = (xs: number[]): { p50: number; p99: number } => {
  const sorted = [...xs].sort((a, b) => a - b);
  return { p50: Math.round(median(sorted)), p99: Math.round(percentile(sorted, 99)) };
};

export async function measureStorefront(url: string, opts: StorefrontOptions): Promise<StorefrontResult> {
  const stops: (() => Promise<unknown>)[] = [];
  try {
    progress('storefront: starting the dev server, the provider, a worker and the orders API…');
    const dataConverter = benchDataConverter();
    const env = await startDevServer({ logLevel: 'error', client: { dataConverter } });
    stops.push(() => env.teardown());
    const provider = await startBenchProvider(url);
    stops.push(() => stopProcess(provider.child));
    const db = createPool(url, { max: 10 });
    stops.push(() => db.end());
    const taskQueue = `bench-storefront-${process.pid}`;
    stops.push(await runBenchWorkers(env, db, provider.url, taskQueue, { dataConverter }));
    const app = createApiApp({
      db,
      client: env.client,
      taskQueue,
      ratePerMinute: 1_000_000,
      corsOrigins: [],
      answerTimeoutMs: 30_000,
      log: () => undefined,
    });
    const server = jsonServer(app);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    stops.push(
      () =>
        new Promise<void>((resolve) => {
          server.close(() => resolve());
          server.closeAllConnections();
        }),
    );
    const api = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const { key } = await createApiKey(db, 'bench');
    const sku = await insertBenchProducts(db, `BENCH-SF-${Date.now()}`, 1);
    const order = (i: number, way: string): OrderInput => ({
      orderId: `bench-sf-${way}-${Date.now()}-${i}`,
      customerId: `bench-sf-${i}`,
      currency: 'USD',
      paymentMethod: 'tok_visa',
      items: [{ sku: `${sku}-0`, qty: 1, unitPriceCents: 100 }],
    });

    const viaApi: number[] = [];
    const viaPlace: number[] = [];
    // One warm-up each way, then the two alternate, so drift hits both alike.
    for (let i = -1; i < opts.orders; i++) {
      const body = JSON.stringify(order(i, 'api'));
      const t0 = performance.now();
      const res = await fetch(`${api}/v1/orders`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${key}`,
          'idempotency-key': `bench-${i}-${Date.now()}`,
          'content-type': 'application/json',
        },
        body,
      });
      const answered = performance.now() - t0;
      if (res.status !== 202) throw new Error(`POST /v1/orders answered ${res.status}: ${await res.text()}`);
      await res.arrayBuffer();
      const placed = await placeOrder(env.client, order(i, 'place'), taskQueue, 30_000);
      if (placed.kind !== 'answered' || !placed.acceptance.accepted)
        throw new Error(`place: ${placed.kind === 'answered' ? placed.acceptance.status : placed.kind}`);
      if (i >= 0) {
        viaApi.push(answered);
        viaPlace.push(placed.answerMs);
      }
      progress(`storefront: ${i + 1}/${opts.orders} orders each way`);
    }

    // The relay: events over orders of 4 each, one relay, a receiver that takes every one.
    progress(`storefront: one relay delivering ${opts.events} events…`);
    const prefix = `bench-ev-${Date.now()}`;
    const orders = Math.ceil(opts.events / 4);
    await db.query({
      text: `INSERT INTO orders (order_id, customer_id, status, currency, total_cents, items, payment_method, workflow_id)
             SELECT $1 || '-' || g, 'bench', 'COMPLETED', 'USD', 100, '[]'::jsonb, 'tok_visa', 'order:' || $1 || '-' || g
               FROM generate_series(1, $2::int) g`,
      values: [prefix, orders],
    });
    await db.query({
      text: `INSERT INTO order_events (order_id, seq, kind, data)
             SELECT $1 || '-' || g, s, 'order.accepted', '{"status":"RESERVED"}'::jsonb
               FROM generate_series(1, $2::int) g, generate_series(1, 4) s`,
      values: [prefix, orders],
    });
    const secret = 'bench-secret-0123456789abcdef';
    const receiver = await startReceiver(secret);
    stops.push(() => receiver.close());
    const total = orders * 4;
    const t0 = performance.now();
    const relay = startEventRelay(db, { url: receiver.url, secret }, { idleMs: 20 });
    try {
      const until = Date.now() + 600_000;
      // The orders placed above have their events too: the relay sends them as well; these are counted.
      const mine = () => new Set(receiver.taken.filter((e) => e.orderId.startsWith(prefix)).map((e) => e.id)).size;
      while (mine() < total) {
        if (Date.now() > until) throw new Error(`the relay delivered ${receiver.taken.length} of ${total} in 10 min`);
        await new Promise((r) => setTimeout(r, 20));
      }
    } finally {
      await relay.stop();
    }
    const seconds = (performance.now() - t0) / 1000;
    if (receiver.refused.length) throw new Error(`the receiver refused ${receiver.refused.length} signature(s)`);
    progress('');
    return {
      orders: opts.orders,
      api: stats(viaApi),
      place: stats(viaPlace),
      relay: {
        events: total,
        seconds: Math.round(seconds * 10) / 10,
        perSecond: Math.round(total / seconds),
        redelivered: receiver.taken.filter((e) => e.orderId.startsWith(prefix)).length - total,
      },
    };
  } finally {
    for (const stop of stops.reverse()) await stop().catch(() => undefined);
  }
}
