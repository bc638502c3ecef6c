//! The shard: message dispatch, schema, scans, and the plumbing shared by
//! the coordinator (tc.rs) and the local data manager (ldm.rs).

use crate::ldm::LdmState;
use crate::tc::TcState;
use latsdb_storage::Partition;
use latsdb_types::proto::{
    ClientRequest, ClientResponse, ClusterLayout, PeerMsg, Router, ScanRequest, SchemaChange, ShardAddr,
};
use latsdb_types::schema::TableId;
use latsdb_types::{DbError, ErrorCode, Result, TableMeta};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
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

#[derive(Clone, Debug)]
pub struct ShardConfig {
    pub me: ShardAddr,
    pub lock_wait_timeout_us: Micros,
    /// First transaction sequence number. The I/O shell derives it from the
    /// wall clock so a restarted shard never reuses a transaction id that
    /// peers may still remember; a simulation passes a fixed value.
    pub first_tx_seq: u64,
    /// Data memory budget of this shard (estimated bytes of rows and
    /// indexes); 0 means unlimited. A write that would exceed it fails with
    /// `OutOfMemory` instead of exhausting the process.
    pub data_memory_bytes: u64,
    /// Shared by the shards of a node; its membership keeps it current.
    pub lease: Lease,
    /// The shard has a disk: it writes a REDO log and checkpoints (through
    /// `Outbox::disk`). Without one, nothing is ever durable.
    pub durable: bool,
    /// Shards of this data node: which partitions a shard holds follows
    /// from it and the configured node groups, started or not.
    pub node_shards: u16,
}

/// Until when (the node's monotonic clock, microseconds) a data node may
/// serve clients: set by its membership (`membership.rs`) from its
/// heartbeats' echoes. A node cut off from its peers stops answering
/// clients before the rest of the cluster can have moved on without it.
#[derive(Clone, Debug)]
pub struct Lease(Arc<AtomicU64>);

impl Lease {
    pub fn unlimited() -> Lease {
        Lease(Arc::new(AtomicU64::new(u64::MAX)))
    }

    pub fn set(&self, until: Micros) {
        self.0.store(until, Ordering::Relaxed);
    }

    pub fn valid_at(&self, now: Micros) -> bool {
        now < self.0.load(Ordering::Relaxed)
    }
}

/// What a shard wants sent, collected during one call.
#[derive(Default, Debug)]
pub struct Outbox {
    pub client: Vec<(ConnId, u64, ClientResponse)>,
    /// Answers to clients already encoded as frames (`on_lookups`).
    pub frames: Vec<(ConnId, Vec<u8>)>,
    pub peer: Vec<(ShardAddr, PeerMsg)>,
    /// Disk work, to be carried out in order.
    pub disk: Vec<crate::durability::DiskOp>,
    /// This shard, as the epoch driver, declared an epoch durable (to be
    /// reported to the management server).
    pub durable: Option<latsdb_types::proto::CommitEpoch>,
}

