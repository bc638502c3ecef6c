//! Wire messages between clients, data-node shards and the management server.
//!
//! Every connection carries frames: `[u32 LE length][u64 LE request id][body]`
//! where `length` counts the request id and the body, and the body is the
//! bincode 1 (fixed-width little-endian integers) encoding of one message
//! below. The request id sits outside the body so that a peer whose body does
//! not decode still gets an error answer it can match to its request.
//!
//! The first frame on a data-node connection is a `Hello`; on a
//! management-server connection every frame is an `MgmRequest`.

use crate::error::{DbError, Result};
use crate::expr::{Aggregate, Expr};
use crate::schema::{ColumnDef, ColumnId, IndexId, TableDef, TableId, TableSpec};
use crate::value::Value;
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use std::sync::Arc;

pub const PROTOCOL_VERSION: u32 = 7;
/// Bytes of the frame header: length (4) and request id (8).
pub const FRAME_HEADER: usize = 12;
/// Default largest frame a node accepts.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 64 << 20;

pub type NodeId = u16;

/// One shard (a data-node thread owning a set of partitions): the unit that
/// clients and peers address.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShardAddr {
    pub node: NodeId,
    pub shard: u16,
}

impl std::fmt::Display for ShardAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.node, self.shard)
    }
}

/// A transaction, named by its coordinator's shard and a sequence number
/// unique within that shard's lifetime.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TxId {
    pub tc: ShardAddr,
    pub seq: u64,
}

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
    Client { protocol: u32, name: String },
    Peer { protocol: u32, from: ShardAddr },
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

/// What a shard holds of the transactions coordinated on a failed node:
/// those it holds prepared, and those it has seen committed, as of layout
/// `version`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct TakeoverReport {
    pub dead: NodeId,
    pub version: u64,
    pub prepared: Vec<TxId>,
    pub committed: Vec<(TxId, CommitEpoch)>,
}

/// Messages between shards (transaction coordinator <-> local data managers).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum PeerMsg {
    TxOps {
        tx: TxId,
        ops: Vec<(u32, KeyOp)>,
    },
    /// `epoch` is the participant's current commit epoch: a transaction
    /// commits in an epoch no lower than that of any participant it touched,
    /// so it never lands in an earlier epoch than a commit it depends on.
    TxOpResults {
        tx: TxId,
        results: Vec<(u32, OpResult)>,
        epoch: CommitEpoch,
    },
    /// The coordinator decided commit in `epoch`: every REDO record of the
    /// transaction carries it.
    TxCommit {
        tx: TxId,
        epoch: CommitEpoch,
    },
    TxCommitted {
        tx: TxId,
    },
    TxAbort {
        tx: TxId,
    },
    /// Primary -> backup: for each write, lock the row for `tx` and stage
    /// its new image. Answered with `ReplicaPrepared`. (The writes of one
    /// turn for one transaction and backup travel in one message.)
    ReplicaPrepare {
        tx: TxId,
        writes: Vec<ReplicaWrite>,
    },
    /// Backup -> primary: per write (by its index in the transaction),
    /// staged, or why not.
    ReplicaPrepared {
        tx: TxId,
        results: Vec<(u32, Option<DbError>)>,
    },
    /// Primary -> backup: apply what `tx` staged and release its locks.
    ReplicaCommit {
        tx: TxId,
        epoch: CommitEpoch,
    },
    ReplicaCommitted {
        tx: TxId,
    },
    /// Primary -> backup: drop what `tx` staged and release its locks. Sent
    /// on the same link as the prepares, so it never overtakes one.
    ReplicaAbort {
        tx: TxId,
    },
    /// Primary -> its only backup, for the independent writes of one
    /// client batch: apply each write now (once the row's lock, if held,
    /// is released), logged in `epoch`; no commit follows. Answered with
    /// `ReplicaPrepared` (None: applied; an error: not applied).
    ReplicaApply {
        tx: TxId,
        epoch: CommitEpoch,
        writes: Vec<ReplicaWrite>,
    },
    /// Every live shard -> the takeover shard, in each layout version in
    /// which node `dead` is not live.
    TakeoverReport(TakeoverReport),
    /// The takeover shard's decision for a transaction of a failed
    /// coordinator, in the epoch the coordinator decided.
    TakeoverCommit {
        tx: TxId,
        epoch: CommitEpoch,
    },
    TakeoverAbort {
        tx: TxId,
    },
    /// Membership protocol between the first shards of data nodes.
    Member(MemberMsg),
    /// Epoch driver -> every shard: commits decided from now on belong to
    /// `epoch` or later. Answered with `EpochCompleted` once every commit
    /// this shard is responsible for in an earlier epoch has reached all
    /// its replicas.
    EpochSwitch {
        epoch: CommitEpoch,
    },
    /// `view`: the data nodes this shard considers started (a report from
    /// a shard that still counts a failed node is not complete: that
    /// node's transactions may still be committing through a takeover).
    EpochCompleted {
        epoch: CommitEpoch,
        view: Vec<NodeId>,
    },
    /// Epoch driver -> every shard: write and sync the REDO log through
    /// `epoch`; answered with `EpochSaved`.
    EpochSave {
        epoch: CommitEpoch,
    },
    EpochSaved {
        epoch: CommitEpoch,
    },
    /// Every live data node has synced `epoch`: it survives a crash of the
    /// whole cluster.
    EpochDurable {
        epoch: CommitEpoch,
    },
    /// Starting replica -> the partition's primary: copy the partition to
    /// me (I already take part in its writes). `attempt` numbers the
    /// requester's copies of it: the messages of a copy carry it, so those
    /// of one given up (the requester switched to another primary) are
    /// told apart.
    SyncRequest {
        table: TableId,
        partition: u32,
        attempt: u64,
    },
    /// Primary -> starting replica: the committed rows with keys in
    /// `range` hash to `digest`. The range whose upper end is None is the
    /// partition's last.
    SyncDigest {
        table: TableId,
        partition: u32,
        attempt: u64,
        range: SyncRange,
        digest: u64,
    },
    /// Starting replica -> primary: my rows of `range` differ; send yours.
    SyncFetch {
        table: TableId,
        partition: u32,
        attempt: u64,
        range: SyncRange,
    },
    /// Primary -> starting replica: every committed row of `range`, and
    /// the primary's epoch, which no row's commit is later than (the
    /// replica's next checkpoint must not claim an earlier end epoch than
    /// the rows it holds).
    SyncRows {
        table: TableId,
        partition: u32,
        attempt: u64,
        range: SyncRange,
        rows: Vec<SyncRow>,
        epoch: CommitEpoch,
    },
    /// Starting replica (copy done) -> primary: I become this partition's
    /// primary when admitted; stop taking locks on it and tell me when no
    /// transaction holds any (`SyncHandedOver`).
    SyncHandover {
        table: TableId,
        partition: u32,
    },
    SyncHandedOver {
        table: TableId,
        partition: u32,
    },
    /// Primary -> starting replica: the copy cannot be done (the table was
    /// dropped, or this shard is not the primary any more).
    SyncRefused {
        table: TableId,
        partition: u32,
        attempt: u64,
        error: DbError,
    },
}

