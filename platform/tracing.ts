/**
 * OpenTelemetry tracing, off unless OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
 * is set and not empty. On, a process exports its spans over OTLP/HTTP (JSON) to that collector, with the standard
 * OTEL_* variables honoured by the SDK (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER,
 * OTEL_BSP_*, OTEL_EXPORTER_OTLP_HEADERS…). What is traced:
 *  - Temporal: the client's calls (StartWorkflow:…), the workflow's run and the activities it
 *    schedules (RunWorkflow:…, StartActivity:…, spans made in the sandbox and sent out by a sink),
 *    each activity's execution (RunActivity:…); the context travels in Temporal headers;
 *  - pg: each query and pool connect made under a span (an activity, a provider request);
 *  - HTTP: the provider's server side (node:http), the worker's calls to it (fetch, via undici),
 *    with the W3C traceparent header between them.
 * Off, this module loads no OpenTelemetry code at all (every SDK module is required lazily, here),
 * and the functions below return undefined or nothing, so callers pay one environment lookup.
 */
import type { Tracer } from '@opentelemetry/api';
import type { WorkflowClientInterceptor } from '@temporalio/client';
import type { WorkerOptions } from '@temporalio/worker';

type Api = typeof import('@opentelemetry/api');
type SdkNode = typeof import('@opentelemetry/sdk-trace-node');
type SdkBase = typeof import('@opentelemetry/sdk-trace-base');
type Resources = typeof import('@opentelemetry/resources');
type Exporter = typeof import('@opentelemetry/exporter-trace-otlp-http');
type Interceptors = typeof import('@temporalio/interceptors-opentelemetry');
type Instrumentation = typeof import('@opentelemetry/instrumentation');
type HttpInstr = typeof import('@opentelemetry/instrumentation-http');
type PgInstr = typeof import('@opentelemetry/instrumentation-pg');
type UndiciInstr = typeof import('@opentelemetry/instrumentation-undici');

/** Loads a module only when tracing is on (the point of this file: off, none is ever required). */
function load<T>(id: string): T {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return require(id) as T;
}

/** The workflow interceptors' module, for `interceptors.workflowModules` or bundleWorkflowCode (resolved, not loaded). */
const WORKFLOW_INTERCEPTORS = '@temporalio/interceptors-opentelemetry/lib/workflow-interceptors';

export interface Tracing {
  readonly serviceName: string;
  /** The OTLP endpoint spans go to (the traces URL). */
  readonly url: string;
  tracer(name?: string): Tracer;
  /** For `new Client({ interceptors })`: the client's calls become spans and carry the context. */
  clientInterceptors(): { workflow: WorkflowClientInterceptor[] };
  /**
   * For Worker.create: activity interceptors, the workflow interceptors' module (unless the worker
   * is given a prebuilt bundle: then the bundle must have been made with tracingWorkflowModules()),
   * and the sink that exports the spans made in the workflow sandbox.
   */
  workerOptions(opts?: { prebuiltBundle?: boolean }): Pick<WorkerOptions, 'interceptors' | 'sinks'>;
  /** Sends every span ended so far. */
  forceFlush(): Promise<void>;
  /** Flushes and stops exporting (and, for the process-wide one, removes the instrumentations). */
  shutdown(): Promise<void>;
}

/** A collector's base URL (…:4318) to its OTLP/HTTP traces URL. */
const tracesUrlOf = (base: string): string => `${base.replace(/\/$/, '')}/v1/traces`;

/**
 * The OTLP traces URL the environment names, or undefined: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it
 * is, else OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces. An empty variable is unset, as OpenTelemetry's
 * specification says (so a parent can switch tracing off in a child by setting both to '').
 */
export function otlpTracesUrl(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const traces = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim();
  if (traces) return traces;
  const base = env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim();
  return base ? tracesUrlOf(base) : undefined;
}

/** True when the environment asks for tracing (the standard OTLP endpoint variables, empty ones unset). */
export function tracingRequested(env: NodeJS.ProcessEnv = process.env): boolean {
  return otlpTracesUrl(env) !== undefined;
}

let processWide: Tracing | undefined;

/** The process-wide tracing started by startTracing, or undefined (off). */
export function activeTracing(): Tracing | undefined {
  return processWide;
}

/** The modules to give bundleWorkflowCode's workflowInterceptorModules: the tracing one when on, else none. */
export function tracingWorkflowModules(env: NodeJS.ProcessEnv = process.env): string[] {
  return tracingRequested(env) ? [require.resolve(WORKFLOW_INTERCEPTORS)] : [];
}

export interface TracingOptions {
  /** The collector's base URL (…:4318), instead of the environment's; given, tracing is on. */
  endpoint?: string;
  /**
   * Process-wide (default): registers the global tracer provider and context manager, and the pg,
   * http and undici instrumentations. false: a provider of its own (another service name in the same
   * process, e.g. the bench's client beside its worker); it relies on a process-wide one for context.
   */
  global?: boolean;
  env?: NodeJS.ProcessEnv;
}

