//! Which policy versions apply to a tenant's consumption at an instant (SPEC 5 "Policy in force").
//!
//! For each policy_id on its own: the version with the greatest (`effective_from`, `version`) whose
//! `effective_from` is before the end of its window containing the instant. A policy of tenant `*` is the plan
//! default: it applies to a tenant with no policy of its own in force for the same metric, scope and window.
//! (Choice where the SPEC is silent: "of its own" means in force for that window, so a tenant policy that only
//! starts next month leaves this month to the plan default.)

use std::collections::BTreeMap;

use schemas::{PolicyEvent, Scope, Timestamp, Window};

use crate::window;

/// The tenant of plan defaults.
pub const PLAN_DEFAULT_TENANT: &str = "*";

/// A policy version that applies, with the window it applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applicable<'a> {
    pub policy: &'a PolicyEvent,
    pub window_start: Timestamp,
    pub window_end: Timestamp,
    /// Whether it applies as the plan default (`*`).
    pub plan_default: bool,
}

/// The version of one policy_id in force for the window containing `at`, with that window.
pub fn in_force<'a>(versions: &[&'a PolicyEvent], at: Timestamp) -> Option<Applicable<'a>> {
    versions
        .iter()
        .filter_map(|p| {
            let (start, end) = window::bounds(p.window, at);
            (p.effective_from < end).then_some((p, start, end))
        })
        .max_by_key(|(p, _, _)| (p.effective_from, p.version))
        .map(|(p, start, end)| Applicable { policy: p, window_start: start, window_end: end, plan_default: false })
}

/// Every policy version that applies to `tenant`'s consumption of `metric` at `at`: its own policies in force,
/// then the plan defaults for the (scope, window) it has none of its own for. Sorted by policy_id.
pub fn applicable<'a>(policies: &'a [PolicyEvent], tenant: &str, metric: &str, at: Timestamp) -> Vec<Applicable<'a>> {
    let in_force_of = |owner: &str| -> Vec<Applicable<'a>> {
        let mut by_id: BTreeMap<&str, Vec<&'a PolicyEvent>> = BTreeMap::new();
        for p in policies.iter().filter(|p| p.header.tenant == owner && p.header.metric == metric) {
            by_id.entry(p.policy_id.as_str()).or_default().push(p);
        }
        by_id.values().filter_map(|versions| in_force(versions, at)).collect()
    };
    let own = in_force_of(tenant);
    let covered: Vec<(Scope, Window)> = own.iter().map(|a| (a.policy.scope, a.policy.window)).collect();
    let defaults = in_force_of(PLAN_DEFAULT_TENANT)
        .into_iter()
        .filter(|a| !covered.contains(&(a.policy.scope, a.policy.window)))
        .map(|a| Applicable { plan_default: true, ..a });
    let mut all: Vec<Applicable<'a>> = own.into_iter().chain(defaults).collect();
    all.sort_by(|a, b| a.policy.policy_id.cmp(&b.policy.policy_id));
    all
}

#[cfg(test)]
mod tests {
    use schemas::{Enforcement, Header};

    use super::*;

    fn at(text: &str) -> Timestamp {
        Timestamp::parse_rfc3339(text).unwrap()
    }

    fn policy(tenant: &str, id: &str, version: i32, limit: i64, window: Window, effective_from: &str) -> PolicyEvent {
        PolicyEvent {
            header: Header {
                event_id: format!("{id}-v{version}"),
                occurred_at: at(effective_from),
                tenant: tenant.into(),
                subject: None,
                metric: "requests".into(),
                source: "test".into(),
            },
            policy_id: id.into(),
            version,
            scope: Scope::TENANT,
            limit,
            window,
            enforcement: Enforcement::HARD,
            effective_from: at(effective_from),
            burst: None,
        }
    }

    fn limits(applicable: &[Applicable<'_>]) -> Vec<(String, i64, bool)> {
        applicable.iter().map(|a| (a.policy.policy_id.clone(), a.policy.limit, a.plan_default)).collect()
    }

    // SPEC 5 "Policy in force": a version effective mid-window governs the whole window; one effective after it does not.
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

    // SPEC 5: equal effective_from, the greater version wins; each policy_id is evaluated on its own.
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

    // SPEC 3: the `*` plan default applies to a tenant without its own policy for the same metric, scope and window.
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
}

/// The policy versions of one policy_id of one owner (a tenant or `*`) and metric.
#[derive(Debug, Clone)]
struct PolicyGroup {
    versions: Vec<usize>,
}

/// Policies grouped by owner, metric and policy_id, so that finding the applicable ones for an event costs a
/// few comparisons instead of a pass over every policy. Answers exactly what [`applicable`] answers.
#[derive(Debug, Clone)]
pub struct PolicyIndex {
    policies: Vec<PolicyEvent>,
    /// (owner, metric) -> groups sorted by policy_id.
    groups: std::collections::HashMap<(String, String), Vec<PolicyGroup>>,
}

impl PolicyIndex {
    pub fn new(policies: Vec<PolicyEvent>) -> PolicyIndex {
        let mut by_id: BTreeMap<(String, String, String), Vec<usize>> = BTreeMap::new();
        for (index, p) in policies.iter().enumerate() {
            let key = (p.header.tenant.clone(), p.header.metric.clone(), p.policy_id.clone());
            by_id.entry(key).or_default().push(index);
        }
        let mut groups: std::collections::HashMap<(String, String), Vec<PolicyGroup>> = Default::default();
        for ((owner, metric, _), versions) in by_id {
            groups.entry((owner, metric)).or_default().push(PolicyGroup { versions });
        }
        PolicyIndex { policies, groups }
    }

    pub fn policies(&self) -> &[PolicyEvent] {
        &self.policies
    }

    /// Whether any policy names this metric, for this tenant or as a plan default.
    pub fn has_any(&self, tenant: &str, metric: &str) -> bool {
        self.groups.contains_key(&(tenant.to_string(), metric.to_string()))
            || self.groups.contains_key(&(PLAN_DEFAULT_TENANT.to_string(), metric.to_string()))
    }

    /// Every policy version that applies to `tenant`'s consumption of `metric` at `at`, as [`applicable`].
    pub fn applicable(&self, tenant: &str, metric: &str, at: Timestamp) -> Vec<Applicable<'_>> {
        let in_force_of = |owner: &str| -> Vec<Applicable<'_>> {
            let Some(groups) = self.groups.get(&(owner.to_string(), metric.to_string())) else { return Vec::new() };
            groups
                .iter()
                .filter_map(|g| {
                    let versions: Vec<&PolicyEvent> = g.versions.iter().map(|i| &self.policies[*i]).collect();
                    in_force(&versions, at)
                })
                .collect()
        };
        let own = in_force_of(tenant);
        let covered: Vec<(Scope, Window)> = own.iter().map(|a| (a.policy.scope, a.policy.window)).collect();
        let defaults = in_force_of(PLAN_DEFAULT_TENANT)
            .into_iter()
            .filter(|a| !covered.contains(&(a.policy.scope, a.policy.window)))
            .map(|a| Applicable { plan_default: true, ..a });
        let mut all: Vec<Applicable<'_>> = own.into_iter().chain(defaults).collect();
        all.sort_by(|a, b| a.policy.policy_id.cmp(&b.policy.policy_id));
        all
    }
}
