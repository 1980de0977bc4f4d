/**
 * What the saga-semantics test files share (test/saga-semantics-*.timeskip.test.ts): the file's
 * time-skipping server, bundle and pool (`useSagaSemantics`, with the provider's faults cleared after
 * each test), the test-only activities with injected faults, `withSaga` (which keeps each run's
 * history under a name), and `replaysItsHistories`: the file's last test, which replays every history
 * the file kept and, with UPDATE_FIXTURES=1, saves them as test/fixtures/histories/<name>.json (the
 * fixtures of test/replay.test.ts).
 */
import { orderOutcome } from '../../orders/order-outcome';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { WorkflowHandle } from '@temporalio/client';
import { ApplicationFailure, defaultPayloadConverter, type HistoryAndWorkflowId } from '@temporalio/common';
import { historyToJSON, type History } from '@temporalio/common/lib/proto-utils';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import type { Pool } from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { createActivities, type OrderActivities } from '../../activities';
import { workflowIdFor, type OrderInput, type OrderResult, type PaymentFlow } from '../../domain/order';
import type { AuthorizationClient, ProviderClient } from '../../provider/client';
import { orderSaga, stateQuery, type ResolveRequest, type SagaConfig, type SagaState } from '../../workflows';
import { request } from '../../orders/saga-requests';
import { EncryptionCodec, requirePayloadKeys } from '../../platform/payload-codec';
import { withFaults } from './activity-faults';
import { useSagaTestEnv } from './saga-test-env';
import { dataConverter } from './temporal-env';
import { chargeEraCreate, createProduct, ledger, makeOrder, testAdmin, testProvider, uid } from './helpers';

const ROOT = path.resolve(__dirname, '..', '..');
export const HOUR = 3_600_000;
// Set in beforeAll by useSagaSemantics: the file's server, workflow bundle and pool.
export let env: TestWorkflowEnvironment;
export let bundle: WorkflowBundleWithSourceMap;
export let db: Pool;
export const admin = testAdmin();
/** Histories of every path, replayed at the end (and saved as fixtures with UPDATE_FIXTURES=1). */
export const histories: { name: string; workflowId: string; history: History }[] = [];

/**
 * The era of the orders a file's sagas place: `authorization` (this build's), or `charge`: each new
 * order row is made a charge-era row as it is written, as a row the charge-based build wrote, so the
 * file holds the charge path this build keeps for such orders (docs/decisions.md).
 */
let era: PaymentFlow = 'authorization';

/** The file's time-skipping server, bundle and pool, started before its tests; the provider's faults cleared after each. */
export function useSagaSemantics(opts: { era?: PaymentFlow } = {}): void {
  era = opts.era ?? 'authorization';
  useSagaTestEnv({ server: 'timeskip' }, { started: (saga) => ({ env, bundle, db } = saga) });

  afterEach(async () => {
    await admin.clear();
  });
}

export type Name = keyof OrderActivities;
export type Fault = (call: number) => Error | undefined | Promise<Error | undefined>;

export const transient = (what: string): Error =>
  ApplicationFailure.retryable(`injected transient failure of ${what}`, 'InjectedTransient');
export const permanent = (what: string): Error =>
  ApplicationFailure.nonRetryable(`injected permanent failure of ${what}`, 'InjectedPermanent');
export const once =
  (make: () => Error): Fault =>
  (call) =>
    call === 1 ? make() : undefined;

/**
 * Test-only activity implementations: the real ones, with faults injected per activity and every call
 * recorded in order.
 */
export function faultyActivities(
  faults: Partial<Record<Name, Fault>>,
  provider: ProviderClient & AuthorizationClient = testProvider(),
) {
  const real = createActivities({ db, provider });
  if (era === 'charge') real.createOrder = chargeEraCreate(db, real.createOrder);
  const calls: Name[] = [];
  const counts = new Map<Name, number>();
  const counted: Record<string, () => Error | undefined | Promise<Error | undefined>> = {};
  for (const name of Object.keys(real) as Name[]) {
    counted[name] = () => {
      const n = (counts.get(name) ?? 0) + 1;
      counts.set(name, n);
      calls.push(name);
      return faults[name]?.(n);
    };
  }
  return { activities: withFaults(real, counted), calls, counts };
}

export interface Run {
  handle: WorkflowHandle<typeof orderSaga>;
  order: OrderInput;
  /** Waits for the saga's result. Time skips only while something awaits it (or env.sleep). */
  result: () => Promise<OrderResult>;
}

/** Starts a saga on its own task queue and workflow ID, runs `body` while the worker runs, and keeps the history. */
export async function withSaga<T>(
  name: string,
  order: OrderInput,
  activities: OrderActivities,
  body: (run: Run) => Promise<T>,
  config: Partial<SagaConfig> = {},
): Promise<T> {
  const taskQueue = `sem-${uid()}`;
  const worker = await Worker.create({
    dataConverter: dataConverter(),
    connection: env.nativeConnection,
    taskQueue,
    workflowBundle: bundle,
    activities,
  });
  return worker.runUntil(async () => {
    const handle = await env.client.workflow.start(orderSaga, {
      taskQueue,
      workflowId: workflowIdFor(order.orderId),
      args: [order, config],
    });
    const out = await body({ handle, order, result: () => orderOutcome(handle) });
    await handle.result().catch(() => undefined);
    histories.push({ name, workflowId: handle.workflowId, history: await handle.fetchHistory() });
    return out;
  });
}

