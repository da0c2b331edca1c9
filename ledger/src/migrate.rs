//! Numbered migrations, applied in order; `PRAGMA user_version` holds how many ran.

use rusqlite::Connection;

/// `ddl/NNN-*.sql`, in order. Append new files, never edit a published one.
pub const MIGRATIONS: &[(&str, &str)] = &[
    ("001-entries.sql", include_str!("../ddl/001-entries.sql")),
    ("002-event-details.sql", include_str!("../ddl/002-event-details.sql")),
    ("003-quarantine-offsets.sql", include_str!("../ddl/003-quarantine-offsets.sql")),
    ("004-quarantine-replays.sql", include_str!("../ddl/004-quarantine-replays.sql")),
    ("005-periods-outbox.sql", include_str!("../ddl/005-periods-outbox.sql")),
    ("006-policy-burst.sql", include_str!("../ddl/006-policy-burst.sql")),
    ("007-conflicting-index.sql", include_str!("../ddl/007-conflicting-index.sql")),
    ("008-billing.sql", include_str!("../ddl/008-billing.sql")),
    ("009-dedup-tiers.sql", include_str!("../ddl/009-dedup-tiers.sql")),
];

/// The schema version of a ledger all of whose migrations ran.
pub fn latest_version() -> i64 {
    i64::try_from(MIGRATIONS.len()).expect("fewer than 2^63 migrations")
}

/// Applies the migrations the file has not seen, all in one transaction: a reader sees a ledger either as it
/// was or fully migrated, never half created (a `status` polling a ledger that ingest is creating).
/// Returns the failing migration's name with the error.
pub fn migrate(conn: &mut Connection) -> Result<(), (&'static str, rusqlite::Error)> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(|e| ("(version)", e))?;
    let pending: Vec<(usize, &(&str, &str))> =
        MIGRATIONS.iter().enumerate().skip(usize::try_from(version).unwrap_or(0)).collect();
    if pending.is_empty() {
        return Ok(());
    }
    let tx = conn.transaction().map_err(|e| ("(begin)", e))?;
    for (index, (name, sql)) in pending {
        tx.execute_batch(sql).map_err(|e| (*name, e))?;
        tx.pragma_update(None, "user_version", index + 1).map_err(|e| (*name, e))?;
    }
    tx.commit().map_err(|e| ("(commit)", e))?;
    Ok(())
}
