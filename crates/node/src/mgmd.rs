//! The management server: owns the cluster configuration, hands out node
//! ids, keeps the cluster layout and the schema, and pushes both to the data
//! nodes. Schema changes are applied on every data node before they are
//! acknowledged, one at a time.

use crate::log;
use latsdb_cluster::membership::Arbiter;
use latsdb_net::tls::ClusterTls;
use latsdb_net::{FrameError, FrameReader};
use latsdb_types::config::ClusterConfig;
use latsdb_types::proto::{
    self, ClusterLayout, MgmRequest, MgmResponse, NodeCommand, NodeId, NodeReply, NodeStatus, SchemaChange, Severity,
};
use latsdb_types::schema::{TableDef, TableSpec};
use latsdb_types::{DbError, ErrorCode, Result};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use tokio::sync::{mpsc, oneshot, Notify};

mod alarms;
mod backup;
mod copies;
mod events;
mod lifecycle;
pub mod metrics;
mod nodegroups;
mod references;
mod state;
use events::ClusterLog;
use state::{load_state, Persisted};

/// How long a data node may take to apply a schema change.
const NODE_COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the data nodes' usage is checked against their limits.
const USAGE_INTERVAL: Duration = Duration::from_secs(5);

pub struct MgmdOptions {
    pub config: ClusterConfig,
    /// Overrides the configured port (0 picks a free one).
    pub port: Option<u16>,
    /// Written with the listening address once the server accepts connections.
    pub ready_file: Option<PathBuf>,
    /// Where the schema and the latest durable epoch are kept across
    /// restarts (`mgmd-state.bin`); None keeps them in memory only.
    pub data_dir: Option<PathBuf>,
    /// The server's identity when the cluster requires TLS (`--tls-dir`).
    pub tls: Option<Arc<ClusterTls>>,
}

type Command = (NodeCommand, oneshot::Sender<Result<NodeReply>>);

struct NodeLink {
    commands: mpsc::UnboundedSender<Command>,
    generation: u64,
}

struct State {
    layout: ClusterLayout,
    tables: Vec<TableDef>,
    next_table_id: u32,
    links: HashMap<NodeId, NodeLink>,
    registering: HashSet<NodeId>,
    /// Data nodes that have been started at least once.
    ever_started: HashSet<NodeId>,
    /// The cluster has formed (every configured data node started, or at a
    /// system restart every one of the last view): from then on the data
    /// nodes decide membership among themselves, and this server only
    /// arbitrates between two halves and records the views they install.
    formed: bool,
    /// While the cluster starts: what each starting node found on its disk.
    recovery: HashMap<NodeId, Option<latsdb_types::proto::NodeRecovery>>,
    /// Data nodes of the last view (their disks hold the latest data), and
    /// its epoch.
    last_view: Vec<NodeId>,
    last_view_number: latsdb_types::proto::ViewNumber,
    arbiter: Arbiter,
    next_generation: u64,
    /// Data nodes to start (node, initial), for the process manager.
    start_requests: Vec<(NodeId, bool)>,
    /// The running cluster as it was when this server lost its connection
    /// to every data node and took the cluster for stopped. A node of it
    /// that connects again (`ReattachDataNode`) shows it never stopped
    /// (the links broke in a network fault, or this server was paused),
    /// and the cluster is resumed from here; a system restart begun
    /// meanwhile ends that chance.
    stopped: Option<StoppedCluster>,
    /// This server started with the state of a cluster that ran before
    /// (and keeps it on disk): until that cluster forms again or a system
    /// restart begins, a running data node that connects again may show
    /// it never stopped, and its layout resumes it.
    may_adopt: bool,
    /// Data node processes whose `ReattachDataNode` was refused (logged
    /// once each).
    reattach_refused: HashSet<(NodeId, u32)>,
    /// How often each data node started since this server started (for
    /// `/metrics`).
    node_starts: std::collections::BTreeMap<NodeId, u64>,
    /// Tables an ALTER TABLE copies (`copies.rs`): their writes are refused.
    copies: std::collections::BTreeSet<latsdb_types::schema::TableId>,
}

/// What a cluster taken for stopped is resumed from.
struct StoppedCluster {
    layout: ClusterLayout,
    ever_started: HashSet<NodeId>,
}

struct Mgmd {
    data_dir: Option<PathBuf>,
    tls: Option<Arc<ClusterTls>>,
    /// The configuration: the file's, with the node groups added since
    /// (`nodegroups.rs`).
    config: std::sync::RwLock<Arc<ClusterConfig>>,
    state: Mutex<State>,
    schema_lock: tokio::sync::Mutex<()>,
    /// One `persist` at a time: they share the temporary file.
    persist_lock: Mutex<()>,
    shutdown: Notify,
    /// The cluster log. It may be locked while `state` is held, never the
    /// other way round.
    events: Mutex<ClusterLog>,
    /// Each started data node's usage at the last poll (`watch_usage`).
    usage: Mutex<Vec<(NodeId, Vec<latsdb_types::proto::ShardMemory>)>>,
    /// The online backups run (`backup.rs`).
    backups: Mutex<backup::Backups>,
    /// The node groups added online and where partitions live (`nodegroups.rs`).
    node_groups: Mutex<nodegroups::NodeGroups>,
}

