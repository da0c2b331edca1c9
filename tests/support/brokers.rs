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

/// librdkafka's mock cluster in the test's own process, with the topics `broker mock` makes (contract §2's and
/// `quota.checkpoints` of 3 partitions, `quota.routing` of one), keeping every request its broker receives: what a test
/// waits on when the only sign of what a client did is a request it sent. A consumer whose application cannot poll
/// leaves its group with a LeaveGroup request; librdkafka's log line saying so waits for the next poll.
pub struct TrackedMock {
    /// The client the mock cluster belongs to: the cluster lives as long as it does.
    holder: rdkafka::producer::BaseProducer,
    pub bootstrap: String,
}

impl TrackedMock {
    pub fn start() -> TrackedMock {
        let holder: rdkafka::producer::BaseProducer =
            rdkafka::ClientConfig::new().set("test.mock.num.brokers", "1").create().expect("a mock cluster");
        let bootstrap = {
            use rdkafka::producer::Producer;
            let cluster = holder.client().mock_cluster().expect("the client's mock cluster");
            let checkpoints = [kafka::checkpoints::CHECKPOINTS_TOPIC];
            for name in kafka::topics::all_default_topic_names().into_iter().chain(checkpoints) {
                cluster.create_topic(name, 3, 1).expect("a topic of the mock cluster");
            }
            cluster.create_topic(kafka::routing::ROUTING_TOPIC, 1, 1).expect("the routing topic");
            cluster.bootstrap_servers()
        };
        let mock = TrackedMock { holder, bootstrap };
        // SAFETY: the mock cluster of a client that lives as long as `mock`.
        unsafe { rdkafka::bindings::rd_kafka_mock_start_request_tracking(mock.cluster()) };
        mock
    }

    fn cluster(&self) -> *mut rdkafka::bindings::rd_kafka_mock_cluster_t {
        use rdkafka::producer::Producer;
        // SAFETY: the client is alive, and was made with `test.mock.num.brokers`: its mock cluster is not null.
        let cluster = unsafe { rdkafka::bindings::rd_kafka_handle_mock_cluster(self.holder.client().native_ptr()) };
        assert!(!cluster.is_null(), "the client has a mock cluster");
        cluster
    }

    /// How many `api` requests the broker has received since it started.
    pub fn requests(&self, api: rdkafka::types::RDKafkaApiKey) -> usize {
        use rdkafka::bindings::*;
        let mut count = 0;
        // SAFETY: the array and the requests in it are copies this call owns; each is read, then all destroyed.
        unsafe {
            let requests = rd_kafka_mock_get_requests(self.cluster(), &mut count);
            if requests.is_null() {
                return 0;
            }
            let of_api = std::slice::from_raw_parts(requests, count)
                .iter()
                .filter(|request| rd_kafka_mock_request_api_key(**request) == api as i16)
                .count();
            rd_kafka_mock_request_destroy_array(requests, count);
            of_api
        }
    }
}

/// The (low, high) watermarks of each partition of `topic`, in partition order.
pub fn watermarks(bootstrap: &str, topic: &str) -> Vec<(i64, i64)> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer =
        rdkafka::ClientConfig::new().set("bootstrap.servers", bootstrap).create().expect("a consumer");
    let timeout = Duration::from_secs(10);
    let metadata = consumer.fetch_metadata(Some(topic), timeout).expect("topic metadata");
    let mut partitions: Vec<i32> = metadata.topics()[0].partitions().iter().map(|p| p.id()).collect();
    partitions.sort();
    partitions
        .into_iter()
        .map(|partition| consumer.fetch_watermarks(topic, partition, timeout).expect("the watermarks"))
        .collect()
}

/// How many records `topic` holds: each partition's high watermark less its low one.
pub fn records_on(bootstrap: &str, topic: &str) -> i64 {
    watermarks(bootstrap, topic).iter().map(|(low, high)| high - low).sum()
}

/// How long reading a topic to its end may take.
const READ_WHOLE_MS: u64 = 60_000;

/// Every message on `topic` as (partition, key, payload), read from the start of each partition to the high watermark
/// it had when the read began (`kafka::whole_topic`): exact once the producers the test waited for are done.
pub fn messages_on(bootstrap: &str, topic: &str) -> Vec<(u32, Option<Vec<u8>>, Vec<u8>)> {
    let mut config = rdkafka::ClientConfig::new();
    config.set("bootstrap.servers", bootstrap).set("group.id", "e2e-topic-reader").set("enable.auto.commit", "false");
    let mut messages = Vec::new();
    kafka::whole_topic::read(&config, bootstrap, topic, READ_WHOLE_MS, |record| {
        let partition = u32::try_from(record.partition).expect("a partition number");
        messages.push((partition, record.key.map(<[u8]>::to_vec), record.payload.expect("a payload").to_vec()));
    })
    .unwrap_or_else(|e| panic!("{topic} was not read to its end: {}", ledger::causes(&*e)));
    messages
}

/// Event ids of every message on `topic` once it holds `expected` records (or 30 s passed: the caller's assertion
/// then says which are missing), read to the high watermarks it then had ([`messages_on`]): anything beyond
/// `expected` is a message published twice.
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

/// The payload of every message on `topic` once it holds `expected` records (or 30 s passed), read to the high
/// watermarks it then had ([`messages_on`]).
pub fn payloads_on_topic(bootstrap: &str, topic: &str, expected: usize) -> Vec<Vec<u8>> {
    let expected = i64::try_from(expected).expect("a count of records");
    let started = Instant::now();
    while records_on(bootstrap, topic) < expected && started.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(100));
    }
    messages_on(bootstrap, topic).into_iter().map(|(_, _, payload)| payload).collect()
}
