-- A message quarantined again at the same coordinates with the same bytes (a file ingested again after a crash or a
-- repair) is the message already quarantined: the append looks it up by where it came from, through this index,
-- and keeps the first row only. Until 2026-12-03 quarantine was keyed by arrival, and a rerun of a killed
-- `ingest --file` left every bad record of the file quarantined twice.
CREATE INDEX IF NOT EXISTS quarantine_by_origin ON quarantine (origin_stream, origin_offset);
