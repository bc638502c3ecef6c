//! The client protocol: what a client (the native client, and through it
//! the SQL and REST nodes) sends a data-node shard, and the answers.

use super::*;

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockMode {
    /// Read the latest committed value; never waits for locks.
    Committed,
    Shared,
    Exclusive,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum OpKind {
    Read {
        lock: LockMode,
    },
    /// Full row in column order; fails with DuplicateKey if the key exists.
    Insert {
        row: Vec<Value>,
    },
    /// Full row in column order; inserts or overwrites.
    Upsert {
        row: Vec<Value>,
    },
    /// Column assignments computed from the current row; NotFound if the row
    /// does not exist.
    Update {
        set: Vec<(ColumnId, Expr)>,
    },
    Delete,
}

impl OpKind {
    pub fn is_write(&self) -> bool {
        !matches!(self, OpKind::Read { .. })
    }
}

/// A single-row operation by primary key.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct KeyOp {
    pub table: TableId,
    pub table_version: u32,
    pub partition: u32,
    /// The memcomparable encoding of the primary key.
    #[serde(with = "serde_bytes")]
    pub key: Vec<u8>,
    pub kind: OpKind,
    /// Columns to return for reads; None returns the whole row. Shared, so
    /// that the operations of a batch reading the same columns hold one
    /// list.
    pub projection: Option<Arc<[ColumnId]>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum OpResult {
    /// The row (or its projection) in the compact row format.
    Row(#[serde(with = "serde_bytes")] Vec<u8>),
    NotFound,
    /// A write took effect.
    Done,
    Error(DbError),
    /// An update found its row and its assignments left it as it was:
    /// nothing was written (the row stays locked in a transaction).
    Unchanged,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum KeyBound {
    Unbounded,
    Included(#[serde(with = "serde_bytes")] Vec<u8>),
    Excluded(#[serde(with = "serde_bytes")] Vec<u8>),
}

/// A read-committed scan of one partition along an ordered index.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ScanRequest {
    pub table: TableId,
    pub table_version: u32,
    pub partition: u32,
    pub index: IndexId,
    /// Bounds on (a prefix of) the index key in memcomparable encoding.
    pub lower: KeyBound,
    pub upper: KeyBound,
    /// Continue after this index entry (from a previous page).
    #[serde(with = "serde_bytes")]
    pub resume_after: Option<Vec<u8>>,
    pub filter: Option<Expr>,
    pub projection: Option<Vec<ColumnId>>,
    /// Most rows in this page (the node may return fewer to bound the
    /// response size, and then sets `resume`).
    pub max_rows: u32,
    /// When not empty, the node returns these aggregates over every matching
    /// row of the partition instead of rows.
    pub aggregates: Vec<Aggregate>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ScanPage {
    pub rows: Vec<serde_bytes::ByteBuf>,
    /// Present when the partition has more matching rows.
    #[serde(with = "serde_bytes")]
    pub resume: Option<Vec<u8>>,
    pub aggregates: Vec<Value>,
}

/// First frame on a data-node connection.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum Hello {
    Client {
        protocol: u32,
        name: String,
    },
    /// A link from shard `from` of the data-node process `process`
    /// (`DataNodeInfo::process`): what comes over it is that process's
    /// alone, so a receiver can tell its late messages from those of the
    /// node's next process.
    Peer {
        protocol: u32,
        from: ShardAddr,
        process: u64,
    },
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum ClientRequest {
    /// Independent single-row operations, each its own transaction.
    Batch(Vec<KeyOp>),
    /// Executes operations in a transaction coordinated by this shard; `tx`
    /// None starts a new one. With `commit` the transaction commits after the
    /// operations succeed.
    TxExec {
        tx: Option<TxId>,
        ops: Vec<KeyOp>,
        commit: bool,
    },
    TxAbort {
        tx: TxId,
    },
    Scan(ScanRequest),
    Ping,
    /// Answered (with `Durable`) once the commits this shard acknowledged
    /// before this request are durable: their epoch is synced on every
    /// live data node.
    WaitDurable,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum ClientResponse {
    Hello {
        shard: ShardAddr,
    },
    Batch(Vec<OpResult>),
    /// Results of `TxExec`, in operation order.
    TxExec {
        tx: TxId,
        results: Vec<OpResult>,
        committed: bool,
        /// The epoch the commit belongs to (NONE while the transaction
        /// stays open, and for one that wrote nothing).
        epoch: CommitEpoch,
    },
    /// The transaction was aborted (by an error or on request).
    TxAborted {
        tx: TxId,
        error: Option<DbError>,
    },
    Scan(ScanPage),
    Pong,
    /// The latest durable epoch, at least the one `WaitDurable` waited for.
    Durable(CommitEpoch),
    Error(DbError),
}
