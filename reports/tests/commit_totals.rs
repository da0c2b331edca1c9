//! The commit totals kept by the append hook, caught up by an export, and rebuilt from scratch agree, batch
//! after batch, including when a late event takes a COMMIT's validity back.

use std::collections::BTreeMap;

use ledger::{Batch, Incoming, Ledger, Origin, Period};
use reports::commit_totals::{self, CommitTotalsHook};
use schemas::*;

fn at(text: &str) -> Timestamp {
    Timestamp::parse_rfc3339(text).unwrap()
}

fn event(id: &str, t: &str, reservation: &str, action: ReservationAction, amount: i64) -> Incoming {
    let expires_at = (action == ReservationAction::RESERVE).then(|| Timestamp(at(t).micros() + 600_000_000));
    let event = Event::Reservation(ReservationEvent {
        header: Header {
            event_id: id.into(),
            occurred_at: at(t),
            tenant: "org-1".into(),
            subject: None,
            metric: "tokens".into(),
            source: "test".into(),
        },
        reservation_id: reservation.into(),
        action,
        amount,
        expires_at,
    });
    Incoming { event, origin: Origin::Local { name: "test".into() }, raw: None }
}

fn totals(ledger: &Ledger) -> BTreeMap<(String, String), i64> {
    commit_totals::of_period(ledger.connection(), "2026-11".parse::<Period>().unwrap()).unwrap()
}

fn rebuilt(batches: &[Vec<Incoming>]) -> BTreeMap<(String, String), i64> {
    let dir = tempfile::tempdir().unwrap();
    let mut ledger = Ledger::open(dir.path().join("plain.db")).unwrap();
    for events in batches {
        ledger.append(&Batch { events: events.clone(), ..Batch::default() }).unwrap();
    }
    let watermark = ledger.status().unwrap().watermark;
    commit_totals::catch_up(ledger.connection(), watermark).unwrap();
    totals(&ledger)
}

// Proves hook, catch-up and rebuild agree after every batch, and a late RELEASE that happened first takes a COMMIT back.
#[test]
fn hook_catch_up_and_rebuild_agree() {
    use ReservationAction::*;
    let batches = [
        vec![
            event("a-1", "2026-11-02T10:00:00Z", "a", RESERVE, 50),
            event("a-2", "2026-11-02T10:01:00Z", "a", COMMIT, 40),
        ],
        vec![
            event("b-1", "2026-11-02T11:00:00Z", "b", RESERVE, 30),
            event("b-2", "2026-11-02T11:20:00Z", "b", COMMIT, 30),
        ],
        // b's COMMIT came after its expiry (10 minutes): refused. a: a RELEASE that happened before its COMMIT.
        vec![
            event("a-3", "2026-11-02T10:00:30Z", "a", RELEASE, 0),
            event("c-2", "2026-11-03T09:01:00Z", "c", COMMIT, 7),
        ],
        vec![event("c-1", "2026-11-03T09:00:00Z", "c", RESERVE, 5)],
    ];
    let expected_after = [40, 40, 0, 7];
    let dir = tempfile::tempdir().unwrap();
    let mut hooked = Ledger::open(dir.path().join("hooked.db")).unwrap();
    hooked.set_append_hook(Box::new(CommitTotalsHook));
    let mut plain = Ledger::open(dir.path().join("plain.db")).unwrap();
    for (i, events) in batches.iter().enumerate() {
        hooked.append(&Batch { events: events.clone(), ..Batch::default() }).unwrap();
        plain.append(&Batch { events: events.clone(), ..Batch::default() }).unwrap();
        let watermark = plain.status().unwrap().watermark;
        commit_totals::catch_up(plain.connection(), watermark).unwrap();
        let expected: BTreeMap<(String, String), i64> = match expected_after[i] {
            0 => BTreeMap::new(),
            n => BTreeMap::from([(("org-1".to_string(), "tokens".to_string()), n)]),
        };
        assert_eq!(totals(&hooked), expected, "hook after batch {i}");
        assert_eq!(totals(&plain), expected, "catch-up after batch {i}");
        assert_eq!(rebuilt(&batches[..=i]), expected, "rebuild after batch {i}");
    }
}
