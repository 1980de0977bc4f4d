/**
 * What bench/engines.ts hands an engine module, and what the module gives back. No imports: the root
 * project reads these types without this package's dependencies installed.
 */

/** An order as the saga takes it (domain/order.ts `OrderInput`, structurally). */
export interface BenchOrder {
  orderId: string;
  customerId: string;
  currency: 'USD' | 'EUR';
  paymentMethod: string;
  items: { sku: string; qty: number; unitPriceCents: number }[];
}

/**
 * The saga's happy path, one function per durable step, each calling the project's own activity: the
 * six steps of a new order (create, reserve, authorize, ship, capture, confirm). `runId` is the
 * engine's ID of the run (the activities record it as the order's owner run).
 */
export interface OrderSteps {
  createOrder(order: BenchOrder, runId: string): Promise<void>;
  reserveInventory(order: BenchOrder, runId: string): Promise<void>;
  /** The hold on the card, before the shipment. */
  authorizePayment(order: BenchOrder, runId: string): Promise<void>;
  /** Returns the tracking number. */
  createShipment(order: BenchOrder, runId: string): Promise<string>;
  /** The capture of the hold, after the shipment. */
  capturePayment(order: BenchOrder, runId: string): Promise<void>;
  /** Returns the order row's status afterwards (COMPLETED). */
  sendConfirmation(order: BenchOrder, runId: string, trackingNumber: string): Promise<string>;
}

/** One engine, started: runs an order end to end (the client's start call to the workflow's result). */
export interface EngineHandle {
  /** Resolves with the order's final status. */
  runOrder(order: BenchOrder): Promise<string>;
  /** Process IDs of the engine's own server processes (none for an in-process engine), by name. */
  pids: Record<string, number>;
  stop(): Promise<void>;
}

/** bench/engines/dbos.ts's `startDbos`. */
export type StartDbos = (opts: { systemDatabaseUrl: string; steps: OrderSteps }) => Promise<EngineHandle>;

/** bench/engines/restate.ts's `startRestate`. */
export type StartRestate = (opts: {
  steps: OrderSteps;
  /** Free loopback ports: the node's fabric, admin, ingress. */
  ports: { fabric: number; admin: number; ingress: number };
  /** How long one order may take before the bench gives up on it. */
  orderTimeoutMs: number;
}) => Promise<EngineHandle>;
