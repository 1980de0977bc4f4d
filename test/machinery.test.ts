/**
 * `client.ts check`'s machinery verdicts without a server (ops/machinery.ts): a Schedule's presence,
 * pause, target and last run against three of its intervals; the current build's pollers; the open
 * orders' payloads; and which payloads of an event are sealed. Every time is given, none is read.
 */
import { randomBytes } from 'node:crypto';
import { defaultPayloadConverter } from '@temporalio/common';
import { describe, expect, it } from 'vitest';
import {
  formatEvery,
  formatMachinery,
  payloadVerdicts,
  POLLED_WITHIN_MS,
  scheduleVerdict,
  sealedPayloads,
  workerVerdict,
  type ScheduleFacts,
} from '../ops/machinery';
import { EncryptionCodec, parseKeyList } from '../platform/payload-codec';

const NOW = Date.parse('2026-01-10T12:00:00Z');
const MIN = 60_000;
const expected = { workflowType: 'sweeperWorkflow', taskQueue: 'orders' };
const sweep = (over: Partial<Extract<ScheduleFacts, { found: true }>> = {}): ScheduleFacts => ({
  scheduleId: 'sweep',
  found: true,
  paused: false,
  everyMs: MIN,
  createdAtMs: NOW - 60 * MIN,
  workflowType: 'sweeperWorkflow',
  taskQueue: 'orders',
  runs: [{ workflowId: 'sweep-1', status: 'COMPLETED', closedAtMs: NOW - 30_000 }],
  ...over,
});

