//! The reads support's answers are made of (contract §1: `audit why REQUEST_ID`, `audit tenant`), each bounded by a
//! watermark so that an answer reads one instant of the ledger: the decisions of a request, found through the
//! request key index (`ddl/010-request-keys.sql`); and a tenant's history (usage in a window, decisions and usage
//! over a range, reservations, adjustments, conflicting copies), found through the index of a tenant's entries in
//! event time (`ddl/018-entries-by-tenant.sql`), so that an answer reads the entries it tells of, not the ledger.
//!
//! Decisions and adjustments keep their enum symbols as stored text ([`DecisionRecord::reason`],
//! [`AdjustmentRecord::kind`]): an answer still shows a symbol a newer writer recorded and this version does not
//! know.

use rusqlite::{Row, named_params};
use schemas::{
    AlertEvent, AlertKind, Enforcement, GrantEvent, Header, OnFailure, PolicyEvent, Scope, Timestamp, Violation, Window,
};

use crate::Ledger;
use crate::billing_reads::group_reservations;
use crate::dedup::request_key;
use crate::error::ReadError;
use crate::read::{ConflictingCopy, SequencedReservation, header, optional_symbol, symbol, watermark_param};

const DECISIONS_OF_REQUEST: &str = include_str!("../queries/decisions_of_request.sql");
const REQUEST_IDS: &str = include_str!("../queries/request_ids.sql");
const POLICY_VERSIONS: &str = include_str!("../queries/policy_versions.sql");
const GRANTS_OF_TENANT_METRIC: &str = include_str!("../queries/grants_of_tenant_metric.sql");
const WINDOW_USAGE: &str = include_str!("../queries/window_usage.sql");
const WINDOW_ADJUSTMENTS: &str = include_str!("../queries/window_adjustments.sql");
const RESERVATION_EVENTS_OF_TENANT: &str = include_str!("../queries/reservation_events_of_tenant.sql");
const TENANT_DECISIONS: &str = include_str!("../queries/tenant_decisions.sql");
const TENANT_USAGE_PER_DAY: &str = include_str!("../queries/tenant_usage_per_day.sql");
const TENANT_USAGE_EVENTS: &str = include_str!("../queries/tenant_usage_events.sql");
const TENANT_ADJUSTMENTS: &str = include_str!("../queries/tenant_adjustments.sql");
const TENANT_ALERTS: &str = include_str!("../queries/tenant_alerts.sql");
const USAGE_CORRECTIONS: &str = include_str!("../queries/usage_corrections.sql");
const ALERTS_BETWEEN: &str = include_str!("../queries/alerts_between.sql");
const TENANT_CONFLICTING_COPIES: &str = include_str!("../queries/tenant_conflicting_copies.sql");
const TENANT_KNOWN: &str = include_str!("../queries/tenant_known.sql");
const TENANT_NAMES: &str = include_str!("../queries/tenant_names.sql");

/// Microseconds in a UTC day.
const DAY_MICROS: i64 = 86_400_000_000;

/// A recorded DecisionEvent, with its ledger sequence number (contract §3 names its fields).
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)] // The DecisionEvent's own fields, by their contract §3 names.
pub struct DecisionRecord {
    pub seq: u64,
    pub header: Header,
    pub request_id: String,
    pub idempotency_key: String,
    pub amount: i64,
    /// The `Outcome` symbol, as stored.
    pub outcome: String,
    /// The `Reason` symbol, as stored.
    pub reason: String,
    pub policy_id: Option<String>,
    pub policy_version: Option<i32>,
    pub window_start: Option<Timestamp>,
    pub window_end: Option<Timestamp>,
    pub limit: Option<i64>,
    pub used_before: Option<i64>,
    pub remaining: Option<i64>,
    pub retry_after_ms: Option<i64>,
}

/// A recorded UsageEvent (its attributes left out), with its ledger sequence number.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)] // The UsageEvent's own fields, by their contract §3 names.
pub struct UsageRecord {
    pub seq: u64,
    pub header: Header,
    pub quantity: i64,
    pub request_id: Option<String>,
}

