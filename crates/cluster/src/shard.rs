//! The shard: it composes the blocks of a data node's shard (tc, ldm,
//! takeover, durability, checkpoint, sync), dispatches each message to the
//! block it is for, and owns what is not any one block's: the schema, scans
//! and whether the shard serves clients.

use crate::checkpoint::{Checkpoints, RestoreReport};
use crate::context::{disk_page_of, owned_partition, unknown_table, Context, TableState};
pub use crate::context::{ConnId, Micros};
use crate::durability::Epochs;
use crate::ldm::{CommitReply, Ldm};
use crate::pager::{Pager, Waiting, Woken};
use crate::sync::{PartitionSync, SyncProgress};
use crate::takeover::Takeovers;
use crate::tc::Coordinator;
use latsdb_storage::log::Record;
use latsdb_storage::pages::{DiskPages, PageFile, PagesConfig};
use latsdb_storage::tablespace::PageRead;
use latsdb_storage::Partition;
use latsdb_types::proto::{
    ClientRequest, ClientResponse, ClusterLayout, CommitEpoch, NodeStatus, PeerMsg, Router, ScanRequest, SchemaChange,
    ShardAddr, TxId,
};
use latsdb_types::{DbError, ErrorCode, Result, TableMeta};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

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
    /// `TableFull` instead of exhausting the process.
    pub data_memory_bytes: u64,
    /// REDO log this shard may keep on disk; 0 means unlimited. At the
    /// limit writes fail with `RedoFull` until a checkpoint lets older REDO
    /// go, instead of filling the disk (which would stop the node); a
    /// checkpoint starts once half of it is kept.
    pub redo_limit_bytes: u64,
    /// Shared by the shards of a node; its membership keeps it current.
    pub lease: Lease,
    /// The shard has a disk: it writes a REDO log and checkpoints (through
    /// `Outbox::disk`). Without one, nothing is ever durable.
    pub durable: bool,
    /// Shards of this data node: which partitions a shard holds follows
    /// from it and the configured node groups, started or not.
    pub node_shards: u16,
    /// This shard's share of the node's page cache and tablespace.
    pub pages: PagesConfig,
}

/// A shard's tablespace, for reports (`mgm report-memory`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskUsage {
    /// Bytes of the tablespace file (its pages).
    pub file_bytes: u64,
    /// Bytes of live records in it.
    pub used_bytes: u64,
    /// The configured limit (0: none).
    pub limit_bytes: u64,
    pub cache: latsdb_storage::tablespace::CacheStats,
    /// Requests that waited for pages read off the shard thread.
    pub parks: u64,
    /// Pages read on the shard thread itself (paths that do not park).
    pub read_here: u64,
    /// Pages a request would have waited for that the operating system
    /// had cached (read at once without waiting).
    pub read_at_once: u64,
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
    /// Pages to read from the tablespace file and hand back with
    /// `Shard::on_page_read`, in any order (requests wait for them).
    pub page_reads: Vec<PageRead>,
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
            && self.page_reads.is_empty()
            && self.durable.is_none()
    }
}

pub struct Shard {
    cx: Context,
    tc: Coordinator,
    ldm: Ldm,
    takeover: Takeovers,
    epochs: Epochs,
    lcp: Checkpoints,
    sync: PartitionSync,
    pager: Pager,
    /// This shard's node is starting (in the layout): it refuses clients.
    restarting: bool,
    /// Keyed operations and scan pages clients asked of this shard.
    key_ops: u64,
    scan_pages: u64,
    /// This shard's node is shutting down: it refuses clients while the
    /// commits it took part in become durable (`stop_serving`).
    stopping: bool,
    /// Some partition this shard still holds moved to another node group
    /// (`free_moved_partitions` frees it once no transaction uses it).
    moved_away: bool,
}

impl Shard {
    pub fn new(cfg: ShardConfig, layout: ClusterLayout) -> Shard {
        let restarting = is_restarting(&layout, cfg.me);
        let tc = Coordinator::starting_at(cfg.first_tx_seq);
        let ldm = Ldm::starting_at(cfg.first_tx_seq);
        Shard {
            cx: Context::new(cfg, layout),
            tc,
            ldm,
            takeover: Takeovers::default(),
            epochs: Epochs::new(),
            lcp: Checkpoints::default(),
            sync: PartitionSync::default(),
            pager: Pager::default(),
            restarting,
            key_ops: 0,
            scan_pages: 0,
            stopping: false,
            moved_away: false,
        }
    }

    pub fn address(&self) -> ShardAddr {
        self.cx.me()
    }

