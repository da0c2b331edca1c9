//! `export billing --period YYYY-MM --format csv|parquet|jsonl [--final] [--out PATH] [--by project]` (contract §5,
//! §7).
//!
//! An open period is computed at the ledger's current watermark. `--final` closes the period and stores its
//! rows in the ledger in the same transaction; a closed period is re-exported from those rows, byte for byte,
//! whatever arrived since.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use ledger::shards::ShardDir;
use ledger::{Ledger, Period, ProcessLock};
use reports::billing::{self, ByProject, UsageSource};
use reports::export::{BillingExport, Format, ShardExport};
use schemas::{AdjustmentEvent, AdjustmentKind, Timestamp};

#[derive(Debug, Subcommand)]
pub enum ExportCommand {
    /// Billable usage of a month, one row per (tenant, metric).
    Billing(BillingArgs),
}

#[derive(Debug, Args)]
pub struct BillingArgs {
    /// The billing period, a month in UTC: YYYY-MM.
    #[arg(long, value_parser = parse_period)]
    period: Period,
    /// File format.
    #[arg(long, value_enum)]
    format: FormatArg,
    /// Close the period: the export is stored in the ledger and never changes; later events for it become
    /// LATE_USAGE adjustments carried into the next period closed.
    #[arg(long = "final")]
    final_: bool,
    /// Write to this file (replaced whole, atomically) instead of stdout.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Write the export's figures to this file for the node exporter's textfile collector (Prometheus text format):
    /// the last success, its duration, rows, tenants, whether the period is closed.
    #[arg(long, value_name = "FILE")]
    metrics_file: Option<PathBuf>,
    /// Read the running cluster at these brokers instead of local ledgers: each shard's owner, found in the routing
    /// catalog, is asked over HTTP (`GET /v1/admin/billing`) and the shards' exports are joined. An owner that does
    /// not answer fails the command naming its shard. Not with --final: a close runs where the shards are.
    #[arg(long, value_name = "BROKERS", conflicts_with = "final_")]
    cluster: Option<String>,
    /// With --cluster: the token to ask the nodes with, one for every tenant (`tenants = ["*"]`).
    #[arg(long, env = "QUOTA_LEDGER_TOKEN", hide_env_values = true, requires = "cluster")]
    token: Option<String>,
    #[command(flatten)]
    ca_file: super::trust_args::CaFileArg,
    /// Follow each row with its consumption per project: a row per project its consumption names, then one with
    /// `project` empty for the consumption naming none, each with tenant, metric, period, consumption, watermark and
    /// gaps only, in a column `project` added last (empty in the bill's rows). The bill's rows are unchanged. Not with
    /// --cluster: the nodes answer bills, not their events.
    #[arg(long, value_enum, value_name = "SCOPE", conflicts_with = "cluster")]
    by: Option<ByArg>,
}

/// What `--by` splits each row's consumption by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ByArg {
    Project,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum FormatArg {
    Csv,
    Parquet,
    Jsonl,
}

fn parse_period(text: &str) -> Result<Period, String> {
    text.parse().map_err(|e: ledger::PeriodParseError| e.to_string())
}

