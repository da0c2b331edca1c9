//! Which policy versions apply to a tenant's consumption at an instant (contract §5 "Policy in force").
//!
//! For each policy_id on its own, and each window kind its versions use: the window of that kind containing the
//! instant is a window of the policy when the version in force for it (the greatest (`effective_from`,
//! `version`) whose `effective_from` is before the window's end) has that kind. Whether a window is the
//! policy's, and under which version, so depends on the window alone, never on the instant inside it: every
//! event of a window is judged under the same version, whatever order they arrive in. A version that changes the
//! window kind mid-month (MONTH to DAY on the 15th) governs the whole month: the month is not a MONTH window of
//! the policy, and neither are the days before the 15th DAY windows of it (the version in force for each of them
//! is the MONTH one); a DAY to MONTH change makes the month a MONTH window, beside the DAY windows before the
//! change. A policy of tenant `*` is the plan default: it applies to a tenant with no policy of its own in force
//! for the same metric, scope and window. Choices where the contract is silent: "of its own" means in force for that
//! window, so a tenant policy that only starts next month leaves this month to the plan default; and a policy of
//! its own covers only plan defaults of its kind ([`covers`]): a quota (no `burst`) only quotas, a throttle (a
//! `burst`, this project's extension, which contract §3 does not know) only throttles. A tenant's own SHADOW quota
//! covers as any quota does: a trial of a policy for that tenant.
//!
//! A window is also of a time zone (PolicyEvent v4 `time_zone`, UTC when none): the window of a version is the
//! window of its kind in its zone's calendar that contains the instant. A version that changes the zone changes
//! the policy's windows as a change of kind does: each window, of the old zone or the new, is the policy's when the
//! version in force for it (effective before its end) has that kind and that zone's window there, so the old
//! zone's window in which the change falls stays the policy's beside the new zone's first. Two zones whose windows
//! are the same instants there (UTC and Etc/UTC, or Europe/London in winter) give one window, not two.
//!
//! A gauge quota (PolicyEvent v8 `violation`) limits a tenant's level of its metric, not consumption: a version that
//! makes a policy a gauge ends its windows of consumption as a change of kind does, and [`PolicyIndex::gauges`]
//! finds the gauges in force at an instant, of every metric, since a gauge over its limit refuses requests of any.

use std::collections::BTreeMap;

use schemas::{PlanAssignmentEvent, PolicyEvent, Scope, Timestamp, Tz, Window};

use crate::{cycle, window};

pub use schemas::partition::PLAN_DEFAULT_TENANT;

/// A policy version that applies, with the window it applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applicable<'a> {
    /// The version in force.
    pub policy: &'a PolicyEvent,
    /// The start of the window of the policy's kind, in its time zone's calendar, that contains the instant asked
    /// about.
    pub window_start: Timestamp,
    /// Its end (exclusive).
    pub window_end: Timestamp,
    /// Whether it applies as a plan's, not the tenant's own: the plan defaults' (`*`), or the named plan's the tenant
    /// is assigned (its policy's tenant, `*pro`, says which).
    pub plan_default: bool,
}

/// The window kinds, shortest first: those of quotas and throttles. CONCURRENT policies limit leases, not
/// consumption in a window: [`Candidates::concurrent`] finds them, and nothing that judges windows ever sees one.
const KINDS: [Window; 4] = [Window::MINUTE, Window::HOUR, Window::DAY, Window::MONTH];

fn kind_bit(kind: Window) -> u8 {
    match kind {
        Window::MINUTE => 1,
        Window::HOUR => 2,
        Window::DAY => 4,
        Window::MONTH => 8,
        Window::CONCURRENT => 16,
        Window::ROLLING => 32,
        Window::BILLING_CYCLE => 64,
    }
}

/// The versions of one policy_id in force at `at`: for each window its versions use (a kind in a zone), the window
/// containing `at` with the version in force for it, when that version has that window there (see the module's
/// words). On a tie of (`effective_from`, `version`) the later in `versions` wins.
pub fn in_force<'a>(versions: &[&'a PolicyEvent], at: Timestamp) -> Vec<Applicable<'a>> {
    let mut found = Vec::new();
    for kind in KINDS {
        let mut windows: Vec<(Timestamp, Timestamp)> = Vec::new();
        for p in versions.iter().filter(|p| p.window == kind) {
            let (start, end) = window::bounds_in(kind, p.zone(), at);
            if windows.contains(&(start, end)) {
                continue;
            }
            windows.push((start, end));
            let governing = versions
                .iter()
                .filter(|p| p.effective_from < end)
                .max_by_key(|p| (p.effective_from, p.version))
                .filter(|p| p.window == kind && !p.is_gauge() && window::bounds_in(kind, p.zone(), at) == (start, end));
            found.extend(governing.map(|p| Applicable {
                policy: p,
                window_start: start,
                window_end: end,
                plan_default: false,
            }));
        }
    }
    if versions.iter().any(|p| p.window == Window::ROLLING) {
        let governing =
            versions.iter().filter(|p| p.effective_from <= at).max_by_key(|p| (p.effective_from, p.version));
        found.extend(governing.and_then(|p| rolling_window(p, at)));
    }
    found.extend(cycle_window(versions.iter().copied(), at));
    found
}

/// The BILLING_CYCLE window of one policy_id's `versions` at `at` (PolicyEvent v11), when the version in force for it
/// is a BILLING_CYCLE quota: the cycle containing `at` of the schedule its BILLING_CYCLE versions make
/// ([`cycle::Schedule`]: each anchor from the next boundary of the cycles in force when its version takes effect),
/// under the version in force for that cycle (effective before its end), as for any window. A version that changes
/// only the limit governs the whole cycle it falls in, as a mid-month upgrade governs the month.
fn cycle_window<'a>(versions: impl Iterator<Item = &'a PolicyEvent> + Clone, at: Timestamp) -> Option<Applicable<'a>> {
    cycle_window_of(&cycle_schedule(versions.clone())?, versions, at)
}

/// [`cycle_window`] with the versions' schedule made already.
fn cycle_window_of<'a>(
    schedule: &cycle::Schedule,
    versions: impl Iterator<Item = &'a PolicyEvent>,
    at: Timestamp,
) -> Option<Applicable<'a>> {
    let (window_start, window_end) = schedule.bounds(at);
    let governing = versions.filter(|p| p.effective_from < window_end).max_by_key(|p| (p.effective_from, p.version));
    let policy = governing.filter(|p| p.window == Window::BILLING_CYCLE && !p.is_gauge())?;
    Some(Applicable { policy, window_start, window_end, plan_default: false })
}

