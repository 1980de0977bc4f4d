/**
 * The command line's start-up, as a person waits for it: each command as a process of its own,
 * timed from spawn to exit. `bin/client` (the build, README's way) and `npx tsx client.ts` (the
 * sources) for `--help`, `status` of a finished order and `place`, beside the Temporal CLI's own
 * `--help`; and `place`'s whole command against its order's own end-to-end time (the run's start to
 * its close, as the server recorded them). Starts its own dev server, provider and worker (in this
 * process, the production worker), on loopback; the commands reach them through the environment.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { createPool } from '../db/pool';
import { workflowIdFor, type OrderInput } from '../domain/order';
import { runProcess, stopProcess } from '../platform/processes';
import { devServerExecutable, startDevServer } from '../servers/temporal-dev';
import { CLI_BUNDLE } from '../scripts/build-cli';
import { median, progress } from './measure';
import { benchDataConverter, benchKeyList, insertBenchProducts, runBenchWorkers, startBenchProvider } from './stack';

const ROOT = path.resolve(__dirname, '..');

export interface StartupRow {
  /** The command as typed. */
  command: string;
  p50: number;
  max: number;
  runs: number;
}

export interface CliStartupResult {
  rows: StartupRow[];
  /** bin/client's build on its first run after a change (the bundle was removed first). */
  buildMs: number;
  /** bin/client place: the whole command and its order's end-to-end time, p50 over the runs. */
  place: { wholeP50: number; orderP50: number; runs: number };
  /** The Temporal CLI's version line, or why it was not measured. */
  temporal: string;
}

/**
 * Times `runs` runs of each command (after one untimed run of each, so files are in the page
 * cache). A command that exits otherwise than expected is an error: the figures would be of something else.
 */
export async function measureCliStartup(url: string, opts: { runs: number }): Promise<CliStartupResult> {
  const stops: (() => Promise<unknown>)[] = [];
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'order-saga-cli-bench-'));
  try {
    progress('cli start-up: starting the dev server, the provider and a worker…');
    const keys = benchKeyList();
    const dataConverter = benchDataConverter(keys);
    const env = await startDevServer({ logLevel: 'error', client: { dataConverter } });
    stops.push(() => env.teardown());
    const provider = await startBenchProvider(url);
    stops.push(() => stopProcess(provider.child));
    const db = createPool(url, { max: 10 });
    stops.push(() => db.end());
    const taskQueue = `bench-cli-${process.pid}`;
    stops.push(await runBenchWorkers(env, db, provider.url, taskQueue, { dataConverter }));
    const sku = await insertBenchProducts(db, `BENCH-CLI-${Date.now()}`, 1);

    // What the commands read: this stack, never a running npm start's (.data/runtime.json) nor tracing.
    const cliEnv: NodeJS.ProcessEnv = {
      TEMPORAL_ADDRESS: env.address,
      TEMPORAL_NAMESPACE: env.namespace ?? 'default',
      TASK_QUEUE: taskQueue,
      DATABASE_URL: url,
      READER_DATABASE_URL: url,
      PAYLOAD_KEYS: keys,
      OTEL_EXPORTER_OTLP_ENDPOINT: '',
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: '',
    };
    let seq = 0;
    const orderFile = (): { file: string; orderId: string } => {
      const orderId = `bench-cli-${Date.now()}-${seq++}`;
      const order: OrderInput = {
        orderId,
        customerId: 'bench-cli',
        currency: 'USD',
        paymentMethod: 'tok_visa',
        items: [{ sku: `${sku}-0`, qty: 1, unitPriceCents: 100 }],
      };
      const file = path.join(tmp, `${orderId}.json`);
      writeFileSync(file, JSON.stringify(order));
      return { file, orderId };
    };
    const time = async (command: string, args: string[], expectCode = 0): Promise<number> => {
      const t = performance.now();
      const r = await runProcess(command, args, cliEnv, { cwd: ROOT });
      const ms = performance.now() - t;
      if (r.code !== expectCode)
        throw new Error(`cli start-up: ${[command, ...args].join(' ')} exited ${r.code ?? r.signal}: ${r.output}`);
      return ms;
    };
    const binClient = path.join(ROOT, 'bin', 'client');
    const tsx = ['--no-install', 'tsx', 'client.ts'];

    // The build, as the first run after a change makes it.
    rmSync(`${CLI_BUNDLE}.sources.json`, { force: true });
    await time(binClient, ['--help']);
    const { builtInMs } = JSON.parse(readFileSync(`${CLI_BUNDLE}.sources.json`, 'utf8')) as { builtInMs: number };

    const finished = orderFile();
    await time(binClient, ['place', '--file', finished.file]);

    const rows: StartupRow[] = [];
    /** One untimed run, then `opts.runs` timed; `args` is called before each run. */
    const measure = async (label: string, command: string, args: () => string[]): Promise<StartupRow> => {
      progress(`cli start-up: ${label}…`);
      await time(command, args());
      const ms: number[] = [];
      for (let i = 0; i < opts.runs; i++) ms.push(await time(command, args()));
      const row = { command: label, p50: Math.round(median(ms)), max: Math.round(Math.max(...ms)), runs: ms.length };
      rows.push(row);
      return row;
    };
    const temporalCli = devServerExecutable();
    let temporal = 'not measured: no Temporal CLI binary (scripts/ensure-servers.sh builds it)';
    if (temporalCli?.type === 'existing-path') {
      temporal = (await runProcess(temporalCli.path, ['--version'], {})).stdout.trim();
      await measure('temporal --help', temporalCli.path, () => ['--help']);
    }
    await measure('bin/client --help', binClient, () => ['--help']);
    await measure('npx tsx client.ts --help', 'npx', () => [...tsx, '--help']);
    await measure('bin/client status <finished order>', binClient, () => ['status', finished.orderId]);
    await measure('npx tsx client.ts status <finished order>', 'npx', () => [...tsx, 'status', finished.orderId]);
    // place: the whole command, and each order's own time from the server's timestamps.
    const placed: string[] = [];
    const place = await measure('bin/client place --file <order>', binClient, () => {
      const o = orderFile();
      placed.push(o.orderId);
      return ['place', '--file', o.file];
    });
    await measure('npx tsx client.ts place --file <order>', 'npx', () => [...tsx, 'place', '--file', orderFile().file]);
    const orderMs: number[] = [];
    for (const orderId of placed) {
      const d = await env.client.workflow.getHandle(workflowIdFor(orderId)).describe();
      orderMs.push(d.closeTime!.getTime() - d.startTime.getTime());
    }
    progress('');
    return {
      rows,
      buildMs: builtInMs,
      place: { wholeP50: place.p50, orderP50: Math.round(median(orderMs)), runs: orderMs.length },
      temporal,
    };
  } finally {
    for (const stop of stops.reverse()) await stop().catch(() => undefined);
    rmSync(tmp, { recursive: true, force: true });
  }
}