/// Keys after `after` (exclusive) up to `upto` (inclusive); None is
/// unbounded on that side.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct SyncRange {
    #[serde(with = "serde_bytes")]
    pub after: Option<Vec<u8>>,
    #[serde(with = "serde_bytes")]
    pub upto: Option<Vec<u8>>,
}

/// One replicated write: the operation's index in its transaction, its
/// row's key, and the row's new image (None deletes the row).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct ReplicaWrite {
    pub idx: u32,
    pub table: TableId,
    pub partition: u32,
    #[serde(with = "serde_bytes")]
    pub key: Vec<u8>,
    #[serde(with = "serde_bytes")]
    pub image: Option<Vec<u8>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct SyncRow {
    #[serde(with = "serde_bytes")]
    pub key: Vec<u8>,
    #[serde(with = "serde_bytes")]
    pub row: Vec<u8>,
}

/// A commit epoch (NDB's global checkpoint id). Every commit belongs to
/// one; an epoch is durable once every live data node has synced its REDO
/// log through it, and a system restart brings back exactly the commits of
/// the durable epochs.
pub type CommitEpoch = u64;

/// A membership view number: every change of the set of live data nodes
/// installs the next epoch.
pub type Epoch = u64;

/// A proposal number of the membership consensus: higher rounds win, the
/// proposing node breaks ties.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ballot {
    pub round: u64,
    pub node: NodeId,
}

/// Messages of the membership protocol (`cluster/src/membership.rs`):
/// heartbeats between data nodes, and single-decree Paxos per epoch among
/// the data nodes of the current view plus the arbitrator (the management
/// server). Times are on the sender's own monotonic clock.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum MemberMsg {
    /// Sent every heartbeat interval to the other members of the view.
    /// `echo` returns the `sent_at` of the newest heartbeat received from
    /// the destination: it renews the destination's lease.
    Heartbeat {
        epoch: Epoch,
        sent_at: u64,
        echo: Option<u64>,
    },
    /// Phase 1 for the view `epoch` (the next one); `base` lists the members
    /// of view `epoch - 1`, so an acceptor that missed it can catch up.
    Prepare {
        epoch: Epoch,
        ballot: Ballot,
        base: Vec<NodeId>,
    },
    Promise {
        epoch: Epoch,
        ballot: Ballot,
        accepted: Option<(Ballot, Vec<NodeId>)>,
    },
    /// Phase 2: accept `members` as view `epoch`. An acceptor stops
    /// echoing the nodes the view leaves out.
    Accept {
        epoch: Epoch,
        ballot: Ballot,
        members: Vec<NodeId>,
    },
    Accepted {
        epoch: Epoch,
        ballot: Ballot,
    },
    /// The ballot is too low, or the epoch is already decided (`installed`
    /// then carries the newest view the acceptor knows).
    Reject {
        epoch: Epoch,
        promised: Option<Ballot>,
        installed: Option<(Epoch, Vec<NodeId>)>,
    },
    /// View `epoch` is chosen: these are the live data nodes.
    Install {
        epoch: Epoch,
        members: Vec<NodeId>,
    },
    /// The arbitrator recorded view `epoch`.
    InstallAck {
        epoch: Epoch,
    },
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeStatus {
    NotStarted,
    /// Restarting into a running cluster: it takes part in every write of
    /// its partitions (as the last backup) while it copies their rows from
    /// the primaries, but serves no reads and is primary of nothing.
    Starting,
    Started,
}

