/**
 * The order saga on the real Java time-skipping server, with real activities, a real Postgres and the
 * real provider process.
 */
import { orderOutcome } from '../orders/order-outcome';
import type { WorkflowFailedError } from '@temporalio/client';
import { ApplicationFailure, ApplicationFailureCategory } from '@temporalio/common';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import type { Pool } from 'pg';
import { describe, expect, it } from 'vitest';
import { createActivities } from '../activities';
import { workflowIdFor, type OrderResult } from '../domain/order';
import { orderSaga } from '../workflows';
import { useSagaTestEnv } from './support/saga-test-env';
import { dataConverter } from './support/temporal-env';
import {
  createProduct,
  holds,
  ledger,
  makeOrder,
  orderRow,
  productRow,
  reservations,
  testProvider,
  uid,
} from './support/helpers';

let env: TestWorkflowEnvironment;
let bundle: WorkflowBundleWithSourceMap;
let db: Pool;

useSagaTestEnv({ server: 'timeskip' }, { started: (saga) => ({ env, bundle, db } = saga) });

async function runSaga(order: ReturnType<typeof makeOrder>): Promise<OrderResult> {
  const taskQueue = `saga-${uid()}`;
  const worker = await Worker.create({
    dataConverter: dataConverter(),
    connection: env.nativeConnection,
    taskQueue,
    workflowBundle: bundle,
    activities: createActivities({ db, provider: testProvider() }),
  });
  return worker.runUntil(async () =>
    orderOutcome(
      await env.client.workflow.start(orderSaga, {
        taskQueue,
        workflowId: workflowIdFor(order.orderId),
        args: [order],
      }),
    ),
  );
}

describe('order saga (time-skipping)', () => {
  it('happy path: reserves, authorizes, ships, captures once, confirms and completes', async () => {
    const p = await createProduct(db, { stock: 10, priceCents: 1500 });
    const order = makeOrder([{ sku: p.sku, qty: 3, unitPriceCents: p.priceCents }]);

    const result = await runSaga(order);

    expect(result).toEqual({ orderId: order.orderId, status: 'COMPLETED' });
    expect(await orderRow(db, order.orderId)).toEqual({ status: 'COMPLETED', reason: null });
    expect(await productRow(db, p.sku)).toEqual({ stock: 7, version: 1 });
    expect(await reservations(db, order.orderId)).toEqual([{ sku: p.sku, qty: 3, status: 'SOLD' }]);
    // The money is held before the shipment and taken after it, once; nothing is charged.
    expect(await holds(db, order.orderId)).toEqual({
      authorizations: [{ status: 'authorized', amount: 4500 }],
      captures: [{ status: 'succeeded', amount: 4500 }],
      voids: [],
      keyClosed: false,
    });
    expect(await ledger(db, order.orderId)).toEqual({ charges: [], refunds: [] });
    const shipped = await db.query({ text: 'SELECT 1 FROM shipments WHERE order_id = $1', values: [order.orderId] });
    const events = await db.query<{ seq: number; kind: string; tracking: string | null }>({
      text: `SELECT seq, kind, data->>'trackingNumber' AS tracking FROM order_events WHERE order_id = $1 ORDER BY seq`,
      values: [order.orderId],
    });
    expect(shipped.rowCount).toBe(1);
    // Each outcome an event, numbered in order; the completion carries the tracking number.
    expect(events.rows.map((e) => `${e.seq} ${e.kind}`)).toEqual([
      '1 order.accepted',
      '2 order.shipped',
      '3 order.completed',
    ]);
    expect(events.rows[1]!.tracking).toMatch(/\S/);
    expect(events.rows[2]!.tracking).toBe(events.rows[1]!.tracking);
  });

  it('declined card: releases the stock, holds nothing, ends FAILED with the reason', async () => {
    const p = await createProduct(db, { stock: 5, priceCents: 2000 });
    const order = makeOrder([{ sku: p.sku, qty: 2, unitPriceCents: p.priceCents }], { paymentMethod: 'tok_declined' });

    const result = await runSaga(order);

    expect(result.status).toBe('FAILED');
    expect(result.reason).toMatch(/PaymentDeclined.*card_declined/);
    // The workflow itself failed (the Web UI lists it as Failed), benign, typed with the business reason.
    const handle = env.client.workflow.getHandle(workflowIdFor(order.orderId));
    expect((await handle.describe()).status.name).toBe('FAILED');
    const failure = await handle.result().then(
      () => undefined,
      (e: WorkflowFailedError) => e.cause as ApplicationFailure,
    );
    expect(failure).toBeInstanceOf(ApplicationFailure);
    expect(failure).toMatchObject({
      type: 'PaymentDeclined',
      category: ApplicationFailureCategory.BENIGN,
      details: [result],
    });
    expect(await orderRow(db, order.orderId)).toEqual({ status: 'FAILED', reason: result.reason });
    const stock = await productRow(db, p.sku);
    expect(stock.stock).toBe(5); // back to its start
    expect(await reservations(db, order.orderId)).toEqual([{ sku: p.sku, qty: 2, status: 'RELEASED' }]);
    const h = await holds(db, order.orderId);
    expect(h.authorizations).toEqual([{ status: 'declined', amount: 4000 }]); // the decline is on record…
    expect(h.captures).toEqual([]); // …and nothing was held, so nothing is captured
    expect(await ledger(db, order.orderId)).toEqual({ charges: [], refunds: [] });
    const shipped = await db.query({ text: 'SELECT 1 FROM shipments WHERE order_id = $1', values: [order.orderId] });
    expect(shipped.rowCount).toBe(0);
  });

  it('insufficient stock: fails before any charge and leaves the stock as it was', async () => {
    const p = await createProduct(db, { stock: 1, priceCents: 700 });
    const order = makeOrder([{ sku: p.sku, qty: 2, unitPriceCents: p.priceCents }]);

    const result = await runSaga(order);

    expect(result.status).toBe('FAILED');
    expect(result.reason).toMatch(/InsufficientStock/);
    expect(await productRow(db, p.sku)).toEqual({ stock: 1, version: 0 });
    expect(await ledger(db, order.orderId)).toEqual({ charges: [], refunds: [] });
  });
});