    /// Gives the shard the file of its pages (the data node's tablespace
    /// file); until then they are kept in memory. Called before the shard
    /// holds any table with disk columns.
    pub fn set_page_file(&mut self, file: Box<dyn PageFile>) {
        let mut pages = DiskPages::lock(&self.cx.pages);
        assert_eq!(pages.tablespace().pages(), 0, "the page file is set before any page is written");
        let parking = pages.parks_on_miss();
        *pages = DiskPages::new(self.cx.cfg.pages, file);
        if parking {
            pages.park_on_miss();
        }
    }

    /// From now on a request whose pages are not cached parks until the
    /// host has read them (`Outbox::page_reads`, `on_page_read`) instead of
    /// reading them on the shard thread.
    pub fn park_on_miss(&mut self) {
        DiskPages::lock(&self.cx.pages).park_on_miss();
    }

    /// A page of the tablespace file, read as the host's reader does (the
    /// simulator answers `Outbox::page_reads` with it).
    pub fn read_page_file(&self, page: u32) -> Box<[u8]> {
        DiskPages::lock(&self.cx.pages).read_file(page)
    }

    /// The host read a page asked for in `Outbox::page_reads`: the requests
    /// that waited for it run if they have all their pages now.
    pub fn on_page_read(&mut self, read: PageRead, bytes: Box<[u8]>, now: Micros, out: &mut Outbox) {
        self.cx.now = now;
        let woken = self.pager.on_read(&self.cx.pages, read, bytes, &mut out.page_reads);
        for woken in woken {
            self.run_woken(woken, out);
        }
        self.finish_turn(out);
    }

    /// The tablespace's size and the page cache's counters.
    pub fn disk_usage(&self) -> DiskUsage {
        let pages = DiskPages::lock(&self.cx.pages);
        let space = pages.tablespace();
        DiskUsage {
            file_bytes: space.pages() as u64 * latsdb_storage::tablespace::PAGE_BYTES as u64,
            used_bytes: space.used_bytes(),
            limit_bytes: pages.limit_bytes(),
            cache: space.stats(),
            parks: self.pager.parks,
            read_here: pages.read_here(),
            read_at_once: pages.read_at_once(),
        }
    }

    /// Installs a new cluster layout; it also carries the configured
    /// lock-wait timeout. Transactions whose coordinator's node left are
    /// aborted here.
    pub fn set_layout(&mut self, layout: ClusterLayout, now: Micros, out: &mut Outbox) {
        self.cx.now = now;
        if layout.version < self.cx.layout.version {
            // Stale: an older view (a restarting node hears of views both
            // from the management server and from its own membership, which
            // may lag behind). Layout versions only grow.
            return;
        }
        if layout.lock_wait_timeout_ms > 0 {
            self.cx.cfg.lock_wait_timeout_us = layout.lock_wait_timeout_ms * 1000;
        }
        let (before, after) = (self.cx.layout.writer_nodes(), layout.writer_nodes());
        let departed = before.iter().any(|n| !after.contains(n));
        let replica_joined = after.iter().any(|n| !before.contains(n));
        let cx = &mut self.cx;
        cx.router = Router::new(&layout);
        let was_starting = self.restarting;
        self.restarting = is_restarting(&layout, cx.cfg.me);
        cx.layout = layout;
        for table in cx.tables.values_mut() {
            table.replicas = (0..table.meta.def.partitions).map(|p| cx.router.replicas_of(p)).collect();
        }
        self.ldm.layout_changed(cx, out);
        self.tc.on_layout_changed(cx, out);
        if departed || self.takeover.report_due(cx) {
            self.takeover.on_layout_changed(cx, out);
            self.takeover.report_all(cx, &self.ldm, out);
        }
        self.epochs.on_layout_changed(cx, out);
        let change = self.sync.on_layout_changed(cx, &self.ldm, out, replica_joined, was_starting);
        if change.sources_switched {
            self.ldm.apply_held(cx, &self.sync, out);
        }
        // A move to an added node group is done once the view admitted a
        // node of it: the partitions it took are freed here.
        self.free_moved_partitions();
        self.finish_turn(out);
    }

    /// Whether this shard holds a replica of `partition` by the configured
    /// node groups (whether or not its node is started yet: a restarting
    /// node restores its partitions before it is), also while the
    /// partition moves to this node's group.
    fn holds_partition(&self, partition: u32) -> bool {
        let router = &self.cx.router;
        let place = router.place_of(partition);
        self.holds_place(place) || router.moving_to(partition).is_some_and(|to| self.holds_place(to))
    }

    /// Whether this shard is where its node keeps a partition at `place`.
    fn holds_place(&self, place: latsdb_types::proto::PartitionPlace) -> bool {
        let me = self.cx.me();
        let nodes = self.cx.layout.group_nodes(place.group);
        if !nodes.iter().any(|d| d.node_id == me.node) {
            return false;
        }
        (place.slot as usize / nodes.len() % self.cx.cfg.node_shards.max(1) as usize) as u16 == me.shard
    }

