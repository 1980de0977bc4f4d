/**
 * The sweeper's decision table (activities/sweep-classify.ts), one case at a time, without a server:
 * each test is an order's situation and the case the sweeper must pick for it; and how an activity's
 * attempt is found past its own timeouts (activities/sweep-reads.ts).
 */
import { describe, expect, it } from 'vitest';
import { temporal } from '@temporalio/proto';
import { classifyOrder, NO_ROW, type OrderFacts, type RunFacts, type SweepBounds } from '../activities/sweep-classify';
import { overdueOf, pollerLive, POLLER_GONE_MS, serverClock } from '../activities/sweep-reads';

const bounds: SweepBounds = { maxRestarts: 3, failedTaskAttempts: 3, attentionAgeMs: 3_600_000, stallAfterMs: 300_000 };
const MIN = 60_000;

const run = (r: Partial<RunFacts> = {}): RunFacts => ({ runId: 'run-1', status: 'RUNNING', activities: [], ...r });
const order = (o: Partial<OrderFacts> = {}): OrderFacts => ({
  status: 'CHARGED',
  ageMs: 10 * MIN,
  record: { restarts: 0, resets: 0, alertedWithinAttentionAge: false },
  run: run(),
  ...o,
});
const classify = (o: Partial<OrderFacts>) => classifyOrder(order(o), bounds);

describe('a closed or missing run', () => {
  it('is started again from the row', () => {
    expect(classify({ run: run({ status: 'TERMINATED' }) })).toMatchObject({
      case: 'restart',
      cause: 'closed',
      why: 'its run run-1 is terminated',
    });
    expect(classify({ run: undefined })).toMatchObject({ case: 'restart', cause: 'missing' });
  });

  it('goes to a person after maxRestarts restarts', () => {
    const c = classify({
      run: run({ status: 'FAILED' }),
      record: { restarts: 3, resets: 0, alertedWithinAttentionAge: false },
    });
    expect(c).toMatchObject({ case: 'person', cause: 'closed' });
    expect(c.why).toMatch(/restarted 3 times/);
  });
});

describe('a workflow task that keeps failing', () => {
  const failing = {
    state: 'scheduled' as const,
    attempt: 3,
    lastAttempts: 'failed' as const,
    failure: 'boom',
    resetTo: 7,
  };

  it('is reset once to its last completed workflow task, whatever the clock says', () => {
    expect(classify({ run: run({ workflowTask: failing }) })).toMatchObject({
      case: 'reset',
      cause: 'task-failing',
      toEventId: 7,
    });
  });

  it('then goes to a person; so does one with no task to reset to', () => {
    const reset = { restarts: 0, resets: 1, alertedWithinAttentionAge: false };
    expect(classify({ run: run({ workflowTask: failing }), record: reset })).toMatchObject({
      case: 'person',
      cause: 'task-failing',
    });
    const { resetTo: _, ...noPoint } = failing;
    expect(classify({ run: run({ workflowTask: noPoint }) })).toMatchObject({ case: 'person', cause: 'task-failing' });
  });

  it("on the SDK's Update-ordering bug is replaced by a new run from the row, not reset", () => {
    const bug = { ...failing, failure: 'Update machine does not handle this event: X' };
    expect(classify({ run: run({ workflowTask: bug }) })).toMatchObject({ case: 'replace', cause: 'sdk-update-bug' });
    const many = { restarts: 3, resets: 0, alertedWithinAttentionAge: false };
    expect(classify({ run: run({ workflowTask: bug }), record: many })).toMatchObject({
      case: 'person',
      cause: 'sdk-update-bug',
    });
  });

  it('below the attempts bound is left alone', () => {
    expect(classify({ run: run({ workflowTask: { ...failing, attempt: 2 } }) })).toMatchObject({ case: 'leave' });
  });
});

const stalled = (r: Partial<RunFacts>): RunFacts => run({ sinceProgressMs: 6 * MIN, ...r });
const unpicked = { state: 'scheduled' as const, attempt: 1 };

