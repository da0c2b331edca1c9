-- Billing (contract §5 "Billing export"): what the export needs without scanning every usage event.

-- Counted usage per tenant, metric and billing period (the month of occurred_at, YYYY-MM), kept up to date by
-- every append in its own transaction: one upsert per key per batch. A billing export for the current
-- watermark reads these few rows instead of every UsageEvent of the month. Derived data: it only grows (usage
-- quantities are >= 0), and a ledger can always recompute it from `usage_events`.
CREATE TABLE usage_totals (
    tenant   TEXT NOT NULL,
    metric   TEXT NOT NULL,
    period   TEXT NOT NULL,                    -- YYYY-MM, UTC
    quantity INTEGER NOT NULL CHECK (quantity >= 0),
    PRIMARY KEY (tenant, metric, period)
) WITHOUT ROWID;

INSERT INTO usage_totals (tenant, metric, period, quantity)
SELECT e.tenant, e.metric, strftime('%Y-%m', e.occurred_at / 1000000, 'unixepoch'), SUM(u.quantity)
FROM usage_events u JOIN entries e ON e.seq = u.seq
WHERE e.status = 'recorded'
GROUP BY 1, 2, 3;

CREATE TRIGGER usage_totals_only_grow BEFORE UPDATE ON usage_totals
WHEN NEW.quantity < OLD.quantity OR NEW.tenant IS NOT OLD.tenant OR NEW.metric IS NOT OLD.metric
    OR NEW.period IS NOT OLD.period
BEGIN SELECT RAISE(ABORT, 'usage_totals only grow: usage is never taken back'); END;
CREATE TRIGGER usage_totals_refuse_delete BEFORE DELETE ON usage_totals
BEGIN SELECT RAISE(ABORT, 'usage_totals: DELETE refused'); END;

-- The rows of each final billing export, stored when the period is closed (`export billing --final`), so that
-- re-exporting a closed period reproduces it byte for byte however many events arrive later. The watermark of
-- every row is its close's (`period_closes.watermark`).
CREATE TABLE period_exports (
    period           TEXT NOT NULL REFERENCES period_closes (period),
    row_index        INTEGER NOT NULL,         -- 0, 1, 2, ... in export order (tenant, then metric)
    tenant           TEXT NOT NULL,
    metric           TEXT NOT NULL,
    consumption      INTEGER NOT NULL,
    policy_id        TEXT,
    policy_version   INTEGER,
    "limit"          INTEGER,
    grants           INTEGER,
    effective_limit  INTEGER,
    overage          INTEGER,
    overshoot        INTEGER,
    late_adjustments INTEGER NOT NULL,
    PRIMARY KEY (period, row_index)
) WITHOUT ROWID;

CREATE TRIGGER period_exports_refuse_update BEFORE UPDATE ON period_exports
BEGIN SELECT RAISE(ABORT, 'period_exports is append-only: a closed period''s export never changes'); END;
CREATE TRIGGER period_exports_refuse_delete BEFORE DELETE ON period_exports
BEGIN SELECT RAISE(ABORT, 'period_exports is append-only: a closed period''s export never changes'); END;

-- Valid COMMIT amounts per tenant, metric and period (the month of the COMMIT's occurred_at), as judged by
-- reconcile's reservation rules over every reservation event up to `commit_totals_state.through_seq`. Derived
-- data kept by the reports crate: inside each append when the process installed its append hook, otherwise
-- caught up from `through_seq` by the next export. A COMMIT can lose its validity to a late event (a RELEASE
-- that happened first), so an amount may go down; nothing here is evidence, and it can always be rebuilt.
CREATE TABLE commit_totals (
    tenant TEXT NOT NULL,
    metric TEXT NOT NULL,
    period TEXT NOT NULL,                      -- YYYY-MM, UTC
    amount INTEGER NOT NULL,
    PRIMARY KEY (tenant, metric, period)
) WITHOUT ROWID;

-- The last ledger sequence number `commit_totals` covers (one row).
CREATE TABLE commit_totals_state (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    through_seq INTEGER NOT NULL
);
INSERT INTO commit_totals_state (id, through_seq) VALUES (1, 0);

CREATE TRIGGER commit_totals_state_only_forward BEFORE UPDATE ON commit_totals_state
WHEN NEW.through_seq < OLD.through_seq
BEGIN SELECT RAISE(ABORT, 'commit_totals_state only moves forward'); END;
