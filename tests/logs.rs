//! Logs as a collector reads them: `--log-format json` writes one JSON object per line (time, level, target, message
//! and the event's fields) for what an operator acts on, here a consumer's assignment and a batch's quarantine; text
//! says the same in words; and no secret given to the Kafka client reaches either.

mod support;

use serde_json::Value;
use support::brokers::Broker;
use support::*;

// Proves the JSON lines parse, carry fields, and hold no secret.
#[test]
fn ingest_logs_assignment_and_quarantine_as_json_lines_without_secrets() {
    let broker = Broker::mock();
    let report = generate_to(&broker, 30, 6_000, 7);
    assert!(count(&report, "malformed") > 0, "the generated traffic has malformed messages: {report}");
    let secret = "not-to-be-logged-s3cret";
    let ledger = TestLedger::new();
    let setting = format!("sasl.password={secret}");
    let args = ["--log-format", "json", "ingest", "--brokers", &broker.bootstrap, "--until-caught-up", "-X", &setting];
    let run = ledger.run(&args).success();
    assert!(!run.stderr.contains(secret), "{}", run.stderr);
    let lines: Vec<Value> = run
        .stderr
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}")))
        .collect();
    assert!(lines.iter().all(|l| l["timestamp"].is_string() && l["level"].is_string() && l["message"].is_string()));
    let assigned = lines.iter().find(|l| l["assigned"].is_string()).unwrap_or_else(|| panic!("{lines:?}"));
    assert!(assigned["assigned"].as_str().unwrap().contains("quota.usage["), "{assigned}");
    let quarantined: u64 = lines.iter().filter_map(|l| l["quarantined"].as_u64()).sum();
    assert_eq!(quarantined, count(&report, "malformed"), "{lines:?}");
    assert!(lines.iter().any(|l| l["reasons"].as_str().is_some_and(|r| r.contains('='))), "{lines:?}");

    // As text: the same events, in words.
    let again = TestLedger::new();
    let run = again.run(&["ingest", "--brokers", &broker.bootstrap, "--until-caught-up"]).success();
    let assigned = run
        .stderr
        .lines()
        .find(|l| l.contains("ingest: partitions assigned"))
        .unwrap_or_else(|| panic!("{}", run.stderr));
    assert!(assigned.contains("assigned=quota."), "the data is a field: {assigned}");
    let quarantined: u64 = run
        .stderr
        .lines()
        .filter(|l| l.contains("ingest: messages quarantined"))
        .filter_map(|l| l.split_whitespace().find_map(|word| word.strip_prefix("quarantined=")?.parse::<u64>().ok()))
        .sum();
    assert_eq!(quarantined, count(&report, "malformed"), "{}", run.stderr);
    let level_and_time = assigned.split_whitespace().take(2).collect::<Vec<_>>();
    assert!(level_and_time[0].ends_with('Z') && level_and_time[1] == "INFO", "time and level first: {assigned}");
}

// Proves a command's last word, its error, is a JSON line too under --log-format json: a collector parses every line.
#[test]
fn a_commands_error_is_a_json_line_too() {
    let ledger = TestLedger::new();
    let run = ledger.run(&["--log-format", "json", "status"]);
    assert_ne!(run.code, Some(0), "no ledger there: {}", run.stderr);
    let lines: Vec<Value> = run
        .stderr
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}")))
        .collect();
    let error = lines.last().unwrap_or_else(|| panic!("nothing said: {}", run.stderr));
    assert_eq!(error["level"], "ERROR", "{error}");
    assert!(error["message"].as_str().unwrap().starts_with("quota-ledger: error: "), "{error}");
    assert!(error["timestamp"].is_string(), "{error}");
}
