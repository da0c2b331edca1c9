-- Conflicting duplicates are rare: reconcile finds them all through this small partial index instead of a scan
-- of every entry.
CREATE INDEX entries_conflicting ON entries (seq) WHERE status = 'conflicting_duplicate';