impl NodeStatus {
    /// Whether the node holds its partitions' writes: started, or starting
    /// and catching up.
    pub fn takes_writes(self) -> bool {
        matches!(self, NodeStatus::Started | NodeStatus::Starting)
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct DataNodeInfo {
    pub node_id: NodeId,
    pub node_group: u32,
    pub host: String,
    pub status: NodeStatus,
    /// Address of each shard, in shard order (empty until started).
    pub shards: Vec<String>,
    pub pid: u32,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ClusterLayout {
    pub version: u64,
    pub cluster_name: String,
    pub replicas: u8,
    pub mgmd_node_id: NodeId,
    pub mgmd_address: String,
    pub datanodes: Vec<DataNodeInfo>,
    pub node_groups: u32,
    pub default_partitions: u32,
    pub lock_wait_timeout_ms: u64,
    /// Data nodes exchange heartbeats at this interval; a node silent for
    /// `heartbeat_missed` intervals is removed from the view.
    pub heartbeat_interval_ms: u64,
    pub heartbeat_missed: u32,
    /// Length of a commit epoch: REDO logs are synced and the durable epoch
    /// advances this often.
    pub epoch_interval_ms: u64,
    /// A data node shard starts a local checkpoint once this much REDO was
    /// written since its last one started; 0 disables checkpoints.
    pub checkpoint_trigger_mb: u64,
    /// The latest epoch every live data node has synced, as reported by the
    /// data nodes (0 before the first).
    pub durable_epoch: CommitEpoch,
    /// 0 while the cluster has not formed; then the epoch of the first view
    /// of this run, which the data nodes started at that moment form (at
    /// the first start every configured node, at a system restart every
    /// node of the last view; a node that had left before joins later by a
    /// node restart). View epochs never repeat across system restarts, so a
    /// late message of a process that died with the cluster is stale.
    #[serde(default)]
    pub first_view: Epoch,
}

impl ClusterLayout {
    /// The version of the layout the shards use in membership view
    /// `view_epoch` of the management server's layout version
    /// `base_version`. Ordered by view first, then base version, so that
    /// it grows with either and two different layouts never share one.
    pub fn view_version(base_version: u64, view_epoch: u64) -> u64 {
        debug_assert!(base_version < 1 << 32, "layout version {base_version} overflows 32 bits");
        (view_epoch << 32) | (base_version & 0xFFFF_FFFF)
    }

    /// The membership view epoch a layout version (`view_version`) is of.
    pub fn view_epoch_of(version: u64) -> u64 {
        version >> 32
    }

    pub fn datanode(&self, node: NodeId) -> Option<&DataNodeInfo> {
        self.datanodes.iter().find(|d| d.node_id == node)
    }

    /// Whether the node takes part in writes (started, or starting).
    pub fn takes_writes(&self, node: NodeId) -> bool {
        self.datanode(node).is_some_and(|d| d.status.takes_writes())
    }

    /// The nodes that take part in writes, by node id.
    pub fn writer_nodes(&self) -> Vec<NodeId> {
        let mut nodes: Vec<NodeId> =
            self.datanodes.iter().filter(|d| d.status.takes_writes()).map(|d| d.node_id).collect();
        nodes.sort_unstable();
        nodes
    }

    pub fn all_started(&self) -> bool {
        self.datanodes.iter().all(|d| d.status == NodeStatus::Started)
    }

    /// Nodes of a node group, ordered by node id.
    pub fn group_nodes(&self, group: u32) -> Vec<&DataNodeInfo> {
        let mut nodes: Vec<&DataNodeInfo> = self.datanodes.iter().filter(|d| d.node_group == group).collect();
        nodes.sort_by_key(|d| d.node_id);
        nodes
    }

    /// The shard holding the primary replica of a partition, or None when its
    /// node is not started. See [`Router`], which answers the same without
    /// allocating.
    pub fn primary_of(&self, partition: u32) -> Option<ShardAddr> {
        Router::new(self).primary_of(partition)
    }

    /// Applies a membership view: started nodes outside it are not started
    /// any more, and starting nodes it admitted are started. (A starting
    /// node is not a member yet: the management server, which it reports
    /// to, says when it fails.)
    pub fn restrict_to_view(&mut self, members: &[NodeId]) {
        for d in self.datanodes.iter_mut() {
            let member = members.contains(&d.node_id);
            match d.status {
                NodeStatus::Started if !member => {
                    d.status = NodeStatus::NotStarted;
                    d.shards.clear();
                    d.pid = 0;
                }
                NodeStatus::Starting if member => d.status = NodeStatus::Started,
                _ => {}
            }
        }
    }

    pub fn shard_address(&self, shard: ShardAddr) -> Option<&str> {
        self.datanode(shard.node)?.shards.get(shard.shard as usize).map(|s| s.as_str())
    }
}

/// Partition-to-shard routing precomputed from a layout, for hot paths.
///
/// Partitions are dealt round-robin over node groups, primaries round-robin
/// over a group's replicas, and then over the primary node's shards.
#[derive(Clone, Debug, Default)]
pub struct Router {
    /// Per node group, its nodes in node-id order: (node, shard count, status).
    groups: Vec<Vec<(NodeId, u16, NodeStatus)>>,
}

impl Router {
    pub fn new(layout: &ClusterLayout) -> Router {
        let groups = (0..layout.node_groups)
            .map(|g| layout.group_nodes(g).iter().map(|d| (d.node_id, d.shards.len() as u16, d.status)).collect())
            .collect();
        Router { groups }
    }

    /// The replicas of a partition that take its writes: the started ones,
    /// primary first, then backups in node-group order after it, then those
    /// of starting nodes (which are catching up).
    pub fn replicas_of(&self, partition: u32) -> Vec<ShardAddr> {
        let groups = self.groups.len() as u32;
        if groups == 0 {
            return Vec::new();
        }
        let nodes = &self.groups[(partition % groups) as usize];
        let local = (partition / groups) as usize;
        let with = |status: NodeStatus| {
            (0..nodes.len())
                .map(|k| nodes[(local + k) % nodes.len()])
                .filter(move |&(_, shards, s)| s == status && shards > 0)
                .map(|(node, shards, _)| ShardAddr { node, shard: ((local / nodes.len()) % shards as usize) as u16 })
        };
        with(NodeStatus::Started).chain(with(NodeStatus::Starting)).collect()
    }

    /// The position of `node` in its node group (what `read_replica_of`'s
    /// `prefer` names), if the layout lists it.
    pub fn replica_position(&self, node: NodeId) -> Option<usize> {
        self.groups.iter().find_map(|g| g.iter().position(|&(n, _, _)| n == node))
    }

    /// The most nodes any node group has.
    pub fn replicas(&self) -> usize {
        self.groups.iter().map(Vec::len).max().unwrap_or(0)
    }

    /// Where a read-committed read of `partition` may go: the replica on the
    /// node at position `prefer` (modulo the group's size) of the
    /// partition's node group when that node is started, else the primary.
    /// A batch that uses one `prefer` for all its reads reaches one node per
    /// node group instead of all of them. Allocation-free.
    pub fn read_replica_of(&self, partition: u32, prefer: usize) -> Option<ShardAddr> {
        let groups = self.groups.len() as u32;
        if groups == 0 {
            return None;
        }
        let nodes = &self.groups[(partition % groups) as usize];
        let local = (partition / groups) as usize;
        match nodes.get(prefer % nodes.len().max(1)) {
            Some(&(node, shards, NodeStatus::Started)) if shards > 0 => {
                Some(ShardAddr { node, shard: ((local / nodes.len()) % shards as usize) as u16 })
            }
            _ => self.primary_of(partition),
        }
    }

    /// The first started replica of a partition: its primary, or the backup
    /// that took over when the primary's node left. Allocation-free.
    pub fn primary_of(&self, partition: u32) -> Option<ShardAddr> {
        let groups = self.groups.len() as u32;
        if groups == 0 {
            return None;
        }
        let nodes = &self.groups[(partition % groups) as usize];
        let local = (partition / groups) as usize;
        (0..nodes.len())
            .map(|k| nodes[(local + k) % nodes.len()])
            .find(|&(_, shards, status)| status == NodeStatus::Started && shards > 0)
            .map(|(node, shards, _)| ShardAddr { node, shard: ((local / nodes.len()) % shards as usize) as u16 })
    }
}

/// A committed read of a `ClientRequest::Batch` whose key and column list
/// are borrowed: encodes exactly like the `KeyOp` it stands for, so that a
/// batch of lookups is sent from one buffer of keys (see `BatchOf`).
#[derive(Serialize)]
#[serde(rename = "KeyOp")]
pub struct LookupOpRef<'a> {
    pub table: TableId,
    pub table_version: u32,
    pub partition: u32,
    #[serde(with = "serde_bytes")]
    pub key: &'a [u8],
    pub kind: &'static OpKind,
    pub projection: Option<&'a [ColumnId]>,
}

/// The `kind` of every `LookupOpRef`.
pub static COMMITTED_READ: OpKind = OpKind::Read { lock: LockMode::Committed };

/// Serializes exactly like `ClientRequest::Batch` of the operations that
/// its content serializes as a sequence of (`KeyOp`s or `LookupOpRef`s; a
/// slice, not an array, which serde writes as a tuple without its length):
/// the client sends borrowed operations, and keeps them to retry after a
/// layout change.
pub struct BatchOf<T>(pub T);

impl<T: Serialize> Serialize for BatchOf<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_newtype_variant("ClientRequest", 0, "Batch", &self.0)
    }
}

