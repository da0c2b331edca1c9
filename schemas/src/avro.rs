//! Conversion between the typed events and Avro values of the current (reader) schemas.

use std::collections::{BTreeMap, HashMap};

use apache_avro::types::Value;

use crate::event::*;
use crate::timestamp::Timestamp;

/// A value read with the current schema that does not have the shape that schema promises (a bug in the
/// schema files or in this module, since resolution already checked the shape).
#[derive(Debug, thiserror::Error)]
#[error("field {field:?}: expected {expected}, found {found}")]
pub struct ShapeError {
    /// The field whose value was off.
    pub field: String,
    /// The Avro type the schema promises.
    pub expected: &'static str,
    /// What was found instead.
    pub found: String,
}

fn shape(field: &str, expected: &'static str, found: &Value) -> ShapeError {
    let mut found = format!("{found:?}");
    found.truncate(80);
    ShapeError { field: field.to_string(), expected, found }
}

fn union_null() -> Value {
    Value::Union(0, Box::new(Value::Null))
}

fn opt_string(v: &Option<String>) -> Value {
    match v {
        None => union_null(),
        Some(s) => Value::Union(1, Box::new(Value::String(s.clone()))),
    }
}

fn opt_long(v: Option<i64>) -> Value {
    match v {
        None => union_null(),
        Some(n) => Value::Union(1, Box::new(Value::Long(n))),
    }
}

fn opt_int(v: Option<i32>) -> Value {
    match v {
        None => union_null(),
        Some(n) => Value::Union(1, Box::new(Value::Int(n))),
    }
}

fn opt_ints(v: &Option<Vec<i32>>) -> Value {
    match v {
        None => union_null(),
        Some(items) => Value::Union(1, Box::new(Value::Array(items.iter().map(|&n| Value::Int(n)).collect()))),
    }
}

fn timestamp(t: Timestamp) -> Value {
    Value::TimestampMicros(t.0)
}

fn opt_timestamp(v: Option<Timestamp>) -> Value {
    match v {
        None => union_null(),
        Some(t) => Value::Union(1, Box::new(timestamp(t))),
    }
}

fn string(s: &str) -> Value {
    Value::String(s.to_string())
}

macro_rules! enum_value {
    ($e:expr) => {
        Value::Enum($e.index() as u32, $e.symbol().to_string())
    };
}

fn header_fields(h: &Header) -> Vec<(String, Value)> {
    vec![
        ("event_id".into(), string(&h.event_id)),
        ("occurred_at".into(), timestamp(h.occurred_at)),
        ("tenant".into(), string(&h.tenant)),
        ("subject".into(), opt_string(&h.subject)),
        ("project".into(), opt_string(&h.project)),
        ("api_key".into(), opt_string(&h.api_key)),
        ("metric".into(), string(&h.metric)),
        ("source".into(), string(&h.source)),
    ]
}

