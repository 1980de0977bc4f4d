/**
 * End to end on the real Temporal dev server: client.ts (a real process) → dev server → worker →
 * Postgres → provider process.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { WorkflowNotFoundError } from '@temporalio/client';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { bundleWorkflowCode, type Worker } from '@temporalio/worker';
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { workflowIdFor } from '../domain/order';
import { readConfig, type AppConfig } from '../lib/config';
import { devServerExecutable } from '../lib/temporal-servers';
import { createOrderWorker } from '../worker';
import { CustomerIdKey, NeedsAttentionKey, OrderStatusKey, TotalCentsKey } from '../workflows/search-attributes';
import { createProduct, ledger, makeOrder, orderRow, productRow, testPool, uid } from './helpers';

const ROOT = path.resolve(__dirname, '..');
let env: TestWorkflowEnvironment;
let db: Pool;
let worker: Worker;
let running: Promise<void>;
let cfg: AppConfig;
let childEnv: NodeJS.ProcessEnv;
const tmp = mkdtempSync(path.join(os.tmpdir(), 'order-saga-e2e-'));

beforeAll(async () => {
  const executable = devServerExecutable();
  env = await TestWorkflowEnvironment.createLocal({
    server: {
      ...(executable ? { executable } : {}),
      ip: '127.0.0.1',
      searchAttributes: [OrderStatusKey, CustomerIdKey, NeedsAttentionKey, TotalCentsKey],
      log: { format: 'pretty', level: 'error' },
    },
  });
  db = testPool();
  childEnv = {
    TEMPORAL_ADDRESS: env.address,
    TEMPORAL_NAMESPACE: 'default',
    TASK_QUEUE: `e2e-${uid()}`,
    TEMPORAL_UI_URL: 'http://127.0.0.1:8233',
    DATABASE_URL: inject('databaseUrl'),
    PROVIDER_URL: inject('providerUrl'),
    PROVIDER_API_KEY: inject('providerApiKey'),
  };
  cfg = readConfig(childEnv);
  const workflowBundle = await bundleWorkflowCode({ workflowsPath: path.join(ROOT, 'workflows', 'index.ts'), logger: quiet });
  ({ worker } = await createOrderWorker(cfg, env.nativeConnection, { db, workflowBundle }));
  running = worker.run();
});

afterAll(async () => {
  worker?.shutdown();
  await running;
  await db?.end();
  await env?.teardown();
});

const quiet = { log() {}, trace() {}, debug() {}, info() {}, warn() {}, error() {} };

/** Runs `npx tsx client.ts …` as its own process, as a person would. */
function cli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [require.resolve('tsx/cli'), path.join(ROOT, 'client.ts'), ...args], {
      cwd: ROOT,
      env: { ...process.env, ...childEnv },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('exit', (code) => resolve({ code: code ?? -1, stdout, stderr }));
  });
}

function orderFile(order: unknown): string {
  const file = path.join(tmp, `${uid()}.json`);
  writeFileSync(file, typeof order === 'string' ? order : JSON.stringify(order));
  return file;
}

