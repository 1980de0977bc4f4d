/**
 * Every child process the project starts (its own entry points, the servers, embedded Postgres, the
 * tests' helpers): started and waited for until ready, run to the end, or stopped, in one way.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

const ROOT = path.resolve(__dirname, '..');

export interface StartOptions {
  onLine?: (line: string) => void;
  /** Receives every stderr line. */
  onErrLine?: (line: string) => void;
  showStderr?: boolean;
  /** Which stream the `ready` pattern is matched against (stdout unless told). */
  readyOn?: 'stdout' | 'stderr';
  readyTimeoutMs?: number;
  cwd?: string;
  /** Runs it as this user and group (Postgres, which refuses to run as root). */
  user?: { uid: number; gid: number };
  /** Called as soon as it is spawned (before it is ready), so a stop during the start reaches it. */
  onSpawn?: (child: ChildProcess) => void;
  /** Called when it exits after it was ready (an exit before that rejects the start instead). */
  onExit?: (code: number | null, signal: NodeJS.Signals | null) => void;
  /** Only PATH and HOME from our environment, then `env`: for servers that need none of our secrets. */
  cleanEnv?: boolean;
}

/** How errors name a process: its .ts entry point, or its executable. */
const processName = (command: string, args: string[]): string => {
  const entry = args.find((a) => /\.ts$/.test(a));
  return entry ? path.relative(ROOT, entry) : path.basename(command);
};

/** Our environment (or only PATH and HOME, with `clean`) with `env` over it. */
const childEnv = (env: NodeJS.ProcessEnv, clean = false): NodeJS.ProcessEnv => ({
  ...(clean ? { PATH: process.env.PATH, HOME: process.env.HOME } : process.env),
  ...env,
});

/** Splits a stream's chunks into lines (a last, unfinished line waits for the next chunk). */
function eachLine(stream: NodeJS.ReadableStream, onLine: (line: string) => void): void {
  let partial = '';
  stream.on('data', (chunk: Buffer) => {
    const lines = (partial + chunk.toString('utf8')).split('\n');
    partial = lines.pop()!.slice(-100_000);
    for (const line of lines) onLine(line);
  });
}

/**
 * Spawns `command` and resolves once it is ready: when a line (of stdout, or of `readyOn`) matches
 * `ready` (with the match), or when `ready()` resolves true (polled every 250 ms; a throw means "not
 * yet"). `onLine` receives every stdout line, `onErrLine` every stderr line. Rejects naming the
 * process, with what it said last, if it cannot be spawned, exits first, or is not ready within
 * `readyTimeoutMs` (60 s; then it is killed), so no caller waits forever; with `showStderr`, stderr
 * is passed through to ours.
 */
export function startProcess(
  command: string,
  args: string[],
  env: NodeJS.ProcessEnv,
  ready: RegExp | (() => Promise<boolean>),
  opts: StartOptions = {},
): Promise<{ child: ChildProcess; match?: RegExpExecArray }> {
  const child = spawn(command, args, {
    cwd: opts.cwd ?? ROOT,
    env: childEnv(env, opts.cleanEnv),
    stdio: ['ignore', 'pipe', 'pipe'],
    ...opts.user,
  });
  opts.onSpawn?.(child);
  const name = processName(command, args);
  let stderr = '';
  child.stderr.on('data', (c: Buffer) => {
    stderr = (stderr + c.toString()).slice(-4_000);
    if (opts.showStderr) process.stderr.write(c);
  });
  eachLine(child.stderr, (line) => child.emit('errLine', line));
  eachLine(child.stdout, (line) => child.emit('line', line));
  if (opts.onLine) child.on('line', opts.onLine);
  if (opts.onErrLine) child.on('errLine', opts.onErrLine);
  // What it said last, on either stream, for the error if it never gets ready (servers log to stdout).
  let said = '';
  child.on('line', (line: string) => void (said = `${said}${line}\n`.slice(-2_000)));
  const tail = (): string => (stderr.trim() || said.trim()).slice(-1_500);
  const timeoutMs = opts.readyTimeoutMs ?? 60_000;
  return new Promise((resolve, reject) => {
    let settled = false;
    const finish = (err?: Error, match?: RegExpExecArray): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      child.off('exit', early);
      if (err) return reject(err);
      if (opts.onExit) child.once('exit', opts.onExit);
      resolve({ child, ...(match ? { match } : {}) });
    };
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      finish(new Error(`${name} was not ready within ${timeoutMs} ms: ${tail()}`));
    }, timeoutMs);
    const early = (code: number | null, signal: string | null): void =>
      finish(
        new Error(
          `${name} exited (${code ?? signal}) before it was ready: ${stderr.trim()}\n${said.trim()}`
            .trim()
            .slice(-2_500),
        ),
      );
    child.once('exit', early);
    child.once('error', (err) => finish(new Error(`${name} could not be started: ${err.message}`)));
    if (ready instanceof RegExp) {
      const event = opts.readyOn === 'stderr' ? 'errLine' : 'line';
      const watch = (line: string): void => {
        const match = ready.exec(line);
        if (!match) return;
        child.off(event, watch);
        finish(undefined, match);
      };
      child.on(event, watch);
    } else {
      void (async () => {
        while (!settled) {
          // Ready only while it still runs: a probe may reach another process on a port it failed to take.
          if ((await ready().catch(() => false)) && child.exitCode === null && child.signalCode === null)
            return finish();
          await sleep(250);
        }
      })();
    }
  });
}

