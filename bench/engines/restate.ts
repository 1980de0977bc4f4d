/**
 * The order saga's happy path as a Restate workflow: one handler, one `ctx.run` per step (the six of
 * a new order: create, reserve, authorize, ship, capture, confirm), served by an HTTP/2 endpoint on
 * loopback that the Restate server calls; the server is a child process with its data in a temporary
 * directory, every listener on 127.0.0.1.
 *
 * What it persists, with the server's defaults (only addresses, telemetry and logging are set): each
 * `ctx.run` result is a journal entry the server appends to its log (Bifrost, the `replicated`
 * loglet provider, replication 1, stored by the node's own log-server in RocksDB) and acknowledges
 * to the handler only once stored; the log-server's RocksDB WAL is fsynced on write
 * (`log-server.rocksdb-disable-wal-fsync = false` in `restate-server --dump-config`; strace of the
 * server under this bench shows fdatasync calls all through the rounds), with concurrent appends
 * grouped into one write. The partition processor applies the log to its own RocksDB store
 * (its WAL not fsynced per entry: the log is the durable copy).
 */
import './promise-with-resolvers'; // before the SDK: it needs Promise.withResolvers (Node 22)
import './restate-quiet'; // before the SDK: it reads its log level when loaded
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http2 from 'node:http2';
import os from 'node:os';
import path from 'node:path';
import * as restate from '@restatedev/restate-sdk';
import type { BenchOrder, StartRestate } from './types';

const SERVICE = 'OrderSaga';

/** The server binary from its platform package (what `npx restate-server` runs). */
function serverBinary(): string {
  return require.resolve(`@restatedev/restate-server-${os.platform()}-${os.arch()}/bin/restate-server`);
}

async function until<T>(what: string, timeoutMs: number, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await probe();
      if (v !== undefined) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`restate: ${what} not ready in ${timeoutMs} ms (${String(last)})`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** A step's failure ends the workflow (no retries): the bench fails loudly instead of waiting. */
async function once<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    throw new restate.TerminalError(err instanceof Error ? `${err.name}: ${err.message}` : String(err));
  }
}

