/** The environment variables the processes read, in one place, with their loopback defaults. */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { DEV_PROVIDER_API_KEY, PROVIDER_ADMIN_PORT, PROVIDER_PORT } from '../provider/defaults';
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
  /** The connection profile (lib/temporal-connection.ts): every connection to Temporal is made with it. */
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
    workerMetricsUrl: (
      env.WORKER_METRICS_URL ?? loopbackUrl(env.WORKER_METRICS_PORT ?? DEFAULT_PORTS.workerMetrics)
    ).replace(/\/$/, ''),
  };
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
      query: `WorkflowType = 'orderSaga' AND ExecutionStatus = 'Running' AND NeedsAttention = true`,
    },
    {
      name: 'failed in the last hour',
      query: `WorkflowType = 'orderSaga' AND ExecutionStatus = 'Failed' AND CloseTime > '${hourAgo}'`,
    },
    {
      name: 'cancelled (Temporal cancellation) in the last hour',
      query: `WorkflowType = 'orderSaga' AND ExecutionStatus = 'Canceled' AND CloseTime > '${hourAgo}'`,
    },
    {
      // The sweeper tells a person about these (client.ts sweeps); the list shows their last runs.
      name: 'stranded: needed a person, and its run has closed',
      query: `WorkflowType = 'orderSaga' AND ExecutionStatus != 'Running' AND NeedsAttention = true`,
    },
    { name: 'waiting on an unknown charge', query: `WorkflowType = 'orderSaga' AND OrderStatus = 'UNKNOWN_PAYMENT'` },
    { name: `a customer's orders`, query: `WorkflowType = 'orderSaga' AND CustomerId = '${customerId}'` },
  ];
}