/// The votes the last process kept, if any: a cluster it arbitrated may
/// still run, and a tie it is asked to break again must be broken the same
/// way (a cluster that forms replaces them with its first view). Their view
/// is the last one this server heard of, newer than the last view on disk
/// when the server died while the cluster ran: the next system restart
/// waits for its members, and views go on from its number.
fn votes_at_start(dir: Option<&std::path::Path>, fresh: bool, persisted: &mut Persisted) -> Result<Option<Arbiter>> {
    let Some(votes) = dir.map(state::load_votes).transpose()?.flatten() else { return Ok(None) };
    let (view, members) = votes.view();
    log("mgmd", format!("loaded the arbitrator's votes: view {view}, data nodes {members:?}"));
    if !fresh && view > persisted.last_view_number {
        persisted.last_view = members.to_vec();
        persisted.last_view_number = view;
    }
    debug_assert!(fresh || persisted.last_view_number >= view, "the last view is older than the votes' view");
    Ok(Some(votes))
}

pub async fn run_mgmd(opts: MgmdOptions) -> Result<()> {
    opts.config.validate()?;
    let mut config = opts.config;
    let persisted = match &opts.data_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| DbError::io(&format!("creating {}", dir.display()), e))?;
            load_state(dir)?
        }
        None => Persisted::default(),
    };
    let fresh = persisted.tables.is_empty() && persisted.last_view.is_empty();
    let node_groups = nodegroups::NodeGroups::at_start(
        nodegroups::NodeGroups::load(opts.data_dir.as_deref())?,
        &mut config,
        fresh,
        opts.data_dir.as_deref(),
    )?;

    let port = opts.port.unwrap_or(config.mgmd.port);
    let listener = TcpListener::bind((config.mgmd.host.as_str(), port)).await.map_err(|e| {
        DbError::new(
            ErrorCode::Io,
            format!("the management server cannot listen on {}:{port}: {e}; is another one running? pick another port with --port", config.mgmd.host),
        )
    })?;
    let address = listener.local_addr().map_err(|e| DbError::io("local_addr", e))?.to_string();
    let layout = ClusterLayout::builder(config.cluster.name.clone())
        .replicas(config.cluster.replicas)
        .mgmd(config.mgmd.node_id, address.clone())
        .datanodes(config.datanodes.iter().map(|d| config.not_started(d)).collect())
        .node_groups(config.node_groups())
        .default_partitions(config.cluster.partitions_per_table)
        .lock_wait_timeout_ms(config.cluster.lock_wait_timeout_ms)
        .transaction_inactive_timeout_ms(config.cluster.transaction_inactive_timeout_ms)
        .heartbeat(config.cluster.heartbeat_interval_ms, config.cluster.heartbeat_missed)
        .epoch_interval_ms(config.cluster.epoch_interval_ms)
        .checkpoint_trigger_mb(config.cluster.checkpoint_trigger_mb)
        .default_column_storage(config.cluster.default_column_storage)
        .build();
    let events = ClusterLog::open(opts.data_dir.as_deref())?;
    let mut layout = layout;
    layout.durable_epoch = persisted.durable_epoch;
    node_groups.place(&mut layout);
    if !persisted.tables.is_empty() {
        log(
            "mgmd",
            format!("loaded {} table definitions; durable epoch {}", persisted.tables.len(), persisted.durable_epoch),
        );
    }
    let mut persisted = persisted;
    let saved_votes = votes_at_start(opts.data_dir.as_deref(), fresh, &mut persisted)?;
    let arbiter = saved_votes.unwrap_or_else(|| Arbiter::new(layout.datanodes.iter().map(|d| d.node_id).collect()));
    let mgmd = Arc::new(Mgmd {
        data_dir: opts.data_dir.clone(),
        tls: opts.tls.clone(),
        config: std::sync::RwLock::new(Arc::new(config)),
        state: Mutex::new(State {
            layout,
            tables: persisted.tables,
            next_table_id: persisted.next_table_id.max(1),
            links: HashMap::new(),
            registering: HashSet::new(),
            ever_started: HashSet::new(),
            formed: false,
            recovery: HashMap::new(),
            last_view: persisted.last_view,
            last_view_number: persisted.last_view_number,
            arbiter,
            next_generation: 1,
            start_requests: Vec::new(),
            stopped: None,
            may_adopt: !fresh && opts.data_dir.is_some(),
            reattach_refused: HashSet::new(),
            node_starts: Default::default(),
            copies: Default::default(),
        }),
        schema_lock: tokio::sync::Mutex::new(()),
        persist_lock: Mutex::new(()),
        shutdown: Notify::new(),
        events: Mutex::new(events),
        usage: Mutex::new(Vec::new()),
        backups: Mutex::new(backup::Backups::load(opts.data_dir.as_deref())?),
        node_groups: Mutex::new(node_groups),
    });
    if let Some(path) = &opts.ready_file {
        std::fs::write(path, &address).map_err(|e| DbError::io(&format!("writing {}", path.display()), e))?;
    }
    mgmd.event(Severity::Info, format!("management server started, listening on {address}"));
    for warning in latsdb_types::location::placement_warnings(&mgmd.config()) {
        mgmd.event(Severity::Warning, warning);
    }
    tokio::spawn(mgmd.clone().watch_usage());
    if let Some(port) = mgmd.config().mgmd.metrics_port {
        let host = mgmd.config().mgmd.host.clone();
        let listener = TcpListener::bind((host.as_str(), port)).await.map_err(|e| {
            DbError::new(
                ErrorCode::Io,
                format!("the management server cannot serve metrics on {host}:{port}: {e}; pick another [mgmd] metrics_port"),
            )
        })?;
        let at = listener.local_addr().map_err(|e| DbError::io("local_addr", e))?;
        mgmd.event(Severity::Info, format!("metrics at http://{at}/metrics"));
        let scraped = mgmd.clone();
        tokio::spawn(latsdb_net::metrics::serve(listener, "management server", move || {
            let mgmd = scraped.clone();
            async move { mgmd.metrics_text() }
        }));
    }
    println!("mgmd listening on {address}");
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| DbError::io("installing the SIGTERM handler", e))?;
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let m = mgmd.clone();
                    tokio::spawn(async move { m.serve(stream).await });
                }
                Err(e) => {
                    log("mgmd", format!("accept failed: {e}"));
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = mgmd.shutdown.notified() => {
                mgmd.event(Severity::Info, "shutdown requested; the management server stops");
                break;
            }
            _ = sigterm.recv() => {
                mgmd.event(Severity::Info, "SIGTERM received; the management server stops");
                break;
            }
            _ = tokio::signal::ctrl_c() => {
                mgmd.event(Severity::Info, "interrupted; the management server stops");
                break;
            }
        }
    }
    Ok(())
}