describe('a running run that stopped moving', () => {
  it('is moving while its last event is within the bound, or when it was not asked', () => {
    expect(classify({ run: run({ sinceProgressMs: 4 * MIN, workflowTask: unpicked }), pollers: [] })).toEqual({
      case: 'leave',
      why: 'it is moving',
    });
    expect(classify({ run: run({ workflowTask: unpicked }) })).toMatchObject({ case: 'leave' });
  });

  it('pinned by an override to a version nobody polls, its own polled: the override is removed', () => {
    const r = stalled({ workflowTask: unpicked, build: 'order-saga:a', override: { pinnedTo: 'order-saga:ghost' } });
    const c = classify({ run: r, pollers: ['order-saga:a'] });
    expect(c).toMatchObject({ case: 'remove-override', cause: 'override-unpolled' });
    expect(c.why).toMatch(/version order-saga:ghost, which no worker polls/);
    // An unversioned run under an override: its own are the unversioned workers.
    const u = stalled({ workflowTask: unpicked, override: { pinnedTo: 'order-saga:ghost' } });
    expect(classify({ run: u, pollers: [''] })).toMatchObject({ case: 'remove-override' });
  });

  it('pinned to a version nobody polls, its own build unpolled too: a new run from the row', () => {
    const r = stalled({ workflowTask: unpicked, build: 'order-saga:old', override: { pinnedTo: 'order-saga:ghost' } });
    expect(classify({ run: r, pollers: ['order-saga:new'] })).toMatchObject({
      case: 'replace',
      cause: 'build-unpolled',
    });
    const own = stalled({ workflowTask: unpicked, build: 'order-saga:old' });
    expect(classify({ run: own, pollers: ['order-saga:new'] })).toMatchObject({
      case: 'replace',
      cause: 'build-unpolled',
    });
    // Bounded like every restart; and with nobody polling at all, a new run would not help either.
    const many = { restarts: 3, resets: 0, alertedWithinAttentionAge: false };
    expect(classify({ run: own, pollers: ['order-saga:new'], record: many })).toMatchObject({
      case: 'person',
      cause: 'build-unpolled',
    });
    expect(classify({ run: own, pollers: [] })).toMatchObject({ case: 'person', cause: 'build-unpolled' });
  });

  it('with workflow tasks timing out again and again: reset once, then a person', () => {
    const timingOut = { state: 'scheduled' as const, attempt: 4, lastAttempts: 'timed-out' as const, resetTo: 5 };
    const r = stalled({ workflowTask: timingOut, build: 'order-saga:a' });
    expect(classify({ run: r, pollers: ['order-saga:a'] })).toMatchObject({
      case: 'reset',
      cause: 'task-timing-out',
      toEventId: 5,
    });
    const reset = { restarts: 0, resets: 1, alertedWithinAttentionAge: false };
    expect(classify({ run: r, pollers: ['order-saga:a'], record: reset })).toMatchObject({
      case: 'person',
      cause: 'task-timing-out',
    });
    // Timed out, but within the bound: workers come and go.
    expect(classify({ run: { ...r, sinceProgressMs: MIN }, pollers: ['order-saga:a'] })).toMatchObject({
      case: 'leave',
    });
  });

  it('with an activity an operator paused: a person, told who and since when; never unpaused', () => {
    const paused = {
      type: 'refundPayment',
      attempt: 4,
      lastFailure: 'gateway down',
      paused: { by: 'ops@example', at: '2026-01-01T00:00:00.000Z', reason: 'gateway' },
    };
    const c = classify({ status: 'COMPENSATING', run: stalled({ activities: [paused] }) });
    expect(c).toMatchObject({ case: 'person', cause: 'activity-paused' });
    expect(c.why).toMatch(/refundPayment is paused by ops@example since 2026-01-01T00:00:00.000Z \(gateway\)/);
    // Even while the order waits on purpose.
    expect(classify({ status: 'UNKNOWN_PAYMENT', run: stalled({ activities: [paused] }) })).toMatchObject({
      cause: 'activity-paused',
    });
  });

  it('with an activity retrying past the bound: a person, with its last failure', () => {
    const retrying = { type: 'createShipment', attempt: 9, lastFailure: 'carrier 503' };
    const c = classify({ status: 'CHARGED', run: stalled({ activities: [retrying] }) });
    expect(c).toMatchObject({ case: 'person', cause: 'activity-retrying' });
    expect(c.why).toMatch(/createShipment is retrying \(attempt 9\); last failure: carrier 503/);
  });

  it('with something pending that none of the above explains: a person, with what is pending', () => {
    const c = classify({
      run: stalled({ activities: [{ type: 'reserveInventorySerial', attempt: 1, lastFailure: '' }] }),
    });
    expect(c).toMatchObject({ case: 'person', cause: 'stalled' });
    expect(c.why).toMatch(/pending: activity reserveInventorySerial \(attempt 1\)/);
  });
});

