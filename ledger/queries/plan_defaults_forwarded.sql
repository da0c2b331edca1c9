-- How many plan-default messages this shard read without the mark of a copy and forwarded to every other partition
-- (contract §9.4): one `forwarded` row per copy sent, a message named by where it was read.
SELECT COUNT(*) FROM (SELECT DISTINCT topic, partition, offset FROM forwarded WHERE tenant = '*')
