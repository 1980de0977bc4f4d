/**
 * The chaos soak's stack, all on loopback: its own Postgres, the Temporal dev server, the provider
 * (restartable on fixed ports, its applied faults counted from its log) and N worker processes, each
 * SIGKILLed and restarted on its own schedule. The workers are versioned as under npm start: one
 * build (its ID computed once, so every restart rejoins the same version), made current once the
 * first workers poll; every saga is pinned to it. Mid-soak a deploy makes a new build current and
 * stops the old build's workers after the drain decision (deploy()). The orders API runs as its own
 * process too (api/server.ts, a storefront's key made for the soak), SIGKILLed and started again once.
 */
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { bundleWorkflowCode, DefaultLogger } from '@temporalio/worker';
import type { Pool } from 'pg';
import { createPool } from '../../db/pool';
import { prepareDatabase, type RoleUrls } from '../../db/roles';
import { createApiKey } from '../../orders/api-keys';
import {
  freePort,
  startProviderProcess,
  startTsProcess,
  startWorkerProcess,
  stopProcess,
} from '../../platform/processes';
import {
  DEPLOYMENT_NAME,
  makeVersionCurrent,
  openPinnedRuns,
  orderTaskQueues,
  resolveBuildId,
  versionName,
} from '../../ops/deployments';
import { existingServerOptions } from '../../ops/temporal-connection';
import { workflowBundleOptions, WORKFLOWS_PATH } from '../../ops/workflow-bundle';
import { DEFAULT_SAGA_CONFIG } from '../../workflows/order-saga';
import { dataConverterFor, parseKeyList } from '../../platform/payload-codec';
import { createProviderAdmin, type ProviderAdmin } from '../../provider/client';
import type { FaultRequest } from '../../provider/faults';
import { ensurePostgres, type EmbeddedOptions, type PostgresHandle } from '../../servers/postgres';
import { startDevServer } from '../../servers/temporal-dev';
import { SAGA_CONFIG } from './options';
import { startReceiver, type Receiver, type ReceiverMode } from './receiver';
import {
  realServerPortBlock,
  startRealTemporal,
  SERVER_VERSION,
  type RealTemporal,
} from '../../servers/temporal-server';

/** The name the soak's operators give the provider (X-Client-Name), so faults they meet count apart. */
export const OPERATOR_CLIENT = 'chaos-operator';

/** A restart that was confirmed: how long it took, and what shows it happened. */
export interface Restart {
  what: string;
  ms: number;
  evidence: string;
  /** How long until every open order moved again after it (scripts/chaos/moved.ts), once measured. */
  moved?: string;
}

/** Faults the provider applied, per `target kind`, counted from its `fault applied` log lines. */
export type AppliedFaults = Map<string, number>;

export class ChaosStack {
  readonly taskQueue = 'chaos';
  readonly apiKey = 'chaos-key';
  private readonly adminKey = 'chaos-admin-key';
  readonly providerTimeoutMs = 2_000;
  /** The soak's own payload key, new each run: its workers and its client seal every payload with it. */
  /** This soak's payload key (a new one each run), handed to its worker processes. */
  readonly payloadKeys = `chaos-${randomBytes(3).toString('hex')}:${randomBytes(32).toString('base64')}`;
  readonly dataConverter = dataConverterFor(parseKeyList(this.payloadKeys));
  /** The workers' Worker Deployment version: the current build (a worker restarted joins it). */
  version = { deploymentName: DEPLOYMENT_NAME, buildId: resolveBuildId() };
  /** Every worker process started, with its build: the deploy stops the old build's, stop() every one. */
  private readonly spawned = new Map<ChildProcess, string>();
  private deploys = 0;
  /** The build a deploy is draining: a worker of it killed meanwhile comes back as its own build. */
  private draining?: string;
  /** Faults applied to the saga's calls (the workers'). */
  readonly applied: AppliedFaults = new Map();
  /** Faults applied to the chaos operators' own calls to the provider. */
  readonly appliedToOperators: AppliedFaults = new Map();
  readonly restarts: Restart[] = [];
  workerKills: number[] = [];
  pg!: PostgresHandle;
  env!: TestWorkflowEnvironment;
  /** The owner's pool: the soak seeds its catalogue with it. */
  db!: Pool;
  /** The read-only role's pool: the checks read through it, as client.ts check does. */
  reader!: Pool;
  /** Each process runs with its own role (db/roles.ts), as under npm start. */
  urls!: RoleUrls;
  admin!: ProviderAdmin;
  providerUrl = '';
  private provider?: ChildProcess;
  private providerPorts = { api: 0, admin: 0 };
  private bundlePath = '';
  private providerPids = new Set<number>();
  private rules: FaultRequest[] = [];
  private workers: (ChildProcess | undefined)[] = [];
  private stopping = false;
  private killers: Promise<void>[] = [];
  private onStop!: () => void;
  private readonly stopped = new Promise<void>((r) => (this.onStop = r));
  /** Sleeps, or returns at once when the soak stops killing. */
  private readonly nap = (ms: number): Promise<void> => Promise.race([sleep(ms), this.stopped]);

