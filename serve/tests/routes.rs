//! The routes of contract §7 as a service meets them: `serve`'s own router (`serve::router`) over a hook on a real
//! ledger in a temporary directory, asked in this process, so that `serve`'s behaviour is tested where it lives and
//! without the whole binary. Every assertion is on an answer: its status, headers and JSON body.

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use hook::{Hook, HookSettings};
use ledger::{Batch, Durability, Incoming, Ledger, Origin};
use schemas::{Event, EventType};
use serde_json::{Value, json};
use tower::ServiceExt;

/// A service's token of org-1 only.
const SECRET: &str = "org-1-secret-0123456789";
/// An operator's token: every tenant, `admin = true`.
const ADMIN: &str = "admin-secret-0123456789";

/// org-1's `tokens`: a HARD limit of 10 a day, version 1.
const POLICY: &str = r#"{"event_id":"p-tokens","occurred_at":"2026-01-01T00:00:00Z","tenant":"org-1",
    "metric":"tokens","source":"test","policy_id":"tokens-day","version":1,"scope":"TENANT","limit":10,
    "window":"DAY","enforcement":"HARD","effective_from":"2026-01-01T00:00:00Z","burst":null}"#;

/// An answer: status, headers and the body as JSON.
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Value,
}

struct Server {
    runtime: tokio::runtime::Runtime,
    router: axum::Router,
    _dir: tempfile::TempDir,
}

impl Server {
    /// The router over a hook on a ledger holding [`POLICY`], its admin endpoints recording in the same ledger.
    fn start() -> Server {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("ledger.db");
        let policy = Incoming {
            event: Event::from_json(EventType::PolicyEvent, POLICY).expect("a valid policy"),
            origin: Origin::Local { name: "test".into() },
            raw: None,
        };
        let mut ledger = Ledger::open(&path).expect("a new ledger");
        ledger.append(&Batch { events: vec![policy], ..Batch::default() }).expect("the policy appends");
        drop(ledger);
        let settings = HookSettings { durability: Durability::Normal, ..HookSettings::default() };
        let hook = Hook::start(&path, settings).expect("the hook starts");
        let tokens_path = dir.path().join("tokens.toml");
        let tokens = format!(
            "[[token]]\nname = \"checkout\"\nsecret = \"{SECRET}\"\ntenants = [\"org-1\"]\n\n[[token]]\nname = \
             \"operator\"\nsecret = \"{ADMIN}\"\ntenants = [\"*\"]\nadmin = true\n"
        );
        serve::tokens::write_private(&tokens_path, &tokens).expect("the token file");
        let tokens = serve::tokens::Tokens::read(&tokens_path).expect("the token file reads");
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        Server { runtime, router: serve::router(hook, tokens, Some(path)), _dir: dir }
    }

    /// `method path` with `secret`'s token (none: no Authorization header) and `body` as it is sent.
    fn send(&self, method: &str, path: &str, secret: Option<&str>, body: Body) -> (StatusCode, HeaderMap, String) {
        self.send_with(method, path, secret, &[("content-type", "application/json")], body)
    }

    /// [`Server::send`] with `headers` (and no content type unless they give one).
    fn send_with(
        &self,
        method: &str,
        path: &str,
        secret: Option<&str>,
        headers: &[(&str, &str)],
        body: Body,
    ) -> (StatusCode, HeaderMap, String) {
        let mut request = Request::builder().method(method).uri(path);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(secret) = secret {
            request = request.header("authorization", format!("Bearer {secret}"));
        }
        let request = request.body(body).expect("a request");
        let response = self.runtime.block_on(self.router.clone().oneshot(request)).expect("the router answers");
        let (status, headers) = (response.status(), response.headers().clone());
        let bytes = self.runtime.block_on(axum::body::to_bytes(response.into_body(), usize::MAX)).expect("a body");
        (status, headers, String::from_utf8_lossy(&bytes).into_owned())
    }

    /// `method path` with a JSON body (or none), answered in JSON.
    fn ask(&self, method: &str, path: &str, secret: Option<&str>, body: Option<Value>) -> Answer {
        let body = body.map_or_else(Body::empty, |b| Body::from(b.to_string()));
        let (status, headers, text) = self.send(method, path, secret, body);
        let body =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{method} {path}: {status} not JSON ({e}): {text}"));
        Answer { status, headers, body }
    }

