-- The watermark of the latest snapshot of the hook's state, without its body: what decides whether a new one is due.
SELECT MAX(watermark) FROM hook_snapshots
