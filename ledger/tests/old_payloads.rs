//! An event recorded under an older version of its type's schema (before a field was added) and delivered again after
//! the upgrade (an outbox entry still pending, a topic replayed) is the exact duplicate it is, not a conflicting copy.

use apache_avro::types::Value;
use ledger::{AppendOutcome, Batch, Incoming, Ledger, Origin};
use schemas::{Catalog, Event, EventType, Header, Timestamp, UsageEvent};

fn usage() -> Event {
    Event::Usage(UsageEvent {
        header: Header {
            event_id: "u-1".into(),
            occurred_at: Timestamp::parse_rfc3339("2026-11-02T10:00:00Z").unwrap(),
            tenant: "org-1".into(),
            subject: None,
            metric: "requests".into(),
            source: "api".into(),
            api_key: None,
            project: None,
        },
        quantity: 3,
        request_id: None,
        attributes: Default::default(),
    })
}

fn append(ledger: &mut Ledger, event: Event) -> AppendOutcome {
    let incoming = Incoming { event, origin: Origin::Local { name: "test".into() }, raw: None };
    ledger.append(&Batch { events: vec![incoming], ..Batch::default() }).unwrap().outcomes[0]
}

#[test]
fn a_copy_of_an_event_recorded_under_an_older_schema_is_an_exact_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let mut ledger = Ledger::open(&path).unwrap();
    assert_eq!(append(&mut ledger, usage()), AppendOutcome::Recorded { seq: 1 });
    drop(ledger);

    // What an older binary recorded: the payload under UsageEvent v1 (no request_id, no attributes), with v1's
    // fingerprint, written behind the ledger's back as that binary would have written it.
    let catalog = Catalog::builtin();
    let v1 = catalog.schemas().iter().find(|s| s.event_type == EventType::UsageEvent && !s.current).unwrap();
    let Value::Record(fields) = schemas::avro::to_value(&usage()) else { panic!("an event is a record") };
    let kept = ["event_id", "occurred_at", "tenant", "subject", "metric", "source", "quantity"];
    let fields = fields.into_iter().filter(|(name, _)| kept.contains(&name.as_str())).collect();
    let mut body = Vec::new();
    apache_avro::writer::datum::GenericDatumWriter::builder(&v1.schema)
        .build()
        .unwrap()
        .write_value_ref(&mut body, &Value::Record(fields))
        .unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch("DROP TRIGGER entries_refuse_update").unwrap();
    let hash = sha256(&body);
    conn.execute(
        "UPDATE entries SET payload = ?1, payload_fingerprint = ?2, payload_hash = ?3 WHERE seq = 1",
        rusqlite::params![body, v1.fingerprint as i64, hash],
    )
    .unwrap();
    drop(conn);

    let mut ledger = Ledger::open(&path).unwrap();
    assert_eq!(append(&mut ledger, usage()), AppendOutcome::Duplicate { of: 1 }, "the same event, delivered again");
    let Event::Usage(mut changed) = usage() else { unreachable!() };
    changed.quantity = 4;
    assert_eq!(
        append(&mut ledger, Event::Usage(changed)),
        AppendOutcome::ConflictingDuplicate { seq: 2, of: 1 },
        "another payload under the same id still conflicts"
    );
}

fn sha256(bytes: &[u8]) -> Vec<u8> {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).to_vec()
}
