//! The reads reconcile judges windows from give the project and API key each entry names: the usage stream, and the
//! summaries of recorded adjustments (whose header names the member of a PROJECT or API_KEY window).

use ledger::{Batch, Incoming, Ledger, Origin};
use schemas::{AdjustmentEvent, AdjustmentKind, Event, Header, Scope, Timestamp, UsageEvent};

fn header(event_id: &str, project: Option<&str>, api_key: Option<&str>) -> Header {
    Header {
        subject: Some("user-1".into()),
        project: project.map(String::from),
        api_key: api_key.map(String::from),
        ..testkit::fixtures::header(event_id, "2026-11-02T10:00:00Z", "org-1", "requests")
    }
}

fn usage(event_id: &str, project: Option<&str>, api_key: Option<&str>) -> Event {
    Event::Usage(UsageEvent {
        header: header(event_id, project, api_key),
        quantity: 3,
        request_id: None,
        attributes: Default::default(),
    })
}

#[test]
fn usage_rows_and_adjustment_summaries_name_project_and_api_key() {
    let dir = tempfile::tempdir().unwrap();
    let mut ledger = Ledger::open(dir.path().join("ledger.db")).unwrap();
    let adjustment = Event::Adjustment(AdjustmentEvent {
        header: Header { source: "reconcile".into(), subject: None, ..header("adj-1", Some("p-1"), None) },
        adjustment_id: "adj-1".into(),
        kind: AdjustmentKind::OVERSHOOT,
        policy_id: Some("per-project".into()),
        window_start: Some(Timestamp::parse_rfc3339("2026-11-02T00:00:00Z").unwrap()),
        window_end: Some(Timestamp::parse_rfc3339("2026-11-03T00:00:00Z").unwrap()),
        amount: 2,
        refs: vec!["u-1".into()],
        run_id: "run".into(),
        scope: Some(Scope::PROJECT),
    });
    let events = [usage("u-1", Some("p-1"), Some("key-1")), usage("u-2", None, None), adjustment];
    let events = events.map(|event| Incoming { event, origin: Origin::Local { name: "test".into() }, raw: None });
    ledger.append(&Batch { events: events.to_vec(), ..Batch::default() }).unwrap();

    let mut rows = Vec::new();
    ledger
        .for_each_usage(|row| {
            rows.push((
                row.event_id.to_string(),
                row.subject.map(String::from),
                row.project.map(String::from),
                row.api_key.map(String::from),
            ));
        })
        .unwrap();
    let named = |s: &str| Some(s.to_string());
    assert_eq!(
        rows,
        [
            ("u-1".to_string(), named("user-1"), named("p-1"), named("key-1")),
            ("u-2".to_string(), named("user-1"), None, None),
        ]
    );

    let mut summaries = Vec::new();
    ledger.adjustment_summaries(|s| summaries.push(s)).unwrap();
    assert_eq!(summaries.len(), 1);
    let (summary, who) = (&summaries[0], &summaries[0].who);
    assert_eq!(
        (summary.scope, who.subject.as_deref(), who.project.as_deref(), who.api_key.as_deref()),
        (Some(Scope::PROJECT), None, Some("p-1"), None)
    );
}
