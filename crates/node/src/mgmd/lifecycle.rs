//! A data node's lifecycle as the management server sees it: it
//! registers, is planned a start (the cluster's first, a system restart,
//! or a node restart), is marked started and served commands until its
//! connection ends; a running node whose connection broke attaches again.

use super::{Command, Mgmd, NodeLink, State, StoppedCluster, NODE_COMMAND_TIMEOUT};
use latsdb_cluster::membership::Arbiter;
use latsdb_net::{FrameReader, RpcConn};
use latsdb_types::config::ClusterConfig;
use latsdb_types::proto::{
    self, ClusterLayout, CommitEpoch, MgmRequest, MgmResponse, NodeCommand, NodeId, NodeReply, NodeStatus, Severity,
    PROTOCOL_VERSION,
};
use latsdb_types::{DbError, ErrorCode, Result};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

impl Mgmd {
    pub(super) async fn register(
        self: Arc<Self>,
        request_id: u64,
        wanted: Option<NodeId>,
        (pid, process): (u32, u64),
        protocol: u32,
        reader: FrameReader<latsdb_net::LinkReader>,
        mut w: latsdb_net::LinkWriter,
    ) {
        let assigned = check_speaks(protocol, process).and_then(|()| self.assign_node_id(wanted));
        let node_id = match assigned {
            Ok(id) => id,
            Err(e) => {
                let _ = w.write_all(&proto::frame(request_id, &MgmResponse::Error(e))).await;
                return;
            }
        };
        let config = self.config();
        let section = config.datanodes.iter().find(|d| d.node_id == node_id).cloned();
        let Some(section) = section else {
            self.lock().registering.remove(&node_id);
            return;
        };
        let threads = section.threads.unwrap_or(config.datanode_defaults.threads);
        let data_memory_mb = section.data_memory_mb.unwrap_or(config.datanode_defaults.data_memory_mb);
        let on_host: Vec<NodeId> =
            config.datanodes.iter().filter(|d| d.host == section.host).map(|d| d.node_id).collect();
        let host_index = on_host.iter().position(|&id| id == node_id).unwrap_or(0) as u16;
        let reply = MgmResponse::Registered {
            node_id,
            host: section.host.clone(),
            port: section.port,
            threads,
            data_memory_mb,
            disk_page_cache_mb: config.datanode_defaults.disk_page_cache_mb,
            tablespace_mb: config.datanode_defaults.tablespace_mb,
            redo_limit_mb: config.datanode_defaults.redo_limit_mb,
            disk_direct_io: config.datanode_defaults.disk_direct_io,
            nodes_on_host: on_host.len() as u16,
            host_index,
            cpu_bind: config.datanode_defaults.cpu_bind,
            cpus: section.cpus.clone(),
            idle_poll: config.datanode_defaults.idle_poll,
            metrics_port: config.metrics_port_of(&section),
        };
        if w.write_all(&proto::frame(request_id, &reply)).await.is_err() {
            self.lock().registering.remove(&node_id);
            return;
        }
        let mut conn = RpcConn::from_parts(reader, w, &format!("data node {node_id}"), NODE_COMMAND_TIMEOUT);
        let started = tokio::time::timeout(Duration::from_secs(60), conn.receive::<MgmRequest>()).await;
        let (id, shards, recovery) = match started {
            Ok(Ok(Some((id, MgmRequest::DataNodeStarted { node_id: n, shards, recovery }))))
                if n == node_id && !shards.is_empty() =>
            {
                (id, shards, recovery)
            }
            _ => {
                self.event(
                    Severity::Warning,
                    format!("data node {node_id} registered but did not start; releasing its node id"),
                );
                self.lock().registering.remove(&node_id);
                return;
            }
        };
        // The node sends nothing while it waits for its plan (for the
        // cluster to form, perhaps minutes): a read that ends means it died,
        // and its node id and disk report go, so that a new process of it
        // (its angel's restart) can take them.
        let planned = tokio::select! {
            plan = self.start_plan(node_id, recovery) => Some(plan),
            _ = conn.receive::<MgmRequest>() => None,
        };
        let Some(planned) = planned else {
            self.event(
                Severity::Warning,
                format!("data node {node_id} went away while it waited for the cluster to form; releasing its node id"),
            );
            let mut state = self.lock();
            state.registering.remove(&node_id);
            if !state.formed {
                state.recovery.remove(&node_id);
            }
            return;
        };
        let plan = match planned {
            Ok(plan) => plan,
            Err(e) => {
                self.event(Severity::Warning, format!("data node {node_id} cannot start: {}", e.message));
                self.lock().registering.remove(&node_id);
                let _ = conn.send_with_id(id, &MgmResponse::Error(e)).await;
                return;
            }
        };
        let (layout, tables) = {
            let state = self.lock();
            (state.layout.clone(), state.tables.clone())
        };
        let join = plan.join;
        if conn.send_with_id(id, &MgmResponse::Started { layout, tables, start: plan }).await.is_err() {
            self.lock().registering.remove(&node_id);
            return;
        }
        // The node restores its data; it is started once it says so.
        let ready = tokio::time::timeout(Duration::from_secs(3600), conn.receive::<MgmRequest>()).await;
        let id = match ready {
            Ok(Ok(Some((id, MgmRequest::DataNodeReady { node_id: n })))) if n == node_id => id,
            _ => {
                self.event(
                    Severity::Warning,
                    format!("data node {node_id} did not finish starting; releasing its node id"),
                );
                self.lock().registering.remove(&node_id);
                return;
            }
        };
        let (tx, rx) = mpsc::unbounded_channel::<Command>();
        let generation = self.mark_started(node_id, join, &shards, (pid, process), tx);
        if conn.send_with_id(id, &MgmResponse::Done).await.is_err() {
            self.node_lost(node_id, generation);
            return;
        }
        if join {
            self.event(Severity::Info, format!(
                    "data node {node_id} is restarting (pid {pid}, shards {}): it copies its partitions from the primaries",
                    shards.join(", ")
                ),
            );
        } else {
            self.event(
                Severity::Info,
                format!("data node {node_id} started (pid {pid}, shards {})", shards.join(", ")),
            );
        }
        self.broadcast_layout();
        self.serve_node(node_id, &mut conn, rx).await;
        self.node_lost(node_id, generation);
    }

