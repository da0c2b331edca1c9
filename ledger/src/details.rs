//! The type-specific columns of an entry (tables `usage_events`, `decision_events`, ...), derived from the
//! event. Append inserts them; verify reads them back and compares them with the decoded payload.

use rusqlite::types::Value;
use schemas::{Event, EventType, Timestamp};

/// The table holding the type-specific columns of an event type.
pub fn table(event_type: EventType) -> &'static str {
    match event_type {
        EventType::UsageEvent => "usage_events",
        EventType::DecisionEvent => "decision_events",
        EventType::ReservationEvent => "reservation_events",
        EventType::GrantEvent => "grant_events",
        EventType::PolicyEvent => "policy_events",
        EventType::AdjustmentEvent => "adjustment_events",
        EventType::AlertEvent => "alert_events",
        EventType::CorrectionEvent => "correction_events",
        EventType::CapacityLeaseEvent => "capacity_lease_events",
        EventType::PlanAssignmentEvent => "plan_assignment_events",
        EventType::MeterEvent => "meter_events",
    }
}

/// The columns of that table after `seq`, in order.
pub fn columns(event_type: EventType) -> &'static [&'static str] {
    match event_type {
        EventType::UsageEvent => &["quantity", "request_id", "attributes"],
        EventType::DecisionEvent => &[
            "request_id",
            "idempotency_key",
            "amount",
            "outcome",
            "reason",
            "policy_id",
            "policy_version",
            "window_start",
            "window_end",
            "\"limit\"",
            "used_before",
            "remaining",
            "retry_after_ms",
        ],
        EventType::ReservationEvent => &["reservation_id", "action", "amount", "expires_at", "fencing_token"],
        EventType::GrantEvent => &["grant_id", "amount", "valid_from", "valid_until", "reason", "actor"],
        EventType::PolicyEvent => &[
            "policy_id",
            "version",
            "scope",
            "\"limit\"",
            "window",
            "enforcement",
            "effective_from",
            "burst",
            "actor",
            "reason",
            "time_zone",
            "on_failure",
            "overage_rate",
            "overage_window",
            "violation",
            "window_seconds",
            "cycle_anchor",
            "alert_thresholds",
            "alert_subject_share",
        ],
        EventType::AdjustmentEvent => {
            &["adjustment_id", "kind", "policy_id", "window_start", "window_end", "amount", "refs", "run_id", "scope"]
        }
        EventType::AlertEvent => &[
            "alert_id",
            "kind",
            "policy_id",
            "policy_version",
            "scope",
            "window_start",
            "window_end",
            "threshold_percent",
            "\"limit\"",
            "observed",
            "request_id",
        ],
        EventType::CorrectionEvent => &["original_event_id", "action", "quantity", "actor", "reason"],
        EventType::CapacityLeaseEvent => &[
            "capacity_lease_id",
            "action",
            "holder",
            "policy_id",
            "policy_version",
            "window_start",
            "window_end",
            "units",
            "used",
            "expires_at",
        ],
        EventType::PlanAssignmentEvent => &["plan", "effective_from", "actor", "reason"],
        EventType::MeterEvent => &["version", "aggregation", "field", "effective_from", "actor", "reason"],
    }
}

/// `INSERT INTO <table> (seq, ...) VALUES (?, ...)`.
pub fn insert_sql(event_type: EventType) -> String {
    let columns = columns(event_type);
    let placeholders = vec!["?"; columns.len() + 1].join(", ");
    format!("INSERT INTO {} (seq, {}) VALUES ({placeholders})", table(event_type), columns.join(", "))
}

/// `SELECT ... FROM <table> WHERE seq = ?`.
pub fn select_sql(event_type: EventType) -> String {
    format!("SELECT {} FROM {} WHERE seq = ?", columns(event_type).join(", "), table(event_type))
}

fn text(s: &str) -> Value {
    Value::Text(s.to_string())
}

fn opt_text(s: &Option<String>) -> Value {
    s.as_deref().map_or(Value::Null, text)
}

fn opt_integer(n: Option<i64>) -> Value {
    n.map_or(Value::Null, Value::Integer)
}

fn time(t: Timestamp) -> Value {
    Value::Integer(t.micros())
}

fn opt_time(t: Option<Timestamp>) -> Value {
    opt_integer(t.map(Timestamp::micros))
}

