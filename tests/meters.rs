//! Meters as finance and the services use them, through the real binary: a meter declared with `meter set`, a
//! UNIQUE_COUNT HARD limit under 64 concurrent HTTP clients of `serve`, and the billing export's figure for COUNT,
//! UNIQUE_COUNT, MAX, LATEST and a gauge's GB-hours across New York's November fallback, each against a computation of
//! the test's own.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;

use chrono::TimeZone;
use schemas::*;
use serde_json::{Value, json};
use support::*;

const SECRET: &str = "org-1-secret-0123456789";
const SEATS: i64 = 20;
const SUBJECTS: u64 = 60;

/// `quota-ledger serve` on a free port, stopped when dropped.
struct Server {
    _child: ChildGuard,
    base: String,
    agent: ureq::Agent,
}

impl Server {
    fn start(test: &TestLedger) -> Server {
        let tokens = test.file("tokens.toml");
        let text = format!("[[token]]\nsecret = \"{SECRET}\"\ntenants = [\"org-1\"]\n");
        serve::tokens::write_private(&tokens, &text).unwrap();
        let mut child = ChildGuard::new(
            Command::new(BIN)
                .args(["--ledger", test.path.to_str().unwrap(), "serve", "--listen", "127.0.0.1:0", "--tokens"])
                .arg(&tokens)
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("serve starts"),
        );
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).expect("serve prints its address");
        let base = line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("{line:?}")).to_string();
        let config = ureq::Agent::config_builder().http_status_as_error(false).build();
        Server { _child: child, base, agent: ureq::Agent::new_with_config(config) }
    }

    /// A check of one seat for `subject`: status and JSON body.
    fn check(&self, key: &str, subject: &str, amount: i64) -> (u16, Value) {
        let body =
            json!({"tenant": "org-1", "subject": subject, "metric": "seats", "amount": amount, "idempotency_key": key});
        let request = self.agent.post(format!("{}/v1/check", self.base));
        let mut response =
            request.header("Authorization", format!("Bearer {SECRET}")).send_json(&body).expect("an HTTP answer");
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().expect("a body");
        (status, serde_json::from_str(&text).unwrap_or_else(|e| panic!("{status} {text:?}: {e}")))
    }
}

fn policy(metric: &str, limit: i64, enforcement: Enforcement) -> Event {
    Event::Policy(PolicyEvent {
        header: header(&format!("policy-{metric}"), "2026-01-01T00:00:00Z", "org-1", metric),
        policy_id: format!("{metric}-monthly"),
        window: Window::MONTH,
        limit,
        enforcement,
        effective_from: at("2026-01-01T00:00:00Z"),
        ..hard_daily("unused", "org-1", limit)
    })
}

fn ingest_events(test: &TestLedger, name: &str, events: &[Event]) {
    let file = test.file(name);
    write_container(&file, events);
    test.ingest(&file);
}

/// `meter set` through the binary, effective since 2026.
fn meter_set(test: &TestLedger, metric: &str, aggregation: &str, field: Option<&str>) {
    let mut args = vec!["meter", "set", "--tenant", "org-1", "--metric", metric, "--aggregation", aggregation];
    args.extend(field.map(|f| ["--field", f]).into_iter().flatten());
    args.extend(["--effective-from", "2026-01-01T00:00:00Z", "--actor", "carol@finance", "--reason", "billed so"]);
    let said = test.run(&args).success().stdout_text();
    assert!(said.contains(aggregation), "{said}");
}

