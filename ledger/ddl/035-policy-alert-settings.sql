-- PolicyEvent v12 adds a policy's own alert settings. alert_thresholds: the percents of a window's effective limit at
-- which a THRESHOLD alert is written, comma-separated in increasing order ('' for an empty list: no THRESHOLD alert),
-- null for the default 80, 90 and 100. alert_subject_share: the percent of the tenant's consumption in a window above
-- which one subject's calls for a SUBJECT_SHARE alert, null for none. Null for policies recorded before this migration.
ALTER TABLE policy_events ADD COLUMN alert_thresholds TEXT;
ALTER TABLE policy_events ADD COLUMN alert_subject_share INTEGER;
