-- The sweep works in pages (activities/sweeper.ts). One row says where it stands across sweeps:
-- - backlog_after: the open order the next page of the backlog starts after ('' = a new pass over
--   every open order, in order_id order);
-- - seen_at (Postgres's clock) and seen_server_ms (the Temporal server's clock, ms since the epoch):
--   when the last finished sweep read the orders. The next sweep looks first at what may have
--   changed since: a run closed after seen_server_ms, or an order whose age crossed the stall or
--   attention bound after seen_at.
CREATE TABLE sweep_cursor (
  id             boolean PRIMARY KEY DEFAULT true CHECK (id),
  backlog_after  text NOT NULL DEFAULT '',
  seen_at        timestamptz,
  seen_server_ms bigint,
  updated_at     timestamptz NOT NULL DEFAULT now()
);
INSERT INTO sweep_cursor DEFAULT VALUES;

-- The open orders, by ID (the backlog's pages) and by age (the bounds crossed since the last sweep),
-- without reading the settled ones. The list is domain/order.ts's TERMINAL_STATUSES.
CREATE INDEX orders_open_id_idx ON orders (order_id) WHERE status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED');
CREATE INDEX orders_open_age_idx ON orders (updated_at) WHERE status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED');
