//! `audit why REQUEST_ID`: everything the ledger knows about one decision, gathered with the ledger's typed reads
//! at one watermark, then told in words ([`super::render`]) or as JSON (the [`Why`] struct).

use ledger::{DecisionRecord, Ledger};
use rules::window;
use schemas::{
    Aggregation, Header, MeterField, PolicyEvent, Reason, ReservationAction, ReservationEvent, Scope, Timestamp, Who,
};
use serde::Serialize;

use crate::error::ReportError;

/// Consuming events listed, largest first; the total counts them all.
pub const LARGEST_SHOWN: usize = 10;

/// The answer to "why was this request decided so?".
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Why {
    /// The request id asked about.
    pub request_id: String,
    /// The ledger watermark the answer was computed at.
    pub watermark: u64,
    /// The decision explained.
    pub decision: Decision,
    /// Decisions recorded for this request_id (the latest in event time, then ledger order, is explained).
    pub decisions_for_request: u64,
    /// The policy version the decision names, as the ledger holds it.
    pub policy: Option<PolicyFacts>,
    /// The counter the decision recorded, and the reservations open then.
    pub counter: Counter,
    /// The grants that raised the decision's window.
    pub grants: Vec<GrantFacts>,
    /// The policy's limit plus the grants that applied to the window; for a throttle, its bucket's capacity
    /// (grants raise quotas, not buckets).
    pub effective_limit: Option<i64>,
    /// What had consumed the window before the decision, per the ledger.
    pub consumption: Consumption,
    /// The wait the decision recorded for a retry.
    pub retry_after_ms: Option<i64>,
    /// When the window ends and the counter starts again; for a denial by a ROLLING quota, when enough of its usage
    /// ages out for the amount (none for its other decisions: a rolling window never resets at once).
    pub resets_at: Option<Timestamp>,
    /// Every adjustment recorded for this tenant and metric whose window overlaps the decision's.
    pub adjustments: Vec<AdjustmentFacts>,
    /// The corrections of the request's usage events (voids and amends), with who made them and why (absent from the
    /// JSON when there are none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub corrections: Vec<super::CorrectionLine>,
    /// The meter the decision's window was counted by (the metric's, in force at the window's start), when it is not
    /// a sum: the counter is in its terms (events, distinct members). Absent from the JSON for a summed metric.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub meter: Option<MeterFacts>,
    /// A request of several metrics: every metric's decision, decided together (all allowed or
    /// all denied); the decision explained is the one that denied, if any. Empty for a request of one metric.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub metrics: Vec<MetricOfRequest>,
}

/// The meter of a decision's metric, as the ledger holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MeterFacts {
    /// Its owner: the tenant, or `*`.
    pub owner: String,
    /// Its version.
    pub version: i32,
    /// COUNT, UNIQUE_COUNT, ...
    pub aggregation: String,
    /// UNIQUE_COUNT: SUBJECT, PROJECT or API_KEY.
    pub field: Option<String>,
    /// The member of that field the request named (UNIQUE_COUNT), if any.
    pub member: Option<String>,
    /// Who made the version, and why.
    pub actor: String,
    /// Why.
    pub reason: String,
}

/// One metric of a request of several metrics, as its decision recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[allow(missing_docs)] // The DecisionEvent's own fields, by their contract §3 names.
pub struct MetricOfRequest {
    pub metric: String,
    pub amount: i64,
    pub outcome: String,
    pub reason: String,
    pub policy_id: Option<String>,
    pub event_id: String,
}

/// Whether a decision's reason is one that denies (not a metric denied only because another metric of its request
/// did, which records its own WITHIN_LIMIT).
fn denies(d: &Decision) -> bool {
    d.outcome == "DENIED" && matches!(d.reason.as_str(), "QUOTA_EXCEEDED" | "RATE_LIMITED" | "CONCURRENCY_LIMITED")
}

/// The decision to explain among a request's, and the request's metrics when it named several: the decisions
/// recorded at the latest one's instant under its tenant and key are one request's, a decision per metric; of those,
/// the one that denied (an exhausted quota before a throttle, the latest reset first), as the hook answered it.
fn explained(decisions: &[Decision]) -> Option<(Decision, Vec<MetricOfRequest>)> {
    let latest = decisions.last()?;
    let request: Vec<&Decision> = decisions
        .iter()
        .filter(|d| {
            (d.occurred_at, &d.who.tenant, &d.idempotency_key)
                == (latest.occurred_at, &latest.who.tenant, &latest.idempotency_key)
        })
        .filter(|d| d.source == latest.source)
        .collect();
    if request.len() < 2 {
        return Some((latest.clone(), Vec::new()));
    }
    let chosen = request
        .iter()
        .filter(|d| denies(d))
        // Reversed: of equals the first metric, as the hook names it.
        .rev()
        .max_by_key(|d| (d.reason == "QUOTA_EXCEEDED", d.window_end))
        .copied()
        .unwrap_or(latest);
    let metrics = request
        .iter()
        .map(|d| MetricOfRequest {
            metric: d.metric.clone(),
            amount: d.amount,
            outcome: d.outcome.clone(),
            reason: d.reason.clone(),
            policy_id: d.policy_id.clone(),
            event_id: d.event_id.clone(),
        })
        .collect();
    Some((chosen.clone(), metrics))
}

