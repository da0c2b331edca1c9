//! `serve` against callers it must not trust (the "trust" issue): sums past i64, a writer that dies, reused
//! idempotency keys, retried closes, another producer's decision under a key's id, fields past their bounds in a
//! group of good requests, a tenant inventing subjects, 500s that keep their detail in the log, idle connections by
//! the hundred, plain HTTP on a network address, and a token file others may read or that does not parse. Each
//! drives the real binary over HTTP (or HTTPS) on a real ledger file, as a caller would.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use schemas::validate::AMOUNT_MAX;
use schemas::*;
use serde_json::{Value, json};
use support::*;

const SECRET: &str = "org-1-secret-0123456789";
const ADMIN: &str = "admin-secret-0123456789";

/// The token file of these tests: `org-1`'s token and an operator's, as contract §7 first wrote them (no names).
fn tokens_file() -> String {
    format!(
        "[[token]]\nsecret = \"{SECRET}\"\ntenants = [\"org-1\"]\n\n[[token]]\nsecret = \"{ADMIN}\"\ntenants = [\"*\"]\n"
    )
}

/// `quota-ledger serve` on a free port, its stderr in the ledger directory's `serve.err`, killed when dropped.
struct Server {
    child: ChildGuard,
    base: String,
    agent: ureq::Agent,
}

/// How a test starts `serve`, besides its flags.
#[derive(Default)]
struct Start {
    /// The token file's text (default [`tokens_file`]), written with the owner's permissions only unless `mode`.
    tokens: Option<String>,
    /// The token file's mode, when not 600.
    mode: Option<u32>,
    /// The soft open-file limit `serve` inherits, as a service manager may leave it.
    soft_files: Option<u64>,
    /// The hard one, when lowered too.
    hard_files: Option<u64>,
}

impl Server {
    fn start(test: &TestLedger, extra: &[&str]) -> Server {
        Server::spawn(test, extra, Start::default())
            .unwrap_or_else(|(code, stderr)| panic!("serve exited {code:?}: {stderr}"))
    }

    /// Starts `serve`, or answers its exit code and stderr if it exits before listening.
    fn spawn(test: &TestLedger, extra: &[&str], start: Start) -> Result<Server, (Option<i32>, String)> {
        let tokens = test.file("tokens.toml");
        serve::tokens::write_private(&tokens, &start.tokens.unwrap_or_else(tokens_file)).unwrap();
        if let Some(mode) = start.mode {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        let stderr = std::fs::File::create(test.file("serve.err")).expect("a file for serve's stderr");
        let mut command = Command::new(BIN);
        command.args(["--ledger", test.path.to_str().unwrap(), "serve", "--tokens"]).arg(&tokens);
        if !extra.contains(&"--listen") {
            command.args(["--listen", "127.0.0.1:0"]);
        }
        command.args(extra).stdout(Stdio::piped()).stderr(stderr);
        if start.soft_files.is_some() || start.hard_files.is_some() {
            let (soft, hard) = (start.soft_files, start.hard_files);
            // SAFETY: between fork and exec, only getrlimit and setrlimit (async-signal-safe) on the child's own limit.
            unsafe {
                command.pre_exec(move || {
                    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
                    if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    limit.rlim_max = hard.unwrap_or(limit.rlim_max);
                    limit.rlim_cur = soft.unwrap_or(limit.rlim_cur).min(limit.rlim_max);
                    match libc::setrlimit(libc::RLIMIT_NOFILE, &limit) {
                        0 => Ok(()),
                        _ => Err(std::io::Error::last_os_error()),
                    }
                });
            }
        }
        let mut child = ChildGuard::new(command.spawn().expect("serve starts"));
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).expect("serve's stdout");
        let Some(base) = line.trim().strip_prefix("listening on ") else {
            let code = child.wait().expect("serve's exit").code();
            return Err((code, stderr_of(test)));
        };
        let config = ureq::Agent::config_builder().http_status_as_error(false).build();
        Ok(Server { child, base: base.into(), agent: ureq::Agent::new_with_config(config) })
    }

