-- The entry_hash of one entry: what a snapshot of the hook's state is tied to.
SELECT entry_hash FROM entries WHERE seq = ?1