/// Serializes exactly like `ClientResponse::Batch` of the results that its
/// content serializes as a sequence of (`OpResult`s or `OpResultRef`s).
pub struct BatchAnswerOf<T>(pub T);

impl<T: Serialize> Serialize for BatchAnswerOf<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_newtype_variant("ClientResponse", 1, "Batch", &self.0)
    }
}

/// One operation's result in an answer to a batch, its row borrowed:
/// from the frame (`decode_batch_answer`), or from the data node's table
/// (an answer is serialized as `OpResult` is).
#[derive(Debug, PartialEq, Serialize)]
#[serde(rename = "OpResult")]
pub enum OpResultRef<'a> {
    Row(#[serde(with = "serde_bytes")] &'a [u8]),
    NotFound,
    Done,
    Error(DbError),
    Unchanged,
}

/// Decodes an answer to a `Batch` request without copying its rows:
/// `each` gets every operation's result in order, and the count is
/// returned. Any other answer (an error for the whole batch) comes back
/// decoded as `Err`.
pub fn decode_batch_answer(
    body: &[u8],
    each: impl FnMut(OpResultRef<'_>) -> Result<()>,
) -> Result<std::result::Result<usize, ClientResponse>> {
    use bincode::Options;
    // The variant index of `ClientResponse::Batch`, as the codec writes it
    // (checked by `batch_answers_decode_borrowed_like_owned`).
    const BATCH: [u8; 4] = 1u32.to_le_bytes();
    if body.get(..4) != Some(&BATCH[..]) {
        return decode_body::<ClientResponse>(body).map(Err);
    }
    let mut failed = None;
    let seed = answer_decode::Answer { each, failed: &mut failed };
    let decoded = codec().with_limit(body.len() as u64 * 4 + 1024).deserialize_seed(seed, body);
    if let Some(e) = failed {
        return Err(e);
    }
    decoded.map(Ok).map_err(|e| DbError::malformed(format!("could not decode the message: {e}")))
}

/// A committed read of a `Batch` request, its key borrowed from the frame
/// (`decode_lookups`).
#[derive(Debug, PartialEq)]
pub struct LookupRead<'a> {
    pub table: TableId,
    pub table_version: u32,
    pub partition: u32,
    pub key: &'a [u8],
    /// The columns to return, `columns[start..end]` of `decode_lookups`
    /// (reads listing the same columns one after the other share them);
    /// None: the whole row.
    pub projection: Option<(u32, u32)>,
}

/// Decodes a `Batch` request made only of committed reads without an
/// allocation per read: keys stay in the frame, and every read's column
/// list goes to `columns`. Says false for any other request or a batch
/// holding any other operation (and for a malformed one), which is then
/// decoded whole as usual.
pub fn decode_lookups<'a>(body: &'a [u8], reads: &mut Vec<LookupRead<'a>>, columns: &mut Vec<ColumnId>) -> bool {
    use bincode::Options;
    // The variant index of `ClientRequest::Batch`, as the codec writes it
    // (checked by `lookups_decode_borrowed_like_owned`).
    if body.get(..4) != Some(&0u32.to_le_bytes()[..]) {
        return false;
    }
    let seed = lookup_decode::Request { reads, columns };
    codec().with_limit(body.len() as u64 * 4 + 1024).deserialize_seed(seed, body).is_ok()
}

/// The serde visitors of `decode_lookups`.
mod lookup_decode {
    use super::{ColumnId, LockMode, LookupRead};
    use serde::de::{self, DeserializeSeed, EnumAccess, SeqAccess, VariantAccess, Visitor};
    use std::fmt;

    pub(super) struct Request<'r, 'a> {
        pub reads: &'r mut Vec<LookupRead<'a>>,
        pub columns: &'r mut Vec<ColumnId>,
    }