    /// `method path` with a JSON body and `headers` beside its content type, answered in JSON.
    fn ask_with(&self, method: &str, path: &str, headers: &[(&str, &str)], body: Value) -> Answer {
        let headers = [&[("content-type", "application/json")], headers].concat();
        let (status, headers, text) =
            self.send_with(method, path, Some(SECRET), &headers, Body::from(body.to_string()));
        let body =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{method} {path}: {status} not JSON ({e}): {text}"));
        Answer { status, headers, body }
    }

    /// org-1's check of `amount` tokens under idempotency key `key`, with its own token.
    fn check(&self, key: &str, amount: i64) -> Answer {
        let body = json!({"tenant": "org-1", "metric": "tokens", "amount": amount, "idempotency_key": key});
        self.ask("POST", "/v1/check", Some(SECRET), Some(body))
    }

    /// org-1's reservation of `amount` tokens for a minute: its id, after asserting it was allowed.
    fn reserve(&self, key: &str, amount: i64) -> String {
        let body = json!({"tenant": "org-1", "metric": "tokens", "amount": amount, "ttl_ms": 60_000,
                          "idempotency_key": key});
        let answer = self.ask("POST", "/v1/reservations", Some(SECRET), Some(body));
        assert_eq!((answer.status, answer.body["code"].as_str()), (StatusCode::OK, Some("OK")), "{}", answer.body);
        // contract §7 spells it `reservation_id`; `reservationId` stays for the clients written to it.
        assert_eq!(answer.body["reservation_id"], answer.body["reservationId"], "{}", answer.body);
        answer.body["reservation_id"].as_str().expect("a reservation id").to_string()
    }

    /// What org-1's `tokens` policy answers `GET /v1/quotas` now: (consumed, held, remaining).
    fn quota(&self) -> (Option<i64>, Option<i64>, Option<i64>) {
        let answer = self.ask("GET", "/v1/quotas?tenant=org-1&metric=tokens", Some(SECRET), None);
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        let quota = &answer.body["quotas"][0];
        (quota["consumed"].as_i64(), quota["held"].as_i64(), quota["remaining"].as_i64())
    }
}

/// An error answer as a client written before problem documents reads it: without RFC 9457's members.
fn today_s(body: &Value) -> Value {
    let mut body = body.clone();
    for member in ["type", "title", "status", "detail"] {
        body.as_object_mut().expect("an object").remove(member);
    }
    body
}

/// A header's value as text.
fn text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).map(|v| v.to_str().expect("an ASCII header"))
}

/// A header's value as a number.
fn number(headers: &HeaderMap, name: &str) -> Option<i64> {
    headers.get(name).map(|v| v.to_str().expect("an ASCII header").parse().expect("a number"))
}

// Proves a check within the HARD limit is answered 200 `OK` with what remains (body and RateLimit headers), and the
// next one that would exceed it 429 `QUOTA_EXCEEDED` with the policy that refused, a Retry-After the body repeats,
// and nothing consumed by the refusal.
#[test]
fn a_check_is_allowed_within_a_hard_limit_and_refused_beyond_it() {
    let server = Server::start();
    let allowed = server.check("a-1", 8);
    assert_eq!(allowed.status, StatusCode::OK, "{}", allowed.body);
    let body = &allowed.body;
    assert_eq!(
        (body["code"].as_str(), body["limit"].as_i64(), body["remaining"].as_i64(), body["replayed"].as_bool()),
        (Some("OK"), Some(10), Some(2), Some(false))
    );
    assert_eq!(
        (number(&allowed.headers, "ratelimit-limit"), number(&allowed.headers, "ratelimit-remaining")),
        (Some(10), Some(2))
    );
    assert!(allowed.headers.get("retry-after").is_none(), "an allowed answer has nothing to wait for");

    let refused = server.check("a-2", 5);
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS, "{}", refused.body);
    let body = &refused.body;
    assert_eq!(
        (body["code"].as_str(), body["metric"].as_str(), body["scope"].as_str()),
        (Some("QUOTA_EXCEEDED"), Some("tokens"), Some("TENANT"))
    );
    assert_eq!((body["policyId"].as_str(), body["policyVersion"].as_i64()), (Some("tokens-day"), Some(1)));
    assert_eq!((body["limit"].as_i64(), body["remaining"].as_i64()), (Some(10), Some(2)));
    let retry = number(&refused.headers, "retry-after");
    assert_eq!(retry, body["retryAfterSeconds"].as_i64(), "the header and the body say the same wait");
    assert!(retry.is_some_and(|r| (1..=86_400).contains(&r)), "until the day resets: {retry:?}");
    assert_eq!(server.quota(), (Some(8), Some(0), Some(2)), "the refusal consumed nothing");
}

