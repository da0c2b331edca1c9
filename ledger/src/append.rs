//! `Ledger::append`: one batch, one transaction.

use rusqlite::{CachedStatement, OptionalExtension, Transaction, TransactionBehavior, params};
use schemas::{Catalog, Event, EventType};

use crate::batch::*;
use crate::chain::{self, ChainedFields, GENESIS, Hash};
use crate::error::AppendError;
use crate::key_filter::KeyFilter;
use crate::status::{Totals, read_totals};
use crate::usage_totals::UsageTotals;
use crate::{Ledger, now_micros};
use crate::{corrections, dedup, details};

/// The end of the chain: the last entry's sequence number and hash.
struct Tip {
    seq: u64,
    hash: Hash,
}

/// Counts of what an append wrote, checked against what the database holds after it.
#[derive(Debug, Default, PartialEq, Eq)]
struct Written {
    entries: u64,
    duplicates: u64,
    quarantined: u64,
}

/// What an append does with an event whose event_id a recorded event with another payload holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnConflict {
    /// Keeps it as a conflicting duplicate, for audit: what arrives from producers is never dropped.
    Keep,
    /// Refuses the whole batch, writing nothing.
    Refuse,
}

impl Ledger {
    /// Records a batch in one transaction: its events (each recorded, duplicate or conflicting duplicate), its
    /// rejected messages (quarantined) and the offsets it covers. Either all of it is recorded or none.
    pub fn append(&mut self, batch: &Batch) -> Result<AppendReport, AppendError> {
        self.append_with(batch, OnConflict::Keep)
    }

    /// Records a batch as [`Ledger::append`] does, unless an event of it has the event_id of a recorded event with
    /// another payload: then nothing of the batch is recorded, not even the conflicting copy `append` would keep,
    /// and [`AppendError::Conflicting`] names the event and the entry. For a writer whose refused change must leave
    /// nothing behind (the control plane: a refused change records nothing, contract §7); the refusal is judged in
    /// the append's own transaction, so a writer racing this one in another process cannot slip between a check
    /// and the write.
    pub fn append_unless_conflicting(&mut self, batch: &Batch) -> Result<AppendReport, AppendError> {
        self.append_with(batch, OnConflict::Refuse)
    }

