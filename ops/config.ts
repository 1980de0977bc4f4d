/**
 * The environment variables of the worker and of the programs that talk to the system (client.ts,
 * npm start, the soak, the bench, the codec server), with their loopback defaults: AppConfig, which
 * they all read, and WorkerSettings, the worker's own. Read elsewhere, each beside the code that uses
 * it: the provider's settings (provider/config.ts: the provider sits below ops/ and does not import
 * it), the build ID (BUILD_ID, ops/deployments.ts), where the connection profile's file is
 * (ops/temporal-connection.ts), tracing and the payload keys (platform/, cli/keys.ts), and the
 * programs' own options (scripts/start.ts, scripts/codec-server.ts, the bench's sections).
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { WorkflowNames } from '../domain/names';
import { parseSagaConfig, type SagaConfig } from '../workflows/saga-config';
import { DEV_PROVIDER_API_KEY, PROVIDER_ADMIN_PORT, PROVIDER_PORT } from '../provider/defaults';
import { DEFAULT_RELAY } from './event-relay';
import { loadTemporalProfile, type TemporalProfile } from './temporal-connection';

/** The loopback ports each process listens on, or finds the others on, when the environment names none. */
export const DEFAULT_PORTS = {
  /** TEMPORAL_PORT: the Temporal frontend (gRPC). */
  temporal: 7233,
  /** TEMPORAL_UI_PORT: the Temporal Web UI. */
  temporalUi: 8233,
  /** CODEC_SERVER_PORT: the codec server, which decodes payloads for the Web UI. */
  codecServer: 8234,
  /** PROVIDER_PORT: the payment provider's API. */
  provider: PROVIDER_PORT,
  /** PROVIDER_ADMIN_PORT: the provider's fault switches. */
  providerAdmin: PROVIDER_ADMIN_PORT,
  /** WORKER_METRICS_PORT: the worker's inventory metrics (/metrics, /stats); worker i of N uses this + i. */
  workerMetrics: 9465,
  /** TEMPORAL_SERVER_METRICS_PORT: the real Temporal server's own metrics (npm start -- --temporal server). */
  temporalServerMetrics: 8000,
  /** PG_PORT: the embedded Postgres of npm start. */
  postgres: 54329,
  /** TEMPORAL_METRICS_ADDRESS's port: the Temporal runtime's Prometheus endpoint in the (first) worker. */
  temporalMetrics: 9464,
  /** API_PORT: the orders API (api/). */
  api: 8080,
} as const;

/** http://127.0.0.1:<port> */
export const loopbackUrl = (port: number | string): string => `http://127.0.0.1:${port}`;

/** Where `npm start` records the addresses of what it started, so client.ts finds them. */
export const RUNTIME_FILE = path.resolve(__dirname, '..', '.data', 'runtime.json');

function runtimeDefaults(): NodeJS.ProcessEnv {
  if (!existsSync(RUNTIME_FILE)) return {};
  try {
    return JSON.parse(readFileSync(RUNTIME_FILE, 'utf8')) as NodeJS.ProcessEnv;
  } catch {
    return {};
  }
}

export interface AppConfig {
  /** The connection profile (ops/temporal-connection.ts): every connection to Temporal is made with it. */
  temporal: TemporalProfile;
  /** The profile's address and namespace. */
  temporalAddress: string;
  namespace: string;
  taskQueue: string;
  uiUrl: string;
  /** The process's own role: the application's (worker, client.ts) or the provider's. */
  databaseUrl?: string;
  /** The read-only role, for the invariant checker and reconciliation; DATABASE_URL when unset. */
  readerDatabaseUrl?: string;
  providerUrl: string;
  providerApiKey: string;
  /** How long the worker waits for the provider before it treats the call as timed out (then inquires). */
  providerTimeoutMs: number;
  /** ORDER_EVENTS_WEBHOOK_URL: where the workers relay the order events (client.ts check then checks they went out). */
  orderEventsUrl?: string;
  /** The worker's inventory metrics endpoint (GET /metrics, GET /stats). */
  workerMetricsUrl: string;
  /** SKUs pinned to the serial lane (INVENTORY_LANE_SKUS, comma-separated): known-hot, never tried by CAS. */
  laneSkus: string[];
}

