//! What a server answers for each shard it holds, the parts a cluster read joins ([`crate::cluster`]): a period's
//! export, a shard's status and chain, a reconcile run where the shard is, and support's answers. Each is one ledger's
//! answer; the server adds the shard's `partition` and joins them.

use std::path::Path;

use ledger::{Ledger, Period};
use reports::audit::{render, tenant, why};
use reports::billing::ByProject;
use schemas::Timestamp;
use serde::{Deserialize, Serialize};

use crate::Result;

/// One shard's export of a period as a server answers it (`GET /v1/admin/billing`, `POST /v1/admin/billing/close`):
/// its [`reports::export::ShardBilling`], and the consumption of its rows by project when asked (`by_project`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShardBill {
    /// The shard's export.
    #[serde(flatten)]
    pub billing: reports::export::ShardBilling,
    /// Its rows' consumption by project, when asked ([`reports::billing::ByProject`]), a line per (tenant, metric,
    /// project) in export order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projects: Option<Vec<ProjectConsumption>>,
}

/// A row's consumption of one project (`project` none: the consumption naming no project).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectConsumption {
    /// The row's tenant.
    pub tenant: String,
    /// The row's metric.
    pub metric: String,
    /// The project; none for the consumption naming none.
    pub project: Option<String>,
    /// Its consumption.
    pub consumption: i64,
}

impl ShardBill {
    /// Its consumption by project as a [`ByProject`], when it was asked for.
    pub fn by_project(&self) -> Option<ByProject> {
        let mut by = ByProject::default();
        for line in self.projects.as_ref()? {
            let key = (line.tenant.clone(), line.metric.clone());
            by.0.entry(key).or_default().push((line.project.clone(), line.consumption));
        }
        Some(by)
    }
}

/// The export of `period` of `ledger`, the shard of `partition` (none for a ledger of every partition), as an open
/// period's preview or a closed one's stored rows ([`reports::export::ShardBilling`]), split by project when
/// `by_project`.
pub fn bill(ledger: &Ledger, partition: Option<u32>, period: Period, by_project: bool) -> Result<ShardBill> {
    let billing = reports::export::ShardBilling::of(ledger, partition, period)?;
    let projects = match by_project {
        true => Some(projects_of(ledger, period, &billing)?),
        false => None,
    };
    Ok(ShardBill { billing, projects })
}

/// The lines of [`ShardBill::projects`] of `billing`, computed from `ledger` at its watermark.
fn projects_of(
    ledger: &Ledger,
    period: Period,
    billing: &reports::export::ShardBilling,
) -> Result<Vec<ProjectConsumption>> {
    let split = reports::billing::by_project(ledger, period, billing.watermark, &billing.rows)?;
    Ok(split
        .0
        .into_iter()
        .flat_map(|((tenant, metric), projects)| {
            projects.into_iter().map(move |(project, consumption)| ProjectConsumption {
                tenant: tenant.clone(),
                metric: metric.clone(),
                project,
                consumption,
            })
        })
        .collect())
}

/// A shard's answer to the first phase of a close of a set of shards (`GET /v1/admin/billing/prepare`): whether it
/// can close the period now, and the watermark it would close at; nothing is stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prepared {
    /// The shard's partition; none for a ledger of every partition.
    pub partition: Option<u32>,
    /// Whether the period is closed in it already (a close stopped part way): closing it again answers its export.
    pub closed: bool,
    /// The watermark it would close at now (its close's, when closed).
    pub watermark: u64,
    /// Why it cannot close the period, when it cannot ([`crate::close::check`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// Whether `ledger`, the shard of `partition`, can close `period` now, and at which watermark ([`Prepared`]).
pub fn prepare_close(ledger: &Ledger, partition: Option<u32>, period: Period) -> Result<Prepared> {
    if let Some(closed) = ledger.period_export(period)? {
        return Ok(Prepared { partition, closed: true, watermark: closed.close.watermark, refused: None });
    }
    let watermark = ledger.watermark()?;
    let refused = crate::close::check(ledger, period).err().map(|e| ledger::causes(&e));
    Ok(Prepared { partition, closed: false, watermark, refused })
}

