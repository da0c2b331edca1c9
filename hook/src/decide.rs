//! One decision, as pure functions of the state (contract §6): every applicable policy is evaluated before anything
//! is consumed; the request is allowed only when every HARD limit and every throttle has room for all of it.
//!
//! Precedence, where several policies speak: an exhausted HARD quota (QUOTA_EXCEEDED: out of allowance until
//! the window resets) before an empty throttle bucket (RATE_LIMITED: capacity exists, retry soon), so that a
//! client is never told to retry in a second when it must wait for the month; of several exhausted quotas, the
//! one that resets last, and of several empty buckets, the one that refills last. A SHADOW policy that would deny
//! is recorded as SHADOW_DENIED and allows. SOFT limits never deny (their excess is billed). The policy
//! reported with an allowed request is the one with the least room left.
//!
//! A HARD quota with a throttled overage (PolicyEvent v7) is a wall no more: what goes beyond its
//! effective limit takes tokens from its overage bucket (`crate::buckets`), and when the bucket lacks them the quota
//! waits as a throttle does (RATE_LIMITED, retry when they refill). Only an ask larger than the whole bucket is
//! QUOTA_EXCEEDED: no wait lets it through before the window resets.
//!
//! A gauge quota (PolicyEvent v8) judges no consumption: while its tenant's level of its metric is
//! above its effective limit, it refuses every request of the tenant, of any metric, whose operation its violation
//! covers (QUOTA_EXCEEDED; a SHADOW gauge only says SHADOW_DENIED). It is never the policy reported with an allowed
//! request: its room is a level's, not the request's metric's.

use rules::overshoot;
use rules::policy::Applicable;
use schemas::*;

use crate::buckets::{BucketOf, Buckets};
use crate::state::{Named, State, Whose};

/// What a service asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ask<'a> {
    /// The tenant, and the subject, project and API key it names.
    pub who: &'a Who,
    /// The metric asked.
    pub metric: &'a str,
    /// How much of it.
    pub amount: i64,
    /// What the request does, when the service says: what a gauge's violation refuses by.
    pub operation: Option<Operation>,
}

impl<'a> Ask<'a> {
    /// An ask of `amount` of `metric` for `who`, naming no operation.
    pub fn new(who: &'a Who, metric: &'a str, amount: i64) -> Ask<'a> {
        Ask { who, metric, amount, operation: None }
    }

    /// The tenant.
    pub fn tenant(&self) -> &'a str {
        &self.who.tenant
    }

    /// The members it names, of every scope.
    pub fn named(&self) -> Named<'a> {
        Named::of_who(self.who)
    }

    /// The member of `scope` it counts for (none for TENANT).
    pub fn member(&self, scope: Scope) -> Option<&'a str> {
        self.who.member(scope)
    }

    /// The same ask, doing `operation`.
    pub fn doing(self, operation: Option<Operation>) -> Ask<'a> {
        Ask { operation, ..self }
    }
}

/// One applicable policy's view of the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evaluated {
    /// The policy version in force.
    pub policy: PolicyEvent,
    /// The window of the policy that contains now.
    pub window_start: Timestamp,
    /// The first instant after that window.
    pub window_end: Timestamp,
    /// Limit plus the grants overlapping the window (for a throttle: the bucket's capacity).
    pub limit: i64,
    /// Consumed in the window plus held by open reservations (for a throttle: capacity minus tokens left).
    pub used_before: i64,
    /// What the ask adds to this policy's window, by the metric's meter: its amount (a sum), 1 (COUNT), 1 or nothing
    /// (UNIQUE_COUNT: a member not counted yet, or one counted); a lease's and a gauge's, the amount.
    pub cost: i64,
    /// Whether the request fits.
    pub fits: bool,
    /// For a throttle that does not fit: milliseconds until enough tokens refill.
    pub retry_after_ms: Option<i64>,
    /// A HARD quota with a throttled overage, asked beyond its limit: the tokens the ask takes from the overage
    /// bucket (what goes beyond the limit), whether or not they are there.
    pub overage: Option<i64>,
}

