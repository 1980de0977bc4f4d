/**
 * What every person in the soak shares: the tallies of what they did, the violations they saw, and
 * their tools: `client.ts` run in this process, a saga's state as `client.ts status` shows it, a start
 * as the soak makes one, and the waits (a run running, its result within a time, its latest run
 * closed, its authorization under way). Each person (one module a family beside this one) acts through it.
 */
import { mkdtempSync, rmSync } from 'node:fs';
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
import { runCli } from '../../../client';
import { isConnectionError } from '../../../db/pool';
import { isTerminal, orderIdOf, workflowIdFor, type OrderInput, type OrderStatus } from '../../../domain/order';
import type { AppConfig } from '../../../ops/config';
import type { SagaConfig } from '../../../workflows/order-saga';
import type { SagaState } from '../../../workflows/messages';
import { ORDER_SAGA, sagaStartOptions } from '../../../orders/saga-start';
import type { ChaosStack } from '../stack';

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

export type CancelMoment =
  | 'before the hold'
  | 'during the hold'
  | 'after the hold'
  | 'after the pivot'
  | 'during compensation'
  | 'after the end';

export class PeopleBase {
  readonly actions = new Map<string, Tally>();
  readonly cancels = new Map<CancelMoment, Tally>();
  readonly violations: PeopleViolation[] = [];
  /** Orders whose cancel was accepted: they must end CANCELLED. */
  readonly cancelAccepted = new Set<string>();
  /** Orders the orders API refused (out of stock, over a limit): they must end FAILED or CANCELLED. */
  readonly apiRefused = new Set<string>();
  /** Orders that were reset or started again (their last run is not the first). */
  readonly meddled = new Set<string>();
  /** Orders a person terminated, and when (the sweeper must have healed each). */
  readonly terminated = new Map<string, number>();
  /**
   * Orders a person stopped (terminated, or deleted the history) before their run wrote the row: no row
   * and nothing to heal, and nothing may have moved for them (no stock, no money, no shipment).
   */
  readonly stoppedBeforeRow = new Set<string>();
  /** Orders found in NEEDS_ATTENTION by an operator. */
  readonly escalated = new Set<string>();
  /** Where a person writes an order file to place it again. */
  readonly tmp = mkdtempSync(path.join(os.tmpdir(), 'order-saga-chaos-orders-'));

  constructor(
    readonly stack: ChaosStack,
    private readonly cliCfg: AppConfig,
    private readonly sagaConfig: Partial<SagaConfig>,
  ) {}

  get client(): Client {
    return this.stack.env.client;
  }

  count(action: string, outcome: 'sent' | 'accepted' | 'refused', into: Map<string, Tally> = this.actions): void {
    const t = into.get(action) ?? { sent: 0, accepted: 0, refused: 0 };
    t[outcome]++;
    into.set(action, t);
  }

  violation(rule: string, orderId: string, detail: string): void {
    this.violations.push({ rule, orderIds: [orderId], detail });
  }

  /** One `client.ts` command, in this process, with the soak's Temporal client. */
  async cli(args: string[]): Promise<{ code: number; out: string; err: string }> {
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

  async state(orderId: string): Promise<SagaState | undefined> {
    const r = await this.cli(['status', orderId, '--json']);
    return r.code === 0 ? (JSON.parse(r.out) as SagaState) : undefined;
  }

  /** The order's row is terminal (or there is none: nothing will start a run for it). */
  async rowEnded(workflowId: string): Promise<boolean> {
    const { rows } = await this.stack.reader.query<{ status: string }>({
      text: 'SELECT status FROM orders WHERE order_id = $1',
      values: [orderIdOf(workflowId)],
    });
    return rows.length === 0 || isTerminal(rows[0]!.status as OrderStatus);
  }

  async running(workflowId: string): Promise<boolean> {
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
  async resultWithin(handle: WorkflowHandle, ms: number): Promise<unknown> {
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

  /**
   * Waits until the order's latest run has closed and its row has ended (a run a Reset replaced is
   * followed to the new one; a run closed while its row is open is the sweeper's to replace, as after
   * a deploy, and its new run is followed too).
   */
  async closed(workflowId: string, limitMs: number): Promise<boolean> {
    const until = Date.now() + limitMs;
    const over = async (): Promise<boolean> => !(await this.running(workflowId)) && (await this.rowEnded(workflowId));
    while (Date.now() < until) {
      const handle = this.client.workflow.getHandle(workflowId);
      try {
        await this.resultWithin(handle, until - Date.now());
        if (await over()) return true;
        await sleep(500); // the sweeper starts a new run from the open row: follow it
      } catch (err) {
        if (err instanceof WorkflowFailedError) {
          if (await over().catch(() => false)) return true;
          await sleep(500);
          continue;
        }
        // The server restarting (the soak stops it once) or unreachable for a moment, or Postgres
        // restarting under the row's read (the soak restarts it once): look again.
        if (!(err instanceof ServiceError) && !isConnectionError(err)) throw err;
        await sleep(1_000);
      }
    }
    return false;
  }

  /**
   * Watches the order until its authorization step runs (at most 20 s), or its run has closed; its state
   * then. No answer (no worker has taken the new run yet, and its row is not written) is waited out too.
   */
  async untilAuthorizing(id: string): Promise<SagaState | undefined> {
    let s: SagaState | undefined;
    for (const until = Date.now() + 20_000; Date.now() < until; await sleep(100)) {
      s = await this.state(id);
      const closed = (): Promise<boolean> =>
        this.running(workflowIdFor(id)).then(
          (r) => !r,
          () => false,
        );
      if (s ? s.step === 'authorizePayment' || s.stepsDone.includes('authorizePayment') : await closed()) break;
    }
    return s;
  }

  /**
   * Starts the order's saga with the soak's config. `reuse`: a person starting a closed order's ID
   * again, as `temporal workflow start` would; ALLOW_DUPLICATE says so in the request (the server's
   * default reuse policy allows it too). The new run must end ALREADY_SETTLED (or be refused) and
   * change nothing.
   */
  start(input: OrderInput, reuse = false) {
    return this.client.workflow.start(
      ORDER_SAGA,
      sagaStartOptions(input, this.stack.taskQueue, {
        config: this.sagaConfig,
        ...(reuse ? { policies: { workflowIdReusePolicy: WorkflowIdReusePolicy.ALLOW_DUPLICATE } } : {}),
      }),
    );
  }

  close(): void {
    rmSync(this.tmp, { recursive: true, force: true });
  }
}
