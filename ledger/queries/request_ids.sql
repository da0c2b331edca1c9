-- The request_id of every recorded decision up to a watermark (:watermark), for the nearest matches of an unknown
-- one: a scan of every decision.
SELECT d.request_id
FROM decision_events d CROSS JOIN entries e ON e.seq = d.seq
WHERE d.seq <= :watermark AND e.status = 'recorded'
