//! Event ids derived from idempotency keys: the same key always names the same decision, usage and
//! reservation, so a retried request finds its original and the ledger deduplicates anything sent twice.

use schemas::ReservationAction;
use sha2::{Digest, Sha256};

/// What the event_id of every DecisionEvent the hook records begins with.
pub const DECISION_PREFIX: &str = "dec-";
/// What the id of every reservation the hook makes begins with.
pub const RESERVATION_PREFIX: &str = "rsv-";

/// 32 hex digits of SHA-256 over the tenant and the idempotency key (keys are the tenant's own namespace).
pub fn key_hash(tenant: &str, idempotency_key: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(tenant.as_bytes());
    hasher.update([0]);
    hasher.update(idempotency_key.as_bytes());
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut hex = String::with_capacity(32);
    for b in &hasher.finalize()[..16] {
        hex.push(HEX[usize::from(b >> 4)] as char);
        hex.push(HEX[usize::from(b & 0xf)] as char);
    }
    hex
}

/// The event_id of the DecisionEvent of the key whose [`key_hash`] is `hash`.
pub fn decision_id(hash: &str) -> String {
    format!("{DECISION_PREFIX}{hash}")
}

/// The event_id of the UsageEvent an allowed `check` of that key records.
pub fn usage_id(hash: &str) -> String {
    format!("use-{hash}")
}

/// The key hash the ids of `metric` derive from in a request of several metrics ([`crate::Request::amounts`]):
/// the first metric (in order) takes the key's own `hash`, so that every request of the key is found by the key
/// alone (its `dec-HASH`) whichever form it took, and a request of one metric in `amounts` records exactly what a
/// check of `metric` and `amount` does; each other metric `HASH-` and 16 hex digits of SHA-256 over the key hash
/// and the metric, distinct and the same on every retry.
pub fn metric_hash(hash: &str, metric: &str, first: bool) -> String {
    if first {
        return hash.to_string();
    }
    let mut hasher = Sha256::new();
    hasher.update(hash.as_bytes());
    hasher.update([0]);
    hasher.update(metric.as_bytes());
    let mut hex = String::with_capacity(hash.len() + 17);
    hex.push_str(hash);
    hex.push('-');
    for b in &hasher.finalize()[..8] {
        hex.push_str(&format!("{b:02x}"));
    }
    hex
}

/// The reservation_id an allowed `reserve` of that key makes: `rsv-HASH` in a ledger of every partition,
/// `rsv-pN-HASH` in the shard of partition N. A commit or release names only the reservation, so the id carries its
/// shard: a router ([`crate::Shards`]), a node, or a client caching who owns which partition sends the close to the
/// shard that holds it without asking every shard ([`partition_of_reservation`]).
pub fn reservation_id(hash: &str, partition: Option<u32>) -> String {
    match partition {
        None => format!("{RESERVATION_PREFIX}{hash}"),
        Some(partition) => format!("{RESERVATION_PREFIX}p{partition}-{hash}"),
    }
}

/// The partition a reservation id made by a shard's hook names (`rsv-pN-…`), if it is below `partitions`; `None` for
/// any other id (a ledger of every partition's, another enforcer's).
pub fn partition_of_reservation(reservation_id: &str, partitions: u32) -> Option<u32> {
    let rest = reservation_id.strip_prefix(RESERVATION_PREFIX)?.strip_prefix('p')?;
    let (digits, _) = rest.split_once('-')?;
    // Digits only, no sign and no leading zero: exactly what `reservation_id` writes.
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || (digits.len() > 1 && digits.starts_with('0'))
    {
        return None;
    }
    digits.parse::<u32>().ok().filter(|partition| *partition < partitions)
}

/// The event_id of the RESERVE of `reservation_id`.
pub fn reserve_event_id(reservation_id: &str) -> String {
    format!("{reservation_id}-reserve")
}

/// The close of a reservation this hook issued (`own`: its `rsv-…` id already names its tenant), or of another
/// enforcer's, whose id may be another tenant's too: the tenant's key hash then keeps their closes apart. After a
/// restart the hook's earlier reservations are folded from the ledger like any other, so their closes carry the
/// hash too: either way two closes are two ids.
pub fn close_event_id(tenant: &str, reservation_id: &str, action: ReservationAction, own: bool) -> String {
    let action = action.symbol().to_ascii_lowercase();
    match own {
        true => format!("{reservation_id}-{action}"),
        false => format!("{reservation_id}-{action}-{}", &key_hash(tenant, reservation_id)[..16]),
    }
}

#[cfg(test)]
mod tests {
    // Proves that ids keep their spelling: a restarted hook finds the decisions an older build recorded.
    #[test]
    fn key_hash_is_the_first_16_bytes_of_sha256_in_lowercase_hex() {
        assert_eq!(super::key_hash("org-1", "k-1"), "8f0be037a14240e8b8b1d5d2b45f3a93");
    }

    // Proves that a shard's reservation ids name its partition and that only such ids are read as naming one.
    #[test]
    fn a_shards_reservation_ids_name_its_partition() {
        use super::{partition_of_reservation, reservation_id};
        assert_eq!(reservation_id("ab12", None), "rsv-ab12");
        assert_eq!(reservation_id("ab12", Some(3)), "rsv-p3-ab12");
        assert_eq!(partition_of_reservation("rsv-p3-ab12", 4), Some(3));
        assert_eq!(partition_of_reservation("rsv-p0-ab12", 4), Some(0));
        for other in ["rsv-p3-ab12", "rsv-ab12", "rsv-p03-ab12", "rsv-p-ab12", "rsv-p+3-ab12", "order-7", "rsv-p3"] {
            assert_eq!(partition_of_reservation(other, 3), None, "{other}");
        }
    }
}
