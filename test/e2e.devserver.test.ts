/**
 * End to end on the real Temporal dev server: client.ts (a real process) → dev server → worker →
 * Postgres → provider process. Under `npm run test:server`, the same tests run on the real
 * Temporal server on Postgres with its standalone Web UI, against three worker processes.
 */
import type { ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { WorkflowNotFoundError } from '@temporalio/client';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import type { Pool } from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { orderSummary, workflowIdFor } from '../domain/order';
import { listUrl, readConfig, runUrl, type AppConfig } from '../lib/config';
import { orderOutcome } from '../lib/order-outcome';
import { createOrderWorkers, type OrderWorkers } from '../worker';
import { NeedsAttentionKey, OrderStatusKey, TotalCentsKey } from '../workflows/search-attributes';
import { runCli } from '../client';
import { freePort, runProcess, startWorkerProcess, stopProcess } from '../platform/processes';
import { devServerExecutable } from '../servers/temporal-dev';
import { bundleWorkflows, startE2eServer } from './support/temporal-env';
import { createProduct, ledger, makeOrder, orderRow, productRow, testAdmin, testPool, uid } from './support/helpers';
import { MALFORMED_ORDERS } from './support/malformed-orders';

const ROOT = path.resolve(__dirname, '..');
let env: TestWorkflowEnvironment;
let server: Awaited<ReturnType<typeof startE2eServer>> | undefined;
let db: Pool;
let workers: OrderWorkers | undefined;
let running: Promise<void> | undefined;
/** Under test:server: the worker processes (the dev tier runs one worker in this process). */
let workerProcesses: ChildProcess[] = [];
let cfg: AppConfig;
let childEnv: NodeJS.ProcessEnv;
const tmp = mkdtempSync(path.join(os.tmpdir(), 'order-saga-e2e-'));
const admin = testAdmin();

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

beforeAll(async () => {
  server = await startE2eServer({ uiPort: await freePort() });
  env = server.env;
  db = testPool();
  childEnv = {
    TEMPORAL_ADDRESS: env.address,
    TEMPORAL_NAMESPACE: 'default',
    TASK_QUEUE: `e2e-${uid()}`,
    TEMPORAL_UI_URL: server.uiUrl!,
    // The worker and client.ts run with the roles npm start gives them (db/roles.ts).
    DATABASE_URL: inject('roleUrls').app,
    READER_DATABASE_URL: inject('roleUrls').reader,
    PROVIDER_URL: inject('providerUrl'),
    PROVIDER_API_KEY: inject('providerApiKey'),
  };
  cfg = readConfig(childEnv);
  const workflowBundle = await bundleWorkflows();
  if (server.real) {
    console.log(`e2e on the real Temporal server at ${env.address} (Web UI ${server.uiUrl}), with 3 worker processes`);
    const bundlePath = path.join(tmp, 'bundle.js');
    writeFileSync(bundlePath, workflowBundle.code);
    const env3 = {
      ...childEnv,
      WORKFLOW_BUNDLE: bundlePath,
      WORKER_METRICS_PORT: '0',
      TEMPORAL_METRICS_ADDRESS: 'off',
      WORKER_VERSIONING: 'off', // unversioned, like the dev tier's in-process worker (a deploy: deploy.devserver.test.ts)
    };
    workerProcesses = await Promise.all([1, 2, 3].map(() => startWorkerProcess(env3)));
  } else {
    workers = await createOrderWorkers(cfg, env.nativeConnection, { workflowBundle });
    running = workers.run();
  }
});

afterAll(async () => {
  await admin.clear();
  workers?.shutdown();
  await running;
  await Promise.all(workerProcesses.map((w) => stopProcess(w)));
  await workers?.db.end();
  await workers?.reader.end();
  await db?.end();
  await server?.stop();
});

/** Runs `npx tsx client.ts …` as its own process, as a person would. */
async function cli(
  args: string[],
  extraEnv: NodeJS.ProcessEnv = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  const r = await runProcess(process.execPath, [require.resolve('tsx/cli'), path.join(ROOT, 'client.ts'), ...args], {
    ...childEnv,
    ...extraEnv,
  });
  return { code: r.code ?? -1, stdout: r.stdout, stderr: r.stderr };
}

function orderFile(order: unknown): string {
  const file = path.join(tmp, `${uid()}.json`);
  writeFileSync(file, typeof order === 'string' ? order : JSON.stringify(order));
  return file;
}

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
    expect(raw).toContain('chargePayment');
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
    expect((await ledger(db, order.orderId)).charges).toEqual([{ status: 'succeeded', amount: 500 }]);
  });

  it('lost response after commit, with the real fault switch: exactly one charge, and the saga completes', async () => {
    const p = await createProduct(db, { stock: 4, priceCents: 2100 });
    const order = makeOrder([{ sku: p.sku, qty: 1, unitPriceCents: p.priceCents }]);
    await admin.set({
      kind: 'lose-response-after-commit',
      target: 'charges',
      count: 1,
      keyPrefix: `${order.orderId}:`,
    });

    const r = await cli(['place', '--file', orderFile(order), '--json']);

    expect(r.code, r.stderr).toBe(0);
    expect((JSON.parse(r.stdout) as { status: string }).status).toBe('COMPLETED');
    expect(await ledger(db, order.orderId)).toEqual({ charges: [{ status: 'succeeded', amount: 2100 }], refunds: [] });
    expect((await admin.list()).injected['lose-response-after-commit']).toBeGreaterThanOrEqual(1);
  });

  it('client cancel before the pivot (the charge held up at the provider): CANCELLED, refunded, stock back', async () => {
    const p = await createProduct(db, { stock: 6, priceCents: 800 });
    const order = makeOrder([{ sku: p.sku, qty: 2, unitPriceCents: p.priceCents }]);
    await admin.set({ kind: 'delay', target: 'charges', delayMs: 7_000, count: 1, keyPrefix: `${order.orderId}:` });

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
    // The delayed charge went through at the provider; it was refunded, exactly once.
    expect(await ledger(db, order.orderId)).toEqual({
      charges: [{ status: 'succeeded', amount: 1600 }],
      refunds: [{ amount: 1600 }],
    });
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

  const chromium = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
  const haveChromium = existsSync(chromium);
  if (!haveChromium && process.env.CI)
    throw new Error(`CI needs Chromium at ${chromium} for the Web UI check (.ci/run installs it)`);

  it.skipIf(!haveChromium)(
    'the Web UI, as a person sees it: outcomes in the list, summary and details on a run, the resolve command when it needs attention',
    async () => {
      const { chromium: pw } = await import('playwright-core');
      const artifacts = path.join(ROOT, 'artifacts');
      mkdirSync(artifacts, { recursive: true });
      const p = await createProduct(db, { stock: 20, priceCents: 1300 });
      const line = [{ sku: p.sku, qty: 1, unitPriceCents: p.priceCents }];
      // A completed, a declined and a cancelled order, through client.ts.
      const completed = makeOrder(line);
      expect((await cli(['place', '--file', orderFile(completed)])).code).toBe(0);
      const declined = makeOrder(line, { paymentMethod: 'tok_declined' });
      const failed = await cli(['place', '--file', orderFile(declined), '--json']);
      expect(failed.code).toBe(1);
      const cancelled = makeOrder(line);
      await admin.set({
        kind: 'delay',
        target: 'charges',
        delayMs: 2_000,
        count: 1,
        keyPrefix: `${cancelled.orderId}:`,
      });
      expect((await cli(['place', '--file', orderFile(cancelled), '--no-wait'])).code).toBe(0);
      expect((await cli(['cancel', cancelled.orderId, '--reason', 'customer asked'])).code).toBe(0);
      // One that needs a person: the charge's answer is lost and the provider keeps saying processing.
      const stuck = makeOrder([{ sku: p.sku, qty: 2, unitPriceCents: p.priceCents }]);
      await admin.set({
        kind: 'lose-response-after-commit',
        target: 'charges',
        count: 1,
        keyPrefix: `${stuck.orderId}:`,
      });
      await admin.set({ kind: 'processing', target: 'inquiries', count: 100_000, keyPrefix: `${stuck.orderId}:` });
      const stuckHandle = await env.client.workflow.start('orderSaga', {
        taskQueue: cfg.taskQueue,
        workflowId: workflowIdFor(stuck.orderId),
        args: [stuck, { unknownEscalationMs: 1_000, inquiryBaseMs: 300, inquiryMaxMs: 600 }],
        staticSummary: orderSummary(stuck),
      });
      for (
        let i = 0;
        i < 120 && (await stuckHandle.describe()).typedSearchAttributes.get(NeedsAttentionKey) !== true;
        i++
      )
        await new Promise((r) => setTimeout(r, 250));
      expect((await stuckHandle.describe()).typedSearchAttributes.get(NeedsAttentionKey)).toBe(true);

      const ids = [completed, declined, cancelled, stuck].map((o) => workflowIdFor(o.orderId));
      /** The text of the page and of its frames (the Web UI renders the summary and details in frames). */
      const allText = async (page: import('playwright-core').Page): Promise<string> =>
        (
          await Promise.all(
            page.frames().map((f) =>
              f
                .locator('body')
                .innerText()
                .catch(() => ''),
            ),
          )
        ).join('\n');
      /** Waits until the page (frames included) shows every one of `parts`; returns its text. */
      const shows = async (page: import('playwright-core').Page, parts: string[]): Promise<string> => {
        let text = '';
        for (const until = Date.now() + 60_000; Date.now() < until; await new Promise((r) => setTimeout(r, 500))) {
          text = await allText(page);
          if (parts.every((p) => text.includes(p))) return text;
        }
        throw new Error(`the page does not show ${JSON.stringify(parts.filter((p) => !text.includes(p)))}`);
      };
      /** The run page's "User Metadata" tab (clicked again if the page was not ready for it). */
      const openMetadata = async (page: import('playwright-core').Page): Promise<void> => {
        await page.getByText('Event History').first().waitFor({ timeout: 60_000 });
        for (let attempt = 1; ; attempt++) {
          await page.getByText('User Metadata').first().click({ timeout: 30_000 });
          try {
            await page.getByText('Current Details').first().waitFor({ timeout: 10_000 });
            return;
          } catch (err) {
            if (attempt >= 5) throw err;
          }
        }
      };
      const browser = await pw.launch({
        executablePath: chromium,
        args: [
          '--no-sandbox',
          '--disable-gpu',
          '--disable-quic',
          '--no-first-run',
          '--disable-background-networking',
          '--disable-component-update',
          '--disable-sync',
        ],
      });
      try {
        const page = await browser.newPage({ viewport: { width: 1600, height: 1200 } });
        // The list: each order's outcome at a glance, without opening it.
        await page.goto(listUrl(cfg, `WorkflowId IN (${ids.map((id) => `'${id}'`).join(', ')})`), {
          waitUntil: 'domcontentloaded',
          timeout: 60_000,
        });
        for (const id of ids) await page.getByText(id).first().waitFor({ timeout: 60_000 });
        await page.screenshot({ path: path.join(artifacts, 'web-ui-list.png'), fullPage: true });
        const rowText = async (id: string): Promise<string> =>
          page.locator('tr, [role="row"]').filter({ hasText: id }).first().innerText();
        writeFileSync(path.join(artifacts, 'web-ui-list.txt'), await page.innerText('body'));
        expect(await rowText(ids[0]!)).toMatch(/Completed/);
        expect(await rowText(ids[1]!)).toMatch(/Failed/);
        expect(await rowText(ids[1]!)).not.toMatch(/Completed/);
        expect(await rowText(ids[2]!)).toMatch(/Failed/);
        expect(await rowText(ids[3]!)).toMatch(/Running/);

        // A run's page: the summary as a person writes it, and the saga's current details.
        await page.goto((JSON.parse(failed.stdout) as { uiUrl: string }).uiUrl, {
          waitUntil: 'domcontentloaded',
          timeout: 60_000,
        });
        await openMetadata(page);
        const run = await shows(page, [
          orderSummary(declined),
          'Steps done: createOrder → reserveInventory',
          'ran: refundPayment, releaseInventory',
        ]);
        writeFileSync(path.join(artifacts, 'web-ui-run.txt'), run);
        expect(run).toContain('13.00 USD');
        expect(run).toContain('releaseInventory'); // the compensation, in the timeline and in the details
        expect(run).toContain('compensate: release'); // the activity's summary, as a person reads it
        expect(run).toMatch(/saga deadline[^\n]*\n+\s*Canceled/); // the deadline timer ended with the saga
        await page.screenshot({ path: path.join(artifacts, 'web-ui-run.png'), fullPage: true });

        // A run that needs attention: what to check, and the exact command that settles it.
        await page.goto(runUrl(cfg, stuckHandle.workflowId, stuckHandle.firstExecutionRunId), {
          waitUntil: 'domcontentloaded',
          timeout: 60_000,
        });
        const command = `npx tsx client.ts resolve ${stuck.orderId} --action charge-succeeded`;
        await openMetadata(page);
        const attention = await shows(page, [orderSummary(stuck), 'Needs attention: charge-outcome', command]);
        writeFileSync(path.join(artifacts, 'web-ui-needs-attention.txt'), attention);
        expect(attention).toContain(`GET /v1/charges/${stuck.orderId}:charge`);
        expect(attention).toContain(`npx tsx client.ts resolve ${stuck.orderId} --action charge-failed`);
        await page.screenshot({ path: path.join(artifacts, 'web-ui-needs-attention.png'), fullPage: true });

        // The same run page where the codec server cannot be reached: the payloads stay sealed.
        const codec = server!.codec!;
        const sealed = await browser.newContext({ viewport: { width: 1600, height: 1200 } });
        let codecCalls = 0;
        await sealed.route(`${codec.url}/**`, (route) => {
          codecCalls++;
          return route.abort();
        });
        const blind = await sealed.newPage();
        await blind.goto((JSON.parse(failed.stdout) as { uiUrl: string }).uiUrl, {
          waitUntil: 'domcontentloaded',
          timeout: 60_000,
        });
        await blind.getByText('Event History').first().waitFor({ timeout: 60_000 });
        for (let i = 0; i < 60 && codecCalls === 0; i++) await new Promise((r) => setTimeout(r, 500));
        await new Promise((r) => setTimeout(r, 5_000)); // time for any decoding to show, if it could
        const blindText = await allText(blind);
        writeFileSync(path.join(artifacts, 'web-ui-no-codec.txt'), blindText);
        await blind.screenshot({ path: path.join(artifacts, 'web-ui-no-codec.png'), fullPage: true });
        expect(codecCalls).toBeGreaterThan(0); // the UI did try its codec server
        expect(blindText).not.toContain(orderSummary(declined));
        expect(blindText).not.toContain('Steps done:');
        expect(blindText).not.toContain('tok_declined');
        await sealed.close();
      } catch (err) {
        // What the page showed when a check failed, for whoever reads the CI log.
        const page = browser.contexts()[0]?.pages()[0];
        if (page) {
          writeFileSync(path.join(artifacts, 'web-ui-failure.txt'), await page.innerText('body').catch(() => ''));
          await page
            .screenshot({ path: path.join(artifacts, 'web-ui-failure.png'), fullPage: true })
            .catch(() => undefined);
        }
        throw err;
      } finally {
        await browser.close();
        await admin.clear();
      }
      // The person follows the page: the provider says the charge succeeded, so charge-succeeded settles it.
      const resolved = await cli([
        'resolve',
        stuck.orderId,
        '--action',
        'charge-succeeded',
        '--note',
        'checked the provider',
      ]);
      expect(resolved.code, resolved.stderr).toBe(0);
      expect((await orderOutcome(stuckHandle)).status).toBe('COMPLETED');
    },
  );

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