    /// A running data node that lost its connection to this server
    /// connects again: once this server still counts its process as
    /// running (or resumes the cluster it took for stopped), the
    /// connection carries commands to it again, as after its start.
    pub(super) async fn reattach(
        self: Arc<Self>,
        request_id: u64,
        (node_id, pid, process, protocol): (NodeId, u32, u64, u32),
        layout: ClusterLayout,
        reader: FrameReader<latsdb_net::LinkReader>,
        mut w: latsdb_net::LinkWriter,
    ) {
        let (tx, rx) = mpsc::unbounded_channel::<Command>();
        let (generation, resumed) = match self.attach_running(node_id, (pid, process), protocol, layout, tx) {
            Ok(attached) => attached,
            Err(e) => {
                // The node asks again every 2 s: the cluster log says it once.
                if self.lock().reattach_refused.insert((node_id, pid)) {
                    self.event(
                        Severity::Warning,
                        format!("refused data node {node_id} connecting again: {}", e.message),
                    );
                }
                let _ = w.write_all(&proto::frame(request_id, &MgmResponse::Error(e))).await;
                return;
            }
        };
        if resumed {
            if let Err(e) = self.persist() {
                self.event(Severity::Alert, format!("cannot save the state: {}", e.message));
            }
        }
        if w.write_all(&proto::frame(request_id, &MgmResponse::Done)).await.is_err() {
            self.node_lost(node_id, generation);
            return;
        }
        self.event(Severity::Info, format!("data node {node_id} (pid {pid}) is connected again"));
        let mut conn = RpcConn::from_parts(reader, w, &format!("data node {node_id}"), NODE_COMMAND_TIMEOUT);
        self.broadcast_layout();
        self.serve_node(node_id, &mut conn, rx).await;
        self.node_lost(node_id, generation);
    }

