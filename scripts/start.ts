/**
 * `npm start`: the whole stack on loopback, on embedded defaults, until Ctrl-C.
 *   1. Postgres (embedded, data in .data/pg or PG_DATA_DIR; unless DATABASE_URL is set), migrated and
 *      seeded as its owner, with a role each for the worker, the provider and the read-only checks
 *      (db/roles.ts);
 *   2. Temporal dev server with its Web UI on :8233, its state kept in .data/temporal.db, with the
 *      saga's search attributes registered; unless TEMPORAL_ADDRESS or a connection profile names a
 *      server (ops/temporal-connection.ts), which is checked first (ops/cluster-check.ts);
 *   3. the payment provider and the worker, as child processes; the workflows bundled once here, quietly
 *      (the bundler's module statistics are not for this screen; its errors are), and loaded by every
 *      worker process from .data/workflow-bundle.js (WORKFLOW_BUNDLE) instead of each bundling again;
 *   4. the workers' build (BUILD_ID, else ops/deployments.ts makes one) made the current version of
 *      the Worker Deployment `order-saga` once they poll: new sagas go to it, each pinned to it;
 *   5. both Schedules of ops/schedules.ts, created or updated: `sweep` (SWEEP_EVERY, 1m) and
 *      `reconcile` (RECONCILE_EVERY, 1h);
 *   6. the orders API (api/server.ts) on 127.0.0.1:8080 (API_PORT, API_HOST), with a development key
 *      for storefront `dev` kept in .data/api-key (made once, mode 0600; a key the database no longer
 *      knows is replaced).
 * Ctrl-C stops them all, children first.
 */
import { spawnSync, type ChildProcess } from 'node:child_process';
import { parseArgs } from 'node:util';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { bundleWorkflowCode, DefaultLogger } from '@temporalio/worker';
import { createPool } from '../db/pool';
import { passwordsFromEnv, prepareDatabase, ROLES } from '../db/roles';
import { createApiKey, verifyApiKey } from '../orders/api-keys';
import { DEFAULT_PORTS, listUrl, loopbackUrl, operatorViews, readConfig, RUNTIME_FILE } from '../ops/config';
import { checkExternalTemporal } from '../ops/cluster-check';
import { startCodecServer } from '../ops/codec-server';
import { SHAREABLE_PROFILE_VARIABLES, type TemporalProfile } from '../ops/temporal-connection';
import {
  DEFAULT_KEY_FILE,
  dataConverterFor,
  EncryptionCodec,
  ensureKeyFile,
  requirePayloadKeys,
} from '../platform/payload-codec';
import { startTsProcess, stopProcess } from '../platform/processes';
import { tracingWorkflowModules } from '../platform/tracing';
import { APP_SCHEDULES, upsertSchedule } from '../ops/schedules';
import { workflowBundleOptions, WORKFLOWS_PATH } from '../ops/workflow-bundle';
import {
  DEPLOYMENT_NAME,
  makeVersionCurrent,
  openPinnedRuns,
  openPinnedRunsQuery,
  orderTaskQueues,
  resolveBuildId,
  versionName,
} from '../ops/deployments';
import { ensurePostgres } from '../servers/postgres';
import { devServerExecutable, startDevServer } from '../servers/temporal-dev';
import { startRealTemporal } from '../servers/temporal-server';
import { DEFAULT_SAGA_CONFIG } from '../workflows/order-saga';

const ROOT = path.resolve(__dirname, '..');
const DATA = path.join(ROOT, '.data');
const say = (line: string): void => void process.stdout.write(`[start] ${line}\n`);

/** What an operator runs to make `version` current, on the cluster this process's profile names. */
const setCurrentCommand = (version: { deploymentName: string; buildId: string }, namespace: string): string =>
  `temporal worker deployment set-current-version --deployment-name ${version.deploymentName} --build-id ${version.buildId} --namespace ${namespace}` +
  (process.env.TEMPORAL_PROFILE ? ` --profile ${process.env.TEMPORAL_PROFILE}` : '');

