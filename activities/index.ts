import type { Pool } from 'pg';
import type { AuthorizationClient, ProviderClient } from '../provider/client';
import { authorizationActivities } from './authorizations';
import { inventoryActivities, type CasOptions, type ReserveLogic } from './inventory';
import type { InventoryMetrics } from './inventory-metrics';
import { notificationActivities } from './notifications';
import { orderRequestActivities } from './order-requests';
import { orderActivities } from './orders';
import { paymentActivities } from './payments';
import { reconciliationActivities } from './reconciliation';
import { shippingActivities } from './shipping';
import { sweeperActivities, type SweeperStats, type SweeperTemporal } from './sweeper';

export interface ActivityDeps {
  db: Pool;
  /** Read-only (the reader role): reconciliation reads the provider's ledger through it. Defaults to db. */
  reader?: Pool;
  provider: ProviderClient & AuthorizationClient;
  cas?: Partial<CasOptions>;
  reserveLogic?: ReserveLogic;
  metrics?: InventoryMetrics;
  /** The sweeper's way to Temporal (start and reset runs); without it, sweepOrders refuses to run. */
  temporal?: SweeperTemporal;
  sweeperStats?: SweeperStats;
}

/** Every activity of the order saga, built from its dependencies (worker.ts builds those). */
export function createActivities(deps: ActivityDeps) {
  return {
    ...orderActivities(deps),
    ...inventoryActivities(deps),
    ...paymentActivities(deps),
    ...authorizationActivities(deps),
    ...orderRequestActivities(deps),
    ...shippingActivities(deps),
    ...notificationActivities(deps),
    ...reconciliationActivities({
      db: deps.db,
      ...(deps.reader ? { reader: deps.reader } : {}),
      ...(deps.temporal ? { temporal: deps.temporal } : {}),
    }),
    ...sweeperActivities({
      db: deps.db,
      ...(deps.temporal ? { temporal: deps.temporal } : {}),
      ...(deps.sweeperStats ? { stats: deps.sweeperStats } : {}),
    }),
  };
}

export type OrderActivities = ReturnType<typeof createActivities>;
