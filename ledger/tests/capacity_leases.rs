//! A capacity lease's steps are recorded like every entry: chained (verify reads their columns back against the
//! payload), kept in `capacity_lease_events`, never changed.

use ledger::{Batch, Incoming, Ledger, Origin};
use schemas::{CapacityLeaseAction, CapacityLeaseEvent, Event, Header, Timestamp};

/// A row of `capacity_lease_events`: lease, action, units, used, expiry.
type Row = (String, String, i64, Option<i64>, Option<i64>);

fn at(t: &str) -> Timestamp {
    Timestamp::parse_rfc3339(t).unwrap()
}

fn step(event_id: &str, action: CapacityLeaseAction, units: i64, used: Option<i64>, expires: Option<&str>) -> Event {
    Event::CapacityLease(CapacityLeaseEvent {
        header: Header {
            source: "allocator".into(),
            ..testkit::fixtures::header(event_id, "2026-11-02T10:00:00Z", "org-1", "requests")
        },
        capacity_lease_id: "cl-p0-1".into(),
        action,
        holder: "shard-0001".into(),
        policy_id: "hot".into(),
        policy_version: 2,
        window_start: at("2026-11-02T10:00:00Z"),
        window_end: at("2026-11-02T10:01:00Z"),
        units,
        used,
        expires_at: expires.map(at),
    })
}

// Proves a GRANT and its RETURN are recorded with their columns (read back by verify and by a plain query), and that the
// table refuses UPDATE and DELETE.
#[test]
fn lease_steps_are_recorded_chained_and_never_changed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let mut ledger = Ledger::open(&path).unwrap();
    let events = [
        step("cl-p0-1-grant", CapacityLeaseAction::GRANT, 40, None, Some("2026-11-02T10:00:10Z")),
        step("cl-p0-1-return", CapacityLeaseAction::RETURN, 15, Some(25), None),
    ];
    let events = events.map(|event| Incoming { event, origin: Origin::Local { name: "test".into() }, raw: None });
    ledger.append(&Batch { events: events.to_vec(), ..Batch::default() }).unwrap();
    let verify = ledger.verify().unwrap();
    assert_eq!((verify.first_bad, verify.entries_checked), (None, 2), "the steps are chained and read back whole");
    drop(ledger);

    let conn = rusqlite::Connection::open(&path).unwrap();
    let rows: Vec<Row> = conn
        .prepare("SELECT capacity_lease_id, action, units, used, expires_at FROM capacity_lease_events ORDER BY seq")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let expiry = at("2026-11-02T10:00:10Z").micros();
    assert_eq!(
        rows,
        [
            ("cl-p0-1".to_string(), "GRANT".to_string(), 40, None, Some(expiry)),
            ("cl-p0-1".to_string(), "RETURN".to_string(), 15, Some(25), None),
        ]
    );
    for change in ["UPDATE capacity_lease_events SET units = 1", "DELETE FROM capacity_lease_events"] {
        let refused = conn.execute_batch(change).unwrap_err().to_string();
        assert!(refused.contains("capacity_lease_events is append-only"), "{change}: {refused}");
    }
}
