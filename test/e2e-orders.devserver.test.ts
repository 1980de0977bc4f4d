/**
 * End to end on the real Temporal dev server, placing and cancelling orders: client.ts (a real process)
 * → dev server → worker → Postgres → provider process. Completed, declined, invalid and malformed
 * input, a duplicate, a lost response, a cancel, `--no-wait` and `--wait`. Under
 * `npm run test:server`, the same tests run on the real Temporal server on Postgres, against three
 * worker processes.
 */
import path from 'node:path';
import { WorkflowNotFoundError } from '@temporalio/client';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { describe, expect, it } from 'vitest';
import { workflowIdFor } from '../domain/order';
import { orderOutcome } from '../orders/order-outcome';
import { OrderStatusKey, TotalCentsKey } from '../workflows/search-attributes';
import { runCli } from '../client';
import { createProduct, holds, ledger, makeOrder, orderRow, productRow, uid } from './support/helpers';
import { MALFORMED_ORDERS } from './support/malformed-orders';
import { admin, cfg, cli, db, env, orderFile, tmp, useE2eEnv } from './support/e2e-env';

/**
 * The number of workflows visibility reports, once it has stopped moving (the real server's SQL
 * visibility is written asynchronously; the dev server's answer is final at once).
 */
async function settledCount(e: TestWorkflowEnvironment): Promise<number> {
  let last = (await e.client.workflow.count()).count;
  for (let i = 0; i < 30; i++) {
    await new Promise((r) => setTimeout(r, 500));
    const now = (await e.client.workflow.count()).count;
    if (now === last) return now;
    last = now;
  }
  return last;
}

useE2eEnv();

