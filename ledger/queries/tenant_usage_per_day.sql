-- A tenant's (:tenant) counted usage with occurred_at in [:from, :to), up to a watermark (:watermark), per UTC day
-- (its first instant: occurred_at rounded down to a multiple of :day_micros) and metric. `entries_by_tenant` holds
-- the tenant's entries in event time.
SELECT e.occurred_at - (((e.occurred_at % :day_micros) + :day_micros) % :day_micros) AS day, e.metric,
       SUM(u.quantity), COUNT(*)
FROM entries e INDEXED BY entries_by_tenant CROSS JOIN usage_events u ON u.seq = e.seq
WHERE e.tenant = :tenant AND e.occurred_at >= :from AND e.occurred_at < :to AND e.event_type = 'UsageEvent'
  AND e.seq <= :watermark AND e.status = 'recorded'
GROUP BY 1, 2
ORDER BY 1, 2
