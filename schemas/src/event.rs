//! The six event records of contract §3 as Rust types, with their JSON form (the form `schemas encode` reads and
//! `schemas decode` prints: field names exactly as in the `.avsc` files, timestamps as RFC 3339 strings).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::timestamp::Timestamp;

/// The fields every event record starts with (contract §3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// Unique id chosen by the producer; the deduplication key, forever.
    pub event_id: String,
    /// Event time.
    pub occurred_at: Timestamp,
    /// The paying organization (`*` on a policy: the plan default).
    pub tenant: String,
    /// The user inside the tenant (or whatever the producer counts SUBJECT policies by).
    #[serde(default)]
    pub subject: Option<String>,
    /// The project inside the tenant, when the producer names one: what PROJECT policies count by (every schema's
    /// next version after v2, PolicyEvent v9; absent before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// The API key (its name or id, never a secret), when the producer names one: what API_KEY policies count by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    /// What is counted: `requests`, `tokens`, `bytes`, ...
    pub metric: String,
    /// The producing service.
    pub source: String,
}

/// `UsageEvent` (topic `quota.usage`): consumption.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageEvent {
    /// The fields every event starts with.
    #[serde(flatten)]
    pub header: Header,
    /// What was consumed, in the metric's unit (at least 0).
    pub quantity: i64,
    /// The request that consumed it, when known: what `audit why` looks up.
    #[serde(default)]
    pub request_id: Option<String>,
    /// Sorted, so that the canonical encoding of an event does not depend on map order.
    #[serde(default)]
    pub attributes: BTreeMap<String, String>,
}

/// `DecisionEvent` (topic `quota.decisions`): an audit fact, never consumption by itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionEvent {
    /// The fields every event starts with.
    #[serde(flatten)]
    pub header: Header,
    /// The request decided.
    pub request_id: String,
    /// The caller's key: the same key answers the same decision.
    pub idempotency_key: String,
    /// What the request asked to consume.
    pub amount: i64,
    /// Allowed or denied.
    pub outcome: Outcome,
    /// Why.
    pub reason: Reason,
    /// The policy that decided (the one that denied, or the tightest that allowed).
    #[serde(default)]
    pub policy_id: Option<String>,
    /// Its version.
    #[serde(default)]
    pub policy_version: Option<i32>,
    /// The start of that policy's window.
    #[serde(default)]
    pub window_start: Option<Timestamp>,
    /// Its end (exclusive).
    #[serde(default)]
    pub window_end: Option<Timestamp>,
    /// The effective limit of that window (limit plus grants).
    #[serde(default)]
    pub limit: Option<i64>,
    /// What the window had consumed and held before this request.
    #[serde(default)]
    pub used_before: Option<i64>,
    /// What the window has left after this decision.
    #[serde(default)]
    pub remaining: Option<i64>,
    /// When a denied request may pass, for RATE_LIMITED: milliseconds after the decision.
    #[serde(default)]
    pub retry_after_ms: Option<i64>,
    /// The name of the token that asked (`serve`'s token file), never its secret: which caller a decision was
    /// made for, when several share a tenant. None for a decision made without a token (a library caller,
    /// another enforcer) and for every decision recorded before DecisionEvent v2.
    #[serde(default)]
    pub token_name: Option<String>,
}

/// `ReservationEvent` (topic `quota.reservations`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReservationEvent {
    /// The fields every event starts with.
    #[serde(flatten)]
    pub header: Header,
    /// The reservation (with the tenant: one reservation).
    pub reservation_id: String,
    /// RESERVE, COMMIT or RELEASE.
    pub action: ReservationAction,
    /// RESERVE: the upper bound held; COMMIT: the actual consumption; RELEASE: 0.
    pub amount: i64,
    /// RESERVE: when it expires unclosed; RENEW: the lease's new expiry.
    #[serde(default)]
    pub expires_at: Option<Timestamp>,
    /// Set on every event of a lease (schema v2; absent before): the RESERVE's is the token its slot was granted
    /// with, strictly increasing per tenant and metric; a RENEW's or RELEASE's the token the holder presented. A
    /// reservation whose RESERVE has none is a reservation of an amount, not a lease.
    #[serde(default)]
    pub fencing_token: Option<i64>,
}

impl ReservationEvent {
    /// Whether it is an event of a lease (a slot of a CONCURRENT policy), not of a reservation of an amount.
    pub fn is_lease(&self) -> bool {
        self.fencing_token.is_some()
    }
}

