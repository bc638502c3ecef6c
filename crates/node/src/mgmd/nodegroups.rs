//! Adding node groups to a running cluster (NDB's CREATE NODEGROUP and
//! REORGANIZE PARTITION, in one step).
//!
//! The operator appends `[[datanode]]` sections, a whole number of node
//! groups, to the configuration file and hands it to `latsdb mgm nodegroup
//! add --config FILE`. The management server then:
//!
//! 1. adds the nodes to the layout (not started) and chooses which
//!    partition numbers move to the new groups, so that every group holds
//!    about as many as the others (`ClusterLayout::add_node_groups`): the layout lists them as
//!    moves (`ClusterLayout::moves`), and asks the process managers to start
//!    the new nodes;
//! 2. each new node starts as a node restart does: it takes every write of
//!    the partitions moving to its group as an extra backup while it copies
//!    them from their primaries, checkpoints, has their primaries hand them
//!    over, and asks to be admitted;
//! 3. the view that admits the first node of a new group makes the group
//!    the partitions' only holder (`Router` counts a move as done once a
//!    node of its target group is started); the data nodes of the old
//!    groups free them, and this server writes the moves into the
//!    placement (`settle`).
//!
//! What was added is kept in `node-groups.json` in the server's data
//! folder, with every data node the cluster knows: a restarted server
//! serves the same layout whether or not the file it is given lists the
//! added nodes, and refuses one that lists nodes the cluster does not have.

use super::{Mgmd, State};
use latsdb_types::config::{ClusterConfig, DataNodeSection};
use latsdb_types::proto::{ClusterLayout, MgmResponse, NodeId, PartitionMove, PartitionPlace, Severity};
use latsdb_types::{DbError, ErrorCode, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

const NODE_GROUPS_FILE: &str = "node-groups.json";

/// What the cluster's data nodes and placement are beyond the
/// configuration file's.
#[derive(Default, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub(super) struct NodeGroups {
    /// Every data node the cluster has, in configuration order.
    known: Vec<NodeId>,
    /// The data nodes added online, in order.
    added: Vec<DataNodeSection>,
    placement: Vec<PartitionPlace>,
    placement_groups: u32,
    moves: Vec<PartitionMove>,
}

impl NodeGroups {
    /// Reads `node-groups.json` (None: there is none yet).
    pub(super) fn load(dir: Option<&Path>) -> Result<Option<NodeGroups>> {
        let Some(path) = dir.map(|d| d.join(NODE_GROUPS_FILE)) else { return Ok(None) };
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                DbError::new(
                    ErrorCode::Io,
                    format!(
                        "{} is damaged ({e}); it says which node groups were added and where partitions live: restore it from a copy",
                        path.display()
                    ),
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(DbError::io(&format!("reading {}", path.display()), e)),
        }
    }

    fn save(&self, dir: Option<&Path>) -> Result<()> {
        let Some(dir) = dir else { return Ok(()) };
        let json =
            serde_json::to_vec_pretty(self).map_err(|e| DbError::internal(format!("encoding node groups: {e}")))?;
        let tmp = dir.join(format!("{NODE_GROUPS_FILE}.tmp"));
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&json)?;
            f.sync_all()?;
            std::fs::rename(&tmp, dir.join(NODE_GROUPS_FILE))?;
            std::fs::File::open(dir)?.sync_all()
        };
        write().map_err(|e| DbError::io(&format!("writing {}", dir.join(NODE_GROUPS_FILE).display()), e))
    }

    /// At the server's start: the configuration file's data nodes plus
    /// those added online, checked against the nodes the cluster knows, and
    /// saved. `fresh` says the cluster never formed (a file that lists more
    /// nodes is then simply the cluster's shape).
    pub(super) fn at_start(
        saved: Option<NodeGroups>,
        config: &mut ClusterConfig,
        fresh: bool,
        dir: Option<&Path>,
    ) -> Result<NodeGroups> {
        let mut groups = saved.unwrap_or_default();
        for added in &groups.added {
            match config.datanodes.iter().find(|d| d.node_id == added.node_id) {
                Some(listed) if listed != added => {
                    return Err(DbError::bad_request(format!(
                        "the configuration's [[datanode]] node_id = {} differs from the one added online ({added:?}); make them equal",
                        added.node_id
                    )))
                }
                Some(_) => {}
                None => config.datanodes.push(added.clone()),
            }
        }
        let listed: Vec<NodeId> = config.datanodes.iter().map(|d| d.node_id).collect();
        if !fresh && !groups.known.is_empty() && listed != groups.known {
            return Err(DbError::bad_request(format!(
                "the configuration lists data nodes {listed:?}, but the cluster has {:?}; add node groups to a running cluster with `latsdb mgm nodegroup add --config FILE`",
                groups.known
            )));
        }
        config.validate()?;
        groups.known = listed;
        groups.save(dir)?;
        Ok(groups)
    }

    /// Takes the layout's placement and moves, to be saved.
    fn record_placement(&mut self, layout: &ClusterLayout) {
        self.placement = layout.placement.clone();
        self.placement_groups = layout.placement_groups;
        self.moves = layout.moves.clone();
    }

    /// Puts the saved placement into a new layout.
    pub(super) fn place(&self, layout: &mut ClusterLayout) {
        layout.placement = self.placement.clone();
        layout.placement_groups = self.placement_groups;
        layout.moves = self.moves.clone();
    }
}

