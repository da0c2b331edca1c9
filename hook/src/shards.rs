//! The hook over shards (contract §9.4): one [`Hook`] per partition held, each with its own writer thread and shard
//! file (`DIR/shard-NNNN.db`), and every request routed to its tenant's partition (Kafka's default partitioner over
//! the tenant). One writer decides for one shard, so P shards on one machine decide with P writers at once; a tenant's
//! decisions, usage and reservations all live in its one shard, so its limits are judged there whole. Policies and
//! grants of tenant `*` (plan defaults) are in every shard: producers write them to every partition.
//!
//! Partitions are added and removed while requests flow ([`Shards::add`], [`Shards::remove`]): a `node` follows the
//! partitions Kafka assigns it and revokes. A request of a partition not held is refused at once,
//! [`HookError::NotServing`], which `serve` answers 421 Misdirected Request.
//!
//! A commit or release names only its reservation: the hook's reservation ids in a shard name its partition
//! (`rsv-pN-…`, [`crate::ids::reservation_id`]), and the close goes there. Any other id (another enforcer's, recorded
//! through ingest) is looked for in the partitions of the tenants the caller may act for, in order, and closed in the
//! first that knows it.
//!
//! ```
//! use hook::{HookSettings, Request, Shards};
//! use ledger::shards::ShardDir;
//! use schemas::Who;
//! # let dir = tempfile::tempdir().unwrap();
//! let shards = Shards::start_all(ShardDir::new(dir.path()), Some(2), HookSettings::default()).unwrap();
//! let ask = |tenant: &str| Request::one(Who::tenant(tenant), "requests", 1, "k-1");
//! assert!(shards.check(ask("org-1")).unwrap().allowed());
//! assert!(shards.check(ask("org-2")).unwrap().allowed());
//! assert_eq!(shards.held(), [0, 1]);
//! ```

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::Poll;

use ledger::shards::{Shard, ShardDir};
use schemas::ReservationAction;
use schemas::partition::partition_of;
use serde::Serialize;

use crate::api::{AcquireRequest, Closed, Decision, Decisions, LeaseStep, Refusal, Request, TenantScope};
use crate::error::{HookError, StartError};
use crate::figures::Figures;
use crate::health::{Failure, HealthReport};
use crate::ids;
use crate::quotas::{QuotaQuery, Quotas};
use crate::replicate::Replicate;
use crate::settings::HookSettings;
// A router over hooks: the one module above the crate root's `Hook`, which nothing below depends on.
use crate::{Hook, Stopped};

/// A router over the shards of one directory: a hook per partition held (see the module).
pub struct Shards {
    dir: ShardDir,
    partitions: u32,
    settings: HookSettings,
    /// The hook of each partition held, indexed by partition. A request clones the `Arc` out and lets the lock go
    /// before it waits, so a partition removed meanwhile answers the requests already given to it.
    held: RwLock<Vec<Option<Arc<Hook>>>>,
}

/// [`Shards::health`]: every shard's, and the worst of them, which is the router's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShardsHealth {
    /// The worst shard's ([`HealthReport::recording`]): `ok` only while every shard held is.
    pub recording: &'static str,
    /// Groups failed since start, every shard's summed.
    pub failed_groups: u64,
    /// The latest failure of any shard.
    pub last_failure: Option<Failure>,
    /// Requests queued for every shard's writer now, summed.
    pub queued: usize,
    /// Each partition held, and its hook's health.
    pub shards: BTreeMap<u32, HealthReport>,
}

/// How bad a shard's `recording` is, to find the worst.
fn severity(recording: &str) -> u8 {
    match recording {
        "ok" => 0,
        "failing" => 1,
        "not_durable" => 2,
        _ => 3,
    }
}

impl Shards {
    /// A router over the shards of `dir` counting `partitions`, holding none yet ([`Shards::add`]).
    pub fn new(dir: ShardDir, partitions: u32, settings: HookSettings) -> Shards {
        let held = RwLock::new(vec![None; partitions as usize]);
        Shards { dir, partitions, settings, held }
    }

    /// A router holding every partition of `dir`: `partitions` creates those missing (and refuses shards of another
    /// count); without it, the directory's shards must be there, every one of them (their identities give P).
    pub fn start_all(dir: ShardDir, partitions: Option<u32>, settings: HookSettings) -> Result<Shards, StartError> {
        let partitions = match partitions {
            Some(partitions) => partitions,
            None => {
                let all = dir.open_all_read_only().map_err(|e| StartError::Shard(Box::new(e)))?;
                all.first().map_or(0, |(shard, _)| shard.partitions)
            }
        };
        let shards = Shards::new(dir, partitions, settings);
        for partition in 0..partitions {
            shards.add(partition)?;
        }
        Ok(shards)
    }

