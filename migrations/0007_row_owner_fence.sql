-- The order row as the only truth of a saga, whichever run drives it.
-- 1. The runs that owned the order and were superseded by a later run (a Reset, or a new start after a
--    Terminate). A write from one of them is refused: an activity left over from such a run can no
--    longer move the row.
ALTER TABLE orders ADD COLUMN superseded_runs text[] NOT NULL DEFAULT '{}';

-- 2. Backward recovery may start from NEEDS_ATTENTION when the order escalated before the pivot (an
--    unknown charge, a compensation); an escalation at or after the pivot (from CHARGED or SHIPPED)
--    still leaves only back to where it stood.
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
  IF NEW.status = 'NEEDS_ATTENTION' AND OLD.status <> 'NEEDS_ATTENTION' THEN
    NEW.attention_from := OLD.status;
  END IF;
  RETURN NEW;
END $$;
