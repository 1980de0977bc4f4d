/**
 * `npm run migrate`: as the owner (DATABASE_URL), applies the numbered migrations (application and
 * provider schemas) and, when APP_ROLE_PASSWORD, PROVIDER_ROLE_PASSWORD and READER_ROLE_PASSWORD are
 * set, creates the three roles (db/roles.ts) with those passwords and grants their privileges. When
 * TEMPORAL_ADDRESS or a connection profile (ops/temporal-connection.ts) names a server, it also
 * creates the namespace (if missing) and the saga's search attributes there.
 * npm start does all of it by itself; this is for an existing Postgres and server (docker compose).
 */
import { migrateAll } from '../db/migrate';
import { createPool } from '../db/pool';
import { grantRoles, passwordsFromEnv, ROLE_PASSWORD_VARS, ROLES, rolesExist, setUpRoles } from '../db/roles';
import { readConfig } from '../ops/config';
import { prepareNamespace } from '../servers/temporal-server';

async function main(): Promise<void> {
  const url = process.env.DATABASE_URL;
  if (!url) throw new Error('DATABASE_URL is required');
  // The connection profile first: one that cannot be used is refused before the database is touched.
  const temporal = readConfig({ ...process.env }).temporal;
  const pool = createPool(url);
  try {
    const applied = await migrateAll(pool);
    process.stdout.write(`migrate: ${applied.length ? `applied ${applied.join(', ')}` : 'up to date'}\n`);
    const passwords = passwordsFromEnv(process.env);
    if (passwords) {
      await setUpRoles(pool, url, passwords);
      process.stdout.write(`migrate: roles ${Object.values(ROLES).join(', ')} set up\n`);
    } else if (await rolesExist(pool)) {
      await grantRoles(pool); // new tables of this migration get their grants too
      process.stdout.write(`migrate: grants of roles ${Object.values(ROLES).join(', ')} brought up to date\n`);
    } else {
      process.stdout.write(
        `migrate: roles not set up (set ${Object.values(ROLE_PASSWORD_VARS).join(', ')} to create them)\n`,
      );
    }
  } finally {
    await pool.end();
  }
  if (temporal.external) {
    // It may run while the server starts (docker compose): wait for it, up to two minutes.
    await prepareNamespace(temporal.connection, temporal.namespace, 120_000);
    process.stdout.write(
      `migrate: namespace ${temporal.namespace} and its search attributes ready on ${temporal.summary}\n`,
    );
  }
}

main().catch((err: Error) => {
  process.stderr.write(`migrate: ${err.message}\n`);
  process.exit(1);
});