// Proves a retry with the same idempotency key is answered as the first request was (the same decision id, code
// and numbers, marked `replayed`) and consumes nothing more, and that the same key with another amount is refused
// 409 `IDEMPOTENCY_KEY_REUSED` naming the original decision.
#[test]
fn a_retry_with_the_same_key_is_answered_the_same_and_consumes_once() {
    let server = Server::start();
    let first = server.check("retried", 4);
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    let retry = server.check("retried", 4);
    assert_eq!(retry.status, StatusCode::OK, "{}", retry.body);
    assert_eq!((first.body["replayed"].as_bool(), retry.body["replayed"].as_bool()), (Some(false), Some(true)));
    let without_replayed = |body: &Value| {
        let mut body = body.clone();
        body.as_object_mut().expect("an object").remove("replayed");
        body
    };
    assert_eq!(without_replayed(&retry.body), without_replayed(&first.body));
    assert_eq!(server.quota(), (Some(4), Some(0), Some(6)), "consumed once");

    let reused = server.check("retried", 5);
    assert_eq!(reused.status, StatusCode::CONFLICT, "{}", reused.body);
    assert_eq!(
        (reused.body["code"].as_str(), reused.body["decisionId"].as_str()),
        (Some("IDEMPOTENCY_KEY_REUSED"), first.body["decisionId"].as_str())
    );
}

// Proves a reservation holds its amount against the limit until it is closed: a commit charges what was used
// (above the reservation too) and a second commit is refused 409 `already_closed`; a release frees what it held.
#[test]
fn a_reservation_holds_until_committed_or_released() {
    let server = Server::start();
    let committed = server.reserve("r-1", 4);
    assert_eq!(server.quota(), (Some(0), Some(4), Some(6)), "4 held");
    assert_eq!(server.check("c-1", 7).status, StatusCode::TOO_MANY_REQUESTS, "4 held of 10 leave 6");

    let commit = |id: &str, amount: i64| {
        let path = format!("/v1/reservations/{id}/commit");
        server.ask("POST", &path, Some(SECRET), Some(json!({"amount": amount})))
    };
    let answer = commit(&committed, 5);
    assert_eq!(
        (answer.status, answer.body["charged_above_reserved"].as_i64()),
        (StatusCode::OK, Some(1)),
        "{}",
        answer.body
    );
    let again = commit(&committed, 1);
    assert_eq!(
        (again.status, again.body["refused"].as_str()),
        (StatusCode::CONFLICT, Some("already_closed")),
        "{}",
        again.body
    );
    assert_eq!(server.quota(), (Some(5), Some(0), Some(5)), "the commit charged 5, once");

    let released = server.reserve("r-2", 3);
    assert_eq!(server.quota(), (Some(5), Some(3), Some(2)));
    let path = format!("/v1/reservations/{released}/release");
    let answer = server.ask("POST", &path, Some(SECRET), Some(json!({})));
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(server.quota(), (Some(5), Some(0), Some(5)), "the release freed the 3 and charged nothing");
    assert_eq!(server.check("c-2", 5).status, StatusCode::OK, "what remains may be consumed");
}

