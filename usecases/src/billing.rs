//! A period's billing export (contract §5, §7) of one ledger, a directory of shards or a running cluster: open
//! periods computed at the watermark, closed ones read back from their stored rows, a close run in every shard, and a
//! set closed in some shards only refused, since its preview would mix final rows and open ones; and its figures for
//! monitoring.

use std::collections::BTreeMap;
use std::time::Duration;

use ledger::shards::ShardDir;
use ledger::{Ledger, Period};
use reports::billing::{self, ByProject};
use reports::export::{BillingExport, ShardBilling, ShardExport};

use crate::cluster::Cluster;
use crate::{Context, Result, Store, refuse};

/// What a billing export is asked for.
#[derive(Debug, Clone, Copy)]
pub struct BillingAsked {
    /// The month billed.
    pub period: Period,
    /// Close it first (`--final`): the export is stored and never changes.
    pub close: bool,
    /// Its consumption split by project too (`--by project`).
    pub by_project: bool,
}

/// A period's export and what it says.
#[derive(Debug)]
pub struct Billed {
    /// The export.
    pub export: BillingExport,
    /// The period's state in words: open or closed, at which watermark, over how many shards.
    pub note: String,
    /// Each shard's own note, in partition order (a directory of shards only).
    pub shard_notes: Vec<String>,
    /// The consumption by project, when asked.
    pub projects: Option<ByProject>,
    /// LATE_USAGE adjustments a close recorded, over every shard.
    pub late_usage_recorded: usize,
}

/// The export of `asked.period` of `store`; with `asked.close`, after closing the period in it (in every shard).
pub fn export(store: &Store, asked: BillingAsked) -> Result<Billed> {
    match store {
        Store::File(path) => {
            // Opening for writing applies migrations (usage_totals) to a ledger written by an older binary.
            Ledger::open_read_only(path)?;
            let mut ledger = Ledger::open(path)?;
            let (export, note, late_usage_recorded) = if asked.close {
                let closed = crate::close::close(&mut ledger, asked.period)?;
                (closed.export, closed.note, closed.late_usage_recorded)
            } else {
                let (export, note) = reports::export::current(&ledger, asked.period)?;
                (export, note, 0)
            };
            let projects = asked.by_project.then(|| projects_of(&ledger, &export)).transpose()?;
            Ok(Billed { export, note, shard_notes: Vec::new(), projects, late_usage_recorded })
        }
        Store::Shards(shards) => of_shards(shards, asked),
    }
}

/// The export of a directory of shards: each shard's, as of a single ledger, then their union
/// ([`BillingExport::union`]). A close closes the period in every shard, one after the other: a shard that fails
/// stops it naming the shard; the shards closed before it stay closed, and the same close run again closes the rest
/// (closing a closed shard answers its stored export). Without a close, a period closed in some shards only (such a
/// stopped close) is refused: its preview would mix final rows and open ones.
fn of_shards(shards: &ShardDir, asked: BillingAsked) -> Result<Billed> {
    let BillingAsked { period, close, by_project } = asked;
    let mut ledgers = shards.open_all()?;
    let count = ledgers.len();
    let mut closed = Vec::new();
    for (shard, ledger) in &ledgers {
        if ledger.period_export(period)?.is_some() {
            closed.push(shard.partition);
        }
    }
    if !close && !closed.is_empty() && closed.len() < count {
        refuse!(
            "period {period} is closed in shards {closed:?} of {count} and open in the others: a close stopped part \
             way; run export billing --period {period} --final again to close it in every shard"
        );
    }
    let (mut parts, mut projects, mut shard_notes) = (Vec::with_capacity(count), Vec::new(), Vec::new());
    let mut late_usage_recorded = 0;
    for (index, (shard, ledger)) in ledgers.iter_mut().enumerate() {
        let answered = match close {
            true => crate::close::close(ledger, period).map(|c| (c.export, c.note, c.late_usage_recorded)),
            false => reports::export::current(ledger, period).map(|(e, n)| (e, n, 0)).map_err(Into::into),
        };
        let (export, note, late) = answered.with_context(|| {
            let done: Vec<u32> = (0..index as u32).collect();
            let rerun = match (close, done.is_empty()) {
                (true, false) => format!(
                    " (shards {done:?} are closed: run the same command again once this one can close; closing a \
                     closed shard changes nothing)"
                ),
                _ => String::new(),
            };
            format!("{shard} ({}){rerun}", ledger.path().display())
        })?;
        late_usage_recorded += late;
        shard_notes.push(format!("{shard}: {note}"));
        if by_project {
            projects.push(projects_of(ledger, &export).with_context(|| format!("{shard}"))?);
        }
        let plan_default_entries = ledger.plan_default_entries_through(export.watermark)?;
        parts.push(ShardExport { export, plan_default_entries });
    }
    let export = BillingExport::union(period, parts);
    let (w, all_closed) = (export.watermark, closed.len() == count);
    let note = match (close, all_closed) {
        (true, true) => format!("period {period} is closed in {count} shards, set watermark {w}"),
        (true, false) => format!("period {period} closed in {count} shards at set watermark {w}"),
        (false, true) => format!("period {period} is closed in {count} shards (set watermark {w}): its final export"),
        (false, false) => {
            format!("period {period} is open: computed at set watermark {w} over {count} shards, not final")
        }
    };
    let projects = by_project.then(|| ByProject::union(projects));
    Ok(Billed { export, note, shard_notes, projects, late_usage_recorded })
}