describe('a run that waits on purpose', () => {
  const quiet = run({ sinceProgressMs: 60 * MIN });

  it('on an inquiry timer (UNKNOWN_PAYMENT), or with nothing pending, is not stalled', () => {
    const inquiring = run({
      sinceProgressMs: 60 * MIN,
      activities: [{ type: 'inquireCharge', attempt: 5, lastFailure: 'unreachable' }],
    });
    expect(classify({ status: 'UNKNOWN_PAYMENT', run: inquiring })).toMatchObject({ case: 'leave' });
    expect(classify({ status: 'CHARGED', run: quiet })).toEqual({
      case: 'leave',
      why: 'it waits on a timer or a message',
    });
  });

  it('for a person (NEEDS_ATTENTION) is left, and alerted once past the attention age', () => {
    expect(classify({ status: 'NEEDS_ATTENTION', ageMs: 30 * MIN, run: quiet })).toMatchObject({ case: 'leave' });
    expect(classify({ status: 'NEEDS_ATTENTION', ageMs: 90 * MIN, run: quiet })).toMatchObject({
      case: 'alert',
      cause: 'attention',
    });
    const alerted = { restarts: 0, resets: 0, alertedWithinAttentionAge: true };
    expect(classify({ status: 'NEEDS_ATTENTION', ageMs: 90 * MIN, run: quiet, record: alerted })).toMatchObject({
      case: 'leave',
    });
  });
});

describe('a settled order (its row terminal) whose run is still open', () => {
  const r = stalled({ workflowTask: unpicked, build: 'order-saga:a', override: { pinnedTo: 'order-saga:ghost' } });

  it('pinned by an override to a version nobody polls, its own polled: the override is removed', () => {
    expect(classify({ status: 'COMPLETED', run: r, pollers: ['order-saga:a'] })).toMatchObject({
      case: 'remove-override',
      cause: 'override-unpolled',
    });
  });

  it('that cannot go on is never replaced (a new run would find it settled): a person is told', () => {
    const c = classify({ status: 'COMPLETED', run: r, pollers: ['order-saga:new'] });
    expect(c).toMatchObject({ case: 'person', cause: 'build-unpolled' });
    expect(c.why).toMatch(/the order is COMPLETED already, only its run is left open/);
  });

  it('with its run closed (or gone) meanwhile: nothing to do, whatever the restarts', () => {
    const many = { restarts: 3, resets: 0, alertedWithinAttentionAge: false };
    expect(classify({ status: 'CANCELLED', run: run({ status: 'COMPLETED' }), record: many })).toMatchObject({
      case: 'leave',
    });
    expect(classify({ status: 'FAILED', run: undefined })).toMatchObject({ case: 'leave' });
  });
});

