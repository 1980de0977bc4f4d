/**
 * Replays the saved histories of every saga path (test/fixtures/histories) against today's workflow
 * code: a change that would break a running saga fails here. Deploys are pinned (Worker Versioning,
 * docs/versioning.md), so a run finishes on the build that started it and no old history has to
 * replay on new code. When this test fails after an intended change, the change is incompatible with
 * running histories: it ships as a new build (every deploy has its own build ID), and the fixtures are
 * recorded afresh with
 * UPDATE_FIXTURES=1 npx vitest run test/saga-semantics- test/saga-authorization
 * The generation before (the charge era's, test/fixtures/histories/charge-era) is kept with its own
 * build's code (test/support/charge-era.ts) while runs of that build can be open, and replayed on it:
 * it goes once that build has drained (docs/versioning.md).
 * The fixtures hold what the server holds: payloads sealed by the payload codec, with the tests' key
 * (test/support/payload-keys.ts); the replay decodes them with it.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils';
import { Worker } from '@temporalio/worker';
import { describe, expect, it } from 'vitest';
import { workflowIdFor } from '../domain/order';
import { EncryptionCodec, ENCRYPTED_ENCODING, requirePayloadKeys } from '../platform/payload-codec';
import { happyPathCounts } from '../scripts/happy-path';
import { chargeEraWorkflows } from './support/charge-era';
import { bundleWorkflows, dataConverter } from './support/temporal-env';

const DIR = path.join(__dirname, 'fixtures', 'histories');
const CHARGE_ERA_DIR = path.join(DIR, 'charge-era');

const jsonIn = (dir: string): string[] =>
  readdirSync(dir)
    .filter((f) => f.endsWith('.json'))
    .sort();
const files = jsonIn(DIR);
const chargeEraFiles = jsonIn(CHARGE_ERA_DIR);

function loadHistories(dir = DIR, names = files) {
  return names.map((f) => {
    const history = historyFromJSON(JSON.parse(readFileSync(path.join(dir, f), 'utf8')));
    // The saga checks that it runs as order:<orderId>: replay each history under its own workflow ID.
    const sealed = history.events?.[0]?.workflowExecutionStartedEventAttributes?.input?.payloads?.[0];
    const input = sealed ? new EncryptionCodec(requirePayloadKeys()).open(sealed).data : undefined;
    const orderId = (JSON.parse(Buffer.from(input ?? []).toString('utf8')) as { orderId?: string }).orderId;
    return { workflowId: orderId ? workflowIdFor(orderId) : f.replace(/\.json$/, ''), history };
  });
}

async function replayAll(workflowsPath: string, dir = DIR, names = files) {
  const workflowBundle = await bundleWorkflows(workflowsPath);
  const results = [];
  for await (const r of Worker.runReplayHistories(
    { workflowBundle, dataConverter: dataConverter() },
    loadHistories(dir, names),
  ))
    results.push(r);
  return results;
}

describe('replay of saved saga histories', () => {
  it('every fixture holds its input sealed: no payment token, no price in the clear', () => {
    for (const f of [...files, ...chargeEraFiles.map((c) => path.join('charge-era', c))]) {
      const text = readFileSync(path.join(DIR, f), 'utf8');
      expect(text, f).not.toMatch(/tok_|unitPriceCents|paymentMethod/);
      const history = historyFromJSON(JSON.parse(text));
      const input = history.events?.[0]?.workflowExecutionStartedEventAttributes?.input?.payloads?.[0];
      expect(Buffer.from(input?.metadata?.encoding ?? []).toString(), f).toBe(ENCRYPTED_ENCODING);
    }
  });

  it('every fixture replays with no error', async () => {
    expect(files.length).toBeGreaterThanOrEqual(30);
    const results = await replayAll(path.resolve(__dirname, '../workflows/index.ts'));
    expect(results).toHaveLength(files.length);
    for (const r of results) expect(r.error, r.workflowId).toBeUndefined();
  });

  it("the charge era's fixtures replay on the charge era's build, and not on today's code", async () => {
    expect(chargeEraFiles.length).toBeGreaterThanOrEqual(30);
    const onOld = await replayAll(chargeEraWorkflows(), CHARGE_ERA_DIR, chargeEraFiles);
    expect(onOld).toHaveLength(chargeEraFiles.length);
    for (const r of onOld) expect(r.error, r.workflowId).toBeUndefined();
    // Why they are kept apart: today's saga authorizes where the charge era charged.
    const onNew = await replayAll(path.resolve(__dirname, '../workflows/index.ts'), CHARGE_ERA_DIR, chargeEraFiles);
    // Every history that went as far as the charge (a regular activity, chargePayment) breaks there;
    // the others (refused before it, or a second run that found the order settled) may replay.
    const charged = loadHistories(CHARGE_ERA_DIR, chargeEraFiles).map(({ history }) =>
      (history.events ?? []).some(
        (e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'chargePayment',
      ),
    );
    expect(charged.filter(Boolean).length).toBeGreaterThanOrEqual(20);
    onNew.forEach((r, i) => {
      if (charged[i])
        expect(String(r.error?.name), `${chargeEraFiles[i]} (${r.workflowId})`).toMatch(/DeterminismViolation/);
    });
  });

  it('the recorded happy path: one round trip, five local activities in two workflow tasks', () => {
    // docs/saga.md and docs/decisions.md give these figures; scripts/check-docs.ts compares them with the fixture.
    expect(happyPathCounts()).toEqual({
      events: 18,
      workflowTasks: 2,
      activities: ['authorizePayment'],
      markers: 5,
      closedAs: 'EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED',
    });
  });

  it('fails on a change that would break a running history (one more command at the start)', async () => {
    // test/support/workflows-b.ts: the saga with a 1 ms timer first (an incompatible change of today's code).
    const results = await replayAll(path.resolve(__dirname, 'support/workflows-b.ts'));
    expect(results).toHaveLength(files.length);
    const failed = results.filter((r) => r.error !== undefined);
    expect(failed.length).toBe(files.length);
    for (const r of failed) expect(String(r.error?.name), r.workflowId).toMatch(/DeterminismViolation/);
  });
});