  /** The order events' receiver (scripts/chaos/receiver.ts), and the secret the workers sign with. */
  receiver!: Receiver;
  readonly eventsSecret = randomBytes(24).toString('base64url');
  /** How many times the receiver went failing, down or stalled. */
  receiverFlaps = 0;

  /**
   * The receiver flaps until stopped: up for 4–8 s, then failing (500), down (connection closed) or
   * stalled (no answer until it comes back) for 1–3 s, in turn. Resolves never.
   */
  flapReceiver(): Promise<never> {
    const bad: ReceiverMode[] = ['fail', 'down', 'stall'];
    this.flapper = (async () => {
      for (let i = 0; !this.stopping; i++) {
        await this.nap(4_000 + Math.random() * 4_000);
        if (this.stopping) break;
        this.receiver.mode = bad[i % bad.length]!;
        this.receiverFlaps++;
        await this.nap(1_000 + Math.random() * 2_000);
        this.receiver.mode = 'ok';
        this.receiver.release();
      }
    })();
    return this.flapper.then(() => new Promise<never>(() => undefined));
  }
  private flapper?: Promise<void>;

  /** The real Temporal server on Postgres (--temporal server), when the soak runs on it. */
  private real?: RealTemporal;

  /** The orders API: its URL (a port kept across its restart) and the soak's storefront key. */
  readonly api = { url: '', key: '' };
  private apiProcess?: ChildProcess;
  private apiPort = 0;

  constructor(
    private readonly pgOpts: EmbeddedOptions,
    private readonly temporal: 'dev' | 'server' = 'dev',
  ) {}

  /** Which Temporal server the soak runs on, for the summary. */
  get temporalName(): string {
    return this.temporal === 'server' ? `the Temporal server ${SERVER_VERSION} on Postgres` : 'the Temporal dev server';
  }

  async start(workerCount: number): Promise<void> {
    this.pg = await ensurePostgres(this.pgOpts, {});
    this.urls = (await prepareDatabase(this.pg.url)).urls;
    this.db = createPool(this.pg.url, { max: 4 });
    this.reader = createPool(this.urls.reader, { max: 4 });
    if (this.temporal === 'server') {
      // Its own databases on the soak's Postgres; a port block of its own (frontend + 3, +10…, +20).
      const port = realServerPortBlock();
      this.real = await startRealTemporal({ ownerUrl: this.pg.url, port, uiPort: port + 21, metricsPort: port + 22 });
      this.env = await TestWorkflowEnvironment.createFromExistingServer({
        ...existingServerOptions(this.real.connection),
        client: { dataConverter: this.dataConverter },
      });
    } else {
      this.env = await startDevServer({
        // Its error lines are the expected noise of SIGKILLed workers ("context canceled"); the summary says what matters.
        logLevel: 'never',
        client: { dataConverter: this.dataConverter },
      });
    }
    // Bundled once: each worker restart loads it instead of bundling again (seconds of CPU each time).
    const bundle = await bundleWorkflowCode({
      workflowsPath: WORKFLOWS_PATH,
      logger: new DefaultLogger('ERROR'),
      ...workflowBundleOptions(),
    });
    this.bundlePath = path.join(this.pgOpts.dataDir, '..', 'workflow-bundle.js');
    writeFileSync(this.bundlePath, bundle.code);
    // The order events' endpoint: a receiver of the soak's own that checks every signature, and flaps.
    this.receiver = await startReceiver(this.eventsSecret);
    this.providerPorts = { api: await freePort(), admin: await freePort() };
    await this.startProvider();
    this.admin = createProviderAdmin({
      baseUrl: `http://127.0.0.1:${this.providerPorts.admin}`,
      adminKey: this.adminKey,
    });
    this.workers = await Promise.all(Array.from({ length: workerCount }, () => this.startWorker()));
    this.api.key = (await createApiKey(this.db, 'chaos storefront')).key;
    this.apiPort = await freePort();
    this.api.url = `http://127.0.0.1:${this.apiPort}`;
    await this.startApi();
    // Versioned workers get no task until their version is current: make it so once they poll.
    await makeVersionCurrent(this.env.connection, {
      namespace: 'default',
      version: this.version,
      taskQueues: orderTaskQueues(this.taskQueue, DEFAULT_SAGA_CONFIG.inventoryLanes),
      identity: 'chaos soak',
    });
  }

