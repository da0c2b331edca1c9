-- A snapshot of the hook's state; those before it are deleted in the same transaction (only the latest is kept).
INSERT OR REPLACE INTO hook_snapshots (watermark, entry_hash, ledger_id, format_version, taken_at, checksum, body)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
