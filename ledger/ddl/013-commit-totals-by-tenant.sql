-- A reservation is identified by (tenant, reservation_id) from this version on (README "Reconciliation"). The
-- commit totals were judged with reservations grouped by reservation_id alone: where two tenants shared an id
-- they hold the old verdicts. A catch-up only adds the difference between a reservation's verdicts before and
-- after the events it reads, so they would stay wrong, and where a later event changes a verdict the catch-up
-- would take back one never added (a total below zero, refused by its assertion inside the append). They are
-- derived data: emptied here and rebuilt whole by the next catch-up (the next append with the reports' hook, or
-- the next export), which judges every reservation once.
DELETE FROM commit_totals;

DROP TRIGGER commit_totals_state_only_forward;
UPDATE commit_totals_state SET through_seq = 0 WHERE id = 1;
CREATE TRIGGER commit_totals_state_only_forward BEFORE UPDATE ON commit_totals_state
WHEN NEW.through_seq < OLD.through_seq
BEGIN SELECT RAISE(ABORT, 'commit_totals_state only moves forward'); END;