/// A recorded decision (contract §3 `DecisionEvent`), with its ledger sequence number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[allow(missing_docs)] // The DecisionEvent's own fields, by their contract §3 names.
pub struct Decision {
    pub seq: u64,
    pub event_id: String,
    pub occurred_at: Timestamp,
    /// The tenant, and the subject, project and API key the request named (`project` and `api_key` left out of
    /// `--json` when none).
    #[serde(flatten)]
    pub who: Who,
    pub metric: String,
    pub source: String,
    pub idempotency_key: String,
    pub amount: i64,
    pub outcome: String,
    pub reason: String,
    pub policy_id: Option<String>,
    pub policy_version: Option<i64>,
    pub window_start: Option<Timestamp>,
    pub window_end: Option<Timestamp>,
    /// The name of the `serve` token that asked (DecisionEvent v2); null for decisions made without one and for
    /// those recorded before v2.
    pub token_name: Option<String>,
    /// Shown under `counter` and `retry_after_ms`.
    #[serde(skip)]
    pub recorded: (Option<i64>, Option<i64>, Option<i64>, Option<i64>),
}

/// The policy version a decision was made under, as the ledger holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PolicyFacts {
    /// Its policy_id.
    pub policy_id: String,
    /// Its version.
    pub version: i64,
    /// The tenant it belongs to, `*` for the plan default.
    pub owner: String,
    /// `TENANT`, `SUBJECT`, `PROJECT` or `API_KEY`.
    pub scope: String,
    /// Its limit per window (a throttle's refill per window).
    pub limit: i64,
    /// `MINUTE`, `HOUR`, `DAY` or `MONTH`; `CONCURRENT` for a limit on leases held at once; `ROLLING` for every
    /// interval of `window_seconds` ending at an instant; `BILLING_CYCLE` for the tenant's billing cycle, monthly from
    /// `cycle_anchor`.
    pub window: String,
    /// A ROLLING window's length in seconds (PolicyEvent v10); left out of `--json` for every other window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_seconds: Option<i64>,
    /// A BILLING_CYCLE window's anchor (PolicyEvent v11); left out of `--json` for every other window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cycle_anchor: Option<Timestamp>,
    /// `HARD`, `SOFT` or `SHADOW`.
    pub enforcement: String,
    /// When it takes effect.
    pub effective_from: Timestamp,
    /// A throttle's token bucket capacity (refilled `limit` per `window`); `None` for a quota.
    pub burst: Option<i64>,
    /// Who made this version and why, as the control plane recorded them (PolicyEvent v3); `None` for a version
    /// produced without them.
    pub actor: Option<String>,
    /// Why this version was made.
    pub change_reason: Option<String>,
    /// The IANA time zone whose calendar its windows are of (PolicyEvent v4); `None`: UTC.
    pub time_zone: Option<String>,
    /// A HARD quota's throttled overage (PolicyEvent v7): what it lets through beyond its limit per
    /// `overage_window`; `None`: the limit is a wall.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overage_rate: Option<i64>,
    /// The period of `overage_rate`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overage_window: Option<String>,
    /// A gauge quota's violation policy (PolicyEvent v8): what it refuses while the level is above the limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub violation: Option<String>,
    /// A gauge quota's metric, whose level it limits: not the decision's metric, which it refused by its operation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gauge_metric: Option<String>,
    /// The ledger entry of the copy shown.
    pub seq: u64,
    /// How many copies of this version (same owner) the ledger holds: more than 1 when it was published again.
    pub copies: u64,
    /// The named plan it is of, with the tenant's assignment to it in effect at the decision; left out of `--json`
    /// for a policy of the tenant's own or of the plan defaults.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<PlanFacts>,
}

/// The named plan a deciding policy is of, and the tenant's assignment that made it the tenant's then.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PlanFacts {
    /// The plan's name.
    pub name: String,
    /// From when the assignment in effect at the decision made it the tenant's.
    pub assigned_from: Timestamp,
    /// Who assigned it.
    pub actor: String,
    /// Why.
    pub reason: String,
}

impl PolicyFacts {
    /// A token bucket (a policy with a burst), not an allowance per window.
    pub fn is_throttle(&self) -> bool {
        self.burst.is_some()
    }

    /// Its throttled overage, (rate, per window), when beyond its limit it throttles rather than refuses.
    pub fn overage(&self) -> Option<(i64, &str)> {
        self.overage_rate.zip(self.overage_window.as_deref())
    }
}

impl Why {
    /// Whether the decision's policy is a throttle: its recorded counter is the serving process's bucket.
    pub fn by_throttle(&self) -> bool {
        self.policy.as_ref().is_some_and(PolicyFacts::is_throttle)
    }

    /// Whether the deciding policy is a gauge quota: it judged a level, not the decision's consumption.
    pub fn by_gauge(&self) -> bool {
        self.policy.as_ref().is_some_and(|p| p.violation.is_some())
    }