// Proves a UNIQUE_COUNT HARD limit holds under 64 concurrent HTTP clients: never more distinct subjects allowed than the
// limit, every request of a subject already counted allowed whatever its amount, every new subject past the limit
// refused; the ledger and the month's export count the same seats.
#[test]
fn sixty_four_clients_never_get_more_distinct_subjects_than_the_limit() {
    let test = TestLedger::new();
    ingest_events(&test, "policy.avro", &[policy("seats", SEATS, Enforcement::HARD)]);
    meter_set(&test, "seats", "UNIQUE_COUNT", Some("SUBJECT"));
    let server = Arc::new(Server::start(&test));
    let clients: Vec<_> = (0..64u64)
        .map(|c| {
            let server = Arc::clone(&server);
            std::thread::spawn(move || {
                let mut seed = (c + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                (0..10)
                    .map(|i| {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        let subject = format!("user-{}", seed % SUBJECTS);
                        let key = format!("c{c}-{i}");
                        let (status, body) = server.check(&key, &subject, (seed % 7) as i64 + 1);
                        (subject, status, body, key)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let answers: Vec<(String, u16, Value, String)> = clients.into_iter().flat_map(|c| c.join().unwrap()).collect();
    let allowed: BTreeSet<&str> = answers.iter().filter(|(_, s, ..)| *s == 200).map(|(u, ..)| u.as_str()).collect();
    let denied: BTreeSet<&str> = answers.iter().filter(|(_, s, ..)| *s == 429).map(|(u, ..)| u.as_str()).collect();
    let asked: BTreeSet<&str> = answers.iter().map(|(u, ..)| u.as_str()).collect();
    for (_, status, body, _) in &answers {
        assert!(*status == 200 || *status == 429, "{status} {body}");
        if *status == 429 {
            assert_eq!(body["code"], "QUOTA_EXCEEDED", "{body}");
        }
    }
    assert!(asked.len() as i64 > SEATS, "{} subjects asked, more than the {SEATS} seats", asked.len());
    assert_eq!(allowed.len() as i64, SEATS, "exactly the limit's subjects allowed: {allowed:?}");
    assert!(allowed.is_disjoint(&denied), "a subject counted is never refused, a refused one never let in later");
    let conn = rusqlite::Connection::open_with_flags(&test.path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let recorded: i64 = conn
        .query_row("SELECT COUNT(DISTINCT subject) FROM entries WHERE event_type = 'UsageEvent'", [], |r| r.get(0))
        .unwrap();
    assert_eq!(recorded, SEATS, "the ledger holds the allowed subjects' usage only");
    // Support reads a refusal in the meter's terms: distinct subjects, the request's one new.
    let (subject, _, _, key) = answers.iter().find(|(_, s, ..)| *s == 429).expect("a refusal");
    let why = test.run(&["audit", "why", key]).success().stdout_text();
    assert!(why.contains("Meter: UNIQUE_COUNT"), "{why}");
    assert!(why.contains(&format!("distinct subjects, not amounts; this request's subject is {subject}")), "{why}");
    let month = &Timestamp::now().to_string()[..7];
    let export = test.run(&["export", "billing", "--period", month, "--format", "jsonl"]).success().stdout_text();
    let row: Value = serde_json::from_str(export.lines().next().expect("a row")).unwrap();
    assert_eq!((row["metric"].as_str(), row["consumption"].as_i64()), (Some("seats"), Some(SEATS)), "{row}");
}

fn usage_of(id: &str, occurred_at: &str, metric: &str, subject: Option<&str>, quantity: i64) -> Event {
    Event::Usage(UsageEvent {
        header: Header { subject: subject.map(String::from), ..header(id, occurred_at, "org-1", metric) },
        quantity,
        request_id: None,
        attributes: BTreeMap::new(),
    })
}

// Proves the November export bills COUNT, UNIQUE_COUNT, MAX and LATEST meters as the test counts the month's events,
// ignoring those of October and December, a MAX of a gauge quota's metric billed although a gauge is never summed.
#[test]
fn the_export_bills_each_meter_as_counted_by_hand() {
    let test = TestLedger::new();
    let mut events = Vec::new();
    let mut expected: BTreeMap<&str, i64> = BTreeMap::new();
    let days = ["2026-10-31T23:59:59Z", "2026-11-01T00:00:00Z", "2026-11-15T12:00:00Z", "2026-11-30T23:59:59Z"];
    let mut november: Vec<(String, &str, i64)> = Vec::new();
    for (n, day) in days.iter().cycle().take(24).enumerate() {
        let subject = format!("user-{}", n % 5);
        let quantity = ((n * 37) % 11) as i64;
        for metric in ["api_calls", "active_users", "peak_gb", "plan_gb"] {
            events.push(usage_of(&format!("{metric}-{n}"), day, metric, Some(&subject), quantity));
        }
        if day.starts_with("2026-11") {
            november.push((subject, day, quantity));
        }
    }
    events.push(usage_of("late-dec", "2026-12-01T00:00:00Z", "peak_gb", None, 1_000));
    let Event::Policy(gauge) = policy("peak_gb", 100, Enforcement::HARD) else { unreachable!() };
    let gauge = Event::Policy(PolicyEvent { violation: Some(Violation::NO_INSERTS), ..gauge });
    ingest_events(&test, "gauge.avro", &[gauge]);
    expected.insert("api_calls", november.len() as i64);
    expected.insert("active_users", november.iter().map(|(s, ..)| s).collect::<BTreeSet<_>>().len() as i64);
    expected.insert("peak_gb", november.iter().map(|(.., q)| *q).max().unwrap());
    // LATEST: the last by event time; of two at one instant, the one recorded later (the later in the file).
    let last_at = november.iter().map(|(_, at, _)| *at).max().unwrap();
    expected.insert("plan_gb", november.iter().rfind(|(_, at, _)| *at == last_at).unwrap().2);
    ingest_events(&test, "usage.avro", &events);
    meter_set(&test, "api_calls", "COUNT", None);
    meter_set(&test, "active_users", "UNIQUE_COUNT", Some("SUBJECT"));
    meter_set(&test, "peak_gb", "MAX", None);
    meter_set(&test, "plan_gb", "LATEST", None);
    let export = test.run(&["export", "billing", "--period", "2026-11", "--format", "jsonl"]).success().stdout_text();
    let billed: BTreeMap<String, i64> = export
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .map(|row| (row["metric"].as_str().unwrap().to_string(), row["consumption"].as_i64().unwrap()))
        .collect();
    let expected: BTreeMap<String, i64> = expected.into_iter().map(|(m, q)| (m.to_string(), q)).collect();
    assert_eq!(billed, expected, "{export}");
}

// Proves a storage gauge's TIME_WEIGHTED_SUM counts real elapsed hours across New York's November fallback: a level
// held from local midnight on November 1st to local midnight on the 2nd is held 25 hours, not 24, and the level
// reported in October is held into November until the next report.
#[test]
fn gb_hours_count_the_real_hours_of_a_fallback_day() {
    let test = TestLedger::new();
    let new_york: Tz = "America/New_York".parse().unwrap();
    let local = |day: u32| {
        let instant = new_york.with_ymd_and_hms(2026, 11, day, 0, 0, 0).single().expect("midnight is unambiguous");
        Timestamp(instant.timestamp_micros())
    };
    // 40 GB before the month (held into it), 100 GB through the fallback day, 10 GB from local midnight on the 2nd.
    let levels = [(at("2026-10-20T00:00:00Z"), 40), (local(1), 100), (local(2), 10)];
    let events: Vec<Event> = levels
        .iter()
        .enumerate()
        .map(|(n, (at, gb))| usage_of(&format!("gb-{n}"), &at.to_string(), "storage_gb", None, *gb))
        .collect();
    ingest_events(&test, "levels.avro", &events);
    meter_set(&test, "storage_gb", "TIME_WEIGHTED_SUM", None);
    let hour = 3_600_000_000i128;
    let (start, end) = (at("2026-11-01T00:00:00Z").micros(), at("2026-12-01T00:00:00Z").micros());
    let fallback_day = i128::from(local(2).micros() - local(1).micros());
    assert_eq!(fallback_day, 25 * hour, "New York's November 1st is 25 hours long");
    let integral =
        40 * i128::from(local(1).micros() - start) + 100 * fallback_day + 10 * i128::from(end - local(2).micros());
    let export = test.run(&["export", "billing", "--period", "2026-11", "--format", "jsonl"]).success().stdout_text();
    let row: Value = serde_json::from_str(export.lines().next().expect("a row")).unwrap();
    assert_eq!(row["consumption"].as_i64(), Some((integral / hour) as i64), "{row}");
    assert_eq!(integral / hour, 40 * 4 + 100 * 25 + 10 * (28 * 24 + 19), "by hand: 4 h, 25 h and the rest");
}
