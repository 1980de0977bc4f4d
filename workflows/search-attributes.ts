import { defineSearchAttributeKey, SearchAttributeType, type SearchAttributePair } from '@temporalio/common';
import { orderTotalCents, type OrderInput, type OrderStatus } from '../domain/order';

/** Typed search attributes of the order saga: the Web UI's columns and filters, and `client.ts list`. */
export const OrderStatusKey = defineSearchAttributeKey('OrderStatus', SearchAttributeType.KEYWORD);
export const CustomerIdKey = defineSearchAttributeKey('CustomerId', SearchAttributeType.KEYWORD);
export const NeedsAttentionKey = defineSearchAttributeKey('NeedsAttention', SearchAttributeType.BOOL);
export const TotalCentsKey = defineSearchAttributeKey('TotalCents', SearchAttributeType.INT);

/** A new order's search attributes: set by the saga as its first act, and by `place` in the start request. */
export function newOrderSearchAttributes(order: OrderInput, status: OrderStatus = 'PENDING'): SearchAttributePair[] {
  return [
    { key: OrderStatusKey, value: status },
    { key: CustomerIdKey, value: order.customerId },
    { key: TotalCentsKey, value: orderTotalCents(order) },
    { key: NeedsAttentionKey, value: status === 'NEEDS_ATTENTION' },
  ];
}

/** Name → type, as the Temporal CLI's `--search-attribute Name=Type` and the operator API want them. */
export const SEARCH_ATTRIBUTES: Record<string, 'Keyword' | 'Bool' | 'Int'> = {
  OrderStatus: 'Keyword',
  CustomerId: 'Keyword',
  NeedsAttention: 'Bool',
  TotalCents: 'Int',
};
