//! The alerts a run writes, beside the THRESHOLD alerts the hook writes as requests reach them:
//! what only the ledger's history shows. Each is found from the events, named by what it is about
//! ([`rules::alert::alert_id`]), and left out when an alert of that id is recorded, so a rerun, or a run after the
//! hook alerted the same window, writes none twice.
//!
//! - THRESHOLD, of the windows (calendar or billing cycle, current or ended within [`WINDOWS_ALERTED_MICROS`])
//!   whose consumption reached a threshold without a request the hook allowed reaching it: usage only ingest saw.
//! - SUBJECT_SHARE: in a window of a TENANT policy with `alert_subject_share`, one subject's consumption above that
//!   share of the tenant's, two subjects or more consuming.
//! - OPEN_TOO_LONG: a reservation or a lease held past [`OPEN_TOO_LONG_MICROS`] or the age the run is given
//!   ([`AlertSettings`]): a worker that hangs holding a slot, a job renewing its lease for ever.
//! - DENY_RATE: a policy version that in its first hour denied (or, SHADOW, would have denied) a tenant's requests
//!   at least [`DENY_RATE_FACTOR`] times as often as the version before it in its last hour, and at least
//!   [`DENY_RATE_MIN_POINTS`] percentage points more, over [`DENY_RATE_MIN_DECISIONS`] decisions or more: a plan
//!   change that walled off customers.

use std::collections::HashMap;

use schemas::{AlertEvent, AlertKind, GrantEvent, Header, PolicyEvent, Scope, Timestamp};

use ledger::SequencedReservation;
use rules::alert::{alert_id, percent};
use rules::overshoot;
use rules::reservation::Verdict;
use rustc_hash::FxHashMap;

use crate::concern::ADJUSTMENT_SOURCE;
use crate::error::ReconcileError;
use crate::inputs::PlanInputs;
use crate::names::{Interner, WindowKey};

/// How long a reservation or a lease may stay open before it is alerted, unless the run is told otherwise
/// ([`AlertSettings`]): an hour.
pub const OPEN_TOO_LONG_MICROS: i64 = HOUR_MICROS;

/// What an operator sets of the alerts a run writes (`reconcile --open-alert-after`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AlertSettings {
    /// How long a reservation or lease may be held before an OPEN_TOO_LONG alert, in microseconds (at least 1 s).
    pub open_too_long_micros: i64,
}

impl Default for AlertSettings {
    fn default() -> AlertSettings {
        AlertSettings { open_too_long_micros: OPEN_TOO_LONG_MICROS }
    }
}
/// How far back a run looks for what it alerts once (a version's first hour, a reservation's crossing of the age):
/// a week, so that nights a run missed are alerted by the next, and a first run on an old ledger does not alert
/// its whole history.
pub const LOOKBACK_MICROS: i64 = 7 * 24 * HOUR_MICROS;
/// The windows a run judges thresholds and shares in: those that end after a day before `as_of` (the current
/// windows, and those the last nightly run saw unfinished).
pub const WINDOWS_ALERTED_MICROS: i64 = 24 * HOUR_MICROS;
/// How many times the previous version's deny rate a version's first hour must reach.
pub const DENY_RATE_FACTOR: i64 = 2;
/// How many percentage points above the previous version's deny rate a version's first hour must reach.
pub const DENY_RATE_MIN_POINTS: i64 = 10;
/// How many decisions a tenant's first hour under a version needs before its deny rate says anything.
pub const DENY_RATE_MIN_DECISIONS: u64 = 20;

const HOUR_MICROS: i64 = 3_600 * 1_000_000;

/// An alert of `kind` reconcile writes, found at `occurred_at`, about `member` of `scope` of `tenant`'s `metric`; the
/// fields of its kind are set by the caller.
pub(crate) fn alert(
    id: String,
    kind: AlertKind,
    occurred_at: Timestamp,
    names: (&str, &str),
    member: (Scope, Option<&str>),
) -> AlertEvent {
    AlertEvent {
        header: rules::alert::header(&id, occurred_at, names, member, ADJUSTMENT_SOURCE),
        alert_id: id,
        kind,
        policy_id: None,
        policy_version: None,
        scope: None,
        window_start: None,
        window_end: None,
        threshold_percent: 0,
        limit: None,
        observed: 0,
        request_id: None,
    }
}

