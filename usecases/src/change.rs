//! A change of a tenant's policies or grants (contract §7): judged against what the ledgers hold now (the next version,
//! conflicts), then appended to the ledger (every shard that holds its tenant) or produced to Kafka for ingest to
//! record. A refused change records nothing. The changes made, the policies and the grants in words and tables, as the
//! commands print them.

use std::io::Write;

use control::{GrantChange, PolicyChange, Recorded};
use ledger::Ledger;
use schemas::{Enforcement, Event, GrantEvent, OnFailure, PolicyEvent, Timestamp, Window};

use crate::{Context, Result, Store, refuse};

/// Where a change goes.
#[derive(Debug, Clone)]
pub enum Destination {
    /// Appended to the ledger of the store.
    Ledger,
    /// Produced to Kafka, for ingest to record; the next version is still read from the store.
    Kafka {
        /// Bootstrap servers.
        brokers: String,
        /// librdkafka settings.
        settings: Vec<(String, String)>,
        /// The topic, when not the record type's.
        topic: Option<String>,
    },
}

/// A change made: its event, and where it was written, in words.
#[derive(Debug)]
pub struct Changed<E> {
    /// The event recorded or produced.
    pub event: E,
    /// `recorded at ledger seq N` or `produced to TOPIC and acknowledged`.
    pub written: String,
}

/// The policies and grants `store` holds, as `policy list`, `policy history` and `grant list` show them.
pub fn recorded(store: &Store) -> Result<Recorded> {
    Ok(Recorded::read(&store.read_all()?)?)
}

/// A new version of a policy (or its first), judged against `store` and written to `to`.
pub fn set_policy(store: &Store, change: &PolicyChange, to: &Destination) -> Result<Changed<PolicyEvent>> {
    let event = {
        let ledgers = open_existing(store, to, change.version.is_some())?;
        let recorded = Recorded::read(&ledgers)?;
        control::policy_event(change, &recorded, Timestamp::now()).context("policy not changed")?
    };
    let written = write(store, Event::Policy(event.clone()), to)?;
    Ok(Changed { event, written })
}

/// A grant added, judged against `store` and written to `to`.
pub fn add_grant(store: &Store, change: &GrantChange, to: &Destination) -> Result<Changed<GrantEvent>> {
    let event = {
        let ledgers = open_existing(store, to, true)?;
        let recorded = Recorded::read(&ledgers)?;
        control::grant_event(change, &recorded, Timestamp::now()).context("grant not added")?
    };
    let written = write(store, Event::Grant(event.clone()), to)?;
    Ok(Changed { event, written })
}

/// The ledgers of `store` as they are now, for reading: a change is judged against what they hold. A ledger file
/// not created yet holds nothing, unless the change goes to Kafka with no version given: its version would then
/// restart at 1 whatever the ledger that ingest fills holds.
fn open_existing(store: &Store, to: &Destination, version_given: bool) -> Result<Vec<Ledger>> {
    match store {
        Store::File(path) if !path.exists() && matches!(to, Destination::Kafka { .. }) && !version_given => refuse!(
            "no ledger at {}: the next version is read from the ledger that ingest records the topic into (give it \
             with --ledger or --data, or give --version)",
            path.display()
        ),
        Store::File(path) if !path.exists() => Ok(vec![]),
        _ => store.read_all(),
    }
}

/// Appends `event` into the ledger (the shards that hold its tenant), or produces it to Kafka; says which.
pub(crate) fn write(store: &Store, event: Event, to: &Destination) -> Result<String> {
    if let Destination::Kafka { brokers, settings, topic } = to {
        let inputs = kafka::topics::Topics::defaults();
        let topic = topic.clone().unwrap_or_else(|| event.event_type().default_topic().to_string());
        kafka::produce::produce_events(brokers, settings, &inputs, &topic, &[event])?;
        return Ok(format!("produced to {topic} and acknowledged"));
    }
    let mut ledgers = store.append_all()?;
    let seqs = control::record(&mut ledgers, &event)?;
    let seqs: Vec<String> = seqs.iter().map(u64::to_string).collect();
    Ok(format!("recorded at ledger seq {}", seqs.join(", ")))
}

/// A policy version recorded or produced, in a line: its limit, window, zone and enforcement, what happens beyond
/// the limit, its alerts when it sets its own, when it takes effect and where it was written.
impl std::fmt::Display for Changed<PolicyEvent> {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let event = &self.event;
        let PolicyEvent { policy_id, version, limit, enforcement, effective_from, .. } = event;
        let (tenant, metric) = (&event.header.tenant, &event.header.metric);
        // The zone only when one is named: a UTC policy reads as it always did.
        let zone = event.time_zone.as_deref().map(|zone| format!(" in {zone}")).unwrap_or_default();
        let mut beyond = event.overage_throttle().map_or(String::new(), |(rate, per)| {
            format!(", beyond it {rate} per {} (throttled overage)", per.symbol())
        });
        if let Some(violation) = event.violation {
            beyond += &format!(", a gauge: over it {}", violation.symbol());
        }
        if let Some(anchor) = event.cycle_anchor {
            beyond += &format!(", cycles anchored at {anchor}");
        }
        if let Some(alerts) = alerts_label(event) {
            beyond += &format!(", alerts {alerts}");
        }
        let window = event.window.label(event.window_seconds);
        write!(
            out,
            "policy {policy_id} version {version} of {tenant}: {limit} {metric} per {window}{zone} ({}{beyond}), \
             effective from {effective_from}; {}",
            enforcement.symbol(),
            self.written
        )
    }
}

