/**
 * The `state` of a saga whose run has closed, without asking its workers: a closed run pinned to a
 * build that has been drained and removed has nobody left to answer a query. The order's status and
 * reason come from its row when the caller can read it; else from the run's description (its
 * OrderStatus search attribute, set at the end) and its result. Which steps ran, which finished and
 * which compensations ran come from its history: the row does not know them. Same shape as the `state` query, so `client.ts status` prints the same.
 */
import type { Client, WorkflowExecutionDescription } from '@temporalio/client';
import { defaultPayloadConverter, type LoadedDataConverter } from '@temporalio/common';
import { temporal } from '@temporalio/proto';
import { ORDER_STATUSES, type OrderStatus } from '../domain/order';
import type { SagaState } from '../workflows/messages';
import { OrderStatusKey } from '../workflows/search-attributes';
import { orderOutcome } from './order-outcome';

type Event = temporal.api.history.v1.IHistoryEvent;
type Payloads = temporal.api.common.v1.IPayloads | null | undefined;

/**
 * The steps of both eras, in the order the saga runs them: a charge-era order is charged (no
 * capture), an authorization-era one authorized, then captured after the shipment.
 */
const STEPS = [
  'createOrder',
  'reserveInventory',
  'chargePayment',
  'authorizePayment',
  'createShipment',
  'capturePayment',
  'sendConfirmation',
] as const;
/** The steps only one era has. */
const CHARGE_ERA_ONLY: readonly string[] = ['chargePayment'];
const AUTHORIZATION_ERA_ONLY: readonly string[] = ['authorizePayment', 'capturePayment'];
/** Each activity's step (the serial lane reserves, an inquiry belongs to the charge). */
const STEP_OF: Record<string, (typeof STEPS)[number]> = {
  createOrder: 'createOrder',
  reserveInventory: 'reserveInventory',
  reserveInventorySerial: 'reserveInventory',
  chargePayment: 'chargePayment',
  inquireCharge: 'chargePayment',
  authorizePayment: 'authorizePayment',
  inquireAuthorization: 'authorizePayment',
  capturePayment: 'capturePayment',
  reauthorizePayment: 'capturePayment',
  inquireCapture: 'capturePayment',
  createShipment: 'createShipment',
  sendConfirmation: 'sendConfirmation',
};
/** The compensations, bottom of the stack first (both are registered once the order row exists). */
const COMPENSATIONS = ['releaseInventory', 'refundPayment', 'voidAuthorization'];

function first(payloads: Payloads): unknown {
  const p = payloads?.payloads?.[0];
  if (!p) return undefined;
  try {
    return defaultPayloadConverter.fromPayload(p);
  } catch {
    return undefined;
  }
}

/** Each activity attempt in the history, regular or local, in the order it was recorded. */
function activityEvents(
  events: Event[],
): { type: string; kind: 'scheduled' | 'completed'; input?: unknown; result?: unknown }[] {
  const out: { type: string; kind: 'scheduled' | 'completed'; input?: unknown; result?: unknown }[] = [];
  const scheduled = new Map<string, string>();
  for (const e of events) {
    const s = e.activityTaskScheduledEventAttributes;
    if (s) {
      const type = s.activityType?.name ?? '';
      scheduled.set(String(e.eventId), type);
      out.push({ type, kind: 'scheduled', input: first(s.input) });
      continue;
    }
    const c = e.activityTaskCompletedEventAttributes;
    if (c) {
      out.push({ type: scheduled.get(String(c.scheduledEventId)) ?? '', kind: 'completed', result: first(c.result) });
      continue;
    }
    const m = e.markerRecordedEventAttributes;
    if (m?.markerName === 'core_local_activity') {
      const data = first(m.details?.data) as { activity_type?: string } | undefined;
      const type = data?.activity_type ?? '';
      out.push({ type, kind: 'scheduled' }); // a local attempt is a try of its step, like a scheduled one
      if (!m.failure) out.push({ type, kind: 'completed', result: first(m.details?.result) });
    }
  }
  return out;
}

