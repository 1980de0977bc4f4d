/**
 * The commit path: the CAS commit (read the version, then the conditional single-row UPDATE, no
 * logic) against pgbench running a plain single-row UPDATE on the same database with as many clients.
 * Without pgbench the CAS figure stands alone, not compared.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Pool } from 'pg';
import { progress, ratio } from './measure';
import { casCommitThroughput, setupBenchTable } from './strategies';

export interface CommitPathResult {
  /** The CAS commit path's transactions per second. */
  cas: number;
  /** pgbench's, and CAS over pgbench (absent when pgbench is not installed). */
  pgbench?: number;
  ratio?: number;
  note?: string;
}

/** pgbench on PATH, or the newest under Debian's /usr/lib/postgresql. */
function findPgbench(): string | undefined {
  const fromPath = spawnSync('sh', ['-c', 'command -v pgbench'], { encoding: 'utf8' }).stdout.trim();
  if (fromPath) return fromPath;
  const base = '/usr/lib/postgresql';
  if (existsSync(base)) {
    for (const v of readdirSync(base).sort().reverse()) {
      const p = path.join(base, v, 'bin', 'pgbench');
      if (existsSync(p)) return p;
    }
  }
  return undefined;
}

/** Both sides over 1000 keys, `clients` at once, `seconds` each; `url` is the database's, for pgbench. */
export async function measureCommitPath(
  db: Pool,
  url: string,
  opts: { clients: number; seconds: number },
): Promise<CommitPathResult> {
  const { clients, seconds } = opts;
  await setupBenchTable(db); // its own table, also when it runs alone (--only commit-path)
  progress('commit path: CAS…');
  const cas = await casCommitThroughput(db, { clients, keys: 1000, durationMs: seconds * 1000 });
  const pgbench = findPgbench();
  if (!pgbench)
    return {
      cas: cas.tps,
      note: 'pgbench not found (install Debian postgresql-15 or set PATH); CAS not compared',
    };
  const u = new URL(url);
  const dir = mkdtempSync(path.join(os.tmpdir(), 'order-saga-pgbench-'));
  const script = path.join(dir, 'update.sql');
  writeFileSync(
    script,
    '\\set id random(1, 1000)\nUPDATE bench.stock SET stock = stock - 1, version = version + 1 WHERE id = :id;\n',
  );
  chmodSync(dir, 0o755);
  progress('commit path: pgbench…');
  const out = execFileSync(
    pgbench,
    [
      '-n',
      '-c',
      String(clients),
      '-j',
      '2',
      '-T',
      String(seconds),
      '-f',
      script,
      '-h',
      u.hostname,
      '-p',
      u.port,
      '-U',
      decodeURIComponent(u.username),
      u.pathname.slice(1),
    ],
    { env: { ...process.env, PGPASSWORD: decodeURIComponent(u.password) }, encoding: 'utf8' },
  );
  rmSync(dir, { recursive: true, force: true });
  const tps = Number(/tps = ([\d.]+)/.exec(out)?.[1] ?? NaN);
  progress('');
  return { cas: cas.tps, pgbench: Math.round(tps), ratio: ratio(cas.tps, tps) };
}
