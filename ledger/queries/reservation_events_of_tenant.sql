-- Every recorded reservation event of a tenant (:tenant), of one metric (:metric) or of all (:metric null), up to a
-- watermark (:watermark), one reservation after another (by reservation_id, then in ledger order).
-- `entries_by_tenant` holds the tenant's entries with their type and metric.
SELECT e.seq, e.event_id, e.occurred_at, e.tenant, e.subject, e.metric, e.source,
       r.reservation_id, r.action, r.amount, r.expires_at, r.fencing_token, e.project, e.api_key
FROM entries e INDEXED BY entries_by_tenant CROSS JOIN reservation_events r ON r.seq = e.seq
WHERE e.tenant = :tenant AND e.event_type = 'ReservationEvent' AND (:metric IS NULL OR e.metric = :metric)
  AND e.seq <= :watermark AND e.status = 'recorded'
ORDER BY r.reservation_id, e.seq
