//! What services send and what the hook answers (contract §6, contract §7 `serve` bodies).

use std::collections::BTreeMap;

use schemas::{DecisionEvent, Operation, Outcome, PolicyEvent, Reason, ReservationAction, Scope, Timestamp, Violation};
use serde::{Deserialize, Serialize};

/// `check(tenant, subject, metric, amount, idempotency_key, request_id)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)] // contract §6 `check`'s arguments, by their names.
pub struct CheckRequest {
    pub tenant: String,
    #[serde(default)]
    pub subject: Option<String>,
    pub metric: String,
    pub amount: i64,
    pub idempotency_key: String,
    #[serde(default)]
    pub request_id: Option<String>,
    /// What the request does (`insert`, `update`, `delete`, `read`): what a gauge quota over its limit refuses by.
    /// None is refused by every violation, as a write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<Operation>,
    /// The project the request is of: what PROJECT policies count by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// The API key (its name or id, never a secret) the request is of: what API_KEY policies count by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
}

/// `check` of several metrics at once: every policy of every metric is evaluated before any is
/// consumed, and the request is allowed on all of them or on none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckAmountsRequest {
    /// The tenant.
    pub tenant: String,
    /// The subject, if any: the same for every metric.
    #[serde(default)]
    pub subject: Option<String>,
    /// The amount of each metric (1 to [`AMOUNTS_MAX`] metrics).
    pub amounts: BTreeMap<String, i64>,
    /// The idempotency key of the whole request.
    pub idempotency_key: String,
    /// The request id every DecisionEvent and UsageEvent of the request shares (the key without it).
    #[serde(default)]
    pub request_id: Option<String>,
    /// What the request does, as [`CheckRequest::operation`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<Operation>,
    /// The project the request is of: what PROJECT policies count by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// The API key (its name or id, never a secret) the request is of: what API_KEY policies count by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
}

/// Metrics one request may name at most: each costs a decision and a usage event in the group's transaction, and
/// services meter a handful per call (requests, tokens in, tokens out, images).
pub const AMOUNTS_MAX: usize = 16;

/// The `source` of every event the hook records.
pub const SOURCE: &str = "hook";
/// Longest reservation: a day. Longer holds would keep quota away from everyone else for too long.
pub const TTL_MS_MAX: i64 = 24 * 3_600 * 1_000;

/// Which tenants a caller may act for (a token's `tenants`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TenantScope {
    /// Every tenant (an operator's token).
    All,
    /// Only these.
    Only(Vec<String>),
}

impl TenantScope {
    /// Whether the caller may act for `tenant`.
    pub fn covers(&self, tenant: &str) -> bool {
        match self {
            TenantScope::All => true,
            TenantScope::Only(tenants) => tenants.iter().any(|t| t == tenant),
        }
    }
}

/// The answer to a [`CheckAmountsRequest`]: a decision per metric, sorted by metric, all allowed or all denied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decisions {
    /// One per metric, sorted by metric.
    pub decisions: Vec<Decision>,
    /// The index of the decision that speaks for the request: denied, the one whose policy denied (a quota before a
    /// throttle, the longest wait first, as for one metric); allowed, the one nearest to its limit.
    pub deciding: usize,
}

impl Decisions {
    /// Whether the request may proceed (on every metric).
    pub fn allowed(&self) -> bool {
        self.decisions.iter().all(Decision::allowed)
    }

    /// The decision that speaks for the request.
    pub fn deciding(&self) -> &Decision {
        &self.decisions[self.deciding]
    }

    /// Whether this answer repeats the original decisions of the same idempotency key.
    pub fn replayed(&self) -> bool {
        self.decisions.iter().all(|d| d.replayed)
    }
}

/// `reserve` of several metrics at once: every policy of every metric is evaluated before any is
/// held, and each metric is reserved (a reservation of its own, committed or released on its own) or none is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReserveAmountsRequest {
    /// The tenant.
    pub tenant: String,
    /// The subject, if any: the same for every metric.
    #[serde(default)]
    pub subject: Option<String>,
    /// The amount each metric holds (1 to [`AMOUNTS_MAX`] metrics).
    pub amounts: BTreeMap<String, i64>,
    /// How long each reservation holds, in milliseconds.
    pub ttl_ms: i64,
    /// The idempotency key of the whole request.
    pub idempotency_key: String,
    /// The request id every DecisionEvent and ReservationEvent of the request shares (the key without it).
    #[serde(default)]
    pub request_id: Option<String>,
    /// What the request does, as [`CheckRequest::operation`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<Operation>,
    /// The project the request is of: what PROJECT policies count by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// The API key (its name or id, never a secret) the request is of: what API_KEY policies count by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
}

impl ReserveAmountsRequest {
    /// The metrics and amounts asked, as a check of them would ask them.
    pub(crate) fn asked(&self) -> CheckAmountsRequest {
        CheckAmountsRequest {
            tenant: self.tenant.clone(),
            subject: self.subject.clone(),
            amounts: self.amounts.clone(),
            idempotency_key: self.idempotency_key.clone(),
            request_id: self.request_id.clone(),
            operation: self.operation,
            project: self.project.clone(),
            api_key: self.api_key.clone(),
        }
    }
}

