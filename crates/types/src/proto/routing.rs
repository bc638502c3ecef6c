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
    /// Per node group, its nodes in node-id order.
    groups: Vec<Vec<Member>>,
    /// The place of each partition number below its length, with the moves
    /// that are done applied.
    placement: Vec<PartitionPlace>,
    /// The node groups of the default rule, for numbers beyond `placement`.
    default_groups: u32,
    /// Moves not done yet, by partition number.
    moving: Vec<PartitionMove>,
    /// Whether the router was made for a location domain that some node of
    /// the layout is in (`for_domain`).
    has_local: bool,
}

/// A data node as routing sees it.
#[derive(Clone, Copy, Debug)]
struct Member {
    node: NodeId,
    shards: u16,
    status: NodeStatus,
    /// In the location domain the router was made for.
    local: bool,
}

impl Member {
    fn started(&self) -> bool {
        self.status == NodeStatus::Started && self.shards > 0
    }

    /// This node's shard of the partition at group slot `local_slot` in a
    /// group of `group_size` nodes.
    fn shard_for(&self, local_slot: usize, group_size: usize) -> ShardAddr {
        debug_assert!(self.shards > 0 && group_size > 0, "no shard of node {} holds a slot", self.node);
        ShardAddr { node: self.node, shard: ((local_slot / group_size) % self.shards as usize) as u16 }
    }
}

impl Router {
    pub fn new(layout: &ClusterLayout) -> Router {
        Router::for_domain(layout, None)
    }

    /// A router for a client in location domain `domain`: its committed
    /// reads and its transactions' coordinators go to started nodes of that
    /// domain when a partition has one (`read_replica_of`,
    /// `coordinator_of`). None, or a domain no node is in, routes as `new`.
    pub fn for_domain(layout: &ClusterLayout, domain: Option<&str>) -> Router {
        let in_domain = |d: &DataNodeInfo| domain.is_some() && d.location_domain.as_deref() == domain;
        let groups: Vec<Vec<Member>> = (0..layout.node_groups)
            .map(|g| {
                let member = |d: &DataNodeInfo| Member {
                    node: d.node_id,
                    shards: d.shards.len() as u16,
                    status: d.status,
                    local: in_domain(d),
                };
                layout.group_nodes(g).into_iter().map(member).collect()
            })
            .collect();
        let has_local = groups.iter().flatten().any(|m| m.local);
        debug_assert!(!has_local || domain.is_some(), "nodes marked local for a router of no domain");
        let (placement, mut moving) = layout.current_placement();
        moving.sort_unstable_by_key(|m| m.partition);
        Router { groups, placement, default_groups: layout.default_groups(), moving, has_local }
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
        let nodes: &[Member] = self.groups.get(place.group as usize).map_or(&[], |g| g.as_slice());
        let slot = place.slot as usize;
        (0..nodes.len())
            .map(move |k| nodes[(slot + k) % nodes.len()])
            .filter(move |m| m.status == status && m.shards > 0)
            .map(move |m| m.shard_for(slot, nodes.len()))
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
        self.groups.iter().find_map(|g| g.iter().position(|m| m.node == node))
    }

    /// The most nodes any node group has.
    pub fn replicas(&self) -> usize {
        self.groups.iter().map(Vec::len).max().unwrap_or(0)
    }

    /// Where a read-committed read of `partition` may go. For a router of
    /// a location domain (`for_domain`) with started replicas of the
    /// partition in it: the one at position `prefer` among them. Otherwise
    /// the replica on the node at position `prefer` (modulo the group's
    /// size) of the partition's node group when that node is started, else
    /// the primary. A batch that uses one `prefer` for all its reads
    /// reaches one node per node group instead of all of them.
    /// Allocation-free.
    pub fn read_replica_of(&self, partition: u32, prefer: usize) -> Option<ShardAddr> {
        let place = self.place_of(partition);
        let nodes = self.groups.get(place.group as usize)?;
        let slot = place.slot as usize;
        if let Some(local) = self.local_replica(nodes, slot, prefer) {
            return Some(local);
        }
        match nodes.get(prefer % nodes.len().max(1)) {
            Some(m) if m.started() => Some(m.shard_for(slot, nodes.len())),
            _ => self.primary_of(partition),
        }
    }

    /// Where a transaction whose first operation is on `partition` is best
    /// coordinated: for a router of a location domain, the partition's
    /// primary if it is in the domain, else its first started replica in
    /// the domain (the client's requests then stay in its domain; the
    /// coordinator reaches the primary); otherwise the primary.
    pub fn coordinator_of(&self, partition: u32) -> Option<ShardAddr> {
        let primary = self.primary_of(partition)?;
        if !self.has_local || self.is_local(primary.node) {
            return Some(primary);
        }
        let place = self.place_of(partition);
        let nodes = self.groups.get(place.group as usize)?;
        Some(self.local_replica(nodes, place.slot as usize, 0).unwrap_or(primary))
    }

    /// Where a page of a scan of `partition` goes (scans read committed
    /// rows, which every started replica holds): for a router of a
    /// location domain, the first started replica of the partition in that
    /// domain; otherwise, or when the domain has none, the primary.
    pub fn scan_replica_of(&self, partition: u32) -> Option<ShardAddr> {
        let place = self.place_of(partition);
        let local = self.groups.get(place.group as usize).and_then(|n| self.local_replica(n, place.slot as usize, 0));
        local.or_else(|| self.primary_of(partition))
    }

    /// Whether the router was made for a location domain that some node is
    /// in: its reads then prefer that domain (`read_replica_of`).
    pub fn has_local(&self) -> bool {
        self.has_local
    }

    /// Whether `node` is in the domain this router was made for.
    pub fn is_local(&self, node: NodeId) -> bool {
        self.groups.iter().flatten().any(|m| m.node == node && m.local)
    }

    /// The replica of the slot on the `prefer`-th (modulo their number)
    /// started node of `nodes` in the router's domain, if any is.
    fn local_replica(&self, nodes: &[Member], slot: usize, prefer: usize) -> Option<ShardAddr> {
        if !self.has_local {
            return None;
        }
        let local = nodes.iter().filter(|m| m.local && m.started()).count();
        if local == 0 {
            return None;
        }
        let m = nodes.iter().filter(|m| m.local && m.started()).nth(prefer % local)?;
        Some(m.shard_for(slot, nodes.len()))
    }

    /// The first started replica of a partition: its primary, or the backup
    /// that took over when the primary's node left. Allocation-free.
    pub fn primary_of(&self, partition: u32) -> Option<ShardAddr> {
        self.in_group(self.place_of(partition), NodeStatus::Started).next()
    }
}