    /// Whether the deciding policy limits leases held at once (a CONCURRENT policy), not consumption in a window.
    pub fn by_concurrency(&self) -> bool {
        self.policy.as_ref().is_some_and(|p| p.window == "CONCURRENT")
    }

    /// The deciding policy's ROLLING window length in seconds, when it limits every interval of that length ending
    /// at an instant (the decision's window is the one ending at the decision): its usage ages out, it never resets.
    pub fn rolling_seconds(&self) -> Option<i64> {
        self.policy.as_ref().filter(|p| p.window == "ROLLING").and_then(|p| p.window_seconds)
    }
}

/// The counter at decision time, as the decision recorded it, and the reservations open then.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Counter {
    /// The limit the decision recorded.
    pub limit: Option<i64>,
    /// What the decision recorded as used before it.
    pub used_before: Option<i64>,
    /// What the decision recorded as remaining after it.
    pub remaining: Option<i64>,
    /// Reservations of the window open at the decision, per the ledger.
    pub open_reservations: u64,
    /// What they held.
    pub open_reservations_amount: i64,
}

/// A grant that raised the decision's window (contract §3 `GrantEvent`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[allow(missing_docs)] // The GrantEvent's own fields, by their contract §3 names.
pub struct GrantFacts {
    pub grant_id: String,
    pub amount: i64,
    pub valid_from: Timestamp,
    pub valid_until: Timestamp,
    pub reason: String,
    /// Who gave it (GrantEvent v2); `None` for a grant produced without it.
    pub actor: Option<String>,
}

/// What had consumed the window before the decision, per the ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Consumption {
    /// The sum of the consuming events.
    pub total: i64,
    /// How many there were.
    pub events: u64,
    /// `total` plus what the reservations open at the decision held: the ledger's account of the recorded
    /// `counter.used_before`, which counts holds the same way (contract §6).
    pub used_before: i64,
    /// The largest, at most [`LARGEST_SHOWN`].
    pub largest: Vec<Consumed>,
}

/// One consuming event: a usage event, or the valid COMMIT of a reservation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Consumed {
    /// Its ledger sequence number.
    pub seq: u64,
    /// Its event_id.
    pub event_id: String,
    /// `usage` or `commit` (a valid COMMIT of a reservation).
    pub kind: &'static str,
    /// Its event time.
    pub occurred_at: Timestamp,
    /// What it consumed.
    pub quantity: i64,
    /// Its subject.
    pub subject: Option<String>,
    /// Its project; left out of `--json` when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// Its API key; left out of `--json` when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
}

/// An adjustment about the decision's window (contract §3 `AdjustmentEvent`), with its ledger sequence number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AdjustmentFacts {
    /// Its ledger sequence number.
    pub seq: u64,
    /// Its adjustment_id.
    pub adjustment_id: String,
    /// Its kind, as stored.
    pub kind: String,
    /// The policy whose window it is about.
    pub policy_id: Option<String>,
    /// The subject of a SUBJECT window's adjustment; none for the tenant's windows and late usage.
    pub subject: Option<String>,
    /// The project of a PROJECT window's adjustment; left out of `--json` when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// The API key of an API_KEY window's adjustment; left out of `--json` when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    /// The window it is about.
    pub window_start: Option<Timestamp>,
    /// Its end.
    pub window_end: Option<Timestamp>,
    /// Its amount (a delta).
    pub amount: i64,
    /// The reconcile run that wrote it.
    pub run_id: String,
}

/// A request_id the ledger has no decision for, with the nearest ones it has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unknown {
    /// The request id asked about.
    pub request_id: String,
    /// The nearest known ones, nearest first.
    pub nearest: Vec<String>,
}

/// [`why`] over a set of shards (contract §9.4): the answer of the shard that holds the request (a request's decisions
/// are its tenant's, in one shard), with that shard's partition; an unknown request gets the nearest request ids of
/// every shard.
pub fn why_in(
    shards: &[(ledger::shards::Shard, Ledger)],
    request_id: &str,
) -> Result<Result<(ledger::shards::Shard, Why), Unknown>, ReportError> {
    for (shard, ledger) in shards {
        if let Ok(answer) = why(ledger, request_id)? {
            return Ok(Ok((*shard, answer)));
        }
    }
    let nearest = super::nearest(request_id, |offer| {
        for (_, ledger) in shards {
            ledger.for_each_request_id(ledger.watermark()?, &mut *offer)?;
        }
        Ok(())
    })?;
    Ok(Err(Unknown { request_id: request_id.to_string(), nearest }))
}

