//! A DataFusion session over one ledger file at one watermark: every table of [`ledger::tables::TABLES`]
//! registered through the streaming [`LedgerTable`] provider, queries read-only by construction (read-only
//! ledgers, and DataFusion refuses DDL, DML and statements).

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::RecordBatch;
use datafusion::common::ScalarValue;
use datafusion::execution::context::{SQLOptions, SessionConfig, SessionContext};
use futures::TryStreamExt;
use ledger::tables::TABLES;

use crate::SqlError;
use crate::provider::{LedgerTable, Source};

/// A read-only DataFusion session over a ledger.
pub struct LedgerSession {
    context: SessionContext,
    runtime: tokio::runtime::Runtime,
    watermark: u64,
    path: PathBuf,
}

impl LedgerSession {
    /// A session showing the ledger's entries up to `watermark` (its current watermark when `None`).
    pub fn open(path: &Path, watermark: Option<u64>) -> Result<LedgerSession, SqlError> {
        let watermark = match watermark {
            Some(w) => w,
            None => ledger::Ledger::open_read_only(path)?.status()?.watermark,
        };
        // One partition per scan and a small batch count: the machine is small and the tables stream.
        let config = SessionConfig::new().with_information_schema(true);
        let context = SessionContext::new_with_config(config);
        for table in TABLES {
            context.register_table(table.name, Arc::new(LedgerTable::new(path.to_path_buf(), table, watermark)))?;
        }
        let runtime = tokio::runtime::Builder::new_current_thread().build().map_err(SqlError::Runtime)?;
        Ok(LedgerSession { context, runtime, watermark, path: path.to_path_buf() })
    }

    /// A session over every shard of a set (contract §9.4), each at its current watermark: every table is the union
    /// of the shards' tables, its `shard` column saying which a row is from. [`LedgerSession::watermark`] is the sum
    /// of the shards' and [`LedgerSession::path`] the first shard's.
    pub fn open_shards(shards: &[(ledger::shards::Shard, ledger::Ledger)]) -> Result<LedgerSession, SqlError> {
        let mut sources = Vec::with_capacity(shards.len());
        for (shard, ledger) in shards {
            let watermark = ledger.status()?.watermark;
            sources.push(Source { path: ledger.path().to_path_buf(), shard: Some(shard.partition), watermark });
        }
        let config = SessionConfig::new().with_information_schema(true);
        let context = SessionContext::new_with_config(config);
        for table in TABLES {
            context.register_table(table.name, Arc::new(LedgerTable::over(sources.clone(), table)))?;
        }
        let runtime = tokio::runtime::Builder::new_current_thread().build().map_err(SqlError::Runtime)?;
        let watermark = sources.iter().map(|s| s.watermark).sum();
        let path = sources.first().map(|s| s.path.clone()).unwrap_or_default();
        Ok(LedgerSession { context, runtime, watermark, path })
    }

    /// The watermark every table of the session stops at.
    pub fn watermark(&self) -> u64 {
        self.watermark
    }

    /// The ledger file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// DataFusion's context, with the ledger's tables registered.
    pub fn context(&self) -> &SessionContext {
        &self.context
    }

    /// Runs one read-only SQL query with positional parameters (`$1`, `$2`, ...) and collects its batches.
    pub fn query(&self, sql: &str, params: Vec<ScalarValue>) -> Result<Vec<RecordBatch>, SqlError> {
        self.runtime.block_on(async {
            let mut frame = self.context.sql_with_options(sql, read_only()).await?;
            if !params.is_empty() {
                frame = frame.with_param_values(params)?;
            }
            Ok(frame.collect().await?)
        })
    }

    /// Runs one read-only query and hands each batch to `each` as it arrives (memory follows one batch).
    /// Answers the result's schema.
    pub fn for_each_batch_with(
        &self,
        sql: &str,
        params: Vec<ScalarValue>,
        mut each: impl FnMut(&RecordBatch) -> Result<(), SqlError>,
    ) -> Result<arrow::datatypes::SchemaRef, SqlError> {
        self.for_each_batch_while(sql, params, |batch| each(batch).map(ControlFlow::Continue))
    }

    /// As [`LedgerSession::for_each_batch_with`], but stops reading once `each` answers `Break` (its output's
    /// reader is gone): the rest of the query is not computed, and the scans under it stop at their next batch.
    pub fn for_each_batch_while(
        &self,
        sql: &str,
        params: Vec<ScalarValue>,
        mut each: impl FnMut(&RecordBatch) -> Result<ControlFlow<()>, SqlError>,
    ) -> Result<arrow::datatypes::SchemaRef, SqlError> {
        self.runtime.block_on(async {
            let mut frame = self.context.sql_with_options(sql, read_only()).await?;
            if !params.is_empty() {
                frame = frame.with_param_values(params)?;
            }
            let schema: arrow::datatypes::SchemaRef = Arc::new(frame.schema().as_arrow().clone());
            let mut stream = frame.execute_stream().await?;
            while let Some(batch) = stream.try_next().await? {
                if each(&batch)?.is_break() {
                    break;
                }
            }
            Ok(schema)
        })
    }
}

/// DataFusion refuses DDL (CREATE, DROP), DML (INSERT, UPDATE, DELETE) and statements (SET, transactions).
fn read_only() -> SQLOptions {
    SQLOptions::new().with_allow_ddl(false).with_allow_dml(false).with_allow_statements(false)
}
