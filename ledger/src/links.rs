//! The ledger's head (contract §9.3): a second hash chain, of *links*, one per write transaction.
//!
//! The entries' chain (`chain.rs`) covers the events. What else changes a bill or an answer lives in other tables:
//! the batches (`status`'s totals), exact duplicates, the quarantine and its replays, period closes and their stored
//! final exports, accepted offset gaps, and the Kafka offsets (what ingest reads next). Each transaction that writes
//! any of them (an append, a close, an accepted gap) ends with a link: a SHA-256 over the previous link's hash, the
//! ledger id, the entry hash at the watermark, the rows of those tables it wrote (ranges of their ids, or for
//! replays the link's own number) and the offsets table as it leaves it. The last link is the chain head
//! `(head_seq, head_hash)`; a checkpoint publishes it outside the file.
//!
//! Someone who can write the file can change a covered row and recompute every link after it, and [`verify`]
//! alone cannot tell; but the hash of a link a checkpoint published then differs, and a cut tail or an older copy
//! of the file lacks the links published last. [`check_head`] answers both.
//!
//! Link 1, the *anchor*, is written by the migration that brought links in (`ddl/019-ledger-id-and-links.sql`):
//! over everything the ledger held then. A ledger made before it keeps its recorded history untouched, and from the
//! anchor on a checkpoint covers that history too.
//!
//! [`verify`]: crate::Ledger::verify

use std::fmt;
use std::str::FromStr;

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension, params};
use sha2::{Digest, Sha256};

use crate::chain::{GENESIS, Hash};
use crate::now_micros;

/// The chain head, or any link of the chain: its number and its hash. Written `SEQ:HASH` (the hash in lower-case
/// hexadecimal), as `verify --expect-head` takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Head {
    /// The link's number: 1, 2, 3, ... (`head_seq`).
    pub seq: u64,
    /// The link's hash (`head_hash`).
    pub hash: Hash,
}

impl Head {
    /// The hash in lower-case hexadecimal, as `status` and checkpoints show it.
    pub fn hash_hex(&self) -> String {
        hex(&self.hash)
    }
}

impl fmt::Display for Head {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.seq, self.hash_hex())
    }
}

/// A head that is not `SEQ:HASH`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("head {0:?} is not SEQ:HASH (a link number, a colon and 64 hexadecimal digits, as `status` prints them)")]
pub struct HeadParseError(pub String);

impl FromStr for Head {
    type Err = HeadParseError;
    fn from_str(text: &str) -> Result<Head, HeadParseError> {
        let error = || HeadParseError(text.to_string());
        let (seq, hash) = text.split_once(':').ok_or_else(error)?;
        let seq: u64 = seq.parse().map_err(|_| error())?;
        Ok(Head { seq, hash: parse_hash(hash).ok_or_else(error)? })
    }
}

/// 64 hexadecimal digits as a hash.
pub fn parse_hash(text: &str) -> Option<Hash> {
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    let mut hash = [0u8; 32];
    for (i, byte) in hash.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(hash)
}

/// Bytes in lower-case hexadecimal.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What a link closes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LinkKind {
    /// Link 1: everything the ledger held when links were brought in.
    Anchor,
    /// An append (events, duplicates, quarantine, replays, offsets, a batch row).
    Append,
    /// A period close and its stored export.
    Close,
    /// An accepted offset gap and the offset moved past it.
    Gap,
}

impl LinkKind {
    fn name(self) -> &'static str {
        match self {
            LinkKind::Anchor => "anchor",
            LinkKind::Append => "append",
            LinkKind::Close => "close",
            LinkKind::Gap => "gap",
        }
    }
}

/// The greatest id (rowid for `period_closes`) of each table covered by ranges: a link covers the rows between the
/// previous link's and its own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Through {
    batches: i64,
    duplicates: i64,
    quarantine: i64,
    closes: i64,
    gaps: i64,
}

impl Through {
    fn read(conn: &Connection) -> rusqlite::Result<Through> {
        conn.prepare_cached(
            "SELECT (SELECT COALESCE(MAX(id), 0) FROM batches), (SELECT COALESCE(MAX(id), 0) FROM duplicates),
                    (SELECT COALESCE(MAX(id), 0) FROM quarantine), (SELECT COALESCE(MAX(rowid), 0) FROM period_closes),
                    (SELECT COALESCE(MAX(id), 0) FROM offset_gaps)",
        )?
        .query_row([], |r| {
            Ok(Through {
                batches: r.get(0)?,
                duplicates: r.get(1)?,
                quarantine: r.get(2)?,
                closes: r.get(3)?,
                gaps: r.get(4)?,
            })
        })
    }

    /// Whether no range goes back from `earlier`.
    fn follows(&self, earlier: &Through) -> bool {
        self.batches >= earlier.batches
            && self.duplicates >= earlier.duplicates
            && self.quarantine >= earlier.quarantine
            && self.closes >= earlier.closes
            && self.gaps >= earlier.gaps
    }

    /// The first table whose greatest id differs from `other`'s, with both values.
    fn first_difference(&self, other: &Through) -> Option<(&'static str, i64, i64)> {
        [
            ("batches", self.batches, other.batches),
            ("duplicates", self.duplicates, other.duplicates),
            ("quarantine", self.quarantine, other.quarantine),
            ("period_closes", self.closes, other.closes),
            ("offset_gaps", self.gaps, other.gaps),
        ]
        .into_iter()
        .find(|(_, a, b)| a != b)
    }
}

