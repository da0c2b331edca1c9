//! A SQLite database of another application is never taken for a ledger: opening it, for writing or for
//! reading, is refused naming what it holds, and not a byte of it changes; a new path or an empty file still
//! becomes a ledger.

use std::path::Path;

use ledger::{Ledger, OpenError};

/// Another application's database: a table with a row, an index and a view.
fn foreign_database(path: &Path) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);
         CREATE TABLE orders (id INTEGER PRIMARY KEY AUTOINCREMENT, customer INTEGER);
         CREATE INDEX orders_by_customer ON orders (customer);
         CREATE VIEW big_customers AS SELECT * FROM customers;
         INSERT INTO customers VALUES (1, 'Ada');",
    )
    .unwrap();
}

fn refused(result: Result<Ledger, OpenError>) -> String {
    match result {
        Err(error @ OpenError::NotALedger { .. }) => error.to_string(),
        Err(other) => panic!("refused, but not as a foreign database: {other}"),
        Ok(_) => panic!("a foreign database was opened as a ledger"),
    }
}

// Proves that a database with user_version 0 but tables of its own is refused, untouched, by open and by
// open_read_only: it is neither migrated into (open) nor reported as "no ledger" (open_read_only).
#[test]
fn a_foreign_database_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.db");
    foreign_database(&path);
    let before = std::fs::read(&path).unwrap();
    let expected = format!(
        "{} is a SQLite database but not a quota-ledger ledger: it holds tables customers, orders; index \
         orders_by_customer; view big_customers; nothing was written to it",
        path.display()
    );
    for message in [refused(Ledger::open(&path)), refused(Ledger::open_read_only(&path))] {
        assert!(message.starts_with(&expected), "{message}");
    }
    assert_eq!(std::fs::read(&path).unwrap(), before, "the foreign database was written to");
    let wal = dir.path().join("other.db-wal");
    assert!(!wal.exists(), "a write-ahead log was created beside the foreign database");
    let conn = rusqlite::Connection::open(&path).unwrap();
    let journal: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
    assert_eq!(journal, "delete", "the foreign database's journal mode was changed");
}

// The refusal names at most FOREIGN_OBJECTS_NAMED objects and counts the rest.
#[test]
fn a_foreign_database_with_many_tables_is_named_briefly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("many.db");
    let conn = rusqlite::Connection::open(&path).unwrap();
    for i in 0..(ledger::FOREIGN_OBJECTS_NAMED + 3) {
        conn.execute_batch(&format!("CREATE TABLE t{i:02} (x)")).unwrap();
    }
    drop(conn);
    let message = refused(Ledger::open(&path));
    assert!(
        message.contains("it holds tables t00, t01, t02, t03, t04, t05, t06, t07, t08, t09; and 3 more"),
        "{message}"
    );
}

// An empty file and a new path still become ledgers, as before.
#[test]
fn an_empty_file_or_a_new_path_becomes_a_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    for path in [empty, dir.path().join("new.db")] {
        Ledger::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let ledger = Ledger::open_read_only(&path).unwrap();
        assert_eq!(ledger.status().unwrap().events_recorded, 0);
    }
}