/// A grant recorded or produced, in a line: what it adds, when, and where it was written.
impl std::fmt::Display for Changed<GrantEvent> {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let GrantEvent { grant_id, amount, valid_from, valid_until, header, .. } = &self.event;
        let (tenant, metric) = (&header.tenant, &header.metric);
        write!(
            out,
            "grant {grant_id} of {tenant}: {amount} {metric} from {valid_from} until {valid_until}; {}",
            self.written
        )
    }
}

/// A policy version as `policy list` and `policy history` show it: a row of their tables, an object of their JSON.
#[derive(Debug, serde::Serialize)]
pub struct PolicyRow<'a> {
    tenant: &'a str,
    metric: &'a str,
    policy_id: &'a str,
    version: i32,
    scope: &'static str,
    limit: i64,
    window: Window,
    /// A ROLLING window's length in seconds (the policy's `window_seconds`); null for every other window.
    window_seconds: Option<i64>,
    /// A BILLING_CYCLE window's anchor (the policy's `cycle_anchor`); null for every other window.
    cycle_anchor: Option<String>,
    /// The percents of the limit a THRESHOLD alert is written at: the policy's `alert_thresholds`, or the default
    /// 80, 90 and 100 when it sets none; empty for none.
    alert_thresholds: &'a [i32],
    /// The subject share above which a SUBJECT_SHARE alert is due, in percent (the policy's `alert_subject_share`).
    alert_subject_share: Option<i32>,
    /// The tables' `alerts` cell: the policy's own alert settings, none when it sets neither.
    #[serde(skip)]
    alerts: Option<String>,
    /// The zone of its calendar windows: the policy's `time_zone`, UTC when it names none.
    time_zone: &'a str,
    enforcement: &'static str,
    /// What the hook answers when the ledger cannot record: the policy's `on_failure`, CLOSED when it names none.
    on_failure: &'static str,
    /// What is done beyond the limit (the design's `overage_policy`): REJECT (HARD), BILL (SOFT), REPORT (SHADOW) or
    /// THROTTLE RATE/WINDOW.
    overage: String,
    burst: Option<i64>,
    effective_from: String,
    recorded_at: String,
    actor: Option<&'a str>,
    reason: Option<&'a str>,
    source: &'a str,
}

impl<'a> From<&'a PolicyEvent> for PolicyRow<'a> {
    fn from(p: &'a PolicyEvent) -> PolicyRow<'a> {
        PolicyRow {
            tenant: &p.header.tenant,
            metric: &p.header.metric,
            policy_id: &p.policy_id,
            version: p.version,
            scope: p.scope.symbol(),
            limit: p.limit,
            window: p.window,
            window_seconds: p.window_seconds,
            cycle_anchor: p.cycle_anchor.map(|t| t.to_string()),
            alert_thresholds: p.alert_thresholds(),
            alert_subject_share: p.alert_subject_share,
            alerts: alerts_label(p),
            time_zone: p.time_zone.as_deref().unwrap_or("UTC"),
            enforcement: p.enforcement.symbol(),
            on_failure: p.on_failure.unwrap_or(OnFailure::CLOSED).symbol(),
            overage: overage_policy(p),
            burst: p.burst,
            effective_from: p.effective_from.to_string(),
            recorded_at: p.header.occurred_at.to_string(),
            actor: p.actor.as_deref(),
            reason: p.reason.as_deref(),
            source: &p.header.source,
        }
    }
}

/// A policy's own alert settings as people read them (`at 50,100%`, `none`, `subject share over 40%`); none when it
/// sets neither and its alerts are the defaults.
fn alerts_label(p: &PolicyEvent) -> Option<String> {
    let thresholds = p.alert_thresholds.as_deref().map(|t| match t {
        [] => "none".to_string(),
        t => format!("at {}%", t.iter().map(i32::to_string).collect::<Vec<_>>().join(",")),
    });
    let share = p.alert_subject_share.map(|share| format!("subject share over {share}%"));
    match (thresholds, share) {
        (None, None) => None,
        (Some(t), Some(s)) => Some(format!("{t}, {s}")),
        (t, s) => t.or(s),
    }
}

