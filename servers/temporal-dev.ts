/**
 * The Temporal CLI's dev server, started with the saga's search attributes, and where it and the Java
 * time-skipping server come from.
 * scripts/ensure-servers.sh builds the binaries from package registries into the cache;
 * TEMPORAL_CLI_PATH / TEMPORAL_TEST_SERVER_PATH override; with neither, the SDK's own download is
 * used (needs internet).
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { connect } from 'node:net';
import path from 'node:path';
import {
  TestWorkflowEnvironment,
  type ClientOptionsForTestEnv,
  type EphemeralServerExecutable,
} from '@temporalio/testing';
import { freePort } from '../platform/processes';
import { CACHE_DIR } from './cache';
import { latencyDynamicConfig } from './latency';
import { CustomerIdKey, NeedsAttentionKey, OrderStatusKey, TotalCentsKey } from '../workflows/search-attributes';

function executable(envVar: string, cached: string): EphemeralServerExecutable | undefined {
  const override = process.env[envVar];
  if (override) {
    if (!existsSync(override)) throw new Error(`${envVar}=${override} does not exist`);
    return { type: 'existing-path', path: override };
  }
  return existsSync(cached) ? { type: 'existing-path', path: cached } : undefined;
}

/** The Temporal CLI (dev server with the Web UI). undefined → let the SDK download it. */
export const devServerExecutable = (): EphemeralServerExecutable | undefined =>
  executable('TEMPORAL_CLI_PATH', path.join(CACHE_DIR, 'bin', 'temporal'));

/**
 * SQLite settings of the file-backed dev server (`npm start`). WAL lets readers and the writer work at
 * once and commits with one fsync of the log instead of two of the database and its journal;
 * `synchronous=normal` in WAL mode keeps every commit across a stop, a crash or a kill of the server
 * process (only a power cut or an OS crash can lose the last commits). Measured in docs/decisions.md.
 */
export const DEV_SERVER_SQLITE_PRAGMAS = ['journal_mode=wal', 'synchronous=normal'];

/** The dev server's options for history kept in `dbFilename` (npm start, and its durability test). */
const fileBackedDevServer = (dbFilename: string): { dbFilename: string; extraArgs: string[] } => ({
  dbFilename,
  extraArgs: DEV_SERVER_SQLITE_PRAGMAS.flatMap((p) => ['--sqlite-pragma', p]),
});

export interface DevServerOptions {
  /** The frontend's gRPC port (none: a free one). */
  port?: number;
  /** The Web UI on this port (none: no Web UI). */
  uiPort?: number;
  /** History kept in this SQLite file, with DEV_SERVER_SQLITE_PRAGMAS (none: in memory). */
  dbFilename?: string;
  /**
   * Dynamic config values (`--dynamic-config-value KEY=VALUE`, the value as JSON), over the latency
   * settings (servers/latency.ts).
   */
  dynamicConfig?: Record<string, unknown>;
  /** false: the dev server's own defaults instead of the latency settings (the bench's before-and-after). */
  latencySettings?: boolean;
  /** The codec server's endpoint the Web UI calls to show decoded payloads (`--ui-codec-endpoint`). */
  codecEndpoint?: string;
  /** The server's own log level (default `error`; `never` silences it). */
  logLevel?: 'debug' | 'info' | 'warn' | 'error' | 'never';
  /** The namespace it creates and the environment's client uses (default: the SDK's, `default`). */
  namespace?: string;
  /** The environment's client (its data converter: the payload codec and failure converter). */
  client?: ClientOptionsForTestEnv;
}

/**
 * The Temporal CLI's dev server on loopback, with the saga's search attributes: what npm start, the
 * tests, the chaos soak and the benchmark run. The executable is the cached CLI (devServerExecutable).
 */
