//! Numbered migrations, applied in order; `PRAGMA user_version` holds how many ran.

use rusqlite::Connection;

/// What a migration computes in code after its SQL ran, in the same transaction (a hash SQLite cannot compute).
pub type Fill = fn(&Connection) -> rusqlite::Result<()>;

/// A migration: its file's name, its SQL, and its fill if it has one.
pub type Migration = (&'static str, &'static str, Option<Fill>);

/// `ddl/NNN-*.sql`, in order, each with its fill. Append new files, never edit a published one.
pub const MIGRATIONS: &[Migration] = &[
    ("001-entries.sql", include_str!("../ddl/001-entries.sql"), None),
    ("002-event-details.sql", include_str!("../ddl/002-event-details.sql"), None),
    ("003-quarantine-offsets.sql", include_str!("../ddl/003-quarantine-offsets.sql"), None),
    ("004-quarantine-replays.sql", include_str!("../ddl/004-quarantine-replays.sql"), None),
    ("005-periods-outbox.sql", include_str!("../ddl/005-periods-outbox.sql"), None),
    ("006-policy-burst.sql", include_str!("../ddl/006-policy-burst.sql"), None),
    ("007-conflicting-index.sql", include_str!("../ddl/007-conflicting-index.sql"), None),
    ("008-billing.sql", include_str!("../ddl/008-billing.sql"), None),
    ("009-dedup-tiers.sql", include_str!("../ddl/009-dedup-tiers.sql"), None),
    ("010-request-keys.sql", include_str!("../ddl/010-request-keys.sql"), Some(crate::dedup::index_recorded_requests)),
    ("011-outbox-cursor.sql", include_str!("../ddl/011-outbox-cursor.sql"), None),
    ("012-refuse-replace.sql", include_str!("../ddl/012-refuse-replace.sql"), None),
    ("013-commit-totals-by-tenant.sql", include_str!("../ddl/013-commit-totals-by-tenant.sql"), None),
    ("014-adjustment-scope.sql", include_str!("../ddl/014-adjustment-scope.sql"), None),
    ("015-totals-stay-integers.sql", include_str!("../ddl/015-totals-stay-integers.sql"), None),
    ("016-quarantine-by-origin.sql", include_str!("../ddl/016-quarantine-by-origin.sql"), None),
    ("017-file-progress.sql", include_str!("../ddl/017-file-progress.sql"), None),
    ("018-entries-by-tenant.sql", include_str!("../ddl/018-entries-by-tenant.sql"), None),
    ("019-ledger-id-and-links.sql", include_str!("../ddl/019-ledger-id-and-links.sql"), Some(crate::links::anchor)),
    ("020-shard.sql", include_str!("../ddl/020-shard.sql"), None),
    ("021-forwarded.sql", include_str!("../ddl/021-forwarded.sql"), None),
    ("022-change-actor.sql", include_str!("../ddl/022-change-actor.sql"), None),
    ("023-policy-time-zone.sql", include_str!("../ddl/023-policy-time-zone.sql"), None),
    ("024-leases.sql", include_str!("../ddl/024-leases.sql"), None),
    ("025-lease-tokens.sql", include_str!("../ddl/025-lease-tokens.sql"), None),
    ("026-policy-on-failure.sql", include_str!("../ddl/026-policy-on-failure.sql"), None),
    ("027-fail-open-decisions.sql", include_str!("../ddl/027-fail-open-decisions.sql"), None),
    ("028-policy-overage.sql", include_str!("../ddl/028-policy-overage.sql"), None),
    ("029-policy-violation.sql", include_str!("../ddl/029-policy-violation.sql"), None),
    ("030-entry-scopes.sql", include_str!("../ddl/030-entry-scopes.sql"), None),
    ("031-policy-window-seconds.sql", include_str!("../ddl/031-policy-window-seconds.sql"), None),
    ("032-policy-cycle-anchor.sql", include_str!("../ddl/032-policy-cycle-anchor.sql"), None),
    ("033-export-cycles.sql", include_str!("../ddl/033-export-cycles.sql"), None),
    ("034-alert-events.sql", include_str!("../ddl/034-alert-events.sql"), None),
    ("035-policy-alert-settings.sql", include_str!("../ddl/035-policy-alert-settings.sql"), None),
    ("036-webhooks.sql", include_str!("../ddl/036-webhooks.sql"), None),
    ("037-usage-corrections.sql", include_str!("../ddl/037-usage-corrections.sql"), None),
    ("038-reconcile-checkpoint.sql", include_str!("../ddl/038-reconcile-checkpoint.sql"), None),
    ("039-hook-snapshots.sql", include_str!("../ddl/039-hook-snapshots.sql"), None),
    ("040-plans.sql", include_str!("../ddl/040-plans.sql"), None),
    ("041-meter-events.sql", include_str!("../ddl/041-meter-events.sql"), None),
    ("042-capacity-leases.sql", include_str!("../ddl/042-capacity-leases.sql"), None),
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
    let pending: Vec<(usize, &Migration)> =
        MIGRATIONS.iter().enumerate().skip(usize::try_from(version).unwrap_or(0)).collect();
    if pending.is_empty() {
        return Ok(());
    }
    let tx = conn.transaction().map_err(|e| ("(begin)", e))?;
    for (index, (name, sql, fill)) in pending {
        tx.execute_batch(sql).map_err(|e| (*name, e))?;
        if let Some(fill) = fill {
            fill(&tx).map_err(|e| (*name, e))?;
        }
        tx.pragma_update(None, "user_version", index + 1).map_err(|e| (*name, e))?;
    }
    tx.commit().map_err(|e| ("(commit)", e))?;
    Ok(())
}