/// Explains the latest decision of `request_id`, or answers the nearest known request_ids.
pub fn why(ledger: &Ledger, request_id: &str) -> Result<Result<Why, Unknown>, ReportError> {
    let watermark = ledger.watermark()?;
    let at = At { ledger, watermark };
    let decisions: Vec<Decision> =
        ledger.decisions_of_request(request_id, watermark)?.into_iter().map(Decision::from).collect();
    let Some((mut decision, metrics)) = explained(&decisions) else {
        return Ok(Err(Unknown { request_id: request_id.to_string(), nearest: nearest(&at, request_id)? }));
    };
    decision.token_name = token_name(ledger, &decision.event_id)?;
    let policy = policy(&at, &decision)?;
    let scope_member = member_of_scope(policy.as_ref(), &decision);
    // A throttle is decided by its bucket, which no grant raises (the hook's `evaluate_one`).
    let quota = policy.as_ref().filter(|p| p.burst.is_none());
    let gauge = policy.as_ref().and_then(|p| p.gauge_metric.clone());
    let gauge = gauge.as_deref();
    let grants = grants(&at, &decision, gauge.unwrap_or(&decision.metric), quota, scope_member.as_ref())?;
    let grants_total: i64 = grants.iter().map(|g| g.amount).sum();
    let (consumption, open) = match gauge {
        // A level decided, not the window's consumption of the decision's metric: none is counted against it.
        Some(_) => (largest_first(Vec::new(), 0), (0, 0)),
        None => consumption(&at, request_id, &decision, scope_member.as_ref())?,
    };
    let (limit, used_before, remaining, retry_after_ms) = decision.recorded;
    let rolling = policy.as_ref().is_some_and(|p| p.window_seconds.is_some());
    Ok(Ok(Why {
        request_id: request_id.to_string(),
        watermark,
        decisions_for_request: decisions.len() as u64,
        effective_limit: policy.as_ref().map(|p| p.burst.unwrap_or(p.limit.saturating_add(grants_total))),
        policy,
        counter: Counter { limit, used_before, remaining, open_reservations: open.0, open_reservations_amount: open.1 },
        grants,
        consumption,
        retry_after_ms,
        // As the hook answered it (a reason this version does not know: the window's end).
        // A gauge's level drops when its owner frees what it measures, not at its window's end. A rolling window never
        // resets at once: only a denial's wait says when enough of its usage ages out.
        resets_at: match Reason::from_symbol(&decision.reason) {
            _ if gauge.is_some() => None,
            _ if rolling && (decision.reason != Reason::QUOTA_EXCEEDED.symbol() || retry_after_ms.is_none()) => None,
            Some(reason) => reason.resets_at(decision.occurred_at, decision.window_end, retry_after_ms),
            None => decision.window_end,
        },
        adjustments: adjustments(&at, &decision, scope_member.as_ref())?,
        corrections: ledger
            .request_corrections(request_id, watermark)?
            .into_iter()
            .map(super::CorrectionLine::from)
            .collect(),
        meter: meter_of(&at, &decision)?,
        metrics,
        decision,
    }))
}

/// The meter, other than SUM, that counted the decision's window (in force at its start).
fn meter_of(at: &At<'_>, d: &Decision) -> Result<Option<MeterFacts>, ReportError> {
    let Some(start) = d.window_start else { return Ok(None) };
    let meters = at.ledger.meters_through(at.watermark)?;
    let Some(m) = rules::meter::in_force(&meters, &d.who.tenant, &d.metric, start) else { return Ok(None) };
    if m.aggregation == Aggregation::SUM {
        return Ok(None);
    }
    let member = match m.field {
        Some(MeterField::SUBJECT) => d.who.subject.clone(),
        Some(MeterField::PROJECT) => d.who.project.clone(),
        Some(MeterField::API_KEY) => d.who.api_key.clone(),
        None => None,
    };
    Ok(Some(MeterFacts {
        owner: m.header.tenant.clone(),
        version: m.version,
        aggregation: m.aggregation.symbol().to_string(),
        field: m.field.map(|f| f.symbol().to_string()),
        member,
        actor: m.actor.clone(),
        reason: m.reason.clone(),
    }))
}

/// The member whose windows a policy of SUBJECT, PROJECT or API_KEY scope counted the decision in: the subject,
/// project or API key the decision names (contract §5: each member's windows apart).
#[derive(Debug, Clone, PartialEq, Eq)]
struct ScopeMember {
    scope: Scope,
    /// None for a decision naming no member of the scope: the window of every event naming none.
    member: Option<String>,
}

impl ScopeMember {
    /// Whether an event of `header` counts in this member's windows: it names the same member (or, as the decision,
    /// none).
    fn counts(&self, header: &Header) -> bool {
        self.scope.member_of(header) == self.member.as_deref()
    }

    /// Whether a grant of `header` raises this member's windows: it names this very member of the scope.
    fn named_by(&self, header: &Header) -> bool {
        self.member.is_some() && self.counts(header)
    }

    /// Whether an adjustment is listed under a decision of this member ([`adjustments`]): one of this member's
    /// window, or one naming no member of a window of another scope (the tenant's, late usage). An adjustment written
    /// before AdjustmentEvent v2 has no scope: a SUBJECT window's when it names a subject, else taken for the
    /// tenant's.
    fn lists(&self, a: &ledger::AdjustmentRecord) -> bool {
        let scope = match a.scope.as_deref() {
            Some(symbol) => Scope::from_symbol(symbol),
            None if a.header.subject.is_some() => Some(Scope::SUBJECT),
            None => Some(Scope::TENANT),
        };
        match scope {
            Some(scope) if scope == self.scope => self.counts(&a.header),
            _ => names_no_member(&a.header),
        }
    }
}

