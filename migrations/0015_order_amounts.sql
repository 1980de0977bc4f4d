-- What the saga learned of the order's money, kept on the order: the application's role may not read
-- the provider's ledger, and the orders API answers from this row. `charged_cents` is written with the
-- transition to CHARGED (the charge is for the row's own total) and by a refund, which learns the
-- charge's amount from the provider; `refunded_cents` with the refund that moved it.
ALTER TABLE orders
  ADD COLUMN charged_cents bigint NOT NULL DEFAULT 0 CHECK (charged_cents >= 0),
  ADD COLUMN refunded_cents bigint NOT NULL DEFAULT 0 CHECK (refunded_cents >= 0),
  ADD CONSTRAINT orders_refund_within_charge CHECK (refunded_cents <= charged_cents);