/// The Avro value of an event under its current schema.
pub fn to_value(event: &Event) -> Value {
    let mut fields = header_fields(event.header());
    let rest: Vec<(&str, Value)> = match event {
        Event::Usage(e) => vec![
            ("quantity", Value::Long(e.quantity)),
            ("request_id", opt_string(&e.request_id)),
            (
                "attributes",
                Value::Map(e.attributes.iter().map(|(k, v)| (k.clone(), string(v))).collect::<HashMap<_, _>>()),
            ),
        ],
        Event::Decision(e) => vec![
            ("request_id", string(&e.request_id)),
            ("idempotency_key", string(&e.idempotency_key)),
            ("amount", Value::Long(e.amount)),
            ("outcome", enum_value!(e.outcome)),
            ("reason", enum_value!(e.reason)),
            ("policy_id", opt_string(&e.policy_id)),
            ("policy_version", opt_int(e.policy_version)),
            ("window_start", opt_timestamp(e.window_start)),
            ("window_end", opt_timestamp(e.window_end)),
            ("limit", opt_long(e.limit)),
            ("used_before", opt_long(e.used_before)),
            ("remaining", opt_long(e.remaining)),
            ("retry_after_ms", opt_long(e.retry_after_ms)),
            ("token_name", opt_string(&e.token_name)),
        ],
        Event::Reservation(e) => vec![
            ("reservation_id", string(&e.reservation_id)),
            ("action", enum_value!(e.action)),
            ("amount", Value::Long(e.amount)),
            ("expires_at", opt_timestamp(e.expires_at)),
            ("fencing_token", opt_long(e.fencing_token)),
        ],
        Event::Grant(e) => vec![
            ("grant_id", string(&e.grant_id)),
            ("amount", Value::Long(e.amount)),
            ("valid_from", timestamp(e.valid_from)),
            ("valid_until", timestamp(e.valid_until)),
            ("reason", string(&e.reason)),
            ("actor", opt_string(&e.actor)),
        ],
        Event::Policy(e) => vec![
            ("policy_id", string(&e.policy_id)),
            ("version", Value::Int(e.version)),
            ("scope", enum_value!(e.scope)),
            ("limit", Value::Long(e.limit)),
            ("window", enum_value!(e.window)),
            ("enforcement", enum_value!(e.enforcement)),
            ("effective_from", timestamp(e.effective_from)),
            ("burst", opt_long(e.burst)),
            ("actor", opt_string(&e.actor)),
            ("reason", opt_string(&e.reason)),
            ("time_zone", opt_string(&e.time_zone)),
            ("on_failure", e.on_failure.map_or_else(union_null, |mode| Value::Union(1, Box::new(enum_value!(mode))))),
            ("overage_rate", opt_long(e.overage_rate)),
            ("overage_window", e.overage_window.map_or_else(union_null, |w| Value::Union(1, Box::new(enum_value!(w))))),
            ("violation", e.violation.map_or_else(union_null, |v| Value::Union(1, Box::new(enum_value!(v))))),
            ("window_seconds", opt_long(e.window_seconds)),
            ("cycle_anchor", opt_timestamp(e.cycle_anchor)),
            ("alert_thresholds", opt_ints(&e.alert_thresholds)),
            ("alert_subject_share", opt_int(e.alert_subject_share)),
        ],
        Event::Adjustment(e) => vec![
            ("adjustment_id", string(&e.adjustment_id)),
            ("kind", enum_value!(e.kind)),
            ("policy_id", opt_string(&e.policy_id)),
            ("window_start", opt_timestamp(e.window_start)),
            ("window_end", opt_timestamp(e.window_end)),
            ("amount", Value::Long(e.amount)),
            ("refs", Value::Array(e.refs.iter().map(|r| string(r)).collect())),
            ("run_id", string(&e.run_id)),
            ("scope", e.scope.map_or_else(union_null, |scope| Value::Union(1, Box::new(enum_value!(scope))))),
        ],
        Event::Alert(e) => vec![
            ("alert_id", string(&e.alert_id)),
            ("kind", enum_value!(e.kind)),
            ("policy_id", opt_string(&e.policy_id)),
            ("policy_version", opt_int(e.policy_version)),
            ("scope", e.scope.map_or_else(union_null, |scope| Value::Union(1, Box::new(enum_value!(scope))))),
            ("window_start", opt_timestamp(e.window_start)),
            ("window_end", opt_timestamp(e.window_end)),
            ("threshold_percent", Value::Int(e.threshold_percent)),
            ("limit", opt_long(e.limit)),
            ("observed", Value::Long(e.observed)),
            ("request_id", opt_string(&e.request_id)),
        ],
        Event::Correction(e) => vec![
            ("original_event_id", string(&e.original_event_id)),
            ("action", enum_value!(e.action)),
            ("quantity", opt_long(e.quantity)),
            ("actor", string(&e.actor)),
            ("reason", string(&e.reason)),
        ],
        Event::CapacityLease(e) => vec![
            ("capacity_lease_id", string(&e.capacity_lease_id)),
            ("action", enum_value!(e.action)),
            ("holder", string(&e.holder)),
            ("policy_id", string(&e.policy_id)),
            ("policy_version", Value::Int(e.policy_version)),
            ("window_start", timestamp(e.window_start)),
            ("window_end", timestamp(e.window_end)),
            ("units", Value::Long(e.units)),
            ("used", opt_long(e.used)),
            ("expires_at", opt_timestamp(e.expires_at)),
        ],
        Event::PlanAssignment(e) => vec![
            ("plan", opt_string(&e.plan)),
            ("effective_from", timestamp(e.effective_from)),
            ("actor", string(&e.actor)),
            ("reason", string(&e.reason)),
        ],
        Event::Meter(e) => vec![
            ("version", Value::Int(e.version)),
            ("aggregation", enum_value!(e.aggregation)),
            ("field", e.field.map_or_else(union_null, |v| Value::Union(1, Box::new(enum_value!(v))))),
            ("effective_from", timestamp(e.effective_from)),
            ("actor", string(&e.actor)),
            ("reason", string(&e.reason)),
        ],
    };
    fields.extend(rest.into_iter().map(|(name, value)| (name.to_string(), value)));
    Value::Record(fields)
}