/// A policy's alert thresholds as `policy_events.alert_thresholds` keeps them: comma-separated, '' for an empty list.
pub(crate) fn thresholds_text(thresholds: &[i32]) -> String {
    thresholds.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

/// [`thresholds_text`] read back; `None` for text it never writes.
pub(crate) fn thresholds_of(text: &str) -> Option<Vec<i32>> {
    if text.is_empty() {
        return Some(Vec::new());
    }
    text.split(',').map(|n| n.parse().ok()).collect()
}

fn json(value: impl serde::Serialize) -> Value {
    Value::Text(serde_json::to_string(&value).expect("maps and lists of strings always serialize"))
}

/// The values of the type-specific columns, in the order of [`columns`].
pub fn values(event: &Event) -> Vec<Value> {
    match event {
        Event::Usage(e) => vec![Value::Integer(e.quantity), opt_text(&e.request_id), json(&e.attributes)],
        Event::Decision(e) => vec![
            text(&e.request_id),
            text(&e.idempotency_key),
            Value::Integer(e.amount),
            text(e.outcome.symbol()),
            text(e.reason.symbol()),
            opt_text(&e.policy_id),
            opt_integer(e.policy_version.map(i64::from)),
            opt_time(e.window_start),
            opt_time(e.window_end),
            opt_integer(e.limit),
            opt_integer(e.used_before),
            opt_integer(e.remaining),
            opt_integer(e.retry_after_ms),
        ],
        Event::Reservation(e) => {
            let (id, action, amount) = (text(&e.reservation_id), text(e.action.symbol()), Value::Integer(e.amount));
            vec![id, action, amount, opt_time(e.expires_at), opt_integer(e.fencing_token)]
        }
        Event::Grant(e) => {
            let (id, amount, reason, actor) =
                (text(&e.grant_id), Value::Integer(e.amount), text(&e.reason), opt_text(&e.actor));
            vec![id, amount, time(e.valid_from), time(e.valid_until), reason, actor]
        }
        Event::Policy(e) => vec![
            text(&e.policy_id),
            Value::Integer(i64::from(e.version)),
            text(e.scope.symbol()),
            Value::Integer(e.limit),
            text(e.window.symbol()),
            text(e.enforcement.symbol()),
            time(e.effective_from),
            opt_integer(e.burst),
            opt_text(&e.actor),
            opt_text(&e.reason),
            opt_text(&e.time_zone),
            e.on_failure.map_or(Value::Null, |mode| text(mode.symbol())),
            opt_integer(e.overage_rate),
            e.overage_window.map_or(Value::Null, |w| text(w.symbol())),
            e.violation.map_or(Value::Null, |v| text(v.symbol())),
            opt_integer(e.window_seconds),
            opt_integer(e.cycle_anchor.map(Timestamp::micros)),
            e.alert_thresholds.as_deref().map_or(Value::Null, |t| Value::Text(thresholds_text(t))),
            opt_integer(e.alert_subject_share.map(i64::from)),
        ],
        Event::Adjustment(e) => vec![
            text(&e.adjustment_id),
            text(e.kind.symbol()),
            opt_text(&e.policy_id),
            opt_time(e.window_start),
            opt_time(e.window_end),
            Value::Integer(e.amount),
            json(&e.refs),
            text(&e.run_id),
            e.scope.map_or(Value::Null, |scope| text(scope.symbol())),
        ],
        Event::Alert(e) => vec![
            text(&e.alert_id),
            text(e.kind.symbol()),
            opt_text(&e.policy_id),
            opt_integer(e.policy_version.map(i64::from)),
            e.scope.map_or(Value::Null, |scope| text(scope.symbol())),
            opt_time(e.window_start),
            opt_time(e.window_end),
            Value::Integer(i64::from(e.threshold_percent)),
            opt_integer(e.limit),
            Value::Integer(e.observed),
            opt_text(&e.request_id),
        ],
        Event::Correction(e) => vec![
            text(&e.original_event_id),
            text(e.action.symbol()),
            opt_integer(e.quantity),
            text(&e.actor),
            text(&e.reason),
        ],
        Event::CapacityLease(e) => vec![
            text(&e.capacity_lease_id),
            text(e.action.symbol()),
            text(&e.holder),
            text(&e.policy_id),
            Value::Integer(i64::from(e.policy_version)),
            time(e.window_start),
            time(e.window_end),
            Value::Integer(e.units),
            opt_integer(e.used),
            opt_time(e.expires_at),
        ],
        Event::PlanAssignment(e) => {
            vec![opt_text(&e.plan), time(e.effective_from), text(&e.actor), text(&e.reason)]
        }
        Event::Meter(e) => vec![
            Value::Integer(i64::from(e.version)),
            text(e.aggregation.symbol()),
            e.field.map_or(Value::Null, |field| text(field.symbol())),
            time(e.effective_from),
            text(&e.actor),
            text(&e.reason),
        ],
    }
}