/// The ROLLING window of `p` at `at`, when `p` is the version in force at `at` and a ROLLING quota: the version in
/// force for the window ending with `at` is the last effective by then, as for any window (effective before its end).
fn rolling_window(p: &PolicyEvent, at: Timestamp) -> Option<Applicable<'_>> {
    let length = p.rolling_micros().filter(|_| !p.is_gauge())?;
    let (window_start, window_end) = window::rolling(length, at);
    Some(Applicable { policy: p, window_start, window_end, plan_default: false })
}

/// The schedule of billing cycles of one policy_id's `versions` (contract §5 "Billing cycles"): its BILLING_CYCLE
/// versions' anchors in order of (`effective_from`, `version`), whatever order they were recorded in. None without one.
pub fn cycle_schedule<'a>(versions: impl Iterator<Item = &'a PolicyEvent>) -> Option<cycle::Schedule> {
    let mut anchored: Vec<&PolicyEvent> = versions.filter(|p| p.cycle_anchor.is_some()).collect();
    anchored.sort_by_key(|p| (p.effective_from, p.version));
    let changes: Vec<(Timestamp, cycle::Anchor)> = anchored
        .iter()
        .filter_map(|p| p.cycle_anchor.map(|anchor| (p.effective_from, cycle::Anchor { at: anchor, zone: p.zone() })))
        .collect();
    cycle::Schedule::new(&changes)
}

/// Whether a tenant's own policy `own` covers the plan default `default` of the same metric (contract §3: "no policy
/// of its own for the same metric, scope and window"): the same scope and window, and the same kind. A throttle
/// limits a rate and a quota an allowance, so neither stands in for the other: a tenant's own throttle covering
/// the plan's quota made the plan's HARD quota go unenforced and its SOFT quota unbilled for that tenant.
pub fn covers(own: &PolicyEvent, default: &PolicyEvent) -> bool {
    (own.scope, own.window, own.is_throttle(), own.is_gauge())
        == (default.scope, default.window, default.is_throttle(), default.is_gauge())
}

/// Every policy version that applies to `tenant`'s consumption of `metric` at `at`: its own policies in force,
/// then the plan defaults it has none of its own covering ([`covers`]). Sorted by policy_id.
pub fn applicable<'a>(policies: &'a [PolicyEvent], tenant: &str, metric: &str, at: Timestamp) -> Vec<Applicable<'a>> {
    let in_force_of = |owner: &str| -> Vec<Applicable<'a>> {
        let mut by_id: BTreeMap<&str, Vec<&'a PolicyEvent>> = BTreeMap::new();
        for p in policies.iter().filter(|p| p.header.tenant == owner && p.header.metric == metric) {
            by_id.entry(p.policy_id.as_str()).or_default().push(p);
        }
        by_id.values().flat_map(|versions| in_force(versions, at)).collect()
    };
    let own = in_force_of(tenant);
    let defaults = in_force_of(PLAN_DEFAULT_TENANT)
        .into_iter()
        .filter(|a| !own.iter().any(|o| covers(o.policy, a.policy)))
        .map(|a| Applicable { plan_default: true, ..a })
        .collect::<Vec<_>>();
    let mut all: Vec<Applicable<'a>> = own.into_iter().chain(defaults).collect();
    all.sort_by(|a, b| a.policy.policy_id.cmp(&b.policy.policy_id));
    all
}

#[cfg(test)]
mod tests {
    use schemas::{Enforcement, Header, Violation, Window};

    use super::*;
    use testkit::fixtures::at;

    fn policy(tenant: &str, id: &str, version: i32, limit: i64, window: Window, effective_from: &str) -> PolicyEvent {
        PolicyEvent {
            version,
            ..PolicyEvent::new(
                Header {
                    event_id: format!("{id}-v{version}"),
                    occurred_at: at(effective_from),
                    tenant: tenant.into(),
                    subject: None,
                    metric: "requests".into(),
                    source: "test".into(),
                    api_key: None,
                    project: None,
                },
                id,
                limit,
                window,
                Enforcement::HARD,
                at(effective_from),
            )
        }
    }

    fn assignment(tenant: &str, plan: Option<&str>, effective_from: &str, n: u32) -> PlanAssignmentEvent {
        PlanAssignmentEvent {
            header: Header {
                event_id: format!("assign-{tenant}-{n}"),
                occurred_at: at(effective_from),
                tenant: tenant.into(),
                subject: None,
                metric: "*".into(),
                source: "test".into(),
                api_key: None,
                project: None,
            },
            plan: plan.map(str::to_string),
            effective_from: at(effective_from),
            actor: "ops".into(),
            reason: "test".into(),
        }
    }

    // Named plans: a tenant moved from free to pro on Nov 20 is under free's monthly quota from Nov 1 to Nov 20 and under
    // pro's from Nov 20 to Dec 1, each window clipped to the plan's span; a tenant's own quota covers its plan's, and
    // its plan's the plan default's; a tenant with no assignment, or assigned none, keeps the plan default.
    #[test]
    fn a_plan_applies_from_its_assignment_until_the_next() {
        let policies = vec![
            policy("*", "default", 1, 10, Window::MONTH, "2026-01-01T00:00:00Z"),
            policy("*free", "free:requests", 1, 100, Window::MONTH, "2026-01-01T00:00:00Z"),
            policy("*pro", "pro:requests", 1, 1_000, Window::MONTH, "2026-01-01T00:00:00Z"),
            policy("*pro", "pro:requests:day", 1, 50, Window::DAY, "2026-01-01T00:00:00Z"),
            policy("org-own", "own", 1, 5, Window::MONTH, "2026-01-01T00:00:00Z"),
        ];
        let assignments = [
            assignment("org-1", Some("free"), "2026-11-01T00:00:00Z", 1),
            assignment("org-1", Some("pro"), "2026-11-20T12:00:00Z", 2),
            assignment("org-own", Some("pro"), "2026-11-01T00:00:00Z", 1),
            assignment("org-none", Some("pro"), "2026-10-01T00:00:00Z", 1),
            assignment("org-none", None, "2026-11-01T00:00:00Z", 2),
        ];
        let index = PolicyIndex::new(policies).with_assignments(&assignments);
        let found = |tenant: &str, t: &str| {
            index
                .applicable(tenant, "requests", at(t))
                .iter()
                .map(|a| (a.policy.policy_id.clone(), a.window_start, a.window_end))
                .collect::<Vec<_>>()
        };
        let (nov, change, dec) = (at("2026-11-01T00:00:00Z"), at("2026-11-20T12:00:00Z"), at("2026-12-01T00:00:00Z"));
        assert_eq!(found("org-1", "2026-11-10T00:00:00Z"), [("free:requests".to_string(), nov, change)]);
        assert_eq!(
            found("org-1", "2026-11-20T13:00:00Z"),
            [
                ("pro:requests".to_string(), change, dec),
                ("pro:requests:day".to_string(), change, at("2026-11-21T00:00:00Z")),
            ]
        );
        assert_eq!(found("org-1", "2026-10-10T00:00:00Z"), [("default".to_string(), at("2026-10-01T00:00:00Z"), nov)]);
        assert_eq!(
            found("org-own", "2026-11-10T00:00:00Z"),
            [
                ("own".to_string(), nov, dec),
                ("pro:requests:day".to_string(), at("2026-11-10T00:00:00Z"), at("2026-11-11T00:00:00Z"))
            ]
        );
        assert_eq!(found("org-none", "2026-11-10T00:00:00Z"), [("default".to_string(), nov, dec)]);
        assert_eq!(found("org-2", "2026-11-10T00:00:00Z"), [("default".to_string(), nov, dec)]);
        assert_eq!(
            index.plan_at("org-1", at("2026-11-25T00:00:00Z")).and_then(|s| s.assignment.plan.clone()),
            Some("pro".into())
        );
    }

