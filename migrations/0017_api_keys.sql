-- The orders API (api/): one key per storefront, kept as a hash of its secret, and each POST /v1/orders
-- under its Idempotency-Key with the answer it got, so the same request again gets the same answer.

-- `key_id` is the key's public part (it names the key in logs and in client.ts api-keys); the secret
-- is never stored, only its SHA-256 (a random 256-bit secret needs no slow hash).
CREATE TABLE api_keys (
  key_id      text PRIMARY KEY CHECK (key_id ~ '^[a-z0-9]{8,32}$'),
  storefront  text NOT NULL CHECK (length(storefront) BETWEEN 1 AND 64),
  secret_hash text NOT NULL CHECK (secret_hash ~ '^[0-9a-f]{64}$'),
  created_at  timestamptz NOT NULL DEFAULT now(),
  revoked_at  timestamptz
);
CREATE INDEX api_keys_storefront_idx ON api_keys (storefront);

-- A placement, per storefront and Idempotency-Key. `request_hash`: the order as validated, so the same
-- key with another body is told apart. `status_code` and `response` are null while the first request is
-- in flight; `lease_until` lets a later request take over one whose process died before it answered.
-- An order ID is placed under one key only (its unique index).
CREATE TABLE api_placements (
  storefront      text NOT NULL,
  idempotency_key text NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
  request_hash    text NOT NULL,
  order_id        text NOT NULL UNIQUE,
  status_code     integer CHECK (status_code BETWEEN 200 AND 599),
  response        json, -- json, not jsonb: the answer replayed as it was sent, its fields in their order
  lease_until     timestamptz NOT NULL,
  created_at      timestamptz NOT NULL DEFAULT now(),
  answered_at     timestamptz,
  PRIMARY KEY (storefront, idempotency_key),
  CHECK ((status_code IS NULL) = (response IS NULL))
);

-- GET /v1/orders pages newest first by (created_at, order_id), for all orders or one customer's.
CREATE INDEX orders_page_idx ON orders (created_at DESC, order_id DESC);
CREATE INDEX orders_customer_page_idx ON orders (customer_id, created_at DESC, order_id DESC);