impl Evaluated {
    /// What was left before the request (never below 0).
    pub fn remaining_before(&self) -> i64 {
        self.limit.saturating_sub(self.used_before).max(0)
    }
    /// Whether the policy is a throttle (a token bucket) rather than a quota.
    pub fn is_throttle(&self) -> bool {
        self.policy.is_throttle()
    }
    /// Whether it says "retry soon" when it does not fit: a throttle, a CONCURRENT policy, or a quota whose overage
    /// bucket will refill enough: capacity exists, it is only taken for now.
    pub fn waits(&self) -> bool {
        self.is_throttle() || self.policy.window == Window::CONCURRENT || self.overage_waits()
    }
    /// When a denial by it lifts at the earliest: the end of its calendar window, or for a ROLLING window when enough
    /// usage has aged out of it.
    pub fn lifts_at(&self) -> Timestamp {
        match (self.policy.window, self.retry_after_ms) {
            (Window::ROLLING, Some(ms)) => Timestamp(self.window_end.micros() - 1 + ms.saturating_mul(1_000)),
            _ => self.window_end,
        }
    }
    /// A quota beyond its limit whose overage bucket lacks the tokens for now.
    fn overage_waits(&self) -> bool {
        self.overage.is_some() && !self.fits && self.retry_after_ms.is_some()
    }
}

/// The answer: contract §6's fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// ALLOWED or DENIED.
    pub outcome: Outcome,
    /// Why.
    pub reason: Reason,
    /// The policy that decided (denied, or left the least room), if any applied.
    pub deciding: Option<Evaluated>,
}

/// Evaluates every policy applicable to the ask at `now`, and every gauge quota of its tenant.
pub fn evaluate(state: &State, buckets: &Buckets, ask: &Ask<'_>, now: Timestamp) -> Vec<Evaluated> {
    let applicable = state.policies.applicable(ask.tenant(), ask.metric, now);
    let mut evaluated: Vec<Evaluated> = applicable.iter().map(|a| evaluate_one(state, buckets, ask, a, now)).collect();
    evaluated.extend(evaluate_gauges(state, ask, now));
    evaluated
}

/// Milliseconds until a request `excess` beyond the ROLLING window `a` (of `length` microseconds) fits by its usage
/// aging out; the whole window's length when aging alone never makes room (what reservations hold, or an ask above the
/// limit): by then every usage it holds has left it.
fn rolling_wait(state: &State, ask: &Ask<'_>, a: &Applicable<'_>, length: i64, excess: i128) -> i64 {
    let now = a.window_end.micros() - 1;
    let excess = i64::try_from(excess).unwrap_or(i64::MAX);
    let whose = Whose::of(a.policy.scope, ask.member(a.policy.scope));
    let counters = state.counters(ask.tenant(), whose, ask.metric);
    let fits_at = counters.and_then(|c| c.room_by_aging((a.window_start, a.window_end), length, excess));
    let micros = fits_at.map_or(length, |at| at.micros() - now);
    (micros + 999) / 1_000
}

/// Evaluates the gauge quotas in force for the ask's tenant at `now`: one does not fit while the tenant's level of its
/// metric is above its effective limit (its limit plus the grants of that metric overlapping its window) and its
/// violation refuses the ask's operation. A level never reported is 0.
pub fn evaluate_gauges(state: &State, ask: &Ask<'_>, now: Timestamp) -> Vec<Evaluated> {
    let gauges = state.policies.gauges(ask.tenant(), now);
    gauges
        .iter()
        .map(|g| {
            let metric = &g.policy.header.metric;
            let grants = state.grants.get(&(ask.tenant().to_string(), metric.clone())).map_or(&[][..], Vec::as_slice);
            let limit =
                overshoot::effective_limit(g.policy.limit, Scope::TENANT, None, grants, g.window_start, g.window_end);
            let level = state.level(ask.tenant(), metric).map_or(0, |(_, level)| level);
            let refuses = g.policy.violation.is_some_and(|v| v.refuses(ask.operation));
            Evaluated {
                policy: g.policy.clone(),
                window_start: g.window_start,
                window_end: g.window_end,
                limit,
                used_before: level,
                cost: ask.amount,
                fits: level <= limit || !refuses,
                retry_after_ms: None,
                overage: None,
            }
        })
        .collect()
}