    fn limits(applicable: &[Applicable<'_>]) -> Vec<(String, i64, bool)> {
        applicable.iter().map(|a| (a.policy.policy_id.clone(), a.policy.limit, a.plan_default)).collect()
    }

    // contract §5 "Policy in force": a version effective mid-window governs the whole window; one effective after it does not.
    // Proves a policy's billing cycles follow its versions in order of (effective_from, version), whatever order they
    // were recorded in: of two versions effective at the same instant, version 1's anchor (the 1st, New York) runs
    // back and version 2's (the 4th, Sydney) takes effect at version 1's next boundary.
    #[test]
    fn cycles_follow_the_versions_order_not_the_ledgers() {
        let cycle = |version: i32, anchor: &str, zone: &str| PolicyEvent {
            cycle_anchor: Some(at(anchor)),
            time_zone: Some(zone.into()),
            ..policy("org-b", "p", version, 5, Window::BILLING_CYCLE, "2026-09-14T10:00:00Z")
        };
        let v1 = cycle(1, "2026-10-01T04:00:00Z", "America/New_York");
        let v2 = cycle(2, "2026-09-03T14:00:00Z", "Australia/Sydney");
        for recorded in [vec![&v1, &v2], vec![&v2, &v1]] {
            let found = in_force(&recorded, at("2026-09-20T00:00:00Z"));
            let window = found.iter().map(|a| (a.policy.version, a.window_start, a.window_end)).collect::<Vec<_>>();
            assert_eq!(window, [(2, at("2026-09-01T04:00:00Z"), at("2026-10-01T04:00:00Z"))], "New York's cycle");
            let after = in_force(&recorded, at("2026-10-02T00:00:00Z"));
            let window = after.iter().map(|a| (a.window_start, a.window_end)).collect::<Vec<_>>();
            assert_eq!(window, [(at("2026-10-01T04:00:00Z"), at("2026-10-03T14:00:00Z"))], "then Sydney's, short");
        }
    }

    #[test]
    fn the_version_effective_before_the_window_end_governs_it() {
        let policies = [
            policy("org-1", "p", 1, 100, Window::MONTH, "2026-10-01T00:00:00Z"),
            policy("org-1", "p", 2, 200, Window::MONTH, "2026-11-15T00:00:00Z"),
            policy("org-1", "p", 3, 300, Window::MONTH, "2026-12-01T00:00:00Z"),
        ];
        let november = applicable(&policies, "org-1", "requests", at("2026-11-03T00:00:00Z"));
        assert_eq!(limits(&november), [("p".into(), 200, false)]);
        let december = applicable(&policies, "org-1", "requests", at("2026-12-03T00:00:00Z"));
        assert_eq!(limits(&december), [("p".into(), 300, false)]);
        let october = applicable(&policies, "org-1", "requests", at("2026-10-03T00:00:00Z"));
        assert_eq!(limits(&october), [("p".into(), 100, false)]);
    }

    fn windows(applicable: &[Applicable<'_>]) -> Vec<(String, i32, Window, Timestamp, bool)> {
        applicable
            .iter()
            .map(|a| (a.policy.policy_id.clone(), a.policy.version, a.policy.window, a.window_start, a.plan_default))
            .collect()
    }

    // contract §5 per window: a version that changes the window kind mid-month governs every window whose end it is
    // effective before. MONTH to DAY on the 15th: November is no MONTH window of the policy (its version in force is
    // the DAY one) and the days before the 15th no DAY windows of it (theirs is the MONTH one), so the plan's MONTH
    // quota covers the tenant for the whole month, and the policy's DAY windows start on the 15th. Picked by the
    // instant instead, the month would be the policy's MONTH window until the 15th and the plan's after, each
    // summing part of November, and billing and the hook could each read a third answer.
    #[test]
    fn a_window_kind_change_governs_every_window_it_is_in_force_for() {
        let policies = [
            policy("*", "plan", 1, 60, Window::MONTH, "2026-01-01T00:00:00Z"),
            policy("org-1", "p", 1, 1_000, Window::MONTH, "2026-10-01T00:00:00Z"),
            policy("org-1", "p", 2, 50, Window::DAY, "2026-11-15T00:00:00Z"),
            policy("org-2", "q", 1, 50, Window::DAY, "2026-10-01T00:00:00Z"),
            policy("org-2", "q", 2, 1_000, Window::MONTH, "2026-11-15T00:00:00Z"),
        ];
        let index = PolicyIndex::new(policies.to_vec());
        let check = |tenant: &str, t: &str, expected: Vec<(String, i32, Window, Timestamp, bool)>| {
            let found = applicable(&policies, tenant, "requests", at(t));
            assert_eq!(windows(&found), expected, "{tenant} at {t}");
            assert_eq!(index.applicable(tenant, "requests", at(t)), found, "the index agrees, {tenant} at {t}");
        };
        let november = at("2026-11-01T00:00:00Z");
        for t in ["2026-11-01T00:00:00Z", "2026-11-03T12:00:00Z", "2026-11-14T23:59:59Z"] {
            check("org-1", t, vec![("plan".into(), 1, Window::MONTH, november, true)]);
        }
        check(
            "org-1",
            "2026-11-20T08:00:00Z",
            vec![
                ("p".into(), 2, Window::DAY, at("2026-11-20T00:00:00Z"), false),
                ("plan".into(), 1, Window::MONTH, november, true),
            ],
        );
        check("org-1", "2026-10-20T08:00:00Z", vec![("p".into(), 1, Window::MONTH, at("2026-10-01T00:00:00Z"), false)]);
        // DAY to MONTH on the 15th: the days before it stay DAY windows, and the whole month is the MONTH window.
        check(
            "org-2",
            "2026-11-03T12:00:00Z",
            vec![
                ("q".into(), 1, Window::DAY, at("2026-11-03T00:00:00Z"), false),
                ("q".into(), 2, Window::MONTH, november, false),
            ],
        );
        check("org-2", "2026-11-20T08:00:00Z", vec![("q".into(), 2, Window::MONTH, november, false)]);
    }

    // contract §5: equal effective_from, the greater version wins; each policy_id is evaluated on its own.
    #[test]
    fn ties_go_to_the_greater_version_and_ids_are_separate() {
        let policies = [
            policy("org-1", "p", 1, 100, Window::DAY, "2026-11-01T00:00:00Z"),
            policy("org-1", "p", 2, 150, Window::DAY, "2026-11-01T00:00:00Z"),
            policy("org-1", "q", 1, 999, Window::HOUR, "2026-11-01T00:00:00Z"),
        ];
        let found = applicable(&policies, "org-1", "requests", at("2026-11-02T10:00:00Z"));
        assert_eq!(limits(&found), [("p".into(), 150, false), ("q".into(), 999, false)]);
    }

    // contract §3: the `*` plan default applies to a tenant without its own policy for the same metric, scope and window.
    #[test]
    fn plan_defaults_fill_in_only_where_the_tenant_has_none() {
        let policies = [
            policy("*", "plan", 1, 1_000, Window::MONTH, "2026-01-01T00:00:00Z"),
            policy("*", "plan-daily", 1, 50, Window::DAY, "2026-01-01T00:00:00Z"),
            policy("org-1", "own", 1, 5_000, Window::MONTH, "2026-01-01T00:00:00Z"),
        ];
        let t = at("2026-11-02T10:00:00Z");
        assert_eq!(
            limits(&applicable(&policies, "org-1", "requests", t)),
            [("own".into(), 5_000, false), ("plan-daily".into(), 50, true)]
        );
        assert_eq!(
            limits(&applicable(&policies, "org-2", "requests", t)),
            [("plan".into(), 1_000, true), ("plan-daily".into(), 50, true)]
        );
        assert!(applicable(&policies, "org-2", "tokens", t).is_empty(), "another metric has no policy");
    }

    // Choice where the contract is silent (contract §3 knows no throttles): a tenant's own throttle covers only the plan's
    // throttles, its own quota only the plan's quotas, of the same scope and window; a SHADOW quota of its own covers
    // the plan's quota (a trial of a policy for that tenant). An own MONTH throttle hid the plan's MONTH quota.
    #[test]
    fn own_policies_cover_only_plan_defaults_of_their_kind() {
        let throttle = |p: PolicyEvent| PolicyEvent { burst: Some(50), ..p };
        let from = "2026-01-01T00:00:00Z";
        let policies = [
            policy("*", "plan-quota", 1, 1_000, Window::MONTH, from),
            throttle(policy("*", "plan-rate", 1, 100, Window::DAY, from)),
            throttle(policy("org-1", "own-rate", 1, 10, Window::MONTH, from)),
            policy("org-1", "own-quota", 1, 500, Window::DAY, from),
            throttle(policy("org-2", "own-rate", 1, 20, Window::DAY, from)),
            PolicyEvent { enforcement: Enforcement::SHADOW, ..policy("org-2", "trial", 1, 5, Window::MONTH, from) },
        ];
        let t = at("2026-11-02T10:00:00Z");
        assert_eq!(
            limits(&applicable(&policies, "org-1", "requests", t)),
            [
                ("own-quota".into(), 500, false),
                ("own-rate".into(), 10, false),
                ("plan-quota".into(), 1_000, true),
                ("plan-rate".into(), 100, true)
            ]
        );
        assert_eq!(
            limits(&applicable(&policies, "org-2", "requests", t)),
            [("own-rate".into(), 20, false), ("trial".into(), 5, false)]
        );
        let index = PolicyIndex::new(policies.to_vec());
        for tenant in ["org-1", "org-2"] {
            assert_eq!(index.applicable(tenant, "requests", t), applicable(&policies, tenant, "requests", t));
        }
    }

    // Proves a policy's windows are its time zone's: a DAY in New York is the local day containing the instant.
    #[test]
    fn windows_are_the_zones_calendar() {
        let zoned = |p: PolicyEvent, zone: &str| PolicyEvent { time_zone: Some(zone.into()), ..p };
        let policies = [
            zoned(policy("org-1", "daily", 1, 100, Window::DAY, "2026-01-01T00:00:00Z"), "America/New_York"),
            zoned(policy("org-1", "hourly", 1, 10, Window::HOUR, "2026-01-01T00:00:00Z"), "Asia/Kolkata"),
        ];
        // 23:30 on the 16th in New York: the local day started at 05:00 UTC on the 16th.
        let found = applicable(&policies, "org-1", "requests", at("2026-11-17T04:30:00Z"));
        let windows: Vec<(Timestamp, Timestamp)> = found.iter().map(|a| (a.window_start, a.window_end)).collect();
        assert_eq!(
            windows,
            [
                (at("2026-11-16T05:00:00Z"), at("2026-11-17T05:00:00Z")),
                (at("2026-11-17T04:30:00Z"), at("2026-11-17T05:30:00Z")),
            ]
        );
        assert_eq!(
            PolicyIndex::new(policies.to_vec()).applicable("org-1", "requests", at("2026-11-17T04:30:00Z")),
            found
        );
        let found = applicable(&policies, "org-1", "requests", at("2026-11-17T05:30:00Z"));
        assert_eq!(found[0].window_start, at("2026-11-17T05:00:00Z"), "00:30 the next day is the next local day");
    }

    // Proves a version that changes the zone changes the windows as a change of kind does: the old zone's window the
    // change falls in stays the policy's, beside the new zone's windows ending after the change; and a zone spelled
    // otherwise with the same windows (Etc/UTC for none) gives one window, not two.
    #[test]
    fn a_zone_change_governs_every_window_it_is_in_force_for() {
        let zoned = |p: PolicyEvent, zone: &str| PolicyEvent { time_zone: Some(zone.into()), ..p };
        let policies = [
            policy("org-1", "p", 1, 100, Window::DAY, "2026-01-01T00:00:00Z"),
            zoned(policy("org-1", "p", 2, 200, Window::DAY, "2026-11-15T00:00:00Z"), "America/New_York"),
            policy("org-2", "q", 1, 100, Window::DAY, "2026-01-01T00:00:00Z"),
            zoned(policy("org-2", "q", 2, 200, Window::DAY, "2026-11-15T00:00:00Z"), "Etc/UTC"),
        ];
        let index = PolicyIndex::new(policies.to_vec());
        let check = |tenant: &str, t: &str, expected: Vec<(i32, &str, &str)>| {
            let found = applicable(&policies, tenant, "requests", at(t));
            let windows: Vec<(i32, Timestamp, Timestamp)> =
                found.iter().map(|a| (a.policy.version, a.window_start, a.window_end)).collect();
            let expected: Vec<(i32, Timestamp, Timestamp)> =
                expected.into_iter().map(|(v, start, end)| (v, at(start), at(end))).collect();
            assert_eq!(windows, expected, "{tenant} at {t}");
            assert_eq!(index.applicable(tenant, "requests", at(t)), found, "the index agrees, {tenant} at {t}");
        };
        check("org-1", "2026-11-14T03:00:00Z", vec![(1, "2026-11-14T00:00:00Z", "2026-11-15T00:00:00Z")]);
        check(
            "org-1",
            "2026-11-14T22:00:00Z",
            vec![
                (1, "2026-11-14T00:00:00Z", "2026-11-15T00:00:00Z"),
                (2, "2026-11-14T05:00:00Z", "2026-11-15T05:00:00Z"),
            ],
        );
        check("org-1", "2026-11-15T03:00:00Z", vec![(2, "2026-11-14T05:00:00Z", "2026-11-15T05:00:00Z")]);
        check("org-1", "2026-11-20T12:00:00Z", vec![(2, "2026-11-20T05:00:00Z", "2026-11-21T05:00:00Z")]);
        check("org-2", "2026-11-14T22:00:00Z", vec![(1, "2026-11-14T00:00:00Z", "2026-11-15T00:00:00Z")]);
        check("org-2", "2026-11-15T22:00:00Z", vec![(2, "2026-11-15T00:00:00Z", "2026-11-16T00:00:00Z")]);
    }

    // CONCURRENT policies limit leases only: windows never see them, a version that makes a policy
    // CONCURRENT ends its windows, and a tenant's own CONCURRENT policy covers the plan's.
    #[test]
    fn concurrent_policies_are_apart_from_windows() {
        let policies = vec![
            policy("*", "plan-jobs", 1, 4, Window::CONCURRENT, "2026-01-01T00:00:00Z"),
            policy("org-1", "jobs", 1, 100, Window::DAY, "2026-11-01T00:00:00Z"),
            policy("org-1", "jobs", 2, 8, Window::CONCURRENT, "2026-11-10T12:00:00Z"),
        ];
        let index = PolicyIndex::new(policies.clone());
        let ids = |found: Vec<Applicable<'_>>| -> Vec<(String, i32, bool)> {
            found.iter().map(|a| (a.policy.policy_id.clone(), a.policy.version, a.plan_default)).collect()
        };
        let before = at("2026-11-05T00:00:00Z");
        assert_eq!(ids(index.applicable("org-1", "requests", before)), [("jobs".into(), 1, false)]);
        assert_eq!(ids(index.concurrent("org-1", "requests", before)), [("plan-jobs".into(), 1, true)]);
        let after = at("2026-11-20T00:00:00Z");
        assert!(index.applicable("org-1", "requests", after).is_empty());
        assert_eq!(applicable(&policies, "org-1", "requests", after), index.applicable("org-1", "requests", after));
        assert_eq!(ids(index.concurrent("org-1", "requests", after)), [("jobs".into(), 2, false)]);
        assert_eq!(ids(index.concurrent("org-2", "requests", after)), [("plan-jobs".into(), 1, true)]);
        assert_eq!(index.concurrent("org-2", "requests", after)[0].window_start, after);
    }

    // A gauge quota limits a level: windows of consumption never see it (a version that makes a policy a
    // gauge ends its windows), it is found for the tenant whatever metric a request names, and a tenant's own gauge of
    // a metric covers the plan's gauge of that metric only.
    #[test]
    fn gauges_are_apart_from_windows_and_apply_to_every_metric() {
        let gauge = |p: PolicyEvent, metric: &str| PolicyEvent {
            violation: Some(Violation::NO_INSERTS),
            window_seconds: None,
            cycle_anchor: None,
            header: Header { metric: metric.into(), ..p.header.clone() },
            ..p
        };
        let policies = vec![
            gauge(policy("*", "plan-storage", 1, 1_000, Window::DAY, "2026-01-01T00:00:00Z"), "storage_bytes"),
            gauge(policy("*", "plan-rows", 1, 50, Window::DAY, "2026-01-01T00:00:00Z"), "rows"),
            policy("org-1", "storage", 1, 100, Window::DAY, "2026-11-01T00:00:00Z"),
            gauge(policy("org-1", "storage", 2, 5_000, Window::DAY, "2026-11-10T12:00:00Z"), "requests"),
        ];
        let index = PolicyIndex::new(policies.clone());
        let ids = |found: Vec<Applicable<'_>>| -> Vec<(String, i32, bool)> {
            found.iter().map(|a| (a.policy.policy_id.clone(), a.policy.version, a.plan_default)).collect()
        };
        let before = at("2026-11-05T00:00:00Z");
        assert_eq!(ids(index.applicable("org-1", "requests", before)), [("storage".into(), 1, false)]);
        assert!(index.applicable("org-1", "storage_bytes", before).is_empty(), "a gauge judges no window");
        assert_eq!(
            ids(index.gauges("org-1", before)),
            [("plan-rows".into(), 1, true), ("plan-storage".into(), 1, true)],
            "the plan's gauges, whatever metric is asked"
        );
        // Version 2 makes org-1's policy a gauge of `requests` (its own metric in this test's helper): its DAY windows
        // end with the day it takes effect in, and it covers no plan gauge of another metric.
        let after = at("2026-11-20T00:00:00Z");
        assert!(index.applicable("org-1", "requests", after).is_empty());
        assert_eq!(applicable(&policies, "org-1", "requests", after), index.applicable("org-1", "requests", after));
        assert_eq!(
            ids(index.gauges("org-1", after)),
            [("storage".into(), 2, false), ("plan-rows".into(), 1, true), ("plan-storage".into(), 1, true)]
        );
        let g = &index.gauges("org-2", after)[0];
        assert_eq!((g.window_start, g.window_end), (at("2026-11-20T00:00:00Z"), at("2026-11-21T00:00:00Z")));
        assert!(index.is_gauge("org-2", "rows", after) && !index.is_gauge("org-2", "requests", after));
        assert_eq!(index.gauge_metrics("org-1").into_iter().collect::<Vec<_>>(), ["requests", "rows", "storage_bytes"]);
        // A tenant's own gauge of a metric covers the plan's gauge of it.
        let own = gauge(policy("org-3", "own-storage", 1, 10, Window::DAY, "2026-01-01T00:00:00Z"), "storage_bytes");
        let index = PolicyIndex::new(policies.into_iter().chain([own]).collect());
        assert_eq!(
            ids(index.gauges("org-3", after)),
            [("plan-rows".into(), 1, true), ("own-storage".into(), 1, false)]
        );
    }

