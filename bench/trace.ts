/**
 * One order, traced: where its milliseconds go. Starts an OTLP/HTTP receiver of its own (loopback),
 * the dev server, the provider as its own process exporting to that receiver, the production worker
 * (createOrderWorkers, in this process, traced) and a traced client; places a warm-up order, then
 * the one measured, and collects that order's spans: the client's, the workflow's (from the sandbox),
 * the activities', the worker's SQL and HTTP calls, the provider's requests and SQL, plus the
 * workflow's and activities' task times from its history. Everything is stopped on the way out.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Client } from '@temporalio/client';
import { createPool } from '../db/pool';
import { workflowIdFor, type OrderInput } from '../domain/order';
import { stopProcess } from '../platform/processes';
import { startTracing, type Tracing } from '../platform/tracing';
import { startDevServer } from '../servers/temporal-dev';
import { progress } from './measure';
import { benchDataConverter, insertBenchProducts, runBenchWorkers, startBenchProvider } from './stack';
import { buildTrace, spansFromHistory, startOtlpReceiver, type RawSpan, type TraceResult } from './trace-model';

export type { TraceResult, TraceSpan, Category } from './trace-model';
export { CATEGORIES } from './trace-model';

const PROVIDER_SERVICE = 'order-saga-provider';
const ORDER_TIMEOUT_MS = 60_000;
const FLUSH_TIMEOUT_MS = 15_000;

/** Resolves with `p`, or rejects naming `what` after `ms`. */
async function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      p,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Traces one order on the database at `url` (migrated): returns its spans, the time by category and
 * the largest span. Needs nothing else running; takes about 15 s (the servers, one workflow bundle).
 * `warmUps` orders (1) go first, untraced by the result, so the measured one meets a warm worker.
 */
export async function traceOneOrder(url: string, opts: { warmUps?: number } = {}): Promise<TraceResult> {
  const receiver = await startOtlpReceiver();
  const stops: (() => Promise<unknown>)[] = [() => receiver.close()];
  const stopAll = async (): Promise<void> => {
    for (const stop of stops.reverse()) await within(stop(), 15_000, 'stopping').catch(() => undefined);
  };
  try {
    // This process: the worker's service (global: pg and fetch instrumented, context across awaits),
    // and a client of its own name beside it.
    const workerTracing = startTracing('order-saga-worker', { endpoint: receiver.url });
    if (!workerTracing) throw new Error('tracing did not start');
    stops.push(() => workerTracing.shutdown());
    const clientTracing = startTracing('order-saga-client', { endpoint: receiver.url, global: false })!;
    stops.push(() => clientTracing.shutdown());

    progress('trace: starting the dev server and the provider…');
    const dataConverter = benchDataConverter();
    const env = await startDevServer({ logLevel: 'error' });
    stops.push(() => env.teardown());
    const provider = await startBenchProvider(url, {
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_SERVICE_NAME: PROVIDER_SERVICE,
      OTEL_BSP_SCHEDULE_DELAY: '100', // its spans reach the receiver soon after the order
    });
    stops.push(() => stopProcess(provider.child));
    const db = createPool(url, { max: 20 });
    stops.push(() => db.end());

    const taskQueue = `bench-trace-${process.pid}`;
    progress('trace: bundling the workflows (with the tracing interceptors)…');
    stops.push(await runBenchWorkers(env, db, provider.url, taskQueue, { dataConverter, tracing: workerTracing }));
    const client = new Client({
      connection: env.connection,
      namespace: env.namespace ?? 'default',
      dataConverter,
      interceptors: clientTracing.clientInterceptors(),
    });

    const sku = `BENCH-TRACE-${Date.now()}`;
    await insertBenchProducts(db, sku, 2);
    const order = async (i: number): Promise<{ traceId: string; workflowId: string }> => {
      const input: OrderInput = {
        orderId: `bench-trace-${Date.now()}-${i}`,
        customerId: `bench-${i}`,
        currency: 'USD',
        paymentMethod: 'tok_visa',
        items: [{ sku: `${sku}-${i % 2}`, qty: 1, unitPriceCents: 100 }],
      };
      const workflowId = workflowIdFor(input.orderId);
      const tracer = clientTracing.tracer('bench');
      return tracer.startActiveSpan(`order ${input.orderId} (start → result)`, async (span) => {
        try {
          const r = (await within(
            client.workflow.execute('orderSaga', { taskQueue, workflowId, args: [input] }),
            ORDER_TIMEOUT_MS,
            `order ${input.orderId}`,
          )) as { status: string };
          if (r.status !== 'COMPLETED') throw new Error(`traced order ended ${r.status}`);
          return { traceId: span.spanContext().traceId, workflowId };
        } finally {
          span.end();
        }
      });
    };
    const warmUps = opts.warmUps ?? 1;
    for (let i = 0; i < warmUps; i++) {
      progress(`trace: warm-up order ${i + 1}/${warmUps}…`);
      await order(i);
    }
    progress('trace: the traced order…');
    const { traceId, workflowId } = await order(warmUps);

    const history = await client.workflow.getHandle(workflowId).fetchHistory();
    await flushUntil(receiver.trace.bind(receiver), traceId, [workerTracing, clientTracing]);
    progress('');
    const spans = receiver.trace(traceId);
    const run = spans.find((s) => s.name.startsWith('RunWorkflow:'));
    const root = spans.find((s) => !s.parentSpanId);
    const fromHistory = spansFromHistory(history, traceId, run?.spanId ?? root?.spanId);
    return buildTrace([...spans, ...fromHistory], traceId, PROVIDER_SERVICE);
  } finally {
    await stopAll();
  }
}

/**
 * Flushes this process's exporters, then waits (bounded) until the receiver holds the order's root
 * span, its workflow run and a span of the provider's process, and no more arrive for a moment.
 */
async function flushUntil(trace: (id: string) => RawSpan[], traceId: string, tracings: Tracing[]): Promise<void> {
  const deadline = Date.now() + FLUSH_TIMEOUT_MS;
  let last = -1;
  while (Date.now() < deadline) {
    for (const t of tracings) await within(t.forceFlush(), 5_000, 'flushing the spans');
    const spans = trace(traceId);
    const complete =
      spans.some((s) => !s.parentSpanId) &&
      spans.some((s) => s.name.startsWith('RunWorkflow:')) &&
      spans.some((s) => s.service === PROVIDER_SERVICE);
    if (complete && spans.length === last) return;
    last = spans.length;
    await sleep(300);
  }
  const have = trace(traceId);
  throw new Error(
    `trace ${traceId}: incomplete after ${FLUSH_TIMEOUT_MS} ms (${have.length} spans: ${[...new Set(have.map((s) => s.service))].join(', ')})`,
  );
}
