//! The data-node process: registers with the management server, starts one
//! thread per shard, and applies the layout and schema changes it is sent.

use crate::log;
use crate::shard_host::{spawn_shard, Control, NodeEvent, ShardHandle};
use latsdb_cluster::{NodeRestart, RestartStep, ShardConfig};
use latsdb_net::RpcConn;
use latsdb_types::proto::{
    ClusterLayout, MgmRequest, MgmResponse, NodeCommand, NodeId, NodeReply, SchemaChange, ShardAddr, PROTOCOL_VERSION,
};
use latsdb_types::{DbError, ErrorCode, Result};
use std::time::Duration;
use tokio::sync::oneshot;

pub struct DataNodeOptions {
    pub mgmd: String,
    pub node_id: Option<NodeId>,
    /// Overrides the configured shard thread count.
    pub threads: Option<u16>,
    /// How long to keep trying to reach the management server at start.
    pub connect_timeout: Duration,
    /// Where the node keeps its REDO log and checkpoints (in
    /// `datanode-<id>/` below it); None runs without a disk, and nothing it
    /// commits is ever durable.
    pub data_dir: Option<std::path::PathBuf>,
    /// Discard what the data directory holds first (an initial node
    /// restart: the node copies everything from live replicas).
    pub initial: bool,
    /// Where to write the node id once registered (for the angel that
    /// started this node without naming one).
    pub node_id_file: Option<std::path::PathBuf>,
    /// Serve `GET /metrics` (Prometheus) on this port of the node's host
    /// (0 picks a free one); None serves none.
    pub metrics_port: Option<u16>,
    /// The node's identity when the cluster requires TLS (`--tls-dir`).
    pub tls: Option<std::sync::Arc<latsdb_net::tls::ClusterTls>>,
}

/// Shard threads chosen from the CPUs this process may use: on two CPUs or
/// fewer one shard (its thread also does its own network I/O), otherwise
/// three quarters of them, leaving room for the OS and other processes.
pub fn auto_threads() -> u16 {
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    if cpus <= 2 {
        1
    } else {
        (cpus * 3 / 4).min(64) as u16
    }
}

fn unexpected(what: &str, got: MgmResponse) -> DbError {
    match got {
        MgmResponse::Error(e) => e,
        other => DbError::internal(format!("management server answered {what} with {other:?}")),
    }
}

/// How long a data node waits for the management server to notice that the
/// previous process with its node id stopped: a node restarted right after a
/// crash may register before the management server has seen its connection
/// close or its heartbeats stop.
const PREVIOUS_INSTANCE_WAIT: Duration = Duration::from_secs(10);

/// How long the management server waits for the data nodes a starting
/// cluster needs (`mgmd`'s start plan waits as long).
pub const FORMATION_WAIT: Duration = Duration::from_secs(600);