    // Proves the index answers exactly what the reference definition answers, ties and plan defaults included.
    #[test]
    fn the_index_agrees_with_the_definition() {
        let throttle = |p: PolicyEvent| PolicyEvent { burst: Some(5), ..p };
        let policies = vec![
            policy("*", "plan", 1, 1_000, Window::MONTH, "2026-01-01T00:00:00Z"),
            policy("*", "plan-daily", 1, 50, Window::DAY, "2026-01-01T00:00:00Z"),
            throttle(policy("*", "plan-rate", 1, 60, Window::DAY, "2026-01-01T00:00:00Z")),
            throttle(policy("org-1", "own-rate", 1, 10, Window::MONTH, "2026-11-01T00:00:00Z")),
            policy("org-1", "own", 1, 5_000, Window::MONTH, "2026-11-15T00:00:00Z"),
            policy("org-1", "p", 1, 100, Window::DAY, "2026-11-01T00:00:00Z"),
            policy("org-1", "p", 1, 120, Window::DAY, "2026-11-01T00:00:00Z"),
            policy("org-1", "p", 2, 150, Window::DAY, "2026-11-02T10:00:00Z"),
        ];
        let index = PolicyIndex::new(policies.clone());
        for tenant in ["org-1", "org-2"] {
            for t in ["2026-10-31T23:00:00Z", "2026-11-01T00:00:00Z", "2026-11-02T09:00:00Z", "2026-11-20T00:00:00Z"] {
                let expected = applicable(&policies, tenant, "requests", at(t));
                assert_eq!(index.applicable(tenant, "requests", at(t)), expected, "{tenant} at {t}");
            }
        }
    }
}

