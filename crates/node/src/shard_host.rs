//! Runs one shard on its own thread with a single-threaded tokio runtime.
//!
//! Everything the shard touches lives on that thread: the state machine, the
//! accepted client and peer connections and the outgoing peer links. A
//! request is decoded, executed and answered without crossing threads; the
//! answers are queued to per-connection writer tasks which put everything
//! queued during one turn into a single write.

use latsdb_cluster::membership::{MemberOut, Membership, MembershipConfig, Voter};
use latsdb_cluster::{ConnId, Lease, Outbox, Shard, ShardConfig};
use latsdb_net::tls::{ClusterTls, Role};
use latsdb_net::{write_frames, FrameError, FrameReader, LinkReader};
use latsdb_types::proto::{
    self, ClientRequest, ClientResponse, ClusterLayout, CommitEpoch, Hello, MemberMsg, MgmRequest, MgmResponse, NodeId,
    NodeStatus, PeerMsg, SchemaChange, ShardAddr, StartPlan, ViewNumber, PROTOCOL_VERSION,
};
use latsdb_types::{DbError, ErrorCode, Result};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio::task::spawn_local;

/// Interval of the shard's timer (lock-wait timeouts are checked on it).
const TICK: Duration = Duration::from_millis(10);

pub enum Control {
    Schema(SchemaChange, oneshot::Sender<Result<()>>),
    /// Sent to the first shard only: run this node's membership there and
    /// report views and shutdowns on the channel. `joining`: the node
    /// restarts into a running cluster and waits for a view to admit it.
    RunMembership(mpsc::UnboundedSender<NodeEvent>, bool),
    /// First shard only: propose a view that admits this restarted node.
    Admit(NodeId),
    /// How the copy of a restarting node's partitions goes.
    SyncProgress(oneshot::Sender<latsdb_cluster::SyncProgress>),
    /// Hand over the partitions this restarted shard will be primary of
    /// (the stage before admission); progress shows when it is done.
    HandOver,
    /// Start a checkpoint now; answered with the completed count to wait for.
    Checkpoint(oneshot::Sender<u64>),
    /// Whether that many checkpoints completed and the newest replaced the older.
    CheckpointSettled(u64, oneshot::Sender<bool>),
    Layout(ClusterLayout),
    Memory(oneshot::Sender<latsdb_types::proto::ShardMemory>),
    /// Restore the shard from its disk image (or start it empty) as the
    /// management server planned, then start its disk thread. Answered with
    /// a line for the log.
    Restore(Box<crate::disk::ShardImage>, StartPlan, oneshot::Sender<Result<String>>),
    /// Shutting down: refuse clients from now on; answered with the epoch
    /// that must become durable before the node exits.
    StopServing(oneshot::Sender<CommitEpoch>),
    /// The latest durable epoch this shard knows.
    DurableEpoch(oneshot::Sender<CommitEpoch>),
    /// A backup begins: hold the shard's files (see `backup.rs`).
    BackupHold(oneshot::Sender<Result<crate::backup::HeldShard>>),
    Stop,
}

/// What the node's membership tells the data-node process.
#[derive(Debug)]
pub enum NodeEvent {
    /// A new view of the live data nodes was installed.
    View(ViewNumber, Vec<NodeId>),
    /// The node must stop: it was removed or is cut off from the cluster.
    Shutdown(String),
}

/// Microseconds since the process started: one clock for all shards, so
/// the lease the first shard computes means the same on every shard.
pub fn process_clock() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_micros() as u64
}

pub struct ShardHandle {
    pub me: ShardAddr,
    pub address: String,
    pub control: mpsc::UnboundedSender<Control>,
    pub thread: std::thread::JoinHandle<()>,
}

struct Host {
    me: ShardAddr,
    shard: RefCell<Shard>,
    layout: RefCell<ClusterLayout>,
    conns: RefCell<HashMap<ConnId, mpsc::UnboundedSender<Vec<u8>>>>,
    peers: RefCell<HashMap<ShardAddr, mpsc::UnboundedSender<Vec<u8>>>>,
    next_conn: Cell<ConnId>,
    max_frame: usize,
    lease: Lease,
    /// The node's membership (first shard only, once every node started).
    membership: RefCell<Option<Membership>>,
    /// The node restarts into a running cluster (its membership waits to
    /// be admitted).
    joining: Cell<bool>,
    node_events: RefCell<Option<mpsc::UnboundedSender<NodeEvent>>>,
    /// The shard's disk thread and directory, once restored (None without
    /// a data directory).
    disk: RefCell<Option<std::sync::mpsc::Sender<crate::disk::DiskMsg>>>,
    dir: RefCell<Option<std::path::PathBuf>>,
    /// Reads the shard's tablespace pages on the runtime's blocking
    /// threads, once restored (None without a data directory).
    pages: RefCell<Option<Arc<crate::disk::PageReader>>>,
    /// The tablespace file bypasses the OS page cache (`O_DIRECT`).
    direct_io: bool,
    /// When the last durable epoch report went to the management server.
    durable_reported_at: Cell<Option<Instant>>,
    /// The node's identity when the cluster requires TLS: every link in
    /// and out goes through it.
    tls: Option<Arc<ClusterTls>>,
}

