//! The ids of changes against a real ledger file: one tenant's change never takes the event id another tenant's
//! change is derived to (names and ids may hold `/`), and a change the ledger refuses records nothing.

use control::{GrantChange, PolicyChange, RecordError, Recorded, grant_event, policy_event, record};
use ledger::Ledger;
use schemas::{Enforcement, Event, Scope, Window};
use testkit::fixtures::at;

fn grant(tenant: &str, grant_id: &str, amount: i64) -> GrantChange {
    GrantChange {
        tenant: tenant.into(),
        subject: None,
        project: None,
        api_key: None,
        metric: "tokens".into(),
        amount,
        valid_from: at("2026-12-01T00:00:00Z"),
        valid_until: at("2027-01-01T00:00:00Z"),
        grant_id: Some(grant_id.into()),
        actor: format!("admin of {tenant}"),
        reason: "credit".into(),
        source: "test".into(),
    }
}

fn policy(tenant: &str, metric: &str, policy_id: Option<&str>, limit: i64) -> PolicyChange {
    PolicyChange {
        tenant: tenant.into(),
        metric: metric.into(),
        limit,
        window: Window::DAY,
        enforcement: Enforcement::HARD,
        scope: Scope::TENANT,
        policy_id: policy_id.map(String::from),
        version: None,
        effective_from: None,
        time_zone: None,
        on_failure: None,
        overage: None,
        violation: None,
        window_seconds: None,
        cycle_anchor: None,
        alert_thresholds: None,
        alert_subject_share: None,
        actor: format!("admin of {tenant}"),
        reason: "plan".into(),
        source: "test".into(),
    }
}

/// A ledger file in a directory of its own, removed with it.
fn ledger() -> (tempfile::TempDir, Ledger) {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path().join("ledger.db")).unwrap();
    (dir, ledger)
}

/// Judges `change` against what the ledger holds now and records it, as `grant add` and the admin endpoint do.
fn add_grant(ledger: &mut Ledger, change: &GrantChange) -> Result<Vec<u64>, RecordError> {
    let recorded = Recorded::read([&*ledger]).unwrap();
    let event = grant_event(change, &recorded, at("2026-12-04T10:00:00Z")).unwrap();
    record(std::slice::from_mut(ledger), &Event::Grant(event))
}

/// Judges `change` against what the ledger holds now and records it, as `policy set` and the admin endpoint do.
fn set_policy(ledger: &mut Ledger, change: &PolicyChange) -> Result<Vec<u64>, RecordError> {
    let recorded = Recorded::read([&*ledger]).unwrap();
    let event = policy_event(change, &recorded, at("2026-12-04T10:00:00Z")).unwrap();
    record(std::slice::from_mut(ledger), &Event::Policy(event))
}

fn conflicts(ledger: &Ledger) -> u64 {
    ledger.status().unwrap().conflicts
}

// Proves tenant iso's admin cannot block tenant iso/b's grant credit-7 by recording grant b/credit-7 first: both are
// recorded, and the ledger holds no conflicting copy.
#[test]
fn a_grant_id_with_a_slash_does_not_take_another_tenants_grant() {
    let (_dir, mut ledger) = ledger();
    add_grant(&mut ledger, &grant("iso", "b/credit-7", 1_000_000)).expect("iso's own grant");
    add_grant(&mut ledger, &grant("iso/b", "credit-7", 10)).expect("iso/b's grant is its own");
    assert_eq!(conflicts(&ledger), 0);
    let grants = ledger.grants().unwrap();
    let of = |tenant: &str| grants[&(tenant.to_string(), "tokens".to_string())].iter().map(|g| g.amount).sum::<i64>();
    assert_eq!((of("iso"), of("iso/b")), (1_000_000, 10));
}

// Proves tenant iso's admin cannot take the next version of tenant iso/b's default policy (a metric and a policy id
// spelling the rest of its event id): each is recorded as version 1 of its own policy, with no conflicting copy.
#[test]
fn a_policy_with_slashes_does_not_take_another_tenants_version() {
    let (_dir, mut ledger) = ledger();
    set_policy(&mut ledger, &policy("iso", "b", Some("tokens/iso/b:tokens:tenant:day"), 0)).expect("iso's own");
    set_policy(&mut ledger, &policy("iso/b", "tokens", None, 100)).expect("iso/b's default policy is its own");
    assert_eq!(conflicts(&ledger), 0);
    assert_eq!(
        versions(&ledger),
        [owner("iso", "tokens/iso/b:tokens:tenant:day", 0), owner("iso/b", "iso/b:tokens:tenant:day", 100)]
    );
}

// Proves the admin of a tenant named */api cannot take the version of a plan default of metric api/requests: each
// is recorded as version 1 of its own policy, with no conflicting copy.
#[test]
fn a_tenant_with_a_slash_does_not_take_a_plan_defaults_version() {
    let (_dir, mut ledger) = ledger();
    set_policy(&mut ledger, &policy("*/api", "requests", Some("*:api/requests:tenant:day"), 0)).expect("*/api's own");
    set_policy(&mut ledger, &policy("*", "api/requests", None, 50)).expect("the plan default is its own");
    assert_eq!(conflicts(&ledger), 0);
    assert_eq!(
        versions(&ledger),
        [owner("*/api", "*:api/requests:tenant:day", 0), owner("*", "*:api/requests:tenant:day", 50)]
    );
}

/// Every policy version recorded, in ledger order: its owner, policy id, version and limit.
fn versions(ledger: &Ledger) -> Vec<(String, String, i32, i64)> {
    let policies = ledger.policies().unwrap();
    policies.into_iter().map(|p| (p.header.tenant, p.policy_id, p.version, p.limit)).collect()
}

fn owner(tenant: &str, policy_id: &str, limit: i64) -> (String, String, i32, i64) {
    (tenant.to_string(), policy_id.to_string(), 1, limit)
}

// Proves a change the ledger refuses records nothing: a grant and a policy version judged before another writer
// recorded the same ones (a `grant add` racing the admin endpoint) are refused as conflicting, and the ledger holds
// no copy of them.
#[test]
fn a_change_refused_as_conflicting_records_nothing() {
    let (_dir, mut ledger) = ledger();
    let before_either = Recorded::read([&ledger]).unwrap();
    let now = at("2026-12-04T10:00:00Z");
    add_grant(&mut ledger, &grant("iso/b", "credit-7", 10)).expect("the first writer's grant");
    set_policy(&mut ledger, &policy("iso/b", "tokens", None, 100)).expect("the first writer's version");
    let watermark = ledger.watermark().unwrap();

    let late_grant = grant_event(&grant("iso/b", "credit-7", 20), &before_either, now).unwrap();
    let refused = record(std::slice::from_mut(&mut ledger), &Event::Grant(late_grant)).unwrap_err();
    assert!(matches!(refused, RecordError::Conflicting { .. }), "{refused:?}");
    let late_version = policy_event(&policy("iso/b", "tokens", None, 200), &before_either, now).unwrap();
    let refused = record(std::slice::from_mut(&mut ledger), &Event::Policy(late_version)).unwrap_err();
    assert!(matches!(refused, RecordError::Conflicting { .. }), "{refused:?}");

    assert_eq!((ledger.watermark().unwrap(), conflicts(&ledger)), (watermark, 0), "nothing recorded");
}
