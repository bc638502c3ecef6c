//! Errors that cross the wire. Every error carries a stable code (which a
//! client can match on and which tells whether a retry may succeed) and a
//! human-readable message that says what went wrong and what to do.

use serde::{Deserialize, Serialize};
use std::fmt;

pub type Result<T, E = DbError> = std::result::Result<T, E>;

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// The request could not be decoded or violates the protocol.
    Malformed,
    /// A frame exceeded the configured maximum size.
    FrameTooLarge,
    /// The request is well-formed but asks for something invalid.
    BadRequest,
    UnknownTable,
    UnknownColumn,
    UnknownIndex,
    TableExists,
    IndexExists,
    /// A value does not fit the column's type.
    TypeError,
    DuplicateKey,
    /// The client's cached schema is older than the data node's.
    SchemaVersionMismatch,
    /// The shard does not own the partition (the client's layout is stale).
    WrongShard,
    /// A lock was not granted within the lock-wait timeout; the transaction
    /// was aborted and may be retried.
    LockWaitTimeout,
    /// The transaction is unknown to the coordinator (already finished or aborted).
    UnknownTransaction,
    /// The transaction was aborted; the reason is in the message.
    TransactionAborted,
    /// A node needed for the request is not reachable.
    NodeUnavailable,
    /// The cluster is not started yet (not all data nodes are up).
    ClusterNotReady,
    /// A memory pool is exhausted.
    OutOfMemory,
    Timeout,
    Io,
    Internal,
    /// The data node refused the request without executing any of it: it
    /// cannot confirm it is still a member of the cluster (its lease ran
    /// out) while the membership changes. Safe to retry, writes included.
    NotServing,
    ColumnExists,
    /// A data node asked for a node id whose previous process the
    /// management server still counts as running (it may have just died).
    NodeIdInUse,
    /// A table cannot take the write: its shard's data memory or its data
    /// node's tablespace is full (MySQL's 1114). The message names the
    /// setting to raise.
    TableFull,
    /// A shard keeps as much REDO log as its limit allows (NDB's "REDO log
    /// files overloaded"): the write was refused without effect and may be
    /// retried once a checkpoint lets older records go.
    RedoFull,
    /// The peer is not allowed in: it spoke without TLS to a cluster that
    /// requires it, or its certificate is not of the cluster's CA or does
    /// not hold the role the request needs. Not retriable.
    AccessDenied,
    /// ALTER TABLE is copying the table into a new one: writes to it are
    /// refused without effect until the copy ends (reads go on). Retry the
    /// write after the ALTER TABLE; it is not retried for the caller, as a
    /// copy may take long.
    TableAltering,
}

impl ErrorCode {
    /// Whether the same request may succeed when retried unchanged (after a
    /// layout or schema refresh where that applies).
    pub fn is_retriable(self) -> bool {
        matches!(
            self,
            ErrorCode::LockWaitTimeout
                | ErrorCode::WrongShard
                | ErrorCode::SchemaVersionMismatch
                | ErrorCode::NodeUnavailable
                | ErrorCode::ClusterNotReady
                | ErrorCode::Timeout
                | ErrorCode::NotServing
                | ErrorCode::RedoFull
        )
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct DbError {
    pub code: ErrorCode,
    pub message: String,
}

impl DbError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        DbError { code, message: message.into() }
    }
    pub fn malformed(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Malformed, message)
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::BadRequest, message)
    }
    pub fn type_error(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::TypeError, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }
    pub fn io(context: &str, err: std::io::Error) -> Self {
        Self::new(ErrorCode::Io, format!("{context}: {err}"))
    }
    pub fn is_retriable(&self) -> bool {
        self.code.is_retriable()
    }
}

impl fmt::Display for DbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.code, self.message)?;
        if self.is_retriable() {
            write!(f, " (retriable)")?;
        }
        Ok(())
    }
}

impl std::error::Error for DbError {}
