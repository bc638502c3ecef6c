//! Local data manager: executes key operations on the shard's partitions.
//!
//! Committed reads never lock. Locking reads and writes take row locks;
//! inside a transaction the locks are held and writes are staged until the
//! coordinator says commit or abort. An independent write from a batch
//! ("autocommit") applies at once when its row is unlocked, and otherwise
//! queues behind the lock and applies the moment it is granted.

use crate::context::{owned_partition, unknown_table, wrong_shard, ConnId, Context, FastMap};
use crate::locks::{Acquire, LockKey, LockTable};
use crate::prepare::{check_key, check_redo_room, check_tablespace, prepare, Prepared, Unprepared};
use crate::shard::Outbox;
use crate::sync::PartitionSync;
use latsdb_storage::Partition;
use latsdb_types::proto::{
    BatchAnswerOf, ClientResponse, CommitEpoch, KeyOp, LockMode, LookupRead, NodeStatus, OpKind, OpResult, OpResultRef,
    PeerMsg, ReplicaWrite, ShardAddr, TxId,
};
use latsdb_types::schema::ColumnId;
use latsdb_types::{DbError, ErrorCode, Result, TableMeta};
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

#[derive(Clone, Copy)]
pub(crate) enum Origin {
    /// An independent operation of a batch, on a partition without backups.
    Batch {
        batch: u64,
        idx: u32,
    },
    /// An independent write of a batch on a partition with backups: run as an
    /// implicit transaction (`tx`) that this shard coordinates.
    Implicit {
        tx: TxId,
        batch: u64,
        idx: u32,
    },
    Tx {
        tx: TxId,
        idx: u32,
    },
    /// A write staged here as a backup for `primary`.
    Replica {
        tx: TxId,
        idx: u32,
        primary: ShardAddr,
    },
    /// A write `primary` sent this backup to apply at once (`ReplicaApply`),
    /// waiting for its row's lock.
    ReplicaNow {
        tx: TxId,
        idx: u32,
        primary: ShardAddr,
        epoch: latsdb_types::proto::CommitEpoch,
    },
}

pub(crate) struct Pending {
    pub(crate) origin: Origin,
    pub(crate) prepared: Prepared,
}

/// A staged row image.
pub(crate) struct Staged {
    pub(crate) partition: u32,
    /// None deletes the row.
    pub(crate) image: Option<Box<[u8]>>,
    /// The primary whose write this is (this shard for its own): while
    /// the partition is copied from it, its commit must come from it too
    /// (see `Shard::replica_apply`).
    pub(crate) primary: ShardAddr,
}

/// A write waiting for its backups to stage it.
pub(crate) struct Replicating {
    pub(crate) waiting: Backups,
    pub(crate) result: OpResult,
    /// Its row's position in the transaction's staged rows.
    pub(crate) staged_at: u32,
}

/// The backups a write still waits for, kept inline: every replicated
/// write has such a set. A node group has at most four replicas, and a
/// partition moving to an added group has the new group's too.
#[derive(Clone, Copy)]
pub(crate) struct Backups {
    addrs: [ShardAddr; MAX_BACKUPS],
    len: u8,
}

/// The most backups a write can have: its group's other replicas and, while
/// it moves, every replica of the group it moves to.
const MAX_BACKUPS: usize = 7;

impl Backups {
    fn new(backups: &[ShardAddr]) -> Backups {
        assert!(
            backups.len() <= MAX_BACKUPS,
            "a partition has {} backups; two node groups of at most 4 replicas have at most {MAX_BACKUPS} besides the primary",
            backups.len()
        );
        let mut addrs = [ShardAddr { node: 0, shard: 0 }; MAX_BACKUPS];
        addrs[..backups.len()].copy_from_slice(backups);
        Backups { addrs, len: backups.len() as u8 }
    }

    /// Removes `a`; returns whether it was there.
    pub(crate) fn remove(&mut self, a: &ShardAddr) -> bool {
        let len = self.len as usize;
        let Some(i) = self.addrs[..len].iter().position(|x| x == a) else { return false };
        self.addrs.copy_within(i + 1..len, i);
        self.len -= 1;
        true
    }

    pub(crate) fn retain(&mut self, keep: impl Fn(&ShardAddr) -> bool) {
        let mut kept = 0;
        for i in 0..self.len as usize {
            if keep(&self.addrs[i]) {
                self.addrs[kept] = self.addrs[i];
                kept += 1;
            }
        }
        self.len = kept as u8;
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn as_slice(&self) -> &[ShardAddr] {
        &self.addrs[..self.len as usize]
    }
}

/// Rows a transaction locked, in the order it locked them.
pub(crate) type KeySet = indexmap::IndexSet<LockKey, foldhash::fast::RandomState>;
/// Per-row state of a transaction, in the order its rows were first touched.
pub(crate) type KeyMap<V> = indexmap::IndexMap<LockKey, V, foldhash::fast::RandomState>;

/// Ordered sets and maps: the order in which locks are released decides
/// which waiters run first, and a simulation must replay it exactly. Locks
/// and staged rows keep insertion order (a hash lookup and an append each,
/// where a B-tree of a 100-write batch shifted its nodes on every insert).
#[derive(Default)]
pub(crate) struct LdmTx {
    pub(crate) locks: KeySet,
    /// Queued lock requests per row (a transaction may queue several).
    pub(crate) waits: BTreeMap<LockKey, u32>,
    /// Staged row images: None deletes. Keyed like locks.
    pub(crate) staged: KeyMap<Staged>,
    /// Writes (by operation index) whose backups have not all answered.
    pub(crate) replicating: indexmap::IndexMap<u32, Replicating, foldhash::fast::RandomState>,
    /// Backups that were sent writes of this transaction (also ones that
    /// left since): commit and abort are forwarded to them.
    pub(crate) backups: BTreeSet<ShardAddr>,
    /// For an implicit transaction: the independent writes of one client
    /// batch that it carries.
    pub(crate) autocommit: Option<AutoBatch>,
    /// As a backup: committed in this epoch, the writes kept here held back
    /// until the primary they are copied from commits them too (see
    /// `Shard::replica_apply`).
    pub(crate) held: Option<latsdb_types::proto::CommitEpoch>,
    /// The epoch of the writes sent to the backup to apply at once
    /// (`ReplicaApply`): this commit is logged in it, and the epoch is not
    /// complete here until the commit is.
    pub(crate) applied_in: Option<latsdb_types::proto::CommitEpoch>,
    /// Positions in `staged` of writes the backup refused to apply: they
    /// are dropped at the commit.
    pub(crate) refused: Vec<u32>,
}

impl LdmTx {
    /// Room for `rows` more locked and staged rows.
    pub(crate) fn reserve(&mut self, rows: usize) {
        self.locks.reserve(rows);
        self.staged.reserve(rows);
    }
}

/// The replicated independent writes of one client batch run as one implicit
/// transaction, so its backups get one commit per batch, not one per write.
/// Each write still has its own result.
#[derive(Default)]
pub(crate) struct AutoBatch {
    pub(crate) batch: u64,
    /// Writes not yet executed and replicated.
    pub(crate) open: usize,
    /// Writes staged on every replica, answered Done once committed.
    pub(crate) done: Vec<u32>,
    /// A backup failed to stage one: the whole transaction aborts.
    pub(crate) failed: Option<DbError>,
    /// The writes go to the backup with `ReplicaApply` (see replica.rs).
    pub(crate) apply_now: bool,
}

/// Whom to tell when a commit has reached every replica.
#[derive(Clone)]
pub(crate) enum CommitReply {
    Coordinator,
    Batch {
        batch: u64,
        slots: Vec<u32>,
    },
    /// A takeover decision: the coordinator is gone, nobody waits.
    Nobody,
}

/// A commit applied here and waiting for its backups' `ReplicaCommitted`.
pub(crate) struct Committing {
    pub(crate) waiting: BTreeSet<ShardAddr>,
    pub(crate) reply: CommitReply,
    pub(crate) epoch: latsdb_types::proto::CommitEpoch,
}

/// Transactions this shard saw decided, remembered for a while. The commit
/// log (by a coordinator's or a primary's word) lets a takeover after a
/// coordinator fails tell that a commit decision was made. The abort log
/// (a coordinator's or takeover's abort) makes a backup refuse a prepare
/// that arrives after the abort: the primary's link and the coordinator's
/// are different, so a prepare can come late. Bounded: the oldest are
/// forgotten.
#[derive(Default)]
pub(crate) struct TxLog {
    order: std::collections::VecDeque<TxId>,
    /// Transaction -> the epoch it committed in (0 in the abort log).
    /// A backup looks every prepared write up in the abort log.
    set: FastMap<TxId, latsdb_types::proto::CommitEpoch>,
}

const COMMIT_LOG_ENTRIES: usize = 1 << 16;

impl TxLog {
    pub(crate) fn record(&mut self, tx: TxId, epoch: latsdb_types::proto::CommitEpoch) {
        if self.set.insert(tx, epoch).is_none() {
            self.order.push_back(tx);
            if self.order.len() > COMMIT_LOG_ENTRIES {
                if let Some(old) = self.order.pop_front() {
                    self.set.remove(&old);
                }
            }
        }
    }