/** The environment a process reads: its own, over what a running `npm start` recorded (for process.env only). */
export function configEnv(processEnv: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  return processEnv === process.env ? { ...runtimeDefaults(), ...processEnv } : processEnv;
}

/**
 * Environment first, then what a running `npm start` recorded, then loopback defaults. Throws
 * TemporalProfileError, naming the setting, when the Temporal connection profile cannot be used.
 */
export function readConfig(processEnv: NodeJS.ProcessEnv = process.env): AppConfig {
  const env = configEnv(processEnv);
  const temporal = loadTemporalProfile(env, `127.0.0.1:${DEFAULT_PORTS.temporal}`);
  return {
    temporal,
    temporalAddress: temporal.address,
    namespace: temporal.namespace,
    taskQueue: env.TASK_QUEUE ?? 'orders',
    uiUrl: (env.TEMPORAL_UI_URL ?? loopbackUrl(DEFAULT_PORTS.temporalUi)).replace(/\/$/, ''),
    databaseUrl: env.DATABASE_URL,
    readerDatabaseUrl: env.READER_DATABASE_URL ?? env.DATABASE_URL,
    providerUrl: env.PROVIDER_URL ?? loopbackUrl(DEFAULT_PORTS.provider),
    providerApiKey: env.PROVIDER_API_KEY ?? DEV_PROVIDER_API_KEY,
    providerTimeoutMs: Number(env.PROVIDER_TIMEOUT_MS ?? 10_000),
    laneSkus: (env.INVENTORY_LANE_SKUS ?? '')
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean),
    ...(env.ORDER_EVENTS_WEBHOOK_URL ? { orderEventsUrl: env.ORDER_EVENTS_WEBHOOK_URL } : {}),
    workerMetricsUrl: (
      env.WORKER_METRICS_URL ?? loopbackUrl(env.WORKER_METRICS_PORT ?? DEFAULT_PORTS.workerMetrics)
    ).replace(/\/$/, ''),
  };
}

/** The Temporal SDK's log levels, for WORKER_LOG_LEVEL. */
const LOG_LEVELS = ['TRACE', 'DEBUG', 'INFO', 'WARN', 'ERROR'] as const;

/** What the worker process (worker.ts) alone reads, beside AppConfig. */
export interface WorkerSettings {
  /** TEMPORAL_METRICS_ADDRESS: the Temporal runtime's Prometheus endpoint in the worker, or `off`. */
  runtimeMetrics: string;
  /** WORKER_LOG_LEVEL: the SDK's own log level; WARN when unset. */
  logLevel: (typeof LOG_LEVELS)[number];
  /** WORKFLOW_BUNDLE: a prebuilt workflow bundle (bundleWorkflowCode), so a restart does not bundle again. */
  workflowBundle: string | undefined;
  /** A Worker Deployment version, unless WORKER_VERSIONING=off (BUILD_ID names the build: ops/deployments.ts). */
  versioned: boolean;
  /** WORKER_METRICS_PORT: where the worker serves its inventory metrics, /healthz and /readyz. */
  metricsPort: number;
  /** WORKER_METRICS_HOST: the address it listens on (127.0.0.1; 0.0.0.0 in a container, for its probes). */
  metricsHost: string;
  /** WORKER_MAKE_CURRENT=true: the worker makes its own version current once it polls. */
  makeCurrent: boolean;
  /**
   * ORDER_EVENTS_WEBHOOK_URL and ORDER_EVENTS_WEBHOOK_SECRET: where the worker's relay delivers the
   * order events, and the secret it signs them with (ops/event-relay.ts); none: events are kept, not sent.
   */
  orderEvents: { url: string; secret: string } | undefined;
  /** ORDER_EVENTS_MAX_ATTEMPTS: tries before an event is dead-lettered (20 by default, about 2 h). */
  orderEventsMaxAttempts: number;
  /** ORDER_EVENTS_MAX_DELAY_MS: the longest backoff between two tries (10 min by default). */
  orderEventsMaxDelayMs: number;
}

