//! `usage void|amend`: a correction of a recorded usage event (docs/contract.md §7), judged and recorded by `control`.

use std::io::Write;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use schemas::CorrectionAction;

#[derive(Debug, Subcommand)]
pub enum UsageCommand {
    /// Void a recorded usage event: it counts 0 from now on (the original stays recorded).
    Void(CorrectArgs),
    /// Amend a recorded usage event: it counts --quantity from now on instead (the original stays recorded).
    Amend {
        /// What the event counts from now on, in the metric's unit (0 or more).
        #[arg(long, allow_negative_numbers = true)]
        quantity: i64,
        #[command(flatten)]
        args: CorrectArgs,
    },
}

#[derive(Debug, Args)]
pub struct CorrectArgs {
    /// The event_id of the usage event to correct.
    #[arg(long)]
    event: String,
    /// The correction's own event_id (default: from the event and the change, so that a retry is one correction).
    #[arg(long)]
    correction_id: Option<String>,
    /// Who corrects it (recorded in the event).
    #[arg(long, env = "QUOTA_LEDGER_ACTOR")]
    actor: String,
    /// Why (recorded in the event).
    #[arg(long)]
    reason: String,
    /// Print the correction as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(store: &super::Store, command: UsageCommand) -> anyhow::Result<ExitCode> {
    let (args, action, quantity) = match command {
        UsageCommand::Void(args) => (args, CorrectionAction::VOID, None),
        UsageCommand::Amend { quantity, args } => (args, CorrectionAction::AMEND, Some(quantity)),
    };
    let (original_event_id, correction_id, actor, reason) = (args.event, args.correction_id, args.actor, args.reason);
    let source = format!("quota-ledger usage {}", action.symbol().to_lowercase());
    let change = control::CorrectionChange {
        original_event_id,
        tenant: None,
        action,
        quantity,
        correction_id,
        actor,
        reason,
        source,
    };
    let corrected = usecases::correction::correct(store, &change)?;
    match args.json {
        true => super::print_json(&corrected.event)?,
        false => writeln!(super::stdout(), "{}", usecases::correction::words_of(&corrected))?,
    }
    Ok(ExitCode::SUCCESS)
}