// Proves the callers refused before the hook is asked consume nothing: no token 401 with `WWW-Authenticate: Bearer`,
// an unknown token 401, a tenant the token does not cover 403 naming the tenant, and a body over the limit 413
// naming the limit.
#[test]
fn callers_without_a_valid_token_or_tenant_or_body_are_refused() {
    let server = Server::start();
    let ask = json!({"tenant": "org-1", "metric": "tokens", "amount": 1, "idempotency_key": "k"});
    let missing = server.ask("POST", "/v1/check", None, Some(ask.clone()));
    assert_eq!((missing.status, missing.body["error"].as_str()), (StatusCode::UNAUTHORIZED, Some("unauthorized")));
    assert_eq!(missing.headers.get("www-authenticate").map(|v| v.as_bytes()), Some(&b"Bearer"[..]));
    let unknown = server.ask("POST", "/v1/check", Some("not-a-token-at-all-123"), Some(ask.clone()));
    assert_eq!(unknown.status, StatusCode::UNAUTHORIZED, "{}", unknown.body);

    let other = json!({"tenant": "org-2", "metric": "tokens", "amount": 1, "idempotency_key": "k"});
    let forbidden = server.ask("POST", "/v1/check", Some(SECRET), Some(other));
    assert_eq!(
        (forbidden.status, today_s(&forbidden.body)),
        (StatusCode::FORBIDDEN, json!({"error": "forbidden", "message": "this token does not cover tenant \"org-2\""}))
    );

    let mut huge = ask.clone();
    huge["request_id"] = json!("x".repeat(serve::BODY_LIMIT_BYTES));
    let too_large = server.ask("POST", "/v1/check", Some(SECRET), Some(huge));
    let message = format!("the request body is larger than {} bytes", serve::BODY_LIMIT_BYTES);
    assert_eq!(
        (too_large.status, today_s(&too_large.body)),
        (StatusCode::PAYLOAD_TOO_LARGE, json!({"error": "bad_request", "message": message}))
    );
    assert_eq!(server.quota(), (Some(0), Some(0), Some(10)), "nothing consumed by any refusal");
}

// Proves the check, reservation and lease bodies are the hook's requests: a reservation without `ttl_ms` and a check
// with one are refused naming `ttl_ms`, a member of the wrong type is refused naming its field, and a lease names a
// project and an API key as a check does. Nothing is consumed by a refusal.
#[test]
fn bodies_are_the_hook_s_requests_and_are_refused_naming_the_field() {
    let server = Server::start();
    let refused = |path: &str, body: Value| {
        let answer = server.ask("POST", path, Some(SECRET), Some(body));
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.body);
        answer.body
    };
    let reserve = json!({"tenant": "org-1", "metric": "tokens", "amount": 1, "idempotency_key": "r-1"});
    assert_eq!(refused("/v1/reservations", reserve)["field"], "ttl_ms");
    let check = json!({"tenant": "org-1", "metric": "tokens", "amount": 1, "ttl_ms": 60_000, "idempotency_key": "c-1"});
    assert_eq!(refused("/v1/check", check)["field"], "ttl_ms");
    let typed = json!({"tenant": "org-1", "subject": 5, "metric": "tokens", "amount": 1, "idempotency_key": "c-2"});
    let said = refused("/v1/check", typed);
    assert!(said["message"].as_str().unwrap().contains("subject: invalid type: integer `5`"), "{said}");
    let lease = json!({"tenant": "org-1", "project": "p-1", "api_key": "k-1", "metric": "jobs", "ttl_ms": 60_000,
                       "idempotency_key": "l-1"});
    let leased = server.ask("POST", "/v1/leases", Some(SECRET), Some(lease));
    assert_eq!((leased.status, leased.body["code"].as_str()), (StatusCode::OK, Some("OK")), "{}", leased.body);
    assert_eq!(server.quota(), (Some(0), Some(0), Some(10)), "nothing consumed by any refusal");
}

// Proves a policy changed through `POST /v1/admin/policies` is recorded (201, the next version, the admin token's
// name as its actor) and decides the very next check: a check refused under the old limit is allowed under the new.
#[test]
fn an_admin_policy_change_decides_the_next_check() {
    let server = Server::start();
    assert_eq!(server.check("before", 11).status, StatusCode::TOO_MANY_REQUESTS, "11 above the limit of 10");
    let raise = json!({"tenant": "org-1", "metric": "tokens", "limit": 100, "window": "DAY", "enforcement": "HARD",
                       "policy_id": "tokens-day", "reason": "a bigger plan"});
    let recorded = server.ask("POST", "/v1/admin/policies", Some(ADMIN), Some(raise));
    assert_eq!(recorded.status, StatusCode::CREATED, "{}", recorded.body);
    let event = &recorded.body["event"];
    assert_eq!(
        (event["policy_id"].as_str(), event["version"].as_i64(), event["limit"].as_i64(), event["actor"].as_str()),
        (Some("tokens-day"), Some(2), Some(100), Some("operator"))
    );
    let after = server.check("after", 11);
    assert_eq!(after.status, StatusCode::OK, "{}", after.body);
    assert_eq!((after.body["policyVersion"].as_i64(), after.body["limit"].as_i64()), (Some(2), Some(100)));
}

