//! The use cases on real ledger files, as the binary, `serve` and the demo call them: a change recorded and judged
//! against what the ledger holds, a reconcile run recorded once, a close carrying late usage, a set of shards closed
//! part way refused, and a backup restored.

use control::PolicyChange;
use ledger::shards::ShardDir;
use ledger::{Batch, Incoming, Ledger, Origin, Period};
use schemas::*;
use testkit::fixtures::at;
use usecases::Store;
use usecases::billing::BillingAsked;
use usecases::change::Destination;
use usecases::run::RunSettings;

fn month(text: &str) -> Period {
    text.parse().unwrap()
}

fn usage(id: &str, tenant: &str, t: &str, quantity: i64) -> Incoming {
    let header = Header {
        event_id: id.into(),
        occurred_at: at(t),
        tenant: tenant.into(),
        subject: None,
        metric: "tokens".into(),
        source: "test".into(),
        api_key: None,
        project: None,
    };
    let event = Event::Usage(UsageEvent { header, quantity, request_id: None, attributes: Default::default() });
    Incoming { event, origin: Origin::Local { name: "test".into() }, raw: None }
}

fn append(ledger: &mut Ledger, events: Vec<Incoming>) {
    ledger.append(&Batch { events, ..Batch::default() }).unwrap();
}

/// A HARD monthly limit of `limit` tokens for `tenant`, from October.
fn hard(tenant: &str, limit: i64) -> PolicyChange {
    PolicyChange {
        tenant: tenant.into(),
        metric: "tokens".into(),
        limit,
        window: Window::MONTH,
        enforcement: Enforcement::HARD,
        scope: Scope::TENANT,
        policy_id: None,
        version: None,
        effective_from: Some(at("2026-10-01T00:00:00Z")),
        time_zone: None,
        on_failure: None,
        overage: None,
        violation: None,
        window_seconds: None,
        cycle_anchor: None,
        alert_thresholds: None,
        alert_subject_share: None,
        actor: "ops@example.com".into(),
        reason: "test".into(),
        source: "usecases test".into(),
    }
}

fn run_as_of(store: &Store, as_of: &str, dry_run: bool) -> usecases::run::Run {
    let settings = RunSettings { as_of: at(as_of), open_alert_after_s: 3_600, dry_run, full: false, publish: None };
    usecases::run::run(store, &settings, &mut |_| {}).unwrap()
}

// Proves a change is recorded, read back, and judged against what is recorded: the second is version 2.
#[test]
fn a_policy_change_is_recorded_and_versioned() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::File(dir.path().join("ledger.db"));
    let first = usecases::change::set_policy(&store, &hard("org-1", 10), &Destination::Ledger).unwrap();
    assert_eq!(first.event.version, 1);
    assert!(first.written.starts_with("recorded at ledger seq"), "{}", first.written);
    let second = usecases::change::set_policy(&store, &hard("org-1", 20), &Destination::Ledger).unwrap();
    assert_eq!((second.event.version, second.event.limit), (2, 20));
    assert_eq!(usecases::change::recorded(&store).unwrap().history(&first.event.policy_id).len(), 2);
}

// Proves a dry run records nothing, a run records the overshoot of a HARD limit once, and a rerun as of the same
// instant finds nothing more: the ledger's adjustments are deltas toward the truth.
#[test]
fn a_run_records_its_adjustments_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let store = Store::File(path.clone());
    usecases::change::set_policy(&store, &hard("org-1", 10), &Destination::Ledger).unwrap();
    let mut ledger = Ledger::open(&path).unwrap();
    append(&mut ledger, vec![usage("u-1", "org-1", "2026-10-05T10:00:00Z", 15)]);
    drop(ledger);
    let dry = run_as_of(&store, "2026-11-01T00:00:00Z", true);
    let overshoot = |run: &usecases::run::Run| {
        run.plan.adjustments.iter().filter(|a| a.kind == AdjustmentKind::OVERSHOOT).map(|a| a.amount).sum::<i64>()
    };
    assert_eq!(overshoot(&dry), 5, "{:?}", dry.plan.adjustments);
    let run = run_as_of(&store, "2026-11-01T00:00:00Z", false);
    assert_eq!(overshoot(&run), 5, "the dry run recorded nothing");
    assert!(!run.plan.is_clean());
    let json = serde_json::to_value(usecases::run::run_json(&run, false)).unwrap();
    assert_eq!(json["adjustments_written"], serde_json::json!(run.plan.adjustments.len()));
    let again = run_as_of(&store, "2026-11-01T00:00:00Z", false);
    assert!(again.plan.is_clean(), "{:?}", again.plan.adjustments);
    let mut words = Vec::new();
    usecases::run::write_report(&mut words, &again, false).unwrap();
    assert!(String::from_utf8(words).unwrap().contains("clean: nothing to adjust"));
}