/// The fields of a record value, looked up by name.
struct Fields<'a>(&'a [(String, Value)]);

impl<'a> Fields<'a> {
    fn get(&self, name: &str) -> Result<&'a Value, ShapeError> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| v).ok_or_else(|| ShapeError {
            field: name.into(),
            expected: "a field",
            found: "nothing".into(),
        })
    }

    /// The value inside a union, `None` for its null branch.
    fn optional(&self, name: &str) -> Result<Option<&'a Value>, ShapeError> {
        match self.get(name)? {
            Value::Union(_, inner) => match inner.as_ref() {
                Value::Null => Ok(None),
                other => Ok(Some(other)),
            },
            Value::Null => Ok(None),
            other => Ok(Some(other)),
        }
    }

    fn string(&self, name: &str) -> Result<String, ShapeError> {
        as_string(name, self.get(name)?)
    }

    fn long(&self, name: &str) -> Result<i64, ShapeError> {
        as_long(name, self.get(name)?)
    }

    fn int(&self, name: &str) -> Result<i32, ShapeError> {
        as_int(name, self.get(name)?)
    }

    fn timestamp(&self, name: &str) -> Result<Timestamp, ShapeError> {
        as_timestamp(name, self.get(name)?)
    }

    fn opt_string(&self, name: &str) -> Result<Option<String>, ShapeError> {
        self.optional(name)?.map(|v| as_string(name, v)).transpose()
    }

    fn opt_long(&self, name: &str) -> Result<Option<i64>, ShapeError> {
        self.optional(name)?.map(|v| as_long(name, v)).transpose()
    }

    fn opt_int(&self, name: &str) -> Result<Option<i32>, ShapeError> {
        self.optional(name)?.map(|v| as_int(name, v)).transpose()
    }

    fn opt_timestamp(&self, name: &str) -> Result<Option<Timestamp>, ShapeError> {
        self.optional(name)?.map(|v| as_timestamp(name, v)).transpose()
    }

    fn opt_ints(&self, name: &str) -> Result<Option<Vec<i32>>, ShapeError> {
        match self.optional(name)? {
            None => Ok(None),
            Some(Value::Array(items)) => items.iter().map(|v| as_int(name, v)).collect::<Result<_, _>>().map(Some),
            Some(other) => Err(shape(name, "an array of ints", other)),
        }
    }

    fn opt_symbol(&self, name: &str) -> Result<Option<&'a str>, ShapeError> {
        match self.optional(name)? {
            None => Ok(None),
            Some(Value::Enum(_, symbol)) => Ok(Some(symbol)),
            Some(other) => Err(shape(name, "an enum symbol", other)),
        }
    }

    fn symbol(&self, name: &str) -> Result<&'a str, ShapeError> {
        match self.get(name)? {
            Value::Enum(_, symbol) => Ok(symbol),
            other => Err(shape(name, "an enum symbol", other)),
        }
    }

    fn header(&self) -> Result<Header, ShapeError> {
        Ok(Header {
            event_id: self.string("event_id")?,
            occurred_at: self.timestamp("occurred_at")?,
            tenant: self.string("tenant")?,
            subject: self.opt_string("subject")?,
            project: self.opt_string("project")?,
            api_key: self.opt_string("api_key")?,
            metric: self.string("metric")?,
            source: self.string("source")?,
        })
    }
}

fn as_string(name: &str, v: &Value) -> Result<String, ShapeError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        other => Err(shape(name, "a string", other)),
    }
}

fn as_long(name: &str, v: &Value) -> Result<i64, ShapeError> {
    match v {
        Value::Long(n) => Ok(*n),
        Value::Int(n) => Ok(i64::from(*n)),
        other => Err(shape(name, "a long", other)),
    }
}

