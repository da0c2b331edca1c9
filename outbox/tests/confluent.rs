//! The outbox in the Confluent wire format against a schema registry stub made here (a loopback HTTP server that
//! records what is POSTed and answers an id, or refuses): each (topic, schema) registered once under `{topic}-value`,
//! every entry sent as a zero byte, that id and its body, which decode back to the ledger's events; and a registry
//! that refuses (409, 422, 500) or is not there leaves every entry pending, nothing sent in either format.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafka::admin::EmbeddedBroker;
use kafka::schema_registry::RegistryUrl;
use outbox::{OutboxFormat, OutboxTopics, Publisher};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use schemas::{Catalog, EventType};

/// What the stub answers a registration.
#[derive(Clone, Copy)]
enum Answer {
    /// 200 with an id: the same one for a schema it registered before, as a registry does.
    Register,
    /// This status with Confluent's error body.
    Refuse(u16),
    /// This status for this subject's registrations; the others registered.
    RefuseSubject(&'static str, u16),
}

/// What the stub was asked, and how it answers.
struct Registry {
    answer: Answer,
    /// Each POST: its path, and the schema text of its body.
    posted: Vec<(String, String)>,
    /// The ids it gave, by schema text.
    ids: BTreeMap<String, u32>,
}

impl Registry {
    /// The answer to a POST to `path` with `body`: status and body.
    fn answer(&mut self, path: &str, body: &str) -> (u16, String) {
        let schema = serde_json::from_str::<serde_json::Value>(body).unwrap()["schema"].as_str().unwrap().to_string();
        self.posted.push((path.to_string(), schema.clone()));
        let refused = |status| (status, format!(r#"{{"error_code": {status}, "message": "refused by the stub"}}"#));
        match self.answer {
            Answer::Refuse(status) => refused(status),
            Answer::RefuseSubject(subject, status) if path.contains(&format!("/{subject}/")) => refused(status),
            Answer::Register | Answer::RefuseSubject(..) => {
                let next = 100 + self.ids.len() as u32;
                let id = *self.ids.entry(schema).or_insert(next);
                (200, format!(r#"{{"id": {id}}}"#))
            }
        }
    }
}

/// The stub on loopback, one request per connection: its URL and its state.
fn registry_stub() -> (String, Arc<Mutex<Registry>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let registry =
        Arc::new(Mutex::new(Registry { answer: Answer::Register, posted: Vec::new(), ids: BTreeMap::new() }));
    let state = Arc::clone(&registry);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let stream = stream.unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let mut length = 0;
            let mut content_type = String::new();
            loop {
                let mut header = String::new();
                reader.read_line(&mut header).unwrap();
                let Some((name, value)) = header.trim_end().split_once(": ") else { break };
                match name.to_ascii_lowercase().as_str() {
                    "content-length" => length = value.parse().unwrap(),
                    "content-type" => content_type = value.to_string(),
                    _ => {}
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            let path = line.split(' ').nth(1).unwrap().to_string();
            assert!(line.starts_with("POST "), "{line}");
            assert_eq!(content_type, "application/vnd.schemaregistry.v1+json");
            let (status, answer) = state.lock().unwrap().answer(&path, &String::from_utf8(body).unwrap());
            let reply = format!(
                "HTTP/1.1 {status} X\r\nContent-Type: application/vnd.schemaregistry.v1+json\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{answer}",
                answer.len()
            );
            (&stream).write_all(reply.as_bytes()).unwrap();
        }
    });
    (url, registry)
}

/// The enforcement hook allows a check of each tenant of `tenants` on the ledger at `path`: a decision and its usage
/// in the outbox for each.
fn checks(path: &std::path::Path, tenants: &[&str]) {
    let hook = hook::Hook::start(path, hook::HookSettings::default()).unwrap();
    for tenant in tenants {
        let ask = hook::Request::one(schemas::Who::tenant(*tenant), "requests", 1, format!("k-{tenant}"));
        assert!(hook.check(ask).unwrap().allowed());
    }
}

/// Every message of `topic` (one partition), read from its start until `expected` have come.
fn read_topic(bootstrap: &str, topic: &str, expected: usize) -> Vec<Vec<u8>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "outbox-confluent-reader")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    assignment.add_partition_offset(topic, 0, Offset::Beginning).unwrap();
    consumer.assign(&assignment).unwrap();
    let mut read = Vec::new();
    let started = Instant::now();
    while read.len() < expected {
        assert!(started.elapsed() < Duration::from_secs(30), "{} of {expected} messages of {topic}", read.len());
        if let Some(message) = consumer.poll(Duration::from_millis(100)) {
            read.push(message.unwrap().payload().unwrap().to_vec());
        }
    }
    read
}

/// The high watermark of `topic`'s one partition: 0 when nothing was ever sent to it (or it does not exist).
fn messages_on(bootstrap: &str, topic: &str) -> i64 {
    let consumer: BaseConsumer = ClientConfig::new().set("bootstrap.servers", bootstrap).create().unwrap();
    consumer.fetch_watermarks(topic, 0, Duration::from_secs(10)).map_or(0, |(_, high)| high)
}

// Proves that a registry refusing the schema (409, 422, 500) or not there leaves every entry pending and sends
// nothing, in either format, with an error naming the registry and its answer; that a topic whose schema is refused
// waits while the others are published; that once it answers each topic's schema is registered once under its
// subject, every entry goes out as 00, the id and the body the ledger holds, and a later publish reuses the ids.
#[test]
fn entries_carry_the_registered_id_and_a_refusal_leaves_them_pending() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    checks(&path, &["org-1", "org-2", "org-3"]);
    let mut ledger = ledger::Ledger::open(&path).unwrap();
    let expected = ledger.outbox_pending_after(None, 100).unwrap();
    assert_eq!(expected.len(), 6, "three decisions and their usage");
    let broker = EmbeddedBroker::start(1).unwrap();
    let bootstrap = broker.bootstrap_servers();
    let topics = OutboxTopics::defaults();
    let attempt = Duration::from_secs(10);

