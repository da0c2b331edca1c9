-- PolicyEvent v3 and GrantEvent v2 say who made a control-plane change and why (`policy set`, `grant add`, the
-- admin endpoints). Null for older producers and for events recorded before this migration.
ALTER TABLE policy_events ADD COLUMN actor TEXT;
ALTER TABLE policy_events ADD COLUMN reason TEXT;
ALTER TABLE grant_events ADD COLUMN actor TEXT;
