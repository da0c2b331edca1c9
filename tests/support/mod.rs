//! Shared helpers of the end-to-end tests: run the built `quota-ledger` binary against a ledger file in a temporary
//! directory (as ripgrep's tests run `rg`), read its JSON, and write Avro object container files of events.

// Each test crate includes this module and uses a different part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub mod billing;
pub mod brokers;
pub mod nodes;
pub mod tls;

use apache_avro::{Codec, Writer};
use schemas::*;
use serde_json::Value;

/// The binary under test, built by cargo for the integration tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_quota-ledger");

/// What one run of the binary did.
#[derive(Debug)]
pub struct Run {
    /// The exit code (`None` when a signal ended the process).
    pub code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: String,
    /// The command line, for failure messages.
    pub command: String,
}

impl Run {
    pub fn stdout_text(&self) -> String {
        String::from_utf8(self.stdout.clone())
            .unwrap_or_else(|e| panic!("`{}`: stdout is not UTF-8: {e}", self.command))
    }

    /// Stdout parsed as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.stdout).unwrap_or_else(|e| {
            panic!("`{}`: stdout is not JSON ({e}):\n{}\nstderr:\n{}", self.command, self.stdout_text(), self.stderr)
        })
    }

    /// Panics, showing stdout and stderr, unless the exit code is `expected`.
    pub fn expect_code(self, expected: i32) -> Run {
        assert_eq!(
            self.code,
            Some(expected),
            "`{}` exited with {:?}, expected {expected}\nstdout:\n{}\nstderr:\n{}",
            self.command,
            self.code,
            String::from_utf8_lossy(&self.stdout),
            self.stderr
        );
        self
    }

    pub fn success(self) -> Run {
        self.expect_code(0)
    }
}

/// Runs the binary with `args`, feeding `stdin`, in `dir`, with no ledger path from the environment.
pub fn run_in(dir: &Path, args: &[&str], stdin: &[u8]) -> Run {
    run_in_env(dir, args, stdin, &[])
}

/// [`run_in`] with the environment variables `env` set.
pub fn run_in_env(dir: &Path, args: &[&str], stdin: &[u8], env: &[(&str, &str)]) -> Run {
    let command = format!("quota-ledger {}", args.join(" "));
    let mut child = Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .env_remove("QUOTA_LEDGER_PATH")
        .env_remove("QUOTA_LEDGER_BROKERS")
        .env_remove("QUOTA_LEDGER_GROUP")
        .env_remove("QUOTA_LEDGER_CONFIG")
        .env_remove("QUOTA_LEDGER_CA_FILE")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {BIN}: {e}"));
    let mut input = child.stdin.take().expect("stdin is piped");
    // A command that does not read stdin may exit before the write: a broken pipe here is not the test's concern.
    let _ = input.write_all(stdin);
    drop(input);
    let output = child.wait_with_output().unwrap_or_else(|e| panic!("`{command}` did not finish: {e}"));
    Run {
        code: output.status.code(),
        stdout: output.stdout,
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        command,
    }
}

/// Runs the binary with `args` in `dir` as `quota-ledger ARGS | head -0` would once `head` is gone: its stdout is
/// a pipe whose read end was closed before it started, so its first write to stdout meets a broken pipe.
pub fn run_into_closed_pipe_in(dir: &Path, args: &[&str]) -> Run {
    let command = format!("quota-ledger {} | (a closed pipe)", args.join(" "));
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let output = Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .env_remove("QUOTA_LEDGER_PATH")
        .env_remove("QUOTA_LEDGER_BROKERS")
        .env_remove("QUOTA_LEDGER_GROUP")
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap_or_else(|e| panic!("`{command}` did not run: {e}"));
    Run {
        code: output.status.code(),
        stdout: output.stdout,
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        command,
    }
}

/// A child process that is killed (SIGKILL) and reaped when dropped, so that a test that panics while it runs
/// (a failed assertion, an `expect`) leaves no process behind: a long-running `ingest` would otherwise outlive the
/// test and hold its ledger, its lock and a consumer group member. Derefs to the [`Child`], so that a test can
/// still signal it, wait for it or kill it itself.
pub struct ChildGuard(Child);