impl Outbox {
    /// Queues a message to a peer. The replicated writes of one
    /// transaction for one backup, and the backup's answers, join the
    /// message of the same kind queued last for that peer: a batch of
    /// writes costs one message each way, not one per write. (Only the
    /// last message to the same peer is extended, so the order on each
    /// link is kept.)
    pub(crate) fn push_peer(&mut self, to: ShardAddr, msg: PeerMsg) {
        const LOOK_BACK: usize = 4;
        let last_to_peer = self.peer.iter_mut().rev().take(LOOK_BACK).find(|(t, _)| *t == to);
        match (last_to_peer, msg) {
            (
                Some((_, PeerMsg::ReplicaPrepare { tx: queued, writes })),
                PeerMsg::ReplicaPrepare { tx, writes: more },
            ) if *queued == tx => writes.extend(more),
            (
                Some((_, PeerMsg::ReplicaApply { tx: queued, epoch: queued_epoch, writes })),
                PeerMsg::ReplicaApply { tx, epoch, writes: more },
            ) if *queued == tx && *queued_epoch == epoch => writes.extend(more),
            (
                Some((_, PeerMsg::ReplicaPrepared { tx: queued, results })),
                PeerMsg::ReplicaPrepared { tx, results: more },
            ) if *queued == tx => results.extend(more),
            (_, msg) => self.peer.push((to, msg)),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.client.is_empty()
            && self.frames.is_empty()
            && self.peer.is_empty()
            && self.disk.is_empty()
            && self.durable.is_none()
    }
}

pub(crate) struct TableState {
    pub meta: Arc<TableMeta>,
    /// Indexed by partition number; Some for the partitions this shard holds
    /// a replica of (primary or backup).
    pub partitions: Vec<Option<Partition>>,
    /// Indexed by partition number: its started replicas, primary first.
    pub replicas: Vec<Vec<ShardAddr>>,
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

pub struct Shard {
    pub(crate) cfg: ShardConfig,
    pub(crate) layout: ClusterLayout,
    pub(crate) router: Router,
    pub(crate) tables: FastMap<TableId, TableState>,
    pub(crate) ldm: LdmState,
    pub(crate) tc: TcState,
    pub(crate) now: Micros,
    /// Sum of `memory()` over this shard's partitions.
    pub(crate) data_memory_used: usize,
    /// Takeovers this shard runs, by failed node.
    pub(crate) takeovers: FastMap<latsdb_types::proto::NodeId, crate::takeover::Takeover>,
    pub(crate) dur: crate::durability::Durability,
    /// Copies of partitions to starting replicas (as their primary).
    pub(crate) sync_src: crate::sync::SyncSource,
    /// The copy of this shard's partitions while its node restarts.
    pub(crate) sync_dst: crate::sync::SyncTarget,
    /// This shard's node is starting (in the layout): it refuses clients.
    restarting: bool,
    /// This shard's node is shutting down: it refuses clients while the
    /// commits it took part in become durable (`stop_serving`).
    stopping: bool,
    /// The layout version this shard last sent its takeover reports in.
    pub(crate) reported_version: u64,
    local: VecDeque<PeerMsg>,
}

impl Shard {
    pub fn new(cfg: ShardConfig, layout: ClusterLayout) -> Shard {
        let restarting = is_restarting(&layout, cfg.me);
        let tc = TcState::starting_at(cfg.first_tx_seq);
        let ldm = LdmState::starting_at(cfg.first_tx_seq);
        let dur = crate::durability::Durability::new(cfg.durable);
        Shard {
            cfg,
            router: Router::new(&layout),
            layout,
            tables: FastMap::default(),
            ldm,
            tc,
            now: 0,
            data_memory_used: 0,
            takeovers: FastMap::default(),
            dur,
            sync_src: Default::default(),
            sync_dst: Default::default(),
            restarting,
            stopping: false,
            reported_version: 0,
            local: VecDeque::new(),
        }
    }

    pub fn address(&self) -> ShardAddr {
        self.cfg.me
    }

    /// Installs a new cluster layout; it also carries the configured
    /// lock-wait timeout. Transactions whose coordinator's node left are
    /// aborted here.
    pub fn set_layout(&mut self, layout: ClusterLayout, now: Micros, out: &mut Outbox) {
        self.now = now;
        if layout.version < self.layout.version {
            // Stale: an older view (a restarting node hears of views both
            // from the management server and from its own membership, which
            // may lag behind). Layout versions only grow.
            return;
        }
        if layout.lock_wait_timeout_ms > 0 {
            self.cfg.lock_wait_timeout_us = layout.lock_wait_timeout_ms * 1000;
        }
        let (before, after) = (self.layout.writer_nodes(), layout.writer_nodes());
        let departed: Vec<latsdb_types::proto::NodeId> =
            before.iter().filter(|n| !after.contains(n)).copied().collect();
        let replica_joined = after.iter().any(|n| !before.contains(n));
        self.router = Router::new(&layout);
        let was_starting = self.restarting;
        self.restarting = is_restarting(&layout, self.cfg.me);
        self.layout = layout;
        for table in self.tables.values_mut() {
            table.replicas = (0..table.meta.def.partitions).map(|p| self.router.replicas_of(p)).collect();
        }
        self.ldm_layout_changed(out);
        self.tc_layout_changed(out);
        if !departed.is_empty() || self.layout.version != self.reported_version {
            self.takeover_layout_changed(out);
            self.takeover_report_all(out);
        }
        self.epoch_layout_changed(out);
        self.sync_layout_changed(replica_joined, was_starting, out);
        self.finish_turn(out);
    }

