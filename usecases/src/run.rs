//! The nightly reconcile run (contract §5, §7): under the ledger's reconcile lock, plan every adjustment, record them
//! (in transactions of 10,000), then, under the publisher lock, publish them to `quota.adjustments` through the outbox
//! when brokers are given. A directory of shards is reconciled shard after shard as of the same instant (a tenant's
//! windows live in its one shard) and reported as their union. The report is said in words ([`write_report`]), as
//! JSON ([`run_json`]) and as figures ([`figures`]).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use ledger::{Ledger, ProcessLock};
use outbox::{OutboxFormat, OutboxTopics, PublishReport};
use reconcile::{Plan, Progress};
use schemas::{AdjustmentEvent, AdjustmentKind, Event, EventType, Timestamp};
use serde::Serialize;

use crate::{Context, Result, Store};

/// Rows of the "largest overshoots" table.
const LARGEST_SHOWN: usize = 10;
/// Rows of the per-tenant table.
const TENANTS_SHOWN: usize = 20;
/// Rows of the table of gauges over their limit: a run reports every window since the ledger began, so a tenant
/// long over its limit has one per day (or hour) of it; the most recent are the ones an operator acts on.
const GAUGE_WINDOWS_SHOWN: usize = 20;

/// What a run is asked to do.
#[derive(Debug, Clone)]
pub struct RunSettings {
    /// Judge windows that ended and reservations that expired by this instant.
    pub as_of: Timestamp,
    /// Alert a reservation or lease held longer than this many seconds (OPEN_TOO_LONG, contract §6).
    pub open_alert_after_s: u64,
    /// Compute the plan, record nothing.
    pub dry_run: bool,
    /// Read every event, even when the last run as of the same instant lets this one read only what came since
    /// (`--full`).
    pub full: bool,
    /// Where to publish the adjustments; without it they wait in the outbox.
    pub publish: Option<Publish>,
}

/// Where a run publishes its adjustments.
#[derive(Debug, Clone)]
pub struct Publish {
    /// Kafka bootstrap servers.
    pub brokers: String,
    /// librdkafka settings of the outbox producer.
    pub settings: Vec<(String, String)>,
    /// Topic of the adjustments.
    pub adjustments_topic: String,
    /// How long to keep retrying unacknowledged adjustments before leaving them pending.
    pub timeout: Duration,
    /// How the outbox's entries are written on their topics.
    pub format: OutboxFormat,
}

impl Publish {
    /// Publishing to `brokers` with `settings` in `format`, the default topic and timeout.
    pub fn to(brokers: &str, settings: &[(String, String)], format: OutboxFormat) -> Publish {
        Publish {
            brokers: brokers.to_string(),
            settings: settings.to_vec(),
            adjustments_topic: EventType::AdjustmentEvent.default_topic().to_string(),
            timeout: Duration::from_millis(outbox::PUBLISH_TIMEOUT_MS),
            format,
        }
    }
}

/// What a run did.
#[derive(Debug)]
pub struct Run {
    /// The plan: the adjustments and alerts found (recorded unless a dry run), and what was read.
    pub plan: Plan,
    /// What the outbox published, when the run published.
    pub outbox: Option<PublishReport>,
    /// Entries waiting in the outbox after the run.
    pub pending: u64,
    /// What an operator should know beside the report: another process publishes the outbox, say.
    pub notes: Vec<String>,
}

/// The run as `reconcile --json` prints it (contract §7).
#[derive(Debug, Serialize)]
pub struct RunJson {
    run_id: String,
    as_of: Timestamp,
    watermark: u64,
    dry_run: bool,
    adjustments_written: u64,
    adjustments_by_kind: BTreeMap<String, u64>,
    adjustments: Vec<serde_json::Value>,
    /// The alerts this run recorded; `read.alerts` lists them with those of the day before.
    alerts_written: u64,
    read: reconcile::PlanCounts,
    /// Every event read, and why; or the tenants touched since the last run as of the same instant.
    coverage: reconcile::Coverage,
    outbox: Option<PublishReport>,
    /// Policies and grants recorded after the close of a month they would change (docs/contract.md §9.5).
    after_close: Vec<reconcile::after_close::AfterClose>,
}

