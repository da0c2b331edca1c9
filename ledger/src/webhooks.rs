//! Webhooks' rows (`ddl/036-webhooks.sql`): the endpoints a tenant's alerts are delivered to, each change a row of
//! its own, and every attempt to deliver an alert to one. The deliverer reads the deliveries still pending in ledger
//! order and records each attempt's outcome here, so a restart resumes where it was; the ledger refuses a second
//! settled attempt (DELIVERED or GIVEN_UP) of a delivery.

use rusqlite::{OptionalExtension, TransactionBehavior, named_params, params};
use schemas::{AlertEvent, Timestamp};
use serde::Serialize;

use crate::error::ReadError;
use crate::{Ledger, now_micros};

const ENDPOINTS: &str = include_str!("../queries/webhook_endpoints.sql");
const PENDING: &str = include_str!("../queries/webhook_deliveries_pending.sql");
const ATTEMPTS: &str = include_str!("../queries/webhook_attempts.sql");
const ALERT_AT: &str = include_str!("../queries/alert_at.sql");

/// An endpoint as its last change left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Whose alerts it receives.
    pub tenant: String,
    /// Its id, the tenant's own.
    pub endpoint_id: String,
    /// Where the alerts are POSTed.
    pub url: String,
    /// The AlertKind symbols it wants.
    pub kinds: Vec<String>,
    /// The Standard Webhooks signing secret (`whsec_` and base64).
    pub secret: String,
    /// False once removed.
    pub enabled: bool,
    /// The ledger's last entry when it was registered: the alerts after it are delivered to it.
    pub from_seq: u64,
    /// Who made the last change.
    pub actor: String,
    /// Why.
    pub reason: String,
    /// When.
    pub recorded_at: Timestamp,
}

/// A change of an endpoint to record: a registration (enabled) or a removal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointChange {
    /// Whose alerts it receives.
    pub tenant: String,
    /// Its id.
    pub endpoint_id: String,
    /// Where the alerts are POSTed (a removal keeps the last one).
    pub url: String,
    /// The AlertKind symbols it wants.
    pub kinds: Vec<String>,
    /// The signing secret.
    pub secret: String,
    /// True for a registration, false for a removal.
    pub enabled: bool,
    /// Who.
    pub actor: String,
    /// Why.
    pub reason: String,
}

/// A delivery not settled yet: an alert and an endpoint that wants it, with the attempts made so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingDelivery {
    /// The alert's entry.
    pub alert_seq: u64,
    /// The endpoint's tenant.
    pub tenant: String,
    /// The endpoint.
    pub endpoint_id: String,
    /// Where to POST.
    pub url: String,
    /// The signing secret.
    pub secret: String,
    /// Attempts made so far (all failed).
    pub attempts: u32,
    /// When the first was made.
    pub first_attempted_at: Option<Timestamp>,
    /// When the next is due; none: now.
    pub next_attempt_at: Option<Timestamp>,
}

/// What an attempt came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Outcome {
    /// The endpoint answered 2xx: the delivery is settled.
    Delivered,
    /// Another status, or no answer in time: retried later.
    Failed,
    /// Failed, and it was the last attempt allowed: the delivery is settled, not delivered.
    GivenUp,
}

impl Outcome {
    /// Its symbol in the ledger and in answers.
    pub fn symbol(self) -> &'static str {
        match self {
            Outcome::Delivered => "DELIVERED",
            Outcome::Failed => "FAILED",
            Outcome::GivenUp => "GIVEN_UP",
        }
    }
}