  private async startProvider(): Promise<void> {
    const onLine = (line: string): void => {
      if (!line.includes('"event":"fault applied"')) return;
      const { target, kind, client } = JSON.parse(line) as { target: string; kind: string; client?: string };
      // The saga's faults and the operators' own (their inquiries and refunds by hand) are kept apart.
      const into = client === OPERATOR_CLIENT ? this.appliedToOperators : this.applied;
      const k = `${target} ${kind}`;
      into.set(k, (into.get(k) ?? 0) + 1);
    };
    const p = await startProviderProcess(
      {
        DATABASE_URL: this.urls.provider,
        PROVIDER_PORT: String(this.providerPorts.api),
        PROVIDER_ADMIN_PORT: String(this.providerPorts.admin),
        PROVIDER_API_KEY: this.apiKey,
        PROVIDER_ADMIN_KEY: this.adminKey,
      },
      onLine,
    );
    this.provider = p.child;
    this.providerPids.add(p.child.pid!);
    this.providerUrl = p.url;
  }

  /** The orders API's process, with the soak's saga config, on its fixed port. */
  private async startApi(): Promise<void> {
    const { child } = await startTsProcess(
      'api/server.ts',
      {
        TEMPORAL_ADDRESS: this.env.address,
        PAYLOAD_KEYS: this.payloadKeys,
        TASK_QUEUE: this.taskQueue,
        DATABASE_URL: this.urls.app,
        API_PORT: String(this.apiPort),
        API_SAGA_CONFIG: JSON.stringify(SAGA_CONFIG),
        // Its lease on a placement is this + 15 s: a placement its killed process left is carried on soon.
        API_ANSWER_TIMEOUT_MS: '10000',
        API_RATE_LIMIT: '1000000',
      },
      /"listening"/,
      { showStderr: true },
    );
    this.apiProcess = child;
  }

  /**
   * SIGKILLs the orders API and starts it again on the same port; confirmed by a new pid that answers.
   * A storefront's request cut by the kill is sent again with its key (people/storefront.ts).
   */
  restartApi(): Promise<Restart> {
    return this.killAndStartAgain({
      what: 'orders API',
      current: () => this.apiProcess,
      start: () => this.startApi(),
      url: () => this.api.url,
      backoffMs: 1_000, // Postgres may be restarting, or the port not yet free
    });
  }

  /**
   * SIGKILLs one of the soak's servers and starts it again on the same ports, a few tries (the port may
   * take a moment to come free); confirmed by a new pid that answers /healthz, after `then` (if given).
   */
  private async killAndStartAgain(r: {
    what: string;
    current: () => ChildProcess | undefined;
    start: () => Promise<void>;
    url: () => string;
    backoffMs: number;
    then?: { run: () => Promise<void>; evidence: string };
  }): Promise<Restart> {
    const t = Date.now();
    const old = r.current()!;
    await stopProcess(old, 'SIGKILL');
    for (let attempt = 1; ; attempt++) {
      try {
        await r.start();
        break;
      } catch (err) {
        if (attempt >= 5) throw err;
        await sleep(r.backoffMs * attempt);
      }
    }
    if (this.stopping) {
      await stopProcess(r.current()); // the soak is stopping: do not leave the new one behind
      throw new Error(`${r.what} restart: the soak is stopping`);
    }
    await r.then?.run();
    const health = await fetch(`${r.url()}/healthz`, { signal: AbortSignal.timeout(5_000) });
    if (!health.ok) throw new Error(`${r.what} restart: /healthz answered ${health.status}`);
    const restart = {
      what: r.what,
      ms: Date.now() - t,
      evidence: `pid ${old.pid} → ${r.current()!.pid}, /healthz 200${r.then ? `, ${r.then.evidence}` : ''}`,
    };
    this.restarts.push(restart);
    return restart;
  }