/// A policy's overage handling in the design's words: what happens to consumption beyond the limit.
fn overage_policy(p: &PolicyEvent) -> String {
    if let Some(violation) = p.violation {
        return format!("GAUGE {}", violation.symbol());
    }
    match (p.overage_throttle(), p.enforcement) {
        (Some((rate, window)), _) => format!("THROTTLE {rate}/{}", window.symbol()),
        (None, Enforcement::HARD) => "REJECT".into(),
        (None, Enforcement::SOFT) => "BILL".into(),
        (None, Enforcement::SHADOW) => "REPORT".into(),
    }
}

/// The table of `policy list`: the policies in force. Columns are added, never renamed (contract §7): the newest last.
pub fn write_policy_list(out: &mut dyn Write, rows: &[PolicyRow]) -> std::io::Result<()> {
    let header = ["tenant", "metric", "policy_id", "version", "scope", "limit", "window", "enforcement"];
    let header = header.into_iter().chain(["effective_from", "time_zone", "on_failure", "overage"]);
    let table = rows.iter().map(|r| {
        let text = [r.tenant, r.metric, r.policy_id].map(str::to_string);
        let more = [r.version.to_string(), r.scope.into(), r.limit.to_string(), r.window.label(r.window_seconds)];
        let last = [r.enforcement.into(), r.effective_from.clone(), r.time_zone.into(), r.on_failure.into()];
        text.into_iter().chain(more).chain(last).chain([r.overage.clone()]).collect()
    });
    write_with_alerts(out, header.collect(), rows, table.collect())
}

/// The table of `policy history`: every version of a policy, who changed it and why.
pub fn write_policy_history(out: &mut dyn Write, rows: &[PolicyRow]) -> std::io::Result<()> {
    let header = ["version", "tenant", "limit", "window", "enforcement", "effective_from", "recorded_at", "actor"];
    let header = header.into_iter().chain(["reason", "time_zone"]);
    let table = rows.iter().map(|r| {
        let first = [r.version.to_string(), r.tenant.into(), r.limit.to_string(), r.window.label(r.window_seconds)];
        let when = [r.enforcement.into(), r.effective_from.clone(), r.recorded_at.clone()];
        let who = [r.actor.unwrap_or("-").into(), r.reason.unwrap_or("-").into(), r.time_zone.into()];
        first.into_iter().chain(when).chain(who).collect()
    });
    write_with_alerts(out, header.collect(), rows, table.collect())
}

/// The table with an `alerts` column last when a policy of `rows` sets its own alerts: tables of policies that set
/// none read as they always did.
fn write_with_alerts(
    out: &mut dyn Write,
    mut header: Vec<&str>,
    rows: &[PolicyRow],
    mut table: Vec<Vec<String>>,
) -> std::io::Result<()> {
    if rows.iter().any(|r| r.alerts.is_some()) {
        header.push("alerts");
        for (cells, row) in table.iter_mut().zip(rows) {
            cells.push(row.alerts.clone().unwrap_or_else(|| "-".into()));
        }
    }
    reports::text::write_table(out, &header, &table)
}

/// A grant as `grant list` shows it: a row of its table, an object of its JSON.
#[derive(Debug, serde::Serialize)]
pub struct GrantRow<'a> {
    tenant: &'a str,
    subject: Option<&'a str>,
    metric: &'a str,
    grant_id: &'a str,
    amount: i64,
    valid_from: String,
    valid_until: String,
    recorded_at: String,
    actor: Option<&'a str>,
    reason: &'a str,
    source: &'a str,
    /// The project (API key) whose PROJECT (API_KEY) windows it raises: added last, as columns are.
    #[serde(skip_serializing_if = "Option::is_none")]
    project: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    api_key: Option<&'a str>,
}

impl<'a> From<&'a GrantEvent> for GrantRow<'a> {
    fn from(g: &'a GrantEvent) -> GrantRow<'a> {
        GrantRow {
            tenant: &g.header.tenant,
            subject: g.header.subject.as_deref(),
            metric: &g.header.metric,
            grant_id: &g.grant_id,
            amount: g.amount,
            valid_from: g.valid_from.to_string(),
            valid_until: g.valid_until.to_string(),
            recorded_at: g.header.occurred_at.to_string(),
            actor: g.actor.as_deref(),
            reason: &g.reason,
            source: &g.header.source,
            project: g.header.project.as_deref(),
            api_key: g.header.api_key.as_deref(),
        }
    }
}

/// The table of `grant list`.
pub fn write_grant_list(out: &mut dyn Write, rows: &[GrantRow]) -> std::io::Result<()> {
    let header = ["tenant", "metric", "grant_id", "amount", "valid_from", "valid_until", "actor", "reason"];
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let names = [r.tenant, r.metric, r.grant_id].map(str::to_string);
            let validity = [r.amount.to_string(), r.valid_from.clone(), r.valid_until.clone()];
            names.into_iter().chain(validity).chain([r.actor.unwrap_or("-").into(), r.reason.into()]).collect()
        })
        .collect();
    reports::text::write_table(out, &header, &table)
}