/// Policies grouped by owner (a tenant or `*`), metric and policy_id, so that finding the applicable ones for an
/// event costs a few comparisons instead of a pass over every policy. Answers exactly what [`applicable`] answers.
#[derive(Debug, Clone)]
pub struct PolicyIndex {
    policies: Vec<PolicyEvent>,
    /// The time zone of each of `policies`, parsed once.
    zones: Vec<Tz>,
    /// (owner, metric) -> the versions (indices into `policies`) of each policy_id, sorted by policy_id.
    groups: std::collections::HashMap<(String, String), Vec<Vec<usize>>>,
    /// owner -> the groups of `groups` with a gauge version among them, of every metric: what [`PolicyIndex::gauges`]
    /// reads for every request, empty for almost every tenant.
    gauge_groups: std::collections::HashMap<String, Vec<Vec<usize>>>,
    /// The billing cycle schedule of each group with a BILLING_CYCLE version, by the group's first version: made once,
    /// not for every request of a tenant on cycles.
    schedules: std::collections::HashMap<usize, cycle::Schedule>,
    /// Every metric a version names, of any owner.
    metrics: std::collections::HashSet<String>,
    /// Tenant -> the spans of its plan assignments, in time order ([`PolicyIndex::with_assignments`]).
    plans: std::collections::HashMap<String, Vec<PlanSpan>>,
    /// Every assignment indexed, in the order given (ledger order).
    assignments: Vec<PlanAssignmentEvent>,
}

