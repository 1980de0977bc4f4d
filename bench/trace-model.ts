/**
 * The trace bench's data: a tiny OTLP/HTTP receiver (POST /v1/traces, JSON), the spans it parses,
 * the spans read from a workflow's history (the server's own times of its tasks), and the sorting of
 * one order's spans into where its milliseconds go. No OpenTelemetry code here: it reads the wire.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { temporal } from '@temporalio/proto';

/** Where one order's milliseconds go (see categorise and attribute for what each one means). */
export const CATEGORIES = ['workflow tasks', 'activity dispatch', 'SQL', 'provider', 'waiting'] as const;
export type Category = (typeof CATEGORIES)[number];

/** One span as it came over OTLP (or was made from the history), times in ms since the epoch. */
export interface RawSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  /** internal, server, client, producer, consumer; `history` for a span made from the workflow's history. */
  kind: string;
  service: string;
  /** The instrumentation scope (`@opentelemetry/instrumentation-pg`, …). */
  scope: string;
  startMs: number;
  endMs: number;
  attributes: Record<string, string | number | boolean>;
}

export interface TraceSpan {
  name: string;
  service: string;
  /** From the start of the order's root span. */
  startMs: number;
  durationMs: number;
  depth: number;
  kind: string;
  /** The category its time counts under; none for a span that only contains others (the workflow run, …). */
  category?: Category;
}

export interface TraceResult {
  /** In tree order (each span followed by its children, by start time). */
  spans: TraceSpan[];
  /** The root span: the client's start of the order until its result. */
  totalMs: number;
  /** Exclusive: each millisecond of totalMs counts once, under the highest category covering it; they sum to totalMs. */
  byCategory: Record<Category, number>;
  /** The longest work span (one with a category). */
  largest: { name: string; durationMs: number };
  traceId: string;
}

const KINDS = ['unspecified', 'internal', 'server', 'client', 'producer', 'consumer'];

type OtlpValue = {
  stringValue?: string;
  intValue?: number | string;
  doubleValue?: number;
  boolValue?: boolean;
};
type OtlpAttribute = { key: string; value?: OtlpValue };
type OtlpNanos = number | string | { low: number; high: number };

/** Nanoseconds on the wire (a decimal string, a number, or protobufjs' {low, high}) as ms since the epoch. */
function nanosToMs(n: OtlpNanos | undefined): number {
  if (n === undefined) return 0;
  if (typeof n === 'object') return ((n.high >>> 0) * 2 ** 32 + (n.low >>> 0)) / 1e6;
  const ns = BigInt(typeof n === 'number' ? Math.round(n) : n);
  return Number(ns / 1000n) / 1000;
}

function attributes(list: OtlpAttribute[] | undefined): Record<string, string | number | boolean> {
  const out: Record<string, string | number | boolean> = {};
  for (const a of list ?? []) {
    const v = a.value ?? {};
    if (v.stringValue !== undefined) out[a.key] = v.stringValue;
    else if (v.intValue !== undefined) out[a.key] = Number(v.intValue);
    else if (v.doubleValue !== undefined) out[a.key] = v.doubleValue;
    else if (v.boolValue !== undefined) out[a.key] = v.boolValue;
  }
  return out;
}

/** Span and trace ids: hex on the OTLP JSON wire; base64 if a sender followed protobuf's JSON mapping. */
function hexId(id: string | undefined): string | undefined {
  if (!id) return undefined;
  if (/^[0-9a-f]+$/i.test(id) && (id.length === 16 || id.length === 32)) return id.toLowerCase();
  return Buffer.from(id, 'base64').toString('hex');
}