describe('scheduleVerdict', () => {
  it('present, running, its last run completed within three intervals: ok', () => {
    const v = scheduleVerdict(sweep(), expected, NOW);
    expect(v).toMatchObject({ name: 'schedule sweep', ok: true });
    expect(v.detail).toBe('every 1m, last run completed at 2026-01-10T11:59:30.000Z');
  });

  it('missing: names it and how to create it', () => {
    expect(scheduleVerdict({ scheduleId: 'reconcile', found: false }, expected, NOW)).toEqual({
      name: 'schedule reconcile',
      ok: false,
      detail: 'missing (npm start creates it; or: npx tsx client.ts schedule reconcile)',
    });
  });

  it('paused: says so, with its note', () => {
    const v = scheduleVerdict(sweep({ paused: true, note: 'maintenance' }), expected, NOW);
    expect(v.ok).toBe(false);
    expect(v.detail).toMatch(/^paused \("maintenance"\) \(unpause: temporal schedule toggle --unpause/);
  });

  it('the last run exactly three intervals old is within; a millisecond more is not', () => {
    const at = (ms: number) => sweep({ runs: [{ workflowId: 'sweep-1', status: 'COMPLETED', closedAtMs: NOW - ms }] });
    expect(scheduleVerdict(at(3 * MIN), expected, NOW).ok).toBe(true);
    const late = scheduleVerdict(at(3 * MIN + 1), expected, NOW);
    expect(late.ok).toBe(false);
    expect(late.detail).toContain('its last run completed at 2026-01-10T11:56:59.999Z, more than 3 intervals ago');
  });

  it('the last finished run is judged, not one still running; a failed one is named', () => {
    const runs = [
      { workflowId: 'sweep-3', status: 'RUNNING' },
      { workflowId: 'sweep-2', status: 'FAILED', closedAtMs: NOW - MIN },
      { workflowId: 'sweep-1', status: 'COMPLETED', closedAtMs: NOW - 2 * MIN },
    ];
    const v = scheduleVerdict(sweep({ runs }), expected, NOW);
    expect(v.ok).toBe(false);
    expect(v.detail).toBe('its last run sweep-2 ended FAILED at 2026-01-10T11:59:00.000Z');
    expect(scheduleVerdict(sweep({ runs: [runs[0]!, runs[2]!] }), expected, NOW).ok).toBe(true);
  });

  it('a run still going past its bound is named, with the starts skipped behind it', () => {
    const running = (startedAgo: number) =>
      sweep({
        runBoundMs: 10 * MIN,
        skippedOverlap: 12,
        runs: [
          { workflowId: 'sweep-2', status: 'RUNNING', startedAtMs: NOW - startedAgo },
          { workflowId: 'sweep-1', status: 'COMPLETED', closedAtMs: NOW - 2 * MIN },
        ],
      });
    expect(scheduleVerdict(running(10 * MIN), expected, NOW).ok).toBe(true);
    const stuck = scheduleVerdict(running(10 * MIN + 1), expected, NOW);
    expect(stuck.ok).toBe(false);
    expect(stuck.detail).toBe(
      'its run sweep-2 has been running since 2026-01-10T11:49:59.999Z, past its bound of 10m; 12 starts skipped while a run was still going (temporal workflow describe --workflow-id sweep-2)',
    );
  });

  it('a Schedule without a run bound (made by an older build): a run going for three intervals is named', () => {
    const runs = [{ workflowId: 'sweep-9', status: 'RUNNING', startedAtMs: NOW - 3 * MIN - 1 }];
    const v = scheduleVerdict(
      sweep({ runs: [...runs, { workflowId: 'sweep-8', status: 'COMPLETED', closedAtMs: NOW - MIN }] }),
      expected,
      NOW,
    );
    expect(v.ok).toBe(false);
    expect(v.detail).toContain('more than 3 intervals, with no bound (npx tsx client.ts schedule sweep sets one)');
  });

  it('no run yet: fine for three intervals after its creation, a problem after', () => {
    const young = scheduleVerdict(sweep({ runs: [], createdAtMs: NOW - 2 * MIN }), expected, NOW);
    expect(young).toMatchObject({
      ok: true,
      detail: 'every 1m, created at 2026-01-10T11:58:00.000Z; no run has completed yet',
    });
    const old = scheduleVerdict(sweep({ runs: [], createdAtMs: NOW - 4 * MIN }), expected, NOW);
    expect(old.ok).toBe(false);
    expect(old.detail).toContain('no run has completed since it was created at 2026-01-10T11:56:00.000Z');
  });

  it('another workflow or task queue than the workers poll: a problem', () => {
    const v = scheduleVerdict(sweep({ workflowType: 'otherWorkflow', taskQueue: 'elsewhere' }), expected, NOW);
    expect(v.ok).toBe(false);
    expect(v.detail).toContain('starts otherWorkflow, not sweeperWorkflow');
    expect(v.detail).toContain("starts on task queue elsewhere, which is not the workers' orders");
  });

  it('a calendar spec without two upcoming times: no window to judge, the rest still is', () => {
    const { everyMs: _, ...noInterval } = sweep({
      runs: [{ workflowId: 'sweep-1', status: 'COMPLETED', closedAtMs: NOW - 99 * MIN }],
    }) as Extract<ScheduleFacts, { found: true }>;
    expect(scheduleVerdict(noInterval, expected, NOW)).toMatchObject({ ok: true });
    expect(scheduleVerdict({ ...noInterval, paused: true }, expected, NOW).ok).toBe(false);
  });
});

describe('workerVerdict', () => {
  const current = { deploymentName: 'order-saga', buildId: '0.1.0+abc' };
  const old = { deploymentName: 'order-saga', buildId: '0.1.0+old' };
  const poller = (version: typeof current | undefined, ageMs = 1_000, identity = 'w1') => ({
    identity,
    lastAccessMs: NOW - ageMs,
    ...(version ? { version } : {}),
  });

  it('a live poller of the current build: ok, naming it', () => {
    const v = workerVerdict({ taskQueue: 'orders', current, pollers: [poller(old), poller(current)] }, NOW);
    expect(v).toEqual({
      name: 'worker',
      ok: true,
      detail: '1 poller(s) of the current build order-saga:0.1.0+abc on task queue orders (w1)',
    });
  });

  it('only another build polls: a problem naming who does', () => {
    const v = workerVerdict({ taskQueue: 'orders', current, pollers: [poller(old), poller(undefined)] }, NOW);
    expect(v.ok).toBe(false);
    expect(v.detail).toContain(
      'no worker of the current build order-saga:0.1.0+abc polled task queue orders in the last 90 s',
    );
    expect(v.detail).toContain('polling: order-saga:0.1.0+old, unversioned');
  });

  it('a poller older than the window is gone', () => {
    const pollers = [poller(current, POLLED_WITHIN_MS)];
    expect(workerVerdict({ taskQueue: 'orders', current, pollers }, NOW).ok).toBe(true);
    pollers[0]!.lastAccessMs -= 1;
    expect(workerVerdict({ taskQueue: 'orders', current, pollers }, NOW).ok).toBe(false);
  });

  it('no build current: unversioned workers are the ones that get new sagas', () => {
    expect(workerVerdict({ taskQueue: 'orders', pollers: [poller(undefined)] }, NOW)).toMatchObject({
      ok: true,
      detail: '1 unversioned poller(s) on task queue orders, no build current (w1)',
    });
    const v = workerVerdict({ taskQueue: 'orders', pollers: [poller(current)] }, NOW);
    expect(v.ok).toBe(false);
    expect(v.detail).toBe(
      'no unversioned worker polled task queue orders in the last 90 s, and no build is current (polling: order-saga:0.1.0+abc; docs/versioning.md): new sagas wait',
    );
    expect(workerVerdict({ taskQueue: 'orders', pollers: [] }, NOW).detail).not.toContain('polling:');
  });
});

describe('payloadVerdicts', () => {
  it('one summary, then each order that cannot be read, by name', () => {
    const checks = payloadVerdicts(
      [
        { orderId: 'a', runId: 'r-a' },
        { orderId: 'b', runId: 'r-b', problem: 'event 1 WorkflowExecutionStarted: payload encrypted with key ID "k0"' },
        { orderId: 'c', noRun: true },
      ],
      'PAYLOAD_KEYS: k1',
    );
    expect(checks).toEqual([
      {
        name: 'open orders',
        ok: false,
        detail:
          '1 of 3 open order(s) read with the keys at hand (PAYLOAD_KEYS: k1); 1 cannot be read; 1 without a run in Temporal (the sweeper starts one from the row)',
      },
      {
        name: 'order b',
        ok: false,
        orderId: 'b',
        detail: 'run r-b: event 1 WorkflowExecutionStarted: payload encrypted with key ID "k0"',
      },
    ]);
    expect(payloadVerdicts([], 'PAYLOAD_KEYS: k1')).toEqual([
      { name: 'open orders', ok: true, detail: '0 of 0 open order(s) read with the keys at hand (PAYLOAD_KEYS: k1)' },
    ]);
  });

  it('formatMachinery: a headline, then ok or PROBLEM per check', () => {
    const lines = formatMachinery({
      ok: false,
      checks: [
        { name: 'schedule sweep', ok: false, detail: 'missing' },
        { name: 'worker', ok: true, detail: 'fine' },
      ],
    });
    expect(lines).toEqual(['machinery: 1 problem(s)', '  PROBLEM schedule sweep: missing', '  ok worker: fine']);
  });
});

describe('sealedPayloads and formatEvery', () => {
  it('finds every sealed payload of an event, nested in a failure too, and no clear one', () => {
    const codec = new EncryptionCodec(parseKeyList(`k1:${randomBytes(32).toString('base64')}`));
    const sealed = codec.seal(defaultPayloadConverter.toPayload({ orderId: 'o-1' }));
    const clear = defaultPayloadConverter.toPayload('in the clear');
    const event = {
      eventId: 7,
      workflowExecutionSignaledEventAttributes: { input: { payloads: [sealed, clear] } },
      failure: { encodedAttributes: sealed, cause: { encodedAttributes: sealed } },
    };
    expect(sealedPayloads(event)).toEqual([sealed, sealed, sealed]);
  });

  it('formats an interval as --every takes it', () => {
    expect([MIN, 60 * MIN, 24 * 60 * MIN, 90_000].map(formatEvery)).toEqual(['1m', '1h', '1d', '90s']);
  });
});
