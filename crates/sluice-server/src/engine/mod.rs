//! The statement engine: what a session can do, independent of the wire
//! protocol. pgwire and the REST API both drive a [`Session`].
//!
//! A statement produces an [`Output`]: a command tag, a stream of rows
//! (a continuous query, a FETCH, a SHOW), or a COPY-out stream. Row streams
//! are lazy and tied to the query they come from: dropping the stream stops
//! the query, which is how a cancel or a closed connection tears it down.

use arrow::datatypes::{DataType, SchemaRef};
use arrow::record_batch::RecordBatch;
use futures::stream::BoxStream;
use sluice_types::Result;

/// Rows of a result, produced as they become available.
pub struct RowStream {
    /// The columns of every batch.
    pub schema: SchemaRef,
    /// The batches; ends when the query ends (LIMIT reached, bounded input
    /// exhausted, FETCH count reached). An `Err` ends the stream.
    pub batches: BoxStream<'static, Result<RecordBatch>>,
}

/// What a statement returns to the client.
pub enum Output {
    /// A statement without rows. `tag` is the Postgres command tag without
    /// the count (`"CREATE STREAM"`, `"INSERT"`, `"SET"`, `"BEGIN"`,
    /// `"COMMIT"`, `"ROLLBACK"`, `"DECLARE CURSOR"`, `"CLOSE CURSOR"`, …);
    /// `rows` is the count where Postgres reports one (`INSERT 0 n`).
    Command { tag: String, rows: Option<usize> },
    /// Rows for a client (SELECT, FETCH, SHOW, EXPLAIN, DESCRIBE). The
    /// command tag is `tag` plus the number of rows sent (`SELECT 3`,
    /// `FETCH 10`, `SHOW` takes `SELECT` too).
    Rows { tag: String, rows: RowStream },
    /// `COPY (query) TO STDOUT`: rows to send as COPY data in text format
    /// (tab-separated, `\N` for null), until the stream ends or the client
    /// cancels.
    CopyOut(RowStream),
}

/// A statement parsed and described for the extended query protocol.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The statement text as received (with `$1`… placeholders).
    pub sql: String,
    /// The types of `$1`, `$2`, … in order, as inferred; `DataType::Utf8`
    /// where nothing better is known.
    pub param_types: Vec<DataType>,
    /// The columns the statement returns, or `None` for a command without rows.
    pub schema: Option<SchemaRef>,
}

pub use self::session::Session;

pub(crate) mod authorize;
mod batch;
mod catalog;
mod column_names;
mod handler;
mod insert;
mod params;
mod pg_catalog;
mod psql_catalog;
mod query;
mod session;
mod settings;
mod show;
#[cfg(test)]
pub(crate) mod test_support;

pub use settings::Settings;
pub use sluice_sql::types::pg_type_name;

/// The shared statement engine of one Sluice server: catalog access through
/// the master, query execution through the worker(s). One per process.
pub struct Engine {
    pub master: std::sync::Arc<sluice_cluster::Master>,
    /// The data plane the engine reaches directly: memory streams' logs
    /// (`INSERT` appends there) and the result channels of session queries.
    /// The master never holds these.
    pub data: sluice_connectors::Connectors,
    /// When the server started (epoch ms).
    pub started_ms: i64,
    /// Authentication, file root, TLS and connection limits.
    pub security: crate::security::SecurityConfig,
    /// TLS acceptors built from `security.tls` (pgwire and HTTPS).
    pub tls: Option<crate::security::tls::TlsAcceptors>,
    /// A cluster master's registry of workers (and its quorum member), for
    /// `SHOW CLUSTER`; unset in the playground.
    pub cluster: std::sync::OnceLock<std::sync::Arc<sluice_cluster::control::Cluster>>,
}

impl Engine {
    pub fn new(
        master: std::sync::Arc<sluice_cluster::Master>,
        data: sluice_connectors::Connectors,
    ) -> std::sync::Arc<Self> {
        std::sync::Arc::new(Engine {
            master,
            data,
            started_ms: sluice_types::now_ms(),
            security: crate::security::SecurityConfig::default(),
            tls: None,
            cluster: std::sync::OnceLock::new(),
        })
    }

    /// An engine with the given security settings; its TLS files are
    /// read now (a bad one is an error here, not at the first client).
    pub fn with_security(
        master: std::sync::Arc<sluice_cluster::Master>,
        data: sluice_connectors::Connectors,
        security: crate::security::SecurityConfig,
    ) -> sluice_types::Result<std::sync::Arc<Self>> {
        let tls = match &security.tls {
            Some(files) => Some(crate::security::tls::acceptors(files).map_err(sluice_types::Error::invalid_option)?),
            None => None,
        };
        Ok(std::sync::Arc::new(Engine {
            master,
            data,
            started_ms: sluice_types::now_ms(),
            security,
            tls,
            cluster: std::sync::OnceLock::new(),
        }))
    }

    /// A new session for a client authenticated as role `user`.
    pub fn new_session(self: &std::sync::Arc<Self>, user: &str) -> Session {
        Session::new(self.clone(), user)
    }
}