impl Host {
    fn now(&self) -> u64 {
        process_clock()
    }

    /// Starts the membership once the layout shows the cluster formed, with
    /// view 1 = the started data nodes (or at once, waiting to be admitted,
    /// on a node that restarts into a running cluster).
    fn maybe_start_membership(&self, layout: &ClusterLayout) {
        if self.node_events.borrow().is_none()
            || self.membership.borrow().is_some()
            || layout.datanodes.is_empty()
            || !(layout.first_view > ViewNumber::NONE || self.joining.get())
        {
            return;
        }
        let interval_us = layout.heartbeat_interval_ms.max(1) * 1000;
        let cfg = MembershipConfig {
            me: self.me.node,
            interval_us,
            detect_us: interval_us * layout.heartbeat_missed.max(4) as u64,
            groups: layout.datanodes.iter().map(|d| (d.node_id, d.node_group)).collect(),
        };
        let mut m = Membership::new(cfg);
        if self.joining.get() {
            m.activate_joining();
        } else {
            let started: Vec<NodeId> =
                layout.datanodes.iter().filter(|d| d.status == NodeStatus::Started).map(|d| d.node_id).collect();
            m.activate_with(self.now(), &started, layout.first_view);
            crate::log(
                "datanode",
                format!(
                    "node {}: the cluster has formed; watching its data nodes (heartbeat every {} ms, view {} = {:?})",
                    self.me.node,
                    interval_us / 1000,
                    m.epoch(),
                    m.members()
                ),
            );
        }
        self.lease.set(m.serving_until());
        *self.membership.borrow_mut() = Some(m);
    }

    /// Tells the membership of data nodes the layout lists that it does
    /// not know (a node group was added), so that it can admit them.
    fn learn_data_nodes(&self, layout: &ClusterLayout) {
        if let Some(m) = self.membership.borrow_mut().as_mut() {
            if m.data_nodes() != layout.datanodes.len() {
                m.set_groups(layout.datanodes.iter().map(|d| (d.node_id, d.node_group)).collect());
            }
        }
    }

    /// Runs one membership step and carries out what it asks for.
    fn member_step(self: &Rc<Self>, step: impl FnOnce(&mut Membership, u64, &mut MemberOut)) {
        let out = {
            let mut slot = self.membership.borrow_mut();
            let Some(m) = slot.as_mut() else { return };
            if m.has_shut_down() {
                return;
            }
            m.step(&self.lease, self.now(), step)
        };
        for (to, msg) in out.send {
            match to {
                Voter::Node(n) => {
                    let frame = proto::frame(0, &vec![PeerMsg::Member(msg)]);
                    let to = ShardAddr { node: n, shard: 0 };
                    if self.peer_sender(to).send(frame).is_err() {
                        self.peers.borrow_mut().remove(&to);
                    }
                }
                Voter::Arbiter => {
                    spawn_local(ask_arbiter(self.clone(), msg));
                }
            }
        }
        let events = self.node_events.borrow();
        if let Some(events) = events.as_ref() {
            if let Some((epoch, members)) = out.installed {
                let _ = events.send(NodeEvent::View(epoch, members));
            }
            if let Some(reason) = out.shutdown {
                let _ = events.send(NodeEvent::Shutdown(reason));
            }
        }
    }

    fn dispatch(self: &Rc<Self>, out: &mut Outbox) {
        if !out.disk.is_empty() {
            let disk = self.disk.borrow();
            match disk.as_ref() {
                Some(d) => {
                    for op in out.disk.drain(..) {
                        // The disk thread only stops by exiting the process.
                        let _ = d.send(crate::disk::DiskMsg::Op(op));
                    }
                }
                None => out.disk.clear(),
            }
        }
        for read in out.page_reads.drain(..) {
            spawn_local(read_page(self.clone(), read));
        }
        if let Some(epoch) = out.durable.take() {
            self.report_durable(epoch);
        }
        if !out.client.is_empty() || !out.frames.is_empty() {
            let conns = self.conns.borrow();
            // A closed connection's answers are dropped: nobody waits for them.
            for (conn, req_id, response) in out.client.drain(..) {
                if let Some(tx) = conns.get(&conn) {
                    let _ = tx.send(proto::frame(req_id, &response));
                }
            }
            for (conn, frame) in out.frames.drain(..) {
                if let Some(tx) = conns.get(&conn) {
                    let _ = tx.send(frame);
                }
            }
        }
        if out.peer.is_empty() {
            return;
        }
        // One frame per destination for everything this turn produced: a
        // replicated write is four messages, and a batch of writes hundreds.
        let mut by_peer: Vec<(ShardAddr, Vec<PeerMsg>)> = Vec::new();
        for (to, msg) in out.peer.drain(..) {
            match by_peer.iter_mut().find(|(t, _)| *t == to) {
                Some((_, msgs)) => msgs.push(msg),
                None => by_peer.push((to, vec![msg])),
            }
        }
        for (to, msgs) in by_peer {
            let frame = proto::frame(0, &msgs);
            let sender = self.peer_sender(to);
            if sender.send(frame).is_err() {
                self.peers.borrow_mut().remove(&to);
            }
        }
    }