    impl<'de> DeserializeSeed<'de> for Request<'_, 'de> {
        type Value = ();
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_enum("ClientRequest", &["Batch"], self)
        }
    }

    impl<'de> Visitor<'de> for Request<'_, 'de> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a batch of committed reads")
        }
        fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
            let (variant, access): (u32, _) = data.variant()?;
            if variant != 0 {
                return Err(de::Error::custom("not a batch"));
            }
            access.newtype_variant_seed(Reads(self))
        }
    }

    struct Reads<'r, 'a>(Request<'r, 'a>);

    impl<'de> DeserializeSeed<'de> for Reads<'_, 'de> {
        type Value = ();
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_seq(self)
        }
    }

    impl<'de> Visitor<'de> for Reads<'_, 'de> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a list of operations")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while let Some(read) = seq.next_element_seed(Read(&mut *self.0.columns))? {
                // Sized once the first operation shows a batch of reads: a
                // batch of writes is turned away without an allocation.
                if self.0.reads.is_empty() {
                    self.0.reads.reserve(seq.size_hint().unwrap_or(0).min(1 << 16) + 1);
                }
                self.0.reads.push(read);
            }
            Ok(())
        }
    }

    struct Read<'r>(&'r mut Vec<ColumnId>);

    const FIELDS: &[&str] = &["table", "table_version", "partition", "key", "kind", "projection"];

    impl<'de> DeserializeSeed<'de> for Read<'_> {
        type Value = LookupRead<'de>;
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<LookupRead<'de>, D::Error> {
            d.deserialize_struct("KeyOp", FIELDS, self)
        }
    }

    impl<'de> Visitor<'de> for Read<'_> {
        type Value = LookupRead<'de>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an operation")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<LookupRead<'de>, A::Error> {
            let missing = || de::Error::custom("an operation is cut short");
            let table = seq.next_element()?.ok_or_else(missing)?;
            let table_version = seq.next_element()?.ok_or_else(missing)?;
            let partition = seq.next_element()?.ok_or_else(missing)?;
            let key: &'de [u8] = seq.next_element()?.ok_or_else(missing)?;
            // Told from its variant, a write is refused before its row is read.
            seq.next_element_seed(CommittedRead)?.ok_or_else(missing)?;
            let start = self.0.len();
            let listed = seq.next_element_seed(Projection(&mut *self.0))?.ok_or_else(missing)?;
            let projection = match listed {
                false => None,
                true => {
                    let end = self.0.len();
                    // The same list as the read before: share it.
                    let len = end - start;
                    if start >= len && self.0[start - len..start] == self.0[start..end] {
                        self.0.truncate(start);
                        Some(((start - len) as u32, start as u32))
                    } else {
                        Some((start as u32, end as u32))
                    }
                }
            };
            Ok(LookupRead { table, table_version, partition, key, projection })
        }
    }

    /// An `OpKind` that must be a committed read.
    struct CommittedRead;

    impl<'de> DeserializeSeed<'de> for CommittedRead {
        type Value = ();
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_enum("OpKind", &["Read"], self)
        }
    }

    impl<'de> Visitor<'de> for CommittedRead {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a committed read")
        }
        fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
            let (variant, access): (u32, _) = data.variant()?;
            // `OpKind::Read` is variant 0 (`lookups_decode_borrowed_like_owned`).
            if variant != 0 {
                return Err(de::Error::custom("not a read"));
            }
            access.struct_variant(&["lock"], self)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            match seq.next_element::<LockMode>()? {
                Some(LockMode::Committed) => Ok(()),
                _ => Err(de::Error::custom("not a committed read")),
            }
        }
    }

    /// An optional column list, appended to the batch's: says whether
    /// there was one.
    struct Projection<'r>(&'r mut Vec<ColumnId>);

    impl<'de> DeserializeSeed<'de> for Projection<'_> {
        type Value = bool;
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
            d.deserialize_option(self)
        }
    }

    impl<'de> Visitor<'de> for Projection<'_> {
        type Value = bool;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an optional list of columns")
        }
        fn visit_none<E: de::Error>(self) -> Result<bool, E> {
            Ok(false)
        }
        fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
            d.deserialize_seq(self)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
            while let Some(column) = seq.next_element::<ColumnId>()? {
                self.0.push(column);
            }
            Ok(true)
        }
    }
}

/// The serde visitors of `decode_batch_answer`.
mod answer_decode {
    use super::{DbError, OpResultRef};
    use serde::de::{self, DeserializeSeed, EnumAccess, SeqAccess, VariantAccess, Visitor};
    use std::fmt;