    /// Frees the partitions this shard holds that moved to another node
    /// group, once no transaction here has a lock or a staged write in
    /// them (the partition's old primary handed it over before the move,
    /// so only the ends of transactions decided before it remain).
    fn free_moved_partitions(&mut self) {
        let mut gone = Vec::new();
        let mut in_use = false;
        for (id, table) in &self.cx.tables {
            for (p, slot) in table.partitions.iter().enumerate() {
                if slot.is_none() || self.holds_partition(p as u32) {
                    continue;
                }
                if self.ldm.touches_partition(&table.meta, *id, p as u32) {
                    in_use = true;
                } else {
                    gone.push((*id, p));
                }
            }
        }
        for (id, p) in gone {
            let Some(mut partition) = self.cx.tables.get_mut(&id).and_then(|t| t.partitions[p].take()) else {
                continue;
            };
            let freed = partition.memory();
            partition.free_disk_parts();
            self.cx.account(freed, 0);
        }
        self.moved_away = in_use;
    }

    pub fn apply_schema(&mut self, change: SchemaChange) -> Result<()> {
        match change {
            SchemaChange::CreateTable(def) => {
                if self.cx.tables.contains_key(&def.id) {
                    return Err(DbError::new(
                        ErrorCode::TableExists,
                        format!("table id {} already exists on this shard", def.id),
                    ));
                }
                let meta = Arc::new(TableMeta::new(def));
                let replicas: Vec<Vec<ShardAddr>> =
                    (0..meta.def.partitions).map(|p| self.cx.router.replicas_of(p)).collect();
                let partitions = (0..meta.def.partitions)
                    .map(|p| self.holds_partition(p).then(|| Partition::for_table(&meta, &self.cx.pages)))
                    .collect();
                self.cx.tables.insert(meta.def.id, TableState { meta, partitions, replicas, fenced: false });
            }
            SchemaChange::AlterTable(def) => {
                let table = self.cx.tables.get_mut(&def.id).ok_or_else(|| unknown_table(def.id))?;
                let meta = Arc::new(TableMeta::new(def));
                for p in table.partitions.iter_mut().flatten() {
                    p.rebuild_indexes(&meta);
                }
                table.meta = meta;
            }
            SchemaChange::DropTable(id) => {
                let table = self.cx.tables.remove(&id).ok_or_else(|| unknown_table(id))?;
                for mut p in table.partitions.into_iter().flatten() {
                    p.free_disk_parts();
                }
            }
            SchemaChange::Fence(fenced) => return self.fence(&fenced),
        }
        self.cx.recount_memory();
        Ok(())
    }

    /// Refuses writes to exactly the `fenced` tables from now on, and says
    /// whether transactions (as primary or backup here) still hold writes
    /// to them that they staged before: a copy of such a table may begin
    /// only once none does, so that every write it must carry is applied.
    fn fence(&mut self, fenced: &[latsdb_types::schema::TableId]) -> Result<()> {
        for (id, table) in self.cx.tables.iter_mut() {
            table.fenced = fenced.contains(id);
        }
        let open = self.ldm.staged_writes_to(fenced);
        debug_assert!(
            fenced.iter().all(|t| self.cx.tables.get(t).is_none_or(|s| s.fenced)),
            "every fenced table this shard has refuses writes"
        );
        if open > 0 {
            return Err(DbError::new(
                ErrorCode::TableAltering,
                format!("shard {} still has {open} unfinished write(s) to the table(s) being copied", self.cx.cfg.me),
            ));
        }
        Ok(())
    }

    pub fn on_client(&mut self, conn: ConnId, req_id: u64, req: ClientRequest, now: Micros, out: &mut Outbox) {
        self.cx.now = now;
        // An abort is taken even without a lease: it only releases what
        // the transaction holds, and refused it would leave the
        // transaction open at this coordinator for good, its rows locked.
        // (A takeover, if this node left the view meanwhile, aborts what
        // was not committing as well.)
        if !matches!(req, ClientRequest::Ping | ClientRequest::TxAbort { .. }) {
            if let Some(error) = self.not_serving(now) {
                out.client.push((conn, req_id, ClientResponse::Error(error)));
                return;
            }
        }
        match &req {
            ClientRequest::Batch(ops) | ClientRequest::TxExec { ops, .. } => self.key_ops += ops.len() as u64,
            ClientRequest::Scan(_) => self.scan_pages += 1,
            _ => {}
        }
        let cx = &mut self.cx;
        match req {
            ClientRequest::Batch(ops) => self.client_batch(conn, req_id, ops, out),
            ClientRequest::TxExec { tx, ops, commit } => self.tc.exec(cx, out, conn, req_id, tx, ops, commit),
            ClientRequest::TxAbort { tx } => self.tc.on_client_abort(cx, out, conn, req_id, tx),
            ClientRequest::Scan(scan) => {
                let response = match scan_partition(cx, &scan) {
                    Ok(page) => ClientResponse::Scan(page),
                    Err(e) => ClientResponse::Error(e),
                };
                out.client.push((conn, req_id, response));
            }
            ClientRequest::Ping => out.client.push((conn, req_id, ClientResponse::Pong)),
            ClientRequest::WaitDurable => self.epochs.wait_durable(cx, out, conn, req_id),
        }
        self.finish_turn(out);
    }

