//! `Ledger::append_unless_conflicting`, the append of writers whose refused change must leave nothing behind (the
//! control plane): a batch with an event that meets a recorded one of another payload writes nothing at all.

use ledger::{AppendError, AppendOutcome, Batch, Incoming, Ledger, Origin};
use schemas::{Event, Header, Timestamp, UsageEvent};

fn usage(event_id: &str, quantity: i64) -> Incoming {
    let event = Event::Usage(UsageEvent {
        header: Header {
            event_id: event_id.into(),
            occurred_at: Timestamp::parse_rfc3339("2026-11-02T10:00:00Z").unwrap(),
            tenant: "org-1".into(),
            subject: None,
            metric: "requests".into(),
            source: "api".into(),
            api_key: None,
            project: None,
        },
        quantity,
        request_id: None,
        attributes: Default::default(),
    });
    Incoming { event, origin: Origin::Local { name: "test".into() }, raw: None }
}

fn batch(events: Vec<Incoming>) -> Batch {
    Batch { events, ..Batch::default() }
}

// Proves a conflicting copy refuses its whole batch, its new events too, and the ledger is as it was; while exact
// copies and new events are recorded as `append` records them.
#[test]
fn a_conflicting_copy_refuses_the_whole_batch_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut ledger = Ledger::open(dir.path().join("ledger.db")).unwrap();
    ledger.append(&batch(vec![usage("u-1", 3)])).unwrap();
    let before = ledger.status().unwrap();

    let refused = ledger.append_unless_conflicting(&batch(vec![usage("u-2", 1), usage("u-1", 4)])).unwrap_err();
    assert!(matches!(&refused, AppendError::Conflicting { event_id, of: 1 } if event_id == "u-1"), "{refused:?}");
    let after = ledger.status().unwrap();
    assert_eq!(
        (after.watermark, after.events_recorded, after.conflicts, after.duplicates, after.batches),
        (before.watermark, before.events_recorded, before.conflicts, before.duplicates, before.batches),
        "nothing of the batch written"
    );

    let report = ledger.append_unless_conflicting(&batch(vec![usage("u-2", 1), usage("u-1", 3)])).unwrap();
    assert_eq!(report.outcomes, [AppendOutcome::Recorded { seq: 2 }, AppendOutcome::Duplicate { of: 1 }]);
    let verified = ledger.verify().unwrap();
    assert_eq!((verified.first_bad, verified.watermark), (None, 2), "the chain holds over what was recorded");
}
