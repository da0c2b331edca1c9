//! Validation of decoded events: what a well-formed event of contract §3 must satisfy before the ledger records it.

use crate::event::*;
use crate::timestamp::Timestamp;

/// Largest message accepted, in bytes. Kafka's default `message.max.bytes` is about 1 MB; an event is a few
/// hundred bytes, so anything near this is a producer bug, not usage.
pub const MAX_MESSAGE_BYTES: usize = 1024 * 1024;

/// Earliest accepted timestamp: 2000-01-01T00:00:00Z. Fixed bounds rather than "now plus or minus" so that
/// ingesting the same bytes always gives the same answer.
pub const TIMESTAMP_MIN: Timestamp = Timestamp(946_684_800_000_000);
/// First rejected timestamp: 2100-01-01T00:00:00Z.
pub const TIMESTAMP_MAX: Timestamp = Timestamp(4_102_444_800_000_000);

/// Largest quantity or amount accepted (2^53 - 1: the largest integer a JSON reader such as JavaScript's holds
/// exactly). Sums of them (a month's usage, a window's consumption, a limit plus grants) then need more than a
/// thousand such events to leave i64. Without this bound, two usage events of 2^62 would make every append of
/// their batch overflow, blocking their partition for good, and an upsert past i64 would turn a month's total into
/// a float.
pub const AMOUNT_MAX: i64 = (1 << 53) - 1;

/// Longest tenant, subject or metric, in bytes of UTF-8 (contract §9.2): names that services and reports carry in every
/// key and row; a producer's mistake (a whole request body as a tenant) must not become every row's size.
pub const NAME_BYTES_MAX: usize = 128;
/// Longest idempotency_key or request_id, in bytes of UTF-8 (contract §9.2): room for a UUID with a prefix or a
/// signed token, not for a payload.
pub const ID_BYTES_MAX: usize = 256;

/// The longest reason a correction may carry, in bytes of UTF-8: what the control plane takes for a policy's reason.
pub const REASON_BYTES_MAX: usize = 1_024;

