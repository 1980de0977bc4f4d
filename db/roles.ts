/**
 * Three login roles, one per kind of process, so that none can write what is not its own:
 *   order_app      the worker and client.ts: the application's tables (public), never provider.*;
 *   order_provider the payment provider: its ledger (provider.*), never the application's tables;
 *   order_reader   the invariant checker and reconciliation: reads both, writes nothing.
 * The owner (the DATABASE_URL migrations run with) keeps the schema: no role above may create, alter
 * or drop a table, change the legal order transitions, or rewrite the migration records.
 */
import { randomBytes } from 'node:crypto';
import type { Pool, PoolClient } from 'pg';
import { migrateAll } from './migrate';
import { createPool, withTransaction } from './pool';

export const ROLES = { app: 'order_app', provider: 'order_provider', reader: 'order_reader' } as const;
export type RoleKind = keyof typeof ROLES;
export type RolePasswords = Record<RoleKind, string>;
export type RoleUrls = Record<RoleKind, string>;

/** The variables `npm run migrate` reads the roles' passwords from (docker compose sets them from .env). */
export const ROLE_PASSWORD_VARS: Record<RoleKind, string> = {
  app: 'APP_ROLE_PASSWORD',
  provider: 'PROVIDER_ROLE_PASSWORD',
  reader: 'READER_ROLE_PASSWORD',
};

const PASSWORD_SHAPE = /^[\x21-\x7e]{16,200}$/;

/** New random passwords: the embedded server's roles get new ones at every start. */
export function randomPasswords(): RolePasswords {
  const one = (): string => randomBytes(18).toString('base64url');
  return { app: one(), provider: one(), reader: one() };
}

/**
 * The passwords from the environment, or undefined when none is set. Throws naming the variable when
 * only some are set or one is malformed.
 */
export function passwordsFromEnv(env: NodeJS.ProcessEnv): RolePasswords | undefined {
  const kinds = Object.keys(ROLES) as RoleKind[];
  const set = kinds.filter((k) => env[ROLE_PASSWORD_VARS[k]] !== undefined);
  if (set.length === 0) return undefined;
  const out = {} as RolePasswords;
  for (const k of kinds) {
    const name = ROLE_PASSWORD_VARS[k];
    const value = env[name];
    if (value === undefined)
      throw new Error(
        `${name} is not set (the roles' passwords come together: ${kinds.map((x) => ROLE_PASSWORD_VARS[x]).join(', ')})`,
      );
    if (!PASSWORD_SHAPE.test(value)) throw new Error(`${name}: must be 16 to 200 printable characters, without spaces`);
    out[k] = value;
  }
  return out;
}

/** The owner's connection string with another user and password. */
export function roleUrl(ownerUrl: string, kind: RoleKind, password: string): string {
  const u = new URL(ownerUrl);
  u.username = ROLES[kind];
  u.password = encodeURIComponent(password);
  return u.toString();
}

/** What marks a role as ours: a role of that name that lacks it is someone else's, never taken over. */
export const ROLE_MARK = 'order-saga: created by this project';

/**
 * Creates `role` (marked as ours) or accepts it when it carries our mark; refuses someone else's
 * role of the same name. Then sets its password and strips any power it should not have.
 */
export async function ensureLoginRole(c: PoolClient, role: string, password: string): Promise<void> {
  const found = await c.query<{ mark: string | null }>({
    text: `SELECT shobj_description(oid, 'pg_authid') AS mark FROM pg_roles WHERE rolname = $1`,
    values: [role],
  });
  if (!found.rowCount) {
    await c.query(`CREATE ROLE ${role}`);
    await c.query(`COMMENT ON ROLE ${role} IS ${c.escapeLiteral(ROLE_MARK)}`);
  } else if (found.rows[0]!.mark !== ROLE_MARK) {
    throw new Error(
      `role ${role} already exists on this server and was not created by order-saga; refusing to take it over (use another server, or drop that role)`,
    );
  }
  await c.query(
    `ALTER ROLE ${role} WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD ${c.escapeLiteral(password)}`,
  );
}

/**
 * True when all three roles exist and are ours (so their grants can be brought up to date without
 * passwords); throws when one of these names belongs to a role this project did not create.
 */
export async function rolesExist(owner: Pool): Promise<boolean> {
  const { rows } = await owner.query<{ rolname: string; mark: string | null }>({
    text: `SELECT rolname, shobj_description(oid, 'pg_authid') AS mark FROM pg_roles WHERE rolname = ANY($1::text[])`,
    values: [Object.values(ROLES)],
  });
  const foreign = rows.filter((r) => r.mark !== ROLE_MARK).map((r) => r.rolname);
  if (foreign.length)
    throw new Error(
      `role(s) ${foreign.join(', ')} exist on this server and were not created by order-saga; refusing to grant them anything`,
    );
  return rows.length === Object.keys(ROLES).length;
}

