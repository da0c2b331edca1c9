//! A ledger file reached by two hard links is refused by every opening, for writing and for reading: SQLite keeps
//! the write-ahead log beside the name it opens, so two names are two logs for one database. A symbolic link is one
//! name, resolved, and opens.

use ledger::{Ledger, OpenError};

// Proves both names of a hard-linked ledger are refused, naming the links and what to do, and that the ledger opens
// again once the second name is gone; a symbolic link opens all along.
#[test]
fn a_hard_linked_ledger_is_refused_and_a_symbolic_link_opens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    drop(Ledger::open(&path).unwrap());
    let symbolic = dir.path().join("symbolic.db");
    std::os::unix::fs::symlink(&path, &symbolic).unwrap();
    drop(Ledger::open(&symbolic).unwrap());
    let hard = dir.path().join("hard.db");
    std::fs::hard_link(&path, &hard).unwrap();
    for name in [&path, &hard, &symbolic] {
        for opened in [Ledger::open(name), Ledger::open_read_only(name)] {
            match opened {
                Err(error @ OpenError::HardLinked { links: 2, .. }) => {
                    let message = error.to_string();
                    assert!(message.contains("2 hard links") && message.contains("-samefile"), "{message}");
                }
                Err(other) => panic!("{}: refused, but not for its links: {other}", name.display()),
                Ok(_) => panic!("{}: a hard-linked ledger was opened", name.display()),
            }
        }
    }
    std::fs::remove_file(&hard).unwrap();
    drop(Ledger::open(&path).unwrap());
    drop(Ledger::open_read_only(&symbolic).unwrap());
}