const USAGE = `Usage: npm start [-- --temporal dev|server] [-- --workers N]
  --temporal dev     the Temporal CLI's dev server, history in .data/temporal.db (default)
  --temporal server  the real Temporal server, history in Postgres (databases temporal, temporal_visibility),
                     with the standalone Web UI; built once with go install (scripts/ensure-servers.sh server)
  --workers N        N worker processes (default 1); the serial lanes stay serial across them
Environment: see the README (TEMPORAL_ADDRESS or a connection profile, TEMPORAL_PROFILE, skips starting a
Temporal server: docs/own-temporal.md).`;

/**
 * Bundles the workflows once for every worker process, into .data/ (written aside, then renamed, so a
 * worker never reads half a file). The bundler reports its warnings and errors only: its module
 * statistics (info) are noise here, and a failed bundle still names its cause before `failed:`.
 * With the failure converter the workers use, so failures stay encoded inside the sandbox too.
 */
async function bundleWorkflows(): Promise<string> {
  const started = Date.now();
  const bundle = await bundleWorkflowCode({
    workflowsPath: WORKFLOWS_PATH,
    ...workflowBundleOptions(),
    // Tracing on (OTEL_EXPORTER_OTLP_ENDPOINT): the workflow interceptors go into the bundle, or its spans would be missing.
    workflowInterceptorModules: tracingWorkflowModules(),
    logger: new DefaultLogger('WARN', ({ level, message }) =>
      process.stderr.write(`[start] workflow bundle: ${level}: ${message}\n`),
    ),
  });
  const file = path.join(DATA, 'workflow-bundle.js');
  const partial = `${file}.${process.pid}.partial`;
  writeFileSync(partial, bundle.code);
  renameSync(partial, file);
  say(
    `workflows: bundled in ${((Date.now() - started) / 1000).toFixed(1)} s into ${path.relative(ROOT, file)}, loaded by each worker`,
  );
  return file;
}

/** Where npm start keeps the development key of the orders API (never committed: .data/ is ignored). */
const DEV_API_KEY_FILE = path.join(DATA, 'api-key');

/** The development key for storefront `dev`: the one in DEV_API_KEY_FILE while the database knows it, else a new one. */
async function devApiKey(appUrl: string): Promise<{ made: boolean }> {
  const pool = createPool(appUrl, { max: 1 });
  try {
    const kept = existsSync(DEV_API_KEY_FILE) ? readFileSync(DEV_API_KEY_FILE, 'utf8').trim() : '';
    if (kept && (await verifyApiKey(pool, kept))) return { made: false };
    const { key } = await createApiKey(pool, 'dev');
    writeFileSync(DEV_API_KEY_FILE, `${key}\n`, { mode: 0o600 });
    return { made: true };
  } finally {
    await pool.end();
  }
}

/**
 * The Temporal connection profile (ops/temporal-connection.ts), before anything starts or is written:
 * one that cannot be used exits 2, naming the setting.
 */
function temporalProfileOrExit(env: NodeJS.ProcessEnv): TemporalProfile {
  try {
    return readConfig(env).temporal;
  } catch (err) {
    process.stderr.write(`invalid input: ${(err as Error).message}\n`);
    process.exit(2);
  }
}

