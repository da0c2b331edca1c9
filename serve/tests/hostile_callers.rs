//! What a tenant with a valid token, but no admin rights, can make `serve` do: the routes are `serve`'s own
//! (`serve::router`) over a hook on a real ledger in a temporary directory, asked in this process.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use hook::{Hook, HookSettings};
use ledger::{Batch, Durability, Incoming, Ledger, Origin};
use schemas::{Event, EventType};
use serde_json::{Value, json};
use tower::ServiceExt;

/// A token of every tenant without `admin = true`: a service that decides, as a hostile tenant's could be.
const SERVICE_SECRET: &str = "service-secret-0123456789";
/// An operator's token: every tenant, `admin = true`.
const ADMIN_SECRET: &str = "admin-secret-0123456789";

struct Server {
    runtime: tokio::runtime::Runtime,
    router: axum::Router,
    _dir: tempfile::TempDir,
}

/// A policy of org-1's `tokens` (a month of a million) and a CONCURRENT policy of org-1's `jobs` (two slots).
const POLICIES: [&str; 2] = [
    r#"{"event_id":"p-tokens","occurred_at":"2026-01-01T00:00:00Z","tenant":"org-1","metric":"tokens",
        "source":"test","policy_id":"tokens-month","version":1,"scope":"TENANT","limit":1000000,"window":"MONTH",
        "enforcement":"HARD","effective_from":"2026-01-01T00:00:00Z","burst":null}"#,
    r#"{"event_id":"p-jobs","occurred_at":"2026-01-01T00:00:00Z","tenant":"org-1","metric":"jobs",
        "source":"test","policy_id":"jobs-slots","version":1,"scope":"TENANT","limit":2,"window":"CONCURRENT",
        "enforcement":"HARD","effective_from":"2026-01-01T00:00:00Z","burst":null}"#,
];

impl Server {
    fn start() -> Server {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("ledger.db");
        let events = POLICIES.iter().map(|json| Incoming {
            event: Event::from_json(EventType::PolicyEvent, json).expect("a valid policy"),
            origin: Origin::Local { name: "test".into() },
            raw: None,
        });
        let mut ledger = Ledger::open(&path).expect("a new ledger");
        ledger.append(&Batch { events: events.collect(), ..Batch::default() }).expect("the policies append");
        drop(ledger);
        let settings = HookSettings { durability: Durability::Normal, ..HookSettings::default() };
        let hook = Hook::start(&path, settings).expect("the hook starts");
        let tokens_path = dir.path().join("tokens.toml");
        let tokens = format!(
            "[[token]]\nname = \"service\"\nsecret = \"{SERVICE_SECRET}\"\ntenants = [\"*\"]\n\n[[token]]\nname = \
             \"operator\"\nsecret = \"{ADMIN_SECRET}\"\ntenants = [\"*\"]\nadmin = true\n"
        );
        serve::tokens::write_private(&tokens_path, &tokens).expect("the token file");
        let tokens = serve::tokens::Tokens::read(&tokens_path).expect("the token file reads");
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        Server { runtime, router: serve::router(hook, tokens, None), _dir: dir }
    }

