//! The peer protocol: messages between shards (transaction coordinator,
//! local data managers, replicas, takeover, epochs, node-restart copies).

use super::*;

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
    /// Participant -> coordinator: operations of `tx` this shard cannot
    /// take now, handed back unexecuted (it looked at nothing and locked
    /// nothing): it is not their partition's primary in its layout, or the
    /// partition is being handed to another primary. The coordinator sends
    /// them again once its layout moves on, and answers `error` if that
    /// takes longer than the lock-wait timeout.
    TxOpsReturned {
        tx: TxId,
        ops: Vec<(u32, KeyOp)>,
        error: DbError,
    },
}

impl PeerMsg {
    /// Epochs at or past this are refused from peers: at one epoch a
    /// millisecond a cluster would need 146 million years to reach it, so
    /// only corrupt or hostile bytes carry one, and taking it would make
    /// every later epoch overflow.
    pub const EPOCH_LIMIT: CommitEpoch = CommitEpoch(1 << 62);

    /// The commit epoch the message carries, if any.
    fn epoch(&self) -> Option<CommitEpoch> {
        match self {
            PeerMsg::TxOpResults { epoch, .. }
            | PeerMsg::TxCommit { epoch, .. }
            | PeerMsg::ReplicaCommit { epoch, .. }
            | PeerMsg::ReplicaApply { epoch, .. }
            | PeerMsg::TakeoverCommit { epoch, .. }
            | PeerMsg::EpochSwitch { epoch }
            | PeerMsg::EpochCompleted { epoch, .. }
            | PeerMsg::EpochSave { epoch }
            | PeerMsg::EpochSaved { epoch }
            | PeerMsg::EpochDurable { epoch }
            | PeerMsg::SyncRows { epoch, .. } => Some(*epoch),
            PeerMsg::TakeoverReport(report) => report.committed.iter().map(|(_, e)| *e).max(),
            _ => None,
        }
    }

    /// What makes the message impossible whatever the receiver's state,
    /// or None. A shard drops such a message before it reaches a block:
    /// the bytes came off a socket, and the blocks assert these facts.
    pub fn malformed(&self) -> Option<&'static str> {
        let commits = matches!(
            self,
            PeerMsg::TxCommit { .. }
                | PeerMsg::ReplicaCommit { .. }
                | PeerMsg::ReplicaApply { .. }
                | PeerMsg::TakeoverCommit { .. }
        );
        match self.epoch() {
            Some(epoch) if epoch >= Self::EPOCH_LIMIT => Some("an epoch no cluster reaches"),
            Some(CommitEpoch::NONE) if commits => Some("a commit in epoch 0"),
            _ => None,
        }
    }
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