/// The OPEN_TOO_LONG alert of a reservation (`group`, judged as `verdict` as of `as_of`), when it was held past `age`
/// (microseconds) at an instant within [`LOOKBACK_MICROS`] before `as_of`: held from its RESERVE until its valid
/// close, or until it expired (as a lease's renewals moved its expiry). `window_start` is when it was reserved,
/// `window_end` and `occurred_at` when it had been held the age; `limit` is the age and `observed` how long it was
/// held as of the run, in seconds; `request_id` is the reservation's id. Its id names the reservation, not the age: a
/// run with another age alerts no reservation twice.
pub(crate) fn open_too_long(
    group: &[SequencedReservation],
    verdict: &Verdict,
    as_of: Timestamp,
    age: i64,
) -> Option<AlertEvent> {
    let event_at = |seq: u64| group.iter().find(|(s, _)| *s == seq).map(|(_, e)| e);
    let reserve = event_at(verdict.reserve?)?;
    let reserved_at = reserve.header.occurred_at;
    let closed_at = verdict.close.and_then(|(seq, _, _)| event_at(seq)).map(|e| e.header.occurred_at);
    let held_until = closed_at.or(verdict.expires_at).unwrap_or(as_of).min(as_of);
    let crossed = Timestamp(reserved_at.micros().saturating_add(age));
    if held_until <= crossed || crossed >= as_of || crossed.micros() < as_of.micros() - LOOKBACK_MICROS {
        return None;
    }
    let tenant = &reserve.header.tenant;
    let id = alert_id(
        AlertKind::OPEN_TOO_LONG,
        tenant,
        &reserve.reservation_id,
        (Scope::TENANT, None),
        (reserved_at, reserved_at),
        100,
    );
    Some(AlertEvent {
        window_start: Some(reserved_at),
        window_end: Some(crossed),
        threshold_percent: 100,
        limit: Some(age / 1_000_000),
        observed: (held_until.micros() - reserved_at.micros()) / 1_000_000,
        request_id: Some(reserve.reservation_id.clone()),
        // Who holds it: the reservation's subject, project and API key.
        header: Header {
            event_id: id.clone(),
            occurred_at: crossed,
            source: ADJUSTMENT_SOURCE.into(),
            ..reserve.header.clone()
        },
        ..alert(id, AlertKind::OPEN_TOO_LONG, crossed, (tenant, &reserve.header.metric), (Scope::TENANT, None))
    })
}

/// A version of a policy and the one before it, by (effective_from, version), for [`deny_rate`].
pub(crate) struct VersionChange<'p> {
    pub(crate) version: &'p PolicyEvent,
    pub(crate) previous: &'p PolicyEvent,
}

/// The version changes whose first hour ended by `as_of` and within [`LOOKBACK_MICROS`] before it.
pub(crate) fn version_changes(policies: &[PolicyEvent], as_of: Timestamp) -> Vec<VersionChange<'_>> {
    let mut ordered: Vec<&PolicyEvent> = policies.iter().collect();
    ordered.sort_by(|a, b| {
        let [ka, kb] = [a, b].map(|p| (&p.header.tenant, &p.header.metric, &p.policy_id, p.effective_from, p.version));
        ka.cmp(&kb)
    });
    let same = |a: &PolicyEvent, b: &PolicyEvent| {
        (&a.header.tenant, &a.header.metric, &a.policy_id) == (&b.header.tenant, &b.header.metric, &b.policy_id)
    };
    ordered
        .windows(2)
        .filter(|pair| same(pair[0], pair[1]))
        .map(|pair| VersionChange { previous: pair[0], version: pair[1] })
        .filter(|c| {
            let first_hour_end = c.version.effective_from.micros().saturating_add(HOUR_MICROS);
            first_hour_end <= as_of.micros() && first_hour_end > as_of.micros() - LOOKBACK_MICROS
        })
        .collect()
}

