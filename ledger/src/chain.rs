//! The hash chain: each entry's hash covers the previous entry's hash and everything stored about the entry
//! that is not derived from its payload (the payload itself is covered through its SHA-256).

use sha2::{Digest, Sha256};

/// A SHA-256 hash.
pub type Hash = [u8; 32];

/// The "previous hash" of the first entry.
pub const GENESIS: Hash = [0; 32];

/// Everything an entry's hash covers, besides the previous hash.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)] // The `entries` columns of the same names (ddl/), which `verify` reads back.
pub struct ChainedFields<'a> {
    pub seq: u64,
    pub event_id: &'a str,
    pub event_type: &'a str,
    pub status: &'a str,
    pub duplicate_of: Option<u64>,
    pub origin: &'a str,
    pub origin_stream: Option<&'a str>,
    pub origin_partition: Option<i64>,
    pub origin_offset: Option<i64>,
    pub recorded_at: i64,
    pub payload_fingerprint: i64,
    pub payload_hash: &'a [u8],
    pub raw: Option<&'a [u8]>,
}

/// The SHA-256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> Hash {
    Sha256::digest(bytes).into()
}

fn put_bytes(hasher: &mut Sha256, bytes: &[u8]) {
    hasher.update((bytes.len() as u64).to_le_bytes());
    hasher.update(bytes);
}

fn put_optional_i64(hasher: &mut Sha256, value: Option<i64>) {
    match value {
        None => hasher.update([0]),
        Some(v) => {
            hasher.update([1]);
            hasher.update(v.to_le_bytes());
        }
    }
}

fn put_optional_bytes(hasher: &mut Sha256, value: Option<&[u8]>) {
    match value {
        None => hasher.update([0]),
        Some(v) => {
            hasher.update([1]);
            put_bytes(hasher, v);
        }
    }
}

/// The entry hash: SHA-256 over a domain tag, the previous hash and each field length-prefixed.
pub fn entry_hash(previous: &Hash, fields: &ChainedFields<'_>) -> Hash {
    let mut hasher = Sha256::new();
    hasher.update(b"quota-ledger entry v1\0");
    hasher.update(previous);
    hasher.update(fields.seq.to_le_bytes());
    put_bytes(&mut hasher, fields.event_id.as_bytes());
    put_bytes(&mut hasher, fields.event_type.as_bytes());
    put_bytes(&mut hasher, fields.status.as_bytes());
    put_optional_i64(&mut hasher, fields.duplicate_of.map(|s| s as i64));
    put_bytes(&mut hasher, fields.origin.as_bytes());
    put_optional_bytes(&mut hasher, fields.origin_stream.map(str::as_bytes));
    put_optional_i64(&mut hasher, fields.origin_partition);
    put_optional_i64(&mut hasher, fields.origin_offset);
    hasher.update(fields.recorded_at.to_le_bytes());
    hasher.update(fields.payload_fingerprint.to_le_bytes());
    put_bytes(&mut hasher, fields.payload_hash);
    put_optional_bytes(&mut hasher, fields.raw.map(sha256).as_ref().map(|h| h.as_slice()));
    hasher.finalize().into()
}