/// A link as stored.
#[derive(Debug, Clone)]
struct Link {
    seq: u64,
    kind: String,
    entries_through: u64,
    through: Through,
    offsets_hash: Vec<u8>,
    rows_hash: Vec<u8>,
    recorded_at: i64,
    link_hash: Vec<u8>,
}

const LINK_COLUMNS: &str = "seq, kind, entries_through, batches_through, duplicates_through, quarantine_through,
    closes_through, gaps_through, offsets_hash, rows_hash, recorded_at, link_hash";

impl Link {
    fn read(r: &rusqlite::Row<'_>) -> rusqlite::Result<Link> {
        Ok(Link {
            seq: r.get::<_, i64>(0)? as u64,
            kind: r.get(1)?,
            entries_through: r.get::<_, i64>(2)? as u64,
            through: Through {
                batches: r.get(3)?,
                duplicates: r.get(4)?,
                quarantine: r.get(5)?,
                closes: r.get(6)?,
                gaps: r.get(7)?,
            },
            offsets_hash: r.get(8)?,
            rows_hash: r.get(9)?,
            recorded_at: r.get(10)?,
            link_hash: r.get(11)?,
        })
    }

    /// The link's hash, recomputed from its columns, the previous link's hash, the ledger id and the entry hash at
    /// `entries_through`.
    fn hash(&self, previous: &[u8], ledger_id: &str, entry_hash: &[u8]) -> Hash {
        let mut hasher = Sha256::new();
        hasher.update(b"quota-ledger link v1\0");
        put_bytes(&mut hasher, previous);
        hasher.update(self.seq.to_le_bytes());
        put_bytes(&mut hasher, ledger_id.as_bytes());
        put_bytes(&mut hasher, self.kind.as_bytes());
        hasher.update(self.entries_through.to_le_bytes());
        put_bytes(&mut hasher, entry_hash);
        let t = &self.through;
        for id in [t.batches, t.duplicates, t.quarantine, t.closes, t.gaps] {
            hasher.update(id.to_le_bytes());
        }
        put_bytes(&mut hasher, &self.offsets_hash);
        put_bytes(&mut hasher, &self.rows_hash);
        hasher.update(self.recorded_at.to_le_bytes());
        hasher.finalize().into()
    }

    /// Who replayed the quarantined messages this link covers: its own number, NULL for the anchor.
    fn replays_key(&self) -> Option<i64> {
        (self.kind != LinkKind::Anchor.name()).then_some(self.seq as i64)
    }
}

fn put_bytes(hasher: &mut Sha256, bytes: &[u8]) {
    hasher.update((bytes.len() as u64).to_le_bytes());
    hasher.update(bytes);
}

/// One SQLite value, tagged by its type, length-prefixed when it has a length.
fn put_value(hasher: &mut Sha256, value: ValueRef<'_>) {
    match value {
        ValueRef::Null => hasher.update([0]),
        ValueRef::Integer(i) => {
            hasher.update([1]);
            hasher.update(i.to_le_bytes());
        }
        ValueRef::Real(f) => {
            hasher.update([2]);
            hasher.update(f.to_bits().to_le_bytes());
        }
        ValueRef::Text(text) => {
            hasher.update([3]);
            put_bytes(hasher, text);
        }
        ValueRef::Blob(blob) => {
            hasher.update([4]);
            put_bytes(hasher, blob);
        }
    }
}

/// Every row `sql` answers for `params`, under a tag naming the table, then how many there were. The columns are
/// named in each query, so a column a later migration adds to one of these tables changes no link's hash.
fn put_rows(
    hasher: &mut Sha256,
    conn: &Connection,
    tag: &str,
    sql: &str,
    params: impl rusqlite::Params,
) -> rusqlite::Result<()> {
    put_bytes(hasher, tag.as_bytes());
    let mut statement = conn.prepare_cached(sql)?;
    let columns = statement.column_count();
    let mut rows = statement.query(params)?;
    let mut count = 0u64;
    while let Some(row) = rows.next()? {
        for i in 0..columns {
            put_value(hasher, row.get_ref(i)?);
        }
        count += 1;
    }
    hasher.update(count.to_le_bytes());
    Ok(())
}

const BATCHES: &str = "SELECT id, committed_at, watermark, events_recorded_total, duplicates_total, conflicts_total,
        quarantined_total FROM batches WHERE id > ?1 AND id <= ?2 ORDER BY id";
const DUPLICATES: &str = "SELECT id, duplicate_of, origin, origin_stream, origin_partition, origin_offset, received_at
    FROM duplicates WHERE id > ?1 AND id <= ?2 ORDER BY id";
const QUARANTINE: &str = "SELECT id, origin, origin_stream, origin_partition, origin_offset, raw, reason_code, reason,
        quarantined_at FROM quarantine WHERE id > ?1 AND id <= ?2 ORDER BY id";
const REPLAYS: &str = "SELECT quarantine_id, replayed_at, outcome, seq FROM quarantine_replays WHERE link IS ?1
    ORDER BY quarantine_id";
