//! Kafka brokers for the end-to-end tests: librdkafka's mock cluster (`quota-ledger broker mock`, a process of
//! its own) and Tansu, a real Kafka-compatible broker process, both on loopback.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{BIN, ChildGuard};

/// How long a broker may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A broker process, stopped when dropped.
pub struct Broker {
    _child: ChildGuard,
    pub bootstrap: String,
    pub kind: &'static str,
}

/// Waits until `child` accepts connections on `address`: true, or false when it exited first.
fn wait_for_port(address: &str, child: &mut Child, what: &str) -> bool {
    let started = Instant::now();
    let port: u16 = address.rsplit(':').next().and_then(|p| p.parse().ok()).expect("host:port");
    while TcpStream::connect(address).is_err() || !testkit::ports::listens(child.id(), port) {
        if let Some(status) = child.try_wait().expect("the broker's status") {
            eprintln!("{what} exited with {status} before accepting connections on {address}");
            return false;
        }
        assert!(
            started.elapsed() < START_TIMEOUT,
            "{what} did not accept connections on {address} within {START_TIMEOUT:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

impl Broker {
    /// `quota-ledger broker mock`: the embedded broker, with the topics of contract §2 (3 partitions each).
    pub fn mock() -> Broker {
        Broker::mock_with_partitions(3)
    }

    /// `quota-ledger broker mock --partitions P`: the embedded broker, with the topics of contract §2.
    pub fn mock_with_partitions(partitions: u32) -> Broker {
        let partitions = partitions.to_string();
        let mut child = ChildGuard::new(
            Command::new(BIN)
                .args(["broker", "mock", "--partitions", &partitions])
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("quota-ledger broker mock starts"),
        );
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped"))
            .read_line(&mut line)
            .expect("the broker prints its address");
        let bootstrap = line.trim().to_string();
        assert!(!bootstrap.is_empty(), "broker mock printed no address");
        let address = bootstrap.split(',').next().expect("an address");
        assert!(wait_for_port(address, &mut child, "broker mock"), "broker mock exited: see above");
        Broker { _child: child, bootstrap, kind: "mock" }
    }

    /// Tansu on loopback with the given storage engine (`memory://tansu/` or `sqlite://FILE`), the topics of
    /// contract §2 created through `quota-ledger topics create`. `None` only when `QUOTA_LEDGER_SKIP_TANSU=1` says to
    /// skip; a missing `tansu` otherwise fails the test with the command that installs it.
    pub fn tansu(storage: &str, port: Option<u16>) -> Option<Broker> {
        Broker::tansu_in(storage, port, None)
    }

    /// Tansu on its memory engine with only the topics `names` (created through the admin API): a broker that
    /// lacks some of contract §2's topics and, as Tansu does, does not create them on first use.
    pub fn tansu_with_only(names: &[&str]) -> Option<Broker> {
        let broker = Broker::tansu_without_topics("memory://tansu/", None, None)?;
        let started = Instant::now();
        while let Err(error) = kafka::admin::create_topics(&broker.bootstrap, names, 3, &[]) {
            assert!(started.elapsed() < START_TIMEOUT, "creating {names:?} on {} failed: {error}", broker.bootstrap);
            std::thread::sleep(Duration::from_millis(200));
        }
        Some(broker)
    }

    fn tansu_in(storage: &str, port: Option<u16>, dir: Option<&Path>) -> Option<Broker> {
        let broker = Broker::tansu_without_topics(storage, port, dir)?;
        broker.create_topics(3);
        Some(broker)
    }

    /// [`Broker::tansu_sqlite`] with topics of `partitions` partitions.
    pub fn tansu_sqlite_partitions(file: &Path, partitions: u32) -> Option<Broker> {
        let name = file.file_name().expect("a file name").to_str().expect("UTF-8");
        let broker = Broker::tansu_without_topics(&format!("sqlite://{name}"), None, file.parent())?;
        broker.create_topics(partitions);
        Some(broker)
    }

    fn tansu_without_topics(storage: &str, port: Option<u16>, dir: Option<&Path>) -> Option<Broker> {
        if !testkit::tansu() {
            return None;
        }
        // Tansu advertises the address it is given, so it cannot bind port 0 (`testkit::ports`). A port given is the
        // one a restarted broker must come back on; a port picked here was free a moment ago, and another is tried
        // when something else took it first (Tansu exits).
        let tries = if port.is_some() { 1 } else { testkit::ports::TRIES };
        for _ in 0..tries {
            let port = port.unwrap_or_else(|| testkit::ports::free_a_moment_ago("127.0.0.1"));
            let url = format!("tcp://127.0.0.1:{port}");
            let mut command = Command::new("tansu");
            if let Some(dir) = dir {
                command.current_dir(dir);
            }
            let mut child = ChildGuard::new(
                command
                    .args([
                        "broker",
                        "--listener-url",
                        &url,
                        "--advertised-listener-url",
                        &url,
                        "--storage-engine",
                        storage,
                    ])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("tansu starts"),
            );
            let bootstrap = format!("127.0.0.1:{port}");
            if wait_for_port(&bootstrap, &mut child, "tansu") {
                return Some(Broker { _child: child, bootstrap, kind: "tansu" });
            }
        }
        panic!("tansu did not start on any of {tries} ports (see above)");
    }

    /// Tansu keeping its data in a SQLite file, so that a restart on the same port finds it again. Tansu 0.6.0
    /// reads the path after `sqlite://` relative to its working directory, so it runs in the file's directory.
    pub fn tansu_sqlite(file: &Path, port: Option<u16>) -> Option<Broker> {
        let name = file.file_name().expect("a file name").to_str().expect("UTF-8");
        Broker::tansu_in(&format!("sqlite://{name}"), port, file.parent())
    }

    pub fn port(&self) -> u16 {
        self.bootstrap.rsplit(':').next().and_then(|p| p.parse().ok()).expect("host:port")
    }

    fn create_topics(&self, partitions: u32) {
        let started = Instant::now();
        loop {
            let output = Command::new(BIN)
                .args(["topics", "create", "--brokers", &self.bootstrap, "--partitions", &partitions.to_string()])
                .output()
                .expect("quota-ledger topics create runs");
            if output.status.success() {
                return;
            }
            assert!(
                started.elapsed() < START_TIMEOUT,
                "topics create on {} failed: {}",
                self.bootstrap,
                String::from_utf8_lossy(&output.stderr)
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

/// Event ids of every message on `topic`, read from the beginning until `expected` arrived (or 30 s passed),
/// then half a second more: anything beyond `expected` is a message published twice.
pub fn event_ids_on_topic(bootstrap: &str, topic: &str, expected: usize) -> Vec<String> {
    let catalog = schemas::Catalog::builtin();
    payloads_on_topic(bootstrap, topic, expected)
        .iter()
        .map(|payload| {
            let decoded = catalog.decode_single_object(payload, None).expect("a single-object event");
            decoded.event.event_id().to_string()
        })
        .collect()
}

/// The payload of every message on `topic`, every partition read from the beginning until `expected` arrived (or
/// 30 s passed), then half a second more: anything beyond `expected` is a message published twice.
pub fn payloads_on_topic(bootstrap: &str, topic: &str, expected: usize) -> Vec<Vec<u8>> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "e2e-topic-reader")
        .set("enable.auto.commit", "false")
        .create()
        .expect("a consumer");
    let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).expect("topic metadata");
    let mut assignment = TopicPartitionList::new();
    for partition in metadata.topics()[0].partitions() {
        assignment.add_partition_offset(topic, partition.id(), Offset::Beginning).expect("an offset");
    }
    consumer.assign(&assignment).expect("assigned");
    let mut payloads = Vec::new();
    let started = Instant::now();
    let mut quiet_since = None;
    loop {
        match consumer.poll(Duration::from_millis(100)) {
            Some(message) => {
                let message = message.expect("a message");
                payloads.push(message.payload().expect("a payload").to_vec());
                quiet_since = None;
            }
            None if payloads.len() >= expected => {
                let since = *quiet_since.get_or_insert_with(Instant::now);
                if since.elapsed() > Duration::from_millis(500) {
                    break;
                }
            }
            None if started.elapsed() > Duration::from_secs(30) => break,
            None => {}
        }
    }
    payloads
}