fn as_int(name: &str, v: &Value) -> Result<i32, ShapeError> {
    match v {
        Value::Int(n) => Ok(*n),
        other => Err(shape(name, "an int", other)),
    }
}

fn as_timestamp(name: &str, v: &Value) -> Result<Timestamp, ShapeError> {
    match v {
        Value::TimestampMicros(n) | Value::Long(n) => Ok(Timestamp(*n)),
        other => Err(shape(name, "a timestamp-micros", other)),
    }
}

/// An enum's symbol parsed, or the shape error naming the field.
fn parse_symbol<T>(
    field: &str,
    expected: &'static str,
    symbol: &str,
    parse: fn(&str) -> Option<T>,
) -> Result<T, ShapeError> {
    parse(symbol).ok_or_else(|| ShapeError { field: field.into(), expected, found: symbol.to_string() })
}

macro_rules! parse_enum {
    ($ty:ty, $fields:expr, $name:expr) => {{
        let symbol = $fields.symbol($name)?;
        <$ty>::from_symbol(symbol).ok_or_else(|| ShapeError {
            field: $name.into(),
            expected: stringify!($ty),
            found: symbol.to_string(),
        })?
    }};
}

/// The typed event of a value read with (or resolved to) the current schema of `event_type`.
pub fn from_value(event_type: EventType, value: &Value) -> Result<Event, ShapeError> {
    let Value::Record(fields) = value else {
        return Err(shape("(record)", "a record", value));
    };
    let f = Fields(fields);
    let header = f.header()?;
    Ok(match event_type {
        EventType::UsageEvent => Event::Usage(UsageEvent {
            header,
            quantity: f.long("quantity")?,
            request_id: f.opt_string("request_id")?,
            attributes: attributes(f.get("attributes")?)?,
        }),
        EventType::DecisionEvent => Event::Decision(DecisionEvent {
            header,
            request_id: f.string("request_id")?,
            idempotency_key: f.string("idempotency_key")?,
            amount: f.long("amount")?,
            outcome: parse_enum!(Outcome, f, "outcome"),
            reason: parse_enum!(Reason, f, "reason"),
            policy_id: f.opt_string("policy_id")?,
            policy_version: f.opt_int("policy_version")?,
            window_start: f.opt_timestamp("window_start")?,
            window_end: f.opt_timestamp("window_end")?,
            limit: f.opt_long("limit")?,
            used_before: f.opt_long("used_before")?,
            remaining: f.opt_long("remaining")?,
            retry_after_ms: f.opt_long("retry_after_ms")?,
            token_name: f.opt_string("token_name")?,
        }),
        EventType::ReservationEvent => Event::Reservation(ReservationEvent {
            header,
            reservation_id: f.string("reservation_id")?,
            action: parse_enum!(ReservationAction, f, "action"),
            amount: f.long("amount")?,
            expires_at: f.opt_timestamp("expires_at")?,
            fencing_token: f.opt_long("fencing_token")?,
        }),
        EventType::GrantEvent => Event::Grant(GrantEvent {
            header,
            grant_id: f.string("grant_id")?,
            amount: f.long("amount")?,
            valid_from: f.timestamp("valid_from")?,
            valid_until: f.timestamp("valid_until")?,
            reason: f.string("reason")?,
            actor: f.opt_string("actor")?,
        }),
        EventType::PolicyEvent => Event::Policy(PolicyEvent {
            header,
            policy_id: f.string("policy_id")?,
            version: f.int("version")?,
            scope: parse_enum!(Scope, f, "scope"),
            limit: f.long("limit")?,
            window: parse_enum!(Window, f, "window"),
            enforcement: parse_enum!(Enforcement, f, "enforcement"),
            effective_from: f.timestamp("effective_from")?,
            burst: f.opt_long("burst")?,
            actor: f.opt_string("actor")?,
            reason: f.opt_string("reason")?,
            time_zone: f.opt_string("time_zone")?,
            on_failure: f
                .opt_symbol("on_failure")?
                .map(|s| parse_symbol("on_failure", "OnFailure", s, OnFailure::from_symbol))
                .transpose()?,
            overage_rate: f.opt_long("overage_rate")?,
            overage_window: f
                .opt_symbol("overage_window")?
                .map(|s| parse_symbol("overage_window", "Window", s, Window::from_symbol))
                .transpose()?,
            violation: f
                .opt_symbol("violation")?
                .map(|s| parse_symbol("violation", "Violation", s, Violation::from_symbol))
                .transpose()?,
            window_seconds: f.opt_long("window_seconds")?,
            cycle_anchor: f.opt_timestamp("cycle_anchor")?,
            alert_thresholds: f.opt_ints("alert_thresholds")?,
            alert_subject_share: f.opt_int("alert_subject_share")?,
        }),
        EventType::AdjustmentEvent => Event::Adjustment(AdjustmentEvent {
            header,
            adjustment_id: f.string("adjustment_id")?,
            kind: parse_enum!(AdjustmentKind, f, "kind"),
            policy_id: f.opt_string("policy_id")?,
            window_start: f.opt_timestamp("window_start")?,
            window_end: f.opt_timestamp("window_end")?,
            amount: f.long("amount")?,
            refs: refs(f.get("refs")?)?,
            run_id: f.string("run_id")?,
            scope: f.opt_symbol("scope")?.map(|s| parse_symbol("scope", "Scope", s, Scope::from_symbol)).transpose()?,
        }),
        EventType::AlertEvent => Event::Alert(AlertEvent {
            header,
            alert_id: f.string("alert_id")?,
            kind: parse_enum!(AlertKind, f, "kind"),
            policy_id: f.opt_string("policy_id")?,
            policy_version: f.opt_int("policy_version")?,
            scope: f.opt_symbol("scope")?.map(|s| parse_symbol("scope", "Scope", s, Scope::from_symbol)).transpose()?,
            window_start: f.opt_timestamp("window_start")?,
            window_end: f.opt_timestamp("window_end")?,
            threshold_percent: f.int("threshold_percent")?,
            limit: f.opt_long("limit")?,
            observed: f.long("observed")?,
            request_id: f.opt_string("request_id")?,
        }),
        EventType::CorrectionEvent => Event::Correction(CorrectionEvent {
            header,
            original_event_id: f.string("original_event_id")?,
            action: parse_enum!(CorrectionAction, f, "action"),
            quantity: f.opt_long("quantity")?,
            actor: f.string("actor")?,
            reason: f.string("reason")?,
        }),
        EventType::CapacityLeaseEvent => Event::CapacityLease(CapacityLeaseEvent {
            header,
            capacity_lease_id: f.string("capacity_lease_id")?,
            action: parse_enum!(CapacityLeaseAction, f, "action"),
            holder: f.string("holder")?,
            policy_id: f.string("policy_id")?,
            policy_version: f.int("policy_version")?,
            window_start: f.timestamp("window_start")?,
            window_end: f.timestamp("window_end")?,
            units: f.long("units")?,
            used: f.opt_long("used")?,
            expires_at: f.opt_timestamp("expires_at")?,
        }),
        EventType::PlanAssignmentEvent => Event::PlanAssignment(PlanAssignmentEvent {
            header,
            plan: f.opt_string("plan")?,
            effective_from: f.timestamp("effective_from")?,
            actor: f.string("actor")?,
            reason: f.string("reason")?,
        }),
        EventType::MeterEvent => Event::Meter(MeterEvent {
            header,
            version: f.int("version")?,
            aggregation: parse_enum!(Aggregation, f, "aggregation"),
            field: f
                .opt_symbol("field")?
                .map(|s| parse_symbol("field", "MeterField", s, MeterField::from_symbol))
                .transpose()?,
            effective_from: f.timestamp("effective_from")?,
            actor: f.string("actor")?,
            reason: f.string("reason")?,
        }),
    })
}

