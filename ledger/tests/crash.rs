//! Crash test: a child appending batches is killed with SIGKILL at random instants; after each restart the
//! ledger opens, the chain verifies, and it holds exactly the batches whose offsets it stored: none lost, none
//! twice.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ledger::{Batch, Incoming, Ledger, Origin, SourceOffset};
use schemas::{Event, Header, Timestamp, UsageEvent};

const TOPIC: &str = "crash.test";
const BATCHES: u64 = 3_000;
const BATCH_EVENTS: u64 = 40;
/// Kills of a child that was still appending; SIGKILLs that land after the child finished do not count.
const KILLS: u32 = 24;
const CHILD_ENV: &str = "QUOTA_LEDGER_CRASH_CHILD";

/// The j-th event of batch i. Every 8th repeats an event of the previous batch exactly (a duplicate); every
/// 13th repeats one with another quantity (a conflicting duplicate).
fn event(i: u64, j: u64) -> Event {
    let (id_batch, id_index, quantity) = match j {
        _ if i > 0 && j % 8 == 7 => (i - 1, j, (i - 1) * 7 + j),
        _ if i > 0 && j % 13 == 12 => (i - 1, j - 1, 1_000_000 + i),
        _ => (i, j, i * 7 + j),
    };
    Event::Usage(UsageEvent {
        header: Header {
            event_id: format!("e-{id_batch}-{id_index}"),
            occurred_at: Timestamp(1_793_491_200_000_000 + (id_batch * 1_000 + id_index) as i64),
            tenant: format!("org-{}", id_index % 5),
            subject: None,
            metric: "requests".into(),
            source: "crash-test".into(),
            api_key: None,
            project: None,
        },
        quantity: quantity as i64,
        request_id: None,
        attributes: BTreeMap::new(),
    })
}

fn batch(i: u64) -> Batch {
    Batch {
        events: (0..BATCH_EVENTS)
            .map(|j| Incoming {
                event: event(i, j),
                origin: Origin::Kafka { topic: TOPIC.into(), partition: 0, offset: (i * BATCH_EVENTS + j) as i64 },
                raw: None,
            })
            .collect(),
        rejected: vec![],
        offsets: vec![SourceOffset { topic: TOPIC.into(), partition: 0, next_offset: ((i + 1) * BATCH_EVENTS) as i64 }],
        replayed_from: vec![],
        outbox: false,
        file_progress: None,
        forwarded: vec![],
    }
}

/// The batches a ledger has committed, from the offset it stored with them.
fn committed_batches(ledger: &Ledger) -> u64 {
    let offsets = ledger.offsets().unwrap();
    let next = offsets.iter().find(|o| o.topic == TOPIC).map_or(0, |o| o.next_offset);
    assert_eq!(next as u64 % BATCH_EVENTS, 0, "offsets advance by whole batches");
    next as u64 / BATCH_EVENTS
}

/// What the first `batches` batches must leave: recorded event_ids with their quantities, and the counts.
struct Expected {
    recorded: BTreeMap<String, i64>,
    duplicates: u64,
    conflicts: u64,
}

fn expected(batches: u64) -> Expected {
    let mut seen: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    let (mut duplicates, mut conflicts) = (0, 0);
    for i in 0..batches {
        for j in 0..BATCH_EVENTS {
            let Event::Usage(usage) = event(i, j) else { unreachable!() };
            let copies = seen.entry(usage.header.event_id.clone()).or_default();
            match copies.contains(&usage.quantity) {
                true => duplicates += 1,
                false if copies.is_empty() => copies.push(usage.quantity),
                false => {
                    conflicts += 1;
                    copies.push(usage.quantity);
                }
            }
        }
    }
    let recorded = seen.into_iter().map(|(id, copies)| (id, copies[0])).collect();
    Expected { recorded, duplicates, conflicts }
}

fn recorded_events(ledger: &Ledger) -> BTreeMap<String, i64> {
    let mut recorded = BTreeMap::new();
    ledger
        .for_each_usage(|row| {
            recorded.insert(row.event_id.to_string(), row.quantity);
        })
        .unwrap();
    recorded
}

