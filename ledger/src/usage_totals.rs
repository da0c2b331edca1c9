//! `usage_totals`: counted usage per (tenant, metric, period), kept up to date inside every append, so that a
//! billing export reads a few thousand rows instead of every UsageEvent of the month (SPEC 5 "Billing export").

use std::collections::BTreeMap;

use rusqlite::{Transaction, params};
use schemas::Event;

use crate::Period;
use crate::batch::{AppendOutcome, Incoming};

/// Adds the usage an append recorded (conflicting duplicates and exact duplicates are not counted): one upsert
/// per (tenant, metric, period) of the batch, not one per event. Called inside the append's transaction.
pub(crate) fn add(tx: &Transaction<'_>, events: &[Incoming], outcomes: &[AppendOutcome]) -> rusqlite::Result<()> {
    assert_eq!(events.len(), outcomes.len(), "one outcome per event");
    let mut sums: BTreeMap<(&str, &str, Period), i64> = BTreeMap::new();
    for (incoming, outcome) in events.iter().zip(outcomes) {
        let (Event::Usage(usage), AppendOutcome::Recorded { .. }) = (&incoming.event, outcome) else { continue };
        let key =
            (usage.header.tenant.as_str(), usage.header.metric.as_str(), Period::containing(usage.header.occurred_at));
        let sum = sums.entry(key).or_insert(0);
        // An error naming the key, not a panic: every retry of the batch would panic again, blocking its partition.
        *sum = sum.checked_add(usage.quantity).ok_or_else(|| {
            let (tenant, metric, period) = key;
            rusqlite::Error::ToSqlConversionFailure(
                format!("the usage of {tenant} {metric} in {period} passes 2^63 - 1 within one batch").into(),
            )
        })?;
    }
    let mut upsert = tx.prepare_cached(
        "INSERT INTO usage_totals (tenant, metric, period, quantity) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (tenant, metric, period) DO UPDATE SET quantity = quantity + excluded.quantity",
    )?;
    for ((tenant, metric, period), quantity) in sums {
        upsert.execute(params![tenant, metric, period.to_string(), quantity])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use schemas::EventType;
    use schemas::validate::AMOUNT_MAX;

    use crate::{Batch, Incoming, Ledger, Origin};

    fn usage(event_id: &str, at: &str, tenant: &str, quantity: i64) -> Incoming {
        let json = format!(
            r#"{{"event_id":"{event_id}","occurred_at":"{at}","tenant":"{tenant}","metric":"requests","source":"t","quantity":{quantity}}}"#
        );
        let event = schemas::Event::from_json(EventType::UsageEvent, &json).unwrap();
        Incoming { event, origin: Origin::Local { name: "test".into() }, raw: None }
    }

    fn totals(ledger: &Ledger) -> Vec<(String, String, String, i64)> {
        let mut statement = ledger
            .connection()
            .prepare("SELECT tenant, metric, period, quantity FROM usage_totals ORDER BY 1, 2, 3")
            .unwrap();
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
        let refused = ledger.connection().execute("UPDATE usage_totals SET quantity = 0", []);
        assert!(refused.unwrap_err().to_string().contains("only grow"));
    }

    // Proves that a total past i64 fails the append, within one batch or across two, records nothing of it and
    // leaves the total an integer: it panicked within a batch, and became a float (breaking the month's export)
    // across two. A quantity is at most `AMOUNT_MAX` (2^53 - 1), so this takes 1,025 of the largest.
    #[test]
    fn a_total_past_i64_fails_the_append_and_records_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = Ledger::open(dir.path().join("l.db")).unwrap();
        let largest = |from: usize, count: usize| -> Vec<Incoming> {
            (from..from + count)
                .map(|i| usage(&format!("u-{i}"), "2026-11-02T00:00:00Z", "org-1", AMOUNT_MAX))
                .collect()
        };
        let error = ledger.append(&Batch { events: largest(0, 1_025), ..Batch::default() }).unwrap_err();
        assert!(format!("{error:?}").contains("passes 2^63 - 1 within one batch"), "{error:?}");
        ledger.append(&Batch { events: largest(0, 1_024), ..Batch::default() }).unwrap();
        let last = vec![usage("u-last", "2026-11-02T00:00:00Z", "org-1", 1_024)];
        let error = ledger.append(&Batch { events: last, ..Batch::default() }).unwrap_err();
        assert!(format!("{error:?}").contains("would pass 2^63 - 1"), "{error:?}");
        let row = ("org-1".to_string(), "requests".to_string(), "2026-11".to_string(), AMOUNT_MAX * 1_024);
        assert_eq!(totals(&ledger), [row]);
        assert_eq!(ledger.watermark().unwrap(), 1_024, "only the batch that fits is recorded");
    }
}