fn attributes(v: &Value) -> Result<BTreeMap<String, String>, ShapeError> {
    match v {
        Value::Map(map) => map.iter().map(|(k, v)| Ok((k.clone(), as_string("attributes", v)?))).collect(),
        other => Err(shape("attributes", "a map of strings", other)),
    }
}

fn refs(v: &Value) -> Result<Vec<String>, ShapeError> {
    match v {
        Value::Array(items) => items.iter().map(|v| as_string("refs", v)).collect(),
        other => Err(shape("refs", "an array of strings", other)),
    }
}

/// Appends an Avro map of strings in key order, as one block: count, then key/value pairs, then the 0 that ends
/// the blocks. Deterministic, unlike encoding a `Value::Map`.
pub fn write_sorted_map(out: &mut Vec<u8>, map: &BTreeMap<String, String>) {
    if !map.is_empty() {
        write_long(out, i64::try_from(map.len()).expect("a map held in memory has fewer than 2^63 entries"));
        for (key, value) in map {
            write_string(out, key);
            write_string(out, value);
        }
    }
    out.push(0);
}

fn write_string(out: &mut Vec<u8>, s: &str) {
    write_long(out, i64::try_from(s.len()).expect("a string held in memory is shorter than 2^63 bytes"));
    out.extend_from_slice(s.as_bytes());
}

