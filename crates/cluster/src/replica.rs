//! The backup side of synchronous replication.
//!
//! A write on a partition with backups executes at the primary (which holds
//! the row lock and computes the new row image), then the primary sends the
//! image to every backup (`ReplicaPrepare`). A backup takes the row lock for
//! the same transaction, stages the image and answers `ReplicaPrepared`; only
//! then does the primary report the operation's result, so a coordinator
//! that hears "all operations done" knows every replica holds every write in
//! memory. On commit the primary applies its staged rows and forwards
//! `ReplicaCommit`; it answers the coordinator (or, for an independent
//! write, the client) only after every backup answered `ReplicaCommitted`.
//! Aborts travel the same primary -> backup links, so they never overtake a
//! prepare.
//!
//! ```text
//! TC            primary LDM                 backup LDM
//!  |--TxOps------>|  lock, stage             |
//!  |              |--ReplicaPrepare--------->|  lock, stage
//!  |              |<--ReplicaPrepared--------|
//!  |<--TxOpResults|                          |
//!  |--TxCommit--->|  apply, unlock           |
//!  |              |--ReplicaCommit---------->|  apply, unlock
//!  |              |<--ReplicaCommitted-------|
//!  |<--TxCommitted|                          |
//! ```
//!
//! Backups only ever lock rows for writes their primary already locked, in
//! the primary's order, so their lock waits are short (a previous writer's
//! commit still in flight) and cannot deadlock.
//!
//! The independent writes of a client batch on partitions with exactly one
//! backup, a started one, skip the second round trip (`ReplicaApply`): the
//! backup applies each write when it arrives and answers; the primary,
//! which holds the row locks and the staged rows meanwhile, commits once
//! the backup answered and then answers the client. A write the backup
//! refused is dropped at the primary too (its result is the error); the
//! others commit. Readers of the backup may see a write a moment before
//! the primary's readers do, never one that is not also committed at the
//! primary unless the primary fails first (then the backup, promoted, has
//! it: the client did not hear an answer). Both replicas log the write in
//! the epoch the primary chose when it sent it, and the primary reports
//! that epoch complete only after the commit (see `completed_below`).
//!
//! ```text
//! client        primary LDM                 backup LDM
//!  |--Batch------>|  lock, stage             |
//!  |              |--ReplicaApply----------->|  apply (after the row's lock)
//!  |              |<--ReplicaPrepared--------|
//!  |<--Batch------|  apply, unlock           |
//! ```
//!
//! Two replicas is the common case this serves; with more backups (a
//! refusal by one could not be undone at another) or a starting backup
//! (its copy must see the primary's commit first) the batch takes the
//! two-phase path. So does a batch that writes a row twice or writes a
//! row some transaction has locked: its writes could not all commit in
//! the order they ran if one of them were refused.

use crate::context::{owned_partition, unknown_table, Context};
use crate::ldm::{apply_staged, Ldm};
use crate::ldm::{forget_wait, KeyMap, LdmTx, Origin, Pending, Staged};
use crate::locks::{Acquire, LockKey};
use crate::prepare::Prepared;
use crate::shard::Outbox;
use crate::sync::PartitionSync;
use latsdb_types::proto::{KeyOp, OpKind, PeerMsg, ReplicaWrite, ShardAddr, TxId};
use latsdb_types::schema::TableId;
use latsdb_types::{DbError, ErrorCode, Result};

/// A backup waits at most this many lock-wait timeouts: its waits are only
/// for commits already on their way.
const REPLICA_WAIT_FACTOR: u64 = 10;

impl Ldm {
    pub(crate) fn replica_prepare(
        &mut self,
        cx: &mut Context,
        primary: ShardAddr,
        tx: TxId,
        write: ReplicaWrite,
        out: &mut Outbox,
    ) {
        let ReplicaWrite { idx, table, partition, key, image } = write;
        if self.abort_log.contains(&tx) {
            // The coordinator's abort overtook this prepare.
            let e = DbError::new(ErrorCode::UnknownTransaction, format!("transaction {tx:?} was already aborted"));
            cx.send_peer(primary, PeerMsg::ReplicaPrepared { tx, results: vec![(idx, Some(e))] }, out);
            return;
        }
        let prepared = match self.replica_prepared_op(cx, table, partition, key, image) {
            Ok(p) => p,
            Err(e) => {
                cx.send_peer(primary, PeerMsg::ReplicaPrepared { tx, results: vec![(idx, Some(e))] }, out);
                return;
            }
        };
        let lock_key = LockKey::new(table, &prepared.op.key);
        let deadline = cx.now + REPLICA_WAIT_FACTOR * cx.cfg.lock_wait_timeout_us;
        let pending = Pending { origin: Origin::Replica { tx, idx, primary }, prepared };
        match self.locks.acquire(&lock_key, tx, latsdb_types::proto::LockMode::Exclusive, deadline, pending) {
            (Acquire::Granted, Some(pending)) => self.replica_staged(cx, tx, idx, primary, pending.prepared, out),
            _ => *self.replica_txs.entry(tx).or_default().waits.entry(lock_key).or_insert(0) += 1,
        }
    }

