//! Routing: which shard holds which replica of a partition.

use super::*;

/// Partition-to-shard routing precomputed from a layout, for hot paths.
///
/// Partitions are dealt round-robin over node groups, primaries round-robin
/// over a group's replicas, and then over the primary node's shards.
#[derive(Clone, Debug, Default)]
pub struct Router {
    /// Per node group, its nodes in node-id order: (node, shard count, status).
    groups: Vec<Vec<(NodeId, u16, NodeStatus)>>,
}

impl Router {
    pub fn new(layout: &ClusterLayout) -> Router {
        let groups = (0..layout.node_groups)
            .map(|g| layout.group_nodes(g).iter().map(|d| (d.node_id, d.shards.len() as u16, d.status)).collect())
            .collect();
        Router { groups }
    }

    /// The replicas of a partition that take its writes: the started ones,
    /// primary first, then backups in node-group order after it, then those
    /// of starting nodes (which are catching up).
    pub fn replicas_of(&self, partition: u32) -> Vec<ShardAddr> {
        let groups = self.groups.len() as u32;
        if groups == 0 {
            return Vec::new();
        }
        let nodes = &self.groups[(partition % groups) as usize];
        let local = (partition / groups) as usize;
        let with = |status: NodeStatus| {
            (0..nodes.len())
                .map(|k| nodes[(local + k) % nodes.len()])
                .filter(move |&(_, shards, s)| s == status && shards > 0)
                .map(|(node, shards, _)| ShardAddr { node, shard: ((local / nodes.len()) % shards as usize) as u16 })
        };
        with(NodeStatus::Started).chain(with(NodeStatus::Starting)).collect()
    }

    /// The position of `node` in its node group (what `read_replica_of`'s
    /// `prefer` names), if the layout lists it.
    pub fn replica_position(&self, node: NodeId) -> Option<usize> {
        self.groups.iter().find_map(|g| g.iter().position(|&(n, _, _)| n == node))
    }

    /// The most nodes any node group has.
    pub fn replicas(&self) -> usize {
        self.groups.iter().map(Vec::len).max().unwrap_or(0)
    }

    /// Where a read-committed read of `partition` may go: the replica on the
    /// node at position `prefer` (modulo the group's size) of the
    /// partition's node group when that node is started, else the primary.
    /// A batch that uses one `prefer` for all its reads reaches one node per
    /// node group instead of all of them. Allocation-free.
    pub fn read_replica_of(&self, partition: u32, prefer: usize) -> Option<ShardAddr> {
        let groups = self.groups.len() as u32;
        if groups == 0 {
            return None;
        }
        let nodes = &self.groups[(partition % groups) as usize];
        let local = (partition / groups) as usize;
        match nodes.get(prefer % nodes.len().max(1)) {
            Some(&(node, shards, NodeStatus::Started)) if shards > 0 => {
                Some(ShardAddr { node, shard: ((local / nodes.len()) % shards as usize) as u16 })
            }
            _ => self.primary_of(partition),
        }
    }

    /// The first started replica of a partition: its primary, or the backup
    /// that took over when the primary's node left. Allocation-free.
    pub fn primary_of(&self, partition: u32) -> Option<ShardAddr> {
        let groups = self.groups.len() as u32;
        if groups == 0 {
            return None;
        }
        let nodes = &self.groups[(partition % groups) as usize];
        let local = (partition / groups) as usize;
        (0..nodes.len())
            .map(|k| nodes[(local + k) % nodes.len()])
            .find(|&(_, shards, status)| status == NodeStatus::Started && shards > 0)
            .map(|(node, shards, _)| ShardAddr { node, shard: ((local / nodes.len()) % shards as usize) as u16 })
    }
}