  /** Sets the fault rules; they are set again after a provider restart (they live in its memory). */
  async setFaults(rules: FaultRequest[]): Promise<void> {
    this.rules = rules.filter((r) => r.forMs === undefined || r.forMs >= 3_600_000);
    for (const r of rules) await this.admin.set(r);
  }

  async clearFaults(): Promise<void> {
    this.rules = [];
    await this.admin.clear();
  }

  /** SIGKILLs the provider and starts it again on the same ports, with its fault rules set again. */
  restartProvider(): Promise<Restart> {
    return this.killAndStartAgain({
      what: 'provider',
      current: () => this.provider,
      start: () => this.startProvider(),
      url: () => this.providerUrl,
      backoffMs: 500,
      then: {
        run: async () => {
          for (const rule of this.rules) await this.admin.set(rule);
        },
        evidence: 'fault rules set again',
      },
    });
  }

  /**
   * Stops the Temporal server process and starts it again (server tier only); confirmed by the
   * frontend answering again after it was down. The sagas in flight must go on.
   */
  async restartTemporal(): Promise<Restart> {
    if (!this.real) throw new Error('restartTemporal: the soak runs on the dev server');
    const { downMs } = await this.real.restart();
    const info = await this.env.connection.workflowService.getSystemInfo({});
    const restart = {
      what: 'Temporal server',
      ms: downMs,
      evidence: `process stopped (SIGTERM) and started again; frontend answers (server ${info.serverVersion})`,
    };
    this.restarts.push(restart);
    return restart;
  }

  /** Stops Postgres and starts it again; confirmed by a new postmaster start time. */
  async restartPostgres(): Promise<Restart> {
    const startedAt = async (): Promise<string> =>
      (await this.db.query<{ t: Date }>('SELECT pg_postmaster_start_time() AS t')).rows[0]!.t.toISOString();
    const before = await startedAt();
    const t = Date.now();
    await this.pg.stop();
    this.pg = await ensurePostgres(this.pgOpts, {});
    let after = before;
    for (let attempt = 0; attempt < 20 && after === before; attempt++) {
      try {
        after = await startedAt();
      } catch {
        await sleep(250); // the pool's first connections may still be the dead ones
      }
    }
    if (after === before) throw new Error('Postgres restart: the server start time did not change');
    const restart = { what: 'Postgres', ms: Date.now() - t, evidence: `postmaster start time ${before} → ${after}` };
    this.restarts.push(restart);
    return restart;
  }

  /**
   * A deploy, as docs/versioning.md describes it: the new build's workers (as many as run now) start
   * beside the old ones and it is made current once they poll. The drain decision: the old build's
   * workers keep running (a killed one comes back as the old build) while a saga pinned to it is open,
   * for at most `drainWaitMs`; then they stop, and every worker restarted from then on is the new build. A run still pinned to it is the sweeper's from
   * then on (its tasks go to a build nobody polls: a new run from the row, `build-unpolled`).
   */
  async deploy(drainWaitMs: number): Promise<Restart> {
    const t = Date.now();
    const old = this.version;
    const next = { deploymentName: old.deploymentName, buildId: `${old.buildId}.deploy${++this.deploys}` };
    const fresh = await Promise.all(this.workers.map(() => this.startWorker(next.buildId)));
    const made = await makeVersionCurrent(this.env.connection, {
      namespace: 'default',
      version: next,
      taskQueues: orderTaskQueues(this.taskQueue, DEFAULT_SAGA_CONFIG.inventoryLanes),
      identity: 'chaos soak deploy',
    });
    this.draining = old.buildId;
    this.version = next;
    const currentMs = Date.now() - t;
    const pinned = (): Promise<number> =>
      openPinnedRuns(this.env.connection, 'default', old).catch(() => Number.POSITIVE_INFINITY);
    let left = await pinned();
    while (left > 0 && Date.now() - t < drainWaitMs && !this.stopping) {
      await this.nap(2_000);
      left = await pinned();
    }
    this.draining = undefined; // from here on every restarted worker joins the new build
    // The new build's workers take the old ones' places in the kill schedule (killWorkers), so the soak
    // keeps as many workers as before; every old-build process still running stops.
    const alive = (w: ChildProcess): boolean => w.exitCode === null && w.signalCode === null;
    const replaced = this.workers.splice(0, this.workers.length, ...fresh);
    const stopped = [
      ...new Set([
        ...[...this.spawned].filter(([w, build]) => build === old.buildId && alive(w)).map(([w]) => w),
        ...replaced.filter((w): w is ChildProcess => w !== undefined && alive(w)),
      ]),
    ];
    await Promise.all(stopped.map((w) => stopProcess(w, 'SIGTERM')));
    const restart = {
      what: 'deploy',
      ms: Date.now() - t,
      evidence:
        `${versionName(next)} current after ${currentMs} ms (was ${versionName(made.previous ?? old)}); ` +
        (left === 0
          ? `${versionName(old)} drained`
          : `${Number.isFinite(left) ? left : 'an unknown number of'} saga(s) still pinned to ${versionName(old)} after the ${drainWaitMs / 1000} s drain wait, left to the sweeper`) +
        `; its ${stopped.length} running worker process(es) stopped (${[...this.spawned.values()].filter((b) => b === old.buildId).length} started on it in all); ` +
        `${fresh.length} of ${versionName(next)} took their places`,
    };
    this.restarts.push(restart);
    return restart;
  }