/// The spans a version change is judged over: the new version's first hour, and the previous version's last (from
/// its own start when it governed less than an hour).
pub(crate) fn deny_rate_spans(change: &VersionChange<'_>) -> ((Timestamp, Timestamp), (Timestamp, Timestamp)) {
    let from = change.version.effective_from;
    let first = (from, Timestamp(from.micros().saturating_add(HOUR_MICROS)));
    let before = (Timestamp((from.micros() - HOUR_MICROS).max(change.previous.effective_from.micros())), from);
    (first, before)
}

/// The DENY_RATE alert of `tenant` under `change`, when its first hour's deny rate (`denied` of `decisions`) is far
/// above the previous version's (`denied_before` of `decisions_before`). `window` is the first hour, `occurred_at` its
/// end; in whole percent, `observed` is the first hour's deny rate, `limit` the previous version's, and
/// `threshold_percent` the rate the first hour had to reach ([`DENY_RATE_FACTOR`] times the previous one, and
/// [`DENY_RATE_MIN_POINTS`] more).
pub(crate) fn deny_rate(
    change: &VersionChange<'_>,
    tenant: &str,
    (decisions, denied): (u64, u64),
    (decisions_before, denied_before): (u64, u64),
) -> Option<AlertEvent> {
    let (first, _) = deny_rate_spans(change);
    let (now, before) = (percent(denied, decisions), percent(denied_before, decisions_before));
    let bar = (DENY_RATE_FACTOR * before).max(before + DENY_RATE_MIN_POINTS);
    if decisions < DENY_RATE_MIN_DECISIONS || now < bar {
        return None;
    }
    let v = change.version;
    let id = alert_id(AlertKind::DENY_RATE, tenant, &v.policy_id, (v.scope, None), first, v.version);
    Some(AlertEvent {
        policy_id: Some(v.policy_id.clone()),
        policy_version: Some(v.version),
        scope: Some(v.scope),
        window_start: Some(first.0),
        window_end: Some(first.1),
        threshold_percent: i32::try_from(bar).unwrap_or(i32::MAX),
        limit: Some(before),
        observed: now,
        ..alert(id, AlertKind::DENY_RATE, first.1, (tenant, &v.header.metric), (Scope::TENANT, None))
    })
}

/// The share of its tenant's consumption above which a subject is alerted in a window of `policy`, in percent: set on
/// TENANT policies only (validation refuses it elsewhere; one read from elsewhere is ignored).
pub(crate) fn subject_share(policy: &PolicyEvent) -> Option<i32> {
    policy.alert_subject_share.filter(|_| policy.scope == Scope::TENANT)
}