    /// Whether this shard holds a replica of `partition` by the configured
    /// node groups (whether or not its node is started yet: a restarting
    /// node restores its partitions before it is).
    fn holds_partition(&self, partition: u32) -> bool {
        let groups = self.layout.node_groups;
        if groups == 0 {
            return false;
        }
        let nodes = self.layout.group_nodes(partition % groups);
        if !nodes.iter().any(|d| d.node_id == self.cfg.me.node) {
            return false;
        }
        let local = (partition / groups) as usize;
        (local / nodes.len() % self.cfg.node_shards.max(1) as usize) as u16 == self.cfg.me.shard
    }

    pub fn apply_schema(&mut self, change: SchemaChange) -> Result<()> {
        match change {
            SchemaChange::CreateTable(def) => {
                if self.tables.contains_key(&def.id) {
                    return Err(DbError::new(
                        ErrorCode::TableExists,
                        format!("table id {} already exists on this shard", def.id),
                    ));
                }
                let meta = Arc::new(TableMeta::new(def));
                let replicas: Vec<Vec<ShardAddr>> =
                    (0..meta.def.partitions).map(|p| self.router.replicas_of(p)).collect();
                let partitions =
                    (0..meta.def.partitions).map(|p| self.holds_partition(p).then(|| Partition::new(&meta))).collect();
                self.tables.insert(meta.def.id, TableState { meta, partitions, replicas });
            }
            SchemaChange::AlterTable(def) => {
                let table = self.tables.get_mut(&def.id).ok_or_else(|| unknown_table(def.id))?;
                let meta = Arc::new(TableMeta::new(def));
                for p in table.partitions.iter_mut().flatten() {
                    p.rebuild_indexes(&meta);
                }
                table.meta = meta;
            }
            SchemaChange::DropTable(id) => {
                self.tables.remove(&id).ok_or_else(|| unknown_table(id))?;
            }
        }
        self.data_memory_used =
            self.tables.values().flat_map(|t| t.partitions.iter().flatten()).map(|p| p.memory()).sum();
        Ok(())
    }

    pub fn on_client(&mut self, conn: ConnId, req_id: u64, req: ClientRequest, now: Micros, out: &mut Outbox) {
        self.now = now;
        if !matches!(req, ClientRequest::Ping) {
            if let Some(error) = self.not_serving(now) {
                out.client.push((conn, req_id, ClientResponse::Error(error)));
                return;
            }
        }
        match req {
            ClientRequest::Batch(ops) => self.ldm_batch(conn, req_id, ops, out),
            ClientRequest::TxExec { tx, ops, commit } => self.tc_exec(conn, req_id, tx, ops, commit, out),
            ClientRequest::TxAbort { tx } => self.tc_client_abort(conn, req_id, tx, out),
            ClientRequest::Scan(scan) => {
                let response = match self.scan(&scan) {
                    Ok(page) => ClientResponse::Scan(page),
                    Err(e) => ClientResponse::Error(e),
                };
                out.client.push((conn, req_id, response));
            }
            ClientRequest::Ping => out.client.push((conn, req_id, ClientResponse::Pong)),
            ClientRequest::WaitDurable => self.epoch_wait_durable(conn, req_id, out),
        }
        self.finish_turn(out);
    }

    /// A client's frame, if it is a `Batch` of committed reads only: the
    /// reads run straight from the frame and the answer is encoded as they
    /// run (`ldm_lookups`), without an allocation per read; the answer is
    /// the one `on_client` gives the decoded request. Says false, having
    /// done nothing, for any other frame: decode it and call `on_client`.
    pub fn on_lookups(&mut self, conn: ConnId, req_id: u64, body: &[u8], now: Micros, out: &mut Outbox) -> bool {
        let (mut reads, mut columns) = (Vec::new(), Vec::new());
        if !latsdb_types::proto::decode_lookups(body, &mut reads, &mut columns) {
            return false;
        }
        self.now = now;
        let frame = match self.not_serving(now) {
            Some(error) => latsdb_types::proto::frame(req_id, &ClientResponse::Error(error)),
            None => self.ldm_lookups(req_id, &reads, &columns),
        };
        out.frames.push((conn, frame));
        self.finish_turn(out);
        true
    }

