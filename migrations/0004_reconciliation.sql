-- The reconciliation safety net: each run of the scheduled reconcile workflow, and what it found.
CREATE TABLE reconciliation_runs (
  run_id      text PRIMARY KEY,
  started_at  timestamptz NOT NULL DEFAULT now(),
  orders      integer NOT NULL,
  violations  integer NOT NULL
);

CREATE TABLE reconciliation_findings (
  id        bigserial PRIMARY KEY,
  run_id    text NOT NULL REFERENCES reconciliation_runs (run_id),
  rule      text NOT NULL,
  order_ids text[] NOT NULL,
  detail    text NOT NULL,
  found_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX reconciliation_findings_run_idx ON reconciliation_findings (run_id);