    pub(super) struct Answer<'f, F> {
        pub each: F,
        /// An error `each` returned (decoding stops at it).
        pub failed: &'f mut Option<DbError>,
    }

    impl<'de, F: FnMut(OpResultRef<'_>) -> crate::Result<()>> DeserializeSeed<'de> for Answer<'_, F> {
        type Value = usize;
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<usize, D::Error> {
            d.deserialize_enum("ClientResponse", &["Hello", "Batch"], self)
        }
    }

    impl<'de, F: FnMut(OpResultRef<'_>) -> crate::Result<()>> Visitor<'de> for Answer<'_, F> {
        type Value = usize;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a batch answer")
        }
        fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<usize, A::Error> {
            let (variant, access): (u32, _) = data.variant()?;
            if variant != 1 {
                return Err(de::Error::custom(format!("answer variant {variant} is not a batch answer")));
            }
            access.newtype_variant_seed(Results(self))
        }
    }

    struct Results<'f, F>(Answer<'f, F>);

    impl<'de, F: FnMut(OpResultRef<'_>) -> crate::Result<()>> DeserializeSeed<'de> for Results<'_, F> {
        type Value = usize;
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<usize, D::Error> {
            d.deserialize_seq(self)
        }
    }

    impl<'de, F: FnMut(OpResultRef<'_>) -> crate::Result<()>> Visitor<'de> for Results<'_, F> {
        type Value = usize;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a list of operation results")
        }
        fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<usize, A::Error> {
            let mut count = 0;
            while let Some(()) = seq.next_element_seed(OneResult(&mut self.0))? {
                count += 1;
            }
            Ok(count)
        }
    }

    struct OneResult<'a, 'f, F>(&'a mut Answer<'f, F>);

    impl<'de, F: FnMut(OpResultRef<'_>) -> crate::Result<()>> DeserializeSeed<'de> for OneResult<'_, '_, F> {
        type Value = ();
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_enum("OpResult", &["Row", "NotFound", "Done", "Error", "Unchanged"], self)
        }
    }

    impl<'de, F: FnMut(OpResultRef<'_>) -> crate::Result<()>> Visitor<'de> for OneResult<'_, '_, F> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an operation result")
        }
        fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
            let (variant, access): (u32, _) = data.variant()?;
            let result = match variant {
                0 => return access.newtype_variant_seed(RowBytes(self.0)),
                1 => access.unit_variant().map(|_| OpResultRef::NotFound)?,
                2 => access.unit_variant().map(|_| OpResultRef::Done)?,
                3 => OpResultRef::Error(access.newtype_variant::<DbError>()?),
                4 => access.unit_variant().map(|_| OpResultRef::Unchanged)?,
                other => return Err(de::Error::custom(format!("operation result variant {other} does not exist"))),
            };
            deliver(self.0, result)
        }
    }

    fn deliver<E: de::Error, F: FnMut(OpResultRef<'_>) -> crate::Result<()>>(
        answer: &mut Answer<'_, F>,
        result: OpResultRef<'_>,
    ) -> Result<(), E> {
        (answer.each)(result).map_err(|e| {
            let message = e.message.clone();
            *answer.failed = Some(e);
            E::custom(message)
        })
    }

    struct RowBytes<'a, 'f, F>(&'a mut Answer<'f, F>);

    impl<'de, F: FnMut(OpResultRef<'_>) -> crate::Result<()>> DeserializeSeed<'de> for RowBytes<'_, '_, F> {
        type Value = ();
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_bytes(self)
        }
    }

    impl<'de, F: FnMut(OpResultRef<'_>) -> crate::Result<()>> Visitor<'de> for RowBytes<'_, '_, F> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a row's bytes")
        }
        fn visit_bytes<E: de::Error>(self, bytes: &[u8]) -> Result<(), E> {
            deliver(self.0, OpResultRef::Row(bytes))
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum MgmRequest {
    GetLayout,
    /// A data node asks for a node id and its settings (answered with
    /// `Registered`).
    RegisterDataNode {
        node_id: Option<NodeId>,
        pid: u32,
        protocol: u32,
    },
    /// The registered node has bound its shards (answered with `Started`);
    /// from then on the connection carries `NodeCommand`s from the
    /// management server to the node.
    DataNodeStarted {
        node_id: NodeId,
        shards: Vec<String>,
        /// What the node found on its disk (None: nothing, an initial start).
        recovery: Option<NodeRecovery>,
    },
    /// The started node restored its data (as `Started` planned) and can
    /// serve: the management server now marks it started.
    DataNodeReady {
        node_id: NodeId,
    },
    /// A restarting data node (status starting) copied every partition
    /// from the primaries and checkpointed: admit it to the view. Answered
    /// once the view that admits it is chosen.
    DataNodeSynced {
        node_id: NodeId,
    },
    /// The epoch driver reports a new durable epoch.
    EpochDurable {
        epoch: CommitEpoch,
    },
    CreateTable(TableSpec),
    DropTable {
        database: String,
        name: String,
    },
    GetTable {
        database: String,
        name: String,
    },
    ListTables,
    /// Creates an ordered index; a unique one also gets its hidden table
    /// (which the caller fills from the rows already stored).
    CreateIndex {
        database: String,
        table: String,
        index: String,
        columns: Vec<String>,
        unique: bool,
    },
    DropIndex {
        database: String,
        table: String,
        index: String,
    },
    /// Appends columns; stored rows read `fill` in them (one value per column).
    AddColumns {
        database: String,
        table: String,
        columns: Vec<ColumnDef>,
        fill: Vec<Value>,
    },
    /// Rows and data memory of every data node.
    ReportMemory,
    /// Stops every data node and then the management server.
    Shutdown,
    /// Stops one data node (its node group must keep a started replica).
    StopNode {
        node_id: NodeId,
    },
    /// Asks for a stopped data node to be started again (a node restart;
    /// `initial` empties its data directory first). The process manager
    /// that runs the cluster's processes (`latsdb start`) carries it out.
    StartNode {
        node_id: NodeId,
        initial: bool,
    },
    /// The process manager collects the pending start requests (answered
    /// with `StartRequests`).
    TakeStartRequests,
    /// A data node's membership message to the arbitrator (answered with
    /// `Member`).
    Member {
        from: NodeId,
        msg: MemberMsg,
    },
    /// Renames columns or changes their defaults: definition only, no row
    /// is rewritten (answered with the new `Table`).
    ChangeColumns {
        database: String,
        table: String,
        changes: Vec<crate::schema::ColumnChange>,
    },
    /// Gives a table a new name, in the same or another database (answered
    /// with the new `Table`).
    RenameTable {
        database: String,
        table: String,
        new_database: String,
        new_name: String,
    },
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum MgmResponse {
    Layout(ClusterLayout),
    Registered {
        node_id: NodeId,
        host: String,
        port: u16,
        threads: u16,
        /// 0 lets the node choose from its memory and `nodes_on_host`.
        data_memory_mb: u64,
        /// Data nodes configured on the same host (they share its memory
        /// and CPUs).
        nodes_on_host: u16,
        /// This node's position among them, in configuration order.
        host_index: u16,
        cpu_bind: crate::config::CpuBind,
        /// Explicit CPUs for the shard threads, one per thread.
        cpus: Option<Vec<u32>>,
        /// Keep idle CPUs polling while the node runs (`DataNodeDefaults::idle_poll`).
        idle_poll: bool,
    },
    Started {
        layout: ClusterLayout,
        tables: Vec<TableDef>,
        /// How the node's shards begin (restore from disk or start empty).
        start: StartPlan,
    },
    Table(TableDef),
    Tables(Vec<TableDef>),
    /// Per started data node, its shards' usage.
    Memory(Vec<(NodeId, Vec<ShardMemory>)>),
    /// The arbitrator's answer to a membership message, if any.
    Member(Option<MemberMsg>),
    /// Data nodes to start: (node, initial).
    StartRequests(Vec<(NodeId, bool)>),
    Done,
    Error(DbError),
}

/// What a data node's disk holds, reported when it starts.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct NodeRecovery {
    /// The latest epoch every shard of the node synced (its REDO logs hold
    /// every commit up to it).
    pub saved_epoch: CommitEpoch,
    /// The highest epoch any of its REDO records carries.
    pub max_epoch: CommitEpoch,
}

/// The management server's answer to a starting data node.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct StartPlan {
    /// Restore the local checkpoint and REDO log up to this epoch (None:
    /// start empty and discard what the disk holds).
    pub restore_epoch: Option<CommitEpoch>,
    /// New commits begin in this epoch, above any epoch a REDO log of the
    /// cluster has ever carried.
    pub first_epoch: CommitEpoch,
    /// The cluster is running: after restoring, the node joins it as a
    /// starting node and copies its partitions from the primaries (a node
    /// restart) instead of serving at once.
    pub join: bool,
}