pub fn run(store: &super::Store, command: ExportCommand) -> anyhow::Result<ExitCode> {
    let ExportCommand::Billing(args) = command;
    let started = std::time::Instant::now();
    // A close cannot be undone: an --out that cannot be written stops the command before anything is closed (failing
    // after the close, it would leave the user taking the period for still open).
    if let Some(path) = &args.out {
        check_writable(path)?;
    }
    let by_project = args.by == Some(ByArg::Project);
    let (export, note, projects) = match (&args.cluster, store) {
        (Some(brokers), _) => {
            let cluster = super::cluster::Cluster::of(brokers, args.token.as_deref(), &args.ca_file)?;
            let (export, note) = of_cluster(&cluster, args.period)?;
            (export, note, None)
        }
        (None, super::Store::File(ledger_path)) => {
            // Opening for writing applies migrations (usage_totals) to a ledger written by an older binary.
            Ledger::open_read_only(ledger_path)?;
            let mut ledger = Ledger::open(ledger_path)?;
            let (export, note) = if args.final_ {
                close(&mut ledger, args.period)?
            } else {
                reports::export::current(&ledger, args.period)?
            };
            let projects = by_project.then(|| projects_of(&ledger, &export)).transpose()?;
            (export, note, projects)
        }
        (None, super::Store::Shards(shards)) => of_shards(shards, args.period, args.final_, by_project)?,
    };
    let format = match args.format {
        FormatArg::Csv => Format::Csv,
        FormatArg::Parquet => Format::Parquet,
        FormatArg::Jsonl => Format::Jsonl,
    };
    let bytes = match &projects {
        Some(projects) => export.to_bytes_by_project(format, projects)?,
        None => export.to_bytes(format)?,
    };
    match &args.out {
        // Past the check above (a full disk, say): a --final run has closed the period, which must be said.
        Some(path) => write_atomically(path, &bytes).with_context(|| match args.final_ {
            true => format!("{note}, but its export was not written: run the same command again to write it"),
            false => "the export was not written".to_string(),
        })?,
        None => super::stdout().write_all(&bytes)?,
    }
    eprintln!("{note}: {} rows", export.rows.len());
    if let Some(path) = &args.metrics_file {
        let mut figures = telemetry::Textfile::default();
        let period = export.period.to_string();
        let of_period = |value: f64| [(period.clone(), value)];
        figures.gauges(
            "export_last_success_timestamp_seconds",
            "When the period's billing export last succeeded",
            "period",
            &of_period(telemetry::now_seconds()),
        );
        let took = started.elapsed().as_secs_f64();
        figures.gauges("export_duration_seconds", "How long the export took", "period", &of_period(took));
        figures.gauges(
            "export_rows",
            "Rows of the export (tenant and metric)",
            "period",
            &of_period(export.rows.len() as f64),
        );
        let tenants = export.rows.iter().map(|r| r.tenant.as_str()).collect::<std::collections::BTreeSet<_>>().len();
        figures.gauges("export_tenants", "Tenants billed in the export", "period", &of_period(tenants as f64));
        let closed = f64::from(u8::from(args.final_));
        figures.gauges("export_final", "1 when the export closed the period (--final)", "period", &of_period(closed));
        figures.write(path).with_context(|| format!("cannot write the metrics file {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The export of a directory of shards: each shard's, as of a single ledger, then their union
/// ([`BillingExport::union`]). `--final` closes the period in every shard, one after the other: a shard that fails
/// stops the command naming it; the shards closed before it stay closed, and the same command run again closes the
/// rest (closing a closed shard answers its stored export). Without `--final`, a period closed in some shards only
/// (such a stopped close) is refused: its preview would mix final rows and open ones.
fn of_shards(
    shards: &ShardDir,
    period: Period,
    final_: bool,
    by_project: bool,
) -> anyhow::Result<(BillingExport, String, Option<ByProject>)> {
    let mut ledgers = shards.open_all()?;
    let count = ledgers.len();
    let mut closed = Vec::new();
    for (shard, ledger) in &ledgers {
        if ledger.period_export(period)?.is_some() {
            closed.push(shard.partition);
        }
    }
    if !final_ && !closed.is_empty() && closed.len() < count {
        anyhow::bail!(
            "period {period} is closed in shards {closed:?} of {count} and open in the others: a close stopped part \
             way; run export billing --period {period} --final again to close it in every shard"
        );
    }
    let mut parts = Vec::with_capacity(count);
    let mut projects = Vec::new();
    for (index, (shard, ledger)) in ledgers.iter_mut().enumerate() {
        let answered = if final_ { close(ledger, period) } else { Ok(reports::export::current(ledger, period)?) };
        let (export, note) = answered.with_context(|| {
            let done: Vec<u32> = (0..index as u32).collect();
            let rerun = match (final_, done.is_empty()) {
                (true, false) => format!(
                    " (shards {done:?} are closed: run the same command again once this one can close; closing a \
                     closed shard changes nothing)"
                ),
                _ => String::new(),
            };
            format!("{shard} ({}){rerun}", ledger.path().display())
        })?;
        eprintln!("{shard}: {note}");
        if by_project {
            projects.push(projects_of(ledger, &export).with_context(|| format!("{shard}"))?);
        }
        let plan_default_entries = ledger.plan_default_entries_through(export.watermark)?;
        parts.push(ShardExport { export, plan_default_entries });
    }
    let export = BillingExport::union(period, parts);
    let (w, all_closed) = (export.watermark, closed.len() == count);
    let note = match (final_, all_closed) {
        (true, true) => format!("period {period} is closed in {count} shards, set watermark {w}"),
        (true, false) => format!("period {period} closed in {count} shards at set watermark {w}"),
        (false, true) => format!("period {period} is closed in {count} shards (set watermark {w}): its final export"),
        (false, false) => {
            format!("period {period} is open: computed at set watermark {w} over {count} shards, not final")
        }
    };
    Ok((export, note, by_project.then(|| ByProject::union(projects))))
}

/// `--by project`: the consumption by project of `export`'s rows, read from the ledger they were computed from at
/// their watermark (a closed period's: its close's).
fn projects_of(ledger: &Ledger, export: &BillingExport) -> anyhow::Result<ByProject> {
    billing::by_project(ledger, export.period, export.watermark, &export.rows)
        .with_context(|| format!("cannot split period {}'s consumption by project", export.period))
}

/// The export of a running cluster (`--cluster`): each shard's owner answers its shards' exports (`GET
/// /v1/admin/billing`, [`super::cluster::ask_owners`]), and their union is the export, as `--data` joins a
/// directory's: never a bill missing a shard's tenants.
fn of_cluster(cluster: &super::cluster::Cluster<'_>, period: Period) -> anyhow::Result<(BillingExport, String)> {
    let (brokers, period_text) = (cluster.brokers, period.to_string());
    let answered = super::cluster::ask_owners(cluster, "/v1/admin/billing", &[("period", &period_text)])?;
    let partitions = answered.shards.len();
    let mut parts: std::collections::BTreeMap<u32, reports::export::ShardBilling> = std::collections::BTreeMap::new();
    for (partition, part) in answered.shards {
        let part = serde_json::from_value(part)
            .with_context(|| format!("shard {partition}: its owner answered an export this version cannot read"))?;
        parts.insert(partition, part);
    }
    let closed: Vec<u32> = parts.iter().filter(|(_, s)| s.closed).map(|(p, _)| *p).collect();
    if !closed.is_empty() && closed.len() < parts.len() {
        anyhow::bail!(
            "period {period} is closed in shards {closed:?} of {partitions} and open in the others: a close stopped \
             part way; close it in every shard"
        );
    }
    let export = BillingExport::union(period, parts.into_values().map(|s| s.into_part(period)).collect());
    let state = if closed.is_empty() { "open: computed now, not final" } else { "closed: its final export" };
    let note = format!(
        "period {period} is {state}, over the {partitions} shards of the cluster at {brokers} ({} nodes), set \
         watermark {}",
        answered.nodes, export.watermark
    );
    Ok((export, note))
}

/// `--final`: closes the period (or finds it closed) and answers its stored export.
pub(crate) fn close(ledger: &mut Ledger, period: Period) -> anyhow::Result<(BillingExport, String)> {
    let first = ledger.period_closes()?.is_empty();
    if ledger.period_export(period)?.is_none() {
        // A close refused records nothing, the late usage included.
        ledger.refuse_close(period).with_context(|| format!("cannot close period {period}"))?;
        refuse_unended_cycles(ledger, period)?;
        record_late_usage(ledger, period)?;
        // Most of the commit totals' catch-up before the close's own transaction, in short ones: the hook and ingest
        // wait for the close meanwhile.
        ledger.catch_up_commit_totals_in_steps()?;
    }
    let closed = ledger
        .close_period_with_export(period, |ledger, snapshot| {
            Ok(billing::compute(ledger, period, snapshot, UsageSource::Totals)?)
        })
        .with_context(|| format!("cannot close period {period}"))?;
    let export = reports::export::stored_or_recomputed(ledger, &closed)?;
    let mut note = format!(
        "period {period} closed at watermark {} ({}){}",
        closed.close.watermark,
        closed.close.closed_at,
        reports::export::with_first_close(ledger, period)?
    );
    // The ledger's first close closes every month before it (contract §9.5): say which of them held consumption.
    let earlier = if first { ledger.periods_with_consumption_before(period)? } else { Vec::new() };
    if !earlier.is_empty() {
        let months: Vec<String> = earlier.iter().map(Period::to_string).collect();
        note.push_str(&format!(
            " (the ledger's first close, which closed every month before it too: {} with consumption)",
            months.join(", ")
        ));
    }
    Ok((export, note))
}

/// Refuses to close `period` while a billing cycle it bills (PolicyEvent v11) has not ended: a cycle ending at local
/// midnight on the 1st in New York ends 4 or 5 hours after the UTC month, and its bill must hold all of it.
fn refuse_unended_cycles(ledger: &Ledger, period: Period) -> anyhow::Result<()> {
    let policies = ledger.policies()?;
    let keys: std::collections::BTreeSet<(String, String)> = policies
        .iter()
        .filter(|p| p.window == schemas::Window::BILLING_CYCLE)
        .map(|p| (p.header.tenant.clone(), p.header.metric.clone()))
        .collect();
    if let Some((tenant, policy_id, ends)) = billing::unended_cycle(&policies, keys, period, Timestamp::now()) {
        anyhow::bail!(
            "cannot close period {period}: the billing cycle of policy {policy_id} (tenant {tenant}) it bills ends at \
             {ends}; a period closes once every cycle ending in it has ended"
        );
    }
    Ok(())
}

/// Records the late usage of the months closed before, as `reconcile` would (its LATE_USAGE adjustments only, the
/// same concerns and ids): a close carries every late event recorded before it, whether or not a reconcile ran since
/// it arrived (not only those a reconcile had recorded, leaving the rest to wait for the next close). The reconcile
/// lock keeps it from running beside a reconcile, whose plan it would make stale.
fn record_late_usage(ledger: &mut Ledger, period: Period) -> anyhow::Result<()> {
    // A first close has no closed month before it whose usage could be late.
    if ledger.period_closes()?.is_empty() {
        return Ok(());
    }
    let _lock = ProcessLock::acquire(ledger.path(), "reconcile").map_err(|error| match error {
        held @ ledger::LockError::Held { .. } => anyhow::Error::new(held).context(
            "--final records late usage as reconcile does, under its lock, which another process holds (a reconcile, \
             or another --final): close after it ends",
        ),
        other => other.into(),
    })?;
    let plan = reconcile::plan(ledger, Timestamp::now(), &mut |_| {}).context("cannot judge late usage")?;
    // The run says it was the close's: `close-2026-10-reconcile-<as_of>-w<watermark>`.
    let run_id = format!("close-{period}-{}", plan.run_id);
    let late: Vec<_> = plan
        .adjustments
        .into_iter()
        .filter(|a| a.kind == AdjustmentKind::LATE_USAGE)
        .map(|a| AdjustmentEvent { run_id: run_id.clone(), ..a })
        .collect();
    if late.is_empty() {
        return Ok(());
    }
    let recorded = late.len();
    // The close records late usage only: the alerts are the nightly run's.
    let plan = reconcile::Plan { run_id, adjustments: late, alerts: Vec::new(), ..plan };
    reconcile::apply(ledger, &plan).context("cannot record late usage")?;
    eprintln!("late usage of closed periods: {recorded} LATE_USAGE adjustments recorded for this close to carry");
    Ok(())
}

/// Whether a file can be written at `path`, asked before anything that cannot be undone.
fn check_writable(path: &Path) -> anyhow::Result<()> {
    temporary_beside(path).map(drop)
}

/// Writes `bytes` to a temporary file beside `path`, then renames it: a reader never sees half an export. The file
/// gets the mode `File::create` would give it (an existing file's, else 0666 less the umask), not tempfile's 0600
/// that hid exports from the group reading them. Errors name `path`, never the temporary file.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let cannot = |why: String| anyhow::anyhow!("cannot write {}: {why}", path.display());
    let mut file = temporary_beside(path)?;
    file.write_all(bytes).map_err(|e| cannot(e.to_string()))?;
    file.as_file().sync_all().map_err(|e| cannot(e.to_string()))?;
    file.persist(path).map_err(|e| cannot(e.error.to_string()))?;
    Ok(())
}

/// A new temporary file in `path`'s directory, with the mode `File::create` would give `path`; or why `path`
/// cannot be written, in words that name it (never the temporary file).
fn temporary_beside(path: &Path) -> anyhow::Result<tempfile::NamedTempFile> {
    let cannot = |why: String| anyhow::anyhow!("cannot write {}: {why}", path.display());
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if path.is_dir() {
        return Err(cannot("it is a directory".into()));
    }
    if path.as_os_str().as_encoded_bytes().ends_with(b"/") {
        return Err(cannot("a file name cannot end with /".into()));
    }
    match std::fs::metadata(dir) {
        Ok(found) if found.is_dir() => {}
        Ok(_) => return Err(cannot(format!("{} is not a directory", dir.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(cannot(format!("directory {} does not exist", dir.display())));
        }
        Err(e) => return Err(cannot(format!("{}: {e}", dir.display()))),
    }
    let existing = std::fs::metadata(path).ok().map(|found| found.permissions());
    // Named after the export, so that one a kill left behind says what it was (`.november.csv.partial-XXXXXX`).
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let file = tempfile::Builder::new()
        .prefix(&format!(".{name}.partial-"))
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666))
        .tempfile_in(dir)
        // tempfile's error names its temporary file: its kind alone says why.
        .map_err(|e| {
            cannot(format!("cannot create a file in {}: {}", dir.display(), std::io::Error::from(e.kind())))
        })?;
    if let Some(permissions) = existing {
        file.as_file().set_permissions(permissions).map_err(|e| cannot(e.to_string()))?;
    }
    Ok(file)
}