    fn append_with(&mut self, batch: &Batch, on_conflict: OnConflict) -> Result<AppendReport, AppendError> {
        // Before the write: the batch is well-formed.
        assert!(
            batch.replayed_from.is_empty() || batch.replayed_from.len() == batch.events.len(),
            "a replay names the quarantine id of every event"
        );
        for incoming in &batch.events {
            schemas::validate(&incoming.event).map_err(|source| AppendError::InvalidEvent {
                event_id: incoming.event.event_id().to_string(),
                source,
            })?;
        }
        let recorded_at = now_micros();
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let before = read_totals(&tx)?;
        let mut tip = read_tip(&tx)?;
        assert_eq!(tip.seq, before.watermark, "the last batch's watermark is the last entry");
        if let Some(filter) = self.key_filter.as_mut() {
            filter.catch_up(&tx, tip.seq)?;
        }
        let ids_before = max_ids(&tx)?;
        store_offsets(&tx, &batch.offsets)?;
        if let Some(progress) = &batch.file_progress {
            store_file_progress(&tx, progress, recorded_at)?;
        }
        store_forwarded(&tx, &batch.forwarded, recorded_at)?;
        let mut outcomes = Vec::with_capacity(batch.events.len());
        let mut inserts = Inserts::new(&tx, &self.detail_insert_sql)?;
        let mut totals = UsageTotals::default();
        // Quarantine rows added, and messages the quarantine held already.
        let (mut quarantined, mut already_quarantined) = (0, 0);
        let mut count_quarantined = |added: bool| match added {
            true => quarantined += 1,
            false => already_quarantined += 1,
        };
        for incoming in &batch.events {
            let placed = append_event(
                &tx,
                &mut inserts,
                self.catalog,
                self.key_filter.as_mut(),
                &mut tip,
                &mut totals,
                incoming,
                recorded_at,
            )?;
            let outcome = match placed {
                Placed::Outcome(outcome) => outcome,
                Placed::TotalOverflow(reason) => {
                    let rejected = Rejected {
                        origin: incoming.origin.clone(),
                        raw: raw_of(self.catalog, incoming),
                        reason_code: TOTAL_OVERFLOW.to_string(),
                        reason,
                    };
                    count_quarantined(quarantine(&tx, &rejected, recorded_at)?);
                    AppendOutcome::Quarantined { reason_code: TOTAL_OVERFLOW }
                }
                Placed::Refused(refusal) => {
                    if on_conflict == OnConflict::Refuse {
                        // As a conflicting copy: the control plane's refused correction leaves nothing behind.
                        return Err(AppendError::CorrectionRefused {
                            event_id: incoming.event.event_id().to_string(),
                            refusal: Box::new(refusal),
                        });
                    }
                    let rejected = Rejected {
                        origin: incoming.origin.clone(),
                        raw: raw_of(self.catalog, incoming),
                        reason_code: refusal.code().to_string(),
                        reason: refusal.to_string(),
                    };
                    count_quarantined(quarantine(&tx, &rejected, recorded_at)?);
                    AppendOutcome::Quarantined { reason_code: refusal.code() }
                }
            };
            if let (OnConflict::Refuse, AppendOutcome::ConflictingDuplicate { of, .. }) = (on_conflict, &outcome) {
                // Returning drops the transaction uncommitted: SQLite rolls back all of the batch. The key filter
                // may keep the event's key, a false positive that costs one probe later.
                return Err(AppendError::Conflicting { event_id: incoming.event.event_id().to_string(), of: *of });
            }
            outcomes.push(outcome);
        }
        drop(inserts);
        for rejected in &batch.rejected {
            count_quarantined(quarantine(&tx, rejected, recorded_at)?);
        }
        if !batch.replayed_from.is_empty() {
            // The link this append ends with covers its replays by its number (`links.rs`).
            let link = crate::links::next_seq(&tx)?;
            record_replays(&tx, &batch.replayed_from, &outcomes, recorded_at, link)?;
        }
        totals.write(&tx)?;
        if batch.outbox {
            crate::outbox::enqueue(&tx, &outcomes)?;
        }
        let report = AppendReport { outcomes, quarantined, already_quarantined, watermark: tip.seq };
        dedup::merge_if_due(&tx, before.watermark, report.watermark)?;
        let after = before.after(&report);
        insert_batch_row(&tx, &after, recorded_at)?;
        // After the write, read back: the entries, duplicates and quarantined rows are exactly the batch's.
        let expected = Written {
            entries: (report.recorded() + report.conflicts()) as u64,
            duplicates: report.duplicates() as u64,
            quarantined: report.quarantined,
        };
        let found = read_written(&tx, before.watermark, ids_before)?;
        assert_eq!(found, expected, "the ledger holds exactly what this batch wrote");
        assert_eq!(read_tip(&tx)?.seq, after.watermark, "the chain ends at the new watermark");
        // Last of what the append writes: the link over its batch row, duplicates, quarantine, replays and offsets.
        crate::links::seal(&tx, crate::links::LinkKind::Append, !batch.offsets.is_empty())?;
        if let Some(hook) = self.append_hook.as_mut() {
            hook.after_append(&tx, after.watermark)?;
        }
        tx.commit()?;
        if let Some(filter) = self.key_filter.as_mut() {
            filter.set_through(report.watermark);
        }
        self.checkpoint_if_asked();
        Ok(report)
    }
}

fn read_tip(tx: &Transaction<'_>) -> rusqlite::Result<Tip> {
    let tip = tx
        .prepare_cached("SELECT seq, entry_hash FROM entries ORDER BY seq DESC LIMIT 1")?
        .query_row([], |r| Ok(Tip { seq: r.get::<_, i64>(0)? as u64, hash: r.get(1)? }))
        .optional()?;
    Ok(tip.unwrap_or(Tip { seq: 0, hash: GENESIS }))
}

/// The last id of `duplicates` and of `quarantine`.
fn max_ids(tx: &Transaction<'_>) -> rusqlite::Result<(i64, i64)> {
    tx.prepare_cached(
        "SELECT (SELECT COALESCE(MAX(id), 0) FROM duplicates), (SELECT COALESCE(MAX(id), 0) FROM quarantine)",
    )?
    .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))
}

fn read_written(tx: &Transaction<'_>, watermark_before: u64, ids_before: (i64, i64)) -> rusqlite::Result<Written> {
    let count =
        |sql: &str, after: i64| tx.prepare_cached(sql)?.query_row([after], |r| r.get::<_, i64>(0).map(|n| n as u64));
    Ok(Written {
        entries: count("SELECT COUNT(*) FROM entries WHERE seq > ?", watermark_before as i64)?,
        duplicates: count("SELECT COUNT(*) FROM duplicates WHERE id > ?", ids_before.0)?,
        quarantined: count("SELECT COUNT(*) FROM quarantine WHERE id > ?", ids_before.1)?,
    })
}