  private async startWorker(buildId = this.version.buildId): Promise<ChildProcess> {
    const env = {
      TEMPORAL_ADDRESS: this.env.address,
      PAYLOAD_KEYS: this.payloadKeys,
      TASK_QUEUE: this.taskQueue,
      DATABASE_URL: this.urls.app,
      READER_DATABASE_URL: this.urls.reader,
      PROVIDER_URL: this.providerUrl,
      PROVIDER_API_KEY: this.apiKey,
      PROVIDER_TIMEOUT_MS: String(this.providerTimeoutMs),
      WORKER_METRICS_PORT: '0',
      TEMPORAL_METRICS_ADDRESS: 'off',
      WORKFLOW_BUNDLE: this.bundlePath,
      BUILD_ID: buildId,
      ORDER_EVENTS_WEBHOOK_URL: this.receiver.url,
      ORDER_EVENTS_WEBHOOK_SECRET: this.eventsSecret,
      // Never given up in the soak (every event must arrive), and tried again within 2 s once the receiver is back.
      ORDER_EVENTS_MAX_ATTEMPTS: '100000',
      ORDER_EVENTS_MAX_DELAY_MS: '2000',
    };
    // A few tries: a worker may start while Postgres restarts.
    for (let attempt = 1; ; attempt++) {
      try {
        const w = await startWorkerProcess(env);
        this.spawned.set(w, buildId);
        return w;
      } catch (err) {
        if (attempt >= 5 || this.stopping) throw err;
        await sleep(1_000 * attempt);
      }
    }
  }

  /**
   * Each worker process is SIGKILLed about every `everyMs` (±25 %, its own schedule) and restarted.
   * Resolves never; rejects if a worker cannot be brought back.
   */
  killWorkers(everyMs: number): Promise<never> {
    this.workerKills = this.workers.map(() => 0);
    this.killers = this.workers.map(async (_, i) => {
      await this.nap((everyMs * (i + 1)) / this.workers.length); // staggered
      while (!this.stopping) {
        const w = this.workers[i]!;
        if (w.exitCode === null && w.signalCode === null) {
          await stopProcess(w, 'SIGKILL');
          this.workerKills[i]!++;
        }
        const build = this.spawned.get(w);
        const next = await this.startWorker(build !== undefined && build === this.draining ? build : undefined);
        if (this.workers[i] === w) this.workers[i] = next;
        else await stopProcess(next, 'SIGTERM'); // a deploy put its new worker in this place meanwhile
        await this.nap(everyMs * (0.75 + Math.random() * 0.5));
      }
    });
    return Promise.all(this.killers).then(() => new Promise<never>(() => undefined));
  }

  /** Stops the kill schedules; the workers keep running (they finish the sagas). */
  async stopKilling(): Promise<void> {
    this.stopping = true;
    this.onStop();
    await Promise.allSettled(this.killers);
    await this.flapper;
    if (this.receiver) {
      this.receiver.mode = 'ok';
      this.receiver.release();
    }
  }

  async stop(): Promise<void> {
    this.stopping = true;
    this.onStop();
    await Promise.allSettled(this.killers);
    await this.flapper;
    await this.receiver?.close();
    for (const w of this.spawned.keys()) await stopProcess(w, 'SIGTERM');
    await stopProcess(this.apiProcess);
    await stopProcess(this.provider);
    await this.db?.end().catch(() => undefined);
    await this.reader?.end().catch(() => undefined);
    await this.env?.teardown();
    await this.real?.stop();
    await this.pg?.stop();
  }
}
