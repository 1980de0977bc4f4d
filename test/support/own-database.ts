/**
 * A database of a test file's own, migrated, with the roles' grants: for a test whose subject reads
 * the whole database (the checker's report, the sweep's pages), so other files' rows never show.
 */
import type { Pool } from 'pg';
import { inject } from 'vitest';
import { createPool } from '../../db/pool';
import { migrateAll } from '../../db/migrate';
import { grantRoles } from '../../db/roles';
import { testPool, uid } from './helpers';

export interface OwnDatabase {
  /** The file's database, as its owner. */
  owner: Pool;
  /** `url` with its database replaced by the file's. */
  on(url: string): string;
  /** The file's database as the tests' owner reaches it. */
  url: string;
  /** Closes the pool and drops the database. */
  drop(): Promise<void>;
}

export async function ownDatabase(prefix: string): Promise<OwnDatabase> {
  const name = `${prefix}_${uid().replace(/-/g, '')}`;
  const on = (url: string): string => {
    const u = new URL(url);
    u.pathname = `/${name}`;
    return u.toString();
  };
  const cluster = testPool(); // the tests' database, to create and drop this file's
  await cluster.query(`CREATE DATABASE ${name}`);
  const owner = createPool(on(inject('databaseUrl')), { max: 4 });
  await migrateAll(owner);
  await grantRoles(owner); // the roles exist (global setup); they get this database's grants
  return {
    owner,
    on,
    url: on(inject('databaseUrl')),
    drop: async () => {
      await owner.end();
      await cluster.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await cluster.end();
    },
  };
}