/// The member whose windows the decision's policy counts ([`ScopeMember`]); `None` for TENANT scope (every event of
/// the tenant counts) and for a scope this version does not know.
fn member_of_scope(policy: Option<&PolicyFacts>, decision: &Decision) -> Option<ScopeMember> {
    let scope = Scope::from_symbol(&policy?.scope)?;
    if scope == Scope::TENANT {
        return None;
    }
    Some(ScopeMember { scope, member: decision.who.member(scope).map(String::from) })
}

/// Whether an event names no member of any scope: a grant of the tenant's (TENANT) windows.
fn names_no_member(header: &Header) -> bool {
    header.subject.is_none() && header.project.is_none() && header.api_key.is_none()
}

/// The ledger an answer reads, and the watermark it reads it at.
pub(super) struct At<'l> {
    pub ledger: &'l Ledger,
    pub watermark: u64,
}

impl From<DecisionRecord> for Decision {
    fn from(d: DecisionRecord) -> Decision {
        let who = d.header.who();
        Decision {
            seq: d.seq,
            event_id: d.header.event_id,
            occurred_at: d.header.occurred_at,
            who,
            metric: d.header.metric,
            source: d.header.source,
            idempotency_key: d.idempotency_key,
            amount: d.amount,
            outcome: d.outcome,
            reason: d.reason,
            policy_id: d.policy_id,
            policy_version: d.policy_version.map(i64::from),
            window_start: d.window_start,
            window_end: d.window_end,
            recorded: (d.limit, d.used_before, d.remaining, d.retry_after_ms),
            token_name: None,
        }
    }
}

/// The name of the `serve` token that asked for the decision recorded as `event_id`, read from its entry's payload
/// (one point read): the tables the reports query do not show it.
fn token_name(ledger: &Ledger, event_id: &str) -> Result<Option<String>, ReportError> {
    Ok(match ledger.recorded_event(event_id)? {
        Some(schemas::Event::Decision(decision)) => decision.token_name,
        _ => None,
    })
}

impl Decision {
    /// Whether this decision came after an event (its event time and ledger sequence number): the event is
    /// earlier in event time, or at the same instant and earlier in the ledger.
    fn is_after(&self, occurred_at: Timestamp, seq: u64) -> bool {
        (occurred_at, seq) < (self.occurred_at, self.seq)
    }
}

/// What a decision names of its policy: enough to tell which copy of it applied.
pub(super) struct Named<'a> {
    pub tenant: &'a str,
    pub metric: &'a str,
    pub occurred_at: Timestamp,
    pub version: Option<i64>,
    pub window_start: Option<Timestamp>,
    pub window_end: Option<Timestamp>,
}

impl Decision {
    fn named(&self) -> Named<'_> {
        Named {
            tenant: &self.who.tenant,
            metric: &self.metric,
            occurred_at: self.occurred_at,
            version: self.policy_version,
            window_start: self.window_start,
            window_end: self.window_end,
        }
    }
}

/// Every version of `policy_id` for a tenant's metric, its own and the plan's, in ledger order, with their sequence
/// numbers.
pub(super) fn policy_versions(
    at: &At<'_>,
    policy_id: &str,
    metric: Option<&str>,
    tenant: &str,
) -> Result<(Vec<PolicyEvent>, Vec<u64>), ReportError> {
    let versions = at.ledger.policy_versions(policy_id, metric, tenant, at.watermark)?;
    Ok(versions.into_iter().map(|(seq, policy)| (policy, seq)).unzip())
}

fn policy(at: &At<'_>, decision: &Decision) -> Result<Option<PolicyFacts>, ReportError> {
    let (Some(policy_id), Some(_)) = (&decision.policy_id, decision.policy_version) else { return Ok(None) };
    let (mut versions, mut seqs) = policy_versions(at, policy_id, Some(&decision.metric), &decision.who.tenant)?;
    let mut index = copy_applied(&versions, &decision.named());
    if index.is_none() {
        // A gauge quota decides requests of every metric: its versions are of its own metric.
        (versions, seqs) = policy_versions(at, policy_id, None, &decision.who.tenant)?;
        index = gauge_applied(&versions, decision);
    }
    let Some(index) = index else { return Ok(None) };
    let chosen = &versions[index];
    let copies = versions.iter().filter(|p| p.header.tenant == chosen.header.tenant && p.version == chosen.version);
    Ok(Some(PolicyFacts {
        policy_id: chosen.policy_id.clone(),
        version: i64::from(chosen.version),
        owner: chosen.header.tenant.clone(),
        scope: chosen.scope.symbol().to_string(),
        limit: chosen.limit,
        window: chosen.window.symbol().to_string(),
        window_seconds: chosen.window_seconds,
        cycle_anchor: chosen.cycle_anchor,
        enforcement: chosen.enforcement.symbol().to_string(),
        effective_from: chosen.effective_from,
        burst: chosen.burst,
        actor: chosen.actor.clone(),
        change_reason: chosen.reason.clone(),
        time_zone: chosen.time_zone.clone(),
        overage_rate: chosen.overage_rate,
        overage_window: chosen.overage_window.map(|w| w.symbol().to_string()),
        violation: chosen.violation.map(|v| v.symbol().to_string()),
        gauge_metric: chosen.is_gauge().then(|| chosen.header.metric.clone()),
        seq: seqs[index],
        copies: copies.count() as u64,
        plan: plan_facts(at, decision, &chosen.header.tenant)?,
    }))
}

