-- Charge keys closed by a technical cancel (POST /v1/charges/{key}/cancel) before any charge was made
-- under them: a later charge with the key is refused (410 key_closed) and takes no money. A key has a
-- charge or is closed, never both: the charge and the cancel each take the key's lock first (an
-- advisory transaction lock on the key), so whichever comes second sees what the first did.
CREATE TABLE provider.closed_keys (
  idempotency_key text PRIMARY KEY,
  closed_at       timestamptz NOT NULL DEFAULT now()
);
