//! Accepted offset gaps: Kafka offsets the ledger never read and never will (messages removed by retention before
//! ingest read them; a topic deleted and recreated under the ledger's offsets), recorded when the operator accepts
//! them (`ingest --accept-gap TOPIC:PARTITION:FROM-TO`), chained like every other write (`links.rs`). `status`
//! lists them, and the billing export of a period names those that may have taken its events.

use std::fmt;
use std::str::FromStr;

use rusqlite::{OptionalExtension, TransactionBehavior, params};
use serde::Serialize;

use crate::error::{GapError, ReadError};
use crate::links::{self, LinkKind};
use crate::{Ledger, Period, now_micros};

/// A range of offsets of one partition, both ends included: `TOPIC:PARTITION:FROM-TO` (what ingest names when it
/// stops, and what `--accept-gap` takes).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GapRange {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The first offset missing.
    pub from_offset: i64,
    /// The last offset missing.
    pub to_offset: i64,
}

impl GapRange {
    /// How many offsets the range holds.
    pub fn len(&self) -> i64 {
        self.to_offset - self.from_offset + 1
    }

    /// Whether it holds none (never, once parsed).
    pub fn is_empty(&self) -> bool {
        self.to_offset < self.from_offset
    }

    /// Whether `other` lies inside this range, on the same partition.
    pub fn covers(&self, other: &GapRange) -> bool {
        self.topic == other.topic
            && self.partition == other.partition
            && self.from_offset <= other.from_offset
            && self.to_offset >= other.to_offset
    }
}

impl fmt::Display for GapRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}-{}", self.topic, self.partition, self.from_offset, self.to_offset)
    }
}

/// A gap that is not `TOPIC:PARTITION:FROM-TO`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "gap {0:?} is not TOPIC:PARTITION:FROM-TO (for example quota.usage:0:1200-1499, offsets from 0, FROM at most TO), \
     as ingest names it"
)]
pub struct GapParseError(pub String);

impl FromStr for GapRange {
    type Err = GapParseError;
    fn from_str(text: &str) -> Result<GapRange, GapParseError> {
        let error = || GapParseError(text.to_string());
        // Kafka topic names hold no colon; split from the right all the same.
        let mut parts = text.rsplitn(3, ':');
        let (range, partition, topic) = (parts.next(), parts.next(), parts.next());
        let (Some(range), Some(partition), Some(topic)) = (range, partition, topic) else { return Err(error()) };
        let (from, to) = range.split_once('-').ok_or_else(error)?;
        let gap = GapRange {
            topic: topic.to_string(),
            partition: partition.parse().map_err(|_| error())?,
            from_offset: from.parse().map_err(|_| error())?,
            to_offset: to.parse().map_err(|_| error())?,
        };
        if topic.is_empty() || gap.partition < 0 || gap.from_offset < 0 || gap.is_empty() {
            return Err(error());
        }
        Ok(gap)
    }
}

/// An accepted gap, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct OffsetGap {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The first offset never read.
    pub from_offset: i64,
    /// The last offset never read.
    pub to_offset: i64,
    /// When it was accepted (RFC 3339, UTC).
    pub accepted_at: String,
}

impl OffsetGap {
    /// Its range.
    pub fn range(&self) -> GapRange {
        GapRange {
            topic: self.topic.clone(),
            partition: self.partition,
            from_offset: self.from_offset,
            to_offset: self.to_offset,
        }
    }
}

const GAP_COLUMNS: &str = "topic, partition, from_offset, to_offset, accepted_at";

fn gap_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<OffsetGap> {
    Ok(OffsetGap {
        topic: r.get(0)?,
        partition: r.get(1)?,
        from_offset: r.get(2)?,
        to_offset: r.get(3)?,
        accepted_at: schemas::Timestamp(r.get(4)?).to_string(),
    })
}