/** The order events' endpoint from the environment; throws naming the variable when it is not usable. */
export function readOrderEventsEndpoint(env: NodeJS.ProcessEnv): { url: string; secret: string } | undefined {
  const url = env.ORDER_EVENTS_WEBHOOK_URL;
  if (!url) return undefined;
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new Error(`ORDER_EVENTS_WEBHOOK_URL must be an http(s) URL, not "${url}"`);
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:')
    throw new Error(`ORDER_EVENTS_WEBHOOK_URL must be an http(s) URL, not "${url}"`);
  const secret = env.ORDER_EVENTS_WEBHOOK_SECRET ?? '';
  if (secret.length < 16)
    throw new Error(
      'ORDER_EVENTS_WEBHOOK_SECRET must be set, at least 16 characters, when ORDER_EVENTS_WEBHOOK_URL is',
    );
  return { url, secret };
}

/**
 * The worker's own settings, from its environment as given (not what `npm start` recorded: npm start
 * sets these for the workers it starts). Throws naming WORKER_LOG_LEVEL when it is not a level.
 */
export function readWorkerSettings(env: NodeJS.ProcessEnv = process.env): WorkerSettings {
  const level = (env.WORKER_LOG_LEVEL ?? 'WARN').toUpperCase();
  if (!(LOG_LEVELS as readonly string[]).includes(level))
    throw new Error(`WORKER_LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')}, not "${env.WORKER_LOG_LEVEL}"`);
  return {
    runtimeMetrics: env.TEMPORAL_METRICS_ADDRESS ?? `127.0.0.1:${DEFAULT_PORTS.temporalMetrics}`,
    logLevel: level as (typeof LOG_LEVELS)[number],
    workflowBundle: env.WORKFLOW_BUNDLE,
    versioned: env.WORKER_VERSIONING !== 'off',
    metricsPort: Number(env.WORKER_METRICS_PORT ?? DEFAULT_PORTS.workerMetrics),
    metricsHost: env.WORKER_METRICS_HOST ?? '127.0.0.1',
    makeCurrent: env.WORKER_MAKE_CURRENT === 'true',
    orderEvents: readOrderEventsEndpoint(env),
    orderEventsMaxAttempts: wholeSetting(env, 'ORDER_EVENTS_MAX_ATTEMPTS', DEFAULT_RELAY.maxAttempts, 1, 1_000_000),
    orderEventsMaxDelayMs: wholeSetting(env, 'ORDER_EVENTS_MAX_DELAY_MS', DEFAULT_RELAY.maxDelayMs, 1, 86_400_000),
  };
}

/** What the orders API (api/server.ts) alone reads, beside AppConfig. */
export interface ApiSettings {
  /** API_PORT and API_HOST: where it listens (127.0.0.1:8080; 0.0.0.0 in a container). */
  port: number;
  host: string;
  /** API_RATE_LIMIT: requests per minute per key (a bucket of this size, refilled evenly). */
  ratePerMinute: number;
  /** API_CORS_ORIGINS: browser origins allowed to call it (comma-separated); none when unset, and no CORS headers. */
  corsOrigins: string[];
  /** API_ANSWER_TIMEOUT_MS: how long POST /v1/orders waits for the saga's early answer before a 503. */
  answerTimeoutMs: number;
  /**
   * API_SAGA_CONFIG: the saga config (JSON, workflows/saga-config.ts) the orders it places run with;
   * unset, the saga's defaults, as under `client.ts place`.
   */
  sagaConfig?: Partial<SagaConfig>;
}

/** A whole number from min to max, or an error naming the variable. */
function wholeSetting(env: NodeJS.ProcessEnv, name: string, fallback: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min || n > max)
    throw new Error(`${name} must be a whole number from ${min} to ${max}, not "${raw}"`);
  return n;
}