    /// The partition count P.
    pub fn partitions(&self) -> u32 {
        self.partitions
    }

    /// The directory of the shards.
    pub fn dir(&self) -> &ShardDir {
        &self.dir
    }

    /// The partitions held, in order.
    pub fn held(&self) -> Vec<u32> {
        let held = self.held.read().unwrap_or_else(|e| e.into_inner());
        (0..self.partitions).filter(|p| held[*p as usize].is_some()).collect()
    }

    /// The hook of `partition`, if held (an outbox publisher records its acknowledgements through it: the shard's
    /// writer stops only once such handles are dropped too).
    pub fn hook(&self, partition: u32) -> Option<Hook> {
        self.get(partition).map(|hook| Hook::clone(&hook))
    }

    /// Opens (or creates) the shard of `partition` and starts its hook; already held, nothing changes.
    pub fn add(&self, partition: u32) -> Result<(), StartError> {
        self.add_replicated(partition, None)
    }

    /// [`Shards::add`], the shard's hook publishing every group through `replicate` before recording it
    /// (durability replicated, [`crate::replicate`]).
    pub fn add_replicated(&self, partition: u32, replicate: Option<Box<dyn Replicate>>) -> Result<(), StartError> {
        if partition >= self.partitions {
            return Err(StartError::NoSuchPartition { partition, partitions: self.partitions });
        }
        if self.get(partition).is_some() {
            return Ok(());
        }
        // Creates the file and claims its identity, or checks the one it has; the hook then opens it by path.
        let shard = Shard { partition, partitions: self.partitions };
        drop(self.dir.open(shard).map_err(|e| StartError::Shard(Box::new(e)))?);
        let hook = Hook::start_replicated(self.dir.path_of(partition), self.settings.clone(), replicate)?;
        tracing::info!(partition, partitions = self.partitions, "hook: serving a partition");
        let mut held = self.held.write().unwrap_or_else(|e| e.into_inner());
        held[partition as usize].get_or_insert(Arc::new(hook));
        Ok(())
    }

    /// Stops answering for `partition` at once (its requests are refused [`HookError::NotServing`] from now on);
    /// the requests already given to its hook are answered, then its writer records what was queued and closes the
    /// shard. The answer tells when that happened (once every other handle of it, a publisher's, is dropped too).
    /// `None`: it was not held.
    pub fn remove(&self, partition: u32) -> Option<Stopped> {
        let mut held = self.held.write().unwrap_or_else(|e| e.into_inner());
        let hook = held.get_mut(partition as usize)?.take()?;
        drop(held);
        tracing::info!(partition, partitions = self.partitions, "hook: no longer serving a partition");
        Some(hook.stopped())
    }

    fn get(&self, partition: u32) -> Option<Arc<Hook>> {
        let held = self.held.read().unwrap_or_else(|e| e.into_inner());
        held.get(partition as usize).and_then(Option::clone)
    }

    /// The hook of `partition`, or why not.
    fn serving(&self, partition: u32) -> Result<Arc<Hook>, HookError> {
        self.get(partition).ok_or(HookError::NotServing { partition, partitions: self.partitions })
    }

    /// The partition of `tenant`: Kafka's default partitioner over the tenant (contract §9.4).
    pub fn partition_of(&self, tenant: &str) -> u32 {
        partition_of(tenant, self.partitions)
    }

    /// The hook deciding for `tenant`.
    fn route(&self, tenant: &str) -> Result<Arc<Hook>, HookError> {
        self.serving(self.partition_of(tenant))
    }

    /// `check` in the tenant's shard, waiting for the answer ([`Hook::check`]).
    pub fn check(&self, request: Request) -> Result<Decision, HookError> {
        self.route(&request.who.tenant)?.check(request)
    }

    /// `check` in the tenant's shard from async code ([`Hook::check_async`]).
    pub async fn check_async(&self, request: Request) -> Result<Decision, HookError> {
        self.route(&request.who.tenant)?.check_async(request).await
    }

    /// `check` in the tenant's shard for the caller of token `token_name` ([`Hook::check_async_as`]).
    pub async fn check_async_as(&self, request: Request, token_name: &str) -> Result<Decision, HookError> {
        self.route(&request.who.tenant)?.check_async_as(request, token_name).await
    }

