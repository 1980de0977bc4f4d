-- A serial lane's holder proves it is alive (activities/lane-lock.ts). A process that is stopped
-- (SIGSTOP, docker pause) or stuck in its event loop keeps its session, and so the lane's advisory
-- lock, because its kernel still answers TCP keepalives. So the holder's session keeps a lease here,
-- renewed every few seconds on the database's clock; a task waiting for the lane that finds the lease
-- over ends the holder's session (pg_terminate_backend), which frees the lock, and records it below.
CREATE TABLE lane_leases (
  lane       text PRIMARY KEY,
  -- The backend that holds the lane's advisory lock (pg_backend_pid() of the lock's session).
  holder_pid integer NOT NULL,
  worker     text NOT NULL,
  taken_at   timestamptz NOT NULL,
  expires_at timestamptz NOT NULL
);

-- One row per holder whose session a waiting task ended because its lease was over.
CREATE TABLE lane_takeovers (
  id            bigserial PRIMARY KEY,
  lane          text NOT NULL,
  holder_pid    integer NOT NULL,
  holder_worker text NOT NULL,
  held_since    timestamptz NOT NULL,
  expired_at    timestamptz NOT NULL,
  -- The waiting task's worker and order, and when it ended the holder's session.
  by_worker     text NOT NULL,
  by_order_id   text NOT NULL,
  at            timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX lane_takeovers_lane_idx ON lane_takeovers (lane, at);
