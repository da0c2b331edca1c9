//! Usage corrections in the append: each CorrectionEvent is judged ([`rules::correction::judge`]) against the
//! original it names and the corrections of it recorded before, inside the transaction that records it, and what it
//! changes is kept in `usage_corrections` beside its entry. Every usage sum (billing, reconcile, audit, `GET
//! /v1/usage`) adds those deltas, at the original's event time, to the originals' quantities.

use rules::correction::{Original, Refusal, judge};
use rusqlite::{OptionalExtension, Transaction, params};
use schemas::{CorrectionAction, CorrectionEvent, EventType, Timestamp};

use crate::{Period, dedup};

/// What an accepted correction changes: the original's entry and where its usage counts, before and after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Judged {
    original_seq: u64,
    subject: Option<String>,
    project: Option<String>,
    api_key: Option<String>,
    occurred_at: Timestamp,
    before: i64,
    after: i64,
}

/// The counted entry of `event_id` as a correction's judgement reads it, with its members and event time.
struct Found {
    seq: u64,
    event_type: String,
    tenant: String,
    subject: Option<String>,
    project: Option<String>,
    api_key: Option<String>,
    metric: String,
    occurred_at: Timestamp,
}

/// Judges `correction` against what `tx` holds: what it changes, or why it cannot apply.
pub(crate) fn judge_in(
    tx: &Transaction<'_>,
    correction: &CorrectionEvent,
) -> rusqlite::Result<Result<Judged, Refusal>> {
    let id = &correction.original_event_id;
    let found = counted_entry(tx, id)?;
    let (counted, voided_by) = match &found {
        Some(found) if found.event_type == EventType::UsageEvent.name() => counted_now(tx, found.seq)?,
        _ => (0, None),
    };
    let original = found.as_ref().map(|f| Original {
        event_type: EventType::from_name(&f.event_type).expect("an entry's event_type is a record type's name"),
        tenant: &f.tenant,
        metric: &f.metric,
        counted,
        voided_by: voided_by.as_deref(),
    });
    let owner = (correction.header.tenant.as_str(), correction.header.metric.as_str());
    let delta = match judge(original.as_ref(), owner, correction.action, correction.quantity, id) {
        Ok(delta) => delta,
        Err(refusal) => return Ok(Err(refusal)),
    };
    let found = found.expect("a correction judged applicable has its original");
    Ok(Ok(Judged {
        original_seq: found.seq,
        subject: found.subject,
        project: found.project,
        api_key: found.api_key,
        occurred_at: found.occurred_at,
        before: counted,
        after: counted + delta,
    }))
}

/// Records what the correction entry `seq` of `correction` changes.
pub(crate) fn record(
    tx: &Transaction<'_>,
    seq: u64,
    correction: &CorrectionEvent,
    judged: &Judged,
) -> rusqlite::Result<()> {
    let header = &correction.header;
    tx.prepare_cached(
        "INSERT INTO usage_corrections (seq, original_seq, tenant, subject, project, api_key, metric, occurred_at,
             period, quantity_before, quantity_after, delta)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
    )?
    .execute(params![
        seq as i64,
        judged.original_seq as i64,
        header.tenant,
        judged.subject,
        judged.project,
        judged.api_key,
        header.metric,
        judged.occurred_at.micros(),
        Period::containing(judged.occurred_at).to_string(),
        judged.before,
        judged.after,
        judged.after - judged.before,
    ])?;
    Ok(())
}

/// The counted entry (the first, recorded one) of `event_id`, when the ledger holds one.
fn counted_entry(tx: &Transaction<'_>, event_id: &str) -> rusqlite::Result<Option<Found>> {
    let entries = dedup::entries_of_key(tx, event_id, dedup::event_key(event_id))?;
    let Some((seq, ..)) = entries.first() else {
        return Ok(None);
    };
    tx.prepare_cached(
        "SELECT seq, event_type, tenant, subject, project, api_key, metric, occurred_at FROM entries
         WHERE seq = ? AND status = 'recorded'",
    )?
    .query_row([*seq as i64], |r| {
        Ok(Found {
            seq: r.get::<_, i64>(0)? as u64,
            event_type: r.get(1)?,
            tenant: r.get(2)?,
            subject: r.get(3)?,
            project: r.get(4)?,
            api_key: r.get(5)?,
            metric: r.get(6)?,
            occurred_at: Timestamp(r.get(7)?),
        })
    })
    .optional()
}

/// What the usage entry `seq` counts now, and the event_id of the VOID that voided it: its latest correction's
/// amount, else its quantity.
fn counted_now(tx: &Transaction<'_>, seq: u64) -> rusqlite::Result<(i64, Option<String>)> {
    let latest = tx
        .prepare_cached(
            "SELECT c.quantity_after, d.action, e.event_id FROM usage_corrections c
             JOIN correction_events d ON d.seq = c.seq JOIN entries e ON e.seq = c.seq
             WHERE c.original_seq = ? ORDER BY c.seq DESC LIMIT 1",
        )?
        .query_row([seq as i64], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?)))
        .optional()?;
    if let Some((after, action, event_id)) = latest {
        let voided = action == CorrectionAction::VOID.symbol();
        return Ok((after, voided.then_some(event_id)));
    }
    tx.prepare_cached("SELECT quantity FROM usage_events WHERE seq = ?")?
        .query_row([seq as i64], |r| Ok((r.get(0)?, None)))
}