/// A recorded AdjustmentEvent, with its ledger sequence number.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)] // The AdjustmentEvent's own fields, by their contract §3 names.
pub struct AdjustmentRecord {
    pub seq: u64,
    /// `occurred_at` is the `--as-of` of the reconcile run that wrote it.
    pub header: Header,
    pub adjustment_id: String,
    /// The `AdjustmentKind` symbol, as stored.
    pub kind: String,
    pub policy_id: Option<String>,
    pub window_start: Option<Timestamp>,
    pub window_end: Option<Timestamp>,
    pub amount: i64,
    /// The event_ids it is about.
    pub refs: Vec<String>,
    pub run_id: String,
    /// The `Scope` symbol of a window adjustment's policy, as stored; none for other kinds and for those written before
    /// AdjustmentEvent v2.
    pub scope: Option<String>,
}

/// Counted usage of one tenant, UTC day and metric.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DayUsage {
    /// The day's first instant.
    pub day: Timestamp,
    /// The metric.
    pub metric: String,
    /// The sum of the day's quantities.
    pub quantity: i64,
    /// How many usage events.
    pub events: u64,
}

/// One counted usage event of a tenant, as a usage query sums it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantUsage {
    /// When it occurred.
    pub occurred_at: Timestamp,
    /// The metric.
    pub metric: String,
    /// The subject, project and API key it names, each when it names one.
    pub subject: Option<String>,
    /// The project.
    pub project: Option<String>,
    /// The API key.
    pub api_key: Option<String>,
    /// Its quantity.
    pub quantity: i64,
}