export async function newOrder(
  opts: Partial<OrderInput> = {},
  qty = 2,
): Promise<{ order: OrderInput; sku: string; stock: number; total: number }> {
  const p = await createProduct(db, { stock: 10, priceCents: 1200 });
  return {
    order: makeOrder([{ sku: p.sku, qty, unitPriceCents: p.priceCents }], opts),
    sku: p.sku,
    stock: 10,
    total: qty * 1200,
  };
}

/** Skips time in steps until the saga's state satisfies `pred` (bounded). */
export async function skipUntil(
  handle: WorkflowHandle<typeof orderSaga>,
  pred: (s: SagaState) => boolean,
  step = '10m',
  max = 400,
): Promise<SagaState> {
  for (let i = 0; i < max; i++) {
    const s = await handle.query(stateQuery);
    if (pred(s)) return s;
    await env.sleep(step);
  }
  throw new Error(`state never matched; last: ${JSON.stringify(await handle.query(stateQuery))}`);
}

export async function waitUntil(
  handle: WorkflowHandle<typeof orderSaga>,
  pred: (s: SagaState) => boolean,
): Promise<SagaState> {
  for (let i = 0; i < 200; i++) {
    const s = await handle.query(stateQuery);
    if (pred(s)) return s;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`state never matched; last: ${JSON.stringify(await handle.query(stateQuery))}`);
}

/**
 * Sends `resolve` and waits for its answer. (Nothing may await the workflow's result meanwhile: time
 * would skip past the saga's timers while the answer is read.)
 */
export async function resolve(handle: WorkflowHandle<typeof orderSaga>, req: ResolveRequest): Promise<SagaState> {
  return request(handle, { command: 'resolve', ...req });
}

/** A gate an activity waits at until the test opens it. */
export function gate(): { wait: () => Promise<undefined>; open: () => void; reached: Promise<void> } {
  let open!: () => void;
  let reached!: () => void;
  const opened = new Promise<void>((r) => (open = r));
  const arrived = new Promise<void>((r) => (reached = r));
  return {
    wait: async () => {
      reached();
      await opened;
      return undefined;
    },
    open,
    reached: arrived,
  };
}

/** Every message along an error's cause chain, for matching a workflow failure's root cause. */
export const causeMessages = (e: unknown): string => {
  const out: string[] = [];
  for (let x = e as { message?: string; cause?: unknown } | undefined; x; x = x.cause as typeof x)
    out.push(String(x.message));
  return out.join(' | ');
};

export const succeeded = (l: Awaited<ReturnType<typeof ledger>>) => l.charges.filter((c) => c.status === 'succeeded');

/**
 * The file's last test: every history its tests kept replays without a nondeterminism error (at least
 * `kept` of them: as many as the file's tests keep); with UPDATE_FIXTURES=1 they are saved as fixtures.
 */
export function replaysItsHistories(kept: number): void {
  describe('replay', () => {
    it('every history above replays without a nondeterminism error', async () => {
      expect(histories.length).toBeGreaterThanOrEqual(kept);
      const results = [];
      for await (const r of Worker.runReplayHistories(
        { dataConverter: dataConverter(), workflowBundle: bundle },
        histories.map((h): HistoryAndWorkflowId => ({ workflowId: h.workflowId, history: h.history })),
      ))
        results.push(r);
      expect(results).toHaveLength(histories.length);
      for (const r of results) expect(r.error, r.workflowId).toBeUndefined();
      if (process.env.UPDATE_FIXTURES) saveAsFixtures();
    });
  });
}

/** Saves the file's histories as test/fixtures/histories/<name>.json. */
function saveAsFixtures(): void {
  const dir = path.join(ROOT, 'test', 'fixtures', 'histories');
  mkdirSync(dir, { recursive: true });
  // Stack traces name this machine's paths, and replay never reads them: saved empty, also those
  // sealed inside a failure's encoded attributes (opened, emptied, sealed again with the test key).
  const codec = new EncryptionCodec(requirePayloadKeys());
  type JsonPayload = { metadata?: Record<string, string>; data?: string };
  const b64 = (v: Uint8Array | null | undefined) => Buffer.from(v ?? []).toString('base64');
  const reseal = (p: JsonPayload): JsonPayload => {
    const opened = codec.open({
      metadata: Object.fromEntries(Object.entries(p.metadata ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64')])),
      data: Buffer.from(p.data ?? '', 'base64'),
    });
    const attrs = defaultPayloadConverter.fromPayload<Record<string, unknown>>(opened);
    const sealed = codec.seal(defaultPayloadConverter.toPayload({ ...attrs, stack_trace: '' }));
    return {
      metadata: Object.fromEntries(Object.entries(sealed.metadata ?? {}).map(([k, v]) => [k, b64(v)])),
      data: b64(sealed.data),
    };
  };
  const scrub = (json: string): string =>
    JSON.stringify(
      JSON.parse(json),
      (k, v: unknown) => (k === 'stackTrace' ? '' : k === 'encodedAttributes' ? reseal(v as JsonPayload) : v),
      2,
    );
  for (const h of histories) writeFileSync(path.join(dir, `${h.name}.json`), `${scrub(historyToJSON(h.history))}\n`);
}
