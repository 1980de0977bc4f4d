/**
 * `npx tsx bench/trace-main.ts [out.svg]`: one order, traced end to end, on an embedded Postgres of
 * its own (a temporary directory) and the dev server: prints where its milliseconds go and the
 * largest span, and writes the waterfall to out.svg (default: a file in the temporary directory).
 */
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { migrateAll } from '../db/migrate';
import { createPool } from '../db/pool';
import { installRuntime } from '../platform/runtime';
import { ensurePostgres } from '../servers/postgres';
import { say } from './measure';
import { traceOneOrder } from './trace';
import { formatTimeTable, renderWaterfall } from './waterfall';

async function main(): Promise<void> {
  const arg = process.argv[2];
  if (arg === '--help' || arg === '-h') {
    say('Usage: npx tsx bench/trace-main.ts [out.svg]');
    return;
  }
  installRuntime('ERROR');
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'order-saga-trace-'));
  chmodSync(tmp, 0o755);
  const out = path.resolve(arg ?? path.join(os.tmpdir(), `order-saga-trace-${process.pid}.svg`));
  const pg = await ensurePostgres({
    dataDir: path.join(tmp, 'pg'),
    port: 56000 + (process.pid % 900),
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
    const trace = await traceOneOrder(pg.url);
    writeFileSync(out, renderWaterfall(trace, `One order, traced: ${trace.spans.length} spans`));
    say(`\n## One order, traced (${new Date().toISOString()}, trace ${trace.traceId})\n`);
    say(formatTimeTable(trace));
    say(`\nlargest span: ${trace.largest.name} — ${trace.largest.durationMs} ms`);
    say(`waterfall: ${out}`);
  } finally {
    await pg.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
}

main().catch((err: Error) => {
  process.stderr.write(`trace: ${err.stack ?? err.message}\n`);
  process.exit(1);
});