    /// Gives a running data node's process its command link again (a new
    /// generation, which this returns with whether the cluster taken for
    /// stopped was resumed). An older link of it, if this server has not
    /// yet seen it break, is replaced: its end is ignored (`node_lost`).
    fn attach_running(
        &self,
        node_id: NodeId,
        (pid, process): (u32, u64),
        protocol: u32,
        layout: ClusterLayout,
        commands: mpsc::UnboundedSender<Command>,
    ) -> Result<(u64, bool)> {
        check_speaks(protocol, process)?;
        let mut state = self.lock();
        let listed = |layout: &ClusterLayout| {
            layout.datanode(node_id).is_some_and(|d| d.process == process && d.status.takes_writes())
        };
        if state.may_adopt && !state.formed && state.stopped.is_none() && listed(&layout) {
            // This server restarted while the cluster ran: the node's
            // layout is the running cluster's, if it is this cluster's.
            let ids = |l: &ClusterLayout| l.datanodes.iter().map(|d| d.node_id).collect::<Vec<_>>();
            if layout.cluster_name == state.layout.cluster_name && ids(&layout) == ids(&state.layout) {
                let ever_started = layout.writer_nodes().into_iter().collect();
                let layout = running_layout(&state.layout, &layout);
                state.stopped = Some(StoppedCluster { layout, ever_started });
            }
        }
        let mut resumed = false;
        if !state.formed && state.stopped.as_ref().is_some_and(|s| listed(&s.layout)) {
            if let Some(stopped) = state.stopped.take() {
                self.resume(&mut state, stopped);
                resumed = true;
            }
        }
        if !state.formed || !listed(&state.layout) {
            let why = if state.formed {
                "the running cluster no longer lists this process (the other data nodes removed it, or a new process of the node started)"
            } else {
                "this management server does not know the running cluster (it restarted, or a system restart began)"
            };
            return Err(DbError::new(
                ErrorCode::ClusterNotReady,
                format!("data node {node_id} (pid {pid}) cannot connect again: {why}; it joins only by a node restart"),
            ));
        }
        let generation = state.next_generation;
        state.next_generation += 1;
        super::copies::send_fences(&state, &commands);
        state.links.insert(node_id, NodeLink { commands, generation });
        debug_assert!(state.links.len() <= state.layout.datanodes.len(), "more command links than data nodes");
        debug_assert!(state.formed && state.stopped.is_none(), "a node attached to a cluster taken for stopped");
        Ok((generation, resumed))
    }

    /// Keeps the votes of an arbitrator that starts at a new view. They
    /// hold no promise yet, so failing to keep them loses nothing a
    /// restarted server could contradict: it would load older votes, which
    /// the running cluster's view replaces (`resume`).
    fn keep_votes_or_warn(&self, arbiter: &Arbiter) {
        if let Err(e) = self.keep_votes(arbiter) {
            self.event(Severity::Warning, format!("the arbitrator's new view is not on disk: {}", e.message));
        }
    }

    /// The cluster taken for stopped is running after all: its layout
    /// comes back (newer than any this server published since), with the
    /// views its data nodes installed meanwhile (the arbiter followed
    /// them) and the nodes whose new process registered meanwhile as not
    /// started (their old process is gone; they join by a node restart).
    fn resume(&self, state: &mut State, stopped: StoppedCluster) {
        debug_assert!(!state.formed, "resuming a cluster that runs");
        let mut layout = stopped.layout;
        layout.version = layout.version.max(state.layout.version) + 1;
        layout.durable_epoch = layout.durable_epoch.max(state.layout.durable_epoch);
        for d in layout.datanodes.iter_mut().filter(|d| state.registering.contains(&d.node_id)) {
            d.status = NodeStatus::NotStarted;
            d.shards.clear();
            d.pid = 0;
            d.process = 0;
        }
        let (view, members) = state.arbiter.view();
        if view > layout.view {
            layout.restrict_to_view(members);
            layout.view = view;
        } else if view < layout.view {
            // This server restarted and its votes (if it kept any) are of
            // an older view: its arbitrator starts at the running
            // cluster's view (a promise for an older view is void).
            let members: Vec<NodeId> =
                layout.datanodes.iter().filter(|d| d.status == NodeStatus::Started).map(|d| d.node_id).collect();
            state.arbiter = Arbiter::new_at(layout.view, members);
            self.keep_votes_or_warn(&state.arbiter);
        }
        state.layout = layout;
        state.ever_started = stopped.ever_started;
        state.recovery.clear();
        state.formed = true;
        self.settle(state);
        debug_assert!(
            state.layout.datanodes.iter().all(|d| !state.registering.contains(&d.node_id) || d.process == 0),
            "a node whose new process registered is listed as running after the resume"
        );
        let view = state.layout.view;
        self.event(
            Severity::Warning,
            format!("the data nodes are connecting again: the cluster never stopped; resumed in view {view}"),
        );
    }

