//! `schemas list|encode|decode`.

use std::io::{Read, Write};
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Subcommand;
use schemas::{Catalog, Event, EventType};

#[derive(Debug, Subcommand)]
pub enum SchemasCommand {
    /// Name, CRC-64-AVRO fingerprint and file of every schema in the catalog.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Read one event as JSON on stdin, write its single-object Avro encoding on stdout.
    Encode {
        /// The record type: UsageEvent, DecisionEvent, ReservationEvent, GrantEvent, PolicyEvent, AdjustmentEvent.
        #[arg(long = "type")]
        record_type: String,
    },
    /// Read one single-object Avro message on stdin, write the event as JSON on stdout.
    Decode,
}

pub fn run(command: SchemasCommand) -> anyhow::Result<ExitCode> {
    let catalog = Catalog::builtin();
    match command {
        SchemasCommand::List { json } => list(catalog, json)?,
        SchemasCommand::Encode { record_type } => encode(catalog, &record_type)?,
        SchemasCommand::Decode => decode(catalog)?,
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(serde::Serialize)]
struct ListedSchema {
    name: String,
    fingerprint: String,
    current: bool,
    file: String,
}

fn list(catalog: &Catalog, json: bool) -> anyhow::Result<()> {
    let listed: Vec<ListedSchema> = catalog
        .schemas()
        .iter()
        .map(|s| ListedSchema {
            name: s.event_type.full_name(),
            fingerprint: format!("{:016x}", s.fingerprint),
            current: s.current,
            file: if s.runtime { s.file.to_string() } else { format!("schemas/avro/{}", s.file) },
        })
        .collect();
    if json {
        return super::print_json(&listed);
    }
    let rows: Vec<Vec<String>> = listed
        .iter()
        .map(|s| {
            let state = if s.current { "current" } else { "older" };
            vec![s.name.clone(), s.fingerprint.clone(), state.to_string(), s.file.clone()]
        })
        .collect();
    super::print_table(&["NAME", "FINGERPRINT (CRC-64-AVRO)", "VERSION", "FILE"], &rows)
}

fn encode(catalog: &Catalog, record_type: &str) -> anyhow::Result<()> {
    let Some(event_type) = EventType::from_name(record_type) else {
        let known: Vec<&str> = EventType::ALL.iter().map(|t| t.name()).collect();
        bail!("unknown record type {record_type:?}: expected one of {}", known.join(", "));
    };
    let mut json = String::new();
    std::io::stdin().read_to_string(&mut json).context("cannot read stdin")?;
    let event = Event::from_json(event_type, &json).with_context(|| format!("stdin is not a {event_type} in JSON"))?;
    schemas::validate(&event).with_context(|| format!("{event_type} {:?} is not valid", event.event_id()))?;
    let bytes = catalog.encode_single_object(&event);
    super::stdout().write_all(&bytes).context("cannot write stdout")?;
    Ok(())
}

fn decode(catalog: &Catalog) -> anyhow::Result<()> {
    let mut bytes = Vec::new();
    std::io::stdin().read_to_end(&mut bytes).context("cannot read stdin")?;
    let decoded = catalog.decode_single_object(&bytes, None).context("stdin is not a valid event")?;
    super::print_json(&decoded.event.to_json())
}