/// `reserve(tenant, subject, metric, amount, ttl, idempotency_key)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)] // contract §6 `reserve`'s arguments, by their names (`ttl_ms`: the contract's `ttl`, in milliseconds).
pub struct ReserveRequest {
    pub tenant: String,
    #[serde(default)]
    pub subject: Option<String>,
    pub metric: String,
    pub amount: i64,
    pub ttl_ms: i64,
    pub idempotency_key: String,
    #[serde(default)]
    pub request_id: Option<String>,
    /// What the request does, as [`CheckRequest::operation`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<Operation>,
    /// The project the request is of: what PROJECT policies count by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// The API key (its name or id, never a secret) the request is of: what API_KEY policies count by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
}

/// `acquire(tenant, subject, metric, ttl, idempotency_key)` of a lease: one slot of every CONCURRENT
/// policy of the metric that applies, held until it is released or `ttl_ms` after it was acquired or last renewed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)] // As `reserve`'s arguments, without an amount: a lease is one slot.
pub struct AcquireRequest {
    pub tenant: String,
    #[serde(default)]
    pub subject: Option<String>,
    pub metric: String,
    pub ttl_ms: i64,
    pub idempotency_key: String,
    #[serde(default)]
    pub request_id: Option<String>,
    /// The project the request is of: what PROJECT policies count by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// The API key (its name or id, never a secret) the request is of: what API_KEY policies count by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
}

/// A lease granted: what its holder presents to renew or release it, and to the resource the slot guards (which
/// refuses a token older than the newest it has seen).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lease {
    /// The lease, as `/v1/leases/{id}/renew` and `/release` name it.
    pub lease_id: String,
    /// Strictly greater than every token granted before for the tenant and metric, across restarts.
    pub fencing_token: i64,
    /// When the slot frees unless renewed.
    pub expires_at: Timestamp,
}

/// What a renewal or release of a lease presents: its fencing token, and for a renewal how long from now it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseStep {
    /// The token the lease was granted with: any other is a stale holder's, refused.
    pub fencing_token: i64,
    /// A renewal: the lease then expires `ttl_ms` from now. Ignored by a release.
    #[serde(default)]
    pub ttl_ms: Option<i64>,
}

/// The two signals an operator must never confuse (contract §6), and `OK`.
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Code {
    /// Allowed.
    OK,
    /// Going too fast: capacity exists, retry after a short wait.
    RATE_LIMITED,
    /// Every slot of a CONCURRENT policy is held by a lease: retry once one is released or expires.
    CONCURRENCY_LIMITED,
    /// Out of allowance until `resetsAt`.
    QUOTA_EXCEEDED,
    /// Allowed although the ledger could not record it: every policy that applied is `on_failure: OPEN`. The decision
    /// is kept in the hook's spill and recorded once the ledger takes writes again.
    FAIL_OPEN,
}

impl Code {
    /// The code of a decision's outcome and reason.
    pub fn of(outcome: Outcome, reason: Reason) -> Code {
        match (outcome, reason) {
            (Outcome::ALLOWED, Reason::FAIL_OPEN) => Code::FAIL_OPEN,
            (Outcome::ALLOWED, _) => Code::OK,
            (_, Reason::RATE_LIMITED) => Code::RATE_LIMITED,
            (_, Reason::CONCURRENCY_LIMITED) => Code::CONCURRENCY_LIMITED,
            _ => Code::QUOTA_EXCEEDED,
        }
    }
}

/// A decision (contract §6): outcome, reason, limit, remaining, resets_at, retry_after_ms, policy id and version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[allow(missing_docs)] // The contract §6 decision's fields and the DecisionEvent's (contract §3), by their names.
pub struct Decision {
    /// The DecisionEvent's event_id in the ledger.
    pub decision_id: String,
    pub request_id: String,
    pub outcome: Outcome,
    pub reason: Reason,
    pub code: Code,
    pub tenant: String,
    pub subject: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    pub metric: String,
    pub amount: i64,
    pub scope: Option<Scope>,
    pub policy_id: Option<String>,
    pub policy_version: Option<i32>,
    pub limit: Option<i64>,
    pub used_before: Option<i64>,
    pub remaining: Option<i64>,
    pub window_start: Option<Timestamp>,
    /// When the deciding window resets (its end); none for a gauge quota, whose level drops when its owner frees it.
    pub resets_at: Option<Timestamp>,
    pub retry_after_ms: Option<i64>,
    pub decided_at: Timestamp,
    /// The reservation a RESERVE allowed (a lease's id, for an acquire).
    pub reservation_id: Option<String>,
    /// The lease an acquire was granted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease: Option<Lease>,
    /// Whether this answer repeats the original decision of the same idempotency key (nothing consumed).
    pub replayed: bool,
    /// The amounts of every metric of the request this decision is one of, when it named several
    /// ([`CheckAmountsRequest`]); empty for a request of one metric.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub amounts: BTreeMap<String, i64>,
    /// A gauge quota decided: what it refuses while its level is above the limit (`used_before` is the level).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub violation: Option<Violation>,
    /// Whether a policy the hook holds (of any tenant or the plan, any version) names `metric`, as the writer answered:
    /// a figure labelled by metric may name it then, while a name no policy has came from the caller alone, and
    /// labelling by it would let a caller mint series without end. Not a field of the contract's decision.
    #[serde(skip)]
    pub metric_named: bool,
}