    let nobody = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let absent = RegistryUrl::parse(&format!("http://{nobody}"), &trust::Trust::system()).unwrap();
    let mut publisher = Publisher::new(&bootstrap, &[], OutboxFormat::Confluent(absent), attempt).unwrap();
    let report = publisher.publish(&mut ledger, &topics, attempt).unwrap();
    assert_eq!((report.published, report.pending, report.awaiting_registry), (0, 6, 6), "{report:?}");
    let error = report.last_error.unwrap();
    assert!(error.contains(&format!("the schema registry at http://{nobody} did not register")), "{error}");

    let (url, registry) = registry_stub();
    let format = OutboxFormat::Confluent(RegistryUrl::parse(&url, &trust::Trust::system()).unwrap());
    for status in [409, 422, 500] {
        registry.lock().unwrap().answer = Answer::Refuse(status);
        let mut publisher = Publisher::new(&bootstrap, &[], format.clone(), attempt).unwrap();
        let report = publisher.publish(&mut ledger, &topics, attempt).unwrap();
        assert_eq!((report.published, report.pending, report.awaiting_registry), (0, 6, 6), "{report:?}");
        let error = report.last_error.unwrap();
        assert!(error.contains(&format!("HTTP {status}")) && error.contains("refused by the stub"), "{error}");
        assert!(error.contains("subject quota.decisions-value") && error.contains("subject quota.usage-value"));
    }
    assert_eq!(registry.lock().unwrap().posted.len(), 6, "each topic asked once a publish");
    for topic in ["quota.decisions", "quota.usage"] {
        assert_eq!(messages_on(&bootstrap, topic), 0, "nothing of {topic} was sent");
    }

    registry.lock().unwrap().answer = Answer::RefuseSubject("quota.usage-value", 409);
    registry.lock().unwrap().posted.clear();
    let mut publisher = Publisher::new(&bootstrap, &[], format, attempt).unwrap();
    let report = publisher.publish(&mut ledger, &topics, attempt).unwrap();
    assert_eq!((report.published, report.pending, report.awaiting_registry), (3, 3, 3), "{report:?}");
    let error = report.last_error.unwrap();
    assert!(error.contains("subject quota.usage-value") && !error.contains("quota.decisions"), "{error}");

    registry.lock().unwrap().answer = Answer::Register;
    let report = publisher.publish(&mut ledger, &topics, attempt).unwrap();
    assert_eq!((report.published, report.pending, report.awaiting_registry), (3, 0, 0), "{report:?}");
    assert_eq!(report.last_error, None);
    let posted = registry.lock().unwrap().posted.clone();
    let paths: Vec<&str> = posted.iter().map(|(path, _)| path.as_str()).collect();
    let (decisions, usage) = ("/subjects/quota.decisions-value/versions", "/subjects/quota.usage-value/versions");
    assert_eq!(paths, [decisions, usage, usage], "the decisions' schema registered once, the usage's asked again");

    let catalog = Catalog::builtin();
    let ids = registry.lock().unwrap().ids.clone();
    for (schema, id) in &ids {
        schemas::confluent::register(*id, schema).expect("the registered text is a schema of the catalog");
    }
    for (topic, event_type) in [("quota.decisions", EventType::DecisionEvent), ("quota.usage", EventType::UsageEvent)] {
        let held: Vec<&ledger::OutboxEntry> = expected.iter().filter(|e| e.event_type == event_type).collect();
        let sent = read_topic(&bootstrap, topic, held.len());
        let id = ids[&posted.iter().rfind(|(path, _)| path.contains(topic)).unwrap().1];
        for (message, entry) in sent.iter().zip(&held) {
            assert_eq!((message[0], &message[1..5]), (0, &id.to_be_bytes()[..]), "{topic}");
            assert_eq!(message[5..], entry.message[10..], "the body the ledger holds");
            let decoded = catalog.decode_single_object(message, Some(event_type)).unwrap();
            assert_eq!(decoded.event.header().event_id, entry.event_id);
        }
    }

    // The ids are kept: a later publish of the same publisher asks the registry nothing.
    checks(&path, &["org-4"]);
    let report = publisher.publish(&mut ledger, &topics, attempt).unwrap();
    assert_eq!((report.published, report.pending), (2, 0), "{report:?}");
    assert_eq!(registry.lock().unwrap().posted.len(), 3, "no registration more");
}