/// Reconciles `store` as of `settings.as_of`; `progress` hears what the run is doing, in words. A shard that fails
/// stops the run naming it: the shards before it are reconciled, and a rerun as of the same instant writes nothing
/// more to them.
pub fn run(store: &Store, settings: &RunSettings, progress: &mut dyn FnMut(String)) -> Result<Run> {
    match store {
        Store::File(path) => {
            if !path.exists() {
                Ledger::open_read_only(path)?;
            }
            of_ledger(path, settings, progress)
        }
        Store::Shards(shards) => of_shards(shards, settings, progress),
    }
}

/// Every shard reconciled as of the same instant, one after the other; the report is their union
/// ([`reconcile::shards::union`]).
fn of_shards(
    shards: &ledger::shards::ShardDir,
    settings: &RunSettings,
    progress: &mut dyn FnMut(String),
) -> Result<Run> {
    let set = shards.open_all_read_only()?;
    let (mut plans, mut watermark, mut pending, mut notes) = (Vec::new(), 0, 0, Vec::new());
    let mut outbox: Option<PublishReport> = None;
    for (index, (shard, ledger)) in set.iter().enumerate() {
        let named = || format!("{shard} ({})", ledger.path().display());
        let run = of_ledger(ledger.path(), settings, progress).with_context(named)?;
        // The set's watermark counts a plan default once (every shard records it).
        let repeated = if index == 0 { 0 } else { ledger.plan_default_entries_through(run.plan.watermark)? };
        watermark += run.plan.watermark - repeated;
        pending += run.pending;
        notes.extend(run.notes);
        if let Some(report) = run.outbox {
            let sum = outbox.get_or_insert_with(PublishReport::default);
            sum.published += report.published;
            sum.pending += report.pending;
            sum.attempts += report.attempts;
            sum.awaiting_registry += report.awaiting_registry;
            sum.last_error = report.last_error.or(sum.last_error.take());
        }
        plans.push(run.plan);
    }
    notes.dedup();
    Ok(Run { plan: reconcile::shards::union(settings.as_of, watermark, plans), outbox, pending, notes })
}

/// Plans, applies and publishes the reconcile of the ledger at `path`.
pub fn of_ledger(path: &Path, settings: &RunSettings, progress: &mut dyn FnMut(String)) -> Result<Run> {
    let _lock = ProcessLock::acquire(path, "reconcile")?;
    let mut ledger = Ledger::open(path)?;
    progress("reading policies, grants and adjustments".to_string());
    let alerts = reconcile::AlertSettings { open_too_long_micros: (settings.open_alert_after_s * 1_000_000) as i64 };
    let reading = if settings.full { reconcile::Reading::Full } else { reconcile::Reading::default() };
    let plan = reconcile::plan_incremental(&ledger, settings.as_of, alerts, reading, &mut |p| {
        progress(match p {
            Progress::Reservations { events } => format!("judging reservations: {events} events"),
            Progress::Usage { events } => format!("summing consumption per window: {events} usage events"),
            Progress::Refs { events } => format!("naming the events that crossed limits: {events} usage events"),
        })
    })
    .context("reconcile failed, nothing recorded")?;
    if !settings.dry_run && !plan.records_nothing() {
        progress(format!("recording {} adjustments, {} alerts", plan.adjustments.len(), plan.alerts.len()));
        // The error says what was recorded: the adjustments go in transactions of 10,000.
        reconcile::apply(&mut ledger, &plan).context("reconcile failed")?;
    }
    if !settings.dry_run {
        // Only once the ledger holds the plan: a run stopped before leaves the last checkpoint, which no longer
        // matches the adjustments recorded, and the next run reads everything.
        reconcile::remember(&mut ledger, &plan, alerts).context("reconcile failed")?;
    }
    let mut notes = Vec::new();
    let outbox = match (&settings.publish, settings.dry_run) {
        // One publisher per ledger: a `serve --brokers` on it publishes the whole outbox, these adjustments too, and
        // two publishers sent every pending entry twice.
        (Some(publish), false) => match ProcessLock::acquire(path, "publisher") {
            Ok(_publisher) => {
                progress("publishing adjustments to Kafka".to_string());
                let mut topics = OutboxTopics::defaults();
                topics.set(EventType::AdjustmentEvent, &publish.adjustments_topic);
                let (brokers, settings) = (&publish.brokers, &publish.settings);
                Some(outbox::publish(&mut ledger, brokers, settings, &topics, &publish.format, publish.timeout)?)
            }
            Err(ledger::LockError::Held { holder, .. }) => {
                notes.push(format!(
                    "the outbox is published by another process ({holder}: a serve --brokers), which publishes these \
                     adjustments too"
                ));
                None
            }
            Err(error) => return Err(error.into()),
        },
        _ => None,
    };
    let pending = ledger.outbox_pending_count()?;
    Ok(Run { plan, outbox, pending, notes })
}