    /// Why this shard serves no client request now, if it does not: its
    /// node cannot confirm its membership, or it is restarting (its rows
    /// are still being copied, and a client with an old layout must not
    /// read them).
    fn not_serving(&self, now: Micros) -> Option<DbError> {
        let me = self.cfg.me.node;
        let why = if !self.cfg.lease.valid_at(now) {
            format!("data node {me} cannot confirm it is still a member of the cluster (it lost contact with other data nodes) and executed nothing of this request; retry it: the cluster is changing its membership")
        } else if self.restarting {
            format!("data node {me} is restarting (copying its data from live replicas) and serves no requests yet; refresh the cluster layout and retry")
        } else if self.stopping {
            format!("data node {me} is shutting down and executed nothing of this request; retry it: another replica takes it, or the node serves again once started")
        } else {
            return None;
        };
        Some(DbError::new(ErrorCode::NotServing, why))
    }

    pub fn on_peer(&mut self, from: ShardAddr, msg: PeerMsg, now: Micros, out: &mut Outbox) {
        self.now = now;
        // A node removed from the view is not listened to any more: what it
        // still sends could contradict what the takeover decided. (A copy
        // request, or a takeover report made in a newer layout, may come
        // before the layout that lists its starting node: it waits for it.)
        let early = match &msg {
            PeerMsg::SyncRequest { .. } => true,
            PeerMsg::TakeoverReport(r) => r.version > self.layout.version,
            _ => false,
        };
        // A starting node is primary and coordinator of nothing: what it
        // sends in those roles comes late from its previous process, whose
        // transactions only a takeover may settle (or this layout lags
        // behind the node's admission, and the sender gets a retriable
        // refusal). A stray prepare staged here would hold its row lock for
        // ever, and a stray commit could contradict the takeover.
        let primary_role = matches!(
            msg,
            PeerMsg::ReplicaPrepare { .. }
                | PeerMsg::ReplicaApply { .. }
                | PeerMsg::ReplicaCommit { .. }
                | PeerMsg::ReplicaAbort { .. }
                | PeerMsg::TxOps { .. }
                | PeerMsg::TxCommit { .. }
                | PeerMsg::TxAbort { .. }
        );
        let listened = match self.layout.datanode(from.node).map(|d| d.status) {
            Some(latsdb_types::proto::NodeStatus::Started) => true,
            Some(latsdb_types::proto::NodeStatus::Starting) => !primary_role,
            _ => early,
        };
        if !listened {
            // Requests that wait for an answer get a refusal, not silence:
            // the sender may be alive in a layout newer than this shard's
            // (admitted a moment ago), and would otherwise wait for ever.
            // A refusal cannot contradict a takeover: nothing is locked.
            let refusal = || {
                DbError::new(
                    ErrorCode::NotServing,
                    format!(
                        "shard {} does not yet see node {} as started; nothing was done, retry",
                        self.cfg.me, from.node
                    ),
                )
            };
            match msg {
                PeerMsg::ReplicaPrepare { tx, writes } | PeerMsg::ReplicaApply { tx, writes, .. } => {
                    let error = refusal();
                    let results = writes.iter().map(|w| (w.idx, Some(error.clone()))).collect();
                    self.send_peer(from, PeerMsg::ReplicaPrepared { tx, results }, out);
                }
                PeerMsg::TxOps { tx, ops } => {
                    let e = refusal();
                    self.ldm_refuse_ops(tx, ops.iter().map(|(idx, _)| *idx).collect(), e, out);
                }
                _ => return,
            }
            self.finish_turn(out);
            return;
        }
        if let PeerMsg::TxOps { tx, ops } = &msg {
            if let Some(e) = self.not_serving(now) {
                // The coordinator's layout may lag behind a view that left
                // this node out (and made another replica primary): without
                // a lease it takes no lock and reads nothing, as for a
                // client of its own.
                self.ldm_refuse_ops(*tx, ops.iter().map(|(idx, _)| *idx).collect(), e, out);
                self.finish_turn(out);
                return;
            }
        }
        self.dispatch_peer(from, msg, out);
        self.finish_turn(out);
    }