fn evaluate_one(state: &State, buckets: &Buckets, ask: &Ask<'_>, a: &Applicable<'_>, now: Timestamp) -> Evaluated {
    let standing = standing(state, Some(buckets), ask, a, now);
    let (limit, used_before, retry_after_ms) = match standing.usage {
        Usage::Bucket { tokens: Some(tokens), retry_after_ms } => {
            (standing.limit, i128::from(standing.limit - tokens), retry_after_ms)
        }
        Usage::Bucket { tokens: None, .. } => unreachable!("buckets were given"),
        Usage::Quota { effective_limit, consumed, held, .. } => {
            // In i128: what other writers recorded may hold and consume more than i64 together (see `state::Counters`).
            (effective_limit, i128::from(consumed) + held, None)
        }
    };
    // What the ask adds to this policy's window by the metric's meter: its amount, 1 event, or 1 member not seen yet.
    let cost = state.cost((ask.tenant(), ask.metric), ask.named(), ask.amount, (a.window_start, a.window_end));
    let mut fits = match standing.usage {
        Usage::Bucket { .. } => retry_after_ms.is_none(),
        Usage::Quota { .. } => used_before + i128::from(cost) <= i128::from(limit),
    };
    let (mut retry_after_ms, mut overage) = (retry_after_ms, None);
    if !fits && a.policy.overage_throttle().is_some() {
        // Only the part beyond the limit: an ask that starts within it uses what is left first.
        let beyond = (used_before + i128::from(ask.amount) - i128::from(limit)).min(i128::from(ask.amount));
        let beyond = i64::try_from(beyond).unwrap_or(i64::MAX);
        let member = ask.member(a.policy.scope);
        let (_, wait) = buckets.look(BucketOf::Overage, a.policy, ask.tenant(), member, beyond, now);
        let whole = a.policy.overage_rate.unwrap_or(0);
        fits = wait.is_none();
        // An ask beyond the whole bucket never fits before the window resets: a quota's denial, no retry.
        retry_after_ms = wait.filter(|_| beyond <= whole);
        overage = Some(beyond);
    }
    if let (false, Some(length)) = (fits, a.policy.rolling_micros()) {
        retry_after_ms =
            Some(rolling_wait(state, ask, a, length, used_before + i128::from(ask.amount) - i128::from(limit)));
    }
    Evaluated {
        policy: a.policy.clone(),
        window_start: a.window_start,
        window_end: a.window_end,
        limit,
        // A `long` in the DecisionEvent: past i64 it says i64::MAX, which is above every limit as the truth is.
        used_before: i64::try_from(used_before).unwrap_or(i64::MAX),
        cost,
        fits,
        retry_after_ms,
        overage,
    }
}

/// Evaluates every CONCURRENT policy that limits the ask's leases at `now`: a lease fits while the
/// leases active of the policy's tenant (or subject) are fewer than its limit plus the grants valid now; one that does
/// not fit may retry when the first of them expires (`window_end` then says when). `state` has expired the leases that
/// ended before `now`.
pub fn evaluate_leases(state: &State, ask: &Ask<'_>, now: Timestamp) -> Vec<Evaluated> {
    let concurrent = state.policies.concurrent(ask.tenant(), ask.metric, now);
    concurrent
        .iter()
        .map(|a| {
            let member = ask.member(a.policy.scope);
            let grants =
                state.grants.get(&(ask.tenant().to_string(), ask.metric.to_string())).map_or(&[][..], Vec::as_slice);
            let instant = (now, Timestamp(now.micros() + 1));
            let limit =
                overshoot::effective_limit(a.policy.limit, a.policy.scope, member, grants, instant.0, instant.1);
            let counters = state.counters(ask.tenant(), Whose::of(a.policy.scope, member), ask.metric);
            let active = counters.map_or(0, |c| c.active_leases());
            let fits = i128::from(active) + i128::from(ask.amount) <= i128::from(limit);
            let frees_at = counters.and_then(|c| c.first_lease_expiry()).filter(|_| !fits);
            // A slot frees the microsecond after its lease's expiry (a lease holds through its expires_at).
            let retry_after_ms = frees_at.map(|at| ((at.micros() - now.micros()) / 1_000 + 1).max(1));
            Evaluated {
                policy: a.policy.clone(),
                window_start: now,
                window_end: frees_at.unwrap_or(now),
                limit,
                used_before: active,
                cost: ask.amount,
                fits,
                retry_after_ms: if fits { None } else { Some(retry_after_ms.unwrap_or(1_000)) },
                overage: None,
            }
        })
        .collect()
}

/// What one applicable policy counts for an ask, before anything is decided: the numbers a decision compares
/// (`evaluate`) and the remaining quota a read answers without consuming (`crate::quotas`) alike.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standing {
    /// The policy's own limit (a throttle: its bucket's capacity, `burst`).
    pub limit: i64,
    /// What the policy counts.
    pub usage: Usage,
}

