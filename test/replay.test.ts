/**
 * Replays the saved histories of every saga path (test/fixtures/histories) against today's workflow
 * code: a change that would break a running saga fails here. There is one generation: deploys are
 * pinned (Worker Versioning, docs/versioning.md), so a run finishes on the build that started it and
 * no old history has to replay on new code. When this test fails after an intended change, the change
 * is incompatible with running histories: it ships as a new build (every deploy has its own build ID),
 * and the fixtures are recorded afresh with
 * UPDATE_FIXTURES=1 npx vitest run test/saga-semantics-
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
import { bundleWorkflows, dataConverter } from './support/temporal-env';

const DIR = path.join(__dirname, 'fixtures', 'histories');

const files = readdirSync(DIR)
  .filter((f) => f.endsWith('.json'))
  .sort();

function loadHistories() {
  return files.map((f) => {
    const history = historyFromJSON(JSON.parse(readFileSync(path.join(DIR, f), 'utf8')));
    // The saga checks that it runs as order:<orderId>: replay each history under its own workflow ID.
    const sealed = history.events?.[0]?.workflowExecutionStartedEventAttributes?.input?.payloads?.[0];
    const input = sealed ? new EncryptionCodec(requirePayloadKeys()).open(sealed).data : undefined;
    const orderId = (JSON.parse(Buffer.from(input ?? []).toString('utf8')) as { orderId?: string }).orderId;
    return { workflowId: orderId ? workflowIdFor(orderId) : f.replace(/\.json$/, ''), history };
  });
}

async function replayAll(workflowsPath: string) {
  const workflowBundle = await bundleWorkflows(workflowsPath);
  const results = [];
  for await (const r of Worker.runReplayHistories({ workflowBundle, dataConverter: dataConverter() }, loadHistories()))
    results.push(r);
  return results;
}

describe('replay of saved saga histories', () => {
  it('every fixture holds its input sealed: no payment token, no price in the clear', () => {
    for (const f of files) {
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

  it('the recorded happy path: two round trips and three local activities in three workflow tasks, 25 events', () => {
    // docs/saga.md and docs/decisions.md give these figures; scripts/check-docs.ts compares them with the fixture.
    expect(happyPathCounts()).toEqual({
      events: 25,
      workflowTasks: 3,
      activities: ['reserveInventory', 'chargePayment'],
      markers: 3,
      closedAs: 'EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED',
    });
  });

  it('fails on a change that would break a running history (one more command at the start)', async () => {
    // test/support/workflows-b.ts: the saga with a 1 ms timer first, the deploy test's build B.
    const results = await replayAll(path.resolve(__dirname, 'support/workflows-b.ts'));
    expect(results).toHaveLength(files.length);
    const failed = results.filter((r) => r.error !== undefined);
    expect(failed.length).toBe(files.length);
    for (const r of failed) expect(String(r.error?.name), r.workflowId).toMatch(/DeterminismViolation/);
  });
});