    /// Periodic work: lock-wait timeouts, epochs, checkpoints.
    pub fn on_tick(&mut self, now: Micros, out: &mut Outbox) {
        self.now = now;
        self.ldm_expire_waits(out);
        if self.layout.version != self.reported_version {
            // A shard created with its layout reports in that version too.
            self.takeover_layout_changed(out);
            self.takeover_report_all(out);
        }
        self.drain_local(out);
        self.epoch_tick(out);
        self.lcp_tick(out);
        self.sync_tick(out);
        self.finish_turn(out);
    }

    /// A client connection closed: its open transactions are aborted.
    pub fn on_disconnect(&mut self, conn: ConnId, now: Micros, out: &mut Outbox) {
        self.now = now;
        self.tc_disconnect(conn, out);
        self.epoch_disconnect(conn);
        self.finish_turn(out);
    }

    /// The end of every step: messages to itself, a switch waiting for
    /// commits to complete, REDO for the host.
    pub(crate) fn finish_turn(&mut self, out: &mut Outbox) {
        self.drain_local(out);
        self.epoch_check_switch(out);
        self.drain_local(out);
        self.flush_redo(out, false);
    }

    fn dispatch_peer(&mut self, from: ShardAddr, msg: PeerMsg, out: &mut Outbox) {
        match msg {
            PeerMsg::TxOps { tx, ops } => self.ldm_tx_ops(tx, ops, out),
            PeerMsg::TxCommit { tx, epoch } => {
                self.observe_epoch(epoch);
                self.ldm_commit(tx, epoch, out)
            }
            PeerMsg::TxAbort { tx } => {
                self.ldm.abort_log.record(tx, 0);
                self.ldm_abort(tx, out)
            }
            PeerMsg::TxOpResults { tx, results, epoch } => {
                self.observe_epoch(epoch);
                self.tc_op_results(from, tx, results, epoch, out)
            }
            PeerMsg::TxCommitted { tx } => self.tc_committed(from, tx, out),
            PeerMsg::ReplicaPrepare { tx, writes } => {
                if writes.len() > 1 {
                    self.ldm.replica_txs.entry(tx).or_default().reserve(writes.len());
                }
                for write in writes {
                    self.replica_prepare(from, tx, write, out);
                }
            }
            PeerMsg::ReplicaApply { tx, epoch, writes } => self.replica_apply_now(from, tx, epoch, writes, out),
            PeerMsg::ReplicaPrepared { tx, results } => {
                for (idx, error) in results {
                    self.ldm_replica_prepared(from, tx, idx, error, out);
                }
            }
            PeerMsg::ReplicaCommit { tx, epoch } => {
                self.observe_epoch(epoch);
                self.replica_commit(from, tx, epoch, out)
            }
            PeerMsg::ReplicaCommitted { tx } => self.ldm_replica_committed(from, tx, out),
            PeerMsg::ReplicaAbort { tx } => self.replica_abort(tx, out),
            PeerMsg::TakeoverReport(report) => self.takeover_on_report(from, report, out),
            PeerMsg::TakeoverCommit { tx, epoch } => {
                self.observe_epoch(epoch);
                self.takeover_commit(tx, epoch, out)
            }
            PeerMsg::TakeoverAbort { tx } => {
                self.ldm.abort_log.record(tx, 0);
                self.ldm_abort(tx, out)
            }
            // Membership runs beside the shards; its host handles these.
            PeerMsg::Member(_) => {}
            PeerMsg::EpochSwitch { epoch } => self.epoch_on_switch(from, epoch, out),
            PeerMsg::EpochCompleted { epoch, view } => self.driver_on_completed(from, epoch, view, out),
            PeerMsg::EpochSave { epoch } => self.epoch_on_save(from, epoch, out),
            PeerMsg::EpochSaved { epoch } => self.driver_on_saved(from, epoch, out),
            PeerMsg::EpochDurable { epoch } => self.epoch_on_durable(epoch, out),
            PeerMsg::SyncRequest { table, partition, attempt } => {
                self.sync_on_request((from, table, partition, attempt), out)
            }
            PeerMsg::SyncDigest { table, partition, attempt, range, digest } => {
                self.sync_on_digest((from, table, partition, attempt), range, digest, out)
            }
            PeerMsg::SyncFetch { table, partition, attempt, range } => {
                self.sync_on_fetch((from, table, partition, attempt), range, out)
            }
            PeerMsg::SyncRows { table, partition, attempt, range, rows, epoch } => {
                self.sync_on_rows((from, table, partition, attempt), range, rows, epoch)
            }
            PeerMsg::SyncRefused { table, partition, attempt, error } => {
                self.sync_on_refused((from, table, partition, attempt), error)
            }
            PeerMsg::SyncHandover { table, partition } => self.sync_on_handover(from, table, partition, out),
            PeerMsg::SyncHandedOver { table, partition } => self.sync_on_handed_over(from, table, partition),
        }
    }

