/** The trace bench's model: OTLP/JSON parsing, the receiver, spans from a history, and where the milliseconds go. */
import { afterEach, describe, expect, it } from 'vitest';
import type { temporal } from '@temporalio/proto';
import {
  attribute,
  buildTrace,
  parseOtlpJson,
  spansFromHistory,
  startOtlpReceiver,
  type OtlpReceiver,
} from '../bench/trace-model';
import { formatTimeTable, renderWaterfall } from '../bench/waterfall';
import { startTracing } from '../platform/tracing';

const TRACE = '5b8efff798038103d269b633813fc60c';
const T0 = 1_700_000_000_000; // ms
/** ms after T0 as OTLP's nanosecond string. */
const ns = (ms: number): string => (BigInt(T0) * 1_000_000n + BigInt(Math.round(ms * 1_000_000))).toString();
const str = (key: string, v: string) => ({ key, value: { stringValue: v } });

function span(id: string, parent: string | undefined, name: string, kind: number, from: number, to: number) {
  return {
    traceId: TRACE,
    spanId: id.padStart(16, '0'),
    ...(parent ? { parentSpanId: parent.padStart(16, '0') } : {}),
    name,
    kind,
    startTimeUnixNano: ns(from),
    endTimeUnixNano: ns(to),
    attributes: [] as { key: string; value: { stringValue: string } }[],
  };
}

/** One order in three processes: the client's root, an activity with a query and a provider call. */
const PAYLOAD = {
  resourceSpans: [
    {
      resource: { attributes: [str('service.name', 'order-saga-client')] },
      scopeSpans: [
        {
          scope: { name: 'bench' },
          spans: [span('a1', undefined, 'order', 1, 0, 100), span('a2', 'a1', 'StartWorkflow:orderSaga', 1, 0, 4)],
        },
      ],
    },
    {
      resource: { attributes: [str('service.name', 'order-saga-worker')] },
      scopeSpans: [
        { scope: { name: 'temporal-activity' }, spans: [span('b1', 'a2', 'RunActivity:chargePayment', 1, 20, 60)] },
        {
          scope: { name: '@opentelemetry/instrumentation-pg' },
          spans: [
            { ...span('b2', 'b1', 'pg.query:SELECT app', 3, 30, 40), attributes: [str('db.system', 'postgresql')] },
          ],
        },
        { scope: { name: '@opentelemetry/instrumentation-undici' }, spans: [span('b3', 'b1', 'POST', 3, 44, 56)] },
      ],
    },
    {
      resource: { attributes: [str('service.name', 'order-saga-provider')] },
      scopeSpans: [
        {
          scope: { name: '@opentelemetry/instrumentation-http' },
          spans: [span('c1', 'b3', 'POST', 2, 45, 55), span('c2', 'c1', 'pg.query:INSERT app', 3, 47, 50)],
        },
      ],
    },
  ],
};

describe('OTLP/JSON parsing', () => {
  it('reads resourceSpans → scopeSpans → spans: service, scope, kind, ids and times', () => {
    const spans = parseOtlpJson(PAYLOAD);
    expect(spans).toHaveLength(7);
    const pg = spans.find((s) => s.spanId === '00000000000000b2')!;
    expect(pg).toMatchObject({
      traceId: TRACE,
      parentSpanId: '00000000000000b1',
      service: 'order-saga-worker',
      scope: '@opentelemetry/instrumentation-pg',
      kind: 'client',
      attributes: { 'db.system': 'postgresql' },
    });
    expect(pg.startMs - T0).toBeCloseTo(30, 6);
    expect(pg.endMs - pg.startMs).toBeCloseTo(10, 6);
    expect(spans.find((s) => s.spanId === '00000000000000c1')!.kind).toBe('server');
  });

  it('takes base64 ids, string kinds and numeric nanos too, and skips a span without ids', () => {
    const [s, ...rest] = parseOtlpJson({
      resourceSpans: [
        {
          scopeSpans: [
            {
              spans: [
                {
                  traceId: Buffer.from(TRACE, 'hex').toString('base64'),
                  spanId: Buffer.from('00000000000000a1', 'hex').toString('base64'),
                  name: 'x',
                  kind: 'SPAN_KIND_CLIENT',
                  startTimeUnixNano: 2_000_000,
                  endTimeUnixNano: 5_000_000,
                },
                { name: 'no ids' },
              ],
            },
          ],
        },
      ],
    });
    expect(rest).toHaveLength(0);
    expect(s).toMatchObject({ traceId: TRACE, spanId: '00000000000000a1', kind: 'client', service: 'unknown' });
    expect(s!.endMs - s!.startMs).toBeCloseTo(3, 6);
    expect(parseOtlpJson({})).toEqual([]);
  });
});

