-- Billing cycles (PolicyEvent v11): a row of a final export bills one cycle of its tenant, which need not be the
-- period's month. Null for a row of the month itself, and for every row stored before this migration: its cycle is
-- the period.
ALTER TABLE period_exports ADD COLUMN cycle_start INTEGER;
ALTER TABLE period_exports ADD COLUMN cycle_end INTEGER;