/// `GrantEvent` (topic `quota.grants`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantEvent {
    /// The fields every event starts with.
    #[serde(flatten)]
    pub header: Header,
    /// The grant.
    pub grant_id: String,
    /// What it adds to the limit (more than 0).
    pub amount: i64,
    /// When it starts to count.
    pub valid_from: Timestamp,
    /// Exclusive.
    pub valid_until: Timestamp,
    /// Why it was given, for people.
    pub reason: String,
    /// Who gave it, as the control plane recorded it (schema v2; absent in v1 and from producers that do not say).
    #[serde(default)]
    pub actor: Option<String>,
}

/// `PolicyEvent` (topic `quota.policies`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyEvent {
    /// The fields every event starts with.
    #[serde(flatten)]
    pub header: Header,
    /// The policy; its versions share it.
    pub policy_id: String,
    /// Grows per policy_id.
    pub version: i32,
    /// TENANT (the tenant's sum) or SUBJECT (each subject separately).
    pub scope: Scope,
    /// What a window may consume (a throttle: what refills per window).
    pub limit: i64,
    /// The window the limit holds over.
    pub window: Window,
    /// HARD, SOFT or SHADOW.
    pub enforcement: Enforcement,
    /// When this version starts to govern: every window ending after it.
    pub effective_from: Timestamp,
    /// A throttle: a token bucket of this capacity refilling `limit` per window (schema v2; absent in v1).
    #[serde(default)]
    pub burst: Option<i64>,
    /// Who made this version, as the control plane recorded it (schema v3; absent before and from producers that
    /// do not say).
    #[serde(default)]
    pub actor: Option<String>,
    /// Why this version was made, for people (schema v3, as `actor`).
    #[serde(default)]
    pub reason: Option<String>,
    /// The IANA time zone of its calendar windows (HOUR, DAY, MONTH), e.g. `America/New_York` (schema v4; absent
    /// before): none is UTC. Validation refuses a name the IANA database does not know.
    #[serde(default)]
    pub time_zone: Option<String>,
    /// What the hook answers when the ledger cannot record its decisions (schema v6; absent before): none is
    /// CLOSED.
    #[serde(default)]
    pub on_failure: Option<OnFailure>,
    /// Overage handling THROTTLE (schema v7; absent before), for a HARD quota: beyond its effective limit the policy
    /// lets this many units through per `overage_window`, a token bucket of that capacity, instead of a wall.
    /// Validation takes it only with `overage_window`, on a HARD quota.
    #[serde(default)]
    pub overage_rate: Option<i64>,
    /// The period `overage_rate` is counted per (schema v7, as `overage_rate`).
    #[serde(default)]
    pub overage_window: Option<Window>,
    /// Set, the policy is a gauge quota (schema v8; absent before): its metric's usage events carry the tenant's
    /// current level, the latest by event time, and while the level is above the effective limit the hook refuses
    /// what the violation covers of the tenant's requests, of every metric (after HBase's space
    /// quotas). Validation takes it on HARD or SHADOW policies of TENANT scope with a window of consumption.
    #[serde(default)]
    pub violation: Option<Violation>,
    /// The length of a ROLLING window in seconds (schema v10; absent before): the limit holds over every interval
    /// of this length ending at any instant. Validation takes it with window ROLLING only, from 1 s
    /// to 31 days (what the hook folds at start covers).
    #[serde(default)]
    pub window_seconds: Option<i64>,
    /// The billing anchor of a BILLING_CYCLE window (schema v11; absent before): cycles start every month on its day
    /// and time of day on the clock of `time_zone`, on the last day of shorter months. Validation
    /// takes it with window BILLING_CYCLE only.
    #[serde(default)]
    pub cycle_anchor: Option<Timestamp>,
    /// The percents of a window's effective limit at which the hook writes a THRESHOLD alert (schema v12; absent
    /// before): none is [`DEFAULT_ALERT_THRESHOLDS`], an empty list no THRESHOLD alert (a policy may
    /// set its own). Validation takes at most 10, each 1 to 1,000, strictly increasing, on quotas whose windows are
    /// alerted only. [`PolicyEvent::alert_thresholds`] reads it with its default.
    #[serde(default)]
    pub alert_thresholds: Option<Vec<i32>>,
    /// In percent, 1 to 99: one subject's consumption in a window of this policy above this share of the tenant's
    /// consumption in that window calls for a SUBJECT_SHARE alert (schema v12; absent before); none calls for none.
    /// Validation takes it on TENANT policies whose windows are alerted only.
    #[serde(default)]
    pub alert_subject_share: Option<i32>,
}

/// The percents of a window's effective limit at which a THRESHOLD alert is written for a policy that sets none of its
/// own (the contract's default: 80%, 90% and 100% of the effective limit).
pub const DEFAULT_ALERT_THRESHOLDS: [i32; 3] = [80, 90, 100];

