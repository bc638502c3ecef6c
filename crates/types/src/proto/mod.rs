//! Wire messages between clients, data-node shards and the management server.
//!
//! Every connection carries frames: `[u32 LE length][u64 LE request id][body]`
//! where `length` counts the request id and the body, and the body is the
//! bincode 1 (fixed-width little-endian integers) encoding of one message
//! below. The request id sits outside the body so that a peer whose body does
//! not decode still gets an error answer it can match to its request.
//!
//! The first frame on a data-node connection is a `Hello`; on a
//! management-server connection every frame is an `MgmRequest`.
//!
//! The messages are grouped by protocol, one module each: `client`,
//! `peer`, `membership`, `management`; the layout and routing have their
//! own modules, and `borrowed` holds the allocation-free twins of the
//! lookup path's messages. Byte layouts are in docs/architecture/wire.md.

use crate::error::{DbError, Result};
use crate::expr::{Aggregate, Expr};
use crate::schema::{ColumnDef, ColumnId, IndexId, TableDef, TableId, TableSpec};
use crate::value::Value;
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use std::sync::Arc;

mod borrowed;
mod client;
mod layout;
mod management;
mod membership;
mod peer;
mod routing;

pub use borrowed::*;
pub use client::*;
pub use layout::*;
pub use management::*;
pub use membership::*;
pub use peer::*;
pub use routing::*;

pub const PROTOCOL_VERSION: u32 = 22;
/// Bytes of the frame header: length (4) and request id (8).
pub const FRAME_HEADER: usize = 12;
/// Default largest frame a node accepts.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 64 << 20;

pub type NodeId = u16;

/// One shard (a data-node thread owning a set of partitions): the unit that
/// clients and peers address.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShardAddr {
    pub node: NodeId,
    pub shard: u16,
}

impl std::fmt::Display for ShardAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.node, self.shard)
    }
}

/// A transaction, named by its coordinator's shard and a sequence number
/// unique within that shard's lifetime.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TxId {
    pub tc: ShardAddr,
    pub seq: u64,
}