    /// A client's frame, if it is a `Batch` of committed reads only: the
    /// reads run straight from the frame and the answer is encoded as they
    /// run (`ldm::lookups`), without an allocation per read; the answer is
    /// the one `on_client` gives the decoded request. Says false, having
    /// done nothing, for any other frame: decode it and call `on_client`.
    pub fn on_lookups(&mut self, conn: ConnId, req_id: u64, body: &[u8], now: Micros, out: &mut Outbox) -> bool {
        let (mut reads, mut columns) = (Vec::new(), Vec::new());
        if !latsdb_types::proto::decode_lookups(body, &mut reads, &mut columns) {
            return false;
        }
        self.cx.now = now;
        self.key_ops += reads.len() as u64;
        self.lookups(conn, req_id, body, &reads, &columns, out);
        self.finish_turn(out);
        true
    }

    /// Runs a request whose pages are all cached (and pinned) now, then
    /// releases its pins.
    fn run_woken(&mut self, Woken { work, pinned }: Woken, out: &mut Outbox) {
        match work {
            Waiting::Lookups { conn, req_id, body } => {
                let (mut reads, mut columns) = (Vec::new(), Vec::new());
                let decoded = latsdb_types::proto::decode_lookups(&body, &mut reads, &mut columns);
                assert!(decoded, "a parked frame of lookups decoded when it arrived");
                self.lookups(conn, req_id, &body, &reads, &columns, out);
            }
            Waiting::Batch { conn, req_id, ops } => match self.not_serving(self.cx.now) {
                Some(error) => out.client.push((conn, req_id, ClientResponse::Error(error))),
                None => self.client_batch(conn, req_id, ops, out),
            },
        }
        Pager::release(&self.cx.pages, &pinned);
    }

    /// Answers a frame of committed reads, or parks it until the pages of
    /// the rows it reads are cached.
    fn lookups(
        &mut self,
        conn: ConnId,
        req_id: u64,
        body: &[u8],
        reads: &[latsdb_types::proto::LookupRead],
        columns: &[latsdb_types::schema::ColumnId],
        out: &mut Outbox,
    ) {
        let frame = match self.not_serving(self.cx.now) {
            Some(error) => latsdb_types::proto::frame(req_id, &ClientResponse::Error(error)),
            None => match Ldm::lookups(&self.cx, req_id, reads, columns) {
                Ok(frame) => frame,
                Err(pages) => return self.park(Waiting::Lookups { conn, req_id, body: body.to_vec() }, &pages, out),
            },
        };
        out.frames.push((conn, frame));
    }

    /// Runs a client's batch of single-row operations, or parks it until
    /// the pages of the rows it touches are cached.
    fn client_batch(&mut self, conn: ConnId, req_id: u64, ops: Vec<latsdb_types::proto::KeyOp>, out: &mut Outbox) {
        let pages: Vec<u32> =
            ops.iter().filter_map(|op| disk_page_of(&self.cx, op.table, op.partition, &op.key)).collect();
        if Pager::must_wait(&self.cx.pages, &pages) {
            return self.park(Waiting::Batch { conn, req_id, ops }, &pages, out);
        }
        self.ldm.batch(&mut self.cx, &self.sync, conn, req_id, ops, out)
    }

    /// Parks a request until `pages` are cached, or runs it now if every
    /// one of them could be read at once.
    fn park(&mut self, work: Waiting, pages: &[u32], out: &mut Outbox) {
        if let Some(now) = self.pager.park(&self.cx.pages, work, pages, &mut out.page_reads) {
            self.run_woken(now, out);
        }
    }