/** The money requests and the name of their count in the run's `attempts`. */
const MONEY_REQUESTS: Record<string, string> = {
  chargePayment: 'charge',
  authorizePayment: 'authorize',
  capturePayment: 'capture',
  reauthorizePayment: 'reauthorize',
};
/** The requests after which the run counts its inquiries afresh (the fresh hold's are not counted). */
const INQUIRED_REQUESTS = ['chargePayment', 'authorizePayment'];

/** Whether an authorization inquiry is about the fresh hold after an expiry (`<id>:reauthorize`), part of the capture. */
const aboutFreshHold = (input: unknown): boolean => {
  const key = (input as { authorizationKey?: unknown } | undefined)?.authorizationKey;
  return typeof key === 'string' && key.endsWith(':reauthorize');
};

/** The saga's state at the close of its run, from the history and the outcome alone. */

export function stateFromHistory(
  orderId: string,
  events: Event[],
  closed: { status?: OrderStatus; reason?: string; settledElsewhere?: boolean; hasResult: boolean },
): SagaState {
  const entered: string[] = [];
  const done = new Set<string>();
  const attempts: Record<string, number> = {};
  const compensationsRun: string[] = [];
  let step = 'start';
  let inquiriesSinceCharge = 0;
  const inquiryInputs: unknown[] = [];
  for (const a of activityEvents(events)) {
    if (a.type === 'inquireAuthorization' && a.kind === 'scheduled') inquiryInputs.push(a.input);
    const freshHold = a.type === 'inquireAuthorization' && aboutFreshHold(inquiryInputs.at(-1));
    const label = freshHold ? 'capturePayment' : STEP_OF[a.type];
    if (a.kind === 'scheduled') {
      if (label) {
        if (!entered.includes(label)) {
          entered.push(label);
          attempts[label] = 1;
        }
        step = label;
      } else if (COMPENSATIONS.includes(a.type)) step = `compensate:${a.type}`;
      // The money requests, as the run counts them (`attempts.charge`, `.authorize`, `.capture`).
      const request = MONEY_REQUESTS[a.type];
      if (request) attempts[request] = (attempts[request] ?? 0) + 1;
      if (INQUIRED_REQUESTS.includes(a.type)) inquiriesSinceCharge = 0;
      if (a.type === 'inquireCharge' || (a.type === 'inquireAuthorization' && !freshHold)) inquiriesSinceCharge++;
      if (a.type === 'reserveInventorySerial') attempts.reserveLane = (attempts.reserveLane ?? 0) + 1;
      // The charge step is also done when an inquiry (or an operator) found it taken: the row moves to CHARGED.
      if (a.type === 'setOrderStatus' && (a.input as { status?: string } | undefined)?.status === 'CHARGED')
        done.add('chargePayment');
      if (a.type === 'setOrderStatus' && (a.input as { status?: string } | undefined)?.status === 'AUTHORIZED')
        done.add('authorizePayment');
      if (a.type === 'setOrderStatus' && (a.input as { status?: string } | undefined)?.status === 'CAPTURED')
        done.add('capturePayment');
      continue;
    }
    const result = a.result as { outcome?: string; attempts?: number } | undefined;
    if (a.type === 'reserveInventory') {
      if (typeof result?.attempts === 'number') attempts.reserveCas = result.attempts;
      if (result?.outcome !== 'route-to-lane') done.add('reserveInventory');
    } else if (a.type === 'inquireCharge' || (a.type === 'inquireAuthorization' && !freshHold))
      attempts.inquiry = inquiriesSinceCharge;
    else if (
      label &&
      !['inquireCharge', 'inquireAuthorization', 'inquireCapture', 'reauthorizePayment'].includes(a.type)
    )
      done.add(label);
    else if (COMPENSATIONS.includes(a.type) && !compensationsRun.includes(a.type)) compensationsRun.push(a.type);
  }
  // The run's era: as createOrder answered it (the order row's), else (an older build's answer says
  // none) an authorization-era run scheduled a hold, its void or its capture.
  const flow = activityEvents(events)
    .map((a) =>
      a.type === 'createOrder' ? (a.result as { paymentFlow?: string } | undefined)?.paymentFlow : undefined,
    )
    .find((f) => f !== undefined);
  const authorizationEra =
    flow !== undefined
      ? flow === 'authorization'
      : activityEvents(events).some((a) =>
          ['authorizePayment', 'inquireAuthorization', 'voidAuthorization', 'capturePayment'].includes(a.type),
        );
  const otherEra = authorizationEra ? CHARGE_ERA_ONLY : AUTHORIZATION_ERA_ONLY;
  const eraSteps = STEPS.filter((s) => !otherEra.includes(s));
  if (closed.status === 'COMPLETED') for (const s of eraSteps) done.add(s); // a step marked resolved by hand
  const stepsDone = eraSteps.filter((s) => done.has(s));
  const pivotPassed = done.has('createShipment');
  // A run that ended with a result has run or dropped its compensations; one cut short (terminated,
  // timed out) left the rest of its stack.
  const compensations =
    closed.hasResult || pivotPassed || !done.has('createOrder')
      ? []
      : COMPENSATIONS.filter(
          (c) => !compensationsRun.includes(c) && c !== (authorizationEra ? 'refundPayment' : 'voidAuthorization'),
        );
  return {
    orderId,
    status: closed.status ?? 'PENDING',
    step: closed.settledElsewhere ? 'already settled' : step,
    stepsDone,
    compensationsRun,
    unknowns: closed.status === 'UNKNOWN_PAYMENT' ? [authorizationEra ? 'authorization' : 'charge'] : [],
    attempts,
    pivotPassed,
    ...(closed.reason ? { reason: closed.reason } : {}),
    compensations,
  };
}