describe('end to end on the dev server', () => {
  it('client place --json: COMPLETED, visible in the dev server, rows and ledger as expected', async () => {
    const p = await createProduct(db, { stock: 20, priceCents: 999 });
    const order = makeOrder([{ sku: p.sku, qty: 2, unitPriceCents: p.priceCents }]);

    const r = await cli(['place', '--file', orderFile(order), '--json']);

    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const out = JSON.parse(r.stdout) as Record<string, string>;
    expect(out).toMatchObject({ orderId: order.orderId, workflowId: `order:${order.orderId}`, status: 'COMPLETED' });
    expect(out.uiUrl).toContain(`/namespaces/default/workflows/order%3A${order.orderId}/`);
    const described = await env.client.workflow.getHandle(workflowIdFor(order.orderId)).describe();
    expect(described.status.name).toBe('COMPLETED');
    expect(described.typedSearchAttributes.get(OrderStatusKey)).toBe('COMPLETED');
    expect(described.typedSearchAttributes.get(TotalCentsKey)).toBe(1998);
    expect((await orderRow(db, order.orderId))?.status).toBe('COMPLETED');
    expect((await productRow(db, p.sku)).stock).toBe(18);
    expect(await ledger(db, order.orderId)).toEqual({ charges: [{ status: 'succeeded', amount: 1998 }], refunds: [] });

    const status = await cli(['status', order.orderId, '--json']);
    expect(status.code).toBe(0);
    expect(JSON.parse(status.stdout)).toMatchObject({
      status: 'COMPLETED',
      stepsDone: ['createOrder', 'reserveInventory', 'chargePayment', 'createShipment', 'sendConfirmation'],
      pivotPassed: true,
    });
  });

  it('a declined card: exit 1, FAILED, stock back to its start, no charge taken', async () => {
    const p = await createProduct(db, { stock: 7, priceCents: 3000 });
    const order = makeOrder([{ sku: p.sku, qty: 3, unitPriceCents: p.priceCents }], { paymentMethod: 'tok_declined' });

    const r = await cli(['place', '--file', orderFile(order), '--json']);

    expect(r.code).toBe(1);
    expect(JSON.parse(r.stdout)).toMatchObject({ orderId: order.orderId, status: 'FAILED' });
    expect((await orderRow(db, order.orderId))?.status).toBe('FAILED');
    expect((await productRow(db, p.sku)).stock).toBe(7);
    const l = await ledger(db, order.orderId);
    expect(l.charges.filter((c) => c.status === 'succeeded')).toEqual([]);
    expect(l.refunds).toEqual([]);
  });

  it('invalid input: exit 2, the field named on stderr, no row written and no workflow started', async () => {
    const p = await createProduct(db, { stock: 5, priceCents: 100 });
    const cases: [unknown, RegExp][] = [
      [makeOrder([{ sku: p.sku, qty: 0, unitPriceCents: 100 }]), /items\[0\]\.qty/],
      [makeOrder([{ sku: 'NO-SUCH-SKU', qty: 1, unitPriceCents: 100 }]), /items\[0\]\.sku: unknown SKU/],
      [{ ...makeOrder([{ sku: p.sku, qty: 1, unitPriceCents: 100 }]), currency: 'XXX' }, /currency/],
    ];
    for (const [order, field] of cases) {
      const r = await cli(['place', '--file', orderFile(order), '--json']);
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr).toMatch(field);
      expect(r.stdout).toBe('');
      const orderId = (order as { orderId: string }).orderId;
      expect(await orderRow(db, orderId)).toBeUndefined();
      await expect(env.client.workflow.getHandle(workflowIdFor(orderId)).describe()).rejects.toBeInstanceOf(WorkflowNotFoundError);
    }
    const bad = await cli(['place', '--file', orderFile('{"orderId": '), '--json']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/not valid JSON/);
    const missing = await cli(['place', '--file', path.join(tmp, 'missing.json')]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/file: cannot read/);
    expect((await productRow(db, p.sku)).stock).toBe(5);
  });

  it('a duplicate order ID is refused (exit 3) without touching the first order', async () => {
    const p = await createProduct(db, { stock: 9, priceCents: 500 });
    const order = makeOrder([{ sku: p.sku, qty: 1, unitPriceCents: p.priceCents }]);
    expect((await cli(['place', '--file', orderFile(order)])).code).toBe(0);
    const again = await cli(['place', '--file', orderFile({ ...order, items: [{ sku: p.sku, qty: 5, unitPriceCents: p.priceCents }] })]);
    expect(again.code).toBe(3);
    expect(again.stderr).toMatch(/duplicate order: orderId/);
    expect((await productRow(db, p.sku)).stock).toBe(8);
    expect((await ledger(db, order.orderId)).charges).toEqual([{ status: 'succeeded', amount: 500 }]);
  });
});