/// Declares a counter that only moves one step at a time: a newtype of a
/// `u64`, encoded as the `u64`, with checked `next`/`prev` and `NONE` (0).
macro_rules! counter {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[serde(transparent)]
        pub struct $name(pub u64);

        impl $name {
            /// Before the first one.
            pub const NONE: $name = $name(0);
            pub const MAX: $name = $name(u64::MAX);

            /// The one after this one.
            pub fn next(self) -> $name {
                $name(self.0.checked_add(1).expect(concat!($what, " numbers do not run out")))
            }

            /// The one before this one (there is none before 0).
            pub fn prev(self) -> $name {
                $name(self.0.checked_sub(1).expect(concat!($what, " 0 has no predecessor")))
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    };
}

counter!(
    /// A commit epoch (NDB's global checkpoint id). Every commit belongs to
    /// one; an epoch is durable once every live data node has synced its
    /// REDO log through it, and a system restart brings back exactly the
    /// commits of the durable epochs. `NONE`: nothing is durable yet.
    /// Counted apart from membership views (`ViewNumber`).
    CommitEpoch,
    "commit epoch"
);

counter!(
    /// A membership view number: every change of the set of live data
    /// nodes installs the next view. `NONE`: the cluster has not formed.
    /// Counted apart from commit epochs (`CommitEpoch`): the two never mix.
    ViewNumber,
    "view"
);

fn codec() -> impl bincode::Options {
    use bincode::Options;
    bincode::DefaultOptions::new().with_fixint_encoding().allow_trailing_bytes()
}

/// Appends a whole frame (header and body) for `message` to `out`.
pub fn encode_frame<T: Serialize>(out: &mut Vec<u8>, request_id: u64, message: &T) {
    use bincode::Options;
    let start = out.len();
    out.extend_from_slice(&[0u8; 4]);
    out.extend_from_slice(&request_id.to_le_bytes());
    // Serializing into a Vec cannot fail for these message types.
    codec().serialize_into(&mut *out, message).expect("encoding a message into memory cannot fail");
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
}

pub fn frame<T: Serialize>(request_id: u64, message: &T) -> Vec<u8> {
    use bincode::Options;
    // Sized up front: a batch answer of 100 rows would otherwise grow (and
    // copy) its buffer eight times on the way to 12 KiB.
    let body = codec().serialized_size(message).unwrap_or(0) as usize;
    let mut out = Vec::with_capacity(FRAME_HEADER + body);
    encode_frame(&mut out, request_id, message);
    out
}

/// Decodes a frame body. Never panics; allocation is bounded by the body's
/// length because bincode reads from a slice.
pub fn decode_body<T: DeserializeOwned>(body: &[u8]) -> Result<T> {
    use bincode::Options;
    codec()
        .with_limit(body.len() as u64 * 4 + 1024)
        .deserialize(body)
        .map_err(|e| DbError::malformed(format!("could not decode the message: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_rotate_the_primary_over_a_node_group() {
        let node = |id: u16| DataNodeInfo {
            node_id: id,
            node_group: 0,
            host: "h".into(),
            status: NodeStatus::Started,
            shards: vec!["a".into()],
            pid: 0,
            process: 0,
            location_domain: None,
        };
        let layout = ClusterLayout::builder("c")
            .replicas(2)
            .mgmd(1, "m")
            .datanodes(vec![node(2), node(3)])
            .node_groups(1)
            .lock_wait_timeout_ms(1)
            .first_view(ViewNumber(1))
            .build();
        let router = Router::new(&layout);
        let at = |n| ShardAddr { node: n, shard: 0 };
        assert_eq!(router.replicas_of(0), vec![at(2), at(3)]);
        for p in 0..8 {
            for prefer in 0..2 {
                let chosen = router.read_replica_of(p, prefer).unwrap();
                assert!(router.replicas_of(p).contains(&chosen), "partition {p}: {chosen} is not a replica");
                assert_eq!(chosen.node, [2, 3][prefer], "partition {p}: one batch reaches one node");
            }
        }
        assert_eq!(router.replicas_of(1), vec![at(3), at(2)]);
        for p in 0..8 {
            assert_eq!(router.primary_of(p), router.replicas_of(p).first().copied());
        }
        // When node 2 leaves, node 3 takes over every partition.
        let mut without_2 = layout.clone();
        without_2.datanodes[0].status = NodeStatus::NotStarted;
        let router = Router::new(&without_2);
        for p in 0..8 {
            assert_eq!(router.primary_of(p), Some(at(3)));
            assert_eq!(router.replicas_of(p), vec![at(3)]);
        }
        // Restarting, it takes writes as the last backup and nothing else.
        let mut restarting = layout.clone();
        restarting.datanodes[0].status = NodeStatus::Starting;
        let router = Router::new(&restarting);
        for p in 0..8 {
            assert_eq!(router.primary_of(p), Some(at(3)));
            assert_eq!(router.replicas_of(p), vec![at(3), at(2)]);
            assert_eq!(router.read_replica_of(p, 0), Some(at(3)));
        }
        // Admitted to the view, it is started and primary of its share again.
        restarting.restrict_to_view(&[2, 3]);
        assert_eq!(restarting, layout);
    }

    #[test]
    fn a_client_of_a_location_domain_reads_and_coordinates_there() {
        // Two node groups, each with one replica in domain a and one in b.
        let node = |id: u16, group: u32, domain: &str| DataNodeInfo {
            node_id: id,
            node_group: group,
            host: "h".into(),
            status: NodeStatus::Started,
            shards: vec!["s0".into(), "s1".into()],
            pid: 0,
            process: 0,
            location_domain: Some(domain.into()),
        };
        let mut layout = ClusterLayout::builder("c")
            .replicas(2)
            .mgmd(1, "m")
            .datanodes(vec![node(2, 0, "a"), node(3, 0, "b"), node(4, 1, "a"), node(5, 1, "b")])
            .node_groups(2)
            .lock_wait_timeout_ms(1)
            .first_view(ViewNumber(1))
            .build();
        let plain = Router::new(&layout);
        for domain in ["a", "b"] {
            let router = Router::for_domain(&layout, Some(domain));
            let local: Vec<u16> = if domain == "a" { vec![2, 4] } else { vec![3, 5] };
            for p in 0..16 {
                let replicas = plain.replicas_of(p);
                for prefer in 0..2 {
                    let chosen = router.read_replica_of(p, prefer).unwrap();
                    assert!(local.contains(&chosen.node), "domain {domain}, partition {p}: read from {chosen}");
                    assert!(replicas.contains(&chosen), "partition {p}: {chosen} is not a replica of it");
                }
                let tc = router.coordinator_of(p).unwrap();
                assert!(
                    local.contains(&tc.node) && replicas.contains(&tc),
                    "domain {domain}, partition {p}: coordinator {tc}"
                );
                let scan = router.scan_replica_of(p).unwrap();
                assert!(
                    local.contains(&scan.node) && replicas.contains(&scan),
                    "domain {domain}, partition {p}: scan at {scan}"
                );
                assert_eq!(router.primary_of(p), plain.primary_of(p), "a domain changes no primary");
            }
        }
        // A domain no node is in, or none, routes as before.
        for router in [Router::for_domain(&layout, Some("c")), Router::for_domain(&layout, None)] {
            for p in 0..16 {
                assert_eq!(router.read_replica_of(p, 1), plain.read_replica_of(p, 1));
                assert_eq!(router.coordinator_of(p), plain.primary_of(p));
                assert_eq!(router.scan_replica_of(p), plain.primary_of(p));
            }
        }
        // Calls that take turns (a client of a domain passes its rotation)
        // spread reads evenly over the domain's replicas: here nodes 2 and 4
        // of a group of three.
        let mut three = layout.clone();
        three.replicas = 3;
        three.node_groups = 1;
        for d in &mut three.datanodes {
            d.node_group = 0;
            d.location_domain = Some(if d.node_id == 3 { "b" } else { "a" }.into());
        }
        three.datanodes.truncate(3);
        let router = Router::for_domain(&three, Some("a"));
        for p in 0..4 {
            let mut reads = std::collections::BTreeMap::new();
            for turn in 0..6 {
                *reads.entry(router.read_replica_of(p, turn).unwrap().node).or_insert(0) += 1;
            }
            assert_eq!(reads.into_iter().collect::<Vec<_>>(), [(2, 3), (4, 3)], "partition {p}");
        }
        // Node 2 (domain a, group 0) stops: group 0's reads from domain a go
        // to node 3, group 1's stay on node 4.
        layout.datanodes[0].status = NodeStatus::NotStarted;
        let router = Router::for_domain(&layout, Some("a"));
        for p in 0..16 {
            let expected = if router.place_of(p).group == 0 { 3 } else { 4 };
            assert_eq!(router.read_replica_of(p, 0).map(|s| s.node), Some(expected), "partition {p}");
            assert_eq!(router.coordinator_of(p).map(|s| s.node), Some(expected), "partition {p}");
            assert_eq!(router.scan_replica_of(p).map(|s| s.node), Some(expected), "partition {p}");
        }
    }

    /// A batch of committed reads decodes borrowed as it decodes owned, a
    /// column list repeated by the next read shared; any other request is
    /// left to the owned decoding.
    #[test]
    fn lookups_decode_borrowed_like_owned() {
        let read = |key: Vec<u8>, projection: Option<&[ColumnId]>| KeyOp {
            table: 3,
            table_version: 2,
            partition: key.len() as u32,
            key,
            kind: OpKind::Read { lock: LockMode::Committed },
            projection: projection.map(Arc::from),
        };
        let ops = vec![
            read(vec![1, 2, 3], Some(&[0, 2])),
            read(vec![4], Some(&[0, 2])),
            read(vec![], None),
            read(vec![5; 30], Some(&[1])),
            read(vec![6], Some(&[0, 2])),
        ];
        let body = |request: &ClientRequest| frame(0, request)[FRAME_HEADER..].to_vec();
        let batch = body(&ClientRequest::Batch(ops.clone()));
        let (mut reads, mut columns) = (Vec::new(), Vec::new());
        assert!(decode_lookups(&batch, &mut reads, &mut columns));
        assert_eq!(columns, [0, 2, 1, 0, 2], "the second read shares the first's list");
        let back: Vec<KeyOp> = reads
            .iter()
            .map(|r| KeyOp {
                table: r.table,
                table_version: r.table_version,
                partition: r.partition,
                key: r.key.to_vec(),
                kind: OpKind::Read { lock: LockMode::Committed },
                projection: r.projection.map(|(s, e)| Arc::from(&columns[s as usize..e as usize])),
            })
            .collect();
        assert_eq!(back, ops);
        let mut with_write = ops.clone();
        with_write[2].kind = OpKind::Delete;
        let mut locking = ops.clone();
        locking[4].kind = OpKind::Read { lock: LockMode::Shared };
        let mut update = ops.clone();
        update[0].kind = OpKind::Update { set: vec![(1, crate::expr::Expr::Const(crate::Value::Int(2)))] };
        let mut insert = ops.clone();
        insert[1].kind = OpKind::Insert { row: vec![crate::Value::Int(2)] };
        for other in [
            ClientRequest::Batch(with_write),
            ClientRequest::Batch(locking),
            ClientRequest::Batch(update),
            ClientRequest::Batch(insert),
            ClientRequest::TxExec { tx: None, ops: ops.clone(), commit: true },
            ClientRequest::Ping,
        ] {
            assert!(!decode_lookups(&body(&other), &mut Vec::new(), &mut Vec::new()), "{other:?}");
        }
        assert!(!decode_lookups(&batch[..batch.len() - 3], &mut Vec::new(), &mut Vec::new()));
    }

    /// Every kind of result decodes borrowed as it decodes owned; an answer
    /// that is not a batch comes back whole.
    #[test]
    fn batch_answers_decode_borrowed_like_owned() {
        let results = vec![
            OpResult::Row(vec![1, 2, 3]),
            OpResult::NotFound,
            OpResult::Row(vec![]),
            OpResult::Done,
            OpResult::Error(DbError::new(crate::ErrorCode::WrongShard, "moved")),
            OpResult::Unchanged,
        ];
        let body = |message: &ClientResponse| frame(0, message)[FRAME_HEADER..].to_vec();
        let mut seen = Vec::new();
        let count = decode_batch_answer(&body(&ClientResponse::Batch(results.clone())), |r| {
            seen.push(match r {
                OpResultRef::Row(bytes) => OpResult::Row(bytes.to_vec()),
                OpResultRef::NotFound => OpResult::NotFound,
                OpResultRef::Done => OpResult::Done,
                OpResultRef::Error(e) => OpResult::Error(e),
                OpResultRef::Unchanged => OpResult::Unchanged,
            });
            Ok(())
        })
        .unwrap();
        assert_eq!(count, Ok(results.len()));
        assert_eq!(seen, results);
        let refused = ClientResponse::Error(DbError::new(crate::ErrorCode::NotServing, "stopping"));
        assert_eq!(decode_batch_answer(&body(&refused), |_| Ok(())).unwrap(), Err(refused));
        // A consumer's error stops the decoding and is returned as it was.
        let stop = decode_batch_answer(&body(&ClientResponse::Batch(results)), |r| match r {
            OpResultRef::NotFound => Err(DbError::malformed("bad row")),
            _ => Ok(()),
        });
        assert_eq!(stop.unwrap_err(), DbError::malformed("bad row"));
        // Cut short, it fails cleanly.
        let whole = body(&ClientResponse::Batch(vec![OpResult::Row(vec![7; 30])]));
        assert!(decode_batch_answer(&whole[..whole.len() - 5], |_| Ok(())).is_err());
    }

    #[test]
    fn a_moving_partition_takes_writes_in_its_new_group_and_moves_when_a_node_of_it_starts() {
        let node = |id: u16, group: u32, status: NodeStatus| DataNodeInfo {
            node_id: id,
            node_group: group,
            host: "h".into(),
            status,
            shards: vec!["a".into(), "b".into()],
            pid: 0,
            process: 0,
            location_domain: None,
        };
        let started = NodeStatus::Started;
        let mut layout = ClusterLayout::builder("c")
            .replicas(2)
            .datanodes(vec![node(2, 0, started), node(3, 0, started), node(4, 1, started), node(5, 1, started)])
            .node_groups(2)
            .build();
        let before: Vec<Vec<ShardAddr>> = (0..16).map(|p| Router::new(&layout).replicas_of(p)).collect();
        let new = vec![node(6, 2, NodeStatus::NotStarted), node(7, 2, NodeStatus::NotStarted)];
        let moves = layout.add_node_groups(new, 3, 12);
        // Each old group gives two of its highest slots: 12 / 3 = 4 each.
        let moved: Vec<u32> = moves.iter().map(|m| m.partition).collect();
        assert_eq!(moved, vec![10, 11, 8, 9], "{moves:?}");
        assert_eq!(moves.iter().map(|m| m.to.slot).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
        // Nothing changes for partitions that stay, nor before a node of
        // the new group starts.
        let router = Router::new(&layout);
        for p in 0..16 {
            assert_eq!(router.replicas_of(p), before[p as usize], "partition {p}");
        }
        // Starting nodes of the new group take the moving partitions' writes.
        layout.datanodes[4].status = NodeStatus::Starting;
        layout.datanodes[5].status = NodeStatus::Starting;
        let router = Router::new(&layout);
        let at = |node, shard| ShardAddr { node, shard };
        assert_eq!(router.replicas_of(10), [before[10].clone(), vec![at(6, 0), at(7, 0)]].concat());
        assert_eq!(router.replicas_of(9), [before[9].clone(), vec![at(7, 1), at(6, 1)]].concat());
        assert_eq!(router.primary_of(10), before[10].first().copied());
        for p in 0..8 {
            assert_eq!(router.replicas_of(p), before[p as usize], "partition {p} does not move");
        }
        // The view that starts node 6 moves them all to it.
        layout.datanodes[4].status = started;
        let router = Router::new(&layout);
        for m in &moves {
            assert_eq!(router.primary_of(m.partition).map(|s| s.node), Some(6), "{m:?}");
            assert!(router.replicas_of(m.partition).iter().all(|s| s.node >= 6), "{m:?}");
        }
        // Settled, the placement says the same, and numbers beyond it (new
        // tables' partitions) spread over all three groups.
        let settled_before = layout.clone();
        assert_eq!(layout.settle_moves(), vec![10, 11, 8, 9]);
        assert!(layout.moves.is_empty());
        let (a, b) = (Router::new(&settled_before), Router::new(&layout));
        for p in 0..12 {
            assert_eq!(a.replicas_of(p), b.replicas_of(p), "partition {p}");
        }
        assert_eq!(b.place_of(14).group, 2);
        // Too few partitions to move any: new tables use the new group at once.
        let mut small = settled_before.clone();
        small.moves.clear();
        let more = vec![node(8, 3, NodeStatus::NotStarted), node(9, 3, NodeStatus::NotStarted)];
        assert!(small.add_node_groups(more, 4, 2).is_empty());
        assert_eq!(small.default_groups(), 4);
    }
}
