/**
 * End to end on the real Temporal dev server, the commands around an order: client.ts (a real process)
 * → dev server → worker → Postgres → provider process. What the history holds in the clear (the
 * Temporal CLI without and with the codec server), `resolve` and `list`, the reconcile Schedule and
 * `findings`. Under `npm run test:server`, the same tests run on the real Temporal server on Postgres,
 * against three worker processes.
 */
import { describe, expect, it } from 'vitest';
import { workflowIdFor } from '../domain/order';
import { runProcess } from '../platform/processes';
import { devServerExecutable } from '../servers/temporal-dev';
import { createActivities } from '../activities';
import { createProduct, makeOrder, runActivity, testProvider, uid } from './support/helpers';
import { cli, db, env, orderFile, server, useE2eEnv } from './support/e2e-env';

/** The Temporal CLI (`temporal workflow show … --output json`), as someone without the key runs it. */
async function temporalShow(workflowId: string, extra: string[] = []): Promise<string> {
  const cli = devServerExecutable();
  if (!cli || cli.type !== 'existing-path')
    throw new Error('the Temporal CLI is not in the cache: bash scripts/ensure-servers.sh cli');
  const r = await runProcess(
    cli.path,
    ['workflow', 'show', '--workflow-id', workflowId, '--address', env.address, '--output', 'json', ...extra],
    {},
  );
  if (r.code !== 0)
    throw new Error(
      `temporal workflow show ${extra.length ? 'with' : 'without'} the codec exited ${r.code}: ${r.stderr}`,
    );
  // The JSON output carries each payload's data in base64: add what each one says, as bytes read as text.
  const opened: string[] = [];
  JSON.parse(r.stdout, (k, v: unknown) => {
    if (k === 'data' && typeof v === 'string') opened.push(Buffer.from(v, 'base64').toString('latin1'));
    return v;
  });
  return `${r.stdout}\n${opened.join('\n')}`;
}

useE2eEnv();

