/**
 * The people in the chaos soak's loop, each through the interface a person has:
 *   - customers and support cancel with `client.ts cancel`, at chosen moments;
 *   - operators resolve every NEEDS_ATTENTION saga with `client.ts resolve`, choosing the action the
 *     provider's ledger supports (and, now and then, first the one it does not: it must be refused);
 *     a refund an operator makes by hand goes through the provider's API with the saga's own key;
 *   - someone presses the Web UI's Reset (the same ResetWorkflowExecution call) on open and closed runs;
 *   - someone starts a closed order's workflow ID again (as `temporal workflow start` would), with the
 *     same input and with other input, and places the same order file again with `client.ts place`;
 *   - someone presses what Temporal lets them press and the sweeper must see through: deletes the
 *     history of an order whose cancel was accepted, sends a cancel Signal no key can open and
 *     terminates the run, pauses a running activity (and unpauses it a while later), and pins a run
 *     to a build no worker runs.
 * Each action is counted as sent, accepted or refused; an outcome that breaks a promise is recorded
 * as a violation with its order ID.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  ServiceError,
  WorkflowFailedError,
  WorkflowNotFoundError,
  type Client,
  type WorkflowHandle,
} from '@temporalio/client';
import { WorkflowIdReusePolicy } from '@temporalio/common';
import { temporal } from '@temporalio/proto';
import { runCli } from '../../client';
import { SWEEP_SCHEDULE_ID, upsertSchedule } from '../../lib/schedules';
import { ErrorTypes } from '../../domain/failures';
import { SignalNames, WorkflowNames } from '../../domain/names';
import {
  chargeKeyFor,
  isTerminal,
  refundKeyFor,
  workflowIdFor,
  type OrderInput,
  type OrderResult,
  type OrderStatus,
} from '../../domain/order';
import type { AppConfig } from '../../lib/config';
import { createProviderClient } from '../../provider/client';
import type { SagaConfig } from '../../workflows/order-saga';
import type { SagaState } from '../../workflows/messages';
import { ORDER_SAGA, sagaStartOptions } from '../../workflows/saga-start';
import { unit, type ChaosOrder } from './orders';
import { OPERATOR_CLIENT, type ChaosStack } from './stack';

export interface Tally {
  sent: number;
  accepted: number;
  refused: number;
}

export interface PeopleViolation {
  rule: string;
  orderIds: string[];
  detail: string;
}

type CancelMoment =
  | 'before the charge'
  | 'during the charge'
  | 'after the charge'
  | 'after the pivot'
  | 'during compensation'
  | 'after the end';

const WFT_COMPLETED = temporal.api.enums.v1.EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED;

export class People {
  readonly actions = new Map<string, Tally>();
  readonly cancels = new Map<CancelMoment, Tally>();
  readonly violations: PeopleViolation[] = [];
  /** Orders whose cancel was accepted: they must end CANCELLED. */
  readonly cancelAccepted = new Set<string>();
  /** Orders that were reset or started again (their last run is not the first). */
  readonly meddled = new Set<string>();
  /** Orders a person terminated, and when (the sweeper must have healed each). */
  readonly terminated = new Map<string, number>();
  /** Orders found in NEEDS_ATTENTION by an operator. */
  readonly escalated = new Set<string>();
  private readonly handling = new Set<string>();
  private readonly wrongTried = new Set<string>();
  private readonly tmp = mkdtempSync(path.join(os.tmpdir(), 'order-saga-chaos-orders-'));
  private stopped = false;

  constructor(
    private readonly stack: ChaosStack,
    private readonly cliCfg: AppConfig,
    private readonly sagaConfig: Partial<SagaConfig>,
  ) {}

  /** The provider's API, as an operator uses it (the same keys and faults as the worker's calls). */
  private get provider() {
    return createProviderClient({
      baseUrl: this.stack.providerUrl,
      apiKey: this.stack.apiKey,
      timeoutMs: 5_000,
      clientName: OPERATOR_CLIENT,
    });
  }

  private get client(): Client {
    return this.stack.env.client;
  }

  private count(
    action: string,
    outcome: 'sent' | 'accepted' | 'refused',
    into: Map<string, Tally> = this.actions,
  ): void {
    const t = into.get(action) ?? { sent: 0, accepted: 0, refused: 0 };
    t[outcome]++;
    into.set(action, t);
  }

  /**
   * Whether to take a rarer action here: the first time it is eligible, always (so the soak's coverage
   * check cannot miss it by chance), then by the order's hash with probability `p`.
   */
  private choose(action: string, n: number, salt: number, p: number): boolean {
    // Recorded at once: operators handle several orders at a time, and only the first is forced.
    if (!this.forced.has(action)) {
      this.forced.add(action);
      return true;
    }
    return unit(n, salt) < p;
  }
  private readonly forced = new Set<string>();

  /**
   * `retry` or `mark-resolved` for an escalated order: the first such choice marks it resolved, the
   * second retries (so the coverage check cannot miss either when escalations are few), then by hash.
   */
  private retryOrMark(n: number, salt: number, pMark: number): 'retry' | 'mark-resolved' {
    if (!this.forced.has('resolve mark-resolved')) return (this.forced.add('resolve mark-resolved'), 'mark-resolved');
    if (!this.forced.has('resolve retry')) return (this.forced.add('resolve retry'), 'retry');
    return unit(n, salt) < pMark ? 'mark-resolved' : 'retry';
  }

  private violation(rule: string, orderId: string, detail: string): void {
    this.violations.push({ rule, orderIds: [orderId], detail });
  }

  /** One `client.ts` command, in this process, with the soak's Temporal client. */
  private async cli(args: string[]): Promise<{ code: number; out: string; err: string }> {
    const out: string[] = [];
    const err: string[] = [];
    const code = await runCli(
      args,
      this.cliCfg,
      { out: (l) => out.push(l), err: (l) => err.push(l) },
      { client: this.client },
    );
    return { code, out: out.join('\n'), err: err.join('\n') };
  }

  private async state(orderId: string): Promise<SagaState | undefined> {
    const r = await this.cli(['status', orderId, '--json']);
    return r.code === 0 ? (JSON.parse(r.out) as SagaState) : undefined;
  }

  private async running(workflowId: string): Promise<boolean> {
    try {
      return (await this.client.workflow.getHandle(workflowId).describe()).status.name === 'RUNNING';
    } catch (err) {
      if (err instanceof WorkflowNotFoundError) return false;
      throw err;
    }
  }

  /**
   * The run's result, or undefined once `ms` have passed. A wait that gives up cancels its long poll:
   * a poll left behind would be retried by the client after the soak closed its connection.
   */
  private async resultWithin(handle: WorkflowHandle, ms: number): Promise<unknown> {
    const giveUp = new AbortController();
    const timer = setTimeout(() => giveUp.abort(), Math.max(1, ms));
    try {
      return await this.client.withAbortSignal(giveUp.signal, () => handle.result());
    } catch (err) {
      if (giveUp.signal.aborted) return undefined;
      throw err;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Waits until the order's latest run has closed (a run a Reset replaced is followed to the new one). */
  private async closed(workflowId: string, limitMs: number): Promise<boolean> {
    const until = Date.now() + limitMs;
    while (Date.now() < until) {
      const handle = this.client.workflow.getHandle(workflowId);
      try {
        await this.resultWithin(handle, until - Date.now());
        if (!(await this.running(workflowId))) return true;
      } catch (err) {
        if (err instanceof WorkflowFailedError) {
          if (!(await this.running(workflowId).catch(() => true))) return true;
          continue;
        }
        // The server restarting (the soak stops it once) or unreachable for a moment: look again.
        if (!(err instanceof ServiceError)) throw err;
        await sleep(1_000);
      }
    }
    return false;
  }

  /**
   * Starts the order's saga with the soak's config. `reuse`: a person starting a closed order's ID
   * again, as `temporal workflow start` would; ALLOW_DUPLICATE says so in the request (the server's
   * default reuse policy allows it too). The new run must end ALREADY_SETTLED (or be refused) and
   * change nothing.
   */
  private start(input: OrderInput, reuse = false) {
    return this.client.workflow.start(
      ORDER_SAGA,
      sagaStartOptions(input, this.stack.taskQueue, {
        config: this.sagaConfig,
        ...(reuse ? { policies: { workflowIdReusePolicy: WorkflowIdReusePolicy.ALLOW_DUPLICATE } } : {}),
      }),
    );
  }

  /**
   * One order's life: it is placed, the person (if any) meddles, and it runs until its latest run
   * closes. Returns false if it did not close within `limitMs`.
   */
  async drive(o: ChaosOrder, limitMs: number): Promise<boolean> {
    const { input, meddle } = o;
    const id = input.orderId;
    const wid = workflowIdFor(id);
    await this.start(input);
    if (meddle.startsWith('cancel-')) await this.cancel(o);
    if (meddle === 'reset-open') {
      // Watch until the saga has done 1, 2 or 3 steps (or ended), then press Reset.
      const steps = 1 + Math.floor(o.when * 3);
      for (const until = Date.now() + 20_000; Date.now() < until; await sleep(100)) {
        const s = await this.state(id);
        if (!s || s.stepsDone.length >= steps || !(await this.running(wid))) break;
      }
      await this.reset(id, (await this.running(wid)) ? 'reset an open run' : 'reset a closed run');
    }
    if (meddle === 'terminate') return this.terminate(o, limitMs);
    if (meddle === 'delete-after-cancel') return this.deleteAfterCancel(o, limitMs);
    if (meddle === 'unreadable-signal') return this.unreadableSignal(o, limitMs);
    if (meddle === 'pause-activity') await this.pauseActivity(o);
    if (meddle === 'override-no-build') await this.overrideNoBuild(o);
    if (!(await this.closed(wid, limitMs))) return false;
    if (meddle === 'reset-closed') {
      await this.reset(id, 'reset a closed run');
      if (!(await this.closed(wid, limitMs))) return false;
    }
    if (meddle === 'start-again-same' || meddle === 'start-again-other') {
      const other = meddle === 'start-again-other';
      const again: OrderInput = other
        ? { ...input, items: input.items.map((it, i) => (i === 0 ? { ...it, qty: it.qty + 1 } : it)) }
        : input;
      await this.startAgain(again, other ? 'start again, other input' : 'start again, same input', limitMs);
    }
    if (meddle === 'place-again') await this.placeAgain(input);
    return true;
  }

  /**
   * The Web UI's Terminate, at a moment chosen by the order (after 1, 2 or 3 steps: before, during or
   * after the charge; or once it waits in NEEDS_ATTENTION). Then nobody here touches the order: the
   * sweeper must find it stranded and start its saga again, and that run must end it.
   */
  private async terminate(o: ChaosOrder, limitMs: number): Promise<boolean> {
    const id = o.input.orderId;
    const wid = workflowIdFor(id);
    // After the order row (1 step) or the reservation (2: the charge is next, or under way).
    const steps = 1 + Math.floor(o.when * 2);
    for (const until = Date.now() + 20_000; Date.now() < until; await sleep(50)) {
      const s = await this.state(id);
      if (s && (s.stepsDone.length >= steps || s.status === 'NEEDS_ATTENTION')) break;
      if (!(await this.running(wid))) break;
    }
    this.count('terminate', 'sent');
    this.meddled.add(id);
    const terminated = await this.client.workflow
      .getHandle(wid)
      .terminate('chaos: a person pressed Terminate')
      .then(
        () => true,
        () => false, // it had ended
      );
    this.count('terminate', terminated ? 'accepted' : 'refused');
    return this.healedBySweeper(id, terminated, limitMs);
  }

  /**
   * Waits for the order's row to be settled by the run the sweeper starts, and that run to close;
   * `stopped`: a person stopped its run (the sweeper must have healed it: its heal is timed).
   */
  private async healedBySweeper(id: string, stopped: boolean, limitMs: number): Promise<boolean> {
    const wid = workflowIdFor(id);
    const at = Date.now();
    for (const until = at + limitMs; Date.now() < until; await sleep(500)) {
      let settled: boolean;
      try {
        const { rows } = await this.stack.reader.query<{ status: OrderStatus }>({
          text: 'SELECT status FROM orders WHERE order_id = $1',
          values: [id],
        });
        const status = rows[0]?.status;
        // Terminated before it wrote the row: nothing to heal (unless a late write appears, then it is).
        const none = status === undefined && Date.now() - at > 10_000;
        settled = (none || (status !== undefined && isTerminal(status))) && !(await this.running(wid));
      } catch {
        continue; // Postgres or the Temporal server is being restarted by the soak: look again
      }
      if (settled) {
        if (stopped) this.terminated.set(id, at);
        return true;
      }
    }
    return false;
  }

  /** Watches the order until its charge step runs (at most 20 s); its state then. */
  private async untilCharging(id: string): Promise<SagaState | undefined> {
    let s: SagaState | undefined;
    for (const until = Date.now() + 20_000; Date.now() < until; await sleep(100)) {
      s = await this.state(id);
      if (!s || s.step === 'chargePayment' || s.stepsDone.includes('chargePayment')) break;
    }
    return s;
  }

  /**
   * `client.ts cancel` in the charge, then `temporal workflow delete` of the run (what retention or a
   * lost server file also do): the cancel was recorded in Postgres, so the run the sweeper starts from
   * the row must honour it (the audit holds every accepted cancel to CANCELLED).
   */
  private async deleteAfterCancel(o: ChaosOrder, limitMs: number): Promise<boolean> {
    const id = o.input.orderId;
    await this.untilCharging(id);
    const action = 'delete the history after an accepted cancel';
    this.count(action, 'sent');
    const r = await this.cli(['cancel', id, '--reason', 'chaos: cancelled, then the history was deleted']);
    if (r.code !== 0) {
      this.count(action, 'refused'); // too late (past the pivot): nothing to delete for
      return this.closed(workflowIdFor(id), limitMs);
    }
    this.cancelAccepted.add(id);
    this.meddled.add(id);
    const deleted = await this.client.workflowService
      .deleteWorkflowExecution({
        namespace: this.client.options.namespace,
        workflowExecution: { workflowId: workflowIdFor(id) },
      })
      .then(
        () => true,
        () => false,
      );
    this.count(action, deleted ? 'accepted' : 'refused');
    return this.healedBySweeper(id, deleted, limitMs);
  }

  /**
   * A cancel Signal whose payload no key opens (as `temporal workflow signal --input-meta
   * encoding=binary/encrypted` sends it), then Terminate: the sweeper must restart the order from its
   * row without reading that payload, and go on with the others.
   */
  private async unreadableSignal(o: ChaosOrder, limitMs: number): Promise<boolean> {
    const id = o.input.orderId;
    await this.untilCharging(id);
    const action = 'an unreadable cancel Signal, then Terminate';
    this.count(action, 'sent');
    this.meddled.add(id);
    const execution = { workflowId: workflowIdFor(id) };
    const sent = await this.client.workflowService
      .signalWorkflowExecution({
        namespace: this.client.options.namespace,
        workflowExecution: execution,
        signalName: SignalNames.cancel,
        identity: 'chaos: a person with the Temporal CLI',
        requestId: randomUUID(),
        input: {
          payloads: [
            {
              metadata: {
                encoding: Buffer.from('binary/encrypted'),
                'encryption-key-id': Buffer.from('a-key-nobody-has'),
              },
              data: Buffer.from('not a sealed payload'),
            },
          ],
        },
      })
      .then(
        () => true,
        () => false,
      );
    const terminated =
      sent &&
      (await this.client.workflow
        .getHandle(workflowIdFor(id))
        .terminate('chaos: a person pressed Terminate after an unreadable Signal')
        .then(
          () => true,
          () => false,
        ));
    this.count(action, terminated ? 'accepted' : 'refused');
    return this.healedBySweeper(id, terminated, limitMs);
  }

  /**
   * `temporal activity pause` of the run's first pending activity, unpaused 3 to 33 s later (an
   * operator who paused it and came back). The sweeper must not unpause it; the order then ends.
   */
  private async pauseActivity(o: ChaosOrder): Promise<void> {
    const id = o.input.orderId;
    const action = 'pause an activity, unpause it later';
    const execution = { workflowId: workflowIdFor(id) };
    let activityId: string | undefined;
    for (const until = Date.now() + 20_000; !activityId && Date.now() < until; await sleep(50)) {
      const d = await this.client.workflow
        .getHandle(execution.workflowId)
        .describe()
        .catch(() => undefined);
      if (!d || d.status.name !== 'RUNNING') return;
      activityId = d.raw.pendingActivities?.[0]?.activityId ?? undefined;
    }
    if (!activityId) return;
    this.count(action, 'sent');
    const request = {
      namespace: this.client.options.namespace,
      execution,
      identity: 'chaos: an operator',
      id: activityId,
    };
    const paused = await this.client.workflowService
      .pauseActivity({ ...request, reason: 'chaos: looking into it' })
      .then(
        () => true,
        () => false, // it completed meanwhile
      );
    this.count(action, paused ? 'accepted' : 'refused');
    if (!paused) return;
    this.meddled.add(id);
    // Some come back before the sweeper's bound (15 s), some after: those it must have told a person of.
    await sleep(3_000 + o.when * 30_000);
    await this.client.workflowService.unpauseActivity(request).catch(() => undefined);
  }

  /**
   * The Web UI's versioning override: the run pinned to a build no worker runs, during its charge or
   * at its last step (then the row may be COMPLETED while the run waits for its last workflow task).
   * Nothing moves it but the sweeper, which must see the run stalled and heal it (remove the
   * override, or start it again).
   */
  private async overrideNoBuild(o: ChaosOrder): Promise<void> {
    const id = o.input.orderId;
    if (o.when < 0.5) await this.untilCharging(id);
    else
      for (const until = Date.now() + 20_000; Date.now() < until; await sleep(20)) {
        const s = await this.state(id);
        if (!s || isTerminal(s.status) || s.step === 'sendConfirmation') break;
      }
    const action = 'pin the run to a build with no workers';
    this.count(action, 'sent');
    this.meddled.add(id);
    const ok = await this.client.workflowService
      .updateWorkflowExecutionOptions({
        namespace: this.client.options.namespace,
        workflowExecution: { workflowId: workflowIdFor(id) },
        workflowExecutionOptions: {
          versioningOverride: {
            pinned: {
              behavior:
                temporal.api.workflow.v1.VersioningOverride.PinnedOverrideBehavior.PINNED_OVERRIDE_BEHAVIOR_PINNED,
              version: { deploymentName: this.stack.version.deploymentName, buildId: 'chaos-no-such-build' },
            },
          },
        },
        updateMask: { paths: ['versioning_override'] },
      })
      .then(
        () => true,
        () => false,
      );
    this.count(action, ok ? 'accepted' : 'refused');
  }

  private async cancel(o: ChaosOrder): Promise<void> {
    const id = o.input.orderId;
    const moment = (s: SagaState | undefined): CancelMoment => {
      if (!s || isTerminal(s.status)) return 'after the end';
      if (s.step.startsWith('compensate')) return 'during compensation';
      if (s.pivotPassed || s.step === 'createShipment' || s.step === 'sendConfirmation') return 'after the pivot';
      if (s.stepsDone.includes('chargePayment')) return 'after the charge';
      if (s.step === 'chargePayment') return 'during the charge';
      return 'before the charge';
    };
    const want: Record<string, (m: CancelMoment) => boolean> = {
      'cancel-in-charge': (m) => m !== 'before the charge',
      'cancel-after-charge': (m) => m !== 'before the charge' && m !== 'during the charge',
      'cancel-after-pivot': (m) => m === 'after the pivot' || m === 'after the end' || m === 'during compensation',
    };
    let seen: SagaState | undefined;
    // After the pivot the saga ships and confirms in one workflow task: to see it there, a slow
    // database holds the shipment's row (an open transaction inserting it) until the saga is seen there.
    const hold = o.meddle === 'cancel-after-pivot' ? await this.holdShipment(id) : undefined;
    try {
      if (o.meddle === 'cancel-early') {
        await sleep(o.when * 600);
        seen = await this.state(id);
      } else {
        // Watch the saga (as a person refreshing the Web UI) until the moment comes, for at most 20 s.
        for (const until = Date.now() + (hold ? 40_000 : 20_000); Date.now() < until; await sleep(150)) {
          seen = await this.state(id);
          if (want[o.meddle]!(moment(seen))) break;
        }
      }
    } finally {
      if (hold) await hold.release();
    }
    const at = moment(seen);
    this.count('cancel', 'sent');
    this.count(at, 'sent', this.cancels);
    const r = await this.cli(['cancel', id, '--reason', `chaos: the customer cancelled (${at})`]);
    if (r.code === 0) {
      this.count('cancel', 'accepted');
      this.count(at, 'accepted', this.cancels);
      this.cancelAccepted.add(id);
    } else {
      this.count('cancel', 'refused');
      this.count(at, 'refused', this.cancels);
      if (!/refused/.test(r.err))
        this.violation('a cancel gets an answer', id, `cancel failed without a refusal: ${r.err}`);
    }
  }

  /**
   * Once the order row exists, an open transaction inserts its shipment row (and waits): the saga's
   * shipment, which inserts the same key, waits for it. Released (rolled back) by the caller; at most
   * 45 s. Undefined when the order ended or its row never came.
   */
  private async holdShipment(orderId: string): Promise<{ release(): Promise<void> } | undefined> {
    for (const until = Date.now() + 10_000; Date.now() < until; await sleep(50)) {
      const s = await this.state(orderId);
      if (s && isTerminal(s.status)) return undefined;
      if (s?.stepsDone.includes('createOrder')) break;
    }
    const c = await this.stack.db.connect().catch(() => undefined);
    if (!c) return undefined;
    // A Postgres restart ends this session while it is held: the hold simply ends with it.
    const ignore = (): void => undefined;
    c.on('error', ignore);
    try {
      await c.query('BEGIN');
      await c.query({
        text: "INSERT INTO shipments (order_id, tracking_number) VALUES ($1, 'CHAOS-HOLD')",
        values: [orderId],
      });
    } catch {
      await c.query('ROLLBACK').catch(() => undefined);
      c.off('error', ignore);
      c.release(true);
      return undefined; // shipped already, or the database is restarting: nothing held
    }
    let released = false;
    const release = async (): Promise<void> => {
      if (released) return;
      released = true;
      clearTimeout(timer);
      await c.query('ROLLBACK').catch(() => undefined);
      c.off('error', ignore);
      c.release(true); // a fresh connection next time: this one may have died with a restart
    };
    const timer = setTimeout(() => void release(), 45_000);
    return { release };
  }

  /** The Web UI's Reset: to a random completed workflow task of the latest run. */
  private async reset(orderId: string, action: string): Promise<void> {
    const wid = workflowIdFor(orderId);
    const handle = this.client.workflow.getHandle(wid);
    const { runId } = await handle.describe();
    const history = await this.client.workflow.getHandle(wid, runId).fetchHistory();
    const points = (history.events ?? []).filter((e) => e.eventType === WFT_COMPLETED).map((e) => Number(e.eventId));
    this.count(action, 'sent');
    this.meddled.add(orderId);
    if (points.length === 0) return this.count(action, 'refused');
    const eventId = points[Math.floor(Math.random() * points.length)]!;
    try {
      await this.client.workflowService.resetWorkflowExecution({
        namespace: this.client.options.namespace,
        workflowExecution: { workflowId: wid, runId },
        workflowTaskFinishEventId: eventId as never, // an int64: protobufjs takes a number
        requestId: randomUUID(),
        reason: `chaos: ${action} to event ${eventId}`,
      });
      this.count(action, 'accepted');
    } catch {
      this.count(action, 'refused');
    }
  }

  /** A second start of a closed order: it must end ALREADY_SETTLED (or be refused) and change nothing. */
  private async startAgain(input: OrderInput, action: string, limitMs: number): Promise<void> {
    this.count(action, 'sent');
    this.meddled.add(input.orderId);
    const handle = await this.start(input, true);
    let outcome: string;
    try {
      const r = (await this.resultWithin(handle, limitMs)) as OrderResult | undefined;
      outcome = r?.status ?? 'still running';
    } catch (err) {
      const types: string[] = [];
      for (let e: unknown = err; e instanceof Error; e = (e as { cause?: unknown }).cause)
        types.push((e as { type?: string }).type ?? e.name);
      outcome =
        types.includes(ErrorTypes.OrderMismatch) || types.includes(ErrorTypes.InvalidOrder)
          ? 'refused'
          : `failed (${types.join(' ← ')})`;
    }
    if (outcome === 'ALREADY_SETTLED' || outcome === 'refused') return this.count(action, 'refused');
    this.count(action, 'accepted');
    this.violation(
      'a closed order started again changes nothing',
      input.orderId,
      `${action}: the new run ended ${outcome}, not ALREADY_SETTLED`,
    );
  }

  /** `client.ts place` of the same order file again: exit code 3, nothing started. */
  private async placeAgain(input: OrderInput): Promise<void> {
    const file = path.join(this.tmp, `${input.orderId}.json`);
    writeFileSync(file, JSON.stringify(input));
    this.count('place again (client.ts)', 'sent');
    const r = await this.cli(['place', '--file', file, '--json']);
    if (r.code === 3) return this.count('place again (client.ts)', 'refused');
    this.count('place again (client.ts)', 'accepted');
    this.violation(
      'a duplicate order ID gets exit code 3',
      input.orderId,
      `client.ts place exited ${r.code}: ${r.out || r.err}`,
    );
  }

  /**
   * An operator pauses the `sweep` Schedule (`temporal schedule toggle --pause`) for `ms`, and the
   * soak's own sweeps stop as long: `client.ts check` must name the paused Schedule meanwhile (exit 1),
   * and the orders stranded meanwhile must still be healed once it runs again.
   */
  async pauseSweepSchedule(pauseSweeps: (ms: number) => void, ms: number): Promise<void> {
    const action = 'pause the sweep Schedule (check must name it)';
    this.count(action, 'sent');
    // The Schedule as npm start creates it, on the soak's queue (every hour: the soak's loop sweeps).
    await upsertSchedule(this.client, {
      scheduleId: SWEEP_SCHEDULE_ID,
      workflowType: WorkflowNames.sweeper,
      taskQueue: this.stack.taskQueue,
      every: '1h',
    });
    const handle = this.client.schedule.getHandle(SWEEP_SCHEDULE_ID);
    await handle.pause('chaos: an operator paused the sweeper');
    pauseSweeps(ms);
    try {
      const r = await this.cli(['check']);
      const named = r.code === 1 && /PROBLEM schedule sweep: paused/.test(r.out + r.err);
      this.count(action, named ? 'accepted' : 'refused');
      if (!named)
        this.violation(
          'client.ts check names a paused sweep Schedule',
          SWEEP_SCHEDULE_ID,
          `check exited ${r.code}: ${
            `${r.out}\n${r.err}`
              .split('\n')
              .filter((l) => /schedule|PROBLEM|error|needs/i.test(l))
              .slice(0, 5)
              .join(' | ') || `${r.out}${r.err}`.slice(0, 300)
          }`,
        );
      await sleep(ms);
    } finally {
      await handle.unpause('chaos: the operator unpaused the sweeper').catch(() => undefined);
      await handle.delete().catch(() => undefined);
    }
  }

  // ---- Operators ---------------------------------------------------------------------------------

  /** Resolves NEEDS_ATTENTION sagas until stop(); each order is handled by one operator at a time. */
  async operate(): Promise<void> {
    while (!this.stopped) {
      try {
        const query = `WorkflowType = '${WorkflowNames.orderSaga}' AND ExecutionStatus = 'Running' AND NeedsAttention = true`;
        for await (const wf of this.client.workflow.list({ query })) {
          const orderId = wf.workflowId.replace(/^order:/, '');
          if (this.handling.has(orderId)) continue;
          this.handling.add(orderId);
          // A failure (Postgres restarting, say) only means this operator looks again next round.
          void this.handle(orderId)
            .catch(() => undefined)
            .finally(() => this.handling.delete(orderId));
        }
      } catch {
        // visibility unreachable for a moment: look again
      }
      await sleep(1_000);
    }
    while (this.handling.size > 0) await sleep(100);
  }

  stop(): void {
    this.stopped = true;
  }

  close(): void {
    rmSync(this.tmp, { recursive: true, force: true });
  }

  /**
   * What the provider says of the order's charge, asked as a person would (its API, by the charge's
   * key). Asking also lets the provider finish a charge a crash left `processing`. Undefined when it
   * does not answer (a fault, the outage): the operator looks again later.
   */
  private async ledger(
    orderId: string,
  ): Promise<{ status: string; amountCents: number; refundedCents: number } | undefined> {
    try {
      const charge = await this.provider.getCharge(chargeKeyFor(orderId));
      if (!charge || charge.status === 'closed')
        return { status: charge?.status ?? 'not_found', amountCents: 0, refundedCents: 0 };
      return { status: charge.status, amountCents: charge.amountCents, refundedCents: charge.refundedCents };
    } catch {
      return undefined;
    }
  }

  private async resolve(orderId: string, action: string, note: string, label = ''): Promise<boolean> {
    const name = `resolve ${action}${label}`;
    this.count(name, 'sent');
    const r = await this.cli(['resolve', orderId, '--action', action, '--note', note]);
    this.count(name, r.code === 0 ? 'accepted' : 'refused');
    if (r.code !== 0) await sleep(3_000); // read the refusal, wait a little, look again
    return r.code === 0;
  }

  private async handle(orderId: string): Promise<void> {
    let s: SagaState | undefined;
    try {
      s = await this.state(orderId);
    } catch {
      return;
    }
    if (!s?.awaiting) return;
    this.escalated.add(orderId);
    const ledger = await this.ledger(orderId);
    if (!ledger) return;
    const paid = ledger.status === 'succeeded' && ledger.refundedCents === 0;
    const says = `provider: ${ledger.status}${ledger.refundedCents ? `, refunded ${ledger.refundedCents}` : ''}`;
    const n = Number(orderId.replace(/\D/g, '').slice(-6)) || 0;
    if (s.awaiting === 'charge-outcome') {
      if (ledger.status === 'processing') return; // not decided yet: look again later
      const supported = paid ? 'charge-succeeded' : 'charge-failed';
      if (
        !this.wrongTried.has(orderId) &&
        this.choose(`resolve ${paid ? 'charge-failed' : 'charge-succeeded'}, unchecked (must be refused)`, n, 21, 0.3)
      ) {
        // A second operator who did not look at the ledger: the saga must refuse the wrong answer.
        this.wrongTried.add(orderId);
        const wrong = paid ? 'charge-failed' : 'charge-succeeded';
        if (await this.resolve(orderId, wrong, `chaos: unchecked (${says})`, ', unchecked (must be refused)')) {
          this.violation(
            'a resolve the provider contradicts is refused',
            orderId,
            `resolve ${wrong} was accepted; ${says}`,
          );
        }
        return;
      }
      await this.resolve(orderId, supported, `chaos: checked (${says})`);
      return;
    }
    if (s.awaiting === 'compensation') {
      if (s.step === 'compensate:refundPayment') {
        if (ledger.status === 'processing') return;
        if (paid && this.retryOrMark(n, 22, 0.5) === 'mark-resolved') {
          // Refund by hand, with the saga's own key (so it can never be a second refund), then mark it resolved.
          if (await this.refundByHand(orderId, ledger.amountCents))
            await this.resolve(orderId, 'mark-resolved', `chaos: refunded by hand (${says})`);
          return;
        }
        if (!paid && this.retryOrMark(n, 23, 0.7) === 'mark-resolved') {
          await this.resolve(orderId, 'mark-resolved', `chaos: nothing to refund (${says})`);
          return;
        }
      }
      await this.resolve(orderId, 'retry', `chaos: transient (${says})`);
      return;
    }
    // forward-step: after the pivot; retry, or record that it was done by hand.
    await this.resolve(orderId, this.retryOrMark(n, 24, 0.5), `chaos: ${s.step} (${says})`);
  }

  private async refundByHand(orderId: string, amountCents: number): Promise<boolean> {
    const provider = this.provider;
    this.count('refund by hand (provider API)', 'sent');
    for (let attempt = 1; attempt <= 10; attempt++) {
      try {
        await provider.refund(refundKeyFor(orderId), { chargeKey: chargeKeyFor(orderId), amountCents });
        this.count('refund by hand (provider API)', 'accepted');
        return true;
      } catch {
        await sleep(500 * attempt); // a fault or the outage: the same key again is safe
      }
    }
    this.count('refund by hand (provider API)', 'refused');
    return false;
  }
}
