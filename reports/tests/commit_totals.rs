//! The commit totals kept by the append hook, caught up by an export, and rebuilt from scratch agree, batch
//! after batch, including when a late event takes a COMMIT's validity back and when two tenants share a
//! reservation_id; and the billing scan (`billing::valid_commits`) agrees with them.

use std::collections::BTreeMap;

use ledger::{Batch, CATCH_UP_STEP_ENTRIES, Incoming, Ledger, Origin, Period};
use reports::billing;
use schemas::*;
use testkit::fixtures::at;

fn november() -> Period {
    "2026-11".parse::<Period>().unwrap()
}

/// A reservation event of org-1.
fn event(id: &str, t: &str, reservation: &str, action: ReservationAction, amount: i64) -> Incoming {
    event_of("org-1", id, t, reservation, action, amount)
}

fn event_of(tenant: &str, id: &str, t: &str, reservation: &str, action: ReservationAction, amount: i64) -> Incoming {
    let expires_at = (action == ReservationAction::RESERVE).then(|| Timestamp(at(t).micros() + 600_000_000));
    let event = Event::Reservation(ReservationEvent {
        header: Header {
            event_id: id.into(),
            occurred_at: at(t),
            tenant: tenant.into(),
            subject: None,
            metric: "tokens".into(),
            source: "test".into(),
            api_key: None,
            project: None,
        },
        reservation_id: reservation.into(),
        action,
        amount,
        expires_at,
        fencing_token: None,
    });
    Incoming { event, origin: Origin::Local { name: "test".into() }, raw: None }
}

fn append(ledger: &mut Ledger, events: &[Incoming]) {
    ledger.append(&Batch { events: events.to_vec(), ..Batch::default() }).unwrap();
}

fn totals(ledger: &Ledger) -> BTreeMap<(String, String), i64> {
    let totals = ledger.commit_totals_of_period(november()).unwrap();
    totals.into_iter().map(|t| ((t.tenant, t.metric), t.amount)).collect()
}

fn rebuilt(batches: &[Vec<Incoming>]) -> BTreeMap<(String, String), i64> {
    let dir = tempfile::tempdir().unwrap();
    let mut ledger = Ledger::open(dir.path().join("plain.db")).unwrap();
    for events in batches {
        append(&mut ledger, events);
    }
    let watermark = ledger.status().unwrap().watermark;
    ledger.catch_up_commit_totals(watermark).unwrap();
    totals(&ledger)
}

/// Totals of November's tokens per tenant, without the zeros (`commit_totals` keeps no row for them).
fn tokens(per_tenant: &[(&str, i64)]) -> BTreeMap<(String, String), i64> {
    per_tenant.iter().filter(|(_, n)| *n != 0).map(|(t, n)| ((t.to_string(), "tokens".to_string()), *n)).collect()
}

// Proves hook, catch-up, rebuild and the billing scan agree after every batch; a late RELEASE that happened first
// takes org-1's COMMIT back; a reservation is (tenant, reservation_id), so org-2's reservations under org-1's ids
// `a` and `c` are its own, and neither opens nor closes org-1's.
#[test]
fn hook_catch_up_and_rebuild_agree() {
    use ReservationAction::*;
    let batches = [
        vec![
            event("a-1", "2026-11-02T10:00:00Z", "a", RESERVE, 50),
            event_of("org-2", "a-org-2-1", "2026-11-02T10:00:10Z", "a", RESERVE, 20),
            event_of("org-2", "a-org-2-2", "2026-11-02T10:00:20Z", "a", COMMIT, 15),
            event("a-2", "2026-11-02T10:01:00Z", "a", COMMIT, 40),
        ],
        vec![
            event("b-1", "2026-11-02T11:00:00Z", "b", RESERVE, 30),
            event("b-2", "2026-11-02T11:20:00Z", "b", COMMIT, 30),
            event_of("org-2", "c-org-2-1", "2026-11-03T08:59:00Z", "c", RESERVE, 9),
        ],
        // b's COMMIT came after its expiry (10 minutes): refused. a: a RELEASE that happened before its COMMIT.
        // c: org-1's COMMIT has no RESERVE of org-1 yet (org-2's does not count).
        vec![
            event("a-3", "2026-11-02T10:00:30Z", "a", RELEASE, 0),
            event("c-2", "2026-11-03T09:01:00Z", "c", COMMIT, 7),
        ],
        vec![event("c-1", "2026-11-03T09:00:00Z", "c", RESERVE, 5)],
    ];
    let expected_after = [[40, 15], [40, 15], [0, 15], [7, 15]];
    let dir = tempfile::tempdir().unwrap();
    let mut hooked = Ledger::open(dir.path().join("hooked.db")).unwrap();
    hooked.keep_commit_totals();
    let mut plain = Ledger::open(dir.path().join("plain.db")).unwrap();
    for (i, events) in batches.iter().enumerate() {
        append(&mut hooked, events);
        append(&mut plain, events);
        let watermark = plain.status().unwrap().watermark;
        plain.catch_up_commit_totals(watermark).unwrap();
        let [org_1, org_2] = expected_after[i];
        let expected = tokens(&[("org-1", org_1), ("org-2", org_2)]);
        assert_eq!(totals(&hooked), expected, "hook after batch {i}");
        assert_eq!(totals(&plain), expected, "catch-up after batch {i}");
        assert_eq!(rebuilt(&batches[..=i]), expected, "rebuild after batch {i}");
        let scanned = billing::valid_commits(&plain, november(), watermark).unwrap();
        assert_eq!(scanned, expected, "billing scan after batch {i}");
    }
}