describe('where the milliseconds go', () => {
  it('splits the root span exclusively: SQL and provider inside an activity count as themselves', () => {
    const history = spansFromHistory(
      {
        events: [
          { eventId: 2, eventTime: { seconds: T0 / 1000, nanos: 5_000_000 }, workflowTaskScheduledEventAttributes: {} },
          {
            eventId: 3,
            eventTime: { seconds: T0 / 1000, nanos: 6_000_000 },
            workflowTaskStartedEventAttributes: { scheduledEventId: 2 },
          },
          {
            eventId: 4,
            eventTime: { seconds: T0 / 1000, nanos: 15_000_000 },
            workflowTaskCompletedEventAttributes: { scheduledEventId: 2 },
          },
          {
            eventId: 5,
            eventTime: { seconds: T0 / 1000, nanos: 15_000_000 },
            activityTaskScheduledEventAttributes: { activityType: { name: 'chargePayment' } },
          },
          {
            eventId: 6,
            eventTime: { seconds: T0 / 1000, nanos: 18_000_000 },
            activityTaskStartedEventAttributes: { scheduledEventId: 5 },
          },
        ],
      } as unknown as temporal.api.history.v1.IHistory,
      TRACE,
      '00000000000000a2',
    );
    expect(history.map((s) => [s.name, Math.round((s.startMs - T0) * 1000) / 1000, s.endMs - s.startMs])).toEqual([
      ['workflow task queued', 5, 1],
      ['workflow task', 6, 9],
      ['activity dispatch: chargePayment', 15, 3],
    ]);

    const trace = buildTrace([...parseOtlpJson(PAYLOAD), ...history], TRACE, 'order-saga-provider');
    expect(trace.totalMs).toBe(100);
    // SQL 30–40; provider 45–55 (its own query inside); activity dispatch 15–18 and the rest of 20–60;
    // workflow tasks 5–15; waiting: what no work span covers.
    expect(trace.byCategory).toEqual({
      'workflow tasks': 10,
      'activity dispatch': 23,
      SQL: 10,
      provider: 10,
      waiting: 47,
    });
    expect(Object.values(trace.byCategory).reduce((a, b) => a + b, 0)).toBe(trace.totalMs);
    expect(trace.largest).toEqual({ name: 'RunActivity:chargePayment', durationMs: 40 });
    // Tree order with depths; the history's spans hang under the span given as their parent.
    expect(trace.spans.map((s) => [s.depth, s.name, s.category])).toEqual([
      [0, 'order', undefined],
      [1, 'StartWorkflow:orderSaga', undefined],
      [2, 'workflow task queued', 'workflow tasks'],
      [2, 'workflow task', 'workflow tasks'],
      [2, 'activity dispatch: chargePayment', 'activity dispatch'],
      [2, 'RunActivity:chargePayment', 'activity dispatch'],
      [3, 'pg.query:SELECT app', 'SQL'],
      [3, 'POST', 'activity dispatch'],
      [4, 'POST', 'provider'],
      [5, 'pg.query:INSERT app', 'provider'],
    ]);
    expect(trace.spans[6]).toMatchObject({ service: 'order-saga-worker', startMs: 30, durationMs: 10, kind: 'client' });

    const table = formatTimeTable(trace);
    expect(table).toContain('| SQL | 10.0 | 10.0 % |');
    expect(table).toContain('| waiting | 47.0 | 47.0 % |');
    const svg = renderWaterfall(trace, 'a <test> order');
    expect(svg.startsWith('<svg')).toBe(true);
    expect(svg).toContain('a &lt;test&gt; order');
    expect(svg.match(/<rect x="[\d.]+" y="[\d.]+" width="[\d.]+" height="12"/g)).toHaveLength(trace.spans.length);
  });

  it('counts an instant no work span covers as waiting, and clips spans to the root', () => {
    expect(attribute([{ startMs: -5, endMs: 5, category: 'SQL' }], 0, 20)).toEqual({
      'workflow tasks': 0,
      'activity dispatch': 0,
      SQL: 5,
      provider: 0,
      waiting: 15,
    });
  });

  it('names a trace with no spans', () => {
    expect(() => buildTrace([], TRACE, 'p')).toThrow(/no spans/);
  });
});

describe('the OTLP receiver', () => {
  let receiver: OtlpReceiver | undefined;
  afterEach(async () => {
    await receiver?.close();
    receiver = undefined;
  });

  it('takes POST /v1/traces with JSON, refuses anything else', async () => {
    receiver = await startOtlpReceiver();
    const post = (path: string, type: string, body: string) =>
      fetch(`${receiver!.url}${path}`, { method: 'POST', headers: { 'content-type': type }, body });
    expect((await post('/v1/traces', 'application/json', JSON.stringify(PAYLOAD))).status).toBe(200);
    expect(receiver.trace(TRACE)).toHaveLength(7);
    expect((await post('/v1/traces', 'application/x-protobuf', 'x')).status).toBe(415);
    expect((await post('/v1/traces', 'application/json', '{not json')).status).toBe(400);
    expect((await post('/v1/metrics', 'application/json', '{}')).status).toBe(404);
    expect(receiver.spans).toHaveLength(7);
  });

  it("receives the SDK's export: OTEL_SERVICE_NAME honoured, parents kept", async () => {
    receiver = await startOtlpReceiver();
    const before = process.env.OTEL_SERVICE_NAME;
    process.env.OTEL_SERVICE_NAME = 'from-the-environment';
    const tracing = startTracing('default-name', { endpoint: receiver.url })!;
    try {
      expect(tracing.serviceName).toBe('from-the-environment');
      const tracer = tracing.tracer('test');
      const traceId = tracer.startActiveSpan('outer', (outer) => {
        tracer.startSpan('inner').end();
        outer.end();
        return outer.spanContext().traceId;
      });
      await tracing.forceFlush();
      const spans = receiver.trace(traceId);
      expect(spans.map((s) => s.name).sort()).toEqual(['inner', 'outer']);
      const outer = spans.find((s) => s.name === 'outer')!;
      expect(spans.find((s) => s.name === 'inner')!.parentSpanId).toBe(outer.spanId);
      expect(outer.service).toBe('from-the-environment');
    } finally {
      await tracing.shutdown();
      if (before === undefined) delete process.env.OTEL_SERVICE_NAME;
      else process.env.OTEL_SERVICE_NAME = before;
    }
  });
});
