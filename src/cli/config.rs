//! `--config quota-ledger.toml`: every flag of every command from a file (the `flagfile` crate, docs/operations.md
//! "Configuration"), and `config check`, which prints what the file resolves to, secrets masked.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Check the config file (--config or QUOTA_LEDGER_CONFIG) and print what it resolves to, secrets masked.
    Check(CheckArgs),
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Print JSON: `file`, and `settings`, each `{key, value, source}` (`value` masked for a secret).
    #[arg(long)]
    json: bool,
}

pub fn run(command: &clap::Command, config: Option<&Path>, check: CheckArgs) -> anyhow::Result<ExitCode> {
    let path = flagfile::path_of(config).context("no config file: give --config FILE or set QUOTA_LEDGER_CONFIG")?;
    let settings = flagfile::settings(command, &path, &kafka::schema_registry::mask_password)?;
    if check.json {
        super::print_json(&serde_json::json!({"file": path.display().to_string(), "settings": settings}))?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = super::stdout();
    writeln!(out, "{}: {} settings, every key known", path.display(), settings.len())?;
    let rows: Vec<Vec<String>> = settings.into_iter().map(|s| vec![s.key, s.value, s.source]).collect();
    reports::text::write_table(&mut out, &["KEY", "VALUE", "SOURCE"], &rows)?;
    Ok(ExitCode::SUCCESS)
}