    /// Tells the management server the durable epoch, at most once a second.
    fn report_durable(self: &Rc<Self>, epoch: CommitEpoch) {
        let now = Instant::now();
        if self.durable_reported_at.get().is_some_and(|t| now.duration_since(t) < Duration::from_secs(1)) {
            // A later epoch goes out with a later report.
            return;
        }
        self.durable_reported_at.set(Some(now));
        let address = self.layout.borrow().mgmd_address.clone();
        let tls = self.tls.clone();
        spawn_local(async move {
            let connected = latsdb_net::RpcConn::connect(&address, Duration::from_secs(1), tls.as_deref()).await;
            let Ok(mut conn) = connected else { return };
            let request = MgmRequest::EpochDurable { epoch };
            let _ = tokio::time::timeout(Duration::from_secs(2), conn.call::<MgmRequest, MgmResponse>(&request)).await;
        });
    }

    /// Restores the shard from its disk image as planned, writes and syncs
    /// the restart marker, and starts the disk thread.
    fn restore(self: &Rc<Self>, image: crate::disk::ShardImage, plan: StartPlan) -> Result<String> {
        let started = Instant::now();
        let dir = image.dir.clone();
        let tablespace = crate::disk::TablespaceFile::create(&dir, self.direct_io)?;
        *self.pages.borrow_mut() = Some(Arc::new(tablespace.reader()?));
        self.shard.borrow_mut().set_page_file(Box::new(tablespace));
        self.shard.borrow_mut().park_on_miss();
        let (summary, lsn) = match plan.restore_epoch {
            Some(epoch) => {
                let checkpoint = image.checkpoint_for(epoch);
                crate::disk::drop_checkpoints_except(&dir, checkpoint.map(|c| c.id))?;
                let bytes = match checkpoint {
                    Some(c) => Some(image.read_checkpoint(c.id)?),
                    None => None,
                };
                let report = self.shard.borrow_mut().restore(
                    bytes.as_deref(),
                    &image.redo,
                    image.redo_base,
                    epoch,
                    plan.first_epoch,
                )?;
                let from = match checkpoint {
                    Some(c) => {
                        format!("checkpoint {} ({} rows, end epoch {})", c.id, report.checkpoint_rows, c.end_epoch)
                    }
                    None => "no checkpoint".to_string(),
                };
                (
                    format!(
                        "restored epoch {epoch} from {from} + {} REDO records ({} newer or discarded skipped)",
                        report.redo_applied, report.redo_skipped
                    ),
                    image.redo_end(),
                )
            }
            None => {
                crate::disk::wipe(&dir)?;
                self.shard.borrow_mut().restore(
                    None,
                    &[],
                    0,
                    latsdb_types::proto::CommitEpoch::NONE,
                    plan.first_epoch,
                )?;
                ("initial start (empty data directory)".to_string(), 0)
            }
        };
        let mut disk = crate::disk::ShardDisk::open(&dir, lsn)?;
        let marker = self.shard.borrow_mut().take_redo();
        disk.execute(latsdb_cluster::DiskOp::RedoAppend(marker))?;
        disk.execute(latsdb_cluster::DiskOp::RedoSync { token: 0 })?;
        let (done_tx, mut done_rx) = mpsc::unbounded_channel();
        *self.disk.borrow_mut() = Some(crate::disk::spawn_disk_thread(disk, self.me.to_string(), done_tx)?);
        *self.dir.borrow_mut() = Some(dir);
        let host = self.clone();
        spawn_local(async move {
            while let Some(token) = done_rx.recv().await {
                let mut out = Outbox::default();
                host.shard.borrow_mut().on_disk_done(token, host.now(), &mut out);
                host.dispatch(&mut out);
            }
        });
        Ok(format!("{summary} in {} ms", started.elapsed().as_millis()))
    }

