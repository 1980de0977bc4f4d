-- The order row holds every promise made about it: Temporal's history may be deleted, purged by
-- retention or lost with a server's file, so a cancel or a resolve is recorded here before anyone is
-- told it was accepted, and any run of the order reads it from here.

-- 1. Every cancel and resolve, keyed by order and request ID (a request sent again is the same one).
--    `source`: client.ts recorded it before its Signal ('client'), or a run recorded a Signal that came
--    without a record, from the Web UI or the Temporal CLI ('signal'). `outcome`: 'pending' while a run
--    has still to check a resolve against the ledger.
CREATE TABLE order_requests (
  order_id   text NOT NULL REFERENCES orders (order_id) ON DELETE CASCADE,
  request_id text NOT NULL CHECK (length(request_id) BETWEEN 1 AND 200),
  kind       text NOT NULL CHECK (kind IN ('cancel', 'resolve')),
  source     text NOT NULL CHECK (source IN ('client', 'signal')),
  reason     text,
  action     text,
  note       text,
  reference  text,
  outcome    text NOT NULL CHECK (outcome IN ('pending', 'accepted', 'refused')),
  message    text,
  at         timestamptz NOT NULL DEFAULT now(),
  decided_at timestamptz,
  PRIMARY KEY (order_id, request_id),
  CHECK (kind = 'cancel' OR action IS NOT NULL),
  CHECK (action IS DISTINCT FROM 'settled-elsewhere' OR length(reference) > 0)
);

-- 2. The accepted cancel, on the order itself: decided against the pivot in the same row the shipment
--    writes, so a cancel and a shipment can never both win.
ALTER TABLE orders ADD COLUMN cancel_request_id text, ADD COLUMN cancel_reason text;

-- 3. Whoever writes it, an order with a recorded cancel never moves to SHIPPED.
CREATE OR REPLACE FUNCTION orders_guard_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.status IS DISTINCT FROM OLD.status AND NOT EXISTS (
       SELECT 1 FROM order_transitions WHERE from_status = OLD.status AND to_status = NEW.status) THEN
    RAISE EXCEPTION 'order %: % -> % is not a legal transition', OLD.order_id, OLD.status, NEW.status
      USING ERRCODE = 'check_violation';
  END IF;
  IF OLD.status = 'NEEDS_ATTENTION' AND NEW.status <> 'NEEDS_ATTENTION' AND NEW.status IS DISTINCT FROM OLD.attention_from
     AND NOT (NEW.status = 'COMPENSATING' AND OLD.attention_from IN ('PENDING', 'RESERVED', 'UNKNOWN_PAYMENT', 'COMPENSATING')) THEN
    RAISE EXCEPTION 'order %: NEEDS_ATTENTION (from %) -> % is not a legal transition', OLD.order_id, OLD.attention_from, NEW.status
      USING ERRCODE = 'check_violation';
  END IF;
  IF NEW.status = 'SHIPPED' AND OLD.status <> 'SHIPPED' AND NEW.cancel_request_id IS NOT NULL THEN
    RAISE EXCEPTION 'order %: a cancel is recorded (%); it may not ship', OLD.order_id, NEW.cancel_request_id
      USING ERRCODE = 'check_violation';
  END IF;
  IF NEW.status = 'NEEDS_ATTENTION' AND OLD.status <> 'NEEDS_ATTENTION' THEN
    NEW.attention_from := OLD.status;
  END IF;
  RETURN NEW;
END $$;
