-- Every webhook endpoint as its last change left it (registered or removed), by tenant and endpoint id.
SELECT w.tenant, w.endpoint_id, w.url, w.kinds, w.secret, w.enabled, w.from_seq, w.actor, w.reason, w.recorded_at
FROM webhook_endpoints w
WHERE w.id = (SELECT max(x.id) FROM webhook_endpoints x WHERE x.tenant = w.tenant AND x.endpoint_id = w.endpoint_id)
ORDER BY w.tenant, w.endpoint_id
