-- ReservationEvent v2 carries a lease's fencing token (a slot of a CONCURRENT policy); null for reservations of an
-- amount, for older producers and for every event recorded before this migration.
ALTER TABLE reservation_events ADD COLUMN fencing_token INTEGER;