export async function startDevServer(opts: DevServerOptions = {}): Promise<TestWorkflowEnvironment> {
  const executable = devServerExecutable();
  const file = opts.dbFilename ? fileBackedDevServer(opts.dbFilename) : undefined;
  const values = { ...(opts.latencySettings === false ? {} : latencyDynamicConfig()), ...opts.dynamicConfig };
  const dynamic = Object.entries(values).flatMap(([k, v]) => ['--dynamic-config-value', `${k}=${JSON.stringify(v)}`]);
  const codec = opts.codecEndpoint ? ['--ui-codec-endpoint', opts.codecEndpoint] : [];
  const extraArgs = [...(file?.extraArgs ?? []), ...dynamic, ...codec];
  return TestWorkflowEnvironment.createLocal({
    ...(opts.client ? { client: opts.client } : {}),
    server: {
      ...(executable ? { executable } : {}),
      ip: '127.0.0.1',
      ...(opts.port !== undefined ? { port: opts.port } : {}),
      ...(opts.uiPort ? { ui: true, uiPort: opts.uiPort } : {}),
      ...(file ? { dbFilename: file.dbFilename } : {}),
      ...(extraArgs.length ? { extraArgs } : {}),
      ...(opts.namespace !== undefined ? { namespace: opts.namespace } : {}),
      searchAttributes: [OrderStatusKey, CustomerIdKey, NeedsAttentionKey, TotalCentsKey],
      log: { format: 'pretty', level: opts.logLevel ?? 'error' },
    },
  });
}

/** The Java time-skipping test server's wrapper. undefined → let the SDK download it. */
export const testServerExecutable = (): EphemeralServerExecutable | undefined =>
  executable('TEMPORAL_TEST_SERVER_PATH', path.join(CACHE_DIR, 'bin', 'temporal-test-server'));

/**
 * How long the Java test server may take to listen. The SDK gives a server it starts 5 s, which a JVM
 * on a busy 2-core machine (test files starting theirs at once) sometimes misses; a server this module
 * starts gets this bound instead.
 */
export const TEST_SERVER_START_MS = 60_000;

/** Resolves once `port` on loopback accepts a connection; rejects past `withinMs` or if `exited` settles. */
async function listening(port: number, withinMs: number, exited: Promise<string>): Promise<void> {
  const deadline = Date.now() + withinMs;
  let gone: string | undefined;
  void exited.then((why) => (gone = why));
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const sock = connect({ host: '127.0.0.1', port }, () => (sock.end(), resolve(true)));
      sock.once('error', () => resolve(false));
    });
    if (ok) return;
    if (gone !== undefined) throw new Error(`the Java test server exited before it listened (${gone})`);
    if (Date.now() > deadline)
      throw new Error(`the Java test server did not listen on 127.0.0.1:${port} within ${withinMs / 1000} s`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * The Java time-skipping test server with its client and worker connections. The cached (or
 * TEMPORAL_TEST_SERVER_PATH) wrapper is started here, on a free loopback port, within
 * TEST_SERVER_START_MS, and stopped by the environment's teardown; without one, the SDK downloads and
 * starts it.
 */
export async function startTimeSkippingServer(
  opts: { client?: ClientOptionsForTestEnv } = {},
): Promise<TestWorkflowEnvironment> {
  const executable = testServerExecutable();
  if (executable?.type !== 'existing-path') {
    return TestWorkflowEnvironment.createTimeSkipping(opts.client ? { client: opts.client } : {});
  }
  const port = await freePort();
  const child = spawn(executable.path, [String(port)], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-2000)));
  const exited = new Promise<string>((resolve) => {
    child.once('error', (err) => resolve(err.message));
    child.once('exit', (code, signal) => resolve(`${signal ?? `exit ${code}`}${stderr ? `: ${stderr.trim()}` : ''}`));
  });
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited;
  };
  try {
    await listening(port, TEST_SERVER_START_MS, exited);
    // The SDK's own factory for a server it did not start, with its test service (time skipping) on:
    // createFromExistingServer turns that off, and the factory is not part of the typed API.
    const create = (
      TestWorkflowEnvironment as unknown as {
        create(o: Record<string, unknown>): Promise<TestWorkflowEnvironment>;
      }
    ).create.bind(TestWorkflowEnvironment);
    const env = await create({
      server: { type: 'existing' },
      address: `127.0.0.1:${port}`,
      supportsTimeSkipping: true,
      ...(opts.client ? { client: opts.client } : {}),
    });
    const teardown = env.teardown.bind(env);
    env.teardown = async () => {
      await teardown();
      await stop();
    };
    return env;
  } catch (err) {
    await stop();
    throw err;
  }
}