// Proves migration 013 rebuilds totals kept while reservations were grouped by reservation_id alone, so that a
// later event of such a reservation neither keeps the old verdict nor takes back one never added.
#[test]
fn totals_kept_by_reservation_id_alone_are_rebuilt_by_the_migration() {
    use ReservationAction::*;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hooked.db");
    let mut ledger = Ledger::open(&path).unwrap();
    ledger.keep_commit_totals();
    append(
        &mut ledger,
        &[
            event_of("org-a", "a-res", "2026-11-10T10:00:00Z", "r-1", RESERVE, 100),
            event_of("org-b", "b-res", "2026-11-10T10:01:00Z", "r-1", RESERVE, 50),
            event_of("org-b", "b-com", "2026-11-10T10:02:00Z", "r-1", COMMIT, 40),
            event_of("org-a", "a-com", "2026-11-10T10:03:00Z", "r-1", COMMIT, 90),
        ],
    );
    assert_eq!(totals(&ledger), tokens(&[("org-a", 90), ("org-b", 40)]));
    // What a binary before migration 013 left: one reservation r-1, closed by org-b's COMMIT, org-a's refused
    // (and no column of migration 014 or 022, no table of 019, which run again).
    drop(ledger);
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(
            "DROP TABLE capacity_lease_events; DROP TABLE meter_events; ALTER TABLE period_exports DROP COLUMN plan; DROP TABLE plan_assignment_events; DROP TABLE hook_snapshots; DROP TABLE reconcile_checkpoint; DROP TABLE usage_corrections; DROP TABLE correction_events; DROP TABLE webhook_attempts; DROP TABLE webhook_endpoints; ALTER TABLE policy_events DROP COLUMN alert_subject_share; ALTER TABLE policy_events DROP COLUMN alert_thresholds;
             DROP TABLE alert_events; ALTER TABLE period_exports DROP COLUMN cycle_end; ALTER TABLE period_exports DROP COLUMN cycle_start;
             ALTER TABLE policy_events DROP COLUMN cycle_anchor; ALTER TABLE policy_events DROP COLUMN window_seconds; ALTER TABLE entries DROP COLUMN api_key; ALTER TABLE entries DROP COLUMN project;
             ALTER TABLE policy_events DROP COLUMN violation; ALTER TABLE policy_events DROP COLUMN overage_window; ALTER TABLE policy_events DROP COLUMN overage_rate; DROP INDEX decision_events_made_open; ALTER TABLE policy_events DROP COLUMN on_failure;
             DROP INDEX reservation_events_of_leases; ALTER TABLE reservation_events DROP COLUMN fencing_token; ALTER TABLE policy_events DROP COLUMN time_zone; ALTER TABLE policy_events DROP COLUMN actor; ALTER TABLE policy_events DROP COLUMN reason;
             ALTER TABLE grant_events DROP COLUMN actor;
             DROP TABLE forwarded; DROP TABLE shard_identity;
             DROP TABLE chain_links; DROP TABLE ledger_identity; DROP TABLE offset_gaps;
             DROP INDEX quarantine_replays_by_link; ALTER TABLE quarantine_replays DROP COLUMN link;
             DELETE FROM commit_totals;
             INSERT INTO commit_totals (tenant, metric, period, amount) VALUES ('org-b', 'tokens', '2026-11', 40);
             ALTER TABLE adjustment_events DROP COLUMN scope;
             PRAGMA user_version = 12;",
        )
        .unwrap();
    let mut ledger = Ledger::open(&path).unwrap();
    ledger.keep_commit_totals();
    // Refused (org-a's r-1 is closed already): it changes no verdict, but makes the catch-up judge org-a's r-1.
    append(&mut ledger, &[event_of("org-a", "a-rel", "2026-11-10T10:05:00Z", "r-1", RELEASE, 0)]);
    assert_eq!(totals(&ledger), tokens(&[("org-a", 90), ("org-b", 40)]));
    // A RELEASE that happened before org-a's COMMIT takes it back, and only org-a's.
    append(&mut ledger, &[event_of("org-a", "a-rel-first", "2026-11-10T10:02:30Z", "r-1", RELEASE, 0)]);
    assert_eq!(totals(&ledger), tokens(&[("org-b", 40)]));
}