#[cfg(test)]
mod tests {
    use schemas::EventType;

    use crate::{AppendError, AppendOutcome, Batch, Incoming, Ledger, Origin, Period};

    fn incoming(event_type: EventType, json: String) -> Incoming {
        let event = schemas::Event::from_json(event_type, &json).unwrap();
        Incoming { event, origin: Origin::Local { name: "test".into() }, raw: None }
    }

    fn usage(event_id: &str, at: &str, quantity: i64) -> Incoming {
        incoming(
            EventType::UsageEvent,
            format!(
                r#"{{"event_id":"{event_id}","occurred_at":"{at}","tenant":"org-1","metric":"tokens","source":"t","quantity":{quantity}}}"#
            ),
        )
    }

    fn correction(event_id: &str, original: &str, quantity: Option<i64>) -> Incoming {
        let (action, quantity) = match quantity {
            Some(q) => ("AMEND", format!(r#","quantity":{q}"#)),
            None => ("VOID", String::new()),
        };
        incoming(
            EventType::CorrectionEvent,
            format!(
                r#"{{"event_id":"{event_id}","occurred_at":"2026-12-02T00:00:00Z","tenant":"org-1","metric":"tokens","source":"t","original_event_id":"{original}","action":"{action}"{quantity},"actor":"carol","reason":"wrong"}}"#
            ),
        )
    }

    fn append(ledger: &mut Ledger, events: Vec<Incoming>) -> Vec<AppendOutcome> {
        ledger.append(&Batch { events, ..Batch::default() }).unwrap().outcomes
    }

    fn october(ledger: &Ledger) -> Vec<i64> {
        let october: Period = "2026-10".parse().unwrap();
        let totals = ledger.usage_totals_of_period(october).unwrap();
        let scanned = ledger.usage_of_period(october, ledger.watermark().unwrap()).unwrap();
        assert_eq!(totals, scanned, "the kept totals and the scan agree");
        totals.iter().map(|t| t.amount).collect()
    }

    // Proves corrections of one event apply in ledger order, each against the one before (amend, amend again, void),
    // that the month's sums follow while the original stays recorded, and that what cannot apply is quarantined with
    // its code: a second void, a correction of a correction, of an unknown event, one before its original in a batch.
    #[test]
    fn corrections_chain_and_what_cannot_apply_is_quarantined() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = Ledger::open(dir.path().join("l.db")).unwrap();
        append(&mut ledger, vec![usage("u-1", "2026-10-03T00:00:00Z", 100), usage("u-2", "2026-10-04T00:00:00Z", 7)]);
        assert_eq!(october(&ledger), [107]);
        let outcomes =
            append(&mut ledger, vec![correction("c-1", "u-1", Some(60)), correction("c-2", "u-1", Some(80))]);
        assert!(outcomes.iter().all(|o| matches!(o, AppendOutcome::Recorded { .. })), "{outcomes:?}");
        assert_eq!(october(&ledger), [87]);
        let outcomes = append(
            &mut ledger,
            vec![
                correction("c-3", "u-1", None),
                correction("c-4", "u-1", None),
                correction("c-5", "c-3", None),
                correction("c-6", "u-404", None),
                correction("c-7", "u-3", Some(1)),
                usage("u-3", "2026-10-05T00:00:00Z", 5),
                correction("c-8", "u-2", Some(7)),
            ],
        );
        let codes: Vec<&str> = outcomes
            .iter()
            .map(|o| match o {
                AppendOutcome::Recorded { .. } => "recorded",
                AppendOutcome::Quarantined { reason_code } => *reason_code,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            codes,
            [
                "recorded",
                "already_voided",
                "correction_of_correction",
                "unknown_original",
                "unknown_original",
                "recorded",
                "unchanged"
            ]
        );
        assert_eq!(october(&ledger), [12], "u-1 voided, u-2 7, u-3 5");
        let deltas: Vec<(i64, i64, i64)> = ledger
            .conn
            .prepare("SELECT quantity_before, quantity_after, delta FROM usage_corrections ORDER BY seq")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(deltas, [(100, 60, -40), (60, 80, 20), (80, 0, -80)]);
        let refused = ledger.conn.execute("UPDATE usage_corrections SET delta = 0", []);
        assert!(refused.unwrap_err().to_string().contains("append-only"));
        assert!(ledger.verify().unwrap().first_bad.is_none());
    }

    // Proves the control plane's append refuses a correction that cannot apply, writing nothing of the batch.
    #[test]
    fn a_refused_correction_leaves_nothing_when_the_batch_must_be_whole() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = Ledger::open(dir.path().join("l.db")).unwrap();
        append(&mut ledger, vec![usage("u-1", "2026-10-03T00:00:00Z", 100)]);
        let watermark = ledger.watermark().unwrap();
        let batch = Batch { events: vec![correction("c-1", "u-9", None)], ..Batch::default() };
        match ledger.append_unless_conflicting(&batch) {
            Err(AppendError::CorrectionRefused { event_id, refusal }) => {
                assert_eq!((event_id.as_str(), refusal.code()), ("c-1", "unknown_original"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(ledger.watermark().unwrap(), watermark);
        assert!(ledger.quarantined().unwrap().is_empty());
    }
}
