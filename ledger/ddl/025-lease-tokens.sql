-- The events of leases alone, for the greatest fencing token of each tenant's metric a hook reads at start (leases
-- too old for its fold still raise the next token).
CREATE INDEX reservation_events_of_leases ON reservation_events (seq) WHERE fencing_token IS NOT NULL;
