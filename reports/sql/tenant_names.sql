-- Every tenant the ledger holds an event of, for the nearest matches of an unknown one (DataFusion).
SELECT DISTINCT tenant FROM entries