const CLOSES: &str = "SELECT rowid, period, period_start, period_end, watermark, closed_at FROM period_closes
    WHERE rowid > ?1 AND rowid <= ?2 ORDER BY rowid";
const EXPORTS: &str = "SELECT x.period, x.row_index, x.tenant, x.metric, x.consumption, x.policy_id, x.policy_version,
        x.\"limit\", x.grants, x.effective_limit, x.overage, x.overshoot, x.late_adjustments
    FROM period_closes c JOIN period_exports x ON x.period = c.period
    WHERE c.rowid > ?1 AND c.rowid <= ?2 ORDER BY c.rowid, x.row_index";
/// The cycles of the stored rows that bill one (PolicyEvent v11 billing cycles): hashed only when a link's closes
/// have some, so the links of ledgers that never billed a cycle keep their hashes.
const EXPORT_CYCLES: &str = "SELECT x.period, x.row_index, x.cycle_start, x.cycle_end
    FROM period_closes c JOIN period_exports x ON x.period = c.period
    WHERE c.rowid > ?1 AND c.rowid <= ?2 AND x.cycle_start IS NOT NULL ORDER BY c.rowid, x.row_index";
/// The plans of the stored rows billed under one (named plans): hashed only when a link's closes have some, as cycles.
const EXPORT_PLANS: &str = "SELECT x.period, x.row_index, x.plan
    FROM period_closes c JOIN period_exports x ON x.period = c.period
    WHERE c.rowid > ?1 AND c.rowid <= ?2 AND x.plan IS NOT NULL ORDER BY c.rowid, x.row_index";
const GAPS: &str = "SELECT id, topic, partition, from_offset, to_offset, accepted_at FROM offset_gaps
    WHERE id > ?1 AND id <= ?2 ORDER BY id";

/// The SHA-256 over the rows a link covers: those of each range table between `from` and `to`, the stored exports
/// of the closes among them, and the replays recorded under `replays` (NULL: before links existed).
fn rows_hash(conn: &Connection, from: &Through, to: &Through, replays: Option<i64>) -> rusqlite::Result<Hash> {
    let mut hasher = Sha256::new();
    hasher.update(b"quota-ledger link rows v1\0");
    put_rows(&mut hasher, conn, "batches", BATCHES, [from.batches, to.batches])?;
    put_rows(&mut hasher, conn, "duplicates", DUPLICATES, [from.duplicates, to.duplicates])?;
    put_rows(&mut hasher, conn, "quarantine", QUARANTINE, [from.quarantine, to.quarantine])?;
    put_rows(&mut hasher, conn, "quarantine_replays", REPLAYS, [replays])?;
    put_rows(&mut hasher, conn, "period_closes", CLOSES, [from.closes, to.closes])?;
    put_rows(&mut hasher, conn, "period_exports", EXPORTS, [from.closes, to.closes])?;
    // Only a link over a close asks (every append seals a link, and asking cost a one-client hook a fifth of its
    // decisions); migration 019 seals the first link before migration 033 adds the columns.
    let cycles = from.closes != to.closes && {
        let columns: bool = conn
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM pragma_table_info('period_exports') WHERE name = 'cycle_start')",
            )?
            .query_row([], |r| r.get(0))?;
        columns
            && conn
                .prepare_cached(&format!("SELECT EXISTS ({EXPORT_CYCLES})"))?
                .query_row([from.closes, to.closes], |r| r.get(0))?
    };
    if cycles {
        put_rows(&mut hasher, conn, "period_export_cycles", EXPORT_CYCLES, [from.closes, to.closes])?;
    }
    if from.closes != to.closes && has_rows(conn, "plan", EXPORT_PLANS, [from.closes, to.closes])? {
        put_rows(&mut hasher, conn, "period_export_plans", EXPORT_PLANS, [from.closes, to.closes])?;
    }
    put_rows(&mut hasher, conn, "offset_gaps", GAPS, [from.gaps, to.gaps])?;
    Ok(hasher.finalize().into())
}

/// Whether `period_exports` has the column `column` (migrations add them after links began) and `query` finds a row.
fn has_rows(conn: &Connection, column: &str, query: &str, range: [i64; 2]) -> rusqlite::Result<bool> {
    let exists: bool = conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM pragma_table_info('period_exports') WHERE name = ?1)")?
        .query_row([column], |r| r.get(0))?;
    Ok(exists && conn.prepare_cached(&format!("SELECT EXISTS ({query})"))?.query_row(range, |r| r.get(0))?)
}

/// The SHA-256 over the whole offsets table (a few rows: one per partition the ledger reads).
fn offsets_hash(conn: &Connection) -> rusqlite::Result<Hash> {
    let mut hasher = Sha256::new();
    hasher.update(b"quota-ledger offsets v1\0");
    put_rows(
        &mut hasher,
        conn,
        "offsets",
        "SELECT topic, partition, next_offset FROM offsets ORDER BY topic, partition",
        [],
    )?;
    Ok(hasher.finalize().into())
}

fn last_link(conn: &Connection) -> rusqlite::Result<Option<Link>> {
    conn.prepare_cached(&format!("SELECT {LINK_COLUMNS} FROM chain_links ORDER BY seq DESC LIMIT 1"))?
        .query_row([], Link::read)
        .optional()
}