fn store_offsets(tx: &Transaction<'_>, offsets: &[SourceOffset]) -> Result<(), AppendError> {
    for offset in offsets {
        let stored: Option<i64> = tx
            .prepare_cached("SELECT next_offset FROM offsets WHERE topic = ? AND partition = ?")?
            .query_row(params![offset.topic, offset.partition], |r| r.get(0))
            .optional()?;
        if let Some(stored) = stored.filter(|s| *s > offset.next_offset) {
            return Err(AppendError::OffsetRegression {
                topic: offset.topic.clone(),
                partition: offset.partition,
                stored,
                batch: offset.next_offset,
            });
        }
        tx.prepare_cached(
            "INSERT INTO offsets (topic, partition, next_offset) VALUES (?1, ?2, ?3)
             ON CONFLICT (topic, partition) DO UPDATE SET next_offset = excluded.next_offset",
        )?
        .execute(params![offset.topic, offset.partition, offset.next_offset])?;
    }
    Ok(())
}

fn store_forwarded(tx: &Transaction<'_>, forwarded: &[Forwarded], forwarded_at: i64) -> rusqlite::Result<()> {
    for f in forwarded {
        tx.prepare_cached(
            "INSERT INTO forwarded (topic, partition, offset, event_id, tenant, to_partition, forwarded_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?
        .execute(params![
            f.topic,
            f.partition,
            f.offset,
            f.event_id,
            f.tenant,
            f.to_partition,
            forwarded_at
        ])?;
    }
    Ok(())
}

fn store_file_progress(tx: &Transaction<'_>, progress: &FileProgress, updated_at: i64) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT INTO file_progress (sync_marker, path, records, digest, updated_at) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (sync_marker) DO UPDATE
         SET path = excluded.path, records = excluded.records, digest = excluded.digest, updated_at = excluded.updated_at",
    )?
    .execute(params![&progress.sync_marker[..], progress.path, progress.records as i64, &progress.digest[..], updated_at])?;
    Ok(())
}

/// The inserts every event of a batch runs, taken from the statement cache once per batch: the cache finds a
/// statement by hashing its SQL, which cost as much as binding the entry's twenty values.
struct Inserts<'tx> {
    entry: CachedStatement<'tx>,
    key: CachedStatement<'tx>,
    request_key: CachedStatement<'tx>,
    /// By position in `EventType::ALL`, each taken at its type's first event.
    details: Vec<Option<CachedStatement<'tx>>>,
    detail_sql: &'tx [String],
}

impl<'tx> Inserts<'tx> {
    fn new(tx: &'tx Transaction<'_>, detail_sql: &'tx [String]) -> rusqlite::Result<Inserts<'tx>> {
        Ok(Inserts {
            entry: tx.prepare_cached(INSERT_ENTRY)?,
            key: tx.prepare_cached(&dedup::INSERT_EVENT_KEY)?,
            request_key: tx.prepare_cached(&dedup::INSERT_REQUEST_KEY)?,
            details: detail_sql.iter().map(|_| None).collect(),
            detail_sql,
        })
    }

    fn details(
        &mut self,
        tx: &'tx Transaction<'_>,
        event_type: EventType,
    ) -> rusqlite::Result<&mut CachedStatement<'tx>> {
        let index = EventType::ALL.iter().position(|t| *t == event_type).expect("every type is in ALL");
        if self.details[index].is_none() {
            self.details[index] = Some(tx.prepare_cached(&self.detail_sql[index])?);
        }
        Ok(self.details[index].as_mut().expect("taken just above"))
    }
}

const INSERT_ENTRY: &str =
    "INSERT INTO entries (seq, event_id, event_type, status, duplicate_of, tenant, subject, metric,
         source, occurred_at, origin, origin_stream, origin_partition, origin_offset, recorded_at, payload_fingerprint,
         payload, raw, payload_hash, entry_hash, project, api_key)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22)";

/// What became of one event of a batch: an outcome, or the reason a usage event must be quarantined instead.
enum Placed {
    Outcome(AppendOutcome),
    /// Its usage total would pass 2^63 - 1: nothing of it is written.
    TotalOverflow(String),
    /// A correction that cannot apply to the event it names: nothing of it is written.
    Refused(rules::correction::Refusal),
}

