//! Remaining quota without consuming: for a tenant (and a metric, a subject), every policy that
//! applies now, its own and the `*` plan defaults it has none of its own covering (contract §3), with its window,
//! limit, grants, effective limit, consumption, what open reservations hold and what remains; for a CONCURRENT policy,
//! the leases active and the slots free. The numbers are
//! the ones a check would compare: [`crate::decide::standing`] computes both. Nothing is recorded.
//!
//! A serving hook answers from its writer's state ([`crate::Hook::quotas`]), after what its group decided before
//! the read is recorded; [`from_ledger`] answers from a ledger file, folding it as a hook starting on it would.

use std::collections::BTreeSet;

use ledger::Ledger;
use schemas::{Enforcement, Scope, Timestamp, Who, Window};
use serde::{Deserialize, Serialize};

use crate::buckets::{BucketOf, Buckets};
use crate::decide::{self, Ask, Usage};
use crate::error::HookError;
use crate::state::{State, Whose};

/// What a caller asks: a tenant's quotas, of one metric or all, for one subject or none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaQuery {
    /// The tenant (never `*`), and the subject, project and API key the policies of those scopes are counted for:
    /// without one, what a request naming none is judged against, as a check naming none would be.
    #[serde(flatten)]
    pub who: Who,
    /// Only this metric's policies; every metric with a policy for the tenant (or `*`) without it.
    #[serde(default)]
    pub metric: Option<String>,
}

/// The remaining quota of one policy that applies now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Quota {
    /// The metric.
    pub metric: String,
    /// The policy in force.
    pub policy_id: String,
    /// Its version in force.
    pub policy_version: i32,
    /// TENANT or SUBJECT.
    pub scope: Scope,
    /// HARD, SOFT or SHADOW.
    pub enforcement: Enforcement,
    /// The window kind.
    pub window: Window,
    /// A ROLLING window's length in seconds (the policy's `window_seconds`); none for every other kind. Its window is
    /// the one ending now, `[now - length + 1µs, now + 1µs)`, and `window_end` no reset: usage ages out of it.
    pub window_seconds: Option<i64>,
    /// The IANA time zone whose calendar the window is of (the policy's `time_zone`, UTC when it names none).
    pub time_zone: String,
    /// Whether it applies as the plan default (a policy of tenant `*`).
    pub plan_default: bool,
    /// Whether it is a throttle (a token bucket): then `limit` is its capacity and `remaining` its tokens, and the
    /// window's fields that count consumption are empty.
    pub throttle: bool,
    /// The window containing now (a ROLLING window: the one ending now).
    pub window_start: Timestamp,
    /// Its end (exclusive): when the quota resets (a ROLLING window: now plus 1µs, as it never resets at once).
    pub window_end: Timestamp,
    /// The policy's limit.
    pub limit: i64,
    /// Grants overlapping the window that raise it.
    pub grants: Option<i64>,
    /// Limit plus grants.
    pub effective_limit: Option<i64>,
    /// Consumption in the window.
    pub consumed: Option<i64>,
    /// What open reservations hold now.
    pub held: Option<i64>,
    /// A CONCURRENT policy: the leases active now, each holding one slot (its `remaining` is the slots free).
    pub leases: Option<i64>,
    /// What a check could still consume under this policy: effective limit minus consumed minus held, never
    /// below 0 (a throttle: its tokens; empty when read from the ledger alone, which holds no bucket).
    pub remaining: Option<i64>,
    /// A HARD quota with a throttled overage: what it lets through beyond its limit per `overage_window`.
    pub overage_rate: Option<i64>,
    /// The period of `overage_rate`.
    pub overage_window: Option<Window>,
    /// A throttled overage's tokens now, what could go beyond the limit at once (empty when read from the ledger
    /// alone, which holds no bucket).
    pub overage_tokens: Option<i64>,
}

/// The answer: the tenant's quotas, sorted by metric then policy, as of `at` and the ledger's `watermark`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Quotas {
    /// The tenant asked about.
    pub tenant: String,
    /// The subject asked about, if any.
    pub subject: Option<String>,
    /// The instant the windows contain.
    pub at: Timestamp,
    /// The last ledger entry the numbers include.
    pub watermark: u64,
    /// One per applicable policy (none: no policy applies, every check is allowed as NO_POLICY).
    pub quotas: Vec<Quota>,
}