/** The orders API's own settings; throws naming the variable when one is not usable. */
export function readApiSettings(env: NodeJS.ProcessEnv = process.env): ApiSettings {
  const corsOrigins = (env.API_CORS_ORIGINS ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  for (const origin of corsOrigins) {
    let parsed: URL | undefined;
    try {
      parsed = new URL(origin);
    } catch {
      parsed = undefined;
    }
    if (!parsed || parsed.origin !== origin)
      throw new Error(`API_CORS_ORIGINS: "${origin}" is not an origin such as https://shop.example`);
  }
  return {
    port: wholeSetting(env, 'API_PORT', DEFAULT_PORTS.api, 0, 65535),
    host: env.API_HOST ?? '127.0.0.1',
    ratePerMinute: wholeSetting(env, 'API_RATE_LIMIT', 600, 1, 1_000_000),
    corsOrigins,
    answerTimeoutMs: wholeSetting(env, 'API_ANSWER_TIMEOUT_MS', 30_000, 100, 600_000),
    ...(env.API_SAGA_CONFIG ? { sagaConfig: sagaConfigSetting(env.API_SAGA_CONFIG) } : {}),
  };
}

/** API_SAGA_CONFIG read as JSON and checked as the saga checks its config (errors name the variable and the field). */
function sagaConfigSetting(raw: string): Partial<SagaConfig> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch (err) {
    throw new Error('API_SAGA_CONFIG must be a JSON object such as {"deadlineMs":120000}', { cause: err });
  }
  try {
    parseSagaConfig(parsed);
  } catch (err) {
    throw new Error(`API_SAGA_CONFIG: ${(err as Error).message}`, { cause: err });
  }
  // Only the knobs given: the others stay the saga's own defaults, those of the build that runs it.
  return parsed as Partial<SagaConfig>;
}

/** The Web UI page of one workflow run. */
export function runUrl(cfg: Pick<AppConfig, 'uiUrl' | 'namespace'>, workflowId: string, runId?: string): string {
  const base = `${cfg.uiUrl}/namespaces/${encodeURIComponent(cfg.namespace)}/workflows/${encodeURIComponent(workflowId)}`;
  return runId ? `${base}/${encodeURIComponent(runId)}/history` : base;
}

/** The Web UI's workflow list, filtered by a visibility query. */
export function listUrl(cfg: Pick<AppConfig, 'uiUrl' | 'namespace'>, query: string): string {
  return `${cfg.uiUrl}/namespaces/${encodeURIComponent(cfg.namespace)}/workflows?query=${encodeURIComponent(query)}`;
}

/** The list queries an operator uses (client.ts views, npm start, the README). */
export function operatorViews(now: Date, customerId = '<customerId>'): { name: string; query: string }[] {
  const hourAgo = new Date(now.getTime() - 3_600_000).toISOString();
  return [
    {
      name: 'needs attention',
      query: `WorkflowType = '${WorkflowNames.orderSaga}' AND ExecutionStatus = 'Running' AND NeedsAttention = true`,
    },
    {
      name: 'failed in the last hour',
      query: `WorkflowType = '${WorkflowNames.orderSaga}' AND ExecutionStatus = 'Failed' AND CloseTime > '${hourAgo}'`,
    },
    {
      name: 'cancelled (Temporal cancellation) in the last hour',
      query: `WorkflowType = '${WorkflowNames.orderSaga}' AND ExecutionStatus = 'Canceled' AND CloseTime > '${hourAgo}'`,
    },
    {
      // The sweeper tells a person about these (client.ts sweeps); the list shows their last runs.
      name: 'stranded: needed a person, and its run has closed',
      query: `WorkflowType = '${WorkflowNames.orderSaga}' AND ExecutionStatus != 'Running' AND NeedsAttention = true`,
    },
    {
      name: 'waiting on an unknown charge',
      query: `WorkflowType = '${WorkflowNames.orderSaga}' AND OrderStatus = 'UNKNOWN_PAYMENT'`,
    },
    {
      name: `a customer's orders`,
      query: `WorkflowType = '${WorkflowNames.orderSaga}' AND CustomerId = '${customerId}'`,
    },
  ];
}
