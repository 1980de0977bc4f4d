-- A resolve answers one escalation of its order, and whichever run moves the order next applies it,
-- once. The row counts its escalations and says what the current one is about, so a run that did not
-- escalate (a restart from the row, a Reset, a run after the history was lost) can apply a resolve
-- accepted there, and a resolve's Signal reapplied by a Reset cannot answer a later escalation.

-- 1. `attention_seq`: how many times the order has entered NEEDS_ATTENTION (the trigger counts them).
--    `attention_step`: the step the current escalation is about (the compensation that failed, the
--    shipment, the confirmation), as the escalating run wrote it; null when it did not say.
ALTER TABLE orders ADD COLUMN attention_seq integer NOT NULL DEFAULT 0, ADD COLUMN attention_step text;

-- 2. The escalation a resolve answers: the order's attention_seq when it was recorded, while the order
--    was in NEEDS_ATTENTION; null when it was not (a run waiting for a person on a row that refused
--    NEEDS_ATTENTION decides such a resolve alone).
ALTER TABLE order_requests ADD COLUMN attention_seq integer;

-- 3. As 0009, and each entry into NEEDS_ATTENTION counts.
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
    NEW.attention_seq := OLD.attention_seq + 1;
  END IF;
  RETURN NEW;
END $$;
