-- Money moves when goods do: the saga authorizes (a hold), ships, then captures. Step 3 holds the
-- money instead of taking it; its compensation is a void, not a refund. Orders of the charge era
-- stay in the table and keep their meaning: `payment_flow` says which era an order belongs to.

-- 1. The era of each order. Rows written before this migration, and rows an older build still writes
--    while it drains (its INSERT names no payment_flow), are charge-era orders. The saga of this
--    build writes 'authorization' explicitly.
ALTER TABLE orders
  ADD COLUMN payment_flow text NOT NULL DEFAULT 'charge' CHECK (payment_flow IN ('charge', 'authorization'));

-- 2. The new statuses. AUTHORIZED: the hold is made (before the pivot, as CHARGED was). SHIPPED, for
--    an authorization-era order, is "shipped, not yet captured". CAPTURED: the money is taken, after
--    the shipment; the confirmation then completes the order.
ALTER TABLE orders DROP CONSTRAINT orders_status_check;
ALTER TABLE orders ADD CONSTRAINT orders_status_check CHECK (status IN ('PENDING', 'RESERVED', 'CHARGED',
  'UNKNOWN_PAYMENT', 'AUTHORIZED', 'SHIPPED', 'CAPTURED', 'COMPLETED', 'COMPENSATING', 'FAILED', 'CANCELLED',
  'NEEDS_ATTENTION'));

-- 3. What the saga learned of the hold and of the capture, on the order (as charged_cents is for a
--    charge). `authorization_status`: null while no hold is known; 'authorized' (held), 'voided'
--    (released by the compensation, or the key closed with nothing held), 'captured'. A refund of an
--    authorization-era order refunds captured money only.
ALTER TABLE orders
  ADD COLUMN authorized_cents bigint NOT NULL DEFAULT 0 CHECK (authorized_cents >= 0),
  ADD COLUMN captured_cents bigint NOT NULL DEFAULT 0 CHECK (captured_cents >= 0),
  ADD COLUMN authorization_status text CHECK (authorization_status IN ('authorized', 'voided', 'captured')),
  ADD CONSTRAINT orders_capture_within_authorization CHECK (captured_cents <= authorized_cents),
  ADD CONSTRAINT orders_money_by_era CHECK (
    (payment_flow = 'charge' AND authorized_cents = 0 AND captured_cents = 0 AND authorization_status IS NULL)
    OR (payment_flow = 'authorization' AND charged_cents = 0));
ALTER TABLE orders DROP CONSTRAINT orders_refund_within_charge;
ALTER TABLE orders ADD CONSTRAINT orders_refund_within_money_taken CHECK (refunded_cents <= charged_cents + captured_cents);

-- 4. The legal transitions of the authorization era, beside the charge era's.
INSERT INTO order_transitions (from_status, to_status) VALUES
  -- forward
  ('RESERVED', 'AUTHORIZED'),
  ('UNKNOWN_PAYMENT', 'AUTHORIZED'),
  ('AUTHORIZED', 'SHIPPED'),
  ('SHIPPED', 'CAPTURED'),
  ('CAPTURED', 'COMPLETED'),
  -- backward, only before the pivot (the void)
  ('AUTHORIZED', 'COMPENSATING'),
  -- a person decides, then the saga carries on from where it stood
  ('AUTHORIZED', 'NEEDS_ATTENTION'),
  ('CAPTURED', 'NEEDS_ATTENTION'),
  ('NEEDS_ATTENTION', 'AUTHORIZED'),
  ('NEEDS_ATTENTION', 'CAPTURED');

-- 5. As 0011, and each era keeps to its own money: an authorization-era order is never CHARGED, a
--    charge-era one never AUTHORIZED nor CAPTURED, and an authorization-era order completes only
--    once captured (SHIPPED -> COMPLETED is the charge era's).
CREATE OR REPLACE FUNCTION orders_guard_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.status IS DISTINCT FROM OLD.status AND NOT EXISTS (
       SELECT 1 FROM order_transitions WHERE from_status = OLD.status AND to_status = NEW.status) THEN
    RAISE EXCEPTION 'order %: % -> % is not a legal transition', OLD.order_id, OLD.status, NEW.status
      USING ERRCODE = 'check_violation';
  END IF;
  IF NEW.status IS DISTINCT FROM OLD.status AND (
       (NEW.payment_flow = 'charge' AND NEW.status IN ('AUTHORIZED', 'CAPTURED'))
       OR (NEW.payment_flow = 'authorization' AND (NEW.status = 'CHARGED'
           OR (NEW.status = 'COMPLETED' AND OLD.status <> 'CAPTURED')))) THEN
    RAISE EXCEPTION 'order % (% era): % -> % is not a legal transition', OLD.order_id, NEW.payment_flow, OLD.status, NEW.status
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
    NEW.attention_seq := OLD.attention_seq + 1;
  END IF;
  RETURN NEW;
END $$;