impl PolicyEvent {
    /// Version 1 of a TENANT-scope policy with every optional setting absent, which is what each absence means in the
    /// contract (no burst, no actor, UTC, fail CLOSED, no overage throttle, no gauge, the default alert thresholds...).
    /// A caller sets what differs with struct update syntax: `PolicyEvent { burst: Some(50), ..PolicyEvent::new(..) }`.
    pub fn new(
        header: Header,
        policy_id: impl Into<String>,
        limit: i64,
        window: Window,
        enforcement: Enforcement,
        effective_from: Timestamp,
    ) -> Self {
        Self {
            header,
            policy_id: policy_id.into(),
            version: 1,
            scope: Scope::TENANT,
            limit,
            window,
            enforcement,
            effective_from,
            burst: None,
            actor: None,
            reason: None,
            time_zone: None,
            on_failure: None,
            overage_rate: None,
            overage_window: None,
            violation: None,
            window_seconds: None,
            cycle_anchor: None,
            alert_thresholds: None,
            alert_subject_share: None,
        }
    }

    /// A throttle limits a rate, not an allowance: a bucket of `burst` lets up to `burst` plus `limit` through in
    /// one window by design, so its window's total is no limit. Reconcile judges no throttle's windows, and
    /// billing takes no throttle for a tenant's monthly quota; the hook keeps its buckets.
    pub fn is_throttle(&self) -> bool {
        self.burst.is_some()
    }

    /// Its overage throttle, (units, per window), when overage beyond its limit is throttled rather than refused
    /// (the design's `overage_policy: throttle`).
    pub fn overage_throttle(&self) -> Option<(i64, Window)> {
        self.overage_rate.zip(self.overage_window)
    }

    /// Whether it is a gauge quota ([`PolicyEvent::violation`]): it limits a level, not consumption in a window, so
    /// nothing that sums a window's consumption (the hook's quotas, reconcile's windows, billing) takes it.
    pub fn is_gauge(&self) -> bool {
        self.violation.is_some()
    }

    /// The length of its ROLLING window in microseconds, when it is one.
    pub fn rolling_micros(&self) -> Option<i64> {
        match self.window {
            Window::ROLLING => self.window_seconds.map(|s| s.saturating_mul(1_000_000)),
            _ => None,
        }
    }

    /// The percents of its windows' effective limit at which a THRESHOLD alert is written, in increasing order: its
    /// `alert_thresholds`, [`DEFAULT_ALERT_THRESHOLDS`] when it sets none.
    pub fn alert_thresholds(&self) -> &[i32] {
        self.alert_thresholds.as_deref().unwrap_or(&DEFAULT_ALERT_THRESHOLDS)
    }

    /// The time zone of its calendar windows: `time_zone`, UTC when it has none. A name the IANA database does not
    /// know is refused by validation before an event is recorded; one read from elsewhere counts as UTC.
    pub fn zone(&self) -> chrono_tz::Tz {
        self.time_zone.as_deref().and_then(|name| name.parse().ok()).unwrap_or(chrono_tz::Tz::UTC)
    }
}

/// `AdjustmentEvent` (topic `quota.adjustments`), written by reconcile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdjustmentEvent {
    /// The fields every event starts with.
    #[serde(flatten)]
    pub header: Header,
    /// Deterministic from its inputs, so a rerun writes nothing new; also its event_id.
    pub adjustment_id: String,
    /// What reconcile found.
    pub kind: AdjustmentKind,
    /// The policy of a window adjustment.
    #[serde(default)]
    pub policy_id: Option<String>,
    /// The window (or period) it is about, when it is about one.
    #[serde(default)]
    pub window_start: Option<Timestamp>,
    /// Its end (exclusive).
    #[serde(default)]
    pub window_end: Option<Timestamp>,
    /// A delta: the adjustments of one concern add up to its current truth.
    pub amount: i64,
    /// The event_ids it is about (for an overshoot, the events that crossed the limit).
    pub refs: Vec<String>,
    /// The reconcile run that wrote it.
    pub run_id: String,
    /// OVERSHOOT and SHADOW_OVER_LIMIT: the scope of the policy whose window it is; `None` for the other kinds and
    /// for adjustments written before v2 (reconcile then reads it from the policy).
    #[serde(default)]
    pub scope: Option<Scope>,
}

