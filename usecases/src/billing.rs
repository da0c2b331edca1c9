//! A period's billing export (contract §5, §7) of one ledger, a directory of shards or a running cluster: open
//! periods computed at the watermark, closed ones read back from their stored rows, a close in every shard or in none
//! (every shard checked before any closes), and a set closed in some shards only refused, since its preview would mix
//! final rows and open ones; and its figures for monitoring.

use std::collections::BTreeMap;
use std::time::Duration;

use ledger::shards::ShardDir;
use ledger::{Ledger, Period};
use reports::billing::{self, ByProject};
use reports::export::{BillingExport, ShardExport};

use crate::cluster::{Ask, Cluster};
use crate::shard::ShardBill;
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
/// ([`BillingExport::union`]). A close first checks that every shard open can close the period ([`prepare`]): one
/// that cannot refuses the whole close, naming each shard and why, and nothing is closed. Then it closes the period in
/// every shard, one after the other: a shard that fails then (a disk full, the process killed) stops it naming the
/// shard; the shards closed before it stay closed, and the same close run again closes the rest (closing a closed
/// shard answers its stored export). Without a close, a period closed in some shards only (such a stopped close) is
/// refused: its preview would mix final rows and open ones.
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
    if close {
        let prepared = ledgers
            .iter()
            .map(|(shard, ledger)| crate::shard::prepare_close(ledger, Some(shard.partition), period))
            .collect::<Result<Vec<_>>>()?;
        refuse_unless_all_prepared(period, &prepared, |partition| format!("shard {partition}"))?;
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

/// Refuses a close of `period` unless every shard `prepared` it: the refusal names every shard that cannot close it
/// (`named`: how a shard is named, by partition) and why, and says that nothing was closed.
fn refuse_unless_all_prepared(
    period: Period,
    prepared: &[crate::shard::Prepared],
    named: impl Fn(u32) -> String,
) -> Result<()> {
    let refusals: Vec<String> = prepared
        .iter()
        .filter_map(|p| p.refused.as_ref().map(|why| format!("{}: {why}", named(p.partition.unwrap_or(0)))))
        .collect();
    if !refusals.is_empty() {
        refuse!(
            "period {period} closed in no shard: {} of {} shards cannot close it, and a set closes in every shard or \
             none: {}",
            refusals.len(),
            prepared.len(),
            refusals.join("; ")
        );
    }
    Ok(())
}

/// How long an owner may take to close its shards: a close catches up each shard's commit totals and computes its
/// month, as a local `--final` does, several shards one after the other (a read's two minutes, each of a few shards).
const CLOSE_TIMEOUT: Duration = Duration::from_secs(600);

/// The export of a running cluster: each shard's owner answers its shards' exports (`GET /v1/admin/billing`,
/// [`crate::shard::bill`]), and their union is the export, as a directory's is joined: never a bill missing a shard's
/// tenants. With `asked.close`, the period is closed in every shard or in none, in two phases over the same admin API:
/// each owner first says, for each shard it holds, whether it can close the period and at which watermark (`GET
/// /v1/admin/billing/prepare`, [`crate::shard::prepare_close`], storing nothing); a shard that cannot refuses the whole
/// close, naming it and why, and nothing is closed. Only then is each owner asked to close its shards at the
/// watermarks prepared (`POST /v1/admin/billing/close`, [`crate::shard::close_at`]). A failure in that second phase (an
/// owner dying mid-close, a shard that moved) leaves the shards closed before it closed: the same command run again
/// completes the close, since closing a closed shard answers its stored export.
pub fn of_cluster(cluster: &Cluster, asked: BillingAsked) -> Result<Billed> {
    let BillingAsked { period, close, by_project } = asked;
    let period_text = period.to_string();
    let answered = match close {
        false => {
            let mut query = vec![("period", period_text.as_str())];
            if by_project {
                query.push(("by_project", "true"));
            }
            cluster.ask_owners("/v1/admin/billing", &query)?
        }
        true => close_cluster(cluster, period, by_project)?,
    };
    let partitions = answered.shards.len();
    let parts: BTreeMap<u32, ShardBill> =
        answered.shards.keys().copied().zip(answered.parts::<ShardBill>("an export")?).collect();
    let closed: Vec<u32> = parts.iter().filter(|(_, s)| s.billing.closed).map(|(p, _)| *p).collect();
    if !closed.is_empty() && closed.len() < parts.len() {
        refuse!(
            "period {period} is closed in shards {closed:?} of {partitions} and open in the others: a close stopped \
             part way; run export billing --period {period} --final --cluster again to close it in every shard"
        );
    }
    let projects = match by_project {
        true => Some(ByProject::union(
            parts
                .iter()
                .map(|(p, s)| s.by_project().with_context(|| format!("shard {p}: no projects answered")))
                .collect::<Result<Vec<_>>>()?,
        )),
        false => None,
    };
    let export = BillingExport::union(period, parts.into_values().map(|s| s.billing.into_part(period)).collect());
    let state = match (close, closed.is_empty()) {
        (true, _) => "closed in every shard",
        (false, true) => "open: computed now, not final",
        (false, false) => "closed: its final export",
    };
    let note = format!(
        "period {period} is {state}, over the {partitions} shards of the cluster at {} ({} nodes), set watermark {}",
        cluster.brokers, answered.nodes, export.watermark
    );
    Ok(Billed { export, note, shard_notes: Vec::new(), projects, late_usage_recorded: 0 })
}

/// The two phases of a cluster's close ([`of_cluster`]): every shard prepared, else nothing closed; then each owner
/// closes its shards at their prepared watermarks and answers their stored exports.
fn close_cluster(cluster: &Cluster, period: Period, by_project: bool) -> Result<crate::cluster::Answered> {
    let period_text = period.to_string();
    let prepared = cluster.ask_owners("/v1/admin/billing/prepare", &[("period", &period_text)])?;
    let owners = prepared.owners.clone();
    let parts = prepared.parts::<crate::shard::Prepared>("a prepare")?;
    let named = |partition: u32| match owners.get(&partition) {
        Some(url) => format!("shard {partition} (owner {url})"),
        None => format!("shard {partition}"),
    };
    refuse_unless_all_prepared(period, &parts, named)?;
    let watermarks: BTreeMap<String, u64> =
        prepared.shards.keys().zip(&parts).map(|(partition, p)| (partition.to_string(), p.watermark)).collect();
    let body = serde_json::json!({"period": period_text, "watermarks": watermarks, "by_project": by_project});
    cluster.ask_owners_to("/v1/admin/billing/close", Ask::Post(&body, CLOSE_TIMEOUT)).with_context(|| {
        format!(
            "period {period}: every shard prepared its close, but the close stopped part way (the shards closed \
             before this failure stay closed): run the same command again to close the rest (closing a closed shard \
             answers its stored export)"
        )
    })
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
