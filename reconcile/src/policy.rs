//! Which policy versions apply to a tenant's consumption at an instant (SPEC 5 "Policy in force").
//!
//! For each policy_id on its own: the version with the greatest (`effective_from`, `version`) whose
//! `effective_from` is before the end of its window containing the instant. A policy of tenant `*` is the plan
//! default: it applies to a tenant with no policy of its own in force for the same metric, scope and window.
//! Choices where the SPEC is silent: "of its own" means in force for that window, so a tenant policy that only
//! starts next month leaves this month to the plan default; and a policy of its own covers only plan defaults of
//! its kind ([`covers`]): a quota (no `burst`) only quotas, a throttle (a `burst`, this project's extension,
//! which SPEC 3 does not know) only throttles. A tenant's own SHADOW quota covers as any quota does: a trial of a
//! policy for that tenant.

use std::collections::BTreeMap;

use schemas::{PolicyEvent, Scope, Timestamp};

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

/// Whether a tenant's own policy `own` covers the plan default `default` of the same metric (SPEC 3: "no policy
/// of its own for the same metric, scope and window"): the same scope and window, and the same kind. A throttle
/// limits a rate and a quota an allowance, so neither stands in for the other: a tenant's own throttle covering
/// the plan's quota made the plan's HARD quota go unenforced and its SOFT quota unbilled for that tenant.
pub fn covers(own: &PolicyEvent, default: &PolicyEvent) -> bool {
    (own.scope, own.window, own.is_throttle()) == (default.scope, default.window, default.is_throttle())
}

/// Every policy version that applies to `tenant`'s consumption of `metric` at `at`: its own policies in force,
/// then the plan defaults it has none of its own covering ([`covers`]). Sorted by policy_id.
pub fn applicable<'a>(policies: &'a [PolicyEvent], tenant: &str, metric: &str, at: Timestamp) -> Vec<Applicable<'a>> {
    let in_force_of = |owner: &str| -> Vec<Applicable<'a>> {
        let mut by_id: BTreeMap<&str, Vec<&'a PolicyEvent>> = BTreeMap::new();
        for p in policies.iter().filter(|p| p.header.tenant == owner && p.header.metric == metric) {
            by_id.entry(p.policy_id.as_str()).or_default().push(p);
        }
        by_id.values().filter_map(|versions| in_force(versions, at)).collect()
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
    use schemas::{Enforcement, Header, Scope, Window};

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

    // Choice where the SPEC is silent (SPEC 3 knows no throttles): a tenant's own throttle covers only the plan's
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
    /// (owner, metric) -> the versions (indices into `policies`) of each policy_id, sorted by policy_id.
    groups: std::collections::HashMap<(String, String), Vec<Vec<usize>>>,
}

/// The policy groups that may apply to one tenant's metric: looked up once, asked at every instant.
#[derive(Debug, Clone, Copy)]
pub struct Candidates<'a> {
    policies: &'a [PolicyEvent],
    own: &'a [Vec<usize>],
    defaults: &'a [Vec<usize>],
}

impl PolicyIndex {
    pub fn new(policies: Vec<PolicyEvent>) -> PolicyIndex {
        let mut by_id: BTreeMap<(String, String, String), Vec<usize>> = BTreeMap::new();
        for (index, p) in policies.iter().enumerate() {
            let key = (p.header.tenant.clone(), p.header.metric.clone(), p.policy_id.clone());
            by_id.entry(key).or_default().push(index);
        }
        let mut groups: std::collections::HashMap<(String, String), Vec<Vec<usize>>> = Default::default();
        for ((owner, metric, _), versions) in by_id {
            groups.entry((owner, metric)).or_default().push(versions);
        }
        PolicyIndex { policies, groups }
    }

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
        Candidates { policies: &self.policies, own: of(tenant), defaults: of(PLAN_DEFAULT_TENANT) }
    }

    /// Every policy version that applies to `tenant`'s consumption of `metric` at `at`, as [`applicable`].
    pub fn applicable(&self, tenant: &str, metric: &str, at: Timestamp) -> Vec<Applicable<'_>> {
        self.candidates(tenant, metric).applicable(at)
    }
}

impl<'a> Candidates<'a> {
    pub fn is_empty(&self) -> bool {
        self.own.is_empty() && self.defaults.is_empty()
    }

    /// The version of one group in force for the window containing `at` (as [`in_force`], without allocating).
    fn in_force(&self, versions: &[usize], at: Timestamp) -> Option<Applicable<'a>> {
        let mut best: Option<Applicable<'a>> = None;
        for p in versions.iter().map(|i| &self.policies[*i]) {
            let (start, end) = window::bounds(p.window, at);
            // `>=`: on a tie the later one wins, as `max_by_key` in [`in_force`] answers.
            let better =
                best.is_none_or(|b| (p.effective_from, p.version) >= (b.policy.effective_from, b.policy.version));
            if p.effective_from < end && better {
                best = Some(Applicable { policy: p, window_start: start, window_end: end, plan_default: false });
            }
        }
        best
    }

    /// Every policy version that applies at `at`: own policies in force, then the plan defaults the tenant has
    /// none of its own covering ([`covers`]). Sorted by policy_id.
    pub fn applicable(&self, at: Timestamp) -> Vec<Applicable<'a>> {
        let mut all: Vec<Applicable<'a>> = self.own.iter().filter_map(|g| self.in_force(g, at)).collect();
        let own = all.len();
        for group in self.defaults {
            if let Some(a) = self.in_force(group, at)
                && !all[..own].iter().any(|o| covers(o.policy, a.policy))
            {
                all.push(Applicable { plan_default: true, ..a });
            }
        }
        if own > 0 && all.len() > own {
            all.sort_by(|a, b| a.policy.policy_id.cmp(&b.policy.policy_id));
        }
        all
    }
}
