//! `serve --data DIR` as services use it: the real binary over a directory of shards, each tenant's decisions and
//! reservations in its own partition's shard file, a plan default in every shard governing every tenant, health for
//! every shard, and each shard's outbox published.

mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ledger::Ledger;
use ledger::shards::{Shard, ShardDir};
use schemas::partition::partition_of;
use schemas::*;
use serde_json::{Value, json};
use support::brokers::{Broker, event_ids_on_topic};
use support::*;

const SECRET: &str = "every-tenant-secret-0123456789";
const P: u32 = 2;

/// `quota-ledger --data DIR serve` on a free port, killed when dropped unless stopped.
struct Server {
    child: ChildGuard,
    base: String,
    agent: ureq::Agent,
}

impl Server {
    fn start(dir: &Path, extra: &[&str]) -> Server {
        let tokens = dir.with_extension("tokens.toml");
        let text = format!("[[token]]\nname = \"all\"\nsecret = \"{SECRET}\"\ntenants = [\"*\"]\n");
        serve::tokens::write_private(&tokens, &text).unwrap();
        let mut child = ChildGuard::new(
            Command::new(BIN)
                .arg("--data")
                .arg(dir)
                .args(["serve", "--listen", "127.0.0.1:0", "--tokens"])
                .arg(&tokens)
                .args(extra)
                .env_remove("QUOTA_LEDGER_PATH")
                .env_remove("QUOTA_LEDGER_BROKERS")
                .stdout(Stdio::piped())
                .spawn()
                .expect("serve starts"),
        );
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).expect("serve prints its address");
        let base =
            line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("first line: {line:?}")).to_string();
        let config = ureq::Agent::config_builder().http_status_as_error(false).build();
        Server { child, base, agent: ureq::Agent::new_with_config(config) }
    }

    fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let request =
            self.agent.post(format!("{}{path}", self.base)).header("Authorization", format!("Bearer {SECRET}"));
        let mut response = request.send_json(body).expect("an HTTP answer");
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().expect("a body");
        (status, serde_json::from_str(&text).unwrap_or_else(|e| panic!("{status} {text:?} is not JSON: {e}")))
    }

    fn get(&self, path: &str) -> (u16, Value) {
        let request =
            self.agent.get(format!("{}{path}", self.base)).header("Authorization", format!("Bearer {SECRET}"));
        let mut response = request.call().expect("an HTTP answer");
        let status = response.status().as_u16();
        (status, serde_json::from_str(&response.body_mut().read_to_string().unwrap()).unwrap())
    }

    fn check(&self, tenant: &str, key: &str, amount: i64) -> (u16, Value) {
        self.post("/v1/check", &json!({"tenant": tenant, "metric": "tokens", "amount": amount, "idempotency_key": key}))
    }

    fn health(&self) -> (u16, Value) {
        let mut response = self.agent.get(format!("{}/healthz", self.base)).call().expect("an HTTP answer");
        let status = response.status().as_u16();
        (status, serde_json::from_str(&response.body_mut().read_to_string().unwrap()).unwrap())
    }

    /// SIGTERM, and the exit code.
    fn stop(mut self) -> Option<i32> {
        // SAFETY: kill(2) on our own child's pid, which is not reaped yet (the guard reaps it).
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(started.elapsed() < Duration::from_secs(30), "serve did not stop within 30 s of SIGTERM");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A monthly HARD plan default (tenant `*`) of `limit` tokens.
fn plan_default(limit: i64) -> Event {
    Event::Policy(PolicyEvent::new(
        header("plan-tokens-v1", "2026-01-01T00:00:00Z", "*", "tokens"),
        "plan-tokens",
        limit,
        Window::MONTH,
        Enforcement::HARD,
        at("2026-01-01T00:00:00Z"),
    ))
}

/// A directory of `P` shards, the plan default ingested into each as producers write it: to every partition.
fn shards_with_plan_default(limit: i64) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let shards = ShardDir::new(&data);
    let policy = dir.path().join("policy.avro");
    write_container(&policy, &[plan_default(limit)]);
    for partition in 0..P {
        drop(shards.open(Shard { partition, partitions: P }).unwrap());
        let shard = shards.path_of(partition);
        run(&["--ledger", shard.to_str().unwrap(), "ingest", "--file", policy.to_str().unwrap()], b"").success();
    }
    dir
}