/// Rows and estimated data memory of one shard.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ShardMemory {
    pub shard: u16,
    pub rows: u64,
    pub used_bytes: u64,
    /// 0 means unlimited.
    pub budget_bytes: u64,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum SchemaChange {
    CreateTable(TableDef),
    /// A new definition of an existing table (an index was added or dropped).
    AlterTable(TableDef),
    DropTable(TableId),
}

/// Sent by the management server to a registered data node.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum NodeCommand {
    /// Are you alive? Answered with `Done`.
    Heartbeat,
    SetLayout(ClusterLayout),
    ApplySchema(SchemaChange),
    ReportMemory,
    Stop,
    /// To the president of the view: propose a view that adds this
    /// starting node (answered once it is chosen).
    Admit(NodeId),
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum NodeReply {
    Done,
    Memory(Vec<ShardMemory>),
    Error(DbError),
}

fn codec() -> impl bincode::Options {
    use bincode::Options;
    bincode::DefaultOptions::new().with_fixint_encoding().allow_trailing_bytes()
}

/// Appends a whole frame (header and body) for `message` to `out`.
pub fn encode_frame<T: Serialize>(out: &mut Vec<u8>, request_id: u64, message: &T) {
    use bincode::Options;
    let start = out.len();
    out.extend_from_slice(&[0u8; 4]);
    out.extend_from_slice(&request_id.to_le_bytes());
    // Serializing into a Vec cannot fail for these message types.
    codec().serialize_into(&mut *out, message).expect("encoding a message into memory cannot fail");
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
}

pub fn frame<T: Serialize>(request_id: u64, message: &T) -> Vec<u8> {
    use bincode::Options;
    // Sized up front: a batch answer of 100 rows would otherwise grow (and
    // copy) its buffer eight times on the way to 12 KiB.
    let body = codec().serialized_size(message).unwrap_or(0) as usize;
    let mut out = Vec::with_capacity(FRAME_HEADER + body);
    encode_frame(&mut out, request_id, message);
    out
}