/// The run's figures for the node exporter's textfile collector: the last success, its duration, adjustments and their
/// amounts by kind, windows judged, outbox pending.
pub fn figures(run: &Run, dry_run: bool, took: Duration) -> telemetry::Textfile {
    let (plan, pending) = (&run.plan, run.pending);
    let mut figures = telemetry::Textfile::default();
    figures.gauge("reconcile_last_success_timestamp_seconds", "When reconcile last finished", telemetry::now_seconds());
    figures.gauge("reconcile_duration_seconds", "How long the last reconcile took", took.as_secs_f64());
    figures.gauge(
        "reconcile_dry_run",
        "1 when the last run recorded nothing (--dry-run)",
        f64::from(u8::from(dry_run)),
    );
    figures.gauge("reconcile_windows_judged", "Windows the last run judged", plan.counts.windows_judged as f64);
    // Every kind, 0 when none: a clean run is a graph at zero, not a gap.
    let every_kind = || schemas::AdjustmentKind::SYMBOLS.iter().map(|kind| (kind.to_string(), 0.0));
    let mut amounts: BTreeMap<String, f64> = every_kind().collect();
    let mut counts: BTreeMap<String, f64> = every_kind().collect();
    for adjustment in &plan.adjustments {
        *amounts.entry(adjustment.kind.to_string()).or_default() += adjustment.amount as f64;
        *counts.entry(adjustment.kind.to_string()).or_default() += 1.0;
    }
    let counts: Vec<(String, f64)> = counts.into_iter().collect();
    figures.gauges("reconcile_adjustments", "Adjustments the last run found, by kind", "kind", &counts);
    figures.gauges(
        "reconcile_adjustment_amount",
        "The sum of the amounts of the adjustments the last run found, by kind (OVERSHOOT: consumption beyond limits)",
        "kind",
        &amounts.into_iter().collect::<Vec<_>>(),
    );
    figures.gauge("reconcile_outbox_pending_events", "Entries waiting in the outbox after the run", pending as f64);
    figures
}

fn by_kind(adjustments: &[AdjustmentEvent]) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for a in adjustments {
        *counts.entry(a.kind.to_string()).or_insert(0) += 1;
    }
    counts
}

/// The run as `reconcile --json` prints it.
pub fn run_json(run: &Run, dry_run: bool) -> RunJson {
    let (plan, outbox) = (&run.plan, run.outbox.clone());
    RunJson {
        run_id: plan.run_id.clone(),
        as_of: plan.as_of,
        watermark: plan.watermark,
        dry_run,
        adjustments_written: if dry_run { 0 } else { plan.adjustments.len() as u64 },
        alerts_written: if dry_run { 0 } else { plan.alerts.len() as u64 },
        adjustments_by_kind: by_kind(&plan.adjustments),
        adjustments: plan.adjustments.iter().map(|a| Event::Adjustment(a.clone()).to_json()).collect(),
        read: plan.counts.clone(),
        coverage: plan.coverage.clone(),
        outbox,
        after_close: plan.after_close.clone(),
    }
}

