//! The hook over shards as a library, on real shard files: every request in its tenant's shard, reservations closed
//! in theirs, plan defaults governing every shard, partitions added and removed while requests flow, and health.

use std::sync::Arc;
use std::time::Duration;

use hook::*;
use ledger::shards::{Shard, ShardDir};
use ledger::{Batch, Incoming, Ledger, Origin};
use schemas::partition::partition_of;
use schemas::*;

const P: u32 = 2;

fn ask(tenant: &str, key: &str, amount: i64) -> Request {
    Request::one(Who::tenant(tenant), "tokens", amount, key)
}

fn reserve(tenant: &str, key: &str, amount: i64) -> Request {
    Request { ttl_ms: Some(60_000), ..ask(tenant, key, amount) }
}

/// A monthly HARD plan default (tenant `*`) of `limit` tokens.
fn plan_default(limit: i64) -> Event {
    let start = Timestamp::parse_rfc3339("2026-01-01T00:00:00Z").unwrap();
    Event::Policy(PolicyEvent::new(
        Header {
            event_id: "plan-monthly".into(),
            occurred_at: start,
            tenant: "*".into(),
            subject: None,
            metric: "tokens".into(),
            source: "admin".into(),
            api_key: None,
            project: None,
        },
        "plan-monthly",
        limit,
        Window::MONTH,
        Enforcement::HARD,
        start,
    ))
}

/// `count` tenants of each partition.
fn tenants_of_each_partition(count: usize) -> Vec<Vec<String>> {
    let mut of = vec![Vec::new(); P as usize];
    for i in 0.. {
        let tenant = format!("org-{i}");
        let partition = partition_of(&tenant, P) as usize;
        if of[partition].len() < count {
            of[partition].push(tenant);
        }
        if of.iter().all(|tenants| tenants.len() == count) {
            return of;
        }
    }
    unreachable!()
}

fn decision_in(dir: &ShardDir, partition: u32, tenant: &str, key: &str) -> bool {
    let ledger = Ledger::open_read_only(dir.path_of(partition)).unwrap();
    ledger.recorded_event(&hook::ids::decision_id(&hook::ids::key_hash(tenant, key))).unwrap().is_some()
}

// Proves that each tenant's decisions land in its own partition's shard and nowhere else, and that a replayed key is
// answered by that shard.
#[test]
fn each_tenants_decisions_land_in_its_shard() {
    let dir = tempfile::tempdir().unwrap();
    let shards = Shards::start_all(ShardDir::new(dir.path()), Some(P), HookSettings::default()).unwrap();
    let tenants = tenants_of_each_partition(5);
    for tenant in tenants.iter().flatten() {
        assert!(shards.check(ask(tenant, "k-1", 1)).unwrap().allowed());
        assert!(shards.check(ask(tenant, "k-1", 1)).unwrap().replayed, "{tenant}: the same shard answers the replay");
    }
    let stopped: Vec<Stopped> = shards.held().into_iter().filter_map(|p| shards.remove(p)).collect();
    assert!(stopped.iter().all(|s| s.wait(Duration::from_secs(10))));
    let dir = ShardDir::new(dir.path());
    for (partition, tenants) in tenants.iter().enumerate() {
        for tenant in tenants {
            assert!(decision_in(&dir, partition as u32, tenant, "k-1"), "{tenant} in shard {partition}");
            assert!(!decision_in(&dir, 1 - partition as u32, tenant, "k-1"), "{tenant} not in the other shard");
        }
    }
}

// Proves that a plan default in every shard governs the tenants of every shard, each tenant's allowance its own.
#[test]
fn a_plan_default_in_every_shard_governs_every_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let shard_dir = ShardDir::new(dir.path());
    for partition in 0..P {
        let mut ledger = shard_dir.open(Shard { partition, partitions: P }).unwrap();
        let incoming = Incoming { event: plan_default(10), origin: Origin::Local { name: "t".into() }, raw: None };
        ledger.append(&Batch { events: vec![incoming], ..Batch::default() }).unwrap();
    }
    let shards = Shards::start_all(ShardDir::new(dir.path()), None, HookSettings::default()).unwrap();
    assert_eq!(shards.partitions(), P);
    for tenant in tenants_of_each_partition(2).iter().flatten() {
        assert!(shards.check(ask(tenant, "k-1", 10)).unwrap().allowed(), "{tenant}: its first 10 fit");
        let denied = shards.check(ask(tenant, "k-2", 1)).unwrap();
        assert_eq!(denied.code, Code::QUOTA_EXCEEDED, "{tenant}");
        assert_eq!(denied.policy_id.as_deref(), Some("plan-monthly"));
    }
}