describe('a saga running with no order row yet (its first step never committed)', () => {
  const young = { status: NO_ROW, ageMs: 2 * MIN } as const;
  const old = { status: NO_ROW, ageMs: 10 * MIN } as const;

  it('is left alone while it moves or is young', () => {
    expect(classify({ ...young, run: run({ workflowTask: unpicked }) })).toMatchObject({ case: 'leave' });
    expect(classify({ ...old, run: run({ sinceProgressMs: MIN, workflowTask: unpicked }) })).toMatchObject({
      case: 'leave',
    });
  });

  it('pinned by an override to a version nobody polls before its first task: the override is removed', () => {
    const r = stalled({ workflowTask: unpicked, override: { pinnedTo: 'order-saga:ghost' } });
    const c = classify({ ...old, run: r, pollers: ['order-saga:a'] });
    expect(c).toMatchObject({ case: 'remove-override', cause: 'override-unpolled' });
    expect(c.why).toMatch(/which no worker polls; it has no version of its own yet/);
    // An order with its row and no version of its own is an unversioned run: not this case.
    expect(classify({ run: r, pollers: ['order-saga:a'] })).toMatchObject({ case: 'replace' });
    // Nobody polls at all: removing the override would not help.
    expect(classify({ ...old, run: r, pollers: [] })).toMatchObject({ case: 'person', cause: 'build-unpolled' });
  });

  it('its first workflow task failing for good: a person (no completed task to reset to), never a new run', () => {
    const failing = { state: 'scheduled' as const, attempt: 5, lastAttempts: 'failed' as const, failure: 'boom' };
    const c = classify({ ...young, run: run({ workflowTask: failing }) });
    expect(c).toMatchObject({ case: 'person', cause: 'task-failing' });
    expect(c.why).toMatch(/no task to reset to/);
  });

  it('what a new run from the row would heal goes to a person: there is no row to start it from', () => {
    const lost = {
      type: 'createOrder',
      attempt: 1,
      lastFailure: '',
      overdue: { ms: 8 * MIN, timeout: 'schedule-to-start' as const },
    };
    const c = classify({ ...old, run: stalled({ activities: [lost] }) });
    expect(c).toMatchObject({ case: 'person', cause: 'timeout-lost' });
    expect(c.why).toMatch(
      /it has not written its order row \(nothing reserved or charged\), so there is none to start it again from/,
    );
  });

  it('with its run closed meanwhile: nothing to do (the order never happened)', () => {
    expect(classify({ ...old, run: run({ status: 'TERMINATED' }) })).toEqual({
      case: 'leave',
      why: 'its run closed before it wrote the order row',
    });
    expect(classify({ ...old, run: undefined })).toMatchObject({ case: 'leave' });
  });
});

describe('an activity past its own timeout, which the server never fired', () => {
  const lostCharge = {
    type: 'chargePayment',
    attempt: 1,
    lastFailure: '',
    overdue: { ms: 8 * MIN, timeout: 'schedule-to-start' as const },
  };

  it('is replaced by a new run from the row (bounded like every restart); a settled order goes to a person', () => {
    const r = stalled({ activities: [lostCharge] });
    const c = classify({ status: 'RESERVED', run: r });
    expect(c).toMatchObject({ case: 'replace', cause: 'timeout-lost' });
    expect(c.why).toMatch(/chargePayment \(attempt 1\) is 8 min past its own schedule-to-start timeout/);
    const many = { restarts: 3, resets: 0, alertedWithinAttentionAge: false };
    expect(classify({ status: 'RESERVED', run: r, record: many })).toMatchObject({
      case: 'person',
      cause: 'timeout-lost',
    });
    expect(classify({ status: 'COMPLETED', run: r })).toMatchObject({ case: 'person', cause: 'timeout-lost' });
  });

  it('within the stall bound past it (the server may be late) is not acted on for that', () => {
    const late = { ...lostCharge, overdue: { ms: 2 * MIN, timeout: 'start-to-close' as const } };
    expect(classify({ status: 'RESERVED', run: stalled({ activities: [late] }) })).toMatchObject({
      case: 'person',
      cause: 'stalled',
    });
  });
});