    pub(crate) fn contains(&self, tx: &TxId) -> bool {
        self.set.contains_key(tx)
    }

    pub(crate) fn coordinated_by(
        &self,
        node: latsdb_types::proto::NodeId,
    ) -> Vec<(TxId, latsdb_types::proto::CommitEpoch)> {
        let mut ids: Vec<(TxId, latsdb_types::proto::CommitEpoch)> =
            self.set.iter().filter(|(t, _)| t.tc.node == node).map(|(t, e)| (*t, *e)).collect();
        ids.sort_unstable();
        ids
    }
}

struct PendingBatch {
    conn: ConnId,
    req_id: u64,
    results: Vec<Option<OpResult>>,
    remaining: usize,
}

/// The local data manager block: row locks, the transactions this shard
/// takes part in (as primary and as backup), client batches waiting for
/// locks or backups, and the logs of decided transactions.
#[derive(Default)]
pub(crate) struct Ldm {
    pub(crate) locks: LockTable<Pending>,
    /// Transactions this shard takes part in as a primary (or coordinates
    /// implicitly for an independent write).
    pub(crate) txs: FastMap<TxId, LdmTx>,
    /// Transactions this shard takes part in as a backup.
    pub(crate) replica_txs: FastMap<TxId, LdmTx>,
    /// Commits applied here and waiting for backups' ReplicaCommitted.
    pub(crate) committing: FastMap<TxId, Committing>,
    pub(crate) commit_log: TxLog,
    pub(crate) abort_log: TxLog,
    batches: FastMap<u64, PendingBatch>,
    next_batch: u64,
    next_implicit: u64,
}

impl Ldm {
    /// Implicit transactions are numbered from `first_seq` (as the
    /// coordinator's are), so a restarted process does not reuse the ids
    /// of its previous one, which peers may still remember as aborted.
    pub(crate) fn starting_at(first_seq: u64) -> Ldm {
        assert!(first_seq < 1 << 62, "transaction numbers must leave the implicit bit free");
        Ldm { next_implicit: first_seq, ..Ldm::default() }
    }

    /// Rows of these tables that transactions staged here (as primary or
    /// backup) and have not applied or dropped yet.
    pub(crate) fn staged_writes_to(&self, tables: &[latsdb_types::schema::TableId]) -> usize {
        if tables.is_empty() {
            return 0;
        }
        let staged = self.txs.values().chain(self.replica_txs.values()).flat_map(|t| t.staged.keys());
        staged.filter(|k| tables.contains(&k.table)).count()
    }

    pub(crate) fn open(&self) -> usize {
        self.txs.len() + self.replica_txs.len() + self.committing.len()
    }

    /// The transactions of node `dead` this shard holds prepared (as
    /// primary or backup), and those it saw committed, with their epochs:
    /// its takeover report.
    pub(crate) fn coordinated_by(&self, dead: latsdb_types::proto::NodeId) -> (Vec<TxId>, Vec<(TxId, CommitEpoch)>) {
        let mut prepared: BTreeSet<TxId> = self.txs.keys().filter(|t| t.tc.node == dead).copied().collect();
        prepared.extend(self.replica_txs.keys().filter(|t| t.tc.node == dead));
        (prepared.into_iter().collect(), self.commit_log.coordinated_by(dead))
    }

    /// The transactions that staged or are staging writes here as primary.
    /// A transaction that only read (and holds locks) is not one of them:
    /// what it writes later is replicated to the replicas of that moment.
    pub(crate) fn primary_writers(&self) -> impl Iterator<Item = TxId> + '_ {
        self.txs.iter().filter(|(_, t)| !t.staged.is_empty() || !t.replicating.is_empty()).map(|(id, _)| *id)
    }