/// The consumption by project of `export`'s rows, read from the ledger they were computed from at their watermark (a
/// closed period's: its close's).
fn projects_of(ledger: &Ledger, export: &BillingExport) -> Result<ByProject> {
    billing::by_project(ledger, export.period, export.watermark, &export.rows)
        .with_context(|| format!("cannot split period {}'s consumption by project", export.period))
}

/// The export of a running cluster: each shard's owner answers its shards' exports (`GET /v1/admin/billing`,
/// [`crate::shard::bill`]), and their union is the export, as a directory's is joined: never a bill missing a shard's
/// tenants. A close runs where the shards are, not through a cluster read.
pub fn of_cluster(cluster: &Cluster, period: Period) -> Result<Billed> {
    let period_text = period.to_string();
    let answered = cluster.ask_owners("/v1/admin/billing", &[("period", &period_text)])?;
    let partitions = answered.shards.len();
    let parts: BTreeMap<u32, ShardBilling> =
        answered.shards.keys().copied().zip(answered.parts::<ShardBilling>("an export")?).collect();
    let closed: Vec<u32> = parts.iter().filter(|(_, s)| s.closed).map(|(p, _)| *p).collect();
    if !closed.is_empty() && closed.len() < parts.len() {
        refuse!(
            "period {period} is closed in shards {closed:?} of {partitions} and open in the others: a close stopped \
             part way; close it in every shard"
        );
    }
    let export = BillingExport::union(period, parts.into_values().map(|s| s.into_part(period)).collect());
    let state = if closed.is_empty() { "open: computed now, not final" } else { "closed: its final export" };
    let note = format!(
        "period {period} is {state}, over the {partitions} shards of the cluster at {} ({} nodes), set watermark {}",
        cluster.brokers, answered.nodes, export.watermark
    );
    Ok(Billed { export, note, shard_notes: Vec::new(), projects: None, late_usage_recorded: 0 })
}

/// An export's figures for the node exporter's textfile collector, by period: when it last succeeded, how long it took
/// (`took`), its rows and tenants, and whether it closed the period (`closed`).
pub fn figures(export: &BillingExport, closed: bool, took: Duration) -> telemetry::Textfile {
    let mut figures = telemetry::Textfile::default();
    let period = export.period.to_string();
    let of_period = |value: f64| [(period.clone(), value)];
    let success = of_period(telemetry::now_seconds());
    figures.gauges(
        "export_last_success_timestamp_seconds",
        "When the period's billing export last succeeded",
        "period",
        &success,
    );
    let took = of_period(took.as_secs_f64());
    figures.gauges("export_duration_seconds", "How long the export took", "period", &took);
    let rows = of_period(export.rows.len() as f64);
    figures.gauges("export_rows", "Rows of the export (tenant and metric)", "period", &rows);
    let tenants = export.rows.iter().map(|r| r.tenant.as_str()).collect::<std::collections::BTreeSet<_>>().len();
    figures.gauges("export_tenants", "Tenants billed in the export", "period", &of_period(tenants as f64));
    let closed = of_period(f64::from(u8::from(closed)));
    figures.gauges("export_final", "1 when the export closed the period (--final)", "period", &closed);
    figures
}