/// Decodes a frame body. Never panics; allocation is bounded by the body's
/// length because bincode reads from a slice.
pub fn decode_body<T: DeserializeOwned>(body: &[u8]) -> Result<T> {
    use bincode::Options;
    codec()
        .with_limit(body.len() as u64 * 4 + 1024)
        .deserialize(body)
        .map_err(|e| DbError::malformed(format!("could not decode the message: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_rotate_the_primary_over_a_node_group() {
        let node = |id: u16| DataNodeInfo {
            node_id: id,
            node_group: 0,
            host: "h".into(),
            status: NodeStatus::Started,
            shards: vec!["a".into()],
            pid: 0,
        };
        let layout = ClusterLayout {
            version: 1,
            cluster_name: "c".into(),
            replicas: 2,
            mgmd_node_id: 1,
            mgmd_address: "m".into(),
            datanodes: vec![node(2), node(3)],
            node_groups: 1,
            default_partitions: 0,
            lock_wait_timeout_ms: 1,
            heartbeat_interval_ms: 100,
            heartbeat_missed: 5,
            epoch_interval_ms: 100,
            checkpoint_trigger_mb: 64,
            durable_epoch: 0,
            first_view: 1,
        };
        let router = Router::new(&layout);
        let at = |n| ShardAddr { node: n, shard: 0 };
        assert_eq!(router.replicas_of(0), vec![at(2), at(3)]);
        for p in 0..8 {
            for prefer in 0..2 {
                let chosen = router.read_replica_of(p, prefer).unwrap();
                assert!(router.replicas_of(p).contains(&chosen), "partition {p}: {chosen} is not a replica");
                assert_eq!(chosen.node, [2, 3][prefer], "partition {p}: one batch reaches one node");
            }
        }
        assert_eq!(router.replicas_of(1), vec![at(3), at(2)]);
        for p in 0..8 {
            assert_eq!(router.primary_of(p), router.replicas_of(p).first().copied());
        }
        // When node 2 leaves, node 3 takes over every partition.
        let mut without_2 = layout.clone();
        without_2.datanodes[0].status = NodeStatus::NotStarted;
        let router = Router::new(&without_2);
        for p in 0..8 {
            assert_eq!(router.primary_of(p), Some(at(3)));
            assert_eq!(router.replicas_of(p), vec![at(3)]);
        }
        // Restarting, it takes writes as the last backup and nothing else.
        let mut restarting = layout.clone();
        restarting.datanodes[0].status = NodeStatus::Starting;
        let router = Router::new(&restarting);
        for p in 0..8 {
            assert_eq!(router.primary_of(p), Some(at(3)));
            assert_eq!(router.replicas_of(p), vec![at(3), at(2)]);
            assert_eq!(router.read_replica_of(p, 0), Some(at(3)));
        }
        // Admitted to the view, it is started and primary of its share again.
        restarting.restrict_to_view(&[2, 3]);
        assert_eq!(restarting, layout);
    }

    /// A batch of lookups sent from borrowed keys is the batch of owned
    /// operations on the wire.
    #[test]
    fn lookups_encode_like_owned_reads() {
        let read = |key: Vec<u8>, projection: Option<Arc<[ColumnId]>>| KeyOp {
            table: 3,
            table_version: 2,
            partition: 1,
            key,
            kind: OpKind::Read { lock: LockMode::Committed },
            projection,
        };
        let ops = [read(vec![1, 2, 3], Some(Arc::from([0, 2]))), read(vec![], None), read(vec![9; 40], None)];
        let borrowed: Vec<LookupOpRef> = ops
            .iter()
            .map(|op| LookupOpRef {
                table: op.table,
                table_version: op.table_version,
                partition: op.partition,
                key: &op.key,
                kind: &COMMITTED_READ,
                projection: op.projection.as_deref(),
            })
            .collect();
        assert_eq!(frame(5, &ClientRequest::Batch(ops.to_vec())), frame(5, &BatchOf(&borrowed)));
    }

    /// A batch of committed reads decodes borrowed as it decodes owned, a
    /// column list repeated by the next read shared; any other request is
    /// left to the owned decoding.
    #[test]
    fn lookups_decode_borrowed_like_owned() {
        let read = |key: Vec<u8>, projection: Option<&[ColumnId]>| KeyOp {
            table: 3,
            table_version: 2,
            partition: key.len() as u32,
            key,
            kind: OpKind::Read { lock: LockMode::Committed },
            projection: projection.map(Arc::from),
        };
        let ops = vec![
            read(vec![1, 2, 3], Some(&[0, 2])),
            read(vec![4], Some(&[0, 2])),
            read(vec![], None),
            read(vec![5; 30], Some(&[1])),
            read(vec![6], Some(&[0, 2])),
        ];
        let body = |request: &ClientRequest| frame(0, request)[FRAME_HEADER..].to_vec();
        let batch = body(&ClientRequest::Batch(ops.clone()));
        let (mut reads, mut columns) = (Vec::new(), Vec::new());
        assert!(decode_lookups(&batch, &mut reads, &mut columns));
        assert_eq!(columns, [0, 2, 1, 0, 2], "the second read shares the first's list");
        let back: Vec<KeyOp> = reads
            .iter()
            .map(|r| KeyOp {
                table: r.table,
                table_version: r.table_version,
                partition: r.partition,
                key: r.key.to_vec(),
                kind: OpKind::Read { lock: LockMode::Committed },
                projection: r.projection.map(|(s, e)| Arc::from(&columns[s as usize..e as usize])),
            })
            .collect();
        assert_eq!(back, ops);
        let mut with_write = ops.clone();
        with_write[2].kind = OpKind::Delete;
        let mut locking = ops.clone();
        locking[4].kind = OpKind::Read { lock: LockMode::Shared };
        let mut update = ops.clone();
        update[0].kind = OpKind::Update { set: vec![(1, crate::expr::Expr::Const(crate::Value::Int(2)))] };
        let mut insert = ops.clone();
        insert[1].kind = OpKind::Insert { row: vec![crate::Value::Int(2)] };
        for other in [
            ClientRequest::Batch(with_write),
            ClientRequest::Batch(locking),
            ClientRequest::Batch(update),
            ClientRequest::Batch(insert),
            ClientRequest::TxExec { tx: None, ops: ops.clone(), commit: true },
            ClientRequest::Ping,
        ] {
            assert!(!decode_lookups(&body(&other), &mut Vec::new(), &mut Vec::new()), "{other:?}");
        }
        assert!(!decode_lookups(&batch[..batch.len() - 3], &mut Vec::new(), &mut Vec::new()));
    }

    /// Results serialized borrowed are the owned ones on the wire.
    #[test]
    fn borrowed_results_encode_like_owned() {
        let error = DbError::new(crate::ErrorCode::WrongShard, "moved");
        let owned = vec![
            OpResult::Row(vec![1, 2]),
            OpResult::NotFound,
            OpResult::Done,
            OpResult::Error(error.clone()),
            OpResult::Unchanged,
        ];
        let borrowed = [
            OpResultRef::Row(&[1, 2]),
            OpResultRef::NotFound,
            OpResultRef::Done,
            OpResultRef::Error(error),
            OpResultRef::Unchanged,
        ];
        assert_eq!(frame(4, &ClientResponse::Batch(owned)), frame(4, &BatchAnswerOf(&borrowed[..])));
    }

    /// Every kind of result decodes borrowed as it decodes owned; an answer
    /// that is not a batch comes back whole.
    #[test]
    fn batch_answers_decode_borrowed_like_owned() {
        let results = vec![
            OpResult::Row(vec![1, 2, 3]),
            OpResult::NotFound,
            OpResult::Row(vec![]),
            OpResult::Done,
            OpResult::Error(DbError::new(crate::ErrorCode::WrongShard, "moved")),
            OpResult::Unchanged,
        ];
        let body = |message: &ClientResponse| frame(0, message)[FRAME_HEADER..].to_vec();
        let mut seen = Vec::new();
        let count = decode_batch_answer(&body(&ClientResponse::Batch(results.clone())), |r| {
            seen.push(match r {
                OpResultRef::Row(bytes) => OpResult::Row(bytes.to_vec()),
                OpResultRef::NotFound => OpResult::NotFound,
                OpResultRef::Done => OpResult::Done,
                OpResultRef::Error(e) => OpResult::Error(e),
                OpResultRef::Unchanged => OpResult::Unchanged,
            });
            Ok(())
        })
        .unwrap();
        assert_eq!(count, Ok(results.len()));
        assert_eq!(seen, results);
        let refused = ClientResponse::Error(DbError::new(crate::ErrorCode::NotServing, "stopping"));
        assert_eq!(decode_batch_answer(&body(&refused), |_| Ok(())).unwrap(), Err(refused));
        // A consumer's error stops the decoding and is returned as it was.
        let stop = decode_batch_answer(&body(&ClientResponse::Batch(results)), |r| match r {
            OpResultRef::NotFound => Err(DbError::malformed("bad row")),
            _ => Ok(()),
        });
        assert_eq!(stop.unwrap_err(), DbError::malformed("bad row"));
        // Cut short, it fails cleanly.
        let whole = body(&ClientResponse::Batch(vec![OpResult::Row(vec![7; 30])]));
        assert!(decode_batch_answer(&whole[..whole.len() - 5], |_| Ok(())).is_err());
    }

    #[test]
    fn borrowed_batch_encodes_like_owned_batch() {
        let op = KeyOp {
            table: 3,
            table_version: 2,
            partition: 1,
            key: vec![1, 2, 3],
            kind: OpKind::Read { lock: LockMode::Committed },
            projection: Some(Arc::from([0, 2])),
        };
        let owned = frame(9, &ClientRequest::Batch(vec![op.clone(), op.clone()]));
        let borrowed = frame(9, &BatchOf(&[op.clone(), op][..]));
        assert_eq!(owned, borrowed);
    }
}