    /// Writes of a primary's batch to apply at once (see the module
    /// comment): unlocked rows are written together (their cache misses
    /// overlapping), a locked row when its lock is released.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn replica_apply_now(
        &mut self,
        cx: &mut Context,
        sync: &PartitionSync,
        primary: ShardAddr,
        tx: TxId,
        epoch: latsdb_types::proto::CommitEpoch,
        writes: Vec<ReplicaWrite>,
        out: &mut Outbox,
    ) {
        cx.observe_epoch(epoch);
        let mut now: KeyMap<Staged> = KeyMap::with_capacity_and_hasher(writes.len(), Default::default());
        let mut results = Vec::with_capacity(writes.len());
        for ReplicaWrite { idx, table, partition, key, image } in writes {
            if sync.copying() && sync.source_of(table, partition).is_some() {
                // Only a started backup is sent these; a copy in progress
                // must see the primary's commit first.
                let e = DbError::new(
                    ErrorCode::NotServing,
                    format!("partition {partition} is still being copied here; nothing was done, retry"),
                );
                results.push((idx, Some(e)));
                continue;
            }
            let prepared = match self.replica_prepared_op(cx, table, partition, key, image) {
                Ok(p) => p,
                Err(e) => {
                    results.push((idx, Some(e)));
                    continue;
                }
            };
            let lock_key = LockKey::new(table, &prepared.op.key);
            if !self.locks.is_locked(&lock_key) {
                // A second write of the row in one message replaces the first.
                now.insert(lock_key, Staged { partition, image: prepared.new_row, primary });
                results.push((idx, None));
                continue;
            }
            let deadline = cx.now + REPLICA_WAIT_FACTOR * cx.cfg.lock_wait_timeout_us;
            let pending = Pending { origin: Origin::ReplicaNow { tx, idx, primary, epoch }, prepared };
            if let (Acquire::Granted, Some(pending)) =
                self.locks.acquire(&lock_key, tx, latsdb_types::proto::LockMode::Exclusive, deadline, pending)
            {
                // Not reached (the row is locked by another owner), but if
                // granted the write applies like any other.
                let granted = self.replica_applied_now(cx, tx, idx, primary, epoch, pending.prepared, out);
                self.granted(cx, granted, out);
            }
        }
        apply_staged(cx, now, epoch);
        cx.send_peer(primary, PeerMsg::ReplicaPrepared { tx, results }, out);
    }

    /// The lock of a `ReplicaApply` write that waited is held: apply the
    /// write, release the lock, answer. Returns the requests the release
    /// granted.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn replica_applied_now(
        &mut self,
        cx: &mut Context,
        tx: TxId,
        idx: u32,
        primary: ShardAddr,
        epoch: latsdb_types::proto::CommitEpoch,
        prepared: Prepared,
        out: &mut Outbox,
    ) -> Vec<(TxId, Pending)> {
        let key = LockKey::new(prepared.op.table, &prepared.op.key);
        let mut one: KeyMap<Staged> = KeyMap::default();
        one.insert(key.clone(), Staged { partition: prepared.op.partition, image: prepared.new_row, primary });
        apply_staged(cx, one, epoch);
        cx.send_peer(primary, PeerMsg::ReplicaPrepared { tx, results: vec![(idx, None)] }, out);
        self.locks.release(&key, tx)
    }

    /// Checks a replicated write against this shard's schema and replicas.
    fn replica_prepared_op(
        &self,
        cx: &Context,
        table: TableId,
        partition: u32,
        key: Vec<u8>,
        image: Option<Vec<u8>>,
    ) -> Result<Prepared> {
        let state = cx.tables.get(&table).ok_or_else(|| unknown_table(table))?;
        let p = owned_partition(state, partition, cx.cfg.me)?;
        let meta = state.meta.clone();
        meta.validate_key(&key)?;
        if let Some(row) = &image {
            meta.layout.validate(row)?;
            if meta.key_of_row(row) != key {
                return Err(DbError::internal("a replicated row does not match its key"));
            }
        }
        let hash = p.key_hash(&key);
        // The commit writes this row a round trip later: start loading its
        // index slot now.
        p.prefetch_slot(hash);
        let kind = if image.is_some() { OpKind::Upsert { row: Vec::new() } } else { OpKind::Delete };
        let op = KeyOp { table, table_version: meta.def.version, partition, key, kind, projection: None };
        Ok(Prepared { op, meta, new_row: image.map(Vec::into_boxed_slice), hash })
    }

    /// The row lock is held: stage the image and tell the primary.
    pub(crate) fn replica_staged(
        &mut self,
        cx: &mut Context,
        tx: TxId,
        idx: u32,
        primary: ShardAddr,
        prepared: Prepared,
        out: &mut Outbox,
    ) {
        let key = LockKey::new(prepared.op.table, &prepared.op.key);
        let rtx = self.replica_txs.entry(tx).or_default();
        forget_wait(rtx, &key);
        rtx.locks.insert(key.clone());
        rtx.staged.insert(key, Staged { partition: prepared.op.partition, image: prepared.new_row, primary });
        cx.send_peer(primary, PeerMsg::ReplicaPrepared { tx, results: vec![(idx, None)] }, out);
    }

    pub(crate) fn replica_commit(
        &mut self,
        cx: &mut Context,
        sync: &PartitionSync,
        primary: ShardAddr,
        tx: TxId,
        epoch: latsdb_types::proto::CommitEpoch,
        out: &mut Outbox,
    ) {
        if let Some(rtx) = self.replica_txs.remove(&tx) {
            self.replica_apply(cx, sync, tx, rtx, Some(primary), epoch, out);
        }
        // Evidence for a takeover that the commit decision was made.
        self.commit_log.record(tx, epoch);
        cx.send_peer(primary, PeerMsg::ReplicaCommitted { tx }, out);
    }

    /// Commits what this shard staged as a backup of `tx`, on the word of
    /// `from` (one of its primaries; `None`: its coordinator or a
    /// takeover). While this shard copies a partition from its primary
    /// (node restart), that primary's writes there wait for its own commit:
    /// it travels on the link that carries the copy, after the copied rows
    /// it must overwrite, while another shard's word may come before them.
    /// (Writes of a primary the partition is no longer copied from commit
    /// at once: the copy restarted from a primary that finished them before
    /// it sent anything, see `PartitionSync::switch_sources`.)
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn replica_apply(
        &mut self,
        cx: &mut Context,
        sync: &PartitionSync,
        tx: TxId,
        mut rtx: LdmTx,
        from: Option<ShardAddr>,
        epoch: latsdb_types::proto::CommitEpoch,
        out: &mut Outbox,
    ) {
        let mut held = LdmTx { held: Some(epoch), ..LdmTx::default() };
        if sync.copying() {
            let keys: Vec<LockKey> = rtx
                .staged
                .iter()
                .filter(|(key, staged)| {
                    Some(staged.primary) != from && sync.source_of(key.table, staged.partition) == Some(staged.primary)
                })
                .map(|(key, _)| key.clone())
                .collect();
            for key in keys {
                if let Some(staged) = rtx.staged.shift_remove(&key) {
                    rtx.locks.shift_remove(&key);
                    held.locks.insert(key.clone());
                    held.staged.insert(key, staged);
                }
            }
        }
        apply_staged(cx, rtx.staged, epoch);
        self.release_all(cx, tx, rtx.locks, out);
        if !held.staged.is_empty() {
            self.replica_txs.insert(tx, held);
        }
    }

    pub(crate) fn replica_abort(&mut self, cx: &mut Context, tx: TxId, out: &mut Outbox) {
        let Some(rtx) = self.replica_txs.remove(&tx) else { return };
        for key in rtx.waits.keys() {
            let (_, granted) = self.locks.cancel_owner(key, tx);
            self.granted(cx, granted, out);
        }
        self.release_all(cx, tx, rtx.locks, out);
    }
}