/// The tenant's quotas in `state` at `now` (`buckets`: the serving process's throttles, if known).
pub fn of_state(state: &State, buckets: Option<&Buckets>, query: &QuotaQuery, now: Timestamp) -> Quotas {
    // The plan the tenant holds now names metrics too.
    let plan = state.policies.plan_at(&query.who.tenant, now).and_then(|span| span.owner.as_deref());
    let metrics: BTreeSet<&str> = match &query.metric {
        Some(metric) => BTreeSet::from([metric.as_str()]),
        None => state
            .policies
            .policies()
            .iter()
            .filter(|p| {
                let owner = p.header.tenant.as_str();
                owner == query.who.tenant || owner == rules::policy::PLAN_DEFAULT_TENANT || Some(owner) == plan
            })
            .map(|p| p.header.metric.as_str())
            .collect(),
    };
    let mut quotas = Vec::new();
    for metric in metrics {
        let ask = Ask::new(&query.who, metric, 0);
        for a in state.policies.applicable(&query.who.tenant, metric, now) {
            let standing = decide::standing(state, buckets, &ask, &a, now);
            let mut quota = Quota {
                metric: metric.to_string(),
                policy_id: a.policy.policy_id.clone(),
                policy_version: a.policy.version,
                scope: a.policy.scope,
                enforcement: a.policy.enforcement,
                window: a.policy.window,
                window_seconds: a.policy.window_seconds,
                time_zone: a.policy.time_zone.clone().unwrap_or_else(|| "UTC".into()),
                plan_default: a.plan_default,
                throttle: a.policy.is_throttle(),
                window_start: a.window_start,
                window_end: a.window_end,
                limit: standing.limit,
                grants: None,
                effective_limit: None,
                consumed: None,
                held: None,
                leases: None,
                remaining: None,
                overage_rate: a.policy.overage_rate,
                overage_window: a.policy.overage_window,
                overage_tokens: None,
            };
            if a.policy.overage_throttle().is_some() {
                let member = ask.member(a.policy.scope);
                quota.overage_tokens =
                    buckets.map(|b| b.look(BucketOf::Overage, a.policy, &query.who.tenant, member, 0, now).0);
            }
            match standing.usage {
                Usage::Bucket { tokens, .. } => quota.remaining = tokens,
                Usage::Quota { grants, effective_limit, consumed, held } => {
                    // Saturating: what other writers recorded may hold more than i64 (see `state::Counters`).
                    let held = i64::try_from(held).unwrap_or(i64::MAX);
                    let remaining = effective_limit.saturating_sub(consumed).saturating_sub(held).max(0);
                    quota.grants = Some(grants);
                    quota.effective_limit = Some(effective_limit);
                    quota.consumed = Some(consumed);
                    quota.held = Some(held);
                    quota.remaining = Some(remaining);
                }
            }
            quotas.push(quota);
        }
        for a in state.policies.concurrent(&query.who.tenant, metric, now) {
            let p = a.policy;
            let member = ask.member(p.scope);
            let counters = state.counters(&query.who.tenant, Whose::of(p.scope, member), metric);
            let leases = counters.map_or(0, |c| c.active_leases());
            let grants =
                state.grants.get(&(query.who.tenant.clone(), metric.to_string())).map_or(&[][..], Vec::as_slice);
            let instant = Timestamp(now.micros() + 1);
            let effective_limit = rules::overshoot::effective_limit(p.limit, p.scope, member, grants, now, instant);
            quotas.push(Quota {
                metric: metric.to_string(),
                policy_id: p.policy_id.clone(),
                policy_version: p.version,
                scope: p.scope,
                enforcement: p.enforcement,
                window: p.window,
                window_seconds: None,
                time_zone: p.time_zone.clone().unwrap_or_else(|| "UTC".into()),
                plan_default: a.plan_default,
                throttle: false,
                window_start: now,
                // When the first slot frees without any call: the first active lease's expiry.
                window_end: counters.and_then(|c| c.first_lease_expiry()).unwrap_or(now),
                limit: p.limit,
                grants: Some(effective_limit.saturating_sub(p.limit)),
                effective_limit: Some(effective_limit),
                consumed: None,
                held: None,
                leases: Some(leases),
                remaining: Some(effective_limit.saturating_sub(leases).max(0)),
                overage_rate: None,
                overage_window: None,
                overage_tokens: None,
            });
        }
    }
    // Windows and CONCURRENT policies of a metric together, by policy_id, as the doc of `Quotas` says.
    quotas.sort_by(|a, b| (&a.metric, &a.policy_id).cmp(&(&b.metric, &b.policy_id)));
    let (tenant, subject) = (query.who.tenant.clone(), query.who.subject.clone());
    Quotas { tenant, subject, at: now, watermark: state.watermark, quotas }
}

/// The tenant's quotas in the ledger at `now`, folded as a hook starting on it folds it (throttles without tokens:
/// buckets live in the serving process). Reads only.
pub fn from_ledger(ledger: &Ledger, query: &QuotaQuery, now: Timestamp) -> Result<Quotas, HookError> {
    validate(query)?;
    let mut state = crate::load::load(ledger, now, true).map_err(|e| HookError::Ledger(ledger::causes(&e)))?;
    state.expire(now);
    Ok(of_state(&state, None, query, now))
}

/// A query whose names the ledger could hold (contract §9.2): 400 naming the field otherwise.
pub(crate) fn validate(query: &QuotaQuery) -> Result<(), HookError> {
    let named = |field: &'static str, value: &str| {
        schemas::validate::check_name(field, value).map_err(|e| {
            // The message names the field already: said once, after it.
            let message = e.to_string();
            let message = message.strip_prefix(field).map_or(message.clone(), |m| m.trim_start().to_string());
            HookError::BadRequest { field, message }
        })
    };
    let who = &query.who;
    named("tenant", &who.tenant)?;
    if who.tenant == rules::policy::PLAN_DEFAULT_TENANT {
        let message = "\"*\" names plan defaults, not a tenant".to_string();
        return Err(HookError::BadRequest { field: "tenant", message });
    }
    if let Some(metric) = &query.metric {
        named("metric", metric)?;
    }
    if let Some(subject) = &who.subject {
        named("subject", subject)?;
    }
    if let Some(project) = &who.project {
        named("project", project)?;
    }
    if let Some(api_key) = &who.api_key {
        named("api_key", api_key)?;
    }
    Ok(())
}
