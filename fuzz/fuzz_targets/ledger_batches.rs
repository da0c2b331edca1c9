//! Any sequence of batches (events with repeated and conflicting event_ids, rejected messages, offsets) appended
//! by two connections in turn, with reopens between, gives exactly the outcomes and `status` counts of the model of
//! deduplication forever, and a chain `verify` accepts.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use arbitrary::Arbitrary;
use ledger::{Batch, Incoming, Ledger, Origin, Rejected, SourceOffset};
use libfuzzer_sys::fuzz_target;

#[path = "../../ledger/tests/support/model.rs"]
mod model;

use model::{Draw, Model, event};

#[derive(Debug, Arbitrary)]
struct FuzzDraw {
    id: u8,
    variant: u8,
    reservation: bool,
}

#[derive(Debug, Arbitrary)]
enum Step {
    Append { draws: Vec<FuzzDraw>, rejected: u8, by_other: bool },
    Reopen,
}

/// A migrated, empty ledger, copied for each input: migrating one from nothing is most of an input's time.
fn template() -> &'static Path {
    static TEMPLATE: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    let (_, path) = TEMPLATE.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("template.db");
        drop(Ledger::open(&path).expect("a new ledger"));
        (dir, path)
    });
    path
}

fuzz_target!(|steps: Vec<Step>| {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("ledger.db");
    std::fs::copy(template(), &path).expect("a copy of the template");
    let open = |filtered: bool| {
        let mut ledger = Ledger::open(&path).expect("the ledger opens");
        if filtered {
            ledger.keep_key_filter().expect("the key filter loads");
        }
        ledger
    };
    let (mut ledger, mut other) = (open(true), open(false));
    let mut model = Model::default();
    let mut next_offset = 0i64;
    for step in steps.into_iter().take(32) {
        let (draws, rejected, by_other) = match step {
            Step::Reopen => {
                drop((ledger, other));
                (ledger, other) = (open(true), open(false));
                continue;
            }
            Step::Append { draws, rejected, by_other } => (draws, rejected % 4, by_other),
        };
        let origin = |offset: i64| Origin::Kafka { topic: "quota.usage".into(), partition: 0, offset };
        let mut batch = Batch::default();
        for d in draws.iter().take(64) {
            let draw = Draw { id: d.id % 16, variant: d.variant % 4, reservation: d.reservation };
            batch.events.push(Incoming { event: event(&draw), origin: origin(next_offset), raw: None });
            next_offset += 1;
        }
        for _ in 0..rejected {
            let error = schemas::DecodeError::TruncatedHeader { size: 3 };
            batch.rejected.push(Rejected::new(origin(next_offset), vec![0xC3, 0x01, 0x00], &error));
            next_offset += 1;
        }
        batch.offsets.push(SourceOffset { topic: "quota.usage".into(), partition: 0, next_offset });
        let expected: Vec<_> = batch.events.iter().map(|i| model.append(i.event.clone())).collect();
        model.quarantined += u64::from(rejected);
        let writer = if by_other { &mut other } else { &mut ledger };
        let report = writer.append(&batch).expect("a well-formed batch appends");
        assert_eq!(report.outcomes, expected);
        assert_eq!(report.watermark, model.watermark);
    }
    let status = ledger.status().expect("status reads");
    assert_eq!(
        (status.events_recorded, status.duplicates, status.conflicts, status.quarantined, status.watermark),
        (model.recorded, model.duplicates, model.conflicts, model.quarantined, model.watermark)
    );
    let verify = ledger.verify().expect("verify reads");
    assert_eq!(verify.first_bad, None);
    assert_eq!(verify.entries_checked, model.watermark);
});
