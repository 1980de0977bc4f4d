-- The sweeper watches running runs too (activities/sweep-classify.ts): it may remove a versioning
-- override that sends a run's tasks to a version nobody polls, and it records why it acted, so the
-- orders it found stalled can be listed (client.ts stalled) and a person is told once per cause.
ALTER TABLE sweeper_actions DROP CONSTRAINT sweeper_actions_action_check;
ALTER TABLE sweeper_actions
  ADD CONSTRAINT sweeper_actions_action_check CHECK (action IN ('restart', 'reset', 'person', 'alert', 'remove-override'));
-- closed, missing, task-failing, sdk-update-bug, task-timing-out, override-unpolled, build-unpolled,
-- activity-paused, activity-retrying, stalled, attention, unreadable; null on rows written before.
ALTER TABLE sweeper_actions ADD COLUMN cause text;