// Proves a catch-up in steps (short write transactions, so that the hook waits for one at most) ends where one
// catch-up ends: reservations whose events straddle the steps (a RESERVE in one, its COMMIT in the next; a COMMIT
// before its RESERVE; a late RELEASE that happened first and takes a COMMIT back) are judged again in each.
#[test]
fn a_catch_up_in_steps_ends_where_one_catch_up_ends() {
    use ReservationAction::*;
    let step = CATCH_UP_STEP_ENTRIES as usize;
    let count = step + step / 2;
    let reserves: Vec<Incoming> =
        (0..count).map(|i| event(&format!("r-{i}"), "2026-11-02T10:00:00Z", &format!("x{i}"), RESERVE, 9)).collect();
    let mut later: Vec<Incoming> = (0..count)
        .map(|i| event(&format!("c-{i}"), "2026-11-02T10:01:00Z", &format!("x{i}"), COMMIT, (i % 7) as i64))
        .collect();
    later.push(event("early-commit", "2026-11-02T10:05:00Z", "y", COMMIT, 11));
    later.push(event("early-release", "2026-11-02T10:00:30Z", "x3", RELEASE, 0));
    let last = vec![event("late-reserve", "2026-11-02T10:04:00Z", "y", RESERVE, 11)];
    let batches = [reserves, later, last];

    let dir = tempfile::tempdir().unwrap();
    let mut ledger = Ledger::open(dir.path().join("steps.db")).unwrap();
    for events in &batches {
        append(&mut ledger, events);
    }
    let steps = ledger.catch_up_commit_totals_in_steps().unwrap();
    assert_eq!(steps, 3, "{} entries, steps of {step}, the last {step} or fewer left to the export", 2 * count + 3);
    let watermark = ledger.status().unwrap().watermark;
    ledger.catch_up_commit_totals(watermark).unwrap();
    let expected = rebuilt(&batches);
    assert_eq!(totals(&ledger), expected);
    // x3's COMMIT of 3 % 7 = 3 taken back by its earlier RELEASE.
    let all: i64 = (0..count as i64).map(|i| i % 7).sum::<i64>() - 3 + 11;
    assert_eq!(expected, tokens(&[("org-1", all)]), "x3 released first; y's early COMMIT valid");
}

// Proves an append that finds the totals far behind (serve keeps none) catches up one step of them, not all: the
// first ingest after a busy day of the hook judged every reservation of the day inside its append. The rest is
// caught up by the appends after it and by exports, which end where one catch-up ends.
#[test]
fn an_append_catches_up_one_step_of_what_it_finds_behind() {
    use ReservationAction::*;
    let step = CATCH_UP_STEP_ENTRIES;
    let count = step as usize + 10;
    let served: Vec<Incoming> = (0..count)
        .flat_map(|i| {
            let id = format!("s{i}");
            [
                event(&format!("{id}-r"), "2026-11-02T10:00:00Z", &id, RESERVE, 5),
                event(&format!("{id}-c"), "2026-11-02T10:01:00Z", &id, COMMIT, 2),
            ]
        })
        .collect();
    let ingested = vec![
        event("i-r", "2026-11-03T10:00:00Z", "i", RESERVE, 5),
        event("i-c", "2026-11-03T10:01:00Z", "i", COMMIT, 3),
    ];
    let dir = tempfile::tempdir().unwrap();
    let mut ledger = Ledger::open(dir.path().join("behind.db")).unwrap();
    append(&mut ledger, &served);
    ledger.keep_commit_totals();
    append(&mut ledger, &ingested);
    let through = ledger.commit_totals_through().unwrap();
    assert_eq!(through, step, "one step of the {} entries behind", 2 * count + 2);
    append(&mut ledger, &[event("j-r", "2026-11-04T10:00:00Z", "j", RESERVE, 1)]);
    let watermark = ledger.status().unwrap().watermark;
    ledger.catch_up_commit_totals(watermark).unwrap();
    assert_eq!(totals(&ledger), tokens(&[("org-1", 2 * count as i64 + 3)]));
    assert_eq!(
        totals(&ledger),
        rebuilt(&[served, ingested, vec![event("j-r", "2026-11-04T10:00:00Z", "j", RESERVE, 1)]])
    );
}