    /// The status and body of `method path` with `secret`'s token and `body` (JSON, or none).
    fn ask(&self, method: &str, path: &str, secret: &str, body: Option<Value>) -> (StatusCode, String) {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("authorization", format!("Bearer {secret}"))
            .header("content-type", "application/json");
        let body = body.map_or_else(Body::empty, |b| Body::from(b.to_string()));
        let response =
            self.runtime.block_on(self.router.clone().oneshot(request.body(body).unwrap())).expect("an answer");
        let status = response.status();
        let bytes = self.runtime.block_on(axum::body::to_bytes(response.into_body(), usize::MAX)).expect("a body");
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    fn json(&self, method: &str, path: &str, secret: &str, body: Option<Value>) -> (StatusCode, Value) {
        let (status, text) = self.ask(method, path, secret, body);
        (status, serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: not JSON ({e}): {text}")))
    }

    fn check(&self, tenant: &str, metric: &str, key: &str) -> StatusCode {
        let body = json!({"tenant": tenant, "metric": metric, "amount": 1, "idempotency_key": key});
        self.ask("POST", "/v1/check", SERVICE_SECRET, Some(body)).0
    }
}

// Proves every `/v1/admin/*` route refuses a token of every tenant without `admin = true` with the admin routes' 403
// (a ledger copy, bills and audits name every tenant), before reading anything, and lets an admin token past it.
#[test]
fn admin_routes_refuse_a_token_without_admin() {
    let server = Server::start();
    let routes: [(&str, &str, Option<Value>); 11] = [
        ("GET", "/v1/admin/backup", None),
        ("GET", "/v1/admin/backup?partition=0", None),
        ("GET", "/v1/admin/billing?period=2026-11", None),
        ("GET", "/v1/admin/billing/prepare?period=2026-11", None),
        // A close naming no shard: past the token, it closes nothing.
        ("POST", "/v1/admin/billing/close", Some(json!({"period": "2026-11", "watermarks": {}}))),
        ("GET", "/v1/admin/status", None),
        ("GET", "/v1/admin/verify", None),
        ("GET", "/v1/admin/audit/why?request_id=r-1", None),
        ("GET", "/v1/admin/audit/tenant?tenant=org-1&from=2026-11-01T00:00:00Z&to=2026-12-01T00:00:00Z", None),
        ("POST", "/v1/admin/reconcile", Some(json!({"as_of": "2026-12-01T00:00:00Z", "dry_run": true}))),
        (
            "POST",
            "/v1/admin/grants",
            Some(json!({"tenant": "org-1", "metric": "tokens", "amount": 5, "valid_from": "2026-11-01T00:00:00Z",
                        "valid_until": "2026-12-01T00:00:00Z", "reason": "r"})),
        ),
    ];
    let refused = json!({"error": "forbidden", "message": "this token is not an admin token (admin = true)"});
    for (method, path, body) in routes {
        let (status, mut answer) = server.json(method, path, SERVICE_SECRET, body.clone());
        // The members a client read before problem documents: RFC 9457's are beside them.
        for member in ["type", "title", "status", "detail"] {
            answer.as_object_mut().expect("an object").remove(member);
        }
        assert_eq!((status, &answer), (StatusCode::FORBIDDEN, &refused), "{method} {path}");
        let (status, answer) = server.ask(method, path, ADMIN_SECRET, body);
        assert_ne!(status, StatusCode::FORBIDDEN, "{method} {path} with an admin token: {answer}");
    }
}

// Proves a lease renewed or released under an old fencing token is refused 409 `stale_token` without the token the
// lease holds now: a stale holder learns nothing it could present next.
#[test]
fn a_stale_fencing_token_learns_nothing() {
    let server = Server::start();
    let acquire = json!({"tenant": "org-1", "metric": "jobs", "ttl_ms": 60_000, "idempotency_key": "l-1"});
    let (status, lease) = server.json("POST", "/v1/leases", SERVICE_SECRET, Some(acquire));
    assert_eq!(status, StatusCode::OK, "{lease}");
    let (id, token) = (lease["lease_id"].as_str().unwrap(), lease["fencing_token"].as_i64().unwrap());
    let stale = token - 1;
    let asks = [
        (format!("/v1/leases/{id}/renew"), json!({"fencing_token": stale, "ttl_ms": 60_000})),
        (format!("/v1/leases/{id}/release"), json!({"fencing_token": stale})),
    ];
    for (path, body) in asks {
        let (status, answer) = server.json("POST", &path, SERVICE_SECRET, Some(body));
        assert_eq!((status, answer["refused"].as_str()), (StatusCode::CONFLICT, Some("stale_token")), "{answer}");
        let fields: Vec<&str> = answer.as_object().unwrap().keys().map(String::as_str).collect();
        // RFC 9457's members first, `detail` the message: nothing more is said.
        let said = ["type", "title", "status", "detail", "refused", "reservation_id", "presented", "error", "message"];
        assert_eq!(fields, said, "{answer}");
        assert_eq!(answer["detail"], answer["message"], "{answer}");
        let message =
            format!("lease {id:?} is not held under fencing token {stale}: a stale holder renews and releases nothing");
        assert_eq!(answer["message"], json!(message), "a clear message, naming only what the caller sent");
    }
}

// Proves a caller inventing metric names mints no series: checks of 200 metrics no policy names are counted under
// the one metric `other`, while a metric a policy names keeps its own series, whoever asks it.
#[test]
fn invented_metrics_share_one_series() {
    let server = Server::start();
    for i in 0..200 {
        assert_eq!(server.check("org-1", &format!("invented-{i}"), &format!("k-{i}")), StatusCode::OK);
    }
    assert_eq!(server.check("org-1", "tokens", "k-tokens"), StatusCode::OK);
    assert_eq!(server.check("org-2", "tokens", "k-tokens"), StatusCode::OK, "no policy of org-2's: NO_POLICY");
    let (status, text) = server.ask("GET", "/metrics", SERVICE_SECRET, None);
    assert_eq!(status, StatusCode::OK);
    let mut series: Vec<&str> = text.lines().filter(|l| l.starts_with("quota_ledger_decisions_total{")).collect();
    series.sort();
    assert_eq!(
        series,
        [
            r#"quota_ledger_decisions_total{code="OK",metric="other",policy_version=""} 200"#,
            r#"quota_ledger_decisions_total{code="OK",metric="tokens",policy_version=""} 1"#,
            r#"quota_ledger_decisions_total{code="OK",metric="tokens",policy_version="1"} 1"#,
        ],
        "{text}"
    );
}
