-- The recorded events up to a watermark (?1) of the reservation ids an event after it names, of those a fold since
-- the horizon (?2) reads (as `follow.rs`'s entries at start: happened after the horizon, or of an id whose RESERVE or
-- RENEW expires after it), in ledger order: what a state started from a snapshot at that watermark may lack of a
-- reservation the entries after it go on with (one it did not keep, or an id that an event after it made read whole).
SELECT e.seq, e.event_type, e.payload_fingerprint, e.payload
FROM reservation_events r CROSS JOIN entries e ON e.seq = r.seq
WHERE r.seq <= ?1 AND e.status = 'recorded'
  AND r.reservation_id IN (SELECT reservation_id FROM reservation_events WHERE seq > ?1)
  AND (e.occurred_at >= ?2 OR r.reservation_id IN (
        SELECT reservation_id FROM reservation_events WHERE action IN ('RESERVE', 'RENEW') AND expires_at >= ?2))
ORDER BY r.seq