/**
 * Creates the roles if missing (refusing same-named roles that are not ours), sets their passwords,
 * and grants exactly their privileges (grantRoles). Idempotent; run as the owner after the migrations.
 */
export async function setUpRoles(owner: Pool, ownerUrl: string, passwords: RolePasswords): Promise<RoleUrls> {
  for (const [kind, value] of Object.entries(passwords)) {
    if (!PASSWORD_SHAPE.test(value))
      throw new Error(
        `${ROLE_PASSWORD_VARS[kind as RoleKind]}: must be 16 to 200 printable characters, without spaces`,
      );
  }
  await withTransaction(owner, async (c) => {
    // Roles are per cluster: two setups at once (two test runs on one server) must not race.
    await c.query(`SELECT pg_advisory_xact_lock(hashtext('order-saga roles'))`);
    for (const kind of Object.keys(ROLES) as RoleKind[]) await ensureLoginRole(c, ROLES[kind], passwords[kind]);
    await c.query(`ALTER ROLE ${ROLES.reader} SET default_transaction_read_only = on`);
    await grant(c);
  });
  return {
    app: roleUrl(ownerUrl, 'app', passwords.app),
    provider: roleUrl(ownerUrl, 'provider', passwords.provider),
    reader: roleUrl(ownerUrl, 'reader', passwords.reader),
  };
}

/** Brings the existing roles' grants up to date with the tables that exist now (after a migration). */
export async function grantRoles(owner: Pool): Promise<void> {
  await withTransaction(owner, async (c) => {
    await c.query(`SELECT pg_advisory_xact_lock(hashtext('order-saga roles'))`);
    await grant(c);
  });
}

async function grant(c: PoolClient): Promise<void> {
  const { app, provider, reader } = ROLES;
  const db = (await c.query<{ db: string }>('SELECT current_database() AS db')).rows[0]!.db;
  await c.query(`REVOKE CREATE, TEMPORARY ON DATABASE ${c.escapeIdentifier(db)} FROM PUBLIC`);
  await c.query(`GRANT CONNECT ON DATABASE ${c.escapeIdentifier(db)} TO ${app}, ${provider}, ${reader}`);
  // Schemas: nobody but the owner creates objects; each role sees only the schemas it needs.
  await c.query('REVOKE ALL ON SCHEMA public, provider FROM PUBLIC');
  await c.query(`REVOKE ALL ON SCHEMA public, provider FROM ${app}, ${provider}, ${reader}`);
  await c.query(`GRANT USAGE ON SCHEMA public TO ${app}, ${reader}`);
  await c.query(`GRANT USAGE ON SCHEMA provider TO ${provider}, ${reader}`);
  // Tables: start from nothing, then grant.
  await c.query(`REVOKE ALL ON ALL TABLES IN SCHEMA public, provider FROM PUBLIC, ${app}, ${provider}, ${reader}`);
  await c.query(`REVOKE ALL ON ALL SEQUENCES IN SCHEMA public, provider FROM PUBLIC, ${app}, ${provider}, ${reader}`);
  await c.query(`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO ${app}`);
  await c.query(`GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO ${app}`);
  await c.query(`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA provider TO ${provider}`);
  await c.query(`GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA provider TO ${provider}`);
  // What only the owner changes: the legal order transitions and the migration records.
  await c.query(`REVOKE INSERT, UPDATE, DELETE ON public.order_transitions, public.schema_migrations FROM ${app}`);
  await c.query(`REVOKE INSERT, UPDATE, DELETE ON provider.schema_migrations FROM ${provider}`);
  await c.query(`GRANT SELECT ON ALL TABLES IN SCHEMA public, provider TO ${reader}`);
  // The hashes of the provider's keys are for the provider alone (short keys could be guessed offline);
  // the orders API's, for the application alone.
  await c.query(`REVOKE SELECT ON provider.api_keys, public.api_keys FROM ${reader}`);
}

/** Migrations then roles, as the owner: what npm start, the tests, the soak and the bench do first. */
export async function prepareDatabase(
  ownerUrl: string,
  passwords: RolePasswords = randomPasswords(),
): Promise<{ applied: string[]; urls: RoleUrls }> {
  const owner = createPool(ownerUrl, { max: 1 });
  try {
    const applied = await migrateAll(owner);
    return { applied, urls: await setUpRoles(owner, ownerUrl, passwords) };
  } finally {
    await owner.end();
  }
}
