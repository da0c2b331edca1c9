//! What the last reconcile run that recorded its plan concluded (`ddl/038-reconcile-checkpoint.sql`), and the reads an
//! incremental run makes from it: the tenants touched since, and one tenant's consumption stream.

use rusqlite::{OptionalExtension, named_params};
use schemas::Timestamp;

use crate::error::{ReadError, RunCheckpointError};
use crate::read::UsageRow;
use crate::{Ledger, now_micros};

const TENANTS_TOUCHED_AFTER: &str = include_str!("../queries/tenants_touched_after.sql");
const TENANT_USAGE_STREAM: &str = include_str!("../queries/tenant_usage_stream.sql");

/// A reconcile run whose plan was recorded: what the next run as of the same instant starts from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunCheckpoint {
    /// Its `--as-of`.
    pub as_of: Timestamp,
    /// Its OPEN_TOO_LONG setting, in microseconds.
    pub open_too_long_micros: i64,
    /// The last ledger sequence number its plan read.
    pub watermark: u64,
    /// Its run id: the adjustments it recorded carry it.
    pub run_id: String,
    /// Adjustments the ledger held once its plan was recorded.
    pub adjustments: u64,
    /// Period closes the ledger held when it ran.
    pub closes: u64,
    /// Its per-tenant reports, as JSON (the reconcile crate's to read).
    pub reports: String,
}

impl Ledger {
    /// The last reconcile run that recorded its plan, when one did (and the ledger is migrated to hold it).
    pub fn run_checkpoint(&self) -> Result<Option<RunCheckpoint>, ReadError> {
        let row = self
            .conn
            .query_row(
                "SELECT as_of, open_too_long_micros, watermark, run_id, adjustments, closes, reports
                 FROM reconcile_checkpoint WHERE id = 1",
                [],
                |r| {
                    Ok(RunCheckpoint {
                        as_of: Timestamp(r.get(0)?),
                        open_too_long_micros: r.get(1)?,
                        watermark: r.get::<_, i64>(2)? as u64,
                        run_id: r.get(3)?,
                        adjustments: r.get::<_, i64>(4)? as u64,
                        closes: r.get::<_, i64>(5)? as u64,
                        reports: r.get(6)?,
                    })
                },
            )
            .optional()?;
        Ok(row)
    }

    /// Records `checkpoint` in place of the last one.
    pub fn record_run_checkpoint(&mut self, checkpoint: &RunCheckpoint) -> Result<(), RunCheckpointError> {
        self.conn.execute(
            "INSERT OR REPLACE INTO reconcile_checkpoint
                 (id, as_of, open_too_long_micros, watermark, run_id, adjustments, closes, reports, recorded_at)
             VALUES (1, :as_of, :open_too_long_micros, :watermark, :run_id, :adjustments, :closes, :reports, :now)",
            named_params! {
                ":as_of": checkpoint.as_of.micros(),
                ":open_too_long_micros": checkpoint.open_too_long_micros,
                ":watermark": i64::try_from(checkpoint.watermark).expect("a sequence number fits in i64"),
                ":run_id": checkpoint.run_id,
                ":adjustments": i64::try_from(checkpoint.adjustments).expect("a count fits in i64"),
                ":closes": i64::try_from(checkpoint.closes).expect("a count fits in i64"),
                ":reports": checkpoint.reports,
                ":now": now_micros(),
            },
        )?;
        Ok(())
    }

    /// The tenants of the entries after `after`, but for the adjustments of run `run_id` and the alerts of `source`
    /// (reconcile's own), by name: read from the entries after `after` alone.
    pub fn tenants_touched_after(&self, after: u64, run_id: &str, source: &str) -> Result<Vec<String>, ReadError> {
        let mut statement = self.conn.prepare_cached(TENANTS_TOUCHED_AFTER)?;
        let params = named_params! {
            ":after": i64::try_from(after).expect("a sequence number fits in i64"),
            ":run_id": run_id,
            ":source": source,
        };
        let rows = statement.query_map(params, |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Calls `each` with every counted UsageEvent of `tenant`, and every correction of one, in ledger order (as
    /// [`Ledger::for_each_usage`] does for every tenant); answers how many there were.
    pub fn for_each_usage_of_tenant(&self, tenant: &str, each: impl FnMut(UsageRow<'_>)) -> Result<u64, ReadError> {
        Ok(usage_of_tenant(&self.conn, tenant, each)?)
    }
}

fn usage_of_tenant(
    conn: &rusqlite::Connection,
    tenant: &str,
    mut each: impl FnMut(UsageRow<'_>),
) -> rusqlite::Result<u64> {
    let corrections = crate::read::corrections_of(conn, Some(tenant))?;
    let mut corrections = corrections.iter().peekable();
    let mut statement = conn.prepare_cached(TENANT_USAGE_STREAM)?;
    let mut rows = statement.query(named_params! { ":tenant": tenant })?;
    let mut count = 0;
    while let Some(r) = rows.next()? {
        let seq = r.get::<_, i64>(0)? as u64;
        while let Some(correction) = corrections.next_if(|c| c.seq < seq) {
            each(correction.row());
            count += 1;
        }
        each(UsageRow {
            seq,
            tenant: r.get_ref(1)?.as_str()?,
            subject: r.get_ref(2)?.as_str_or_null()?,
            metric: r.get_ref(3)?.as_str()?,
            occurred_at: Timestamp(r.get(4)?),
            event_id: r.get_ref(5)?.as_str()?,
            project: r.get_ref(6)?.as_str_or_null()?,
            api_key: r.get_ref(7)?.as_str_or_null()?,
            quantity: r.get(8)?,
            correction: false,
        });
        count += 1;
    }
    for correction in corrections {
        each(correction.row());
        count += 1;
    }
    Ok(count)
}
