-- Whether the ledger holds an entry of a tenant (:tenant) up to a watermark (:watermark): one, or none.
SELECT 1 FROM entries WHERE tenant = :tenant AND seq <= :watermark LIMIT 1
