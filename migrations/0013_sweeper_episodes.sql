-- A person is told once per episode of a run, not once per run: what made the run stop this time (the
-- pause of its activity, or the length of its history when it stopped). A run that moved on and
-- stopped again, or an activity paused a second time, is a new episode and a new alert. Null on rows
-- written before, and on actions that are not a person's.
ALTER TABLE sweeper_actions ADD COLUMN episode text;
