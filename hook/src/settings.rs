//! How a hook is set: how its writer groups requests, how long callers poll, what it keeps in memory, its clock.

use ledger::Durability;
use schemas::Timestamp;

use crate::stages::StageTimer;

/// Default of [`HookSettings::counters_per_tenant_max`]. A metric or subject costs a few hundred bytes of counters
/// (a month's, a day's, an hour's and the last day's minutes it was used in): a million is a few hundred MB for one
/// tenant at most, while the largest tenants seen have tens of thousands of API keys and users in a month.
pub const COUNTERS_PER_TENANT_MAX: usize = 1_000_000;

/// How the writer groups requests, and its clock.
// Not PartialEq: comparing function pointers (`clock`) is not meaningful.
#[derive(Debug, Clone)]
pub struct HookSettings {
    /// Requests decided in one ledger transaction at most.
    pub group_max_requests: usize,
    /// How long the writer waits for more requests after the first of a group; 0 takes only what is queued
    /// (while one group commits, the next one queues: group commit without added latency).
    pub group_wait_us: u64,
    /// Requests waiting at most; beyond, `check_async` answers Overloaded at once and `check` waits.
    pub queue_max_requests: usize,
    /// Whether a commit waits for the disk before its answers leave (full) or only for the write-ahead log's
    /// write (normal: a power loss may lose the last decisions answered).
    pub durability: Durability,
    /// How long a caller of the blocking API waiting alone polls for its answer before it sleeps, and how long
    /// the writer, after that caller's request, polls its queue for the next (0: both sleep at once).
    pub poll_us: u64,
    /// What "now" is for windows, expiries, throttles and the time stamped on what the hook records: the wall
    /// clock (`Timestamp::now`) unless a caller replays a past month (the `demo` decides inside the month it
    /// generates, which must be over to be closed). A plain function keeps the settings `Copy`.
    pub clock: fn() -> Timestamp,
    /// Distinct metrics, and subjects of each metric, that one tenant may have counters for in memory before its
    /// requests for another are refused (400 naming `metric` or `subject`): a caller inventing a subject per
    /// request would otherwise grow the writer's memory without end. Counters live while a window they count is
    /// current or ended less than a day ago, or while they hold a reservation: a metric or subject used once
    /// counts until a day after its month ends, then ages out and frees its place. What other writers (ingest)
    /// record is counted but never refused.
    pub counters_per_tenant_max: usize,
    /// Told how long each stage of a decision took (queue wait, replicate, group commit, sync), for `/metrics`.
    pub stages: Option<StageTimer>,
    /// The emergency rate: checks per second, at most, this hook allows FAIL_OPEN (every policy that applies is
    /// `on_failure: OPEN`) while the ledger refuses its groups; beyond it they fail as CLOSED ones do. 0: none.
    pub fail_open_per_second: u32,
    /// The size of the spill (`LEDGER.spill`) that keeps the decisions made open until the ledger takes them,
    /// written whole once a policy is OPEN so that a full disk cannot refuse it.
    pub spill_bytes: u64,
    /// Whether a start reads the ledger's snapshot of the state ([`crate::snapshot`]) and folds only the entries
    /// after it; false folds the ledger's last month, as a start without a snapshot does.
    pub start_from_snapshot: bool,
    /// Entries appended after the last snapshot of the state past which the snapshot thread takes the next
    /// ([`crate::snapshot::SNAPSHOT_EVERY_ENTRIES`]); 0 takes none.
    pub snapshot_every_entries: u64,
    /// How often, in milliseconds, the snapshot thread looks whether a snapshot is due
    /// ([`crate::snapshot::SNAPSHOT_CHECK_MS`]).
    pub snapshot_check_ms: u64,
}

/// Defaults: 512 requests per group (about 1,000 events, the ledger's best batch size measured in
/// `bench append`), no added wait, 8,192 queued (16 groups), fsync on every commit, 200 us of polling (longer
/// than a group of one takes at durability normal), 100 checks a second made open at most, kept in a spill of
/// 16 MiB (about 25,000 of them: four minutes of the emergency rate); a start from the ledger's snapshot of the
/// state, a snapshot every 100,000 entries looked for every 10 s.
impl Default for HookSettings {
    fn default() -> HookSettings {
        HookSettings {
            group_max_requests: 512,
            group_wait_us: 0,
            queue_max_requests: 8_192,
            durability: Durability::Full,
            poll_us: 200,
            clock: Timestamp::now,
            counters_per_tenant_max: COUNTERS_PER_TENANT_MAX,
            stages: None,
            fail_open_per_second: 100,
            spill_bytes: 16 << 20,
            start_from_snapshot: true,
            snapshot_every_entries: crate::snapshot::SNAPSHOT_EVERY_ENTRIES,
            snapshot_check_ms: crate::snapshot::SNAPSHOT_CHECK_MS,
        }
    }
}
