-- The reservation_ids with an event recorded in (?1, ?2]: the only ones whose verdict may have changed.
SELECT DISTINCT reservation_id FROM reservation_events WHERE seq > ?1 AND seq <= ?2
