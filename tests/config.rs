//! `--config quota-ledger.toml` through the binary: a flag given wins over its environment variable, which wins over
//! the file, which wins over the default; a key naming no flag is refused, named; `config check` never prints a
//! secret; a value a command requires may come from the file.

mod support;

use std::path::Path;

use support::*;

/// A directory with three ledgers, `file.db`, `env.db` and `flag.db`, each holding `n` events for its name.
fn three_ledgers(dir: &Path) {
    for (name, n) in [("file.db", 1), ("env.db", 2), ("flag.db", 3)] {
        let events: Vec<_> = (0..n).map(|i| usage(&format!("u-{i}"), "2026-11-03T10:00:00Z", "org-1", 1)).collect();
        let container = dir.join(format!("{name}.avro"));
        write_container(&container, &events);
        run_in(dir, &["--ledger", name, "ingest", "--file", container.to_str().unwrap()], b"").success();
    }
}

fn events_recorded(run: Run) -> u64 {
    count(&run.success().json(), "events_recorded")
}

// Proves the order of precedence: flag > environment > file > default.
#[test]
fn a_flag_wins_over_the_environment_which_wins_over_the_file() {
    let dir = tempfile::tempdir().unwrap();
    three_ledgers(dir.path());
    std::fs::write(dir.path().join("q.toml"), "ledger = \"file.db\"\n").unwrap();
    let status = |args: &[&str], env: &[(&str, &str)]| {
        let mut all = vec!["--config", "q.toml"];
        all.extend_from_slice(args);
        all.extend(["status", "--json"]);
        events_recorded(run_in_env(dir.path(), &all, b"", env))
    };
    assert_eq!(status(&[], &[]), 1, "the file's ledger");
    assert_eq!(status(&[], &[("QUOTA_LEDGER_PATH", "env.db")]), 2, "the environment over the file");
    assert_eq!(status(&["--ledger", "flag.db"], &[("QUOTA_LEDGER_PATH", "env.db")]), 3, "the flag over both");
    // The file named by the environment instead of --config.
    let named = run_in_env(dir.path(), &["status", "--json"], b"", &[("QUOTA_LEDGER_CONFIG", "q.toml")]);
    assert_eq!(events_recorded(named), 1);
    // Without a file, the default (./quota-ledger.db), which does not exist here.
    run_in(dir.path(), &["status"], b"").expect_code(2);
}

// Proves a command's required value may come from its table, and a flag given overrides it.
#[test]
fn a_commands_table_gives_its_flags() {
    let dir = tempfile::tempdir().unwrap();
    three_ledgers(dir.path());
    std::fs::write(
        dir.path().join("q.toml"),
        "ledger = \"flag.db\"\n[export.billing]\nperiod = \"2026-11\"\nformat = \"jsonl\"\n[audit.tenant]\nfrom = \"2026-11-01T00:00:00Z\"\nto = \"2026-12-01T00:00:00Z\"\njson = true\n",
    )
    .unwrap();
    let jsonl = run_in(dir.path(), &["--config", "q.toml", "export", "billing"], b"").success();
    let first = jsonl.stdout_text().lines().next().unwrap_or_default().to_string();
    assert!(first.starts_with('{') && first.contains("org-1"), "JSON lines from the file's format: {first}");
    let csv = run_in(dir.path(), &["--config", "q.toml", "export", "billing", "--format", "csv"], b"").success();
    assert!(csv.stdout_text().starts_with("tenant"), "the flag's format over the file's: {}", csv.stdout_text());
    let timeline = run_in(dir.path(), &["--config", "q.toml", "audit", "tenant", "org-1"], b"").success().json();
    assert!(timeline.is_object(), "{timeline}");
}

// Proves a key that names no flag or command is refused with the key named, before anything runs.
#[test]
fn unknown_keys_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    for (text, named) in [
        ("[serve]\nlistne = \"127.0.0.1:8080\"\n", "unknown key `serve.listne`"),
        ("[sreve]\nlisten = \"127.0.0.1:8080\"\n", "unknown key `sreve`"),
        ("ledgr = \"x.db\"\n", "unknown key `ledgr`"),
        ("[export.billing]\nperiods = \"2026-11\"\n", "unknown key `export.billing.periods`"),
    ] {
        std::fs::write(dir.path().join("q.toml"), text).unwrap();
        let refused = run_in(dir.path(), &["--config", "q.toml", "status"], b"").expect_code(2);
        assert!(refused.stderr.contains(named), "{text:?}: {}", refused.stderr);
    }
    std::fs::write(dir.path().join("q.toml"), "ledger = \n").unwrap();
    let invalid = run_in(dir.path(), &["--config", "q.toml", "status"], b"").expect_code(2);
    assert!(invalid.stderr.contains("not valid TOML at line 1"), "{}", invalid.stderr);
}

// Proves `config check` resolves the file without ever printing a secret.
#[test]
fn config_check_masks_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let secret = "hunter2-do-not-print";
    std::fs::write(
        dir.path().join("q.toml"),
        format!(
            "ledger = \"l.db\"\n[kafka]\n\"security.protocol\" = \"SASL_SSL\"\n\"sasl.password\" = \"{secret}\"\n[ingest]\nbrokers = \"k:9092\"\n"
        ),
    )
    .unwrap();
    let text = run_in(dir.path(), &["--config", "q.toml", "config", "check"], b"").success();
    assert!(!text.stdout_text().contains(secret) && !text.stderr.contains(secret), "{}", text.stdout_text());
    assert!(text.stdout_text().contains("SASL_SSL") && text.stdout_text().contains("********"));
    let json = run_in_env(
        dir.path(),
        &["--config", "q.toml", "config", "check", "--json"],
        b"",
        &[("QUOTA_LEDGER_PATH", "e.db")],
    )
    .success();
    assert!(!json.stdout_text().contains(secret));
    let settings = json.json()["settings"].as_array().unwrap().clone();
    let ledger = settings.iter().find(|s| s["key"] == "ledger").unwrap();
    assert!(ledger["source"].as_str().unwrap().contains("QUOTA_LEDGER_PATH"), "{ledger}");
    // The cluster's bearer token is a flag's value, not a key named for a secret: masked all the same, from the file
    // and with the environment variable over it, as text and as JSON.
    let token = "tok-cluster-0123456789abcdef";
    std::fs::write(dir.path().join("q.toml"), format!("[status]\ncluster = \"k:9092\"\ntoken = \"{token}\"\n"))
        .unwrap();
    for env in [&[][..], &[("QUOTA_LEDGER_TOKEN", "tok-from-the-environment")][..]] {
        for json in [false, true] {
            let mut args = vec!["--config", "q.toml", "config", "check"];
            args.extend(json.then_some("--json"));
            let check = run_in_env(dir.path(), &args, b"", env).success();
            let printed = format!("{}{}", check.stdout_text(), check.stderr);
            assert!(!printed.contains("tok-"), "{printed}");
            assert!(printed.contains("status.token") && printed.contains("********"), "{printed}");
        }
    }
    // A file that does not parse names the line, never the text on it.
    std::fs::write(dir.path().join("q.toml"), format!("[kafka]\n\"sasl.password\" = \"{secret}\n")).unwrap();
    let invalid = run_in(dir.path(), &["--config", "q.toml", "config", "check"], b"").expect_code(2);
    assert!(!invalid.stderr.contains(secret), "{}", invalid.stderr);
}