    /// [`Hook::check_amounts`] in the tenant's shard.
    pub fn check_amounts(&self, request: Request) -> Result<Decisions, HookError> {
        self.route(&request.who.tenant)?.check_amounts(request)
    }

    /// [`Hook::check_amounts_async`] in the tenant's shard.
    pub async fn check_amounts_async(
        &self,
        request: Request,
        token_name: Option<&str>,
    ) -> Result<Decisions, HookError> {
        self.route(&request.who.tenant)?.check_amounts_async(request, token_name).await
    }

    /// [`Hook::reserve_amounts`] in the tenant's shard.
    pub fn reserve_amounts(&self, request: Request) -> Result<Decisions, HookError> {
        self.route(&request.who.tenant)?.reserve_amounts(request)
    }

    /// [`Hook::reserve_amounts_async`] in the tenant's shard.
    pub async fn reserve_amounts_async(
        &self,
        request: Request,
        token_name: Option<&str>,
    ) -> Result<Decisions, HookError> {
        self.route(&request.who.tenant)?.reserve_amounts_async(request, token_name).await
    }

    /// [`Hook::quotas`] of the tenant's shard.
    pub async fn quotas_async(&self, query: QuotaQuery) -> Result<Quotas, HookError> {
        self.route(&query.who.tenant)?.quotas_async(query).await
    }

    /// `reserve` in the tenant's shard, waiting for the answer ([`Hook::reserve`]).
    pub fn reserve(&self, request: Request) -> Result<Decision, HookError> {
        self.route(&request.who.tenant)?.reserve(request)
    }

    /// `reserve` in the tenant's shard from async code ([`Hook::reserve_async`]).
    pub async fn reserve_async(&self, request: Request) -> Result<Decision, HookError> {
        self.route(&request.who.tenant)?.reserve_async(request).await
    }

    /// `reserve` in the tenant's shard for the caller of token `token_name` ([`Hook::reserve_async_as`]).
    pub async fn reserve_async_as(&self, request: Request, token_name: &str) -> Result<Decision, HookError> {
        self.route(&request.who.tenant)?.reserve_async_as(request, token_name).await
    }

    /// `acquire` of a lease in the tenant's shard ([`Hook::acquire_async`]).
    pub async fn acquire_async(
        &self,
        request: AcquireRequest,
        token_name: Option<&str>,
    ) -> Result<Decision, HookError> {
        self.route(&request.who.tenant)?.acquire_async(request, token_name).await
    }

    /// A renewal or release of a lease in the shard that holds it ([`Hook::lease_step_async`]).
    pub async fn lease_step_async(
        &self,
        lease_id: &str,
        action: ReservationAction,
        step: LeaseStep,
        tenants: TenantScope,
    ) -> Result<Result<Closed, Refusal>, HookError> {
        let scope = tenants.clone();
        let close = |hook: Arc<Hook>| {
            let tenants = tenants.clone();
            async move { hook.lease_step_async(lease_id, action, step, tenants).await }
        };
        self.close_in(lease_id, &scope, close).await
    }

    /// `commit(reservation_id, actual)` in the reservation's shard ([`Hook::commit`]).
    pub fn commit(&self, reservation_id: &str, actual: i64) -> Result<Result<Closed, Refusal>, HookError> {
        let close = |hook: Arc<Hook>| async move { hook.commit(reservation_id, actual) };
        block_on(self.close_in(reservation_id, &TenantScope::All, close))
    }

    /// `release(reservation_id)` in the reservation's shard ([`Hook::release`]).
    pub fn release(&self, reservation_id: &str) -> Result<Result<Closed, Refusal>, HookError> {
        let close = |hook: Arc<Hook>| async move { hook.release(reservation_id) };
        block_on(self.close_in(reservation_id, &TenantScope::All, close))
    }

    /// `commit` or `release` from async code, for a caller allowed to act for `tenants` only, in the reservation's
    /// shard ([`Hook::close_async`]).
    pub async fn close_async(
        &self,
        reservation_id: &str,
        action: ReservationAction,
        amount: i64,
        tenants: TenantScope,
    ) -> Result<Result<Closed, Refusal>, HookError> {
        let scope = tenants.clone();
        let close = |hook: Arc<Hook>| {
            let tenants = tenants.clone();
            async move { hook.close_async(reservation_id, action, amount, tenants).await }
        };
        self.close_in(reservation_id, &scope, close).await
    }

