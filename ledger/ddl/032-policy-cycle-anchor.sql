-- PolicyEvent v11 adds BILLING_CYCLE windows: monthly cycles from an anchor instant, on the clock of the policy's
-- time zone. Null for every other window and for policies recorded before this migration.
ALTER TABLE policy_events ADD COLUMN cycle_anchor INTEGER;
