//! Routing: which shard holds which replica of a partition.

use super::*;

/// Partition-to-shard routing precomputed from a layout, for hot paths.
///
/// Partitions are dealt round-robin over node groups, primaries round-robin
/// over a group's replicas, and then over the primary node's shards (the
/// default rule; `ClusterLayout::placement` places partitions that moved to
/// an added node group, see `PartitionPlace`).
#[derive(Clone, Debug, Default)]
pub struct Router {
    /// Per node group, its nodes in node-id order: (node, shard count, status).
    groups: Vec<Vec<(NodeId, u16, NodeStatus)>>,
    /// The place of each partition number below its length, with the moves
    /// that are done applied.
    placement: Vec<PartitionPlace>,
    /// The node groups of the default rule, for numbers beyond `placement`.
    default_groups: u32,
    /// Moves not done yet, by partition number.
    moving: Vec<PartitionMove>,
}

impl Router {
    pub fn new(layout: &ClusterLayout) -> Router {
        let groups = (0..layout.node_groups)
            .map(|g| layout.group_nodes(g).iter().map(|d| (d.node_id, d.shards.len() as u16, d.status)).collect())
            .collect();
        let (placement, mut moving) = layout.current_placement();
        moving.sort_unstable_by_key(|m| m.partition);
        Router { groups, placement, default_groups: layout.default_groups(), moving }
    }

    /// Where partition `p` lives (a move that is done counted).
    pub fn place_of(&self, p: u32) -> PartitionPlace {
        match self.placement.get(p as usize) {
            Some(place) => *place,
            None => PartitionPlace::by_default(p, self.default_groups),
        }
    }

    /// Where partition `p` is moving to, while the move is not done.
    pub fn moving_to(&self, p: u32) -> Option<PartitionPlace> {
        if self.moving.is_empty() {
            return None;
        }
        self.moving.binary_search_by_key(&p, |m| m.partition).ok().map(|i| self.moving[i].to)
    }

    /// The nodes of `place`'s group with `status`, from the one whose turn
    /// the slot is, each with the shard that holds the slot.
    fn in_group(&self, place: PartitionPlace, status: NodeStatus) -> impl Iterator<Item = ShardAddr> + '_ {
        let nodes: &[(NodeId, u16, NodeStatus)] = self.groups.get(place.group as usize).map_or(&[], |g| g.as_slice());
        let local = place.slot as usize;
        (0..nodes.len())
            .map(move |k| nodes[(local + k) % nodes.len()])
            .filter(move |&(_, shards, s)| s == status && shards > 0)
            .map(move |(node, shards, _)| ShardAddr { node, shard: ((local / nodes.len()) % shards as usize) as u16 })
    }

    /// The shards of the nodes of `place`'s group that take writes,
    /// started ones first.
    pub fn replicas_in(&self, place: PartitionPlace) -> Vec<ShardAddr> {
        self.in_group(place, NodeStatus::Started).chain(self.in_group(place, NodeStatus::Starting)).collect()
    }

    /// The replicas of a partition that take its writes: the started ones,
    /// primary first, then backups in node-group order after it, then those
    /// of starting nodes (which are catching up), then those of the node
    /// group it is moving to (which copy it).
    pub fn replicas_of(&self, partition: u32) -> Vec<ShardAddr> {
        let mut replicas = self.replicas_in(self.place_of(partition));
        if let Some(to) = self.moving_to(partition) {
            replicas.extend(self.in_group(to, NodeStatus::Starting));
        }
        replicas
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
        let place = self.place_of(partition);
        let nodes = self.groups.get(place.group as usize)?;
        let local = place.slot as usize;
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
        self.in_group(self.place_of(partition), NodeStatus::Started).next()
    }
}
