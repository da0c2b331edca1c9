-- PolicyEvent v4 names the IANA time zone of a policy's calendar windows. Null (UTC) for older producers and for
-- policies recorded before this migration, which were all UTC.
ALTER TABLE policy_events ADD COLUMN time_zone TEXT;