/// The report for people: what was read, what was written, by kind, by tenant, the largest overshoots.
pub fn write_report(out: &mut dyn Write, run: &Run, dry_run: bool) -> std::io::Result<()> {
    let (plan, outbox, pending) = (&run.plan, run.outbox.as_ref(), run.pending);
    let c = &plan.counts;
    writeln!(out, "reconcile as of {} (run {}, ledger watermark {})", plan.as_of, plan.run_id, plan.watermark)?;
    writeln!(
        out,
        "read {} usage events, {} reservation events ({} reservations judged, {} valid commits), {} conflicting \
         copies; judged {} windows; {} adjustments recorded before",
        c.usage_events,
        c.reservation_events,
        c.reservations_judged,
        c.valid_commits,
        c.conflicting_copies,
        c.windows_judged,
        c.adjustments_before
    )?;
    write_coverage(out, &plan.coverage)?;
    if plan.is_clean() {
        writeln!(out, "clean: nothing to adjust")?;
    } else {
        let verb = if dry_run { "would write (dry run, nothing recorded)" } else { "wrote" };
        writeln!(out, "{verb} {} adjustments", plan.adjustments.len())?;
        print_by_kind(out, &plan.adjustments)?;
        print_by_tenant(out, &plan.adjustments)?;
        print_largest(out, &plan.adjustments)?;
    }
    print_leases_expired(out, &c.leases_expired)?;
    print_gauges_over_limit(out, &c.gauges_over_limit)?;
    print_allowed_open(out, &c.allowed_open)?;
    print_alerts(out, &c.alerts)?;
    print_after_close(out, &plan.after_close)?;
    match outbox {
        Some(report) if report.pending > 0 => writeln!(
            out,
            "outbox: {} published, {} still pending ({}: {}); the next run or `reconcile --brokers` sends them",
            report.published,
            report.pending,
            if report.awaiting_registry > 0 { "schema registry" } else { "broker" },
            report.last_error.as_deref().unwrap_or("no acknowledgement")
        ),
        Some(report) => writeln!(out, "outbox: {} published to Kafka, none pending", report.published),
        None if pending > 0 => writeln!(out, "outbox: {pending} entries wait for a run with --brokers"),
        None => Ok(()),
    }?;
    Ok(())
}

/// What the run read: everything and why, or the tenants touched since the last run as of the same instant.
fn write_coverage(out: &mut dyn Write, coverage: &reconcile::Coverage) -> std::io::Result<()> {
    use reconcile::{Coverage, FullReason};
    let why = match coverage {
        Coverage::Incremental { since, tenants } if tenants.is_empty() => {
            return writeln!(
                out,
                "nothing new since the last run as of this instant (watermark {since}): read nothing again"
            );
        }
        Coverage::Incremental { since, tenants } => {
            return writeln!(
                out,
                "read only the {} tenants touched since the last run as of this instant (watermark {since})",
                tenants.len()
            );
        }
        Coverage::Full { reason: FullReason::Asked } => "as asked (--full)",
        Coverage::Full { reason: FullReason::NoCheckpoint } => "no run recorded its plan before",
        Coverage::Full { reason: FullReason::OtherAsOf } => "the last run was as of another instant",
        Coverage::Full { reason: FullReason::OtherSettings } => "the last run had another --open-alert-after-s",
        Coverage::Full { reason: FullReason::AdjustmentsSince } => "adjustments were recorded since the last run",
        Coverage::Full { reason: FullReason::CloseSince } => "a period was closed since the last run",
        Coverage::Full { reason: FullReason::PlanDefaultSince } => "a plan default was recorded since the last run",
        Coverage::Full { reason: FullReason::ManyTenants } => "many tenants were touched since the last run",
    };
    writeln!(out, "read the whole ledger: {why}")
}