/// `AlertEvent` (topic `quota.alerts`): a warning before anyone hits a wall, written by the
/// enforcement hook as a request reaches a threshold of a window's effective limit, and by reconcile from the ledger
/// (contract §3 says what each field holds for each kind).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlertEvent {
    /// The fields every event starts with; the member of the policy's scope in `subject`, `project` or `api_key`.
    #[serde(flatten)]
    pub header: Header,
    /// Deterministic from what it is about, so the same alert found again is a duplicate; also its event_id.
    pub alert_id: String,
    /// What was found.
    pub kind: AlertKind,
    /// The policy the alert is of.
    #[serde(default)]
    pub policy_id: Option<String>,
    /// Its version in force.
    #[serde(default)]
    pub policy_version: Option<i32>,
    /// Its scope.
    #[serde(default)]
    pub scope: Option<Scope>,
    /// The window the alert is about.
    #[serde(default)]
    pub window_start: Option<Timestamp>,
    /// Its end (exclusive).
    #[serde(default)]
    pub window_end: Option<Timestamp>,
    /// The threshold reached, in percent (THRESHOLD: of the effective limit; SUBJECT_SHARE: the share set;
    /// OPEN_TOO_LONG: 100; DENY_RATE: the deny rate the first hour had to reach).
    pub threshold_percent: i32,
    /// What it was measured against (THRESHOLD: the window's effective limit; SUBJECT_SHARE: the tenant's consumption;
    /// OPEN_TOO_LONG: the age in seconds; DENY_RATE: the previous version's deny rate in percent).
    #[serde(default)]
    pub limit: Option<i64>,
    /// What was observed then (THRESHOLD: consumption, and holds with the request when the hook found it;
    /// SUBJECT_SHARE: the subject's consumption; OPEN_TOO_LONG: seconds held; DENY_RATE: the first hour's deny rate).
    pub observed: i64,
    /// The request that reached it (OPEN_TOO_LONG: the reservation's id).
    #[serde(default)]
    pub request_id: Option<String>,
}

/// `CorrectionEvent` (topic `quota.corrections`): a correction of a recorded usage event, a new entry that references
/// it (TigerBeetle's correcting transfers, Stripe's meter event adjustments): VOID counts the original 0 from now on,
/// AMEND counts it `quantity` instead. The original stays recorded; its tenant, subject, project, API key, metric and
/// event time stay the ones counted, and the header repeats them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CorrectionEvent {
    /// The fields every event starts with: its own event_id (the idempotency key of the correction), when it was
    /// made, and the original's tenant, subject, project, API key and metric.
    #[serde(flatten)]
    pub header: Header,
    /// The event_id of the UsageEvent corrected.
    pub original_event_id: String,
    /// VOID or AMEND.
    pub action: CorrectionAction,
    /// AMEND: what the original counts from now on; none on a VOID.
    #[serde(default)]
    pub quantity: Option<i64>,
    /// Who made it.
    pub actor: String,
    /// Why, for people.
    pub reason: String,
}

impl CorrectionEvent {
    /// What the original counts once this correction holds: 0 for a VOID, `quantity` for an AMEND.
    pub fn corrected_quantity(&self) -> i64 {
        match self.action {
            CorrectionAction::VOID => 0,
            CorrectionAction::AMEND => self.quantity.unwrap_or(0),
        }
    }
}

/// `CapacityLeaseEvent` (topic `quota.capacity_leases`): a step in the life of a capacity lease, units of one window of
/// an ESCROW policy that the tenant's owner shard (the allocator) lent to a holder (contract §9.6). Recorded by the
/// allocator; the header names the tenant and the policy's metric.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapacityLeaseEvent {
    /// The fields every event starts with.
    #[serde(flatten)]
    pub header: Header,
    /// The lease: every event of its life names it.
    pub capacity_lease_id: String,
    /// GRANT, RENEW, RETURN, EXPIRE or RECLAIM.
    pub action: CapacityLeaseAction,
    /// Who holds it: `shard-NNNN` in one process, a node's id in a cluster.
    pub holder: String,
    /// The ESCROW policy whose window the units are of.
    pub policy_id: String,
    /// Its version in force at the grant.
    pub policy_version: i32,
    /// The window the units are of.
    pub window_start: Timestamp,
    /// Its end (exclusive).
    pub window_end: Timestamp,
    /// GRANT: units put out (>= 1); RENEW: units added; RETURN and RECLAIM: units that came back; EXPIRE: 0.
    pub units: i64,
    /// RENEW: units used under it so far; RETURN and RECLAIM: in all. None on GRANT and EXPIRE.
    #[serde(default)]
    pub used: Option<i64>,
    /// GRANT and RENEW: when it expires, by the allocator's clock. None otherwise.
    #[serde(default)]
    pub expires_at: Option<Timestamp>,
}