// Proves `GET /healthz` answers 200 without a token, saying the server is ok and its hook records.
#[test]
fn healthz_says_the_hook_records() {
    let server = Server::start();
    let health = server.ask("GET", "/healthz", None, None);
    assert_eq!(health.status, StatusCode::OK, "{}", health.body);
    assert_eq!((health.body["status"].as_str(), health.body["hook"]["recording"].as_str()), (Some("ok"), Some("ok")));
}

// Proves `GET /metrics`, asked without a token, counts each decision by its code, metric and deciding policy's
// version: one allowed and one refused check are one series each.
#[test]
fn metrics_count_the_decisions() {
    let server = Server::start();
    assert_eq!(server.check("m-1", 9).status, StatusCode::OK);
    assert_eq!(server.check("m-2", 9).status, StatusCode::TOO_MANY_REQUESTS);
    let (status, headers, text) = server.send("GET", "/metrics", None, Body::empty());
    assert_eq!(status, StatusCode::OK, "{text}");
    assert!(
        headers.get("content-type").is_some_and(|t| t.to_str().is_ok_and(|t| t.contains("openmetrics"))),
        "{headers:?}"
    );
    let mut series: Vec<&str> = text.lines().filter(|l| l.starts_with("quota_ledger_decisions_total{")).collect();
    series.sort();
    assert_eq!(
        series,
        [
            r#"quota_ledger_decisions_total{code="OK",metric="tokens",policy_version="1"} 1"#,
            r#"quota_ledger_decisions_total{code="QUOTA_EXCEEDED",metric="tokens",policy_version="1"} 1"#,
        ],
        "{text}"
    );
}

// Proves a client written before problem documents, the Idempotency-Key header, camelCase members and the draft's
// RateLimit fields gets today's answers: snake_case bodies with the key in the body and no new header are allowed,
// replayed and refused as before (409 `IDEMPOTENCY_KEY_REUSED` for a reused key, 400 naming the field), every member
// it reads still there with its value, and the RateLimit-Limit, -Remaining and -Reset headers as before.
#[test]
fn an_old_client_gets_today_s_answers() {
    let server = Server::start();
    let first = server.check("old-1", 3);
    assert_eq!((first.status, first.body["code"].as_str()), (StatusCode::OK, Some("OK")), "{}", first.body);
    assert_eq!(text(&first.headers, "content-type"), Some("application/json"));
    for member in ["metric", "scope", "limit", "remaining", "resetsAt", "policyId", "policyVersion", "decisionId"] {
        assert!(first.body.get(member).is_some_and(|v| !v.is_null()), "{member}: {}", first.body);
    }
    assert_eq!(["ratelimit-limit", "ratelimit-remaining"].map(|h| number(&first.headers, h)), [Some(10), Some(7)]);
    assert!(number(&first.headers, "ratelimit-reset").is_some_and(|r| (1..=86_400).contains(&r)));
    assert_eq!(server.check("old-1", 3).body["replayed"].as_bool(), Some(true));

    let reused = server.check("old-1", 4);
    assert_eq!(reused.status, StatusCode::CONFLICT, "{}", reused.body);
    let message = reused.body["message"].as_str().expect("a message").to_string();
    assert_eq!(
        today_s(&reused.body),
        json!({"error": "idempotency_key_reused", "code": "IDEMPOTENCY_KEY_REUSED", "message": message,
               "field": "amount", "decisionId": first.body["decisionId"]})
    );
    let reserve = json!({"tenant": "org-1", "metric": "tokens", "amount": 1, "idempotency_key": "old-2"});
    let refused = server.ask("POST", "/v1/reservations", Some(SECRET), Some(reserve));
    assert_eq!((refused.status, refused.body["error"].as_str()), (StatusCode::BAD_REQUEST, Some("bad_request")));
    assert_eq!(refused.body["field"], "ttl_ms", "{}", refused.body);
    assert_eq!(server.quota(), (Some(3), Some(0), Some(7)), "consumed once");
}

