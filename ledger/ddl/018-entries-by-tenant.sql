-- A tenant's entries in event time, for support's answers (`audit why`, `audit tenant`; `ledger/queries/window_usage.sql`,
-- `tenant_*.sql`, `window_adjustments.sql`, `reservation_events_of_tenant.sql`): the usage that had consumed a
-- decision's window, a tenant's decisions and usage over a month, its reservations and adjustments. Without it each
-- answer scanned every usage and reservation event of the ledger (10.9 s for `audit why` on 10 million events).
-- `event_type` and `metric` ride along so that the other entries of the tenant are skipped in the index, unread.
CREATE INDEX IF NOT EXISTS entries_by_tenant ON entries (tenant, occurred_at, event_type, metric);
