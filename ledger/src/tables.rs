//! The tables the ledger shows to SQL (`quota-ledger sql`, through the reports' DataFusion provider and
//! [`crate::Ledger::scan`]): one per ledger table, each event table joined with the common fields of its entry, so
//! that a query never needs to join `entries` by hand. Payloads and hashes are left out (they are bytes for
//! `verify`, not for reports). These names and columns are the documented interface of `quota-ledger sql`: add,
//! never rename. How each column is read (its SQLite expression) stays inside the ledger.

/// The type of a column's values ([`crate::scan::Value`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A 64-bit signed integer.
    Int64,
    /// A 32-bit signed integer (an Avro `int`: a policy's version).
    Int32,
    /// UTF-8 text.
    Text,
    /// An instant, microseconds since the epoch, UTC.
    Timestamp,
}

/// One column: its name, the SQLite expression that reads it, and its type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    /// Its name in SQL.
    pub name: &'static str,
    /// The type of its values.
    pub kind: Kind,
    /// Whether a value may be missing.
    pub nullable: bool,
    /// The SQLite expression that reads it.
    pub(crate) sql: &'static str,
    /// A request_id the ledger indexes by request key (`dedup::REQUEST_KEYS`): a `column = 'literal'` filter is
    /// pushed down as a probe of that index (its key) besides the comparison itself.
    pub(crate) request_keyed: bool,
}

/// One table: its name, the SQLite `FROM` clause it reads, and the column holding the ledger sequence number
/// (rows past a scan's watermark are never read, so that every table of a query shows one instant).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Table {
    /// Its name in SQL.
    pub name: &'static str,
    /// What it holds, in a few words (`sql --tables`).
    pub description: &'static str,
    /// Its columns, in order.
    pub columns: &'static [Column],
    /// The SQLite `FROM` clause that reads it.
    pub(crate) from: &'static str,
    /// The SQLite expression of the ledger sequence number its rows are bounded by, if any.
    pub(crate) seq: Option<&'static str>,
}

impl Table {
    /// The index of the column named `name`.
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }
}

const fn col(name: &'static str, sql: &'static str, kind: Kind, nullable: bool) -> Column {
    Column { name, sql, kind, nullable, request_keyed: false }
}

use Kind::*;

/// The entry fields every event table starts with, its own, and the entry's project and API key last (columns are
/// added at the end, never moved).
macro_rules! entry_columns {
    ($($rest:expr),* $(,)?) => {
        &[
            col("seq", "e.seq", Int64, false),
            col("event_id", "e.event_id", Text, false),
            col("status", "e.status", Text, false),
            col("tenant", "e.tenant", Text, false),
            col("subject", "e.subject", Text, true),
            col("metric", "e.metric", Text, false),
            col("source", "e.source", Text, false),
            col("occurred_at", "e.occurred_at", Timestamp, false),
            col("recorded_at", "e.recorded_at", Timestamp, false),
            $($rest,)*
            col("project", "e.project", Text, true),
            col("api_key", "e.api_key", Text, true),
        ]
    };
}