/// The plan `owner` names (`*pro`: pro), with the decision's tenant's assignment to it in effect at the decision.
fn plan_facts(at: &At<'_>, decision: &Decision, owner: &str) -> Result<Option<PlanFacts>, ReportError> {
    let Some(name) = schemas::partition::plan_of_owner(owner) else { return Ok(None) };
    let mut assignments = at.ledger.plan_assignments_through(at.watermark)?;
    assignments.retain(|a| a.header.tenant == decision.who.tenant);
    let refs: Vec<&schemas::PlanAssignmentEvent> = assignments.iter().collect();
    let spans = rules::policy::plan_spans(&refs);
    let span = spans.iter().rev().find(|s| s.from <= decision.occurred_at && decision.occurred_at < s.until);
    let assignment = span.map(|s| &s.assignment).filter(|a| a.plan.as_deref() == Some(name));
    Ok(Some(PlanFacts {
        name: name.to_string(),
        assigned_from: assignment.map_or(decision.occurred_at, |a| a.effective_from),
        actor: assignment.map_or_else(String::new, |a| a.actor.clone()),
        reason: assignment.map_or_else(String::new, |a| a.reason.clone()),
    }))
}

/// Which of `versions` (a policy_id's, of every metric) is the gauge quota that decided: the decided version, the
/// tenant's own before the plan's, the last recorded of them (as `rules::policy::PolicyIndex::gauges` answers).
fn gauge_applied(versions: &[PolicyEvent], decision: &Decision) -> Option<usize> {
    let decided = |p: &PolicyEvent| p.is_gauge() && Some(i64::from(p.version)) == decision.policy_version;
    let own = versions.iter().rposition(|p| decided(p) && p.header.tenant == decision.who.tenant);
    own.or_else(|| versions.iter().rposition(decided))
}

/// Which of `versions` (every version of the decision's policy_id, the tenant's own and the plan's, in ledger order)
/// the decision was made under, by its index: the copy of the decided version that `rules::policy::applicable`
/// answers over them all at the decision's instant, as the hook, reconcile and billing pick (the tenant's own in
/// force before the plan default, the greatest `effective_from`, on a tie the later in the ledger), and of its
/// windows the one the decision names. All versions, because the others decide which copy applies: the tenant's own
/// v1 is no longer in force once its v2 changed scope, so the plan's v1 decided (chosen among the copies of v1 alone,
/// the tenant's own 1,000 would be named for a denial under the plan's 60). A version not in force at the decision (an enforcement point ahead of or behind the ledger) is answered by the same rule among its
/// own copies, at the decision and else at their latest `effective_from`, where every copy is.
pub(super) fn copy_applied(versions: &[PolicyEvent], decision: &Named<'_>) -> Option<usize> {
    let decided = |p: &PolicyEvent| Some(i64::from(p.version)) == decision.version;
    let position = |among: &[PolicyEvent], p: &PolicyEvent| among.iter().position(|q| std::ptr::eq(q, p));
    // A CONCURRENT policy has no window: the version in force at the decision's instant.
    let index = rules::policy::PolicyIndex::new(versions.to_vec());
    let concurrent = index.concurrent(decision.tenant, decision.metric, decision.occurred_at);
    if let Some(a) = concurrent.iter().find(|a| decided(a.policy)) {
        return versions.iter().position(|p| p == a.policy);
    }
    let in_force = rules::policy::applicable(versions, decision.tenant, decision.metric, decision.occurred_at);
    let named = (decision.window_start, decision.window_end);
    let mut candidates = in_force.iter().filter(|a| decided(a.policy));
    let chosen =
        candidates.clone().find(|a| (Some(a.window_start), Some(a.window_end)) == named).or_else(|| candidates.next());
    if let Some(a) = chosen {
        return position(versions, a.policy);
    }
    let indices: Vec<usize> = (0..versions.len()).filter(|i| decided(&versions[*i])).collect();
    let copies: Vec<PolicyEvent> = indices.iter().map(|i| versions[*i].clone()).collect();
    let applied = |at: Timestamp| {
        let found = rules::policy::applicable(&copies, decision.tenant, decision.metric, at);
        found.first().and_then(|a| position(&copies, a.policy))
    };
    let latest = copies.iter().map(|p| p.effective_from).max()?;
    // A named plan's policy applies through the tenant's assignment, which these versions do not hold: its id is
    // the plan's own (`*pro:...`), so the decided version of the plan is the one.
    let of_plan = || {
        indices.iter().rev().copied().find(|i| schemas::partition::plan_of_owner(&versions[*i].header.tenant).is_some())
    };
    applied(decision.occurred_at).or_else(|| applied(latest)).map(|i| indices[i]).or_else(of_plan)
}