/// Avro `long`: zig-zag, then variable-length base 128.
fn write_long(out: &mut Vec<u8>, n: i64) {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// The Avro binary body of an event under its current schema, written directly (no `Value`).
///
/// apache-avro 0.22 builds a `Value` tree and a HashMap per record it encodes, about a sixth of a ledger
/// append's time, and keeps maps in hash order, which a deduplication hash cannot use. These records are flat,
/// so the encoding is a few lines per field: zig-zag longs, length-prefixed strings, union and enum indexes,
/// maps and arrays in one block. `tests/roundtrip.rs` checks every byte against apache-avro's encoder and
/// decodes every encoding with apache-avro's decoder.
pub fn write_body(out: &mut Vec<u8>, event: &Event) {
    write_header(out, event.header());
    match event {
        Event::Usage(e) => {
            write_long(out, e.quantity);
            write_opt_string(out, &e.request_id);
            write_sorted_map(out, &e.attributes);
        }
        Event::Decision(e) => {
            write_string(out, &e.request_id);
            write_string(out, &e.idempotency_key);
            write_long(out, e.amount);
            write_long(out, e.outcome.index() as i64);
            write_long(out, e.reason.index() as i64);
            write_opt_string(out, &e.policy_id);
            write_opt_long(out, e.policy_version.map(i64::from));
            write_opt_long(out, e.window_start.map(Timestamp::micros));
            write_opt_long(out, e.window_end.map(Timestamp::micros));
            write_opt_long(out, e.limit);
            write_opt_long(out, e.used_before);
            write_opt_long(out, e.remaining);
            write_opt_long(out, e.retry_after_ms);
            write_opt_string(out, &e.token_name);
        }
        Event::Reservation(e) => {
            write_string(out, &e.reservation_id);
            write_long(out, e.action.index() as i64);
            write_long(out, e.amount);
            write_opt_long(out, e.expires_at.map(Timestamp::micros));
            write_opt_long(out, e.fencing_token);
        }
        Event::Grant(e) => {
            write_string(out, &e.grant_id);
            write_long(out, e.amount);
            write_long(out, e.valid_from.micros());
            write_long(out, e.valid_until.micros());
            write_string(out, &e.reason);
            write_opt_string(out, &e.actor);
        }
        Event::Policy(e) => {
            write_string(out, &e.policy_id);
            write_long(out, i64::from(e.version));
            write_long(out, e.scope.index() as i64);
            write_long(out, e.limit);
            write_long(out, e.window.index() as i64);
            write_long(out, e.enforcement.index() as i64);
            write_long(out, e.effective_from.micros());
            write_opt_long(out, e.burst);
            write_opt_string(out, &e.actor);
            write_opt_string(out, &e.reason);
            write_opt_string(out, &e.time_zone);
            write_opt_long(out, e.on_failure.map(|mode| mode.index() as i64));
            write_opt_long(out, e.overage_rate);
            write_opt_long(out, e.overage_window.map(|w| w.index() as i64));
            write_opt_long(out, e.violation.map(|v| v.index() as i64));
            write_opt_long(out, e.window_seconds);
            write_opt_long(out, e.cycle_anchor.map(Timestamp::micros));
            write_opt_ints(out, e.alert_thresholds.as_deref());
            write_opt_long(out, e.alert_subject_share.map(i64::from));
        }
        Event::Adjustment(e) => write_adjustment(out, e),
        Event::Alert(e) => {
            write_string(out, &e.alert_id);
            write_long(out, e.kind.index() as i64);
            write_opt_string(out, &e.policy_id);
            write_opt_long(out, e.policy_version.map(i64::from));
            write_opt_long(out, e.scope.map(|scope| scope.index() as i64));
            write_opt_long(out, e.window_start.map(Timestamp::micros));
            write_opt_long(out, e.window_end.map(Timestamp::micros));
            write_long(out, i64::from(e.threshold_percent));
            write_opt_long(out, e.limit);
            write_long(out, e.observed);
            write_opt_string(out, &e.request_id);
        }
        Event::Correction(e) => {
            write_string(out, &e.original_event_id);
            write_long(out, e.action.index() as i64);
            write_opt_long(out, e.quantity);
            write_string(out, &e.actor);
            write_string(out, &e.reason);
        }
        Event::CapacityLease(e) => {
            write_string(out, &e.capacity_lease_id);
            write_long(out, e.action.index() as i64);
            write_string(out, &e.holder);
            write_string(out, &e.policy_id);
            write_long(out, i64::from(e.policy_version));
            write_long(out, e.window_start.micros());
            write_long(out, e.window_end.micros());
            write_long(out, e.units);
            write_opt_long(out, e.used);
            write_opt_long(out, e.expires_at.map(Timestamp::micros));
        }
        Event::PlanAssignment(e) => {
            write_opt_string(out, &e.plan);
            write_long(out, e.effective_from.micros());
            write_string(out, &e.actor);
            write_string(out, &e.reason);
        }
        Event::Meter(e) => {
            write_long(out, i64::from(e.version));
            write_long(out, e.aggregation.index() as i64);
            write_opt_long(out, e.field.map(|v| v.index() as i64));
            write_long(out, e.effective_from.micros());
            write_string(out, &e.actor);
            write_string(out, &e.reason);
        }
    }
}

fn write_adjustment(out: &mut Vec<u8>, e: &AdjustmentEvent) {
    write_string(out, &e.adjustment_id);
    write_long(out, e.kind.index() as i64);
    write_opt_string(out, &e.policy_id);
    write_opt_long(out, e.window_start.map(Timestamp::micros));
    write_opt_long(out, e.window_end.map(Timestamp::micros));
    write_long(out, e.amount);
    if !e.refs.is_empty() {
        write_long(out, i64::try_from(e.refs.len()).expect("a list held in memory has fewer than 2^63 items"));
        for reference in &e.refs {
            write_string(out, reference);
        }
    }
    out.push(0);
    write_string(out, &e.run_id);
    match e.scope {
        None => write_long(out, 0),
        Some(scope) => {
            write_long(out, 1);
            write_long(out, scope.index() as i64);
        }
    }
}

fn write_header(out: &mut Vec<u8>, h: &Header) {
    write_string(out, &h.event_id);
    write_long(out, h.occurred_at.micros());
    write_string(out, &h.tenant);
    write_opt_string(out, &h.subject);
    write_opt_string(out, &h.project);
    write_opt_string(out, &h.api_key);
    write_string(out, &h.metric);
    write_string(out, &h.source);
}

/// `["null", "string"]`: branch 0 is null, branch 1 the string.
fn write_opt_string(out: &mut Vec<u8>, value: &Option<String>) {
    match value {
        None => write_long(out, 0),
        Some(s) => {
            write_long(out, 1);
            write_string(out, s);
        }
    }
}

/// `["null", {"type": "array", "items": "int"}]`: branch 1 is the array, its items in one block (none for an empty
/// one) and the 0 that ends the blocks.
fn write_opt_ints(out: &mut Vec<u8>, value: Option<&[i32]>) {
    match value {
        None => write_long(out, 0),
        Some(items) => {
            write_long(out, 1);
            if !items.is_empty() {
                write_long(out, i64::try_from(items.len()).expect("a list held in memory has fewer than 2^63 items"));
                for &item in items {
                    write_long(out, i64::from(item));
                }
            }
            out.push(0);
        }
    }
}

/// `["null", "long"]`, `["null", "int"]` and `["null", timestamp-micros]`: ints and longs encode alike.
fn write_opt_long(out: &mut Vec<u8>, value: Option<i64>) {
    match value {
        None => write_long(out, 0),
        Some(n) => {
            write_long(out, 1);
            write_long(out, n);
        }
    }
}
