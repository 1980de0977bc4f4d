/**
 * End to end on the real Temporal dev server, the Web UI as a person sees it: orders placed through
 * client.ts (a real process) → dev server → worker → Postgres → provider process, then a headless
 * Chromium opening the Web UI. Under `npm run test:server`, the same test runs on the real Temporal
 * server on Postgres with its standalone Web UI, against three worker processes.
 */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { orderSummary, workflowIdFor } from '../domain/order';
import { listUrl, runUrl } from '../ops/config';
import { orderOutcome } from '../orders/order-outcome';
import { NeedsAttentionKey } from '../workflows/search-attributes';
import { createProduct, makeOrder } from './support/helpers';
import { admin, cfg, cli, db, env, orderFile, server, useE2eEnv } from './support/e2e-env';

const ROOT = path.resolve(__dirname, '..');

useE2eEnv();

describe('end to end on the dev server', () => {
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
        target: 'authorizations',
        delayMs: 2_000,
        count: 1,
        keyPrefix: `${cancelled.orderId}:`,
      });
      expect((await cli(['place', '--file', orderFile(cancelled), '--no-wait'])).code).toBe(0);
      expect((await cli(['cancel', cancelled.orderId, '--reason', 'customer asked'])).code).toBe(0);
      // One that needs a person: the authorization's answer is lost and the provider keeps saying processing.
      const stuck = makeOrder([{ sku: p.sku, qty: 2, unitPriceCents: p.priceCents }]);
      await admin.set({
        kind: 'lose-response-after-commit',
        target: 'authorizations',
        count: 1,
        keyPrefix: `${stuck.orderId}:`,
      });
      await admin.set({
        kind: 'processing',
        target: 'authorization-inquiries',
        count: 100_000,
        keyPrefix: `${stuck.orderId}:`,
      });
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
          'ran: voidAuthorization, releaseInventory',
        ]);
        writeFileSync(path.join(artifacts, 'web-ui-run.txt'), run);
        expect(run).toContain('13.00 USD');
        expect(run).toContain('releaseInventory'); // the compensation, in the timeline and in the details
        expect(run).toContain('compensate: release'); // the activity's summary, as a person reads it
        expect(run).toMatch(/reserve \d+×\S+ \(CAS\)/); // a local step: its marker, with its summary
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
        expect(attention).toContain(`GET /v1/authorizations/${stuck.orderId}:authorize`);
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
      // The person follows the page: the provider says the hold is made, so charge-succeeded settles it.
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
});