impl Ledger {
    /// Records `range` as offsets the ledger will never read, and moves the partition's next offset past it, in
    /// one transaction. The range must touch the ledger's next offset N of the partition (0 when it has read
    /// nothing there): it starts at N (messages removed before they were read: ingest resumes after it), or ends
    /// at N - 1 (a topic recreated below the ledger's offsets: the offsets below N are the new topic's, never read).
    /// A range recorded already is answered as it was.
    pub fn accept_gap(&mut self, range: &GapRange) -> Result<OffsetGap, GapError> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let held = tx
            .prepare(&format!(
                "SELECT {GAP_COLUMNS} FROM offset_gaps
                 WHERE topic = ?1 AND partition = ?2 AND from_offset = ?3 AND to_offset = ?4"
            ))?
            .query_row(params![range.topic, range.partition, range.from_offset, range.to_offset], gap_from_row)
            .optional()?;
        if let Some(held) = held {
            return Ok(held);
        }
        let next: i64 = tx
            .query_row(
                "SELECT next_offset FROM offsets WHERE topic = ? AND partition = ?",
                params![range.topic, range.partition],
                |r| r.get(0),
            )
            .optional()?
            .unwrap_or(0);
        if !(range.from_offset <= next && next <= range.to_offset + 1) {
            return Err(GapError::NotAtNextOffset { range: range.clone(), next });
        }
        tx.execute(
            "INSERT INTO offset_gaps (topic, partition, from_offset, to_offset, accepted_at) VALUES (?, ?, ?, ?, ?)",
            params![range.topic, range.partition, range.from_offset, range.to_offset, now_micros()],
        )?;
        tx.execute(
            "INSERT INTO offsets (topic, partition, next_offset) VALUES (?1, ?2, ?3)
             ON CONFLICT (topic, partition) DO UPDATE SET next_offset = MAX(next_offset, excluded.next_offset)",
            params![range.topic, range.partition, range.to_offset + 1],
        )?;
        links::seal(&tx, LinkKind::Gap, true)?;
        let gap =
            tx.query_row(&format!("SELECT {GAP_COLUMNS} FROM offset_gaps ORDER BY id DESC LIMIT 1"), [], gap_from_row)?;
        tx.commit()?;
        Ok(gap)
    }

    /// Every accepted gap, oldest first.
    pub fn offset_gaps(&self) -> Result<Vec<OffsetGap>, ReadError> {
        let mut statement = self.conn.prepare(&format!("SELECT {GAP_COLUMNS} FROM offset_gaps ORDER BY id"))?;
        let gaps = statement.query_map([], gap_from_row)?.collect::<Result<_, _>>()?;
        Ok(gaps)
    }

    /// The gaps the billing export of `period` names: those accepted from the period's start on, while it was open
    /// (before the close it is judged by, [`crate::covering_close`]). A message never read may have been usage of
    /// any month still open; a closed month's bill never changes, so a gap accepted after its close is not its
    /// own. Oldest first; the same answer for a closed period however many gaps come later.
    pub fn gaps_of_period(&self, period: Period) -> Result<Vec<OffsetGap>, ReadError> {
        let conn = &self.conn;
        // The close the period is judged by: its own, or the ledger's first when the period lies before it.
        let own = crate::periods::read_close(conn, period)?.map(|c| c.period);
        let first: Option<String> = conn.query_row("SELECT MIN(period) FROM period_closes", [], |r| r.get(0))?;
        let first = first.and_then(|f| f.parse::<Period>().ok()).filter(|f| period < *f);
        // The greatest gap id that close's link covers (the anchor's, for a close recorded before links existed).
        let closed_through: Option<i64> = match own.or(first) {
            None => None,
            Some(closing) => conn.query_row(
                "SELECT MIN(l.gaps_through) FROM chain_links l, period_closes c
                 WHERE c.period = ?1 AND l.closes_through >= c.rowid",
                [closing.to_string()],
                |r| r.get(0),
            )?,
        };
        let mut statement = conn.prepare_cached(&format!(
            "SELECT {GAP_COLUMNS} FROM offset_gaps WHERE accepted_at >= ?1 AND id <= ?2 ORDER BY id"
        ))?;
        let gaps = statement
            .query_map(params![period.start().micros(), closed_through.unwrap_or(i64::MAX)], gap_from_row)?
            .collect::<Result<_, _>>()?;
        Ok(gaps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(text: &str) -> GapRange {
        text.parse().unwrap()
    }

    // Proves gap ranges read as ingest prints them, and that anything else is refused.
    #[test]
    fn gap_ranges_parse_as_they_print() {
        let gap = range("quota.usage:2:1200-1499");
        assert_eq!((gap.topic.as_str(), gap.partition, gap.from_offset, gap.to_offset), ("quota.usage", 2, 1200, 1499));
        assert_eq!(gap.to_string(), "quota.usage:2:1200-1499");
        assert_eq!(gap.len(), 300);
        for bad in ["", "quota.usage", "quota.usage:2", "quota.usage:2:5", ":2:1-2", "t:-1:1-2", "t:0:5-4", "t:0:-1-2"]
        {
            assert!(bad.parse::<GapRange>().is_err(), "{bad:?}");
        }
    }

    // Proves a gap is accepted only where it touches the ledger's next offset, moves that offset past it (never back),
    // is recorded once, keeps the chain whole, and is named by the exports of the periods open when it came.
    #[test]
    fn an_accepted_gap_moves_the_offset_past_it_and_is_chained() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = Ledger::open(dir.path().join("l.db")).unwrap();
        let before = ledger.head().unwrap();
        let refused = ledger.accept_gap(&range("quota.usage:0:3-5")).unwrap_err();
        assert!(refused.to_string().contains("next offset of quota.usage[0] is 0"), "{refused}");
        let gap = ledger.accept_gap(&range("quota.usage:0:0-5")).unwrap();
        assert_eq!(ledger.offsets().unwrap()[0].next_offset, 6);
        assert_eq!(ledger.head().unwrap().seq, before.seq + 1);
        assert_eq!(ledger.accept_gap(&range("quota.usage:0:0-5")).unwrap(), gap, "recorded once");
        // A recreated topic: the range below the ledger's offset, which stays where it is.
        ledger.accept_gap(&range("quota.usage:0:2-5")).unwrap();
        assert_eq!(ledger.offsets().unwrap()[0].next_offset, 6);
        assert_eq!(ledger.offset_gaps().unwrap().len(), 2);
        assert!(ledger.verify().unwrap().first_bad.is_none());

        let open: Period = "2026-11".parse().unwrap();
        assert_eq!(ledger.gaps_of_period(open).unwrap().len(), 2);
        let future: Period = "2099-01".parse().unwrap();
        assert!(ledger.gaps_of_period(future).unwrap().is_empty(), "accepted before it began");
        ledger.close_period(open).unwrap();
        ledger.accept_gap(&range("quota.usage:1:0-0")).unwrap();
        let named: Vec<String> = ledger.gaps_of_period(open).unwrap().iter().map(|g| g.range().to_string()).collect();
        assert_eq!(named, ["quota.usage:0:0-5", "quota.usage:0:2-5"], "the gap after the close is not November's");
        assert!(ledger.verify().unwrap().first_bad.is_none());
    }
}