/// An event that decodes but breaks a rule of contract §3.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
#[allow(missing_docs)] // Each variant's #[error] message says what it means and quotes its fields.
pub enum Invalid {
    #[error("{field} is empty")]
    Empty { field: &'static str },
    #[error("{field} is {value}, must be at least {minimum}")]
    Negative { field: &'static str, value: i64, minimum: i64 },
    #[error("{field} is {value}, must be at most {maximum}")]
    TooLarge { field: &'static str, value: i64, maximum: i64 },
    #[error("{field} {value} is outside the accepted range [{}, {})", TIMESTAMP_MIN, TIMESTAMP_MAX)]
    TimestampOutOfRange { field: &'static str, value: Timestamp },
    #[error("{field}: {message}")]
    Inconsistent { field: &'static str, message: String },
    #[error("{field} is {bytes} bytes long, longer than the {maximum} bytes allowed")]
    TooLong { field: &'static str, bytes: usize, maximum: usize },
    #[error("{field} holds a control character (U+{code_point:04X}) at byte {at}")]
    ControlCharacter { field: &'static str, code_point: u32, at: usize },
    #[error("time_zone {value:?} is not a time zone of the IANA database (e.g. America/New_York, Europe/Berlin, UTC)")]
    UnknownTimeZone { value: String },
}

impl Invalid {
    /// A stable, machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Invalid::Empty { field: "tenant" } => "empty_tenant",
            Invalid::Empty { .. } => "empty_field",
            Invalid::Negative { .. } => "negative_quantity",
            Invalid::TooLarge { .. } => "quantity_too_large",
            Invalid::TimestampOutOfRange { .. } => "timestamp_out_of_range",
            Invalid::Inconsistent { .. } => "inconsistent_fields",
            Invalid::TooLong { .. } => "field_too_long",
            Invalid::ControlCharacter { .. } => "control_character",
            Invalid::UnknownTimeZone { .. } => "unknown_time_zone",
        }
    }
}

fn non_empty(field: &'static str, value: &str) -> Result<(), Invalid> {
    if value.is_empty() { Err(Invalid::Empty { field }) } else { Ok(()) }
}

/// A tenant, subject or metric: 1 to [`NAME_BYTES_MAX`] bytes without control characters (contract §9.2). What the
/// hook checks of a request before it decides, and ingest of an event before it records it.
pub fn check_name(field: &'static str, value: &str) -> Result<(), Invalid> {
    non_empty(field, value)?;
    bounded(field, value, NAME_BYTES_MAX)
}

/// An idempotency_key or request_id: at most [`ID_BYTES_MAX`] bytes without control characters (contract §9.2).
pub fn check_id(field: &'static str, value: &str) -> Result<(), Invalid> {
    bounded(field, value, ID_BYTES_MAX)
}

/// At most `maximum` bytes, and no control character: those (a newline, an escape sequence) would let a
/// producer forge lines in `status`, `audit` and the CSV exports that support and finance read.
fn bounded(field: &'static str, value: &str, maximum: usize) -> Result<(), Invalid> {
    if value.len() > maximum {
        return Err(Invalid::TooLong { field, bytes: value.len(), maximum });
    }
    match value.char_indices().find(|(_, c)| c.is_control()) {
        Some((at, c)) => Err(Invalid::ControlCharacter { field, code_point: u32::from(c), at }),
        None => Ok(()),
    }
}

/// At least `minimum`, and at most [`AMOUNT_MAX`]: every number this is asked of is a quantity, an amount, a
/// limit, a capacity or a version.
fn at_least(field: &'static str, value: i64, minimum: i64) -> Result<(), Invalid> {
    if value < minimum {
        Err(Invalid::Negative { field, value, minimum })
    } else if value > AMOUNT_MAX {
        Err(Invalid::TooLarge { field, value, maximum: AMOUNT_MAX })
    } else {
        Ok(())
    }
}

fn in_range(field: &'static str, value: Timestamp) -> Result<(), Invalid> {
    if value < TIMESTAMP_MIN || value >= TIMESTAMP_MAX {
        Err(Invalid::TimestampOutOfRange { field, value })
    } else {
        Ok(())
    }
}

fn opt_in_range(field: &'static str, value: Option<Timestamp>) -> Result<(), Invalid> {
    value.map_or(Ok(()), |v| in_range(field, v))
}

/// Checks an event against the rules of contract §3.
pub fn validate(event: &Event) -> Result<(), Invalid> {
    let header = event.header();
    non_empty("event_id", &header.event_id)?;
    check_name("tenant", &header.tenant)?;
    if let Some(subject) = &header.subject {
        check_name("subject", subject)?;
    }
    if let Some(project) = &header.project {
        check_name("project", project)?;
    }
    if let Some(api_key) = &header.api_key {
        check_name("api_key", api_key)?;
    }
    check_name("metric", &header.metric)?;
    in_range("occurred_at", header.occurred_at)?;
    // `*` names the plan defaults (contract §3, PolicyEvent). Usage, a decision, a reservation or a grant of "tenant *"
    // was billed as a tenant of its own, under the plan default as if that were its own policy, and a grant to `*`
    // raised nobody's limit; the hook refuses `*` as a tenant too.
    // So does `*` followed by a name: a named plan's policies (`*pro`), never a tenant's. A meter may be the plan
    // defaults' (`*`), not a named plan's.
    let carried = match event {
        Event::Policy(_) | Event::Adjustment(_) => true,
        Event::Meter(_) => header.tenant == "*",
        _ => false,
    };
    if header.tenant.starts_with('*') && !carried {
        let names = if header.tenant == "*" { "the plan defaults" } else { "a named plan's policies" };
        return Err(Invalid::Inconsistent {
            field: "tenant",
            message: format!(
                "{:?} names {names}, which only a PolicyEvent (and, for \"*\", a MeterEvent) may carry: not a tenant",
                header.tenant
            ),
        });
    }
    match event {
        Event::Usage(e) => validate_usage(e),
        Event::Decision(e) => validate_decision(e),
        Event::Reservation(e) => validate_reservation(e),
        Event::Grant(e) => validate_grant(e),
        Event::Policy(e) => validate_policy(e),
        Event::Adjustment(e) => validate_adjustment(e),
        Event::Alert(e) => validate_alert(e),
        Event::Correction(e) => validate_correction(e),
        Event::CapacityLease(e) => validate_capacity_lease(e),
        Event::PlanAssignment(e) => validate_plan_assignment(e),
        Event::Meter(e) => validate_meter(e),
    }
}

fn validate_usage(e: &UsageEvent) -> Result<(), Invalid> {
    if let Some(request_id) = &e.request_id {
        check_id("request_id", request_id)?;
    }
    at_least("quantity", e.quantity, 0)
}

fn validate_decision(e: &DecisionEvent) -> Result<(), Invalid> {
    non_empty("request_id", &e.request_id)?;
    check_id("request_id", &e.request_id)?;
    non_empty("idempotency_key", &e.idempotency_key)?;
    check_id("idempotency_key", &e.idempotency_key)?;
    at_least("amount", e.amount, 0)?;
    opt_in_range("window_start", e.window_start)?;
    opt_in_range("window_end", e.window_end)?;
    // Shown by `audit why`: bounded as a tenant's name is, and never a forged line.
    match &e.token_name {
        Some(token_name) => check_name("token_name", token_name),
        None => Ok(()),
    }
}

fn validate_reservation(e: &ReservationEvent) -> Result<(), Invalid> {
    non_empty("reservation_id", &e.reservation_id)?;
    at_least("amount", e.amount, 0)?;
    opt_in_range("expires_at", e.expires_at)?;
    if let Some(token) = e.fencing_token {
        at_least("fencing_token", token, 1)?;
    }
    let inconsistent = |field: &'static str, message: String| Err(Invalid::Inconsistent { field, message });
    match (e.action, e.expires_at, e.fencing_token) {
        (ReservationAction::RESERVE, None, _) => {
            inconsistent("expires_at", "a RESERVE must say when it expires".into())
        }
        (ReservationAction::RENEW, None, _) => {
            inconsistent("expires_at", "a RENEW must say the lease's new expiry".into())
        }
        (ReservationAction::RELEASE | ReservationAction::RENEW, _, _) if e.amount != 0 => {
            inconsistent("amount", format!("a {} carries amount 0, found {}", e.action, e.amount))
        }
        (ReservationAction::RENEW, _, None) => {
            inconsistent("fencing_token", "a RENEW is of a lease and must carry the holder's fencing_token".into())
        }
        (ReservationAction::RESERVE, _, Some(_)) if e.amount != 1 => {
            inconsistent("amount", format!("a lease's RESERVE holds 1 slot, found {}", e.amount))
        }
        (ReservationAction::COMMIT, _, Some(_)) => {
            inconsistent("fencing_token", "a lease consumes nothing: it is released or expires, never committed".into())
        }
        _ => Ok(()),
    }
}

fn validate_grant(e: &GrantEvent) -> Result<(), Invalid> {
    non_empty("grant_id", &e.grant_id)?;
    at_least("amount", e.amount, 1)?;
    in_range("valid_from", e.valid_from)?;
    in_range("valid_until", e.valid_until)?;
    if e.valid_until <= e.valid_from {
        return Err(Invalid::Inconsistent {
            field: "valid_until",
            message: format!("{} is not after valid_from {}", e.valid_until, e.valid_from),
        });
    }
    // A grant raises the windows of the one member it names (contract §5): of two, which it raises would be a guess.
    let h = &e.header;
    if [&h.subject, &h.project, &h.api_key].iter().filter(|m| m.is_some()).count() > 1 {
        return Err(Invalid::Inconsistent {
            field: "subject",
            message: "a grant names at most one of subject, project and api_key".to_string(),
        });
    }
    opt_actor(&e.actor)
}

/// Who made a control-plane change is a name as bounded as a tenant's (contract §9.2).
fn opt_actor(actor: &Option<String>) -> Result<(), Invalid> {
    actor.as_deref().map_or(Ok(()), |actor| check_name("actor", actor))
}

fn validate_policy(e: &PolicyEvent) -> Result<(), Invalid> {
    non_empty("policy_id", &e.policy_id)?;
    at_least("version", i64::from(e.version), 0)?;
    at_least("limit", e.limit, 0)?;
    in_range("effective_from", e.effective_from)?;
    if let Some(burst) = e.burst {
        at_least("burst", burst, 1)?;
    }
    if let Some(time_zone) = &e.time_zone {
        check_time_zone(time_zone)?;
    }
    check_overage(e)?;
    check_gauge(e)?;
    check_rolling(e)?;
    check_cycle(e)?;
    check_alerts(e)?;
    opt_actor(&e.actor)
}

/// The longest ROLLING window: 31 days, within what the hook folds at start (a month and a day), so a fresh hook
/// knows every event a window ending now holds.
pub const ROLLING_SECONDS_MAX: i64 = 31 * 24 * 3_600;

/// A ROLLING window (PolicyEvent v10): `window_seconds` with it and only with it, from 1 s to
/// [`ROLLING_SECONDS_MAX`]. A quota of consumption only: a throttle's bucket refills per calendar window, a throttled
/// overage and a gauge are judged per calendar window, so none of them takes a rolling one.
fn check_rolling(e: &PolicyEvent) -> Result<(), Invalid> {
    let inconsistent = |message: &str| Invalid::Inconsistent { field: "window_seconds", message: message.to_string() };
    match (e.window, e.window_seconds) {
        (Window::ROLLING, None) => Err(inconsistent("a ROLLING window needs window_seconds")),
        (Window::ROLLING, Some(seconds)) => {
            at_least("window_seconds", seconds, 1)?;
            if seconds > ROLLING_SECONDS_MAX {
                return Err(Invalid::TooLarge {
                    field: "window_seconds",
                    value: seconds,
                    maximum: ROLLING_SECONDS_MAX,
                });
            }
            if e.burst.is_some() || e.overage_rate.is_some() || e.violation.is_some() {
                return Err(inconsistent(
                    "a ROLLING window is for quotas, not throttles, throttled overages or gauges",
                ));
            }
            Ok(())
        }
        (_, Some(_)) => Err(inconsistent("window_seconds is for ROLLING windows only")),
        (_, None) => Ok(()),
    }
}

/// A BILLING_CYCLE window (PolicyEvent v11): `cycle_anchor` with it and only with it, an instant between 2000 and
/// 2100 as every timestamp. A quota of consumption only, as a ROLLING window: a throttle's bucket, a throttled
/// overage and a gauge are judged per calendar window.
fn check_cycle(e: &PolicyEvent) -> Result<(), Invalid> {
    let inconsistent = |message: &str| Invalid::Inconsistent { field: "cycle_anchor", message: message.to_string() };
    match (e.window, e.cycle_anchor) {
        (Window::BILLING_CYCLE, None) => Err(inconsistent("a BILLING_CYCLE window needs cycle_anchor")),
        (Window::BILLING_CYCLE, Some(anchor)) => {
            in_range("cycle_anchor", anchor)?;
            if e.burst.is_some() || e.overage_rate.is_some() || e.violation.is_some() {
                return Err(inconsistent(
                    "a BILLING_CYCLE window is for quotas, not throttles, throttled overages or gauges",
                ));
            }
            Ok(())
        }
        (_, Some(_)) => Err(inconsistent("cycle_anchor is for BILLING_CYCLE windows only")),
        (_, None) => Ok(()),
    }
}

/// The most thresholds a policy sets (PolicyEvent v12): a handful of levels a support desk acts on, not a curve.
pub const ALERT_THRESHOLDS_MAX: usize = 10;
/// The highest threshold, in percent, as an AlertEvent's `threshold_percent`: a SOFT window may go far past its limit.
pub const ALERT_THRESHOLD_PERCENT_MAX: i32 = 1_000;
/// The highest subject share, in percent: a share of 100 or more no subject can exceed.
pub const ALERT_SUBJECT_SHARE_MAX: i32 = 99;

/// A policy's own alert settings (PolicyEvent v12): at most [`ALERT_THRESHOLDS_MAX`] thresholds, each 1 to
/// [`ALERT_THRESHOLD_PERCENT_MAX`], strictly increasing (the hook stops at the first one a window is below); a subject
/// share of 1 to [`ALERT_SUBJECT_SHARE_MAX`], of a TENANT policy (a SUBJECT one has no tenant's consumption to share).
/// Both only on quotas whose windows the hook alerts: a throttle limits a rate, a gauge a level, a CONCURRENT policy
/// leases held at once, and a ROLLING window has no window to alert once in.
fn check_alerts(e: &PolicyEvent) -> Result<(), Invalid> {
    if e.alert_thresholds.is_none() && e.alert_subject_share.is_none() {
        return Ok(());
    }
    let field = if e.alert_thresholds.is_some() { "alert_thresholds" } else { "alert_subject_share" };
    let inconsistent = |field, message: &str| Invalid::Inconsistent { field, message: message.to_string() };
    if e.burst.is_some() || e.violation.is_some() || matches!(e.window, Window::CONCURRENT | Window::ROLLING) {
        return Err(inconsistent(
            field,
            "alerts are set on quotas of calendar windows and billing cycles, not throttles, gauges, CONCURRENT or \
             ROLLING policies",
        ));
    }
    if let Some(thresholds) = &e.alert_thresholds {
        check_thresholds(thresholds)?;
    }
    if let Some(share) = e.alert_subject_share {
        at_least("alert_subject_share", i64::from(share), 1)?;
        if share > ALERT_SUBJECT_SHARE_MAX {
            let (value, maximum) = (i64::from(share), i64::from(ALERT_SUBJECT_SHARE_MAX));
            return Err(Invalid::TooLarge { field: "alert_subject_share", value, maximum });
        }
        if e.scope != Scope::TENANT {
            return Err(inconsistent("alert_subject_share", "a subject's share is of a TENANT policy's consumption"));
        }
    }
    Ok(())
}

fn check_thresholds(thresholds: &[i32]) -> Result<(), Invalid> {
    if thresholds.len() > ALERT_THRESHOLDS_MAX {
        return Err(Invalid::Inconsistent {
            field: "alert_thresholds",
            message: format!("{} thresholds, at most {ALERT_THRESHOLDS_MAX}", thresholds.len()),
        });
    }
    for &threshold in thresholds {
        at_least("alert_thresholds", i64::from(threshold), 1)?;
        if threshold > ALERT_THRESHOLD_PERCENT_MAX {
            let (value, maximum) = (i64::from(threshold), i64::from(ALERT_THRESHOLD_PERCENT_MAX));
            return Err(Invalid::TooLarge { field: "alert_thresholds", value, maximum });
        }
    }
    match thresholds.windows(2).find(|pair| pair[0] >= pair[1]) {
        Some(pair) => Err(Invalid::Inconsistent {
            field: "alert_thresholds",
            message: format!("{} then {}: thresholds are strictly increasing", pair[0], pair[1]),
        }),
        None => Ok(()),
    }
}

/// A throttled overage (PolicyEvent v7): a rate of at least 1 per a window of consumption, set together, on a HARD
/// quota. On a SOFT quota the excess is billed and on a SHADOW one only reported, so a throttle there would be
/// a wall nobody asked for; a throttle (`burst`) or a CONCURRENT policy has no allowance to go beyond.
fn check_overage(e: &PolicyEvent) -> Result<(), Invalid> {
    let inconsistent = |message: &str| Invalid::Inconsistent { field: "overage_rate", message: message.to_string() };
    match (e.overage_rate, e.overage_window) {
        (None, None) => return Ok(()),
        (Some(_), None) | (None, Some(_)) => return Err(inconsistent("overage_rate and overage_window go together")),
        (Some(rate), Some(window)) => {
            at_least("overage_rate", rate, 1)?;
            if matches!(window, Window::CONCURRENT | Window::ROLLING | Window::BILLING_CYCLE) {
                return Err(inconsistent("overage_window must be MINUTE, HOUR, DAY or MONTH"));
            }
        }
    }
    if e.enforcement != Enforcement::HARD {
        return Err(inconsistent("a throttled overage is for HARD policies (SOFT bills the excess)"));
    }
    if e.burst.is_some() || e.window == Window::CONCURRENT {
        return Err(inconsistent("a throttled overage is for quotas, not throttles or CONCURRENT policies"));
    }
    Ok(())
}

/// A gauge quota (PolicyEvent v8): a level per tenant, judged HARD (refused) or SHADOW (reported), over windows of
/// consumption reconcile reports time over the limit in. A SOFT gauge would bill a level as if it were consumption; a
/// SUBJECT gauge would need a level per subject, which services report per tenant (the bytes an organization stores);
/// a throttle, a throttled overage or a CONCURRENT policy limits something else than a level.
fn check_gauge(e: &PolicyEvent) -> Result<(), Invalid> {
    if e.violation.is_none() {
        return Ok(());
    }
    let inconsistent = |message: &str| Invalid::Inconsistent { field: "violation", message: message.to_string() };
    if e.enforcement == Enforcement::SOFT {
        return Err(inconsistent("a gauge quota is HARD or SHADOW (a level is not billed as consumption)"));
    }
    if e.scope != Scope::TENANT {
        return Err(inconsistent("a gauge quota limits the tenant's level: its scope is TENANT"));
    }
    if e.burst.is_some() || e.overage_rate.is_some() || e.window == Window::CONCURRENT {
        return Err(inconsistent("a gauge quota is not a throttle, a throttled overage or a CONCURRENT policy"));
    }
    Ok(())
}

/// A policy's time zone: a name of the IANA database that this build carries (chrono-tz's), spelled exactly
/// (`America/New_York`, not `america/new_york` nor `EST` written as an offset). What ingest quarantines and the
/// control plane refuses before a policy is recorded.
pub fn check_time_zone(value: &str) -> Result<(), Invalid> {
    match value.parse::<chrono_tz::Tz>() {
        Ok(_) => Ok(()),
        Err(_) => Err(Invalid::UnknownTimeZone { value: value.chars().take(NAME_BYTES_MAX).collect() }),
    }
}

fn validate_adjustment(e: &AdjustmentEvent) -> Result<(), Invalid> {
    non_empty("adjustment_id", &e.adjustment_id)?;
    non_empty("run_id", &e.run_id)?;
    opt_in_range("window_start", e.window_start)?;
    opt_in_range("window_end", e.window_end)?;
    if e.adjustment_id != e.header.event_id {
        return Err(Invalid::Inconsistent {
            field: "adjustment_id",
            message: format!("{:?} differs from event_id {:?}", e.adjustment_id, e.header.event_id),
        });
    }
    Ok(())
}

/// An alert: its id is its event_id, as an adjustment's; a threshold from 1 to 1,000 percent (a
/// window may be far past its limit, a SOFT one above all); what it observed at least 0; the window's instants in
/// range, its end after its start.
fn validate_alert(e: &AlertEvent) -> Result<(), Invalid> {
    non_empty("alert_id", &e.alert_id)?;
    if e.alert_id != e.header.event_id {
        return Err(Invalid::Inconsistent {
            field: "alert_id",
            message: format!("{:?} differs from event_id {:?}", e.alert_id, e.header.event_id),
        });
    }
    at_least("threshold_percent", i64::from(e.threshold_percent), 1)?;
    if e.threshold_percent > ALERT_THRESHOLD_PERCENT_MAX {
        return Err(Invalid::TooLarge {
            field: "threshold_percent",
            value: i64::from(e.threshold_percent),
            maximum: i64::from(ALERT_THRESHOLD_PERCENT_MAX),
        });
    }
    at_least("observed", e.observed, 0)?;
    opt_in_range("window_start", e.window_start)?;
    opt_in_range("window_end", e.window_end)?;
    if let (Some(start), Some(end)) = (e.window_start, e.window_end)
        && end <= start
    {
        return Err(Invalid::Inconsistent { field: "window_end", message: "a window ends after it starts".into() });
    }
    if let Some(policy_id) = &e.policy_id {
        check_id("policy_id", policy_id)?;
    }
    if let Some(request_id) = &e.request_id {
        check_id("request_id", request_id)?;
    }
    Ok(())
}

/// A capacity lease's step: ids and the holder are ids, the window is not empty, and each action carries what it needs
/// and nothing it cannot (contract §9.6): units out on a GRANT, an expiry after the event on a GRANT or RENEW, what was
/// used on a RETURN or RECLAIM, nothing coming back on an EXPIRE.
fn validate_capacity_lease(e: &CapacityLeaseEvent) -> Result<(), Invalid> {
    non_empty("capacity_lease_id", &e.capacity_lease_id)?;
    check_id("capacity_lease_id", &e.capacity_lease_id)?;
    non_empty("holder", &e.holder)?;
    check_name("holder", &e.holder)?;
    non_empty("policy_id", &e.policy_id)?;
    at_least("policy_version", i64::from(e.policy_version), 1)?;
    at_least("units", e.units, 0)?;
    if e.window_end <= e.window_start {
        return Err(inconsistent(
            "window_end",
            format!("{} is not after window_start {}", e.window_end, e.window_start),
        ));
    }
    let expiry = matches!(e.action, CapacityLeaseAction::GRANT | CapacityLeaseAction::RENEW);
    match (expiry, e.expires_at) {
        (true, None) => return Err(inconsistent("expires_at", format!("a {} carries its expiry", e.action))),
        (true, Some(at)) if at <= e.header.occurred_at => {
            return Err(inconsistent("expires_at", format!("{at} is not after occurred_at {}", e.header.occurred_at)));
        }
        (false, Some(at)) => {
            return Err(inconsistent("expires_at", format!("a {} carries no expiry, found {at}", e.action)));
        }
        _ => {}
    }
    match (e.action, e.used) {
        (CapacityLeaseAction::GRANT | CapacityLeaseAction::EXPIRE, Some(used)) => {
            Err(inconsistent("used", format!("a {} carries no units used, found {used}", e.action)))
        }
        (CapacityLeaseAction::RETURN | CapacityLeaseAction::RECLAIM, None) => {
            Err(inconsistent("used", format!("a {} says the units used under the lease", e.action)))
        }
        (CapacityLeaseAction::GRANT, None) => at_least("units", e.units, 1),
        (CapacityLeaseAction::EXPIRE, None) if e.units != 0 => {
            Err(inconsistent("units", format!("an EXPIRE gives nothing back (its RECLAIM does), found {}", e.units)))
        }
        (_, used) => used.map_or(Ok(()), |used| at_least("used", used, 0)),
    }
}

fn inconsistent(field: &'static str, message: String) -> Invalid {
    Invalid::Inconsistent { field, message }
}

/// A plan assignment: of a tenant (never `*` nor a plan's owner), to every metric (`*`), of no member; the plan a name
/// as a tenant's is, without a leading `*` (its owner is `*` followed by it); who and why said, bounded, printable.
fn validate_plan_assignment(e: &PlanAssignmentEvent) -> Result<(), Invalid> {
    if e.header.metric != "*" {
        return Err(Invalid::Inconsistent {
            field: "metric",
            message: format!("an assignment is of every metric, \"*\", found {:?}", e.header.metric),
        });
    }
    if e.header.subject.is_some() || e.header.project.is_some() || e.header.api_key.is_some() {
        return Err(Invalid::Inconsistent {
            field: "subject",
            message: "a plan is assigned to a whole tenant: no subject, project nor API key".into(),
        });
    }
    if let Some(plan) = &e.plan {
        non_empty("plan", plan)?;
        check_name("plan", plan)?;
        if plan.starts_with('*') {
            return Err(Invalid::Inconsistent {
                field: "plan",
                message: format!("{plan:?}: a plan's name does not start with \"*\" (its owner does)"),
            });
        }
    }
    in_range("effective_from", e.effective_from)?;
    non_empty("actor", &e.actor)?;
    check_name("actor", &e.actor)?;
    non_empty("reason", &e.reason)?;
    bounded("reason", &e.reason, REASON_BYTES_MAX)
}

/// A correction: the original's id is an id (it may be any usage event's); who and why are said, bounded, and free of
/// control characters (they are printed by `audit`); a VOID carries no quantity, an AMEND the amount the original
/// counts from now on. Whether the original exists and may be corrected is the ledger's to judge, in its append.
fn validate_correction(e: &CorrectionEvent) -> Result<(), Invalid> {
    non_empty("original_event_id", &e.original_event_id)?;
    check_id("original_event_id", &e.original_event_id)?;
    if e.original_event_id == e.header.event_id {
        return Err(Invalid::Inconsistent {
            field: "original_event_id",
            message: format!("{:?} is the correction's own event_id", e.original_event_id),
        });
    }
    non_empty("actor", &e.actor)?;
    check_name("actor", &e.actor)?;
    non_empty("reason", &e.reason)?;
    bounded("reason", &e.reason, REASON_BYTES_MAX)?;
    match (e.action, e.quantity) {
        (CorrectionAction::VOID, Some(quantity)) => Err(Invalid::Inconsistent {
            field: "quantity",
            message: format!("a VOID carries no quantity, found {quantity}"),
        }),
        (CorrectionAction::AMEND, None) => Err(Invalid::Inconsistent {
            field: "quantity",
            message: "an AMEND carries the amount the original counts from now on".into(),
        }),
        (CorrectionAction::AMEND, Some(quantity)) => at_least("quantity", quantity, 0),
        (CorrectionAction::VOID, None) => Ok(()),
    }
}

/// A meter version: who and why are said, bounded and printable; a UNIQUE_COUNT names the field whose distinct values
/// it counts and no other aggregation names one; a meter is of a metric, for a tenant (or `*`), never of a member.
fn validate_meter(e: &MeterEvent) -> Result<(), Invalid> {
    at_least("version", i64::from(e.version), 0)?;
    in_range("effective_from", e.effective_from)?;
    non_empty("actor", &e.actor)?;
    check_name("actor", &e.actor)?;
    non_empty("reason", &e.reason)?;
    bounded("reason", &e.reason, REASON_BYTES_MAX)?;
    let h = &e.header;
    if let Some(field) = [("subject", &h.subject), ("project", &h.project), ("api_key", &h.api_key)]
        .into_iter()
        .find_map(|(name, value)| value.as_ref().map(|_| name))
    {
        return Err(Invalid::Inconsistent {
            field,
            message: format!("a meter aggregates a tenant's metric, not one {field}'s: {field} must be null"),
        });
    }
    match (e.aggregation, e.field) {
        (Aggregation::UNIQUE_COUNT, None) => Err(Invalid::Inconsistent {
            field: "field",
            message:
                "a UNIQUE_COUNT meter names the field whose distinct values it counts: SUBJECT, PROJECT or API_KEY"
                    .into(),
        }),
        (Aggregation::UNIQUE_COUNT, Some(_)) | (_, None) => Ok(()),
        (aggregation, Some(field)) => Err(Invalid::Inconsistent {
            field: "field",
            message: format!("only a UNIQUE_COUNT meter names a field, found {field} on {aggregation}"),
        }),
    }
}