// Proves every error answer is an RFC 9457 problem document (`application/problem+json`, `type` from the error code,
// `title`, `status` the answer's, `detail` the message) keeping today's members: a bad body (400), no token (401), a
// tenant not covered (403), an unknown route (404), a wrong method (405), a close refused (404 `refused`), a body too
// large (413) and one not sent as JSON (415).
#[test]
fn every_error_answer_is_a_problem_document() {
    let server = Server::start();
    let ask = json!({"tenant": "org-1", "metric": "tokens", "amount": 1, "idempotency_key": "p-1"});
    let mut huge = ask.clone();
    huge["request_id"] = json!("x".repeat(serve::BODY_LIMIT_BYTES));
    let json = [("content-type", "application/json")];
    let cases: Vec<ErrorCase> = vec![
        ("POST", "/v1/check", Some(SECRET), &json, r#"{"tenant": 1}"#.into(), StatusCode::BAD_REQUEST, "bad_request"),
        ("POST", "/v1/check", None, &json, ask.to_string(), StatusCode::UNAUTHORIZED, "unauthorized"),
        (
            "POST",
            "/v1/check",
            Some(SECRET),
            &json,
            ask.to_string().replace("org-1", "org-2"),
            StatusCode::FORBIDDEN,
            "forbidden",
        ),
        ("GET", "/v1/nowhere", Some(SECRET), &[], String::new(), StatusCode::NOT_FOUND, "not_found"),
        ("GET", "/v1/check", Some(SECRET), &[], String::new(), StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
        (
            "POST",
            "/v1/reservations/rsv-none/commit",
            Some(SECRET),
            &json,
            r#"{"amount": 1}"#.into(),
            StatusCode::NOT_FOUND,
            "refused",
        ),
        ("POST", "/v1/check", Some(SECRET), &json, huge.to_string(), StatusCode::PAYLOAD_TOO_LARGE, "bad_request"),
        (
            "POST",
            "/v1/check",
            Some(SECRET),
            &[],
            ask.to_string(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
        ),
    ];
    for (method, path, secret, headers, body, status, code) in cases {
        let (answered, headers, text) = server.send_with(method, path, secret, headers, Body::from(body));
        let body: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{method} {path}: {e}: {text}"));
        assert_eq!(answered, status, "{method} {path}: {body}");
        assert_eq!(text_of(&headers), Some("application/problem+json"), "{method} {path}");
        assert_eq!(body["type"], format!("urn:quota-ledger:problem:{code}"), "{method} {path}: {body}");
        assert_eq!(body["status"], status.as_u16(), "{method} {path}: {body}");
        assert_eq!((body["error"].as_str(), body["detail"].as_str()), (Some(code), body["message"].as_str()));
        assert!(body["title"].as_str().is_some_and(|t| !t.is_empty()), "{method} {path}: {body}");
    }
    assert_eq!(server.quota(), (Some(0), Some(0), Some(10)), "nothing consumed by any refusal");
}

/// A request that is refused: method, path, token, headers, body; and the status and error code it is answered.
type ErrorCase<'a> = (&'a str, &'a str, Option<&'a str>, &'a [(&'a str, &'a str)], String, StatusCode, &'a str);

/// The content type of an answer.
fn text_of(headers: &HeaderMap) -> Option<&str> {
    text(headers, "content-type")
}

// Proves the Idempotency-Key header (an sf-string, or a bare key) stands for the body's `idempotency_key`: a request
// keyed by the header alone is decided and its retry replayed, also when the body repeats the same key; a body naming
// another key is refused 400 naming `idempotency_key`; a malformed header 400 naming it; and a key reused with another
// request under the header is the draft's 422 (today's 409 under the body field).
#[test]
fn the_idempotency_key_header_stands_for_the_body_field() {
    let server = Server::start();
    let ask = json!({"tenant": "org-1", "metric": "tokens", "amount": 2});
    let keyed = [("idempotency-key", r#""h-1""#)];
    let first = server.ask_with("POST", "/v1/check", &keyed, ask.clone());
    assert_eq!((first.status, first.body["replayed"].as_bool()), (StatusCode::OK, Some(false)), "{}", first.body);
    let mut same = ask.clone();
    same["idempotency_key"] = json!("h-1");
    let retry = server.ask_with("POST", "/v1/check", &keyed, same.clone());
    assert_eq!((retry.body["replayed"].as_bool(), &retry.body["decisionId"]), (Some(true), &first.body["decisionId"]));
    let body_only = server.ask("POST", "/v1/check", Some(SECRET), Some(same));
    assert_eq!(body_only.body["decisionId"], first.body["decisionId"], "the same key, however it is given");
    let bare = server.ask_with("POST", "/v1/check", &[("idempotency-key", "h-1")], ask.clone());
    assert_eq!(bare.body["decisionId"], first.body["decisionId"], "a bare key is the same key");

    let mut other = ask.clone();
    other["idempotency_key"] = json!("h-2");
    let differs = server.ask_with("POST", "/v1/check", &keyed, other);
    assert_eq!((differs.status, differs.body["field"].as_str()), (StatusCode::BAD_REQUEST, Some("idempotency_key")));
    let malformed = server.ask_with("POST", "/v1/check", &[("idempotency-key", r#""open"#)], ask.clone());
    assert_eq!(
        (malformed.status, malformed.body["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("Idempotency-Key")),
        "{}",
        malformed.body
    );

    let mut more = ask.clone();
    more["amount"] = json!(3);
    let reused = server.ask_with("POST", "/v1/check", &keyed, more);
    assert_eq!(reused.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", reused.body);
    assert_eq!(
        (reused.body["type"].as_str(), reused.body["field"].as_str(), &reused.body["decisionId"]),
        (Some("urn:quota-ledger:problem:idempotency_key_reused"), Some("amount"), &first.body["decisionId"])
    );
    let lease = json!({"tenant": "org-1", "metric": "jobs", "ttl_ms": 60_000});
    let leased = server.ask_with("POST", "/v1/leases", &[("idempotency-key", r#""l-1""#)], lease);
    assert_eq!(leased.status, StatusCode::OK, "{}", leased.body);
    assert_eq!(server.quota(), (Some(2), Some(0), Some(8)), "consumed once, by the first");
}

// Proves request members and query parameters may be spelled in camelCase as the answers are: a reservation of
// `ttlMs` under `idempotencyKey` is held, a quota read by `apiKey` answers, and a member given in both spellings is
// refused 400 naming it, consuming nothing.
#[test]
fn camel_case_request_members_are_accepted_and_both_spellings_refused() {
    let server = Server::start();
    let camel = json!({"tenant": "org-1", "metric": "tokens", "amount": 4, "ttlMs": 60_000, "idempotencyKey": "c-1",
                       "requestId": "req-c-1"});
    let held = server.ask("POST", "/v1/reservations", Some(SECRET), Some(camel));
    assert_eq!((held.status, held.body["code"].as_str()), (StatusCode::OK, Some("OK")), "{}", held.body);
    assert_eq!(held.body["requestId"], "req-c-1", "{}", held.body);
    assert_eq!(server.quota(), (Some(0), Some(4), Some(6)), "4 held");
    let read = server.ask("GET", "/v1/quotas?tenant=org-1&apiKey=k-1", Some(SECRET), None);
    assert_eq!(read.status, StatusCode::OK, "{}", read.body);

    let both = json!({"tenant": "org-1", "metric": "tokens", "amount": 1, "ttl_ms": 60_000, "ttlMs": 1_000,
                      "idempotency_key": "c-2"});
    let refused = server.ask("POST", "/v1/reservations", Some(SECRET), Some(both));
    assert_eq!((refused.status, refused.body["field"].as_str()), (StatusCode::BAD_REQUEST, Some("ttl_ms")));
    let query = server.ask("GET", "/v1/quotas?tenant=org-1&api_key=a&apiKey=b", Some(SECRET), None);
    assert_eq!((query.status, query.body["field"].as_str()), (StatusCode::BAD_REQUEST, Some("api_key")));
    assert_eq!(server.quota(), (Some(0), Some(4), Some(6)), "nothing more held");
}

// Proves a decision carries the RateLimit draft's fields beside today's headers, saying the same: `RateLimit-Policy`
// names the deciding policy with its quota and its window in seconds, `RateLimit` what remains and the seconds until
// the window resets (RateLimit-Remaining's and RateLimit-Reset's numbers), allowed and denied.
#[test]
fn the_draft_ratelimit_fields_stand_beside_today_s() {
    let server = Server::start();
    for (key, amount, remaining) in [("rl-1", 6, 4), ("rl-2", 5, 4)] {
        let answer = server.check(key, amount);
        assert_eq!(text(&answer.headers, "ratelimit-policy"), Some(r#""tokens-day";q=10;w=86400"#));
        let reset = number(&answer.headers, "ratelimit-reset").expect("RateLimit-Reset");
        assert_eq!(number(&answer.headers, "ratelimit-remaining"), Some(remaining));
        let state = format!(r#""tokens-day";r={remaining};t={reset}"#);
        assert_eq!(text(&answer.headers, "ratelimit"), Some(state.as_str()), "{}", answer.body);
    }
}