    /// `primary_writers`, and the transactions this shard takes part in as
    /// a backup (every one of which stages, or waits to stage, a write).
    pub(crate) fn writers(&self) -> impl Iterator<Item = TxId> + '_ {
        self.primary_writers().chain(self.replica_txs.keys().copied())
    }

    /// The transactions this shard takes part in, as primary or backup.
    pub(crate) fn all_txs(&self) -> impl Iterator<Item = TxId> + '_ {
        self.txs.keys().chain(self.replica_txs.keys()).copied()
    }

    /// What this shard holds of `tx`, for a log line that explains a wait.
    pub(crate) fn describe(&self, tx: &TxId) -> String {
        let of = |role: &str, t: &LdmTx| {
            let replicating: Vec<String> = t
                .replicating
                .iter()
                .map(|(idx, r)| format!("write {idx} waits for {:?}", r.waiting.as_slice()))
                .collect();
            format!(
                "as {role}: {} lock(s), {} lock wait(s), {} staged, backups {:?}{}{}{}",
                t.locks.len(),
                t.waits.len(),
                t.staged.len(),
                t.backups,
                if t.autocommit.is_some() { ", a batch's implicit transaction" } else { "" },
                if replicating.is_empty() { String::new() } else { format!(", {}", replicating.join(", ")) },
                t.held.map_or(String::new(), |e| format!(", held for epoch {e}")),
            )
        };
        let mut parts = Vec::new();
        if let Some(t) = self.txs.get(tx) {
            parts.push(of("primary", t));
        }
        if let Some(t) = self.replica_txs.get(tx) {
            parts.push(of("backup", t));
        }
        if self.committing.contains_key(tx) {
            parts.push("committing".to_string());
        }
        parts.join("; ")
    }

    /// Whether this shard still takes part in `tx`, as primary or backup.
    pub(crate) fn is_open(&self, tx: &TxId) -> bool {
        self.txs.contains_key(tx) || self.replica_txs.contains_key(tx)
    }

    /// Whether a transaction holds, waits for or staged a row of the
    /// partition here as its primary.
    pub(crate) fn holds_in_partition(
        &self,
        meta: &TableMeta,
        table: latsdb_types::schema::TableId,
        partition: u32,
    ) -> bool {
        let in_partition = |k: &LockKey| k.table == table && meta.partition_of(&k.key) == partition;
        self.txs.values().any(|t| {
            t.locks.iter().any(in_partition) || t.waits.keys().any(in_partition) || t.staged.keys().any(in_partition)
        })
    }

    /// Whether any transaction, as primary or backup, holds, waits for or
    /// staged a row of the partition here.
    pub(crate) fn touches_partition(
        &self,
        meta: &TableMeta,
        table: latsdb_types::schema::TableId,
        partition: u32,
    ) -> bool {
        let staged_in = |t: &LdmTx| t.staged.iter().any(|(k, s)| k.table == table && s.partition == partition);
        self.holds_in_partition(meta, table, partition) || self.replica_txs.values().any(staged_in)
    }

    /// Whether every commit this block is responsible for in an epoch
    /// below `epoch` reached all its replicas: none waits for a backup's
    /// `ReplicaCommitted`, no write a backup applied at once waits for its
    /// commit here, and no transaction of a failed coordinator is still
    /// prepared (a takeover may commit it in an old epoch).
    pub(crate) fn all_committed_below(&self, cx: &Context, epoch: CommitEpoch) -> bool {
        if self.committing.values().any(|c| c.epoch < epoch) {
            return false;
        }
        if self.txs.values().any(|l| l.applied_in.is_some_and(|e| e < epoch)) {
            return false;
        }
        self.all_txs().all(|tx| cx.layout.takes_writes(tx.tc.node))
    }

    /// The copy of a partition moved to a new primary: the writes held
    /// back for the old one's commit are applied now (see
    /// `PartitionSync::switch_sources`).
    pub(crate) fn apply_held(&mut self, cx: &mut Context, sync: &PartitionSync, out: &mut Outbox) {
        let mut held: Vec<TxId> =
            self.replica_txs.iter().filter(|(_, t)| t.held.is_some()).map(|(tx, _)| *tx).collect();
        held.sort_unstable();
        for tx in held {
            if let Some(rtx) = self.replica_txs.remove(&tx) {
                let epoch = rtx.held.expect("filtered on held above");
                self.replica_apply(cx, sync, tx, rtx, None, epoch, out);
            }
        }
    }

    /// Checks the block's invariants (run by the simulator after every
    /// step): every staged row is locked by its transaction, every lock a
    /// transaction lists is held in the lock table, writes waiting for
    /// backups wait for some, and every waiting batch counts its missing
    /// answers.
    pub(crate) fn check(&self, cx: &Context) {
        let me = cx.me();
        self.locks.check();
        for (id, t) in self.txs.iter().chain(self.replica_txs.iter()) {
            for key in &t.locks {
                assert!(self.locks.holds(key, *id), "shard {me}: {id:?} lists a lock on {key:?} it does not hold");
            }
            for key in t.staged.keys() {
                assert!(t.locks.contains(key), "shard {me}: {id:?} staged {key:?} without its lock");
            }
            assert!(t.waits.values().all(|n| *n > 0), "shard {me}: {id:?} counts an empty wait");
            assert!(
                t.replicating.values().all(|r| !r.waiting.is_empty()),
                "shard {me}: a write of {id:?} waits for no backup"
            );
            assert!(t.autocommit.as_ref().is_none_or(|a| a.open > 0), "shard {me}: {id:?} carries a settled batch");
        }
        for (id, t) in &self.txs {
            if t.autocommit.is_some() {
                assert!(
                    id.tc == me && id.seq >> 63 == 1,
                    "shard {me}: a batch runs in {id:?}, not an implicit transaction of its own"
                );
            }
            assert!(t.held.is_none(), "shard {me}: {id:?} holds writes back as a primary");
        }
        for (id, c) in &self.committing {
            assert!(!c.waiting.is_empty(), "shard {me}: commit of {id:?} waits for no backup");
            assert!(!self.txs.contains_key(id), "shard {me}: {id:?} commits while still open as primary");
        }
        for (batch, b) in &self.batches {
            let missing = b.results.iter().filter(|r| r.is_none()).count();
            assert!(
                b.remaining > 0 && b.remaining == missing,
                "shard {me}: batch {batch} miscounts its missing answers"
            );
            assert!(*batch < self.next_batch, "shard {me}: batch {batch} numbered beyond the last one");
        }
    }

    pub(crate) fn participations(&self) -> Vec<TxId> {
        let mut ids: Vec<TxId> =
            self.txs.keys().chain(self.replica_txs.keys()).chain(self.committing.keys()).copied().collect();
        ids.sort_unstable();
        ids
    }
}

/// Id of an implicit transaction this shard coordinates for independent
/// operations (a lock owner for a queued autocommit operation, or the
/// transaction of a batch's replicated writes). The top bit keeps it apart
/// from coordinator transaction ids.
fn implicit_tx(me: ShardAddr, seq: u64) -> TxId {
    TxId { tc: me, seq: (1 << 63) | seq }
}

fn lock_mode(kind: &OpKind) -> LockMode {
    match kind {
        OpKind::Read { lock } => *lock,
        _ => LockMode::Exclusive,
    }
}

