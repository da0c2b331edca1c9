-- AdjustmentEvent v2 adds `scope`: the scope of the policy whose window an OVERSHOOT or SHADOW_OVER_LIMIT is
-- about. A SUBJECT window of requests without a subject is written with subject null, as a TENANT window is, so
-- without it a tenant's SUBJECT policy and the plan's TENANT policy sharing a policy_id shared one running total.
-- Null for the other kinds and for adjustments written before v2.
ALTER TABLE adjustment_events ADD COLUMN scope TEXT;
