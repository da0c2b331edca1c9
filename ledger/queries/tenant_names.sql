-- Every tenant the ledger holds an entry of up to a watermark (:watermark), for the nearest matches of an unknown
-- one. `entries_by_tenant` holds every tenant name, each entry's once, in order.
SELECT DISTINCT tenant FROM entries WHERE seq <= :watermark