describe('end to end on the dev server', () => {
  it('client place --json: COMPLETED, visible in the dev server, rows and ledger as expected', async () => {
    const p = await createProduct(db, { stock: 20, priceCents: 999 });
    const order = makeOrder([{ sku: p.sku, qty: 2, unitPriceCents: p.priceCents }]);

    const t0 = Date.now();
    const r = await cli(['place', '--file', orderFile(order), '--json']);
    const elapsed = Date.now() - t0;

    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const out = JSON.parse(r.stdout) as Record<string, string>;
    expect(out).toMatchObject({ orderId: order.orderId, workflowId: `order:${order.orderId}`, status: 'COMPLETED' });
    // How long the order took end to end, as the client saw it: within the command's own run time.
    const took = Number(out.durationMs);
    expect(Number.isInteger(took) && took > 0 && took <= elapsed).toBe(true);
    expect(out.uiUrl).toContain(`/namespaces/default/workflows/order%3A${order.orderId}/`);
    const described = await env.client.workflow.getHandle(workflowIdFor(order.orderId)).describe();
    expect(described.status.name).toBe('COMPLETED');
    expect(described.typedSearchAttributes.get(OrderStatusKey)).toBe('COMPLETED');
    expect(described.typedSearchAttributes.get(TotalCentsKey)).toBe(1998);
    expect((await orderRow(db, order.orderId))?.status).toBe('COMPLETED');
    expect((await productRow(db, p.sku)).stock).toBe(18);
    // Held at checkout, captured once after the shipment; no charge.
    expect(await holds(db, order.orderId)).toEqual({
      authorizations: [{ status: 'authorized', amount: 1998 }],
      captures: [{ status: 'succeeded', amount: 1998 }],
      voids: [],
      keyClosed: false,
    });
    expect(await ledger(db, order.orderId)).toEqual({ charges: [], refunds: [] });

    const status = await cli(['status', order.orderId, '--json']);
    expect(status.code).toBe(0);
    expect(JSON.parse(status.stdout)).toMatchObject({
      status: 'COMPLETED',
      stepsDone: [
        'createOrder',
        'reserveInventory',
        'authorizePayment',
        'createShipment',
        'capturePayment',
        'sendConfirmation',
      ],
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
      await expect(env.client.workflow.getHandle(workflowIdFor(orderId)).describe()).rejects.toBeInstanceOf(
        WorkflowNotFoundError,
      );
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
    const again = await cli([
      'place',
      '--file',
      orderFile({ ...order, items: [{ sku: p.sku, qty: 5, unitPriceCents: p.priceCents }] }),
    ]);
    expect(again.code).toBe(3);
    expect(again.stderr).toMatch(/duplicate order: orderId/);
    expect((await productRow(db, p.sku)).stock).toBe(8);
    expect((await holds(db, order.orderId)).captures).toEqual([{ status: 'succeeded', amount: 500 }]);
  });

  it('lost response after commit, with the real fault switch: exactly one hold and one capture, and the saga completes', async () => {
    const p = await createProduct(db, { stock: 4, priceCents: 2100 });
    const order = makeOrder([{ sku: p.sku, qty: 1, unitPriceCents: p.priceCents }]);
    await admin.set({
      kind: 'lose-response-after-commit',
      target: 'authorizations',
      count: 1,
      keyPrefix: `${order.orderId}:`,
    });

    const r = await cli(['place', '--file', orderFile(order), '--json']);

    expect(r.code, r.stderr).toBe(0);
    expect((JSON.parse(r.stdout) as { status: string }).status).toBe('COMPLETED');
    expect(await holds(db, order.orderId)).toEqual({
      authorizations: [{ status: 'authorized', amount: 2100 }],
      captures: [{ status: 'succeeded', amount: 2100 }],
      voids: [],
      keyClosed: false,
    });
    expect((await admin.list()).injected['lose-response-after-commit']).toBeGreaterThanOrEqual(1);
  });

  it('client cancel before the pivot (the authorization held up at the provider): CANCELLED, voided, stock back', async () => {
    const p = await createProduct(db, { stock: 6, priceCents: 800 });
    const order = makeOrder([{ sku: p.sku, qty: 2, unitPriceCents: p.priceCents }]);
    await admin.set({
      kind: 'delay',
      target: 'authorizations',
      delayMs: 7_000,
      count: 1,
      keyPrefix: `${order.orderId}:`,
    });

    const started = await cli(['place', '--file', orderFile(order), '--no-wait', '--json']);
    expect(started.code, started.stderr).toBe(0);
    // The early answer (Update-with-Start): validated and reserved, the saga runs on.
    expect(JSON.parse(started.stdout)).toMatchObject({ orderId: order.orderId, status: 'RESERVED', accepted: true });
    expect((JSON.parse(started.stdout) as { answerMs: unknown }).answerMs).toEqual(expect.any(Number));
    const cancel = await cli(['cancel', order.orderId, '--reason', 'customer asked', '--json']);
    expect(cancel.code, cancel.stderr).toBe(0);
    expect(JSON.parse(cancel.stdout)).toMatchObject({ status: 'CANCELLED', reason: 'customer asked' });

    expect(await orderRow(db, order.orderId)).toEqual({ status: 'CANCELLED', reason: 'customer asked' });
    expect((await productRow(db, p.sku)).stock).toBe(6);
    // The delayed hold was voided (or its key closed before it was made): nothing captured or charged.
    const h = await holds(db, order.orderId);
    expect(h.captures).toEqual([]);
    expect(
      h.keyClosed
        ? { authorizations: h.authorizations, voids: h.voids }
        : { authorizations: h.authorizations, voids: h.voids, expected: 'voided' },
    ).toEqual(
      h.keyClosed
        ? { authorizations: [], voids: [] }
        : { authorizations: [{ status: 'authorized', amount: 1600 }], voids: ['cancel'], expected: 'voided' },
    );
    expect(await ledger(db, order.orderId)).toEqual({ charges: [], refunds: [] });
    const again = await cli(['cancel', order.orderId]);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/already CANCELLED|has ended/);
  });

  it('place --no-wait: an order the stock cannot serve is refused in the early answer (exit 1); a duplicate gets exit 3', async () => {
    const p = await createProduct(db, { stock: 1, priceCents: 700 });
    const order = makeOrder([{ sku: p.sku, qty: 2, unitPriceCents: p.priceCents }]);
    const r = await cli(['place', '--file', orderFile(order), '--no-wait', '--json']);
    expect(r.code, r.stderr).toBe(1);
    expect(JSON.parse(r.stdout)).toMatchObject({
      orderId: order.orderId,
      accepted: false,
      reason: expect.stringMatching(/InsufficientStock/),
    });
    expect((await orderOutcome(env.client.workflow.getHandle(workflowIdFor(order.orderId)))).status).toBe('FAILED');
    const again = await cli(['place', '--file', orderFile(order), '--no-wait']);
    expect(again.code).toBe(3);
    expect((await productRow(db, p.sku)).stock).toBe(1);
  });

  it('place --wait with no worker: exit 1 once the wait is over, saying the order started and where to see it', async () => {
    const p = await createProduct(db, { stock: 3, priceCents: 700 });
    const order = makeOrder([{ sku: p.sku, qty: 1, unitPriceCents: p.priceCents }]);
    const idle = `idle-${uid()}`; // a task queue no worker polls
    const t0 = Date.now();
    const r = await cli(['place', '--file', orderFile(order), '--wait', '2'], { TASK_QUEUE: idle });
    console.log(`place --wait 2 with no worker: exit ${r.code} after ${Date.now() - t0} ms (the command's own run)`);
    expect(r.code, r.stderr).toBe(1);
    expect(r.stderr).toContain(
      `order ${order.orderId}: started, but no answer within 2 s (is a worker running?); see `,
    );
    expect(r.stderr).toContain(`/workflows/order%3A${order.orderId}/`);
    const handle = env.client.workflow.getHandle(workflowIdFor(order.orderId));
    expect((await handle.describe()).status.name).toBe('RUNNING');
    await handle.terminate('test: no worker polls its task queue');
    expect((await productRow(db, p.sku)).stock).toBe(3);
  });

  it(`${MALFORMED_ORDERS.length} malformed orders through client.ts place: exit 2, the field named, 0 rows and 0 workflows`, async () => {
    const ordersBefore = Number((await db.query<{ count: string }>('SELECT count(*) FROM orders')).rows[0]!.count);
    const workflowsBefore = await settledCount(env);
    for (const { name, order, field } of MALFORMED_ORDERS) {
      const out: string[] = [];
      const err: string[] = [];
      const code = await runCli(['place', '--file', orderFile(order), '--json'], cfg, {
        out: (l) => out.push(l),
        err: (l) => err.push(l),
      });
      expect(code, name).toBe(2);
      expect(err.join('\n'), name).toMatch(field);
      expect(out, name).toEqual([]);
    }
    expect(Number((await db.query<{ count: string }>('SELECT count(*) FROM orders')).rows[0]!.count)).toBe(
      ordersBefore,
    );
    expect(await settledCount(env)).toBe(workflowsBefore);
  });
});
