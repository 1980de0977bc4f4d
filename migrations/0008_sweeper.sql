-- What the sweeper did (a workflow on the `sweep` Schedule): every restart of a stranded order's saga,
-- every reset of a run whose workflow task kept failing, every hand-over to a person, every alert
-- for an order left in NEEDS_ATTENTION. It never compensates or charges; the saga does that.
CREATE TABLE sweeper_actions (
  id         bigserial PRIMARY KEY,
  at         timestamptz NOT NULL DEFAULT now(),
  order_id   text NOT NULL,
  action     text NOT NULL CHECK (action IN ('restart', 'reset', 'person', 'alert')),
  reason     text NOT NULL,
  -- The run it acted on (closed, missing: null, or failing), and the run it started (restart, reset).
  run_id     text,
  new_run_id text
);
CREATE INDEX sweeper_actions_order_idx ON sweeper_actions (order_id, action, at);
