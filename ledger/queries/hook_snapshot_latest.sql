-- The latest snapshot of the hook's state: the one a start reads (only the latest is kept; the order makes it so
-- even if a crash left two).
SELECT watermark, entry_hash, ledger_id, format_version, taken_at, checksum, body
FROM hook_snapshots ORDER BY watermark DESC LIMIT 1