    /// A registered node finished starting: it gets its command link
    /// (numbered by a new generation, which this returns), and the layout
    /// lists it as starting (a node restart: it takes writes while it
    /// catches up) or started. The first view forms once every node of it
    /// is started.
    fn mark_started(
        &self,
        node_id: NodeId,
        join: bool,
        shards: &[String],
        (pid, process): (u32, u64),
        commands: mpsc::UnboundedSender<Command>,
    ) -> u64 {
        let mut state = self.lock();
        state.registering.remove(&node_id);
        let generation = state.next_generation;
        state.next_generation += 1;
        super::copies::send_fences(&state, &commands);
        state.links.insert(node_id, NodeLink { commands, generation });
        state.ever_started.insert(node_id);
        *state.node_starts.entry(node_id).or_default() += 1;
        if let Some(d) = state.layout.datanodes.iter_mut().find(|d| d.node_id == node_id) {
            // A restarting node takes writes while it catches up; the
            // view that admits it makes it started.
            d.status = if join { NodeStatus::Starting } else { NodeStatus::Started };
            d.shards = shards.to_vec();
            d.pid = pid;
            d.process = process;
        }
        self.settle(&mut state);
        state.layout.version += 1;
        let view = view_nodes(&state, &self.config());
        let formed = view.iter().all(|n| state.layout.datanode(*n).is_some_and(|d| d.status == NodeStatus::Started));
        if !state.formed && formed {
            state.formed = true;
            state.stopped = None;
            state.may_adopt = false;
            // The first view is the nodes that formed the cluster, in
            // an epoch after every view of an earlier run.
            // (The arbitrator's votes may know a later view than the one
            // kept on disk: `votes_at_start`.)
            let first = state.last_view_number.max(state.arbiter.view().0).next();
            debug_assert!(first > state.arbiter.view().0, "a first view that does not come after the arbitrator's");
            state.layout.first_view = first;
            state.layout.view = first;
            state.recovery.clear();
            state.arbiter = Arbiter::new_at(first, view.clone());
            self.keep_votes_or_warn(&state.arbiter);
            self.event(
                Severity::Info,
                format!("the cluster has formed: data nodes {view:?} now watch each other (view {first})"),
            );
        }
        generation
    }