/// The entry hash at `seq` (the first entry's "previous" hash for 0), if the ledger holds that entry.
fn entry_hash_at(conn: &Connection, seq: u64) -> rusqlite::Result<Option<Vec<u8>>> {
    if seq == 0 {
        return Ok(Some(GENESIS.to_vec()));
    }
    conn.prepare_cached("SELECT entry_hash FROM entries WHERE seq = ?")?
        .query_row([seq as i64], |r| r.get(0))
        .optional()
}

pub(crate) fn read_ledger_id(conn: &Connection) -> rusqlite::Result<String> {
    conn.prepare_cached("SELECT ledger_id FROM ledger_identity WHERE id = 1")?.query_row([], |r| r.get(0))
}

/// The chain head: the last link (link 0 with the zero hash only in a file whose anchor is missing).
pub(crate) fn read_head(conn: &Connection) -> rusqlite::Result<Head> {
    let head = conn
        .prepare_cached("SELECT seq, link_hash FROM chain_links ORDER BY seq DESC LIMIT 1")?
        .query_row([], |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, Vec<u8>>(1)?)))
        .optional()?;
    Ok(match head {
        Some((seq, hash)) => Head { seq, hash: hash.try_into().unwrap_or(GENESIS) },
        None => Head { seq: 0, hash: GENESIS },
    })
}

/// The number the next link will have: what an append records its replays under.
pub(crate) fn next_seq(conn: &Connection) -> rusqlite::Result<u64> {
    Ok(read_head(conn)?.seq + 1)
}

/// Ends a write transaction with its link: covers the rows written since the last link, and the offsets table when
/// `offsets_changed` (otherwise they are the previous link's). Call it last in the transaction, after every covered
/// row is written. Answers the new head.
pub(crate) fn seal(conn: &Connection, kind: LinkKind, offsets_changed: bool) -> rusqlite::Result<Head> {
    let previous = last_link(conn)?;
    let from = previous.as_ref().map_or_else(Through::default, |p| p.through);
    let seq = previous.as_ref().map_or(1, |p| p.seq + 1);
    let (entries_through, entry_hash): (u64, Vec<u8>) = conn
        .prepare_cached("SELECT seq, entry_hash FROM entries ORDER BY seq DESC LIMIT 1")?
        .query_row([], |r| Ok((r.get::<_, i64>(0)? as u64, r.get(1)?)))
        .optional()?
        .unwrap_or((0, GENESIS.to_vec()));
    let to = Through::read(conn)?;
    let offsets_hash = match &previous {
        Some(p) if !offsets_changed => p.offsets_hash.clone(),
        _ => offsets_hash(conn)?.to_vec(),
    };
    let mut link = Link {
        seq,
        kind: kind.name().to_string(),
        entries_through,
        through: to,
        offsets_hash,
        rows_hash: Vec::new(),
        recorded_at: now_micros(),
        link_hash: Vec::new(),
    };
    link.rows_hash = rows_hash(conn, &from, &to, link.replays_key())?.to_vec();
    let previous_hash = previous.map_or(GENESIS.to_vec(), |p| p.link_hash);
    let hash = link.hash(&previous_hash, &read_ledger_id(conn)?, &entry_hash);
    conn.prepare_cached(&format!(
        "INSERT INTO chain_links ({LINK_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"
    ))?
    .execute(params![
        link.seq as i64,
        link.kind,
        link.entries_through as i64,
        to.batches,
        to.duplicates,
        to.quarantine,
        to.closes,
        to.gaps,
        link.offsets_hash,
        link.rows_hash,
        link.recorded_at,
        &hash[..]
    ])?;
    Ok(Head { seq, hash })
}

/// The fill of migration 019: the ledger's id (a random UUID, version 4), then the anchor over what it holds.
pub(crate) fn anchor(conn: &Connection) -> rusqlite::Result<()> {
    let random: Vec<u8> = conn.query_row("SELECT randomblob(16)", [], |r| r.get(0))?;
    conn.execute(
        "INSERT INTO ledger_identity (id, ledger_id, created_at) VALUES (1, ?, ?)",
        params![uuid_v4(random.try_into().expect("randomblob(16) is 16 bytes")), now_micros()],
    )?;
    seal(conn, LinkKind::Anchor, true)?;
    Ok(())
}

/// A version 4 (random) UUID from 16 random bytes, lower-case (RFC 9562).
fn uuid_v4(mut bytes: [u8; 16]) -> String {
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex = hex(&bytes);
    format!("{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32])
}

/// What walking the links found: the head, or the first link that does not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LinksVerdict {
    /// Every link holds; this is the head.
    Hold(Head),
    /// The first link (or the table after the last link) that does not hold, and why.
    Broken { link: u64, problem: String },
}