    /// A peer link is taken from a started (or starting) node's shard, from
    /// the host that node registered, and from the process the layout lists
    /// for the node: a link of a previous process (its connection held
    /// back by a network fault) must not speak for the node's next one.
    fn check_peer(&self, from: ShardAddr, process: u64, ip: Option<std::net::IpAddr>) -> Result<()> {
        let layout = self.layout.borrow();
        let node = layout.datanode(from.node).filter(|d| d.status.takes_writes());
        let registered =
            node.and_then(|d| d.shards.get(from.shard as usize)).and_then(|a| a.parse::<std::net::SocketAddr>().ok());
        match (registered, ip) {
            (Some(_), _) if node.is_some_and(|d| d.runs_other_than(process)) => Err(DbError::bad_request(format!(
                "peer link from shard {from} of process {process:#x}: the cluster layout lists process {:#x} for data node {}",
                node.map_or(0, |d| d.process),
                from.node
            ))),
            (Some(addr), Some(ip)) if addr.ip() == ip || (addr.ip().is_loopback() && ip.is_loopback()) => Ok(()),
            (Some(_), _) => Err(DbError::bad_request(format!(
                "peer link claiming to be shard {from} comes from {ip:?}, not its host"
            ))),
            (None, _) => Err(DbError::bad_request(format!("shard {from} is not a started shard of this cluster"))),
        }
    }

    /// With TLS, only a data node's certificate made for the link's source
    /// address may open a peer link: an API node's certificate must never
    /// let it speak as a data node.
    fn check_peer_identity(
        &self,
        identity: Option<&latsdb_net::tls::PeerIdentity>,
        ip: Option<std::net::IpAddr>,
    ) -> Result<()> {
        latsdb_net::tls::check_data_node(self.tls.as_deref(), identity, ip)
            .map_err(|why| DbError::new(ErrorCode::AccessDenied, format!("a peer link is refused: {why}")))
    }

    /// `check_peer`, allowing a peer that is not started in this shard's
    /// layout yet a moment for the layout to arrive: the nodes learn of each
    /// other's start at slightly different times, and a refused link would
    /// lose what the peer queued on it.
    async fn check_peer_soon(&self, from: ShardAddr, process: u64, ip: Option<std::net::IpAddr>) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            match self.check_peer(from, process, ip) {
                Err(_) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(10)).await,
                checked => return checked,
            }
        }
    }

    fn peer_sender(self: &Rc<Self>, to: ShardAddr) -> mpsc::UnboundedSender<Vec<u8>> {
        if let Some(tx) = self.peers.borrow().get(&to) {
            if !tx.is_closed() {
                return tx.clone();
            }
        }
        let (tx, rx) = mpsc::unbounded_channel();
        self.peers.borrow_mut().insert(to, tx.clone());
        spawn_local(peer_link(self.clone(), to, tx.downgrade(), rx));
        tx
    }

    /// A data node that started again serves its shards at new addresses
    /// (or the same ones, from a new process): links to its old process
    /// are dropped, and the next message opens a new one. A link that
    /// carried nothing since the peer died would otherwise take the first
    /// messages to the new process into a dead socket and lose them (only
    /// the membership's heartbeats keep the first shards' links fresh).
    fn drop_links_to_moved_shards(&self, new: &ClusterLayout) {
        let old = self.layout.borrow();
        let moved: Vec<NodeId> = new
            .datanodes
            .iter()
            .filter(|d| old.datanode(d.node_id).is_some_and(|o| o.shards != d.shards || o.process != d.process))
            .map(|d| d.node_id)
            .collect();
        if !moved.is_empty() {
            let mut peers = self.peers.borrow_mut();
            let before = peers.len();
            peers.retain(|to, _| !moved.contains(&to.node));
            if peers.len() < before {
                crate::log(
                    "datanode",
                    format!(
                        "shard {}: data nodes {moved:?} have new processes or addresses in layout {}; dropped {} link(s) to their old ones",
                        self.me,
                        new.version,
                        before - peers.len()
                    ),
                );
            }
        }
    }

    /// Forgets the link to `to` if it is still the one `link` sends on (a
    /// newer link to the same shard may have replaced it).
    fn forget_link(&self, to: ShardAddr, link: &mpsc::WeakUnboundedSender<Vec<u8>>) {
        let mut peers = self.peers.borrow_mut();
        let ours = match (peers.get(&to), link.upgrade()) {
            (Some(current), Some(link)) => current.same_channel(&link),
            _ => false,
        };
        if ours {
            peers.remove(&to);
        }
    }
}

/// Holds the shard's files for a backup and answers with what the backup
/// needs to know of the shard. The durable epoch is read as the hold is
/// queued (no await between them): every trim queued before it was decided
/// by a durable epoch no later than that one, every later trim waits.
async fn hold_for_backup(host: Rc<Host>, reply: oneshot::Sender<Result<crate::backup::HeldShard>>) {
    let held = async {
        let no_disk = || {
            DbError::bad_request(format!(
                "shard {} has no data directory: a backup needs data nodes that keep their data on disk",
                host.me
            ))
        };
        let disk = host.disk.borrow().clone().ok_or_else(no_disk)?;
        let dir = host.dir.borrow().clone().ok_or_else(no_disk)?;
        let (durable, current, partitions) = {
            let shard = host.shard.borrow();
            let partitions = shard.partition_sizes().iter().map(|p| (p.table, p.partition)).collect();
            (shard.durable_epoch(), shard.current_epoch(), partitions)
        };
        let (ack, acked) = oneshot::channel();
        disk.send(crate::disk::DiskMsg::Hold(ack))
            .map_err(|_| DbError::internal(format!("shard {}: its disk thread has stopped", host.me)))?;
        acked.await.map_err(|_| DbError::internal(format!("shard {}: its disk thread has stopped", host.me)))?;
        Ok(crate::backup::HeldShard { shard: host.me.shard, dir, durable, current, partitions, disk })
    };
    let _ = reply.send(held.await);
}