/// One attempt, as recorded and as `webhook deliveries` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Attempt {
    /// The alert's entry.
    pub alert_seq: u64,
    /// The alert's id (filled when read back).
    pub alert_id: String,
    /// The alert's kind (filled when read back).
    pub kind: String,
    /// The endpoint's tenant.
    pub tenant: String,
    /// The endpoint.
    pub endpoint_id: String,
    /// The `webhook-id` sent: the same for every attempt of a delivery.
    pub webhook_id: String,
    /// 1 for the first.
    pub attempt: u32,
    /// What it came to.
    pub outcome: Outcome,
    /// The HTTP status answered, if any.
    pub status: Option<u16>,
    /// Why it failed.
    pub error: Option<String>,
    /// When it was made.
    pub attempted_at: Timestamp,
    /// FAILED: when the next one is due.
    pub next_attempt_at: Option<Timestamp>,
}

/// Recording an attempt failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AttemptError {
    /// The delivery is settled already (another deliverer recorded it, or a bug): nothing recorded.
    #[error("the delivery of alert entry {alert_seq} to endpoint {endpoint_id} of {tenant} is settled already")]
    Settled {
        /// The alert's entry.
        alert_seq: u64,
        /// The endpoint's tenant.
        tenant: String,
        /// The endpoint.
        endpoint_id: String,
    },
    /// SQLite failed; nothing recorded.
    #[error("cannot record a webhook attempt")]
    Sqlite(#[from] rusqlite::Error),
}

