/**
 * The real Temporal server on Postgres, as one process running its four services, with the
 * standalone Web UI server beside it: what `npm start -- --temporal=server`, `npm run test:server`
 * and the chaos soak's server tier run. Both read their configuration from temporal/ (the files
 * docker-compose.yml mounts), filled in from the environment. The binaries come from
 * `scripts/ensure-servers.sh server` (go install, cached).
 */
import type { ChildProcess } from 'node:child_process';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { Connection } from '@temporalio/client';
import { msToTs } from '@temporalio/common/lib/time';
import { createPool, withTransaction } from '../db/pool';
import type { ConnectionSettings } from '../ops/temporal-connection';
import { ensureLoginRole } from '../db/roles';
import { CACHE_DIR } from './cache';
import { checkCluster, ClusterNotReady } from '../ops/cluster-check';
import { busyPorts, startProcess, stopProcess } from '../platform/processes';

const ROOT = path.resolve(__dirname, '..');
export const SERVER_VERSION = 'v1.29.1';
export const UI_VERSION = 'v2.42.1';
/** The server's role and databases on the owner's Postgres. */
const DEFAULT_DATABASE = { role: 'temporal', temporal: 'temporal', visibility: 'temporal_visibility' };
type Database = typeof DEFAULT_DATABASE;

/**
 * mTLS on the frontend and between the services (PEM files): only clients with a certificate signed
 * by `caFile` get in. The client certificate is what the server's system worker, the Web UI server
 * and this module's own calls present.
 */
export interface ServerTls {
  caFile: string;
  certFile: string;
  keyFile: string;
  /** The name in the server's certificate that clients check (default localhost). */
  serverName?: string;
  clientCertFile: string;
  clientKeyFile: string;
}

export interface RealTemporalOptions {
  /** The Postgres owner's connection string (the embedded server's, or DATABASE_URL's). */
  ownerUrl: string;
  /** The frontend's gRPC port; the other services use the next three, membership +10…, HTTP +20. */
  port: number;
  uiPort: number;
  metricsPort: number;
  /** The codec server's endpoint the Web UI calls to show decoded payloads (none: the UI shows them encoded). */
  codecEndpoint?: string;
  namespace?: string;
  /** mTLS on the frontend (none: plaintext, as on loopback). */
  tls?: ServerTls;
  /** Another role and databases, for a second server on the same Postgres (a test's). */
  database?: Database;
  log?: (line: string) => void;
  /** Called when the server or the UI server exits on its own (not by stop() or restart()). */
  onExit?: (what: string, code: number | null, signal: string | null) => void;
  /** Called with each process as soon as it is spawned, so a caller stopping early reaches it. */
  onSpawn?: (child: ChildProcess) => void;
}

export interface RealTemporal {
  address: string;
  /** What a client connects with: the address, and with mTLS the CA and the client certificate. */
  connection: ConnectionSettings;
  uiUrl: string;
  namespace: string;
  /** Stops the server process and starts it again on the same ports and databases; how long it was down. */
  restart(): Promise<{ downMs: number }>;
  stop(): Promise<void>;
}

function binary(name: string): string {
  const p = path.join(CACHE_DIR, 'bin', name);
  if (!existsSync(p))
    throw new Error(`${p} is missing: build it with "bash scripts/ensure-servers.sh server" (go install, once)`);
  return p;
}

/**
 * The Temporal role and its two databases on the owner's server; a new password at every start.
 * A role or database of the same name that is not ours (another Temporal on that server) is refused.
 */