/// `PlanAssignmentEvent` (topic `quota.plans`): a tenant assigned to a named plan from `effective_from`, until its next
/// assignment in effect. A plan's policies are PolicyEvents whose tenant is `*` followed by the plan's name
/// ([`crate::partition::plan_owner`]); a tenant's own policies cover its plan's, and its plan's the plan defaults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanAssignmentEvent {
    /// The fields every event starts with: the tenant assigned, its metric `*` (every metric), no members.
    #[serde(flatten)]
    pub header: Header,
    /// The plan's name; none: back to the plan defaults alone.
    #[serde(default)]
    pub plan: Option<String>,
    /// From when.
    pub effective_from: Timestamp,
    /// Who assigned it.
    pub actor: String,
    /// Why, for people.
    pub reason: String,
}

/// `MeterEvent` (topic `quota.meters`): one version of a meter, how a metric's usage events aggregate into the quantity
/// a window counts and a bill charges (OpenMeter's meters, Lago's billable metrics). A metric without a meter sums its
/// usage; the tenant `*` declares the meter of every tenant that has none of its own for the metric.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeterEvent {
    /// The fields every event starts with: the tenant (or `*`) and the metric the meter aggregates.
    #[serde(flatten)]
    pub header: Header,
    /// The version, growing per tenant and metric.
    pub version: i32,
    /// How the usage events of a window aggregate.
    pub aggregation: Aggregation,
    /// UNIQUE_COUNT: the header field whose distinct values are counted; none for the other aggregations.
    #[serde(default)]
    pub field: Option<MeterField>,
    /// The version aggregates every window starting at or after this instant, until a later version's.
    pub effective_from: Timestamp,
    /// Who made it.
    pub actor: String,
    /// Why, for people.
    pub reason: String,
}

/// Generates an Avro enum as a Rust enum with its symbols in schema order.
macro_rules! avro_enum {
    ($(#[$doc:meta])* $name:ident { $($symbol:ident),+ $(,)? }) => {
        $(#[$doc])*
        // The variants are the contract's Avro symbols, spelled as producers in other languages spell them, and
        // documented by the enum's own doc.
        #[allow(non_camel_case_types, missing_docs)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub enum $name { $($symbol),+ }

        impl $name {
            /// The symbols in the order of the Avro schema (the order gives the encoded index).
            pub const SYMBOLS: &'static [&'static str] = &[$(stringify!($symbol)),+];
            const ALL: &'static [$name] = &[$($name::$symbol),+];

            /// The Avro symbol.
            pub fn symbol(self) -> &'static str {
                Self::SYMBOLS[self.index()]
            }

            /// The index of the symbol in the Avro schema.
            pub fn index(self) -> usize {
                self as usize
            }

            /// The value named by an Avro symbol.
            pub fn from_symbol(symbol: &str) -> Option<Self> {
                Self::SYMBOLS.iter().position(|s| *s == symbol).map(|i| Self::ALL[i])
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.symbol())
            }
        }
    };
}

avro_enum!(
    /// Whether a request may proceed.
    Outcome { ALLOWED, DENIED }
);
avro_enum!(
    /// Why a decision came out as it did.
    Reason { WITHIN_LIMIT, QUOTA_EXCEEDED, RATE_LIMITED, CONCURRENCY_LIMITED, NO_POLICY, SHADOW_DENIED, FAIL_OPEN }
);

impl Reason {
    /// When a decision with this reason, decided at `decided_at`, has room again: for RATE_LIMITED when a retry
    /// of the same amount fits, `retry_after_ms` later (a throttle's calendar window says nothing of when its
    /// bucket has room: a month-window throttle said "resets in weeks" next to "retry in 3 s"); for QUOTA_EXCEEDED
    /// the end of the decision's window or, for a ROLLING window, when its wait ends; otherwise the end of the
    /// decision's window.
    pub fn resets_at(
        self,
        decided_at: Timestamp,
        window_end: Option<Timestamp>,
        retry_after_ms: Option<i64>,
    ) -> Option<Timestamp> {
        match (self, retry_after_ms) {
            (Reason::RATE_LIMITED | Reason::CONCURRENCY_LIMITED, Some(ms)) => {
                Some(Timestamp(decided_at.micros().saturating_add(ms.saturating_mul(1_000))))
            }
            // A calendar window's wait is until its end; a ROLLING window's (PolicyEvent v10), whose own end is the
            // decision's instant, until enough usage ages out: the later of the two.
            (Reason::QUOTA_EXCEEDED, Some(ms)) => {
                let waited = Timestamp(decided_at.micros().saturating_add(ms.saturating_mul(1_000)));
                Some(window_end.map_or(waited, |end| end.max(waited)))
            }
            _ => window_end,
        }
    }