impl Ldm {
    /// The answer to a client's batch of committed reads (`on_lookups`),
    /// as a frame: what `ldm_batch` answers the same reads, in three passes
    /// as it does, with the rows found copied straight from the table into
    /// the frame. `Err` lists the pages of the rows' disk parts when one
    /// of them is not cached and the request must wait for it (the pager);
    /// they are listed after the rows are prefetched, so the list costs no
    /// cache miss of its own.
    pub(crate) fn lookups(
        cx: &Context,
        req_id: u64,
        reads: &[LookupRead],
        columns: &[ColumnId],
    ) -> std::result::Result<Vec<u8>, Vec<u32>> {
        let projection = |read: &LookupRead| read.projection.map(|(start, end)| &columns[start as usize..end as usize]);
        let ready: Vec<Result<(&Partition, &TableMeta, u64)>> = reads
            .iter()
            .map(|read| {
                let table = cx.table(read.table, read.table_version)?;
                let partition = owned_partition(table, read.partition, cx.cfg.me)?;
                check_key(&table.meta, read.key, read.partition, projection(read))?;
                let hash = partition.key_hash(read.key);
                partition.prefetch_slot(hash);
                Ok((partition, &*table.meta, hash))
            })
            .collect();
        for (partition, _, hash) in ready.iter().flatten() {
            partition.prefetch_row(*hash);
        }
        // Disk parts take two more dependent misses: a page's slot, then its record.
        if ready.iter().flatten().any(|(partition, _, _)| partition.has_disk_columns()) {
            let pages: Vec<u32> = reads
                .iter()
                .zip(&ready)
                .filter_map(|(read, x)| x.as_ref().ok().and_then(|(p, _, hash)| p.disk_page(read.key, *hash)))
                .collect();
            if crate::pager::Pager::must_wait(&cx.pages, &pages) {
                return Err(pages);
            }
            for record in [false, true] {
                for (read, (partition, _, hash)) in
                    reads.iter().zip(&ready).filter_map(|(r, x)| Some((r, x.as_ref().ok()?)))
                {
                    partition.prefetch_disk(read.key, *hash, record);
                }
            }
        }
        // Projected rows are made here; whole rows stay where they are.
        let mut projected = Vec::new();
        let found: Vec<Looked> = reads
            .iter()
            .zip(ready)
            .map(|(read, ready)| match ready {
                Err(e) => Looked::Error(e),
                // A row put together from its memory and disk parts, in place.
                Ok((partition, _, hash)) if partition.has_disk_columns() && projection(read).is_none() => {
                    let start = projected.len();
                    match partition.read_into(read.key, hash, &mut projected) {
                        true => Looked::Projected(start, projected.len()),
                        false => Looked::NotFound,
                    }
                }
                Ok((partition, meta, hash)) => match (partition.get_hashed(read.key, hash), projection(read)) {
                    (None, _) => Looked::NotFound,
                    (Some(Cow::Borrowed(row)), None) => Looked::Row(row),
                    (Some(Cow::Owned(row)), None) => {
                        let start = projected.len();
                        projected.extend_from_slice(&row);
                        Looked::Projected(start, projected.len())
                    }
                    (Some(row), Some(columns)) => {
                        let start = projected.len();
                        meta.layout.project_into(&row, columns, &mut projected);
                        Looked::Projected(start, projected.len())
                    }
                },
            })
            .collect();
        Ok(latsdb_types::proto::frame(req_id, &BatchAnswerOf(LookedAnswer { found: &found, projected: &projected })))
    }

    /// Start loading the row of a prepared operation (its slot should be cached).
    fn prefetch_row(cx: &Context, prepared: &Prepared) {
        if let Some(Some(p)) =
            cx.tables.get(&prepared.op.table).and_then(|t| t.partitions.get(prepared.op.partition as usize))
        {
            p.prefetch_row(prepared.hash);
        }
    }

    /// Independent operations from a client batch.
    ///
    /// Hot path. The batch is handled in three passes so that the cache
    /// misses of all its lookups overlap: validate every operation (which
    /// prefetches its index slot), prefetch every row, then execute.
    pub(crate) fn batch(
        &mut self,
        cx: &mut Context,
        sync: &PartitionSync,
        conn: ConnId,
        req_id: u64,
        ops: Vec<KeyOp>,
        out: &mut Outbox,
    ) {
        let mut results: Vec<Option<OpResult>> = Vec::with_capacity(ops.len());
        let mut waiting = 0;
        let mut deferred = Vec::new();
        let mut batch_tx: Option<TxId> = None;
        // Whether the replicated writes can go to their backup to apply at
        // once (see replica.rs).
        let mut apply_now = true;
        let batch = self.next_batch;
        let ops_left = ops.len();
        // A refused operation goes back to the client with its error: the
        // client routes it again itself.
        let prepared: Vec<Result<Prepared>> =
            ops.into_iter().map(|op| prepare(cx, sync, op).map_err(|u| u.error)).collect();
        for p in prepared.iter().flatten() {
            Self::prefetch_row(cx, p);
        }
        for (idx, prepared) in prepared.into_iter().enumerate() {
            let prepared = match prepared {
                Ok(p) => p,
                Err(e) => {
                    results.push(Some(OpResult::Error(e)));
                    continue;
                }
            };
            let mode = lock_mode(&prepared.op.kind);
            if mode == LockMode::Committed {
                results.push(Some(self.execute(cx, &prepared, None)));
                continue;
            }
            let key = LockKey::new(prepared.op.table, &prepared.op.key);
            let backups = Self::backups_of(cx, &prepared);
            if prepared.op.kind.is_write() && !backups.is_empty() {
                let one_started = matches!(backups, [only] if cx.layout.datanode(only.node).is_some_and(|d| d.status == NodeStatus::Started));
                // Every replica must hold the write before it is answered; the
                // batch's replicated writes share one implicit transaction.
                let tx = *batch_tx.get_or_insert_with(|| {
                    self.next_implicit += 1;
                    implicit_tx(cx.cfg.me, self.next_implicit)
                });
                apply_now = apply_now && one_started && !self.locks.is_locked(&key);
                let ltx = self.txs.entry(tx).or_default();
                if ltx.autocommit.is_none() {
                    // The rest of the batch is likely replicated writes too:
                    // size the maps once instead of growing them write by write.
                    ltx.reserve(ops_left - idx);
                    ltx.replicating.reserve(ops_left - idx);
                }
                ltx.autocommit.get_or_insert_with(|| AutoBatch { batch, ..Default::default() }).open += 1;
                let deadline = cx.now + cx.cfg.lock_wait_timeout_us;
                let pending = Pending { origin: Origin::Implicit { tx, batch, idx: idx as u32 }, prepared };
                results.push(None);
                waiting += 1;
                match self.locks.acquire(&key, tx, mode, deadline, pending) {
                    (Acquire::Granted, Some(pending)) => deferred.push((tx, pending)),
                    _ => {
                        *self.txs.entry(tx).or_default().waits.entry(key).or_insert(0) += 1;
                    }
                }
                continue;
            }
            if !self.locks.is_locked(&key) {
                // Unlocked: executing now is the same as lock, execute, unlock,
                // because the shard is single-threaded.
                results.push(Some(self.execute(cx, &prepared, None)));
                continue;
            }
            self.next_implicit += 1;
            let owner = implicit_tx(cx.cfg.me, self.next_implicit);
            let deadline = cx.now + cx.cfg.lock_wait_timeout_us;
            let pending = Pending { origin: Origin::Batch { batch, idx: idx as u32 }, prepared };
            match self.locks.acquire(&key, owner, mode, deadline, pending) {
                (Acquire::Granted, Some(pending)) => {
                    results.push(Some(self.execute(cx, &pending.prepared, None)));
                    let granted = self.locks.release(&key, owner);
                    self.granted(cx, granted, out);
                }
                _ => {
                    results.push(None);
                    waiting += 1;
                }
            }
        }
        if waiting == 0 {
            let results = results.into_iter().map(|r| r.expect("every result is present")).collect();
            out.client.push((conn, req_id, ClientResponse::Batch(results)));
        } else {
            if let Some(auto) = batch_tx.and_then(|tx| self.txs.get_mut(&tx)).and_then(|l| l.autocommit.as_mut()) {
                auto.apply_now = apply_now;
            }
            self.next_batch += 1;
            self.batches.insert(batch, PendingBatch { conn, req_id, results, remaining: waiting });
            // Implicit transactions granted at once start only now that their
            // batch is registered to collect their answers.
            self.granted(cx, deferred, out);
        }
    }