/// Walks every link in order, in the caller's read transaction: numbers without gaps, ranges that never go back,
/// each link's rows and hash recomputed from the tables; then that the last link covers the ledger's watermark,
/// every row of the covered tables, and the offsets as they are. `watermark`: the entries the walk of the entries
/// found to hold.
/// From `since` on, when given: the links after it only.
pub(crate) fn verify_links(
    conn: &Connection,
    watermark: u64,
    since: Option<&Verified>,
) -> rusqlite::Result<LinksVerdict> {
    let broken = |link: u64, problem: String| Ok(LinksVerdict::Broken { link, problem });
    let ledger_id = read_ledger_id(conn).optional()?;
    let Some(ledger_id) = ledger_id else { return broken(0, "the ledger has no id (ledger_identity is empty)".into()) };
    let mut statement = conn.prepare(&format!("SELECT {LINK_COLUMNS} FROM chain_links WHERE seq > ?1 ORDER BY seq"))?;
    let mut rows = statement.query([since.map_or(0, |s| s.link.seq as i64)])?;
    let mut previous: Option<Link> = since.map(|s| s.link.clone());
    while let Some(row) = rows.next()? {
        let link = Link::read(row)?;
        if let Err(problem) = check_link(conn, &link, previous.as_ref(), &ledger_id, watermark)? {
            return broken(link.seq, format!("link {} ({}): {problem}", link.seq, link.kind));
        }
        previous = Some(link);
    }
    let Some(last) = previous else { return broken(0, "the ledger has no links: its head is missing".into()) };
    if let Some(problem) = check_after_last(conn, &last, watermark)? {
        return broken(last.seq, problem);
    }
    Ok(LinksVerdict::Hold(Head { seq: last.seq, hash: last.link_hash.try_into().unwrap_or(GENESIS) }))
}

/// One link against the one before it and the tables.
fn check_link(
    conn: &Connection,
    link: &Link,
    previous: Option<&Link>,
    ledger_id: &str,
    watermark: u64,
) -> rusqlite::Result<Result<(), String>> {
    let expected_seq = previous.map_or(1, |p| p.seq + 1);
    if link.seq != expected_seq {
        return Ok(Err(format!("link numbers jump: expected link {expected_seq}")));
    }
    if (link.seq == 1) != (link.kind == LinkKind::Anchor.name()) {
        return Ok(Err("only link 1 is the anchor".into()));
    }
    let from = previous.map_or_else(Through::default, |p| p.through);
    let entries_before = previous.map_or(0, |p| p.entries_through);
    if !link.through.follows(&from) || link.entries_through < entries_before {
        return Ok(Err("its ranges go back from the link before it".into()));
    }
    if link.entries_through > watermark {
        return Ok(Err(format!(
            "it covers entries up to {}, but the ledger ends at {watermark}",
            link.entries_through
        )));
    }
    let rows = rows_hash(conn, &from, &link.through, link.replays_key())?;
    if rows[..] != link.rows_hash[..] {
        return Ok(Err(format!(
            "the rows it covers (batches {}-{}, duplicates {}-{}, quarantine {}-{}, the replays it recorded, period \
             closes {}-{} with their stored exports, offset gaps {}-{}) do not hash to its rows_hash: a covered row \
             was changed, added or removed",
            from.batches + 1,
            link.through.batches,
            from.duplicates + 1,
            link.through.duplicates,
            from.quarantine + 1,
            link.through.quarantine,
            from.closes + 1,
            link.through.closes,
            from.gaps + 1,
            link.through.gaps,
        )));
    }
    let entry_hash = entry_hash_at(conn, link.entries_through)?.unwrap_or_default();
    let previous_hash = previous.map_or(GENESIS.to_vec(), |p| p.link_hash.clone());
    if link.hash(&previous_hash, ledger_id, &entry_hash)[..] != link.link_hash[..] {
        return Ok(Err("link_hash does not match the chain (a link column, or the ledger id, was changed)".into()));
    }
    Ok(Ok(()))
}

/// What the last link must cover: the ledger's last entry, every row of the covered tables, the offsets as they are.
fn check_after_last(conn: &Connection, last: &Link, watermark: u64) -> rusqlite::Result<Option<String>> {
    if last.entries_through != watermark {
        return Ok(Some(format!(
            "the last link ({}) covers entries up to {}, but the ledger ends at {watermark}",
            last.seq, last.entries_through
        )));
    }
    let now = Through::read(conn)?;
    if let Some((table, held, covered)) = now.first_difference(&last.through) {
        return Ok(Some(format!(
            "{table} ends at id {held}, but the last link ({}) covers it up to {covered}",
            last.seq
        )));
    }
    let stray: Option<i64> = conn
        .query_row(
            "SELECT link FROM quarantine_replays WHERE link IS NOT NULL AND (link < 2 OR link > ?1) LIMIT 1",
            [last.seq as i64],
            |r| r.get(0),
        )
        .optional()?;
    if let Some(link) = stray {
        return Ok(Some(format!("quarantine_replays holds a replay of link {link}, which no link of the chain is")));
    }
    if offsets_hash(conn)?[..] != last.offsets_hash[..] {
        return Ok(Some(format!("offsets differ from what the last link ({}) recorded", last.seq)));
    }
    Ok(None)
}

/// A head an earlier verify found to hold, as an incremental verify starts from it: its link, and the entry hash the
/// link covers (the hash the walk of the entries after it chains from).
#[derive(Debug, Clone)]
pub(crate) struct Verified {
    link: Link,
    /// The entries the link covers: 1 to this one.
    pub(crate) entries_through: u64,
    /// The entry hash at `entries_through`, which the link's hash covers.
    pub(crate) entry_hash: Hash,
}

impl Verified {
    /// The greatest batch id the link covers: the batch whose totals were the ledger's then.
    pub(crate) fn batches_through(&self) -> i64 {
        self.link.through.batches
    }

