//! Changes as requested, and the events that record them: pure, judged against [`Recorded`].

use schemas::validate::{check_id, check_name};
use schemas::{
    Enforcement, Event, GrantEvent, Header, Invalid, OnFailure, PolicyEvent, Scope, Timestamp, Violation, Window,
};

use crate::record::Recorded;
use crate::refused::Refused;

/// The longest `reason` accepted, in bytes: a sentence or a ticket reference for the people who read `audit`, not a
/// document (the same order as an idempotency key, ten times a tenant's name).
pub const REASON_BYTES_MAX: usize = 1024;

/// A new version of a policy (`policy set`; `plan set` is the same with tenant `*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyChange {
    /// The tenant, or `*` for the plan default.
    pub tenant: String,
    /// What is counted.
    pub metric: String,
    /// What a window may consume.
    pub limit: i64,
    /// The window the limit holds over.
    pub window: Window,
    /// HARD, SOFT or SHADOW.
    pub enforcement: Enforcement,
    /// TENANT or SUBJECT.
    pub scope: Scope,
    /// The policy; [`default_policy_id`] when none is given.
    pub policy_id: Option<String>,
    /// The version to write; the last recorded one plus 1 when none is given.
    pub version: Option<i32>,
    /// When the version starts to govern; now when none is given.
    pub effective_from: Option<Timestamp>,
    /// The IANA time zone of its calendar windows (HOUR, DAY, MONTH); none is UTC.
    pub time_zone: Option<String>,
    /// What the hook answers when the ledger cannot record its decisions; none is CLOSED.
    pub on_failure: Option<OnFailure>,
    /// A HARD quota's throttled overage: beyond the limit, this many units per this window; none is a wall.
    pub overage: Option<(i64, Window)>,
    /// Set, a gauge quota: what it refuses while the tenant's level of the metric is above the limit.
    pub violation: Option<Violation>,
    /// The length of a ROLLING window in seconds: given exactly when `window` is ROLLING (validation refuses it
    /// otherwise, and its absence with ROLLING).
    pub window_seconds: Option<i64>,
    /// The billing anchor of a BILLING_CYCLE window: given exactly when `window` is BILLING_CYCLE (validation refuses
    /// it otherwise, and its absence with BILLING_CYCLE). Its day and time of day on the clock of `time_zone` start
    /// every cycle.
    pub cycle_anchor: Option<Timestamp>,
    /// The percents of a window's effective limit at which a THRESHOLD alert is written, strictly increasing; none is
    /// the default 80, 90 and 100, an empty list no THRESHOLD alert.
    pub alert_thresholds: Option<Vec<i32>>,
    /// Of a TENANT policy: the percent of the tenant's consumption in a window above which one subject's calls for a
    /// SUBJECT_SHARE alert; none for no such alert.
    pub alert_subject_share: Option<i32>,
    /// Who makes the change.
    pub actor: String,
    /// Why, for people.
    pub reason: String,
    /// The producing service recorded in the event's `source` (the command or the endpoint).
    pub source: String,
}

/// A grant (`grant add`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantChange {
    /// The tenant.
    pub tenant: String,
    /// The subject whose SUBJECT-policy windows it raises; none: the TENANT-policy windows (unless a project or an
    /// API key is named).
    pub subject: Option<String>,
    /// The project whose PROJECT-policy windows it raises.
    pub project: Option<String>,
    /// The API key whose API_KEY-policy windows it raises.
    pub api_key: Option<String>,
    /// What is counted.
    pub metric: String,
    /// What it adds to the limit.
    pub amount: i64,
    /// When it starts to count.
    pub valid_from: Timestamp,
    /// Exclusive.
    pub valid_until: Timestamp,
    /// The grant; derived from the tenant, metric and time of the change when none is given.
    pub grant_id: Option<String>,
    /// Who gives it.
    pub actor: String,
    /// Why, for people.
    pub reason: String,
    /// The producing service recorded in the event's `source`.
    pub source: String,
}

/// The policy id of a change that names none: `TENANT:METRIC:SCOPE:WINDOW`, scope and window in lower case
/// (`org-42:requests:tenant:day`, `*:tokens:subject:month`). Deterministic, so that setting the same kind of limit
/// again makes the next version of the same policy; the tenant is part of it, so that a tenant's own policy never
/// shares an id (and versions) with the plan default it overrides.
pub fn default_policy_id(tenant: &str, metric: &str, scope: Scope, window: Window) -> String {
    format!("{tenant}:{metric}:{}:{}", scope.symbol().to_lowercase(), window.symbol().to_lowercase())
}