    /// The backups of the operation's partition (this shard being its primary).
    fn backups_of<'c>(cx: &'c Context, prepared: &Prepared) -> &'c [ShardAddr] {
        cx.tables.get(&prepared.op.table).map_or(&[], |t| t.backups(prepared.op.partition))
    }

    /// After a write executed (and staged) for `tx`: when its partition has
    /// backups, send them the staged image and hold the result until they
    /// answer (None); otherwise the result can go out now.
    fn replicate(
        &mut self,
        cx: &mut Context,
        tx: TxId,
        idx: u32,
        prepared: &Prepared,
        result: OpResult,
        out: &mut Outbox,
    ) -> Option<OpResult> {
        if result != OpResult::Done || !prepared.op.kind.is_write() {
            return Some(result);
        }
        let backups: smallvec::SmallVec<[ShardAddr; 3]> = match cx.tables.get(&prepared.op.table) {
            Some(t) => t.backups(prepared.op.partition).into(),
            None => return Some(result),
        };
        if backups.is_empty() {
            return Some(result);
        }
        let key = LockKey::new(prepared.op.table, &prepared.op.key);
        let current = cx.commit_epoch;
        let ltx = self.txs.entry(tx).or_default();
        let (staged_at, mut image) = match ltx.staged.get_full(&key) {
            Some((at, _, s)) => (at as u32, s.image.as_ref().map(|i| i.to_vec())),
            None => (u32::MAX, None),
        };
        ltx.replicating.insert(idx, Replicating { waiting: Backups::new(&backups), result, staged_at });
        // Writes the backup applies at once all log in the epoch of the
        // first one (they are sent in one turn).
        let apply_in = if ltx.autocommit.as_ref().is_some_and(|a| a.apply_now) {
            Some(*ltx.applied_in.get_or_insert(current))
        } else {
            ltx.backups.extend(backups.iter().copied());
            None
        };
        let last = backups.len() - 1;
        for (i, backup) in backups.into_iter().enumerate() {
            // The last backup (with two replicas, the only one) takes the copy.
            let image = if i == last { image.take() } else { image.clone() };
            let write = ReplicaWrite {
                idx,
                table: prepared.op.table,
                partition: prepared.op.partition,
                key: prepared.op.key.clone(),
                image,
            };
            let msg = match apply_in {
                Some(epoch) => PeerMsg::ReplicaApply { tx, epoch, writes: vec![write] },
                None => PeerMsg::ReplicaPrepare { tx, writes: vec![write] },
            };
            cx.send_peer(backup, msg, out);
        }
        None
    }

    /// A backup staged (or failed to stage) write `idx` of `tx`.
    pub(crate) fn replica_prepared(
        &mut self,
        cx: &mut Context,
        from: ShardAddr,
        tx: TxId,
        idx: u32,
        error: Option<DbError>,
        out: &mut Outbox,
    ) {
        let Some(ltx) = self.txs.get_mut(&tx) else { return };
        let Some(rep) = ltx.replicating.get_mut(&idx) else { return };
        if !rep.waiting.remove(&from) {
            return;
        }
        if let Some(e) = error {
            rep.result = OpResult::Error(e);
        }
        if rep.waiting.is_empty() {
            self.replicated(cx, tx, idx, out);
        }
    }

    /// Every live backup answered for write `idx` of `tx`.
    fn replicated(&mut self, cx: &mut Context, tx: TxId, idx: u32, out: &mut Outbox) {
        let Some(ltx) = self.txs.get_mut(&tx) else { return };
        let Some(rep) = ltx.replicating.swap_remove(&idx) else { return };
        let result = rep.result;
        let apply_now = ltx.autocommit.as_ref().is_some_and(|a| a.apply_now);
        if apply_now && matches!(result, OpResult::Error(_)) {
            // The backup did not apply it: it is not committed here either.
            ltx.refused.push(rep.staged_at);
        }
        match ltx.autocommit.as_mut() {
            Some(auto) => {
                match result {
                    OpResult::Done => auto.done.push(idx),
                    OpResult::Error(e) if apply_now => {
                        let batch = auto.batch;
                        self.batch_result(batch, idx, OpResult::Error(e), out);
                    }
                    OpResult::Error(e) => {
                        auto.failed.get_or_insert(e);
                        auto.done.push(idx);
                    }
                    other => {
                        let batch = auto.batch;
                        self.batch_result(batch, idx, other, out);
                    }
                }
                self.auto_op_finished(cx, tx, out);
            }
            None => self.report(cx, tx, vec![(idx, result)], out),
        }
    }

    /// One write of a batch's implicit transaction is settled; when all are,
    /// commit them together (or abort them all if a backup failed).
    fn auto_op_finished(&mut self, cx: &mut Context, tx: TxId, out: &mut Outbox) {
        let Some(ltx) = self.txs.get_mut(&tx) else { return };
        let Some(auto) = ltx.autocommit.as_mut() else { return };
        auto.open -= 1;
        if auto.open > 0 {
            return;
        }
        let auto = ltx.autocommit.take().expect("present above");
        let applied_in = ltx.applied_in;
        match auto.failed {
            None => {
                // This shard coordinates the implicit transaction: its epoch
                // decides (the one its backup already applied writes in).
                let epoch = applied_in.unwrap_or(cx.commit_epoch);
                let reply = CommitReply::Batch { batch: auto.batch, slots: auto.done };
                self.commit_with(cx, tx, reply, epoch, out);
            }
            Some(e) => {
                self.abort(cx, tx, out);
                for slot in auto.done {
                    self.batch_result(auto.batch, slot, OpResult::Error(e.clone()), out);
                }
            }
        }
    }

    /// A new layout arrived: backups on nodes that left no longer count (a
    /// write is done when every live replica holds it). Transactions whose
    /// coordinator left are resolved by the takeover (takeover.rs).
    pub(crate) fn layout_changed(&mut self, cx: &mut Context, out: &mut Outbox) {
        let layout = &cx.layout;
        let alive = |a: &ShardAddr| layout.takes_writes(a.node);
        let mut replicated = Vec::new();
        for (tx, ltx) in self.txs.iter_mut() {
            for (idx, rep) in ltx.replicating.iter_mut() {
                rep.waiting.retain(alive);
                if rep.waiting.is_empty() {
                    replicated.push((*tx, *idx));
                }
            }
        }
        let mut committed = Vec::new();
        for (tx, c) in self.committing.iter_mut() {
            c.waiting.retain(&alive);
            if c.waiting.is_empty() {
                committed.push(*tx);
            }
        }
        replicated.sort_unstable();
        committed.sort_unstable();
        for (tx, idx) in replicated {
            self.replicated(cx, tx, idx, out);
        }
        for tx in committed {
            if let Some(c) = self.committing.remove(&tx) {
                self.committed_everywhere(cx, tx, c.reply, out);
            }
        }
    }

    fn batch_result(&mut self, batch: u64, idx: u32, result: OpResult, out: &mut Outbox) {
        let Some(b) = self.batches.get_mut(&batch) else {
            return;
        };
        // A slot answered twice (or out of range) is ignored, so `remaining`
        // counts distinct answers and every slot is filled when it is 0.
        match b.results.get_mut(idx as usize) {
            Some(slot @ None) => *slot = Some(result),
            _ => return,
        }
        b.remaining -= 1;
        if b.remaining == 0 {
            let b = self.batches.remove(&batch).expect("batch exists");
            let results = b.results.into_iter().map(|r| r.expect("every result is present")).collect();
            out.client.push((b.conn, b.req_id, ClientResponse::Batch(results)));
        }
    }

    /// Hands operations back to their coordinator unexecuted, with the
    /// retriable error that says why (`TxOpsReturned`): it sends them again
    /// once its layout moves on.
    pub(crate) fn return_ops(cx: &mut Context, tx: TxId, ops: Vec<(u32, KeyOp)>, error: DbError, out: &mut Outbox) {
        debug_assert!(error.is_retriable(), "operations handed back with a final error: {error:?}");
        cx.send_peer(tx.tc, PeerMsg::TxOpsReturned { tx, ops, error }, out);
    }

    /// Operations of a transaction, sent by its coordinator.
    pub(crate) fn tx_ops(
        &mut self,
        cx: &mut Context,
        sync: &PartitionSync,
        tx: TxId,
        ops: Vec<(u32, KeyOp)>,
        out: &mut Outbox,
    ) {
        let mut results = Vec::with_capacity(ops.len());
        let mut returned: Vec<(u32, KeyOp)> = Vec::new();
        let mut returned_error = None;
        for (idx, op) in ops {
            let prepared = match prepare(cx, sync, op) {
                Ok(p) => p,
                Err(Unprepared { error, returned: Some(op) }) => {
                    returned.push((idx, op));
                    returned_error.get_or_insert(error);
                    continue;
                }
                Err(Unprepared { error, .. }) => {
                    results.push((idx, OpResult::Error(error)));
                    continue;
                }
            };
            let mut mode = lock_mode(&prepared.op.kind);
            let key = LockKey::new(prepared.op.table, &prepared.op.key);
            let queued_here = self.txs.get(&tx).is_some_and(|l| l.waits.contains_key(&key));
            if mode == LockMode::Committed {
                if !queued_here {
                    let r = self.execute(cx, &prepared, Some(tx));
                    results.push((idx, r));
                    continue;
                }
                // An earlier operation of this transaction on the row is still
                // queued: read after it, not before.
                mode = LockMode::Shared;
            }
            let deadline = cx.now + cx.cfg.lock_wait_timeout_us;
            let pending = Pending { origin: Origin::Tx { tx, idx }, prepared };
            match self.locks.acquire(&key, tx, mode, deadline, pending) {
                (Acquire::Granted, Some(pending)) => {
                    self.txs.entry(tx).or_default().locks.insert(key);
                    let r = self.execute(cx, &pending.prepared, Some(tx));
                    if let Some(r) = self.replicate(cx, tx, idx, &pending.prepared, r, out) {
                        results.push((idx, r));
                    }
                }
                _ => *self.txs.entry(tx).or_default().waits.entry(key).or_insert(0) += 1,
            }
        }
        if !results.is_empty() {
            self.report(cx, tx, results, out);
        }
        if let Some(error) = returned_error {
            Self::return_ops(cx, tx, returned, error, out);
        }
    }

    /// Runs operations whose locks were just granted.
    pub(crate) fn granted(&mut self, cx: &mut Context, granted: Vec<(TxId, Pending)>, out: &mut Outbox) {
        let mut work: std::collections::VecDeque<_> = granted.into();
        while let Some((owner, pending)) = work.pop_front() {
            let key = LockKey::new(pending.prepared.op.table, &pending.prepared.op.key);
            match pending.origin {
                Origin::Batch { batch, idx } => {
                    let r = self.execute(cx, &pending.prepared, None);
                    self.batch_result(batch, idx, r, out);
                    work.extend(self.locks.release(&key, owner));
                }
                Origin::Tx { tx, idx } => {
                    let ltx = self.txs.entry(tx).or_default();
                    forget_wait(ltx, &key);
                    ltx.locks.insert(key);
                    let r = self.execute(cx, &pending.prepared, Some(tx));
                    if let Some(r) = self.replicate(cx, tx, idx, &pending.prepared, r, out) {
                        self.report(cx, tx, vec![(idx, r)], out);
                    }
                }
                Origin::Implicit { tx, batch, idx } => {
                    let ltx = self.txs.entry(tx).or_default();
                    forget_wait(ltx, &key);
                    ltx.locks.insert(key);
                    let r = self.execute(cx, &pending.prepared, Some(tx));
                    if let Some(r) = self.replicate(cx, tx, idx, &pending.prepared, r, out) {
                        // Nothing to replicate (not found, or an error): answered now.
                        self.batch_result(batch, idx, r, out);
                        self.auto_op_finished(cx, tx, out);
                    }
                }
                Origin::Replica { tx, idx, primary } => {
                    self.replica_staged(cx, tx, idx, primary, pending.prepared, out)
                }
                Origin::ReplicaNow { tx, idx, primary, epoch } => {
                    work.extend(self.replica_applied_now(cx, tx, idx, primary, epoch, pending.prepared, out));
                }
            }
        }
    }

    pub(crate) fn expire_waits(&mut self, cx: &mut Context, out: &mut Outbox) {
        let (expired, granted) = self.locks.expire(cx.now);
        for (_, pending) in expired {
            let error = OpResult::Error(DbError::new(
                ErrorCode::LockWaitTimeout,
                format!(
                    "lock wait timeout exceeded ({} ms) on a row of table {}; the operation was not applied (a transaction is aborted); retry it",
                    cx.cfg.lock_wait_timeout_us / 1000,
                    pending.prepared.meta.def.qualified_name()
                ),
            ));
            match pending.origin {
                Origin::Batch { batch, idx } => self.batch_result(batch, idx, error, out),
                Origin::Implicit { tx, batch, idx } => {
                    let key = LockKey::new(pending.prepared.op.table, &pending.prepared.op.key);
                    if let Some(ltx) = self.txs.get_mut(&tx) {
                        forget_wait(ltx, &key);
                    }
                    self.batch_result(batch, idx, error, out);
                    self.auto_op_finished(cx, tx, out);
                }
                Origin::ReplicaNow { tx, idx, primary, .. } => {
                    let OpResult::Error(e) = error else { unreachable!("built as an error above") };
                    cx.send_peer(primary, PeerMsg::ReplicaPrepared { tx, results: vec![(idx, Some(e))] }, out);
                }
                Origin::Replica { tx, idx, primary } => {
                    let key = LockKey::new(pending.prepared.op.table, &pending.prepared.op.key);
                    if let Some(rtx) = self.replica_txs.get_mut(&tx) {
                        forget_wait(rtx, &key);
                    }
                    let OpResult::Error(e) = error else { unreachable!("built as an error above") };
                    cx.send_peer(primary, PeerMsg::ReplicaPrepared { tx, results: vec![(idx, Some(e))] }, out);
                }
                Origin::Tx { tx, idx } => {
                    let key = LockKey::new(pending.prepared.op.table, &pending.prepared.op.key);
                    if let Some(ltx) = self.txs.get_mut(&tx) {
                        forget_wait(ltx, &key);
                    }
                    self.report(cx, tx, vec![(idx, error)], out);
                }
            }
        }
        self.granted(cx, granted, out);
    }

    /// Sends operation results to the transaction's coordinator, with this
    /// shard's epoch (the commit's epoch will be at least it).
    fn report(&mut self, cx: &mut Context, tx: TxId, results: Vec<(u32, OpResult)>, out: &mut Outbox) {
        let epoch = cx.commit_epoch;
        cx.send_peer(tx.tc, PeerMsg::TxOpResults { tx, results, epoch }, out);
    }

    /// The commit of `tx` was decided (by its coordinator's `TxCommit`,
    /// `reply` Coordinator, or a takeover's, `reply` Nobody): what this
    /// shard staged for it as primary and as backup is applied in `epoch`.
    pub(crate) fn commit_decided(
        &mut self,
        cx: &mut Context,
        sync: &PartitionSync,
        tx: TxId,
        reply: CommitReply,
        epoch: CommitEpoch,
        out: &mut Outbox,
    ) {
        debug_assert!(
            matches!(reply, CommitReply::Coordinator | CommitReply::Nobody),
            "a batch's commit is not decided from outside"
        );
        if !self.commit_with(cx, tx, reply, epoch, out) {
            return;
        }
        // What this shard staged as a backup commits too (its primary may
        // have failed; if not, its ReplicaCommit later finds nothing to do).
        if let Some(rtx) = self.replica_txs.remove(&tx) {
            self.replica_apply(cx, sync, tx, rtx, None, epoch, out);
        }
        self.commit_log.record(tx, epoch);
    }

    /// Applies what `tx` staged here as primary (logging it in `epoch`),
    /// releases its locks, and has its backups do the same; `reply` is told
    /// once every replica has. Says false, having aborted `tx` instead,
    /// when an operation of it is still running.
    pub(crate) fn commit_with(
        &mut self,
        cx: &mut Context,
        tx: TxId,
        reply: CommitReply,
        epoch: CommitEpoch,
        out: &mut Outbox,
    ) -> bool {
        if self.txs.get(&tx).is_some_and(|l| !l.waits.is_empty() || !l.replicating.is_empty()) {
            // A coordinator commits only after every operation has its
            // result; a commit now breaks the protocol. Refuse it by aborting
            // (no TxCommitted is sent, so the coordinator cannot report success).
            self.abort(cx, tx, out);
            return false;
        }
        debug_assert!(epoch > CommitEpoch::NONE, "a commit in epoch 0");
        let mut backups = BTreeSet::new();
        if let Some(ltx) = self.txs.remove(&tx) {
            let mut staged = ltx.staged;
            let mut refused = ltx.refused;
            refused.sort_unstable_by(|a, b| b.cmp(a));
            for at in refused {
                staged.shift_remove_index(at as usize);
            }
            apply_staged(cx, staged, epoch);
            self.release_all(cx, tx, ltx.locks, out);
            backups = ltx.backups;
        }
        // Every backup that was sent the writes hears the commit, also one
        // that left meanwhile: it may be back as a new process that staged
        // them (a prepare can reach the restarted node), and must not hold
        // them forever. Only live ones are waited for.
        for backup in &backups {
            cx.send_peer(*backup, PeerMsg::ReplicaCommit { tx, epoch }, out);
        }
        let layout = &cx.layout;
        let waiting: BTreeSet<ShardAddr> = backups.into_iter().filter(|b| layout.takes_writes(b.node)).collect();
        if waiting.is_empty() {
            self.committed_everywhere(cx, tx, reply, out);
        } else {
            self.committing.insert(tx, Committing { waiting, reply, epoch });
        }
        debug_assert!(!self.txs.contains_key(&tx), "a committed transaction stayed open as primary");
        true
    }

    pub(crate) fn replica_committed(&mut self, cx: &mut Context, from: ShardAddr, tx: TxId, out: &mut Outbox) {
        let Some(c) = self.committing.get_mut(&tx) else { return };
        c.waiting.remove(&from);
        if c.waiting.is_empty() {
            let c = self.committing.remove(&tx).expect("present above");
            self.committed_everywhere(cx, tx, c.reply, out);
        }
    }

    fn committed_everywhere(&mut self, cx: &mut Context, tx: TxId, reply: CommitReply, out: &mut Outbox) {
        match reply {
            CommitReply::Coordinator => cx.send_peer(tx.tc, PeerMsg::TxCommitted { tx }, out),
            CommitReply::Batch { batch, slots } => {
                for slot in slots {
                    self.batch_result(batch, slot, OpResult::Done, out);
                }
            }
            CommitReply::Nobody => {}
        }
    }

    /// Aborts `tx` here, in both roles: as primary (forwarding the abort to
    /// its backups) and as a backup.
    pub(crate) fn abort(&mut self, cx: &mut Context, tx: TxId, out: &mut Outbox) {
        self.replica_abort(cx, tx, out);
        let Some(ltx) = self.txs.remove(&tx) else {
            return;
        };
        // Backups hear it on the link their prepares came by, so it cannot
        // overtake a prepare still on its way.
        for backup in &ltx.backups {
            cx.send_peer(*backup, PeerMsg::ReplicaAbort { tx }, out);
        }
        for key in ltx.waits.keys() {
            let (_, granted) = self.locks.cancel_owner(key, tx);
            self.granted(cx, granted, out);
        }
        self.release_all(cx, tx, ltx.locks, out);
    }

    pub(crate) fn release_all(&mut self, cx: &mut Context, tx: TxId, locks: KeySet, out: &mut Outbox) {
        for key in locks {
            let granted = self.locks.release(&key, tx);
            self.granted(cx, granted, out);
        }
    }

    /// Executes an operation whose lock (if any) is held. Inside a
    /// transaction, writes are staged and reads see the transaction's own
    /// staged writes.
    fn execute(&mut self, cx: &mut Context, prepared: &Prepared, tx: Option<TxId>) -> OpResult {
        match self.execute_inner(cx, prepared, tx) {
            Ok(r) => r,
            Err(e) => OpResult::Error(e),
        }
    }

    fn execute_inner(&mut self, cx: &mut Context, prepared: &Prepared, tx: Option<TxId>) -> Result<OpResult> {
        let op = &prepared.op;
        let me = cx.cfg.me;
        // The table may have changed while the operation waited for a lock.
        let table = cx.tables.get_mut(&op.table).ok_or_else(|| unknown_table(op.table))?;
        if !Arc::ptr_eq(&table.meta, &prepared.meta) && table.meta.def.version != op.table_version {
            return Err(DbError::new(
                ErrorCode::SchemaVersionMismatch,
                "the table changed while the operation waited; retry",
            ));
        }
        if table.fenced && !matches!(op.kind, OpKind::Read { .. }) {
            return Err(DbError::new(
                ErrorCode::TableAltering,
                format!(
                    "table {} is being copied by ALTER TABLE; writes to it are refused until the ALTER TABLE ends: retry then",
                    table.meta.def.qualified_name()
                ),
            ));
        }
        let meta = &table.meta;
        let partition = table
            .partitions
            .get_mut(op.partition as usize)
            .and_then(|p| p.as_mut())
            .ok_or_else(|| wrong_shard(op.partition, me))?;
        let lock_key = tx.map(|_| LockKey::new(op.table, &op.key));
        let staged = match (&lock_key, tx) {
            (Some(k), Some(t)) => self.txs.get(&t).and_then(|l| l.staged.get(k)),
            _ => None,
        };
        let current: Option<Cow<[u8]>> = match staged {
            Some(staged) => staged.image.as_deref().map(Cow::Borrowed),
            None => partition.get_hashed(&op.key, prepared.hash),
        };
        let new_image: Option<Box<[u8]>> = match &op.kind {
            OpKind::Read { .. } => {
                return Ok(match current {
                    None => OpResult::NotFound,
                    Some(row) => OpResult::Row(match &op.projection {
                        None => row.into_owned(),
                        Some(cols) => meta.layout.project(&row, cols),
                    }),
                });
            }
            OpKind::Insert { .. } => {
                if current.is_some() {
                    return Err(DbError::new(
                        ErrorCode::DuplicateKey,
                        format!("a row with this primary key already exists in {}", meta.def.qualified_name()),
                    ));
                }
                prepared.new_row.clone()
            }
            OpKind::Upsert { .. } => prepared.new_row.clone(),
            OpKind::Update { set } => {
                let Some(row) = current else {
                    return Ok(OpResult::NotFound);
                };
                let values = meta.updated_values(&row, set)?;
                let updated = meta.layout.encode(&values);
                if updated.as_slice() == &row[..] {
                    return Ok(OpResult::Unchanged);
                }
                Some(updated.into_boxed_slice())
            }
            OpKind::Delete => {
                if current.is_none() {
                    return Ok(OpResult::NotFound);
                }
                None
            }
        };
        check_redo_room(&cx.redo, cx.cfg.redo_limit_bytes, cx.layout.checkpoint_trigger_mb, me)?;
        let growth = partition.write_growth(&op.key, new_image.as_deref());
        let budget = cx.cfg.data_memory_bytes;
        if growth > 0 && budget > 0 && cx.data_memory_used as u64 + growth as u64 > budget {
            return Err(DbError::new(
                ErrorCode::TableFull,
                format!(
                    "table {} is full: shard {} has used {} of its {} MiB of data memory; delete rows or raise data_memory_mb in the cluster configuration",
                    meta.def.qualified_name(),
                    me,
                    cx.data_memory_used >> 20,
                    budget >> 20
                ),
            ));
        }
        check_tablespace(partition, &op.key, new_image.as_deref(), meta, me)?;
        match (tx, lock_key) {
            (Some(t), Some(k)) => {
                let ltx = self.txs.entry(t).or_default();
                ltx.staged.insert(k, Staged { partition: op.partition, image: new_image, primary: me });
            }
            _ => {
                let epoch = cx.commit_epoch;
                cx.redo.log_write(epoch, op.table, op.partition, &op.key, new_image.as_deref());
                let before = partition.memory();
                match new_image {
                    Some(row) => partition.put(meta, &op.key, &row),
                    None => partition.remove(meta, &op.key),
                };
                cx.data_memory_used = cx.data_memory_used + partition.memory() - before;
            }
        }
        Ok(OpResult::Done)
    }
}

