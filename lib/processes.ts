/** Starting the project's own processes (provider, worker) as children, for tests, the bench and the chaos soak. */
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import path from 'node:path';

const ROOT = path.resolve(__dirname, '..');

/**
 * Runs one of the project's TypeScript entry points as its own process (`node --import tsx`, so a
 * signal reaches it, not a wrapper) and resolves once a stdout line matches `ready`, with the match.
 * `onLine` receives every stdout line. Rejects with the tail of stderr if it exits first; with
 * `showStderr`, stderr is also passed through to ours.
 */
export function startTsProcess(
  entry: string,
  env: NodeJS.ProcessEnv,
  ready: RegExp,
  opts: { onLine?: (line: string) => void; showStderr?: boolean; readyTimeoutMs?: number } = {},
): Promise<{ child: ChildProcess; match: RegExpExecArray }> {
  const child = spawn(process.execPath, ['--import', 'tsx', path.join(ROOT, entry)], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let partial = '';
  let stderr = '';
  child.stderr!.on('data', (c: Buffer) => {
    stderr = (stderr + c.toString()).slice(-4_000);
    if (opts.showStderr) process.stderr.write(c);
  });
  child.stdout!.on('data', (chunk: Buffer) => {
    const lines = (partial + chunk.toString('utf8')).split('\n');
    partial = lines.pop()!.slice(-100_000);
    for (const line of lines) child.emit('line', line);
  });
  if (opts.onLine) child.on('line', opts.onLine);
  return new Promise((resolve, reject) => {
    // A child that neither gets ready nor exits is killed, so no caller waits for it forever.
    const timer = setTimeout(() => {
      child.off('exit', early);
      child.kill('SIGKILL');
      reject(new Error(`${entry} was not ready within ${opts.readyTimeoutMs ?? 60_000} ms: ${stderr.trim().slice(-1_500)}`));
    }, opts.readyTimeoutMs ?? 60_000);
    const watch = (line: string): void => {
      const match = ready.exec(line);
      if (!match) return;
      clearTimeout(timer);
      child.off('line', watch);
      child.off('exit', early);
      resolve({ child, match });
    };
    const early = (code: number | null, signal: string | null): void => {
      clearTimeout(timer);
      reject(new Error(`${entry} exited (${code ?? signal}) before it was ready: ${stderr.trim().slice(-1_500)}`));
    };
    child.on('line', watch);
    child.once('exit', early);
  });
}

/**
 * Starts provider/server.ts as its own process; resolves with its payment and admin URLs once it
 * listens. `onLine` receives every line it writes on stdout (its JSON log).
 */
export async function startProviderProcess(env: NodeJS.ProcessEnv, onLine?: (line: string) => void): Promise<{ child: ChildProcess; url: string; adminUrl: string }> {
  const { child, match } = await startTsProcess('provider/server.ts', env, /"event":"listening","url":"([^"]+)","adminUrl":"([^"]+)"/, { onLine, showStderr: true });
  return { child, url: match[1]!, adminUrl: match[2]! };
}

/** Starts worker.ts as its own process; resolves once it polls its task queue. */
export async function startWorkerProcess(env: NodeJS.ProcessEnv): Promise<ChildProcess> {
  return (await startTsProcess('worker.ts', env, /polling task queue/)).child;
}

/** A free loopback port, for a child that must listen on a known one (and keep it across a restart). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

export async function stopProcess(child: ChildProcess | undefined, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill(signal);
  const t = setTimeout(() => child.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(t);
}
