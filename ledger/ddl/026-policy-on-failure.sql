-- PolicyEvent v6 says what the hook answers when the ledger cannot record its decisions. Null (CLOSED) for older
-- producers and for policies recorded before this migration, which all failed closed.
ALTER TABLE policy_events ADD COLUMN on_failure TEXT;
