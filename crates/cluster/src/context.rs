//! What the blocks of a shard share: its configuration, the cluster layout
//! and its router, the tables and their partitions, the clock, the commit
//! epoch, the REDO log buffer and the queue of messages a shard sends
//! itself. Each block (tc, ldm, takeover, durability, checkpoint, sync)
//! owns its own state and is handed a `Context` and the turn's `Outbox`
//! with every message; nothing else is shared between blocks.

use crate::shard::{Outbox, ShardConfig};
use latsdb_storage::log::{self, Record};
use latsdb_storage::pages::{DiskPages, MemoryPages, SharedPages};
use latsdb_storage::Partition;
use latsdb_types::proto::{ClusterLayout, CommitEpoch, PeerMsg, Router, ShardAddr};
use latsdb_types::schema::TableId;
use latsdb_types::{DbError, ErrorCode, Result, TableMeta};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// A client connection, numbered by the I/O shell.
pub type ConnId = u64;

/// Hash maps of the shard: foldhash, not SipHash (keys are not chosen by
/// an attacker in a way that matters here, and these maps are on the write
/// path). Their iteration order is random, so every iteration whose order is
/// observable collects and sorts first.
pub(crate) type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
/// Monotonic time in microseconds, supplied by the caller.
pub type Micros = u64;

/// REDO bytes are handed to the host once this much is buffered (and at
/// every tick and sync).
const REDO_FLUSH_BYTES: usize = 256 << 10;

pub(crate) struct TableState {
    pub meta: Arc<TableMeta>,
    /// Indexed by partition number; Some for the partitions this shard holds
    /// a replica of (primary or backup).
    pub partitions: Vec<Option<Partition>>,
    /// Indexed by partition number: its started replicas, primary first.
    pub replicas: Vec<Vec<ShardAddr>>,
    /// ALTER TABLE copies the table: this shard stages no write to it
    /// (`SchemaChange::Fence`).
    pub fenced: bool,
}

impl TableState {
    pub(crate) fn is_primary(&self, partition: u32, me: ShardAddr) -> bool {
        self.replicas.get(partition as usize).and_then(|r| r.first()) == Some(&me)
    }

    /// The backups of a partition whose primary this shard is.
    pub(crate) fn backups(&self, partition: u32) -> &[ShardAddr] {
        self.replicas.get(partition as usize).map_or(&[], |r| r.get(1..).unwrap_or(&[]))
    }
}

/// The shard's REDO log buffer and its position. Every block that changes
/// committed rows appends here; the durability block syncs it.
pub(crate) struct Redo {
    /// The shard has a disk (`ShardConfig::durable`): it logs and checkpoints.
    pub(crate) enabled: bool,
    /// REDO records not yet handed to the host.
    buffer: Vec<u8>,
    /// Log sequence number: REDO bytes produced so far, buffered or not.
    pub(crate) lsn: u64,
    /// REDO bytes this shard appended since it started (not those it
    /// restored): a counter that never goes back, for reports.
    pub(crate) appended: u64,
    /// Where the REDO a restart may still need begins: the log's start
    /// after a restore, then the start of the newest checkpoint that let
    /// older records go (`DiskOp::Trim`).
    pub(crate) kept_from: u64,
    /// Numbers the host's disk completions (`Shard::on_disk_done`).
    next_token: u64,
}

impl Redo {
    pub(crate) fn new(enabled: bool) -> Redo {
        Redo { enabled, buffer: Vec::new(), lsn: 0, appended: 0, kept_from: 0, next_token: 1 }
    }

    /// REDO bytes kept for a restart (on disk in whole segments, so the
    /// files may hold up to one segment more).
    pub(crate) fn kept(&self) -> u64 {
        debug_assert!(self.kept_from <= self.lsn, "REDO kept from {} beyond its end {}", self.kept_from, self.lsn);
        self.lsn - self.kept_from
    }

    /// Appends one REDO record.
    pub(crate) fn append(&mut self, record: &Record<'_>) {
        debug_assert!(self.enabled, "a shard without a disk appended a REDO record");
        let before = self.buffer.len();
        log::encode(&mut self.buffer, record);
        self.lsn += (self.buffer.len() - before) as u64;
        self.appended += (self.buffer.len() - before) as u64;
        debug_assert!(self.buffer.len() > before, "a REDO record encoded to nothing");
    }

