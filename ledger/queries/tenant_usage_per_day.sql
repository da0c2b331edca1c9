-- A tenant's (:tenant) counted usage with occurred_at in [:from, :to), up to a watermark (:watermark), per UTC day
-- (its first instant: occurred_at rounded down to a multiple of :day_micros) and metric, with the deltas of the
-- corrections of that usage recorded up to the watermark (counted in the sum, not as events). `entries_by_tenant`
-- holds the tenant's entries in event time.
SELECT occurred_at - (((occurred_at % :day_micros) + :day_micros) % :day_micros) AS day, metric,
       SUM(quantity), SUM(events)
FROM (
    SELECT e.occurred_at AS occurred_at, e.metric AS metric, u.quantity AS quantity, 1 AS events
    FROM entries e INDEXED BY entries_by_tenant CROSS JOIN usage_events u ON u.seq = e.seq
    WHERE e.tenant = :tenant AND e.occurred_at >= :from AND e.occurred_at < :to AND e.event_type = 'UsageEvent'
      AND e.seq <= :watermark AND e.status = 'recorded'
    UNION ALL
    SELECT occurred_at, metric, delta, 0 FROM usage_corrections
    WHERE tenant = :tenant AND occurred_at >= :from AND occurred_at < :to AND seq <= :watermark
)
GROUP BY 1, 2
ORDER BY 1, 2
