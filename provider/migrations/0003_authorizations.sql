-- Authorizations as a gateway keeps them: a hold on the card (POST /v1/authorizations), later captured
-- (money taken) or voided (hold released), or left to expire. Holds, captures and voids are rows of
-- their own tables, and refunds of a capture sit in provider.refunds beside the refunds of charges;
-- an authorization's status (authorized, voided, captured, expired) is read from them and the clock.
CREATE TABLE provider.authorizations (
  idempotency_key text PRIMARY KEY,
  request_hash    text NOT NULL,        -- sha256 of the canonical request: same key + other params -> 422
  amount_cents    bigint NOT NULL CHECK (amount_cents > 0),
  currency        text NOT NULL,
  payment_method  text NOT NULL,
  reference       text,
  status          text NOT NULL CHECK (status IN ('processing', 'authorized', 'declined')),
  failure_code    text,
  -- When the hold lapses (set as it is authorized, PROVIDER_AUTH_EXPIRY_MS later); none when declined.
  expires_at      timestamptz CHECK ((status = 'authorized') = (expires_at IS NOT NULL)),
  created_at      timestamptz NOT NULL DEFAULT now(),
  updated_at      timestamptz NOT NULL DEFAULT now()
);

-- Authorization keys closed by a technical cancel (POST /v1/authorizations/{key}/cancel) before any
-- authorization was made under them: a later authorization with the key is refused (410 key_closed).
-- Apart from provider.closed_keys: a charge key and an authorization key are separate key spaces.
CREATE TABLE provider.closed_authorization_keys (
  idempotency_key text PRIMARY KEY,
  closed_at       timestamptz NOT NULL DEFAULT now()
);

-- One row per capture key. A refused capture whose refusal is final (the authorization expired, voided,
-- declined, or captured under another key) is kept as `failed`, so a replay and the inquiry answer it
-- again; a request error (an amount over the hold, no such authorization) writes nothing.
CREATE TABLE provider.captures (
  idempotency_key   text PRIMARY KEY,
  request_hash      text NOT NULL,
  authorization_key text NOT NULL REFERENCES provider.authorizations (idempotency_key),
  amount_cents      bigint NOT NULL CHECK (amount_cents > 0),
  status            text NOT NULL CHECK (status IN ('succeeded', 'failed')),
  failure_code      text CHECK ((status = 'failed') = (failure_code IS NOT NULL)),
  created_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX captures_authorization_idx ON provider.captures (authorization_key);
-- One capture per authorization (the rest of a partial capture is released, as gateways do).
CREATE UNIQUE INDEX captures_one_per_authorization ON provider.captures (authorization_key) WHERE status = 'succeeded';

-- A released hold: at most one void per authorization, by a void or by a technical cancel.
CREATE TABLE provider.voids (
  authorization_key text PRIMARY KEY REFERENCES provider.authorizations (idempotency_key),
  source            text NOT NULL CHECK (source IN ('void', 'cancel')),
  voided_at         timestamptz NOT NULL DEFAULT now()
);

-- A refund refunds a charge or a capture, exactly one of them.
ALTER TABLE provider.refunds
  ALTER COLUMN charge_key DROP NOT NULL,
  ADD COLUMN capture_key text REFERENCES provider.captures (idempotency_key),
  ADD CONSTRAINT refunds_one_source CHECK ((charge_key IS NULL) <> (capture_key IS NULL));
CREATE INDEX refunds_capture_idx ON provider.refunds (capture_key);