describe('overdueOf: an attempt against its own timeouts, from the server description', () => {
  const { PendingActivityState } = temporal.api.enums.v1;
  // int64 fields: protobufjs takes a plain number where its types say Long.
  const at = (ms: number) => ({ seconds: Math.floor(ms / 1000) as never, nanos: (ms % 1000) * 1e6 });
  const secs = (s: number) => ({ seconds: s as never });
  const now = 1_000_000_000;
  const options = { scheduleToStartTimeout: secs(10), startToCloseTimeout: secs(15), heartbeatTimeout: secs(0) };

  it('scheduled: past schedule-to-start; not while a retry waits for its backoff', () => {
    const scheduled = { state: PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED, activityOptions: options };
    expect(overdueOf({ ...scheduled, scheduledTime: at(now - 70_000) }, now)).toEqual({
      ms: 60_000,
      timeout: 'schedule-to-start',
    });
    expect(overdueOf({ ...scheduled, scheduledTime: at(now - 5_000) }, now)).toBeUndefined();
    const backoff = { ...scheduled, scheduledTime: at(now - 70_000), nextAttemptScheduleTime: at(now + 1_000) };
    expect(overdueOf(backoff, now)).toBeUndefined();
  });

  it('started: past start-to-close, or past the heartbeat timeout since the last heartbeat', () => {
    const started = { state: PendingActivityState.PENDING_ACTIVITY_STATE_STARTED, lastStartedTime: at(now - 45_000) };
    expect(overdueOf({ ...started, activityOptions: options }, now)).toEqual({ ms: 30_000, timeout: 'start-to-close' });
    const beating = {
      ...started,
      activityOptions: { ...options, startToCloseTimeout: secs(600), heartbeatTimeout: secs(10) },
      lastHeartbeatTime: at(now - 8_000),
    };
    expect(overdueOf(beating, now)).toBeUndefined();
    expect(overdueOf({ ...beating, lastHeartbeatTime: at(now - 40_000) }, now)).toEqual({
      ms: 30_000,
      timeout: 'heartbeat',
    });
  });
});

describe('serverClock: the sweep judges time on the server clock alone', () => {
  it("the clock test: it reads the server's scheduling time moved on by elapsed time, whatever this host's wall clock says", () => {
    let mono = 500; // a monotonic counter, as performance.now() is
    const serverScheduledAt = 1_000_000_000;
    const wallOffBy = 3_600_000; // this host's wall clock an hour ahead of the server's
    const realNow = Date.now;
    Date.now = () => serverScheduledAt + wallOffBy + mono;
    try {
      const now = serverClock(serverScheduledAt, () => mono);
      expect(now()).toBe(serverScheduledAt);
      mono += 1_250;
      expect(now()).toBe(serverScheduledAt + 1_250);
      // A run whose last event the server stamped 2 s ago is 2 s idle, not an hour and 2 s.
      const lastEvent = serverScheduledAt + 1_250 - 2_000;
      expect(now() - lastEvent).toBe(2_000);
      expect(
        overdueOf(
          {
            state: temporal.api.enums.v1.PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED,
            activityOptions: { scheduleToStartTimeout: { seconds: 60 as never } },
            scheduledTime: { seconds: Math.floor(lastEvent / 1000) as never, nanos: (lastEvent % 1000) * 1e6 },
          },
          now(),
        ),
      ).toBeUndefined();
    } finally {
      Date.now = realNow;
    }
  });
});

describe('a poller, live or gone', () => {
  const now = 1_000_000;
  const none = new Map<string, number>();

  it('is live within POLLER_GONE_MS of its last poll, gone after it', () => {
    expect(pollerLive({ identity: 'w1', lastPollMs: now - 60_000 }, now, none)).toBe(true);
    expect(pollerLive({ identity: 'w1', lastPollMs: now - POLLER_GONE_MS }, now, none)).toBe(false);
  });

  it('is gone at once when its process recorded a stop after its last poll; a poll after the stop is a live one', () => {
    const stopped = new Map([['w1', now - 5_000]]);
    expect(pollerLive({ identity: 'w1', lastPollMs: now - 6_000 }, now, stopped)).toBe(false);
    expect(pollerLive({ identity: 'w1', lastPollMs: now - 4_000 }, now, stopped)).toBe(true); // started again
    expect(pollerLive({ identity: 'w2', lastPollMs: now - 6_000 }, now, stopped)).toBe(true); // another process
  });
});
