-- Per-customer purchase limits (the purchase policy, activities/purchase-policy.ts). A reservation
-- holds quota outside the CAS transaction; an aborted attempt gives it back (the attempt's undo log).
ALTER TABLE products ADD COLUMN max_per_customer integer CHECK (max_per_customer > 0);

CREATE TABLE purchase_quota (
  customer_id text NOT NULL,
  sku         text NOT NULL REFERENCES products (sku),
  held        integer NOT NULL CHECK (held >= 0),
  PRIMARY KEY (customer_id, sku)
);

UPDATE products SET max_per_customer = 2 WHERE sku = 'SKU-LIMITED';
