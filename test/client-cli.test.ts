/**
 * client.ts's command line in this process, without servers: help, and every kind of invalid input
 * refused with exit 2 and the option named before anything is reached (the configuration points at
 * a closed port, so a command that got as far as connecting would exit 1 instead).
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { runCli } from '../client';
import { DEFAULT_PORTS, readConfig } from '../ops/config';
import { DEV_PROVIDER_API_KEY as DEFAULTS_KEY, PROVIDER_PORT } from '../provider/defaults';

const cfg = { ...readConfig({ TEMPORAL_ADDRESS: '127.0.0.1:1', WORKER_METRICS_URL: 'http://127.0.0.1:1' }) };
const tmp = mkdtempSync(path.join(os.tmpdir(), 'order-saga-cli-'));
const orderFile = path.join(tmp, 'order.json');
writeFileSync(
  orderFile,
  JSON.stringify({
    orderId: 'cli-1',
    customerId: 'c-1',
    currency: 'USD',
    paymentMethod: 'tok_visa',
    items: [{ sku: 'SKU-MUG', qty: 1, unitPriceCents: 1299 }],
  }),
);

async function run(...argv: string[]): Promise<{ code: number; out: string; err: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runCli(argv, cfg, { out: (l) => out.push(l), err: (l) => err.push(l) });
  return { code, out: out.join('\n'), err: err.join('\n') };
}

const COMMANDS = [
  'place',
  'status',
  'cancel',
  'resolve',
  'refund',
  'list',
  'stats',
  'check',
  'schedule',
  'findings',
  'load',
  'api-keys',
  'views',
  'events',
];

describe('client.ts command line', () => {
  it('--help lists every command and exits 0; each command has its own help', async () => {
    const main = await run('--help');
    expect(main.code).toBe(0);
    for (const c of COMMANDS) expect(main.out).toMatch(new RegExp(`^  ${c}\\b`, 'm'));
    expect(main.out).toMatch(/Exit codes: 0 success/);
    for (const c of [...COMMANDS.map((c) => [c]), ['schedule', 'reconcile']]) {
      const r = await run(...c, '--help');
      expect(r.code, c.join(' ')).toBe(0);
      expect(r.out, c.join(' ')).toContain(`Usage: npx tsx client.ts ${c.join(' ')}`);
    }
    expect((await run('help', 'resolve')).out).toMatch(
      /choices: "charge-succeeded", "charge-failed", "retry",\s+"mark-resolved"/,
    );
  });

  it('no command, an unknown command or option: exit 2', async () => {
    expect((await run()).code).toBe(2);
    const unknown = await run('frobnicate');
    expect(unknown).toMatchObject({
      code: 2,
      err: expect.stringMatching(/invalid input: unknown command 'frobnicate'/),
    });
    expect(await run('status', 'o-1', '--bogus')).toMatchObject({
      code: 2,
      err: expect.stringMatching(/unknown option '--bogus'/),
    });
  });

  it.each([
    [['place'], /--file/],
    [['place', '--file', orderFile, '--wait', '0'], /--wait <seconds>.*Expected a whole number from 1 to 3600/],
    [['place', '--file', path.join(tmp, 'missing.json')], /file: cannot read/],
    [['status'], /missing required argument 'orderId'/],
    [['status', 'a'.repeat(65)], /argument 'orderId'.*Expected an order ID: it must be at most 64 characters/],
    [['status', 'o-1', 'o-2'], /too many arguments/],
    [['cancel', 'o-1', '--wait', 'soon'], /--wait <seconds>/],
    [['resolve', 'o-1'], /--action <action>' not specified/],
    [
      ['resolve', 'o-1', '--action', 'refund-everything'],
      /--action <action>' argument 'refund-everything' is invalid\. Allowed choices are charge-succeeded/,
    ],
    [['refund', 'o-1', '--key', 'k'], /--amount <cents>' not specified/],
    [['refund', 'o-1', '--amount', '0', '--key', 'k'], /--amount <cents>' argument '0' is invalid/],
    [['refund', 'o-1', '--amount', '100'], /--key <key>' not specified/],
    [['list', '--status', 'DONE'], /--status <STATUS>' argument 'DONE' is invalid/],
    [['schedule'], /Usage: npx tsx client.ts schedule/],
    [['schedule', 'weekly'], /unknown command 'weekly'/],
    [['schedule', 'reconcile', '--every', '30s'], /--every <duration>.*at least 60s/],
    [['schedule', 'sweep', '--stall-after', 'soon'], /--stall-after <duration>.*at least 60s/],
    [['load'], /--orders <N>' not specified/],
    [
      ['load', '--orders', '10', '--concurrency', '501'],
      /invalid input: --concurrency: must be a whole number from 1 to 500/,
    ],
    [['load', '--orders', '10', '--hot-share', '1.5'], /invalid input: --hot-share: must be a number from 0 to 1/],
    [['load', '--orders', '0'], /invalid input: --orders: must be a whole number from 1 to 100000/],
    [['load', '--orders', 'many'], /--orders <N>' argument 'many' is invalid\. Expected a number/],
    [['load', '--orders', '10', '--workers', '0'], /--workers <W>/],
    [['views', '--customer', 'two words'], /--customer <customerId>/],
    [['events'], /invalid input: orderId: name an order, or use --dead/],
    [['events', '--dead', '--resend'], /invalid input: orderId: --resend sends one order's events again/],
    [['events', 'o-1', '--limit', '0'], /--limit <n>/],
  ])('%j: exit 2, naming %s', async (argv, named) => {
    const r = await run(...argv);
    expect(r.code, r.err).toBe(2);
    expect(r.err).toMatch(named);
    expect(r.out).toBe('');
  });

  it('a command that reaches an absent server exits 1 and says which', async () => {
    expect(await run('status', 'o-1')).toMatchObject({
      code: 1,
      err: expect.stringMatching(/cannot reach Temporal at 127\.0\.0\.1:1/),
    });
    expect(await run('stats')).toMatchObject({
      code: 1,
      err: expect.stringMatching(/cannot reach the worker's metrics/),
    });
    expect(await run('load', '--orders', '1')).toMatchObject({
      code: 1,
      err: expect.stringMatching(/load needs DATABASE_URL/),
    });
    expect(await run('views')).toMatchObject({ code: 0 });
  });
});

describe('configuration defaults', () => {
  it('each default port and the provider dev key come from one place', () => {
    const d = readConfig({});
    expect(d.temporalAddress).toBe(`127.0.0.1:${DEFAULT_PORTS.temporal}`);
    expect(d.uiUrl).toBe(`http://127.0.0.1:${DEFAULT_PORTS.temporalUi}`);
    expect(d.providerUrl).toBe(`http://127.0.0.1:${PROVIDER_PORT}`);
    expect(d.workerMetricsUrl).toBe(`http://127.0.0.1:${DEFAULT_PORTS.workerMetrics}`);
    expect(d.providerApiKey).toBe(DEFAULTS_KEY);
  });
});