    /// Why this shard serves no client request now, if it does not: its
    /// node cannot confirm its membership, or it is restarting (its rows
    /// are still being copied, and a client with an old layout must not
    /// read them).
    fn not_serving(&self, now: Micros) -> Option<DbError> {
        let me = self.cx.me().node;
        let why = if !self.cx.cfg.lease.valid_at(now) {
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

    /// A message from shard `from` of the data-node process `process`
    /// (`DataNodeInfo::process`; the host knows it from the link's
    /// `Hello::Peer`).
    pub fn on_peer(&mut self, from: ShardAddr, process: u64, msg: PeerMsg, now: Micros, out: &mut Outbox) {
        self.cx.now = now;
        if msg.malformed().is_some() {
            // No shard sends it; nothing the receiver could answer would
            // help the sender, so it is dropped unanswered.
            return;
        }
        if !self.listens_to(from, process, &msg) {
            self.refuse_peer(from, process, msg, out);
            return;
        }
        let msg = match msg {
            PeerMsg::TxOps { tx, ops } => match self.not_serving(now) {
                // The coordinator's layout may lag behind a view that left
                // this node out (and made another replica primary): without
                // a lease it takes no lock and reads nothing, as for a
                // client of its own. The coordinator sends the operations
                // again when its layout moves on.
                Some(e) => {
                    Ldm::return_ops(&mut self.cx, tx, ops, e, out);
                    self.finish_turn(out);
                    return;
                }
                None => PeerMsg::TxOps { tx, ops },
            },
            msg => msg,
        };
        self.dispatch_peer(from, msg, out);
        self.finish_turn(out);
    }

    /// Whether a message from `from` is listened to. A node removed from
    /// the view is not: what it still sends could contradict what the
    /// takeover decided. (A copy request, or a takeover report made in a
    /// newer layout, may come before the layout that lists its starting
    /// node: it waits for it.) A starting node is primary and coordinator
    /// of nothing: what it sends in those roles comes late from its previous
    /// process, whose transactions only a takeover may settle (or this
    /// layout lags behind the node's admission, and the sender gets a
    /// retriable refusal). A stray prepare staged here would hold its row
    /// lock for ever, and a stray commit could contradict the takeover.
    /// Nor is a process other than the one the layout lists for the node:
    /// a previous process's operations, held back by a network fault and
    /// staged on the node's admitted next process, held that process's
    /// node restart back for good (fault campaign seed 145). Early
    /// messages are exempt: a copy request and a newer takeover report are
    /// checked against the layout when they are acted on.
    fn listens_to(&self, from: ShardAddr, process: u64, msg: &PeerMsg) -> bool {
        let early = match msg {
            PeerMsg::SyncRequest { .. } => true,
            PeerMsg::TakeoverReport(r) => r.version > self.cx.layout.version,
            _ => false,
        };
        // One lookup of the sender: this runs for every peer message.
        let Some(sender) = self.cx.layout.datanode(from.node) else { return early };
        if !early && sender.runs_other_than(process) {
            return false;
        }
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
        match sender.status {
            NodeStatus::Started => true,
            NodeStatus::Starting => !primary_role,
            NodeStatus::NotStarted => early,
        }
    }

    /// Answers a message that is not listened to. Requests that wait for
    /// an answer get a refusal, not silence: the sender may be alive in a
    /// layout newer than this shard's (admitted a moment ago), and would
    /// otherwise wait for ever. A refusal cannot contradict a takeover:
    /// nothing is locked.
    fn refuse_peer(&mut self, from: ShardAddr, process: u64, msg: PeerMsg, out: &mut Outbox) {
        let why = if self.cx.layout.lists_other_process(from.node, process) {
            format!(
                "shard {} knows another process of data node {} than process {process:#x}; nothing was done, retry",
                self.cx.me(),
                from.node
            )
        } else {
            format!("shard {} does not yet see node {} as started; nothing was done, retry", self.cx.me(), from.node)
        };
        let refusal = DbError::new(ErrorCode::NotServing, why);
        match msg {
            PeerMsg::ReplicaPrepare { tx, writes } | PeerMsg::ReplicaApply { tx, writes, .. } => {
                let results = writes.iter().map(|w| (w.idx, Some(refusal.clone()))).collect();
                self.cx.send_peer(from, PeerMsg::ReplicaPrepared { tx, results }, out);
            }
            PeerMsg::TxOps { tx, ops } => Ldm::return_ops(&mut self.cx, tx, ops, refusal, out),
            _ => return,
        }
        self.finish_turn(out);
    }

    /// Periodic work: lock-wait timeouts, epochs, checkpoints.
    pub fn on_tick(&mut self, now: Micros, out: &mut Outbox) {
        self.cx.now = now;
        self.ldm.expire_waits(&mut self.cx, out);
        self.tc.expire_inactive(&mut self.cx, out);
        self.tc.send_returned_again(&mut self.cx, out);
        if self.takeover.report_due(&self.cx) {
            // A shard created with its layout reports in that version too.
            self.takeover.on_layout_changed(&mut self.cx, out);
            self.takeover.report_all(&mut self.cx, &self.ldm, out);
        }
        self.drain_local(out);
        self.epochs.tick(&mut self.cx, out);
        self.lcp.tick(&mut self.cx, out, self.sync.copying());
        self.sync.tick(&mut self.cx, &self.ldm, out);
        if self.moved_away {
            self.free_moved_partitions();
        }
        self.finish_turn(out);
    }

    /// A client connection closed: its open transactions are aborted.
    pub fn on_disconnect(&mut self, conn: ConnId, now: Micros, out: &mut Outbox) {
        self.cx.now = now;
        self.tc.on_disconnect(&mut self.cx, out, conn);
        self.epochs.on_disconnect(conn);
        self.pager.on_disconnect(&self.cx.pages, conn);
        self.finish_turn(out);
    }

    /// The host finished a sync or a checkpoint it was asked for.
    pub fn on_disk_done(&mut self, token: u64, now: Micros, out: &mut Outbox) {
        self.cx.now = now;
        if !self.epochs.on_disk_done(&mut self.cx, out, token) {
            let (durable, saved) = (self.epochs.durable, self.epochs.saved);
            self.lcp.on_disk_done(&mut self.cx, out, token, durable, saved);
        }
        self.finish_turn(out);
    }

    /// The end of every step: messages to itself, a switch waiting for
    /// commits to complete, REDO for the host.
    fn finish_turn(&mut self, out: &mut Outbox) {
        self.drain_local(out);
        self.check_switch(out);
        self.drain_local(out);
        self.cx.redo.flush(out, false);
    }

    /// Answers the epoch driver's pending switch once every commit this
    /// shard is responsible for in an older epoch reached all its replicas
    /// (see durability.rs): its own coordinator's, its ldm's, and a
    /// takeover's that may still commit.
    fn check_switch(&mut self, out: &mut Outbox) {
        let (tc, ldm, takeover) = (&self.tc, &self.ldm, &self.takeover);
        let completed_below = |cx: &Context, epoch: CommitEpoch| {
            !takeover.pending(cx) && tc.all_committed_below(epoch) && ldm.all_committed_below(cx, epoch)
        };
        self.epochs.check_switch(&mut self.cx, out, completed_below);
    }

    fn dispatch_peer(&mut self, from: ShardAddr, msg: PeerMsg, out: &mut Outbox) {
        let cx = &mut self.cx;
        match msg {
            PeerMsg::TxOps { tx, ops } => self.ldm.tx_ops(cx, &self.sync, tx, ops, out),
            PeerMsg::TxCommit { tx, epoch } => {
                cx.observe_epoch(epoch);
                self.ldm.commit_decided(cx, &self.sync, tx, CommitReply::Coordinator, epoch, out)
            }
            PeerMsg::TxAbort { tx } | PeerMsg::TakeoverAbort { tx } => {
                self.ldm.abort_log.record(tx, CommitEpoch::NONE);
                self.ldm.abort(cx, tx, out)
            }
            PeerMsg::TxOpResults { tx, results, epoch } => {
                cx.observe_epoch(epoch);
                self.tc.on_op_results(cx, out, from, tx, results, epoch)
            }
            PeerMsg::TxCommitted { tx } => self.tc.on_committed(out, from, tx, self.cx.now),
            PeerMsg::TxOpsReturned { tx, ops, error } => self.tc.on_ops_returned(cx, out, from, tx, ops, error),
            PeerMsg::ReplicaPrepare { tx, writes } => {
                if writes.len() > 1 {
                    self.ldm.replica_txs.entry(tx).or_default().reserve(writes.len());
                }
                for write in writes {
                    self.ldm.replica_prepare(cx, from, tx, write, out);
                }
            }
            PeerMsg::ReplicaApply { tx, epoch, writes } => {
                self.ldm.replica_apply_now(cx, &self.sync, from, tx, epoch, writes, out)
            }
            PeerMsg::ReplicaPrepared { tx, results } => {
                for (idx, error) in results {
                    self.ldm.replica_prepared(cx, from, tx, idx, error, out);
                }
            }
            PeerMsg::ReplicaCommit { tx, epoch } => {
                cx.observe_epoch(epoch);
                self.ldm.replica_commit(cx, &self.sync, from, tx, epoch, out)
            }
            PeerMsg::ReplicaCommitted { tx } => self.ldm.replica_committed(cx, from, tx, out),
            PeerMsg::ReplicaAbort { tx } => self.ldm.replica_abort(cx, tx, out),
            PeerMsg::TakeoverReport(report) => self.takeover.on_report(cx, out, from, report),
            PeerMsg::TakeoverCommit { tx, epoch } => {
                cx.observe_epoch(epoch);
                self.ldm.commit_decided(cx, &self.sync, tx, CommitReply::Nobody, epoch, out)
            }
            // Membership runs beside the shards; its host handles these.
            PeerMsg::Member(_) => {}
            PeerMsg::EpochSwitch { epoch } => {
                self.epochs.on_switch(cx, from, epoch);
                self.check_switch(out);
            }
            PeerMsg::EpochCompleted { epoch, view } => self.epochs.on_completed(cx, out, from, epoch, view),
            PeerMsg::EpochSave { epoch } => self.epochs.on_save(cx, out, from, epoch),
            PeerMsg::EpochSaved { epoch } => self.epochs.on_saved(cx, out, from, epoch),
            PeerMsg::EpochDurable { epoch } => {
                if self.epochs.on_durable(out, epoch) {
                    self.lcp.on_durable(cx, out, self.epochs.durable, self.epochs.saved);
                }
            }
            PeerMsg::SyncRequest { table, partition, attempt } => {
                self.sync.on_request(cx, &self.ldm, out, (from, table, partition, attempt))
            }
            PeerMsg::SyncDigest { table, partition, attempt, range, digest } => {
                self.sync.on_digest(cx, out, (from, table, partition, attempt), range, digest)
            }
            PeerMsg::SyncFetch { table, partition, attempt, range } => {
                self.sync.on_fetch(cx, out, (from, table, partition, attempt), range)
            }
            PeerMsg::SyncRows { table, partition, attempt, range, rows, epoch } => {
                self.sync.on_rows(cx, (from, table, partition, attempt), range, rows, epoch)
            }
            PeerMsg::SyncRefused { table, partition, attempt, error } => {
                self.sync.on_refused((from, table, partition, attempt), error)
            }
            PeerMsg::SyncHandover { table, partition } => {
                self.sync.on_handover(cx, &self.ldm, out, from, table, partition)
            }
            PeerMsg::SyncHandedOver { table, partition } => self.sync.on_handed_over(from, table, partition),
        }
    }

    fn drain_local(&mut self, out: &mut Outbox) {
        while let Some(msg) = self.cx.next_local() {
            let me = self.cx.me();
            self.dispatch_peer(me, msg, out);
        }
    }

    /// Checks every block's invariants; the simulator runs it after every
    /// step of every shard. A broken invariant panics with what broke.
    pub fn check(&self) {
        self.cx.check();
        DiskPages::lock(&self.cx.pages).check();
        self.pager.check(&self.cx.pages);
        self.tc.check(&self.cx);
        self.ldm.check(&self.cx);
        self.takeover.check(&self.cx);
        self.epochs.check(&self.cx);
        self.lcp.check(&self.cx);
        self.sync.check(&self.cx);
        if !self.moved_away {
            for (id, table) in &self.cx.tables {
                for (p, slot) in table.partitions.iter().enumerate() {
                    assert!(
                        slot.is_none() || self.holds_partition(p as u32),
                        "shard {}: partition {p} of table id {id} moved away but was not freed",
                        self.cx.me()
                    );
                }
            }
        }
        assert_eq!(
            self.restarting,
            is_restarting(&self.cx.layout, self.cx.me()),
            "shard {}: restarting disagrees with its layout",
            self.cx.me()
        );
    }

    /// Rows stored on this shard (committed), for reports and checks.
    pub fn row_count(&self) -> usize {
        self.cx.tables.values().flat_map(|t| t.partitions.iter().flatten()).map(|p| p.len()).sum()
    }

    /// What clients asked of this shard and how it went, since it started.
    pub fn op_counts(&self) -> latsdb_types::proto::OpCounts {
        latsdb_types::proto::OpCounts {
            key_ops: self.key_ops,
            scan_pages: self.scan_pages,
            committed: self.tc.committed,
            aborts: self.tc.aborts,
            lock_waits: self.ldm.locks.waits,
            lock_wait_timeouts: self.ldm.locks.timeouts,
            tx_request_latency: self.tc.request_latency,
            checkpoints: self.lcp.completed,
            redo_written_bytes: self.cx.redo.appended,
        }
    }

    /// Rows and row bytes of every partition replica this shard holds.
    pub fn partition_sizes(&self) -> Vec<latsdb_types::proto::PartitionSize> {
        let mut sizes = Vec::new();
        for (&table, state) in &self.cx.tables {
            for (partition, p) in state.partitions.iter().enumerate() {
                if let Some(p) = p {
                    sizes.push(latsdb_types::proto::PartitionSize {
                        table,
                        partition: partition as u32,
                        rows: p.len() as u64,
                        bytes: p.row_bytes() as u64,
                    });
                }
            }
        }
        sizes
    }

    /// The committed rows of a partition this shard holds, sorted by key
    /// (for checks that replicas agree).
    pub fn partition_rows(
        &self,
        table: latsdb_types::schema::TableId,
        partition: u32,
    ) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
        let p = self.cx.partition(table, partition)?;
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
    pub fn stop_serving(&mut self) -> CommitEpoch {
        self.stopping = true;
        self.current_epoch()
    }

    /// Estimated data memory in use and the budget (0 = unlimited), in bytes.
    pub fn data_memory(&self) -> (usize, u64) {
        (self.cx.data_memory_used, self.cx.cfg.data_memory_bytes)
    }

    /// REDO bytes kept for a restart, and the limit (0: none).
    pub fn redo_usage(&self) -> (u64, u64) {
        (self.cx.redo.kept(), self.cx.cfg.redo_limit_bytes)
    }

    /// Transactions this shard participates in (holds locks or staged
    /// writes for), for diagnostics.
    pub fn participations(&self) -> Vec<TxId> {
        self.ldm.participations()
    }

    /// Transactions this shard coordinates or participates in, and rows locked.
    pub fn activity(&self) -> (usize, usize, usize) {
        (self.tc.open(), self.ldm.open(), self.ldm.locks.locked_rows())
    }

    /// The latest epoch known durable on every live data node.
    pub fn durable_epoch(&self) -> CommitEpoch {
        self.epochs.durable
    }

    /// The epoch commits decided here now get.
    pub fn current_epoch(&self) -> CommitEpoch {
        self.cx.commit_epoch
    }

    /// Whether partition copies that restarting replicas asked of this
    /// shard wait to start.
    pub fn copies_wait(&self) -> bool {
        self.sync.copies_wait()
    }

    /// Why the partition copies restarting replicas asked of this shard
    /// have not started (None: none waits).
    pub fn copy_waits(&self) -> Option<String> {
        let mut text = self.sync.copy_waits(&self.cx, &self.ldm)?;
        for tx in self.sync.copy_barrier(&self.ldm).take(3) {
            text += &format!("\n  {}.{}#{}: {}", tx.tc.node, tx.tc.shard, tx.seq, self.ldm.describe(tx));
            if let Some(tc) = self.tc.describe(tx) {
                text += &format!("; {tc}");
            }
        }
        Some(text)
    }

    /// How the copy of a starting shard goes.
    pub fn sync_progress(&self) -> SyncProgress {
        self.sync.progress()
    }

    /// The last stage of a node restart: hands over the partitions this
    /// shard will be primary of (see `PartitionSync::hand_over`).
    pub fn sync_hand_over(&mut self, out: &mut Outbox) {
        self.sync.hand_over(&mut self.cx, out);
    }

    /// Restores this shard (its tables already applied) from a checkpoint
    /// and the REDO log that follows it, to epoch `restore_epoch`; new
    /// commits then begin in `first_epoch`.
    ///
    /// `redo` is the intact REDO log from LSN `redo_base`. The checkpoint
    /// (if any) must start at or after `redo_base` and end at or before
    /// `restore_epoch`.
    pub fn restore(
        &mut self,
        checkpoint: Option<&[u8]>,
        redo: &[u8],
        redo_base: u64,
        restore_epoch: CommitEpoch,
        first_epoch: CommitEpoch,
    ) -> Result<RestoreReport> {
        let report = self.lcp.restore(&mut self.cx, checkpoint, redo, redo_base, restore_epoch)?;
        self.cx.commit_epoch = first_epoch;
        self.epochs.durable = restore_epoch;
        self.epochs.saved = restore_epoch;
        // Commits of epochs after the restore point that some log may hold
        // were lost with the cluster: void them for every later restart.
        if self.cx.redo.enabled {
            self.cx.redo.append(&Record::Restarted {
                restored: restore_epoch,
                discarded: CommitEpoch(first_epoch.0.saturating_sub(1)),
            });
        }
        Ok(report)
    }

    /// Takes the REDO bytes buffered so far (the restart marker after a
    /// restore), for the host to write and sync before serving.
    pub fn take_redo(&mut self) -> Vec<u8> {
        self.cx.redo.take()
    }

    /// Starts a checkpoint at the next tick (after a node restart copied
    /// rows that its REDO log does not hold). Returns the count of completed
    /// checkpoints that [`Shard::checkpoint_settled`] waits for.
    pub fn checkpoint_now(&mut self) -> u64 {
        self.lcp.request(self.cx.redo.enabled)
    }

    /// Whether `target` checkpoints completed and the newest one replaced
    /// the older ones (its end epoch is durable): a restart would now
    /// restore from it. For a restarted node, also whether its log is saved
    /// through the durable epoch: an epoch declared durable while it was
    /// not yet saving (it joined the round late) must be restorable from
    /// its disk too once it is a member, as a system restart relies on.
    pub fn checkpoint_settled(&self, target: u64) -> bool {
        !self.cx.redo.enabled || (self.lcp.settled(target) && self.epochs.saved >= self.epochs.durable)
    }

    /// Checkpoints completed since this shard started, and the REDO LSN.
    pub fn durability_stats(&self) -> (u64, u64) {
        (self.lcp.completed, self.cx.redo.lsn)
    }
}

/// A page of a scan of a partition this shard holds.
fn scan_partition(cx: &Context, req: &ScanRequest) -> Result<latsdb_types::proto::ScanPage> {
    let table = cx.table(req.table, req.table_version)?;
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
    let partition = owned_partition(table, req.partition, cx.me())?;
    partition.scan(meta, req)
}

fn is_restarting(layout: &ClusterLayout, me: ShardAddr) -> bool {
    layout.datanode(me.node).is_some_and(|d| d.status == NodeStatus::Starting)
}
