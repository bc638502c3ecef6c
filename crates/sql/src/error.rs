//! Errors as a MySQL client sees them: an error number, a SQLSTATE and a
//! message. Connectors and tools match on the numbers (sysbench retries
//! 1205 and 1213; drivers map 1062 to a duplicate-key exception), so each
//! latsdb error maps to the number MySQL uses for the same condition.

use latsdb_types::{DbError, ErrorCode};
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlError {
    pub code: u16,
    pub state: &'static str,
    pub message: String,
}

pub type SqlResult<T> = Result<T, SqlError>;

pub const ER_ACCESS_DENIED: u16 = 1045;
pub const ER_NO_DB: u16 = 1046;
pub const ER_UNKNOWN_COM: u16 = 1047;
pub const ER_BAD_NULL: u16 = 1048;
pub const ER_BAD_DB: u16 = 1049;
pub const ER_TABLE_EXISTS: u16 = 1050;
pub const ER_BAD_FIELD: u16 = 1054;
pub const ER_NON_UNIQ: u16 = 1052;
pub const ER_DUP_KEYNAME: u16 = 1061;
pub const ER_DUP_FIELDNAME: u16 = 1060;
pub const ER_TABLE_DEF_CHANGED: u16 = 1412;
pub const ER_DUP_ENTRY: u16 = 1062;
pub const ER_PARSE: u16 = 1064;
pub const ER_EMPTY_QUERY: u16 = 1065;
pub const ER_WRONG_VALUE_COUNT: u16 = 1136;
pub const ER_NET_PACKET_TOO_LARGE: u16 = 1153;
pub const ER_CANT_DROP_KEY: u16 = 1091;
pub const ER_NO_SUCH_TABLE: u16 = 1146;
pub const ER_UNKNOWN_SYSTEM_VARIABLE: u16 = 1193;
pub const ER_LOCK_WAIT_TIMEOUT: u16 = 1205;
/// MySQL's "Thread stack overrun": a statement too deep for the stack.
pub const ER_STACK_OVERRUN: u16 = 1436;
pub const ER_DB_CREATE_EXISTS: u16 = 1007;
pub const ER_DB_DROP_EXISTS: u16 = 1008;
pub const ER_LOCK_DEADLOCK: u16 = 1213;
pub const ER_WRONG_ARGUMENTS: u16 = 1210;
pub const ER_NOT_SUPPORTED_YET: u16 = 1235;
pub const ER_UNKNOWN_STMT_HANDLER: u16 = 1243;
pub const ER_WRONG_VALUE_FOR_VAR: u16 = 1231;
pub const ER_UNSUPPORTED_PS: u16 = 1295;
pub const ER_GET_TEMPORARY_ERRMSG: u16 = 1297;
pub const ER_TRUNCATED_WRONG_VALUE: u16 = 1292;
pub const ER_WRONG_VALUE: u16 = 1525;
pub const ER_WARN_DATA_OUT_OF_RANGE: u16 = 1264;
pub const ER_TRUNCATED_WRONG_VALUE_FOR_FIELD: u16 = 1366;
pub const ER_DATA_TOO_LONG: u16 = 1406;
pub const ER_DATA_TRUNCATED: u16 = 1265;
pub const ER_MALFORMED_PACKET: u16 = 1835;
pub const ER_SP_DOES_NOT_EXIST: u16 = 1305;
pub const ER_INTERNAL: u16 = 1815;
pub const ER_RECORD_FILE_FULL: u16 = 1114;
pub const ER_ERROR_DURING_COMMIT: u16 = 1180;
pub const ER_UNKNOWN_ERROR: u16 = 1105;

impl SqlError {
    pub fn new(code: u16, state: &'static str, message: impl Into<String>) -> Self {
        SqlError { code, state, message: message.into() }
    }
    pub fn parse(message: impl Into<String>) -> Self {
        Self::new(ER_PARSE, "42000", message)
    }
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(ER_NOT_SUPPORTED_YET, "42000", message)
    }
    pub fn no_such_table(db: &str, table: &str) -> Self {
        Self::new(ER_NO_SUCH_TABLE, "42S02", format!("Table '{db}.{table}' doesn't exist"))
    }
    pub fn bad_field(column: &str, place: &str) -> Self {
        Self::new(ER_BAD_FIELD, "42S22", format!("Unknown column '{column}' in '{place}'"))
    }
    pub fn no_db() -> Self {
        Self::new(ER_NO_DB, "3D000", "No database selected; name one with USE db or qualify the table as db.table")
    }
    pub fn bad_db(db: &str) -> Self {
        Self::new(ER_BAD_DB, "42000", format!("Unknown database '{db}'"))
    }
    pub fn wrong_args(message: impl Into<String>) -> Self {
        Self::new(ER_WRONG_ARGUMENTS, "HY000", message)
    }
    pub fn general(message: impl Into<String>) -> Self {
        Self::new(ER_UNKNOWN_ERROR, "HY000", message)
    }
}