impl ChildGuard {
    pub fn new(child: Child) -> ChildGuard {
        ChildGuard(child)
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        // Both answer Ok, or an error to ignore, when the test already waited for the child.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl std::ops::Deref for ChildGuard {
    type Target = Child;

    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for ChildGuard {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

/// Runs a command that needs no ledger (`schemas ...`) in a fresh temporary directory.
pub fn run(args: &[&str], stdin: &[u8]) -> Run {
    let dir = tempfile::tempdir().expect("a temporary directory");
    run_in(dir.path(), args, stdin)
}

/// A ledger file in its own temporary directory, removed with it.
pub struct TestLedger {
    pub dir: tempfile::TempDir,
    pub path: PathBuf,
}

impl TestLedger {
    pub fn new() -> TestLedger {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("ledger.db");
        TestLedger { dir, path }
    }

    /// A path in the ledger's directory, for input files.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Runs the binary with `--ledger` set to this ledger.
    pub fn run(&self, args: &[&str]) -> Run {
        let mut all = vec!["--ledger", self.path.to_str().expect("a UTF-8 temporary path")];
        all.extend_from_slice(args);
        run_in(self.dir.path(), &all, b"")
    }

    /// Runs the binary with `--ledger` set to this ledger, its stdout a pipe already closed.
    pub fn run_into_closed_pipe(&self, args: &[&str]) -> Run {
        let mut all = vec!["--ledger", self.path.to_str().expect("a UTF-8 temporary path")];
        all.extend_from_slice(args);
        run_into_closed_pipe_in(self.dir.path(), &all)
    }

    /// `ingest --brokers BROKERS EXTRA...` on this ledger as a child process, killed when dropped, its stderr into
    /// the file `ingest.err` of the ledger's directory.
    pub fn spawn_ingest(&self, brokers: &str, extra: &[&str]) -> ChildGuard {
        let stderr = File::create(self.file("ingest.err")).expect("a file for ingest's stderr");
        let child = Command::new(BIN)
            .args(["--ledger", self.path.to_str().expect("a UTF-8 temporary path"), "ingest", "--brokers", brokers])
            .args(extra)
            .current_dir(self.dir.path())
            .env_remove("QUOTA_LEDGER_PATH")
            .env_remove("QUOTA_LEDGER_BROKERS")
            .env_remove("QUOTA_LEDGER_GROUP")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("ingest starts");
        ChildGuard::new(child)
    }

    /// `ingest --file F --json`, which must succeed: the ingest report.
    pub fn ingest(&self, file: &Path) -> Value {
        self.run(&["ingest", "--file", file.to_str().expect("a UTF-8 path"), "--json"]).success().json()
    }

    /// `status --json`.
    pub fn status(&self) -> Value {
        self.run(&["status", "--json"]).success().json()
    }

    /// `quarantine list --json`: the quarantined messages, oldest first.
    pub fn quarantined(&self) -> Vec<Value> {
        let listed = self.run(&["quarantine", "list", "--json"]).success().json();
        listed.as_array().unwrap_or_else(|| panic!("quarantine list --json is not an array: {listed}")).clone()
    }

    /// `verify --json`, whatever its exit code.
    pub fn verify(&self) -> Run {
        self.run(&["verify", "--json"])
    }

    /// Asserts that `verify` exits 0 and reports no bad entry.
    pub fn assert_verifies(&self) {
        let report = self.verify().success().json();
        assert_eq!(report["first_bad"], Value::Null, "verify found a bad entry: {report}");
    }
}

/// Whether a log line of `log` says `message` with `field` (`name=value`, as the text format writes a field).
pub fn said(log: &str, message: &str, field: &str) -> bool {
    log.lines().any(|line| line.contains(message) && line.split_whitespace().any(|word| word == field))
}

/// Asks `probe` every 100 ms until it answers, for `limit_secs` at most; then fails, saying `what` did not happen.
pub fn eventually<T>(limit_secs: u64, what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let started = std::time::Instant::now();
    loop {
        if let Some(answer) = probe() {
            return answer;
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(limit_secs), "{what} within {limit_secs} s");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// An integer field of a JSON report, or a panic naming it.
pub fn count(report: &Value, field: &str) -> u64 {
    report[field].as_u64().unwrap_or_else(|| panic!("no integer {field:?} in {report}"))
}

/// `generate --to-kafka`: the report of what was produced.
pub fn generate_to(broker: &brokers::Broker, tenants: u32, events: u64, seed: u64) -> Value {
    generate_into(&broker.bootstrap, tenants, events, seed)
}

/// `generate --to-kafka BOOTSTRAP`: the report of what was produced.
pub fn generate_into(bootstrap: &str, tenants: u32, events: u64, seed: u64) -> Value {
    let (tenants, events, seed) = (tenants.to_string(), events.to_string(), seed.to_string());
    let args = ["generate", "--tenants", &tenants, "--events", &events, "--seed", &seed, "--to-kafka", bootstrap];
    run(&args, b"").success().json()
}

/// The counts of `status --json` that tests compare exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub events_recorded: u64,
    pub duplicates: u64,
    pub conflicts: u64,
    pub quarantined: u64,
    pub watermark: u64,
}

impl Counts {
    /// The counts of a ledger that may not exist yet (all zero then).
    pub fn of_status_or_zero(ledger: &TestLedger) -> Counts {
        let zero = Counts { events_recorded: 0, duplicates: 0, conflicts: 0, quarantined: 0, watermark: 0 };
        if !ledger.path.exists() {
            return zero;
        }
        // An ingest may be creating the file right now: until its migrations commit, there is no ledger yet.
        let status = ledger.run(&["status", "--json"]);
        if status.code == Some(2) && status.stderr.contains("no ledger at") {
            return zero;
        }
        Counts::of_status(&status.success().json())
    }

    pub fn of_status(status: &Value) -> Counts {
        let field = |name: &str| {
            status[name].as_u64().unwrap_or_else(|| panic!("status --json has no integer {name:?}: {status}"))
        };
        Counts {
            events_recorded: field("events_recorded"),
            duplicates: field("duplicates"),
            conflicts: field("conflicts"),
            quarantined: field("quarantined"),
            watermark: field("watermark"),
        }
    }
}

pub use testkit::fixtures::at;

/// The common fields, with source `e2e` and no subject.
pub fn header(event_id: &str, occurred_at: &str, tenant: &str, metric: &str) -> Header {
    Header { source: "e2e".to_string(), ..testkit::fixtures::header(event_id, occurred_at, tenant, metric) }
}

/// Version 1 of policy `daily` of `tenant`: a HARD limit of `limit` requests per UTC DAY for the tenant as a whole,
/// effective since October 2026. Tests change what they need with struct update syntax (a time zone, say).
pub fn hard_daily(event_id: &str, tenant: &str, limit: i64) -> PolicyEvent {
    PolicyEvent::new(
        header(event_id, "2026-10-01T00:00:00Z", tenant, "requests"),
        "daily",
        limit,
        Window::DAY,
        Enforcement::HARD,
        at("2026-10-01T00:00:00Z"),
    )
}

/// A UsageEvent of `requests` with no request_id and no attributes.
pub fn usage(event_id: &str, occurred_at: &str, tenant: &str, quantity: i64) -> Event {
    Event::Usage(UsageEvent {
        header: header(event_id, occurred_at, tenant, "requests"),
        quantity,
        request_id: None,
        attributes: BTreeMap::new(),
    })
}

/// The fingerprint of the current schema of a record type, as the CLI prints it (16 hex digits).
pub fn current_fingerprint(event_type: EventType) -> String {
    format!("{:016x}", Catalog::builtin().current(event_type).fingerprint)
}

/// Writes an Avro object container file of `events` (all of one record type) with the current writer schema,
/// uncompressed. Events are written as they are, valid or not: the file is what a producer sent. Its sync marker is
/// drawn from the events, not at random as writers do, so that the same events give the same bytes and other events
/// another marker (`ingest --file` knows a file by its marker).
pub fn write_container(path: &Path, events: &[Event]) {
    let catalog = Catalog::builtin();
    let encoded: Vec<u8> = events.iter().flat_map(|e| catalog.encode_single_object(e)).collect();
    let marker = ledger::chain::sha256(&encoded)[..16].try_into().expect("16 bytes");
    write_container_marked(path, events, marker);
}

/// [`write_container`] with the sync marker given.
pub fn write_container_marked(path: &Path, events: &[Event], marker: [u8; 16]) {
    let event_type = events.first().expect("a container file of at least one event").event_type();
    let catalog = Catalog::builtin();
    let schema = &catalog.current(event_type).schema;
    let file = File::create(path).unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
    let mut writer = Writer::builder()
        .schema(schema)
        .writer(file)
        .codec(Codec::Null)
        .marker(marker)
        .build()
        .expect("a container writer for a catalog schema");
    for event in events {
        assert_eq!(event.event_type(), event_type, "one record type per container file");
        writer.append_value_ref(&schemas::avro::to_value(event)).expect("an event matches its current schema");
    }
    let file = writer.into_inner().expect("the container file is written");
    file.sync_all().expect("the container file reaches the disk");
}

/// A valid event of any input type, for tests that need one of each.
pub fn sample_event(event_type: EventType, event_id: &str) -> Event {
    let header = header(event_id, "2026-11-02T10:00:00Z", "org-poison", "requests");
    let t = at("2026-11-02T10:00:00Z");
    match event_type {
        EventType::UsageEvent => usage(event_id, "2026-11-02T10:00:00Z", "org-poison", 1),
        EventType::DecisionEvent => Event::Decision(DecisionEvent {
            header,
            request_id: format!("req-{event_id}"),
            idempotency_key: format!("idem-{event_id}"),
            amount: 1,
            outcome: Outcome::ALLOWED,
            reason: Reason::WITHIN_LIMIT,
            policy_id: None,
            policy_version: None,
            window_start: None,
            window_end: None,
            limit: None,
            used_before: None,
            remaining: None,
            retry_after_ms: None,
            token_name: None,
        }),
        EventType::ReservationEvent => Event::Reservation(ReservationEvent {
            header,
            reservation_id: format!("rsv-{event_id}"),
            action: ReservationAction::RESERVE,
            amount: 5,
            expires_at: Some(Timestamp(t.micros() + 60_000_000)),
            fencing_token: None,
        }),
        EventType::GrantEvent => Event::Grant(GrantEvent {
            header,
            grant_id: format!("grant-{event_id}"),
            amount: 10,
            valid_from: t,
            valid_until: Timestamp(t.micros() + 3_600_000_000),
            reason: "test".into(),
            actor: None,
        }),
        EventType::PolicyEvent => {
            Event::Policy(PolicyEvent::new(header, format!("pol-{event_id}"), 100, Window::DAY, Enforcement::HARD, t))
        }
        EventType::AdjustmentEvent
        | EventType::AlertEvent
        | EventType::CorrectionEvent
        | EventType::CapacityLeaseEvent
        | EventType::PlanAssignmentEvent
        | EventType::MeterEvent => {
            unreachable!(
                "adjustments, alerts, corrections, capacity leases, plan assignments and meters are not input topics"
            )
        }
    }
}

/// Whether a test may use `program`: true when it runs; false when `skip_var=1` skips the test (recorded, and refused
/// in CI); otherwise a missing program fails the test with how to install it (`.ci/test` installs every one).
pub fn tool_available(program: &str, skip_var: &str, install: &str) -> bool {
    let test = std::thread::current().name().unwrap_or("a test").to_string();
    testkit::tool(program, skip_var, install, &format!("{test} (needs {program})"))
}
