-- The order row is the saga's lock (a semantic lock: its status and owner run, not a database lock,
-- decide which writes go through while the saga runs).
-- 1. The legal status transitions, in one table. Every status write is a guarded UPDATE against it,
--    and a trigger refuses any other change of status, whoever writes it.
CREATE TABLE order_transitions (
  from_status text NOT NULL,
  to_status   text NOT NULL,
  PRIMARY KEY (from_status, to_status)
);
INSERT INTO order_transitions (from_status, to_status) VALUES
  -- forward
  ('PENDING', 'RESERVED'),
  ('RESERVED', 'CHARGED'),
  ('RESERVED', 'UNKNOWN_PAYMENT'),
  ('UNKNOWN_PAYMENT', 'CHARGED'),
  ('CHARGED', 'SHIPPED'),
  ('SHIPPED', 'COMPLETED'),
  -- backward, only before the pivot
  ('PENDING', 'COMPENSATING'),
  ('RESERVED', 'COMPENSATING'),
  ('UNKNOWN_PAYMENT', 'COMPENSATING'),
  ('CHARGED', 'COMPENSATING'),
  ('NEEDS_ATTENTION', 'COMPENSATING'),
  ('COMPENSATING', 'FAILED'),
  ('COMPENSATING', 'CANCELLED'),
  -- a person decides, then the saga carries on from where it stood
  ('UNKNOWN_PAYMENT', 'NEEDS_ATTENTION'),
  ('COMPENSATING', 'NEEDS_ATTENTION'),
  ('CHARGED', 'NEEDS_ATTENTION'),
  ('SHIPPED', 'NEEDS_ATTENTION'),
  ('NEEDS_ATTENTION', 'UNKNOWN_PAYMENT'),
  ('NEEDS_ATTENTION', 'CHARGED'),
  ('NEEDS_ATTENTION', 'SHIPPED');

-- NEEDS_ATTENTION remembers where the order stood (attention_from), and leaves only back to it: a
-- person's decision at the pivot can never become a compensation, nor a compensation a shipment.
ALTER TABLE orders ADD COLUMN attention_from text;

CREATE FUNCTION orders_guard_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.status IS DISTINCT FROM OLD.status AND NOT EXISTS (
       SELECT 1 FROM order_transitions WHERE from_status = OLD.status AND to_status = NEW.status) THEN
    RAISE EXCEPTION 'order %: % -> % is not a legal transition', OLD.order_id, OLD.status, NEW.status
      USING ERRCODE = 'check_violation';
  END IF;
  IF OLD.status = 'NEEDS_ATTENTION' AND NEW.status <> 'NEEDS_ATTENTION' AND NEW.status IS DISTINCT FROM OLD.attention_from THEN
    RAISE EXCEPTION 'order %: NEEDS_ATTENTION (from %) -> % is not a legal transition', OLD.order_id, OLD.attention_from, NEW.status
      USING ERRCODE = 'check_violation';
  END IF;
  IF NEW.status = 'NEEDS_ATTENTION' AND OLD.status <> 'NEEDS_ATTENTION' THEN
    NEW.attention_from := OLD.status;
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER orders_status_transition BEFORE UPDATE OF status ON orders
  FOR EACH ROW EXECUTE FUNCTION orders_guard_transition();

-- 2. The run that owns the order: the run of workflow order:<id> that wrote it last.
ALTER TABLE orders ADD COLUMN owner_run_id text;

-- 3. Prices have a currency: an order in another currency is invalid input.
ALTER TABLE products ADD COLUMN currency text NOT NULL DEFAULT 'USD' CHECK (currency ~ '^[A-Z]{3}$');

-- 4. The per-customer purchase hold is part of the reservation row, keyed by (order_id, sku), and
--    written in the same transaction as the stock: a crash can neither leak nor double a hold, and a
--    release gives back exactly what this order held.
ALTER TABLE reservations ADD COLUMN quota_qty integer NOT NULL DEFAULT 0 CHECK (quota_qty >= 0);
UPDATE reservations r SET quota_qty = r.qty FROM products p
  WHERE p.sku = r.sku AND p.max_per_customer IS NOT NULL AND r.status IN ('HELD', 'SOLD');