async function prepareDatabases(ownerUrl: string, password: string, database: Database): Promise<void> {
  const ROLE = database.role;
  const owner = createPool(ownerUrl, { max: 1 });
  try {
    await withTransaction(owner, (c) => ensureLoginRole(c, ROLE, password));
    for (const db of [database.temporal, database.visibility]) {
      const found = await owner.query<{ owner: string }>({
        text: 'SELECT pg_get_userbyid(datdba) AS owner FROM pg_database WHERE datname = $1',
        values: [db],
      });
      if (!found.rowCount) await owner.query(`CREATE DATABASE ${db} OWNER ${ROLE}`);
      else if (found.rows[0]!.owner !== ROLE)
        throw new Error(
          `database ${db} already exists and belongs to ${found.rows[0]!.owner}, not ${ROLE}; refusing to use it`,
        );
    }
  } finally {
    await owner.end();
  }
}

/** Sets up (a no-op once done) and upgrades both schemas with the server's own SQL tool. */
async function applySchemas(ownerUrl: string, password: string, database: Database): Promise<void> {
  const u = new URL(ownerUrl);
  const schema = path.join(CACHE_DIR, `temporal-schema-${SERVER_VERSION}`, 'postgresql', 'v12');
  const tool = binary(`temporal-sql-tool-${SERVER_VERSION}`);
  const run = promisify(execFile);
  for (const [dir, db] of [
    ['temporal', database.temporal],
    ['visibility', database.visibility],
  ] as const) {
    // The password goes by environment, not argv (which other users may read); nothing else of ours.
    const env = {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      SQL_PLUGIN: 'postgres12',
      SQL_HOST: u.hostname,
      SQL_PORT: u.port || '5432',
      SQL_USER: database.role,
      SQL_PASSWORD: password,
      SQL_DATABASE: db,
    };
    try {
      // Not --quiet: with it the tool exits 0 even when it failed.
      await run(tool, ['setup-schema', '-v', '0.0'], { env });
      await run(tool, ['update-schema', '-d', path.join(schema, dir, 'versioned')], { env });
    } catch (err) {
      const e = err as { stderr?: string; message: string };
      throw new Error(`temporal-sql-tool on ${db}: ${(e.stderr ?? e.message).trim().slice(-800)}`, { cause: err });
    }
  }
}

/**
 * The namespace (created if missing) and the saga's search attributes, each waited for until the
 * server serves it. npm start, the tests, and `npm run migrate` (docker compose) call it.
 */
export async function prepareNamespace(target: ConnectionSettings, namespace: string, waitMs = 30_000): Promise<void> {
  const { address } = target;
  let connection: Connection | undefined;
  for (const until = Date.now() + waitMs; !connection;) {
    try {
      connection = await Connection.connect({ ...target, connectTimeout: 2_000 });
    } catch (err) {
      if (Date.now() > until)
        throw new Error(`cannot reach Temporal at ${address}: ${(err as Error).message}`, { cause: err });
      await sleep(1_000);
    }
  }
  try {
    try {
      await connection.workflowService.describeNamespace({ namespace });
    } catch {
      await connection.workflowService
        .registerNamespace({ namespace, workflowExecutionRetentionPeriod: msToTs('3 days') })
        .catch((err: Error) => {
          if (!/already exists|already registered/i.test(err.message)) throw err;
        });
    }
    const deadline = Date.now() + waitMs;
    for (;;) {
      try {
        await connection.workflowService.listWorkflowExecutions({ namespace, pageSize: 1 });
        // Added now: listed once the server's cache has them, on a later turn.
        if ((await checkCluster(connection, namespace, address)).added.length === 0) break;
      } catch (err) {
        // Refused by the server (a cluster not ours): waiting will not help; the message says what to run.
        if (err instanceof ClusterNotReady && err.refused) throw err;
        if (Date.now() > deadline)
          throw new Error(`namespace ${namespace} not ready on ${address}: ${(err as Error).message}`, { cause: err });
      }
      if (Date.now() > deadline) throw new Error(`the search attributes did not appear on ${address}`);
      await sleep(250);
    }
    // Every service caches namespaces (refreshed each second, temporal/dynamicconfig): let them catch up.
    await sleep(1_500);
  } finally {
    await connection.close();
  }
}

