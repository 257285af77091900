//! The error type shared by Sluice's crates.
//!
//! Variants say whose fault an error is: the user's input ([`Error::User`],
//! which carries the SQLSTATE class the front end reports), an external
//! system (retrying may help), or a bug in Sluice ([`Error::Internal`]).
//! [`Error::DownstreamClosed`] is apart: a task fails with it when its
//! downstream went away, the consequence of another task's failure (or of
//! a stop), never the cause; the supervisor tells the two apart by it.

/// Postgres SQLSTATE codes Sluice reports for user errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SqlCode {
    /// `42601`: the statement does not parse.
    Syntax,
    /// `42P01`: a stream or table that does not exist.
    UndefinedTable,
    /// `42703`: a column that does not exist.
    UndefinedColumn,
    /// `42704`: any other unknown name (a setting, a cursor option, …).
    UndefinedObject,
    /// `34000`: a cursor (or portal) that does not exist.
    InvalidCursorName,
    /// `26000`: a prepared statement that does not exist.
    InvalidSqlStatementName,
    /// `42804`: an expression of the wrong type.
    DatatypeMismatch,
    /// `22P02`: text that does not convert to the needed type.
    InvalidTextRepresentation,
    /// `22023`: an option or setting value out of range or unknown.
    InvalidParameterValue,
    /// `0A000`: a feature Sluice does not support (the message says what is).
    FeatureNotSupported,
    /// `42P07`: a stream, sink or pipeline name already taken.
    DuplicateObject,
    /// `2BP01`: an object others depend on.
    DependentObjectsStillExist,
    /// `57014`: the query was cancelled by the client.
    QueryCanceled,
    /// `53400`: a configured limit was reached.
    ConfigurationLimitExceeded,
    /// `22000`: a data value error (bad record, overflow, …).
    DataException,
    /// `22012`
    DivisionByZero,
    /// `42701`: a column named twice.
    DuplicateColumn,
    /// `42P03`: a cursor name already open.
    DuplicateCursor,
    /// `42883`: a function that does not exist.
    UndefinedFunction,
    /// `55P02`: a setting that cannot be changed now.
    CantChangeRuntimeParam,
    /// `42809`: the object is of the wrong kind (DROP SINK on a stream).
    WrongObjectType,
    /// `25P01`: a statement that needs a transaction block.
    NoActiveTransaction,
    /// `25P02`: a statement after an error inside a transaction block.
    InFailedTransaction,
    /// `23502`: NULL into a NOT NULL column.
    NotNullViolation,
    /// `54000`: a statement over a program limit (its length).
    ProgramLimitExceeded,
    /// `54001`: a statement nested too deeply or planned into too many
    /// operators (see [`crate::limits`]).
    StatementTooComplex,
    /// `55006`: the object is in use (a pipeline another ALTER is changing).
    ObjectInUse,
    /// `55000`: the object is not ready for this (a materialized view
    /// whose pipeline has not published its rows).
    ObjectNotInPrerequisiteState,
    /// `53000`: the cluster lacks what a pipeline needs (workers, slots,
    /// workers with the labels it asks for).
    InsufficientResources,
    /// `42501`: the session's role lacks a privilege on the named object.
    InsufficientPrivilege,
    /// `28000`: a role that does not exist or may not log in.
    InvalidAuthorization,
    /// `28P01`: a wrong password.
    InvalidPassword,
    /// `42710`: a role or token name already taken.
    DuplicateRole,
    /// `42939`: a name reserved for the system (`pg_*` roles).
    ReservedName,
    /// `53300`: too many connections (in total or for one role).
    TooManyConnections,
    /// `57P03`: the masters have no quorum (or this master cannot reach
    /// the leader), so the catalog cannot change now; retry later or
    /// through another master.
    CannotConnectNow,
    /// `08006`: a process the statement needs did not answer (the worker
    /// holding a materialized view's rows).
    ConnectionFailure,
}