// One argument more than clippy's limit: each is a part of the append this event joins.
#[allow(clippy::too_many_arguments)]
fn append_event<'tx, 'b>(
    tx: &'tx Transaction<'_>,
    inserts: &mut Inserts<'tx>,
    catalog: &Catalog,
    key_filter: Option<&mut KeyFilter>,
    tip: &mut Tip,
    totals: &mut UsageTotals<'b>,
    incoming: &'b Incoming,
    recorded_at: i64,
) -> rusqlite::Result<Placed> {
    let event = &incoming.event;
    let event_type = event.event_type();
    let payload = catalog.encode_body(event);
    let payload_hash = chain::sha256(&payload);
    let key = dedup::event_key(event.event_id());
    // The filter has seen every entry up to the tip (and this batch's so far): a key it never saw is new.
    let existing = match key_filter.as_deref() {
        Some(filter) if !filter.may_hold(key) => Vec::new(),
        _ => dedup::entries_of_key(tx, event.event_id(), key)?,
    };
    let fingerprint = catalog.current(event_type).fingerprint;
    for (of, hash, stored_fingerprint) in &existing {
        if same_payload(tx, catalog, (*of, hash, *stored_fingerprint), fingerprint, &payload_hash)? {
            insert_duplicate(tx, *of, &incoming.origin, recorded_at)?;
            return Ok(Placed::Outcome(AppendOutcome::Duplicate { of: *of }));
        }
    }
    let duplicate_of = existing.first().map(|(seq, ..)| *seq);
    // Usage that counts (not a copy of any kind) joins its total, or is quarantined if the total cannot hold it.
    if let (Event::Usage(usage), None) = (event, duplicate_of)
        && let Err(reason) = totals.count(tx, usage)?
    {
        return Ok(Placed::TotalOverflow(reason));
    }
    // A correction that counts is judged against its original and the corrections before it, in this transaction.
    let correction = match (event, duplicate_of) {
        (Event::Correction(correction), None) => match corrections::judge_in(tx, correction)? {
            Ok(judged) => Some((correction, judged)),
            Err(refusal) => return Ok(Placed::Refused(refusal)),
        },
        _ => None,
    };
    let raw = incoming.raw.as_deref().filter(|raw| !is_single_object_of(raw, fingerprint, &payload));
    let (origin, origin_stream, origin_partition, origin_offset) = incoming.origin.columns();
    let seq = tip.seq + 1;
    let header = event.header();
    let fields = ChainedFields {
        seq,
        event_id: &header.event_id,
        event_type: event_type.name(),
        status: if duplicate_of.is_some() { "conflicting_duplicate" } else { "recorded" },
        duplicate_of,
        origin,
        origin_stream,
        origin_partition,
        origin_offset,
        recorded_at,
        payload_fingerprint: fingerprint as i64,
        payload_hash: &payload_hash,
        raw,
    };
    let entry_hash = chain::entry_hash(&tip.hash, &fields);
    inserts.entry.execute(params![
        seq as i64,
        fields.event_id,
        fields.event_type,
        fields.status,
        duplicate_of.map(|s| s as i64),
        header.tenant,
        header.subject,
        header.metric,
        header.source,
        header.occurred_at.micros(),
        origin,
        origin_stream,
        origin_partition,
        origin_offset,
        recorded_at,
        fields.payload_fingerprint,
        payload,
        raw,
        &payload_hash[..],
        &entry_hash[..],
        header.project,
        header.api_key,
    ])?;
    let mut values = vec![rusqlite::types::Value::Integer(seq as i64)];
    values.extend(details::values(event));
    inserts.details(tx, event_type)?.execute(rusqlite::params_from_iter(values))?;
    inserts.key.execute(params![key, seq as i64])?;
    if let Event::Decision(decision) = event {
        inserts.request_key.execute(params![dedup::request_key(&decision.request_id), seq as i64])?;
    }
    if let Some((correction, judged)) = &correction {
        corrections::record(tx, seq, correction, judged)?;
    }
    if let Some(filter) = key_filter {
        filter.insert(key);
    }
    *tip = Tip { seq, hash: entry_hash };
    Ok(Placed::Outcome(match duplicate_of {
        None => AppendOutcome::Recorded { seq },
        Some(of) => AppendOutcome::ConflictingDuplicate { seq, of },
    }))
}

/// Whether an entry already holding the event_id has the payload `payload_hash` is the hash of. An entry recorded
/// under the current schema compares by its stored hash; one recorded under an older version of its type's schema
/// (before a field was added) is decoded, resolved to the current schema and encoded again first, so that a copy
/// delivered again after the upgrade (an outbox entry still pending, a topic replayed) is the exact duplicate it is,
/// not a conflicting one. Rare: only a hit on an existing event_id whose entry is that old reads its payload.
fn same_payload(
    tx: &Transaction<'_>,
    catalog: &Catalog,
    (seq, stored_hash, stored_fingerprint): (u64, &[u8], u64),
    current_fingerprint: u64,
    payload_hash: &[u8],
) -> rusqlite::Result<bool> {
    if stored_fingerprint == current_fingerprint || stored_hash == payload_hash {
        return Ok(stored_hash == payload_hash);
    }
    let payload: Vec<u8> =
        tx.prepare_cached("SELECT payload FROM entries WHERE seq = ?")?.query_row([seq as i64], |r| r.get(0))?;
    // A payload that no longer decodes compares as different: a conflicting copy is kept, nothing is lost.
    Ok(catalog
        .decode_payload(stored_fingerprint, &payload)
        .is_ok_and(|event| chain::sha256(&catalog.encode_body(&event))[..] == *payload_hash))
}

