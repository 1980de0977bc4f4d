/**
 * The engines section on its own: `npx tsx bench/engines-main.ts [--quick]`. Starts an embedded
 * Postgres in a temporary directory (as bench/run.ts does), migrates it, measures plain Node, DBOS and
 * Restate (bench/engines.ts), prints the table, and removes everything.
 */
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { migrateAll } from '../db/migrate';
import { createPool } from '../db/pool';
import { installRuntime } from '../platform/runtime';
import { ensurePostgres } from '../servers/postgres';
import { enginesTable, measureEngines, type EnginesOptions } from './engines';
import { say } from './measure';

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { quick: { type: 'boolean' } } });
  const opts: EnginesOptions = values.quick
    ? { idleOrders: 10, orders: 40, concurrency: 20, rounds: 2 }
    : { idleOrders: 30, orders: 200, concurrency: 20, rounds: 4 };
  installRuntime('ERROR');
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'order-saga-engines-'));
  chmodSync(tmp, 0o755);
  const pg = await ensurePostgres({
    dataDir: path.join(tmp, 'pg'),
    port: 55000 + (process.pid % 900),
    database: 'bench',
    persistent: false,
  });
  try {
    const db = createPool(pg.url, { max: 2 });
    try {
      await migrateAll(db);
    } finally {
      await db.end();
    }
    if (!pg.dataDir) throw new Error('the engines section needs the embedded Postgres (DATABASE_URL is set)');
    const sides = await measureEngines({ url: pg.url, dataDir: pg.dataDir }, opts);
    say(`## Engines: the saga's essential work (${values.quick ? 'quick' : 'full'})\n`);
    say(enginesTable(sides, opts));
  } finally {
    await pg.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
}

main().catch((err: Error) => {
  process.stderr.write(`bench engines: ${err.stack ?? err.message}\n`);
  process.exit(1);
});