    /// The port it listens on.
    fn port(&self) -> u16 {
        self.base.rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("a port in {}", self.base))
    }

    /// POSTs `body` with `secret`: status and JSON body.
    fn post(&self, path: &str, secret: &str, body: &Value) -> (u16, Value) {
        self.post_authorized(path, &format!("Bearer {secret}"), body)
    }

    /// POSTs `body` with this `Authorization` header: status and JSON body.
    fn post_authorized(&self, path: &str, authorization: &str, body: &Value) -> (u16, Value) {
        let request = self.agent.post(format!("{}{path}", self.base)).header("Authorization", authorization);
        let mut response = request.send_json(body).expect("an HTTP answer");
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().expect("a body");
        (status, serde_json::from_str(&text).unwrap_or_else(|e| panic!("{status} {text:?} is not JSON: {e}")))
    }

    fn check(&self, body: Value) -> (u16, Value) {
        self.post("/v1/check", ADMIN, &body)
    }

    fn reserve(&self, body: Value) -> (u16, Value) {
        self.post("/v1/reservations", ADMIN, &body)
    }

    fn close(&self, id: &str, action: &str, amount: i64) -> (u16, Value) {
        self.post(&format!("/v1/reservations/{id}/{action}"), ADMIN, &json!({"amount": amount}))
    }

    /// `GET /healthz`: status and JSON body.
    fn health(&self) -> (u16, Value) {
        let mut response = self.agent.get(format!("{}/healthz", self.base)).call().expect("an HTTP answer");
        let status = response.status().as_u16();
        (status, serde_json::from_str(&response.body_mut().read_to_string().expect("a body")).expect("JSON"))
    }

    /// Waits for the process to exit by itself (at most `limit`): its exit code.
    fn exit_code(&mut self, limit: Duration) -> Option<i32> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("serve's status") {
                return status.code();
            }
            assert!(started.elapsed() < limit, "serve still runs after {limit:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// What a server started on `test` wrote to stderr so far.
fn stderr_of(test: &TestLedger) -> String {
    std::fs::read_to_string(test.file("serve.err")).expect("serve's stderr")
}

fn policy(tenant: &str, metric: &str, limit: i64, window: Window) -> Event {
    Event::Policy(PolicyEvent::new(
        header(&format!("policy-{tenant}-{metric}"), "2026-01-01T00:00:00Z", tenant, metric),
        format!("quota-{metric}"),
        limit,
        window,
        Enforcement::HARD,
        at("2026-01-01T00:00:00Z"),
    ))
}

/// A ledger holding `events` (of one type), ingested from a container file.
fn ledger_with(events: &[Event]) -> TestLedger {
    let test = TestLedger::new();
    write_container(&test.file("setup.avro"), events);
    test.ingest(&test.file("setup.avro"));
    test
}

fn sql_i64(test: &TestLedger, sql: &str) -> i64 {
    let conn = rusqlite::Connection::open_with_flags(&test.path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    conn.busy_timeout(Duration::from_millis(ledger::BUSY_TIMEOUT_MS)).unwrap();
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

fn ask(tenant: &str, metric: &str, amount: i64, key: &str) -> Value {
    json!({"tenant": tenant, "metric": metric, "amount": amount, "idempotency_key": key})
}

// Point 1: checks and reservations that would take a window's consumption or what is held past i64 are refused with
// 400 naming `amount`, and the writer goes on deciding. Unchecked, the 1,025th of the largest amounts (with no
// policy, so all allowed) would panic the writer, and every later request would answer 500.
#[test]
fn sums_past_i64_are_refused_with_400_and_the_writer_goes_on() {
    let test = ledger_with(&[policy("org-1", "other", 10, Window::DAY)]);
    let server = Server::start(&test, &["--durability", "normal"]);
    for n in 0..1_024 {
        let (status, body) = server.check(ask("org-1", "tokens", AMOUNT_MAX, &format!("c-{n}")));
        assert_eq!(status, 200, "check {n}: {body}");
    }
    let (status, body) = server.check(ask("org-1", "tokens", AMOUNT_MAX, "c-over"));
    assert_eq!((status, body["field"].as_str()), (400, Some("amount")), "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(message.starts_with("amount: ") && message.contains("past 2^63 - 1"), "{message}");
    for n in 0..1_024 {
        let body = json!({"tenant": "org-1", "metric": "held", "amount": AMOUNT_MAX, "ttl_ms": 600_000, "idempotency_key": format!("r-{n}")});
        let (status, body) = server.reserve(body);
        assert_eq!(status, 200, "reserve {n}: {body}");
    }
    let body = json!({"tenant": "org-1", "metric": "held", "amount": AMOUNT_MAX, "ttl_ms": 600_000, "idempotency_key": "r-over"});
    let (status, body) = server.reserve(body);
    assert_eq!((status, body["field"].as_str()), (400, Some("amount")), "{body}");
    assert!(body["message"].as_str().unwrap().contains("what open reservations"), "{body}");
    let (status, body) = server.check(ask("org-1", "other", 1, "still-deciding"));
    assert_eq!((status, body["code"].as_str()), (200, Some("OK")), "the writer still decides: {body}");
    let (status, health) = server.health();
    assert_eq!((status, &health["hook"]["recording"]), (200, &json!("ok")), "{health}");
    let recorded = sql_i64(&test, "SELECT COUNT(*) FROM decision_events");
    assert_eq!(recorded, 2 * 1_024 + 1, "nothing recorded for the refused requests");
}

// Point 1: grants whose sum leaves i64 raise the effective limit to i64::MAX: the hook allows, reconcile and the
// month's export run. Were the sum to overflow, `effective_limit` would panic in all three (the writer would die,
// reconcile and export would exit 101).
#[test]
fn grants_summing_past_i64_saturate_in_the_hook_reconcile_and_billing() {
    let grants: Vec<Event> = (0..1_025)
        .map(|n| {
            Event::Grant(GrantEvent {
                header: header(&format!("grant-{n}"), "2026-01-01T00:00:00Z", "org-1", "tokens"),
                grant_id: format!("grant-{n}"),
                amount: AMOUNT_MAX,
                valid_from: at("2000-01-01T00:00:00Z"),
                valid_until: at("2099-12-31T00:00:00Z"),
                reason: "a generous support team".into(),
                actor: None,
            })
        })
        .collect();
    let test = ledger_with(&[policy("org-1", "tokens", 100, Window::MONTH)]);
    write_container(&test.file("grants.avro"), &grants);
    test.ingest(&test.file("grants.avro"));
    let server = Server::start(&test, &[]);
    let (status, body) = server.check(ask("org-1", "tokens", 1_000, "k-1"));
    assert_eq!((status, body["limit"].as_i64()), (200, Some(i64::MAX)), "{body}");
    drop(server);
    let now = Timestamp::now().to_string();
    let reconciled = test.run(&["reconcile", "--as-of", &now, "--json"]);
    assert!(matches!(reconciled.code, Some(0 | 1)), "reconcile: {:?}\n{}", reconciled.code, reconciled.stderr);
    let period = &now[..7];
    let export = test.run(&["export", "billing", "--period", period, "--format", "jsonl"]).success();
    let row: Value = serde_json::from_str(export.stdout_text().lines().next().expect("a row")).unwrap();
    assert_eq!((row["effective_limit"].as_i64(), row["overshoot"].as_i64()), (Some(i64::MAX), Some(0)), "{row}");
}

// Point 1: a writer that dies (here an invariant of the ledger that no longer holds: another connection added a
// trigger that writes a quarantine row with every entry, so the append's read-back assertion fails) turns /healthz
// to 503 at once, answers 500 with an error id whose detail is only in the log, and `serve` exits 2 by itself so
// that a supervisor restarts it. A /healthz that went on saying ok would keep the dead writer in service for good.
#[test]
fn a_writer_that_dies_answers_503_and_serve_exits_non_zero() {
    let test = ledger_with(&[policy("org-1", "tokens", 100, Window::DAY)]);
    let mut server = Server::start(&test, &[]);
    assert_eq!(server.check(ask("org-1", "tokens", 1, "before")).0, 200);
    let other = rusqlite::Connection::open(&test.path).unwrap();
    other
        .execute_batch(
            "CREATE TRIGGER tamper AFTER INSERT ON entries BEGIN
                 INSERT INTO quarantine (origin, origin_stream, origin_partition, origin_offset, raw, reason_code,
                     reason, quarantined_at)
                 VALUES ('local', 'tamper', NULL, NULL, x'00', 'tamper', 'tamper', 0);
             END",
        )
        .unwrap();
    drop(other);
    let (status, body) = server.check(ask("org-1", "tokens", 1, "dies"));
    assert_eq!((status, body["error"].as_str()), (500, Some("ledger")), "{body}");
    let (status, health) = server.health();
    assert_eq!((status, &health["status"]), (503, &json!("stopped")), "{health}");
    assert_eq!(health["hook"]["recording"], "stopped", "{health}");
    let error_id = body["error_id"].as_str().expect("an error id").to_string();
    assert!(body["message"].as_str().unwrap().contains(&error_id), "{body}");
    assert!(!body["message"].as_str().unwrap().contains("panic"), "the detail stays in the log: {body}");
    assert_eq!(server.exit_code(Duration::from_secs(30)), Some(2), "serve exits non-zero");
    let stderr = stderr_of(&test);
    let failed =
        stderr.lines().find(|l| l.contains(&format!("error_id={error_id}"))).unwrap_or_else(|| panic!("{stderr}"));
    assert!(failed.contains("serve: a request failed") && failed.contains("error=the hook has stopped"), "{failed}");
    assert!(stderr.contains("the hook's writer stopped on a panic"), "{stderr}");
    assert!(stderr.contains("quota-ledger: error: the hook's writer stopped"), "{stderr}");
}

// Point 2: an idempotency key reused with another subject, metric, amount or kind of request answers 409
// IDEMPOTENCY_KEY_REUSED and consumes nothing; the same request answers the original decision, `amount` included.
// Were every reuse answered with the original decision, a different request would get an answer as if it had been
// decided.
#[test]
fn a_reused_idempotency_key_answers_409_and_consumes_nothing() {
    let test = ledger_with(&[policy("org-1", "tokens", 100, Window::DAY)]);
    let server = Server::start(&test, &[]);
    let first = json!({"tenant": "org-1", "subject": "alice", "metric": "tokens", "amount": 5, "idempotency_key": "k"});
    let (status, original) = server.check(first.clone());
    assert_eq!((status, original["replayed"].as_bool()), (200, Some(false)), "{original}");
    for (field, value) in [("amount", json!(6)), ("subject", json!("bob")), ("metric", json!("requests"))] {
        let mut reused = first.clone();
        reused[field] = value;
        let (status, body) = server.check(reused);
        assert_eq!(
            (status, body["code"].as_str(), body["field"].as_str()),
            (409, Some("IDEMPOTENCY_KEY_REUSED"), Some(field)),
            "{body}"
        );
        assert_eq!(body["decisionId"], original["decisionId"], "{body}");
    }
    let (status, again) = server.check(first.clone());
    assert_eq!((status, again["replayed"].as_bool()), (200, Some(true)), "{again}");
    assert_eq!((&again["decisionId"], again["amount"].as_i64()), (&original["decisionId"], Some(5)), "{again}");
    let mut without_subject = first.clone();
    without_subject.as_object_mut().unwrap().remove("subject");
    assert_eq!(server.check(without_subject).0, 409, "no subject is another subject");
    let reserve = json!({"tenant": "org-1", "subject": "alice", "metric": "tokens", "amount": 5, "ttl_ms": 60_000, "idempotency_key": "k"});
    let (status, body) = server.reserve(reserve);
    assert_eq!((status, body["field"].as_str()), (409, Some("kind")), "a check's key is no reservation: {body}");
    assert_eq!(sql_i64(&test, "SELECT SUM(quantity) FROM usage_events"), 5, "consumed once");
    assert_eq!(sql_i64(&test, "SELECT COUNT(*) FROM decision_events"), 1, "decided once");
}

// Point 2: a retried commit or release with the same body answers the original close (200, replayed), also after a
// restart; a commit with another amount, or a release after a commit, answers 409 and records nothing. Were every
// retry of a close answered 409 already_closed, a client whose first answer was lost could not tell its commit from
// another's.
#[test]
fn retried_closes_answer_their_original_and_other_closes_409() {
    let test = ledger_with(&[policy("org-1", "tokens", 1_000, Window::DAY)]);
    let server = Server::start(&test, &[]);
    let reserve = |key: &str| {
        let body =
            json!({"tenant": "org-1", "metric": "tokens", "amount": 40, "ttl_ms": 600_000, "idempotency_key": key});
        let (status, body) = server.reserve(body);
        assert_eq!(status, 200, "{body}");
        body["reservation_id"].as_str().unwrap().to_string()
    };
    let committed = reserve("r-1");
    let (status, original) = server.close(&committed, "commit", 55);
    assert_eq!(status, 200, "{original}");
    let (status, again) = server.close(&committed, "commit", 55);
    assert_eq!((status, again["replayed"].as_bool()), (200, Some(true)), "{again}");
    assert_eq!(original["replayed"], false, "{original}");
    for field in ["reservation_id", "action", "amount", "reserved", "charged_above_reserved", "event_id"] {
        assert_eq!(again[field], original[field], "{field}: {again}");
    }
    let (status, body) = server.close(&committed, "commit", 56);
    assert_eq!((status, body["refused"].as_str()), (409, Some("already_closed")), "{body}");
    let (status, body) = server.close(&committed, "release", 0);
    assert_eq!((status, body["refused"].as_str()), (409, Some("already_closed")), "{body}");
    let released = reserve("r-2");
    assert_eq!(server.close(&released, "release", 0).0, 200);
    let (status, body) = server.close(&released, "release", 0);
    assert_eq!((status, body["replayed"].as_bool()), (200, Some(true)), "{body}");
    drop(server);
    let server = Server::start(&test, &[]);
    let (status, body) = server.close(&committed, "commit", 55);
    assert_eq!((status, body["replayed"].as_bool(), &body["event_id"]), (200, Some(true), &original["event_id"]));
    let (status, _) = server.close(&committed, "commit", 54);
    assert_eq!(status, 409, "after a restart too");
    assert_eq!(
        sql_i64(&test, "SELECT COUNT(*) FROM reservation_events WHERE action <> 'RESERVE'"),
        2,
        "one close each"
    );
}

// Point 2: a DecisionEvent another producer sent through Kafka (here a file) under the id a tenant's key derives to
// is never answered as the hook's decision: the key answers 409 and nothing is consumed. Answered as a replay, it
// would give the caller another tenant's numbers.
#[test]
fn another_producers_decision_under_a_keys_id_is_never_replayed() {
    let test = ledger_with(&[policy("org-1", "tokens", 100, Window::DAY)]);
    let forged = Event::Decision(DecisionEvent {
        header: Header {
            source: "someone-else".into(),
            ..header(
                &hook::ids::decision_id(&hook::ids::key_hash("org-1", "k-taken")),
                "2026-11-02T10:00:00Z",
                "org-2",
                "tokens",
            )
        },
        request_id: "theirs".into(),
        idempotency_key: "k-taken".into(),
        amount: 7,
        outcome: Outcome::ALLOWED,
        reason: Reason::WITHIN_LIMIT,
        policy_id: Some("org-2-secret-plan".into()),
        policy_version: Some(3),
        window_start: None,
        window_end: None,
        limit: Some(123_456),
        used_before: Some(99),
        remaining: Some(123_350),
        retry_after_ms: None,
        token_name: None,
    });
    write_container(&test.file("forged.avro"), &[forged]);
    test.ingest(&test.file("forged.avro"));
    let server = Server::start(&test, &[]);
    let (status, body) = server.post("/v1/check", SECRET, &ask("org-1", "tokens", 7, "k-taken"));
    assert_eq!((status, body["field"].as_str()), (409, Some("idempotency_key")), "{body}");
    assert!(!body.to_string().contains("org-2") && !body.to_string().contains("123456"), "nothing of it leaks: {body}");
    assert_eq!(sql_i64(&test, "SELECT COUNT(*) FROM usage_events"), 0, "nothing consumed");
    assert_eq!(server.post("/v1/check", SECRET, &ask("org-1", "tokens", 7, "k-free")).0, 200);
}

// Point 3: fields past their bounds (a 200-byte tenant, a subject with a newline, a 300-byte request_id) are refused
// with 400 naming the field before anything is decided, and the other requests of their group are decided and
// recorded. Left for the ledger to refuse, the one bad event would fail the group's whole append, and every request
// of the group would answer 500.
#[test]
fn a_field_past_its_bound_never_fails_the_other_requests_of_its_group() {
    let test = ledger_with(&[policy("org-1", "tokens", 1_000, Window::DAY)]);
    // A group waits 300 ms for more after its first request: the requests sent together share one.
    let server = Arc::new(Server::start(&test, &["--group-wait-us", "300000"]));
    let long = "t".repeat(200);
    let bad: Vec<(Value, &str)> = vec![
        (ask(&long, "tokens", 1, "bad-tenant"), "tenant"),
        (
            json!({"tenant": "org-1", "subject": "alice\nforged line", "metric": "tokens", "amount": 1, "idempotency_key": "bad-subject"}),
            "subject",
        ),
        (
            json!({"tenant": "org-1", "metric": "tokens", "amount": 1, "idempotency_key": "bad-request-id", "request_id": "r".repeat(300)}),
            "request_id",
        ),
        (ask("org-1", &"m".repeat(129), 1, "bad-metric"), "metric"),
        (ask("org-1", "tokens", 1, &"k".repeat(257)), "idempotency_key"),
    ];
    let good: Vec<Value> = (0..8).map(|n| ask("org-1", "tokens", 1, &format!("good-{n}"))).collect();
    let sent: Vec<(Value, Option<&'static str>)> = bad
        .into_iter()
        .map(|(body, field)| (body, Some(field)))
        .chain(good.into_iter().map(|body| (body, None)))
        .collect();
    let clients: Vec<_> = sent
        .into_iter()
        .map(|(body, field)| {
            let server = Arc::clone(&server);
            std::thread::spawn(move || (field, server.check(body)))
        })
        .collect();
    for (field, (status, body)) in clients.into_iter().map(|c| c.join().unwrap()) {
        match field {
            Some(field) => {
                assert_eq!((status, body["field"].as_str()), (400, Some(field)), "{body}");
                assert!(body["message"].as_str().unwrap().starts_with(&format!("{field}: ")), "{body}");
            }
            None => assert_eq!(status, 200, "a good request of the group: {body}"),
        }
    }
    assert_eq!(sql_i64(&test, "SELECT COUNT(*) FROM decision_events"), 8, "the good ones, recorded");
    test.assert_verifies();
}

// Point 3: a tenant that keeps inventing subjects or metrics is refused (400 naming the field) once it has counters
// for `--counters-per-tenant-max` of them in memory; those it has go on, and other tenants are not affected.
// Without a bound, every new subject would grow the writer's memory.
#[test]
fn a_tenant_past_its_bound_of_subjects_and_metrics_is_refused() {
    let test = ledger_with(&[policy("org-1", "tokens", 1_000, Window::DAY)]);
    let server = Server::start(&test, &["--counters-per-tenant-max", "3"]);
    let of = |subject: &str, metric: &str, key: &str| json!({"tenant": "org-1", "subject": subject, "metric": metric, "amount": 1, "idempotency_key": key});
    // The metric and two subjects of it: three.
    assert_eq!(server.check(of("alice", "tokens", "k-1")).0, 200);
    assert_eq!(server.check(of("bob", "tokens", "k-2")).0, 200);
    let (status, body) = server.check(of("carol", "tokens", "k-3"));
    assert_eq!((status, body["field"].as_str()), (400, Some("subject")), "{body}");
    assert!(body["message"].as_str().unwrap().contains("bound (3)"), "{body}");
    let (status, body) = server.check(ask("org-1", "requests", 1, "k-4"));
    assert_eq!((status, body["field"].as_str()), (400, Some("metric")), "{body}");
    assert_eq!(server.check(of("alice", "tokens", "k-5")).0, 200, "a subject it has goes on");
    assert_eq!(server.check(ask("org-1", "tokens", 1, "k-6")).0, 200, "no subject is no new subject");
    assert_eq!(
        server
            .check(
                json!({"tenant": "org-2", "subject": "dave", "metric": "tokens", "amount": 1, "idempotency_key": "k-7"})
            )
            .0,
        200
    );
    assert_eq!(sql_i64(&test, "SELECT COUNT(*) FROM decision_events"), 5, "nothing recorded for the refused");
}

/// `n` connections to `port` that send nothing, held open until dropped.
fn idle_connections(port: u16, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|i| TcpStream::connect(("127.0.0.1", port)).unwrap_or_else(|e| panic!("idle connection {i}: {e}")))
        .collect()
}

/// A check of `key` on a connection of its own: its status, answered within a generous bound (a liveness bound, not a
/// figure: how fast is for `bench`).
fn bounded_check(server: &Server, key: &str) -> Result<u16, String> {
    let config =
        ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(Duration::from_secs(60))).build();
    let agent = ureq::Agent::new_with_config(config);
    let sent = agent
        .post(format!("{}/v1/check", server.base))
        .header("Authorization", format!("Bearer {ADMIN}"))
        .send_json(ask("org-1", "tokens", 1, key));
    sent.map(|r| r.status().as_u16()).map_err(|e| e.to_string())
}

/// Whether the server closed `stream` (end of stream, or a reset) rather than leaving it open until this side's read
/// gives up.
fn closed_by_server(stream: &mut TcpStream) -> bool {
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(0) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        Ok(_) => false,
    }
}

// Point 3: hundreds of idle connections (a client that opens them and sends nothing) neither starve a new client nor
// stop serve: with the open-file limit a service manager leaves (soft 128 here) serve raises it to the hard limit at
// start, and beyond `--connections-max` new connections wait until the header timeout closes idle ones, then are
// answered. Kept at the soft limit, serve would run out of descriptors after about 120 connections, and a new client
// would wait for the idle ones' header timeout.
#[test]
fn idle_connections_neither_starve_a_new_client_nor_stop_serve() {
    let test = ledger_with(&[policy("org-1", "tokens", 1_000, Window::DAY)]);
    let start = Start { soft_files: Some(128), ..Start::default() };
    let server = Server::spawn(&test, &[], start).unwrap_or_else(|e| panic!("serve: {e:?}"));
    let idle = idle_connections(server.port(), 300);
    let status = bounded_check(&server, "past-the-soft-limit");
    assert_eq!(status, Ok(200), "a new client behind 300 idle connections; stderr:\n{}", stderr_of(&test));
    drop((idle, server));

    // A bound of 16 connections, idle ones closed after a second: 40 idle connections take the places and fill the
    // backlog; a new client waits for two rounds of them to time out, then is answered.
    // That the bound held the new client back is what serve says (below), not how long it waited.
    let flags = ["--connections-max", "16", "--header-timeout-ms", "1000"];
    let mut server = Server::spawn(&test, &flags, Start::default()).unwrap_or_else(|e| panic!("serve: {e:?}"));
    let mut idle = idle_connections(server.port(), 40);
    let status = bounded_check(&server, "past-the-bound");
    assert_eq!(status, Ok(200), "stderr:\n{}", stderr_of(&test));
    assert!(closed_by_server(&mut idle[0]), "an idle connection is closed by the server");
    assert_eq!(server.health().0, 200);
    assert!(server.child.try_wait().unwrap().is_none(), "serve still runs");
    let stderr = stderr_of(&test);
    assert!(said(&stderr, "serve: connections at the bound (--connections-max)", "connections=16"), "{stderr}");
    // A bound the open-file limit cannot hold is refused at start, naming both.
    let limit = ["--connections-max", "100000"];
    let files = Start { soft_files: Some(1_024), hard_files: Some(1_024), ..Start::default() };
    let (code, stderr) =
        Server::spawn(&test, &limit, files).err().unwrap_or_else(|| panic!("serve started with a bound of 100000"));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--connections-max 100000 needs 100256 open files") && stderr.contains("1024"), "{stderr}");
}

/// One HTTP/1.1 request over TLS to 127.0.0.1:`port`, trusting only the certificate authority `ca`: the status and
/// the body, or why the TLS connection failed.
fn https(port: u16, ca: &Path, request: &str) -> Result<(u16, String), String> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_file(ca).expect("the CA certificate")).expect("a CA rustls accepts");
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let connection = rustls::ClientConnection::new(Arc::new(config), name).map_err(|e| e.to_string())?;
    let socket = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    socket.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut tls = rustls::StreamOwned::new(connection, socket);
    tls.write_all(request.as_bytes()).map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    // A server closing without TLS's close_notify ends the read with an error after the answer: what was read counts.
    let read = tls.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer).to_string();
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).ok_or(format!("no answer: {read:?} {text:?}"))?;
    Ok((status, text.split_once("\r\n\r\n").map_or(String::new(), |(_, body)| body.to_string())))
}