impl Ledger {
    /// Every endpoint as its last change left it, removed ones included, by tenant and id.
    pub fn webhook_endpoints(&self) -> Result<Vec<Endpoint>, ReadError> {
        let mut statement = self.conn.prepare_cached(ENDPOINTS)?;
        let rows = statement.query_map([], |r| {
            Ok(Endpoint {
                tenant: r.get(0)?,
                endpoint_id: r.get(1)?,
                url: r.get(2)?,
                kinds: r.get::<_, String>(3)?.split(',').filter(|k| !k.is_empty()).map(str::to_string).collect(),
                secret: r.get(4)?,
                enabled: r.get(5)?,
                from_seq: r.get::<_, i64>(6)? as u64,
                actor: r.get(7)?,
                reason: r.get(8)?,
                recorded_at: Timestamp(r.get(9)?),
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Records a change of an endpoint, in a transaction of its own; a registration is delivered the alerts recorded
    /// after the ledger's last entry now. Answers that entry.
    pub fn record_webhook_endpoint(&mut self, change: &EndpointChange) -> Result<u64, rusqlite::Error> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let last: i64 = tx.query_row("SELECT coalesce(max(seq), 0) FROM entries", [], |r| r.get(0))?;
        tx.prepare_cached(
            "INSERT INTO webhook_endpoints
               (tenant, endpoint_id, url, kinds, secret, enabled, from_seq, actor, reason, recorded_at)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )?
        .execute(params![
            change.tenant,
            change.endpoint_id,
            change.url,
            change.kinds.join(","),
            change.secret,
            change.enabled,
            last,
            change.actor,
            change.reason,
            now_micros(),
        ])?;
        tx.commit()?;
        Ok(last as u64)
    }

    /// Up to `limit` deliveries not settled yet of the alerts in `(after, until]`, in ledger order.
    pub fn webhook_deliveries_pending(
        &self,
        (after, until): (u64, u64),
        limit: u64,
    ) -> Result<Vec<PendingDelivery>, ReadError> {
        let mut statement = self.conn.prepare_cached(PENDING)?;
        let params = named_params! { ":after": after as i64, ":until": until as i64, ":limit": limit as i64 };
        let rows = statement.query_map(params, |r| {
            Ok(PendingDelivery {
                alert_seq: r.get::<_, i64>(0)? as u64,
                tenant: r.get(1)?,
                endpoint_id: r.get(2)?,
                url: r.get(3)?,
                secret: r.get(4)?,
                attempts: r.get(5)?,
                first_attempted_at: r.get::<_, Option<i64>>(6)?.map(Timestamp),
                next_attempt_at: r.get::<_, Option<i64>>(7)?.map(Timestamp),
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The last alert's entry (0 without alerts).
    pub fn last_alert_seq(&self) -> Result<u64, ReadError> {
        let last: Option<i64> = self.conn.query_row("SELECT max(seq) FROM alert_events", [], |r| r.get(0))?;
        Ok(last.unwrap_or(0) as u64)
    }

    /// The alert recorded at entry `seq`, if one is.
    pub fn alert_at(&self, seq: u64) -> Result<Option<AlertEvent>, ReadError> {
        let mut statement = self.conn.prepare_cached(ALERT_AT)?;
        let found =
            statement.query_row(named_params! { ":seq": seq as i64 }, crate::audit_reads::alert_record).optional()?;
        Ok(found.map(|(_, alert)| alert))
    }

    /// Records one attempt, in a transaction of its own. A settled delivery (DELIVERED or GIVEN_UP recorded) refuses
    /// another settled attempt: nothing is recorded.
    pub fn record_webhook_attempt(&mut self, attempt: &Attempt) -> Result<(), AttemptError> {
        let inserted = self
            .conn
            .prepare_cached(
                "INSERT INTO webhook_attempts (alert_seq, tenant, endpoint_id, webhook_id, attempt, outcome, status,
                                               error, attempted_at, next_attempt_at)
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            )?
            .execute(params![
                attempt.alert_seq as i64,
                attempt.tenant,
                attempt.endpoint_id,
                attempt.webhook_id,
                attempt.attempt,
                attempt.outcome.symbol(),
                attempt.status,
                attempt.error,
                attempt.attempted_at.micros(),
                attempt.next_attempt_at.map(|t| t.micros()),
            ]);
        match inserted {
            Ok(_) => Ok(()),
            Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::ConstraintViolation) => {
                Err(AttemptError::Settled {
                    alert_seq: attempt.alert_seq,
                    tenant: attempt.tenant.clone(),
                    endpoint_id: attempt.endpoint_id.clone(),
                })
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The attempts recorded, of `tenant` and `endpoint_id` when given, oldest first.
    pub fn webhook_attempts(&self, tenant: Option<&str>, endpoint_id: Option<&str>) -> Result<Vec<Attempt>, ReadError> {
        let mut statement = self.conn.prepare_cached(ATTEMPTS)?;
        let rows = statement.query_map(named_params! { ":tenant": tenant, ":endpoint_id": endpoint_id }, |r| {
            let outcome = match r.get_ref(5)?.as_str().map_err(rusqlite::Error::from)? {
                "DELIVERED" => Outcome::Delivered,
                "GIVEN_UP" => Outcome::GivenUp,
                _ => Outcome::Failed,
            };
            Ok(Attempt {
                alert_seq: r.get::<_, i64>(0)? as u64,
                tenant: r.get(1)?,
                endpoint_id: r.get(2)?,
                webhook_id: r.get(3)?,
                attempt: r.get(4)?,
                outcome,
                status: r.get(6)?,
                error: r.get(7)?,
                attempted_at: Timestamp(r.get(8)?),
                next_attempt_at: r.get::<_, Option<i64>>(9)?.map(Timestamp),
                alert_id: r.get(10)?,
                kind: r.get(11)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}

#[cfg(test)]
mod tests {
    use schemas::{AlertKind, Event};

    use super::*;
    use crate::dedup::tests::usage;
    use crate::{Batch, Incoming, Origin};

    fn alert(id: &str, tenant: &str, kind: AlertKind) -> Incoming {
        let header = testkit::fixtures::header(id, "2026-11-02T10:00:00Z", tenant, "tokens");
        let event = Event::Alert(AlertEvent {
            header,
            alert_id: id.into(),
            kind,
            policy_id: None,
            policy_version: None,
            scope: None,
            window_start: None,
            window_end: None,
            threshold_percent: 80,
            limit: Some(10),
            observed: 8,
            request_id: None,
        });
        Incoming { event, origin: Origin::Local { name: "test".into() }, raw: None }
    }

    fn endpoint(id: &str, kinds: &[&str], enabled: bool) -> EndpointChange {
        EndpointChange {
            tenant: "org-1".into(),
            endpoint_id: id.into(),
            url: "https://example.com/".into(),
            kinds: kinds.iter().map(|k| k.to_string()).collect(),
            secret: "whsec_x".into(),
            enabled,
            actor: "alice".into(),
            reason: "test".into(),
        }
    }

    fn attempt(alert_seq: u64, outcome: Outcome) -> Attempt {
        Attempt {
            alert_seq,
            alert_id: String::new(),
            kind: String::new(),
            tenant: "org-1".into(),
            endpoint_id: "desk".into(),
            webhook_id: "msg_1".into(),
            attempt: 1,
            outcome,
            status: Some(500),
            error: Some("answered 500".into()),
            attempted_at: Timestamp(1),
            next_attempt_at: None,
        }
    }

    fn pending(ledger: &Ledger) -> Vec<(u64, String)> {
        let until = ledger.last_alert_seq().unwrap();
        let found = ledger.webhook_deliveries_pending((0, until), 100).unwrap();
        found.into_iter().map(|d| (d.alert_seq, d.endpoint_id)).collect()
    }

    // Proves what is pending: the alerts of the endpoint's tenant and kinds recorded after its registration, until an
    // attempt settles one; a removed endpoint has none; a settled delivery refuses a second settled attempt.
    #[test]
    fn deliveries_pending_and_settled() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = Ledger::open(dir.path().join("ledger.db")).unwrap();
        let before = vec![alert("a-0", "org-1", AlertKind::THRESHOLD), usage("u-1")];
        ledger.append(&Batch { events: before, ..Batch::default() }).unwrap();
        assert_eq!(ledger.record_webhook_endpoint(&endpoint("desk", &["THRESHOLD"], true)).unwrap(), 2);
        ledger.record_webhook_endpoint(&endpoint("ops", &["DENY_RATE"], true)).unwrap();
        let after = vec![
            alert("a-1", "org-1", AlertKind::THRESHOLD),
            alert("a-2", "org-2", AlertKind::THRESHOLD),
            alert("a-3", "org-1", AlertKind::DENY_RATE),
        ];
        ledger.append(&Batch { events: after, ..Batch::default() }).unwrap();
        assert_eq!(pending(&ledger), [(3, "desk".to_string()), (5, "ops".to_string())]);
        ledger.record_webhook_attempt(&attempt(3, Outcome::Failed)).unwrap();
        let failed = ledger.webhook_deliveries_pending((0, 5), 100).unwrap();
        assert_eq!((failed[0].attempts, failed[0].first_attempted_at), (1, Some(Timestamp(1))));
        ledger.record_webhook_attempt(&attempt(3, Outcome::Delivered)).unwrap();
        assert_eq!(pending(&ledger), [(5, "ops".to_string())]);
        let again = ledger.record_webhook_attempt(&attempt(3, Outcome::GivenUp));
        assert!(matches!(again, Err(AttemptError::Settled { alert_seq: 3, .. })), "{again:?}");
        ledger.record_webhook_endpoint(&endpoint("ops", &["DENY_RATE"], false)).unwrap();
        assert_eq!(pending(&ledger), []);
        let outcomes: Vec<Outcome> =
            ledger.webhook_attempts(Some("org-1"), None).unwrap().iter().map(|a| a.outcome).collect();
        assert_eq!(outcomes, [Outcome::Failed, Outcome::Delivered]);
        let endpoints = ledger.webhook_endpoints().unwrap();
        assert_eq!(
            endpoints.iter().map(|e| (e.endpoint_id.as_str(), e.enabled)).collect::<Vec<_>>(),
            [("desk", true), ("ops", false)]
        );
        assert!(ledger.verify().unwrap().first_bad.is_none());
    }
}
