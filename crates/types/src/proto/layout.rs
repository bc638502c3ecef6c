//! The cluster layout: the nodes, their node groups and states, and the
//! cluster-wide settings the management server hands every process.

use super::*;

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeStatus {
    NotStarted,
    /// Restarting into a running cluster: it takes part in every write of
    /// its partitions (as the last backup) while it copies their rows from
    /// the primaries, but serves no reads and is primary of nothing.
    Starting,
    Started,
}

impl NodeStatus {
    /// Whether the node holds its partitions' writes: started, or starting
    /// and catching up.
    pub fn takes_writes(self) -> bool {
        matches!(self, NodeStatus::Started | NodeStatus::Starting)
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct DataNodeInfo {
    pub node_id: NodeId,
    pub node_group: u32,
    pub host: String,
    pub status: NodeStatus,
    /// Address of each shard, in shard order (empty until started).
    pub shards: Vec<String>,
    /// The operating system's id of the node's process, for operators
    /// (logs, `mgm show`).
    pub pid: u32,
    /// A number the node's process drew at its start, different for every
    /// process of every node (an OS pid may repeat, for instance when a
    /// container starts again); 0 when no process runs. Peers tell a node's
    /// processes apart by it (`Hello::Peer`).
    pub process: u64,
    /// The location domain the configuration names for this node.
    pub location_domain: Option<String>,
}

impl DataNodeInfo {
    /// Whether the node runs a known process other than `process`
    /// (`ClusterLayout::lists_other_process`).
    pub fn runs_other_than(&self, process: u64) -> bool {
        self.process != 0 && self.process != process
    }
}

/// Where a partition number lives: its node group, and its slot there.
/// The slot picks, as `p / node groups` does for a partition of the
/// default rule, the partition's primary among the group's nodes (`slot mod
/// replicas`) and its shard on them (`slot / replicas mod shards`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionPlace {
    pub group: u32,
    pub slot: u32,
}

impl PartitionPlace {
    /// The place of partition `p` by the default rule over `groups` node
    /// groups: dealt round-robin.
    pub fn by_default(p: u32, groups: u32) -> PartitionPlace {
        let groups = groups.max(1);
        PartitionPlace { group: p % groups, slot: p / groups }
    }
}

/// A partition number moving to a node group that is being added. Until a
/// node of the target group is started, the partition stays in its group
/// and the target group's starting nodes take its writes as extra backups
/// while they copy it; once one is started (the view that admits it), the
/// partition is the target group's alone.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionMove {
    pub partition: u32,
    pub to: PartitionPlace,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ClusterLayout {
    pub version: u64,
    pub cluster_name: String,
    pub replicas: u8,
    pub mgmd_node_id: NodeId,
    pub mgmd_address: String,
    pub datanodes: Vec<DataNodeInfo>,
    pub node_groups: u32,
    pub default_partitions: u32,
    pub lock_wait_timeout_ms: u64,
    /// A coordinator aborts a transaction that has waited this long for
    /// its client's next request (`[cluster]
    /// transaction_inactive_timeout_ms`); 0 never does.
    pub transaction_inactive_timeout_ms: u64,
    /// Data nodes exchange heartbeats at this interval; a node silent for
    /// `heartbeat_missed` intervals is removed from the view.
    pub heartbeat_interval_ms: u64,
    pub heartbeat_missed: u32,
    /// Length of a commit epoch: REDO logs are synced and the durable epoch
    /// advances this often.
    pub epoch_interval_ms: u64,
    /// A data node shard starts a local checkpoint once this much REDO was
    /// written since its last one started; 0 disables checkpoints.
    pub checkpoint_trigger_mb: u64,
    /// The latest epoch every live data node has synced, as reported by the
    /// data nodes (0 before the first).
    pub durable_epoch: CommitEpoch,
    /// 0 while the cluster has not formed; then the epoch of the first view
    /// of this run, which the data nodes started at that moment form (at
    /// the first start every configured node, at a system restart every
    /// node of the last view; a node that had left before joins later by a
    /// node restart). View epochs never repeat across system restarts, so a
    /// late message of a process that died with the cluster is stale.
    #[serde(default)]
    pub first_view: ViewNumber,
    /// Where a SQL node puts the columns of a new table that say nothing
    /// (`[cluster] default_column_storage`).
    #[serde(default)]
    pub default_column_storage: crate::schema::Storage,
    /// The place of each partition number below its length. Numbers beyond
    /// follow the default rule: group `p mod placement_groups`, slot
    /// `p / placement_groups`. Empty until a node group is added.
    #[serde(default)]
    pub placement: Vec<PartitionPlace>,
    /// The node groups of the default rule (0: `node_groups`).
    #[serde(default)]
    pub placement_groups: u32,
    /// Partitions moving to added node groups, by partition number.
    #[serde(default)]
    pub moves: Vec<PartitionMove>,
    /// The membership view this layout's node statuses are of: for the
    /// management server's layout the newest view it heard of (`NONE`
    /// before the cluster formed), for a data node's the view it made
    /// effective (`of_view`).
    #[serde(default)]
    pub view: ViewNumber,
}

impl ClusterLayout {
    /// The version of the layout the shards use in membership view
    /// `view` of the management server's layout version
    /// `base_version`. Ordered by view first, then base version, so that
    /// it grows with either and two different layouts never share one.
    pub fn view_version(base_version: u64, view: ViewNumber) -> u64 {
        debug_assert!(base_version < 1 << 32, "layout version {base_version} overflows 32 bits");
        debug_assert!(view.0 < 1 << 32, "view {view} overflows 32 bits");
        (view.0 << 32) | (base_version & 0xFFFF_FFFF)
    }