/// The PolicyEvent that records `change`, at `now`, or why it would be invalid.
pub fn policy_event(change: &PolicyChange, recorded: &Recorded, now: Timestamp) -> Result<PolicyEvent, Refused> {
    check_name("tenant", &change.tenant)?;
    check_name("metric", &change.metric)?;
    let policy_id = match &change.policy_id {
        Some(id) => id.clone(),
        None => default_policy_id(&change.tenant, &change.metric, change.scope, change.window),
    };
    check_non_empty_id("policy_id", &policy_id)?;
    check_why(&change.actor, &change.reason)?;
    let last = recorded.last_version(&change.tenant, &change.metric, &policy_id);
    let version = match (change.version, last) {
        (Some(version), Some(last)) if version <= last => {
            return Err(Refused::VersionNotAbove { policy_id, version, last });
        }
        (Some(version), _) => version,
        (None, None) => 1,
        (None, Some(last)) => {
            last.checked_add(1).ok_or_else(|| Refused::VersionsExhausted { policy_id: policy_id.clone() })?
        }
    };
    let effective_from = change.effective_from.unwrap_or(now);
    recorded.check_after_close("effective_from", effective_from)?;
    let event = PolicyEvent {
        header: header(event_id_of_policy(&change.tenant, &change.metric, &policy_id, version), change, now),
        policy_id,
        version,
        scope: change.scope,
        limit: change.limit,
        window: change.window,
        enforcement: change.enforcement,
        effective_from,
        burst: None,
        actor: Some(change.actor.clone()),
        reason: Some(change.reason.clone()),
        time_zone: change.time_zone.clone(),
        on_failure: change.on_failure,
        overage_rate: change.overage.map(|o| o.0),
        overage_window: change.overage.map(|o| o.1),
        violation: change.violation,
        window_seconds: change.window_seconds,
        cycle_anchor: change.cycle_anchor,
        alert_thresholds: change.alert_thresholds.clone(),
        alert_subject_share: change.alert_subject_share,
    };
    let event = Event::Policy(event);
    schemas::validate(&event)?;
    let Event::Policy(event) = event else { unreachable!("built as a policy") };
    Ok(event)
}

/// The GrantEvent that records `change`, at `now`, or why it would be invalid.
pub fn grant_event(change: &GrantChange, recorded: &Recorded, now: Timestamp) -> Result<GrantEvent, Refused> {
    let grant_id = change.grant_id.clone().unwrap_or_else(|| format!("{}:{}:{}", change.tenant, change.metric, now));
    check_non_empty_id("grant_id", &grant_id)?;
    check_why(&change.actor, &change.reason)?;
    if recorded.has_grant(&change.tenant, &grant_id) {
        return Err(Refused::GrantExists { grant_id, tenant: change.tenant.clone() });
    }
    recorded.check_after_close("valid_from", change.valid_from)?;
    let header = Header {
        event_id: event_id_of_grant(&change.tenant, &grant_id),
        occurred_at: now,
        tenant: change.tenant.clone(),
        subject: change.subject.clone(),
        metric: change.metric.clone(),
        source: change.source.clone(),
        api_key: change.api_key.clone(),
        project: change.project.clone(),
    };
    let event = Event::Grant(GrantEvent {
        header,
        grant_id,
        amount: change.amount,
        valid_from: change.valid_from,
        valid_until: change.valid_until,
        reason: change.reason.clone(),
        actor: Some(change.actor.clone()),
    });
    schemas::validate(&event)?;
    let Event::Grant(event) = event else { unreachable!("built as a grant") };
    Ok(event)
}

/// Deterministic, so that the ledger's deduplication refuses a second, different copy of one version of one policy
/// (two changes racing for the same version: the later is refused, nothing of it recorded). Its parts joined by
/// [`schemas::ids::join`], so that no owner's names spell another owner's version (tenant `iso`'s metric `b` and
/// tenant `iso/b`'s metric are two ids).
fn event_id_of_policy(tenant: &str, metric: &str, policy_id: &str, version: i32) -> String {
    schemas::ids::join(&["policy", tenant, metric, policy_id, &format!("v{version}")])
}

/// Deterministic, so that a grant recorded twice is one grant; its parts joined by [`schemas::ids::join`], so that a
/// tenant's grant id never spells another tenant's grant (tenant `iso`'s `b/credit-7` and tenant `iso/b`'s
/// `credit-7` are two ids).
fn event_id_of_grant(tenant: &str, grant_id: &str) -> String {
    schemas::ids::join(&["grant", tenant, grant_id])
}

fn header(event_id: String, change: &PolicyChange, now: Timestamp) -> Header {
    Header {
        event_id,
        occurred_at: now,
        tenant: change.tenant.clone(),
        subject: None,
        metric: change.metric.clone(),
        source: change.source.clone(),
        api_key: None,
        project: None,
    }
}