    /// The greatest duplicate and quarantine ids the link covers.
    pub(crate) fn duplicates_and_quarantine_through(&self) -> (i64, i64) {
        (self.link.through.duplicates, self.link.through.quarantine)
    }
}

/// The start of an incremental verify from `head`: the link must be in the chain with that hash, and its hash must
/// still be what its columns, the link before it, the ledger id and the entry hash it covers give. Then everything it
/// covers is as it was when the head was verified, unless rewritten without recomputing the hashes, which only a
/// full verify sees. `Err`: why the walk cannot start there.
pub(crate) fn verified_at(conn: &Connection, head: &Head) -> rusqlite::Result<Result<Verified, String>> {
    if let Some(problem) = check_head(conn, head)? {
        return Ok(Err(problem));
    }
    let link = conn
        .prepare_cached(&format!("SELECT {LINK_COLUMNS} FROM chain_links WHERE seq = ?1"))?
        .query_row([head.seq as i64], Link::read)?;
    let previous = match head.seq {
        1 => GENESIS.to_vec(),
        seq => conn
            .prepare_cached("SELECT link_hash FROM chain_links WHERE seq = ?1")?
            .query_row([seq as i64 - 1], |r| r.get(0))
            .optional()?
            .unwrap_or_default(),
    };
    let ledger_id = read_ledger_id(conn)?;
    let Some(entry_hash) = entry_hash_at(conn, link.entries_through)? else {
        return Ok(Err(format!(
            "link {} covers entry {}, which the ledger does not hold",
            link.seq, link.entries_through
        )));
    };
    if link.hash(&previous, &ledger_id, &entry_hash)[..] != link.link_hash[..] {
        return Ok(Err(format!(
            "link {} no longer hashes to its link_hash (a link column, the ledger id or the entry hash it covers was \
             changed)",
            link.seq
        )));
    }
    let Ok(entry_hash) = Hash::try_from(entry_hash.as_slice()) else {
        return Ok(Err(format!("entry {} has no 32-byte entry_hash", link.entries_through)));
    };
    Ok(Ok(Verified { entries_through: link.entries_through, entry_hash, link }))
}

/// Whether `expected` is a link of the chain with that hash: `None` when it is; otherwise why not.
pub(crate) fn check_head(conn: &Connection, expected: &Head) -> rusqlite::Result<Option<String>> {
    let stored: Option<Vec<u8>> = conn
        .prepare_cached("SELECT link_hash FROM chain_links WHERE seq = ?")?
        .query_row([expected.seq as i64], |r| r.get(0))
        .optional()?;
    let head = read_head(conn)?;
    Ok(match stored {
        None => Some(format!(
            "link {} is not in the chain, which ends at link {}: the ledger lost links it had (its tail was cut, or \
             it was replaced by an older copy)",
            expected.seq, head.seq
        )),
        Some(hash) if hash[..] != expected.hash[..] => Some(format!(
            "link {} has hash {}, not {}: the ledger's history up to it was rewritten",
            expected.seq,
            hex(&hash),
            expected.hash_hex()
        )),
        Some(_) => None,
    })
}

impl crate::Ledger {
    /// The ledger's id (contract §9.3): a UUID made when the ledger was created (or, for a ledger older than ids, when it
    /// was upgraded), fixed for its life.
    pub fn ledger_id(&self) -> Result<String, crate::ReadError> {
        Ok(read_ledger_id(&self.conn)?)
    }

    /// The chain head (contract §9.3): the last link's number and hash. It moves with every append, close and accepted
    /// gap.
    pub fn head(&self) -> Result<Head, crate::ReadError> {
        Ok(read_head(&self.conn)?)
    }
}