/** The command line: --temporal (ORDER_SAGA_TEMPORAL) and --workers. Exits 2 naming a bad value. */
function options(argv: string[], env: NodeJS.ProcessEnv): { temporal: 'dev' | 'server'; workers: number } {
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      options: { temporal: { type: 'string' }, workers: { type: 'string' }, help: { type: 'boolean' } },
    }));
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n${USAGE}\n`);
    process.exit(2);
  }
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    process.exit(0);
  }
  const temporal = values.temporal ?? env.ORDER_SAGA_TEMPORAL ?? 'dev';
  if (temporal !== 'dev' && temporal !== 'server') {
    process.stderr.write(`invalid input: --temporal: dev or server, not "${temporal}"\n`);
    process.exit(2);
  }
  const workers = Number(values.workers ?? '1');
  if (!Number.isInteger(workers) || workers < 1 || workers > 16) {
    process.stderr.write(`invalid input: --workers: a whole number from 1 to 16, not "${values.workers}"\n`);
    process.exit(2);
  }
  return { temporal, workers };
}

async function main(): Promise<void> {
  const opts = options(process.argv.slice(2), process.env);
  const profile = temporalProfileOrExit({ ...process.env });
  mkdirSync(DATA, { recursive: true });
  const cleanups: (() => Promise<void>)[] = [];
  const children: ChildProcess[] = [];
  let stopping = false;
  let wroteRuntime = false;

  let stopped: Promise<void> | undefined;
  /** Stops children (newest first), then the servers; a second signal waits for the same stop. */
  const shutdown = async (code: number): Promise<void> => {
    stopped ??= (async () => {
      stopping = true;
      say('stopping…');
      for (const child of [...children].reverse()) {
        await stopProcess(child, 'SIGTERM', 20_000); // 20 s: the Temporal server's graceful stop takes about 10
      }
      for (const c of cleanups.reverse()) await c().catch((err: Error) => say(`cleanup: ${err.message}`));
      if (wroteRuntime) rmSync(RUNTIME_FILE, { force: true }); // only ours: never another npm start's
      say('stopped');
      process.exit(code);
    })();
    await stopped;
  };
  // After the terminal closes, writing to it fails; stopping must go on regardless.
  process.stdout.on('error', () => undefined);
  process.stderr.on('error', () => undefined);
  process.on('SIGINT', () => void shutdown(0));
  process.on('SIGTERM', () => void shutdown(0));
  process.on('SIGHUP', () => void shutdown(0)); // the terminal closed, or npm exited first

  try {
    const env = { ...process.env };
    // ---- Postgres ----
    // First, so that a refusal (say, of a planted /var/tmp directory) comes before anything else starts.
    const pg = await ensurePostgres({
      dataDir: path.resolve(env.PG_DATA_DIR ?? path.join(DATA, 'pg')),
      port: Number(env.PG_PORT ?? DEFAULT_PORTS.postgres),
      database: 'orders',
      persistent: true,
      ...(env.PG_SHARED_DIR ? { sharedBase: path.resolve(env.PG_SHARED_DIR) } : {}),
    });
    cleanups.push(() => pg.stop());
    // With DATABASE_URL the roles' passwords may come from APP_/PROVIDER_/READER_ROLE_PASSWORD; else new ones.
    const { applied, urls } = await prepareDatabase(pg.url, passwordsFromEnv(env));
    say(
      `postgres: ${pg.embedded ? `embedded, data in ${pg.dataDir!.startsWith(ROOT) ? path.relative(ROOT, pg.dataDir!) : pg.dataDir}` : 'DATABASE_URL'}; migrations applied now: ${applied.length ? applied.join(', ') : 'none (up to date)'}`,
    );

    // ---- The payload keys and the codec server (before Temporal: its Web UI is given the codec's address) ----
    const keyFile = env.PAYLOAD_KEY_FILE ? path.resolve(env.PAYLOAD_KEY_FILE) : DEFAULT_KEY_FILE;
    const madeKeys = env.PAYLOAD_KEYS?.trim() ? false : ensureKeyFile(keyFile);
    const keys = requirePayloadKeys(env);
    const dataConverter = dataConverterFor(keys);
    const uiPort = Number(env.TEMPORAL_UI_PORT ?? DEFAULT_PORTS.temporalUi);
    const codecServer = await startCodecServer({
      codec: new EncryptionCodec(keys),
      // A new token at every start, unless one is given; the Web UI's endpoint carries it.
      token: env.CODEC_SERVER_TOKEN ?? randomBytes(24).toString('base64url'),
      // And a cluster's own Web UI (TEMPORAL_UI_URL), which calls it from the operator's browser.
      allowOrigins: [
        loopbackUrl(uiPort),
        `http://localhost:${uiPort}`,
        ...(env.TEMPORAL_UI_URL ? [new URL(env.TEMPORAL_UI_URL).origin] : []),
      ],
      port: Number(env.CODEC_SERVER_PORT ?? DEFAULT_PORTS.codecServer),
      log: say,
    });
    cleanups.push(() => codecServer.close());
    say(
      `payload keys: ${madeKeys ? `created ${path.relative(ROOT, keyFile)} (mode 0600)` : keys.source === 'PAYLOAD_KEYS' ? 'PAYLOAD_KEYS' : path.relative(ROOT, keys.source)}, current ${keys.current}; codec server ${codecServer.url}`,
    );

    // ---- Temporal ----
    // One named by the profile: checked before anything of ours runs on it or changes it.
    if (profile.external) say(`Temporal: ${profile.summary}: ${await checkExternalTemporal(profile)}`);
    let temporalAddress = profile.external ? profile.address : undefined;
    let uiUrl = env.TEMPORAL_UI_URL ?? loopbackUrl(DEFAULT_PORTS.temporalUi);
    const namespace = profile.namespace;
    if (!temporalAddress && opts.temporal === 'server') {
      const built = spawnSync('bash', [path.join(ROOT, 'scripts', 'ensure-servers.sh'), 'server'], {
        stdio: 'inherit',
      });
      if (built.status !== 0)
        throw new Error('could not build the Temporal server (scripts/ensure-servers.sh server failed)');
      say('starting the Temporal server on Postgres (databases temporal and temporal_visibility) and its Web UI…');
      const real = await startRealTemporal({
        ownerUrl: pg.url,
        port: Number(env.TEMPORAL_PORT ?? DEFAULT_PORTS.temporal),
        uiPort,
        metricsPort: Number(env.TEMPORAL_SERVER_METRICS_PORT ?? DEFAULT_PORTS.temporalServerMetrics),
        codecEndpoint: codecServer.uiEndpoint,
        namespace,
        log: say,
        onSpawn: (child) => children.push(child),
        onExit: (what, code, signal) => {
          if (!stopping) {
            say(`${what} exited (code ${code}, signal ${signal}); stopping everything`);
            void shutdown(1);
          }
        },
      });
      cleanups.push(() => real.stop());
      temporalAddress = real.address;
      uiUrl = real.uiUrl;
    } else if (!temporalAddress) {
      const built = spawnSync('bash', [path.join(ROOT, 'scripts', 'ensure-servers.sh'), 'cli'], { stdio: 'inherit' });
      if (built.status !== 0) throw new Error('could not obtain the Temporal CLI (scripts/ensure-servers.sh failed)');
      const executable = devServerExecutable();
      say(
        `starting the Temporal dev server${executable ? ` (${path.basename(executable.type === 'existing-path' ? executable.path : '')})` : ' (SDK download)'}…`,
      );
      const tenv = await startDevServer({
        port: Number(env.TEMPORAL_PORT ?? DEFAULT_PORTS.temporal),
        uiPort,
        dbFilename: path.join(DATA, 'temporal.db'),
        codecEndpoint: codecServer.uiEndpoint,
        namespace,
        logLevel: 'warn',
      });
      cleanups.push(() => tenv.teardown());
      temporalAddress = tenv.address;
      uiUrl = loopbackUrl(env.TEMPORAL_UI_PORT ?? DEFAULT_PORTS.temporalUi);
    }
    // Ours: plaintext on loopback; the profile's: its TLS, certificate or API key.
    const temporalConnection = profile.external ? profile.connection : { address: temporalAddress };

    const providerPort = env.PROVIDER_PORT ?? String(DEFAULT_PORTS.provider);
    // One build ID for every worker process, computed once (a file edited meanwhile changes nothing).
    const versioned = env.WORKER_VERSIONING !== 'off';
    const buildId = versioned ? resolveBuildId(env) : undefined;
    const childEnv: NodeJS.ProcessEnv = {
      ...env,
      TEMPORAL_ADDRESS: temporalAddress,
      TEMPORAL_NAMESPACE: namespace,
      TEMPORAL_UI_URL: uiUrl,
      PROVIDER_PORT: providerPort,
      PROVIDER_URL: env.PROVIDER_URL ?? loopbackUrl(providerPort),
    };
    /** Starts a child with its output prefixed by its name; its exit after it was ready stops everything. */
    const launch = async (name: string, script: string, ready: RegExp, roleEnv: NodeJS.ProcessEnv): Promise<void> => {
      const prefix = (stream: NodeJS.WriteStream) => (line: string) =>
        void (line.trim() && stream.write(`[${name}] ${line}\n`));
      await startTsProcess(script, { ...childEnv, ...roleEnv }, ready, {
        onLine: prefix(process.stdout),
        onErrLine: prefix(process.stderr),
        readyTimeoutMs: 120_000,
        onSpawn: (c) => children.push(c), // a stop during the start reaches it too
        onExit: (code, signal) => {
          if (!stopping) {
            say(`${name} exited (code ${code}, signal ${signal}); stopping everything`);
            void shutdown(1);
          }
        },
      });
    };
    await launch('provider', 'provider/server.ts', /"listening"/, { DATABASE_URL: urls.provider });
    const appEnv = { DATABASE_URL: urls.app, READER_DATABASE_URL: urls.reader };
    // N worker processes on the same task queues; lanes stay serial across them (activities/lane-lock.ts).
    const metricsPort = Number(env.WORKER_METRICS_PORT ?? DEFAULT_PORTS.workerMetrics);
    // A WORKFLOW_BUNDLE given is used as it is (childEnv carries it); else one bundle for all of them.
    const bundleEnv = env.WORKFLOW_BUNDLE ? {} : { WORKFLOW_BUNDLE: await bundleWorkflows() };
    await Promise.all(
      Array.from({ length: opts.workers }, (_, i) =>
        launch(opts.workers > 1 ? `worker-${i + 1}` : 'worker', 'worker.ts', /polling task queue/, {
          ...appEnv,
          ...bundleEnv,
          WORKER_METRICS_PORT: String(metricsPort + i),
          // The runtime's Prometheus endpoint: the first worker's only (one port per machine).
          ...(i > 0 ? { TEMPORAL_METRICS_ADDRESS: 'off' } : {}),
          ...(buildId ? { BUILD_ID: buildId } : {}),
        }),
      ),
    );

    // ---- The new build becomes current once its workers poll; runs of an earlier build stay on it ----
    const cfg = readConfig(childEnv);
    let versionLine = 'unversioned (WORKER_VERSIONING=off)';
    if (buildId) {
      const version = { deploymentName: DEPLOYMENT_NAME, buildId };
      const connection = await Connection.connect(temporalConnection);
      try {
        const made = await makeVersionCurrent(connection, {
          namespace,
          version,
          taskQueues: orderTaskQueues(cfg.taskQueue, DEFAULT_SAGA_CONFIG.inventoryLanes),
          identity: 'npm start',
          log: say,
        }).catch((err: Error) => {
          // On a cluster of someone else's this client may not be allowed to: say what to run instead.
          if (!profile.external) throw err;
          say(
            `could not make ${versionName(version)} current (${err.message.split('\n')[0]}); an operator makes it current with: ${setCurrentCommand(version, namespace)}`,
          );
          return undefined;
        });
        versionLine = made
          ? `${versionName(version)}, current, new sagas pinned to it`
          : `${versionName(version)}, NOT current: new sagas wait until an operator makes it current`;
        if (made?.previous && made.previous.buildId !== buildId) {
          const open = await openPinnedRuns(connection, namespace, made.previous);
          versionLine += `; previous ${versionName(made.previous)}: ${open} pinned run(s) open`;
          if (open > 0)
            say(
              `${open} saga(s) pinned to ${versionName(made.previous)} wait for a worker of that build (BUILD_ID=${made.previous.buildId} npx tsx worker.ts from its commit); list them with: ${openPinnedRunsQuery(made.previous)} (docs/versioning.md)`,
            );
        }
      } finally {
        await connection.close();
      }
    }

    // ---- The Schedules: the sweeper (no open order is left without a live run or a person told) and the reconciliation ----
    const schedules = APP_SCHEDULES.map((s) => ({ ...s, every: env[s.everyVariable] ?? s.defaultEvery }));
    {
      const connection = await Connection.connect(temporalConnection);
      try {
        const client = new Client({ connection, namespace, dataConverter });
        for (const s of schedules) await upsertSchedule(client, { ...s, taskQueue: cfg.taskQueue });
      } finally {
        await connection.close();
      }
    }
    // ---- The orders API, with a development key ----
    const devKey = await devApiKey(urls.app);
    const apiPort = env.API_PORT ?? String(DEFAULT_PORTS.api);
    await launch('api', 'api/server.ts', /"listening"/, { ...appEnv, API_PORT: apiPort });
    const apiUrl = `http://${env.API_HOST ?? '127.0.0.1'}:${apiPort}`;

    const runtime = {
      // The profile's variables that hold no secret (an API key or key content is never written).
      ...Object.fromEntries(SHAREABLE_PROFILE_VARIABLES.filter((k) => env[k]).map((k) => [k, env[k]])),
      TEMPORAL_ADDRESS: temporalAddress,
      TEMPORAL_NAMESPACE: namespace,
      TEMPORAL_UI_URL: uiUrl,
      ...appEnv,
      PROVIDER_URL: childEnv.PROVIDER_URL,
      WORKER_METRICS_URL: loopbackUrl(metricsPort),
      CODEC_SERVER_URL: codecServer.url,
      CODEC_SERVER_TOKEN: codecServer.token,
    };
    writeFileSync(RUNTIME_FILE, `${JSON.stringify(runtime, null, 2)}\n`, { mode: 0o600 });
    wroteRuntime = true;
    say(`Temporal:  ${cfg.temporal.summary}`);
    say(`Web UI:    ${cfg.uiUrl}/namespaces/${cfg.namespace}/workflows`);
    say(`  needs attention: ${listUrl(cfg, operatorViews(new Date())[0]!.query)}   (more: npx tsx client.ts views)`);
    say(
      `Postgres:  ${pg.url.replace(/\/\/[^@/]*@/, '//')} as ${ROLES.app} (worker, client.ts), ${ROLES.provider} (provider), ${ROLES.reader} (checks, read-only)`,
    );
    say(
      `Provider:  ${cfg.providerUrl} (admin API ${loopbackUrl(env.PROVIDER_ADMIN_PORT ?? DEFAULT_PORTS.providerAdmin)})`,
    );
    say(
      `Workers:   ${opts.workers} process${opts.workers > 1 ? 'es' : ''} (metrics ${opts.workers > 1 ? `ports ${metricsPort}–${metricsPort + opts.workers - 1}` : `port ${metricsPort}`})`,
    );
    say(`Build:     ${versionLine}`);
    say(
      `Schedules: ${schedules.map((s) => `${s.scheduleId} every ${s.every}`).join(', ')} (client.ts sweeps, findings; client.ts check says whether they run)`,
    );
    say(
      `Payloads:  encrypted with key ${keys.current}; the Web UI decodes through ${codecServer.url} (the Temporal CLI too: --codec-endpoint ${codecServer.url} --codec-auth "Bearer $CODEC_SERVER_TOKEN", the token in ${path.relative(ROOT, RUNTIME_FILE)})`,
    );
    say(
      `Metrics:   ${cfg.workerMetricsUrl}/metrics (inventory), ${loopbackUrl(DEFAULT_PORTS.temporalMetrics)}/metrics (Temporal runtime)`,
    );
    say(
      `Orders API: ${apiUrl} (docs/api.md); key of storefront dev ${devKey.made ? 'made in' : 'in'} ${path.relative(ROOT, DEV_API_KEY_FILE)}`,
    );
    say(`READY — try: npx tsx client.ts place --file examples/order.json   (Ctrl-C to stop)`);
    say(
      `  or: curl -H "Authorization: Bearer $(cat .data/api-key)" -H 'Idempotency-Key: first' -H 'Content-Type: application/json' -d @examples/api-order.json ${apiUrl}/v1/orders`,
    );
  } catch (err) {
    say(`failed: ${(err as Error).message}`);
    await shutdown(1);
  }
}

void main();