fn grants(
    at: &At<'_>,
    decision: &Decision,
    metric: &str,
    policy: Option<&PolicyFacts>,
    scope_member: Option<&ScopeMember>,
) -> Result<Vec<GrantFacts>, ReportError> {
    let (Some(_), Some(start), Some(end)) = (policy, decision.window_start, decision.window_end) else {
        return Ok(Vec::new());
    };
    let mut found = Vec::new();
    for grant in at.ledger.grants_of(&decision.who.tenant, metric, at.watermark)? {
        // contract §5: a grant naming a subject (a project, an API key) raises that member's windows of that scope,
        // one naming none the TENANT windows (`rules::overshoot::effective_limit`).
        let applies = match scope_member {
            None => names_no_member(&grant.header),
            Some(m) => m.named_by(&grant.header),
        };
        if applies && window::overlaps(grant.valid_from, grant.valid_until, start, end) {
            found.push(GrantFacts {
                grant_id: grant.grant_id,
                amount: grant.amount,
                valid_from: grant.valid_from,
                valid_until: grant.valid_until,
                reason: grant.reason,
                actor: grant.actor,
            });
        }
    }
    Ok(found)
}

/// Usage and valid COMMITs in the decision's window before the decision (largest first), and the reservations
/// open at the decision: (count, amount held). "Before" is as the hook saw it: earlier in event time, or at the
/// same instant and earlier in the ledger (the hook appends a decision before the RESERVE or usage it allows,
/// so the request's own are not before it).
fn consumption(
    at: &At<'_>,
    request_id: &str,
    decision: &Decision,
    scope_member: Option<&ScopeMember>,
) -> Result<(Consumption, (u64, i64)), ReportError> {
    let start = decision.window_start.unwrap_or(decision.occurred_at);
    let counts = |header: &Header| scope_member.is_none_or(|m| m.counts(header));
    let mut all: Vec<Consumed> = Vec::new();
    let window = (start, decision.occurred_at);
    at.ledger.for_each_usage_between(&decision.who.tenant, &decision.metric, window, at.watermark, |usage| {
        let (seq, occurred_at) = (usage.seq, usage.header.occurred_at);
        // The usage this decision allowed is not "before" it: the hook appends it after the decision at the same
        // instant (`is_after` leaves it out), another enforcement point's may reach the ledger first. Usage of the
        // same request_id at an earlier instant is an earlier decision's (a retry) and did consume the window.
        let own_usage = occurred_at == decision.occurred_at && usage.request_id.as_deref() == Some(request_id);
        if counts(&usage.header) && !own_usage && decision.is_after(occurred_at, seq) {
            let Header { event_id, subject, project, api_key, .. } = usage.header;
            let quantity = usage.quantity;
            all.push(Consumed { seq, event_id, kind: "usage", occurred_at, quantity, subject, project, api_key });
        }
    })?;
    let mut open: (u64, i64) = (0, 0);
    at.ledger.for_each_reservation_of(&decision.who.tenant, Some(&decision.metric), at.watermark, |group| {
        let before: Vec<(u64, &ReservationEvent)> = group
            .iter()
            .filter(|(seq, e)| decision.is_after(e.header.occurred_at, *seq))
            .map(|(s, e)| (*s, e))
            .collect();
        let verdict = rules::reservation::judge(&before, decision.occurred_at);
        let Some(reserve) = verdict.reserve.and_then(|s| before.iter().find(|(seq, _)| *seq == s)) else { return };
        if !counts(&reserve.1.header) {
            return;
        }
        match verdict.close {
            // As the hook holds it: until it closes, through its expires_at.
            None if reserve.1.expires_at.is_some_and(|e| decision.occurred_at <= e) => {
                open = (open.0 + 1, open.1.saturating_add(reserve.1.amount));
            }
            Some((seq, ReservationAction::COMMIT, amount)) => {
                let (_, commit) = before.iter().find(|(s, _)| *s == seq).expect("the close is in its group");
                if commit.header.occurred_at >= start {
                    all.push(Consumed {
                        seq,
                        event_id: commit.header.event_id.clone(),
                        kind: "commit",
                        occurred_at: commit.header.occurred_at,
                        quantity: amount,
                        subject: commit.header.subject.clone(),
                        project: commit.header.project.clone(),
                        api_key: commit.header.api_key.clone(),
                    });
                }
            }
            _ => {}
        }
    })?;
    let consumption = largest_first(all, open.1);
    Ok((consumption, open))
}

fn largest_first(mut all: Vec<Consumed>, held: i64) -> Consumption {
    // Sums of what producers sent: shown saturated rather than crashing the answer.
    let total = all.iter().fold(0i64, |sum, c| sum.saturating_add(c.quantity));
    let used_before = total.saturating_add(held);
    let events = all.len() as u64;
    all.sort_by(|a, b| b.quantity.cmp(&a.quantity).then(a.occurred_at.cmp(&b.occurred_at)).then(a.seq.cmp(&b.seq)));
    all.truncate(LARGEST_SHOWN);
    Consumption { total, events, used_before, largest: all }
}