/// Binds a shard's listener and starts its thread.
pub fn spawn_shard(
    cfg: ShardConfig,
    cpu: Option<usize>,
    host: &str,
    port: u16,
    layout: ClusterLayout,
    max_frame: usize,
    tls: Option<Arc<ClusterTls>>,
) -> Result<ShardHandle> {
    let listener = std::net::TcpListener::bind((host, port)).map_err(|e| {
        DbError::new(
            ErrorCode::Io,
            format!("shard {} cannot listen on {host}:{port}: {e}; choose another port in the configuration", cfg.me),
        )
    })?;
    listener.set_nonblocking(true).map_err(|e| DbError::io("set_nonblocking", e))?;
    let address = listener.local_addr().map_err(|e| DbError::io("local_addr", e))?.to_string();
    let (control, control_rx) = mpsc::unbounded_channel();
    let me = cfg.me;
    let thread = std::thread::Builder::new()
        .name(format!("shard-{me}"))
        .spawn(move || {
            if let Some(cpu) = cpu {
                if let Err(e) = crate::cpus::bind_current_thread(cpu) {
                    crate::log("datanode", format!("shard {me}: cannot bind to CPU {cpu}: {e}; the OS places it"));
                }
            }
            run_shard(cfg, listener, layout, max_frame, tls, control_rx)
        })
        .map_err(|e| DbError::io("spawning a shard thread", e))?;
    Ok(ShardHandle { me, address, control, thread })
}

fn run_shard(
    cfg: ShardConfig,
    listener: std::net::TcpListener,
    layout: ClusterLayout,
    max_frame: usize,
    tls: Option<Arc<ClusterTls>>,
    mut control: mpsc::UnboundedReceiver<Control>,
) {
    // Blocking threads read tablespace pages: this many reads of one shard
    // are under way at once (an NVMe device serves many in parallel).
    const PAGE_READERS: usize = 16;
    let runtime =
        match tokio::runtime::Builder::new_current_thread().enable_all().max_blocking_threads(PAGE_READERS).build() {
            Ok(rt) => rt,
            Err(e) => {
                crate::log("datanode", format!("shard {}: cannot start its runtime: {e}", cfg.me));
                std::process::exit(1);
            }
        };
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async move {
        let direct_io = cfg.pages.direct_io;
        let host = Rc::new(Host {
            me: cfg.me,
            lease: cfg.lease.clone(),
            shard: RefCell::new(Shard::new(cfg, layout.clone())),
            layout: RefCell::new(layout),
            conns: RefCell::new(HashMap::new()),
            peers: RefCell::new(HashMap::new()),
            next_conn: Cell::new(1),
            max_frame,
            membership: RefCell::new(None),
            joining: Cell::new(false),
            node_events: RefCell::new(None),
            disk: RefCell::new(None),
            dir: RefCell::new(None),
            pages: RefCell::new(None),
            direct_io,
            durable_reported_at: Cell::new(None),
            tls,
        });
        let listener = match TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                crate::log("datanode", format!("shard {}: cannot use its listener: {e}", host.me));
                std::process::exit(1);
            }
        };
        spawn_local(accept_loop(host.clone(), listener));
        spawn_local(tick_loop(host.clone()));
        while let Some(c) = control.recv().await {
            match c {
                Control::Schema(change, reply) => {
                    let _ = reply.send(host.shard.borrow_mut().apply_schema(change));
                }
                Control::RunMembership(events, joining) => {
                    *host.node_events.borrow_mut() = Some(events);
                    host.joining.set(joining);
                    let layout = host.layout.borrow().clone();
                    host.maybe_start_membership(&layout);
                }
                Control::Admit(node) => host.member_step(|m, now, out| m.admit(node, now, out)),
                Control::SyncProgress(reply) => {
                    let _ = reply.send(host.shard.borrow().sync_progress());
                }
                Control::HandOver => {
                    let mut out = Outbox::default();
                    host.shard.borrow_mut().sync_hand_over(&mut out);
                    host.dispatch(&mut out);
                }
                Control::Checkpoint(reply) => {
                    let _ = reply.send(host.shard.borrow_mut().checkpoint_now());
                }
                Control::CheckpointSettled(target, reply) => {
                    let _ = reply.send(host.shard.borrow().checkpoint_settled(target));
                }
                Control::Layout(l) => {
                    host.maybe_start_membership(&l);
                    host.learn_data_nodes(&l);
                    // A stale layout (a restarting node hears of views from
                    // the management server and from its own membership,
                    // which may lag) must not move the host's back: links
                    // to live processes would look moved and be dropped, and
                    // the peer suspects a node whose link closes.
                    if l.version >= host.layout.borrow().version {
                        host.drop_links_to_moved_shards(&l);
                        *host.layout.borrow_mut() = l.clone();
                    }
                    let mut out = Outbox::default();
                    host.shard.borrow_mut().set_layout(l, host.now(), &mut out);
                    host.dispatch(&mut out);
                }
                Control::Memory(reply) => {
                    let shard = host.shard.borrow();
                    let (used, budget) = shard.data_memory();
                    let disk = shard.disk_usage();
                    let (redo_bytes, redo_limit_bytes) = shard.redo_usage();
                    let _ = reply.send(latsdb_types::proto::ShardMemory {
                        shard: host.me.shard,
                        rows: shard.row_count() as u64,
                        used_bytes: used as u64,
                        budget_bytes: budget,
                        tablespace_bytes: disk.file_bytes,
                        tablespace_used_bytes: disk.used_bytes,
                        tablespace_limit_bytes: disk.limit_bytes,
                        page_cache_hits: disk.cache.hits,
                        page_cache_misses: disk.cache.misses,
                        page_waits: disk.parks,
                        pages_read_on_shard_thread: disk.read_here,
                        pages_read_at_once: disk.read_at_once,
                        partitions: shard.partition_sizes(),
                        redo_bytes,
                        redo_limit_bytes,
                        ops: shard.op_counts(),
                    });
                }
                Control::Restore(image, plan, reply) => {
                    let _ = reply.send(host.restore(*image, plan));
                }
                Control::StopServing(reply) => {
                    let _ = reply.send(host.shard.borrow_mut().stop_serving());
                }
                Control::DurableEpoch(reply) => {
                    let _ = reply.send(host.shard.borrow().durable_epoch());
                }
                Control::BackupHold(reply) => {
                    spawn_local(hold_for_backup(host.clone(), reply));
                }
                Control::Stop => break,
            }
        }
    });
}