// Proves that a reservation's id names its shard, and that its commit and release find it there, through the
// blocking and the async API.
#[test]
fn reservations_close_in_their_shard() {
    let dir = tempfile::tempdir().unwrap();
    let shards = Shards::start_all(ShardDir::new(dir.path()), Some(P), HookSettings::default()).unwrap();
    for (partition, tenants) in tenants_of_each_partition(2).iter().enumerate() {
        let reserved = shards.reserve(reserve(&tenants[0], "r-1", 40)).unwrap();
        let id = reserved.reservation_id.unwrap();
        assert_eq!(hook::ids::partition_of_reservation(&id, P), Some(partition as u32), "{id}");
        let committed = shards.commit(&id, 50).unwrap().unwrap();
        assert_eq!((committed.reserved, committed.charged_above_reserved), (40, 10));
        assert!(shards.commit(&id, 50).unwrap().unwrap().replayed);

        let id = shards.reserve(reserve(&tenants[1], "r-2", 5)).unwrap().reservation_id.unwrap();
        let scope = TenantScope::Only(vec![tenants[1].clone()]);
        let closed = block(shards.close_async(&id, ReservationAction::RELEASE, 0, scope));
        assert_eq!(closed.unwrap().unwrap().action, ReservationAction::RELEASE);
    }
    assert!(matches!(shards.release("rsv-unknown"), Ok(Err(Refusal::NotFound { .. }))));
}

// Proves that a removed partition answers NotServing at once while the other goes on, that its shard is closed once
// its writer stopped (another hook can take it), and that adding it back serves it again with what it recorded.
#[test]
fn a_partition_removed_and_added_back() {
    let dir = tempfile::tempdir().unwrap();
    let shards = Arc::new(Shards::start_all(ShardDir::new(dir.path()), Some(P), HookSettings::default()).unwrap());
    let tenants = tenants_of_each_partition(1);
    let (gone, kept) = (&tenants[0][0], &tenants[1][0]);
    assert!(shards.check(ask(gone, "k-1", 1)).unwrap().allowed());
    let id = shards.reserve(reserve(gone, "r-1", 1)).unwrap().reservation_id.unwrap();

    let stopped = shards.remove(0).expect("partition 0 was held");
    assert!(stopped.wait(Duration::from_secs(10)), "its writer stops and closes the shard");
    assert!(shards.remove(0).is_none());
    assert!(matches!(shards.check(ask(gone, "k-2", 1)), Err(HookError::NotServing { partition: 0, partitions: 2 })));
    assert!(matches!(shards.commit(&id, 1), Err(HookError::NotServing { partition: 0, .. })));
    assert!(shards.check(ask(kept, "k-1", 1)).unwrap().allowed());
    assert_eq!(shards.held(), [1]);
    // Closed: a hook of another process (or router) could open it now.
    drop(Hook::start(ShardDir::new(dir.path()).path_of(0), HookSettings::default()).unwrap());

    shards.add(0).unwrap();
    assert!(shards.check(ask(gone, "k-1", 1)).unwrap().replayed, "the shard kept what it recorded");
    assert!(shards.commit(&id, 1).unwrap().is_ok());
    assert!(matches!(shards.add(2), Err(StartError::NoSuchPartition { partition: 2, partitions: 2 })));
    assert_eq!(shards.health().recording, "ok");
    assert_eq!(shards.health().shards.len(), 2);
}

// Proves that a hook on a shard refuses a tenant of another partition: no tenant's decision can land in another's
// shard, whoever calls it.
#[test]
fn a_shards_hook_refuses_tenants_of_other_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let shard_dir = ShardDir::new(dir.path());
    drop(shard_dir.open(Shard { partition: 0, partitions: P }).unwrap());
    let hook = Hook::start(shard_dir.path_of(0), HookSettings::default()).unwrap();
    let tenants = tenants_of_each_partition(1);
    assert!(hook.check(ask(&tenants[0][0], "k-1", 1)).unwrap().allowed());
    let refused = hook.check(ask(&tenants[1][0], "k-1", 1));
    assert!(matches!(refused, Err(HookError::NotServing { partition: 1, partitions: 2 })), "{refused:?}");
}

/// Runs a future on a small runtime of its own.
fn block<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(future)
}