/// The shard file `decision_id` is recorded in, of the `P` of `data`.
fn shards_holding(data: &Path, event_id: &str) -> Vec<u32> {
    let shards = ShardDir::new(data);
    (0..P)
        .filter(|p| {
            let ledger = Ledger::open_read_only(shards.path_of(*p)).unwrap();
            ledger.recorded_event(event_id).unwrap().is_some()
        })
        .collect()
}

// contract §9.4: through one `serve --data`, each tenant's decisions and reservations land in its own partition's
// shard file only, a replay is answered from there, and the plan default of every shard governs every tenant.
#[test]
fn each_tenant_is_decided_and_recorded_in_its_own_shard() {
    let dir = shards_with_plan_default(10);
    let data = dir.path().join("data");
    let server = Server::start(&data, &[]);
    let tenants: Vec<String> = (0..24).map(|i| format!("org-{i}")).collect();
    assert!((0..P).all(|p| tenants.iter().any(|t| partition_of(t, P) == p)), "tenants of every partition");
    let mut decided = Vec::new();
    for tenant in &tenants {
        let (status, body) = server.check(tenant, "k-1", 6);
        assert_eq!(status, 200, "{tenant}: {body}");
        let (status, replay) = server.check(tenant, "k-1", 6);
        assert_eq!((status, &replay["decisionId"], &replay["replayed"]), (200, &body["decisionId"], &json!(true)));
        let (status, denied) = server.check(tenant, "k-2", 6);
        assert_eq!((status, denied["policyId"].as_str()), (429, Some("plan-tokens")), "{tenant}: 6 of 10 used");
        decided.push((tenant.clone(), body["decisionId"].as_str().unwrap().to_string()));
    }
    let reserve =
        json!({"tenant": "org-1", "metric": "tokens", "amount": 3, "ttl_ms": 60_000, "idempotency_key": "r-1"});
    let (status, reserved) = server.post("/v1/reservations", &reserve);
    assert_eq!(status, 200, "{reserved}");
    let id = reserved["reservation_id"].as_str().unwrap().to_string();
    assert_eq!(ids_partition(&id), Some(partition_of("org-1", P)), "{id} names its shard");
    let (status, committed) = server.post(&format!("/v1/reservations/{id}/commit"), &json!({"amount": 2}));
    assert_eq!((status, committed["reserved"].as_i64()), (200, Some(3)), "{committed}");

    let (status, health) = server.health();
    assert_eq!((status, health["status"].as_str()), (200, Some("ok")), "{health}");
    assert_eq!(health["hook"]["shards"].as_object().map(|s| s.len()), Some(P as usize), "{health}");
    assert_eq!(server.stop(), Some(0));

    for (tenant, decision_id) in &decided {
        assert_eq!(shards_holding(&data, decision_id), [partition_of(tenant, P)], "{tenant}'s decision");
    }
    assert_eq!(shards_holding(&data, &format!("{id}-commit")), [partition_of("org-1", P)]);
    // What an operator reads: each shard's status counts its own tenants' events only: the plan default, 3 per
    // tenant (an allowed check's decision and usage, a denied check's decision), and 5 for org-1's reservation
    // (its decision, the RESERVE and the COMMIT, and the alerts of 80% and 90% of the limit its hold reached).
    for partition in 0..P {
        let shard = ShardDir::new(&data).path_of(partition);
        let status = run(&["--ledger", shard.to_str().unwrap(), "status", "--json"], b"").success().json();
        let of_shard = tenants.iter().filter(|t| partition_of(t, P) == partition).count() as u64;
        let reservation = 5 * u64::from(partition == partition_of("org-1", P));
        let expected = 1 + 3 * of_shard + reservation;
        assert_eq!(Counts::of_status(&status).events_recorded, expected, "shard {partition}: {status}");
    }
}