impl fmt::Display for SqlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ERROR {} ({}): {}", self.code, self.state, self.message)
    }
}

impl From<DbError> for SqlError {
    fn from(e: DbError) -> Self {
        let (code, state) = match e.code {
            ErrorCode::DuplicateKey => (ER_DUP_ENTRY, "23000"),
            ErrorCode::UnknownTable => (ER_NO_SUCH_TABLE, "42S02"),
            ErrorCode::UnknownColumn => (ER_BAD_FIELD, "42S22"),
            ErrorCode::UnknownIndex => (ER_CANT_DROP_KEY, "42000"),
            ErrorCode::TableExists => (ER_TABLE_EXISTS, "42S01"),
            ErrorCode::IndexExists => (ER_DUP_KEYNAME, "42000"),
            ErrorCode::ColumnExists => (ER_DUP_FIELDNAME, "42S21"),
            // A value a data node computed (`SET c = c + 1`) that the
            // column cannot hold.
            ErrorCode::TypeError if e.message.contains("out of range") => (ER_WARN_DATA_OUT_OF_RANGE, "22003"),
            ErrorCode::TypeError if e.message.contains("cannot be NULL") => (ER_BAD_NULL, "23000"),
            ErrorCode::TypeError => (ER_TRUNCATED_WRONG_VALUE_FOR_FIELD, "HY000"),
            ErrorCode::LockWaitTimeout => (ER_LOCK_WAIT_TIMEOUT, "HY000"),
            // Aborted by a conflict or a failure: the client should run the
            // transaction again, which is what MySQL clients do on 1213.
            ErrorCode::TransactionAborted | ErrorCode::UnknownTransaction => (ER_LOCK_DEADLOCK, "40001"),
            ErrorCode::SchemaVersionMismatch => (ER_TABLE_DEF_CHANGED, "HY000"),
            ErrorCode::WrongShard
            | ErrorCode::NodeUnavailable
            | ErrorCode::ClusterNotReady
            | ErrorCode::Timeout
            | ErrorCode::NotServing
            | ErrorCode::RedoFull
            | ErrorCode::OutOfMemory => (ER_GET_TEMPORARY_ERRMSG, "HY000"),
            ErrorCode::Malformed | ErrorCode::BadRequest | ErrorCode::FrameTooLarge | ErrorCode::NodeIdInUse => {
                (ER_UNKNOWN_ERROR, "HY000")
            }
            // The SQL node itself was refused by the cluster (its certificate):
            // a server configuration problem, not the user's.
            ErrorCode::Io | ErrorCode::Internal | ErrorCode::AccessDenied => (ER_INTERNAL, "HY000"),
            ErrorCode::TableFull => (ER_RECORD_FILE_FULL, "HY000"),
            // MySQL makes a write wait for a copying ALTER TABLE's metadata
            // lock and, after lock_wait_timeout, answers 1205; clients retry it.
            ErrorCode::TableAltering => (ER_LOCK_WAIT_TIMEOUT, "HY000"),
        };
        let mut message = e.message;
        if e.code.is_retriable() && code == ER_GET_TEMPORARY_ERRMSG {
            message = format!("temporary error, retry the transaction: {message}");
        }
        SqlError { code, state, message }
    }
}

/// A statement's error once a failure ended its cluster transaction. A
/// commit that was asked for and never answered may have taken effect: 1180
/// (ER_ERROR_DURING_COMMIT), which no client runs again on its own. A
/// transaction of BEGIN ... COMMIT that a data node failure aborted was
/// rolled back whole: 1213 with SQLSTATE 40001, as a deadlock, which
/// Connector/J, Django, Hibernate and sysbench answer by running the
/// transaction again. Other errors stay as they are.
pub fn after_failure(e: SqlError, outcome_unknown: bool, explicit_transaction: bool) -> SqlError {
    if outcome_unknown {
        return SqlError::new(
            ER_ERROR_DURING_COMMIT,
            "HY000",
            format!("the commit was not answered, so the transaction may or may not have taken effect: {}; check its rows before running it again", e.message),
        );
    }
    if explicit_transaction && e.code == ER_GET_TEMPORARY_ERRMSG {
        return SqlError::new(
            ER_LOCK_DEADLOCK,
            "40001",
            format!("the transaction was rolled back because a data node failed ({}); run it again", e.message),
        );
    }
    e
}
