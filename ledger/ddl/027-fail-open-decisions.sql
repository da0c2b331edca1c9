-- Decisions a hook made open (reason FAIL_OPEN: allowed while its ledger refused writes, recorded once it took them
-- again) are few; reconcile reports them every run, and this keeps that from reading every decision.
CREATE INDEX decision_events_made_open ON decision_events (seq) WHERE reason = 'FAIL_OPEN';