/// The node groups a new configuration adds to `current`: its data nodes
/// must start with `current`'s, unchanged, and nothing but data nodes may
/// differ.
fn added_nodes(current: &ClusterConfig, new: &ClusterConfig) -> Result<Vec<DataNodeSection>> {
    if new.cluster != current.cluster || new.datanode_defaults != current.datanode_defaults || new.mgmd != current.mgmd
    {
        return Err(DbError::bad_request(
            "the new configuration changes [cluster], [mgmd] or [datanode_defaults]; only [[datanode]] sections may be added",
        ));
    }
    let n = current.datanodes.len();
    if new.datanodes.len() <= n || new.datanodes[..n] != current.datanodes[..] {
        return Err(DbError::bad_request(format!(
            "the new configuration must list the cluster's {n} data nodes unchanged and in order ({:?}), then the new ones",
            current.datanodes.iter().map(|d| d.node_id).collect::<Vec<_>>()
        )));
    }
    Ok(new.datanodes[n..].to_vec())
}

impl Mgmd {
    fn save_node_groups(&self, state: &State) {
        let mut groups = self.node_groups.lock().unwrap_or_else(|p| p.into_inner());
        groups.record_placement(&state.layout);
        if let Err(e) = groups.save(self.data_dir.as_deref()) {
            drop(groups);
            self.event(Severity::Alert, format!("cannot save the node groups: {}", e.message));
        }
    }

    /// `MgmRequest::AddNodeGroups`.
    pub(super) async fn add_node_groups(&self, text: &str) -> Result<MgmResponse> {
        let new = ClusterConfig::parse(text)?;
        let _schema = self.schema_lock.lock().await;
        let current = self.config();
        let added = added_nodes(&current, &new)?;
        let new_groups = new.node_groups();
        let mut state = self.lock();
        if !state.formed || !state.layout.all_started() {
            return Err(DbError::new(
                ErrorCode::ClusterNotReady,
                "node groups can be added while every data node of the cluster is started; start them first",
            ));
        }
        if !state.layout.moves.is_empty() {
            return Err(DbError::new(
                ErrorCode::ClusterNotReady,
                "partitions are still moving to the node groups added last (`latsdb mgm nodegroup status`); add more once they have",
            ));
        }
        let old_groups = state.layout.node_groups;
        let partitions = most_partitions(&state);
        let nodes = added.iter().map(|d| new.not_started(d)).collect();
        let mut layout = state.layout.clone();
        let moves = layout.add_node_groups(nodes, new_groups, partitions);
        let ids: Vec<NodeId> = added.iter().map(|d| d.node_id).collect();
        // Saved before anything changes: a server that restarted without
        // the record would forget the nodes and where partitions go.
        let mut groups = self.node_groups.lock().unwrap_or_else(|p| p.into_inner()).clone();
        groups.added.extend(added.iter().cloned());
        groups.known.extend(&ids);
        groups.record_placement(&layout);
        groups.save(self.data_dir.as_deref())?;
        *self.node_groups.lock().unwrap_or_else(|p| p.into_inner()) = groups;
        state.layout = layout;
        state.start_requests.extend(ids.iter().map(|id| (*id, false)));
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(new);
        drop(state);
        let named = if new_groups == old_groups + 1 {
            format!("node group {old_groups}")
        } else {
            format!("node groups {old_groups} to {}", new_groups - 1)
        };
        let text = format!(
            "added data nodes {ids:?} as {named}; {} partition numbers will move as they start (of every table that has them): {}",
            moves.len(),
            describe_moves(&moves)
        );
        self.event(Severity::Info, &text);
        self.broadcast_layout();
        Ok(MgmResponse::Report(format!(
            "{text}\nstart the new data nodes on their hosts (`latsdb start` starts them itself); watch with `latsdb mgm nodegroup status`\n"
        )))
    }