impl Ledger {
    /// Every decision recorded for `request_id` up to `watermark`, oldest first (event time, then ledger order).
    pub fn decisions_of_request(&self, request_id: &str, watermark: u64) -> Result<Vec<DecisionRecord>, ReadError> {
        let mut statement = self.conn.prepare_cached(DECISIONS_OF_REQUEST)?;
        let params = named_params! {
            ":request_key": request_key(request_id),
            ":request_id": request_id,
            ":watermark": watermark_param(watermark),
        };
        let rows = statement.query_map(params, decision_record)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Calls `each` with the request_id of every decision recorded up to `watermark` (a scan of every decision).
    pub fn for_each_request_id(&self, watermark: u64, mut each: impl FnMut(&str)) -> Result<(), ReadError> {
        let mut statement = self.conn.prepare_cached(REQUEST_IDS)?;
        let mut rows = statement.query(named_params! { ":watermark": watermark_param(watermark) })?;
        while let Some(row) = rows.next()? {
            each(row.get_ref(0)?.as_str().map_err(rusqlite::Error::from)?);
        }
        Ok(())
    }

    /// Every version of `policy_id` for `metric` recorded up to `watermark`, of `tenant`'s own and of the plan
    /// default (`*`), in ledger order, each with its ledger sequence number.
    pub fn policy_versions(
        &self,
        policy_id: &str,
        metric: Option<&str>,
        tenant: &str,
        watermark: u64,
    ) -> Result<Vec<(u64, PolicyEvent)>, ReadError> {
        let mut statement = self.conn.prepare_cached(POLICY_VERSIONS)?;
        let params = named_params! {
            ":policy_id": policy_id,
            ":metric": metric,
            ":tenant": tenant,
            ":watermark": watermark_param(watermark),
        };
        let rows = statement.query_map(params, |r| {
            let policy = PolicyEvent {
                header: header(r, 1)?,
                policy_id: r.get(7)?,
                version: r.get(8)?,
                scope: symbol(r, 9, Scope::from_symbol)?,
                limit: r.get(10)?,
                window: symbol(r, 11, Window::from_symbol)?,
                enforcement: symbol(r, 12, Enforcement::from_symbol)?,
                effective_from: Timestamp(r.get(13)?),
                burst: r.get(14)?,
                actor: r.get(15)?,
                reason: r.get(16)?,
                time_zone: r.get(17)?,
                on_failure: optional_symbol(r, 18, OnFailure::from_symbol)?,
                overage_rate: r.get(19)?,
                overage_window: optional_symbol(r, 20, Window::from_symbol)?,
                violation: optional_symbol(r, 21, Violation::from_symbol)?,
                window_seconds: r.get(22)?,
                cycle_anchor: r.get::<_, Option<i64>>(23)?.map(Timestamp),
                alert_thresholds: crate::read::alert_thresholds(r, 24)?,
                alert_subject_share: r.get(25)?,
            };
            Ok((r.get::<_, i64>(0)? as u64, policy))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Every grant of `tenant` and `metric` recorded up to `watermark`, in ledger order.
    pub fn grants_of(&self, tenant: &str, metric: &str, watermark: u64) -> Result<Vec<GrantEvent>, ReadError> {
        let mut statement = self.conn.prepare_cached(GRANTS_OF_TENANT_METRIC)?;
        let params = named_params! { ":tenant": tenant, ":metric": metric, ":watermark": watermark_param(watermark) };
        let rows = statement.query_map(params, |r| {
            Ok(GrantEvent {
                header: header(r, 1)?,
                grant_id: r.get(7)?,
                amount: r.get(8)?,
                valid_from: Timestamp(r.get(9)?),
                valid_until: Timestamp(r.get(10)?),
                reason: r.get(11)?,
                actor: r.get(12)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Calls `each` with the counted usage of `tenant` and `metric` that occurred in `[from, through]` (both
    /// included), recorded up to `watermark`, in no particular order.
    pub fn for_each_usage_between(
        &self,
        tenant: &str,
        metric: &str,
        (from, through): (Timestamp, Timestamp),
        watermark: u64,
        mut each: impl FnMut(UsageRecord),
    ) -> Result<(), ReadError> {
        let mut statement = self.conn.prepare_cached(WINDOW_USAGE)?;
        let params = named_params! {
            ":tenant": tenant,
            ":metric": metric,
            ":from": from.micros(),
            ":through": through.micros(),
            ":watermark": watermark_param(watermark),
        };
        let mut rows = statement.query(params)?;
        while let Some(r) = rows.next()? {
            each(UsageRecord {
                seq: r.get::<_, i64>(0)? as u64,
                header: header(r, 1)?,
                quantity: r.get(7)?,
                request_id: r.get(8)?,
            });
        }
        Ok(())
    }

    /// Calls `each` with the recorded events of every reservation of `tenant` (of `metric` only, when given) up to
    /// `watermark`, one reservation at a time, its events in ledger order; answers how many events there were.
    pub fn for_each_reservation_of(
        &self,
        tenant: &str,
        metric: Option<&str>,
        watermark: u64,
        each: impl FnMut(&[SequencedReservation]),
    ) -> Result<u64, ReadError> {
        let mut statement = self.conn.prepare_cached(RESERVATION_EVENTS_OF_TENANT)?;
        let params = named_params! { ":tenant": tenant, ":metric": metric, ":watermark": watermark_param(watermark) };
        let mut rows = statement.query(params)?;
        Ok(group_reservations(&mut rows, each)?)
    }

    /// The adjustments of `tenant` and `metric` recorded up to `watermark` whose window overlaps `[start, end)`,
    /// in ledger order.
    pub fn window_adjustments(
        &self,
        tenant: &str,
        metric: &str,
        (start, end): (Timestamp, Timestamp),
        watermark: u64,
    ) -> Result<Vec<AdjustmentRecord>, ReadError> {
        let mut statement = self.conn.prepare_cached(WINDOW_ADJUSTMENTS)?;
        let params = named_params! {
            ":tenant": tenant,
            ":metric": metric,
            ":start": start.micros(),
            ":end": end.micros(),
            ":watermark": watermark_param(watermark),
        };
        let rows = statement.query_and_then(params, adjustment_record)?;
        rows.collect()
    }

    /// The decisions of `tenant` that occurred in `[from, to)`, recorded up to `watermark`, in event time then
    /// ledger order.
    pub fn tenant_decisions(
        &self,
        tenant: &str,
        (from, to): (Timestamp, Timestamp),
        watermark: u64,
    ) -> Result<Vec<DecisionRecord>, ReadError> {
        let mut statement = self.conn.prepare_cached(TENANT_DECISIONS)?;
        let params = named_params! {
            ":tenant": tenant,
            ":from": from.micros(),
            ":to": to.micros(),
            ":watermark": watermark_param(watermark),
        };
        let rows = statement.query_map(params, decision_record)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The counted usage of `tenant` that occurred in `[from, to)`, recorded up to `watermark`, per UTC day and
    /// metric, by day then metric.
    pub fn tenant_usage_per_day(
        &self,
        tenant: &str,
        (from, to): (Timestamp, Timestamp),
        watermark: u64,
    ) -> Result<Vec<DayUsage>, ReadError> {
        let mut statement = self.conn.prepare_cached(TENANT_USAGE_PER_DAY)?;
        let params = named_params! {
            ":tenant": tenant,
            ":from": from.micros(),
            ":to": to.micros(),
            ":watermark": watermark_param(watermark),
            ":day_micros": DAY_MICROS,
        };
        let rows = statement.query_map(params, |r| {
            Ok(DayUsage {
                day: Timestamp(r.get(0)?),
                metric: r.get(1)?,
                quantity: r.get(2)?,
                events: r.get::<_, i64>(3)? as u64,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Calls `each` with every counted usage event of `tenant` (of `metric` only, when given) that occurred in
    /// `[from, to)`, recorded up to `watermark`, in no promised order; answers how many there were.
    pub fn for_each_usage_of(
        &self,
        tenant: &str,
        metric: Option<&str>,
        (from, to): (Timestamp, Timestamp),
        watermark: u64,
        mut each: impl FnMut(TenantUsage),
    ) -> Result<u64, ReadError> {
        let mut statement = self.conn.prepare_cached(TENANT_USAGE_EVENTS)?;
        let params = named_params! {
            ":tenant": tenant,
            ":metric": metric,
            ":from": from.micros(),
            ":to": to.micros(),
            ":watermark": watermark_param(watermark),
        };
        let mut rows = statement.query(params)?;
        let mut count = 0;
        while let Some(r) = rows.next()? {
            each(TenantUsage {
                occurred_at: Timestamp(r.get(0)?),
                metric: r.get(1)?,
                subject: r.get(2)?,
                project: r.get(3)?,
                api_key: r.get(4)?,
                quantity: r.get(5)?,
            });
            count += 1;
        }
        Ok(count)
    }

    /// The adjustments of `tenant` recorded up to `watermark` whose window overlaps `[from, to)`, and all of those
    /// without a window, in ledger order.
    pub fn tenant_adjustments(
        &self,
        tenant: &str,
        (from, to): (Timestamp, Timestamp),
        watermark: u64,
    ) -> Result<Vec<AdjustmentRecord>, ReadError> {
        let mut statement = self.conn.prepare_cached(TENANT_ADJUSTMENTS)?;
        let params = named_params! {
            ":tenant": tenant,
            ":from": from.micros(),
            ":to": to.micros(),
            ":watermark": watermark_param(watermark),
        };
        let rows = statement.query_and_then(params, adjustment_record)?;
        rows.collect()
    }

    /// `tenant`'s alerts that occurred in `[from, to)`, recorded up to `watermark`, in ledger order, with their
    /// sequence numbers.
    pub fn tenant_alerts(
        &self,
        tenant: &str,
        (from, to): (Timestamp, Timestamp),
        watermark: u64,
    ) -> Result<Vec<(u64, AlertEvent)>, ReadError> {
        let mut statement = self.conn.prepare_cached(TENANT_ALERTS)?;
        let params = named_params! {
            ":tenant": tenant,
            ":from": from.micros(),
            ":to": to.micros(),
            ":watermark": watermark_param(watermark),
        };
        let rows = statement.query_map(params, alert_record)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Every alert that occurred in `[from, to)`, in ledger order, with their sequence numbers.
    pub fn alerts_between(&self, (from, to): (Timestamp, Timestamp)) -> Result<Vec<(u64, AlertEvent)>, ReadError> {
        let mut statement = self.conn.prepare_cached(ALERTS_BETWEEN)?;
        let rows = statement.query_map(named_params! { ":from": from.micros(), ":to": to.micros() }, alert_record)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The corrections of `tenant`'s usage recorded up to `watermark` whose original happened or which were made in
    /// `[from, to)`, in ledger order (`audit tenant`).
    pub fn tenant_corrections(
        &self,
        tenant: &str,
        (from, to): (Timestamp, Timestamp),
        watermark: u64,
    ) -> Result<Vec<CorrectionRecord>, ReadError> {
        self.corrections_where(Some(tenant), None, Some((from, to)), watermark)
    }

    /// The corrections of the usage events of `request_id` recorded up to `watermark`, in ledger order (`audit why`).
    pub fn request_corrections(&self, request_id: &str, watermark: u64) -> Result<Vec<CorrectionRecord>, ReadError> {
        self.corrections_where(None, Some(request_id), None, watermark)
    }

    fn corrections_where(
        &self,
        tenant: Option<&str>,
        request_id: Option<&str>,
        range: Option<(Timestamp, Timestamp)>,
        watermark: u64,
    ) -> Result<Vec<CorrectionRecord>, ReadError> {
        let mut statement = self.conn.prepare_cached(USAGE_CORRECTIONS)?;
        let params = named_params! {
            ":tenant": tenant,
            ":request_id": request_id,
            ":from": range.map(|(from, _)| from.micros()),
            ":to": range.map(|(_, to)| to.micros()),
            ":watermark": watermark_param(watermark),
        };
        let rows = statement.query_map(params, |r| {
            Ok(CorrectionRecord {
                seq: r.get::<_, i64>(0)? as u64,
                event_id: r.get(1)?,
                corrected_at: Timestamp(r.get(2)?),
                original_event_id: r.get(3)?,
                original_occurred_at: Timestamp(r.get(4)?),
                tenant: r.get(5)?,
                metric: r.get(6)?,
                action: r.get(7)?,
                quantity_before: r.get(8)?,
                quantity_after: r.get(9)?,
                delta: r.get(10)?,
                actor: r.get(11)?,
                reason: r.get(12)?,
                request_id: r.get(13)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The conflicting copies of `tenant`'s events recorded up to `watermark`, in ledger order.
    pub fn conflicting_copies_of(&self, tenant: &str, watermark: u64) -> Result<Vec<ConflictingCopy>, ReadError> {
        let mut statement = self.conn.prepare_cached(TENANT_CONFLICTING_COPIES)?;
        let params = named_params! { ":tenant": tenant, ":watermark": watermark_param(watermark) };
        let rows = statement.query_map(params, |r| {
            Ok(ConflictingCopy { seq: r.get::<_, i64>(0)? as u64, header: header(r, 1)?, quantity: r.get(7)? })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Whether the ledger holds an entry of `tenant` up to `watermark`.
    pub fn holds_tenant(&self, tenant: &str, watermark: u64) -> Result<bool, ReadError> {
        let mut statement = self.conn.prepare_cached(TENANT_KNOWN)?;
        let mut rows =
            statement.query(named_params! { ":tenant": tenant, ":watermark": watermark_param(watermark) })?;
        Ok(rows.next()?.is_some())
    }

    /// Calls `each` with every tenant the ledger holds an entry of up to `watermark`, each once.
    pub fn for_each_tenant(&self, watermark: u64, mut each: impl FnMut(&str)) -> Result<(), ReadError> {
        let mut statement = self.conn.prepare_cached(TENANT_NAMES)?;
        let mut rows = statement.query(named_params! { ":watermark": watermark_param(watermark) })?;
        while let Some(row) = rows.next()? {
            each(row.get_ref(0)?.as_str().map_err(rusqlite::Error::from)?);
        }
        Ok(())
    }
}

/// A decision from a row of `seq`, the header columns, then the decision's own in contract §3 order.
fn decision_record(r: &Row<'_>) -> rusqlite::Result<DecisionRecord> {
    Ok(DecisionRecord {
        seq: r.get::<_, i64>(0)? as u64,
        header: header(r, 1)?,
        request_id: r.get(7)?,
        idempotency_key: r.get(8)?,
        amount: r.get(9)?,
        outcome: r.get(10)?,
        reason: r.get(11)?,
        policy_id: r.get(12)?,
        policy_version: r.get(13)?,
        window_start: r.get::<_, Option<i64>>(14)?.map(Timestamp),
        window_end: r.get::<_, Option<i64>>(15)?.map(Timestamp),
        limit: r.get(16)?,
        used_before: r.get(17)?,
        remaining: r.get(18)?,
        retry_after_ms: r.get(19)?,
    })
}

/// An adjustment from a row of `seq`, the header columns, then the adjustment's own in contract §3 order (no scope).
fn adjustment_record(r: &Row<'_>) -> Result<AdjustmentRecord, ReadError> {
    let seq = r.get::<_, i64>(0)? as u64;
    let refs: String = r.get(13)?;
    let refs = serde_json::from_str(&refs)
        .map_err(|_| ReadError::Corrupt { seq, message: format!("refs {refs:?} is not a JSON array of event_ids") })?;
    Ok(AdjustmentRecord {
        seq,
        header: header(r, 1)?,
        adjustment_id: r.get(7)?,
        kind: r.get(8)?,
        policy_id: r.get(9)?,
        window_start: r.get::<_, Option<i64>>(10)?.map(Timestamp),
        window_end: r.get::<_, Option<i64>>(11)?.map(Timestamp),
        amount: r.get(12)?,
        refs,
        run_id: r.get(14)?,
        scope: r.get(15)?,
    })
}

/// A recorded correction of a usage event, with what it changed (`usage_corrections`) and who made it and why.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)] // The CorrectionEvent's own fields and usage_corrections' columns, by their names.
pub struct CorrectionRecord {
    pub seq: u64,
    /// The correction's own event_id.
    pub event_id: String,
    /// When the correction was made (its occurred_at).
    pub corrected_at: Timestamp,
    pub original_event_id: String,
    /// The original's event time: where the change counts.
    pub original_occurred_at: Timestamp,
    pub tenant: String,
    pub metric: String,
    /// VOID or AMEND.
    pub action: String,
    pub quantity_before: i64,
    pub quantity_after: i64,
    pub delta: i64,
    pub actor: String,
    pub reason: String,
    /// The original's request, when it names one.
    pub request_id: Option<String>,
}

/// An alert from a row of `seq`, the header columns, the alert's own, then `project` and `api_key`.
pub(crate) fn alert_record(r: &rusqlite::Row<'_>) -> rusqlite::Result<(u64, AlertEvent)> {
    let alert = AlertEvent {
        header: header(r, 1)?,
        alert_id: r.get(7)?,
        kind: symbol(r, 8, AlertKind::from_symbol)?,
        policy_id: r.get(9)?,
        policy_version: r.get(10)?,
        scope: optional_symbol(r, 11, Scope::from_symbol)?,
        window_start: r.get::<_, Option<i64>>(12)?.map(Timestamp),
        window_end: r.get::<_, Option<i64>>(13)?.map(Timestamp),
        threshold_percent: r.get(14)?,
        limit: r.get(15)?,
        observed: r.get(16)?,
        request_id: r.get(17)?,
    };
    Ok((r.get::<_, i64>(0)? as u64, alert))
}

#[cfg(test)]
mod tests {
    use crate::dedup::REQUEST_KEYS;

    // Proves the request lookup probes every tier of the request key index: a tier added to the index and missing
    // here would hide the decisions it holds.
    #[test]
    fn the_request_lookup_probes_every_tier() {
        for tier in REQUEST_KEYS.tiers {
            let probe = format!("SELECT seq FROM {tier} WHERE {} = :request_key", REQUEST_KEYS.key_column);
            assert!(super::DECISIONS_OF_REQUEST.contains(&probe), "{probe}");
        }
        assert_eq!(super::DECISIONS_OF_REQUEST.matches("= :request_key").count(), REQUEST_KEYS.tiers.len());
    }
}