    /// The layout the shards use in membership view `view` of the live
    /// data nodes `members`: this (the management server's) layout with the
    /// nodes the view leaves out marked not started, versioned by the view
    /// (`view_version`). The data node and the simulator both install it.
    pub fn of_view(&self, view: ViewNumber, members: &[NodeId]) -> ClusterLayout {
        let mut layout = self.clone();
        layout.restrict_to_view(members);
        layout.version = ClusterLayout::view_version(self.version, view);
        layout.view = view;
        debug_assert!(
            layout.datanodes.iter().all(|d| d.status != NodeStatus::Started || members.contains(&d.node_id)),
            "a node outside view {view} is started in its layout"
        );
        layout
    }

    /// The membership view a layout version (`view_version`) is of.
    pub fn view_of(version: u64) -> ViewNumber {
        ViewNumber(version >> 32)
    }

    pub fn datanode(&self, node: NodeId) -> Option<&DataNodeInfo> {
        self.datanodes.iter().find(|d| d.node_id == node)
    }

    /// Whether the layout lists a process of data node `node` other than
    /// `process` (`DataNodeInfo::process`). What that process sends then
    /// comes late from a process that died (a network fault held it back),
    /// or early from a new one this layout does not know yet. A layout
    /// that lists no process for the node (0: not started) names no other.
    pub fn lists_other_process(&self, node: NodeId, process: u64) -> bool {
        self.datanode(node).is_some_and(|d| d.runs_other_than(process))
    }

    /// Whether the node takes part in writes (started, or starting).
    pub fn takes_writes(&self, node: NodeId) -> bool {
        self.datanode(node).is_some_and(|d| d.status.takes_writes())
    }

    /// The nodes that take part in writes, by node id.
    pub fn writer_nodes(&self) -> Vec<NodeId> {
        let mut nodes: Vec<NodeId> =
            self.datanodes.iter().filter(|d| d.status.takes_writes()).map(|d| d.node_id).collect();
        nodes.sort_unstable();
        nodes
    }

    pub fn all_started(&self) -> bool {
        self.datanodes.iter().all(|d| d.status == NodeStatus::Started)
    }

    /// Nodes of a node group, ordered by node id.
    pub fn group_nodes(&self, group: u32) -> Vec<&DataNodeInfo> {
        let mut nodes: Vec<&DataNodeInfo> = self.datanodes.iter().filter(|d| d.node_group == group).collect();
        nodes.sort_by_key(|d| d.node_id);
        nodes
    }

    /// The shard holding the primary replica of a partition, or None when its
    /// node is not started. See [`Router`], which answers the same without
    /// allocating.
    pub fn primary_of(&self, partition: u32) -> Option<ShardAddr> {
        Router::new(self).primary_of(partition)
    }

    /// Applies a membership view: started nodes outside it are not started
    /// any more, and starting nodes it admitted are started. (A starting
    /// node is not a member yet: the management server, which it reports
    /// to, says when it fails.)
    pub fn restrict_to_view(&mut self, members: &[NodeId]) {
        for d in self.datanodes.iter_mut() {
            let member = members.contains(&d.node_id);
            match d.status {
                NodeStatus::Started if !member => {
                    d.status = NodeStatus::NotStarted;
                    d.shards.clear();
                    d.pid = 0;
                    d.process = 0;
                }
                NodeStatus::Starting if member => d.status = NodeStatus::Started,
                _ => {}
            }
        }
    }

    pub fn shard_address(&self, shard: ShardAddr) -> Option<&str> {
        self.datanode(shard.node)?.shards.get(shard.shard as usize).map(|s| s.as_str())
    }

    /// The node groups of the default placement rule.
    pub fn default_groups(&self) -> u32 {
        if self.placement_groups > 0 {
            self.placement_groups
        } else {
            self.node_groups
        }
    }

