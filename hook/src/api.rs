//! What services send and what the hook answers (contract §6, contract §7 `serve` bodies).

use std::collections::BTreeMap;

use schemas::{
    DecisionEvent, Operation, Outcome, PolicyEvent, Reason, ReservationAction, Scope, Timestamp, Violation, Who,
};
use serde::{Deserialize, Serialize};

use crate::error::HookError;

/// What a check or a reservation asks (contract §6), of one metric or of several: whose it is, what of which metrics,
/// for how long it holds, under which idempotency key. `POST /v1/check` and `POST /v1/reservations` take it as their
/// body (contract §7), field for field. One metric is `metric` and `amount`, several are `amounts`, never both; a
/// reservation holds for `ttl_ms`, a check names none. Each operation checks that its request says it so
/// ([`Request::asked`]) and answers a 400 naming the field otherwise, as it does for every other field. The fields are
/// kept as sent, not as an enum of one metric or several: deserializing into an enum, a body that says it both ways
/// would fail as a serde error, which names no field, and callers read `field` to know what to fix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// The tenant, and the subject, project and API key it names: what each scope's policies count by.
    #[serde(flatten)]
    pub who: Who,
    /// One metric: the metric, of `amount`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<String>,
    /// One metric: how much of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount: Option<i64>,
    /// Several metrics: each one's amount (1 to [`AMOUNTS_MAX`] metrics), every policy of every metric evaluated
    /// before any is consumed or held, all or nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amounts: Option<BTreeMap<String, i64>>,
    /// A reservation: how long it holds, in milliseconds (the contract's `ttl`). A check holds nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<i64>,
    /// The idempotency key of the whole request.
    pub idempotency_key: String,
    /// The request id every event of the request shares (the key without it; a reservation's id for a reservation of
    /// one metric).
    #[serde(default)]
    pub request_id: Option<String>,
    /// What the request does (`insert`, `update`, `delete`, `read`): what a gauge quota over its limit refuses by.
    /// None is refused by every violation, as a write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<Operation>,
}

/// What a [`Request`] asks of which metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked<'a> {
    /// `amount` of one `metric`.
    One {
        /// The metric.
        metric: &'a str,
        /// How much of it.
        amount: i64,
    },
    /// Each metric's amount.
    Several(&'a BTreeMap<String, i64>),
}

impl Request {
    /// A request of `amount` of one `metric` for `who`, under `idempotency_key`: a check, or with `ttl_ms` a
    /// reservation.
    pub fn one(who: Who, metric: impl Into<String>, amount: i64, idempotency_key: impl Into<String>) -> Request {
        Request { metric: Some(metric.into()), amount: Some(amount), ..Request::bare(who, idempotency_key.into()) }
    }

    /// A request of several metrics at once for `who`, under `idempotency_key`.
    pub fn several(who: Who, amounts: BTreeMap<String, i64>, idempotency_key: impl Into<String>) -> Request {
        Request { amounts: Some(amounts), ..Request::bare(who, idempotency_key.into()) }
    }

    fn bare(who: Who, idempotency_key: String) -> Request {
        Request {
            who,
            metric: None,
            amount: None,
            amounts: None,
            ttl_ms: None,
            idempotency_key,
            request_id: None,
            operation: None,
        }
    }

    /// What it asks, one metric or several, or the 400 naming the field at fault: both forms given, or neither
    /// whole.
    pub fn asked(&self) -> Result<Asked<'_>, HookError> {
        let bad = |field, message: &str| HookError::BadRequest { field, message: message.to_string() };
        match (&self.amounts, &self.metric, self.amount) {
            (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
                Err(bad("amounts", "give either `amounts` (several metrics) or `metric` and `amount` (one), not both"))
            }
            (Some(amounts), None, None) => Ok(Asked::Several(amounts)),
            (None, None, _) => Err(bad("metric", "missing (or give `amounts` for several metrics)")),
            (None, Some(_), None) => Err(bad("amount", "missing")),
            (None, Some(metric), Some(amount)) => Ok(Asked::One { metric, amount }),
        }
    }

    /// The metric and amount of a request of one, or the 400 of one that is not.
    pub(crate) fn one_metric(&self) -> Result<(&str, i64), HookError> {
        match self.asked()? {
            Asked::One { metric, amount } => Ok((metric, amount)),
            Asked::Several(_) => Err(HookError::BadRequest {
                field: "amounts",
                message: "several metrics are asked of `check_amounts` and `reserve_amounts`, which decide them all \
                          or none"
                    .into(),
            }),
        }
    }

    /// The amounts of a request of several metrics, or the 400 of one that is not.
    pub(crate) fn several_metrics(&self) -> Result<&BTreeMap<String, i64>, HookError> {
        match self.asked()? {
            Asked::Several(amounts) => Ok(amounts),
            Asked::One { .. } => Err(HookError::BadRequest {
                field: "metric",
                message: "one metric is asked of `check` and `reserve`; `amounts` names several".into(),
            }),
        }
    }

    /// How long a reservation holds, or the 400 of a reservation that does not say.
    pub(crate) fn held_ms(&self) -> Result<i64, HookError> {
        self.ttl_ms.ok_or_else(|| HookError::BadRequest {
            field: "ttl_ms",
            message: "missing: a reservation holds its amount for `ttl_ms` milliseconds".into(),
        })
    }

    /// The 400 of a check that names how long it holds: it holds nothing.
    pub(crate) fn holds_nothing(&self) -> Result<(), HookError> {
        match self.ttl_ms {
            Some(ttl_ms) => Err(HookError::BadRequest {
                field: "ttl_ms",
                message: format!("{ttl_ms} given to a check, which holds nothing: a reservation holds for a time"),
            }),
            None => Ok(()),
        }
    }
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

/// The answer to a [`Request`] of several metrics: a decision per metric, sorted by metric, all allowed or all denied.
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

/// `acquire(tenant, subject, metric, ttl, idempotency_key)` of a lease: one slot of every CONCURRENT
/// policy of the metric that applies, held until it is released or `ttl_ms` after it was acquired or last renewed.
/// `POST /v1/leases` takes it as its body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)] // As a reservation's request, of one metric without an amount: a lease is one slot.
pub struct AcquireRequest {
    /// The tenant, and the subject, project and API key it names: what each scope's policies count by.
    #[serde(flatten)]
    pub who: Who,
    pub metric: String,
    pub ttl_ms: i64,
    pub idempotency_key: String,
    #[serde(default)]
    pub request_id: Option<String>,
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
    /// Whose request it decided.
    #[serde(flatten)]
    pub who: Who,
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
    /// ([`Request::amounts`]); empty for a request of one metric.
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
            who: event.header.who(),
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
