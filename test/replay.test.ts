/**
 * Replays the saved histories of every saga path (test/fixtures/histories) against today's workflow
 * code: a change that would break a running saga fails here. Older generations must keep replaying:
 * `v1-*` are histories of the code before the order-row lock (patch `order-row-lock`), `v2-*` of the
 * code before failed outcomes (patch `failed-outcomes`), `v3-*` of the code before the lean steps
 * (patch `lean-steps`: the charge moves the row, short steps local first, keys from the workflow),
 * and `v4-*` (the paths with an inquiry only) of the code that measured an unknown charge by the
 * workflow clock (patch `unknown-by-timers`). Regenerate the current ones after an intended,
 * patched() change (keep the old ones under a new prefix) with:
 * UPDATE_FIXTURES=1 npx vitest run test/saga-semantics.timeskip.test.ts
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils';
import { bundleWorkflowCode, Worker } from '@temporalio/worker';
import { describe, expect, it } from 'vitest';
import { workflowIdFor } from '../domain/order';

const DIR = path.join(__dirname, 'fixtures', 'histories');
const quiet = { log() {}, trace() {}, debug() {}, info() {}, warn() {}, error() {} };

describe('replay of saved saga histories', () => {
  it('every fixture replays with no error', async () => {
    const files = readdirSync(DIR)
      .filter((f) => f.endsWith('.json'))
      .sort();
    expect(files.filter((f) => f.startsWith('v1-')).length).toBeGreaterThanOrEqual(20);
    expect(files.filter((f) => f.startsWith('v2-')).length).toBeGreaterThanOrEqual(20);
    expect(files.filter((f) => f.startsWith('v3-')).length).toBeGreaterThanOrEqual(20);
    expect(files.filter((f) => f.startsWith('v4-')).length).toBeGreaterThanOrEqual(10);
    expect(files.filter((f) => !/^v\d+-/.test(f)).length).toBeGreaterThanOrEqual(20);
    const workflowBundle = await bundleWorkflowCode({
      workflowsPath: path.resolve(__dirname, '../workflows/index.ts'),
      logger: quiet,
    });
    const histories = files.map((f) => {
      const history = historyFromJSON(JSON.parse(readFileSync(path.join(DIR, f), 'utf8')));
      // The saga checks that it runs as order:<orderId>: replay each history under its own workflow ID.
      const input = history.events?.[0]?.workflowExecutionStartedEventAttributes?.input?.payloads?.[0]?.data;
      const orderId = (JSON.parse(Buffer.from(input ?? []).toString('utf8')) as { orderId?: string }).orderId;
      return { workflowId: orderId ? workflowIdFor(orderId) : f.replace(/\.json$/, ''), history };
    });
    const results = [];
    for await (const r of Worker.runReplayHistories({ workflowBundle }, histories)) results.push(r);
    expect(results).toHaveLength(files.length);
    for (const r of results) expect(r.error, r.workflowId).toBeUndefined();
  });
});