/// What someone who can write the file does after changing rows the links cover: recomputes every link from
/// `from_seq` on, so that `verify` alone passes again. Only a checkpoint published before the change tells; the
/// tests use this to prove it. Never called by the ledger itself.
#[doc(hidden)]
pub fn rehash_links_as_an_attacker(conn: &Connection, from_seq: u64) -> rusqlite::Result<()> {
    conn.execute_batch("DROP TRIGGER IF EXISTS chain_links_refuse_update")?;
    let ledger_id = read_ledger_id(conn)?;
    let links: Vec<Link> = conn
        .prepare(&format!("SELECT {LINK_COLUMNS} FROM chain_links ORDER BY seq"))?
        .query_map([], Link::read)?
        .collect::<Result<_, _>>()?;
    let last = links.last().map_or(0, |l| l.seq);
    let mut previous: Option<Link> = None;
    for mut link in links {
        if link.seq >= from_seq {
            let from = previous.as_ref().map_or_else(Through::default, |p| p.through);
            link.rows_hash = rows_hash(conn, &from, &link.through, link.replays_key())?.to_vec();
            if link.seq == last {
                // The offsets as they are now (the attacker's), at the last link; earlier ones keep theirs.
                link.offsets_hash = offsets_hash(conn)?.to_vec();
            }
            let entry_hash = entry_hash_at(conn, link.entries_through)?.unwrap_or_default();
            let previous_hash = previous.as_ref().map_or(GENESIS.to_vec(), |p| p.link_hash.clone());
            link.link_hash = link.hash(&previous_hash, &ledger_id, &entry_hash).to_vec();
            conn.execute(
                "UPDATE chain_links SET rows_hash = ?2, link_hash = ?3, offsets_hash = ?4 WHERE seq = ?1",
                params![link.seq as i64, link.rows_hash, link.link_hash, link.offsets_hash],
            )?;
        }
        previous = Some(link);
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::Ledger;
    use crate::dedup::tests::usage;
    use crate::{Batch, SourceOffset};

    /// SQL that takes a ledger back to before migration 019, as a ledger made by an older binary is: no id, no
    /// links, no gaps.
    /// Undoes migrations 019 to 042 (020, 021, 034, 036 to 039, 041 and 042 have nothing to undo but their tables,
    /// 022 to 033, 035 and 040 their columns and indexes).
    pub(crate) const UNDO_019: &str =
        "DROP TABLE capacity_lease_events; DROP TABLE meter_events; ALTER TABLE period_exports DROP COLUMN plan; DROP TABLE plan_assignment_events; DROP TABLE hook_snapshots; DROP TABLE reconcile_checkpoint; DROP TABLE usage_corrections; DROP TABLE correction_events; DROP TABLE webhook_attempts; DROP TABLE webhook_endpoints; ALTER TABLE policy_events DROP COLUMN alert_subject_share; ALTER TABLE policy_events DROP COLUMN alert_thresholds; DROP TABLE alert_events; ALTER TABLE period_exports DROP COLUMN cycle_end; ALTER TABLE period_exports DROP COLUMN cycle_start; ALTER TABLE policy_events DROP COLUMN cycle_anchor; ALTER TABLE policy_events DROP COLUMN window_seconds; ALTER TABLE entries DROP COLUMN api_key; ALTER TABLE entries DROP COLUMN project; ALTER TABLE policy_events DROP COLUMN violation; ALTER TABLE policy_events DROP COLUMN overage_window; ALTER TABLE policy_events DROP COLUMN overage_rate; DROP INDEX decision_events_made_open; ALTER TABLE policy_events DROP COLUMN on_failure; DROP INDEX reservation_events_of_leases; ALTER TABLE reservation_events DROP COLUMN fencing_token; ALTER TABLE policy_events DROP COLUMN time_zone; ALTER TABLE policy_events DROP COLUMN actor; ALTER TABLE policy_events DROP COLUMN reason;
        ALTER TABLE grant_events DROP COLUMN actor; DROP TABLE forwarded; DROP TABLE shard_identity; DROP TABLE chain_links; DROP TABLE ledger_identity; DROP TABLE offset_gaps;
        DROP INDEX quarantine_replays_by_link; ALTER TABLE quarantine_replays DROP COLUMN link;";

    // Proves heads read back as they are written (`SEQ:HASH`), and that anything else is refused.
    #[test]
    fn heads_parse_as_they_print() {
        let head = Head { seq: 42, hash: crate::chain::sha256(b"x") };
        assert_eq!(head.to_string().parse::<Head>(), Ok(head));
        for bad in ["", "42", "42:", "x:00", &format!("42:{}", "0".repeat(63)), &format!("42:{}", "g".repeat(64))] {
            assert!(bad.parse::<Head>().is_err(), "{bad:?}");
        }
    }

    // Proves ledger ids are version 4 UUIDs.
    #[test]
    fn ledger_ids_are_random_uuids() {
        let id = uuid_v4([0xff; 16]);
        assert_eq!(id, "ffffffff-ffff-4fff-bfff-ffffffffffff");
        assert_eq!(uuid_v4([0; 16]), "00000000-0000-4000-8000-000000000000");
    }

    fn export_row(tenant: &str, consumption: i64) -> crate::PeriodExportRow {
        let month: crate::Period = "2026-10".parse().unwrap();
        crate::PeriodExportRow::unpriced(tenant.into(), "requests".into(), consumption, 0, (month.start(), month.end()))
    }

    /// A ledger with a row in every covered table: entries, an exact duplicate, a quarantined message, offsets, a
    /// closed month with its stored export, a replay of the quarantined message, then one more append.
    fn ledger_with_history(dir: &std::path::Path) -> Ledger {
        let mut ledger = Ledger::open(dir.join("ledger.db")).unwrap();
        let origin = crate::Origin::Kafka { topic: "quota.usage".into(), partition: 0, offset: 2 };
        let incoming = usage("u-3");
        let raw = ledger.catalog().encode_single_object(&incoming.event);
        let rejected = crate::Rejected { origin, raw, reason_code: "bad_magic".into(), reason: "held back".into() };
        let offsets = vec![SourceOffset { topic: "quota.usage".into(), partition: 0, next_offset: 3 }];
        let events = vec![usage("u-1"), usage("u-1"), usage("u-2")];
        ledger.append(&Batch { events, rejected: vec![rejected], offsets, ..Batch::default() }).unwrap();
        let october = "2026-10".parse().unwrap();
        ledger.close_period_with_export(october, |_, _| Ok(vec![export_row("org-1", 2)])).unwrap();
        ledger.replay_quarantined(&[], |_| Ok(Some(schemas::EventType::UsageEvent))).unwrap();
        ledger.append(&Batch { events: vec![usage("u-4")], ..Batch::default() }).unwrap();
        ledger
    }

    fn problem(ledger: &Ledger) -> String {
        ledger.verify().unwrap().first_bad.map(|b| b.problem).unwrap_or_default()
    }

    // Proves that a ledger made before ledger ids and links (its history in every covered table) gets an id and an
    // anchor over that history when opened, verifies, goes on linking, and that the anchor then covers the old rows.
    #[test]
    fn an_older_ledger_gets_an_id_and_an_anchor_over_its_history() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = ledger_with_history(dir.path());
        let replayed: i64 = ledger.conn.query_row("SELECT COUNT(*) FROM quarantine_replays", [], |r| r.get(0)).unwrap();
        assert_eq!(replayed, 1, "the history holds a replay");
        let older = format!("{UNDO_019} PRAGMA user_version = 17;");
        ledger.conn.execute_batch(&older).unwrap();
        drop(ledger);
        let mut ledger = Ledger::open(dir.path().join("ledger.db")).unwrap();
        let id = ledger.ledger_id().unwrap();
        assert_eq!((id.len(), &id[14..15]), (36, "4"), "a version 4 UUID: {id}");
        assert_eq!(ledger.head().unwrap().seq, 1, "the anchor");
        assert_eq!(problem(&ledger), "");
        ledger.append(&Batch { events: vec![usage("u-5")], ..Batch::default() }).unwrap();
        assert_eq!(ledger.head().unwrap().seq, 2);
        assert_eq!(ledger.ledger_id().unwrap(), id, "fixed");
        assert_eq!(problem(&ledger), "");
        ledger
            .conn
            .execute_batch("DROP TRIGGER period_exports_refuse_update; UPDATE period_exports SET consumption = 1")
            .unwrap();
        assert!(problem(&ledger).starts_with("link 1 (anchor): the rows it covers"), "{}", problem(&ledger));
    }

    // Proves that a change to any covered table is named by verify, at the link that covers the row (or, for rows
    // after the last link and the offsets, at the last link).
    #[test]
    fn a_changed_row_of_any_covered_table_is_named_by_verify() {
        let changes = [
            ("DROP TRIGGER period_exports_refuse_update; UPDATE period_exports SET consumption = 1", "link 3 (close)"),
            ("DROP TRIGGER period_closes_refuse_update; UPDATE period_closes SET closed_at = 0", "link 3 (close)"),
            ("DROP TRIGGER quarantine_refuse_update; UPDATE quarantine SET reason = 'x'", "link 2 (append)"),
            ("DROP TRIGGER duplicates_refuse_update; UPDATE duplicates SET origin_stream = 'x'", "link 2 (append)"),
            ("DROP TRIGGER quarantine_replays_refuse_update; UPDATE quarantine_replays SET replayed_at = 0", "link 4"),
            ("DROP TRIGGER batches_refuse_update; UPDATE batches SET committed_at = 0", "link 2 (append)"),
            (
                "INSERT INTO offset_gaps (topic, partition, from_offset, to_offset, accepted_at) VALUES ('t', 0, 0, 1, 0)",
                "offset_gaps ends at id 1, but the last link (5) covers it up to 0",
            ),
            ("UPDATE offsets SET next_offset = 9", "offsets differ from what the last link (5) recorded"),
        ];
        for (sql, named) in changes {
            let dir = tempfile::tempdir().unwrap();
            let ledger = ledger_with_history(dir.path());
            assert_eq!(problem(&ledger), "");
            ledger.conn.execute_batch(sql).unwrap();
            assert!(problem(&ledger).contains(named), "{sql}: {}", problem(&ledger));
        }
    }

    // Proves what only a checkpoint catches: history rewritten with every link recomputed (verify alone passes),
    // and a ledger replaced by an older copy of itself (it lacks the links published since).
    #[test]
    fn a_recomputed_chain_and_an_older_copy_fail_against_a_published_head() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = ledger_with_history(dir.path());
        let published = crate::ExpectedHead { head: ledger.head().unwrap(), at: None };
        assert!(ledger.verify_against(std::slice::from_ref(&published)).unwrap().first_bad_checkpoint.is_none());

        let copy = dir.path().join("copy.db");
        ledger.conn.execute("VACUUM INTO ?", [copy.to_str().unwrap()]).unwrap();
        ledger.append(&Batch { events: vec![usage("u-9")], ..Batch::default() }).unwrap();
        let later = crate::ExpectedHead { head: ledger.head().unwrap(), at: Some("now".into()) };
        let older = Ledger::open(&copy).unwrap();
        let report = older.verify_against(&[published.clone(), later.clone()]).unwrap();
        assert!(report.first_bad.is_none(), "the copy is whole in itself");
        let bad = report.first_bad_checkpoint.expect("the later head is not in the copy");
        assert_eq!((bad.head_seq, bad.at.as_deref()), (later.head.seq, Some("now")));
        assert!(bad.problem.contains("is not in the chain, which ends at link"), "{}", bad.problem);

        ledger
            .conn
            .execute_batch("DROP TRIGGER period_exports_refuse_update; UPDATE period_exports SET consumption = 1")
            .unwrap();
        rehash_links_as_an_attacker(&ledger.conn, 1).unwrap();
        assert_eq!(problem(&ledger), "", "recomputed: verify alone cannot tell");
        let bad = ledger.verify_against(&[published]).unwrap().first_bad_checkpoint.expect("the head moved");
        assert!(bad.problem.contains("history up to it was rewritten"), "{}", bad.problem);
    }
}