/// Makes staged row images the committed rows, logged in `epoch`.
pub(crate) fn apply_staged(cx: &mut Context, staged: KeyMap<Staged>, epoch: latsdb_types::proto::CommitEpoch) {
    // A batch's rows are scattered over the index: load their slots,
    // then their rows, before writing any, so the cache misses overlap
    // instead of coming one after another.
    const PREFETCH_FROM: usize = 4;
    let hashes: Vec<u64> = if staged.len() >= PREFETCH_FROM {
        let tables = &cx.tables;
        let partition_of = |key: &LockKey, s: &Staged| {
            tables.get(&key.table).and_then(|t| t.partitions.get(s.partition as usize)).and_then(Option::as_ref)
        };
        let hashes: Vec<u64> = staged
            .iter()
            .map(|(key, s)| match partition_of(key, s) {
                Some(p) => {
                    let hash = p.key_hash(&key.key);
                    p.prefetch_slot(hash);
                    hash
                }
                None => 0,
            })
            .collect();
        for ((key, s), &hash) in staged.iter().zip(&hashes) {
            if let Some(p) = partition_of(key, s) {
                p.prefetch_row(hash);
            }
        }
        hashes
    } else {
        Vec::new()
    };
    for (i, (key, Staged { partition, image: row, .. })) in staged.into_iter().enumerate() {
        cx.redo.log_write(epoch, key.table, partition, &key.key, row.as_deref());
        let Some(table) = cx.tables.get_mut(&key.table) else {
            continue;
        };
        let meta = table.meta.clone();
        let Some(Some(p)) = table.partitions.get_mut(partition as usize) else {
            panic!("staged write for partition {partition} that this shard does not hold");
        };
        let before = p.memory();
        match row {
            Some(row) => {
                let hash = hashes.get(i).copied().unwrap_or_else(|| p.key_hash(&key.key));
                p.put_hashed(&meta, &key.key, &row, hash)
            }
            None => p.remove(&meta, &key.key),
        };
        cx.data_memory_used = cx.data_memory_used + p.memory() - before;
    }
}

pub(crate) fn forget_wait(ltx: &mut LdmTx, key: &LockKey) {
    if let Some(n) = ltx.waits.get_mut(key) {
        *n -= 1;
        if *n == 0 {
            ltx.waits.remove(key);
        }
    }
}

/// A committed read's outcome in `ldm_lookups`.
enum Looked<'s> {
    /// The whole row, where the table holds it.
    Row(&'s [u8]),
    /// The projected row, at this range of the projected rows.
    Projected(usize, usize),
    NotFound,
    Error(DbError),
}

/// The results of `ldm_lookups`, serialized as `OpResult`s.
struct LookedAnswer<'a> {
    found: &'a [Looked<'a>],
    projected: &'a [u8],
}

impl serde::Serialize for LookedAnswer<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.collect_seq(self.found.iter().map(|looked| match looked {
            Looked::Row(row) => OpResultRef::Row(row),
            Looked::Projected(start, end) => OpResultRef::Row(&self.projected[*start..*end]),
            Looked::NotFound => OpResultRef::NotFound,
            // Rare: an error is copied to be written.
            Looked::Error(e) => OpResultRef::Error(e.clone()),
        }))
    }
}