export const startRestate: StartRestate = async (opts) => {
  const { steps, ports } = opts;
  const orderSaga = restate.workflow({
    name: SERVICE,
    handlers: {
      run: async (ctx: restate.WorkflowContext, order: BenchOrder): Promise<string> => {
        const runId = ctx.request().id;
        await ctx.run('createOrder', () => once(() => steps.createOrder(order, runId)));
        await ctx.run('reserveInventory', () => once(() => steps.reserveInventory(order, runId)));
        await ctx.run('authorizePayment', () => once(() => steps.authorizePayment(order, runId)));
        const tracking = await ctx.run('createShipment', () => once(() => steps.createShipment(order, runId)));
        await ctx.run('capturePayment', () => once(() => steps.capturePayment(order, runId)));
        return ctx.run('sendConfirmation', () => once(() => steps.sendConfirmation(order, runId, tracking)));
      },
    },
  });
  const endpoint = http2.createServer(restate.createEndpointHandler({ services: [orderSaga] }));
  await new Promise<void>((resolve, reject) => {
    endpoint.once('error', reject);
    endpoint.listen(0, '127.0.0.1', () => resolve());
  });
  const endpointPort = (endpoint.address() as { port: number }).port;

  const dir = mkdtempSync(path.join(os.tmpdir(), 'order-saga-restate-'));
  let child: ChildProcess | undefined;
  const stop = async (): Promise<void> => {
    if (child && child.exitCode === null && child.signalCode === null) {
      const c = child;
      const exited = new Promise((r) => c.once('exit', r));
      c.kill('SIGTERM');
      const t = setTimeout(() => c.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(t);
    }
    await new Promise<void>((r) => endpoint.close(() => r()));
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    // Addresses, logging and telemetry only; the storage settings stay the server's defaults.
    writeFileSync(
      path.join(dir, 'restate.toml'),
      [
        `node-name = "bench"`,
        `base-dir = ${JSON.stringify(path.join(dir, 'data'))}`,
        `listen-mode = "tcp"`,
        `bind-address = "127.0.0.1:${ports.fabric}"`,
        `advertised-address = "http://127.0.0.1:${ports.fabric}/"`,
        `disable-telemetry = true`,
        `log-filter = "error"`,
        `[admin]`,
        `bind-address = "127.0.0.1:${ports.admin}"`,
        `advertised-address = "http://127.0.0.1:${ports.admin}/"`,
        `[ingress]`,
        `bind-address = "127.0.0.1:${ports.ingress}"`,
        `advertised-address = "http://127.0.0.1:${ports.ingress}/"`,
        '',
      ].join('\n'),
    );
    // The server asks GitHub for its latest release at start, whatever the config says. It runs in
    // a mount namespace of its own whose /etc/resolv.conf and /etc/hosts name only loopback, so that
    // lookup goes to 127.0.0.1 and fails: nothing leaves the machine. Where no mount namespace can be
    // made (not root, say), the server is not started at all.
    writeFileSync(path.join(dir, 'resolv.conf'), 'nameserver 127.0.0.1\noptions attempts:1 timeout:1\n');
    // The release check's hosts are named too, so that even a resolver on loopback is never asked.
    writeFileSync(
      path.join(dir, 'hosts'),
      '127.0.0.1 localhost api.github.com github.com\n::1 localhost api.github.com github.com\n',
    );
    const args = ['--no-logo', '--config-file', path.join(dir, 'restate.toml')];
    if (process.platform !== 'linux' || !canUnshare())
      throw new Error(
        'restate: not run: restate-server looks up its latest release on the internet at start, and `unshare --mount` (root on Linux) is needed to keep that lookup on loopback',
      );
    const [cmd, argv] = [
      'unshare',
      [
        '--mount',
        '--propagation',
        'private',
        'sh',
        '-c',
        'mount --bind "$0" /etc/resolv.conf && mount --bind "$1" /etc/hosts && b="$2" && shift 2 && exec "$b" "$@"',
        path.join(dir, 'resolv.conf'),
        path.join(dir, 'hosts'),
        serverBinary(),
        ...args,
      ],
    ];
    let said = '';
    child = spawn(cmd as string, argv as string[], {
      cwd: dir,
      env: { PATH: process.env.PATH, HOME: dir, RESTATE_LOG_DISABLE_ANSI_CODES: 'true' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const keep = (b: Buffer) => void (said = (said + b.toString('utf8')).slice(-4000));
    child.stdout!.on('data', keep);
    child.stderr!.on('data', keep);
    const died = new Promise<never>((_, reject) =>
      child!.once('exit', (code, signal) =>
        reject(new Error(`restate-server exited (${code ?? signal}) before it was ready: ${said}`)),
      ),
    );
    died.catch(() => undefined);
    const admin = `http://127.0.0.1:${ports.admin}`;
    const ingress = `http://127.0.0.1:${ports.ingress}`;
    const ok = async (url: string): Promise<true | undefined> =>
      (await fetch(url, { signal: AbortSignal.timeout(2_000) })).ok ? true : undefined;
    await Promise.race([died, until('admin API', 60_000, () => ok(`${admin}/health`))]);
    await Promise.race([died, until('ingress', 60_000, () => ok(`${ingress}/restate/health`))]);
    const reg = await fetch(`${admin}/deployments`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ uri: `http://127.0.0.1:${endpointPort}`, force: true }),
      signal: AbortSignal.timeout(30_000),
    });
    if (!reg.ok) throw new Error(`restate: registering the endpoint failed: ${reg.status} ${await reg.text()}`);
    // The server's pid: the binary itself (unshare and sh exec into it, so it is the child's pid).
    const pids = { server: child.pid! };
    return {
      pids,
      async runOrder(order) {
        const res = await fetch(`${ingress}/${SERVICE}/${encodeURIComponent(`order:${order.orderId}`)}/run`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(order),
          signal: AbortSignal.timeout(opts.orderTimeoutMs),
        });
        const text = await res.text();
        if (!res.ok) throw new Error(`restate: order ${order.orderId} failed: ${res.status} ${text}`);
        return JSON.parse(text) as string;
      },
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
};

let unshareWorks: boolean | undefined;
/** Whether this process may make a mount namespace (root, or a kernel that lets it). */
function canUnshare(): boolean {
  if (unshareWorks === undefined) {
    unshareWorks =
      spawnSync('unshare', ['--mount', '--propagation', 'private', 'true'], { stdio: 'ignore', timeout: 5_000 })
        .status === 0;
  }
  return unshareWorks;
}
