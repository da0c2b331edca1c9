//! Where the admin endpoints record changes ([`Admin`]): the ledger `serve` decides on, or its shards, one change at a
//! time; and why a change was not recorded ([`Answer`]), in the status an admin caller is answered.

use std::path::PathBuf;
use std::sync::Mutex;

use axum::http::StatusCode;
use axum::response::Response;
use control::{Recorded, Refusal, Refused};
use ledger::Ledger;
use ledger::shards::ShardDir;
use schemas::{Event, Timestamp};

use crate::answer::error;

/// Where the admin endpoints record changes: the ledger `serve` decides on, or its shards.
pub(crate) enum AdminLedgers {
    /// One ledger file.
    File(PathBuf),
    /// A directory of shards: a plan default goes to every shard, a tenant's change to its shard.
    Shards(ShardDir),
    /// No admin endpoint (a node of a cluster: its shards come and go with the partitions it owns).
    None,
}

/// The admin endpoints' state: where to record, and the lock that makes changes one at a time (two at once would
/// race for one version of a policy).
pub(crate) struct Admin {
    ledgers: AdminLedgers,
    one_at_a_time: Mutex<()>,
}

impl Admin {
    pub(crate) fn new(ledgers: AdminLedgers) -> Admin {
        Admin { ledgers, one_at_a_time: Mutex::new(()) }
    }

    /// The ledger file changes are recorded in, when there is one (`serve --ledger`).
    pub(crate) fn ledger_file(&self) -> Option<&std::path::Path> {
        match &self.ledgers {
            AdminLedgers::File(path) => Some(path),
            AdminLedgers::Shards(_) | AdminLedgers::None => None,
        }
    }

    /// Judges and records the event `build` makes of what the ledgers hold: the event and the ledger sequence number
    /// of each copy recorded.
    pub(crate) fn change(
        &self,
        build: impl FnOnce(&Recorded, Timestamp) -> Result<Event, Refused>,
    ) -> Result<(Event, Vec<u64>), Answer> {
        let _one = self.one_at_a_time.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut ledgers = match &self.ledgers {
            AdminLedgers::File(path) => vec![Ledger::open(path).map_err(Answer::ledger)?],
            AdminLedgers::Shards(dir) => {
                dir.open_all().map_err(Answer::ledger)?.into_iter().map(|(_, ledger)| ledger).collect()
            }
            AdminLedgers::None => return Err(Answer::NotHere),
        };
        let recorded = Recorded::read(&ledgers).map_err(Answer::ledger)?;
        let event = build(&recorded, Timestamp::now()).map_err(Answer::Refused)?;
        let seqs = control::record(&mut ledgers, &event).map_err(|e| match e {
            // Another writer (a `policy set` beside this server) recorded this version first.
            conflict @ control::RecordError::Conflicting { .. } => Answer::Conflict(conflict.to_string()),
            other => Answer::ledger(other),
        })?;
        Ok((event, seqs))
    }
}

impl Admin {
    /// Judges and records a change of one of `tenant`'s webhook endpoints in the ledger that holds the tenant (the
    /// file, or its shard), one change at a time as every admin change.
    pub(crate) fn webhook(
        &self,
        tenant: &str,
        judge: impl FnOnce(&[ledger::webhooks::Endpoint]) -> Result<ledger::webhooks::EndpointChange, webhooks::Refused>,
    ) -> Result<usecases::webhook::Changed, Answer> {
        let _one = self.one_at_a_time.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut ledger = match &self.ledgers {
            AdminLedgers::File(path) => Ledger::open(path).map_err(Answer::ledger)?,
            AdminLedgers::Shards(dir) => dir
                .open_all()
                .map_err(Answer::ledger)?
                .into_iter()
                .find(|(shard, _)| shard.holds_tenant(tenant))
                .map(|(_, ledger)| ledger)
                .ok_or_else(|| Answer::Ledger(format!("no shard holds tenant {tenant:?}")))?,
            AdminLedgers::None => return Err(Answer::NotHere),
        };
        usecases::webhook::change(&mut ledger, judge).map_err(|e| match e {
            usecases::webhook::ChangeError::Refused(refused) => Answer::Webhook(refused),
            other => Answer::ledger(other),
        })
    }

