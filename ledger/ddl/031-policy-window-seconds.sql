-- PolicyEvent v10 adds ROLLING windows: every interval of window_seconds ending at an instant. Null for every other
-- window and for policies recorded before this migration.
ALTER TABLE policy_events ADD COLUMN window_seconds INTEGER;