/// The alerts of the day before `--as-of` and those the run wrote: a line per window and policy for the thresholds
/// it reached, a line for each alert of another kind.
fn print_alerts(out: &mut dyn Write, alerts: &[schemas::AlertEvent]) -> std::io::Result<()> {
    use schemas::AlertKind;
    if alerts.is_empty() {
        return Ok(());
    }
    // (tenant, metric, policy, member) -> (thresholds reached, limit, most observed)
    type Reached = (Vec<i32>, Option<i64>, i64);
    let mut windows: BTreeMap<(&str, &str, &str, Option<&str>), Reached> = BTreeMap::new();
    let mut others = Vec::new();
    for a in alerts {
        let h = &a.header;
        let member = h.subject.as_deref().or(h.project.as_deref()).or(h.api_key.as_deref());
        let policy = a.policy_id.as_deref().unwrap_or("-");
        let of = member.map_or(String::new(), |m| format!(" ({m})"));
        let (tenant, metric) = (&h.tenant, &h.metric);
        match a.kind {
            AlertKind::THRESHOLD => {
                let row = windows.entry((tenant, metric, policy, member)).or_default();
                row.0.push(a.threshold_percent);
                row.1 = a.limit;
                row.2 = row.2.max(a.observed);
            }
            AlertKind::SUBJECT_SHARE => others.push(format!(
                "  {tenant}{of} {metric} {policy}: {} of the tenant's {}, more than {}% (SUBJECT_SHARE)",
                a.observed,
                a.limit.unwrap_or(0),
                a.threshold_percent
            )),
            AlertKind::OPEN_TOO_LONG => others.push(format!(
                "  {tenant}{of} {metric} reservation {}: held {} s, past {} s (OPEN_TOO_LONG)",
                a.request_id.as_deref().unwrap_or("-"),
                a.observed,
                a.limit.unwrap_or(0)
            )),
            AlertKind::DENY_RATE => others.push(format!(
                "  {tenant} {metric} {policy} v{}: denied {}% in its first hour, against {}% before (DENY_RATE)",
                a.policy_version.unwrap_or(0),
                a.observed,
                a.limit.unwrap_or(0)
            )),
        }
    }
    writeln!(out, "alerts in the day before --as-of and written by this run: {}", alerts.len())?;
    for ((tenant, metric, policy, member), (mut thresholds, limit, observed)) in windows {
        // The hook's and the run's of one window, in order.
        thresholds.sort_unstable();
        let percents: Vec<String> = thresholds.iter().map(|t| format!("{t}%")).collect();
        let of = member.map_or(String::new(), |m| format!(" ({m})"));
        let limit = limit.map_or(String::new(), |l| format!(" of {l}"));
        writeln!(out, "  {tenant}{of} {metric} {policy}: {} reached, {observed}{limit} used", percents.join(", "))?;
    }
    for line in others {
        writeln!(out, "{line}")?;
    }
    Ok(())
}

fn print_by_kind(out: &mut dyn Write, adjustments: &[AdjustmentEvent]) -> std::io::Result<()> {
    let mut rows: BTreeMap<AdjustmentKind, (u64, i64)> = BTreeMap::new();
    for a in adjustments {
        let row = rows.entry(a.kind).or_default();
        row.0 += 1;
        row.1 += a.amount;
    }
    let rows: Vec<Vec<String>> =
        rows.iter().map(|(kind, (n, amount))| vec![kind.to_string(), n.to_string(), amount.to_string()]).collect();
    writeln!(out)?;
    reports::text::write_table(out, &["kind", "adjustments", "amount"], &rows)
}

/// The leases that expired unreleased, per tenant, most first: workers that died or hung holding a slot.
fn print_leases_expired(out: &mut dyn Write, leases: &BTreeMap<String, u64>) -> std::io::Result<()> {
    if leases.is_empty() {
        return Ok(());
    }
    let mut rows: Vec<(&String, &u64)> = leases.iter().collect();
    rows.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let rows: Vec<Vec<String>> = rows.iter().map(|(tenant, n)| vec![tenant.to_string(), n.to_string()]).collect();
    writeln!(out)?;
    writeln!(out, "leases expired unreleased (workers that never released their slot):")?;
    reports::text::write_table(out, &["tenant", "leases"], &rows)
}

