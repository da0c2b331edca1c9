-- The reservations (reservation_id, tenant) with an event recorded in (:after, :watermark]: the only ones whose
-- verdict may have changed. CROSS JOIN keeps the scan on the range of reservation_events, not of every entry.
SELECT DISTINCT r.reservation_id, e.tenant
FROM reservation_events r CROSS JOIN entries e ON e.seq = r.seq
WHERE r.seq > :after AND r.seq <= :watermark
