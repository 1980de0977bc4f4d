import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';

/** Typed search attributes of the order saga: the Web UI's columns and filters, and `client.ts list`. */
export const OrderStatusKey = defineSearchAttributeKey('OrderStatus', SearchAttributeType.KEYWORD);
export const CustomerIdKey = defineSearchAttributeKey('CustomerId', SearchAttributeType.KEYWORD);
export const NeedsAttentionKey = defineSearchAttributeKey('NeedsAttention', SearchAttributeType.BOOL);
export const TotalCentsKey = defineSearchAttributeKey('TotalCents', SearchAttributeType.INT);

/** Name → type, as the Temporal CLI's `--search-attribute Name=Type` and the operator API want them. */
export const SEARCH_ATTRIBUTES: Record<string, 'Keyword' | 'Bool' | 'Int'> = {
  OrderStatus: 'Keyword',
  CustomerId: 'Keyword',
  NeedsAttention: 'Bool',
  TotalCents: 'Int',
};