/**
 * The history's activity inputs and results, and local-activity markers, opened with the client's
 * payload codecs (the history holds them encrypted), in place; the rest stays as the server sent it.
 */
async function openPayloads(dc: LoadedDataConverter, events: Event[]): Promise<void> {
  const open = async (p: Payloads): Promise<void> => {
    if (!p?.payloads?.length) return;
    let list = p.payloads as Parameters<(typeof dc.payloadCodecs)[number]['decode']>[0];
    for (const codec of [...dc.payloadCodecs].reverse()) list = await codec.decode(list);
    p.payloads = list;
  };
  for (const e of events) {
    await open(e.activityTaskScheduledEventAttributes?.input);
    await open(e.activityTaskCompletedEventAttributes?.result);
    const m = e.markerRecordedEventAttributes;
    if (m?.details) for (const key of Object.keys(m.details)) await open(m.details[key]);
  }
}

const isStatus = (s: unknown): s is OrderStatus => (ORDER_STATUSES as readonly unknown[]).includes(s);

/** The `state` of the closed run `described` (of workflow order:<orderId>), from the server alone. */
export async function closedRunState(
  client: Client,
  orderId: string,
  described: WorkflowExecutionDescription,
  /** The order row's status and reason, when the caller can read the row: they come from it. */
  row?: { status: OrderStatus; reason?: string },
): Promise<SagaState> {
  const handle = client.workflow.getHandle(described.workflowId, described.runId);
  const history = await handle.fetchHistory();
  await openPayloads(client.options.loadedDataConverter, history.events ?? []);
  let outcome: Awaited<ReturnType<typeof orderOutcome>> | undefined;
  // A running saga no worker answers (cli/status.ts) has no outcome yet: waiting for one would block.
  if (described.status.name !== 'RUNNING') {
    try {
      outcome = await orderOutcome(handle); // the run has closed: this answers at once
    } catch {
      outcome = undefined; // terminated, timed out, or failed without an outcome
    }
  }
  const mirrored = described.typedSearchAttributes.get(OrderStatusKey);
  const fromOutcome = outcome?.status === 'ALREADY_SETTLED' ? outcome.orderStatus : outcome?.status;
  // The row knows the order's status and reason; without it, the run's last search attribute or outcome.
  const status = row?.status ?? (isStatus(mirrored) ? mirrored : isStatus(fromOutcome) ? fromOutcome : undefined);
  const reason = row ? row.reason : outcome?.reason;
  return stateFromHistory(orderId, history.events ?? [], {
    ...(status ? { status } : {}),
    ...(reason ? { reason } : {}),
    settledElsewhere: outcome?.status === 'ALREADY_SETTLED',
    hasResult: outcome !== undefined,
  });
}