/// The windows of gauge quotas in which a tenant's level stood above the limit, most recent first: how long the hook
/// refused what each violation covers (a SHADOW gauge only said it would have).
fn print_gauges_over_limit(out: &mut dyn Write, over: &[reconcile::GaugeOverLimit]) -> std::io::Result<()> {
    if over.is_empty() {
        return Ok(());
    }
    let mut rows: Vec<&reconcile::GaugeOverLimit> = over.iter().collect();
    rows.sort_by(|a, b| b.window_start.cmp(&a.window_start).then_with(|| a.order().cmp(&b.order())));
    let hidden = rows.len().saturating_sub(GAUGE_WINDOWS_SHOWN);
    let rows: Vec<Vec<String>> = rows
        .iter()
        .take(GAUGE_WINDOWS_SHOWN)
        .map(|g| {
            vec![
                g.tenant.clone(),
                g.metric.clone(),
                format!("{} v{} ({}, {})", g.policy_id, g.version, g.enforcement, g.violation),
                format!("{} .. {}", g.window_start, g.window_end),
                g.limit.to_string(),
                g.peak.to_string(),
                duration(g.over_ms),
            ]
        })
        .collect();
    writeln!(out)?;
    writeln!(out, "gauges over their limit (time above the limit per window):")?;
    reports::text::write_table(out, &["tenant", "metric", "policy", "window", "limit", "peak", "over"], &rows)?;
    if hidden > 0 {
        writeln!(out, "... and {hidden} earlier windows (--json lists every one: read.gauges_over_limit)")?;
    }
    Ok(())
}

/// Milliseconds for people: `850ms`, `12s`, `3h 05m 00s`, `2d 04h 00m 00s`.
fn duration(ms: u64) -> String {
    if ms < 1_000 {
        return format!("{ms}ms");
    }
    let seconds = ms / 1_000;
    let (d, h, m, s) = (seconds / 86_400, seconds / 3_600 % 24, seconds / 60 % 60, seconds % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) => format!("{m}m {s:02}s"),
        (0, _, _) => format!("{h}h {m:02}m {s:02}s"),
        _ => format!("{d}d {h:02}h {m:02}m {s:02}s"),
    }
}

/// What hooks allowed FAIL_OPEN while their ledger refused writes, per tenant and metric: counted like any other
/// consumption, shown so that finance and the operator see how much passed unchecked by the ledger.
fn print_allowed_open(out: &mut dyn Write, open: &[ledger::AllowedOpen]) -> std::io::Result<()> {
    if open.is_empty() {
        return Ok(());
    }
    let rows: Vec<Vec<String>> = open
        .iter()
        .map(|o| vec![o.tenant.clone(), o.metric.clone(), o.decisions.to_string(), o.amount.to_string()])
        .collect();
    writeln!(out)?;
    writeln!(out, "allowed open (FAIL_OPEN: policies set to fail open, while the ledger refused writes):")?;
    reports::text::write_table(out, &["tenant", "metric", "decisions", "amount"], &rows)
}

