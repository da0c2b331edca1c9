-- The plan defaults a ledger records (PolicyEvents of tenant `*`, the recorded copy of each event_id) with the hash of
-- the payload it counts, by event_id: what `status` counts and digests, so that the shards of a set can be compared
-- (each must hold every plan default, contract §9.4). Read through the tenant index.
SELECT event_id, payload_hash FROM entries
WHERE tenant = '*' AND event_type = 'PolicyEvent' AND status = 'recorded'
ORDER BY event_id
