//! The billing export of metered metrics: a (tenant, metric) whose meter in force at the month's start
//! (`rules::meter::in_force`) is not SUM is billed by its meter's aggregate of the month's usage events (each as its
//! corrections left it, those voided left out), computed by `rules::meter::aggregate` from the ledger's readings at the
//! export's watermark. A gauge's time-weighted aggregates start from the level last reported before the month.

use std::collections::{BTreeMap, BTreeSet};

use ledger::{CloseSnapshot, Ledger, MeterReading, Period};
use rules::meter::{self, Reading};
use schemas::*;

use crate::billing::Key;
use crate::error::ReportError;

/// The quantity of the month of every metered (tenant, metric) the ledger holds usage of at `snapshot`.
pub fn quantities(
    ledger: &Ledger,
    period: Period,
    snapshot: CloseSnapshot,
    meters: &[MeterEvent],
) -> Result<BTreeMap<Key, i64>, ReportError> {
    let metrics: BTreeSet<&str> = meters.iter().map(|m| m.header.metric.as_str()).collect();
    let mut found = BTreeMap::new();
    for metric in metrics {
        for tenant in ledger.metric_tenants(metric, period.end(), snapshot.watermark)? {
            let Some(m) = meter::in_force(meters, &tenant, metric, period.start()) else { continue };
            if m.aggregation == Aggregation::SUM {
                continue;
            }
            let quantity = quantity_of(ledger, (&tenant, metric), m, period, snapshot.watermark)?;
            found.insert((tenant, metric.to_string()), quantity);
        }
    }
    Ok(found)
}

/// The aggregate of one (tenant, metric) over the month by meter `m`.
fn quantity_of(
    ledger: &Ledger,
    names: (&str, &str),
    m: &MeterEvent,
    period: Period,
    watermark: u64,
) -> Result<i64, ReportError> {
    let window = (period.start(), period.end());
    let readings = ledger.meter_readings(names, window, watermark)?;
    let before = match m.aggregation {
        Aggregation::TIME_WEIGHTED_SUM | Aggregation::TIME_WEIGHTED_AVERAGE => ledger
            .meter_readings(names, (validate::TIMESTAMP_MIN, period.start()), watermark)?
            .last()
            .map(|r| r.quantity),
        _ => None,
    };
    let read: Vec<Reading<'_>> = readings.iter().map(|r| reading(r, m.field)).collect();
    Ok(meter::aggregate(m.aggregation, &read, before, window)?)
}

fn reading(r: &MeterReading, field: Option<MeterField>) -> Reading<'_> {
    let member = match field {
        Some(MeterField::SUBJECT) => r.subject.as_deref(),
        Some(MeterField::PROJECT) => r.project.as_deref(),
        Some(MeterField::API_KEY) => r.api_key.as_deref(),
        None => None,
    };
    Reading { at: r.at, quantity: r.quantity, member }
}
