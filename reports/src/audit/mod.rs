//! Audit answers for support (SPEC 1): `audit why REQUEST_ID` ([`why`]) and `audit tenant` ([`tenant`]), each
//! a few DataFusion queries over the ledger at one watermark, then words a support engineer can paste
//! ([`render`]) or JSON.

pub mod render;
pub mod tenant;
pub mod why;

use datafusion::common::ScalarValue;
use rules::reservation::same_reservation;
use schemas::{ReservationAction, ReservationEvent, Timestamp};

use crate::columns::Frame;
use crate::error::ReportError;
use crate::session::LedgerSession;

const RESERVATIONS: &str = include_str!("../../sql/audit_reservations.sql");
const TENANT_RESERVATIONS: &str = include_str!("../../sql/tenant_reservations.sql");

fn text(value: &str) -> ScalarValue {
    ScalarValue::Utf8(Some(value.to_string()))
}

fn time(t: Timestamp) -> ScalarValue {
    ScalarValue::TimestampMicrosecond(Some(t.micros()), Some("UTC".into()))
}

/// Runs a query and answers its batches as frames.
fn frames(session: &LedgerSession, sql: &str, params: Vec<ScalarValue>) -> Result<Vec<Frame>, ReportError> {
    session.query(sql, params)?.iter().map(Frame::new).collect()
}

/// Runs a query and hands each batch, as a frame, to `each` as it arrives.
fn for_each_frame(
    session: &LedgerSession,
    sql: &str,
    params: Vec<ScalarValue>,
    mut each: impl FnMut(&Frame),
) -> Result<(), ReportError> {
    session.for_each_batch_with(sql, params, |batch| {
        each(&Frame::new(batch)?);
        Ok(())
    })?;
    Ok(())
}

/// Calls `each` with the recorded events of every reservation of a tenant (and metric, when given), one
/// reservation at a time (`rules::reservation::same_reservation`: the queries select one tenant, so one
/// reservation_id), each with its ledger sequence number.
fn reservation_groups(
    session: &LedgerSession,
    tenant: &str,
    metric: Option<&str>,
    mut each: impl FnMut(&[(u64, ReservationEvent)]),
) -> Result<(), ReportError> {
    let mut group: Vec<(u64, ReservationEvent)> = Vec::new();
    let mut failed = None;
    let (sql, params) = match metric {
        Some(metric) => (RESERVATIONS, vec![text(tenant), text(metric)]),
        None => (TENANT_RESERVATIONS, vec![text(tenant)]),
    };
    for_each_frame(session, sql, params, |f| {
        for r in 0..f.rows() {
            let seq = f.i64("seq", r) as u64;
            let action = f.str("action", r);
            let Some(action) = ReservationAction::from_symbol(&action) else {
                failed = Some(ReportError::UnknownSymbol { seq, what: "reservation action", value: action });
                return;
            };
            let event = ReservationEvent {
                header: f.header(r),
                reservation_id: f.str("reservation_id", r),
                action,
                amount: f.i64("amount", r),
                expires_at: f.opt_time("expires_at", r),
            };
            if group.first().is_some_and(|(_, first)| !same_reservation(first, &event)) {
                each(&group);
                group.clear();
            }
            group.push((seq, event));
        }
    })?;
    if let Some(error) = failed {
        return Err(error);
    }
    if !group.is_empty() {
        each(&group);
    }
    Ok(())
}

/// Nearest names (request ids, tenants) offered for an unknown one.
pub const NEAREST_SHOWN: usize = 5;

/// The values of `column` in the rows of `sql` nearest to `wanted`, nearest first, at most [`NEAREST_SHOWN`]:
/// those within an edit distance of a third of its length (at least 2), or that contain it. Compared without
/// case, so that `REQ-DEMO-1-1` finds `req-demo-1-1` (ids are typed by hand, read over the phone).
fn nearest(session: &LedgerSession, sql: &str, column: &str, wanted: &str) -> Result<Vec<String>, ReportError> {
    let wanted_folded = wanted.to_lowercase();
    let budget = (wanted_folded.chars().count() / 3).max(2);
    let mut candidates = Candidates::new(NEAREST_SHOWN);
    for_each_frame(session, sql, Vec::new(), |f| {
        for r in 0..f.rows() {
            let known = f.str(column, r);
            let known_folded = known.to_lowercase();
            let distance = edit_distance(&wanted_folded, &known_folded);
            if distance <= budget || known_folded.contains(&wanted_folded) {
                candidates.offer(distance, known);
            }
        }
    })?;
    Ok(candidates.into_sorted())
}

/// The `limit` best (smallest distance, then alphabetical) distinct candidates offered.
struct Candidates {
    limit: usize,
    best: Vec<(usize, String)>,
}

impl Candidates {
    fn new(limit: usize) -> Candidates {
        Candidates { limit, best: Vec::new() }
    }

    fn offer(&mut self, distance: usize, name: String) {
        if self.best.iter().any(|(_, n)| *n == name) {
            return;
        }
        self.best.push((distance, name));
        self.best.sort();
        self.best.truncate(self.limit);
    }

    fn into_sorted(self) -> Vec<String> {
        self.best.into_iter().map(|(_, n)| n).collect()
    }
}

/// Levenshtein distance over characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        previous = current;
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves the nearest candidates are the closest by edit distance, distinct, at most the limit.
    #[test]
    fn nearest_candidates_by_edit_distance() {
        assert_eq!(edit_distance("req-81f3", "req-81f3"), 0);
        assert_eq!(edit_distance("req-81f3", "req-81f4"), 1);
        assert_eq!(edit_distance("req-81f3", "req-8f3"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        let mut c = Candidates::new(2);
        for (d, n) in [(3, "c"), (1, "b"), (1, "a"), (1, "a"), (2, "d")] {
            c.offer(d, n.to_string());
        }
        assert_eq!(c.into_sorted(), ["a", "b"]);
    }
}