/// Reads a page a request waits for on a blocking thread (the shard thread
/// goes on meanwhile) and hands it to the shard.
async fn read_page(host: Rc<Host>, read: latsdb_cluster::PageRead) {
    let reader = host.pages.borrow().clone();
    let Some(reader) = reader else {
        unreachable!("shard {} asked for a page before it had its tablespace file", host.me)
    };
    let bytes = match tokio::task::spawn_blocking(move || reader.read(read.page)).await {
        Ok(bytes) => bytes,
        Err(e) => {
            crate::log("datanode", format!("shard {}: a page read stopped: {e}; stopping this data node", host.me));
            std::process::exit(3);
        }
    };
    let mut out = Outbox::default();
    host.shard.borrow_mut().on_page_read(read, bytes, host.now(), &mut out);
    host.dispatch(&mut out);
}

async fn accept_loop(host: Rc<Host>, listener: TcpListener) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                spawn_local(serve_connection(host.clone(), stream));
            }
            Err(e) => {
                // Out of file descriptors and similar: back off instead of spinning.
                crate::log("datanode", format!("shard {}: accept failed: {e}", host.me));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn tick_loop(host: Rc<Host>) {
    let mut interval = tokio::time::interval(TICK);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut out = Outbox::default();
    let mut copy_waits = CopyWaits::default();
    loop {
        interval.tick().await;
        host.member_step(|m, now, out| m.on_tick(now, out));
        host.shard.borrow_mut().on_tick(host.now(), &mut out);
        host.dispatch(&mut out);
        copy_waits.check(&host);
    }
}

/// Logs why partition copies that restarting replicas asked of this shard
/// wait, once they have waited `COPY_WAIT_LOG` (and again every
/// `COPY_WAIT_LOG` while they do): a node restart that does not progress
/// then says what holds it.
#[derive(Default)]
struct CopyWaits {
    since: Option<Instant>,
    logged_at: Option<Instant>,
}

const COPY_WAIT_LOG: Duration = Duration::from_secs(5);

impl CopyWaits {
    fn check(&mut self, host: &Host) {
        if !host.shard.borrow().copies_wait() {
            self.since = None;
            self.logged_at = None;
            return;
        }
        let now = Instant::now();
        let since = *self.since.get_or_insert(now);
        let due = self
            .logged_at
            .map_or(now.duration_since(since) >= COPY_WAIT_LOG, |t| now.duration_since(t) >= COPY_WAIT_LOG);
        if !due {
            return;
        }
        self.logged_at = Some(now);
        if let Some(waits) = host.shard.borrow().copy_waits() {
            let waited = now.duration_since(since).as_secs();
            crate::log("datanode", format!("shard {}: for {waited} s, {waits}", host.me));
        }
    }
}

fn error_frame(req_id: u64, error: DbError) -> Vec<u8> {
    proto::frame(req_id, &ClientResponse::Error(error))
}

fn too_large(len: usize, max: usize) -> DbError {
    DbError::new(
        ErrorCode::FrameTooLarge,
        format!("request of {len} bytes exceeds the {max}-byte frame limit (cluster.max_frame_bytes); split it into smaller batches. The connection is closed."),
    )
}

async fn serve_connection(host: Rc<Host>, stream: TcpStream) {
    let peer_ip = stream.peer_addr().ok().map(|a| a.ip());
    let link = match latsdb_net::accept_link(stream, host.tls.as_deref(), error_frame).await {
        Ok(link) => link,
        Err(why) => {
            crate::log("datanode", format!("shard {}: refused a connection: {why}", host.me));
            return;
        }
    };
    let identity = link.peer_identity();
    let (r, w) = link.into_split();
    let mut reader = FrameReader::new(r, host.max_frame);
    let (tx, rx) = mpsc::unbounded_channel();
    spawn_local(write_frames(w, rx, latsdb_net::Coalesce::Never));
    let (req_id, hello) = match reader.next().await {
        Ok(Some((id, body))) => match proto::decode_body::<Hello>(body) {
            Ok(h) => (id, h),
            Err(e) => {
                let _ = tx.send(error_frame(
                    id,
                    DbError::malformed(format!("the first message must be a Hello: {}", e.message)),
                ));
                return;
            }
        },
        Ok(None) => return,
        Err(FrameError::TooLarge { request_id, len, max }) => {
            let _ = tx.send(error_frame(request_id, too_large(len, max)));
            return;
        }
        Err(FrameError::Io(_)) => return,
    };
    match hello {
        Hello::Client { protocol, .. } | Hello::Peer { protocol, .. } if protocol != PROTOCOL_VERSION => {
            let e = DbError::bad_request(format!(
                "protocol version {protocol} is not supported; this node speaks {PROTOCOL_VERSION}"
            ));
            let _ = tx.send(error_frame(req_id, e));
        }
        Hello::Client { .. } => {
            let conn = host.next_conn.get();
            host.next_conn.set(conn + 1);
            host.conns.borrow_mut().insert(conn, tx.clone());
            let _ = tx.send(proto::frame(req_id, &ClientResponse::Hello { shard: host.me }));
            client_loop(&host, conn, &mut reader, &tx).await;
            host.conns.borrow_mut().remove(&conn);
            let mut out = Outbox::default();
            host.shard.borrow_mut().on_disconnect(conn, host.now(), &mut out);
            host.dispatch(&mut out);
        }
        Hello::Peer { from, process, .. } => {
            let checked = match host.check_peer_identity(identity.as_ref(), peer_ip) {
                Ok(()) => host.check_peer_soon(from, process, peer_ip).await,
                Err(e) => Err(e),
            };
            match checked {
                Ok(()) => serve_peer(&host, from, process, &mut reader).await,
                Err(e) => {
                    crate::log("datanode", format!("shard {}: refused a peer link: {}", host.me, e.message));
                    let _ = tx.send(error_frame(req_id, e));
                }
            }
        }
    }
}

/// Takes a checked peer's messages until its link closes.
async fn serve_peer(host: &Rc<Host>, from: ShardAddr, process: u64, reader: &mut FrameReader<LinkReader>) {
    // Where the layout lists the peer as its link opens.
    let listed_at = |host: &Host| host.layout.borrow().datanode(from.node).map(|d| (d.process, d.shards.clone()));
    let opened_at = listed_at(host);
    peer_loop(host, from, process, reader).await;
    // A link of a process that has since been replaced may close late (a
    // network fault held back its end): that says nothing of the process
    // running now, which must not be suspected for it.
    let listed = !host.layout.borrow().lists_other_process(from.node, process);
    if from.shard == 0 && listed && listed_at(host) == opened_at {
        // A killed node's links break at once: suspect it now
        // rather than after the missed heartbeats.
        crate::log(
            "datanode",
            format!("shard {}: the link from data node {} closed; suspecting it", host.me, from.node),
        );
        host.member_step(|m, now, out| m.on_link_lost(from.node, now, out));
    }
}

async fn client_loop(
    host: &Rc<Host>,
    conn: ConnId,
    reader: &mut FrameReader<LinkReader>,
    tx: &mpsc::UnboundedSender<Vec<u8>>,
) {
    let mut out = Outbox::default();
    loop {
        match reader.next().await {
            Ok(Some((req_id, body))) => {
                // A batch of committed reads is answered straight from its frame.
                let answered = host.shard.borrow_mut().on_lookups(conn, req_id, body, host.now(), &mut out);
                if !answered {
                    match proto::decode_body::<ClientRequest>(body) {
                        Ok(request) => host.shard.borrow_mut().on_client(conn, req_id, request, host.now(), &mut out),
                        Err(e) => {
                            let _ = tx.send(error_frame(req_id, e));
                            continue;
                        }
                    }
                }
                host.dispatch(&mut out);
            }
            Ok(None) => return,
            Err(FrameError::TooLarge { request_id, len, max }) => {
                let _ = tx.send(error_frame(request_id, too_large(len, max)));
                return;
            }
            Err(FrameError::Io(_)) => return,
        }
    }
}

async fn peer_loop(host: &Rc<Host>, from: ShardAddr, process: u64, reader: &mut FrameReader<LinkReader>) {
    let mut out = Outbox::default();
    loop {
        match reader.next().await {
            Ok(Some((_, body))) => match proto::decode_body::<Vec<PeerMsg>>(body) {
                Ok(msgs) => {
                    let now = host.now();
                    let mut shard = host.shard.borrow_mut();
                    for msg in msgs {
                        if let PeerMsg::Member(m) = msg {
                            drop(shard);
                            host.member_step(|ms, now, out| ms.on_message(Voter::Node(from.node), m, now, out));
                            shard = host.shard.borrow_mut();
                            continue;
                        }
                        shard.on_peer(from, process, msg, now, &mut out);
                    }
                    drop(shard);
                    host.dispatch(&mut out);
                }
                Err(e) => {
                    crate::log(
                        "datanode",
                        format!(
                            "shard {}: undecodable message from peer {from}: {}; closing the link",
                            host.me, e.message
                        ),
                    );
                    return;
                }
            },
            Ok(None) => return,
            Err(e) => {
                crate::log("datanode", format!("shard {}: link from peer {from} failed: {e}", host.me));
                return;
            }
        }
    }
}

/// Outgoing link to another shard: connects (retrying for a while), says
/// Hello, then writes queued messages.
/// Connection attempts to a peer, 200 ms apart, before a link says it
/// cannot reach it (and then tries once a second), or gives up on a peer
/// the layout does not list.
const PEER_PATIENCE: u32 = 25;

async fn peer_link(
    host: Rc<Host>,
    to: ShardAddr,
    link: mpsc::WeakUnboundedSender<Vec<u8>>,
    rx: mpsc::UnboundedReceiver<Vec<u8>>,
) {
    let mut attempts = 0;
    // A link dropped while it was still connecting (its peer's process
    // died, `drop_links_to_moved_shards`) must never reach the peer's next
    // process: it would connect, send what was meant for the old one and
    // close, and the new process suspects this node when a link from it
    // closes. (This removed live nodes from the cluster after a restart.)
    let dropped = |link: &mpsc::WeakUnboundedSender<Vec<u8>>| link.upgrade().is_none();
    let stream = loop {
        if dropped(&link) {
            return;
        }
        // While the layout lists the peer's process, the link keeps trying
        // (a network fault may last seconds): what is queued on it must
        // reach that process, since nothing sends it again (a write
        // waiting for a backup's answer would wait for ever). The layout
        // that drops or replaces the process drops the link.
        let address = host.layout.borrow().shard_address(to).map(|s| s.to_string());
        if let Some(address) = address {
            match latsdb_net::connect_link(&address, Duration::from_secs(2), host.tls.as_deref(), Role::DataNode).await
            {
                Ok(s) => break s,
                Err(e) if attempts == PEER_PATIENCE => crate::log(
                    "datanode",
                    format!("shard {}: cannot reach peer {to} ({e}); trying on while the layout lists it", host.me),
                ),
                Err(_) => {}
            }
        } else if attempts >= PEER_PATIENCE {
            crate::log("datanode", format!("shard {}: peer {to} is not in the cluster layout", host.me));
            host.forget_link(to, &link);
            return;
        }
        attempts += 1;
        let pause = if attempts <= PEER_PATIENCE { 200 } else { 1000 };
        tokio::time::sleep(Duration::from_millis(pause)).await;
    };
    if dropped(&link) {
        return;
    }
    let (_r, mut w) = stream.into_split();
    let process = crate::datanode::process_number();
    let hello = proto::frame(0, &Hello::Peer { protocol: PROTOCOL_VERSION, from: host.me, process });
    if tokio::io::AsyncWriteExt::write_all(&mut w, &hello).await.is_err() {
        host.forget_link(to, &link);
        return;
    }
    write_frames(w, rx, latsdb_net::Coalesce::Never).await;
    host.forget_link(to, &link);
}

/// Sends one membership message to the arbitrator (the management server)
/// and feeds its answer back. An unreachable arbitrator is simply a voter
/// that does not answer.
async fn ask_arbiter(host: Rc<Host>, msg: MemberMsg) {
    let address = host.layout.borrow().mgmd_address.clone();
    let connected = latsdb_net::RpcConn::connect(&address, Duration::from_secs(1), host.tls.as_deref()).await;
    let Ok(mut conn) = connected else { return };
    let request = MgmRequest::Member { from: host.me.node, msg };
    let answer = tokio::time::timeout(Duration::from_secs(2), conn.call::<MgmRequest, MgmResponse>(&request)).await;
    if let Ok(Ok(MgmResponse::Member(Some(reply)))) = answer {
        host.member_step(|m, now, out| m.on_message(Voter::Arbiter, reply, now, out));
    }
}
