//! `demo [--tenants N] [--events M] [--month YYYY-MM] [--out DIR]`: the whole product in one command, on
//! librdkafka's in-process mock cluster (nothing to install): the `demo` crate's demo, its steps printed as they
//! end.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use demo::{DEFAULT_EVENTS, DEFAULT_HOOK_REQUESTS, DEFAULT_TENANTS, DemoSettings, Shown};
use ledger::Period;

/// Progress bars of the demo's long steps.
const BAR_TEMPLATE: &str = "{msg:<10} [{bar:40}] {pos}/{len} ({per_sec}, {eta} left)";

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Tenants (org-1 ... org-N).
    #[arg(long, default_value_t = DEFAULT_TENANTS)]
    tenants: u32,
    /// Messages generated for the month (usage, reservations, decisions, duplicates, malformed).
    #[arg(long, default_value_t = DEFAULT_EVENTS)]
    events: u64,
    /// Checks services send to the enforcement hook on the month's last day.
    #[arg(long, default_value_t = DEFAULT_HOOK_REQUESTS)]
    hook_requests: u32,
    /// The month played, YYYY-MM; it must be over, since the demo closes it. Default: the last month that ended.
    #[arg(long, value_parser = parse_period)]
    month: Option<Period>,
    /// The same seed gives the same traffic.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where the ledger, exports, reports and report.html go (a previous demo's ledger there is replaced).
    #[arg(long, default_value = "demo-out")]
    out: PathBuf,
}

fn parse_period(text: &str) -> Result<Period, String> {
    text.parse().map_err(|e: ledger::PeriodParseError| e.to_string())
}

pub fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    let settings = DemoSettings {
        tenants: args.tenants,
        events: args.events,
        hook_requests: args.hook_requests,
        month: args.month,
        seed: args.seed,
        out: args.out,
    };
    let display = super::ProgressDisplay::new(BAR_TEMPLATE).with_chars("=> ");
    // A line that cannot be printed does not stop the demo: its files are what it leaves.
    let played = demo::run(settings, &|shown| match shown {
        Shown::Playing { month, tenants, out } => {
            let _ = writeln!(super::stdout(), "quota-ledger demo: {month}, {tenants} tenants, into {}", out.display());
        }
        Shown::Step { number, step } => {
            let (name, summary, seconds) = (&step.name, &step.summary, step.seconds);
            let _ = writeln!(super::stdout(), "{number:>2}. {name:<12} {summary} [{seconds:.1} s]");
        }
        Shown::Progress(progress) => display.show(progress),
        _ => {}
    })?;
    let mut out = super::stdout();
    writeln!(out, "\nEverything is in {}. Try (from a checkout: cargo run --release -- ...):\n", played.out.display())?;
    for command in &played.commands {
        writeln!(out, "  {command}")?;
    }
    Ok(ExitCode::SUCCESS)
}
