//! `quarantine replay`: quarantined messages decoded again with the current catalog, after a fix (a schema added
//! to the catalog, a validation rule corrected). Those that now decode are appended under their original
//! coordinates; each quarantined message is replayed at most once (`quarantine_replays`).

use rusqlite::params_from_iter;
use schemas::EventType;
use serde::Serialize;

use crate::Ledger;
use crate::batch::{AppendOutcome, Batch, Incoming, Origin};
use crate::error::ReplayError;

/// Quarantined messages replayed per transaction (and held in memory at once): a replay of millions (a producer's
/// unknown schema for a day) holds the write lock for one chunk at a time, with [`crate::STEP_PAUSE`] between chunks
/// for other writers (`serve`). A replay stopped between chunks has recorded the chunks before; run again, it goes on
/// with the rest.
pub const REPLAYED_PER_TRANSACTION: usize = 10_000;

/// A quarantined message that still does not decode or validate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StillQuarantined {
    /// Its quarantine id.
    pub id: i64,
    /// Why it still fails, as a stable code (`DecodeError::code`).
    pub reason_code: String,
    /// Why, in words.
    pub reason: String,
}

/// What a replay did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReplayReport {
    /// Quarantined messages not replayed before, among those asked for.
    pub examined: u64,
    /// Of those, the ones recorded as new events.
    pub recorded: u64,
    /// The ones the ledger held already (same event_id and payload).
    pub duplicates: u64,
    /// The ones kept as conflicting duplicates.
    pub conflicts: u64,
    /// The ones that still do not decode or validate: they stay quarantined.
    pub still_quarantined: Vec<StillQuarantined>,
    /// The last ledger sequence number after the replay.
    pub watermark: u64,
}

/// A quarantine row not yet replayed.
struct Candidate {
    id: i64,
    origin: Origin,
    raw: Vec<u8>,
}

impl Ledger {
    /// Replays the quarantined messages with the given ids (all not yet replayed when `ids` is empty), in order of
    /// id, [`REPLAYED_PER_TRANSACTION`] per transaction. When any id is not in the quarantine, nothing is replayed
    /// (`ReplayError::NotQuarantined` names them); an id already replayed is skipped, so that a replay can be run
    /// again.
    /// `expected` says which record type a message's origin carries (a Kafka topic carries one, contract §2): `Ok(None)`
    /// for any, `Err` with why it cannot be told (the message then stays quarantined, reason code
    /// `unknown_topic`). A message of another type stays quarantined as `wrong_type`, as ingest found it.
    pub fn replay_quarantined(
        &mut self,
        ids: &[i64],
        expected: impl Fn(&Origin) -> Result<Option<EventType>, String>,
    ) -> Result<ReplayReport, ReplayError> {
        let unknown = self.not_quarantined(ids)?;
        if !unknown.is_empty() {
            return Err(ReplayError::NotQuarantined { ids: unknown });
        }
        let mut report = ReplayReport { watermark: self.status()?.watermark, ..ReplayReport::default() };
        let mut after = 0;
        loop {
            let candidates = self.replay_candidates(ids, after)?;
            let Some(last) = candidates.last() else { break };
            if after > 0 {
                std::thread::sleep(crate::STEP_PAUSE);
            }
            after = last.id;
            report.examined += candidates.len() as u64;
            self.replay_chunk(candidates, &expected, &mut report)?;
        }
        Ok(report)
    }

    /// Decodes one chunk of candidates again and appends those that now decode, in one transaction.
    fn replay_chunk(
        &mut self,
        candidates: Vec<Candidate>,
        expected: &impl Fn(&Origin) -> Result<Option<EventType>, String>,
        report: &mut ReplayReport,
    ) -> Result<(), ReplayError> {
        let mut batch = Batch::default();
        for candidate in candidates {
            let expected = match expected(&candidate.origin) {
                Ok(expected) => expected,
                Err(reason) => {
                    let id = candidate.id;
                    report.still_quarantined.push(StillQuarantined { id, reason_code: "unknown_topic".into(), reason });
                    continue;
                }
            };
            match self.catalog.decode_single_object(&candidate.raw, expected) {
                Ok(decoded) => {
                    batch.events.push(Incoming {
                        event: decoded.event,
                        origin: candidate.origin,
                        raw: Some(candidate.raw),
                    });
                    batch.replayed_from.push(candidate.id);
                }
                Err(error) => report.still_quarantined.push(StillQuarantined {
                    id: candidate.id,
                    reason_code: error.code().to_string(),
                    reason: error.to_string(),
                }),
            }
        }
        if batch.events.is_empty() {
            return Ok(());
        }
        let appended = self.append(&batch)?;
        for (id, outcome) in batch.replayed_from.iter().zip(&appended.outcomes) {
            match outcome {
                AppendOutcome::Recorded { .. } => report.recorded += 1,
                AppendOutcome::Duplicate { .. } => report.duplicates += 1,
                AppendOutcome::ConflictingDuplicate { .. } => report.conflicts += 1,
                AppendOutcome::Quarantined { reason_code } => report.still_quarantined.push(StillQuarantined {
                    id: *id,
                    reason_code: reason_code.to_string(),
                    reason: "it decodes, but its usage total would pass 2^63 - 1".into(),
                }),
            }
        }
        report.watermark = appended.watermark;
        Ok(())
    }

    /// The ids among `ids` that name no quarantined message, sorted, each once.
    fn not_quarantined(&self, ids: &[i64]) -> Result<Vec<i64>, ReplayError> {
        let mut statement = self.conn.prepare_cached("SELECT 1 FROM quarantine WHERE id = ?")?;
        let mut unknown = Vec::new();
        for id in ids {
            if !statement.exists([id])? {
                unknown.push(*id);
            }
        }
        unknown.sort_unstable();
        unknown.dedup();
        Ok(unknown)
    }

    /// The next chunk of quarantined messages not replayed yet, of ids after `after` (among `ids`, unless empty).
    fn replay_candidates(&self, ids: &[i64], after: i64) -> Result<Vec<Candidate>, ReplayError> {
        let filter = if ids.is_empty() {
            String::new()
        } else {
            let numbered: Vec<String> = (0..ids.len()).map(|n| format!("?{}", n + 3)).collect();
            format!("AND q.id IN ({})", numbered.join(", "))
        };
        let sql = format!(
            "SELECT q.id, q.origin, q.origin_stream, q.origin_partition, q.origin_offset, q.raw
             FROM quarantine q LEFT JOIN quarantine_replays r ON r.quarantine_id = q.id
             WHERE r.quarantine_id IS NULL AND q.id > ?1 {filter} ORDER BY q.id LIMIT ?2"
        );
        let mut statement = self.conn.prepare(&sql)?;
        let parameters = [after, REPLAYED_PER_TRANSACTION as i64].into_iter().chain(ids.iter().copied());
        let rows = statement.query_map(params_from_iter(parameters), |r| {
            let kind: String = r.get(1)?;
            Ok(Candidate {
                id: r.get(0)?,
                origin: Origin::from_columns(&kind, r.get(2)?, r.get(3)?, r.get(4)?),
                raw: r.get(5)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}