/// THRESHOLD and SUBJECT_SHARE alerts of the windows alerts judge (`alert_windows`, with their consumption and policy;
/// `shares`, each subject's consumption in those whose policy sets `alert_subject_share`), as of the last instant the
/// run read (`as_of` less a microsecond: the next night's report starts after it). A THRESHOLD alert's `observed` is
/// the window's consumption (the hook's counts holds too); a SUBJECT_SHARE alert's is the subject's, its `limit` the
/// tenant's, its `threshold_percent` the share set.
pub(crate) fn judge_windows(
    alert_windows: FxHashMap<WindowKey, (i64, &PolicyEvent)>,
    shares: FxHashMap<(WindowKey, u32), i64>,
    names: &Interner,
    grants: &HashMap<(String, String), Vec<GrantEvent>>,
    as_of: Timestamp,
) -> Vec<AlertEvent> {
    let mut alerts = Vec::new();
    let found_at = Timestamp(as_of.micros() - 1);
    let mut windows: Vec<_> = alert_windows.into_iter().collect();
    windows.sort_by_key(|(key, _)| *key);
    for (key, (consumption, policy)) in &windows {
        let (tenant, metric) = (names.name(key.tenant), names.name(key.metric));
        let member = names.member(key.member);
        let grants = grants.get(&(tenant.to_string(), metric.to_string())).map_or(&[][..], Vec::as_slice);
        let window = (Timestamp(key.start), Timestamp(key.end));
        let limit = overshoot::effective_limit(policy.limit, key.scope, member.as_deref(), grants, window.0, window.1);
        for &threshold in policy.alert_thresholds() {
            if i128::from(*consumption) < rules::alert::level(limit, threshold) {
                continue;
            }
            let id = rules::alert::alert_id(
                AlertKind::THRESHOLD,
                tenant,
                &policy.policy_id,
                (key.scope, member.as_deref()),
                window,
                threshold,
            );
            alerts.push(AlertEvent {
                policy_id: Some(policy.policy_id.clone()),
                policy_version: Some(policy.version),
                scope: Some(key.scope),
                window_start: Some(window.0),
                window_end: Some(window.1),
                threshold_percent: threshold,
                limit: Some(limit),
                observed: *consumption,
                ..alert(id, AlertKind::THRESHOLD, found_at, (tenant, metric), (key.scope, member.as_deref()))
            });
        }
    }
    let mut shares: Vec<_> = shares.into_iter().collect();
    shares.sort_by_key(|(key, _)| *key);
    for subjects in shares.chunk_by(|(a, _), (b, _)| a.0 == b.0) {
        let key = subjects[0].0.0;
        let Some((consumption, policy)) = windows.binary_search_by_key(&key, |(k, _)| *k).ok().map(|i| windows[i].1)
        else {
            continue;
        };
        let Some(share) = subject_share(policy).filter(|_| subjects.len() >= 2) else { continue };
        let (tenant, metric) = (names.name(key.tenant), names.name(key.metric));
        let window = (Timestamp(key.start), Timestamp(key.end));
        for ((_, subject), used) in subjects {
            if i128::from(*used) * 100 <= i128::from(share) * i128::from(consumption) {
                continue;
            }
            let subject = names.name(*subject);
            let id = rules::alert::alert_id(
                AlertKind::SUBJECT_SHARE,
                tenant,
                &policy.policy_id,
                (Scope::SUBJECT, Some(subject)),
                window,
                share,
            );
            alerts.push(AlertEvent {
                policy_id: Some(policy.policy_id.clone()),
                policy_version: Some(policy.version),
                scope: Some(policy.scope),
                window_start: Some(window.0),
                window_end: Some(window.1),
                threshold_percent: share,
                limit: Some(consumption),
                observed: *used,
                ..alert(id, AlertKind::SUBJECT_SHARE, found_at, (tenant, metric), (Scope::SUBJECT, Some(subject)))
            });
        }
    }
    alerts
}

/// DENY_RATE alerts of the version changes of `policies` whose first hour ended in the week before `as_of`, from the
/// decisions `inputs` tally.
pub(crate) fn judge_deny_rates(
    inputs: &impl PlanInputs,
    policies: &[PolicyEvent],
    as_of: Timestamp,
) -> Result<Vec<AlertEvent>, ReconcileError> {
    let mut alerts = Vec::new();
    for change in version_changes(policies, as_of) {
        let (first, before) = deny_rate_spans(&change);
        let v = change.version;
        let tenant = Some(v.header.tenant.as_str()).filter(|t| *t != rules::policy::PLAN_DEFAULT_TENANT);
        let metric = &v.header.metric;
        let now = inputs.decision_tallies(tenant, metric, first, (&v.policy_id, v.version))?;
        let then: HashMap<String, ledger::DecisionTally> = inputs
            .decision_tallies(tenant, metric, before, (&change.previous.policy_id, change.previous.version))?
            .into_iter()
            .collect();
        for (tenant, tally) in now {
            let earlier = then.get(&tenant).copied().unwrap_or_default();
            let found =
                deny_rate(&change, &tenant, (tally.decisions, tally.denied), (earlier.decisions, earlier.denied));
            alerts.extend(found);
        }
    }
    Ok(alerts)
}
