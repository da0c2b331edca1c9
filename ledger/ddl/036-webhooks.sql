-- Webhooks (docs/decisions.md, "Webhooks"): the endpoints a tenant's alerts are POSTed to, and every attempt to
-- deliver one. They live in the ledger that holds the tenant's alerts (its shard), so whoever delivers a tenant's
-- alerts reads them beside the alerts, and a restart resumes from what is recorded here.

-- A change of an endpoint: a row per registration (enabled 1) or removal (enabled 0); the endpoint is its last row.
-- `from_seq` is the ledger's last entry when it was registered: the alerts after it are delivered to it, not the
-- history before. `secret` is the Standard Webhooks signing secret (`whsec_` and base64): the ledger file is as
-- private as the token file, and no read of `sql` shows this table.
CREATE TABLE webhook_endpoints (
    id          INTEGER PRIMARY KEY,
    tenant      TEXT    NOT NULL,
    endpoint_id TEXT    NOT NULL,
    url         TEXT    NOT NULL,
    kinds       TEXT    NOT NULL,           -- AlertKind symbols, comma-separated
    secret      TEXT    NOT NULL,
    enabled     INTEGER NOT NULL CHECK (enabled IN (0, 1)),
    from_seq    INTEGER NOT NULL,
    actor       TEXT    NOT NULL,
    reason      TEXT    NOT NULL,
    recorded_at INTEGER NOT NULL            -- timestamp-micros, UTC
);

CREATE INDEX webhook_endpoints_by_endpoint ON webhook_endpoints (tenant, endpoint_id, id);

-- Every attempt to deliver an alert (`alert_seq`, its entry) to an endpoint, under the delivery's one `webhook_id`:
-- DELIVERED (a 2xx), FAILED (another status or no answer; retried at `next_attempt_at`) or GIVEN_UP (the last
-- attempt allowed failed). A delivery has at most one DELIVERED or GIVEN_UP row: the index refuses a second, so a
-- delivery recorded as delivered is never attempted again.
CREATE TABLE webhook_attempts (
    id              INTEGER PRIMARY KEY,
    alert_seq       INTEGER NOT NULL REFERENCES entries (seq),
    tenant          TEXT    NOT NULL,
    endpoint_id     TEXT    NOT NULL,
    webhook_id      TEXT    NOT NULL,
    attempt         INTEGER NOT NULL CHECK (attempt >= 1),
    outcome         TEXT    NOT NULL CHECK (outcome IN ('DELIVERED', 'FAILED', 'GIVEN_UP')),
    status          INTEGER,                -- the HTTP status answered, null when none was
    error           TEXT,                   -- why it failed, null when delivered
    attempted_at    INTEGER NOT NULL,       -- timestamp-micros, UTC
    next_attempt_at INTEGER                 -- FAILED: when the next attempt is due
);

CREATE INDEX webhook_attempts_by_delivery ON webhook_attempts (alert_seq, tenant, endpoint_id, id);
CREATE UNIQUE INDEX webhook_attempts_settled ON webhook_attempts (alert_seq, tenant, endpoint_id)
    WHERE outcome <> 'FAILED';

CREATE TRIGGER webhook_endpoints_refuse_update BEFORE UPDATE ON webhook_endpoints
BEGIN SELECT RAISE(ABORT, 'webhook_endpoints is append-only: UPDATE refused (record a change as a new row)'); END;
CREATE TRIGGER webhook_endpoints_refuse_delete BEFORE DELETE ON webhook_endpoints
BEGIN SELECT RAISE(ABORT, 'webhook_endpoints is append-only: DELETE refused (record a removal as a new row)'); END;
CREATE TRIGGER webhook_attempts_refuse_update BEFORE UPDATE ON webhook_attempts
BEGIN SELECT RAISE(ABORT, 'webhook_attempts is append-only: UPDATE refused'); END;
CREATE TRIGGER webhook_attempts_refuse_delete BEFORE DELETE ON webhook_attempts
BEGIN SELECT RAISE(ABORT, 'webhook_attempts is append-only: DELETE refused'); END;
