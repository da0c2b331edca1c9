//! What `serve` asks: the hook of one ledger file (`--ledger`), or the router over a directory of shards (`--data`,
//! [`hook::Shards`]), which sends each request to its tenant's shard. The routes ask either the same way.

use std::sync::Arc;

use hook::{Closed, Decision, Hook, HookError, Refusal, Request, Shards, TenantScope};
use schemas::ReservationAction;

/// The hook `serve` answers through.
#[derive(Clone)]
pub(crate) enum Hooks {
    /// One ledger holding every partition.
    One(Hook),
    /// A hook per shard, each request routed to its tenant's.
    Shards(Arc<Shards>),
}

impl Hooks {
    pub(crate) async fn check_async_as(&self, request: Request, token: &str) -> Result<Decision, HookError> {
        match self {
            Hooks::One(hook) => hook.check_async_as(request, token).await,
            Hooks::Shards(shards) => shards.check_async_as(request, token).await,
        }
    }

    pub(crate) async fn reserve_async_as(&self, request: Request, token: &str) -> Result<Decision, HookError> {
        match self {
            Hooks::One(hook) => hook.reserve_async_as(request, token).await,
            Hooks::Shards(shards) => shards.reserve_async_as(request, token).await,
        }
    }

    pub(crate) async fn check_amounts_async(
        &self,
        request: Request,
        token: &str,
    ) -> Result<hook::Decisions, HookError> {
        match self {
            Hooks::One(hook) => hook.check_amounts_async(request, Some(token)).await,
            Hooks::Shards(shards) => shards.check_amounts_async(request, Some(token)).await,
        }
    }

    pub(crate) async fn reserve_amounts_async(
        &self,
        request: Request,
        token: &str,
    ) -> Result<hook::Decisions, HookError> {
        match self {
            Hooks::One(hook) => hook.reserve_amounts_async(request, Some(token)).await,
            Hooks::Shards(shards) => shards.reserve_amounts_async(request, Some(token)).await,
        }
    }

    pub(crate) async fn quotas_async(&self, query: hook::QuotaQuery) -> Result<hook::Quotas, HookError> {
        match self {
            Hooks::One(hook) => hook.quotas_async(query).await,
            Hooks::Shards(shards) => shards.quotas_async(query).await,
        }
    }

    pub(crate) async fn close_async(
        &self,
        reservation_id: &str,
        action: ReservationAction,
        amount: i64,
        tenants: TenantScope,
    ) -> Result<Result<Closed, Refusal>, HookError> {
        match self {
            Hooks::One(hook) => hook.close_async(reservation_id, action, amount, tenants).await,
            Hooks::Shards(shards) => shards.close_async(reservation_id, action, amount, tenants).await,
        }
    }

    pub(crate) async fn acquire_async(
        &self,
        request: hook::AcquireRequest,
        token: Option<&str>,
    ) -> Result<Decision, HookError> {
        match self {
            Hooks::One(hook) => hook.acquire_async(request, token).await,
            Hooks::Shards(shards) => shards.acquire_async(request, token).await,
        }
    }

    pub(crate) async fn lease_step_async(
        &self,
        lease_id: &str,
        action: ReservationAction,
        step: hook::LeaseStep,
        tenants: TenantScope,
    ) -> Result<Result<Closed, Refusal>, HookError> {
        match self {
            Hooks::One(hook) => hook.lease_step_async(lease_id, action, step, tenants).await,
            Hooks::Shards(shards) => shards.lease_step_async(lease_id, action, step, tenants).await,
        }
    }

    /// What `/healthz` says of the hook: its `recording` (the worst shard's), and the report as JSON (with every
    /// shard's under `shards`).
    pub(crate) fn health(&self) -> (&'static str, serde_json::Value) {
        let (recording, report) = match self {
            Hooks::One(hook) => {
                let report = hook.health();
                (report.recording, serde_json::to_value(report))
            }
            Hooks::Shards(shards) => {
                let report = shards.health();
                (report.recording, serde_json::to_value(report))
            }
        };
        (recording, report.unwrap_or_else(|e| serde_json::json!({"error": e.to_string()})))
    }

    /// The state's figures: every shard's as one.
    pub(crate) async fn figures(&self) -> Result<hook::figures::Figures, hook::HookError> {
        match self {
            Hooks::One(hook) => hook.figures_async().await,
            Hooks::Shards(shards) => shards.figures_async().await,
        }
    }

    /// Requests queued for the writers now, and groups failed since the start (every shard's summed).
    pub(crate) fn load(&self) -> (usize, u64) {
        match self {
            Hooks::One(hook) => {
                let report = hook.health();
                (report.queued, report.failed_groups)
            }
            Hooks::Shards(shards) => {
                let report = shards.health();
                (report.queued, report.failed_groups)
            }
        }
    }

    /// The last failure's message, for the error `serve` exits with once a writer stopped.
    pub(crate) fn last_failure(&self) -> Option<String> {
        match self {
            Hooks::One(hook) => hook.health().last_failure.map(|f| f.message),
            Hooks::Shards(shards) => shards.health().last_failure.map(|f| f.message),
        }
    }

    /// Answers once a writer stopped on a panic.
    pub(crate) async fn writer_stopped(&self) {
        match self {
            Hooks::One(hook) => hook.writer_stopped().await,
            Hooks::Shards(shards) => shards.writer_stopped().await,
        }
    }
}
