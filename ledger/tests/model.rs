//! Model test: random sequences of batches with duplicates and conflicting duplicates give exactly the
//! outcomes and `status` counts of a simple in-memory model of deduplication forever. Two connections append
//! in turn, as the enforcement hook (keeping the key filter) and ingest (not) do on one ledger file: the
//! filter must never hide an entry the other appended. An incremental verify from the head after any batch agrees
//! with the full verify at the end.

use ledger::{AppendOutcome, Batch, Incoming, Ledger, Origin, Rejected, SourceOffset};
use proptest::prelude::*;

mod support;

use support::model::{Draw, Model, event};

#[derive(Debug, Clone)]
enum Step {
    Append {
        draws: Vec<Draw>,
        rejected: u8,
        /// Appended by the second connection, which keeps no key filter.
        by_other: bool,
    },
    /// Close and reopen the ledger file: nothing may depend on memory.
    Reopen,
}

fn draw() -> impl Strategy<Value = Draw> {
    (0u8..12, 0u8..3, prop::bool::weighted(0.2)).prop_map(|(id, variant, reservation)| Draw {
        id,
        variant,
        reservation,
    })
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => (prop::collection::vec(draw(), 0..25), 0u8..3, prop::bool::weighted(0.3))
            .prop_map(|(draws, rejected, by_other)| Step::Append { draws, rejected, by_other }),
        1 => Just(Step::Reopen),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn ledger_agrees_with_the_model(steps in prop::collection::vec(step(), 1..16)) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        let open = |filtered: bool| {
            let mut ledger = Ledger::open(&path).unwrap();
            if filtered {
                ledger.keep_key_filter().unwrap();
            }
            ledger
        };
        let (mut ledger, mut other) = (open(true), open(false));
        let mut model = Model::default();
        let mut next_offset = 0i64;
        let mut heads = Vec::new();
        for step in steps {
            let (draws, rejected, by_other) = match step {
                Step::Reopen => {
                    drop((ledger, other));
                    (ledger, other) = (open(true), open(false));
                    continue;
                }
                Step::Append { draws, rejected, by_other } => (draws, rejected, by_other),
            };
            let origin = |offset: i64| Origin::Kafka { topic: "quota.usage".into(), partition: 0, offset };
            let mut batch = Batch::default();
            for draw in &draws {
                batch.events.push(Incoming { event: event(draw), origin: origin(next_offset), raw: None });
                next_offset += 1;
            }
            for _ in 0..rejected {
                let error = schemas::DecodeError::TruncatedHeader { size: 3 };
                batch.rejected.push(Rejected::new(origin(next_offset), vec![0xC3, 0x01, 0x00], &error));
                next_offset += 1;
            }
            batch.offsets.push(SourceOffset { topic: "quota.usage".into(), partition: 0, next_offset });
            let expected: Vec<AppendOutcome> = batch.events.iter().map(|i| model.append(i.event.clone())).collect();
            model.quarantined += u64::from(rejected);
            let writer = if by_other { &mut other } else { &mut ledger };
            let report = writer.append(&batch).unwrap();
            prop_assert_eq!(report.outcomes, expected);
            prop_assert_eq!(report.watermark, model.watermark);
            heads.push(ledger.head().unwrap());
        }
        let status = ledger.status().unwrap();
        prop_assert_eq!(status.events_recorded, model.recorded);
        prop_assert_eq!(status.duplicates, model.duplicates);
        prop_assert_eq!(status.conflicts, model.conflicts);
        prop_assert_eq!(status.quarantined, model.quarantined);
        prop_assert_eq!(status.watermark, model.watermark);
        let offsets = if next_offset == 0 && status.offsets.is_empty() { vec![] } else {
            vec![SourceOffset { topic: "quota.usage".into(), partition: 0, next_offset }]
        };
        prop_assert_eq!(status.offsets, offsets);
        let verify = ledger.verify().unwrap();
        prop_assert_eq!(verify.first_bad, None);
        prop_assert_eq!(verify.entries_checked, model.watermark);
        for since in &heads {
            let incremental = ledger.verify_since(since, &[]).unwrap();
            prop_assert_eq!(&incremental.first_bad, &None);
            prop_assert_eq!(&incremental.first_bad_checkpoint, &None);
            prop_assert_eq!(
                (incremental.entries_checked, incremental.watermark, incremental.head_seq, &incremental.head_hash),
                (verify.entries_checked, verify.watermark, verify.head_seq, &verify.head_hash)
            );
        }
    }
}