// Proves that a check of several metrics and a read of remaining quota go to the tenant's shard, and that `quota
// show --data` reads the same numbers from it.
#[test]
fn several_metrics_and_remaining_quota_are_each_tenants_shards() {
    let dir = shards_with_plan_default(10);
    let data = dir.path().join("data");
    let server = Server::start(&data, &[]);
    let tenants = ["org-1", "org-2", "org-3", "org-4"];
    assert!((0..P).all(|p| tenants.iter().any(|t| partition_of(t, P) == p)), "tenants of every partition");
    for (n, tenant) in tenants.iter().enumerate() {
        let body = json!({"tenant": tenant, "amounts": {"requests": 1, "tokens": n + 1}, "idempotency_key": "k-1"});
        let (status, answer) = server.post("/v1/check", &body);
        assert_eq!((status, answer["decisions"].as_array().map(Vec::len)), (200, Some(2)), "{answer}");
        let (status, quotas) = server.get(&format!("/v1/quotas?tenant={tenant}"));
        assert_eq!(status, 200, "{quotas}");
        let q = &quotas["quotas"][0];
        let numbers = (q["policy_id"].as_str(), q["consumed"].as_i64(), q["remaining"].as_i64());
        assert_eq!(numbers, (Some("plan-tokens"), Some(n as i64 + 1), Some(9 - n as i64)), "{quotas}");
    }
    assert_eq!(server.stop(), Some(0));
    for (n, tenant) in tenants.iter().enumerate() {
        let shown = run(&["--data", data.to_str().unwrap(), "quota", "show", tenant, "--json"], b"").success().json();
        assert_eq!(shown["quotas"][0]["consumed"].as_i64(), Some(n as i64 + 1), "{tenant}: {shown}");
    }
}

/// The partition a reservation id names (`rsv-pN-…`).
fn ids_partition(id: &str) -> Option<u32> {
    hook::ids::partition_of_reservation(id, P)
}

// contract §9.4: `serve --data` needs shards to serve: an empty directory is refused (a hook on no shard would allow
// everything), `--partitions` creates them, and shards of another count are refused.
#[test]
fn serve_data_creates_the_shards_it_is_told_to_and_refuses_an_empty_directory() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let tokens = dir.path().join("tokens.toml");
    serve::tokens::write_private(&tokens, &format!("[[token]]\nsecret = \"{SECRET}\"\ntenants = [\"*\"]\n")).unwrap();
    std::fs::create_dir(&data).unwrap();
    let data_arg = data.to_str().unwrap();
    let refused =
        run(&["--data", data_arg, "serve", "--listen", "127.0.0.1:0", "--tokens", tokens.to_str().unwrap()], b"");
    let refused = refused.expect_code(2);
    assert!(refused.stderr.contains("holds no shard"), "{}", refused.stderr);

    let server = Server::start(&data, &["--partitions", "3"]);
    let (status, health) = server.health();
    assert_eq!((status, health["hook"]["shards"].as_object().map(|s| s.len())), (200, Some(3)), "{health}");
    assert_eq!(server.stop(), Some(0));
    let files: Vec<u32> = ShardDir::new(&data).files().unwrap().into_iter().map(|(p, _)| p).collect();
    assert_eq!(files, [0, 1, 2]);

    let other_count = run(
        &[
            "--data",
            data_arg,
            "serve",
            "--partitions",
            "2",
            "--listen",
            "127.0.0.1:0",
            "--tokens",
            tokens.to_str().unwrap(),
        ],
        b"",
    );
    let other_count = other_count.expect_code(2);
    assert!(other_count.stderr.contains("of 3"), "names the count the shard holds: {}", other_count.stderr);

    let ledger = dir.path().join("ledger.db");
    let with_ledger = run(&["--ledger", ledger.to_str().unwrap(), "serve", "--partitions", "2", "--tokens", "x"], b"");
    assert!(with_ledger.expect_code(2).stderr.contains("--partitions is for a directory of shards"));
}

// contract §6 outbox over shards: with brokers, every shard's decisions reach quota.decisions, each exactly once.
#[test]
fn every_shards_outbox_is_published() {
    let dir = shards_with_plan_default(1_000);
    let data = dir.path().join("data");
    let broker = Broker::mock();
    let server = Server::start(&data, &["--brokers", &broker.bootstrap]);
    let mut expected: Vec<String> = (0..12)
        .map(|i| {
            let (status, body) = server.check(&format!("org-{i}"), "k-1", 1);
            assert_eq!(status, 200, "{body}");
            body["decisionId"].as_str().unwrap().to_string()
        })
        .collect();
    let health = eventually(30, "every shard's outbox published", || {
        let (_, health) = server.health();
        (health["outbox"]["pending"] == 0 && health["outbox"]["shards"].as_object().map(|s| s.len()) == Some(2))
            .then_some(health)
    });
    assert_eq!(health["outbox"]["last_error"], Value::Null, "{health}");
    let mut on_topic = event_ids_on_topic(&broker.bootstrap, "quota.decisions", expected.len());
    on_topic.sort();
    expected.sort();
    assert_eq!(on_topic, expected, "every decision exactly once");
    assert_eq!(server.stop(), Some(0));
}