/// The bytes an event is quarantined with: as received, or, from a writer of ours, its single-object encoding (what
/// `quarantine replay` decodes).
fn raw_of(catalog: &Catalog, incoming: &Incoming) -> Vec<u8> {
    incoming.raw.clone().unwrap_or_else(|| catalog.encode_single_object(&incoming.event))
}

/// Whether `raw` is exactly the single-object encoding of `payload` under the current schema.
fn is_single_object_of(raw: &[u8], fingerprint: u64, payload: &[u8]) -> bool {
    raw.len() == payload.len() + schemas::catalog::SINGLE_OBJECT_HEADER_BYTES
        && raw[..2] == schemas::catalog::SINGLE_OBJECT_MAGIC
        && raw[2..10] == fingerprint.to_le_bytes()
        && &raw[10..] == payload
}

fn insert_duplicate(tx: &Transaction<'_>, of: u64, origin: &Origin, received_at: i64) -> rusqlite::Result<()> {
    let (origin, stream, partition, offset) = origin.columns();
    tx.prepare_cached(
        "INSERT INTO duplicates (duplicate_of, origin, origin_stream, origin_partition, origin_offset, received_at)
         VALUES (?, ?, ?, ?, ?, ?)",
    )?
    .execute(params![of as i64, origin, stream, partition, offset, received_at])?;
    Ok(())
}

/// Quarantines a rejected message, unless the quarantine holds it already: the same bytes from the same place (a file
/// ingested again). Answers whether it added a row.
fn quarantine(tx: &Transaction<'_>, rejected: &Rejected, quarantined_at: i64) -> rusqlite::Result<bool> {
    let (origin, stream, partition, offset) = rejected.origin.columns();
    let held = tx
        .prepare_cached(
            "SELECT 1 FROM quarantine WHERE origin_stream IS ?2 AND origin_offset IS ?4 AND origin = ?1
               AND origin_partition IS ?3 AND raw = ?5",
        )?
        .exists(params![origin, stream, partition, offset, rejected.raw])?;
    if held {
        return Ok(false);
    }
    tx.prepare_cached(
        "INSERT INTO quarantine (origin, origin_stream, origin_partition, origin_offset, raw, reason_code, reason,
             quarantined_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
    )?
    .execute(params![
        origin,
        stream,
        partition,
        offset,
        rejected.raw,
        rejected.reason_code,
        rejected.reason,
        quarantined_at
    ])?;
    Ok(true)
}

fn record_replays(
    tx: &Transaction<'_>,
    replayed_from: &[i64],
    outcomes: &[AppendOutcome],
    replayed_at: i64,
    link: u64,
) -> rusqlite::Result<()> {
    for (quarantine_id, outcome) in replayed_from.iter().zip(outcomes) {
        let (name, seq) = match *outcome {
            AppendOutcome::Recorded { seq } => ("recorded", seq),
            AppendOutcome::Duplicate { of } => ("duplicate", of),
            AppendOutcome::ConflictingDuplicate { seq, .. } => ("conflicting_duplicate", seq),
            // Still not recordable: it stays in the quarantine, pending (its bytes and place are those of its row).
            AppendOutcome::Quarantined { .. } => continue,
        };
        tx.prepare_cached(
            "INSERT INTO quarantine_replays (quarantine_id, replayed_at, outcome, seq, link) VALUES (?, ?, ?, ?, ?)",
        )?
        .execute(params![quarantine_id, replayed_at, name, seq as i64, link as i64])?;
    }
    Ok(())
}

fn insert_batch_row(tx: &Transaction<'_>, totals: &Totals, committed_at: i64) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT INTO batches (committed_at, watermark, events_recorded_total, duplicates_total, conflicts_total,
             quarantined_total)
         VALUES (?, ?, ?, ?, ?, ?)",
    )?
    .execute(params![
        committed_at,
        totals.watermark as i64,
        totals.events_recorded as i64,
        totals.duplicates as i64,
        totals.conflicts as i64,
        totals.quarantined as i64
    ])?;
    Ok(())
}