describe('end to end on the dev server', () => {
  it('the history holds no payment token, line or price in the clear; the codec server opens it', async () => {
    const p = await createProduct(db, { stock: 20, priceCents: 4321 });
    const order = makeOrder([{ sku: p.sku, qty: 3, unitPriceCents: p.priceCents }], { paymentMethod: 'tok_visa' });
    const r = await cli(['place', '--file', orderFile(order), '--json']);
    expect(r.code, r.stderr).toBe(0);
    const raw = await temporalShow(workflowIdFor(order.orderId));
    expect(raw.length).toBeGreaterThan(1_000); // a whole history, not an error
    // Neither the token, nor the SKU of its line, nor its price, anywhere (the customer's ID and the
    // total are search attributes: readable by design, SECURITY.md).
    expect(raw).not.toContain('tok_');
    expect(raw).not.toContain(p.sku);
    // The price as a JSON value (the history's own numbers, task IDs and timestamps, may hold any digits).
    expect(raw).not.toMatch(/:\s*4321\b/);
    expect(raw).not.toContain('unitPriceCents');
    // Failure messages are sealed too, and what is readable by design is there: the activity names.
    expect(raw).toContain('authorizePayment');
    expect(raw).toContain(Buffer.from('binary/encrypted').toString('base64'));
    // The same history through the codec server (the CLI's --codec-endpoint): the order in the clear.
    const codec = server!.codec;
    if (codec) {
      const open = await temporalShow(workflowIdFor(order.orderId), [
        '--codec-endpoint',
        codec.url,
        '--codec-auth',
        `Bearer ${codec.token}`,
      ]);
      expect(open).toContain('tok_visa');
      expect(open).toContain(p.sku);
    }
  });

  it('client resolve is refused when there is nothing to resolve; list filters by status', async () => {
    const p = await createProduct(db, { stock: 3, priceCents: 450 });
    const order = makeOrder([{ sku: p.sku, qty: 1, unitPriceCents: p.priceCents }]);
    expect((await cli(['place', '--file', orderFile(order)])).code).toBe(0);

    const resolve = await cli(['resolve', order.orderId, '--action', 'retry']);
    expect(resolve.code).toBe(1);
    expect(resolve.stderr).toMatch(/resolve refused|has ended/);
    const badAction = await cli(['resolve', order.orderId, '--action', 'refund-everything']);
    expect(badAction.code).toBe(2);
    expect(badAction.stderr).toMatch(
      /--action <action>' argument 'refund-everything' is invalid\. Allowed choices are charge-succeeded/,
    );

    let listed: { orderId: string; status: string }[] = [];
    for (let i = 0; i < 40 && !listed.some((o) => o.orderId === order.orderId); i++) {
      const list = await cli(['list', '--status', 'COMPLETED', '--json']);
      expect(list.code, list.stderr).toBe(0);
      listed = JSON.parse(list.stdout) as typeof listed;
      if (!listed.some((o) => o.orderId === order.orderId)) await new Promise((r) => setTimeout(r, 250));
    }
    expect(listed.find((o) => o.orderId === order.orderId)).toMatchObject({ status: 'COMPLETED' });
    expect(listed.every((o) => o.status === 'COMPLETED')).toBe(true);
    const badStatus = await cli(['list', '--status', 'DONE']);
    expect(badStatus.code).toBe(2);
  });

  it('status of a running saga no worker answers (its build gone) reads the row and the history, with what the row awaits', async () => {
    const p = await createProduct(db, { stock: 3, priceCents: 450 });
    const order = makeOrder([{ sku: p.sku, qty: 1, unitPriceCents: p.priceCents }]);
    const acts = createActivities({ db, provider: testProvider() });
    await runActivity(acts.createOrder, order);
    await runActivity(acts.setOrderStatus, { orderId: order.orderId, status: 'COMPENSATING', reason: 'declined' });
    expect(
      await runActivity(acts.setOrderStatus, {
        orderId: order.orderId,
        status: 'NEEDS_ATTENTION',
        reason: 'the release failed for good',
        step: 'releaseInventory',
      }),
    ).toBe('NEEDS_ATTENTION');
    // Its run waits on a task queue nobody polls (as a run pinned to a drained build): no worker answers.
    await env.client.workflow.start('orderSaga', {
      taskQueue: `nobody-polls-${uid()}`,
      workflowId: workflowIdFor(order.orderId),
      args: [order],
    });
    const r = await cli(['status', order.orderId, '--json']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toMatch(/the run's state query got no answer within 5 s \(no worker of its build polls any more/);
    expect(JSON.parse(r.stdout)).toMatchObject({
      orderId: order.orderId,
      status: 'NEEDS_ATTENTION',
      reason: 'the release failed for good',
      awaiting: 'compensation',
      step: 'compensate:releaseInventory',
    });
  }, 90_000);

  it('the reconcile Schedule is created idempotently, runs the checks, records findings, and never compensates', async () => {
    const first = await cli(['schedule', 'reconcile', '--every', '1h', '--json']);
    expect(first.code, first.stderr).toBe(0);
    expect(JSON.parse(first.stdout)).toMatchObject({ scheduleId: 'reconcile', created: true });
    const second = await cli(['schedule', 'reconcile', '--every', '30m', '--json']);
    expect(JSON.parse(second.stdout)).toMatchObject({ created: false, every: '30m' });
    expect((await cli(['schedule', 'reconcile', '--every', 'soon'])).code).toBe(2);
    const described = await env.client.schedule.getHandle('reconcile').describe();
    expect(described.spec.intervals?.[0]?.every).toBe(30 * 60_000);

    // An orphan: a successful charge at the provider whose order does not exist.
    const orphan = `orphan-${uid()}`;
    await db.query({
      text: `INSERT INTO provider.charges (idempotency_key, request_hash, amount_cents, currency, payment_method, reference, status)
             VALUES ($1, 'h', 4200, 'USD', 'tok_visa', $2, 'succeeded')`,
      values: [`${orphan}:charge`, orphan],
    });
    try {
      const before = Number(
        (await db.query<{ count: string }>('SELECT count(*) FROM reconciliation_runs')).rows[0]!.count,
      );
      await env.client.schedule.getHandle('reconcile').trigger();
      for (
        let i = 0;
        i < 100 &&
        Number((await db.query<{ count: string }>('SELECT count(*) FROM reconciliation_runs')).rows[0]!.count) ===
          before;
        i++
      ) {
        await new Promise((r) => setTimeout(r, 200));
      }
      const f = await cli(['findings', '--json']);
      expect(f.code).toBe(1);
      const report = JSON.parse(f.stdout) as { findings: { rule: string; orderIds: string[] }[] };
      expect(report.findings).toContainEqual(
        expect.objectContaining({ rule: 'no successful charge whose order is missing', orderIds: [orphan] }),
      );
      // It reported; it did not refund.
      const refunds = await db.query({
        text: 'SELECT 1 FROM provider.refunds WHERE charge_key = $1',
        values: [`${orphan}:charge`],
      });
      expect(refunds.rowCount).toBe(0);
    } finally {
      await db.query({ text: 'DELETE FROM provider.charges WHERE idempotency_key = $1', values: [`${orphan}:charge`] });
      await env.client.schedule.getHandle('reconcile').delete();
    }
  });
});
