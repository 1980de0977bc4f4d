-- The payment provider's own state, in its own schema. Only the provider process writes here.
CREATE TABLE provider.api_keys (
  key_hash   text PRIMARY KEY,          -- sha256 of the key; the key itself is never stored
  label      text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE provider.charges (
  idempotency_key text PRIMARY KEY,
  request_hash    text NOT NULL,        -- sha256 of the canonical request: same key + other params -> 422
  amount_cents    bigint NOT NULL CHECK (amount_cents > 0),
  currency        text NOT NULL,
  payment_method  text NOT NULL,
  reference       text,
  status          text NOT NULL CHECK (status IN ('processing', 'succeeded', 'failed')),
  failure_code    text,
  created_at      timestamptz NOT NULL DEFAULT now(),
  updated_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE provider.refunds (
  idempotency_key text PRIMARY KEY,
  request_hash    text NOT NULL,
  charge_key      text NOT NULL REFERENCES provider.charges (idempotency_key),
  amount_cents    bigint NOT NULL CHECK (amount_cents > 0),
  status          text NOT NULL CHECK (status IN ('succeeded')),
  created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX refunds_charge_idx ON provider.refunds (charge_key);