impl SqlCode {
    /// The five-character SQLSTATE.
    pub fn sqlstate(self) -> &'static str {
        match self {
            SqlCode::Syntax => "42601",
            SqlCode::UndefinedTable => "42P01",
            SqlCode::UndefinedColumn => "42703",
            SqlCode::UndefinedObject => "42704",
            SqlCode::InvalidCursorName => "34000",
            SqlCode::InvalidSqlStatementName => "26000",
            SqlCode::DatatypeMismatch => "42804",
            SqlCode::InvalidTextRepresentation => "22P02",
            SqlCode::InvalidParameterValue => "22023",
            SqlCode::FeatureNotSupported => "0A000",
            SqlCode::DuplicateObject => "42P07",
            SqlCode::DependentObjectsStillExist => "2BP01",
            SqlCode::QueryCanceled => "57014",
            SqlCode::ConfigurationLimitExceeded => "53400",
            SqlCode::DataException => "22000",
            SqlCode::DivisionByZero => "22012",
            SqlCode::DuplicateColumn => "42701",
            SqlCode::DuplicateCursor => "42P03",
            SqlCode::UndefinedFunction => "42883",
            SqlCode::CantChangeRuntimeParam => "55P02",
            SqlCode::WrongObjectType => "42809",
            SqlCode::NoActiveTransaction => "25P01",
            SqlCode::InFailedTransaction => "25P02",
            SqlCode::NotNullViolation => "23502",
            SqlCode::ProgramLimitExceeded => "54000",
            SqlCode::StatementTooComplex => "54001",
            SqlCode::ObjectInUse => "55006",
            SqlCode::ObjectNotInPrerequisiteState => "55000",
            SqlCode::InsufficientResources => "53000",
            SqlCode::InsufficientPrivilege => "42501",
            SqlCode::InvalidAuthorization => "28000",
            SqlCode::InvalidPassword => "28P01",
            SqlCode::DuplicateRole => "42710",
            SqlCode::ReservedName => "42939",
            SqlCode::TooManyConnections => "53300",
            SqlCode::CannotConnectNow => "57P03",
            SqlCode::ConnectionFailure => "08006",
        }
    }

    /// Every code (to map a SQLSTATE back).
    pub const ALL: [SqlCode; 37] = [
        SqlCode::Syntax,
        SqlCode::UndefinedTable,
        SqlCode::UndefinedColumn,
        SqlCode::UndefinedObject,
        SqlCode::InvalidCursorName,
        SqlCode::InvalidSqlStatementName,
        SqlCode::DatatypeMismatch,
        SqlCode::InvalidTextRepresentation,
        SqlCode::InvalidParameterValue,
        SqlCode::FeatureNotSupported,
        SqlCode::DuplicateObject,
        SqlCode::DependentObjectsStillExist,
        SqlCode::QueryCanceled,
        SqlCode::ConfigurationLimitExceeded,
        SqlCode::DataException,
        SqlCode::DivisionByZero,
        SqlCode::DuplicateColumn,
        SqlCode::DuplicateCursor,
        SqlCode::UndefinedFunction,
        SqlCode::CantChangeRuntimeParam,
        SqlCode::WrongObjectType,
        SqlCode::NoActiveTransaction,
        SqlCode::InFailedTransaction,
        SqlCode::NotNullViolation,
        SqlCode::ProgramLimitExceeded,
        SqlCode::StatementTooComplex,
        SqlCode::ObjectInUse,
        SqlCode::ObjectNotInPrerequisiteState,
        SqlCode::InsufficientResources,
        SqlCode::InsufficientPrivilege,
        SqlCode::InvalidAuthorization,
        SqlCode::InvalidPassword,
        SqlCode::DuplicateRole,
        SqlCode::ReservedName,
        SqlCode::TooManyConnections,
        SqlCode::CannotConnectNow,
        SqlCode::ConnectionFailure,
    ];

    /// The code of a five-character SQLSTATE Sluice reports.
    pub fn from_sqlstate(sqlstate: &str) -> Option<SqlCode> {
        SqlCode::ALL.into_iter().find(|c| c.sqlstate() == sqlstate)
    }
}

/// A kind of named object a statement or request may name that does not
/// exist: what the message calls it and the SQLSTATE Postgres reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectKind {
    /// `42P01`, as a missing table.
    Stream,
    /// `42704`
    Pipeline,
    /// `42704`: a pipeline in the catalog that is not running.
    RunningPipeline,
    /// `34000`
    Cursor,
    /// `34000` (the extended protocol's cursors).
    Portal,
    /// `26000`
    PreparedStatement,
    /// `42704`
    Role,
    /// `42704`: an API token.
    Token,
}

impl ObjectKind {
    /// How a message names the kind.
    pub fn name(self) -> &'static str {
        match self {
            ObjectKind::Stream => "stream",
            ObjectKind::Pipeline => "pipeline",
            ObjectKind::RunningPipeline => "running pipeline",
            ObjectKind::Cursor => "cursor",
            ObjectKind::Portal => "portal",
            ObjectKind::PreparedStatement => "prepared statement",
            ObjectKind::Role => "role",
            ObjectKind::Token => "token",
        }
    }

    /// The SQLSTATE of a missing object of this kind.
    pub fn code(self) -> SqlCode {
        match self {
            ObjectKind::Stream => SqlCode::UndefinedTable,
            ObjectKind::Pipeline | ObjectKind::RunningPipeline | ObjectKind::Role | ObjectKind::Token => {
                SqlCode::UndefinedObject
            }
            ObjectKind::Cursor | ObjectKind::Portal => SqlCode::InvalidCursorName,
            ObjectKind::PreparedStatement => SqlCode::InvalidSqlStatementName,
        }
    }
}

