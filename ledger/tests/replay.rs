//! `quarantine replay` of a large quarantine: in chunks of `REPLAYED_PER_TRANSACTION`, each its own transaction, so
//! that another writer (`serve`) gets the lock between two chunks, and memory holds one chunk's messages.

use std::collections::{BTreeMap, BTreeSet};

use ledger::{Batch, Ledger, Origin, REPLAYED_PER_TRANSACTION, Rejected};
use schemas::{Event, Header, Timestamp, UsageEvent};

fn quarantined_message(ledger: &Ledger, n: usize) -> Rejected {
    let event = Event::Usage(UsageEvent {
        header: Header {
            event_id: format!("u-{n}"),
            occurred_at: Timestamp::parse_rfc3339("2026-11-02T00:00:00Z").unwrap(),
            tenant: "org-1".into(),
            subject: None,
            metric: "requests".into(),
            source: "replay-test".into(),
            api_key: None,
            project: None,
        },
        quantity: 1,
        request_id: None,
        attributes: BTreeMap::new(),
    });
    Rejected {
        origin: Origin::Kafka { topic: "quota.usage".into(), partition: 0, offset: n as i64 },
        raw: ledger.catalog().encode_single_object(&event),
        // As an older build's rule quarantined it; the replay decodes it with today's.
        reason_code: "rule_since_corrected".into(),
        reason: "a rule since corrected".into(),
    }
}

fn transactions(ledger: &Ledger) -> u64 {
    ledger.status().unwrap().batches
}

// Proves a replay records every message once, a transaction per chunk of `REPLAYED_PER_TRANSACTION`, with ids given or
// not, and that a second replay finds nothing left.
#[test]
fn a_large_quarantine_is_replayed_a_chunk_per_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let mut ledger = Ledger::open(dir.path().join("ledger.db")).unwrap();
    let messages = 2 * REPLAYED_PER_TRANSACTION + 3;
    let rejected = (0..messages).map(|n| quarantined_message(&ledger, n)).collect();
    ledger.append(&Batch { rejected, ..Batch::default() }).unwrap();
    let any = |_: &Origin| Ok(None);

    let before = transactions(&ledger);
    let chosen = ledger.replay_quarantined(&[5, messages as i64, 5], any).unwrap();
    assert_eq!((chosen.examined, chosen.recorded), (2, 2), "{chosen:?}");
    assert_eq!(transactions(&ledger) - before, 1);

    let before = transactions(&ledger);
    let rest = ledger.replay_quarantined(&[], any).unwrap();
    assert_eq!((rest.examined, rest.recorded, rest.duplicates), (messages as u64 - 2, messages as u64 - 2, 0));
    assert!(rest.still_quarantined.is_empty(), "{:?}", rest.still_quarantined.first());
    assert_eq!(transactions(&ledger) - before, 3, "10,000, 10,000 and 1");
    assert_eq!(rest.watermark, messages as u64);

    let again = ledger.replay_quarantined(&[], any).unwrap();
    assert_eq!((again.examined, again.recorded), (0, 0));
    let quarantined = ledger.quarantined().unwrap();
    let replayed: BTreeSet<i64> = quarantined.iter().filter(|m| m.replayed.is_some()).map(|m| m.id).collect();
    assert_eq!(replayed.len(), messages);
}
