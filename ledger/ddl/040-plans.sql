-- Named plans: PlanAssignmentEvent, a tenant assigned to a plan from an instant (a plan's policies are PolicyEvents of
-- the owner `*` followed by its name, in policy_events). Append-only like every event's table.
CREATE TABLE plan_assignment_events (
    seq            INTEGER PRIMARY KEY REFERENCES entries (seq),
    plan           TEXT,                     -- null: back to the plan defaults alone
    effective_from INTEGER NOT NULL,         -- timestamp-micros
    actor          TEXT NOT NULL,
    reason         TEXT NOT NULL
);

CREATE TRIGGER plan_assignment_events_refuse_update BEFORE UPDATE ON plan_assignment_events
BEGIN SELECT RAISE(ABORT, 'plan_assignment_events is append-only: UPDATE refused (assign the plan again)'); END;
CREATE TRIGGER plan_assignment_events_refuse_delete BEFORE DELETE ON plan_assignment_events
BEGIN SELECT RAISE(ABORT, 'plan_assignment_events is append-only: DELETE refused (assign the plan again)'); END;

-- The plan a stored export row was billed under (its tenant's assignment in effect over the row's cycle). Null for a
-- row of no plan, and for every row stored before plans existed.
ALTER TABLE period_exports ADD COLUMN plan TEXT;