/// Sluice's error. Convert to a Postgres ErrorResponse, an HTTP status or a
/// gRPC status only at the edge.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The user's input is wrong; retrying the same input fails the same way.
    #[error("{message}")]
    User { code: SqlCode, message: String },
    /// An external system (a broker, a file system) failed; a retry may help.
    #[error("external error: {0}")]
    External(String),
    /// A bug in Sluice: an invariant broke.
    #[error("internal error: {0}")]
    Internal(String),
    /// A task's downstream channel closed: the pipeline is being torn down,
    /// or a task downstream failed. A consequence, not a cause; reported
    /// like an internal error (`XX000`).
    #[error("internal error: downstream channel closed")]
    DownstreamClosed,
}

impl Error {
    /// A user error with the given SQLSTATE class.
    pub fn user(code: SqlCode, message: impl Into<String>) -> Self {
        Error::User {
            code,
            message: message.into(),
        }
    }
    /// `42601`
    pub fn syntax(message: impl Into<String>) -> Self {
        Self::user(SqlCode::Syntax, message)
    }
    /// `0A000`
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::user(SqlCode::FeatureNotSupported, message)
    }
    /// `22023`
    pub fn invalid_option(message: impl Into<String>) -> Self {
        Self::user(SqlCode::InvalidParameterValue, message)
    }
    /// `{kind} "{name}" does not exist`, with the kind's SQLSTATE.
    pub fn not_found(kind: ObjectKind, name: &str) -> Self {
        Self::user(kind.code(), format!("{} \"{name}\" does not exist", kind.name()))
    }
    /// `54001`: over one of the [`crate::limits`].
    pub fn too_complex(message: impl Into<String>) -> Self {
        Self::user(SqlCode::StatementTooComplex, message)
    }
    /// An internal error.
    pub fn internal(message: impl Into<String>) -> Self {
        Error::Internal(message.into())
    }
    /// An external system's error.
    pub fn external(message: impl Into<String>) -> Self {
        Error::External(message.into())
    }
    /// The SQLSTATE to report for this error.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            Error::User { code, .. } => code.sqlstate(),
            Error::External(_) => "58000",
            Error::Internal(_) | Error::DownstreamClosed => "XX000",
        }
    }
}

impl From<arrow::error::ArrowError> for Error {
    fn from(e: arrow::error::ArrowError) -> Self {
        match e {
            arrow::error::ArrowError::CastError(m) | arrow::error::ArrowError::ParseError(m) => {
                Error::user(SqlCode::InvalidTextRepresentation, m)
            }
            arrow::error::ArrowError::InvalidArgumentError(m) => Error::user(SqlCode::DataException, m),
            arrow::error::ArrowError::ComputeError(m) => Error::user(SqlCode::DataException, m),
            arrow::error::ArrowError::DivideByZero => Error::user(SqlCode::DivisionByZero, "division by zero"),
            other => Error::Internal(other.to_string()),
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::External(e.to_string())
    }
}

/// Result with Sluice's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_objects_are_named_with_their_kind() {
        assert_eq!(
            Error::not_found(ObjectKind::RunningPipeline, "q7").to_string(),
            "running pipeline \"q7\" does not exist"
        );
        assert_eq!(
            Error::not_found(ObjectKind::Portal, "").to_string(),
            "portal \"\" does not exist"
        );
    }

    #[test]
    fn every_sqlstate_maps_back_to_its_code() {
        let mut seen = std::collections::HashSet::new();
        for code in SqlCode::ALL {
            assert!(
                seen.insert(code.sqlstate()),
                "{code:?} listed twice or shares a SQLSTATE"
            );
            assert_eq!(SqlCode::from_sqlstate(code.sqlstate()), Some(code));
        }
        assert_eq!(SqlCode::from_sqlstate("XX000"), None);
    }

    #[test]
    fn sqlstates_by_kind() {
        assert_eq!(Error::syntax("x").sqlstate(), "42601");
        assert_eq!(Error::unsupported("x").sqlstate(), "0A000");
        assert_eq!(Error::external("broker down").sqlstate(), "58000");
        assert_eq!(Error::internal("bug").sqlstate(), "XX000");
        assert_eq!(Error::DownstreamClosed.sqlstate(), "XX000");
        assert_eq!(Error::not_found(ObjectKind::Stream, "bids").sqlstate(), "42P01");
        assert_eq!(Error::not_found(ObjectKind::Pipeline, "p").sqlstate(), "42704");
        assert_eq!(Error::not_found(ObjectKind::Cursor, "c").sqlstate(), "34000");
        assert_eq!(Error::not_found(ObjectKind::PreparedStatement, "s").sqlstate(), "26000");
        assert_eq!(
            Error::DownstreamClosed.to_string(),
            "internal error: downstream channel closed"
        );
        assert_eq!(Error::from(arrow::error::ArrowError::DivideByZero).sqlstate(), "22012");
        assert_eq!(
            Error::from(arrow::error::ArrowError::CastError("no".into())).sqlstate(),
            "22P02"
        );
    }
}
