//! What a server answers for each shard it holds, the parts a cluster read joins ([`crate::cluster`]): a period's
//! export, a shard's status and chain, a reconcile run where the shard is, and support's answers. Each is one ledger's
//! answer; the server adds the shard's `partition` and joins them.

use std::path::Path;

use ledger::{Ledger, Period};
use reports::audit::{render, tenant, why};
use schemas::Timestamp;
use serde::Serialize;

use crate::Result;

/// The export of `period` of `ledger`, the shard of `partition` (none for a ledger of every partition), as an open
/// period's preview or a closed one's stored rows ([`reports::export::ShardBilling`]).
pub fn bill(ledger: &Ledger, partition: Option<u32>, period: Period) -> Result<reports::export::ShardBilling> {
    Ok(reports::export::ShardBilling::of(ledger, partition, period)?)
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
