//! `usage_totals`: counted usage per (tenant, metric, period), kept up to date inside every append, so that a
//! billing export reads a few thousand rows instead of every UsageEvent of the month (contract §5 "Billing export").
//!
//! A total never leaves i64: a usage event that would take its total past 2^63 - 1 is not recorded but quarantined
//! (reason [`crate::TOTAL_OVERFLOW`]) in the append's transaction, and the rest of its batch is recorded. Failing the
//! append instead would fail it again on every retry, blocking its Kafka partition for good; and SQLite's
//! `quantity + excluded.quantity` past i64 would store a REAL, which breaks every export of that month (migration
//! 015 refuses one).

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

use rusqlite::{OptionalExtension, Transaction, params};
use schemas::UsageEvent;

use crate::Period;

/// The stored total of one key and what the append adds to it.
struct Sum {
    stored: i64,
    added: i64,
    /// Whether an event of the key was counted: its row is written, even when the events carried 0 (`verify`
    /// expects a row for every key with counted usage).
    counted: bool,
}

/// The totals an append is changing: each key's stored total, read once, and the usage the append counted so far.
#[derive(Default)]
pub(crate) struct UsageTotals<'b> {
    sums: BTreeMap<(&'b str, &'b str, Period), Sum>,
}

impl<'b> UsageTotals<'b> {
    /// Counts a usage event the append is about to record as counted (not a duplicate of any kind), or answers,
    /// counting nothing, why it cannot be: its total would pass 2^63 - 1 (the quarantine's reason).
    pub(crate) fn count(
        &mut self,
        tx: &Transaction<'_>,
        usage: &'b UsageEvent,
    ) -> rusqlite::Result<Result<(), String>> {
        let period = Period::containing(usage.header.occurred_at);
        let key = (usage.header.tenant.as_str(), usage.header.metric.as_str(), period);
        let sum = match self.sums.entry(key) {
            Entry::Occupied(entry) => entry.into_mut(),
            Entry::Vacant(entry) => entry.insert(Sum { stored: stored(tx, key)?, added: 0, counted: false }),
        };
        let after = sum.added.checked_add(usage.quantity).filter(|added| sum.stored.checked_add(*added).is_some());
        Ok(match after {
            Some(added) => {
                sum.added = added;
                sum.counted = true;
                Ok(())
            }
            None => Err(format!(
                "the usage of tenant {:?}, metric {:?} in {period} would pass 2^63 - 1: {} recorded, {} more in this \
                 batch, and this event's quantity {}",
                key.0, key.1, sum.stored, sum.added, usage.quantity
            )),
        })
    }

    /// Adds what was counted to the stored totals: one upsert per (tenant, metric, period) of the batch.
    pub(crate) fn write(self, tx: &Transaction<'_>) -> rusqlite::Result<()> {
        let mut upsert = tx.prepare_cached(
            "INSERT INTO usage_totals (tenant, metric, period, quantity) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (tenant, metric, period) DO UPDATE SET quantity = quantity + excluded.quantity",
        )?;
        for ((tenant, metric, period), sum) in self.sums.into_iter().filter(|(_, sum)| sum.counted) {
            upsert.execute(params![tenant, metric, period.to_string(), sum.added])?;
        }
        Ok(())
    }
}