/** The spans of one OTLP/JSON ExportTraceServiceRequest (resourceSpans → scopeSpans → spans). */
export function parseOtlpJson(body: unknown): RawSpan[] {
  const out: RawSpan[] = [];
  const request = body as {
    resourceSpans?: {
      resource?: { attributes?: OtlpAttribute[] };
      scopeSpans?: {
        scope?: { name?: string };
        spans?: {
          traceId?: string;
          spanId?: string;
          parentSpanId?: string;
          name?: string;
          kind?: number | string;
          startTimeUnixNano?: OtlpNanos;
          endTimeUnixNano?: OtlpNanos;
          attributes?: OtlpAttribute[];
        }[];
      }[];
    }[];
  };
  for (const rs of request?.resourceSpans ?? []) {
    const service = String(attributes(rs.resource?.attributes)['service.name'] ?? 'unknown');
    for (const ss of rs.scopeSpans ?? []) {
      for (const s of ss.spans ?? []) {
        const traceId = hexId(s.traceId);
        const spanId = hexId(s.spanId);
        if (!traceId || !spanId) continue;
        const parentSpanId = hexId(s.parentSpanId);
        const kind =
          typeof s.kind === 'number'
            ? (KINDS[s.kind] ?? 'unspecified')
            : String(s.kind ?? 'unspecified')
                .replace(/^SPAN_KIND_/, '')
                .toLowerCase();
        out.push({
          traceId,
          spanId,
          ...(parentSpanId ? { parentSpanId } : {}),
          name: s.name ?? '',
          kind,
          service,
          scope: ss.scope?.name ?? '',
          startMs: nanosToMs(s.startTimeUnixNano),
          endMs: nanosToMs(s.endTimeUnixNano),
          attributes: attributes(s.attributes),
        });
      }
    }
  }
  return out;
}

export interface OtlpReceiver {
  /** The base URL to give as OTEL_EXPORTER_OTLP_ENDPOINT (spans go to `${url}/v1/traces`). */
  url: string;
  /** Every span received so far. */
  spans: RawSpan[];
  /** The spans of one trace. */
  trace(traceId: string): RawSpan[];
  close(): Promise<void>;
}

/** An OTLP/HTTP receiver on loopback (port 0: a free one): POST /v1/traces with JSON; anything else is refused. */
export function startOtlpReceiver(): Promise<OtlpReceiver> {
  const spans: RawSpan[] = [];
  const server = http.createServer((req, res) => {
    const reply = (status: number, body: unknown): void => {
      res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    };
    if (req.method !== 'POST' || req.url?.split('?')[0] !== '/v1/traces')
      return void reply(404, { message: 'POST /v1/traces only' });
    if (!/json/.test(req.headers['content-type'] ?? ''))
      return void reply(415, { message: 'JSON only (OTEL_EXPORTER_OTLP_PROTOCOL=http/json)' });
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > 20 * 2 ** 20) req.destroy();
      else chunks.push(c);
    });
    req.on('end', () => {
      try {
        spans.push(...parseOtlpJson(JSON.parse(Buffer.concat(chunks).toString('utf8'))));
        reply(200, { partialSuccess: {} });
      } catch (err) {
        reply(400, { message: (err as Error).message });
      }
    });
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      resolve({
        url: `http://127.0.0.1:${port}`,
        spans,
        trace: (traceId) => spans.filter((s) => s.traceId === traceId),
        close: () =>
          new Promise<void>((done) => {
            server.close(() => done());
            server.closeAllConnections();
          }),
      });
    });
  });
}

type Ts = { seconds?: number | { toString(): string } | null; nanos?: number | null } | null | undefined;
const tsMs = (t: Ts): number | undefined =>
  t
    ? Number(typeof t.seconds === 'number' ? t.seconds : String(t.seconds ?? 0)) * 1000 + (t.nanos ?? 0) / 1e6
    : undefined;
const idOf = (v: number | { toString(): string } | null | undefined): string => String(v ?? '');

/**
 * Spans made from the workflow's history: the server's own times, on the same clock as the spans
 * (one machine). Per workflow task, `workflow task queued` (scheduled → picked up by a worker) and
 * `workflow task` (picked up → completion recorded: the worker's processing and the round trip);
 * per activity, `activity dispatch: <type>` (scheduled → picked up by a worker). Parented under `parentSpanId`.
 */
