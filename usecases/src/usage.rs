//! A tenant's consumption per metric and window (`GET /v1/usage`, [`reports::usage`]), read from the ledger that
//! holds the tenant: a single ledger file, or the tenant's shard.

use std::path::Path;

use ledger::Ledger;
pub use reports::usage::{Granularity, Member, Unanswerable, Usage, UsageQuery, UsageRow, WINDOWS_MAX};

use crate::Result;

/// The consumption `query` asks for, read from the ledger at `path` (read-only) at its watermark; a query that
/// cannot be answered as asked (`Err` inside) names the field at fault.
pub fn of_tenant(path: &Path, query: &UsageQuery) -> Result<std::result::Result<Usage, Unanswerable>> {
    let ledger = Ledger::open_read_only(path)?;
    Ok(reports::usage::usage(&ledger, query)?)
}