/// Every table, in the order `sql --tables` lists them.
pub const TABLES: &[Table] = &[
    Table {
        name: "entries",
        description: "every entry, recorded or conflicting duplicate, by ledger sequence number",
        from: "entries e",
        seq: Some("e.seq"),
        columns: &[
            col("seq", "e.seq", Int64, false),
            col("event_id", "e.event_id", Text, false),
            col("event_type", "e.event_type", Text, false),
            col("status", "e.status", Text, false),
            col("duplicate_of", "e.duplicate_of", Int64, true),
            col("tenant", "e.tenant", Text, false),
            col("subject", "e.subject", Text, true),
            col("metric", "e.metric", Text, false),
            col("source", "e.source", Text, false),
            col("occurred_at", "e.occurred_at", Timestamp, false),
            col("recorded_at", "e.recorded_at", Timestamp, false),
            col("origin", "e.origin", Text, false),
            col("origin_stream", "e.origin_stream", Text, true),
            col("origin_partition", "e.origin_partition", Int64, true),
            col("origin_offset", "e.origin_offset", Int64, true),
            // The members of PROJECT and API_KEY scopes the entry names (every schema's version after v2).
            col("project", "e.project", Text, true),
            col("api_key", "e.api_key", Text, true),
        ],
    },
    Table {
        name: "usage_events",
        description: "UsageEvents with their entry fields",
        from: "usage_events d JOIN entries e ON e.seq = d.seq",
        seq: Some("d.seq"),
        columns: entry_columns![
            col("quantity", "d.quantity", Int64, false),
            col("request_id", "d.request_id", Text, true),
            col("attributes", "d.attributes", Text, false),
        ],
    },
    Table {
        name: "decision_events",
        description: "DecisionEvents (the enforcement's answers) with their entry fields",
        from: "decision_events d JOIN entries e ON e.seq = d.seq",
        seq: Some("d.seq"),
        columns: entry_columns![
            Column { request_keyed: true, ..col("request_id", "d.request_id", Text, false) },
            col("idempotency_key", "d.idempotency_key", Text, false),
            col("amount", "d.amount", Int64, false),
            col("outcome", "d.outcome", Text, false),
            col("reason", "d.reason", Text, false),
            col("policy_id", "d.policy_id", Text, true),
            col("policy_version", "d.policy_version", Int32, true),
            col("window_start", "d.window_start", Timestamp, true),
            col("window_end", "d.window_end", Timestamp, true),
            col("limit", "d.\"limit\"", Int64, true),
            col("used_before", "d.used_before", Int64, true),
            col("remaining", "d.remaining", Int64, true),
            col("retry_after_ms", "d.retry_after_ms", Int64, true),
        ],
    },
    Table {
        name: "reservation_events",
        description: "ReservationEvents (RESERVE, COMMIT, RELEASE; a lease's RENEW) with their entry fields",
        from: "reservation_events d JOIN entries e ON e.seq = d.seq",
        seq: Some("d.seq"),
        columns: entry_columns![
            col("reservation_id", "d.reservation_id", Text, false),
            col("action", "d.action", Text, false),
            col("amount", "d.amount", Int64, false),
            col("expires_at", "d.expires_at", Timestamp, true),
            col("fencing_token", "d.fencing_token", Int64, true),
        ],
    },
    Table {
        name: "grant_events",
        description: "GrantEvents with their entry fields",
        from: "grant_events d JOIN entries e ON e.seq = d.seq",
        seq: Some("d.seq"),
        columns: entry_columns![
            col("grant_id", "d.grant_id", Text, false),
            col("amount", "d.amount", Int64, false),
            col("valid_from", "d.valid_from", Timestamp, false),
            col("valid_until", "d.valid_until", Timestamp, false),
            col("reason", "d.reason", Text, false),
            // Who gave it (GrantEvent v2); null from older producers.
            col("actor", "d.actor", Text, true),
        ],
    },
    Table {
        name: "policy_events",
        description: "PolicyEvents (every version) with their entry fields",
        from: "policy_events d JOIN entries e ON e.seq = d.seq",
        seq: Some("d.seq"),
        columns: entry_columns![
            col("policy_id", "d.policy_id", Text, false),
            col("version", "d.version", Int32, false),
            col("scope", "d.scope", Text, false),
            col("limit", "d.\"limit\"", Int64, false),
            col("window", "d.window", Text, false),
            col("enforcement", "d.enforcement", Text, false),
            col("effective_from", "d.effective_from", Timestamp, false),
            // A throttle's token bucket capacity (PolicyEvent v2); null for a quota.
            col("burst", "d.burst", Int64, true),
            // Who made this version and why (PolicyEvent v3); null from older producers.
            col("actor", "d.actor", Text, true),
            col("reason", "d.reason", Text, true),
            // The IANA time zone of its calendar windows (PolicyEvent v4); null is UTC.
            col("time_zone", "d.time_zone", Text, true),
            // What the hook answers when the ledger cannot record (PolicyEvent v6): CLOSED or OPEN; null is CLOSED.
            col("on_failure", "d.on_failure", Text, true),
            // A HARD quota's throttled overage (PolicyEvent v7): beyond the limit, overage_rate per overage_window.
            col("overage_rate", "d.overage_rate", Int64, true),
            col("overage_window", "d.overage_window", Text, true),
            // A gauge quota's violation policy (PolicyEvent v8): NO_INSERTS, NO_WRITES or DISABLE; null limits consumption.
            col("violation", "d.violation", Text, true),
            // A ROLLING window's length in seconds (PolicyEvent v10); null for every other window.
            col("window_seconds", "d.window_seconds", Int64, true),
            // A BILLING_CYCLE window's anchor (PolicyEvent v11), microseconds since the epoch; null for every other window.
            col("cycle_anchor", "d.cycle_anchor", Timestamp, true),
            // A policy's own alert thresholds (PolicyEvent v12), percents comma-separated, '' for none; null is 80,90,100.
            col("alert_thresholds", "d.alert_thresholds", Text, true),
            // The subject share above which a SUBJECT_SHARE alert is due (PolicyEvent v12), in percent; null for none.
            col("alert_subject_share", "d.alert_subject_share", Int32, true),
        ],
    },
    Table {
        name: "adjustment_events",
        description: "AdjustmentEvents written by reconcile, with their entry fields",
        from: "adjustment_events d JOIN entries e ON e.seq = d.seq",
        seq: Some("d.seq"),
        columns: entry_columns![
            col("adjustment_id", "d.adjustment_id", Text, false),
            col("kind", "d.kind", Text, false),
            col("policy_id", "d.policy_id", Text, true),
            col("window_start", "d.window_start", Timestamp, true),
            col("window_end", "d.window_end", Timestamp, true),
            col("amount", "d.amount", Int64, false),
            col("refs", "d.refs", Text, false),
            col("run_id", "d.run_id", Text, false),
            // OVERSHOOT and SHADOW_OVER_LIMIT: the scope of the policy whose window it is (AdjustmentEvent v2).
            col("scope", "d.scope", Text, true),
        ],
    },
    Table {
        name: "alert_events",
        description: "AlertEvents written by the enforcement hook (a window reaching a share of its limit) and by reconcile (SUBJECT_SHARE, OPEN_TOO_LONG, DENY_RATE, thresholds no request reached), with their entry fields",
        from: "alert_events d JOIN entries e ON e.seq = d.seq",
        seq: Some("d.seq"),
        columns: entry_columns![
            col("alert_id", "d.alert_id", Text, false),
            col("kind", "d.kind", Text, false),
            col("policy_id", "d.policy_id", Text, true),
            col("policy_version", "d.policy_version", Int32, true),
            col("scope", "d.scope", Text, true),
            col("window_start", "d.window_start", Timestamp, true),
            col("window_end", "d.window_end", Timestamp, true),
            col("threshold_percent", "d.threshold_percent", Int32, false),
            col("limit", "d.\"limit\"", Int64, true),
            col("observed", "d.observed", Int64, false),
            col("request_id", "d.request_id", Text, true),
        ],
    },
    Table {
        name: "correction_events",
        description: "CorrectionEvents (a VOID or AMEND of a recorded usage event) with their entry fields and what each changed: the original's entry and event time, its count before and after, the delta",
        from: "correction_events d JOIN entries e ON e.seq = d.seq JOIN usage_corrections c ON c.seq = d.seq",
        seq: Some("d.seq"),
        columns: entry_columns![
            col("original_event_id", "d.original_event_id", Text, false),
            col("action", "d.action", Text, false),
            col("quantity", "d.quantity", Int64, true),
            col("actor", "d.actor", Text, false),
            col("reason", "d.reason", Text, false),
            col("original_seq", "c.original_seq", Int64, false),
            col("original_occurred_at", "c.occurred_at", Timestamp, false),
            col("period", "c.period", Text, false),
            col("quantity_before", "c.quantity_before", Int64, false),
            col("quantity_after", "c.quantity_after", Int64, false),
            col("delta", "c.delta", Int64, false),
        ],
    },
    Table {
        name: "capacity_lease_events",
        description: "CapacityLeaseEvents (a capacity lease's GRANT, RENEW, RETURN, EXPIRE or RECLAIM: units of a window of an ESCROW policy lent by the tenant's owner shard to a holder) with their entry fields",
        from: "capacity_lease_events d JOIN entries e ON e.seq = d.seq",
        seq: Some("d.seq"),
        columns: entry_columns![
            col("capacity_lease_id", "d.capacity_lease_id", Text, false),
            col("action", "d.action", Text, false),
            col("holder", "d.holder", Text, false),
            col("policy_id", "d.policy_id", Text, false),
            col("policy_version", "d.policy_version", Int32, false),
            col("window_start", "d.window_start", Timestamp, false),
            col("window_end", "d.window_end", Timestamp, false),
            col("units", "d.units", Int64, false),
            col("used", "d.used", Int64, true),
            col("expires_at", "d.expires_at", Timestamp, true),
        ],
    },
    Table {
        name: "plan_assignment_events",
        description: "PlanAssignmentEvents (a tenant assigned to a named plan from an instant) with their entry fields",
        from: "plan_assignment_events d JOIN entries e ON e.seq = d.seq",
        seq: Some("d.seq"),
        columns: entry_columns![
            col("plan", "d.plan", Text, true),
            col("effective_from", "d.effective_from", Timestamp, false),
            col("actor", "d.actor", Text, false),
            col("reason", "d.reason", Text, false),
        ],
    },
    Table {
        name: "meter_events",
        description: "MeterEvents: each version of a metric's meter (how its usage aggregates: SUM, COUNT, UNIQUE_COUNT of a field, MAX, LATEST, TIME_WEIGHTED_SUM, TIME_WEIGHTED_AVERAGE) with its entry fields",
        from: "meter_events d JOIN entries e ON e.seq = d.seq",
        seq: Some("d.seq"),
        columns: entry_columns![
            col("version", "d.version", Int32, false),
            col("aggregation", "d.aggregation", Text, false),
            col("field", "d.field", Text, true),
            col("effective_from", "d.effective_from", Timestamp, false),
            col("actor", "d.actor", Text, false),
            col("reason", "d.reason", Text, false),
        ],
    },
    Table {
        name: "usage_totals",
        description: "counted usage per tenant, metric and period, maintained by every append",
        from: "usage_totals t",
        seq: None,
        columns: &[
            col("tenant", "t.tenant", Text, false),
            col("metric", "t.metric", Text, false),
            col("period", "t.period", Text, false),
            col("quantity", "t.quantity", Int64, false),
        ],
    },
    Table {
        name: "period_closes",
        description: "closed billing periods and the watermark each was closed at",
        from: "period_closes c",
        seq: Some("c.watermark"),
        columns: &[
            col("period", "c.period", Text, false),
            col("period_start", "c.period_start", Timestamp, false),
            col("period_end", "c.period_end", Timestamp, false),
            col("watermark", "c.watermark", Int64, false),
            col("closed_at", "c.closed_at", Timestamp, false),
        ],
    },
    Table {
        name: "period_exports",
        description: "the stored rows of every final billing export",
        from: "period_exports x",
        seq: None,
        columns: &[
            col("period", "x.period", Text, false),
            col("row_index", "x.row_index", Int64, false),
            col("tenant", "x.tenant", Text, false),
            col("metric", "x.metric", Text, false),
            col("consumption", "x.consumption", Int64, false),
            col("policy_id", "x.policy_id", Text, true),
            col("policy_version", "x.policy_version", Int32, true),
            col("limit", "x.\"limit\"", Int64, true),
            col("grants", "x.grants", Int64, true),
            col("effective_limit", "x.effective_limit", Int64, true),
            col("overage", "x.overage", Int64, true),
            col("overshoot", "x.overshoot", Int64, true),
            col("late_adjustments", "x.late_adjustments", Int64, false),
            // The billing cycle the row bills (PolicyEvent v11); null for a row of the period's month itself.
            col("cycle_start", "x.cycle_start", Timestamp, true),
            col("cycle_end", "x.cycle_end", Timestamp, true),
            // The named plan the row was billed under; null for none.
            col("plan", "x.plan", Text, true),
        ],
    },
    Table {
        name: "duplicates",
        description: "exact duplicates received: which entry each repeats and where it came from",
        from: "duplicates u",
        seq: Some("u.duplicate_of"),
        columns: &[
            col("id", "u.id", Int64, false),
            col("duplicate_of", "u.duplicate_of", Int64, false),
            col("origin", "u.origin", Text, false),
            col("origin_stream", "u.origin_stream", Text, true),
            col("origin_partition", "u.origin_partition", Int64, true),
            col("origin_offset", "u.origin_offset", Int64, true),
            col("received_at", "u.received_at", Timestamp, false),
        ],
    },
    Table {
        name: "quarantine",
        description: "messages that failed to decode or validate (without their raw bytes)",
        from: "quarantine q",
        seq: None,
        columns: &[
            col("id", "q.id", Int64, false),
            col("origin", "q.origin", Text, false),
            col("origin_stream", "q.origin_stream", Text, true),
            col("origin_partition", "q.origin_partition", Int64, true),
            col("origin_offset", "q.origin_offset", Int64, true),
            col("reason_code", "q.reason_code", Text, false),
            col("reason", "q.reason", Text, false),
            col("quarantined_at", "q.quarantined_at", Timestamp, false),
        ],
    },
    Table {
        name: "quarantine_replays",
        description: "quarantined messages replayed after a fix, with what each became",
        from: "quarantine_replays r",
        seq: None,
        columns: &[
            col("quarantine_id", "r.quarantine_id", Int64, false),
            col("replayed_at", "r.replayed_at", Timestamp, false),
            col("outcome", "r.outcome", Text, false),
            col("seq", "r.seq", Int64, false),
        ],
    },
    Table {
        name: "offsets",
        description: "the next Kafka offset per topic and partition",
        from: "offsets o",
        seq: None,
        columns: &[
            col("topic", "o.topic", Text, false),
            col("partition", "o.partition", Int64, false),
            col("next_offset", "o.next_offset", Int64, false),
        ],
    },
    Table {
        name: "batches",
        description: "every append (a batch, a group of the hook's decisions, a reconcile run): the watermark after it \
                      and the ledger's running counts",
        from: "batches b",
        seq: Some("b.watermark"),
        columns: &[
            col("id", "b.id", Int64, false),
            col("committed_at", "b.committed_at", Timestamp, false),
            col("watermark", "b.watermark", Int64, false),
            col("events_recorded_total", "b.events_recorded_total", Int64, false),
            col("duplicates_total", "b.duplicates_total", Int64, false),
            col("conflicts_total", "b.conflicts_total", Int64, false),
            col("quarantined_total", "b.quarantined_total", Int64, false),
        ],
    },
    Table {
        name: "offset_gaps",
        description: "Kafka offsets never read that an operator accepted as lost (`ingest --accept-gap`)",
        from: "offset_gaps g",
        seq: None,
        columns: &[
            col("id", "g.id", Int64, false),
            col("topic", "g.topic", Text, false),
            col("partition", "g.partition", Int64, false),
            col("from_offset", "g.from_offset", Int64, false),
            col("to_offset", "g.to_offset", Int64, false),
            col("accepted_at", "g.accepted_at", Timestamp, false),
        ],
    },
    Table {
        name: "file_progress",
        description: "how far `ingest --file` got in each container file, known by its sync marker",
        from: "file_progress f",
        seq: None,
        columns: &[
            col("sync_marker", "lower(hex(f.sync_marker))", Text, false),
            col("path", "f.path", Text, false),
            col("records", "f.records", Int64, false),
            col("updated_at", "f.updated_at", Timestamp, false),
        ],
    },
];

/// The table named `name`.
pub fn table(name: &str) -> Option<&'static Table> {
    TABLES.iter().find(|t| t.name == name)
}
