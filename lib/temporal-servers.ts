/**
 * Where the real Temporal servers come from. scripts/ensure-servers.sh builds them from package
 * registries into the cache; TEMPORAL_CLI_PATH / TEMPORAL_TEST_SERVER_PATH override; with neither,
 * the SDK's own download is used (needs internet).
 */
import { existsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Connection } from '@temporalio/client';
import type { EphemeralServerExecutable } from '@temporalio/testing/lib/ephemeral-server';
import { temporal } from '@temporalio/proto';
import { SEARCH_ATTRIBUTES } from '../workflows/search-attributes';

export const CACHE_DIR = process.env.ORDER_SAGA_CACHE ?? path.join(os.homedir(), '.cache', 'order-saga');

function executable(envVar: string, cached: string): EphemeralServerExecutable | undefined {
  const override = process.env[envVar];
  if (override) {
    if (!existsSync(override)) throw new Error(`${envVar}=${override} does not exist`);
    return { type: 'existing-path', path: override };
  }
  return existsSync(cached) ? { type: 'existing-path', path: cached } : undefined;
}

/** The Temporal CLI (dev server with the Web UI). undefined → let the SDK download it. */
export const devServerExecutable = (): EphemeralServerExecutable | undefined =>
  executable('TEMPORAL_CLI_PATH', path.join(CACHE_DIR, 'bin', 'temporal'));

/**
 * SQLite settings of the file-backed dev server (`npm start`). WAL lets readers and the writer work at
 * once and commits with one fsync of the log instead of two of the database and its journal;
 * `synchronous=normal` in WAL mode keeps every commit across a stop, a crash or a kill of the server
 * process (only a power cut or an OS crash can lose the last commits). Measured in the README.
 */
export const DEV_SERVER_SQLITE_PRAGMAS = ['journal_mode=wal', 'synchronous=normal'];

/** The dev server's options for history kept in `dbFilename` (npm start, and its durability test). */
export const fileBackedDevServer = (dbFilename: string): { dbFilename: string; extraArgs: string[] } => ({
  dbFilename,
  extraArgs: DEV_SERVER_SQLITE_PRAGMAS.flatMap((p) => ['--sqlite-pragma', p]),
});

/** The Java time-skipping test server's wrapper. undefined → let the SDK download it. */
export const testServerExecutable = (): EphemeralServerExecutable | undefined =>
  executable('TEMPORAL_TEST_SERVER_PATH', path.join(CACHE_DIR, 'bin', 'temporal-test-server'));

/** Registers the saga's search attributes on a running server (idempotent). */
export async function registerSearchAttributes(connection: Connection, namespace: string): Promise<void> {
  const types = temporal.api.enums.v1.IndexedValueType;
  const searchAttributes: Record<string, temporal.api.enums.v1.IndexedValueType> = {};
  for (const [name, type] of Object.entries(SEARCH_ATTRIBUTES)) {
    searchAttributes[name] =
      type === 'Keyword'
        ? types.INDEXED_VALUE_TYPE_KEYWORD
        : type === 'Bool'
          ? types.INDEXED_VALUE_TYPE_BOOL
          : types.INDEXED_VALUE_TYPE_INT;
  }
  let known: Record<string, unknown> = {};
  try {
    known = (await connection.operatorService.listSearchAttributes({ namespace })).customAttributes ?? {};
  } catch (err) {
    // The Java time-skipping server can add search attributes but cannot list them.
    if ((err as { code?: number }).code !== 12 /* UNIMPLEMENTED */) throw err;
  }
  const missing = Object.fromEntries(Object.entries(searchAttributes).filter(([name]) => !(name in known)));
  if (Object.keys(missing).length === 0) return;
  try {
    await connection.operatorService.addSearchAttributes({ namespace, searchAttributes: missing });
  } catch (err) {
    if (!/already exists/i.test((err as Error).message)) throw err;
  }
}
