//! `serve` as services use it: JSON over HTTP on loopback against the real binary and a real ledger file, with
//! 64 concurrent clients, retries, reservations, bad tokens and bad bodies, and a broker outage.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use schemas::*;
use serde_json::{Value, json};
use support::brokers::{Broker, event_ids_on_topic};
use support::*;

const SECRET: &str = "org-1-secret-0123456789";
const ADMIN: &str = "admin-secret-0123456789";

/// `quota-ledger serve` on a free port, stopped when dropped.
struct Server {
    child: ChildGuard,
    base: String,
    agent: ureq::Agent,
}

impl Server {
    fn start(test: &TestLedger, extra: &[&str]) -> Server {
        Server::start_with(test, extra, Stdio::inherit())
    }

    /// A server whose stderr goes to the ledger directory's `serve.err` ([`Server::stderr`]).
    fn start_logged(test: &TestLedger, extra: &[&str]) -> Server {
        let stderr = std::fs::File::create(test.file("serve.err")).expect("a file for serve's stderr");
        Server::start_with(test, extra, Stdio::from(stderr))
    }

    fn start_with(test: &TestLedger, extra: &[&str], stderr: Stdio) -> Server {
        let tokens = test.file("tokens.toml");
        serve::tokens::write_private(
            &tokens,
            &format!("[[token]]\nsecret = \"{SECRET}\"\ntenants = [\"org-1\"]\n\n[[token]]\nsecret = \"{ADMIN}\"\ntenants = [\"*\"]\n"),
        )
        .unwrap();
        let mut child = ChildGuard::new(
            Command::new(BIN)
                .args(["--ledger", test.path.to_str().unwrap(), "serve", "--listen", "127.0.0.1:0", "--tokens"])
                .arg(&tokens)
                .args(extra)
                .stdout(Stdio::piped())
                .stderr(stderr)
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

    /// What a server started with [`Server::start_logged`] wrote to stderr so far.
    fn stderr(test: &TestLedger) -> String {
        std::fs::read_to_string(test.file("serve.err")).expect("serve's stderr")
    }

    /// POSTs `body` with `secret` (none: no Authorization header): status, headers, JSON body.
    fn post(&self, path: &str, secret: Option<&str>, body: &Value) -> (u16, ureq::http::HeaderMap, Value) {
        let mut request = self.agent.post(format!("{}{path}", self.base));
        if let Some(secret) = secret {
            request = request.header("Authorization", format!("Bearer {secret}"));
        }
        let mut response = request.send_json(body).expect("an HTTP answer");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.body_mut().read_to_string().expect("a body");
        let json = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{status} {text:?} is not JSON: {e}"));
        (status, headers, json)
    }

    /// GETs `path` with `secret` (none: no Authorization header): status and JSON body.
    fn get(&self, path: &str, secret: Option<&str>) -> (u16, Value) {
        let mut request = self.agent.get(format!("{}{path}", self.base));
        if let Some(secret) = secret {
            request = request.header("Authorization", format!("Bearer {secret}"));
        }
        let mut response = request.call().expect("an HTTP answer");
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().expect("a body");
        (status, serde_json::from_str(&text).unwrap_or_else(|e| panic!("{status} {text:?} is not JSON: {e}")))
    }

    /// `GET /healthz`: its JSON body, after asserting 200.
    fn health(&self) -> Value {
        let mut response = self.agent.get(format!("{}/healthz", self.base)).call().expect("an HTTP answer");
        assert_eq!(response.status().as_u16(), 200);
        serde_json::from_str(&response.body_mut().read_to_string().expect("a body")).expect("JSON")
    }

    /// A restart's first half, as a supervisor or an operator does it: SIGTERM, and the clean exit waited for (its
    /// outbox records what it published; dropping the server instead is a crash, after which an entry whose
    /// acknowledgement was lost is published again, as the contract allows).
    fn stop(mut self) {
        // SAFETY: kill(2) on our own child, not reaped yet (the guard reaps it).
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = eventually(60, "serve exits after SIGTERM", || self.child.try_wait().expect("wait for serve"));
        assert!(status.success(), "SIGTERM stops serve cleanly: {status}");
    }

    fn check(&self, key: &str, amount: i64) -> (u16, ureq::http::HeaderMap, Value) {
        let body = json!({"tenant": "org-1", "metric": "tokens", "amount": amount, "idempotency_key": key});
        self.post("/v1/check", Some(SECRET), &body)
    }

    /// POSTs `body` with org-1's token and the `Idempotency-Key` header `key`: status, headers, JSON body.
    fn post_keyed(&self, path: &str, key: &str, body: &Value) -> (u16, ureq::http::HeaderMap, Value) {
        let request =
            self.agent.post(format!("{}{path}", self.base)).header("Authorization", format!("Bearer {SECRET}"));
        let mut response = request.header("Idempotency-Key", key).send_json(body).expect("an HTTP answer");
        let (status, headers) = (response.status().as_u16(), response.headers().clone());
        let text = response.body_mut().read_to_string().expect("a body");
        (status, headers, serde_json::from_str(&text).unwrap_or_else(|e| panic!("{status} {text:?}: {e}")))
    }
}

// Proves the real server answers a client written before the HTTP conventions as it did (a snake_case body keyed in
// it: 200, then 409 `idempotency_key_reused` for the key with another amount, its members where they were) and one
// written to them alongside (the Idempotency-Key header and camelCase members: 200 with the RateLimit draft's fields,
// then the draft's 422), every error a problem document.
#[test]
fn old_and_new_clients_are_answered_each_in_its_conventions() {
    let test = ledger_with(hard_policy(10, Window::DAY));
    let server = Server::start(&test, &[]);
    let (status, headers, first) = server.check("old-1", 2);
    assert_eq!((status, first["code"].as_str()), (200, Some("OK")), "{first}");
    assert_eq!(
        (headers["ratelimit-limit"].as_bytes(), headers["ratelimit-remaining"].as_bytes()),
        (&b"10"[..], &b"8"[..])
    );
    let (status, headers, reused) = server.check("old-1", 3);
    assert_eq!(
        (status, reused["error"].as_str(), reused["code"].as_str()),
        (409, Some("idempotency_key_reused"), Some("IDEMPOTENCY_KEY_REUSED")),
        "{reused}"
    );
    assert_eq!((reused["field"].as_str(), &reused["decisionId"]), (Some("amount"), &first["decisionId"]));
    assert_eq!(headers["content-type"], "application/problem+json");
    assert_eq!((reused["status"].as_u64(), &reused["detail"]), (Some(409), &reused["message"]), "{reused}");

    let camel = json!({"tenant": "org-1", "metric": "tokens", "amount": 3, "requestId": "new-req-1"});
    let (status, headers, decided) = server.post_keyed("/v1/check", r#""new-1""#, &camel);
    assert_eq!((status, decided["requestId"].as_str()), (200, Some("new-req-1")), "{decided}");
    let reset = headers["ratelimit-reset"].to_str().unwrap();
    let policy = headers["ratelimit-policy"].to_str().unwrap();
    assert!(policy.ends_with(";q=10;w=86400"), "{policy}");
    let name = policy.split(';').next().unwrap();
    assert_eq!(headers["ratelimit"], format!("{name};r=5;t={reset}").as_str());
    let (status, _, reused) = server.post_keyed(
        "/v1/check",
        r#""new-1""#,
        &json!({"tenant": "org-1",
                                                 "metric": "tokens", "amount": 4}),
    );
    assert_eq!((status, reused["type"].as_str()), (422, Some("urn:quota-ledger:problem:idempotency_key_reused")));
    let (_, _, remaining) = server.check("old-2", 0);
    assert_eq!(remaining["remaining"].as_i64(), Some(5), "each request consumed once: {remaining}");
}

fn hard_policy(limit: i64, window: Window) -> Event {
    Event::Policy(PolicyEvent {
        version: 4,
        ..PolicyEvent::new(
            header("policy-quota-v1", "2026-01-01T00:00:00Z", "org-1", "tokens"),
            "quota",
            limit,
            window,
            Enforcement::HARD,
            at("2026-01-01T00:00:00Z"),
        )
    })
}

fn ledger_with(policy: Event) -> TestLedger {
    let test = TestLedger::new();
    write_container(&test.file("policy.avro"), &[policy]);
    test.ingest(&test.file("policy.avro"));
    test
}

/// A read-only connection of the test's own to a ledger file, for what no ledger read answers.
fn read_only(path: &std::path::Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    conn.busy_timeout(Duration::from_millis(ledger::BUSY_TIMEOUT_MS)).unwrap();
    conn
}

fn sql_i64(test: &TestLedger, sql: &str) -> i64 {
    read_only(&test.path).query_row(sql, [], |r| r.get(0)).unwrap()
}

/// Waits until the serving process's publisher has recorded `entries` acknowledgements.
fn wait_published(test: &TestLedger, entries: i64, limit_secs: u64, what: &str) {
    eventually(limit_secs, what, || (sql_i64(test, "SELECT COUNT(*) FROM outbox_published") >= entries).then_some(()))
}

/// 64 client threads, each sending `requests` requests as `ask(server, key, random)` says: `key` is `c{client}-{i}`,
/// `random` the next draw of the client's own xorshift sequence (the same in every run). Every answer, client after
/// client.
fn sixty_four_clients<T: Send + 'static>(
    server: &Arc<Server>,
    requests: usize,
    ask: fn(&Server, String, u64) -> T,
) -> Vec<T> {
    let clients: Vec<_> = (0..64u64)
        .map(|c| {
            let server = Arc::clone(server);
            std::thread::spawn(move || {
                let mut seed = (c + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                (0..requests)
                    .map(|i| {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        ask(&server, format!("c{c}-{i}"), seed)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    clients.into_iter().flat_map(|c| c.join().unwrap()).collect()
}

// contract §6: 64 concurrent HTTP clients with random amounts against one HARD limit: never more than fits, no denial that would have fit, and the ledger agrees.
#[test]
fn sixty_four_clients_never_get_more_than_fits() {
    const LIMIT: i64 = 5_000;
    let test = ledger_with(hard_policy(LIMIT, Window::MONTH));
    let server = Arc::new(Server::start(&test, &[]));
    let answers = sixty_four_clients(&server, 25, |server, key, random| {
        let amount = (random % 60) as i64 + 1;
        let (status, _, body) = server.check(&key, amount);
        (status, amount, body)
    });
    let allowed: i64 = answers.iter().filter(|(s, ..)| *s == 200).map(|(_, a, _)| a).sum();
    assert!(allowed <= LIMIT, "{allowed} allowed over {LIMIT}");
    for (status, amount, body) in &answers {
        assert!(*status == 200 || *status == 429, "{status} {body}");
        if *status == 429 {
            assert_eq!(body["code"], "QUOTA_EXCEEDED", "{body}");
            assert!(*amount > LIMIT - allowed, "a denied {amount} would have fit: {body}");
        }
    }
    assert!(answers.iter().any(|(s, ..)| *s == 429), "1,600 requests of about 30 exceed 5,000");
    assert_eq!(sql_i64(&test, "SELECT COALESCE(SUM(quantity), 0) FROM usage_events"), allowed, "the ledger agrees");
    assert_eq!(sql_i64(&test, "SELECT COUNT(*) FROM decision_events"), answers.len() as i64, "one decision each");
}

/// `hard_policy` of `metric`, with its own policy_id.
fn hard_policy_of(metric: &str, limit: i64) -> Event {
    let Event::Policy(mut policy) = hard_policy(limit, Window::MONTH) else { unreachable!("a policy") };
    policy.header.event_id = format!("policy-{metric}-v1");
    policy.header.metric = metric.into();
    policy.policy_id = format!("{metric}-month");
    Event::Policy(policy)
}

// Several metrics for reservations over HTTP: a reserve of two metrics answers a reservation per metric, each closed
// on its own; one that does not fit holds neither; both body forms at once are refused as for a check.
#[test]
fn a_reservation_of_two_metrics_holds_both_or_neither_over_http() {
    let test = TestLedger::new();
    write_container(&test.file("policies.avro"), &[hard_policy_of("requests", 10), hard_policy_of("tokens", 1_000)]);
    test.ingest(&test.file("policies.avro"));
    let server = Server::start(&test, &[]);
    let reserve = |key: &str, tokens: i64| {
        let body = json!({"tenant": "org-1", "amounts": {"requests": 1, "tokens": tokens}, "ttl_ms": 60_000,
                          "idempotency_key": key});
        server.post("/v1/reservations", Some(SECRET), &body)
    };
    let (status, _, first) = reserve("r-1", 850);
    assert_eq!(status, 200, "{first}");
    let ids: Vec<String> = first["decisions"]
        .as_array()
        .unwrap_or_else(|| panic!("no decisions: {first}"))
        .iter()
        .map(|d| d["reservation_id"].as_str().unwrap_or_else(|| panic!("no reservation: {d}")).to_string())
        .collect();
    assert_eq!(ids.len(), 2, "{first}");
    assert_ne!(ids[0], ids[1], "a reservation per metric: {first}");

    let (status, _, denied) = reserve("r-2", 200);
    assert_eq!((status, denied["metric"].as_str()), (429, Some("tokens")), "{denied}");
    assert!(denied["decisions"].as_array().unwrap().iter().all(|d| d.get("reservation_id").is_none()), "{denied}");
    let (status, _, again) = reserve("r-1", 850);
    assert_eq!((status, again["replayed"].as_bool()), (200, Some(true)), "{again}");
    assert_eq!(again["decisions"], first["decisions"]);

    let (status, _, committed) =
        server.post(&format!("/v1/reservations/{}/commit", ids[1]), Some(SECRET), &json!({"amount": 700}));
    assert_eq!(status, 200, "{committed}");
    let (status, _, released) = server.post(&format!("/v1/reservations/{}/release", ids[0]), Some(SECRET), &json!({}));
    assert_eq!(status, 200, "{released}");
    let closed = |metric: &str, action: &str| {
        sql_i64(
            &test,
            &format!(
                "SELECT COALESCE(SUM(r.amount), 0) FROM reservation_events r JOIN entries e ON e.seq = r.seq \
                 WHERE e.status = 'recorded' AND e.metric = '{metric}' AND r.action = '{action}'"
            ),
        )
    };
    let reserved = (closed("requests", "RESERVE"), closed("tokens", "RESERVE"));
    assert_eq!(reserved, (1, 850), "r-1 reserved once, r-2 nothing");
    assert_eq!((closed("requests", "COMMIT"), closed("tokens", "COMMIT")), (0, 700), "the tokens committed");
    assert_eq!(sql_i64(&test, "SELECT COUNT(*) FROM reservation_events WHERE action = 'RELEASE'"), 1);

    let both = json!({"tenant": "org-1", "metric": "tokens", "amount": 1, "amounts": {"tokens": 1}, "ttl_ms": 1_000,
                      "idempotency_key": "b"});
    let (status, _, refused) = server.post("/v1/reservations", Some(SECRET), &both);
    assert_eq!((status, refused["field"].as_str()), (400, Some("amounts")), "{refused}");
}

// Several metrics under contention: 64 HTTP clients each asking for 1 request and a random 1..500 tokens in one
// check, against HARD limits on both metrics. Neither limit is exceeded, every request is allowed or denied on both
// metrics together, and no request is charged on one metric without the other (read from the ledger file).
#[test]
fn sixty_four_clients_asking_two_metrics_are_charged_on_both_or_neither() {
    const REQUESTS: i64 = 290;
    const TOKENS: i64 = 75_000;
    let test = TestLedger::new();
    write_container(
        &test.file("policies.avro"),
        &[hard_policy_of("requests", REQUESTS), hard_policy_of("tokens", TOKENS)],
    );
    test.ingest(&test.file("policies.avro"));
    let server = Arc::new(Server::start(&test, &[]));
    let answers = sixty_four_clients(&server, 20, |server, key, random| {
        let tokens = (random % 500) as i64 + 1;
        let body = json!({"tenant": "org-1", "amounts": {"requests": 1, "tokens": tokens}, "idempotency_key": key});
        let (status, _, body) = server.post("/v1/check", Some(SECRET), &body);
        (status, tokens, body)
    });
    for (status, tokens, body) in &answers {
        assert!(*status == 200 || *status == 429, "{status} {body}");
        assert_eq!(body["amounts"], json!({"requests": 1, "tokens": tokens}), "{body}");
        let each = body["decisions"].as_array().unwrap_or_else(|| panic!("no decisions: {body}"));
        let codes: Vec<bool> = each.iter().map(|d| d["code"] == "OK").collect();
        assert_eq!(codes, [*status == 200; 2], "allowed on both or neither: {body}");
        if *status == 429 {
            assert_eq!(body["code"], "QUOTA_EXCEEDED", "{body}");
            let denied_by = format!("{}-month", body["metric"].as_str().unwrap());
            assert_eq!(body["policyId"].as_str(), Some(denied_by.as_str()), "the metric and its policy: {body}");
        }
    }
    assert!(answers.iter().any(|(s, ..)| *s == 429), "1,280 requests of about 250 tokens exceed both limits");

    let conn = read_only(&test.path);
    let charged = |metric: &str| -> i64 {
        conn.query_row(
            "SELECT COALESCE(SUM(u.quantity), 0) FROM usage_events u JOIN entries e ON e.seq = u.seq \
             WHERE e.status = 'recorded' AND e.metric = ?1",
            [metric],
            |r| r.get(0),
        )
        .unwrap()
    };
    let allowed: Vec<i64> = answers.iter().filter(|(s, ..)| *s == 200).map(|(_, t, _)| *t).collect();
    assert!(charged("requests") <= REQUESTS, "{} requests over {REQUESTS}", charged("requests"));
    assert!(charged("tokens") <= TOKENS, "{} tokens over {TOKENS}", charged("tokens"));
    assert_eq!((charged("requests"), charged("tokens")), (allowed.len() as i64, allowed.iter().sum()));
    // Per request id: the metrics charged, and the decisions recorded.
    let per_request = |sql: &str| -> Vec<(String, i64)> {
        let mut query = conn.prepare(sql).unwrap();
        query.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(Result::unwrap).collect()
    };
    let usage = per_request(
        "SELECT u.request_id, COUNT(DISTINCT e.metric) FROM usage_events u JOIN entries e ON e.seq = u.seq \
         WHERE e.status = 'recorded' GROUP BY u.request_id",
    );
    assert_eq!(usage.len(), allowed.len(), "a usage pair per allowed request");
    assert!(usage.iter().all(|(_, metrics)| *metrics == 2), "charged on one metric only: {usage:?}");
    let decisions = per_request(
        "SELECT d.request_id, COUNT(DISTINCT d.outcome) * 10 + COUNT(*) FROM decision_events d \
         JOIN entries e ON e.seq = d.seq WHERE e.status = 'recorded' GROUP BY d.request_id",
    );
    assert_eq!(decisions.len(), answers.len());
    assert!(decisions.iter().all(|(_, n)| *n == 12), "two decisions of one outcome per request: {decisions:?}");

    // Contract §9.1 and the body's form: a retry answers the original, other amounts 409, both forms at once 400.
    let (_, tokens, original) = &answers[0];
    let retry = json!({"tenant": "org-1", "amounts": {"requests": 1, "tokens": tokens}, "idempotency_key": "c0-0"});
    let (status, _, again) = server.post("/v1/check", Some(SECRET), &retry);
    assert_eq!((status, again["replayed"].as_bool()), (original_status(original), Some(true)), "{again}");
    assert_eq!(again["decisions"], original["decisions"]);
    let other = json!({"tenant": "org-1", "amounts": {"requests": 2, "tokens": tokens}, "idempotency_key": "c0-0"});
    let (status, _, reused) = server.post("/v1/check", Some(SECRET), &other);
    assert_eq!(
        (status, reused["code"].as_str(), reused["field"].as_str()),
        (409, Some("IDEMPOTENCY_KEY_REUSED"), Some("amounts"))
    );
    let both =
        json!({"tenant": "org-1", "metric": "tokens", "amount": 1, "amounts": {"tokens": 1}, "idempotency_key": "b"});
    let (status, _, refused) = server.post("/v1/check", Some(SECRET), &both);
    assert_eq!((status, refused["field"].as_str()), (400, Some("amounts")), "{refused}");
    assert!(refused["message"].as_str().unwrap().contains("`metric` and `amount`"), "{refused}");
    assert_eq!(
        answers.len() as i64 * 2,
        sql_i64(&test, "SELECT COUNT(*) FROM decision_events"),
        "nothing more decided"
    );

    // Support's answer names the metric and policy that denied, whichever metric's decision was recorded last.
    let (_, _, denied) = answers.iter().find(|(s, ..)| *s == 429).expect("a denial");
    let (metric, policy) = (denied["metric"].as_str().unwrap(), denied["policyId"].as_str().unwrap());
    let why = test.run(&["audit", "why", denied["requestId"].as_str().unwrap()]).success().stdout_text();
    assert!(why.contains(": QUOTA_EXCEEDED."), "{why}");
    let named =
        format!("because metric {metric} had no room under policy {policy} (QUOTA_EXCEEDED); nothing was consumed");
    assert!(why.contains(&named), "{why}");
    assert!(why.contains(" had room (decision dec-"), "the other metric had room: {why}");
    let json = test.run(&["audit", "why", denied["requestId"].as_str().unwrap(), "--json"]).success().json();
    assert_eq!(
        (json["decision"]["metric"].as_str(), json["metrics"].as_array().map(Vec::len)),
        (Some(metric), Some(2))
    );
}

/// The status a decision body was answered with.
fn original_status(body: &Value) -> u16 {
    if body["code"] == "OK" { 200 } else { 429 }
}

// An on-call engineer's view of a ledger that refuses writes (a full disk; here a trigger another connection adds):
// checks answer 500 with an error id whose cause is in serve's log (the caller sees no path or SQLite's words) and
// /healthz says recording fails, naming the cause; once the ledger takes writes again the next check is recorded,
// /healthz says ok and counts the failed groups, and the failed requests consumed nothing.
#[test]
fn a_ledger_that_refuses_writes_is_named_in_the_log_and_healthz_until_it_takes_them_again() {
    let test = ledger_with(hard_policy(100, Window::DAY));
    let server = Server::start_logged(&test, &[]);
    assert_eq!(server.health()["hook"]["recording"], "ok");
    let other = rusqlite::Connection::open(&test.path).unwrap();
    other
        .execute_batch(
            "CREATE TRIGGER full BEFORE INSERT ON entries BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END",
        )
        .unwrap();
    for key in ["f-1", "f-2"] {
        let (status, _, body) = server.check(key, 60);
        assert_eq!((status, body["error"].as_str()), (500, Some("ledger")), "{body}");
        let error_id = body["error_id"].as_str().expect("an error id");
        assert!(!body["message"].as_str().unwrap().contains("database or disk is full"), "{body}");
        let logged = Server::stderr(&test);
        let line = logged.lines().find(|l| l.contains(error_id)).unwrap_or_else(|| panic!("{error_id}: {logged}"));
        assert!(line.contains("database or disk is full"), "{line}");
    }
    let health = server.health();
    assert_eq!(
        (&health["status"], &health["hook"]["recording"], &health["hook"]["failed_groups"]),
        (&json!("ok"), &json!("failing"), &json!(2)),
        "{health}"
    );
    assert!(
        health["hook"]["last_failure"]["message"].as_str().unwrap().contains("database or disk is full"),
        "{health}"
    );
    other.execute_batch("DROP TRIGGER full").unwrap();
    let (status, _, body) = server.check("f-1", 60);
    assert_eq!((status, &body["remaining"]), (200, &json!(40)), "the failed 60s took nothing: {body}");
    let health = server.health();
    assert_eq!((&health["hook"]["recording"], &health["hook"]["failed_groups"]), (&json!("ok"), &json!(2)), "{health}");
}

// contract §6-7: a denial is 429 with Retry-After and RateLimit-* headers and the JSON body of contract §6; an allowed answer carries the same fields with code OK.
#[test]
fn denials_carry_the_headers_and_body_of_the_spec() {
    let test = ledger_with(hard_policy(10, Window::DAY));
    let server = Server::start(&test, &[]);
    let (status, headers, body) = server.check("a-1", 8);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (body["code"].as_str(), body["remaining"].as_i64(), body["limit"].as_i64()),
        (Some("OK"), Some(2), Some(10))
    );
    assert_eq!(headers["ratelimit-remaining"], "2");
    let (status, headers, body) = server.check("a-2", 5);
    assert_eq!(status, 429, "{body}");
    for field in ["code", "metric", "scope", "limit", "remaining", "resetsAt", "retryAfterSeconds", "policyVersion"] {
        assert!(body.get(field).is_some(), "{field} missing from {body}");
    }
    assert_eq!(
        (body["code"].as_str(), body["metric"].as_str(), body["scope"].as_str(), body["policyVersion"].as_i64()),
        (Some("QUOTA_EXCEEDED"), Some("tokens"), Some("TENANT"), Some(4))
    );
    assert_eq!((body["limit"].as_i64(), body["remaining"].as_i64()), (Some(10), Some(2)));
    let retry: i64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert_eq!(Some(retry), body["retryAfterSeconds"].as_i64());
    assert!((1..=86_400).contains(&retry), "until the day resets: {retry}");
    assert_eq!(headers["ratelimit-limit"], "10");
    assert_eq!(headers["ratelimit-remaining"], "2");
    let reset: i64 = headers["ratelimit-reset"].to_str().unwrap().parse().unwrap();
    assert!((retry - reset).abs() <= 1, "reset {reset}, retry {retry}");
}

// What a client acts on: a SHADOW policy that would deny sets no RateLimit headers (it limits nobody; the body
// still says SHADOW_DENIED), and a replayed denial counts its Retry-After and RateLimit-Reset from now.
#[test]
fn shadow_answers_set_no_headers_and_replays_count_from_now() {
    let test = TestLedger::new();
    let Event::Policy(hard) = hard_policy(10, Window::DAY) else { unreachable!() };
    let shadow = PolicyEvent {
        header: header("policy-shadow-v1", "2026-01-01T00:00:00Z", "org-1", "tokens"),
        policy_id: "shadow".into(),
        version: 1,
        limit: 1,
        window: Window::MINUTE,
        enforcement: Enforcement::SHADOW,
        ..hard.clone()
    };
    write_container(&test.file("policy.avro"), &[Event::Policy(hard), Event::Policy(shadow)]);
    test.ingest(&test.file("policy.avro"));
    let server = Server::start(&test, &[]);
    let (status, headers, body) = server.check("s-1", 2);
    assert_eq!((status, body["reason"].as_str()), (200, Some("SHADOW_DENIED")), "{body}");
    for name in ["ratelimit-limit", "ratelimit-remaining", "ratelimit-reset"] {
        assert!(headers.get(name).is_none(), "{name} of a shadow policy: {headers:?}");
    }
    let seconds =
        |headers: &ureq::http::HeaderMap, name: &str| -> i64 { headers[name].to_str().unwrap().parse().unwrap() };
    // Support's answer: over the SHADOW policy's limit and allowed, as SHADOW allows (not, as if it were HARD, a
    // request that should have been denied).
    let words = test.run(&["audit", "why", "s-1"]).success().stdout_text();
    assert!(words.contains("0 used + 2 asked = 2, over the limit of 1."), "{words}");
    assert!(!words.contains("should have been denied"), "{words}");
    let (status, first, _) = server.check("a-2", 9);
    assert_eq!(status, 429);
    // Replayed until both waits have shrunk by two seconds: a replay that repeated the decision's waits never would.
    let names = ["retry-after", "ratelimit-reset"];
    eventually(30, "a replay's waits counted from now", || {
        let (status, replayed, body) = server.check("a-2", 9);
        assert_eq!((status, body["replayed"].as_bool()), (429, Some(true)), "{body}");
        let waits = names.map(|name| (name, seconds(&first, name), seconds(&replayed, name)));
        for (name, then, now) in waits {
            assert!(now <= then, "{name}: {then} s when decided, {now} s later");
        }
        waits.iter().all(|(_, then, now)| *now <= then - 2).then_some(())
    });
}

// Support's answer for a throttle: the bucket the serving process held when it denied (capacity, tokens left), which
// no grant raises, not an allowance per window. Read as a quota, the throttle would be "at most 1 per HOUR window",
// with an effective limit of 1 + the grant and a counter that does not explain the denial.
#[test]
fn why_explains_a_rate_limited_request_by_its_bucket() {
    let Event::Policy(hard) = hard_policy(1_000, Window::DAY) else { unreachable!() };
    let throttle = PolicyEvent {
        header: header("policy-throttle-v1", "2026-01-01T00:00:00Z", "org-1", "tokens"),
        policy_id: "throttle".into(),
        version: 1,
        limit: 1,
        window: Window::HOUR,
        burst: Some(5),
        ..hard
    };
    let grant = GrantEvent {
        header: header("grant-1", "2026-01-01T00:00:00Z", "org-1", "tokens"),
        grant_id: "grant-1".into(),
        amount: 100,
        valid_from: at("2026-01-01T00:00:00Z"),
        valid_until: at("2100-01-01T00:00:00Z"),
        reason: "support credit".into(),
        actor: None,
    };
    let test = TestLedger::new();
    write_container(&test.file("policy.avro"), &[Event::Policy(throttle)]);
    write_container(&test.file("grant.avro"), &[Event::Grant(grant)]);
    test.ingest(&test.file("policy.avro"));
    test.ingest(&test.file("grant.avro"));
    let server = Server::start(&test, &[]);
    assert_eq!(server.check("t-1", 4).0, 200);
    let (status, _, body) = server.check("t-2", 3);
    assert_eq!((status, body["code"].as_str()), (429, Some("RATE_LIMITED")), "{body}");
    let words = test.run(&["audit", "why", "t-2"]).success().stdout_text();
    for expected in [
        "a throttle, a token bucket of 5 tokens refilled continuously at 1 per HOUR window, HARD enforcement",
        "Grants: they raise quotas, not a throttle's bucket.",
        "Effective limit: 5 (the bucket's capacity).",
        "Bucket at decision time, in the serving process: 1 of 5 tokens left (4 taken and not yet refilled).",
        "3 asked, 1 left: too few tokens.",
        "Retry after: 7199",
        "The bucket holds enough tokens for this amount again at",
        "For context only: a throttle decides by its bucket",
    ] {
        assert!(words.contains(expected), "{expected:?} missing from:\n{words}");
    }
    assert!(!words.contains("does not explain") && !words.contains("window resets"), "{words}");
    let why = test.run(&["audit", "why", "t-2", "--json"]).success().json();
    assert_eq!((why["policy"]["burst"].as_i64(), why["effective_limit"].as_i64()), (Some(5), Some(5)), "{why}");
    assert_eq!(why["grants"], json!([]), "{why}");
    // The last token, taken: allowed, and explained by the bucket before it (the recorded `remaining` of an allowed
    // decision is after it; read as the bucket before, it would say the request should have been denied).
    assert_eq!(server.check("t-3", 1).0, 200);
    let words = test.run(&["audit", "why", "t-3"]).success().stdout_text();
    for expected in ["1 of 5 tokens left (4 taken and not yet refilled)", "1 asked, 1 left: enough tokens."] {
        assert!(words.contains(expected), "{expected:?} missing from:\n{words}");
    }
    assert!(!words.contains("should have been denied"), "{words}");
    drop(server);
}

// contract §7: 401 without a valid token, 403 for a tenant the token does not cover, 400 naming the bad field, 413 for a huge body; nothing consumed or recorded by any of them.
#[test]
fn bad_callers_and_bad_bodies_consume_nothing() {
    let test = ledger_with(hard_policy(10, Window::DAY));
    let server = Server::start(&test, &[]);
    let ask = json!({"tenant": "org-1", "metric": "tokens", "amount": 1, "idempotency_key": "k"});
    assert_eq!(server.post("/v1/check", None, &ask).0, 401);
    assert_eq!(server.post("/v1/check", Some("not-a-token-at-all-123"), &ask).0, 401);
    let other = json!({"tenant": "org-2", "metric": "tokens", "amount": 1, "idempotency_key": "k"});
    let (status, _, body) = server.post("/v1/check", Some(SECRET), &other);
    assert_eq!(status, 403, "{body}");
    assert!(body["message"].as_str().unwrap().contains("org-2"), "{body}");
    let (status, _, body) = server.post(
        "/v1/check",
        Some(SECRET),
        &json!({"tenant": "org-1", "metric": "tokens", "amount": "lots", "idempotency_key": "k"}),
    );
    assert_eq!(status, 400);
    assert!(body["message"].as_str().unwrap().contains("amount"), "{body}");
    let (status, _, body) = server.post(
        "/v1/check",
        Some(SECRET),
        &json!({"tenant": "org-1", "metric": "tokens", "amount": -3, "idempotency_key": "k"}),
    );
    assert_eq!(status, 400);
    assert!(body["message"].as_str().unwrap().contains("amount: -3 is negative"), "{body}");
    let (status, _, _) = server.post("/v1/check", Some(SECRET), &json!({"tenant": "org-1", "metric": "tokens", "amount": 1, "idempotency_key": "k", "junk": "x".repeat(20_000)}));
    assert_eq!(status, 413);
    assert_eq!(sql_i64(&test, "SELECT COUNT(*) FROM decision_events"), 0, "no decision recorded");
    let (status, _, body) = server.post("/v1/check", Some(ADMIN), &other);
    assert_eq!(status, 200, "the * token covers org-2: {body}");
}

/// `serve` on `test`'s ledger with a `*` token, expected to refuse to start: its exit code and stderr.
fn serve_refused(test: &TestLedger, what: &str) -> (Option<i32>, String) {
    let tokens = test.file("tokens-refused.toml");
    serve::tokens::write_private(&tokens, &format!("[[token]]\nsecret = \"{SECRET}\"\ntenants = [\"*\"]\n")).unwrap();
    let mut serve = Command::new(BIN)
        .args(["--ledger", test.path.to_str().unwrap(), "serve", "--listen", "127.0.0.1:0", "--tokens"])
        .arg(&tokens)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("serve starts");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = serve.try_wait().expect("serve's status") {
            break status;
        }
        if started.elapsed() > Duration::from_secs(30) {
            serve.kill().unwrap();
            panic!("serve started {what}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    serve.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    (status.code(), stderr)
}

// A mistyped --ledger: serve refuses to start, names the path, and creates nothing. Were it to create an empty
// ledger there, it would find no policy and allow everything (fail-open).
#[test]
fn serve_refuses_a_ledger_that_is_not_there() {
    let test = TestLedger::new();
    let (code, stderr) = serve_refused(&test, "on a ledger that is not there");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains(&format!("no ledger at {}", test.path.display())), "{stderr}");
    assert!(!test.path.exists(), "no ledger created");
}

// Contract §6, one hook per ledger: a hook decides against its own state of the ledger and appends afterwards, so a
// second `serve` on the same file would allow what the first had already consumed (two of them together could allow
// up to twice a HARD limit). The second is refused, naming the first; the first goes on deciding, and once it is
// gone (killed: the lock goes with the process) a new one starts and knows what the first consumed.
#[test]
fn a_second_serve_on_the_same_ledger_is_refused() {
    let test = ledger_with(hard_policy(100, Window::MONTH));
    let first = Server::start(&test, &[]);
    assert_eq!(first.check("before", 60).0, 200);

    let (code, stderr) = serve_refused(&test, "beside another serve on the same ledger");
    assert_eq!(code, Some(2), "{stderr}");
    let holder = format!("another hook (pid {})", first.child.id());
    assert!(stderr.contains(&holder) && stderr.contains("one hook process per ledger file"), "{stderr}");

    assert_eq!(first.check("after", 40).0, 200, "the first still decides: 60 + 40 fit 100");
    drop(first);
    let next = Server::start(&test, &[]);
    let (status, _, body) = next.check("next", 1);
    assert_eq!((status, &body["remaining"]), (429, &json!(0)), "100 of 100 consumed by the first: {body}");
}

// For the on-call engineer, who symlinks data files: a ledger reached through a symbolic link is served at the
// default durability (full), and it is the same ledger for the hook's lock. SQLite puts the write-ahead log beside
// the real file, never beside the link, so `serve` looking for it beside the link would refuse to start; and a
// second `serve` on the real path must meet the first's lock, not take one of its own, or the two together could
// allow 30,021 of a HARD limit of 30,000.
#[test]
fn a_ledger_reached_through_a_link_is_served_and_locked_as_itself() {
    let test = ledger_with(hard_policy(100, Window::MONTH));
    let links = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(&test.path, links.path().join("ledger.db")).unwrap();
    let linked = TestLedger { path: links.path().join("ledger.db"), dir: links };
    let server = Server::start(&linked, &[]);
    assert_eq!(server.check("through-the-link", 60).0, 200);
    let (code, stderr) = serve_refused(&test, "on the real file beside a serve through a link");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains(&format!("another hook (pid {})", server.child.id())), "{stderr}");
}

// contract §6: the same idempotency key sent concurrently by eight clients: one consumption, identical answers.
#[test]
fn retries_of_one_key_over_http_consume_once() {
    let test = ledger_with(hard_policy(100, Window::DAY));
    let server = Arc::new(Server::start(&test, &[]));
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let server = Arc::clone(&server);
            std::thread::spawn(move || server.check("retried", 9))
        })
        .collect();
    let answers: Vec<Value> = clients.into_iter().map(|c| c.join().unwrap().2).collect();
    let strip = |v: &Value| {
        let mut v = v.clone();
        v.as_object_mut().unwrap().remove("replayed");
        v
    };
    assert!(answers.iter().all(|a| strip(a) == strip(&answers[0])), "{answers:?}");
    assert_eq!(answers.iter().filter(|a| a["replayed"] == false).count(), 1);
    assert_eq!(sql_i64(&test, "SELECT COALESCE(SUM(quantity), 0) FROM usage_events"), 9);
}

// A service asks how much quota is left without consuming any. Over HTTP and from `quota show`,
// per policy that applies (the tenant's own and the plan default it has none of its own for): the window, limit,
// grant, effective limit, consumption, what an open reservation holds, and what remains, as the checks count it;
// the ledger holds no more entries after the reads, and checks afterwards decide exactly as the numbers said.
#[test]
fn remaining_quota_is_read_without_consuming() {
    let test = TestLedger::new();
    let now = Timestamp::now();
    let hour = 3_600 * 1_000_000;
    let plan = Event::Policy(PolicyEvent::new(
        header("policy-plan-v1", "2026-01-01T00:00:00Z", "*", "requests"),
        "plan-requests",
        50,
        Window::MONTH,
        Enforcement::SOFT,
        at("2026-01-01T00:00:00Z"),
    ));
    let grant = Event::Grant(GrantEvent {
        header: header("grant-1", "2026-01-01T00:00:00Z", "org-1", "tokens"),
        grant_id: "grant-1".into(),
        amount: 20,
        valid_from: Timestamp(now.micros() - hour),
        valid_until: Timestamp(now.micros() + hour),
        reason: "support ticket 7".into(),
        actor: None,
    });
    write_container(&test.file("policies.avro"), &[hard_policy(100, Window::MONTH), plan]);
    test.ingest(&test.file("policies.avro"));
    write_container(&test.file("grant.avro"), &[grant]);
    test.ingest(&test.file("grant.avro"));
    let server = Server::start(&test, &[]);
    assert_eq!(server.check("c-1", 30).0, 200);
    let body =
        json!({"tenant": "org-1", "metric": "tokens", "amount": 15, "ttl_ms": 3_600_000, "idempotency_key": "r-1"});
    assert_eq!(server.post("/v1/reservations", Some(SECRET), &body).0, 200);
    let entries = || sql_i64(&test, "SELECT COUNT(*) FROM entries");
    let before = entries();

    let (status, answer) = server.get("/v1/quotas?tenant=org-1", Some(SECRET));
    assert_eq!(status, 200, "{answer}");
    let quotas = answer["quotas"].as_array().expect("a list of quotas");
    let rows: Vec<_> = quotas
        .iter()
        .map(|q| {
            (
                q["metric"].as_str().unwrap().to_string(),
                q["policy_id"].as_str().unwrap().to_string(),
                q["plan_default"].as_bool().unwrap(),
                [&q["limit"], &q["grants"], &q["effective_limit"], &q["consumed"], &q["held"], &q["remaining"]]
                    .map(|n| n.as_i64().unwrap()),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("requests".to_string(), "plan-requests".to_string(), true, [50, 0, 50, 0, 0, 50]),
            ("tokens".to_string(), "quota".to_string(), false, [100, 20, 120, 30, 15, 75]),
        ],
        "{answer}"
    );
    let month = |t: Timestamp| t.to_string()[..7].to_string();
    assert_eq!(quotas[1]["window_start"].as_str().map(|s| s[..7].to_string()), Some(month(now)), "{answer}");
    let (status, only) = server.get("/v1/quotas?tenant=org-1&metric=tokens", Some(SECRET));
    assert_eq!((status, only["quotas"].as_array().map(Vec::len)), (200, Some(1)), "{only}");
    assert_eq!(only["quotas"][0], quotas[1]);

    // The same from the ledger file, by the same code the hook counts with.
    let shown = test.run(&["quota", "show", "org-1", "--metric", "tokens", "--json"]).success().json();
    let numbers =
        |q: &Value| ["limit", "grants", "effective_limit", "consumed", "held", "remaining"].map(|k| q[k].clone());
    assert_eq!(numbers(&shown["quotas"][0]), numbers(&quotas[1]), "{shown}");
    let table = test.run(&["quota", "show", "org-1"]).success().stdout_text();
    let words = |line: &str| line.split_whitespace().map(String::from).collect::<Vec<_>>();
    let tokens = table.lines().map(words).find(|w| w[0] == "tokens").unwrap_or_else(|| panic!("{table}"));
    assert_eq!(tokens[7..], ["100", "20", "120", "30", "15", "75", "UTC", "MONTH"], "{table}");

    // Who may ask, and what: as for checks.
    assert_eq!(server.get("/v1/quotas?tenant=org-1", None).0, 401);
    assert_eq!(server.get("/v1/quotas?tenant=org-2", Some(SECRET)).0, 403);
    let (status, refused) = server.get("/v1/quotas?tenant=*", Some(ADMIN));
    assert_eq!((status, refused["field"].as_str()), (400, Some("tenant")), "{refused}");
    assert_eq!(server.get("/v1/quotas?metric=tokens", Some(SECRET)).0, 400, "no tenant");
    assert_eq!(entries(), before, "reading quota recorded nothing");

    // Checks decide as the numbers said: 75 remain, 76 do not fit.
    assert_eq!(server.check("c-2", 76).0, 429);
    assert_eq!(server.check("c-3", 75).0, 200);
    let (_, after) = server.get("/v1/quotas?tenant=org-1&metric=tokens", Some(SECRET));
    assert_eq!(
        (after["quotas"][0]["consumed"].as_i64(), after["quotas"][0]["remaining"].as_i64()),
        (Some(105), Some(0))
    );
}

// A ROLLING quota's remaining is read over the window ending now, not a calendar one. Of a 24-hour
// window, usage 25 hours ago has aged out and usage 2 hours ago has not: GET /v1/quotas counts only the latter, names
// the length and spans exactly the 24 hours up to now; a check past what remains is denied until that usage ages
// out, which resetsAt says; `quota show` reads the same window from the ledger.
#[test]
fn a_rolling_quota_counts_the_window_ending_now() {
    const HOUR_MICROS: i64 = 3_600_000_000;
    let now = Timestamp::now();
    let hours_ago = |hours: i64| Timestamp(now.micros() - hours * HOUR_MICROS);
    let Event::Policy(policy) = hard_policy(100, Window::ROLLING) else { unreachable!("a policy") };
    let test = ledger_with(Event::Policy(PolicyEvent { window_seconds: Some(86_400), ..policy }));
    let used = |event_id: &str, occurred_at: Timestamp, quantity: i64| {
        Event::Usage(UsageEvent {
            header: header(event_id, &occurred_at.to_string(), "org-1", "tokens"),
            quantity,
            request_id: None,
            attributes: Default::default(),
        })
    };
    write_container(&test.file("usage.avro"), &[used("u-aged", hours_ago(25), 70), used("u-in", hours_ago(2), 30)]);
    test.ingest(&test.file("usage.avro"));
    let server = Server::start(&test, &[]);

    let (status, answer) = server.get("/v1/quotas?tenant=org-1", Some(SECRET));
    assert_eq!(status, 200, "{answer}");
    let quota = &answer["quotas"][0];
    assert_eq!((quota["window"].as_str(), quota["window_seconds"].as_i64()), (Some("ROLLING"), Some(86_400)));
    let numbers = ["limit", "consumed", "held", "remaining"].map(|k| quota[k].as_i64());
    assert_eq!(numbers, [Some(100), Some(30), Some(0), Some(70)], "u-aged is out of the window: {answer}");
    let instant = |value: &Value| Timestamp::parse_rfc3339(value.as_str().unwrap()).unwrap().micros();
    let (start, end) = (instant(&quota["window_start"]), instant(&quota["window_end"]));
    assert_eq!((end - start, end), (24 * HOUR_MICROS, instant(&answer["at"]) + 1), "the 24 hours up to now: {answer}");

    let (status, _, denied) = server.check("c-1", 71);
    assert_eq!((status, denied["code"].as_str()), (429, Some("QUOTA_EXCEEDED")), "{denied}");
    // Room for 71 once u-in ages out, 24 hours after it happened (the wait is in whole milliseconds, rounded up).
    let ages_out = hours_ago(2).micros() + 24 * HOUR_MICROS;
    let resets_at = instant(&denied["resetsAt"]);
    assert!((ages_out..ages_out + 1_000).contains(&resets_at), "{ages_out} vs {denied}");
    assert_eq!(server.check("c-2", 70).0, 200);
    drop(server);

    let shown = test.run(&["quota", "show", "org-1", "--json"]).success().json();
    let quota = &shown["quotas"][0];
    let numbers = ["window_seconds", "consumed", "remaining"].map(|k| quota[k].as_i64());
    assert_eq!(numbers, [Some(86_400), Some(100), Some(0)], "{shown}");
    let table = test.run(&["quota", "show", "org-1"]).success().stdout_text();
    assert!(table.lines().any(|line| line.trim_end().ends_with("ROLLING 86400s")), "{table}");
}

// contract §5-7 over HTTP: reserve, commit more than reserved, double commit 409, release, commit after expiry 410.
#[test]
fn reservations_over_http() {
    let test = ledger_with(hard_policy(100, Window::DAY));
    let server = Server::start(&test, &[]);
    let reserve = |key: &str, ttl_ms: i64| {
        let body =
            json!({"tenant": "org-1", "metric": "tokens", "amount": 40, "ttl_ms": ttl_ms, "idempotency_key": key});
        let (status, _, body) = server.post("/v1/reservations", Some(SECRET), &body);
        assert_eq!(status, 200, "{body}");
        // contract §7: `-> {reservation_id, ...}`; `reservationId` stays for the clients written to it.
        assert_eq!(body["reservation_id"], body["reservationId"], "{body}");
        body["reservation_id"].as_str().expect("a reservation id").to_string()
    };
    let id = reserve("r-1", 60_000);
    assert_eq!(server.check("c-1", 70).0, 429, "40 held of 100");
    let (status, _, body) = server.post(&format!("/v1/reservations/{id}/commit"), Some(SECRET), &json!({"amount": 55}));
    assert_eq!((status, body["charged_above_reserved"].as_i64()), (200, Some(15)), "{body}");
    let (status, _, body) = server.post(&format!("/v1/reservations/{id}/commit"), Some(SECRET), &json!({"amount": 1}));
    assert_eq!((status, body["refused"].as_str()), (409, Some("already_closed")), "{body}");
    let other = reserve("r-2", 60_000);
    let (status, _, _) = server.post(&format!("/v1/reservations/{other}/release"), Some(ADMIN), &json!({}));
    assert_eq!(status, 200);
    let short = reserve("r-3", 50);
    // Expired once the server no longer counts it as held (nothing else is open).
    eventually(30, "the 50 ms reservation expired", || {
        let (status, quotas) = server.get("/v1/quotas?tenant=org-1&metric=tokens", Some(SECRET));
        assert_eq!(status, 200, "{quotas}");
        let held = quotas["quotas"][0]["held"].as_i64().unwrap_or_else(|| panic!("held: {quotas}"));
        (held == 0).then_some(())
    });
    let (status, _, body) =
        server.post(&format!("/v1/reservations/{short}/commit"), Some(SECRET), &json!({"amount": 1}));
    assert_eq!((status, body["refused"].as_str()), (410, Some("expired")), "{body}");
    assert_eq!(server.check("c-2", 45).0, 200, "55 consumed, nothing held");
}

// Another tenant's producer may choose the same reservation id (README "Reconciliation"): org-1's own reservation,
// committed by another enforcer or expired, answers org-1's close (409, 410) while org-2's of the same id is open.
// An open reservation of another tenant must not answer 403, as if the id were not org-1's to close.
#[test]
fn a_close_answers_for_the_callers_reservation_when_another_tenant_holds_the_id() {
    use ReservationAction::*;
    let test = ledger_with(hard_policy(1_000, Window::DAY));
    let now = Timestamp::now().micros();
    let ago = |seconds: i64| Timestamp(now - seconds * 1_000_000);
    let event = |event_id: &str, tenant: &str, id: &str, action: ReservationAction, at: Timestamp, expires: i64| {
        Event::Reservation(ReservationEvent {
            header: Header { source: "other-enforcer".into(), ..header(event_id, &at.to_string(), tenant, "tokens") },
            reservation_id: id.into(),
            action,
            amount: 10,
            expires_at: (action == RESERVE).then(|| ago(-expires)),
            fencing_token: None,
        })
    };
    let events = [
        event("a-reserve", "org-1", "shared", RESERVE, ago(30), 3_600),
        event("a-commit", "org-1", "shared", COMMIT, ago(20), 0),
        event("b-reserve", "org-2", "shared", RESERVE, ago(25), 3_600),
        event("a-short", "org-1", "lapsed", RESERVE, ago(30), -10),
        event("b-lapsed", "org-2", "lapsed", RESERVE, ago(25), 3_600),
        event("b-only", "org-2", "theirs", RESERVE, ago(25), 3_600),
    ];
    write_container(&test.file("reservations.avro"), &events);
    test.ingest(&test.file("reservations.avro"));
    let server = Server::start(&test, &[]);
    let close = |id: &str, action: &str| {
        let (status, _, body) =
            server.post(&format!("/v1/reservations/{id}/{action}"), Some(SECRET), &json!({"amount": 5}));
        (status, body["refused"].as_str().map(String::from))
    };
    assert_eq!(close("shared", "commit"), (409, Some("already_closed".into())));
    assert_eq!(close("shared", "release"), (409, Some("already_closed".into())));
    assert_eq!(close("lapsed", "commit"), (410, Some("expired".into())));
    assert_eq!(close("theirs", "commit").0, 403, "org-2's only");
    assert_eq!(close("unknown", "commit").0, 404);
    let before = sql_i64(&test, "SELECT COUNT(*) FROM reservation_events");
    assert_eq!(before, 6, "no close recorded");
}

// contract §6 outbox: with the real broker (Tansu, sqlite engine) stopped the hook keeps deciding; once it is back every recorded decision reaches quota.decisions exactly once.
#[test]
fn decisions_reach_kafka_exactly_once_across_a_broker_outage() {
    let test = ledger_with(hard_policy(1_000_000, Window::MONTH));
    let data = tempfile::tempdir().unwrap();
    let Some(broker) = Broker::tansu_sqlite(&data.path().join("tansu.db"), None) else { return };
    let port = broker.port();
    let server = Server::start(&test, &["--brokers", &broker.bootstrap]);
    for i in 0..20 {
        assert_eq!(server.check(&format!("before-{i}"), 1).0, 200);
    }
    // Published before the outage, so that the outage meets a producer the broker knows.
    wait_published(&test, 40, 30, "the outbox published before the outage");
    drop(broker);
    for i in 0..30 {
        assert_eq!(server.check(&format!("during-{i}"), 1).0, 200, "the hook decides while the broker is down");
    }
    // The broker stays away until an attempt of the publisher (5 s) has failed: its messages timed out, and the
    // producer that sent them was replaced (a kept one published nothing more to Tansu, which refuses the epoch
    // librdkafka then gives itself). The server stays healthy (it decides), and says, once that attempt has failed
    // (a pass names its error only after replacing the producer), how much waits and why.
    let health = eventually(60, "healthz named an error", || {
        let health = server.health();
        assert_eq!(health["status"], "ok", "{health}");
        health["outbox"]["last_error"].is_string().then_some(health)
    });
    assert_eq!(health["outbox"]["pending"], 60, "30 decisions and their usage wait: {health}");
    let broker = Broker::tansu_sqlite(&data.path().join("tansu.db"), Some(port)).expect("Tansu restarts");
    let expected: Vec<String> = {
        let conn = read_only(&test.path);
        let mut statement = conn.prepare("SELECT event_id FROM entries WHERE event_type = 'DecisionEvent'").unwrap();
        statement.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
    };
    assert_eq!(expected.len(), 50);
    wait_published(&test, 100, 60, "the outbox drained after the broker came back");
    let mut on_topic = event_ids_on_topic(&broker.bootstrap, "quota.decisions", expected.len());
    on_topic.sort();
    let mut expected = expected;
    expected.sort();
    assert_eq!(on_topic, expected, "every decision exactly once");
    let health = eventually(10, "healthz counted no entry pending", || {
        let health = server.health();
        (health["outbox"]["pending"] == 0).then_some(health)
    });
    assert_eq!(health["outbox"]["last_error"], Value::Null, "{health}");
}

// contract §6 outbox: one idempotent producer publishes every pass. A producer per pass asked the broker for a
// producer id each second it had something to send, and a broker keeps every one (Tansu in its `producer` table).
#[test]
fn one_producer_publishes_pass_after_pass() {
    let test = ledger_with(hard_policy(1_000_000, Window::MONTH));
    let data = tempfile::tempdir().unwrap();
    let Some(broker) = Broker::tansu_sqlite(&data.path().join("tansu.db"), None) else { return };
    let server = Server::start(&test, &["--brokers", &broker.bootstrap]);
    // The broker's producer ids: the outbox's, and the one `POST /v1/events` sends usage with.
    let producers = || {
        let path = data.path().join("tansu.db");
        let tansu = rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        tansu.query_row("SELECT COUNT(*) FROM producer", [], |r| r.get::<_, i64>(0)).unwrap()
    };
    for i in 0..8 {
        assert_eq!(server.check(&format!("k-{i}"), 1).0, 200);
        wait_published(&test, 2 * (i + 1), 30, &format!("the outbox published check {i}"));
    }
    // A producer per pass would have asked for eight.
    assert!(producers() <= 2, "eight passes published through one producer id: {} ids", producers());
}

// contract §6 outbox, for the on-call engineer: on a broker that does not create topics, an outbox topic that is
// missing is named (librdkafka itself only says that the messages timed out), and the rest is published, even
// behind more than a publisher's chunk of entries that wait for the missing topic (entries of an earlier run);
// once the topic is created, they follow.
#[test]
fn a_missing_topic_is_named_and_the_others_are_published() {
    let test = ledger_with(hard_policy(1_000_000, Window::MONTH));
    let waiting = outbox::OUTBOX_CHUNK_ENTRIES + 1_000;
    let mut ledger = ledger::Ledger::open(&test.path).unwrap();
    let events = (0..waiting)
        .map(|i| ledger::Incoming {
            event: usage(&format!("u-{i}"), "2026-01-02T00:00:00Z", "org-1", 1),
            origin: ledger::Origin::Local { name: "earlier".into() },
            raw: None,
        })
        .collect();
    ledger.append(&ledger::Batch { events, outbox: true, ..ledger::Batch::default() }).unwrap();
    drop(ledger);
    let Some(broker) = Broker::tansu_with_only(&["quota.decisions"]) else { return };
    let server = Server::start_logged(&test, &["--brokers", &broker.bootstrap]);
    assert_eq!(server.check("k-1", 3).0, 200);
    wait_published(&test, 1, 60, "the decision was published");
    assert_eq!(sql_i64(&test, "SELECT COUNT(*) FROM outbox_published WHERE topic = 'quota.decisions'"), 1);
    let health = eventually(30, "healthz named an error", || {
        let health = server.health();
        health["outbox"]["last_error"].is_string().then_some(health)
    });
    assert_eq!(health["outbox"]["pending"], waiting + 1, "the usage events wait: {health}");
    let error = health["outbox"]["last_error"].as_str().unwrap();
    assert!(error.starts_with("quota.usage does not exist on "), "{error}");
    assert!(error.contains("quota-ledger topics create"), "{error}");

    // Later passes start past the entries that wait, and publish what comes after them.
    assert_eq!(server.check("k-2", 3).0, 200);
    wait_published(&test, 2, 30, "the second decision was published");

    // Once the topic exists, the entries that waited are published at the next pass.
    test.run(&["topics", "create", "--brokers", &broker.bootstrap]).success();
    wait_published(&test, waiting as i64 + 4, 60, "the waiting usage events were published");
    eventually(10, "healthz cleared the error", || server.health()["outbox"]["last_error"].is_null().then_some(()));

    // stderr said why once, not at each of the passes (one a second) while the topic was missing, and said when
    // the entries went out again.
    let stderr = eventually(10, "stderr said publishing again", || {
        let stderr = Server::stderr(&test);
        stderr.contains("serve: outbox: publishing again").then_some(stderr)
    });
    let said: Vec<&str> = stderr.lines().filter(|l| l.contains("entries wait for the broker")).collect();
    assert!(!said.is_empty() && said.len() <= 2, "the reason said once (twice if it changed): {stderr}");
    assert!(said.iter().any(|l| l.contains("quota.usage does not exist on")), "{stderr}");
}

// The outbox's lines are log records of the outbox crate: by default they reach serve's stderr as
// `serve: outbox: ...` lines, and the wait's reason is said once, not at every pass.
#[test]
fn with_no_broker_stderr_says_once_why_the_outbox_waits() {
    let test = ledger_with(hard_policy(1_000_000, Window::MONTH));
    let nobody = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let server = Server::start_logged(&test, &["--brokers", &nobody]);
    assert_eq!(server.check("k-1", 3).0, 200);
    let stderr = eventually(30, "stderr said why the outbox waits", || {
        let stderr = Server::stderr(&test);
        said(&stderr, "serve: outbox: entries wait for the broker", "pending=2").then_some(stderr)
    });
    // Two more passes (each one names its time in /healthz), failing as the first did, have had their say.
    let mut passes = vec![server.health()["outbox"]["as_of"].clone()];
    eventually(120, "two more passes of the outbox", || {
        let as_of = server.health()["outbox"]["as_of"].clone();
        if !passes.contains(&as_of) {
            passes.push(as_of);
        }
        (passes.len() > 2).then_some(())
    });
    let said = Server::stderr(&test).lines().filter(|l| l.contains("entries wait for the broker")).count();
    assert!((1..=2).contains(&said), "the reason said once (twice if it changed), not at every pass: {stderr}");
    assert_eq!(server.health()["outbox"]["pending"], 2, "the decision and its usage wait");
    assert!(server.health()["outbox"]["oldest_pending_at"].is_string(), "{}", server.health());
    // What an operator's alert reads: two events waiting, the oldest for a second or more once it is.
    let scrape = || ureq::get(format!("{}/metrics", server.base)).call().unwrap().body_mut().read_to_string().unwrap();
    let value = |scraped: &str, name: &str| -> f64 {
        let line = scraped.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_else(|| panic!("{scraped}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    eventually(30, "the oldest pending entry's age reached a second", || {
        let scraped = scrape();
        assert_eq!(value(&scraped, "quota_ledger_outbox_pending_events"), 2.0, "{scraped}");
        (value(&scraped, "quota_ledger_outbox_oldest_pending_age_seconds") >= 1.0).then_some(())
    });
}

// contract §6: what the hook publishes comes back through ingest as exact duplicates of what the ledger holds: nothing counted twice.
#[test]
fn ingest_sees_the_hooks_own_events_as_duplicates() {
    let test = ledger_with(hard_policy(1_000, Window::MONTH));
    let broker = Broker::mock();
    let server = Server::start(&test, &["--brokers", &broker.bootstrap]);
    for i in 0..10 {
        assert_eq!(server.check(&format!("k-{i}"), 3).0, 200);
    }
    wait_published(&test, 20, 30, "the outbox drained");
    drop(server);
    let before = test.status();
    let report = test.run(&["ingest", "--brokers", &broker.bootstrap, "--until-caught-up", "--json"]).success().json();
    let after = test.status();
    assert_eq!(after["events_recorded"], before["events_recorded"], "nothing new recorded: {report}");
    assert_eq!(count(&after, "duplicates") - count(&before, "duplicates"), 20, "10 decisions and 10 usage events");
    assert_eq!(sql_i64(&test, "SELECT COALESCE(SUM(quantity), 0) FROM usage_events"), 30, "counted once");
}

// contract §4.3 and 6, exactly once across a crash: `serve` killed (SIGKILL) under load by eight clients loses no
// decision it answered, and after a restart every retried key answers its original decision without consuming
// again.
#[test]
fn a_killed_server_keeps_every_answered_decision_and_retries_consume_nothing_twice() {
    const CLIENTS: usize = 8;
    let test = ledger_with(hard_policy(1_000_000, Window::MONTH));
    /// Answers the clients get before the kill: load, not a figure.
    const ANSWERED_BEFORE_KILL: usize = 200;
    let server = Arc::new(Server::start(&test, &[]));
    let answered_so_far = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (server, answered_so_far) = (Arc::clone(&server), Arc::clone(&answered_so_far));
            // Until the kill: each key sent, and the decision of those answered.
            std::thread::spawn(move || {
                let mut sent = Vec::new();
                for i in 0.. {
                    let key = format!("c{c}-{i}");
                    sent.push((key.clone(), None));
                    let body = json!({"tenant": "org-1", "metric": "tokens", "amount": 1, "idempotency_key": key});
                    let request = server.agent.post(format!("{}/v1/check", server.base));
                    let Ok(mut response) = request.header("Authorization", format!("Bearer {SECRET}")).send_json(&body)
                    else {
                        return sent;
                    };
                    let Ok(text) = response.body_mut().read_to_string() else { return sent };
                    let answer: Value = serde_json::from_str(&text).unwrap();
                    assert_eq!(response.status().as_u16(), 200, "{answer}");
                    sent.last_mut().unwrap().1 = Some(answer["decisionId"].as_str().unwrap().to_string());
                    answered_so_far.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                unreachable!()
            })
        })
        .collect();
    // The kill lands under load: once the clients have been answered that many times, while they go on sending.
    eventually(120, "the clients' answers before the kill", || {
        (answered_so_far.load(std::sync::atomic::Ordering::SeqCst) >= ANSWERED_BEFORE_KILL).then_some(())
    });
    // SIGKILL: no shutdown of any kind, what the kernel holds of the ledger file is what a restart finds.
    unsafe { libc::kill(server.child.id() as i32, libc::SIGKILL) };
    let sent: Vec<(String, Option<String>)> = clients.into_iter().flat_map(|c| c.join().unwrap()).collect();
    let answered: Vec<&(String, Option<String>)> = sent.iter().filter(|(_, d)| d.is_some()).collect();
    assert!(answered.len() >= ANSWERED_BEFORE_KILL, "answered before the kill: {}", answered.len());

    let recorded: std::collections::HashSet<String> = {
        let conn = read_only(&test.path);
        let mut keys = conn.prepare("SELECT idempotency_key FROM decision_events").unwrap();
        keys.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
    };
    for (key, _) in &answered {
        assert!(recorded.contains(key), "{key} was answered but is not in the ledger");
    }

    let restarted = Server::start(&test, &[]);
    for (key, decision) in &sent {
        let (status, _, answer) = restarted.check(key, 1);
        assert_eq!(status, 200, "{answer}");
        if let Some(decision) = decision {
            assert_eq!((answer["replayed"].as_bool(), answer["decisionId"].as_str()), (Some(true), Some(&**decision)));
        }
    }
    assert_eq!(sql_i64(&test, "SELECT COUNT(*) FROM decision_events"), sent.len() as i64, "one decision per key");
    assert_eq!(sql_i64(&test, "SELECT SUM(quantity) FROM usage_events"), sent.len() as i64, "one consumption per key");
}

// For backups: `serve` stopped by SIGTERM leaves a ledger file that holds every decision alone. Its writer closes the
// ledger before the process exits (after the outbox publisher stops), and SQLite then folds the write-ahead log into
// the file and removes it. A process that exited at once would leave the log beside the file (about 70 MB under
// load), and a copy of the file alone would miss the decisions since the last checkpoint.
#[test]
fn a_stopped_server_leaves_every_decision_in_the_ledger_file_alone() {
    let test = ledger_with(hard_policy(1_000_000, Window::MONTH));
    let broker = Broker::mock();
    let mut server = Server::start(&test, &["--durability", "normal", "--brokers", &broker.bootstrap]);
    for i in 0..200 {
        assert_eq!(server.check(&format!("k-{i}"), 1).0, 200);
    }
    let wal = std::path::PathBuf::from(format!("{}-wal", test.path.display()));
    assert!(wal.exists(), "the decisions are in the log while the server runs");
    unsafe { libc::kill(server.child.id() as i32, libc::SIGTERM) };
    let status = eventually(60, "serve exits after SIGTERM", || server.child.try_wait().expect("wait for serve"));
    assert!(status.success(), "SIGTERM stops serve cleanly: {status}");
    assert!(!wal.exists(), "the log is folded into the ledger file and removed");
    let copy = test.file("backup.db");
    std::fs::copy(&test.path, &copy).unwrap();
    ledger::Ledger::open_read_only(&copy).expect("the copy alone is a ledger");
    let decisions: i64 = read_only(&copy).query_row("SELECT COUNT(*) FROM decision_events", [], |r| r.get(0)).unwrap();
    assert_eq!(decisions, 200, "a copy of the ledger file alone holds every decision");
}

// For the on-call engineer: a client that opens a connection and never finishes its request header is closed
// after `--header-timeout-ms` (it held the connection, and one of the server's file descriptors, for ever), one whose
// body has not all arrived `--read-timeout-ms` after its header (paused, or trickling a byte at a time) is answered
// 408 and closed, nothing is recorded for any of them, and other clients are answered meanwhile.
#[test]
fn a_connection_that_never_finishes_its_request_is_closed() {
    let test = ledger_with(hard_policy(1_000_000, Window::MONTH));
    let server = Server::start(&test, &["--read-timeout-ms", "1000", "--header-timeout-ms", "1000"]);
    let address = server.base.strip_prefix("http://").expect("an http:// address");
    let mut half_header = std::net::TcpStream::connect(address).expect("a connection");
    half_header.write_all(b"POST /v1/check HTTP/1.1\r\nHost: test\r\n").expect("half a header sent");
    let body = json!({"tenant": "org-1", "metric": "requests", "amount": 1, "idempotency_key": "paused"}).to_string();
    let mut half_body = std::net::TcpStream::connect(address).expect("a connection");
    let head = format!(
        "POST /v1/check HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {SECRET}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    half_body.write_all(head.as_bytes()).and_then(|()| half_body.write_all(&body.as_bytes()[..10])).unwrap();
    // A byte every 200 ms never pauses past the timeout, but the whole body would take 40 s.
    let slow = format!("{}{body}", " ".repeat(200 - body.len()));
    let mut trickle = std::net::TcpStream::connect(address).expect("a connection");
    let head = head.replace(&format!("Content-Length: {}", body.len()), &format!("Content-Length: {}", slow.len()));
    trickle.write_all(head.as_bytes()).expect("a header sent");
    let mut trickling = trickle.try_clone().expect("a second handle");
    std::thread::spawn(move || {
        for byte in slow.as_bytes() {
            std::thread::sleep(Duration::from_millis(200));
            if trickling.write_all(&[*byte]).is_err() {
                return; // closed by the server
            }
        }
    });
    assert_eq!(server.check("meanwhile", 1).0, 200, "others are answered meanwhile");
    let answer = |stream: &mut std::net::TcpStream| {
        stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).expect("the server closes the connection before the read times out");
        String::from_utf8_lossy(&answer).to_string()
    };
    assert_eq!(answer(&mut half_header), "", "a half header is closed without an answer");
    // Answered by the read timeout, as its words say, not by another refusal: whole within 1000 ms of the header
    // (the trickle never pauses that long).
    let timed_out = "the request body did not arrive within 1000 ms of its header";
    let paused = answer(&mut half_body);
    assert!(paused.starts_with("HTTP/1.1 408 "), "a paused body is answered 408: {paused:?}");
    assert!(paused.contains("request_timeout") && paused.contains(timed_out), "{paused:?}");
    let slow = answer(&mut trickle);
    assert!(slow.starts_with("HTTP/1.1 408 "), "a body that never arrives whole is answered 408: {slow:?}");
    assert!(slow.contains(timed_out), "{slow:?}");
    let recorded: i64 = rusqlite::Connection::open(&test.path)
        .unwrap()
        .query_row("SELECT COUNT(*) FROM decision_events", [], |r| r.get(0))
        .unwrap();
    assert_eq!(recorded, 1, "only the answered check is recorded");
}

// 32 worker processes take, renew and release leases of a CONCURRENT policy of 8 over HTTP while four
// of them, holding a lease, are SIGKILLed: their leases expire and free their slots without any call, at no instant
// were more than 8 leases active by the ledger's own record of acquisitions, renewals, releases and expiries, and a
// killed worker's release, sent after its lease expired, is refused.
#[test]
fn thirty_two_workers_never_hold_more_than_eight_leases() {
    const LIMIT: i64 = 8;
    const TTL_MS: i64 = 3_000;
    if !tool_available("python3", "QUOTA_LEDGER_SKIP_PYTHON", "apt-get install python3") {
        return;
    }
    let jobs = Event::Policy(PolicyEvent {
        header: header("policy-jobs-v1", "2026-01-01T00:00:00Z", "org-1", "jobs"),
        policy_id: "jobs".into(),
        version: 1,
        window: Window::CONCURRENT,
        ..match hard_policy(LIMIT, Window::CONCURRENT) {
            Event::Policy(p) => p,
            _ => unreachable!("hard_policy builds a policy"),
        }
    });
    let test = ledger_with(jobs);
    let server = Server::start(&test, &[]);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/lease_worker.py");
    let spawn = |worker: usize, rounds: u32| {
        let args = [server.base.clone(), SECRET.into(), format!("w{worker}"), rounds.to_string(), TTL_MS.to_string()];
        let mut child = ChildGuard::new(
            Command::new("python3").arg(script).args(args).stdout(Stdio::piped()).spawn().expect("python3 runs"),
        );
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        (child, lines)
    };
    // The four that will be killed hold their leases first, so that the others contend for the four slots left.
    let mut holders: Vec<(ChildGuard, Value)> = (0..4)
        .map(|worker| {
            let (child, mut lines) = spawn(worker, 0);
            let line = lines.next().expect("a holder prints its lease").unwrap();
            (child, serde_json::from_str(&line).unwrap())
        })
        .collect();
    let workers: Vec<_> = (4..32).map(|worker| spawn(worker, 5)).collect();
    // Killed once the others contend for the slots left: a worker was told CONCURRENCY_LIMITED.
    let limited = "SELECT COUNT(*) FROM decision_events WHERE reason = 'CONCURRENCY_LIMITED'";
    eventually(30, "a worker was told CONCURRENCY_LIMITED", || (sql_i64(&test, limited) > 0).then_some(()));
    for (child, _) in &mut holders {
        child.kill().unwrap();
        child.wait().unwrap();
    }
    let mut denied = 0;
    for (mut child, lines) in workers {
        let last: Value = serde_json::from_str(&lines.last().expect("a worker reports").unwrap()).unwrap();
        assert_eq!(last["done"], 5, "{last}");
        denied += last["denied"].as_i64().unwrap();
        assert!(child.wait().unwrap().success());
    }
    assert!(denied > 0, "28 workers contending for 8 slots were told CONCURRENCY_LIMITED at least once");
    // Past the killed workers' expiry (their slots were taken by others meanwhile), a release of theirs is too late.
    // Every other worker released its leases: the killed ones' are the last active until they expire.
    eventually(30, "the killed workers' leases expired", || {
        let (status, quotas) = server.get("/v1/quotas?tenant=org-1&metric=jobs", Some(SECRET));
        assert_eq!(status, 200, "{quotas}");
        let active = quotas["quotas"][0]["leases"].as_i64().unwrap_or_else(|| panic!("leases: {quotas}"));
        (active == 0).then_some(())
    });
    for (_, lease) in &holders {
        let id = lease["lease_id"].as_str().unwrap();
        let token = lease["fencing_token"].as_i64().unwrap();
        let (status, _, body) =
            server.post(&format!("/v1/leases/{id}/release"), Some(SECRET), &json!({"fencing_token": token}));
        assert_eq!(status, 410, "a killed worker's release after its lease expired: {body}");
        assert_eq!(body["refused"], "expired", "{body}");
    }
    // The ledger's record: each lease from its RESERVE until its RELEASE (exclusive: the slot frees then) or, with
    // none, through its last expiry as renewed.
    let conn = read_only(&test.path);
    let mut statement = conn
        .prepare(
            "SELECT r.reservation_id,
                    MIN(CASE WHEN r.action = 'RESERVE' THEN e.occurred_at END),
                    MIN(CASE WHEN r.action = 'RELEASE' THEN e.occurred_at END),
                    MAX(CASE WHEN r.action IN ('RESERVE', 'RENEW') THEN r.expires_at END)
             FROM reservation_events r JOIN entries e ON e.seq = r.seq
             WHERE r.fencing_token IS NOT NULL AND e.status = 'recorded' GROUP BY r.reservation_id",
        )
        .unwrap();
    let leases: Vec<(String, i64, Option<i64>, i64)> = statement
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(leases.len(), 4 + 28 * 5, "every lease granted is recorded once");
    let mut steps: Vec<(i64, i64)> = Vec::new();
    for (_, acquired, released, expires) in &leases {
        steps.push((*acquired, 1));
        steps.push((released.unwrap_or(expires + 1), -1));
    }
    // At one instant, frees before takes: a slot released in a group is free for an acquire decided in it.
    steps.sort();
    let (mut active, mut most) = (0, 0);
    for (_, change) in steps {
        active += change;
        most = most.max(active);
    }
    assert!(most <= LIMIT, "{most} leases were active at once");
    assert_eq!(most, LIMIT, "the workers kept every slot busy at some instant");
    let expired = leases.iter().filter(|(_, _, released, _)| released.is_none()).count();
    assert_eq!(expired, 4, "only the killed workers' leases expired");
    // Support asking why a worker was turned away reads about slots, not a window.
    let denied_request: String = conn
        .query_row("SELECT request_id FROM decision_events WHERE reason = 'CONCURRENCY_LIMITED' LIMIT 1", [], |r| {
            r.get(0)
        })
        .unwrap();
    let why = test.run(&["audit", "why", &denied_request]).success().stdout_text();
    for words in
        ["at most 8 leases of jobs held at once", "Leases held before the decision: 8 of 8 slots", "A slot frees at"]
    {
        assert!(why.contains(words), "{words:?} in:\n{why}");
    }
}

// 64 clients for several lengths of a ROLLING window of 2 s with a limit of 300: no interval of 2 s
// ending at any instant holds more than the limit (checked from the ledger's usage, event by event), usage that aged
// out was allowed again (more than the limit passed over the run), and a denial says when enough ages out.
#[test]
fn sixty_four_clients_never_exceed_a_rolling_limit_in_any_interval() {
    const LIMIT: i64 = 300;
    const LENGTH_MICROS: i64 = 2_000_000;
    let Event::Policy(policy) = hard_policy(LIMIT, Window::ROLLING) else { unreachable!("a policy") };
    let test = ledger_with(Event::Policy(PolicyEvent { window_seconds: Some(2), ..policy }));
    let server = Arc::new(Server::start(&test, &[]));
    let answers = sixty_four_clients(&server, 90, |server, key, random| {
        std::thread::sleep(Duration::from_millis(40 + random % 40));
        let amount = (random % 10) as i64 + 1;
        let (status, _, body) = server.check(&key, amount);
        (status, body)
    });
    let denied: Vec<&Value> = answers.iter().filter(|(s, _)| *s == 429).map(|(_, b)| b).collect();
    assert!(answers.iter().all(|(s, _)| *s == 200 || *s == 429), "only allowed and denied");
    assert!(!denied.is_empty(), "5,760 requests of about 5 in a few seconds exceed 300 per 2 s");
    for body in &denied {
        assert_eq!(body["code"], "QUOTA_EXCEEDED", "{body}");
        let wait = body["retryAfterSeconds"].as_i64().unwrap_or_else(|| panic!("a wait: {body}"));
        assert!((1..=2).contains(&wait), "at most the window's length: {body}");
        assert!(body["resetsAt"].is_string(), "{body}");
    }
    let conn = read_only(&test.path);
    let mut statement = conn.prepare("SELECT e.occurred_at, u.quantity FROM usage_events u JOIN entries e ON e.seq = u.seq ORDER BY e.occurred_at").unwrap();
    let usage: Vec<(i64, i64)> =
        statement.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(Result::unwrap).collect();
    let allowed: i64 = usage.iter().map(|(_, q)| q).sum();
    assert!(allowed > LIMIT, "usage aged out and was allowed again: {allowed} over the run");
    let span = usage.last().unwrap().0 - usage[0].0;
    assert!(span > 2 * LENGTH_MICROS, "the run spans more than two lengths: {span} µs");
    // The interval ending at each event's instant: (t - 2 s, t].
    let mut first = 0;
    let mut sum = 0;
    for (i, (t, quantity)) in usage.iter().enumerate() {
        sum += quantity;
        while usage[first].0 <= t - LENGTH_MICROS {
            sum -= usage[first].1;
            first += 1;
        }
        let last_at_t = usage.get(i + 1).is_none_or(|(next, _)| next != t);
        assert!(!last_at_t || sum <= LIMIT, "{sum} in the 2 s up to {t}");
    }
}

// Alert thresholds through the real binary: as org-1's HARD monthly quota of 10 reaches 80%, 90% and 100% over HTTP,
// serve writes one AlertEvent per threshold, across a restart of serve between them (the second process writes only
// the one the first did not), none for the request denied past the limit; its outbox publishes each to quota.alerts
// once; `reconcile` reports them and a rerun reports the same, writing none; `audit tenant` lists them.
#[test]
fn alerts_reach_quota_alerts_once_across_a_restart_of_serve_and_reruns_of_reconcile() {
    let test = ledger_with(hard_policy(10, Window::MONTH));
    let broker = Broker::mock();
    let server = Server::start(&test, &["--brokers", &broker.bootstrap]);
    assert_eq!(server.check("k-1", 8).0, 200, "80%");
    assert_eq!(server.check("k-2", 1).0, 200, "90%");
    server.stop();
    let alerts = || sql_i64(&test, "SELECT COUNT(*) FROM alert_events");
    assert_eq!(alerts(), 2);
    let server = Server::start(&test, &["--brokers", &broker.bootstrap]);
    assert_eq!(server.check("k-3", 1).0, 200, "100%");
    assert_eq!(server.check("k-4", 1).0, 429, "past the limit: denied, no alert");
    assert_eq!(alerts(), 3, "the restarted serve wrote only the threshold the first had not");
    let expected: Vec<String> = {
        let conn = read_only(&test.path);
        let mut statement = conn.prepare("SELECT alert_id FROM alert_events ORDER BY seq").unwrap();
        statement.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
    };
    let thresholds: Vec<i64> = {
        let conn = read_only(&test.path);
        let mut statement = conn.prepare("SELECT threshold_percent FROM alert_events ORDER BY seq").unwrap();
        statement.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
    };
    assert_eq!(thresholds, [80, 90, 100]);
    // Every entry the two processes recorded: 4 decisions, 3 usage events and 3 alerts.
    wait_published(&test, 10, 30, "the outbox published the alerts");
    server.stop();
    let mut on_topic = event_ids_on_topic(&broker.bootstrap, "quota.alerts", expected.len());
    on_topic.sort();
    let mut sorted = expected.clone();
    sorted.sort();
    assert_eq!(on_topic, sorted, "each alert on quota.alerts exactly once");

    let as_of = Timestamp(Timestamp::now().micros() + 1_000_000).to_string();
    for run in ["first", "second"] {
        let json = test.run(&["reconcile", "--as-of", &as_of, "--json"]).success().json();
        let reported: Vec<&str> =
            json["read"]["alerts"].as_array().unwrap().iter().map(|a| a["alert_id"].as_str().unwrap()).collect();
        assert_eq!(reported, expected, "{run} run: {json}");
    }
    assert_eq!(alerts(), 3, "reconcile reports alerts and writes none");
    let words = test.run(&["reconcile", "--as-of", &as_of]).success().stdout_text();
    assert!(words.contains("alerts in the day before --as-of and written by this run: 3"), "{words}");
    assert!(words.contains("org-1 tokens quota: 80%, 90%, 100% reached, 10 of 10 used"), "{words}");
    let from = Timestamp(Timestamp::now().micros() - 3_600_000_000).to_string();
    let timeline = test.run(&["audit", "tenant", "org-1", "--from", &from, "--to", &as_of]).success().stdout_text();
    assert!(timeline.contains("Alerts: 3."), "{timeline}");
    assert!(timeline.contains("THRESHOLD 100%"), "{timeline}");
}

// Alerts of the kinds reconcile finds, through the real binary. Version 5 of org-1's monthly quota cuts it from
// 1,000 to 5 a minute ago and alerts a subject's share above 50%; serve, restarted halfway, denies most of what then
// asks. A reservation of 3 hours is held; alice consumes 3 of the 4 units consumed, bob 1. Two hours on,
// `reconcile --brokers` writes a DENY_RATE alert (the version's first hour denied 80% of the tenant's requests, none
// before it), an OPEN_TOO_LONG alert (the reservation was held past an hour) and a SUBJECT_SHARE alert (alice's 3 of
// 4), publishes them to quota.alerts once, and writes no THRESHOLD alert of the month, which serve alerted; a rerun
// writes none.
#[test]
fn reconcile_alerts_each_kind_once_across_restarts_of_serve_and_reruns() {
    let test = ledger_with(hard_policy(1_000, Window::MONTH));
    let now = Timestamp::now();
    let minute_ago = Timestamp(now.micros() - 60_000_000).to_string();
    let Event::Policy(v4) = hard_policy(1_000, Window::MONTH) else { unreachable!("a policy") };
    let v5 = PolicyEvent {
        header: header("policy-quota-v5", &minute_ago, "org-1", "tokens"),
        version: 5,
        limit: 5,
        effective_from: at(&minute_ago),
        alert_subject_share: Some(50),
        ..v4
    };
    write_container(&test.file("v5.avro"), &[Event::Policy(v5)]);
    test.ingest(&test.file("v5.avro"));
    let broker = Broker::mock();
    let server = Server::start(&test, &["--brokers", &broker.bootstrap]);
    let body =
        json!({"tenant": "org-1", "metric": "tokens", "amount": 1, "ttl_ms": 3 * 3_600_000, "idempotency_key": "r-1"});
    let (status, _, reserved) = server.post("/v1/reservations", Some(SECRET), &body);
    assert_eq!(status, 200, "{reserved}");
    let reservation = reserved["reservation_id"].as_str().unwrap().to_string();
    let statuses = |server: &Server, keys: std::ops::Range<usize>| {
        let ask = |k: usize| {
            let subject = if k == 2 { "bob" } else { "alice" };
            let body = json!({"tenant": "org-1", "subject": subject, "metric": "tokens", "amount": 1,
                "idempotency_key": format!("k-{k}")});
            server.post("/v1/check", Some(SECRET), &body).0
        };
        keys.map(ask).collect::<Vec<u16>>()
    };
    let mut answered = statuses(&server, 0..12);
    server.stop();
    let server = Server::start(&test, &["--brokers", &broker.bootstrap]);
    answered.extend(statuses(&server, 12..25));
    assert_eq!(answered[..5], [200, 200, 200, 200, 429], "1 held and 4 consumed of 5: {answered:?}");
    let hook_alerts = sql_i64(&test, "SELECT COUNT(*) FROM alert_events");
    assert_eq!(hook_alerts, 3, "serve alerted 80, 90 and 100% of the month, holds included");
    server.stop();

    let as_of = Timestamp(now.micros() + 2 * 3_600_000_000).to_string();
    let reconcile = || test.run(&["reconcile", "--as-of", &as_of, "--json", "--brokers", &broker.bootstrap]);
    let first = reconcile().success().json();
    assert_eq!(first["alerts_written"], json!(3), "{first}");
    let written: Vec<&Value> =
        first["read"]["alerts"].as_array().unwrap().iter().filter(|a| a["source"] == json!("reconcile")).collect();
    let kinds: Vec<&str> = written.iter().map(|a| a["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds.len(), 3, "{first}");
    let deny = written.iter().find(|a| a["kind"] == json!("DENY_RATE")).expect("a DENY_RATE alert");
    let rates = [&deny["policy_version"], &deny["observed"], &deny["limit"], &deny["threshold_percent"]];
    assert_eq!(rates, [&json!(5), &json!(80), &json!(0), &json!(10)], "v5: 80% against 0%, 10% needed: {deny}");
    let open = written.iter().find(|a| a["kind"] == json!("OPEN_TOO_LONG")).expect("an OPEN_TOO_LONG alert");
    assert_eq!((open["request_id"].as_str(), &open["limit"]), (Some(reservation.as_str()), &json!(3_600)), "{open}");
    let share = written.iter().find(|a| a["kind"] == json!("SUBJECT_SHARE")).expect("a SUBJECT_SHARE alert");
    let of_alice = [&share["subject"], &share["observed"], &share["limit"], &share["threshold_percent"]];
    assert_eq!(of_alice, [&json!("alice"), &json!(3), &json!(4), &json!(50)], "{share}");
    let second = reconcile().success().json();
    assert_eq!(second["alerts_written"], json!(0), "a rerun writes none: {second}");
    let sooner = test.run(&["reconcile", "--as-of", &as_of, "--json", "--open-alert-after", "60"]).success().json();
    assert_eq!(sooner["alerts_written"], json!(0), "another age alerts no reservation twice: {sooner}");
    let refused = test.run(&["reconcile", "--as-of", &as_of, "--open-alert-after", "0"]).expect_code(2);
    assert!(refused.stderr.contains("--open-alert-after"), "{}", refused.stderr);
    assert_eq!(sql_i64(&test, "SELECT COUNT(*) FROM alert_events"), hook_alerts + 3);
    let mut on_topic = event_ids_on_topic(&broker.bootstrap, "quota.alerts", 6);
    on_topic.sort();
    let mut expected: Vec<String> = {
        let conn = read_only(&test.path);
        let mut statement = conn.prepare("SELECT alert_id FROM alert_events").unwrap();
        statement.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
    };
    expected.sort();
    assert_eq!(on_topic, expected, "each alert on quota.alerts exactly once");
    let words = test.run(&["reconcile", "--as-of", &as_of]).success().stdout_text();
    assert!(words.contains("quota v5: denied 80% in its first hour, against 0% before (DENY_RATE)"), "{words}");
    assert!(
        words.contains("org-1 (alice) tokens quota: 3 of the tenant's 4, more than 50% (SUBJECT_SHARE)"),
        "{words}"
    );
    let open_line = words.lines().find(|l| l.contains(&format!("reservation {reservation}: held "))).unwrap_or("");
    assert!(open_line.ends_with("s, past 3600 s (OPEN_TOO_LONG)"), "{words}");
}

// A customer's dashboard reads its consumption per window (`GET /v1/usage`): per hour, day, month or billing cycle,
// days of a time zone's calendar, narrowed to a project, grouped by subject, commits counted beside usage as billing
// counts them, with the quota in force beside it; another tenant's usage is not the token's to read. Every figure
// below is summed by hand from the events written here, not by the product.
#[test]
fn a_dashboard_reads_usage_per_window() {
    let test = TestLedger::new();
    let spent = |id: &str, when: &str, tenant: &str, quantity: i64, subject: &str, project: Option<&str>| {
        Event::Usage(UsageEvent {
            header: Header {
                subject: Some(subject.into()),
                project: project.map(str::to_string),
                ..header(id, when, tenant, "requests")
            },
            quantity,
            request_id: None,
            attributes: Default::default(),
        })
    };
    let cycle = PolicyEvent {
        policy_id: "cycle".into(),
        window: Window::BILLING_CYCLE,
        cycle_anchor: Some(at("2026-10-15T12:00:00Z")),
        ..hard_daily("policy-cycle-v1", "org-1", 1_000)
    };
    write_container(
        &test.file("policies.avro"),
        &[Event::Policy(hard_daily("policy-daily-v1", "org-1", 1_000)), Event::Policy(cycle)],
    );
    test.ingest(&test.file("policies.avro"));
    let events = [
        spent("u-1", "2026-11-14T22:30:00Z", "org-1", 5, "u1", Some("p1")),
        spent("u-2", "2026-11-14T23:10:00Z", "org-1", 7, "u2", Some("p1")),
        spent("u-3", "2026-11-15T00:20:00Z", "org-1", 11, "u1", Some("p2")),
        spent("u-4", "2026-11-15T13:59:59Z", "org-1", 13, "u1", None),
        spent("u-5", "2026-11-16T01:00:00Z", "org-1", 17, "u2", Some("p1")),
        spent("u-6", "2026-11-15T01:00:00Z", "org-2", 100, "u1", Some("p1")),
    ];
    write_container(&test.file("events.avro"), &events);
    test.ingest(&test.file("events.avro"));
    let server = Server::start(&test, &[]);
    let range = "tenant=org-1&from=2026-11-14T22:00:00Z&to=2026-11-16T02:00:00Z";
    let windows = |query: &str| {
        let (status, body) = server.get(&format!("/v1/usage?{range}&{query}"), Some(SECRET));
        assert_eq!(status, 200, "{query}: {body}");
        let rows = body["data"].as_array().unwrap_or_else(|| panic!("{body}"));
        rows.iter()
            .map(|r| {
                let group = r.get("group").map(|g| g.as_str().unwrap_or("(none)").to_string());
                let start = r["windowStart"].as_str().unwrap().to_string();
                (start, r["windowEnd"].as_str().unwrap().to_string(), group, r["value"].as_i64().unwrap())
            })
            .collect::<Vec<_>>()
    };
    let row = |start: &str, end: &str, value: i64| (start.to_string(), end.to_string(), None, value);
    assert_eq!(
        windows("granularity=day"),
        [
            row("2026-11-14T22:00:00Z", "2026-11-15T00:00:00Z", 5 + 7),
            row("2026-11-15T00:00:00Z", "2026-11-16T00:00:00Z", 11 + 13),
            row("2026-11-16T00:00:00Z", "2026-11-16T02:00:00Z", 17),
        ],
        "UTC days, the first and last clipped to the range"
    );
    assert_eq!(
        windows("granularity=day&time_zone=Europe/Berlin"),
        [
            row("2026-11-14T22:00:00Z", "2026-11-14T23:00:00Z", 5),
            row("2026-11-14T23:00:00Z", "2026-11-15T23:00:00Z", 7 + 11 + 13),
            row("2026-11-15T23:00:00Z", "2026-11-16T02:00:00Z", 17),
        ],
        "days of Berlin's calendar (UTC+1 in November)"
    );
    assert_eq!(
        windows("granularity=hour&project=p1"),
        [
            row("2026-11-14T22:00:00Z", "2026-11-14T23:00:00Z", 5),
            row("2026-11-14T23:00:00Z", "2026-11-15T00:00:00Z", 7),
            row("2026-11-16T01:00:00Z", "2026-11-16T02:00:00Z", 17),
        ],
        "project p1's hours; hours without consumption are left out"
    );
    let grouped = |subject: &str, value: i64| {
        ("2026-11-14T22:00:00Z".to_string(), "2026-11-16T02:00:00Z".to_string(), Some(subject.to_string()), value)
    };
    assert_eq!(windows("granularity=month&group_by=subject"), [grouped("u1", 5 + 11 + 13), grouped("u2", 7 + 17)]);
    assert_eq!(
        windows("granularity=cycle&metric=requests"),
        [
            row("2026-11-14T22:00:00Z", "2026-11-15T12:00:00Z", 5 + 7 + 11),
            row("2026-11-15T12:00:00Z", "2026-11-16T02:00:00Z", 13 + 17),
        ],
        "the cycles anchored on the 15th at 12:00 UTC"
    );

    // A check consumes 2 now; a reservation of 4 committed at 3 consumes 3: both are the day's consumption.
    let (status, _, _) = server.post(
        "/v1/check",
        Some(SECRET),
        &json!({"tenant": "org-1", "metric": "requests", "amount": 2, "idempotency_key": "c-1"}),
    );
    assert_eq!(status, 200);
    let body =
        json!({"tenant": "org-1", "metric": "requests", "amount": 4, "ttl_ms": 60_000, "idempotency_key": "r-1"});
    let (status, _, reserved) = server.post("/v1/reservations", Some(SECRET), &body);
    assert_eq!(status, 200, "{reserved}");
    let id = reserved["reservation_id"].as_str().unwrap();
    let (status, _, _) = server.post(&format!("/v1/reservations/{id}/commit"), Some(SECRET), &json!({"amount": 3}));
    assert_eq!(status, 200);
    let now = Timestamp::now().micros();
    let day = 86_400_000_000;
    let (from, to) = (Timestamp(now - day).to_string(), Timestamp(now + day).to_string());
    let (status, body) =
        server.get(&format!("/v1/usage?tenant=org-1&metric=requests&from={from}&to={to}"), Some(SECRET));
    assert_eq!(status, 200, "{body}");
    let sum = |field: &str| body["data"].as_array().unwrap().iter().map(|r| r[field].as_i64().unwrap()).sum::<i64>();
    assert_eq!((sum("usage"), sum("commits"), sum("value")), (2, 3, 5), "{body}");
    let daily = body["quotas"].as_array().unwrap().iter().find(|q| q["policy_id"] == "daily");
    let daily = daily.unwrap_or_else(|| panic!("the daily quota beside the usage: {body}"));
    assert_eq!(daily["limit"], 1_000, "{daily}");

    // Refusals name what is wrong; another tenant's usage is not this token's.
    let refused = |query: &str| server.get(&format!("/v1/usage?{query}"), Some(SECRET));
    let (status, body) = refused("tenant=org-2&from=2026-11-14T22:00:00Z&to=2026-11-16T02:00:00Z");
    assert_eq!((status, body["error"].as_str()), (403, Some("forbidden")), "{body}");
    for (query, field) in [
        (format!("{range}&granularity=week"), "granularity"),
        (format!("{range}&granularity=cycle"), "metric"),
        (format!("{range}&time_zone=Mars/Olympus"), "time_zone"),
        ("tenant=org-1&from=2026-11-16T00:00:00Z&to=2026-11-15T00:00:00Z".to_string(), "to"),
        ("tenant=org-1&from=yesterday&to=2026-11-15T00:00:00Z".to_string(), "from"),
        ("tenant=org-1&from=2026-01-01T00:00:00Z&to=2026-12-01T00:00:00Z&granularity=hour".to_string(), "granularity"),
    ] {
        let (status, body) = refused(&query);
        assert_eq!((status, body["field"].as_str()), (400, Some(field)), "{query}: {body}");
    }
}