    /// Where partition `p` lives by `placement` and the default rule,
    /// moves not counted.
    pub fn placed(&self, p: u32) -> PartitionPlace {
        match self.placement.get(p as usize) {
            Some(place) => *place,
            None => PartitionPlace::by_default(p, self.default_groups()),
        }
    }

    /// The placement with the moves that are done written in, and the
    /// moves still under way: what routing follows (`Router`) and what the
    /// management server settles (`settle_moves`).
    pub fn current_placement(&self) -> (Vec<PartitionPlace>, Vec<PartitionMove>) {
        let mut placement = self.placement.clone();
        let mut pending = Vec::new();
        for m in &self.moves {
            // Every move is of a placed partition (`add_node_groups`); a
            // layout from the wire that breaks this is routed without it.
            let Some(place) = placement.get_mut(m.partition as usize) else {
                debug_assert!(
                    false,
                    "partition {} moves but `placement` covers only {}",
                    m.partition,
                    self.placement.len()
                );
                continue;
            };
            if self.move_done(m.to.group) {
                *place = m.to;
            } else {
                pending.push(*m);
            }
        }
        (placement, pending)
    }

    /// Whether a move to `group` is done: a node of it is started (the view
    /// that admitted it made the group the partition's only holder).
    pub fn move_done(&self, group: u32) -> bool {
        self.datanodes.iter().any(|d| d.node_group == group && d.status == NodeStatus::Started)
    }

    /// Adds the data nodes of new node groups (not started; the node group
    /// count becomes `groups`) and plans the moves that give each new group
    /// its share of the partition numbers below `partitions` (every number
    /// a table has): each new group in turn takes the highest-slot
    /// partition of the old group that holds the most, until it holds
    /// `partitions / groups`; its slots number from 0 in that order.
    /// Numbers below `partitions` get a place of their own; larger ones
    /// follow the default rule over the old groups until the moves are
    /// done (`settle_moves`). Returns the moves.
    pub fn add_node_groups(&mut self, nodes: Vec<DataNodeInfo>, groups: u32, partitions: u32) -> Vec<PartitionMove> {
        let old = self.node_groups;
        assert!(self.moves.is_empty(), "node groups added while partitions still move");
        assert!(groups > old, "no node group is added ({old} -> {groups})");
        for d in &nodes {
            assert!((old..groups).contains(&d.node_group), "data node {} is not in an added group", d.node_id);
            assert!(self.datanode(d.node_id).is_none(), "data node {} is in the cluster already", d.node_id);
        }
        self.placement = (0..partitions).map(|p| self.placed(p)).collect();
        self.placement_groups = self.default_groups();
        self.node_groups = groups;
        self.datanodes.extend(nodes);
        let mut held: std::collections::BTreeMap<u32, Vec<(u32, u32)>> = std::collections::BTreeMap::new();
        for (p, place) in self.placement.iter().enumerate() {
            held.entry(place.group).or_default().push((place.slot, p as u32));
        }
        for list in held.values_mut() {
            list.sort_unstable();
        }
        let share = partitions / groups;
        for group in old..groups {
            for slot in 0..share {
                let Some((_, from)) = held.iter_mut().max_by_key(|(g, ps)| (ps.len(), std::cmp::Reverse(**g))) else {
                    break;
                };
                let Some((_, partition)) = from.pop() else { break };
                self.moves.push(PartitionMove { partition, to: PartitionPlace { group, slot } });
            }
        }
        if self.moves.is_empty() {
            // Nothing to move (too few partitions): tables created from now
            // on use the new groups too.
            self.placement_groups = groups;
        }
        debug_assert!(
            self.moves.iter().all(|m| self.placed(m.partition).group < old && m.to.group >= old),
            "a move does not go from an old node group to a new one: {:?}",
            self.moves
        );
        self.version += 1;
        self.moves.clone()
    }