    /// What the reason means, in words support can paste to a customer (contract §6 keeps apart going too fast and
    /// being out of allowance). Decisions of other enforcement points arrive through Kafka with any reason, so
    /// every reason has words, whether or not this hook decides it.
    pub fn in_words(self) -> &'static str {
        match self {
            Reason::WITHIN_LIMIT => "The request was within every limit that applied to it.",
            Reason::QUOTA_EXCEEDED => {
                "Out of allowance: the quota of the window was used up. Requests pass again when the window resets, \
                 or sooner if the quota is raised or a grant is added."
            }
            Reason::RATE_LIMITED => {
                "Going too fast: the rate limit's burst was spent, but allowance remains. A retry after the wait \
                 given should pass."
            }
            Reason::CONCURRENCY_LIMITED => {
                "Too many requests in flight at once: allowance remains. A retry after a short wait, once others \
                 have finished, should pass."
            }
            Reason::NO_POLICY => "No policy applied to this tenant and metric, so nothing limited the request.",
            Reason::SHADOW_DENIED => {
                "A SHADOW policy would have denied the request. Shadow policies only record what they would do, \
                 so it was allowed."
            }
            Reason::FAIL_OPEN => {
                "Let through unchecked by the record: the enforcement point could not record its decision (its \
                 ledger refused writes, or its quota state was out of reach), and the policies that applied are set \
                 to fail open, so it allowed the request rather than fail it. The usage counts all the same."
            }
        }
    }
}

avro_enum!(
    /// A step of a reservation's life; RENEW (schema v2) extends a lease's.
    ReservationAction { RESERVE, COMMIT, RELEASE, RENEW }
);
avro_enum!(
    /// TENANT policies limit the tenant's sum; SUBJECT, PROJECT and API_KEY policies (the last two from PolicyEvent v9)
    /// each member of their scope separately, events naming no member counting together as a member of their own.
    Scope { TENANT, SUBJECT, PROJECT, API_KEY }
);

impl Scope {
    /// The member of this scope an event of `header` counts for: its subject, project or API key (`None` when it names
    /// none, or for TENANT, whose windows every event of the tenant counts in).
    pub fn member_of(self, header: &Header) -> Option<&str> {
        match self {
            Scope::TENANT => None,
            Scope::SUBJECT => header.subject.as_deref(),
            Scope::PROJECT => header.project.as_deref(),
            Scope::API_KEY => header.api_key.as_deref(),
        }
    }
}
avro_enum!(
    /// Calendar-aligned windows, in a policy's time zone; CONCURRENT (PolicyEvent v5) is no window: its limit is on the
    /// leases active at once; ROLLING (PolicyEvent v10) is every interval of the policy's `window_seconds` ending at an
    /// instant; BILLING_CYCLE (PolicyEvent v11) is the tenant's billing cycle, monthly from the policy's `cycle_anchor`.
    Window { MINUTE, HOUR, DAY, MONTH, CONCURRENT, ROLLING, BILLING_CYCLE }
);
impl Window {
    /// The window as people read it: its symbol, with a ROLLING window's length (`ROLLING 86400s`).
    pub fn label(self, window_seconds: Option<i64>) -> String {
        match window_seconds {
            Some(seconds) => format!("{self} {seconds}s"),
            None => self.to_string(),
        }
    }
}

avro_enum!(
    /// HARD denies, SOFT bills the excess, SHADOW only reports.
    Enforcement { HARD, SOFT, SHADOW }
);
avro_enum!(
    /// When the ledger cannot record the hook's decisions (a full disk, an I/O error): CLOSED fails the request (503),
    /// OPEN allows it under the hook's emergency rate (FAIL_OPEN), keeping the decision in a spill until the ledger
    /// takes it.
    OnFailure { CLOSED, OPEN }
);
avro_enum!(
    /// What a gauge quota over its limit refuses until its level drops back (PolicyEvent v8), as HBase's space quota
    /// violation policies: NO_INSERTS refuses inserts; NO_WRITES everything but reads and deletes; DISABLE everything.
    Violation { NO_INSERTS, NO_WRITES, DISABLE }
);

impl Violation {
    /// Whether it refuses a request of `operation`. A request that names no operation is refused by every
    /// violation: a gauge's owner set it to stop writes, and a caller that does not say what it does may be writing.
    pub fn refuses(self, operation: Option<Operation>) -> bool {
        match (self, operation) {
            (Violation::DISABLE, _) | (_, None) => true,
            (Violation::NO_INSERTS, Some(op)) => op == Operation::insert,
            (Violation::NO_WRITES, Some(op)) => !matches!(op, Operation::read | Operation::delete),
        }
    }
}