/// The second phase of a close of a set of shards (`POST /v1/admin/billing/close`): closes `period` in `ledger`, the
/// shard of `partition`, prepared at `prepared` ([`prepare_close`]), and answers its stored export. A shard closed
/// already answers its stored export (a close run again after one stopped part way). A shard whose watermark is below
/// the prepared one is not the copy that was prepared (it moved to a node whose copy is behind, or was restored):
/// refused, for the command to be run again. The close itself runs at the shard's watermark when it closes, which is
/// the prepared one unless entries arrived since (the hook's decisions, ingest's usage and the late usage the close
/// records for the months before): those are the period's entries as of the close, as a local close has them.
pub fn close_at(
    ledger: &mut Ledger,
    partition: Option<u32>,
    period: Period,
    prepared: u64,
    by_project: bool,
) -> Result<ShardBill> {
    if ledger.period_export(period)?.is_none() {
        let watermark = ledger.watermark()?;
        if watermark < prepared {
            crate::refuse!(
                "period {period} not closed: the shard is at watermark {watermark}, below the {prepared} it was \
                 prepared at (it is not the copy that was prepared: it moved or was restored); run the close again"
            );
        }
        crate::close::close(ledger, period)?;
    }
    bill(ledger, partition, period, by_project)
}

/// A shard's status: a shard's own (partition, plan defaults), else a ledger of every partition's.
pub fn status(ledger: &Ledger) -> Result<serde_json::Value> {
    Ok(match ledger.shard()? {
        Some(shard) => serde_json::to_value(ledger.shard_status(shard)?)?,
        None => serde_json::to_value(ledger.status()?)?,
    })
}

/// A shard's chain and the partition of its entries; a ledger of every partition, its chain.
pub fn verify(ledger: &Ledger) -> Result<serde_json::Value> {
    Ok(match ledger.shard()? {
        Some(shard) => serde_json::to_value(ledger.verify_shard(shard)?)?,
        None => serde_json::to_value(ledger.verify_against(&[])?)?,
    })
}

/// One shard's answer to `audit why`.
#[derive(Debug, Clone, Serialize)]
pub struct WhyPart {
    /// The answer, when the shard holds the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<why::Why>,
    /// The answer in words, when the shard holds the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub words: Option<String>,
    /// The nearest request ids the shard holds, when it does not hold the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nearest: Option<Vec<String>>,
}

/// `audit why REQUEST_ID` in `ledger`.
pub fn why(ledger: &Ledger, request_id: &str) -> Result<WhyPart> {
    Ok(match why::why(ledger, request_id)? {
        Ok(answer) => WhyPart { words: Some(render::why(&answer)), why: Some(answer), nearest: None },
        Err(unknown) => WhyPart { why: None, words: None, nearest: Some(unknown.nearest) },
    })
}

/// One shard's answer to `audit tenant`.
#[derive(Debug, Clone, Serialize)]
pub struct TimelinePart {
    /// The tenant's timeline in the range (empty when the shard holds no event of the tenant at all).
    pub timeline: tenant::Timeline,
    /// The timeline in words, when the shard holds the tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub words: Option<String>,
    /// The nearest tenants the shard holds, when it holds no event of the tenant at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nearest: Option<Vec<String>>,
}

/// `audit tenant TENANT --from --to` in `ledger`.
pub fn timeline(ledger: &Ledger, tenant: &str, from: Timestamp, to: Timestamp) -> Result<TimelinePart> {
    Ok(match tenant::timeline(ledger, tenant, from, to)? {
        Ok(timeline) => TimelinePart { words: Some(render::timeline(&timeline)), timeline, nearest: None },
        Err(unknown) => TimelinePart { timeline: unknown.timeline, words: None, nearest: Some(unknown.nearest) },
    })
}