    /// Serves commands to a started node, and checks it is alive between
    /// them, until its connection breaks or it stops answering.
    async fn serve_node(&self, node_id: NodeId, conn: &mut RpcConn, mut rx: mpsc::UnboundedReceiver<Command>) {
        let interval = Duration::from_millis(self.config().cluster.heartbeat_interval_ms);
        let deadline = interval * self.config().cluster.heartbeat_missed;
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                command = rx.recv() => {
                    let Some((command, reply)) = command else { break };
                    let answer = conn.call::<NodeCommand, NodeReply>(&command).await;
                    let failed = answer.is_err();
                    let _ = reply.send(answer);
                    if failed {
                        break;
                    }
                }
                _ = ticker.tick() => {
                    // A broken connection fails at once; a hung node times out.
                    match tokio::time::timeout(deadline, conn.call::<NodeCommand, NodeReply>(&NodeCommand::Heartbeat)).await {
                        Ok(Ok(NodeReply::Done)) => {}
                        Ok(Ok(_)) | Ok(Err(_)) => break,
                        Err(_) => {
                            self.event(Severity::Warning, format!("data node {node_id} missed {} heartbeats", self.config().cluster.heartbeat_missed));
                            break;
                        }
                    }
                }
            }
        }
    }

    /// How a starting data node begins. While the cluster is not running,
    /// every node of the last view reports what its disk holds before any
    /// is answered: a system restart restores the latest epoch that every
    /// node of the last view synced, and new commits begin above any epoch
    /// a log holds. A node that had left before the last view waits until
    /// the others formed the cluster and then joins it by a node restart.
    async fn start_plan(
        &self,
        node_id: NodeId,
        recovery: Option<latsdb_types::proto::NodeRecovery>,
    ) -> Result<latsdb_types::proto::StartPlan> {
        let stale = {
            let mut state = self.lock();
            if state.formed {
                return Ok(node_restart_plan(&state, recovery));
            }
            let stale = !state.last_view.is_empty() && !state.last_view.contains(&node_id);
            if !stale {
                state.recovery.insert(node_id, recovery.clone());
            }
            stale
        };
        let deadline = tokio::time::Instant::now() + crate::datanode::FORMATION_WAIT;
        let mut told = false;
        loop {
            {
                let mut state = self.lock();
                if state.formed {
                    // The node had left before the last view: its disk is
                    // older than its peers', so it copies what changed.
                    return Ok(node_restart_plan(&state, recovery));
                }
                let why_waiting = if stale {
                    format!(
                        "data node {node_id} had left before the last view {:?}; it joins by a node restart once they have started",
                        state.last_view
                    )
                } else {
                    let missing: Vec<NodeId> = view_nodes(&state, &self.config())
                        .into_iter()
                        .filter(|n| !state.recovery.contains_key(n))
                        .collect();
                    if missing.is_empty() {
                        let plan = plan_for(&state, node_id)?;
                        let durable = state.layout.durable_epoch;
                        // Every node of the last view started a new process:
                        // the old cluster cannot be resumed any more.
                        state.stopped = None;
                        state.may_adopt = false;
                        drop(state);
                        if let Some(restored) = plan.restore_epoch.filter(|&e| e < durable) {
                            self.event(
                                Severity::Alert,
                                format!("the data nodes' disks hold epochs up to {restored} only, but epoch {durable} was durable: commits of the epochs between are lost (a disk lost synced data)"),
                            );
                        }
                        return Ok(plan);
                    }
                    format!("data node {node_id} waits for data nodes {missing:?} to start")
                };
                if !told {
                    self.event(Severity::Info, why_waiting);
                    told = true;
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(DbError::new(
                    ErrorCode::ClusterNotReady,
                    format!("the data nodes the cluster needs to form did not all start within {} s (every configured one at the first start, every one of the last view at a system restart, whose disks hold the data); start them",
                        crate::datanode::FORMATION_WAIT.as_secs()
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn assign_node_id(&self, wanted: Option<NodeId>) -> Result<NodeId> {
        let mut state = self.lock();
        let free = |state: &State, id: NodeId| {
            state.layout.datanode(id).is_some_and(|d| d.status == NodeStatus::NotStarted)
                && !state.registering.contains(&id)
        };
        let id = match wanted {
            Some(id) => {
                if state.layout.datanode(id).is_none() {
                    return Err(DbError::bad_request(format!(
                        "node id {id} is not a data node in the cluster configuration"
                    )));
                }
                if !free(&state, id) {
                    let pid = state.layout.datanode(id).map_or(0, |d| d.pid);
                    let running = if pid != 0 { format!(" (pid {pid})") } else { String::new() };
                    return Err(DbError::new(
                        ErrorCode::NodeIdInUse,
                        format!(
                            "data node {id} is already started{running}; stop that process first, or pick another node id"
                        ),
                    ));
                }
                id
            }
            None => {
                let ids: Vec<NodeId> = state.layout.datanodes.iter().map(|d| d.node_id).collect();
                ids.into_iter().find(|&id| free(&state, id)).ok_or_else(|| {
                    DbError::bad_request(
                        "every data node in the cluster configuration is already started; add a [[datanode]] section",
                    )
                })?
            }
        };
        if !state.formed && state.ever_started.contains(&id) {
            // The cluster is still starting (some configured node never
            // came up): this node's disk took part in the start already.
            return Err(DbError::new(
                ErrorCode::ClusterNotReady,
                format!(
                    "data node {id} stopped while the cluster was still starting; start the remaining data nodes first (a node restart needs a running cluster to copy from)"
                ),
            ));
        }
        // A start asked for meanwhile is done: left queued, it would start
        // the node again after its next stop.
        state.start_requests.retain(|(n, _)| *n != id);
        state.registering.insert(id);
        Ok(id)
    }

    fn node_lost(&self, node_id: NodeId, generation: u64) {
        {
            let mut state = self.lock();
            if state.links.get(&node_id).map(|l| l.generation) != Some(generation) {
                return;
            }
            state.links.remove(&node_id);
            if state.formed && state.links.is_empty() {
                // The whole cluster is down: the next start is a system
                // restart from the last view's disks. Unless its nodes
                // connect again: then only the connections were lost.
                state.stopped =
                    Some(StoppedCluster { layout: state.layout.clone(), ever_started: state.ever_started.clone() });
                let last_view: Vec<NodeId> = state
                    .layout
                    .datanodes
                    .iter()
                    .filter(|d| d.status == NodeStatus::Started)
                    .map(|d| d.node_id)
                    .collect();
                state.last_view = last_view.clone();
                state.last_view_number = state.arbiter.view().0;
                state.formed = false;
                state.layout.first_view = latsdb_types::proto::ViewNumber::NONE;
                state.layout.view = latsdb_types::proto::ViewNumber::NONE;
                state.ever_started.clear();
                state.recovery.clear();
                for d in state.layout.datanodes.iter_mut() {
                    d.status = NodeStatus::NotStarted;
                    d.shards.clear();
                    d.pid = 0;
                    d.process = 0;
                }
                state.layout.version += 1;
                // The arbiter keeps its votes: the data nodes may still be
                // running and ask it to break a tie, and a voter that
                // forgot what it promised could let two halves both win.
                // The next run's first view replaces it (`mark_started`).
                let durable = state.layout.durable_epoch;
                drop(state);
                self.event(Severity::Warning, format!(
                        "lost the connection to every data node (last view {last_view:?}, durable epoch {durable}): the cluster is taken for stopped, and starting its data nodes again is a system restart, unless they are still running and connect again"
                    ),
                );
                if let Err(e) = self.persist() {
                    self.event(Severity::Alert, format!("cannot save the state: {}", e.message));
                }
                return;
            }
            let starting = state.layout.datanode(node_id).is_some_and(|d| d.status == NodeStatus::Starting);
            if state.formed && !starting {
                // Whether it left is for the data nodes to decide (they
                // may still reach it); their president reports the view.
                // (A restarting node is no member: this server decides.)
                drop(state);
                self.event(Severity::Warning, format!("lost the connection to data node {node_id}"));
                return;
            }
            if let Some(d) = state.layout.datanodes.iter_mut().find(|d| d.node_id == node_id) {
                d.status = NodeStatus::NotStarted;
                d.shards.clear();
                d.pid = 0;
                d.process = 0;
            }
            state.layout.version += 1;
        }
        self.event(Severity::Warning, format!("data node {node_id} disconnected"));
        self.broadcast_layout();
    }
}

/// A data node's registration or reattachment speaks this server's
/// protocol and names its process (a number other than 0, which means "no
/// process" in a layout and would turn the peers' process check off).
fn check_speaks(protocol: u32, process: u64) -> Result<()> {
    if protocol != PROTOCOL_VERSION {
        return Err(DbError::bad_request(format!(
            "data node speaks protocol {protocol}; this management server speaks {PROTOCOL_VERSION}"
        )));
    }
    if process == 0 {
        return Err(DbError::bad_request("a data node's process number must not be 0; start it with this latsdb"));
    }
    Ok(())
}

/// The running cluster's layout for a management server that restarted:
/// what this server knows from its configuration and disk (its own
/// address, the settings, the node groups and placement), with what only
/// the running data nodes know from a data node's copy (which process runs
/// each node and where, their state, the views, the layout's version).
fn running_layout(own: &ClusterLayout, node_copy: &ClusterLayout) -> ClusterLayout {
    debug_assert_eq!(
        own.datanodes.iter().map(|d| d.node_id).collect::<Vec<_>>(),
        node_copy.datanodes.iter().map(|d| d.node_id).collect::<Vec<_>>(),
        "a layout of another cluster's data nodes"
    );
    let mut layout = own.clone();
    for d in layout.datanodes.iter_mut() {
        if let Some(running) = node_copy.datanode(d.node_id) {
            d.status = running.status;
            d.shards = running.shards.clone();
            d.pid = running.pid;
            d.process = running.process;
        }
    }
    layout.version = node_copy.version;
    layout.first_view = node_copy.first_view;
    layout.view = node_copy.view;
    layout.durable_epoch = layout.durable_epoch.max(node_copy.durable_epoch);
    layout
}

/// The nodes that must start for the cluster to form: the last view's
/// (after every data node stopped), or every configured one.
fn view_nodes(state: &State, config: &ClusterConfig) -> Vec<NodeId> {
    if state.last_view.is_empty() {
        config.datanodes.iter().map(|d| d.node_id).collect()
    } else {
        state.last_view.clone()
    }
}

/// A node restart into the running cluster: the node restores what its own
/// disk holds, then copies what changed from the live replicas.
fn node_restart_plan(
    state: &State,
    recovery: Option<latsdb_types::proto::NodeRecovery>,
) -> latsdb_types::proto::StartPlan {
    let durable = state.layout.durable_epoch;
    let first_epoch = recovery.as_ref().map_or(CommitEpoch::NONE, |r| r.max_epoch).max(durable).next();
    latsdb_types::proto::StartPlan { restore_epoch: recovery.map(|r| r.saved_epoch), first_epoch, join: true }
}

/// The start plan once every node of the last view reported its disk.
fn plan_for(state: &State, node_id: NodeId) -> Result<latsdb_types::proto::StartPlan> {
    let reports: Vec<(NodeId, &latsdb_types::proto::NodeRecovery)> =
        state.recovery.iter().filter_map(|(n, r)| r.as_ref().map(|r| (*n, r))).collect();
    let max_logged = reports.iter().map(|(_, r)| r.max_epoch).max().unwrap_or(CommitEpoch::NONE);
    let first_epoch = max_logged.max(state.layout.durable_epoch).next();
    if reports.is_empty() {
        return Ok(latsdb_types::proto::StartPlan { restore_epoch: None, first_epoch, join: false });
    }
    // The last view's disks hold the latest data; a node that left earlier
    // holds less and could only rejoin by copying from a peer.
    let view: Vec<NodeId> =
        if state.last_view.is_empty() { state.recovery.keys().copied().collect() } else { state.last_view.clone() };
    if !view.contains(&node_id) {
        // `start_plan` sends such a node into a node restart instead.
        return Err(DbError::internal(format!("data node {node_id} is not in the last view {view:?}")));
    }
    let mut saved = Vec::with_capacity(view.len());
    for n in &view {
        match state.recovery.get(n) {
            Some(Some(r)) => saved.push(r.saved_epoch),
            _ => {
                return Err(DbError::new(
                    ErrorCode::ClusterNotReady,
                    format!(
                        "data node {n} was in the last view but its data directory is empty: the cluster cannot restore every partition consistently; start it with its data directory"
                    ),
                ))
            }
        }
    }
    let restore_epoch = saved.into_iter().min().unwrap_or(CommitEpoch::NONE);
    Ok(latsdb_types::proto::StartPlan { restore_epoch: Some(restore_epoch), first_epoch, join: false })
}