fn check_ledger(path: &Path, printed_committed: Option<u64>) -> u64 {
    let ledger = Ledger::open(path).expect("the ledger opens after a SIGKILL");
    let verify = ledger.verify().unwrap();
    assert_eq!(verify.first_bad, None, "the chain holds after a SIGKILL");
    let committed = committed_batches(&ledger);
    if let Some(printed) = printed_committed {
        assert!(committed > printed, "batch {printed} was reported committed but the ledger stops at {committed}");
    }
    let want = expected(committed);
    let status = ledger.status().unwrap();
    assert_eq!(recorded_events(&ledger), want.recorded, "exactly the events of the committed batches, once");
    assert_eq!(status.events_recorded, want.recorded.len() as u64);
    assert_eq!(status.duplicates, want.duplicates);
    assert_eq!(status.conflicts, want.conflicts);
    committed
}

/// splitmix64, for kill delays that differ per run but can be replayed from the printed seed.
fn next_random(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Starts this test binary as the appending child.
fn spawn_child(path: &Path) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "crash_child", "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn sigkill_at_random_instants_loses_nothing_and_doubles_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let seed = std::env::var("CRASH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    eprintln!("crash test seed {seed} (CRASH_SEED={seed} replays the kill delays)");
    let mut random = seed;
    let (mut kills, mut restarts) = (0, 0);
    while kills < KILLS {
        restarts += 1;
        assert!(restarts < KILLS * 4, "the child finished too often before being killed: raise BATCHES");
        let mut child = spawn_child(&path);
        let stdout = child.stdout.take().unwrap();
        // The batches this child reported committed, counted as they are printed.
        let progress = Arc::new(AtomicU64::new(0));
        let seen = Arc::clone(&progress);
        let reader = std::thread::spawn(move || {
            BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .filter_map(|l| l.strip_prefix("committed ")?.parse().ok())
                .inspect(|_| {
                    seen.fetch_add(1, Ordering::Relaxed);
                })
                .last()
        });
        // Kill after a random number of this child's batches (a machine's speed does not change how many kills
        // land before the stream ends), then up to 3 ms more (into the next batch); one kill in eight comes
        // before the first batch, while the child starts and opens (and recovers) the ledger.
        let after_batches = match next_random(&mut random) % 8 {
            0 => 0,
            _ => 1 + next_random(&mut random) % (BATCHES / KILLS as u64),
        };
        let delay = Duration::from_micros(next_random(&mut random) % 3_000);
        let give_up = Instant::now() + Duration::from_secs(60);
        while progress.load(Ordering::Relaxed) < after_batches
            && child.try_wait().unwrap().is_none()
            && Instant::now() < give_up
        {
            std::thread::sleep(Duration::from_micros(200));
        }
        std::thread::sleep(delay);
        let still_running = child.try_wait().unwrap().is_none();
        child.kill().unwrap(); // SIGKILL on Unix
        child.wait().unwrap();
        let printed: Option<u64> = reader.join().unwrap();
        let committed = check_ledger(&path, printed);
        if still_running && committed < BATCHES {
            kills += 1;
            eprintln!("kill {kills}: after {after_batches} batches and {delay:?}, {committed} batches committed");
        } else {
            break;
        }
    }
    assert!(kills >= 20, "only {kills} kills landed while the child was appending");
    // Let a last child finish the stream: the whole stream, exactly once.
    let mut child = spawn_child(&path);
    assert!(child.wait().unwrap().success());
    assert_eq!(check_ledger(&path, None), BATCHES);
}

/// The appending child (started by the test above, ignored when run on its own): resumes after the last
/// batch whose offset the ledger stored and prints each batch it committed.
#[test]
#[ignore = "child process of the crash test"]
fn crash_child() {
    let Some(path) = std::env::var_os(CHILD_ENV) else { return };
    let mut ledger = Ledger::open(Path::new(&path)).unwrap();
    for i in committed_batches(&ledger)..BATCHES {
        ledger.append(&batch(i)).unwrap();
        println!("committed {i}");
    }
}
