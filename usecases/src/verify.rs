//! The hash chain checked (contract §4): a ledger's, with the heads it had (given, or published as checkpoints to
//! `quota.checkpoints`), or every shard's of a directory with the partition of each entry.

use ledger::shards::ShardVerifyReport;
use ledger::{ExpectedHead, Head, Ledger, VerifyReport};

use crate::{Context, Result, Store, refuse};

/// What a verify checks beside the chain.
#[derive(Debug, Default)]
pub struct VerifyAsked {
    /// Chain heads the ledger had: each must be a link of the chain with that hash.
    pub expect_heads: Vec<Head>,
    /// Kafka bootstrap servers and settings to read `quota.checkpoints` from: every checkpoint this ledger published is
    /// checked against the chain, and none published is itself a finding.
    pub checkpoints_from: Option<(String, Vec<(String, String)>)>,
    /// A head an earlier verify found to hold: only what was appended after it is walked.
    pub since: Option<Head>,
}

/// What a verify found.
#[derive(Debug)]
pub enum Verified {
    /// One ledger's chain, and warnings about checkpoints that could not be read.
    One {
        /// The chain's report.
        report: Box<VerifyReport>,
        /// Messages skipped, in words.
        warnings: Vec<String>,
    },
    /// Each shard's chain and partition, in partition order.
    Shards(Vec<ShardVerifyReport>),
}

/// Verifies `store`: one ledger against the heads asked, or every shard (heads check one chain: refused there).
pub fn verify(store: &Store, asked: &VerifyAsked) -> Result<Verified> {
    if let Store::Shards(shards) = store {
        if !asked.expect_heads.is_empty() || asked.checkpoints_from.is_some() || asked.since.is_some() {
            refuse!(
                "--since, --expect-head and --checkpoints-from check one chain: give them one shard's file with --ledger"
            );
        }
        let mut reports = Vec::new();
        for (shard, ledger) in shards.open_all_read_only()? {
            reports.push(ledger.verify_shard(shard)?);
        }
        return Ok(Verified::Shards(reports));
    }
    let ledger = Ledger::open_read_only(store.file("verify")?)?;
    let mut expected: Vec<ExpectedHead> =
        asked.expect_heads.iter().map(|head| ExpectedHead { head: *head, at: None }).collect();
    let (mut warnings, mut none_published) = (Vec::new(), None);
    if let Some((brokers, settings)) = &asked.checkpoints_from {
        let ledger_id = ledger.ledger_id()?;
        let found = kafka::checkpoints::read_checkpoints(brokers, settings, &ledger_id)
            .with_context(|| format!("cannot read the checkpoints of ledger {ledger_id}"))?;
        if found.unreadable > 0 {
            warnings
                .push(format!("{} messages under this ledger's key are not checkpoints; skipped", found.unreadable));
        }
        if found.checkpoints.is_empty() {
            none_published = Some(format!(
                "no checkpoint of ledger {ledger_id} on {} at {brokers} ({} of other ledgers): nothing outside the file \
                 vouches for its chain (a ledger that never published one, or whose id was changed)",
                kafka::checkpoints::CHECKPOINTS_TOPIC,
                found.others
            ));
        }
        for checkpoint in found.checkpoints {
            let Some(hash) = ledger::links::parse_hash(&checkpoint.head_hash) else {
                warnings
                    .push(format!("checkpoint at {} has no hash ({:?}); skipped", checkpoint.at, checkpoint.head_hash));
                continue;
            };
            expected.push(ExpectedHead { head: Head { seq: checkpoint.head_seq, hash }, at: Some(checkpoint.at) });
        }
    }
    let mut report = match &asked.since {
        Some(since) => ledger.verify_since(since, &expected)?,
        None => ledger.verify_against(&expected)?,
    };
    if let (None, Some(problem)) = (&report.first_bad_checkpoint, none_published) {
        report.first_bad_checkpoint =
            Some(ledger::BadCheckpoint { head_seq: 0, head_hash: String::new(), at: None, problem });
    }
    Ok(Verified::One { report: Box::new(report), warnings })
}

/// What a verify says in words: its findings, each a line for stderr naming what does not hold (the command then
/// exits 1), and the lines for stdout that say which chains hold.
#[derive(Debug, Default)]
pub struct VerifyWords {
    /// What does not hold.
    pub findings: Vec<String>,
    /// What holds: nothing of one ledger with a finding.
    pub holds: Vec<String>,
}

/// The words of one ledger's verify.
pub fn words_of_one(report: &VerifyReport) -> VerifyWords {
    let mut words = VerifyWords::default();
    if let Some(bad) = &report.first_bad {
        words.findings.push(format!("entry {}{} does not hold: {}", bad.seq, event_of(bad), bad.problem));
        words.findings.push(format!("{} entries before it hold", report.entries_checked));
    }
    if let Some(bad) = &report.first_bad_checkpoint {
        words.findings.push(match (&bad.at, bad.head_seq) {
            (_, 0) => bad.problem.clone(),
            (Some(at), _) => format!(
                "checkpoint {}:{} published at {at} does not hold: {}",
                bad.head_seq, bad.head_hash, bad.problem
            ),
            (None, _) => format!("head {}:{} does not hold: {}", bad.head_seq, bad.head_hash, bad.problem),
        });
    }
    if words.findings.is_empty() {
        let checked = match report.checkpoints_checked {
            0 => String::new(),
            n => format!(", and holds the {n} heads given or published"),
        };
        let walked = match report.walked_from {
            0 => String::new(),
            from => format!(" (walked after entry {from}, verified before)"),
        };
        words.holds.push(format!(
            "ok: {} entries, chain holds up to watermark {}{walked}; head {}:{}{checked}",
            report.entries_checked, report.watermark, report.head_seq, report.head_hash
        ));
    }
    words
}

/// The words of every shard's verify: its chain, and that every entry of a shard is of its partition (contract §9.4).
pub fn words_of_shards(reports: &[ShardVerifyReport]) -> VerifyWords {
    let mut words = VerifyWords::default();
    for report in reports {
        let shard = format!("shard {} of {} ({})", report.partition, report.partitions, report.path);
        if let Some(bad) = &report.chain.first_bad {
            words.findings.push(format!("{shard}: entry {}{} does not hold: {}", bad.seq, event_of(bad), bad.problem));
        }
        if let Some(bad) = &report.first_misplaced {
            words.findings.push(format!(
                "{shard}: entry {} (event_id {}) is of tenant {:?}, whose events belong to shard {} (docs/contract.md \
                 §9.4)",
                bad.seq, bad.event_id, bad.tenant, bad.belongs_to
            ));
        }
        if report.holds() {
            let chain = &report.chain;
            words.holds.push(format!(
                "ok: {shard}: {} entries, chain holds up to watermark {}, every entry of its partition; head {}:{}",
                chain.entries_checked, chain.watermark, chain.head_seq, chain.head_hash
            ));
        }
    }
    words
}

/// ` (event_id ID)` of a bad entry that has one.
fn event_of(bad: &ledger::BadEntry) -> String {
    if bad.event_id.is_empty() { String::new() } else { format!(" (event_id {})", bad.event_id) }
}