/**
 * Starts tracing when the environment (or `opts.endpoint`) asks for it; else returns undefined and
 * loads nothing. `serviceName` is the default: OTEL_SERVICE_NAME wins. The process-wide one is
 * started once (a second call returns it). Call it first thing in an entry point's main: the
 * instrumentations patch pg and http when they are required, and since an entry's imports run before
 * its first statement, pg and http are usually loaded already; so they are required once more here,
 * after the hooks are in place, which patches their shared prototypes (pg's Client, http's Server)
 * for every user, earlier ones included. fetch (undici) is traced by diagnostics channel, in any order.
 */
export function startTracing(serviceName: string, opts: TracingOptions = {}): Tracing | undefined {
  const env = opts.env ?? process.env;
  const global = opts.global ?? true;
  if (!opts.endpoint && !tracingRequested(env)) return undefined;
  if (global && processWide) {
    if (opts.endpoint && processWide.url !== tracesUrlOf(opts.endpoint))
      throw new Error(`tracing is already on in this process, to ${processWide.url}`);
    return processWide;
  }

  const api = load<Api>('@opentelemetry/api');
  const { NodeTracerProvider } = load<SdkNode>('@opentelemetry/sdk-trace-node');
  const { BatchSpanProcessor } = load<SdkBase>('@opentelemetry/sdk-trace-base');
  const { Resource, envDetectorSync } = load<Resources>('@opentelemetry/resources');
  const { OTLPTraceExporter } = load<Exporter>('@opentelemetry/exporter-trace-otlp-http');
  const otelTemporal = load<Interceptors>('@temporalio/interceptors-opentelemetry');

  const url = opts.endpoint ? tracesUrlOf(opts.endpoint) : otlpTracesUrl(env)!;
  // The default name, then OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME over it.
  const resource = new Resource({ 'service.name': serviceName }).merge(envDetectorSync.detect());
  const name = String(resource.attributes['service.name'] ?? serviceName);
  const exporter = new OTLPTraceExporter({ url });
  const processor = new BatchSpanProcessor(exporter);
  const provider = new NodeTracerProvider({ resource, spanProcessors: [processor] });

  let unregister = (): void => undefined;
  if (global) {
    provider.register(); // the global tracer provider, the AsyncLocalStorage context manager, W3C propagation
    const { registerInstrumentations } = load<Instrumentation>('@opentelemetry/instrumentation');
    const { HttpInstrumentation } = load<HttpInstr>('@opentelemetry/instrumentation-http');
    const { PgInstrumentation } = load<PgInstr>('@opentelemetry/instrumentation-pg');
    const { UndiciInstrumentation } = load<UndiciInstr>('@opentelemetry/instrumentation-undici');
    const target = new URL(url);
    unregister = registerInstrumentations({
      tracerProvider: provider,
      instrumentations: [
        new HttpInstrumentation({
          // Outgoing node:http only inside a span, and never the exporter's own posts to the collector.
          requireParentforOutgoingSpans: true,
          ignoreOutgoingRequestHook: (req) =>
            String(req.port ?? '') === target.port && (req.hostname ?? req.host) === target.hostname,
          // Metrics scrapes are not part of any order; nor is an OTLP receiver's own traffic (the bench runs one in-process).
          ignoreIncomingRequestHook: (req) => /^\/(metrics|stats|v1\/traces)\b/.test(req.url ?? ''),
        }),
        new PgInstrumentation({ requireParentSpan: true }),
        new UndiciInstrumentation({ requireParentforSpans: true }),
      ],
    });
    // Through the hooks now (see above): patches the copies already loaded.
    for (const id of ['pg', 'pg-pool', 'node:http', 'node:https']) {
      try {
        load(id);
      } catch {
        // not installed in this process (pg in a client without a database): nothing to patch
      }
    }
  }

  const tracing: Tracing = {
    serviceName: name,
    url,
    tracer: (n = name) => provider.getTracer(n),
    clientInterceptors: () => ({
      workflow: [
        new otelTemporal.OpenTelemetryWorkflowClientInterceptor({ tracer: provider.getTracer('temporal-client') }),
      ],
    }),
    workerOptions: ({ prebuiltBundle = false } = {}) => ({
      interceptors: {
        activity: [
          (ctx) => ({
            inbound: new otelTemporal.OpenTelemetryActivityInboundInterceptor(ctx, {
              tracer: provider.getTracer('temporal-activity'),
            }),
            outbound: new otelTemporal.OpenTelemetryActivityOutboundInterceptor(ctx),
          }),
        ],
        ...(prebuiltBundle ? {} : { workflowModules: [require.resolve(WORKFLOW_INTERCEPTORS)] }),
      },
      sinks: { exporter: otelTemporal.makeWorkflowExporter(processor, resource) },
    }),
    forceFlush: () => provider.forceFlush(),
    shutdown: async () => {
      unregister();
      await provider.shutdown();
      if (global) {
        api.trace.disable();
        api.context.disable();
        api.propagation.disable();
        if (processWide === tracing) processWide = undefined;
      }
    },
  };
  if (global) processWide = tracing;
  return tracing;
}
