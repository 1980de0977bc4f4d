-- Application schema: catalogue, orders, reservations, shipments, notifications.
CREATE TABLE products (
  sku           text PRIMARY KEY,
  name          text NOT NULL,
  price_cents   bigint NOT NULL CHECK (price_cents >= 0),
  stock         integer NOT NULL CHECK (stock >= 0),
  initial_stock integer NOT NULL CHECK (initial_stock >= 0),
  version       bigint NOT NULL DEFAULT 0
);

CREATE TABLE orders (
  order_id       text PRIMARY KEY,
  customer_id    text NOT NULL,
  status         text NOT NULL CHECK (status IN ('PENDING', 'RESERVED', 'CHARGED', 'UNKNOWN_PAYMENT', 'SHIPPED',
                   'COMPLETED', 'COMPENSATING', 'FAILED', 'CANCELLED', 'NEEDS_ATTENTION')),
  reason         text,
  currency       text NOT NULL,
  total_cents    bigint NOT NULL CHECK (total_cents >= 0),
  items          jsonb NOT NULL,
  payment_method text NOT NULL,
  workflow_id    text NOT NULL,
  created_at     timestamptz NOT NULL DEFAULT now(),
  updated_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX orders_status_idx ON orders (status);

-- One row per (order, sku). HELD -> RELEASED (compensation) or HELD -> SOLD (at the pivot).
CREATE TABLE reservations (
  order_id   text NOT NULL REFERENCES orders (order_id),
  sku        text NOT NULL REFERENCES products (sku),
  qty        integer NOT NULL CHECK (qty > 0),
  status     text NOT NULL CHECK (status IN ('HELD', 'RELEASED', 'SOLD')),
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (order_id, sku)
);

CREATE TABLE shipments (
  order_id        text PRIMARY KEY REFERENCES orders (order_id),
  tracking_number text NOT NULL,
  created_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE notifications (
  order_id   text NOT NULL REFERENCES orders (order_id),
  kind       text NOT NULL,
  body       text NOT NULL,
  sent_at    timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (order_id, kind)
);
