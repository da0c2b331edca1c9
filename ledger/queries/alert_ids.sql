-- The ids of every recorded alert: what reconcile leaves out of the alerts it finds, so that an alert is written once
-- by whichever writer found it first. alert_events is small (a few rows per window and policy).
SELECT a.alert_id FROM alert_events a CROSS JOIN entries e ON e.seq = a.seq WHERE e.status = 'recorded'