export function spansFromHistory(
  history: temporal.api.history.v1.IHistory,
  traceId: string,
  parentSpanId: string | undefined,
): RawSpan[] {
  const events = history.events ?? [];
  const at = new Map<string, number>();
  const activityType = new Map<string, string>();
  for (const e of events) {
    const t = tsMs(e.eventTime);
    if (t === undefined) continue;
    at.set(idOf(e.eventId), t);
    if (e.activityTaskScheduledEventAttributes)
      activityType.set(idOf(e.eventId), e.activityTaskScheduledEventAttributes.activityType?.name ?? 'activity');
  }
  const out: RawSpan[] = [];
  let n = 0;
  const span = (name: string, startMs: number | undefined, endMs: number | undefined): void => {
    if (startMs === undefined || endMs === undefined) return;
    out.push({
      traceId,
      spanId: `history-${n++}`,
      ...(parentSpanId ? { parentSpanId } : {}),
      name,
      kind: 'history',
      service: 'temporal (history)',
      scope: 'history',
      startMs,
      endMs,
      attributes: {},
    });
  };
  const started = new Map<string, number>(); // workflow task: scheduled event id → started time
  for (const e of events) {
    const t = tsMs(e.eventTime);
    const wtStarted = e.workflowTaskStartedEventAttributes;
    if (wtStarted) {
      const sched = idOf(wtStarted.scheduledEventId);
      span('workflow task queued', at.get(sched), t);
      if (t !== undefined) started.set(sched, t);
    }
    const wtEnd =
      e.workflowTaskCompletedEventAttributes ??
      e.workflowTaskFailedEventAttributes ??
      e.workflowTaskTimedOutEventAttributes;
    if (wtEnd) span('workflow task', started.get(idOf(wtEnd.scheduledEventId)), t);
    const actStarted = e.activityTaskStartedEventAttributes;
    if (actStarted) {
      const sched = idOf(actStarted.scheduledEventId);
      span(`activity dispatch: ${activityType.get(sched) ?? 'activity'}`, at.get(sched), t);
    }
  }
  return out;
}

/**
 * The category a span's time counts under, or undefined for a span that only contains others:
 *  - `workflow tasks`: a workflow task from its scheduling to its completion, from the history (the
 *    queue, the worker running the workflow code in its sandbox, the completion's round trip);
 *  - `provider`: any span of the provider's process (its HTTP server spans and the ledger's SQL
 *    under them): the payment gateway's share, as the gateway itself measured it;
 *  - `SQL`: the worker's pg spans (each query, and pool connects);
 *  - `activity dispatch`: an activity from its scheduling until the worker picks it up (history),
 *    and its execution (RunActivity:…) and the worker's HTTP client calls, where neither SQL nor the
 *    provider covers them: the SDK's and the activity's own code, and the network to the provider;
 *  - none: the order's root span, StartWorkflow, RunWorkflow, StartActivity: containers, whose time
 *    not covered by any work span is `waiting` (see attribute).
 */
export function categorise(span: RawSpan, providerService: string): Category | undefined {
  if (span.kind === 'history')
    return span.name.startsWith('activity dispatch') ? 'activity dispatch' : 'workflow tasks';
  if (span.service === providerService) return 'provider';
  if (span.scope.includes('instrumentation-pg') || span.attributes['db.system'] === 'postgresql') return 'SQL';
  if (span.name.startsWith('RunActivity:')) return 'activity dispatch';
  if (span.scope.includes('instrumentation-undici') || span.scope.includes('instrumentation-http'))
    return 'activity dispatch';
  return undefined;
}

/** Where a millisecond covered by several categories counts: the most specific work first. */
const PRIORITY: Category[] = ['SQL', 'provider', 'activity dispatch', 'workflow tasks'];

