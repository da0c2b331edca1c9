//! The model of deduplication forever that the ledger's appends are checked against, by the model test and by the
//! `ledger_batches` fuzz target: per event_id, every payload seen and the entry it got.

use std::collections::{BTreeMap, HashMap};

use ledger::AppendOutcome;
use schemas::{Event, Header, ReservationAction, ReservationEvent, Timestamp, UsageEvent};

/// One event of a generated batch: which event_id, which payload variant, which record type.
#[derive(Debug, Clone)]
pub struct Draw {
    pub id: u8,
    pub variant: u8,
    pub reservation: bool,
}

pub fn event(draw: &Draw) -> Event {
    let header = Header {
        event_id: format!("e-{}", draw.id),
        occurred_at: Timestamp(1_793_491_200_000_000 + i64::from(draw.id) * 1_000_000),
        tenant: "org-1".into(),
        subject: None,
        metric: "requests".into(),
        source: "model".into(),
        api_key: None,
        project: None,
    };
    if draw.reservation {
        return Event::Reservation(ReservationEvent {
            header,
            reservation_id: format!("r-{}", draw.id),
            action: ReservationAction::COMMIT,
            amount: i64::from(draw.variant),
            expires_at: None,
            fencing_token: None,
        });
    }
    Event::Usage(UsageEvent {
        header,
        quantity: i64::from(draw.variant),
        request_id: None,
        attributes: BTreeMap::from([("variant".to_string(), draw.variant.to_string())]),
    })
}

/// The model: per event_id, the entries it has (payload as the `Event`, with its sequence number).
#[derive(Default)]
pub struct Model {
    entries: HashMap<String, Vec<(Event, u64)>>,
    pub watermark: u64,
    pub recorded: u64,
    pub duplicates: u64,
    pub conflicts: u64,
    pub quarantined: u64,
}

impl Model {
    /// What appending `event` must answer, and the counts it moves.
    pub fn append(&mut self, event: Event) -> AppendOutcome {
        let copies = self.entries.entry(event.event_id().to_string()).or_default();
        if let Some((_, seq)) = copies.iter().find(|(e, _)| *e == event) {
            self.duplicates += 1;
            return AppendOutcome::Duplicate { of: *seq };
        }
        self.watermark += 1;
        let seq = self.watermark;
        let outcome = match copies.first() {
            None => {
                self.recorded += 1;
                AppendOutcome::Recorded { seq }
            }
            Some((_, of)) => {
                self.conflicts += 1;
                AppendOutcome::ConflictingDuplicate { seq, of: *of }
            }
        };
        copies.push((event, seq));
        outcome
    }
}
