-- The usage events of a tenant (:tenant) and metric (:metric) with occurred_at in [:from, :until), up to a watermark
-- (:watermark), in event time then ledger order, as a meter reads them: the subject, project and API key each names and
-- what it counts after the corrections recorded up to the watermark (its quantity plus their deltas); an event a VOID
-- ended is left out (it counts for no aggregation, not even COUNT).
SELECT e.occurred_at, e.seq, e.subject, e.project, e.api_key,
       u.quantity + COALESCE((
           SELECT SUM(c.delta) FROM usage_corrections c WHERE c.original_seq = e.seq AND c.seq <= :watermark
       ), 0)
FROM entries e INDEXED BY entries_by_tenant CROSS JOIN usage_events u ON u.seq = e.seq
WHERE e.tenant = :tenant AND e.metric = :metric AND e.occurred_at >= :from AND e.occurred_at < :until
  AND e.event_type = 'UsageEvent' AND e.seq <= :watermark AND e.status = 'recorded'
  AND NOT EXISTS (
      SELECT 1 FROM usage_corrections c JOIN correction_events d ON d.seq = c.seq
      WHERE c.original_seq = e.seq AND c.seq <= :watermark AND d.action = 'VOID'
  )
ORDER BY e.occurred_at, e.seq