/**
 * Splits [fromMs, toMs] over the categories, exclusively: each instant counts under the highest
 * PRIORITY category of the spans covering it (SQL inside an activity counts as SQL, not as the
 * activity), and as `waiting` when no work span covers it: the client's start call and its wait for
 * the result, the server between tasks (persisting events, matching), and whatever no span measures.
 */
export function attribute(
  intervals: { startMs: number; endMs: number; category: Category }[],
  fromMs: number,
  toMs: number,
): Record<Category, number> {
  const out = Object.fromEntries(CATEGORIES.map((c) => [c, 0])) as Record<Category, number>;
  const clipped = intervals
    .map((i) => ({ ...i, startMs: Math.max(i.startMs, fromMs), endMs: Math.min(i.endMs, toMs) }))
    .filter((i) => i.endMs > i.startMs);
  const cuts = [...new Set([fromMs, toMs, ...clipped.flatMap((i) => [i.startMs, i.endMs])])].sort((a, b) => a - b);
  for (let k = 0; k + 1 < cuts.length; k++) {
    const a = cuts[k]!;
    const b = cuts[k + 1]!;
    const covering = new Set(clipped.filter((i) => i.startMs <= a && i.endMs >= b).map((i) => i.category));
    const category = PRIORITY.find((c) => covering.has(c)) ?? 'waiting';
    out[category] += b - a;
  }
  for (const c of CATEGORIES) out[c] = Math.round(out[c] * 10) / 10;
  return out;
}

/**
 * One trace as the bench reports it: rooted at the span of `traceId` without a parent (the order's
 * client span), in tree order with depths, and its time split by category.
 */
export function buildTrace(all: RawSpan[], traceId: string, providerService: string): TraceResult {
  const spans = all.filter((s) => s.traceId === traceId);
  const ids = new Set(spans.map((s) => s.spanId));
  const roots = spans.filter((s) => !s.parentSpanId || !ids.has(s.parentSpanId));
  const root = roots.find((s) => !s.parentSpanId) ?? roots.sort((a, b) => a.startMs - b.startMs)[0];
  if (!root) throw new Error(`trace ${traceId}: no spans received`);
  const children = new Map<string, RawSpan[]>();
  for (const s of spans) {
    if (s === root) continue;
    // A span whose parent never arrived hangs under the root, so it is still shown and counted.
    const parent = s.parentSpanId && ids.has(s.parentSpanId) ? s.parentSpanId : root.spanId;
    children.set(parent, [...(children.get(parent) ?? []), s]);
  }
  const ordered: TraceSpan[] = [];
  const walk = (s: RawSpan, depth: number): void => {
    const category = categorise(s, providerService);
    ordered.push({
      name: s.name,
      service: s.service,
      startMs: Math.round((s.startMs - root.startMs) * 100) / 100,
      durationMs: Math.round((s.endMs - s.startMs) * 100) / 100,
      depth,
      kind: s.kind,
      ...(category ? { category } : {}),
    });
    for (const c of (children.get(s.spanId) ?? []).sort((a, b) => a.startMs - b.startMs || b.endMs - a.endMs))
      walk(c, depth + 1);
  };
  walk(root, 0);
  const work = spans
    .map((s) => ({ s, category: categorise(s, providerService) }))
    .filter((x): x is { s: RawSpan; category: Category } => x.category !== undefined && x.s !== root);
  const byCategory = attribute(
    work.map(({ s, category }) => ({ startMs: s.startMs, endMs: s.endMs, category })),
    root.startMs,
    root.endMs,
  );
  const longest = work.sort((a, b) => b.s.endMs - b.s.startMs - (a.s.endMs - a.s.startMs))[0];
  return {
    spans: ordered,
    totalMs: Math.round((root.endMs - root.startMs) * 10) / 10,
    byCategory,
    largest: longest
      ? { name: longest.s.name, durationMs: Math.round((longest.s.endMs - longest.s.startMs) * 100) / 100 }
      : { name: root.name, durationMs: 0 },
    traceId,
  };
}
