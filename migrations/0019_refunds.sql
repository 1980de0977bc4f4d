-- Refunds after the shipment: a person gives money back on a shipped order (a return, a goodwill
-- gesture) with `client.ts refund <orderId> --amount <cents> --key <key>`. Each refund is recorded
-- here before it is sent, under its own key (the provider's Idempotency-Key, `<orderId>:refund:<key>`),
-- so the same command again is the same refund: it replays the request and never refunds twice, and
-- a refund whose answer was lost stays `pending` until it is run again. Only money taken is refunded:
-- the capture of an order of the authorization era, the charge of one of the charge era.
CREATE TABLE order_refunds (
  refund_key   text PRIMARY KEY,        -- the provider's Idempotency-Key: <orderId>:refund:<key>
  order_id     text NOT NULL REFERENCES orders (order_id),
  source_kind  text NOT NULL CHECK (source_kind IN ('capture', 'charge')),
  source_key   text NOT NULL,           -- the capture key (or the charge key) the refund is of
  amount_cents bigint NOT NULL CHECK (amount_cents > 0),
  reason       text,
  -- pending: sent (or about to be), its answer not known yet; succeeded: the provider made it;
  -- refused: the provider refused it for good (above what is left, say), nothing was refunded.
  status       text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'succeeded', 'refused')),
  message      text,                    -- a refusal's reason
  created_at   timestamptz NOT NULL DEFAULT now(),
  settled_at   timestamptz,
  CHECK ((status = 'pending') = (settled_at IS NULL))
);
CREATE INDEX order_refunds_order_idx ON order_refunds (order_id);

-- An order may now have several refund events: the compensation's (once per order, as before) and one
-- per refund after the shipment (its `refundKey` in the event's data).
DROP INDEX order_events_refunded_once;
CREATE UNIQUE INDEX order_events_refunded_once ON order_events (order_id, (COALESCE(data ->> 'refundKey', '')))
  WHERE kind = 'order.refunded';