    /// Writes the moves a view finished into the placement (the caller
    /// changed node statuses under the state lock), and once none is left,
    /// lets partition numbers beyond the placement follow the default rule
    /// over every node group.
    pub(super) fn settle(&self, state: &mut State) {
        if state.layout.moves.is_empty() {
            return;
        }
        let moved = state.layout.settle_moves();
        if moved.is_empty() {
            return;
        }
        self.save_node_groups(state);
        self.event(
            Severity::Info,
            format!(
                "partitions {moved:?} now live in their new node groups; the data nodes of their old groups free them{}",
                if state.layout.moves.is_empty() { "" } else { " (more are still moving)" }
            ),
        );
    }

    /// `MgmRequest::NodeGroups`: every node group with its nodes and how
    /// many partition numbers it holds, and the moves under way.
    pub(super) fn node_group_status(&self) -> Result<MgmResponse> {
        let (layout, partitions) = {
            let state = self.lock();
            (state.layout.clone(), most_partitions(&state))
        };
        let router = latsdb_types::proto::Router::new(&layout);
        let mut text = String::new();
        for g in 0..layout.node_groups {
            let nodes: Vec<String> =
                layout.group_nodes(g).iter().map(|d| format!("{} ({:?})", d.node_id, d.status)).collect();
            let held = (0..partitions).filter(|p| router.place_of(*p).group == g).count();
            let coming = (0..partitions).filter(|p| router.moving_to(*p).is_some_and(|to| to.group == g)).count();
            text.push_str(&format!("node group {g}: data nodes {}; {held} partition numbers", nodes.join(", ")));
            if coming > 0 {
                text.push_str(&format!(", {coming} moving in"));
            }
            text.push('\n');
        }
        if layout.moves.is_empty() {
            text.push_str("no partition is moving\n");
        } else {
            text.push_str(&format!("moving: {}\n", describe_moves(&layout.moves)));
        }
        Ok(MgmResponse::Report(text))
    }
}

/// The partition count of the table with the most: every partition number
/// any table has is below it.
fn most_partitions(state: &State) -> u32 {
    state.tables.iter().map(|t| t.partitions).max().unwrap_or(0)
}

fn describe_moves(moves: &[PartitionMove]) -> String {
    let mut by_group: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for m in moves {
        by_group.entry(m.to.group).or_default().push(m.partition);
    }
    let parts: Vec<String> = by_group.iter().map(|(g, ps)| format!("{ps:?} to node group {g}")).collect();
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_may_only_append_data_nodes() {
        let current = ClusterConfig::local(2, 2, 0);
        let grown = ClusterConfig::local(4, 2, 0);
        assert_eq!(added_nodes(&current, &grown).unwrap().len(), 2);
        assert!(added_nodes(&current, &current).is_err(), "nothing added");
        let mut changed = grown.clone();
        changed.cluster.lock_wait_timeout_ms += 1;
        assert!(added_nodes(&current, &changed).unwrap_err().message.contains("only [[datanode]]"));
        let mut other_mgmd = grown.clone();
        other_mgmd.mgmd.node_id = 9;
        assert!(added_nodes(&current, &other_mgmd).is_err(), "[mgmd] may not change");
        let mut moved = grown.clone();
        moved.datanodes.swap(0, 2);
        assert!(added_nodes(&current, &moved).unwrap_err().message.contains("unchanged and in order"));
    }

    /// A scratch folder, removed at the end.
    struct Dir(std::path::PathBuf);
    impl Dir {
        fn path(&self) -> &Path {
            &self.0
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn a_restarted_server_keeps_the_added_nodes_with_or_without_them_in_its_file() {
        let dir = std::env::temp_dir().join(format!("latsdb-node-groups-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let dir = Dir(dir);
        let mut original = ClusterConfig::local(2, 2, 0);
        let groups = NodeGroups::at_start(None, &mut original, true, Some(dir.path())).unwrap();
        assert_eq!(groups.known, vec![2, 3]);
        let grown = ClusterConfig::local(4, 2, 0);
        let mut saved = groups.clone();
        saved.added = grown.datanodes[2..].to_vec();
        saved.known = vec![2, 3, 4, 5];
        saved.save(Some(dir.path())).unwrap();
        let loaded = NodeGroups::load(Some(dir.path())).unwrap().unwrap();
        assert_eq!(loaded, saved);
        let mut old_file = ClusterConfig::local(2, 2, 0);
        NodeGroups::at_start(Some(loaded.clone()), &mut old_file, false, Some(dir.path())).unwrap();
        assert_eq!(old_file, grown, "the added nodes are appended to an old file");
        let mut new_file = grown.clone();
        NodeGroups::at_start(Some(loaded.clone()), &mut new_file, false, Some(dir.path())).unwrap();
        assert_eq!(new_file, grown);
        let mut too_big = ClusterConfig::local(6, 2, 0);
        let e = NodeGroups::at_start(Some(loaded), &mut too_big, false, Some(dir.path())).unwrap_err();
        assert!(e.message.contains("nodegroup add"), "{}", e.message);
    }
}