    /// Writes the moves that are done into `placement` and drops them, as
    /// the management server does once a view admitted a node of their
    /// target group; routing is the same before and after. Once none is
    /// left, numbers beyond the placement follow the default rule over
    /// every node group. Returns the partition numbers that moved.
    pub fn settle_moves(&mut self) -> Vec<u32> {
        let (placement, pending) = self.current_placement();
        let moved: Vec<u32> = self.moves.iter().filter(|m| !pending.contains(m)).map(|m| m.partition).collect();
        self.placement = placement;
        self.moves = pending;
        if !moved.is_empty() && self.moves.is_empty() {
            self.placement_groups = self.node_groups;
        }
        debug_assert!(self.moves.iter().all(|m| !self.move_done(m.to.group)), "a done move was left unsettled");
        moved
    }
}

/// Builds a `ClusterLayout`: every field starts at the value a new,
/// empty cluster has (version 1, one replica, no data nodes, the
/// configuration's default timings), and each setter changes one. The only
/// way to make a layout outside this module, so that a field added later
/// gets its default everywhere instead of 15-field literals to edit.
#[derive(Clone, Debug)]
pub struct ClusterLayoutBuilder {
    layout: ClusterLayout,
}

impl ClusterLayout {
    /// A builder for a layout of the cluster named `cluster_name`.
    pub fn builder(cluster_name: impl Into<String>) -> ClusterLayoutBuilder {
        ClusterLayoutBuilder {
            layout: ClusterLayout {
                version: 1,
                cluster_name: cluster_name.into(),
                replicas: 1,
                mgmd_node_id: 0,
                mgmd_address: String::new(),
                datanodes: Vec::new(),
                node_groups: 0,
                default_partitions: 0,
                lock_wait_timeout_ms: 1500,
                transaction_inactive_timeout_ms: 0,
                heartbeat_interval_ms: 100,
                heartbeat_missed: 5,
                epoch_interval_ms: 100,
                checkpoint_trigger_mb: 64,
                durable_epoch: CommitEpoch::NONE,
                first_view: ViewNumber::NONE,
                default_column_storage: crate::schema::Storage::Memory,
                placement: Vec::new(),
                placement_groups: 0,
                moves: Vec::new(),
                view: ViewNumber::NONE,
            },
        }
    }
}

impl ClusterLayoutBuilder {
    pub fn version(mut self, version: u64) -> Self {
        self.layout.version = version;
        self
    }

    pub fn replicas(mut self, replicas: u8) -> Self {
        self.layout.replicas = replicas;
        self
    }

    /// The management server's node id and address.
    pub fn mgmd(mut self, node_id: NodeId, address: impl Into<String>) -> Self {
        self.layout.mgmd_node_id = node_id;
        self.layout.mgmd_address = address.into();
        self
    }

    pub fn datanodes(mut self, datanodes: Vec<DataNodeInfo>) -> Self {
        self.layout.datanodes = datanodes;
        self
    }

    pub fn node_groups(mut self, node_groups: u32) -> Self {
        self.layout.node_groups = node_groups;
        self
    }

    pub fn default_partitions(mut self, partitions: u32) -> Self {
        self.layout.default_partitions = partitions;
        self
    }

    pub fn lock_wait_timeout_ms(mut self, ms: u64) -> Self {
        self.layout.lock_wait_timeout_ms = ms;
        self
    }

    pub fn transaction_inactive_timeout_ms(mut self, ms: u64) -> Self {
        self.layout.transaction_inactive_timeout_ms = ms;
        self
    }

    /// The heartbeat interval, and how many intervals of silence declare a
    /// node dead.
    pub fn heartbeat(mut self, interval_ms: u64, missed: u32) -> Self {
        self.layout.heartbeat_interval_ms = interval_ms;
        self.layout.heartbeat_missed = missed;
        self
    }

    pub fn epoch_interval_ms(mut self, ms: u64) -> Self {
        self.layout.epoch_interval_ms = ms;
        self
    }

    pub fn checkpoint_trigger_mb(mut self, mb: u64) -> Self {
        self.layout.checkpoint_trigger_mb = mb;
        self
    }

    pub fn default_column_storage(mut self, storage: crate::schema::Storage) -> Self {
        self.layout.default_column_storage = storage;
        self
    }

    pub fn durable_epoch(mut self, epoch: CommitEpoch) -> Self {
        self.layout.durable_epoch = epoch;
        self
    }

    /// Where partitions live beyond the default rule (see the fields).
    pub fn placement(mut self, placement: Vec<PartitionPlace>, default_groups: u32, moves: Vec<PartitionMove>) -> Self {
        self.layout.placement = placement;
        self.layout.placement_groups = default_groups;
        self.layout.moves = moves;
        self
    }

    pub fn first_view(mut self, view: ViewNumber) -> Self {
        self.layout.first_view = view;
        self
    }

    pub fn view(mut self, view: ViewNumber) -> Self {
        self.layout.view = view;
        self
    }

    /// The layout. Panics if it breaks what every layout promises: 1 to 4
    /// replicas, a node group for each data node and no node id twice.
    pub fn build(self) -> ClusterLayout {
        let layout = self.layout;
        for place in layout.placement.iter().chain(layout.moves.iter().map(|m| &m.to)) {
            assert!(
                place.group < layout.node_groups,
                "a partition is placed in node group {} of {}",
                place.group,
                layout.node_groups
            );
        }
        assert!((1..=4).contains(&layout.replicas), "a layout has 1 to 4 replicas, not {}", layout.replicas);
        for d in &layout.datanodes {
            assert!(
                d.node_group < layout.node_groups.max(1),
                "data node {} is in node group {} of {}",
                d.node_id,
                d.node_group,
                layout.node_groups
            );
            let twice = layout.datanodes.iter().filter(|o| o.node_id == d.node_id).count() > 1;
            assert!(!twice, "data node {} is listed twice", d.node_id);
        }
        layout
    }
}
