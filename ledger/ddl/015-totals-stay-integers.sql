-- A total past 2^63 - 1: SQLite's `quantity + excluded.quantity` turns it into a REAL, silently, and every
-- billing export of that month then fails to read it. Refused instead: the append fails, naming the table, and
-- nothing of it is recorded (quantities above 2^53 - 1 are quarantined as `quantity_too_large`, so this takes more
-- than a thousand such events).
CREATE TRIGGER IF NOT EXISTS usage_totals_stay_integers_insert BEFORE INSERT ON usage_totals
WHEN typeof(NEW.quantity) <> 'integer'
BEGIN SELECT RAISE(ABORT, 'usage_totals: a total would pass 2^63 - 1'); END;
CREATE TRIGGER IF NOT EXISTS usage_totals_stay_integers_update BEFORE UPDATE ON usage_totals
WHEN typeof(NEW.quantity) <> 'integer'
BEGIN SELECT RAISE(ABORT, 'usage_totals: a total would pass 2^63 - 1'); END;
CREATE TRIGGER IF NOT EXISTS commit_totals_stay_integers_insert BEFORE INSERT ON commit_totals
WHEN typeof(NEW.amount) <> 'integer'
BEGIN SELECT RAISE(ABORT, 'commit_totals: a total would pass 2^63 - 1'); END;
CREATE TRIGGER IF NOT EXISTS commit_totals_stay_integers_update BEFORE UPDATE ON commit_totals
WHEN typeof(NEW.amount) <> 'integer'
BEGIN SELECT RAISE(ABORT, 'commit_totals: a total would pass 2^63 - 1'); END;