    /// Appends the REDO record of one committed row change (nothing
    /// without a disk).
    pub(crate) fn log_write(
        &mut self,
        epoch: CommitEpoch,
        table: TableId,
        partition: u32,
        key: &[u8],
        row: Option<&[u8]>,
    ) {
        debug_assert!(epoch > CommitEpoch::NONE, "a write logged in epoch 0");
        if self.enabled {
            self.append(&Record::Write { epoch, table, partition, key, row });
        }
    }

    pub(crate) fn take(&mut self) -> Vec<u8> {
        // The next buffer likely fills as far as this one did: starting it
        // at that size (and a record or two more, for the one that crosses
        // the flush size) saves growing and copying it a dozen times.
        let expected = self.buffer.len().min(REDO_FLUSH_BYTES);
        let next = Vec::with_capacity(expected + expected / 8);
        std::mem::replace(&mut self.buffer, next)
    }

    /// Hands buffered REDO bytes to the host: at once when `force`, else
    /// once enough are buffered.
    pub(crate) fn flush(&mut self, out: &mut Outbox, force: bool) {
        if !self.buffer.is_empty() && (force || self.buffer.len() >= REDO_FLUSH_BYTES) {
            out.disk.push(crate::DiskOp::RedoAppend(self.take()));
        }
    }

    /// A new token for a disk operation whose completion the host reports.
    pub(crate) fn token(&mut self) -> u64 {
        self.next_token += 1;
        self.next_token
    }
}

/// The state every block of a shard reads, and the few things each may
/// change: the tables' rows (through the ldm, sync and restore), the commit
/// epoch (raised by any block that sees a higher one) and the REDO buffer.
pub(crate) struct Context {
    pub(crate) cfg: ShardConfig,
    pub(crate) layout: ClusterLayout,
    pub(crate) router: Router,
    pub(crate) tables: FastMap<TableId, TableState>,
    /// Sum of `memory()` over this shard's partitions.
    pub(crate) data_memory_used: usize,
    pub(crate) now: Micros,
    /// The epoch commits decided here now get (see durability.rs). It only
    /// grows.
    pub(crate) commit_epoch: CommitEpoch,
    pub(crate) redo: Redo,
    /// The pages of the disk parts of rows of every table with disk
    /// columns (in memory until the host gives the shard its file).
    pub(crate) pages: SharedPages,
    /// Messages this shard sent itself, delivered after the current one.
    local: VecDeque<PeerMsg>,
}

impl Context {
    pub(crate) fn new(cfg: ShardConfig, layout: ClusterLayout) -> Context {
        let redo = Redo::new(cfg.durable);
        let pages = DiskPages::new(cfg.pages, Box::<MemoryPages>::default()).shared();
        Context {
            pages,
            router: Router::new(&layout),
            cfg,
            layout,
            tables: FastMap::default(),
            data_memory_used: 0,
            now: 0,
            commit_epoch: CommitEpoch(1),
            redo,
            local: VecDeque::new(),
        }
    }

    pub(crate) fn me(&self) -> ShardAddr {
        self.cfg.me
    }

    /// Sends to another shard, or queues for this one.
    pub(crate) fn send_peer(&mut self, to: ShardAddr, msg: PeerMsg, out: &mut Outbox) {
        if to == self.cfg.me {
            self.local.push_back(msg);
        } else {
            out.push_peer(to, msg);
        }
    }

    /// The next message this shard sent itself.
    pub(crate) fn next_local(&mut self) -> Option<PeerMsg> {
        self.local.pop_front()
    }

    /// Raises this shard's commit epoch to one seen in a commit or a report.
    pub(crate) fn observe_epoch(&mut self, epoch: CommitEpoch) {
        if epoch > self.commit_epoch {
            self.commit_epoch = epoch;
        }
    }

    pub(crate) fn table(&self, id: TableId, version: u32) -> Result<&TableState> {
        let table = self.tables.get(&id).ok_or_else(|| unknown_table(id))?;
        if table.meta.def.version != version {
            return Err(DbError::new(
                ErrorCode::SchemaVersionMismatch,
                format!(
                    "table {} is at schema version {} but the request was built for version {version}; refresh the table definition and retry",
                    table.meta.def.qualified_name(),
                    table.meta.def.version
                ),
            ));
        }
        Ok(table)
    }

