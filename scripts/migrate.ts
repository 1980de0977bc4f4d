/**
 * `npm run migrate`: applies the numbered migrations (application and provider schemas) to
 * DATABASE_URL and, when TEMPORAL_ADDRESS is set, registers the saga's search attributes there.
 * npm start does both by itself; this is for an existing Postgres and server (docker compose).
 */
import { Connection } from '@temporalio/client';
import { migrateAll } from '../db/migrate';
import { createPool } from '../db/pool';
import { registerSearchAttributes } from '../lib/temporal-servers';

async function main(): Promise<void> {
  const url = process.env.DATABASE_URL;
  if (!url) throw new Error('DATABASE_URL is required');
  const pool = createPool(url);
  try {
    const applied = await migrateAll(pool);
    process.stdout.write(`migrate: ${applied.length ? `applied ${applied.join(', ')}` : 'up to date'}\n`);
  } finally {
    await pool.end();
  }
  if (process.env.TEMPORAL_ADDRESS) {
    const connection = await Connection.connect({ address: process.env.TEMPORAL_ADDRESS });
    await registerSearchAttributes(connection, process.env.TEMPORAL_NAMESPACE ?? 'default');
    await connection.close();
    process.stdout.write(`migrate: search attributes registered on ${process.env.TEMPORAL_ADDRESS}\n`);
  }
}

main().catch((err: Error) => {
  process.stderr.write(`migrate: ${err.message}\n`);
  process.exit(1);
});
