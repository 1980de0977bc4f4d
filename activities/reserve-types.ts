import type { OrderItem } from '../domain/order';

/**
 * The reservation's input and the stock snapshot it reads: shared by the inventory activities
 * (inventory.ts, which re-exports them) and the purchase policy they call (purchase-policy.ts), in a
 * module of their own so that neither of those two imports the other.
 */
export interface ReserveRequest {
  orderId: string;
  customerId: string;
  items: Pick<OrderItem, 'sku' | 'qty'>[];
}

export interface SnapshotRow {
  sku: string;
  stock: number;
  version: string;
  max_per_customer: number | null;
}
