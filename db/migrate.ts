import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import type { Pool } from 'pg';
import { withTransaction } from './pool';

export const APP_MIGRATIONS = path.resolve(__dirname, '..', 'migrations');
export const PROVIDER_MIGRATIONS = path.resolve(__dirname, '..', 'provider', 'migrations');

/** The numbered SQL files of a directory, in order. */
async function migrationFiles(dir: string): Promise<string[]> {
  return (await readdir(dir)).filter((f) => /^\d{4}_[\w-]+\.sql$/.test(f)).sort();
}

/**
 * Applies numbered SQL files (0001_name.sql, …) in order. Each file runs in one transaction and is
 * recorded in `table`; an advisory lock keeps two processes from migrating at once.
 */
export async function migrate(pool: Pool, dir: string, table: string): Promise<string[]> {
  if (!/^[a-z_][a-z0-9_.]*$/.test(table)) throw new Error(`migrate: bad table name ${table}`);
  const files = await migrationFiles(dir);
  const applied: string[] = [];
  const schema = table.includes('.') ? table.split('.')[0] : undefined;
  for (const file of files) {
    const version = Number(file.slice(0, 4));
    const sql = await readFile(path.join(dir, file), 'utf8');
    await withTransaction(pool, async (c) => {
      await c.query({ text: 'SELECT pg_advisory_xact_lock(hashtext($1))', values: [table] });
      if (schema) await c.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`);
      await c.query(
        `CREATE TABLE IF NOT EXISTS ${table} (version int PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
      );
      const seen = await c.query({ text: `SELECT 1 FROM ${table} WHERE version = $1`, values: [version] });
      if (seen.rowCount) return;
      try {
        await c.query(sql);
      } catch (err) {
        throw new Error(`migration ${file} failed: ${(err as Error).message}`, { cause: err });
      }
      await c.query({ text: `INSERT INTO ${table} (version, name) VALUES ($1, $2)`, values: [version, file] });
      applied.push(file);
    });
  }
  return applied;
}

/**
 * For a process that runs with a role that may not migrate (the provider): refuses to start, saying
 * what to run, when `table` lacks a migration found in `dir`.
 */
export async function assertMigrated(pool: Pool, dir: string, table: string): Promise<void> {
  const files = await migrationFiles(dir);
  let versions: number[];
  try {
    versions = (await pool.query<{ version: number }>(`SELECT version FROM ${table}`)).rows.map((r) => r.version);
  } catch (err) {
    throw new Error(
      `cannot read ${table} (${(err as Error).message}): run the migrations as the database owner first (npm run migrate)`,
      { cause: err },
    );
  }
  const missing = files.filter((f) => !versions.includes(Number(f.slice(0, 4))));
  if (missing.length)
    throw new Error(`migrations not applied: ${missing.join(', ')}; run them as the database owner (npm run migrate)`);
}

/** Both schemas: the application's and the payment provider's (kept in its own schema). */
export async function migrateAll(pool: Pool): Promise<string[]> {
  return [
    ...(await migrate(pool, APP_MIGRATIONS, 'public.schema_migrations')),
    ...(await migrate(pool, PROVIDER_MIGRATIONS, 'provider.schema_migrations')),
  ];
}
