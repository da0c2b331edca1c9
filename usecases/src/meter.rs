//! A meter change (contract §7, `meter set` and `POST /v1/admin/meters`): a new version of how a metric's usage
//! aggregates, judged against what the ledgers hold (the next version, a closed period) and appended to every shard
//! holding its tenant (a `*` meter: every shard), and the line the command prints.

use control::{MeterChange, Recorded};
use schemas::{Event, MeterEvent, Timestamp};

use crate::change::Changed;
use crate::{Context, Result, Store};

/// Records `change` into `store`, judged against what it holds now. A refused change records nothing: `meter not
/// changed: ` and why.
pub fn set_meter(store: &Store, change: &MeterChange) -> Result<Changed<MeterEvent>> {
    let event = {
        let recorded = Recorded::read(&store.read_all()?)?;
        control::meter_event(change, &recorded, Timestamp::now()).context("meter not changed")?
    };
    let mut ledgers = store.append_all()?;
    let seqs = control::record(&mut ledgers, &Event::Meter(event.clone())).context("meter not changed")?;
    let seqs: Vec<String> = seqs.iter().map(u64::to_string).collect();
    Ok(Changed { event, written: format!("recorded at ledger seq {}", seqs.join(", ")) })
}

/// A meter version recorded, in a line: whose metric, how it aggregates, from when, who and why, and where.
impl std::fmt::Display for Changed<MeterEvent> {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let event = &self.event;
        let of = event.field.map(|field| format!(" of {}", field.symbol())).unwrap_or_default();
        write!(
            out,
            "meter of {} for {} v{}: {}{of}, windows from {}; by {}: {:?}; {}",
            event.header.metric,
            event.header.tenant,
            event.version,
            event.aggregation.symbol(),
            event.effective_from,
            event.actor,
            event.reason,
            self.written
        )
    }
}