    /// Every ledger changes are recorded in, for a read.
    pub(crate) fn read_all(&self) -> Result<Vec<Ledger>, Answer> {
        match &self.ledgers {
            AdminLedgers::File(path) => Ok(vec![Ledger::open_read_only(path).map_err(Answer::ledger)?]),
            AdminLedgers::Shards(dir) => {
                Ok(dir.open_all_read_only().map_err(Answer::ledger)?.into_iter().map(|(_, ledger)| ledger).collect())
            }
            AdminLedgers::None => Err(Answer::NotHere),
        }
    }
    /// Records a usage correction into the ledger (the shard) holding its original, one change at a time: the
    /// correction, and whether it was recorded already (a retry).
    pub(crate) fn correct(&self, change: &control::CorrectionChange) -> Result<control::Corrected, Answer> {
        let _one = self.one_at_a_time.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut ledgers = match &self.ledgers {
            AdminLedgers::File(path) => vec![Ledger::open(path).map_err(Answer::ledger)?],
            AdminLedgers::Shards(dir) => {
                dir.open_all().map_err(Answer::ledger)?.into_iter().map(|(_, ledger)| ledger).collect()
            }
            AdminLedgers::None => return Err(Answer::NotHere),
        };
        control::correct(&mut ledgers, change, Timestamp::now()).map_err(|e| match e {
            control::CorrectError::Refused(refused) => Answer::Refused(refused),
            taken @ control::CorrectError::IdTaken { .. } => Answer::Conflict(taken.to_string()),
            other => Answer::ledger(other),
        })
    }
}

/// Why a change was not recorded.
pub(crate) enum Answer {
    /// A webhook endpoint's change would be invalid, or names an endpoint registered already or not at all.
    Webhook(webhooks::Refused),
    /// The change would be invalid.
    Refused(Refused),
    /// Another writer recorded the same version first.
    Conflict(String),
    /// The ledger failed.
    Ledger(String),
    /// This server records no changes.
    NotHere,
}

impl Answer {
    pub(crate) fn ledger(e: impl std::error::Error + 'static) -> Answer {
        Answer::Ledger(ledger::causes(&e))
    }

    /// 400 for a field that breaks the contract, 409 for a change the ledger's state refuses (a version not above
    /// the last, a closed period, a grant recorded already), 500 when the ledger fails, 404 where there is no
    /// admin endpoint.
    pub(crate) fn into_response(self) -> Response {
        match self {
            Answer::Refused(refused @ Refused::Invalid(_)) => {
                error(StatusCode::BAD_REQUEST, "invalid_change", format!("nothing recorded: {refused}"))
            }
            // A correction of an event the ledger does not hold: 404, as a resource that is not there; the other
            // refusals of a correction are the ledger's state refusing it (409), each with its own code.
            Answer::Refused(Refused::Correction(refusal @ Refusal::UnknownOriginal(_))) => {
                error(StatusCode::NOT_FOUND, refusal.code(), format!("nothing recorded: {refusal}"))
            }
            Answer::Refused(Refused::Correction(refusal)) => {
                error(StatusCode::CONFLICT, refusal.code(), format!("nothing recorded: {refusal}"))
            }
            Answer::Refused(refused) => {
                error(StatusCode::CONFLICT, "refused_change", format!("nothing recorded: {refused}"))
            }
            Answer::Conflict(message) => error(StatusCode::CONFLICT, "refused_change", message),
            Answer::Webhook(refused @ (webhooks::Refused::Exists { .. } | webhooks::Refused::Unknown { .. })) => {
                error(StatusCode::CONFLICT, "refused_change", format!("nothing recorded: {refused}"))
            }
            Answer::Webhook(refused) => {
                error(StatusCode::BAD_REQUEST, "invalid_change", format!("nothing recorded: {refused}"))
            }
            Answer::Ledger(message) => error(StatusCode::INTERNAL_SERVER_ERROR, "ledger_error", message),
            Answer::NotHere => {
                error(StatusCode::NOT_FOUND, "not_found", "a node of a cluster records no change: use the command line")
            }
        }
    }
}
