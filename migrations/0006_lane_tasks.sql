-- One row per serial-lane task, timed on the database's clock: from when it took the lane's advisory
-- lock to just before it let go. At most one task of a lane runs at a time, across every worker
-- process; these rows are how that is shown (and how long the lanes are busy).
CREATE TABLE lane_tasks (
  id         bigserial PRIMARY KEY,
  lane       text NOT NULL,
  order_id   text NOT NULL,
  worker     text NOT NULL,
  started_at timestamptz NOT NULL,
  ended_at   timestamptz NOT NULL CHECK (ended_at >= started_at)
);
CREATE INDEX lane_tasks_lane_idx ON lane_tasks (lane, started_at);