/// A span of time over which one assignment is a tenant's plan: `[from, until)`, until its next assignment in effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanSpan {
    /// The assignment in effect over the span.
    pub assignment: PlanAssignmentEvent,
    /// Its owner of policies (`*` and the plan's name), none when it assigns no plan.
    pub owner: Option<String>,
    /// Where the span starts: the assignment's `effective_from`.
    pub from: Timestamp,
    /// Where it ends: the next assignment's `effective_from` (`i64::MAX` microseconds for the last).
    pub until: Timestamp,
}

/// The spans of one tenant's `assignments` (in ledger order): each effective from its `effective_from` until the next
/// one's; of several effective at one instant, the last recorded holds (as of policy versions, the later wins a tie).
pub fn plan_spans(assignments: &[&PlanAssignmentEvent]) -> Vec<PlanSpan> {
    let mut ordered: Vec<(usize, &PlanAssignmentEvent)> = assignments.iter().copied().enumerate().collect();
    ordered.sort_by_key(|(n, a)| (a.effective_from, *n));
    let mut spans: Vec<PlanSpan> = Vec::new();
    for (_, a) in ordered {
        if spans.last().is_some_and(|last| last.from == a.effective_from) {
            spans.pop();
        }
        if let Some(last) = spans.last_mut() {
            last.until = a.effective_from;
        }
        spans.push(PlanSpan {
            assignment: a.clone(),
            owner: a.plan.as_deref().map(schemas::partition::plan_owner),
            from: a.effective_from,
            until: Timestamp(i64::MAX),
        });
    }
    spans
}

/// The policy groups that may apply to one tenant's metric: looked up once, asked at every instant.
#[derive(Debug, Clone, Copy)]
pub struct Candidates<'a> {
    policies: &'a [PolicyEvent],
    zones: &'a [Tz],
    own: &'a [Vec<usize>],
    defaults: &'a [Vec<usize>],
    schedules: &'a std::collections::HashMap<usize, cycle::Schedule>,
    /// The tenant's plan spans, and the metric as the index holds it (none: no version names it).
    spans: &'a [PlanSpan],
    metric: Option<&'a str>,
    groups: &'a std::collections::HashMap<(String, String), Vec<Vec<usize>>>,
}

/// The span of `spans` (in time order) containing `at`.
fn span_at(spans: &[PlanSpan], at: Timestamp) -> Option<&PlanSpan> {
    spans.iter().rev().find(|span| span.from <= at).filter(|span| at < span.until)
}

impl PolicyIndex {
    /// Indexes every recorded policy version.
    pub fn new(policies: Vec<PolicyEvent>) -> PolicyIndex {
        let mut by_id: BTreeMap<(String, String, String), Vec<usize>> = BTreeMap::new();
        for (index, p) in policies.iter().enumerate() {
            let key = (p.header.tenant.clone(), p.header.metric.clone(), p.policy_id.clone());
            by_id.entry(key).or_default().push(index);
        }
        let mut groups: std::collections::HashMap<(String, String), Vec<Vec<usize>>> = Default::default();
        let mut gauge_groups: std::collections::HashMap<String, Vec<Vec<usize>>> = Default::default();
        for ((owner, metric, _), versions) in by_id {
            if versions.iter().any(|i| policies[*i].is_gauge()) {
                gauge_groups.entry(owner.clone()).or_default().push(versions.clone());
            }
            groups.entry((owner, metric)).or_default().push(versions);
        }
        let zones = policies.iter().map(PolicyEvent::zone).collect();
        let schedules = groups
            .values()
            .flatten()
            .filter_map(|versions| Some((versions[0], cycle_schedule(versions.iter().map(|i| &policies[*i]))?)))
            .collect();
        let metrics = policies.iter().map(|p| p.header.metric.clone()).collect();
        let (plans, assignments) = Default::default();
        PolicyIndex { policies, zones, groups, gauge_groups, schedules, metrics, plans, assignments }
    }