fn check_request(secret: &str, key: &str) -> String {
    let body = ask("org-1", "tokens", 1, key).to_string();
    format!(
        "POST /v1/check HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {secret}\r\nContent-Type: \
         application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

// Point 6: on an address other machines can reach, serve speaks TLS or does not start: `--listen 0.0.0.0` without
// TLS exits 2 naming --tls-cert and --insecure-listen (which lets it start); with --tls-cert and --tls-key it
// answers HTTPS, answers plain HTTP with 400 (a secret sent in clear is not looked at), and closes a connection whose
// handshake does not come within the header timeout. In plain HTTP on such an address, every bearer secret would
// cross the network in clear.
#[test]
fn a_network_address_gets_tls_or_serve_refuses_to_start() {
    let test = ledger_with(&[policy("org-1", "tokens", 1_000, Window::DAY)]);
    let anywhere = ["--listen", "0.0.0.0:0"];
    let refused = Server::spawn(&test, &anywhere, Start::default()).err();
    let (code, stderr) = refused.unwrap_or_else(|| panic!("serve listened on 0.0.0.0 in plain HTTP"));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--insecure-listen") && stderr.contains("--tls-cert"), "{stderr}");
    let insecure = Server::spawn(&test, &["--listen", "0.0.0.0:0", "--insecure-listen"], Start::default());
    assert!(insecure.unwrap_or_else(|e| panic!("{e:?}")).base.starts_with("http://0.0.0.0:"));

    let (ca, cert, key) = tls::certificates(test.dir.path());
    let (cert, key) = (cert.to_str().unwrap(), key.to_str().unwrap());
    let tls = ["--listen", "0.0.0.0:0", "--tls-cert", cert, "--tls-key", key, "--header-timeout-ms", "1000"];
    let server = Server::spawn(&test, &tls, Start::default()).unwrap_or_else(|e| panic!("serve with TLS: {e:?}"));
    assert!(server.base.starts_with("https://0.0.0.0:"), "{}", server.base);
    let port = server.port();
    let (status, body) = https(port, &ca, &check_request(ADMIN, "over-tls")).expect("an HTTPS answer");
    assert_eq!(status, 200, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["code"], "OK", "{body}");
    let (status, body) = https(port, &ca, &check_request("not-a-token-0123456789", "k")).expect("an HTTPS answer");
    assert_eq!(status, 401, "{body}");

    let config = ureq::Agent::config_builder().http_status_as_error(false).build();
    let plain = ureq::Agent::new_with_config(config)
        .post(format!("http://127.0.0.1:{port}/v1/check"))
        .header("Authorization", format!("Bearer {ADMIN}"))
        .send_json(ask("org-1", "tokens", 1, "in-clear"));
    match plain {
        Ok(mut response) => {
            let text = response.body_mut().read_to_string().unwrap_or_default();
            assert_eq!(response.status().as_u16(), 400, "{text}");
            assert!(text.contains("this port speaks HTTPS"), "{text}");
        }
        Err(error) => panic!("plain HTTP to the TLS port is answered 400, not {error}"),
    }
    let mut silent = TcpStream::connect(("127.0.0.1", port)).unwrap();
    assert!(closed_by_server(&mut silent), "a connection with no handshake is closed by the server");
    assert_eq!(sql_i64(&test, "SELECT COUNT(*) FROM decision_events"), 1, "only the check over TLS was decided");
}

// Point 6: a token file group or others may read is refused (exit 2, naming the file and `chmod 600`), and one that
// does not parse is refused saying where, without printing any of its lines (here the one holding a secret): the
// secrets of a file others may read are no secrets, and toml's own error shows the line it stopped at.
#[test]
fn a_token_file_others_may_read_or_that_does_not_parse_is_refused_unquoted() {
    let test = ledger_with(&[policy("org-1", "tokens", 1_000, Window::DAY)]);
    let tokens = test.file("tokens.toml");
    let readable = Server::spawn(&test, &[], Start { mode: Some(0o644), ..Start::default() }).err();
    let (code, stderr) = readable.unwrap_or_else(|| panic!("serve started on a token file others may read"));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains(&format!("chmod 600 {}", tokens.display())), "{stderr}");

    let secret = "never-print-me-0123456789";
    let broken = [
        format!("[[token]]\nname = \"ops\"\nsecret = \"{secret}\ntenants = [\"*\"]\n"),
        format!("[[token]]\nname = \"ops\"\nsecret = {secret}\ntenants = [\"*\"]\n"),
        format!("[[token]]\nname = \"ops\"\nsecret = \"{secret}\"\ntenants = \"{secret}\"\n"),
        format!("[[token]]\nname = \"ops\"\nsecret = \"{secret}\"\n{secret} = [\"*\"]\n"),
    ];
    for text in broken {
        let refused = Server::spawn(&test, &[], Start { tokens: Some(text.clone()), ..Start::default() }).err();
        let (code, stderr) = refused.unwrap_or_else(|| panic!("serve started on {text:?}"));
        assert_eq!(code, Some(2), "{stderr}");
        assert!(!stderr.contains("never-print-me") && !stderr.contains("name = "), "{text:?}:\n{stderr}");
        assert!(stderr.contains(&format!("token file {} is not valid at line ", tokens.display())), "{stderr}");
    }
}

/// The token_name the DecisionEvent of `request_id` records, read from its entry's payload.
fn token_name_of(test: &TestLedger, request_id: &str) -> Option<String> {
    let conn = rusqlite::Connection::open_with_flags(&test.path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    conn.busy_timeout(Duration::from_millis(ledger::BUSY_TIMEOUT_MS)).unwrap();
    let (fingerprint, payload): (i64, Vec<u8>) = conn
        .query_row(
            "SELECT e.payload_fingerprint, e.payload FROM entries e JOIN decision_events d ON d.seq = e.seq \
             WHERE d.request_id = ?",
            [request_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap_or_else(|e| panic!("the decision of {request_id}: {e}"));
    match Catalog::builtin().decode_payload(fingerprint as u64, &payload).expect("a decision") {
        Event::Decision(decision) => decision.token_name,
        other => panic!("{other:?}"),
    }
}

// Point 6: every decision records the name of the token that asked, given by the token file, never by the caller (a
// body claiming one is refused) and shown by `audit why`; a token may hold the SHA-256 of its secret instead of the
// secret, so that the file need hold no secret; "Bearer" is read in any case, as HTTP's authentication schemes are
// case-insensitive; a token without a name is named by its place in the file.
#[test]
fn each_decision_names_the_token_that_asked() {
    let test = ledger_with(&[policy("org-1", "tokens", 1_000, Window::DAY)]);
    let checkout_secret = "checkout-secret-0123456789";
    let digest: String = sha2_hex(checkout_secret.as_bytes());
    let tokens = format!(
        "[[token]]\nname = \"checkout\"\nsecret_sha256 = \"{digest}\"\ntenants = [\"org-1\"]\n\n\
         [[token]]\nname = \"operator\"\nsecret = \"{ADMIN}\"\ntenants = [\"*\"]\n\n\
         [[token]]\nsecret = \"{SECRET}\"\ntenants = [\"org-1\"]\n"
    );
    let server = Server::spawn(&test, &[], Start { tokens: Some(tokens), ..Start::default() })
        .unwrap_or_else(|e| panic!("serve: {e:?}"));
    let with_request_id = |key: &str| json!({"tenant": "org-1", "metric": "tokens", "amount": 1, "idempotency_key": key, "request_id": key});
    for (authorization, key) in [
        (format!("bearer {checkout_secret}"), "by-checkout"),
        (format!("BEARER {ADMIN}"), "by-operator"),
        (format!("Bearer  {SECRET}"), "by-unnamed"),
    ] {
        let (status, body) = server.post_authorized("/v1/check", &authorization, &with_request_id(key));
        assert_eq!(status, 200, "{authorization}: {body}");
    }
    let reserve = json!({"tenant": "org-1", "metric": "tokens", "amount": 5, "ttl_ms": 60_000, "idempotency_key": "r", "request_id": "reserved-by-checkout"});
    assert_eq!(server.post("/v1/reservations", checkout_secret, &reserve).0, 200);
    let (status, body) = server.post("/v1/check", &digest, &with_request_id("by-the-digest"));
    assert_eq!(status, 401, "the digest is no secret: {body}");
    let mut claiming = with_request_id("claims-operator");
    claiming["token_name"] = json!("operator");
    let (status, body) = server.post("/v1/check", checkout_secret, &claiming);
    assert_eq!(status, 400, "a caller cannot name its token: {body}");
    drop(server);
    for (request_id, named) in [
        ("by-checkout", "checkout"),
        ("by-operator", "operator"),
        ("by-unnamed", "token-3"),
        ("reserved-by-checkout", "checkout"),
    ] {
        assert_eq!(token_name_of(&test, request_id).as_deref(), Some(named), "{request_id}");
    }
    let why = test.run(&["audit", "why", "by-checkout"]).success().stdout_text();
    assert!(why.contains("Asked with the serve token named checkout.\n"), "{why}");
    let why = test.run(&["audit", "why", "by-unnamed", "--json"]).success().json();
    assert_eq!(why["decision"]["token_name"], "token-3", "{why}");
    test.assert_verifies();
}

/// SHA-256 of `bytes` as 64 lower-case hex digits, as `sha256sum` prints it (by the `sha256sum` command: these tests
/// hash nothing themselves).
fn sha2_hex(bytes: &[u8]) -> String {
    let mut child = Command::new("sha256sum").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("sha256sum");
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap().split_whitespace().next().unwrap().to_string()
}