/// The stored total of a key (0 when it has none).
fn stored(tx: &Transaction<'_>, (tenant, metric, period): (&str, &str, Period)) -> rusqlite::Result<i64> {
    let total = tx
        .prepare_cached("SELECT quantity FROM usage_totals WHERE tenant = ?1 AND metric = ?2 AND period = ?3")?
        .query_row(params![tenant, metric, period.to_string()], |r| r.get::<_, i64>(0))
        .optional()?;
    Ok(total.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use schemas::EventType;
    use schemas::validate::AMOUNT_MAX;

    use crate::{AppendOutcome, Batch, Incoming, Ledger, Origin, TOTAL_OVERFLOW};

    fn usage(event_id: &str, at: &str, tenant: &str, quantity: i64) -> Incoming {
        let json = format!(
            r#"{{"event_id":"{event_id}","occurred_at":"{at}","tenant":"{tenant}","metric":"requests","source":"t","quantity":{quantity}}}"#
        );
        let event = schemas::Event::from_json(EventType::UsageEvent, &json).unwrap();
        Incoming { event, origin: Origin::Local { name: "test".into() }, raw: None }
    }

    fn totals(ledger: &Ledger) -> Vec<(String, String, String, i64)> {
        let mut statement =
            ledger.conn.prepare("SELECT tenant, metric, period, quantity FROM usage_totals ORDER BY 1, 2, 3").unwrap();
        statement
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    // Proves the totals count recorded usage once per key and period, never duplicates or conflicting copies.
    #[test]
    fn totals_follow_recorded_usage_only() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = Ledger::open(dir.path().join("l.db")).unwrap();
        let first = vec![
            usage("u-1", "2026-10-31T23:59:59Z", "org-1", 5),
            usage("u-2", "2026-11-01T00:00:00Z", "org-1", 7),
            usage("u-2", "2026-11-01T00:00:00Z", "org-1", 7),
            usage("u-3", "2026-11-02T00:00:00Z", "org-1", 1),
        ];
        ledger.append(&Batch { events: first, ..Batch::default() }).unwrap();
        let second =
            vec![usage("u-3", "2026-11-02T00:00:00Z", "org-1", 99), usage("u-4", "2026-11-03T00:00:00Z", "org-2", 2)];
        ledger.append(&Batch { events: second, ..Batch::default() }).unwrap();
        let row = |t: &str, p: &str, q| (t.to_string(), "requests".to_string(), p.to_string(), q);
        assert_eq!(
            totals(&ledger),
            [row("org-1", "2026-10", 5), row("org-1", "2026-11", 8), row("org-2", "2026-11", 2)]
        );
        let refused = ledger.conn.execute("UPDATE usage_totals SET quantity = 0", []);
        assert!(refused.unwrap_err().to_string().contains("only grow"));
    }

    // Proves that a usage event that would take its total past i64, within one batch or across two, is quarantined
    // as `total_overflow` while the rest of its batch is recorded, and the total stays an integer: it panicked within
    // a batch, became a float (breaking the month's export) across two, and then failed the whole batch on every
    // retry. A quantity is at most `AMOUNT_MAX` (2^53 - 1), so this takes 1,025 of the largest.
    #[test]
    fn usage_past_a_total_of_i64_is_quarantined_and_the_rest_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = Ledger::open(dir.path().join("l.db")).unwrap();
        let largest = |from: usize, count: usize| -> Vec<Incoming> {
            (from..from + count)
                .map(|i| usage(&format!("u-{i}"), "2026-11-02T00:00:00Z", "org-1", AMOUNT_MAX))
                .collect()
        };
        let mut first = largest(0, 1_025);
        first.push(usage("other", "2026-11-02T00:00:00Z", "org-2", 5));
        let report = ledger.append(&Batch { events: first, ..Batch::default() }).unwrap();
        assert_eq!((report.recorded(), report.quarantined, report.quarantined_events()), (1_025, 1, 1));
        assert_eq!(report.outcomes[1_024], AppendOutcome::Quarantined { reason_code: TOTAL_OVERFLOW });
        let last = vec![
            usage("u-last", "2026-11-02T00:00:00Z", "org-1", 1_024),
            usage("u-zero", "2026-11-02T00:00:00Z", "org-1", 0),
        ];
        let report = ledger.append(&Batch { events: last, ..Batch::default() }).unwrap();
        assert_eq!(report.outcomes[0], AppendOutcome::Quarantined { reason_code: TOTAL_OVERFLOW });
        assert_eq!(report.outcomes[1], AppendOutcome::Recorded { seq: 1_026 }, "what fits is recorded");
        let row =
            |tenant: &str, quantity| ("requests".to_string(), "2026-11".to_string(), tenant.to_string(), quantity);
        let found: Vec<_> = totals(&ledger).into_iter().map(|(t, m, p, q)| (m, p, t, q)).collect();
        assert_eq!(found, [row("org-1", AMOUNT_MAX * 1_024), row("org-2", 5)]);
        let quarantined = ledger.quarantined().unwrap();
        assert_eq!(quarantined.len(), 2);
        assert!(quarantined.iter().all(|q| q.reason_code == TOTAL_OVERFLOW), "{quarantined:?}");
        assert!(quarantined[1].reason.contains("would pass 2^63 - 1"), "{}", quarantined[1].reason);
        // Replayed while the total is still full, it stays quarantined, pending.
        let replay = ledger.replay_quarantined(&[], |_| Ok(None)).unwrap();
        assert_eq!((replay.recorded, replay.still_quarantined.len()), (0, 2), "{replay:?}");
        assert!(ledger.verify().unwrap().first_bad.is_none());
    }
}
