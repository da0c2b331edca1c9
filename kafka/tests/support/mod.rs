//! Brokers for the kafka crate's tests: librdkafka's mock cluster, and Tansu (a real Kafka-protocol broker) on its
//! SQLite engine, skipped with `QUOTA_LEDGER_SKIP_TANSU=1` as the workspace's other real-broker tests are.

#![allow(dead_code)]

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A Tansu process in a temporary directory, killed when dropped.
pub struct Tansu {
    child: Child,
    _dir: tempfile::TempDir,
    pub bootstrap: String,
}

impl Drop for Tansu {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Tansu {
    /// Tansu on `sqlite://tansu.db` in a temporary directory with `topics` created (`partitions` each), or `None`
    /// when `QUOTA_LEDGER_SKIP_TANSU=1`.
    pub fn start(topics: &[&str], partitions: i32) -> Option<Tansu> {
        if !testkit::tansu() {
            return None;
        }
        let tansu = (0..testkit::ports::TRIES)
            .find_map(|_| Tansu::listening())
            .unwrap_or_else(|| panic!("tansu lost each of {} ports to another process", testkit::ports::TRIES));
        let started = Instant::now();
        while let Err(error) = kafka::admin::create_topics(&tansu.bootstrap, topics, partitions, &[]) {
            assert!(started.elapsed() < START_TIMEOUT, "creating {topics:?} on {} failed: {error}", tansu.bootstrap);
            std::thread::sleep(Duration::from_millis(200));
        }
        Some(tansu)
    }

    /// Tansu on a port that was free a moment ago (it advertises the address it is given, so it cannot bind port 0),
    /// once it listens there; `None` when another process took the port first and Tansu exited.
    fn listening() -> Option<Tansu> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let port = testkit::ports::free_a_moment_ago("127.0.0.1");
        let url = format!("tcp://127.0.0.1:{port}");
        let child = Command::new("tansu")
            // Tansu 0.6.0 reads the path after `sqlite://` relative to its working directory.
            .current_dir(dir.path())
            .args(["broker", "--listener-url", &url, "--advertised-listener-url", &url])
            .args(["--storage-engine", "sqlite://tansu.db"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("tansu starts");
        let mut tansu = Tansu { child, _dir: dir, bootstrap: format!("127.0.0.1:{port}") };
        let started = Instant::now();
        while TcpStream::connect(&tansu.bootstrap).is_err() || !testkit::ports::listens(tansu.child.id(), port) {
            if tansu.child.try_wait().expect("tansu's status").is_some() {
                return None;
            }
            assert!(started.elapsed() < START_TIMEOUT, "tansu did not listen on {}", tansu.bootstrap);
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(tansu)
    }
}