/// Adjustments of the decision's tenant and metric whose window overlaps its window. Under a policy of SUBJECT,
/// PROJECT or API_KEY scope, only the windows of the decision's member of that scope, and as context those of no
/// member (the tenant's windows, late usage): another member's OVERSHOOT (the window of what names none among them,
/// when the decision names one), or one of another scope's member, would read as this one's, whose events and grants
/// do not count in it.
fn adjustments(
    at: &At<'_>,
    decision: &Decision,
    scope_member: Option<&ScopeMember>,
) -> Result<Vec<AdjustmentFacts>, ReportError> {
    let (Some(start), Some(end)) = (decision.window_start, decision.window_end) else { return Ok(Vec::new()) };
    let mut found = Vec::new();
    for a in at.ledger.window_adjustments(&decision.who.tenant, &decision.metric, (start, end), at.watermark)? {
        if scope_member.is_some_and(|m| !m.lists(&a)) {
            continue;
        }
        let Header { subject, project, api_key, .. } = a.header;
        found.push(AdjustmentFacts {
            seq: a.seq,
            adjustment_id: a.adjustment_id,
            kind: a.kind,
            policy_id: a.policy_id,
            subject,
            project,
            api_key,
            window_start: a.window_start,
            window_end: a.window_end,
            amount: a.amount,
            run_id: a.run_id,
        });
    }
    Ok(found)
}

/// The known request_ids nearest to `request_id` ([`super::nearest`]).
fn nearest(at: &At<'_>, request_id: &str) -> Result<Vec<String>, ReportError> {
    super::nearest(request_id, |offer| Ok(at.ledger.for_each_request_id(at.watermark, offer)?))
}

#[cfg(test)]
mod tests {
    use schemas::{Enforcement, Header, Window};

    use super::*;

    fn at(text: &str) -> Timestamp {
        Timestamp::parse_rfc3339(text).unwrap()
    }

    fn copy(owner: &str, limit: i64, effective_from: &str) -> PolicyEvent {
        PolicyEvent::new(
            Header {
                event_id: format!("{owner}-{limit}"),
                occurred_at: at(effective_from),
                tenant: owner.into(),
                subject: None,
                metric: "requests".into(),
                source: "test".into(),
                api_key: None,
                project: None,
            },
            "quota",
            limit,
            Window::MONTH,
            Enforcement::HARD,
            at(effective_from),
        )
    }

    fn decided_at(occurred_at: &str) -> Decision {
        Decision {
            seq: 100,
            event_id: "d".into(),
            occurred_at: at(occurred_at),
            who: Who::tenant("org-1"),
            metric: "requests".into(),
            source: "test".into(),
            idempotency_key: "k".into(),
            amount: 1,
            outcome: "ALLOWED".into(),
            reason: "WITHIN_LIMIT".into(),
            policy_id: Some("quota".into()),
            policy_version: Some(1),
            window_start: None,
            window_end: None,
            token_name: None,
            recorded: (None, None, None, None),
        }
    }

    fn limit_applied(versions: &[PolicyEvent], occurred_at: &str) -> Option<i64> {
        copy_applied(versions, &decided_at(occurred_at).named()).map(|i| versions[i].limit)
    }

    // contract §5 "Policy in force", as rules::policy picks it among the copies of one version: the latest
    // effective_from, a tie to the later in the ledger, the tenant's own before the plan default.
    #[test]
    fn the_copy_applied_is_reconciles() {
        let nov = "2026-11-10T10:00:00Z";
        let tie = [copy("org-1", 10, "2026-01-01T00:00:00Z"), copy("org-1", 20, "2026-01-01T00:00:00Z")];
        assert_eq!(limit_applied(&tie, nov), Some(20));
        let later_effective_first =
            [copy("org-1", 30, "2026-06-01T00:00:00Z"), copy("org-1", 20, "2026-01-01T00:00:00Z")];
        assert_eq!(limit_applied(&later_effective_first, nov), Some(30));
        let plan_and_own = [copy("*", 100, "2026-01-01T00:00:00Z"), copy("org-1", 40, "2026-01-01T00:00:00Z")];
        assert_eq!(limit_applied(&plan_and_own, nov), Some(40));
        // Effective only from December: in force for no November window, still the copy the decision names.
        let ahead = [copy("org-1", 50, "2026-12-01T00:00:00Z"), copy("*", 60, "2026-12-01T00:00:00Z")];
        assert_eq!(limit_applied(&ahead, nov), Some(50));
        assert_eq!(limit_applied(&[], nov), None);
    }

    // The other versions decide which copy applies: the tenant's own v1 no longer covers the plan's v1 once its own
    // v2 (SUBJECT scope) is in force for December, so a December decision under "quota" v1 was the plan's 60, as
    // the hook, reconcile and billing have it (chosen among the copies of v1 alone, it would be the tenant's own
    // 1,000).
    #[test]
    fn a_later_version_of_its_own_leaves_the_decision_to_the_plans_copy() {
        let own_v2 = PolicyEvent { version: 2, scope: Scope::SUBJECT, ..copy("org-1", 1_000, "2026-12-02T00:00:00Z") };
        let versions = [copy("*", 60, "2026-01-01T00:00:00Z"), copy("org-1", 1_000, "2026-01-01T00:00:00Z"), own_v2];
        assert_eq!(limit_applied(&versions, "2026-12-03T10:00:00Z"), Some(60));
        assert_eq!(limit_applied(&versions, "2026-11-03T10:00:00Z"), Some(1_000), "November: its own v1");
    }
}
