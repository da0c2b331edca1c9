//! What every test of the workspace shares about the parts it may skip, so that a skip is never silent and never
//! happens in CI.
//!
//! A test that needs a tool the machine may lack (Tansu, Chromium, Redis, Prometheus, schemathesis, fastavro, Python)
//! or a privilege (root) asks here first:
//! - the tool is there: the test runs;
//! - the tool is missing: the test fails with the command that installs it;
//! - its skip variable is `1` (`QUOTA_LEDGER_SKIP_TANSU=1`, ...): the part is skipped, and the skip is appended to the
//!   file named by `QUOTA_LEDGER_SKIPPED_LOG`, which `.ci/test` sets and reads back at the end of the run, so that every
//!   skipped part is listed, with how to install what it needed, after cargo's own output;
//! - in CI (`CI=true`) nothing skips: a skip variable fails the test, as does a missing tool or privilege.
//!
//! ```
//! // No skip variable set: the tool is looked for and, here, found.
//! assert!(testkit::tool("sh", "QUOTA_LEDGER_SKIP_EXAMPLE", "apt-get install dash", "the example"));
//! ```
//!
//! Beside it, [`ports`]: how a test starts a server that must be told its port, without losing it to another process;
//! and [`fixtures`]: the instants and headers tests build events from.

use std::io::Write;
use std::process::Command;

pub mod fixtures;
pub mod ports;

/// The variable naming the file each skip is appended to (one line a skip), set by `.ci/test`.
pub const SKIP_LOG: &str = "QUOTA_LEDGER_SKIPPED_LOG";

/// Whether this is a CI run, where no test may skip (`CI=true`, as CI services and `.ci/run` set it).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

/// Whether `var=1` asks to skip `part` (what the test would do with the tool). Recorded in the skip log when it
/// does; in CI it fails the test instead, naming the variable.
pub fn skip_requested(var: &str, part: &str, install: &str) -> bool {
    if !std::env::var(var).is_ok_and(|v| v == "1") {
        return false;
    }
    assert!(!in_ci(), "{var}=1 asks to skip {part}, and nothing skips in CI (CI=true): {install}");
    record(&format!("{part}: skipped by {var}=1; to run it: {install}"));
    true
}

/// Whether the test may use `program`: true when it answers `--version`; false when `var=1` skips `part` (recorded);
/// a missing program fails the test with the command that installs it.
pub fn tool(program: &str, var: &str, install: &str, part: &str) -> bool {
    if skip_requested(var, part, install) {
        return false;
    }
    if let Err(error) = Command::new(program).arg("--version").output() {
        panic!("{part} needs {program} on PATH ({error}): {install} (or {var}=1 to skip it outside CI)");
    }
    true
}

/// The version of Tansu, the real Kafka-compatible broker, that the end-to-end tests were written against.
pub const TANSU_VERSION: &str = "0.6.0";

/// Whether the running test may start Tansu for its real-broker part: true when `tansu --version` says
/// [`TANSU_VERSION`]; false when `QUOTA_LEDGER_SKIP_TANSU=1` skips it (recorded); a missing or other Tansu fails.
pub fn tansu() -> bool {
    let part = format!("the real-broker part of {}", std::thread::current().name().unwrap_or("a test"));
    let install = format!("cargo install tansu --version {TANSU_VERSION} --locked --features dynostore,libsql");
    if skip_requested("QUOTA_LEDGER_SKIP_TANSU", &part, &install) {
        return false;
    }
    let output = Command::new("tansu").arg("--version").output().unwrap_or_else(|error| {
        panic!("{part} needs tansu on PATH ({error}): {install} (or QUOTA_LEDGER_SKIP_TANSU=1 to skip it outside CI)")
    });
    let version = String::from_utf8_lossy(&output.stdout);
    assert!(version.contains(TANSU_VERSION), "tansu --version says {version:?}, expected {TANSU_VERSION}: {install}");
    true
}

/// Whether the test runs as root, which `part` needs (mounting a filesystem, running as another user): true as
/// root; false when `QUOTA_LEDGER_SKIP_ROOT=1` skips it (recorded); otherwise the test fails saying so.
pub fn root(part: &str) -> bool {
    const VAR: &str = "QUOTA_LEDGER_SKIP_ROOT";
    const HOW: &str = "run the tests as root (sudo -E cargo test ...)";
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    if skip_requested(VAR, part, HOW) {
        return false;
    }
    panic!("{part} needs root: {HOW} (or {VAR}=1 to skip it outside CI)");
}

/// A skip, said on stderr (shown with `--nocapture` or when the test fails) and appended to the skip log.
fn record(line: &str) {
    eprintln!("skipped: {line}");
    let Some(path) = std::env::var_os(SKIP_LOG).filter(|p| !p.is_empty()) else { return };
    // One write of a whole line on a file opened for appending: lines of tests running at once do not interleave.
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("the skip log {} cannot be opened: {e}", path.to_string_lossy()));
    file.write_all(format!("{line}\n").as_bytes())
        .unwrap_or_else(|e| panic!("the skip log {} cannot be written: {e}", path.to_string_lossy()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_tool_fails_with_its_install_command() {
        let panic = std::panic::catch_unwind(|| {
            tool("quota-ledger-no-such-tool", "QUOTA_LEDGER_SKIP_NO_SUCH", "apt-get install nothing", "the part")
        })
        .expect_err("a missing tool is a failure");
        let message = panic.downcast_ref::<String>().expect("a formatted message");
        assert!(message.contains("apt-get install nothing"), "{message}");
        assert!(message.contains("QUOTA_LEDGER_SKIP_NO_SUCH=1"), "{message}");
    }

    #[test]
    fn an_unset_skip_variable_skips_nothing() {
        assert!(!skip_requested("QUOTA_LEDGER_SKIP_NEVER_SET_ANYWHERE", "the part", "nothing"));
    }
}