    /// The same index, resolving each tenant's policies through the plans `assignments` (in ledger order) assign it:
    /// its own policies cover its plan's, and its plan's the plan defaults (contract §5 "Named plans").
    pub fn with_assignments<'a>(
        mut self,
        assignments: impl IntoIterator<Item = &'a PlanAssignmentEvent>,
    ) -> PolicyIndex {
        self.assignments = assignments.into_iter().cloned().collect();
        let mut by_tenant: BTreeMap<&str, Vec<&PlanAssignmentEvent>> = BTreeMap::new();
        for a in &self.assignments {
            by_tenant.entry(a.header.tenant.as_str()).or_default().push(a);
        }
        let plans = by_tenant.into_iter().map(|(tenant, list)| (tenant.to_string(), plan_spans(&list))).collect();
        self.plans = plans;
        self
    }

    /// The spans of `tenant`'s plan assignments, in time order (none when it was never assigned one).
    pub fn plan_spans(&self, tenant: &str) -> &[PlanSpan] {
        self.plans.get(tenant).map_or(&[][..], Vec::as_slice)
    }

    /// `tenant`'s plan span in effect at `at`, if an assignment is in effect then.
    pub fn plan_at(&self, tenant: &str, at: Timestamp) -> Option<&PlanSpan> {
        span_at(self.plan_spans(tenant), at)
    }

    /// Every assignment indexed, in the order given (ledger order).
    pub fn assignments(&self) -> &[PlanAssignmentEvent] {
        &self.assignments
    }

    /// Whether a version indexed, of any tenant or the plan, names `metric`: the metrics operators configured, as
    /// opposed to any name a caller sends.
    pub fn names_metric(&self, metric: &str) -> bool {
        self.metrics.contains(metric)
    }

    /// Every version indexed, in the order given.
    pub fn policies(&self) -> &[PolicyEvent] {
        &self.policies
    }

    /// The scope of `policy_id` for `tenant`'s `metric`, as its versions (the tenant's own and the plan's) give it:
    /// for window adjustments written before they carried one. TENANT when they disagree or none is known.
    pub fn scope_of(&self, tenant: &str, metric: &str, policy_id: &str) -> Scope {
        let mut scopes = self
            .policies
            .iter()
            .filter(|p| p.policy_id == policy_id && p.header.metric == metric)
            .filter(|p| p.header.tenant == tenant || p.header.tenant == PLAN_DEFAULT_TENANT)
            .map(|p| p.scope);
        match scopes.next() {
            Some(first) if scopes.all(|scope| scope == first) => first,
            _ => Scope::TENANT,
        }
    }

    /// The groups that may apply to `tenant`'s consumption of `metric`: its own, and the plan defaults.
    pub fn candidates(&self, tenant: &str, metric: &str) -> Candidates<'_> {
        let of = |owner: &str| self.groups.get(&(owner.to_string(), metric.to_string())).map_or(&[][..], Vec::as_slice);
        Candidates {
            policies: &self.policies,
            zones: &self.zones,
            own: of(tenant),
            defaults: of(PLAN_DEFAULT_TENANT),
            schedules: &self.schedules,
            spans: self.plan_spans(tenant),
            metric: self.metrics.get(metric).map(String::as_str),
            groups: &self.groups,
        }
    }

    /// Every policy version that applies to `tenant`'s consumption of `metric` at `at`, as [`applicable`].
    pub fn applicable(&self, tenant: &str, metric: &str, at: Timestamp) -> Vec<Applicable<'_>> {
        self.candidates(tenant, metric).applicable(at)
    }

    /// The CONCURRENT policy versions that limit `tenant`'s leases of `metric` at `at` ([`Candidates::concurrent`]).
    pub fn concurrent(&self, tenant: &str, metric: &str, at: Timestamp) -> Vec<Applicable<'_>> {
        self.candidates(tenant, metric).concurrent(at)
    }

    /// The gauge quotas in force for `tenant` at `at`, of every metric: of each policy_id, the version with the
    /// greatest (`effective_from`, `version`) in effect by `at`, when it is a gauge (a level is judged at an instant,
    /// as leases are); its own, then the plan defaults it has none of its own covering for the same metric. Each
    /// with the window of its kind containing `at`, the window reconcile reports its time over the limit in. Sorted
    /// by metric, then policy_id.
    pub fn gauges(&self, tenant: &str, at: Timestamp) -> Vec<Applicable<'_>> {
        // Asked for every request: without any gauge recorded, nothing to hash or look up.
        if self.gauge_groups.is_empty() {
            return Vec::new();
        }
        let of = |owner: &str| self.gauge_groups.get(owner).map_or(&[][..], Vec::as_slice);
        let in_force = |group: &Vec<usize>| {
            let versions = group.iter().filter(|i| self.policies[**i].effective_from <= at);
            // `>=`: on a tie the later one wins, as for windows.
            versions
                .fold(None, |best: Option<usize>, i| match best {
                    Some(b) if self.version_key(*i) < self.version_key(b) => Some(b),
                    _ => Some(*i),
                })
                .filter(|i| self.policies[*i].is_gauge())
        };
        let applicable = |i: usize, plan_default| {
            let (window_start, window_end) = window::bounds_in(self.policies[i].window, self.zones[i], at);
            Applicable { policy: &self.policies[i], window_start, window_end, plan_default }
        };
        let own: Vec<Applicable<'_>> = of(tenant).iter().filter_map(in_force).map(|i| applicable(i, false)).collect();
        let defaults = of(PLAN_DEFAULT_TENANT).iter().filter_map(in_force).filter(|d| {
            let d = &self.policies[*d];
            !own.iter().any(|o| o.policy.header.metric == d.header.metric && covers(o.policy, d))
        });
        let mut all: Vec<Applicable<'_>> = own.iter().cloned().chain(defaults.map(|i| applicable(i, true))).collect();
        all.sort_by(|a, b| {
            (&a.policy.header.metric, &a.policy.policy_id).cmp(&(&b.policy.header.metric, &b.policy.policy_id))
        });
        all
    }

    /// Whether `metric` is a gauge for `tenant` at `at`: a gauge quota in force for the tenant names it. Its usage
    /// events are levels, not consumption.
    pub fn is_gauge(&self, tenant: &str, metric: &str, at: Timestamp) -> bool {
        !self.gauge_groups.is_empty() && self.gauges(tenant, at).iter().any(|g| g.policy.header.metric == metric)
    }

    /// The metrics a gauge quota of `tenant` or of the plan names, in any version: levels, whose usage events no
    /// bill sums (a level reported daily is not consumption of 30 times the level).
    pub fn gauge_metrics(&self, tenant: &str) -> std::collections::BTreeSet<&str> {
        [tenant, PLAN_DEFAULT_TENANT]
            .into_iter()
            .filter_map(|owner| self.gauge_groups.get(owner))
            .flatten()
            .flatten()
            .map(|i| &self.policies[*i])
            .filter(|p| p.is_gauge())
            .map(|p| p.header.metric.as_str())
            .collect()
    }

    fn version_key(&self, i: usize) -> (Timestamp, i32) {
        (self.policies[i].effective_from, self.policies[i].version)
    }
}

