//! The decisions the writer made last, by decision_id, so that a repeated idempotency key is answered without a
//! ledger read.

use rustc_hash::FxHashMap;

use crate::api::Decision;

/// Decisions remembered for idempotent replies without a ledger read.
pub const RECENT_DECISIONS_MAX: usize = 100_000;

/// Recent decisions by decision_id, the oldest evicted first: a ring of decisions, and a map from the hash of
/// each one's id to its slot. The map's entries are small because hashbrown rehashes the whole table from time
/// to time under constant inserts and removals (its tombstones fill it): with the decisions themselves in the
/// map, those rehashes stalled the writer for 50 to 440 ms (`perf`, a long `wrk` run on a large ledger). The
/// map has room for twice the decisions, which keeps tombstones, and rehashes, rare.
pub(crate) struct Recent {
    ring: Vec<Decision>,
    /// The slot the next decision takes once the ring is full (its oldest).
    oldest: usize,
    slots: FxHashMap<u64, u32>,
}

impl Default for Recent {
    fn default() -> Recent {
        Recent {
            ring: Vec::with_capacity(RECENT_DECISIONS_MAX),
            oldest: 0,
            slots: FxHashMap::with_capacity_and_hasher(2 * RECENT_DECISIONS_MAX, Default::default()),
        }
    }
}

impl Recent {
    /// The decision `id`, if it is one of the last.
    pub(crate) fn get(&self, id: &str) -> Option<&Decision> {
        // Two ids may share a hash: the decision in the slot must be the one asked for (else the ledger answers).
        let slot = *self.slots.get(&id_hash(id))?;
        Some(&self.ring[slot as usize]).filter(|d| d.decision_id == id)
    }

    /// Remembers a decision, evicting the oldest once full.
    pub(crate) fn insert(&mut self, decision: Decision) {
        let hash = id_hash(&decision.decision_id);
        let slot = if self.ring.len() < RECENT_DECISIONS_MAX {
            self.ring.push(decision);
            self.ring.len() - 1
        } else {
            let slot = self.oldest;
            let evicted = std::mem::replace(&mut self.ring[slot], decision);
            let evicted_hash = id_hash(&evicted.decision_id);
            if self.slots.get(&evicted_hash) == Some(&(slot as u32)) {
                self.slots.remove(&evicted_hash);
            }
            self.oldest = (slot + 1) % RECENT_DECISIONS_MAX;
            slot
        };
        self.slots.insert(hash, slot as u32);
    }

    /// Forgets a decision that was not recorded after all (its slot is reused in its turn).
    pub(crate) fn forget(&mut self, id: &str) {
        let hash = id_hash(id);
        if let Some(&slot) = self.slots.get(&hash)
            && self.ring[slot as usize].decision_id == id
        {
            self.slots.remove(&hash);
        }
    }
}

fn id_hash(id: &str) -> u64 {
    use std::hash::BuildHasher;
    rustc_hash::FxBuildHasher.hash_one(id)
}

#[cfg(test)]
mod tests {
    use schemas::{Outcome, Reason, Timestamp};

    use super::*;
    use crate::api::Code;

    fn decision(n: usize) -> Decision {
        Decision {
            decision_id: format!("dec-{n}"),
            request_id: format!("req-{n}"),
            outcome: Outcome::ALLOWED,
            reason: Reason::WITHIN_LIMIT,
            code: Code::of(Outcome::ALLOWED, Reason::WITHIN_LIMIT),
            who: schemas::Who::tenant("org-1"),
            metric: "requests".into(),
            amount: n as i64,
            scope: None,
            policy_id: None,
            policy_version: None,
            limit: None,
            used_before: None,
            remaining: None,
            window_start: None,
            resets_at: None,
            retry_after_ms: None,
            decided_at: Timestamp(0),
            reservation_id: None,
            replayed: false,
            amounts: Default::default(),
            lease: None,
            violation: None,
            metric_named: false,
        }
    }

    // Proves that the recent decisions are the last RECENT_DECISIONS_MAX, each found by its id, the older ones
    // evicted in order, also after the ring went round more than once.
    #[test]
    fn recent_keeps_the_last_decisions_in_order() {
        let mut recent = Recent::default();
        let total = 2 * RECENT_DECISIONS_MAX + 7;
        for n in 0..total {
            recent.insert(decision(n));
        }
        let first_kept = total - RECENT_DECISIONS_MAX;
        assert!(recent.get(&format!("dec-{}", first_kept - 1)).is_none());
        assert!(recent.get("dec-0").is_none());
        for n in [first_kept, first_kept + 1, total / 2 + RECENT_DECISIONS_MAX / 2, total - 1] {
            assert_eq!(recent.get(&format!("dec-{n}")).map(|d| d.amount), Some(n as i64), "dec-{n}");
        }
        assert_eq!(recent.slots.len(), RECENT_DECISIONS_MAX);
    }
}
