-- Worker processes that stopped gracefully (a deploy stopping the old build, a restart), by their
-- Temporal identity: the sweeper then counts their pollers as gone at once, instead of waiting out the
-- minute a live poller may go between two polls (activities/sweep-reads.ts, pollersOf). A process
-- killed outright writes nothing and is judged by its last poll, as before. Rows older than the time
-- the server lists a poller are pruned as new ones are written.
CREATE TABLE worker_stops (
  identity   text PRIMARY KEY,
  stopped_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
