//! Local data manager: executes key operations on the shard's partitions.
//!
//! Committed reads never lock. Locking reads and writes take row locks;
//! inside a transaction the locks are held and writes are staged until the
//! coordinator says commit or abort. An independent write from a batch
//! ("autocommit") applies at once when its row is unlocked, and otherwise
//! queues behind the lock and applies the moment it is granted.

use crate::locks::{Acquire, LockKey, LockTable};
use crate::shard::{owned_partition, unknown_table, wrong_shard, ConnId, Outbox, Shard};
use latsdb_types::proto::{ClientResponse, KeyOp, LockMode, OpKind, OpResult, PeerMsg, ShardAddr, TxId};
use latsdb_types::{DbError, ErrorCode, Result, TableMeta};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// An operation that passed validation, with its new row already encoded.
pub(crate) struct Prepared {
    op: KeyOp,
    meta: Arc<TableMeta>,
    new_row: Option<Box<[u8]>>,
    /// The key's hash in its partition's index.
    hash: u64,
}

#[derive(Clone, Copy)]
enum Origin {
    Batch { batch: u64, idx: u32 },
    Tx { tx: TxId, idx: u32 },
}

pub(crate) struct Pending {
    origin: Origin,
    prepared: Prepared,
}

/// A staged row image (None deletes) and the partition it belongs to.
type Staged = (u32, Option<Box<[u8]>>);

/// Ordered sets and maps: the order in which locks are released decides
/// which waiters run first, and a simulation must replay it exactly.
#[derive(Default)]
struct LdmTx {
    locks: BTreeSet<LockKey>,
    /// Queued lock requests per row (a transaction may queue several).
    waits: BTreeMap<LockKey, u32>,
    /// Staged row images: None deletes. Keyed like locks.
    staged: BTreeMap<LockKey, Staged>,
}

struct PendingBatch {
    conn: ConnId,
    req_id: u64,
    results: Vec<Option<OpResult>>,
    remaining: usize,
}

#[derive(Default)]
pub(crate) struct LdmState {
    pub(crate) locks: LockTable<Pending>,
    txs: HashMap<TxId, LdmTx>,
    batches: HashMap<u64, PendingBatch>,
    next_batch: u64,
    next_implicit: u64,
}

impl LdmState {
    pub(crate) fn open(&self) -> usize {
        self.txs.len()
    }

    pub(crate) fn participations(&self) -> Vec<TxId> {
        let mut ids: Vec<TxId> = self.txs.keys().copied().collect();
        ids.sort_unstable();
        ids
    }
}

/// Owner id of an independent (autocommit) operation: node 0 is never a real node.
fn implicit_owner(seq: u64) -> TxId {
    TxId { tc: ShardAddr { node: 0, shard: 0 }, seq }
}

fn lock_mode(kind: &OpKind) -> LockMode {
    match kind {
        OpKind::Read { lock } => *lock,
        _ => LockMode::Exclusive,
    }
}

impl Shard {
    /// Validates an operation against the schema and ownership, and encodes
    /// its new row.
    fn ldm_prepare(&self, op: KeyOp) -> Result<Prepared> {
        let table = self.table(op.table, op.table_version)?;
        let meta = &table.meta;
        let partition = owned_partition(table, op.partition, self.cfg.me)?;
        meta.validate_key(&op.key)?;
        if meta.partition_of(&op.key) != op.partition {
            return Err(DbError::bad_request(format!(
                "the key belongs to partition {} but the request names partition {}",
                meta.partition_of(&op.key),
                op.partition
            )));
        }
        meta.validate_projection(&op.projection)?;
        let new_row = match &op.kind {
            OpKind::Insert { row } | OpKind::Upsert { row } => {
                let values = meta.coerce_row(row.clone())?;
                let encoded = meta.layout.encode(&values);
                if meta.key_of_row(&encoded) != op.key {
                    return Err(DbError::bad_request(
                        "the operation's key does not match the primary-key columns of its row",
                    ));
                }
                Some(encoded.into_boxed_slice())
            }
            OpKind::Update { set } => {
                if set.is_empty() {
                    return Err(DbError::bad_request("an update must assign at least one column"));
                }
                for (column, expr) in set {
                    if *column as usize >= meta.def.columns.len() {
                        return Err(DbError::new(
                            ErrorCode::UnknownColumn,
                            format!("update names column number {column}, which does not exist"),
                        ));
                    }
                    if meta.def.primary_key.contains(column) {
                        return Err(DbError::bad_request(format!(
                            "primary-key column '{}' cannot be updated; delete the row and insert it again",
                            meta.def.columns[*column as usize].name
                        )));
                    }
                    expr.validate(meta.def.columns.len())?;
                }
                None
            }
            OpKind::Read { .. } | OpKind::Delete => None,
        };
        // Start loading the key's index slot now; it is read a little later.
        let hash = partition.key_hash(&op.key);
        partition.prefetch_slot(hash);
        Ok(Prepared { meta: meta.clone(), op, new_row, hash })
    }

