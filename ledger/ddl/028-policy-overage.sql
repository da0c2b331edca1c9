-- PolicyEvent v7 names a HARD quota's throttled overage: beyond its limit, overage_rate per overage_window. Null for
-- older producers and for policies recorded before this migration, whose limits were all walls.
ALTER TABLE policy_events ADD COLUMN overage_rate INTEGER;
ALTER TABLE policy_events ADD COLUMN overage_window TEXT;