    /// Closes `reservation_id` with `close` in the shard that holds it: the one its id names (the hook's own ids in
    /// a shard), else the first of the partitions of `tenants` that knows it (another enforcer's id). A partition
    /// not held is asked of its owner ([`HookError::NotServing`]) when no shard held knows the id.
    async fn close_in<F, Fut>(
        &self,
        reservation_id: &str,
        tenants: &TenantScope,
        mut close: F,
    ) -> Result<Result<Closed, Refusal>, HookError>
    where
        F: FnMut(Arc<Hook>) -> Fut,
        Fut: Future<Output = Result<Result<Closed, Refusal>, HookError>>,
    {
        if let Some(partition) = ids::partition_of_reservation(reservation_id, self.partitions) {
            return close(self.serving(partition)?).await;
        }
        let candidates: Vec<u32> = match tenants {
            TenantScope::All => (0..self.partitions).collect(),
            TenantScope::Only(tenants) => {
                let mut partitions: Vec<u32> = tenants.iter().map(|t| self.partition_of(t)).collect();
                partitions.sort_unstable();
                partitions.dedup();
                partitions
            }
        };
        let (mut not_held, mut forbidden) = (None, None);
        for partition in candidates {
            let Some(hook) = self.get(partition) else {
                not_held.get_or_insert(partition);
                continue;
            };
            match close(hook).await? {
                Err(Refusal::NotFound { .. }) => {}
                Err(refusal @ Refusal::Forbidden { .. }) => forbidden = Some(refusal),
                answer => return Ok(answer),
            }
        }
        if let Some(partition) = not_held {
            return Err(HookError::NotServing { partition, partitions: self.partitions });
        }
        let reservation_id = reservation_id.to_string();
        Ok(Err(forbidden.unwrap_or(Refusal::NotFound { reservation_id })))
    }

    /// Every shard's figures held now, as one ([`Figures::add`]).
    pub async fn figures_async(&self) -> Result<Figures, HookError> {
        let mut figures = Figures::default();
        for partition in self.held() {
            let Some(hook) = self.get(partition) else { continue };
            figures.add(&hook.figures_async().await?);
        }
        Ok(figures)
    }

    /// Every shard's health; `ok` while every one held is.
    pub fn health(&self) -> ShardsHealth {
        let hooks: Vec<(u32, Arc<Hook>)> = self.held().into_iter().filter_map(|p| Some((p, self.get(p)?))).collect();
        let shards: BTreeMap<u32, HealthReport> = hooks.iter().map(|(p, hook)| (*p, hook.health())).collect();
        let worst = shards.values().map(|h| h.recording).max_by_key(|r| severity(r)).unwrap_or("ok");
        let last_failure =
            shards.values().filter_map(|h| h.last_failure.clone()).max_by_key(|failure| failure.at.micros());
        ShardsHealth {
            recording: worst,
            failed_groups: shards.values().map(|h| h.failed_groups).sum(),
            last_failure,
            queued: shards.values().map(|h| h.queued).sum(),
            shards,
        }
    }

    /// Answers once the writer of any shard held now stopped on a panic ([`Hook::writer_stopped`]): a server stops
    /// then, so that a supervisor starts a new one. Waits on their health only: a shard removed meanwhile still
    /// stops cleanly.
    pub async fn writer_stopped(&self) {
        let healths: Vec<_> = self.held().into_iter().filter_map(|p| Some(Arc::clone(&self.get(p)?.health))).collect();
        let mut waits: Vec<Pin<Box<dyn Future<Output = ()> + Send + '_>>> = healths
            .iter()
            .map(|health| Box::pin(health.stopped()) as Pin<Box<dyn Future<Output = ()> + Send>>)
            .collect();
        if waits.is_empty() {
            return std::future::pending().await;
        }
        std::future::poll_fn(|cx| match waits.iter_mut().any(|wait| wait.as_mut().poll(cx).is_ready()) {
            true => Poll::Ready(()),
            false => Poll::Pending,
        })
        .await
    }
}

/// Runs a future that never waits on anything but the blocking calls inside it (the blocking `commit` and
/// `release`, which share [`Shards::close_in`] with the async close).
fn block_on<T>(future: impl Future<Output = T>) -> T {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut cx) {
        Poll::Ready(value) => value,
        Poll::Pending => unreachable!("a close through the blocking API never waits on a waker"),
    }
}
