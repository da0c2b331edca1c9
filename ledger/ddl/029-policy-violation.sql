-- PolicyEvent v8 makes a policy a gauge quota by naming what its violation refuses (NO_INSERTS, NO_WRITES, DISABLE).
-- Null for older producers and for policies recorded before this migration, which all limit consumption.
ALTER TABLE policy_events ADD COLUMN violation TEXT;