/// The database and table a schema change (or a copy's beginning) names.
fn changed_table(request: &MgmRequest) -> Option<(&String, &String)> {
    match request {
        MgmRequest::DropTable { database, name } => Some((database, name)),
        MgmRequest::CreateIndex { database, table, .. }
        | MgmRequest::DropIndex { database, table, .. }
        | MgmRequest::AddColumns { database, table, .. }
        | MgmRequest::ChangeColumns { database, table, .. }
        | MgmRequest::RenameTable { database, table, .. }
        | MgmRequest::CopyTableBegin { database, table, .. } => Some((database, table)),
        _ => None,
    }
}

/// The refusal of a user table named like a hidden one.
fn reserved_table_name(name: &str) -> DbError {
    DbError::bad_request(format!(
        "table name '{name}' is reserved: names starting with '{}' or '{}' are latsdb's hidden tables",
        latsdb_types::schema::HIDDEN_TABLE_PREFIX,
        latsdb_types::schema::COPY_TABLE_PREFIX
    ))
}

impl Mgmd {
    /// Refuses a schema change while partitions move to an added node
    /// group (the caller holds the schema lock, which adding one takes):
    /// the new data nodes copy the tables they were given when they
    /// started, and a change meanwhile would miss their copies. Refuses it
    /// too while a running data node is not connected.
    fn refuse_schema_change_now(&self) -> Result<()> {
        let state = self.lock();
        if !state.layout.moves.is_empty() {
            return Err(DbError::new(
                ErrorCode::ClusterNotReady,
                "partitions are moving to an added node group; change the schema once they have (`latsdb mgm nodegroup status`)",
            ));
        }
        if state.stopped.is_some() {
            return Err(DbError::new(
                ErrorCode::NodeUnavailable,
                "the management server lost its connection to every data node; they may still be running and connect again on their own: retry the schema change in a few seconds",
            ));
        }
        // A change reaches the data nodes through their connections to
        // this server: a running node without one would miss it and go on
        // with the old definition (a stopped node gets the schema when it
        // starts again).
        let detached = state
            .layout
            .datanodes
            .iter()
            .find(|d| state.layout.takes_writes(d.node_id) && !state.links.contains_key(&d.node_id));
        if let Some(d) = detached {
            return Err(DbError::new(
                ErrorCode::NodeUnavailable,
                format!(
                    "data node {} is running but not connected to the management server (it connects again on its own, or the other data nodes remove it if it is gone); retry the schema change in a few seconds",
                    d.node_id
                ),
            ));
        }
        Ok(())
    }