    /// Sends to another shard, or queues for this one.
    pub(crate) fn send_peer(&mut self, to: ShardAddr, msg: PeerMsg, out: &mut Outbox) {
        if to == self.cfg.me {
            self.local.push_back(msg);
        } else {
            out.push_peer(to, msg);
        }
    }

    fn drain_local(&mut self, out: &mut Outbox) {
        while let Some(msg) = self.local.pop_front() {
            let me = self.cfg.me;
            self.dispatch_peer(me, msg, out);
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

    fn scan(&self, req: &ScanRequest) -> Result<latsdb_types::proto::ScanPage> {
        let table = self.table(req.table, req.table_version)?;
        let meta = &table.meta;
        meta.validate_projection(req.projection.as_deref())?;
        if let Some(filter) = &req.filter {
            filter.validate(meta.def.columns.len())?;
        }
        for a in &req.aggregates {
            if let Some(c) = a.column() {
                if c as usize >= meta.def.columns.len() {
                    return Err(DbError::new(
                        ErrorCode::UnknownColumn,
                        format!("aggregate names column number {c}, which does not exist"),
                    ));
                }
            }
        }
        let partition = owned_partition(table, req.partition, self.cfg.me)?;
        partition.scan(meta, req)
    }

    /// Rows stored on this shard (committed), for reports and checks.
    pub fn row_count(&self) -> usize {
        self.tables.values().flat_map(|t| t.partitions.iter().flatten()).map(|p| p.len()).sum()
    }

    /// The committed rows of a partition this shard holds, sorted by key
    /// (for checks that replicas agree).
    pub fn partition_rows(&self, table: TableId, partition: u32) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
        let p = self.tables.get(&table)?.partitions.get(partition as usize)?.as_ref()?;
        let mut rows: Vec<(Vec<u8>, Vec<u8>)> = p.rows().map(|(k, r)| (k.to_vec(), r.to_vec())).collect();
        rows.sort();
        Some(rows)
    }

    /// Shutting down: refuse every client request from now on, and return
    /// the epoch to wait for. Once it is durable, every commit this shard
    /// acknowledged or took part in before is on disk on every live
    /// replica, so the node may exit without losing any of them (commits
    /// of other nodes' transactions still reach it until then, and count
    /// towards later epochs).
    pub fn stop_serving(&mut self) -> latsdb_types::proto::CommitEpoch {
        self.stopping = true;
        self.current_epoch()
    }

    /// Estimated data memory in use and the budget (0 = unlimited), in bytes.
    pub fn data_memory(&self) -> (usize, u64) {
        (self.data_memory_used, self.cfg.data_memory_bytes)
    }

    /// Transactions this shard participates in (holds locks or staged
    /// writes for), for diagnostics.
    pub fn participations(&self) -> Vec<latsdb_types::proto::TxId> {
        self.ldm.participations()
    }

    /// Transactions this shard coordinates or participates in, and rows locked.
    pub fn activity(&self) -> (usize, usize, usize) {
        (self.tc.open(), self.ldm.open(), self.ldm.locks.locked_rows())
    }
}

fn is_restarting(layout: &ClusterLayout, me: ShardAddr) -> bool {
    layout.datanode(me.node).is_some_and(|d| d.status == latsdb_types::proto::NodeStatus::Starting)
}

pub(crate) fn unknown_table(id: TableId) -> DbError {
    DbError::new(
        ErrorCode::UnknownTable,
        format!("table id {id} does not exist (it may have been dropped); refresh the schema"),
    )
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
