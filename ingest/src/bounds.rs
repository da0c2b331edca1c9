//! How large one ledger append grows ([`BatchBounds`]): the bounds of a Kafka ingest and of a file ingest.

/// Most messages in one ledger append. A batch of this size is a few MB of decoded events and amortises the
/// commit's fsync; larger batches gain little (see `bench append`).
pub const BATCH_MAX_EVENTS: usize = 5_000;

/// Records per append. Large enough that the per-transaction fsync is amortised (about 1 ms on this disk
/// against about 5 µs per event), small enough that a batch's memory stays around a few MB.
pub const FILE_BATCH_EVENTS: usize = 5_000;

/// Most bytes of messages or records (as received) in one ledger append, whatever their count: a batch of
/// 5,000 messages near Kafka's 1 MB limit would otherwise hold gigabytes in memory before its append.
pub const BATCH_MAX_BYTES: usize = 16 << 20;

/// How large one ledger append grows: it is appended once either bound is reached, so a batch holds at most
/// `events` messages and at most `bytes` plus one message (a message larger than `bytes` is a batch of its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchBounds {
    /// Most messages (Kafka) or records (file).
    pub events: usize,
    /// Most bytes of them as received (their raw bytes, which the quarantine keeps too).
    pub bytes: usize,
}

impl BatchBounds {
    /// The bounds of a Kafka ingest: [`BATCH_MAX_EVENTS`] and [`BATCH_MAX_BYTES`].
    pub fn kafka() -> BatchBounds {
        BatchBounds { events: BATCH_MAX_EVENTS, bytes: BATCH_MAX_BYTES }
    }

    /// The bounds of a file ingest: [`FILE_BATCH_EVENTS`] and [`BATCH_MAX_BYTES`].
    pub fn file() -> BatchBounds {
        BatchBounds { events: FILE_BATCH_EVENTS, bytes: BATCH_MAX_BYTES }
    }

    /// Whether a batch of `events` messages and `bytes` bytes is to be appended now.
    pub fn reached(&self, events: usize, bytes: usize) -> bool {
        events >= self.events || bytes >= self.bytes
    }
}