/// What a policy counts: a quota's window, or a throttle's bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Usage {
    /// A quota: an allowance per window.
    Quota {
        /// The grants overlapping the window that raise this policy's limit.
        grants: i64,
        /// The policy's limit plus those grants (contract §5).
        effective_limit: i64,
        /// Consumption in the window.
        consumed: i64,
        /// What open reservations hold now (summed in i128, see `state::Counters`).
        held: i128,
    },
    /// A throttle: a token bucket of the serving process (not in the ledger).
    Bucket {
        /// Whole tokens left now; `None` where no bucket is known (read from the ledger alone: buckets live in the
        /// serving process and start full).
        tokens: Option<i64>,
        /// With a bucket, when the ask's amount does not fit: milliseconds until it would.
        retry_after_ms: Option<i64>,
    },
}

/// What the applicable policy `a` counts for `ask` at `now` (`buckets`: the serving process's throttles, if known).
pub fn standing(
    state: &State,
    buckets: Option<&Buckets>,
    ask: &Ask<'_>,
    a: &Applicable<'_>,
    now: Timestamp,
) -> Standing {
    let member = ask.member(a.policy.scope);
    if let Some(burst) = a.policy.burst {
        let looked = buckets.map(|b| b.look(BucketOf::Throttle, a.policy, ask.tenant(), member, ask.amount, now));
        let usage = Usage::Bucket { tokens: looked.map(|l| l.0), retry_after_ms: looked.and_then(|l| l.1) };
        return Standing { limit: burst, usage };
    }
    let grants = state.grants.get(&(ask.tenant().to_string(), ask.metric.to_string())).map_or(&[][..], Vec::as_slice);
    let effective_limit =
        overshoot::effective_limit(a.policy.limit, a.policy.scope, member, grants, a.window_start, a.window_end);
    let whose = Whose::of(a.policy.scope, member);
    // A ROLLING window ends at every instant and a BILLING_CYCLE's bounds follow its anchor: neither is a window the
    // counters keep, and both are summed from the timelines.
    let consumed = match crate::state::timeline_micros(a.policy) {
        Some(_) => state.consumed_rolling(ask.tenant(), whose, ask.metric, (a.window_start, a.window_end)),
        None => state.consumed(ask.tenant(), whose, ask.metric, (a.window_start, a.window_end)),
    };
    let held = state.held(ask.tenant(), whose, ask.metric, now);
    let grants = effective_limit.saturating_sub(a.policy.limit);
    Standing { limit: a.policy.limit, usage: Usage::Quota { grants, effective_limit, consumed, held } }
}

/// Decides from the evaluations.
pub fn decide(evaluated: Vec<Evaluated>) -> Verdict {
    let denies = |e: &Evaluated| !e.fits && e.policy.enforcement == Enforcement::HARD;
    let waits = Evaluated::waits;
    // Of several that deny, the one with the longest wait: told to wait for the minute's end, a client would find
    // the month's quota still exhausted then.
    let quota = evaluated
        .iter()
        .filter(|e| denies(e) && !waits(e))
        .max_by_key(|e| (e.lifts_at(), std::cmp::Reverse(&e.policy.policy_id)));
    let throttle = evaluated
        .iter()
        .filter(|e| denies(e) && waits(e))
        .max_by_key(|e| (e.retry_after_ms, std::cmp::Reverse(&e.policy.policy_id)));
    if let Some(e) = quota.or(throttle) {
        let reason = match (e.policy.window, e.waits()) {
            (Window::CONCURRENT, _) => Reason::CONCURRENCY_LIMITED,
            (_, true) => Reason::RATE_LIMITED,
            (_, false) => Reason::QUOTA_EXCEEDED,
        };
        return Verdict { outcome: Outcome::DENIED, reason, deciding: Some(e.clone()) };
    }
    if let Some(e) = evaluated.iter().find(|e| !e.fits && e.policy.enforcement == Enforcement::SHADOW) {
        return Verdict { outcome: Outcome::ALLOWED, reason: Reason::SHADOW_DENIED, deciding: Some(e.clone()) };
    }
    let reason = if evaluated.is_empty() { Reason::NO_POLICY } else { Reason::WITHIN_LIMIT };
    let tightest = evaluated
        .into_iter()
        .filter(|e| e.policy.enforcement == Enforcement::HARD && !e.policy.is_gauge())
        .min_by_key(|e| (e.remaining_before(), e.policy.policy_id.clone()));
    Verdict { outcome: Outcome::ALLOWED, reason, deciding: tightest }
}
