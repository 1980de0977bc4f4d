import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import type { Pool } from 'pg';
import { withTransaction } from './pool';

export const APP_MIGRATIONS = path.resolve(__dirname, '..', 'migrations');
export const PROVIDER_MIGRATIONS = path.resolve(__dirname, '..', 'provider', 'migrations');

/**
 * Applies numbered SQL files (0001_name.sql, …) in order. Each file runs in one transaction and is
 * recorded in `table`; an advisory lock keeps two processes from migrating at once.
 */
export async function migrate(pool: Pool, dir: string, table: string): Promise<string[]> {
  if (!/^[a-z_][a-z0-9_.]*$/.test(table)) throw new Error(`migrate: bad table name ${table}`);
  const files = (await readdir(dir)).filter((f) => /^\d{4}_[\w-]+\.sql$/.test(f)).sort();
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
        throw new Error(`migration ${file} failed: ${(err as Error).message}`);
      }
      await c.query({ text: `INSERT INTO ${table} (version, name) VALUES ($1, $2)`, values: [version, file] });
      applied.push(file);
    });
  }
  return applied;
}

/** Both schemas: the application's and the payment provider's (kept in its own schema). */
export async function migrateAll(pool: Pool): Promise<string[]> {
  return [
    ...(await migrate(pool, APP_MIGRATIONS, 'public.schema_migrations')),
    ...(await migrate(pool, PROVIDER_MIGRATIONS, 'provider.schema_migrations')),
  ];
}