avro_enum!(
    /// What a request does, as a service names it on a check (`operation`): what a gauge's violation refuses by.
    Operation { insert, update, delete, read }
);

avro_enum!(
    /// What reconcile found.
    AdjustmentKind { CONFLICTING_DUPLICATE, RESERVATION_EXPIRED, REFUSED_TRANSITION, OVERSHOOT, SHADOW_OVER_LIMIT, LATE_USAGE }
);
avro_enum!(
    /// What an alert found: THRESHOLD (a window reached a share of its limit: the hook, and reconcile for windows no
    /// request reached), and what reconcile finds in the ledger: SUBJECT_SHARE (a subject took more than a set share of
    /// its tenant's consumption), OPEN_TOO_LONG (a reservation or lease held past a set age) and DENY_RATE (a policy
    /// version denying far more in its first hour than the version before).
    AlertKind { THRESHOLD, SUBJECT_SHARE, OPEN_TOO_LONG, DENY_RATE }
);
avro_enum!(
    /// What a correction does to the usage event it references.
    CorrectionAction { VOID, AMEND }
);
avro_enum!(
    /// A step in a capacity lease's life (contract §9.6).
    CapacityLeaseAction { GRANT, RENEW, RETURN, EXPIRE, RECLAIM }
);
avro_enum!(
    /// How a meter aggregates a window's usage events: SUM of quantities, COUNT of events, UNIQUE_COUNT of a field's
    /// distinct values, MAX and LATEST of a gauge's levels, the integral of a gauge's level over the window in
    /// unit-hours (TIME_WEIGHTED_SUM) and that integral divided by the window's length (TIME_WEIGHTED_AVERAGE).
    Aggregation { SUM, COUNT, UNIQUE_COUNT, MAX, LATEST, TIME_WEIGHTED_SUM, TIME_WEIGHTED_AVERAGE }
);
avro_enum!(
    /// The header field whose distinct values a UNIQUE_COUNT meter counts.
    MeterField { SUBJECT, PROJECT, API_KEY }
);

/// The record types of contract §3, in the order of the topics there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[allow(missing_docs)] // The record names of contract §3.
pub enum EventType {
    UsageEvent,
    DecisionEvent,
    ReservationEvent,
    GrantEvent,
    PolicyEvent,
    AdjustmentEvent,
    AlertEvent,
    CorrectionEvent,
    CapacityLeaseEvent,
    PlanAssignmentEvent,
    MeterEvent,
}

impl EventType {
    /// Every record type, in the order of their topics.
    pub const ALL: [EventType; 11] = [
        EventType::UsageEvent,
        EventType::DecisionEvent,
        EventType::ReservationEvent,
        EventType::GrantEvent,
        EventType::PolicyEvent,
        EventType::AdjustmentEvent,
        EventType::AlertEvent,
        EventType::CorrectionEvent,
        EventType::CapacityLeaseEvent,
        EventType::PlanAssignmentEvent,
        EventType::MeterEvent,
    ];

    /// The record name, as in the schema (`UsageEvent`).
    pub fn name(self) -> &'static str {
        match self {
            EventType::UsageEvent => "UsageEvent",
            EventType::DecisionEvent => "DecisionEvent",
            EventType::ReservationEvent => "ReservationEvent",
            EventType::GrantEvent => "GrantEvent",
            EventType::PolicyEvent => "PolicyEvent",
            EventType::AdjustmentEvent => "AdjustmentEvent",
            EventType::AlertEvent => "AlertEvent",
            EventType::CorrectionEvent => "CorrectionEvent",
            EventType::CapacityLeaseEvent => "CapacityLeaseEvent",
            EventType::PlanAssignmentEvent => "PlanAssignmentEvent",
            EventType::MeterEvent => "MeterEvent",
        }
    }

    /// The full Avro name (`quota.v1.UsageEvent`).
    pub fn full_name(self) -> String {
        format!("{}.{}", crate::NAMESPACE, self.name())
    }

    /// The default topic of contract §2.
    pub fn default_topic(self) -> &'static str {
        match self {
            EventType::UsageEvent => "quota.usage",
            EventType::DecisionEvent => "quota.decisions",
            EventType::ReservationEvent => "quota.reservations",
            EventType::GrantEvent => "quota.grants",
            EventType::PolicyEvent => "quota.policies",
            EventType::AdjustmentEvent => "quota.adjustments",
            EventType::AlertEvent => "quota.alerts",
            EventType::CorrectionEvent => "quota.corrections",
            EventType::CapacityLeaseEvent => "quota.capacity_leases",
            EventType::PlanAssignmentEvent => "quota.plans",
            EventType::MeterEvent => "quota.meters",
        }
    }

    /// Accepts `UsageEvent` or `quota.v1.UsageEvent`.
    pub fn from_name(name: &str) -> Option<EventType> {
        let short = name.strip_prefix("quota.v1.").unwrap_or(name);
        EventType::ALL.into_iter().find(|t| t.name() == short)
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Any event of contract §3.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)] // One variant per record type, named after it.
pub enum Event {
    Usage(UsageEvent),
    Decision(DecisionEvent),
    Reservation(ReservationEvent),
    Grant(GrantEvent),
    Policy(PolicyEvent),
    Adjustment(AdjustmentEvent),
    Alert(AlertEvent),
    Correction(CorrectionEvent),
    CapacityLease(CapacityLeaseEvent),
    PlanAssignment(PlanAssignmentEvent),
    Meter(MeterEvent),
}

