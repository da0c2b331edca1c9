//! A Bloom filter of every dedup key the ledger holds, for a long-running writer (the enforcement hook, ingest
//! from Kafka) whose events are almost all new: an event_id the filter has never seen is new for certain, and
//! its dedup probe (a lookup per tier of the key index, `dedup::entries_of`) is skipped. A key the
//! filter may hold is probed as before, so a false positive costs one probe and nothing else; a false negative
//! is impossible while the filter has seen every entry up to the ledger's tip, which `KeyFilter::catch_up`
//! ensures inside each append's transaction (other processes append too: ingest, reconcile).
//!
//! The filter grows without a rebuild: when the newest of its Bloom filters is full, a twice larger one takes
//! the new keys, and a lookup asks each (a scalable Bloom filter, after Almeida et al., 2007).

use fastbloom::BloomFilter;
use rusqlite::Connection;

use crate::dedup::{self, event_key};
use crate::status::read_totals;

/// False positives of each Bloom filter when full: one new event in 1,000 is probed anyway.
pub const FALSE_POSITIVE_RATE: f64 = 0.001;
/// Keys of the first Bloom filter at least (about 1.8 MiB).
const FIRST_CAPACITY_MIN: usize = 1 << 20;

/// Every dedup key of the ledger's entries up to `through`.
#[derive(Debug, Clone)]
pub struct KeyFilter {
    filters: Vec<(BloomFilter, usize)>,
    capacity: usize,
    /// The ledger sequence number up to which every entry's key is in the filter.
    through: u64,
}

impl KeyFilter {
    /// The filter of every key in the dedup index, read in one read transaction (on a connection with none
    /// open), up to the last committed batch's watermark.
    pub(crate) fn load(conn: &Connection) -> rusqlite::Result<KeyFilter> {
        let tx = conn.unchecked_transaction()?;
        let through = read_totals(&tx)?.watermark;
        // The index holds one key per entry (`verify` checks it): as many keys as the watermark, no count needed.
        let mut filter = KeyFilter::with_capacity((through as usize).saturating_mul(2).max(FIRST_CAPACITY_MIN));
        for table in dedup::EVENT_KEYS.tiers {
            let mut statement = tx.prepare(&format!("SELECT event_key FROM {table}"))?;
            let mut rows = statement.query([])?;
            while let Some(row) = rows.next()? {
                filter.insert(row.get(0)?);
            }
        }
        filter.through = through;
        tx.commit()?;
        Ok(filter)
    }

    fn with_capacity(capacity: usize) -> KeyFilter {
        KeyFilter { filters: vec![(new_bloom(capacity), 0)], capacity, through: 0 }
    }

    /// Adds the keys of entries other connections appended after `through`, up to `tip` (the last entry, read in
    /// the caller's transaction).
    pub(crate) fn catch_up(&mut self, conn: &Connection, tip: u64) -> rusqlite::Result<()> {
        if tip > self.through {
            let mut statement = conn.prepare_cached("SELECT event_id FROM entries WHERE seq > ? AND seq <= ?")?;
            let mut rows = statement.query([self.through as i64, tip as i64])?;
            while let Some(row) = rows.next()? {
                self.insert(event_key(row.get_ref(0)?.as_str()?));
            }
        }
        self.through = self.through.max(tip);
        Ok(())
    }

    /// Whether the ledger may hold an entry with this key: false means it holds none.
    pub fn may_hold(&self, key: i64) -> bool {
        self.filters.iter().any(|(bloom, _)| bloom.contains_hash(key as u64))
    }

    /// Adds a key (of an entry being appended; if its transaction rolls back, the key stays: a false positive).
    pub(crate) fn insert(&mut self, key: i64) {
        let (bloom, count) = self.filters.last_mut().expect("a filter has at least one Bloom filter");
        bloom.insert_hash(key as u64);
        *count += 1;
        if *count >= self.capacity {
            self.capacity = self.capacity.saturating_mul(2);
            self.filters.push((new_bloom(self.capacity), 0));
        }
    }

    /// The entries are in the filter up to this sequence number (after a committed append).
    pub(crate) fn set_through(&mut self, through: u64) {
        self.through = through;
    }
}

fn new_bloom(capacity: usize) -> BloomFilter {
    BloomFilter::with_false_pos(FALSE_POSITIVE_RATE).expected_items(capacity)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves no false negative across growth: every inserted key is found after the filter added Bloom filters.
    #[test]
    fn every_key_inserted_is_found_after_growth() {
        let mut filter = KeyFilter::with_capacity(1_000);
        let keys: Vec<i64> = (0..10_000).map(|i| event_key(&format!("e-{i}"))).collect();
        for key in &keys {
            filter.insert(*key);
        }
        assert!(filter.filters.len() > 1, "10,000 keys outgrow a filter of 1,000");
        assert!(keys.iter().all(|k| filter.may_hold(*k)));
        let strangers = (0..10_000).filter(|i| filter.may_hold(event_key(&format!("x-{i}")))).count();
        assert!(strangers < 100, "{strangers} false positives in 10,000");
    }
}
