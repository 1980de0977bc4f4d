/**
 * `npm run early-answer [-- --orders N]`: how long `client.ts place --no-wait` takes to get the
 * saga's early answer (Update-with-Start: accepted with its stock reserved, or refused), measured on
 * a running `npm start` stack, one order at a time (an idle stack), through client.ts itself.
 * Prints p50, p99 and max of the answer time the client measures, and of the whole command.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { runCli } from '../client';
import { createPool } from '../db/pool';
import { parseWith, wholeNumber } from '../domain/validation';
import { readConfig } from '../ops/config';
import { percentile, progressBar } from '../orders/load';

async function main(): Promise<number> {
  const { values } = parseArgs({ options: { orders: { type: 'string' }, help: { type: 'boolean' } } });
  if (values.help) {
    process.stdout.write('usage: npm run early-answer [-- --orders N]   (needs a running "npm start")\n');
    return 0;
  }
  const orders = parseWith(wholeNumber(1, 10_000), Number(values.orders ?? 100), (_field, problem) => {
    throw new Error(`--orders: ${problem}`);
  });
  const cfg = readConfig();
  if (!cfg.databaseUrl) throw new Error('needs DATABASE_URL (or a running "npm start")');
  const db = createPool(cfg.databaseUrl, { max: 1 });
  const tag = `EA-${Date.now().toString(36).toUpperCase()}`;
  await db.query({
    text: `INSERT INTO products (sku, name, price_cents, stock, initial_stock) VALUES ($1, 'early-answer product', 500, $2, $2)`,
    values: [tag, orders],
  });
  await db.end();
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'order-saga-early-'));
  const answer: number[] = [];
  const command: number[] = [];
  const bar = progressBar();
  try {
    for (let i = 0; i < orders; i++) {
      const file = path.join(tmp, `${i}.json`);
      writeFileSync(
        file,
        JSON.stringify({
          orderId: `${tag.toLowerCase()}-${i}`,
          customerId: `ea-${i}`,
          currency: 'USD',
          paymentMethod: 'tok_visa',
          items: [{ sku: tag, qty: 1, unitPriceCents: 500 }],
        }),
      );
      const out: string[] = [];
      const t = Date.now();
      const code = await runCli(['place', '--file', file, '--no-wait', '--json'], cfg, {
        out: (l) => out.push(l),
        err: (l) => out.push(l),
      });
      command.push(Date.now() - t);
      if (code !== 0) throw new Error(`order ${i}: client.ts place exited ${code}: ${out.join(' ')}`);
      answer.push((JSON.parse(out[0]!) as { answerMs: number }).answerMs);
      bar(i + 1, orders);
    }
  } finally {
    bar.end();
    rmSync(tmp, { recursive: true, force: true });
  }
  const row = (name: string, xs: number[]): string => {
    const s = [...xs].sort((a, b) => a - b);
    return `${name}: p50 ${percentile(s, 50)} ms, p99 ${percentile(s, 99)} ms, max ${s[s.length - 1]} ms`;
  };
  process.stdout.write(
    `early answer over ${orders} orders, one at a time\n  ${row('Update-with-Start to the answer', answer)}\n  ${row('whole command (validation, catalogue check, answer)', command)}\n`,
  );
  return 0;
}

main().then(
  (code) => process.exit(code),
  (err: Error) => {
    process.stderr.write(`early-answer: ${err.message}\n`);
    process.exit(1);
  },
);