async fn connect_mgmd(opts: &DataNodeOptions, deadline: tokio::time::Instant) -> Result<RpcConn> {
    loop {
        match RpcConn::connect(&opts.mgmd, Duration::from_secs(2), opts.tls.as_deref()).await {
            Ok(c) => return Ok(c),
            // A certificate refused is not cured by waiting.
            Err(e) if e.code == ErrorCode::AccessDenied => return Err(e),
            Err(e) if tokio::time::Instant::now() >= deadline => {
                return Err(DbError::new(
                    ErrorCode::NodeUnavailable,
                    format!(
                        "cannot reach the management server at {}: {}; is `latsdb mgmd` running?",
                        opts.mgmd, e.message
                    ),
                ))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// The number this process drew at its start (`DataNodeInfo::process`):
/// random, never 0, the same for the process's life. An OS pid cannot tell
/// a node's processes apart where pids repeat (a container started again
/// runs its processes under the same pids).
pub(crate) fn process_number() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static NUMBER: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *NUMBER.get_or_init(|| {
        // The standard library seeds each RandomState from the operating
        // system's random source.
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        hasher.finish().max(1)
    })
}

/// Registers with the management server, waiting a bounded time while it
/// still counts an earlier process with the same node id as running.
async fn register(opts: &DataNodeOptions) -> Result<(RpcConn, MgmResponse)> {
    let deadline = tokio::time::Instant::now() + opts.connect_timeout;
    let register = MgmRequest::RegisterDataNode {
        node_id: opts.node_id,
        pid: std::process::id(),
        process: process_number(),
        protocol: PROTOCOL_VERSION,
    };
    let mut in_use_since: Option<tokio::time::Instant> = None;
    loop {
        let mut mgm = connect_mgmd(opts, deadline).await?;
        match mgm.call(&register).await? {
            MgmResponse::Error(e) if e.code == ErrorCode::NodeIdInUse => {
                let since = *in_use_since.get_or_insert_with(|| {
                    log(
                        "datanode",
                        format!("{}; waiting up to {PREVIOUS_INSTANCE_WAIT:?} in case it just stopped", e.message),
                    );
                    tokio::time::Instant::now()
                });
                if since.elapsed() >= PREVIOUS_INSTANCE_WAIT {
                    return Err(e);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            answer => return Ok((mgm, answer)),
        }
    }
}

/// Writes the node id where the angel that started this node without one
/// looks for it (`--node-id-file`).
fn tell_angel(path: Option<&std::path::Path>, node_id: NodeId) {
    let Some(path) = path else { return };
    // Written whole, then renamed: the angel never reads half of it.
    let partial = path.with_extension("partial");
    let written = std::fs::write(&partial, node_id.to_string()).and_then(|()| std::fs::rename(&partial, path));
    if let Err(e) = written {
        log("datanode", format!("node {node_id}: cannot tell the angel its node id through {}: {e}", path.display()));
    }
}

pub async fn run_datanode(opts: DataNodeOptions) -> Result<()> {
    let (mut mgm, registered) = register(&opts).await?;
    let settings = node_settings(&opts, registered)?;
    let node_id = settings.node_id;
    tell_angel(opts.node_id_file.as_deref(), node_id);
    let threads = settings.threads;
    let shards = spawn_shards(&opts, &settings)?;
    if let Some(port) = opts.metrics_port.or(settings.metrics_port) {
        serve_metrics(node_id, &settings.host, port, &shards).await?;
    }
    let addresses: Vec<String> = shards.iter().map(|s| s.address.clone()).collect();
    let (images, recovery) = read_data_dir(&opts, node_id, threads)?;
    let started = MgmRequest::DataNodeStarted { node_id, shards: addresses.clone(), recovery };
    // The management server answers once the cluster can form, which
    // waits for the other data nodes to start (on other hosts, perhaps
    // minutes later); it gives up after FORMATION_WAIT itself.
    let (layout, tables, plan) = match mgm.call_within(&started, FORMATION_WAIT + Duration::from_secs(30)).await? {
        MgmResponse::Started { layout, tables, start } => (layout, tables, start),
        other => return Err(unexpected("start", other)),
    };
    // The first shard runs this node's membership (once every node started).
    let (events_tx, mut events) = tokio::sync::mpsc::unbounded_channel();
    let _ = shards[0].control.send(Control::RunMembership(events_tx, plan.join));
    let join = plan.join;
    let mut base_layout = layout;
    let mut view: Option<(latsdb_types::proto::ViewNumber, Vec<NodeId>)> = None;
    set_layout(&shards, &effective_layout(&base_layout, view.as_ref()));
    for def in tables {
        apply_schema(&shards, SchemaChange::CreateTable(def)).await?;
    }
    if !images.is_empty() {
        restore_shards(&shards, node_id, images, &plan).await?;
    }
    match mgm.call(&MgmRequest::DataNodeReady { node_id }).await? {
        MgmResponse::Done => {}
        other => return Err(unexpected("ready", other)),
    }
    let mut restart = if join {
        log(
            "datanode",
            format!("node {node_id}: restarting into the running cluster; copying partitions from the primaries"),
        );
        Some(Restart::new())
    } else {
        log("datanode", format!("node {node_id}: started; shards at {}", addresses.join(", ")));
        println!("datanode {node_id} started: {}", addresses.join(" "));
        None
    };
    let mut restart_tick = tokio::time::interval(Duration::from_millis(50));
    let mut backups = crate::backup::NodeBackups::new(node_id, settings.host.clone(), opts.data_dir.clone());

    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| DbError::io("installing the SIGTERM handler", e))?;
    let mut mgm = MgmLink::new(&opts, node_id, mgm, &base_layout);
    let mut failure = None;
    let mut graceful = false;
    loop {
        tokio::select! {
            event = events.recv() => match event {
                Some(NodeEvent::View(epoch, members)) => {
                    let admitted = members.contains(&node_id);
                    install_view(&shards, node_id, &base_layout, &mut view, epoch, members);
                    if let Some(r) = restart.as_ref().filter(|_| admitted) {
                        r.finish(node_id, epoch);
                        println!("datanode {node_id} started: {}", addresses.join(" "));
                        restart = None;
                    }
                }
                Some(NodeEvent::Shutdown(reason)) => {
                    log("datanode", format!("node {node_id}: {reason}"));
                    failure = Some(reason);
                    break;
                }
                None => {}
            },
            _ = restart_tick.tick(), if restart.is_some() => {
                if let Some(r) = restart.as_mut() {
                    if let Err(e) = r.step(node_id, &shards, &opts).await {
                        log("datanode", format!("node {node_id}: node restart failed: {}", e.message));
                        failure = Some(e.message);
                        break;
                    }
                }
            }
            _ = sigterm.recv() => {
                log("datanode", format!("node {node_id}: SIGTERM received, stopping"));
                graceful = true;
                break;
            }
            _ = tokio::signal::ctrl_c() => {
                log("datanode", format!("node {node_id}: interrupted, stopping"));
                graceful = true;
                break;
            }
            command = mgm.next_command() => {
                let Some((id, command)) = command else {
                    // A restarting node the management server no longer
                    // counts (it marked it stopped when the connection
                    // broke) cannot be admitted: it starts over.
                    if let Some(why) = mgm.refusal().filter(|_| restart.is_some()) {
                        let why = format!("node {node_id}: lost the management server during its restart, which refused it again ({why}); stopping so that its angel restarts it");
                        log("datanode", why.clone());
                        failure = Some(why);
                        break;
                    }
                    continue;
                };
                if let NodeCommand::SetLayout(l) = &command {
                    base_layout = l.clone();
                }
                let (reply, stop) = handle_command(&shards, command, view.as_ref(), &mut backups).await;
                mgm.reply(id, &reply).await;
                if stop {
                    log("datanode", format!("node {node_id}: stopped by the management server"));
                    break;
                }
            }
        }
    }
    // A graceful stop of a started node waits until what it committed is
    // durable: stopping every data node at once then loses no acknowledged
    // commit (a crash of every node loses the last epoch or two).
    if graceful && failure.is_none() && restart.is_none() && opts.data_dir.is_some() {
        drain(&shards, node_id, &mut events, &base_layout, &mut view).await;
    }
    // Stopping: let shard threads finish their current message and exit.
    for s in &shards {
        let _ = s.control.send(Control::Stop);
    }
    match failure {
        Some(reason) => Err(DbError::new(ErrorCode::NodeUnavailable, reason)),
        None => Ok(()),
    }
}

/// This node's connection to the management server, which sends it
/// heartbeats, layouts, schema changes and other commands. A connection
/// that breaks, or stays silent longer than the server's heartbeats allow
/// (a network fault may leave it open), is replaced: the node connects
/// again and says it is still running (`ReattachDataNode`), until the
/// server takes it back. The node serves throughout; only schema changes
/// wait for it.
struct MgmLink<'a> {
    opts: &'a DataNodeOptions,
    node_id: NodeId,
    conn: Option<RpcConn>,
    /// When the server was last heard from (any command, heartbeats
    /// included).
    heard_at: tokio::time::Instant,
    /// How long the server may stay silent.
    silence: Duration,
    /// The last layout the server sent (a restarted server resumes the
    /// running cluster from it).
    layout: ClusterLayout,
    attaching: Option<std::pin::Pin<Box<dyn std::future::Future<Output = Result<RpcConn>> + 'a>>>,
    /// The last refusal logged (each new one is logged once).
    refused: Option<String>,
}

/// How long a data node waits before asking a management server that
/// refused it again (it may resume the cluster once other nodes connect).
const REATTACH_RETRY: Duration = Duration::from_secs(2);

impl<'a> MgmLink<'a> {
    fn new(opts: &'a DataNodeOptions, node_id: NodeId, conn: RpcConn, layout: &ClusterLayout) -> MgmLink<'a> {
        // Three times the server's own deadline for this node's answers.
        let deadline = layout.heartbeat_interval_ms.saturating_mul(u64::from(layout.heartbeat_missed));
        MgmLink {
            opts,
            node_id,
            conn: Some(conn),
            heard_at: tokio::time::Instant::now(),
            silence: Duration::from_millis(deadline.saturating_mul(3).max(1000)),
            layout: layout.clone(),
            attaching: None,
            refused: None,
        }
    }

    /// The next command from the management server (None: the connection
    /// was lost or replaced meanwhile). Safe to cancel.
    async fn next_command(&mut self) -> Option<(u64, NodeCommand)> {
        if let Some(conn) = self.conn.as_mut() {
            let received = tokio::time::timeout_at(self.heard_at + self.silence, conn.receive::<NodeCommand>()).await;
            match received {
                Ok(Ok(Some(command))) => {
                    self.heard_at = tokio::time::Instant::now();
                    if let (_, NodeCommand::SetLayout(layout)) = &command {
                        self.layout = layout.clone();
                    }
                    return Some(command);
                }
                Ok(Ok(None)) => self.lose("it closed the connection".into()),
                Ok(Err(e)) => self.lose(e.message),
                Err(_) => self.lose(format!("it sent nothing for {} ms", self.silence.as_millis())),
            }
            return None;
        }
        let Some(attaching) = self.attaching.as_mut() else { return std::future::pending().await };
        let attached = attaching.await;
        self.attaching = None;
        match attached {
            Ok(conn) => {
                debug_assert!(self.conn.is_none(), "connected again while still connected");
                log("datanode", format!("node {}: connected to the management server again", self.node_id));
                self.conn = Some(conn);
                self.heard_at = tokio::time::Instant::now();
                self.refused = None;
            }
            Err(e) => {
                if self.refused.as_deref() != Some(e.message.as_str()) {
                    log(
                        "datanode",
                        format!(
                            "node {}: the management server refused it: {}; still serving, asking again every {} s",
                            self.node_id,
                            e.message,
                            REATTACH_RETRY.as_secs()
                        ),
                    );
                    self.refused = Some(e.message);
                }
                self.attaching = Some(Box::pin(reattach(self.opts, self.node_id, self.layout.clone(), REATTACH_RETRY)));
            }
        }
        None
    }

    /// Why the server refused this process when it connected again, while
    /// it has not taken it back.
    fn refusal(&self) -> Option<&str> {
        self.refused.as_deref()
    }

    /// Answers a command; a connection that fails is replaced.
    async fn reply(&mut self, id: u64, reply: &NodeReply) {
        let Some(conn) = self.conn.as_mut() else { return };
        if let Err(e) = conn.send_with_id(id, reply).await {
            self.lose(e.message);
        }
    }

    fn lose(&mut self, why: String) {
        debug_assert!(self.attaching.is_none(), "connecting again while connected");
        log(
            "datanode",
            format!(
                "node {}: lost the management server ({why}); still serving, connecting again (schema changes wait)",
                self.node_id
            ),
        );
        self.conn = None;
        self.attaching = Some(Box::pin(reattach(self.opts, self.node_id, self.layout.clone(), Duration::ZERO)));
    }
}

/// Connects to the management server again after `after` and says this
/// process still runs, with the last layout it had. A connection that fails or goes unanswered is
/// tried again; the server's refusal is returned.
async fn reattach(opts: &DataNodeOptions, node_id: NodeId, layout: ClusterLayout, after: Duration) -> Result<RpcConn> {
    tokio::time::sleep(after).await;
    let (pid, process) = (std::process::id(), process_number());
    let request = MgmRequest::ReattachDataNode { node_id, pid, process, protocol: PROTOCOL_VERSION, layout };
    loop {
        match RpcConn::connect(&opts.mgmd, Duration::from_secs(2), opts.tls.as_deref()).await {
            Ok(mut conn) => match conn.call::<_, MgmResponse>(&request).await {
                Ok(MgmResponse::Done) => return Ok(conn),
                Ok(other) => return Err(unexpected("reattach", other)),
                // It broke or the server did not answer: try again.
                Err(_) => {}
            },
            // A certificate refused is not cured by waiting, but the node
            // keeps serving: the caller asks again later.
            Err(e) if e.code == ErrorCode::AccessDenied => return Err(e),
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Serves this node's `GET /metrics`: each shard's usage and operation
/// counts, asked of the shard threads at each scrape (the same series the
/// management server shows for every node, `latsdb_rows` and so on).
async fn serve_metrics(node_id: NodeId, host: &str, port: u16, shards: &[ShardHandle]) -> Result<()> {
    let listener = tokio::net::TcpListener::bind((host, port)).await.map_err(|e| {
        DbError::new(
            ErrorCode::Io,
            format!("data node {node_id} cannot serve metrics on {host}:{port}: {e}; pick another metrics port (--metrics-port, or metrics_port in the configuration)"),
        )
    })?;
    let at = listener.local_addr().map_err(|e| DbError::io("local_addr", e))?;
    log("datanode", format!("node {node_id}: metrics at http://{at}/metrics"));
    println!("datanode {node_id} metrics http://{at}/metrics");
    let controls: std::sync::Arc<[_]> = shards.iter().map(|s| s.control.clone()).collect();
    tokio::spawn(latsdb_net::metrics::serve(listener, "data node", move || {
        let controls = controls.clone();
        async move {
            let report = shard_reports(&controls).await;
            let mut out = String::with_capacity(4096);
            crate::mgmd::metrics::render_usage(&mut out, &[(node_id, report)]);
            out
        }
    }));
    Ok(())
}

/// Every running shard's usage report (a stopped shard is left out).
async fn shard_reports(
    controls: &[tokio::sync::mpsc::UnboundedSender<Control>],
) -> Vec<latsdb_types::proto::ShardMemory> {
    let mut waits = Vec::new();
    for control in controls {
        let (tx, rx) = oneshot::channel();
        if control.send(Control::Memory(tx)).is_ok() {
            waits.push(rx);
        }
    }
    let mut report = Vec::new();
    for rx in waits {
        if let Ok(m) = rx.await {
            report.push(m);
        }
    }
    report
}

/// Reads the node's data directory (emptied first on an initial start):
/// its shards' disk images and what they hold, logged.
fn read_data_dir(
    opts: &DataNodeOptions,
    node_id: NodeId,
    threads: u16,
) -> Result<(Vec<crate::disk::ShardImage>, Option<latsdb_types::proto::NodeRecovery>)> {
    let images = match &opts.data_dir {
        Some(dir) => {
            let node_dir = dir.join(format!("datanode-{node_id}"));
            if opts.initial {
                wipe_node_dir(&node_dir)?;
                log("datanode", format!("node {node_id}: initial start: emptied {}", node_dir.display()));
            }
            scan_node_dir(&node_dir, threads)?
        }
        None => Vec::new(),
    };
    let recovery = node_recovery(&images);
    match &recovery {
        Some(r) => log(
            "datanode",
            format!(
                "node {node_id}: data directory holds epochs up to {} (synced through {})",
                r.max_epoch, r.saved_epoch
            ),
        ),
        None if opts.data_dir.is_some() => log("datanode", format!("node {node_id}: data directory is empty")),
        None => log("datanode", format!("node {node_id}: no data directory; nothing this node commits is durable")),
    }
    Ok((images, recovery))
}

/// What a data node runs with: its registration's settings, with the
/// automatic thread count and data memory worked out and its shard threads
/// placed on CPUs.
struct NodeSettings {
    node_id: NodeId,
    host: String,
    port: u16,
    threads: u16,
    data_memory_mb: u64,
    /// The node's page cache and tablespace limit, in MiB (0: no limit).
    disk_page_cache_mb: u64,
    tablespace_mb: u64,
    /// REDO the node may keep, in MiB (0: no limit, a node without disk).
    redo_limit_mb: u64,
    disk_direct_io: bool,
    placement: crate::cpus::Placement,
    /// The configuration's port for `GET /metrics`.
    metrics_port: Option<u16>,
}

fn node_settings(opts: &DataNodeOptions, registered: MgmResponse) -> Result<NodeSettings> {
    let MgmResponse::Registered {
        node_id,
        host,
        port,
        threads,
        data_memory_mb,
        disk_page_cache_mb,
        tablespace_mb,
        redo_limit_mb,
        disk_direct_io,
        nodes_on_host,
        host_index,
        cpu_bind,
        cpus,
        idle_poll,
        metrics_port,
    } = registered
    else {
        return Err(unexpected("registration", registered));
    };
    let threads = match opts.threads.unwrap_or(threads) {
        0 => auto_threads(),
        n => n,
    };
    let data_memory_mb = match data_memory_mb {
        0 => auto_data_memory_mb(nodes_on_host),
        n => n,
    };
    let disk_page_cache_mb = match disk_page_cache_mb {
        0 => (data_memory_mb / 4).max(16),
        n => n,
    };
    let redo_limit_mb = match (&opts.data_dir, redo_limit_mb) {
        (None, _) => 0,
        (Some(dir), 0) => auto_redo_limit_mb(dir),
        (Some(_), mb) => mb,
    };
    let allowed = crate::cpus::allowed();
    let share = crate::cpus::HostShare {
        bind: cpu_bind,
        explicit: cpus.as_deref(),
        host_index,
        nodes_on_host,
        allowed: &allowed,
    };
    let placement = crate::cpus::plan(threads, &share)
        .map_err(|e| DbError::new(e.code, format!("data node {node_id}: {}", e.message)))?;
    if idle_poll {
        match crate::cpus::request_idle_poll() {
            Ok(()) => log("datanode", format!("node {node_id}: idle CPUs poll while this node runs (/dev/cpu_dma_latency = 0; idle_poll = false in [datanode_defaults] turns it off)")),
            Err(e) => log("datanode", format!("node {node_id}: {e}; idle CPUs may halt, which adds wake-up latency to messages (give this user write access to it, or set idle_poll = false in [datanode_defaults] to silence this)")),
        }
    }
    log(
        "datanode",
        format!(
            "node {node_id}: registered with {}; starting {threads} shard thread(s), {}, {data_memory_mb} MiB data memory, {disk_page_cache_mb} MiB page cache, {} REDO",
            opts.mgmd,
            placement.reason,
            if redo_limit_mb == 0 { "no limit on".to_string() } else { format!("{redo_limit_mb} MiB at most of") }
        ),
    );
    Ok(NodeSettings {
        node_id,
        host,
        port,
        threads,
        data_memory_mb,
        disk_page_cache_mb,
        tablespace_mb,
        redo_limit_mb,
        disk_direct_io,
        placement,
        metrics_port,
    })
}

/// Starts the node's shard threads, each with a placeholder layout (the
/// real one follows once the management server sends it).
fn spawn_shards(opts: &DataNodeOptions, settings: &NodeSettings) -> Result<Vec<ShardHandle>> {
    let NodeSettings {
        node_id,
        host,
        port,
        threads,
        data_memory_mb,
        disk_page_cache_mb,
        tablespace_mb,
        redo_limit_mb,
        disk_direct_io,
        placement,
        metrics_port: _,
    } = settings;
    let (node_id, port, threads, data_memory_mb) = (*node_id, *port, *threads, *data_memory_mb);
    let pages = latsdb_cluster::PagesConfig {
        cache_pages: ((*disk_page_cache_mb << 20) / threads as u64 / latsdb_cluster::PAGE_BYTES as u64) as usize,
        // At least a few pages per shard when there is a limit at all.
        limit_bytes: match *tablespace_mb {
            0 => 0,
            mb => ((mb << 20) / threads as u64).max(4 * latsdb_cluster::PAGE_BYTES as u64),
        },
        direct_io: *disk_direct_io,
    };
    let placeholder = ClusterLayout::builder(String::new()).version(0).mgmd(0, opts.mgmd.clone()).build();
    let mut shards: Vec<ShardHandle> = Vec::new();
    let lease = latsdb_cluster::Lease::unlimited();
    for i in 0..threads {
        let cfg = ShardConfig {
            me: ShardAddr { node: node_id, shard: i },
            lock_wait_timeout_us: 1_500_000,
            first_tx_seq: first_tx_seq(),
            data_memory_bytes: (data_memory_mb << 20) / threads as u64,
            redo_limit_bytes: (*redo_limit_mb << 20) / threads as u64,
            lease: lease.clone(),
            durable: opts.data_dir.is_some(),
            node_shards: threads,
            pages,
        };
        let shard_port = if port == 0 { 0 } else { port.saturating_add(i) };
        shards.push(spawn_shard(
            cfg,
            placement.cpus[i as usize],
            host,
            shard_port,
            placeholder.clone(),
            latsdb_types::proto::DEFAULT_MAX_FRAME_BYTES,
            opts.tls.clone(),
        )?);
    }
    Ok(shards)
}

/// Restores every shard from its disk image (checkpoint and REDO) as the
/// start plan says, and logs the stage.
async fn restore_shards(
    shards: &[ShardHandle],
    node_id: NodeId,
    images: Vec<crate::disk::ShardImage>,
    plan: &latsdb_types::proto::StartPlan,
) -> Result<()> {
    let stage = std::time::Instant::now();
    let mut waits = Vec::new();
    for (shard, image) in shards.iter().zip(images) {
        let (tx, rx) = oneshot::channel();
        shard
            .control
            .send(Control::Restore(Box::new(image), plan.clone(), tx))
            .map_err(|_| DbError::internal(format!("shard {} has stopped", shard.me)))?;
        waits.push((shard.me, rx));
    }
    for (me, rx) in waits {
        let line = rx.await.map_err(|_| DbError::internal(format!("shard {me} stopped while restoring")))??;
        log("datanode", format!("shard {me}: {line}"));
    }
    log(
        "datanode",
        format!(
            "node {node_id}: restore stage done in {} ms; new commits begin in epoch {}",
            stage.elapsed().as_millis(),
            plan.first_epoch
        ),
    );
    Ok(())
}

/// A node restart under way: the stages (`latsdb_cluster::NodeRestart`,
/// the state machine the simulator runs too) carried out on this node's
/// shard threads, with each stage's duration logged.
struct Restart {
    plan: NodeRestart,
    began: std::time::Instant,
    stage_began: std::time::Instant,
    /// Durations of the finished stages, for the final log line.
    done: Vec<(&'static str, u128)>,
    last_report: std::time::Instant,
}

/// How long a restarted node waits for the view that admits it before it
/// asks again, and how often it asks.
const ADMIT_WAIT: Duration = Duration::from_secs(10);
const ADMIT_TRIES: u32 = 3;

impl Restart {
    fn new() -> Restart {
        let now = std::time::Instant::now();
        let plan = NodeRestart::new(ADMIT_WAIT.as_micros() as u64, ADMIT_TRIES);
        Restart { plan, began: now, stage_began: now, done: Vec::new(), last_report: now }
    }

    /// Logs the end of the stage that just finished.
    fn stage_done(&mut self, name: &'static str, node_id: NodeId, detail: String) {
        let ms = self.stage_began.elapsed().as_millis();
        log("datanode", format!("node {node_id}: {name} stage done in {ms} ms{detail}"));
        self.done.push((name, ms));
        self.stage_began = std::time::Instant::now();
    }

    fn finish(&self, node_id: NodeId, epoch: latsdb_types::proto::ViewNumber) {
        let stages: Vec<String> = self.done.iter().map(|(n, ms)| format!("{n} {ms} ms")).collect();
        log(
            "datanode",
            format!(
                "node {node_id}: admitted to view {epoch} after {} ms ({}, admit {} ms): started, primary of its partitions again",
                self.began.elapsed().as_millis(),
                stages.join(", "),
                self.stage_began.elapsed().as_millis()
            ),
        );
    }

    /// One look at the shards; carries out what the restart's next step is.
    async fn step(&mut self, node_id: NodeId, shards: &[ShardHandle], opts: &DataNodeOptions) -> Result<()> {
        let mut progress = Vec::with_capacity(shards.len());
        for s in shards {
            progress.push(ask(s, Control::SyncProgress).await?);
        }
        let mut settled = Vec::new();
        for (s, target) in shards.iter().zip(self.plan.checkpoint_targets().unwrap_or(&[]).to_vec()) {
            settled.push(ask(s, |tx| Control::CheckpointSettled(target, tx)).await?);
        }
        let now = self.began.elapsed().as_micros() as u64;
        match self.plan.step(now, &progress, &settled) {
            RestartStep::Wait => self.report_copy(node_id, &progress),
            RestartStep::Checkpoint { summary } => {
                let mut targets = Vec::new();
                for s in shards {
                    targets.push(ask(s, Control::Checkpoint).await?);
                }
                self.plan.checkpoints_begun(targets);
                self.stage_done("copy", node_id, format!(": {}", copy_summary(&summary)));
            }
            RestartStep::HandOver => {
                for s in shards {
                    s.control
                        .send(Control::HandOver)
                        .map_err(|_| DbError::internal(format!("shard {} has stopped", s.me)))?;
                }
                self.stage_done("checkpoint", node_id, String::new());
            }
            RestartStep::AskAdmit { tries } => {
                if tries == 0 {
                    self.stage_done("handover", node_id, String::new());
                }
                self.ask_admit(node_id, opts).await?;
            }
            RestartStep::Fail(why) => return Err(DbError::new(ErrorCode::NodeUnavailable, why)),
        }
        Ok(())
    }

    /// Every 2 s of the copy stage, a line on how far it got.
    fn report_copy(&mut self, node_id: NodeId, progress: &[latsdb_cluster::SyncProgress]) {
        if self.plan.stage() == "copy" && self.last_report.elapsed() >= Duration::from_secs(2) {
            self.last_report = std::time::Instant::now();
            let summary = latsdb_cluster::SyncProgress::total(progress);
            log("datanode", format!("node {node_id}: copying: {}", copy_summary(&summary)));
        }
    }

    async fn ask_admit(&mut self, node_id: NodeId, opts: &DataNodeOptions) -> Result<()> {
        let mut conn = RpcConn::connect(&opts.mgmd, Duration::from_secs(2), opts.tls.as_deref()).await?;
        match conn.call(&MgmRequest::DataNodeSynced { node_id }).await? {
            MgmResponse::Done => Ok(()),
            other => Err(unexpected("the request to admit the restarted node", other)),
        }
    }
}

/// How far a node's copy got, for the log.
fn copy_summary(all: &latsdb_cluster::SyncProgress) -> String {
    let mut summary = format!(
        "{} of {} partitions, {} ranges equal, {} ranges copied ({} rows)",
        all.partitions - all.partitions_left,
        all.partitions,
        all.ranges_equal,
        all.ranges_copied,
        all.rows_copied
    );
    if all.sources_switched > 0 {
        summary += &format!(", {} partition copies started over from a new primary", all.sources_switched);
    }
    summary
}

/// Sends a shard a control message that carries a reply channel, and waits
/// for the reply.
async fn ask<T>(shard: &ShardHandle, message: impl FnOnce(oneshot::Sender<T>) -> Control) -> Result<T> {
    let (tx, rx) = oneshot::channel();
    let stopped = || DbError::internal(format!("shard {} has stopped", shard.me));
    shard.control.send(message(tx)).map_err(|_| stopped())?;
    rx.await.map_err(|_| stopped())
}

/// Removes everything a node's data directory holds (an initial start).
fn wipe_node_dir(dir: &std::path::Path) -> Result<()> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(DbError::io(&format!("emptying the data directory {}", dir.display()), e)),
    }
}

/// Reads the shard directories of a node's data directory.
fn scan_node_dir(dir: &std::path::Path, threads: u16) -> Result<Vec<crate::disk::ShardImage>> {
    std::fs::create_dir_all(dir)
        .map_err(|e| DbError::new(ErrorCode::Io, format!("cannot create the data directory {}: {e}", dir.display())))?;
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let name = e.file_name();
            let extra = name
                .to_str()
                .and_then(|n| n.strip_prefix("shard-"))
                .and_then(|n| n.parse::<u16>().ok())
                .filter(|&n| n >= threads && crate::disk::scan(&e.path()).is_ok_and(|i| i.has_data));
            if let Some(n) = extra {
                return Err(DbError::bad_request(format!(
                    "the data directory {} holds data of shard {n}, but this node runs {threads} shard thread(s); start it with the thread count it was written with",
                    dir.display()
                )));
            }
        }
    }
    (0..threads).map(|i| crate::disk::scan(&dir.join(format!("shard-{i}")))).collect()
}

/// What the node's disk holds, for the management server's restart plan.
fn node_recovery(images: &[crate::disk::ShardImage]) -> Option<latsdb_types::proto::NodeRecovery> {
    if !images.iter().any(|i| i.has_data) {
        return None;
    }
    Some(latsdb_cluster::node_recovery(images.iter().map(|i| &i.summary)))
}

/// The layout the shards use: the management server's, restricted to the
/// current view once the node's membership has installed one.
fn effective_layout(
    base: &ClusterLayout,
    view: Option<&(latsdb_types::proto::ViewNumber, Vec<NodeId>)>,
) -> ClusterLayout {
    match view {
        Some((number, members)) if *number >= base.view => base.of_view(*number, members),
        // The management server heard of a newer view than this node's
        // membership installed (or the node is not a member yet): its
        // layout already is of that view. Restricting it to this node's
        // older view would show the nodes that view added as gone (links to
        // them would be dropped, and they would suspect this node), and a
        // joining node's takeover reports must count in the current view.
        _ => {
            let mut layout = base.clone();
            layout.version = ClusterLayout::view_version(base.version, base.view);
            layout
        }
    }
}

/// Half of the machine's memory (from /proc/meminfo), shared by the data
/// nodes configured on this host; 1 GiB where the total cannot be read.
fn auto_data_memory_mb(nodes_on_host: u16) -> u64 {
    let total_kb = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("MemTotal:")?.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .unwrap_or(2 << 20);
    (total_kb / 1024 / 2 / nodes_on_host.max(1) as u64).max(64)
}

/// Half of the free space of the file system holding `dir` (made if
/// missing), read once at start; 0 (no limit) where it cannot be read.
fn auto_redo_limit_mb(dir: &std::path::Path) -> u64 {
    let _ = std::fs::create_dir_all(dir);
    match crate::disk::space(dir) {
        Some((free, _)) => ((free / 2) >> 20).max(64),
        None => 0,
    }
}

/// Transaction ids restart from the wall clock (microseconds), so a
/// restarted node does not reuse ids its peers may still hold state for.
fn first_tx_seq() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(1) << 8
}

/// How long a stopping node waits for its commits to become durable.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// The node's shards refuse clients from now on; waits (at most
/// `DRAIN_TIMEOUT`) until the epoch each was in is durable, following view
/// changes meanwhile (when another stopping node leaves first, the epochs
/// are driven without it).
async fn drain(
    shards: &[ShardHandle],
    node_id: NodeId,
    events: &mut tokio::sync::mpsc::UnboundedReceiver<NodeEvent>,
    base_layout: &ClusterLayout,
    view: &mut Option<(latsdb_types::proto::ViewNumber, Vec<NodeId>)>,
) {
    let began = std::time::Instant::now();
    let mut targets = Vec::with_capacity(shards.len());
    for s in shards {
        match ask(s, Control::StopServing).await {
            Ok(epoch) => targets.push((s, epoch)),
            Err(e) => log("datanode", format!("node {node_id}: {}", e.message)),
        }
    }
    let Some(&(_, last)) = targets.iter().max_by_key(|(_, epoch)| *epoch) else { return };
    log("datanode", format!("node {node_id}: refusing clients; waiting for epoch {last} to be durable"));
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    loop {
        tokio::select! {
            event = events.recv() => match event {
                Some(NodeEvent::View(epoch, members)) => install_view(shards, node_id, base_layout, view, epoch, members),
                Some(NodeEvent::Shutdown(reason)) => {
                    log("datanode", format!("node {node_id}: {reason}; commits after the last durable epoch may be lost"));
                    return;
                }
                None => {}
            },
            _ = tick.tick() => {
                let mut durable = true;
                for &(s, target) in &targets {
                    durable &= ask(s, Control::DurableEpoch).await.is_ok_and(|d| d >= target);
                }
                if durable {
                    log("datanode", format!("node {node_id}: epoch {last} is durable (waited {} ms)", began.elapsed().as_millis()));
                    return;
                }
                if began.elapsed() >= DRAIN_TIMEOUT {
                    log(
                        "datanode",
                        format!("node {node_id}: epoch {last} did not become durable within {} s (are the other data nodes stopped?); stopping anyway: its commits are lost unless another replica makes them durable", DRAIN_TIMEOUT.as_secs()),
                    );
                    return;
                }
            }
        }
    }
}

/// A new view from the node's membership: the shards route by the layout
/// it makes effective.
fn install_view(
    shards: &[ShardHandle],
    node_id: NodeId,
    base_layout: &ClusterLayout,
    view: &mut Option<(latsdb_types::proto::ViewNumber, Vec<NodeId>)>,
    epoch: latsdb_types::proto::ViewNumber,
    members: Vec<NodeId>,
) {
    log("datanode", format!("node {node_id}: view {epoch}: live data nodes {members:?}"));
    *view = Some((epoch, members));
    set_layout(shards, &effective_layout(base_layout, view.as_ref()));
}

fn set_layout(shards: &[ShardHandle], layout: &ClusterLayout) {
    for s in shards {
        let _ = s.control.send(Control::Layout(layout.clone()));
    }
}

async fn apply_schema(shards: &[ShardHandle], change: SchemaChange) -> Result<()> {
    let mut waits = Vec::new();
    for s in shards {
        let (tx, rx) = oneshot::channel();
        s.control
            .send(Control::Schema(change.clone(), tx))
            .map_err(|_| DbError::internal(format!("shard {} has stopped", s.me)))?;
        waits.push(rx);
    }
    for rx in waits {
        rx.await.map_err(|_| DbError::internal("a shard stopped while applying a schema change"))??;
    }
    Ok(())
}

async fn handle_command(
    shards: &[ShardHandle],
    command: NodeCommand,
    view: Option<&(latsdb_types::proto::ViewNumber, Vec<NodeId>)>,
    backups: &mut crate::backup::NodeBackups,
) -> (NodeReply, bool) {
    match command {
        NodeCommand::Heartbeat => (NodeReply::Done, false),
        NodeCommand::SetLayout(layout) => {
            set_layout(shards, &effective_layout(&layout, view));
            (NodeReply::Done, false)
        }
        NodeCommand::ApplySchema(change) => match apply_schema(shards, change).await {
            Ok(()) => (NodeReply::Done, false),
            Err(e) => (NodeReply::Error(e), false),
        },
        NodeCommand::ReportMemory => {
            let controls: Vec<_> = shards.iter().map(|s| s.control.clone()).collect();
            (NodeReply::Memory(shard_reports(&controls).await), false)
        }
        NodeCommand::Stop => (NodeReply::Done, true),
        NodeCommand::Admit(node) => match shards.first().map(|s| s.control.send(Control::Admit(node)).is_ok()) {
            Some(true) => (NodeReply::Done, false),
            _ => (NodeReply::Error(DbError::internal("the membership shard has stopped")), false),
        },
        NodeCommand::BackupHold { id } => {
            let held = match hold_shards(shards).await {
                Ok(held) => backups.hold(id, held).await,
                Err(e) => Err(e),
            };
            (held.unwrap_or_else(NodeReply::Error), false)
        }
        NodeCommand::BackupWrite { id, epoch, tables } => match backups.write(id, epoch, tables) {
            Ok(()) => (NodeReply::Done, false),
            Err(e) => (NodeReply::Error(e), false),
        },
        NodeCommand::BackupProgress { id } => match backups.progress(id) {
            Ok(part) => (NodeReply::BackupProgress(part), false),
            Err(e) => (NodeReply::Error(e), false),
        },
        NodeCommand::BackupAbort { id } => {
            backups.abort(id);
            (NodeReply::Done, false)
        }
    }
}

/// Holds every shard's files for a backup; if one cannot, lets the others go.
async fn hold_shards(shards: &[ShardHandle]) -> Result<Vec<crate::backup::HeldShard>> {
    // Asked all at once: each waits for its disk thread to reach the hold.
    let mut waits = Vec::new();
    for s in shards {
        let (tx, rx) = oneshot::channel();
        let sent = s.control.send(Control::BackupHold(tx)).is_ok();
        waits.push((s.me, sent.then_some(rx)));
    }
    let mut held = Vec::new();
    let mut failure = None;
    for (me, rx) in waits {
        let answer = match rx {
            Some(rx) => rx.await.unwrap_or_else(|_| Err(DbError::internal(format!("shard {me} has stopped")))),
            None => Err(DbError::internal(format!("shard {me} has stopped"))),
        };
        match answer {
            Ok(h) => held.push(h),
            Err(e) => failure = failure.or(Some(e)),
        }
    }
    match failure {
        None => Ok(held),
        Some(e) => {
            for h in held {
                let _ = h.disk.send(crate::disk::DiskMsg::Release);
            }
            Err(e)
        }
    }
}
