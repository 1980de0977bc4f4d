/**
 * The order saga's happy path as a DBOS workflow: one registered workflow, one `DBOS.runStep` per
 * step (the six of a new order: create, reserve, authorize, ship, capture, confirm), the system
 * database on the bench's own Postgres (a database of its own on the same server).
 *
 * What it persists, with DBOS's defaults (nothing here changes them): the workflow's status row and
 * its input when it starts, then one row per completed step in `operation_outputs` (the step's output,
 * written in its own transaction right after the step: `recordOperationResult` in the SDK's
 * system_database.js), then the status row with the result. Each is
 * a commit on Postgres, so each is flushed to Postgres's WAL before the step returns when the server's
 * `synchronous_commit` is on (the default; bench/engines.ts reads it and reports it).
 * DBOS runs in the bench process: the workflow code and its steps run there.
 */
import { DBOS } from '@dbos-inc/dbos-sdk';
import type { BenchOrder, StartDbos } from './types';

export const startDbos: StartDbos = async (opts) => {
  const { steps } = opts;
  const orderSaga = DBOS.registerWorkflow(
    async (order: BenchOrder): Promise<string> => {
      const runId = DBOS.workflowID!;
      await DBOS.runStep(() => steps.createOrder(order, runId), { name: 'createOrder' });
      await DBOS.runStep(() => steps.reserveInventory(order, runId), { name: 'reserveInventory' });
      await DBOS.runStep(() => steps.authorizePayment(order, runId), { name: 'authorizePayment' });
      const tracking = await DBOS.runStep(() => steps.createShipment(order, runId), { name: 'createShipment' });
      await DBOS.runStep(() => steps.capturePayment(order, runId), { name: 'capturePayment' });
      return DBOS.runStep(() => steps.sendConfirmation(order, runId, tracking), { name: 'sendConfirmation' });
    },
    { name: 'orderSaga' },
  );
  DBOS.setConfig({
    name: 'order-saga-bench',
    systemDatabaseUrl: opts.systemDatabaseUrl,
    logLevel: 'error',
  });
  await DBOS.launch();
  return {
    pids: {},
    async runOrder(order) {
      const handle = await DBOS.startWorkflow(orderSaga, { workflowID: `order:${order.orderId}` })(order);
      return handle.getResult();
    },
    async stop() {
      await DBOS.shutdown();
    },
  };
};