// Proves a close carries the usage that arrived late for a month closed before it: recorded by the close itself, in
// the bill it stores, and the closed month's export does not move.
#[test]
fn a_close_carries_late_usage() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let store = Store::File(path.clone());
    let mut ledger = Ledger::open(&path).unwrap();
    append(&mut ledger, vec![usage("u-1", "org-1", "2026-10-05T10:00:00Z", 3)]);
    drop(ledger);
    let close = |period: &str| BillingAsked { period: month(period), close: true, by_project: false };
    let october = usecases::billing::export(&store, close("2026-10")).unwrap();
    assert_eq!(october.late_usage_recorded, 0);
    let mut ledger = Ledger::open(&path).unwrap();
    append(&mut ledger, vec![usage("u-late", "org-1", "2026-10-30T10:00:00Z", 4)]);
    drop(ledger);
    let november = usecases::billing::export(&store, close("2026-11")).unwrap();
    assert_eq!(november.late_usage_recorded, 1);
    let row = november.export.rows.iter().find(|r| r.tenant == "org-1").expect("org-1 billed in November");
    assert_eq!(row.late_adjustments, 4, "{row:?}");
    let open = BillingAsked { period: month("2026-10"), close: false, by_project: false };
    let again = usecases::billing::export(&store, open).unwrap();
    assert_eq!(again.export.rows, october.export.rows, "a closed month's bill never moves");
}

// Proves a set of shards closed in some shards only (a close stopped part way) is refused a preview, naming them, and
// that closing again closes the rest.
#[test]
fn a_set_closed_part_way_is_refused_until_closed_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let shards = ShardDir::new(dir.path());
    let mut ledgers = shards.open_set(Some(2)).unwrap();
    for (index, ledger) in ledgers.iter_mut().enumerate() {
        let tenant = (0..).map(|n| format!("org-{n}")).find(|t| partition::partition_of(t, 2) == index as u32).unwrap();
        append(ledger, vec![usage(&format!("u-{tenant}"), &tenant, "2026-10-05T10:00:00Z", 3)]);
    }
    usecases::close::close(&mut ledgers[0], month("2026-10")).unwrap();
    drop(ledgers);
    let store = Store::Shards(shards);
    let asked = |close| BillingAsked { period: month("2026-10"), close, by_project: false };
    let refused = usecases::billing::export(&store, asked(false)).unwrap_err().to_string();
    assert!(refused.contains("closed in shards [0] of 2"), "{refused}");
    let closed = usecases::billing::export(&store, asked(true)).unwrap();
    assert_eq!(closed.export.rows.len(), 2);
    assert_eq!(closed.shard_notes.len(), 2);
    usecases::billing::export(&store, asked(false)).unwrap();
}

// Proves a backup restores into a new ledger holding the same chain, and that restore never overwrites one.
#[test]
fn a_backup_restores_and_never_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let mut ledger = Ledger::open(&path).unwrap();
    append(&mut ledger, vec![usage("u-1", "org-1", "2026-10-05T10:00:00Z", 3)]);
    let head = ledger.head().unwrap();
    drop(ledger);
    let copy = dir.path().join("copy.db");
    let manifests = usecases::backup::backup(&Store::File(path.clone()), &copy).unwrap();
    assert_eq!(manifests[0].head_seq, head.seq);
    let restored = dir.path().join("restored.db");
    let reports = usecases::backup::restore(&copy, &Store::File(restored.clone())).unwrap();
    assert!(reports[0].verify.first_bad.is_none(), "{:?}", reports[0].verify);
    assert_eq!(Ledger::open_read_only(&restored).unwrap().head().unwrap(), head);
    usecases::backup::restore(&copy, &Store::File(path)).unwrap_err();
}
