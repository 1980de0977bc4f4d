-- Every outcome of an order as an event (activities/order-events.ts), written in the same statement
-- as the write that makes it true: the status change (activities/order-lock.ts's transition), or the
-- refund. Each order's events are numbered (orders.event_seq), and a relay in each worker process
-- (lib/event-relay.ts) delivers them, signed, to the configured webhook endpoint: at least once, in
-- order per order, retried with backoff, then dead-lettered. The `notifications` table is no longer
-- written; it stays for runs of older builds that still finish on it.
ALTER TABLE orders ADD COLUMN event_seq integer NOT NULL DEFAULT 0;

CREATE TABLE order_events (
  order_id        text NOT NULL REFERENCES orders (order_id),
  seq             integer NOT NULL,
  kind            text NOT NULL,
  data            jsonb NOT NULL,
  created_at      timestamptz NOT NULL DEFAULT now(),
  -- Delivery: tries so far, when the next may go, what the last one met.
  attempts        integer NOT NULL DEFAULT 0,
  next_attempt_at timestamptz NOT NULL DEFAULT now(),
  last_error      text,
  delivered_at    timestamptz,
  dead_at         timestamptz,
  PRIMARY KEY (order_id, seq)
);
-- What a relay looks for: events not yet delivered nor dead-lettered, by when they may go.
CREATE INDEX order_events_due_idx ON order_events (next_attempt_at) WHERE delivered_at IS NULL AND dead_at IS NULL;
-- One refund event per order, however often the refund step is retried.
CREATE UNIQUE INDEX order_events_refunded_once ON order_events (order_id) WHERE kind = 'order.refunded';