    /// Start loading the row of a prepared operation (its slot should be cached).
    fn ldm_prefetch_row(&self, prepared: &Prepared) {
        if let Some(Some(p)) =
            self.tables.get(&prepared.op.table).and_then(|t| t.partitions.get(prepared.op.partition as usize))
        {
            p.prefetch_row(prepared.hash);
        }
    }

    /// Independent operations from a client batch.
    ///
    /// Hot path. The batch is handled in three passes so that the cache
    /// misses of all its lookups overlap: validate every operation (which
    /// prefetches its index slot), prefetch every row, then execute.
    pub(crate) fn ldm_batch(&mut self, conn: ConnId, req_id: u64, ops: Vec<KeyOp>, out: &mut Outbox) {
        let mut results: Vec<Option<OpResult>> = Vec::with_capacity(ops.len());
        let mut waiting = 0;
        let batch = self.ldm.next_batch;
        let prepared: Vec<Result<Prepared>> = ops.into_iter().map(|op| self.ldm_prepare(op)).collect();
        for p in prepared.iter().flatten() {
            self.ldm_prefetch_row(p);
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
                results.push(Some(self.ldm_execute(&prepared, None)));
                continue;
            }
            let key = LockKey { table: prepared.op.table, key: prepared.op.key.as_slice().into() };
            if !self.ldm.locks.is_locked(&key) {
                // Unlocked: executing now is the same as lock, execute, unlock,
                // because the shard is single-threaded.
                results.push(Some(self.ldm_execute(&prepared, None)));
                continue;
            }
            self.ldm.next_implicit += 1;
            let owner = implicit_owner(self.ldm.next_implicit);
            let deadline = self.now + self.cfg.lock_wait_timeout_us;
            let pending = Pending { origin: Origin::Batch { batch, idx: idx as u32 }, prepared };
            match self.ldm.locks.acquire(&key, owner, mode, deadline, pending) {
                (Acquire::Granted, Some(pending)) => {
                    results.push(Some(self.ldm_execute(&pending.prepared, None)));
                    let granted = self.ldm.locks.release(&key, owner);
                    self.ldm_granted(granted, out);
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
            self.ldm.next_batch += 1;
            self.ldm.batches.insert(batch, PendingBatch { conn, req_id, results, remaining: waiting });
        }
    }

    fn ldm_batch_result(&mut self, batch: u64, idx: u32, result: OpResult, out: &mut Outbox) {
        let Some(b) = self.ldm.batches.get_mut(&batch) else {
            return;
        };
        debug_assert!(b.results[idx as usize].is_none());
        b.results[idx as usize] = Some(result);
        b.remaining -= 1;
        if b.remaining == 0 {
            let b = self.ldm.batches.remove(&batch).expect("batch exists");
            let results = b.results.into_iter().map(|r| r.expect("every result is present")).collect();
            out.client.push((b.conn, b.req_id, ClientResponse::Batch(results)));
        }
    }

    /// Operations of a transaction, sent by its coordinator.
    pub(crate) fn ldm_tx_ops(&mut self, tx: TxId, ops: Vec<(u32, KeyOp)>, out: &mut Outbox) {
        let mut results = Vec::with_capacity(ops.len());
        for (idx, op) in ops {
            let prepared = match self.ldm_prepare(op) {
                Ok(p) => p,
                Err(e) => {
                    results.push((idx, OpResult::Error(e)));
                    continue;
                }
            };
            let mut mode = lock_mode(&prepared.op.kind);
            let key = LockKey { table: prepared.op.table, key: prepared.op.key.as_slice().into() };
            let queued_here = self.ldm.txs.get(&tx).is_some_and(|l| l.waits.contains_key(&key));
            if mode == LockMode::Committed {
                if !queued_here {
                    let r = self.ldm_execute(&prepared, Some(tx));
                    results.push((idx, r));
                    continue;
                }
                // An earlier operation of this transaction on the row is still
                // queued: read after it, not before.
                mode = LockMode::Shared;
            }
            let deadline = self.now + self.cfg.lock_wait_timeout_us;
            let pending = Pending { origin: Origin::Tx { tx, idx }, prepared };
            match self.ldm.locks.acquire(&key, tx, mode, deadline, pending) {
                (Acquire::Granted, Some(pending)) => {
                    self.ldm.txs.entry(tx).or_default().locks.insert(key);
                    let r = self.ldm_execute(&pending.prepared, Some(tx));
                    results.push((idx, r));
                }
                _ => *self.ldm.txs.entry(tx).or_default().waits.entry(key).or_insert(0) += 1,
            }
        }
        if !results.is_empty() {
            self.send_peer(tx.tc, PeerMsg::TxOpResults { tx, results }, out);
        }
    }

    /// Runs operations whose locks were just granted.
    fn ldm_granted(&mut self, granted: Vec<(TxId, Pending)>, out: &mut Outbox) {
        let mut work: std::collections::VecDeque<_> = granted.into();
        while let Some((owner, pending)) = work.pop_front() {
            let key = LockKey { table: pending.prepared.op.table, key: pending.prepared.op.key.as_slice().into() };
            match pending.origin {
                Origin::Batch { batch, idx } => {
                    let r = self.ldm_execute(&pending.prepared, None);
                    self.ldm_batch_result(batch, idx, r, out);
                    work.extend(self.ldm.locks.release(&key, owner));
                }
                Origin::Tx { tx, idx } => {
                    let ltx = self.ldm.txs.entry(tx).or_default();
                    forget_wait(ltx, &key);
                    ltx.locks.insert(key);
                    let r = self.ldm_execute(&pending.prepared, Some(tx));
                    self.send_peer(tx.tc, PeerMsg::TxOpResults { tx, results: vec![(idx, r)] }, out);
                }
            }
        }
    }

    pub(crate) fn ldm_expire_waits(&mut self, out: &mut Outbox) {
        let (expired, granted) = self.ldm.locks.expire(self.now);
        for (_, pending) in expired {
            let error = OpResult::Error(DbError::new(
                ErrorCode::LockWaitTimeout,
                format!(
                    "lock wait timeout exceeded ({} ms) on a row of table {}; the operation was not applied (a transaction is aborted); retry it",
                    self.cfg.lock_wait_timeout_us / 1000,
                    pending.prepared.meta.def.qualified_name()
                ),
            ));
            match pending.origin {
                Origin::Batch { batch, idx } => self.ldm_batch_result(batch, idx, error, out),
                Origin::Tx { tx, idx } => {
                    let key =
                        LockKey { table: pending.prepared.op.table, key: pending.prepared.op.key.as_slice().into() };
                    if let Some(ltx) = self.ldm.txs.get_mut(&tx) {
                        forget_wait(ltx, &key);
                    }
                    self.send_peer(tx.tc, PeerMsg::TxOpResults { tx, results: vec![(idx, error)] }, out);
                }
            }
        }
        self.ldm_granted(granted, out);
    }

    pub(crate) fn ldm_commit(&mut self, tx: TxId, out: &mut Outbox) {
        if self.ldm.txs.get(&tx).is_some_and(|l| !l.waits.is_empty()) {
            // A coordinator commits only after every operation has its
            // result; a commit now breaks the protocol. Refuse it by aborting
            // (no TxCommitted is sent, so the coordinator cannot report success).
            self.ldm_abort(tx, out);
            return;
        }
        if let Some(ltx) = self.ldm.txs.remove(&tx) {
            for (key, (partition, row)) in ltx.staged {
                let Some(table) = self.tables.get_mut(&key.table) else {
                    continue;
                };
                let meta = table.meta.clone();
                let Some(Some(p)) = table.partitions.get_mut(partition as usize) else {
                    panic!("staged write for partition {partition} that this shard does not own");
                };
                let before = p.memory();
                match row {
                    Some(row) => p.put(&meta, &key.key, &row),
                    None => p.remove(&meta, &key.key),
                };
                self.data_memory_used = self.data_memory_used + p.memory() - before;
            }
            self.ldm_release_all(tx, ltx.locks, out);
        }
        self.send_peer(tx.tc, PeerMsg::TxCommitted { tx }, out);
    }

    pub(crate) fn ldm_abort(&mut self, tx: TxId, out: &mut Outbox) {
        let Some(ltx) = self.ldm.txs.remove(&tx) else {
            return;
        };
        for key in ltx.waits.keys() {
            let (_, granted) = self.ldm.locks.cancel_owner(key, tx);
            self.ldm_granted(granted, out);
        }
        self.ldm_release_all(tx, ltx.locks, out);
    }

    /// Aborts every transaction this shard participates in whose coordinator
    /// is on a node that is no longer started, releasing its locks. (Taking
    /// over such transactions and finishing them consistently is the
    /// replication issue's TC takeover; until then they are aborted.)
    pub(crate) fn ldm_abort_orphans(&mut self, out: &mut Outbox) {
        let mut orphans: Vec<TxId> = self
            .ldm
            .txs
            .keys()
            .filter(|tx| {
                self.layout.datanode(tx.tc.node).is_none_or(|d| d.status != latsdb_types::proto::NodeStatus::Started)
            })
            .copied()
            .collect();
        orphans.sort_unstable();
        for tx in orphans {
            self.ldm_abort(tx, out);
        }
    }

    fn ldm_release_all(&mut self, tx: TxId, locks: BTreeSet<LockKey>, out: &mut Outbox) {
        for key in locks {
            let granted = self.ldm.locks.release(&key, tx);
            self.ldm_granted(granted, out);
        }
    }

    /// Executes an operation whose lock (if any) is held. Inside a
    /// transaction, writes are staged and reads see the transaction's own
    /// staged writes.
    fn ldm_execute(&mut self, prepared: &Prepared, tx: Option<TxId>) -> OpResult {
        match self.ldm_execute_inner(prepared, tx) {
            Ok(r) => r,
            Err(e) => OpResult::Error(e),
        }
    }

    fn ldm_execute_inner(&mut self, prepared: &Prepared, tx: Option<TxId>) -> Result<OpResult> {
        let op = &prepared.op;
        let me = self.cfg.me;
        // The table may have changed while the operation waited for a lock.
        let table = self.tables.get_mut(&op.table).ok_or_else(|| unknown_table(op.table))?;
        if !Arc::ptr_eq(&table.meta, &prepared.meta) && table.meta.def.version != op.table_version {
            return Err(DbError::new(
                ErrorCode::SchemaVersionMismatch,
                "the table changed while the operation waited; retry",
            ));
        }
        let meta = table.meta.clone();
        let partition = table
            .partitions
            .get_mut(op.partition as usize)
            .and_then(|p| p.as_mut())
            .ok_or_else(|| wrong_shard(op.partition, me))?;
        let lock_key = tx.map(|_| LockKey { table: op.table, key: op.key.as_slice().into() });
        let staged = match (&lock_key, tx) {
            (Some(k), Some(t)) => self.ldm.txs.get(&t).and_then(|l| l.staged.get(k)),
            _ => None,
        };
        let current: Option<&[u8]> = match staged {
            Some((_, image)) => image.as_deref(),
            None => partition.get_hashed(&op.key, prepared.hash),
        };
        let new_image: Option<Box<[u8]>> = match &op.kind {
            OpKind::Read { .. } => {
                return Ok(match current {
                    None => OpResult::NotFound,
                    Some(row) => OpResult::Row(match &op.projection {
                        None => row.to_vec(),
                        Some(cols) => meta.layout.project(row, cols, &meta.layout.projection(cols)),
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
                let mut values = meta.layout.decode(row);
                let mut assigned = Vec::with_capacity(set.len());
                for (column, expr) in set {
                    let v = expr.eval(&meta.layout, row);
                    let v = latsdb_types::value::coerce(v, &meta.def.columns[*column as usize])?;
                    assigned.push((*column as usize, v));
                }
                for (column, v) in assigned {
                    values[column] = v;
                }
                Some(meta.layout.encode(&values).into_boxed_slice())
            }
            OpKind::Delete => {
                if current.is_none() {
                    return Ok(OpResult::NotFound);
                }
                None
            }
        };
        let growth = partition.write_growth(&op.key, new_image.as_deref());
        let budget = self.cfg.data_memory_bytes;
        if growth > 0 && budget > 0 && self.data_memory_used as u64 + growth as u64 > budget {
            return Err(DbError::new(
                ErrorCode::OutOfMemory,
                format!(
                    "table {} is full: shard {} has used {} of its {} MiB of data memory; delete rows or raise data_memory_mb in the cluster configuration",
                    meta.def.qualified_name(),
                    me,
                    self.data_memory_used >> 20,
                    budget >> 20
                ),
            ));
        }
        match (tx, lock_key) {
            (Some(t), Some(k)) => {
                let ltx = self.ldm.txs.entry(t).or_default();
                ltx.staged.insert(k, (op.partition, new_image));
            }
            _ => {
                let before = partition.memory();
                match new_image {
                    Some(row) => partition.put(&meta, &op.key, &row),
                    None => partition.remove(&meta, &op.key),
                };
                self.data_memory_used = self.data_memory_used + partition.memory() - before;
            }
        }
        Ok(OpResult::Done)
    }
}

fn forget_wait(ltx: &mut LdmTx, key: &LockKey) {
    if let Some(n) = ltx.waits.get_mut(key) {
        *n -= 1;
        if *n == 0 {
            ltx.waits.remove(key);
        }
    }
}