impl<'a> Candidates<'a> {
    /// Whether no policy at all may apply.
    pub fn is_empty(&self) -> bool {
        self.own.is_empty() && self.defaults.is_empty() && (self.spans.is_empty() || self.metric.is_none())
    }

    /// The versions of one group in force at `at`, pushed onto `found` (as [`in_force`], without allocating).
    fn in_force(&self, versions: &[usize], at: Timestamp, found: &mut Vec<Applicable<'a>>) {
        let policies = || versions.iter().map(|i| (&self.policies[*i], self.zones[*i]));
        let kinds = policies().fold(0u8, |kinds, (p, _)| kinds | kind_bit(p.window));
        for kind in KINDS.into_iter().filter(|k| kinds & kind_bit(*k) != 0) {
            let of_kind = || policies().filter(|(p, _)| p.window == kind);
            // The same window as `window` in `zone`'s calendar: the same zone, almost always, or the same instants.
            let same = |zone: Tz, other: Tz, window: (Timestamp, Timestamp)| {
                zone == other || window::bounds_in(kind, other, at) == window
            };
            for (n, (_, zone)) in of_kind().enumerate() {
                let window = window::bounds_in(kind, zone, at);
                // Judged already, under an earlier version's zone.
                if of_kind().take(n).any(|(_, earlier)| same(zone, earlier, window)) {
                    continue;
                }
                let mut best: Option<(&'a PolicyEvent, Tz)> = None;
                for (p, p_zone) in policies() {
                    // `>=`: on a tie the later one wins, as `max_by_key` in [`in_force`] answers.
                    if p.effective_from < window.1
                        && best.is_none_or(|(b, _)| (p.effective_from, p.version) >= (b.effective_from, b.version))
                    {
                        best = Some((p, p_zone));
                    }
                }
                if let Some((p, _)) =
                    best.filter(|(p, p_zone)| p.window == kind && !p.is_gauge() && same(zone, *p_zone, window))
                {
                    let (window_start, window_end) = window;
                    found.push(Applicable { policy: p, window_start, window_end, plan_default: false });
                }
            }
        }
        if kinds & kind_bit(Window::ROLLING) != 0 {
            let mut best: Option<&'a PolicyEvent> = None;
            for (p, _) in policies().filter(|(p, _)| p.effective_from <= at) {
                if best.is_none_or(|b| (p.effective_from, p.version) >= (b.effective_from, b.version)) {
                    best = Some(p);
                }
            }
            found.extend(best.and_then(|p| rolling_window(p, at)));
        }
        if let Some(schedule) =
            self.schedules.get(&versions[0]).filter(|_| kinds & kind_bit(Window::BILLING_CYCLE) != 0)
        {
            found.extend(cycle_window_of(schedule, policies().map(|(p, _)| p), at));
        }
    }

    /// The policies of the tenant's plan in force at `at` that none of its own (the first `own` of `found`) covers,
    /// pushed onto `found`: each window clipped to the plan's span, since a plan applies from its assignment's instant
    /// to the next one's, and its consumption is what the tenant used while it held the plan.
    fn plan_in_force(&self, at: Timestamp, own: usize, found: &mut Vec<Applicable<'a>>) {
        let Some(span) = span_at(self.spans, at) else { return };
        let (Some(owner), Some(metric)) = (&span.owner, self.metric) else { return };
        let Some(groups) = self.groups.get(&(owner.clone(), metric.to_string())) else { return };
        for group in groups {
            let mut n = found.len();
            self.in_force(group, at, found);
            while n < found.len() {
                if found[..own].iter().any(|o| covers(o.policy, found[n].policy)) {
                    found.remove(n);
                } else {
                    let a = &mut found[n];
                    a.plan_default = true;
                    a.window_start = a.window_start.max(span.from);
                    a.window_end = a.window_end.min(span.until);
                    n += 1;
                }
            }
        }
    }

    /// The CONCURRENT policy versions that limit leases at `at`: of each policy_id, the version with the greatest
    /// (`effective_from`, `version`) in effect by `at`, when it is CONCURRENT; own ones, then the plan defaults the
    /// tenant has none of its own covering. Each answers the instant `at` as its window. Sorted by policy_id.
    pub fn concurrent(&self, at: Timestamp) -> Vec<Applicable<'a>> {
        let in_force = |group: &Vec<usize>| {
            let versions = group.iter().map(|i| &self.policies[*i]).filter(|p| p.effective_from <= at);
            // `>=` in the fold: on a tie the later one wins, as for windows.
            versions
                .fold(None, |best: Option<&'a PolicyEvent>, p| match best {
                    Some(b) if (p.effective_from, p.version) < (b.effective_from, b.version) => Some(b),
                    _ => Some(p),
                })
                .filter(|p| p.window == Window::CONCURRENT)
        };
        let applicable = |policy, plan_default| Applicable { policy, window_start: at, window_end: at, plan_default };
        let own: Vec<Applicable<'a>> = self.own.iter().filter_map(in_force).map(|p| applicable(p, false)).collect();
        let defaults = self.defaults.iter().filter_map(in_force).filter(|d| !own.iter().any(|o| covers(o.policy, d)));
        let mut all: Vec<Applicable<'a>> = own.iter().cloned().chain(defaults.map(|p| applicable(p, true))).collect();
        all.sort_by(|a, b| a.policy.policy_id.cmp(&b.policy.policy_id));
        all
    }

    /// Every policy version that applies at `at`: own policies in force, then the plan defaults the tenant has
    /// none of its own covering ([`covers`]). Sorted by policy_id.
    pub fn applicable(&self, at: Timestamp) -> Vec<Applicable<'a>> {
        let mut all: Vec<Applicable<'a>> = Vec::new();
        for group in self.own {
            self.in_force(group, at, &mut all);
        }
        let own_count = all.len();
        self.plan_in_force(at, own_count, &mut all);
        let own = all.len();
        for group in self.defaults {
            let mut n = all.len();
            self.in_force(group, at, &mut all);
            while n < all.len() {
                if all[..own].iter().any(|o| covers(o.policy, all[n].policy)) {
                    all.remove(n);
                } else {
                    all[n].plan_default = true;
                    n += 1;
                }
            }
        }
        if own_count > 0 && all.len() > own_count {
            all.sort_by(|a, b| a.policy.policy_id.cmp(&b.policy.policy_id));
        }
        all
    }
}
