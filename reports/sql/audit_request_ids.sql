-- Every request_id that has a decision, for the nearest matches of an unknown one (DataFusion).
SELECT request_id FROM decision_events WHERE status = 'recorded'
