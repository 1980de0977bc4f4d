/**
 * The engines section: the order saga's essential work — its COMPLETED happy path, the six steps of
 * a new order (create, reserve, authorize, ship, capture, confirm) with the saga's own arguments and
 * idempotency keys, on the project's own activities — run on DBOS and on Restate, and called directly
 * in sequence by plain Node (no engine, the floor). The Temporal saga is measured by saga-overhead.ts.
 * Each engine keeps its durable defaults; what it persists per step is in its module
 * (bench/engines/dbos.ts, bench/engines/restate.ts) and in `persists`.
 *
 * DBOS and Restate come from bench/engines/, a package of their own, installed here on first use
 * (`npm ci --prefix bench/engines`), so the project's own install does not carry them. Their modules
 * load at run time from there; the root typecheck and lint leave that directory out.
 *
 * The bench process is every engine's worker: it runs the workflow code, the activities and the load
 * generator alike (DBOS in process; Restate's handler endpoint; plain calls). CPU is read per process
 * tree around the load rounds of each engine: `server` (restate-server), `worker` (the bench process),
 * `provider`, `postgres` (the postmaster and its backends).
 */
import { execFile } from 'node:child_process';
import { existsSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { MockActivityEnvironment } from '@temporalio/testing';
import { DefaultLogger } from '@temporalio/worker';
import type { OrderActivities } from '../activities';
import { createPool } from '../db/pool';
import { authorizeKeyFor, captureKeyFor, orderTotalCents, workflowIdFor, type OrderInput } from '../domain/order';
import { freePort, stopProcess } from '../platform/processes';
import { cpuMsByTree, cpuTotal, postmasterPid } from './cpu';
import type { EngineHandle, OrderSteps, StartDbos, StartRestate } from './engines/types';
import { concurrentLoops, percentile, progress } from './measure';
import { benchActivities, insertBenchProducts, startBenchProvider } from './stack';

export interface EngineSide {
  engine: string;
  idle: { p50: number; p90: number };
  perSecond: number;
  cpuMsPerOrder: Record<string, number>;
  cpuTotal: number;
  persists: string;
}

export interface EnginesOptions {
  /** Orders one at a time per engine, after one warm-up. */
  idleOrders: number;
  /** Orders per load round. */
  orders: number;
  /** Orders in flight during a load round. */
  concurrency: number;
  /** Load rounds per engine, in ABBA order (even for a balanced order). */
  rounds: number;
}

const ENGINES_DIR = path.join(__dirname, 'engines');
/** Bounds on every wait: the install, one order. */
const INSTALL_TIMEOUT_MS = 10 * 60_000;
const ORDER_TIMEOUT_MS = 60_000;

/** Installs bench/engines/ (npm ci) when its node_modules is missing or older than its lock file. */
export async function ensureEnginesInstalled(): Promise<void> {
  const marker = path.join(ENGINES_DIR, 'node_modules', '.package-lock.json');
  const lock = path.join(ENGINES_DIR, 'package-lock.json');
  const fresh =
    existsSync(marker) &&
    statSync(marker).mtimeMs >= statSync(lock).mtimeMs &&
    statSync(marker).mtimeMs >= statSync(path.join(ENGINES_DIR, 'package.json')).mtimeMs;
  if (fresh) return;
  progress('engines: installing DBOS and Restate into bench/engines (npm ci)…');
  await new Promise<void>((resolve, reject) => {
    execFile(
      'npm',
      // No install scripts: none is needed (the Restate binary comes in a platform package), and one
      // of the dependencies' (an install-analytics package) would call out to the internet.
      ['ci', '--prefix', ENGINES_DIR, '--no-audit', '--no-fund', '--ignore-scripts'],
      { timeout: INSTALL_TIMEOUT_MS, maxBuffer: 16 * 1024 * 1024 },
      (err, _stdout, stderr) =>
        err ? reject(new Error(`npm ci in bench/engines failed: ${err.message}\n${stderr}`)) : resolve(),
    );
  });
}

const version = (pkg: string): string =>
  (JSON.parse(readFileSync(path.join(ENGINES_DIR, 'node_modules', pkg, 'package.json'), 'utf8')) as { version: string })
    .version;

/** A module of bench/engines/, loaded at run time (tsx compiles it), resolving from that package. */
async function load<T>(file: string): Promise<T> {
  const mod = (await import(path.join(ENGINES_DIR, file))) as T & { default?: T };
  return mod.default ?? mod;
}

/**
 * The saga's happy-path steps on the project's activities, as workflows/order-saga.ts and
 * workflows/authorization-protocol.ts call them for a new order that ends COMPLETED: createOrder
 * writes the row with payment_flow 'authorization', and the activities move it themselves: PENDING →
 * RESERVED → AUTHORIZED → SHIPPED → CAPTURED → COMPLETED (no setOrderStatus call on that path). Each
 * call runs in an activity context, as a Temporal worker gives it (the activities read their caller's
 * run ID and heartbeat through it), with the engine's run ID in the workflow ID's place; a quiet
 * logger.
 */
function orderSteps(acts: OrderActivities): OrderSteps {
  const logger = new DefaultLogger('ERROR', () => undefined);
  const inActivity = <R>(name: string, orderId: string, runId: string, fn: () => Promise<R>): Promise<R> =>
    new MockActivityEnvironment(
      {
        activityType: name,
        workflowType: 'orderSaga',
        workflowExecution: { workflowId: workflowIdFor(orderId), runId },
        startToCloseTimeoutMs: 30_000,
        scheduleToCloseTimeoutMs: 30_000,
      },
      { logger },
    ).run(fn);
  const expect = (step: string, orderId: string, got: string, want: string[]): void => {
    if (!want.includes(got)) throw new Error(`${step} for ${orderId}: ${got}, not ${want.join(' or ')}`);
  };
  return {
    async createOrder(order, runId) {
      const r = await inActivity('createOrder', order.orderId, runId, () => acts.createOrder(order));
      expect('createOrder', order.orderId, r.outcome, ['created']);
    },
    async reserveInventory(order, runId) {
      const req = { orderId: order.orderId, customerId: order.customerId, items: order.items };
      const r = await inActivity('reserveInventory', order.orderId, runId, () => acts.reserveInventory(req));
      // The saga sends a too-contended reservation to a serial lane; the bench's orders never need one.
      expect('reserveInventory', order.orderId, r.outcome, ['reserved']);
    },
    async authorizePayment(order, runId) {
      const req = {
        orderId: order.orderId,
        amountCents: orderTotalCents(order),
        currency: order.currency,
        paymentMethod: order.paymentMethod,
        idempotencyKey: authorizeKeyFor(order.orderId),
      };
      const r = await inActivity('authorizePayment', order.orderId, runId, () => acts.authorizePayment(req));
      expect('authorizePayment', order.orderId, r.status, ['AUTHORIZED']);
    },
    async createShipment(order, runId) {
      const req = { orderId: order.orderId, byOperator: false };
      return (await inActivity('createShipment', order.orderId, runId, () => acts.createShipment(req))).trackingNumber;
    },
    async capturePayment(order, runId) {
      // The first hold's keys, as the saga's first capture request names them (`holdKeysFor`).
      const req = {
        orderId: order.orderId,
        authorizationKey: authorizeKeyFor(order.orderId),
        captureKey: captureKeyFor(order.orderId),
      };
      const r = await inActivity('capturePayment', order.orderId, runId, () => acts.capturePayment(req));
      expect('capturePayment', order.orderId, r.status, ['CAPTURED']);
    },
    async sendConfirmation(order, runId, trackingNumber) {
      const req = { orderId: order.orderId, trackingNumber };
      const r = await inActivity('sendConfirmation', order.orderId, runId, () => acts.sendConfirmation(req));
      if (!r.sent) throw new Error(`sendConfirmation for ${order.orderId}: not sent`);
      return 'COMPLETED';
    },
  };
}

interface Engine {
  key: 'plain' | 'dbos' | 'restate';
  name: string;
  persists: string;
  handle: EngineHandle;
}

/**
 * Starts the provider, DBOS and Restate against the Postgres at `pg.url` (its data directory gives the
 * postmaster's pid), measures plain Node, DBOS and Restate, stops everything, also on error.
 */
export async function measureEngines(
  pg: { url: string; dataDir?: string },
  opts: EnginesOptions,
): Promise<EngineSide[]> {
  await ensureEnginesInstalled();
  progress('engines: starting the provider…');
  const provider = await startBenchProvider(pg.url);
  const db = createPool(pg.url, { max: 20 });
  const engines: Engine[] = [];
  try {
    const steps = orderSteps(benchActivities(db, provider.url));
    const setting = async (name: string): Promise<string> =>
      (await db.query<{ v: string }>(`SELECT current_setting('${name}') AS v`)).rows[0]!.v;
    const pgSync = `synchronous_commit=${await setting('synchronous_commit')}, fsync=${await setting('fsync')}`;

    engines.push({
      key: 'plain',
      name: 'plain Node, no engine',
      persists: 'nothing of its own (only the activities’ own writes)',
      handle: {
        pids: {},
        async runOrder(order) {
          const runId = `plain-${order.orderId}`;
          await steps.createOrder(order, runId);
          await steps.reserveInventory(order, runId);
          await steps.authorizePayment(order, runId);
          const tracking = await steps.createShipment(order, runId);
          await steps.capturePayment(order, runId);
          return steps.sendConfirmation(order, runId, tracking);
        },
        stop: async () => undefined,
      },
    });

    progress('engines: starting DBOS (system database on the same Postgres)…');
    const sysUrl = new URL(pg.url);
    sysUrl.pathname = `/${sysUrl.pathname.slice(1) || 'postgres'}_dbos_sys`;
    const { startDbos } = await load<{ startDbos: StartDbos }>('dbos.ts');
    engines.push({
      key: 'dbos',
      name: `DBOS ${version('@dbos-inc/dbos-sdk')}`,
      persists: `a row per step in its system database (operation_outputs), its own transaction each, plus the workflow's status row at start and end (Postgres ${pgSync})`,
      handle: await startDbos({ systemDatabaseUrl: sysUrl.toString(), steps }),
    });

    progress('engines: starting the Restate server and registering the endpoint…');
    const { startRestate } = await load<{ startRestate: StartRestate }>('restate.ts');
    const ports = { fabric: await freePort(), admin: await freePort(), ingress: await freePort() };
    engines.push({
      key: 'restate',
      name: `Restate ${version('@restatedev/restate-server')}`,
      persists:
        'a journal entry per step appended to its log (Bifrost, replicated loglet ×1, RocksDB) and acknowledged once stored; the WAL is fsynced (fdatasync), concurrent appends share one sync',
      handle: await startRestate({ steps, ports, orderTimeoutMs: ORDER_TIMEOUT_MS }),
    });

    // Products to order: 100 SKUs with stock for any run, as saga-overhead.ts makes them.
    const sku = `BENCH-ENG-${Date.now()}`;
    await insertBenchProducts(db, sku, 100);
    let seq = 0;
    const stamp = Date.now();
    const one = async (e: Engine): Promise<number> => {
      const i = seq++;
      const order: OrderInput = {
        orderId: `bench-${e.key}-${stamp}-${i}`,
        customerId: `bench-${i % 50}`,
        currency: 'USD',
        paymentMethod: 'tok_visa',
        items: [{ sku: `${sku}-${i % 100}`, qty: 1, unitPriceCents: 100 }],
      };
      const t = performance.now();
      let timer: NodeJS.Timeout | undefined;
      const status = await Promise.race([
        e.handle.runOrder(order),
        new Promise<never>((_, reject) => {
          timer = setTimeout(
            () => reject(new Error(`${e.name}: order ${order.orderId} took over ${ORDER_TIMEOUT_MS} ms`)),
            ORDER_TIMEOUT_MS,
          );
        }),
      ]).finally(() => clearTimeout(timer));
      if (status !== 'COMPLETED') throw new Error(`${e.name}: order ${order.orderId} ended ${status}`);
      return performance.now() - t;
    };

    // Idle: one order at a time, the engines alternating, after one warm-up each.
    const idle = new Map<Engine, number[]>(engines.map((e) => [e, []]));
    for (const e of engines) await one(e);
    for (let i = 0; i < opts.idleOrders; i++) {
      progress(`engines idle ${i + 1}/${opts.idleOrders}: one order at a time on each engine…`);
      for (const e of engines) idle.get(e)!.push(await one(e));
    }

    // Load: rounds in ABBA order; CPU read around each engine's rounds only.
    const roots = (): Record<string, number> => {
      const r: Record<string, number> = {
        worker: process.pid,
        provider: provider.child.pid!,
        // Postgres's CPU only when the bench runs it (with DATABASE_URL it may be another machine's).
        ...(pg.dataDir ? { postgres: postmasterPid(pg.dataDir) } : {}),
      };
      for (const e of engines) Object.assign(r, e.handle.pids);
      return r;
    };
    const rates = new Map<Engine, number[]>(engines.map((e) => [e, []]));
    const cpu = new Map<Engine, { ms: Record<string, number>; orders: number }>(
      engines.map((e) => [e, { ms: {}, orders: 0 }]),
    );
    for (let round = 0; round < opts.rounds; round++) {
      for (const e of round % 2 === 0 ? engines : [...engines].reverse()) {
        progress(
          `engines round ${round + 1}/${opts.rounds}: ${e.name}, ${opts.orders} orders, ${opts.concurrency} in flight…`,
        );
        let next = 0;
        let done = 0;
        const before = cpuMsByTree(roots());
        const started = performance.now();
        await concurrentLoops(
          opts.concurrency,
          Infinity,
          async () => {
            next++;
            await one(e);
            done++;
          },
          () => next < opts.orders,
        );
        const seconds = (performance.now() - started) / 1000;
        const after = cpuMsByTree(roots());
        rates.get(e)!.push(done / seconds);
        const c = cpu.get(e)!;
        for (const k of Object.keys(after)) c.ms[k] = (c.ms[k] ?? 0) + after[k]! - (before[k] ?? 0);
        c.orders += done;
      }
    }
    progress('');

    const round1 = (x: number): number => Math.round(x * 10) / 10;
    return engines.map((e) => {
      const lat = [...idle.get(e)!].sort((a, b) => a - b);
      const c = cpu.get(e)!;
      const names =
        e.key === 'restate' ? ['server', 'worker', 'provider', 'postgres'] : ['worker', 'provider', 'postgres'];
      const perOrder = Object.fromEntries(names.map((k) => [k, round1((c.ms[k] ?? 0) / Math.max(1, c.orders))]));
      const r = rates.get(e)!;
      return {
        engine: e.name,
        idle: { p50: round1(percentile(lat, 50)), p90: round1(percentile(lat, 90)) },
        perSecond: round1(r.reduce((a, b) => a + b, 0) / Math.max(1, r.length)),
        cpuMsPerOrder: perOrder,
        cpuTotal: cpuTotal(perOrder),
        persists: e.persists,
      };
    });
  } finally {
    for (const e of [...engines].reverse()) {
      try {
        await e.handle.stop();
      } catch (err) {
        progress(`engines: stopping ${e.name} failed: ${String(err)}`);
      }
    }
    await db.end();
    await stopProcess(provider.child);
  }
}

/** The section's table, in markdown. */
export function enginesTable(sides: EngineSide[], opts: EnginesOptions): string {
  const cell = (side: EngineSide, k: string): string =>
    side.cpuMsPerOrder[k] === undefined ? '–' : String(side.cpuMsPerOrder[k]);
  return [
    `| engine | one order idle p50 / p90 ms | orders/s at ${opts.concurrency} in flight | CPU-ms per order: server | worker | provider | postgres | total | what it persists per step |`,
    '|---|---|---|---|---|---|---|---|---|',
    ...sides.map(
      (s) =>
        `| ${s.engine} | ${s.idle.p50} / ${s.idle.p90} | ${s.perSecond} | ${cell(s, 'server')} | ${cell(s, 'worker')} | ${cell(s, 'provider')} | ${cell(s, 'postgres')} | ${s.cpuTotal} | ${s.persists} |`,
    ),
  ].join('\n');
}