/// One row per tenant, most adjustments first: how many of each kind.
fn print_by_tenant(out: &mut dyn Write, adjustments: &[AdjustmentEvent]) -> std::io::Result<()> {
    let kinds: Vec<AdjustmentKind> =
        by_kind(adjustments).keys().filter_map(|k| AdjustmentKind::from_symbol(k)).collect();
    let mut tenants: BTreeMap<&str, BTreeMap<AdjustmentKind, u64>> = BTreeMap::new();
    for a in adjustments {
        *tenants.entry(a.header.tenant.as_str()).or_default().entry(a.kind).or_default() += 1;
    }
    let mut rows: Vec<(u64, &str, Vec<String>)> = tenants
        .iter()
        .map(|(tenant, counts)| {
            let total: u64 = counts.values().sum();
            let mut row = vec![tenant.to_string(), total.to_string()];
            row.extend(kinds.iter().map(|k| counts.get(k).copied().unwrap_or(0).to_string()));
            (total, *tenant, row)
        })
        .collect();
    rows.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    let hidden = rows.len().saturating_sub(TENANTS_SHOWN);
    let rows: Vec<Vec<String>> = rows.into_iter().take(TENANTS_SHOWN).map(|(_, _, row)| row).collect();
    let kind_names: Vec<String> = kinds.iter().map(|k| k.to_string()).collect();
    let mut header = vec!["tenant", "adjustments"];
    header.extend(kind_names.iter().map(String::as_str));
    writeln!(out)?;
    reports::text::write_table(out, &header, &rows)?;
    if hidden > 0 {
        writeln!(out, "... and {hidden} more tenants (--json lists every adjustment)")?;
    }
    Ok(())
}

/// Policies and grants that came too late for a closed month's bill, one row each.
fn print_after_close(out: &mut dyn Write, found: &[reconcile::after_close::AfterClose]) -> std::io::Result<()> {
    if found.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "\n{} policies or grants were recorded after the close of a month they change; the closed bills stay as \
         they are, settle these by hand",
        found.len()
    )?;
    let rows: Vec<Vec<String>> = found
        .iter()
        .map(|a| {
            let version = a.version.map(|v| format!(" v{v}")).unwrap_or_default();
            let months = if a.from_period == a.to_period {
                a.from_period.to_string()
            } else {
                format!("{} .. {}", a.from_period, a.to_period)
            };
            vec![a.kind.to_string(), format!("{}{version}", a.id), a.tenant.clone(), a.metric.clone(), months]
        })
        .collect();
    reports::text::write_table(out, &["kind", "id", "tenant", "metric", "closed months"], &rows)
}

fn print_largest(out: &mut dyn Write, adjustments: &[AdjustmentEvent]) -> std::io::Result<()> {
    let mut over: Vec<&AdjustmentEvent> = adjustments
        .iter()
        .filter(|a| matches!(a.kind, AdjustmentKind::OVERSHOOT | AdjustmentKind::SHADOW_OVER_LIMIT))
        .collect();
    if over.is_empty() {
        return Ok(());
    }
    over.sort_by(|a, b| b.amount.cmp(&a.amount).then_with(|| a.adjustment_id.cmp(&b.adjustment_id)));
    let rows: Vec<Vec<String>> = over
        .iter()
        .take(LARGEST_SHOWN)
        .map(|a| {
            let window = match (a.window_start, a.window_end) {
                (Some(s), Some(e)) => format!("{s} .. {e}"),
                _ => String::new(),
            };
            let first = a.refs.first().map(String::as_str).unwrap_or("");
            vec![
                a.header.tenant.clone(),
                member_of_window(&a.header),
                a.header.metric.clone(),
                a.policy_id.clone().unwrap_or_default(),
                window,
                a.kind.to_string(),
                a.amount.to_string(),
                format!("{} (first: {first})", a.refs.len()),
            ]
        })
        .collect();
    writeln!(out, "\nlargest overshoots")?;
    reports::text::write_table(
        out,
        &["tenant", "member", "metric", "policy", "window", "kind", "amount", "events named"],
        &rows,
    )
}

/// The member of a window adjustment's scope, in words (`subject alice`, `project p-1`, `API key k-1`): its header
/// names that member alone; empty for a TENANT window and for the window of what names none.
fn member_of_window(header: &schemas::Header) -> String {
    match (&header.subject, &header.project, &header.api_key) {
        (Some(subject), _, _) => format!("subject {subject}"),
        (_, Some(project), _) => format!("project {project}"),
        (_, _, Some(api_key)) => format!("API key {api_key}"),
        _ => String::new(),
    }
}