    /// The partition of `table` this shard holds, if it holds it.
    pub(crate) fn partition(&self, table: TableId, partition: u32) -> Option<&Partition> {
        self.tables.get(&table)?.partitions.get(partition as usize)?.as_ref()
    }

    /// Adds a partition's change in memory use (`before` -> `after`) to
    /// the shard's total.
    pub(crate) fn account(&mut self, before: usize, after: usize) {
        debug_assert!(self.data_memory_used >= before, "a partition used more memory than its shard counted");
        self.data_memory_used = self.data_memory_used - before + after;
    }

    /// Counts the memory of every partition again.
    pub(crate) fn recount_memory(&mut self) {
        self.data_memory_used =
            self.tables.values().flat_map(|t| t.partitions.iter().flatten()).map(|p| p.memory()).sum();
    }

    /// The shards of the nodes that take writes (started, or starting and
    /// catching up), in address order.
    pub(crate) fn writer_shards(&self, except: Option<latsdb_types::proto::NodeId>) -> Vec<ShardAddr> {
        let mut shards: Vec<ShardAddr> = self
            .layout
            .datanodes
            .iter()
            .filter(|d| d.status.takes_writes() && Some(d.node_id) != except)
            .flat_map(|d| (0..d.shards.len()).map(move |s| ShardAddr { node: d.node_id, shard: s as u16 }))
            .collect();
        shards.sort_unstable();
        shards
    }

    /// Checks what the context promises: the router is the layout's, the
    /// memory count is the partitions' sum, every table's replica lists
    /// follow the router. Run by the simulator after every step.
    pub(crate) fn check(&self) {
        let counted: usize = self.tables.values().flat_map(|t| t.partitions.iter().flatten()).map(|p| p.memory()).sum();
        assert_eq!(
            counted, self.data_memory_used,
            "shard {}: data memory counted differs from its partitions'",
            self.cfg.me
        );
        assert!(self.commit_epoch > CommitEpoch::NONE, "shard {}: commit epoch 0", self.cfg.me);
        for table in self.tables.values() {
            assert_eq!(
                table.partitions.len(),
                table.meta.def.partitions as usize,
                "shard {}: table {} has {} partition slots for {} partitions",
                self.cfg.me,
                table.meta.def.qualified_name(),
                table.partitions.len(),
                table.meta.def.partitions
            );
            assert_eq!(
                table.replicas.len(),
                table.partitions.len(),
                "shard {}: replica lists per partition",
                self.cfg.me
            );
            for (p, replicas) in table.replicas.iter().enumerate() {
                assert_eq!(
                    *replicas,
                    self.router.replicas_of(p as u32),
                    "shard {}: stale replicas of partition {p}",
                    self.cfg.me
                );
            }
        }
    }
}

pub(crate) fn unknown_table(id: TableId) -> DbError {
    DbError::new(
        ErrorCode::UnknownTable,
        format!("table id {id} does not exist (it may have been dropped); refresh the schema"),
    )
}

/// The page of the disk part of the row of `key`, if the table has disk
/// columns and this shard holds the row (the pager's list of what a
/// request needs; a request that fails finds out when it runs).
pub(crate) fn disk_page_of(cx: &Context, table: TableId, partition: u32, key: &[u8]) -> Option<u32> {
    let state = cx.tables.get(&table)?;
    let partition = state.partitions.get(partition as usize)?.as_ref()?;
    if !partition.has_disk_columns() {
        return None;
    }
    partition.disk_page(key, partition.key_hash(key))
}

pub(crate) fn owned_partition(table: &TableState, partition: u32, me: ShardAddr) -> Result<&Partition> {
    match table.partitions.get(partition as usize) {
        Some(Some(p)) => Ok(p),
        Some(None) => Err(wrong_shard(partition, me)),
        None => Err(DbError::bad_request(format!(
            "partition {partition} does not exist; table {} has {} partitions",
            table.meta.def.qualified_name(),
            table.partitions.len()
        ))),
    }
}

pub(crate) fn wrong_shard(partition: u32, me: ShardAddr) -> DbError {
    DbError::new(
        ErrorCode::WrongShard,
        format!("partition {partition} is not held by shard {me}; refresh the cluster layout"),
    )
}
