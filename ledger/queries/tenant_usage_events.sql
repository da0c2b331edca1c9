-- A tenant's (:tenant) counted usage events with occurred_at in [:from, :to), of one metric (:metric) or of all
-- (:metric null), up to a watermark (:watermark), in event time, with the subject, project and API key each names,
-- and the corrections of them recorded up to the watermark (a row each, at the original's event time and members,
-- its delta as the quantity): what `GET /v1/usage` sums per window. `entries_by_tenant` holds the tenant's entries
-- in event time, so only the range's entries are read.
SELECT occurred_at, metric, subject, project, api_key, quantity FROM (
    SELECT e.occurred_at, e.metric, e.subject, e.project, e.api_key, u.quantity, e.seq
    FROM entries e INDEXED BY entries_by_tenant CROSS JOIN usage_events u ON u.seq = e.seq
    WHERE e.tenant = :tenant AND e.occurred_at >= :from AND e.occurred_at < :to AND e.event_type = 'UsageEvent'
      AND (:metric IS NULL OR e.metric = :metric) AND e.seq <= :watermark AND e.status = 'recorded'
    UNION ALL
    SELECT occurred_at, metric, subject, project, api_key, delta, seq FROM usage_corrections
    WHERE tenant = :tenant AND occurred_at >= :from AND occurred_at < :to
      AND (:metric IS NULL OR metric = :metric) AND seq <= :watermark
)
ORDER BY occurred_at, seq