impl Event {
    /// Its record type.
    pub fn event_type(&self) -> EventType {
        match self {
            Event::Usage(_) => EventType::UsageEvent,
            Event::Decision(_) => EventType::DecisionEvent,
            Event::Reservation(_) => EventType::ReservationEvent,
            Event::Grant(_) => EventType::GrantEvent,
            Event::Policy(_) => EventType::PolicyEvent,
            Event::Adjustment(_) => EventType::AdjustmentEvent,
            Event::Alert(_) => EventType::AlertEvent,
            Event::Correction(_) => EventType::CorrectionEvent,
            Event::CapacityLease(_) => EventType::CapacityLeaseEvent,
            Event::PlanAssignment(_) => EventType::PlanAssignmentEvent,
            Event::Meter(_) => EventType::MeterEvent,
        }
    }

    /// The fields every event starts with.
    pub fn header(&self) -> &Header {
        match self {
            Event::Usage(e) => &e.header,
            Event::Decision(e) => &e.header,
            Event::Reservation(e) => &e.header,
            Event::Grant(e) => &e.header,
            Event::Policy(e) => &e.header,
            Event::Adjustment(e) => &e.header,
            Event::Alert(e) => &e.header,
            Event::Correction(e) => &e.header,
            Event::CapacityLease(e) => &e.header,
            Event::PlanAssignment(e) => &e.header,
            Event::Meter(e) => &e.header,
        }
    }

    /// Its deduplication key.
    pub fn event_id(&self) -> &str {
        &self.header().event_id
    }

    /// Reads the JSON form of an event of the given type.
    pub fn from_json(event_type: EventType, json: &str) -> Result<Event, serde_json::Error> {
        Ok(match event_type {
            EventType::UsageEvent => Event::Usage(serde_json::from_str(json)?),
            EventType::DecisionEvent => Event::Decision(serde_json::from_str(json)?),
            EventType::ReservationEvent => Event::Reservation(serde_json::from_str(json)?),
            EventType::GrantEvent => Event::Grant(serde_json::from_str(json)?),
            EventType::PolicyEvent => Event::Policy(serde_json::from_str(json)?),
            EventType::AdjustmentEvent => Event::Adjustment(serde_json::from_str(json)?),
            EventType::AlertEvent => Event::Alert(serde_json::from_str(json)?),
            EventType::CorrectionEvent => Event::Correction(serde_json::from_str(json)?),
            EventType::CapacityLeaseEvent => Event::CapacityLease(serde_json::from_str(json)?),
            EventType::PlanAssignmentEvent => Event::PlanAssignment(serde_json::from_str(json)?),
            EventType::MeterEvent => Event::Meter(serde_json::from_str(json)?),
        })
    }

    /// The JSON form of the event (the form `from_json` reads).
    pub fn to_json(&self) -> serde_json::Value {
        let value = match self {
            Event::Usage(e) => serde_json::to_value(e),
            Event::Decision(e) => serde_json::to_value(e),
            Event::Reservation(e) => serde_json::to_value(e),
            Event::Grant(e) => serde_json::to_value(e),
            Event::Policy(e) => serde_json::to_value(e),
            Event::Adjustment(e) => serde_json::to_value(e),
            Event::Alert(e) => serde_json::to_value(e),
            Event::Correction(e) => serde_json::to_value(e),
            Event::CapacityLease(e) => serde_json::to_value(e),
            Event::PlanAssignment(e) => serde_json::to_value(e),
            Event::Meter(e) => serde_json::to_value(e),
        };
        value.expect("events hold only strings, integers and string maps, which always serialize")
    }
}