async function frontendServing(target: ConnectionSettings): Promise<boolean> {
  const connection = await Connection.connect({ ...target, connectTimeout: 1_000 });
  try {
    await connection.workflowService.getSystemInfo({});
    return true;
  } finally {
    await connection.close();
  }
}

/**
 * A block of ports for a server of a test or the soak: the frontend's, then +1…+3, +10…+13 (membership),
 * +20 (HTTP), +21 (UI), +22 (metrics). Below 32768: the server stores membership ports as smallint.
 */
export function realServerPortBlock(seed = process.pid): number {
  return 20_000 + (seed % 500) * 25;
}

export async function startRealTemporal(opts: RealTemporalOptions): Promise<RealTemporal> {
  if (opts.port + 13 > 32_767)
    throw new Error(
      `port ${opts.port}: the Temporal server's ports (up to +13) must stay below 32768 (it stores membership ports as smallint)`,
    );
  const namespace = opts.namespace ?? 'default';
  const say = opts.log ?? (() => undefined);
  const server = binary(`temporal-server-${SERVER_VERSION}`);
  const ui = binary(`temporal-ui-server-${UI_VERSION}`);
  const address = `127.0.0.1:${opts.port}`;
  const database = opts.database ?? DEFAULT_DATABASE;
  const tls = opts.tls;
  const connection: ConnectionSettings = tls
    ? {
        address,
        tls: {
          serverNameOverride: tls.serverName ?? 'localhost',
          serverRootCACertificate: readFileSync(tls.caFile),
          clientCertPair: { crt: readFileSync(tls.clientCertFile), key: readFileSync(tls.clientKeyFile) },
        },
      }
    : { address };
  // First, before anything changes: a server already on these ports (another run) is left alone.
  const ports = [0, 1, 2, 3, 10, 11, 12, 13, 20].map((d) => opts.port + d).concat(opts.uiPort, opts.metricsPort);
  const busy = await busyPorts(ports);
  if (busy.length)
    throw new Error(
      `ports ${busy.join(', ')} are in use: the Temporal server needs ${opts.port}–${opts.port + 3}, ${opts.port + 10}–${opts.port + 13}, ${opts.port + 20}, ${opts.uiPort} and ${opts.metricsPort} (TEMPORAL_PORT, TEMPORAL_UI_PORT, TEMPORAL_SERVER_METRICS_PORT)`,
    );
  const password = randomBytes(18).toString('base64url');
  const u = new URL(opts.ownerUrl);
  await prepareDatabases(opts.ownerUrl, password, database);
  await applySchemas(opts.ownerUrl, password, database);
  say(`Temporal server: schemas of ${database.temporal} and ${database.visibility} up to date`);

  // The settings temporal/config and temporal/ui read that a user may set; none of our secrets.
  const passThrough = Object.fromEntries(
    ['TEMPORAL_LOG_LEVEL', 'TEMPORAL_BIND_IP', 'TEMPORAL_BROADCAST_ADDRESS', 'TEMPORAL_UI_HOST']
      .filter((k) => process.env[k])
      .map((k) => [k, process.env[k]]),
  );
  const serverEnv: NodeJS.ProcessEnv = {
    TEMPORAL_DB_HOST: u.hostname,
    TEMPORAL_DB_PORT: u.port || '5432',
    TEMPORAL_DB_USER: database.role,
    TEMPORAL_DB_PASSWORD: password,
    TEMPORAL_DB_NAME: database.temporal,
    TEMPORAL_VISIBILITY_DB_NAME: database.visibility,
    ...(tls
      ? {
          TEMPORAL_SERVER_TLS_CA: tls.caFile,
          TEMPORAL_SERVER_TLS_CERT: tls.certFile,
          TEMPORAL_SERVER_TLS_KEY: tls.keyFile,
          TEMPORAL_SERVER_TLS_NAME: tls.serverName ?? 'localhost',
          TEMPORAL_SYSTEM_WORKER_CERT: tls.clientCertFile,
          TEMPORAL_SYSTEM_WORKER_KEY: tls.clientKeyFile,
        }
      : {}),
    TEMPORAL_PORT_BASE: String(opts.port),
    TEMPORAL_METRICS_PORT: String(opts.metricsPort),
    TEMPORAL_DYNAMIC_CONFIG: path.join(ROOT, 'temporal', 'dynamicconfig', 'order-saga.yaml'),
    ...passThrough,
  };
  let stopping = false;
  /** Set by stop(): a restart under way must not leave a new server behind. */
  let closed = false;
  let restarting: Promise<unknown> | undefined;
  /** Reports an exit nobody asked for. */
  const onExit = (what: string) => (code: number | null, signal: string | null) =>
    void (!stopping && opts.onExit?.(what, code, signal));
  // The servers get only the variables they need: none of our database URLs or keys.
  const startServer = async (): Promise<ChildProcess> =>
    (
      await startProcess(
        server,
        ['--root', ROOT, '--config', 'temporal/config', '--env', 'order-saga', '--allow-no-auth', 'start'],
        serverEnv,
        () => frontendServing(connection),
        {
          readyTimeoutMs: 90_000,
          cleanEnv: true,
          onSpawn: opts.onSpawn,
          onExit: onExit('the Temporal server'),
        },
      )
    ).child;
  let serverChild = await startServer();
  let uiChild: ChildProcess | undefined;
  try {
    await prepareNamespace(connection, namespace);
    const uiUrl = `http://127.0.0.1:${opts.uiPort}`;
    uiChild = (
      await startProcess(
        ui,
        ['--root', ROOT, '--config', 'temporal/ui', '--env', 'order-saga', 'start'],
        {
          TEMPORAL_ADDRESS: address,
          TEMPORAL_UI_PORT: String(opts.uiPort),
          TEMPORAL_UI_ORIGIN: uiUrl,
          ...(opts.codecEndpoint ? { TEMPORAL_CODEC_ENDPOINT: opts.codecEndpoint } : {}),
          TEMPORAL_NAMESPACE: namespace,
          ...(tls
            ? {
                TEMPORAL_TLS_SERVER_CA_CERT_PATH: tls.caFile,
                TEMPORAL_TLS_CLIENT_CERT_PATH: tls.clientCertFile,
                TEMPORAL_TLS_CLIENT_KEY_PATH: tls.clientKeyFile,
                TEMPORAL_TLS_SERVER_NAME: tls.serverName ?? 'localhost',
              }
            : {}),
          ...passThrough,
        },
        async () => (await fetch(uiUrl, { signal: AbortSignal.timeout(1_000) })).ok,
        { cleanEnv: true, onSpawn: opts.onSpawn, onExit: onExit('the Temporal Web UI server') },
      )
    ).child;
    say(`Temporal server ${SERVER_VERSION} on Postgres: ${address} (namespace ${namespace}), Web UI ${uiUrl}`);
    return {
      address,
      connection,
      uiUrl,
      namespace,
      async restart() {
        const t = Date.now();
        const run = (async () => {
          stopping = true;
          await stopProcess(serverChild, 'SIGTERM', 20_000);
          if (closed) throw new Error('the Temporal server was stopped during its restart');
          stopping = false;
          serverChild = await startServer();
          if (closed) {
            stopping = true;
            await stopProcess(serverChild, 'SIGTERM', 20_000);
            throw new Error('the Temporal server was stopped during its restart');
          }
        })();
        restarting = run.catch(() => undefined);
        await run;
        return { downMs: Date.now() - t };
      },
      async stop() {
        closed = true;
        stopping = true;
        await restarting;
        await stopProcess(uiChild);
        await stopProcess(serverChild, 'SIGTERM', 20_000);
      },
    };
  } catch (err) {
    stopping = true;
    await stopProcess(uiChild);
    await stopProcess(serverChild, 'SIGTERM', 20_000);
    throw err;
  }
}
