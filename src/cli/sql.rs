//! `sql "SELECT ..." [--format table|csv|json]`: read-only SQL over the ledger's tables, in DataFusion.
//! `sql --tables` lists the tables and their columns. Nothing can modify the ledger: the connections are
//! read-only and DataFusion refuses DDL, DML and statements.

use std::io::Write;
use std::ops::ControlFlow;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use reports::text::{batch_rows, column_names, write_csv_header, write_csv_rows};
use sql::LedgerSession;

#[derive(Debug, Args)]
pub struct SqlArgs {
    /// The query (DataFusion SQL): SELECT over the tables `sql --tables` lists.
    #[arg(required_unless_present = "tables")]
    query: Option<String>,
    /// Output: an aligned table, CSV with a header, or a JSON array of objects.
    #[arg(long, value_enum, default_value = "table")]
    format: SqlFormat,
    /// List the tables and their columns instead.
    #[arg(long)]
    tables: bool,
    // With --cluster, the query runs over a copy of every shard of the running cluster (`backup --cluster` into a
    // temporary directory under TMPDIR, removed after), with the semantics of --data: one query over the whole set.
    #[command(flatten)]
    cluster: super::cluster::ClusterArgs,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum SqlFormat {
    Table,
    Csv,
    Json,
}

pub fn run(store: &super::Store, args: SqlArgs) -> anyhow::Result<ExitCode> {
    if args.tables {
        sql::provider::write_tables(&mut super::stdout())?;
        return Ok(ExitCode::SUCCESS);
    }
    let query = args.query.expect("clap requires a query without --tables");
    // `_copies`, the copies of a cluster's shards, are kept until the query has run.
    let (session, _copies) = match store {
        _ if args.cluster.cluster.is_some() => {
            let cluster = args.cluster.asked()?.expect("--cluster is given");
            let dir = tempfile::Builder::new().prefix("quota-ledger-sql-").tempdir()?;
            let to = dir.path().join("shards");
            let manifests = usecases::cluster::backup(&cluster, &to)?;
            let bytes: u64 = manifests.iter().map(|m| m.bytes).sum();
            eprintln!(
                "sql: over a copy of the {} shards of the cluster at {} ({} MB in {})",
                manifests.len(),
                cluster.brokers,
                bytes / 1_000_000,
                dir.path().display()
            );
            (LedgerSession::open_shards(&ledger::shards::ShardDir::new(&to).open_all_read_only()?)?, Some(dir))
        }
        super::Store::File(ledger_path) => (LedgerSession::open(ledger_path, None)?, None),
        super::Store::Shards(shards) => (LedgerSession::open_shards(&shards.open_all_read_only()?)?, None),
    };
    match args.format {
        SqlFormat::Table => {
            let mut out = super::stdout();
            let mut table: Option<reports::text::TableWriter> = None;
            let mut failed: Option<std::io::Error> = None;
            let schema = session.for_each_batch_while(&query, Vec::new(), |batch| {
                let table =
                    table.get_or_insert_with(|| reports::text::TableWriter::new(&column_names(&batch.schema())));
                for row in batch_rows(batch)? {
                    if let Err(e) = table.push(&mut out, row) {
                        failed = Some(e);
                        return Ok(ControlFlow::Break(()));
                    }
                }
                Ok(while_read())
            })?;
            if let Some(e) = failed {
                return Err(e.into());
            }
            table.unwrap_or_else(|| reports::text::TableWriter::new(&column_names(&schema))).finish(&mut out)?;
        }
        SqlFormat::Csv => {
            let mut out = super::stdout();
            let mut header_written = false;
            let mut failed: Option<std::io::Error> = None;
            let schema = session.for_each_batch_while(&query, Vec::new(), |batch| {
                if !header_written {
                    header_written = true;
                    if let Err(e) = write_csv_header(&mut out, &batch.schema()) {
                        failed = Some(e);
                        return Ok(ControlFlow::Break(()));
                    }
                }
                if let Err(e) = write_csv_rows(&mut out, batch)? {
                    failed = Some(e);
                    return Ok(ControlFlow::Break(()));
                }
                Ok(while_read())
            })?;
            if let Some(e) = failed {
                return Err(e.into());
            }
            if !header_written {
                write_csv_header(&mut out, &schema)?;
            }
        }
        SqlFormat::Json => {
            let mut writer = arrow::json::ArrayWriter::new(super::stdout());
            session.for_each_batch_while(&query, Vec::new(), |batch| {
                writer.write(batch)?;
                Ok(while_read())
            })?;
            writer.finish()?;
            let mut out = writer.into_inner();
            // An empty result is still a JSON array.
            out.write_all(b"\n")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether to compute the next batch: not once stdout's reader is gone (`sql ... | head -1`), since everything
/// written from then on is dropped.
fn while_read() -> ControlFlow<()> {
    if super::stdout_closed() { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
}