/// One shard's reconcile run where it is (`POST /v1/admin/reconcile`).
#[derive(Debug, Serialize)]
pub struct ReconcilePart {
    /// The run, as `reconcile --json` prints it.
    pub run: crate::run::RunJson,
    /// Its report in words.
    pub words: String,
    /// Whether it found nothing to adjust.
    pub clean: bool,
}

/// A reconcile of the shard at `path` for its server, as a directory's shards are each reconciled, its adjustments
/// published with `publish` when given (else they wait in its outbox). What an operator should know beside the report
/// (another process publishes the outbox) goes to the server's log.
pub fn reconcile(path: &Path, settings: &crate::run::RunSettings) -> Result<ReconcilePart> {
    let run = crate::run::of_ledger(path, settings, &mut |_| {})?;
    for note in &run.notes {
        tracing::warn!(shard = %path.display(), "reconcile: {note}");
    }
    let mut words = Vec::new();
    crate::run::write_report(&mut words, &run, settings.dry_run)?;
    Ok(ReconcilePart {
        run: crate::run::run_json(&run, settings.dry_run),
        words: String::from_utf8_lossy(&words).into_owned(),
        clean: run.plan.is_clean(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger() -> (tempfile::TempDir, Ledger) {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::open(dir.path().join("shard.db")).unwrap();
        (dir, ledger)
    }

    // Proves the first phase stores nothing and says why a shard cannot close (a month not over), and that the second
    // refuses a shard below its prepared watermark, closing nothing, then closes at it and answers the same export when
    // asked again, the prepare then answering the shard closed.
    #[test]
    fn a_shard_prepares_then_closes_at_its_watermark() {
        let (_dir, mut ledger) = ledger();
        let future: Period = "2099-12".parse().unwrap();
        let refused = prepare_close(&ledger, Some(2), future).unwrap();
        assert!(refused.refused.as_deref().is_some_and(|why| why.contains("not over")), "{refused:?}");
        let october: Period = "2026-10".parse().unwrap();
        let prepared = prepare_close(&ledger, Some(2), october).unwrap();
        let watermark = ledger.watermark().unwrap();
        assert_eq!(prepared, Prepared { partition: Some(2), closed: false, watermark, refused: None });
        assert!(ledger.period_export(october).unwrap().is_none(), "a prepare stores nothing");
        let behind = close_at(&mut ledger, Some(2), october, watermark + 1, false).unwrap_err();
        assert!(ledger::causes(&behind).contains("below the"), "{}", ledger::causes(&behind));
        assert!(ledger.period_export(october).unwrap().is_none(), "a refused close closes nothing");
        let closed = close_at(&mut ledger, Some(2), october, watermark, true).unwrap();
        assert!(closed.billing.closed && closed.projects.is_some(), "{closed:?}");
        let again = close_at(&mut ledger, Some(2), october, watermark, true).unwrap();
        assert_eq!(again.billing, closed.billing, "closing a closed shard answers its stored export");
        assert!(prepare_close(&ledger, Some(2), october).unwrap().closed);
    }

    // Proves a shard's bill with its projects reads back as sent (the flattened export and the split), and its split
    // becomes the by-project breakdown the command joins.
    #[test]
    fn a_shard_bill_with_projects_reads_back() {
        let billing = reports::export::ShardBilling {
            partition: Some(1),
            closed: false,
            watermark: 9,
            plan_default_entries: 0,
            gaps: String::new(),
            rows: Vec::new(),
        };
        let line = |project: Option<&str>, consumption| ProjectConsumption {
            tenant: "org-1".into(),
            metric: "tokens".into(),
            project: project.map(String::from),
            consumption,
        };
        let bill = ShardBill { billing, projects: Some(vec![line(Some("alpha"), 5), line(None, 2)]) };
        let back: ShardBill = serde_json::from_value(serde_json::to_value(&bill).unwrap()).unwrap();
        assert_eq!((&back.billing, &back.projects), (&bill.billing, &bill.projects));
        let by = back.by_project().unwrap();
        assert_eq!(by.of("org-1", "tokens"), [(Some("alpha".to_string()), 5), (None, 2)]);
    }
}