fn check_non_empty_id(field: &'static str, value: &str) -> Result<(), Invalid> {
    if value.is_empty() {
        return Err(Invalid::Empty { field });
    }
    check_id(field, value)
}

/// Who and why are what `audit` shows of a change: a name as bounded as a tenant's, and a reason of one line.
fn check_why(actor: &str, reason: &str) -> Result<(), Invalid> {
    check_name("actor", actor)?;
    if reason.is_empty() {
        return Err(Invalid::Empty { field: "reason" });
    }
    if reason.len() > REASON_BYTES_MAX {
        return Err(Invalid::TooLong { field: "reason", bytes: reason.len(), maximum: REASON_BYTES_MAX });
    }
    match reason.char_indices().find(|(_, c)| c.is_control()) {
        Some((at, c)) => Err(Invalid::ControlCharacter { field: "reason", code_point: u32::from(c), at }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use testkit::fixtures::at;

    fn change(version: Option<i32>) -> PolicyChange {
        PolicyChange {
            tenant: "org-1".into(),
            metric: "tokens".into(),
            limit: 10,
            window: Window::HOUR,
            enforcement: Enforcement::SOFT,
            scope: Scope::SUBJECT,
            policy_id: None,
            version,
            effective_from: None,
            time_zone: None,
            on_failure: None,
            overage: None,
            violation: None,
            window_seconds: None,
            cycle_anchor: None,
            alert_thresholds: None,
            alert_subject_share: None,
            actor: "alice".into(),
            reason: "why".into(),
            source: "test".into(),
        }
    }

    // Proves a policy's time zone is recorded as given, and one the IANA database does not know is refused naming it.
    #[test]
    fn a_time_zone_is_recorded_or_refused() {
        let now = at("2026-12-04T10:00:00Z");
        let zoned = |zone: &str| PolicyChange { time_zone: Some(zone.into()), ..change(None) };
        let event = policy_event(&zoned("Asia/Kolkata"), &Recorded::default(), now).unwrap();
        assert_eq!(event.time_zone.as_deref(), Some("Asia/Kolkata"));
        let refused = policy_event(&zoned("Mars/Olympus_Mons"), &Recorded::default(), now).unwrap_err();
        assert!(matches!(&refused, Refused::Invalid(Invalid::UnknownTimeZone { .. })), "{refused:?}");
        assert!(refused.to_string().contains("\"Mars/Olympus_Mons\" is not a time zone"), "{refused}");
        assert_eq!(policy_event(&change(None), &Recorded::default(), now).unwrap().time_zone, None);
    }

    // Proves a ROLLING change records its length, its default policy id names the kind ("rolling", so that setting
    // another length makes the next version of the same policy, as covering a plan default takes every length for
    // one), and that a length without ROLLING, or ROLLING without one, is refused naming window_seconds.
    #[test]
    fn a_rolling_window_is_recorded_with_its_length_or_refused() {
        let now = at("2026-12-04T10:00:00Z");
        let rolling = |window: Window, seconds: Option<i64>| PolicyChange {
            window,
            window_seconds: seconds,
            cycle_anchor: None,
            enforcement: Enforcement::HARD,
            ..change(None)
        };
        let event = policy_event(&rolling(Window::ROLLING, Some(86_400)), &Recorded::default(), now).unwrap();
        assert_eq!((event.policy_id.as_str(), event.window_seconds), ("org-1:tokens:subject:rolling", Some(86_400)));
        let refused = |change: PolicyChange| policy_event(&change, &Recorded::default(), now).unwrap_err().to_string();
        assert_eq!(refused(rolling(Window::ROLLING, None)), "window_seconds: a ROLLING window needs window_seconds");
        assert_eq!(
            refused(rolling(Window::DAY, Some(60))),
            "window_seconds: window_seconds is for ROLLING windows only"
        );
        assert!(refused(rolling(Window::ROLLING, Some(0))).starts_with("window_seconds is 0, must be at least 1"));
    }

    // Proves a policy's own alert settings are recorded as given, and that thresholds out of order or a subject share
    // of a SUBJECT policy are refused naming the field.
    #[test]
    fn alert_settings_are_recorded_or_refused() {
        let now = at("2026-12-04T10:00:00Z");
        let alerted = |scope: Scope, thresholds: Option<Vec<i32>>, share: Option<i32>| PolicyChange {
            scope,
            alert_thresholds: thresholds,
            alert_subject_share: share,
            ..change(None)
        };
        let event = policy_event(&alerted(Scope::TENANT, Some(vec![50, 100]), Some(40)), &Recorded::default(), now);
        let event = event.unwrap();
        assert_eq!((event.alert_thresholds(), event.alert_subject_share), (&[50, 100][..], Some(40)));
        let refused = |change: PolicyChange| policy_event(&change, &Recorded::default(), now).unwrap_err().to_string();
        assert_eq!(
            refused(alerted(Scope::TENANT, Some(vec![90, 80]), None)),
            "alert_thresholds: 90 then 80: thresholds are strictly increasing"
        );
        assert_eq!(
            refused(alerted(Scope::SUBJECT, None, Some(40))),
            "alert_subject_share: a subject's share is of a TENANT policy's consumption"
        );
    }

    // Proves the version follows the last one recorded for the same owner, metric and policy id, that a version given
    // above it is kept, and that the event id names the version (the ledger then refuses a second copy of it).
    #[test]
    fn the_next_version_follows_the_last_recorded() {
        let now = at("2026-12-04T10:00:00Z");
        let first = policy_event(&change(None), &Recorded::default(), now).unwrap();
        assert_eq!((first.policy_id.as_str(), first.version), ("org-1:tokens:subject:hour", 1));
        assert_eq!(first.header.event_id, "policy/org-1/tokens/org-1:tokens:subject:hour/v1");
        assert_eq!(
            (first.effective_from, first.actor.as_deref(), first.reason.as_deref()),
            (now, Some("alice"), Some("why"))
        );
        let recorded = Recorded::from_policies(vec![first]);
        assert_eq!(policy_event(&change(None), &recorded, now).unwrap().version, 2);
        assert_eq!(policy_event(&change(Some(7)), &recorded, now).unwrap().version, 7);
        let last = policy_event(&change(Some(i32::MAX)), &recorded, now).unwrap();
        let at_the_end = Recorded::from_policies(vec![last]);
        assert!(matches!(policy_event(&change(None), &at_the_end, now), Err(Refused::VersionsExhausted { .. })));
        let refused = policy_event(&change(Some(1)), &recorded, now).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "version 1 of policy org-1:tokens:subject:hour is not above the last recorded, 1"
        );
    }

    // Proves the event ids of plain names are spelled as ledgers recorded them, and that a `/` or `%` in a part is
    // escaped, so that one tenant's names never spell another's id.
    #[test]
    fn event_ids_escape_the_separator_in_their_parts() {
        let now = at("2026-12-04T10:00:00Z");
        let grant = |tenant: &str, grant_id: &str| GrantChange {
            tenant: tenant.into(),
            subject: None,
            project: None,
            api_key: None,
            metric: "tokens".into(),
            amount: 5,
            valid_from: at("2026-12-01T00:00:00Z"),
            valid_until: at("2027-01-01T00:00:00Z"),
            grant_id: Some(grant_id.into()),
            actor: "alice".into(),
            reason: "why".into(),
            source: "test".into(),
        };
        let id = |tenant: &str, grant_id: &str| grant_event(&grant(tenant, grant_id), &Recorded::default(), now);
        assert_eq!(id("org-1", "g-1").unwrap().header.event_id, "grant/org-1/g-1");
        assert_eq!(id("iso", "b/credit-7").unwrap().header.event_id, "grant/iso/b%2Fcredit-7");
        assert_eq!(id("iso/b", "credit-7").unwrap().header.event_id, "grant/iso%2Fb/credit-7");
        assert_eq!(id("iso/b", "100%").unwrap().header.event_id, "grant/iso%2Fb/100%25");
        let tenant = |tenant: &str| PolicyChange { tenant: tenant.into(), ..change(None) };
        let policy = policy_event(&tenant("iso/b"), &Recorded::default(), now).unwrap();
        assert_eq!(policy.header.event_id, "policy/iso%2Fb/tokens/iso%2Fb:tokens:subject:hour/v1");
    }

    // Proves who and why are required and bounded: an empty actor, a reason with a newline (a forged line in `audit`)
    // and an over-long reason are refused.
    #[test]
    fn who_and_why_are_required_and_bounded() {
        let now = at("2026-12-04T10:00:00Z");
        let with = |actor: &str, reason: &str| {
            let mut c = change(None);
            (c.actor, c.reason) = (actor.into(), reason.into());
            policy_event(&c, &Recorded::default(), now).map(|_| ()).map_err(|e| e.to_string())
        };
        assert_eq!(with("", "why"), Err("actor is empty".into()));
        assert_eq!(with("a", "line\nforged"), Err("reason holds a control character (U+000A) at byte 4".into()));
        assert!(with("a", &"x".repeat(REASON_BYTES_MAX + 1)).unwrap_err().contains("longer than the 1024 bytes"));
        assert_eq!(with("a", "ok"), Ok(()));
    }
}