/**
 * Runs one of the project's TypeScript entry points as its own process (`node --import tsx`, so a
 * signal reaches it, not a wrapper); resolves once a stdout line matches `ready`, with the match.
 */
export async function startTsProcess(
  entry: string,
  env: NodeJS.ProcessEnv,
  ready: RegExp,
  opts: StartOptions = {},
): Promise<{ child: ChildProcess; match: RegExpExecArray }> {
  const { child, match } = await startProcess(
    process.execPath,
    ['--import', 'tsx', path.join(ROOT, entry)],
    env,
    ready,
    opts,
  );
  return { child, match: match! };
}

/**
 * Starts provider/server.ts as its own process; resolves with its payment and admin URLs once it
 * listens. `onLine` receives every line it writes on stdout (its JSON log).
 */
export async function startProviderProcess(
  env: NodeJS.ProcessEnv,
  onLine?: (line: string) => void,
): Promise<{ child: ChildProcess; url: string; adminUrl: string }> {
  const { child, match } = await startTsProcess(
    'provider/server.ts',
    env,
    /"event":"listening","url":"([^"]+)","adminUrl":"([^"]+)"/,
    { onLine, showStderr: true },
  );
  return { child, url: match[1]!, adminUrl: match[2]! };
}

/** Starts worker.ts as its own process; resolves once it polls its task queue. */
export async function startWorkerProcess(env: NodeJS.ProcessEnv): Promise<ChildProcess> {
  return (await startTsProcess('worker.ts', env, /polling task queue/)).child;
}

/** The ports among these that something on this machine already listens on (loopback). */
export async function busyPorts(ports: number[]): Promise<number[]> {
  const busy: number[] = [];
  for (const port of ports) {
    const free = await new Promise<boolean>((resolve) => {
      const srv = createServer();
      srv.once('error', () => resolve(false));
      srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
    });
    if (!free) busy.push(port);
  }
  return busy;
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

/** Resolves once `child` has exited (at once if it already has), with its exit code or signal. */
export function exited(child: ChildProcess): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  if (child.exitCode !== null || child.signalCode !== null)
    return Promise.resolve({ code: child.exitCode, signal: child.signalCode });
  return new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
}

/**
 * Sends `signal`, and SIGKILL after `graceMs` if it has not exited; resolves once it has. With
 * SIGKILL as `signal`, it kills at once and waits for the exit.
 */
export async function stopProcess(
  child: ChildProcess | undefined,
  signal: NodeJS.Signals = 'SIGTERM',
  graceMs = 10_000,
): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exit = exited(child);
  child.kill(signal);
  const t = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await exit;
  clearTimeout(t);
}

/**
 * Runs `command` to its end (initdb, a CLI under test) and resolves with its exit code and output:
 * `stdout`, `stderr`, and both as they came (`output`). Rejects only if it cannot be spawned.
 */
export function runProcess(
  command: string,
  args: string[],
  env: NodeJS.ProcessEnv,
  opts: Pick<StartOptions, 'cwd' | 'user' | 'cleanEnv'> = {},
): Promise<{ code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      cwd: opts.cwd ?? ROOT,
      env: childEnv(env, opts.cleanEnv),
      stdio: ['ignore', 'pipe', 'pipe'],
      ...opts.user,
    });
    let stdout = '';
    let stderr = '';
    let output = '';
    child.stdout.on('data', (c: Buffer) => void ((stdout += c.toString()), (output += c.toString())));
    child.stderr.on('data', (c: Buffer) => void ((stderr += c.toString()), (output += c.toString())));
    child.once('error', (err) =>
      reject(new Error(`${processName(command, args)} could not be started: ${err.message}`)),
    );
    // 'close', not 'exit': by then both streams have ended, so nothing it wrote is missed.
    child.once('close', (code, signal) => resolve({ code, signal, stdout, stderr, output }));
  });
}