    /// The configuration as it is now.
    fn config(&self) -> Arc<ClusterConfig> {
        self.config.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Records a cluster event of this server's (and prints it).
    fn event(&self, severity: Severity, text: impl std::fmt::Display) {
        self.record_event(severity, "mgmd", &text.to_string());
    }

    fn record_event(&self, severity: Severity, source: &str, text: &str) {
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let event = self.events.lock().unwrap_or_else(|p| p.into_inner()).record(unix_ms, severity, source, text);
        let prefix = if severity == Severity::Info { String::new() } else { format!("{}: ", severity.name()) };
        log(&event.source, format!("{prefix}{}", event.text));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock is a bug that already stopped a task;
        // the state itself stays consistent (every update is a single step).
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn serve(self: Arc<Self>, stream: TcpStream) {
        let peer_ip = stream.peer_addr().ok().map(|a| a.ip());
        let refusal = |id, e| proto::frame(id, &MgmResponse::Error(e));
        let link = match latsdb_net::accept_link(stream, self.tls.as_deref(), refusal).await {
            Ok(link) => link,
            Err(why) => {
                log("mgmd", format!("refused a connection: {why}"));
                return;
            }
        };
        let identity = link.peer_identity();
        let (r, mut w) = link.into_split();
        let mut reader = FrameReader::new(r, self.config().cluster.max_frame_bytes);
        let mut copies = copies::CopyOwner::new(self.clone());
        loop {
            let (id, request) = match reader.next().await {
                Ok(Some((id, body))) => match proto::decode_body::<MgmRequest>(body) {
                    Ok(req) => (id, req),
                    Err(e) => {
                        let _ = w.write_all(&proto::frame(id, &MgmResponse::Error(e))).await;
                        continue;
                    }
                },
                Ok(None) => return,
                Err(FrameError::TooLarge { request_id, len, max }) => {
                    let e = DbError::new(
                        ErrorCode::FrameTooLarge,
                        format!("request of {len} bytes exceeds the {max}-byte limit"),
                    );
                    let _ = w.write_all(&proto::frame(request_id, &MgmResponse::Error(e))).await;
                    return;
                }
                Err(FrameError::Io(_)) => return,
            };
            if let Err(e) = self.authorize(&request, identity.as_ref(), peer_ip) {
                log("mgmd", e.message.clone());
                let _ = w.write_all(&proto::frame(id, &MgmResponse::Error(e))).await;
                return;
            }
            if let MgmRequest::RegisterDataNode { node_id, pid, process, protocol } = request {
                // The connection now belongs to the data node's lifecycle.
                self.register(id, node_id, (pid, process), protocol, reader, w).await;
                return;
            }
            if let MgmRequest::ReattachDataNode { node_id, pid, process, protocol, layout } = request {
                self.reattach(id, (node_id, pid, process, protocol), layout, reader, w).await;
                return;
            }
            let shutdown = matches!(request, MgmRequest::Shutdown);
            let copy = copies::CopyStep::of(&request);
            let response = match self.handle(request).await {
                Ok(r) => r,
                Err(e) => MgmResponse::Error(e),
            };
            copies.follow(copy, &response);
            if w.write_all(&proto::frame(id, &response)).await.is_err() {
                return;
            }
            if shutdown {
                self.shutdown.notify_one();
                return;
            }
        }
    }

    /// With TLS, what only a data node may say (its lifecycle, its durable
    /// epoch, membership votes) needs a data node's certificate made for
    /// the connection's source address; anything else any certificate of
    /// the cluster's CA may ask (the handshake checked the CA).
    fn authorize(
        &self,
        request: &MgmRequest,
        identity: Option<&latsdb_net::tls::PeerIdentity>,
        ip: Option<std::net::IpAddr>,
    ) -> Result<()> {
        let Some(kind) = request.data_node_only() else { return Ok(()) };
        latsdb_net::tls::check_data_node(self.tls.as_deref(), identity, ip).map_err(|why| {
            let from = ip.map_or("?".to_string(), |ip| ip.to_string());
            DbError::new(ErrorCode::AccessDenied, format!("refused {kind} from {from}: {why}"))
        })
    }

    /// Keeps the arbitrator's votes on disk (synced) when this server has a
    /// data folder.
    fn keep_votes(&self, arbiter: &Arbiter) -> Result<()> {
        match &self.data_dir {
            Some(dir) => state::write_votes(dir, arbiter),
            None => Ok(()),
        }
    }

    /// Writes the schema, durable epoch and last view (atomically: a
    /// temporary file, synced, renamed over the old one).
    fn persist(&self) -> Result<()> {
        let Some(dir) = &self.data_dir else { return Ok(()) };
        // Two writers of the temporary file would rename it from under
        // each other; the later snapshot is taken under the lock, so the
        // file ends with the newest state.
        let _writing = self.persist_lock.lock().unwrap_or_else(|p| p.into_inner());
        let snapshot = {
            let state = self.lock();
            Persisted {
                tables: state.tables.clone(),
                next_table_id: state.next_table_id,
                durable_epoch: state.layout.durable_epoch,
                last_view: state.last_view.clone(),
                last_view_number: state.last_view_number,
            }
        };
        state::write_state(dir, &snapshot)
    }

    async fn handle(self: &Arc<Self>, request: MgmRequest) -> Result<MgmResponse> {
        if changed_table(&request).is_some_and(|(_, table)| latsdb_types::schema::is_hidden_name(table)) {
            return Err(DbError::bad_request(
                "hidden tables (of unique indexes, or an ALTER TABLE's copy) change only with their tables; change the table or drop the index",
            ));
        }
        match request {
            MgmRequest::GetLayout => Ok(MgmResponse::Layout(self.lock().layout.clone())),
            MgmRequest::ListTables => Ok(MgmResponse::Tables(self.lock().tables.clone())),
            MgmRequest::GetTable { database, name } => self.find_table(&database, &name).map(MgmResponse::Table),
            MgmRequest::CreateTable(_)
            | MgmRequest::DropTable { .. }
            | MgmRequest::CreateIndex { .. }
            | MgmRequest::DropIndex { .. }
            | MgmRequest::AddColumns { .. }
            | MgmRequest::ChangeColumns { .. }
            | MgmRequest::RenameTable { .. } => self.change_schema(request).await,
            MgmRequest::ReportMemory => self.report_memory().await,
            MgmRequest::Shutdown => self.shutdown_nodes().await,
            MgmRequest::Member { from, msg } => Ok(MgmResponse::Member(self.arbitrate(from, msg))),
            MgmRequest::EpochDurable { epoch } => self.record_durable(epoch),
            MgmRequest::DataNodeSynced { node_id } => self.admit(node_id).await,
            MgmRequest::StopNode { node_id } => self.stop_node(node_id).await,
            MgmRequest::StartNode { node_id, initial } => self.start_node(node_id, initial),
            MgmRequest::TakeStartRequests { only } => {
                let mut state = self.lock();
                let (taken, kept) = std::mem::take(&mut state.start_requests)
                    .into_iter()
                    .partition(|(node, _)| only.is_none_or(|n| n == *node));
                state.start_requests = kept;
                debug_assert!(
                    state.start_requests.iter().all(|(node, _)| only.is_some_and(|n| n != *node)),
                    "a request the process manager asked for was left queued"
                );
                Ok(MgmResponse::StartRequests(taken))
            }
            MgmRequest::ReportEvent { severity, source, text } => {
                self.record_event(severity, &source, &text);
                Ok(MgmResponse::Done)
            }
            MgmRequest::GetClusterLog { last } => {
                let events = self.events.lock().unwrap_or_else(|p| p.into_inner());
                Ok(MgmResponse::ClusterLog(events.last(last as usize)))
            }
            MgmRequest::BackupStart => self.start_backup(),
            MgmRequest::BackupStatus { id } => self.backup_status(id, false),
            MgmRequest::BackupList => self.backup_status(None, true),
            MgmRequest::BackupAbort { id } => self.abort_backup(id),
            MgmRequest::Report => Ok(MgmResponse::Report(self.metrics_text())),
            MgmRequest::AddNodeGroups { config } => self.add_node_groups(&config).await,
            MgmRequest::CopyTableBegin { database, table, version, spec, indexes } => {
                self.begin_copy(&database, &table, version, spec, indexes).await
            }
            MgmRequest::CopyTableFinish { table } => self.finish_copy(table).await,
            MgmRequest::CopyTableAbort { table } => self.abort_copy(table).await,
            MgmRequest::NodeGroups => self.node_group_status(),
            MgmRequest::RegisterDataNode { .. }
            | MgmRequest::ReattachDataNode { .. }
            | MgmRequest::DataNodeStarted { .. }
            | MgmRequest::DataNodeReady { .. } => {
                Err(DbError::bad_request("data-node registration must be the first request on its connection"))
            }
        }
    }

    /// A schema change: one at a time (`schema_lock`), each applied to
    /// every data node before it is answered.
    async fn change_schema(&self, request: MgmRequest) -> Result<MgmResponse> {
        let _guard = self.schema_lock.lock().await;
        self.refuse_schema_change_now()?;
        // Under the lock: a copy that begins waits for it too.
        if let Some((database, table)) = changed_table(&request) {
            self.refuse_while_copied(database, table)?;
        }
        let answer = self.apply_schema_change(request).await?;
        self.link_references(answer).await
    }

    /// One schema change (the schema lock held).
    async fn apply_schema_change(&self, request: MgmRequest) -> Result<MgmResponse> {
        match request {
            MgmRequest::CreateTable(spec) => {
                if latsdb_types::schema::is_hidden_name(&spec.name) {
                    return Err(reserved_table_name(&spec.name));
                }
                self.create_table(spec).await.map(MgmResponse::Table)
            }
            MgmRequest::DropTable { database, name } => {
                let def = self.find_table(&database, &name)?;
                self.drop_table(&def).await?;
                for index in def.unique_indexes() {
                    self.drop_unique_table(&def, index).await?;
                }
                Ok(MgmResponse::Done)
            }
            MgmRequest::CreateIndex { database, table, index, columns, unique } => {
                let def = self.find_table(&database, &table)?.with_index(&index, &columns, unique)?;
                if !unique {
                    return self.alter(def).await.map(MgmResponse::Table);
                }
                // The hidden table first: once the index is in the table's
                // definition, writers maintain it.
                let hidden = self.create_table(def.unique_table_spec(def.index(&index)?)).await?;
                match self.alter(def).await {
                    Ok(def) => Ok(MgmResponse::Table(def)),
                    Err(e) => {
                        let _ = self.drop_table(&hidden).await;
                        Err(e)
                    }
                }
            }
            MgmRequest::DropIndex { database, table, index } => {
                let old = self.find_table(&database, &table)?;
                let def = self.alter(old.without_index(&index)?).await?;
                if let Some(dropped) = old.unique_indexes().find(|i| i.name.eq_ignore_ascii_case(&index)) {
                    self.drop_unique_table(&old, dropped).await?;
                }
                Ok(MgmResponse::Table(def))
            }
            MgmRequest::AddColumns { database, table, columns, fill } => {
                let def = self.find_table(&database, &table)?.with_columns(&columns, &fill)?;
                let added: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
                self.event(
                    Severity::Info,
                    format!("adding column(s) {} to table {}", added.join(", "), def.qualified_name()),
                );
                self.alter(def).await.map(MgmResponse::Table)
            }
            MgmRequest::ChangeColumns { database, table, changes } => {
                let def = self.find_table(&database, &table)?.with_changed_columns(&changes)?;
                self.event(
                    Severity::Info,
                    format!("changing column(s) of table {}: {changes:?}", def.qualified_name()),
                );
                self.alter(def).await.map(MgmResponse::Table)
            }
            MgmRequest::RenameTable { database, table, new_database, new_name } => {
                if latsdb_types::schema::is_hidden_name(&new_name) {
                    return Err(reserved_table_name(&new_name));
                }
                let old = self.find_table(&database, &table)?;
                if self.find_table(&new_database, &new_name).is_ok() {
                    return Err(DbError::new(
                        ErrorCode::TableExists,
                        format!("table {new_database}.{new_name} already exists"),
                    ));
                }
                if new_database != database && old.has_unique_indexes() {
                    return Err(DbError::bad_request(format!(
                    "table {} has UNIQUE indexes, so it cannot move to another database; drop them first, or rename it within {database}",
                    old.qualified_name()
                )));
                }
                let def = old.renamed(&new_database, &new_name)?;
                self.event(
                    Severity::Info,
                    format!("renaming table {} to {}", old.qualified_name(), def.qualified_name()),
                );
                self.alter(def).await.map(MgmResponse::Table)
            }
            other => Err(DbError::internal(format!("{other:?} is not a schema change"))),
        }
    }

    /// Rows and data memory of every shard of every data node.
    async fn report_memory(&self) -> Result<MgmResponse> {
        let mut nodes = Vec::new();
        for (node, reply) in self.send_all(NodeCommand::ReportMemory).await {
            match reply {
                Ok(NodeReply::Memory(shards)) => nodes.push((node, shards)),
                Ok(NodeReply::Error(e)) | Err(e) => return Err(e),
                Ok(other) => return Err(DbError::internal(format!("data node {node} answered {other:?}"))),
            }
        }
        nodes.sort_by_key(|(n, _)| *n);
        Ok(MgmResponse::Memory(nodes))
    }

    /// Asks the started data nodes for their usage every `USAGE_INTERVAL`
    /// and logs the alarms it raises or clears (`alarms.rs`).
    async fn watch_usage(self: Arc<Self>) {
        let mut alarms = alarms::Alarms::default();
        loop {
            tokio::time::sleep(USAGE_INTERVAL).await;
            let mut usage = Vec::new();
            for (node, reply) in self.send_all(NodeCommand::ReportMemory).await {
                // A node that does not answer is reported by the heartbeats.
                if let Ok(NodeReply::Memory(shards)) = reply {
                    for (severity, text) in alarms.check(node, &shards) {
                        self.event(severity, text);
                    }
                    usage.push((node, shards));
                }
            }
            usage.sort_by_key(|(node, _)| *node);
            *self.usage.lock().unwrap_or_else(|p| p.into_inner()) = usage;
        }
    }

    /// `GET /metrics`: the layout, the cluster log's counts and the last
    /// usage poll, rendered.
    fn metrics_text(&self) -> String {
        let (layout, formed, node_starts) = {
            let state = self.lock();
            (state.layout.clone(), state.formed, state.node_starts.clone())
        };
        let events = self.events.lock().unwrap_or_else(|p| p.into_inner()).counts();
        let usage = self.usage.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let backups = self.backup_counts();
        metrics::render(&metrics::Snapshot {
            layout: &layout,
            formed,
            events,
            usage: &usage,
            backups,
            node_starts: &node_starts,
        })
    }

    /// Tells every data node to stop, waiting at most 5 s for each.
    async fn shutdown_nodes(&self) -> Result<MgmResponse> {
        let links: Vec<_> = self.lock().links.values().map(|l| l.commands.clone()).collect();
        for link in links {
            let (tx, rx) = oneshot::channel();
            if link.send((NodeCommand::Stop, tx)).is_ok() {
                let _ = tokio::time::timeout(Duration::from_secs(5), rx).await;
            }
        }
        Ok(MgmResponse::Done)
    }

    /// The data nodes declared `epoch` durable: kept in the layout (and on
    /// disk) when it is news.
    fn record_durable(&self, epoch: latsdb_types::proto::CommitEpoch) -> Result<MgmResponse> {
        let advanced = {
            let mut state = self.lock();
            let advanced = epoch > state.layout.durable_epoch;
            if advanced {
                state.layout.durable_epoch = epoch;
            }
            advanced
        };
        if advanced {
            self.persist()?;
        }
        Ok(MgmResponse::Done)
    }

    fn find_table(&self, database: &str, name: &str) -> Result<TableDef> {
        self.lock()
            .tables
            .iter()
            .find(|t| t.database == database && t.name == name)
            .cloned()
            .ok_or_else(|| DbError::new(ErrorCode::UnknownTable, format!("table {database}.{name} does not exist")))
    }

    /// Creates a table (the caller holds the schema lock).
    async fn create_table(&self, spec: TableSpec) -> Result<TableDef> {
        let (id, partitions) = {
            let state = self.lock();
            if let Some(missing) = state.layout.datanodes.iter().find(|d| d.status != NodeStatus::Started) {
                return Err(DbError::new(
                    ErrorCode::ClusterNotReady,
                    format!(
                        "data node {} is not started; tables can be created once every data node is up",
                        missing.node_id
                    ),
                ));
            }
            if state.tables.iter().any(|t| t.database == spec.database && t.name == spec.name) {
                return Err(DbError::new(
                    ErrorCode::TableExists,
                    format!("table {}.{} already exists", spec.database, spec.name),
                ));
            }
            let partitions = if spec.partitions > 0 {
                spec.partitions
            } else if self.config().cluster.partitions_per_table > 0 {
                self.config().cluster.partitions_per_table
            } else {
                // Enough partitions that every shard of every node holds several.
                let shards: usize = state.layout.datanodes.iter().map(|d| d.shards.len().max(1)).sum();
                (2 * shards as u32).max(8)
            };
            (state.next_table_id, partitions)
        };
        let def = TableDef::from_spec(&spec, id, partitions)?;
        if let Err(e) = self.apply_everywhere(SchemaChange::CreateTable(def.clone())).await {
            let _ = self.apply_everywhere(SchemaChange::DropTable(def.id)).await;
            return Err(e);
        }
        let mut state = self.lock();
        state.next_table_id += 1;
        state.tables.push(def.clone());
        drop(state);
        self.persist()?;
        self.event(
            Severity::Info,
            format!("created table {} (id {}, {} partitions)", def.qualified_name(), def.id, def.partitions),
        );
        Ok(def)
    }

    async fn drop_table(&self, def: &TableDef) -> Result<()> {
        self.apply_everywhere(SchemaChange::DropTable(def.id)).await?;
        self.lock().tables.retain(|t| t.id != def.id);
        self.persist()?;
        self.event(Severity::Info, format!("dropped table {}", def.qualified_name()));
        Ok(())
    }

    async fn drop_unique_table(&self, table: &TableDef, index: &latsdb_types::schema::IndexDef) -> Result<()> {
        let name = latsdb_types::schema::unique_table_name(table.id, index.id);
        match self.find_table(&table.database, &name) {
            Ok(hidden) => self.drop_table(&hidden).await,
            // Never created (an older definition) or already gone.
            Err(e) if e.code == ErrorCode::UnknownTable => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn alter(&self, def: TableDef) -> Result<TableDef> {
        self.apply_everywhere(SchemaChange::AlterTable(def.clone())).await?;
        let mut state = self.lock();
        if let Some(t) = state.tables.iter_mut().find(|t| t.id == def.id) {
            *t = def.clone();
        }
        drop(state);
        self.persist()?;
        Ok(def)
    }

    /// Sends a command to every started data node and waits for all answers.
    async fn send_all(&self, command: NodeCommand) -> Vec<(NodeId, Result<NodeReply>)> {
        let nodes: Vec<NodeId> = self.lock().links.keys().copied().collect();
        self.send_to(&nodes, command).await
    }

    /// Sends a command to these data nodes and waits for all answers (a
    /// node without a connection answers that it is unavailable).
    async fn send_to(&self, nodes: &[NodeId], command: NodeCommand) -> Vec<(NodeId, Result<NodeReply>)> {
        let mut links: Vec<(NodeId, mpsc::UnboundedSender<Command>)> = Vec::new();
        let mut results = Vec::new();
        {
            let state = self.lock();
            for node in nodes {
                match state.links.get(node) {
                    Some(l) => links.push((*node, l.commands.clone())),
                    None => results.push((
                        *node,
                        Err(DbError::new(ErrorCode::NodeUnavailable, format!("data node {node} is not connected"))),
                    )),
                }
            }
        }
        let mut waits = Vec::new();
        for (node, link) in links {
            let (tx, rx) = oneshot::channel();
            if link.send((command.clone(), tx)).is_ok() {
                waits.push((node, rx));
            }
        }
        for (node, rx) in waits {
            let r = match tokio::time::timeout(NODE_COMMAND_TIMEOUT, rx).await {
                Ok(Ok(r)) => r,
                Ok(Err(_)) => Err(DbError::new(ErrorCode::NodeUnavailable, format!("data node {node} disconnected"))),
                Err(_) => Err(DbError::new(
                    ErrorCode::Timeout,
                    format!("data node {node} did not answer within {NODE_COMMAND_TIMEOUT:?}"),
                )),
            };
            results.push((node, r));
        }
        results
    }

    async fn apply_everywhere(&self, change: SchemaChange) -> Result<()> {
        for (node, result) in self.send_all(NodeCommand::ApplySchema(change)).await {
            match result {
                Ok(NodeReply::Done) => {}
                Ok(NodeReply::Error(e)) | Err(e) => {
                    return Err(DbError::new(
                        e.code,
                        format!("data node {node} could not apply the schema change: {}", e.message),
                    ))
                }
                Ok(other) => {
                    return Err(DbError::internal(format!("data node {node} answered a schema change with {other:?}")))
                }
            }
        }
        Ok(())
    }

    fn broadcast_layout(&self) {
        let (layout, links) = {
            let state = self.lock();
            (state.layout.clone(), state.links.values().map(|l| l.commands.clone()).collect::<Vec<_>>())
        };
        for link in links {
            let (tx, _rx) = oneshot::channel();
            let _ = link.send((NodeCommand::SetLayout(layout.clone()), tx));
        }
    }

    /// Queues a start of a stopped data node for the process manager.
    fn start_node(&self, node_id: NodeId, initial: bool) -> Result<MgmResponse> {
        let mut state = self.lock();
        let status = state.layout.datanode(node_id).map(|d| d.status).ok_or_else(|| {
            DbError::bad_request(format!("node id {node_id} is not a data node in the cluster configuration"))
        })?;
        if status != NodeStatus::NotStarted || state.registering.contains(&node_id) {
            return Err(DbError::bad_request(format!("data node {node_id} is already running")));
        }
        // Before the cluster formed, the request goes to the node's angel
        // too (one that gave up on a node dying at start waits for it).
        state.start_requests.retain(|(n, _)| *n != node_id);
        state.start_requests.push((node_id, initial));
        Ok(MgmResponse::Done)
    }

    /// Stops one data node, if its node group keeps a started replica.
    async fn stop_node(&self, node_id: NodeId) -> Result<MgmResponse> {
        let link = {
            let state = self.lock();
            let d = state.layout.datanode(node_id).ok_or_else(|| {
                DbError::bad_request(format!("node id {node_id} is not a data node in the cluster configuration"))
            })?;
            if d.status == NodeStatus::Started {
                let others = state
                    .layout
                    .group_nodes(d.node_group)
                    .iter()
                    .any(|o| o.node_id != node_id && o.status == NodeStatus::Started);
                if !others {
                    return Err(DbError::new(
                        ErrorCode::ClusterNotReady,
                        format!(
                            "data node {node_id} is the last started replica of node group {}: stopping it would make its partitions unavailable (use `latsdb mgm shutdown` to stop the whole cluster)",
                            d.node_group
                        ),
                    ));
                }
            }
            state.links.get(&node_id).map(|l| l.commands.clone())
        };
        let Some(link) = link else {
            return Err(DbError::bad_request(format!("data node {node_id} is not running")));
        };
        let (tx, rx) = oneshot::channel();
        link.send((NodeCommand::Stop, tx))
            .map_err(|_| DbError::bad_request(format!("data node {node_id} is not running")))?;
        let _ = tokio::time::timeout(NODE_COMMAND_TIMEOUT, rx).await;
        self.event(Severity::Info, format!("data node {node_id} stopped on request"));
        Ok(MgmResponse::Done)
    }

    /// A restarting node caught up: the president of the view (the lowest
    /// started node) proposes a view that admits it.
    async fn admit(&self, node_id: NodeId) -> Result<MgmResponse> {
        let president = {
            let state = self.lock();
            match state.layout.datanode(node_id).map(|d| d.status) {
                Some(NodeStatus::Starting) => {}
                Some(NodeStatus::Started) => return Ok(MgmResponse::Done),
                _ => {
                    return Err(DbError::new(
                        ErrorCode::ClusterNotReady,
                        format!("data node {node_id} is not restarting; start it again"),
                    ))
                }
            }
            let mut started: Vec<NodeId> = state
                .layout
                .datanodes
                .iter()
                .filter(|d| d.status == NodeStatus::Started && state.links.contains_key(&d.node_id))
                .map(|d| d.node_id)
                .collect();
            started.sort_unstable();
            started.first().and_then(|n| state.links.get(n).map(|l| (*n, l.commands.clone())))
        };
        let Some((president, link)) = president else {
            return Err(DbError::new(
                ErrorCode::ClusterNotReady,
                format!("no started data node can admit data node {node_id}; the cluster is not running"),
            ));
        };
        let (tx, rx) = oneshot::channel();
        link.send((NodeCommand::Admit(node_id), tx))
            .map_err(|_| DbError::new(ErrorCode::NodeUnavailable, format!("data node {president} disconnected")))?;
        match tokio::time::timeout(NODE_COMMAND_TIMEOUT, rx).await {
            Ok(Ok(Ok(NodeReply::Done))) => {
                self.event(
                    Severity::Info,
                    format!("data node {president} proposes a view that admits data node {node_id}"),
                );
                Ok(MgmResponse::Done)
            }
            Ok(Ok(Ok(NodeReply::Error(e)))) | Ok(Ok(Err(e))) => Err(e),
            _ => Err(DbError::new(
                ErrorCode::NodeUnavailable,
                format!("data node {president} did not answer the request to admit data node {node_id}; retry"),
            )),
        }
    }

    /// A membership message from a data node to the arbitrator. A view a
    /// president installed becomes the layout clients read.
    /// The arbitrator answers only once its votes are on disk: one that
    /// cannot keep them does not vote (it is a voter that does not answer).
    fn arbitrate(&self, from: NodeId, msg: latsdb_types::proto::MemberMsg) -> Option<latsdb_types::proto::MemberMsg> {
        let mut state = self.lock();
        let votes_before = state.arbiter.clone();
        let before = state.arbiter.view().0;
        let answer = state.arbiter.on_message(msg);
        if state.arbiter != votes_before {
            if let Err(e) = self.keep_votes(&state.arbiter) {
                state.arbiter = votes_before;
                drop(state);
                self.event(Severity::Alert, format!("the arbitrator did not answer data node {from}: {}", e.message));
                return None;
            }
        }
        let (epoch, members) = state.arbiter.view();
        // (Before the cluster forms, a late message of the last run's
        // processes may still move the arbiter; the view the layout names
        // starts with the run's first view.)
        if epoch > before && state.formed {
            let members = members.to_vec();
            state.layout.restrict_to_view(&members);
            state.layout.view = epoch;
            self.settle(&mut state);
            state.layout.version += 1;
            drop(state);
            self.event(
                Severity::Info,
                format!("view {epoch} (reported by data node {from}): live data nodes {members:?}"),
            );
            // Restarting nodes are no members: they learn views from here.
            self.broadcast_layout();
        }
        answer
    }
}