impl Decision {
    /// Whether the request may proceed.
    pub fn allowed(&self) -> bool {
        self.outcome == Outcome::ALLOWED
    }

    /// The decision a DecisionEvent records; `deciding` is its deciding policy, whose scope and violation the event
    /// does not hold.
    pub(crate) fn of_event(event: &DecisionEvent, deciding: Option<&PolicyEvent>, replayed: bool) -> Decision {
        let violation = deciding.and_then(|p| p.violation);
        let resets_at = event.reason.resets_at(event.header.occurred_at, event.window_end, event.retry_after_ms);
        Decision {
            decision_id: event.header.event_id.clone(),
            request_id: event.request_id.clone(),
            outcome: event.outcome,
            reason: event.reason,
            code: Code::of(event.outcome, event.reason),
            tenant: event.header.tenant.clone(),
            subject: event.header.subject.clone(),
            project: event.header.project.clone(),
            api_key: event.header.api_key.clone(),
            metric: event.header.metric.clone(),
            amount: event.amount,
            scope: deciding.map(|p| p.scope),
            policy_id: event.policy_id.clone(),
            policy_version: event.policy_version,
            limit: event.limit,
            used_before: event.used_before,
            remaining: event.remaining,
            window_start: event.window_start,
            resets_at: resets_at.filter(|_| violation.is_none()),
            retry_after_ms: event.retry_after_ms,
            decided_at: event.header.occurred_at,
            reservation_id: None,
            lease: None,
            replayed,
            amounts: BTreeMap::new(),
            violation,
            // The writer says, from its policies, as it answers.
            metric_named: false,
        }
    }
}

/// A reservation closed by `commit` or `release`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Closed {
    /// The reservation closed.
    pub reservation_id: String,
    /// COMMIT or RELEASE.
    pub action: ReservationAction,
    /// COMMIT: the consumption recorded; RELEASE: 0.
    pub amount: i64,
    /// What the reservation held.
    pub reserved: i64,
    /// COMMIT: what was charged above the reservation (estimate-then-reconcile).
    pub charged_above_reserved: i64,
    /// The event_id of the COMMIT or RELEASE recorded.
    pub event_id: String,
    /// Whether this answer repeats the original close of a retried commit or release with the same body (contract §9.1):
    /// nothing recorded again.
    pub replayed: bool,
    /// A lease's: the fencing token it holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fencing_token: Option<i64>,
    /// A lease's RENEW: when it expires now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Timestamp>,
}

/// Why a commit or release was refused (nothing recorded, nothing consumed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(tag = "refused", rename_all = "snake_case")]
pub enum Refusal {
    /// No RESERVE of that id is recorded.
    #[error("reservation {reservation_id:?} does not exist")]
    NotFound {
        /// The id asked for.
        reservation_id: String,
    },
    /// A COMMIT or RELEASE closed it already.
    #[error("reservation {reservation_id:?} is already closed ({by})")]
    AlreadyClosed {
        /// The id asked for.
        reservation_id: String,
        /// The action that closed it.
        by: String,
    },
    /// It expired before this close.
    #[error("reservation {reservation_id:?} expired at {expires_at}")]
    Expired {
        /// The id asked for.
        reservation_id: String,
        /// When it expired.
        expires_at: Timestamp,
    },
    /// It is another tenant's.
    #[error("reservation {reservation_id:?} belongs to a tenant this caller may not act for")]
    Forbidden {
        /// The id asked for.
        reservation_id: String,
    },
    /// A renewal or release of a lease presenting another fencing token than the lease's: its holder lost the slot.
    /// The lease's own token is not said: a stale holder (or a caller guessing ids) must learn nothing it could
    /// present next, and the holder of the lease knows it already.
    #[error(
        "lease {reservation_id:?} is not held under fencing token {presented}: a stale holder renews and releases \
         nothing"
    )]
    StaleToken {
        /// The id asked for.
        reservation_id: String,
        /// The token presented.
        presented: i64,
    },
    /// A lease closed as a reservation (a commit, or a release without its token), or a reservation renewed.
    #[error("{reservation_id:?} is {what}")]
    WrongKind {
        /// The id asked for.
        reservation_id: String,
        /// What it is, and how it is closed.
        what: String,
    },
}
