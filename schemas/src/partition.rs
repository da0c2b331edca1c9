//! A tenant's partition (contract §9.4): Kafka's default partitioner over the key `tenant`,
//! `(murmur2(utf8(tenant)) & 0x7fffffff) % P`, the function the Java client and kafka-python apply to a keyed
//! record and librdkafka's `murmur2_random` partitioner. Every producer this product configures uses it, the hook
//! and ingest route a tenant to its shard with it, and a client library in any language can compute it: the
//! vectors below are Kafka's own (`UtilsTest.testMurmur2`) plus tenants, checked against kafka-python.
//!
//! ```
//! assert_eq!(schemas::partition::murmur2(b"foobar"), -790_332_482);
//! assert_eq!(schemas::partition::partition_of("org-42", 6), 3);
//! ```

/// The tenant of plan defaults: every partition holds them, since a producer sends them to each (contract §9.4).
pub const PLAN_DEFAULT_TENANT: &str = "*";

/// The owner of a named plan's policies: `*` followed by the plan's name (`*pro`). No tenant may be named so (a
/// tenant starting with `*` is refused wherever a tenant is named), so a plan's policies are never a tenant's own.
pub fn plan_owner(plan: &str) -> String {
    format!("{PLAN_DEFAULT_TENANT}{plan}")
}

/// The name of the plan whose policies `owner` holds: `pro` for `*pro`; none for a tenant or the plan defaults (`*`).
pub fn plan_of_owner(owner: &str) -> Option<&str> {
    owner.strip_prefix(PLAN_DEFAULT_TENANT).filter(|plan| !plan.is_empty())
}

/// Kafka's murmur2 (MurmurHash2, seed `0x9747b28c`) of `data`, as the Java client's `Utils.murmur2` returns it: a
/// signed 32-bit integer.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h = SEED ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        for (i, byte) in tail.iter().enumerate().rev() {
            h ^= u32::from(*byte) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition of `tenant` among `partitions` (P > 0): `(murmur2(utf8(tenant)) & 0x7fffffff) % P`.
///
/// # Panics
/// When `partitions` is 0: a topic has at least one partition.
pub fn partition_of(tenant: &str, partitions: u32) -> u32 {
    assert!(partitions > 0, "a topic has at least one partition");
    (murmur2(tenant.as_bytes()) as u32 & 0x7fff_ffff) % partitions
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kafka's `UtilsTest.testMurmur2`, and the empty key.
    #[test]
    fn kafka_vectors() {
        let cases: [(&[u8], i32); 7] = [
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58_897_971),
            (b"abc", 479_470_107),
            (b"", 275_646_681),
        ];
        for (data, hash) in cases {
            assert_eq!(murmur2(data), hash, "murmur2({:?})", String::from_utf8_lossy(data));
        }
    }

    /// Partitions among 6 as kafka-python's `murmur2(key) & 0x7fffffff % 6` gives them, every tail length and a
    /// multi-byte UTF-8 tenant among them.
    #[test]
    fn tenant_partitions() {
        let cases = [
            ("org-42", 3),
            ("tenant-0001", 4),
            ("Zürich-GmbH", 5),
            ("21", 0),
            ("foobar", 0),
            ("a-little-bit-longer-string", 5),
            ("abc", 3),
        ];
        for (tenant, partition) in cases {
            assert_eq!(partition_of(tenant, 6), partition, "partition_of({tenant:?}, 6)");
        }
        assert_eq!(partition_of("anything", 1), 0);
    }
}
