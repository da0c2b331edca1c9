-- PolicyEvent v2 adds `burst` (a throttle: token bucket capacity). Null for quotas and for v1 producers.
ALTER TABLE policy_events ADD COLUMN burst INTEGER;
