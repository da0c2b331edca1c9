-- Whether the ledger holds any event of tenant $1: one entry of it, or none (DataFusion).
SELECT seq FROM entries WHERE tenant = $1 LIMIT 1
