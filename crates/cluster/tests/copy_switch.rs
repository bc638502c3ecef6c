//! One node group of three replicas: A and C started, B restarting and
//! copying its partitions from their primaries. A, the primary B copies
//! from, fails mid-copy, and B copies again from C, which took over. The
//! messages are delivered one at a time in the orders that make the switch
//! hard: B already holds a commit that C has not applied yet, or B holds a
//! write back for A's commit that will never come.

use latsdb_cluster::{Outbox, Shard, ShardConfig};
use latsdb_types::proto::*;
use latsdb_types::schema::{ColumnDef, ColumnType, IntWidth, TableDef, TableSpec};
use latsdb_types::{TableMeta, Value};
mod common;
use common::Wire;

const A: ShardAddr = ShardAddr { node: 2, shard: 0 };
const C: ShardAddr = ShardAddr { node: 3, shard: 0 };
const B: ShardAddr = ShardAddr { node: 4, shard: 0 };
const PARTITIONS: u32 = 6;

fn layout(version: u64, a: NodeStatus, b: NodeStatus) -> ClusterLayout {
    let node = |id: u16, status: NodeStatus| DataNodeInfo {
        node_id: id,
        node_group: 0,
        host: "sim".into(),
        status,
        shards: if status == NodeStatus::NotStarted { vec![] } else { vec![format!("sim:{id}")] },
        pid: 0,
        process: 0,
        location_domain: None,
    };
    ClusterLayout::builder("s")
        .version(version)
        .replicas(3)
        .mgmd(1, "sim")
        .datanodes(vec![node(2, a), node(3, NodeStatus::Started), node(4, b)])
        .node_groups(1)
        .default_partitions(PARTITIONS)
        .lock_wait_timeout_ms(100)
        .checkpoint_trigger_mb(0)
        .first_view(ViewNumber(1))
        .build()
}

/// B restarting, A and C started.
fn restarting() -> ClusterLayout {
    layout(3, NodeStatus::Started, NodeStatus::Starting)
}

/// A failed during B's restart.
fn a_failed() -> ClusterLayout {
    layout(5, NodeStatus::NotStarted, NodeStatus::Starting)
}

fn index(a: ShardAddr) -> usize {
    match a.node {
        2 => 0,
        3 => 1,
        _ => 2,
    }
}

struct Net {
    shards: Vec<Shard>,
    wire: Wire,
    a_alive: bool,
    meta: TableMeta,
    now: u64,
}

impl Net {
    /// Rows 0..100 on A and C; B restarts from an empty disk and asks
    /// for its copies (which A does not start before its next tick).
    fn new() -> Net {
        let spec = TableSpec::new("s", "t")
            .column(ColumnDef::new("id", ColumnType::int(IntWidth::Big)))
            .column(ColumnDef::new("v", ColumnType::int(IntWidth::Big)))
            .primary_key(&["id"]);
        let def = TableDef::from_spec(&spec, 1, PARTITIONS).unwrap();
        let before = layout(1, NodeStatus::Started, NodeStatus::NotStarted);
        let shards = [A, C, B]
            .iter()
            .map(|&me| {
                let cfg = ShardConfig {
                    me,
                    lock_wait_timeout_us: 100_000,
                    first_tx_seq: u64::from(me.node) << 40,
                    data_memory_bytes: 0,
                    redo_limit_bytes: 0,
                    lease: latsdb_cluster::Lease::unlimited(),
                    durable: false,
                    node_shards: 1,
                    pages: latsdb_cluster::PagesConfig::default(),
                };
                let mut s = Shard::new(cfg, if me == B { restarting() } else { before.clone() });
                s.apply_schema(SchemaChange::CreateTable(def.clone())).unwrap();
                s
            })
            .collect();
        let mut n = Net { shards, wire: Wire::default(), a_alive: true, meta: TableMeta::new(def), now: 0 };
        for id in 0..100 {
            let op = n.upsert(id, id);
            let primary = before.primary_of(op.partition).unwrap();
            n.request(primary, 0, ClientRequest::Batch(vec![op]));
            n.deliver_all();
        }
        for at in [A, C, B] {
            n.set_layout(at, restarting());
        }
        n.deliver_all();
        n.wire.responses.clear();
        n
    }

    fn collect(&mut self, from: ShardAddr, out: &mut Outbox) {
        self.wire.collect(from, out);
    }

    fn request(&mut self, at: ShardAddr, req_id: u64, req: ClientRequest) {
        self.wire.request(&mut self.shards[index(at)], at, req_id, req, self.now);
    }

    fn set_layout(&mut self, at: ShardAddr, layout: ClusterLayout) {
        let mut out = Outbox::default();
        self.shards[index(at)].set_layout(layout, self.now, &mut out);
        self.collect(at, &mut out);
    }

    fn deliver(&mut self, pos: usize) {
        let (from, to, msg) = self.wire.queue.remove(pos).unwrap();
        if !self.a_alive && (from == A || to == A) {
            return;
        }
        let mut out = Outbox::default();
        self.shards[index(to)].on_peer(from, 0, msg, self.now, &mut out);
        self.collect(to, &mut out);
    }

    /// Delivers the queued messages that `pick` selects, in order, until
    /// none is left (also those they cause).
    fn deliver_only(&mut self, pick: impl Fn(&ShardAddr, &ShardAddr, &PeerMsg) -> bool) {
        while let Some(pos) = self.wire.queue.iter().position(|(f, t, m)| pick(f, t, m)) {
            self.deliver(pos);
        }
    }

    fn deliver_all(&mut self) {
        self.deliver_only(|_, _, _| true);
    }

    /// Ticks every live shard 10 ms later.
    fn tick(&mut self) {
        self.now += 10_000;
        for at in [A, C, B] {
            if at == A && !self.a_alive {
                continue;
            }
            let mut out = Outbox::default();
            self.shards[index(at)].on_tick(self.now, &mut out);
            self.collect(at, &mut out);
        }
    }

    /// A fails: what it sent and did not arrive is lost; C and then B
    /// learn the layout without it.
    fn kill_a(&mut self) {
        self.a_alive = false;
        self.wire.queue.retain(|(from, to, _)| *from != A && *to != A);
        self.set_layout(C, a_failed());
    }

    fn upsert(&self, id: i64, v: i64) -> KeyOp {
        let key = self.meta.encode_key(&[Value::Int(id)]).unwrap();
        let row = vec![Value::Int(id), Value::Int(v)];
        KeyOp {
            table: 1,
            table_version: 1,
            partition: self.meta.partition_of(&key),
            key,
            kind: OpKind::Upsert { row },
            projection: None,
        }
    }

    /// A key whose partition A is the primary of while B restarts.
    fn key_of_a(&self) -> i64 {
        (0..).find(|&id| restarting().primary_of(self.upsert(id, 0).partition) == Some(A)).unwrap()
    }

    fn take(&mut self, req_id: u64) -> Option<ClientResponse> {
        self.wire.take(req_id)
    }

    /// Runs until B's copy is done (ticking, everything delivered).
    fn finish_copy(&mut self) {
        for _ in 0..1_000 {
            self.tick();
            self.deliver_all();
            let progress = self.shards[index(B)].sync_progress();
            assert!(progress.failed.is_none(), "{progress:?}");
            if progress.done() {
                return;
            }
        }
        panic!("the copy did not finish: {:?}", self.shards[index(B)].sync_progress());
    }

    fn value_at(&self, at: ShardAddr, id: i64) -> Option<i64> {
        let key = self.meta.encode_key(&[Value::Int(id)]).unwrap();
        let rows = self.shards[index(at)].partition_rows(1, self.meta.partition_of(&key)).unwrap();
        rows.iter().find(|(k, _)| *k == key).and_then(|(_, row)| self.meta.layout.get(row, 1).as_i64())
    }

    fn assert_b_equals_c(&self) {
        for p in 0..PARTITIONS {
            let c = self.shards[index(C)].partition_rows(1, p).unwrap();
            let b = self.shards[index(B)].partition_rows(1, p).unwrap();
            assert!(c == b, "partition {p} differs between the new primary and the restarted replica");
        }
    }
}

fn is_sync(m: &PeerMsg) -> bool {
    matches!(
        m,
        PeerMsg::SyncRequest { .. } | PeerMsg::SyncDigest { .. } | PeerMsg::SyncFetch { .. } | PeerMsg::SyncRows { .. }
    )
}

/// A coordinated T on A (its own partition) and committed it there; its
/// commit reached B but not C when A failed. B, copying from C now, holds
/// T; C gets T only from the takeover of A's transactions. C must not send
/// B its rows before T is settled, or B would take the row back to its
/// value before T, and nothing would bring T back to B.
#[test]
fn the_new_source_sends_nothing_before_the_transactions_it_took_part_in_are_settled() {
    let mut n = Net::new();
    let id = n.key_of_a();
    n.request(A, 1_000, ClientRequest::TxExec { tx: None, ops: vec![n.upsert(id, -7)], commit: true });
    n.deliver_only(|f, _, m| !(*f == A && matches!(m, PeerMsg::ReplicaCommit { .. })));
    // A applied T and sent its commit to both backups: B gets it, C not.
    n.deliver_only(|f, t, m| *f == A && *t == B && matches!(m, PeerMsg::ReplicaCommit { .. }));
    assert_eq!(n.value_at(B, id), Some(-7));
    n.kill_a();
    n.set_layout(B, a_failed());
    // Only the copy runs for a while; the takeover's messages wait.
    for _ in 0..20 {
        n.tick();
        n.deliver_only(|_, _, m| is_sync(m));
    }
    n.finish_copy();
    assert_eq!(n.value_at(C, id), Some(-7), "the takeover committed T on C");
    assert_eq!(n.value_at(B, id), Some(-7), "the copy took T back on B");
    n.assert_b_equals_c();
    assert!(n.shards[index(B)].sync_progress().sources_switched >= 1);
}

/// C coordinated T, a write on a partition of A. A failed after applying
/// T and before its commit reached the backups; C commits T on the
/// surviving replicas itself. B hears that before it learns that A failed:
/// still copying from A, it holds T's write back for A's own commit, which
/// never comes. Once B copies from C instead, T's write is applied (and
/// its row lock released): a later write to the row succeeds.
#[test]
fn writes_held_back_for_a_failed_source_are_applied_when_the_copy_switches() {
    let mut n = Net::new();
    let id = n.key_of_a();
    n.request(C, 1_000, ClientRequest::TxExec { tx: None, ops: vec![n.upsert(id, -7)], commit: true });
    n.deliver_only(|f, _, m| !(*f == A && matches!(m, PeerMsg::ReplicaCommit { .. })));
    n.kill_a();
    // C's recommit reaches B while B still copies from A.
    n.deliver_only(|f, t, m| *f == C && *t == B && matches!(m, PeerMsg::TxCommit { .. }));
    assert_eq!(n.value_at(B, id), None, "B holds T's write back while it copies from A");
    n.set_layout(B, a_failed());
    n.deliver_all();
    assert!(matches!(n.take(1_000), Some(ClientResponse::TxExec { committed: true, .. })));
    assert_eq!(n.value_at(B, id), Some(-7), "switching to C applied the held write");
    n.finish_copy();
    n.request(C, 1_001, ClientRequest::Batch(vec![n.upsert(id, 8)]));
    n.deliver_all();
    match n.take(1_001) {
        Some(ClientResponse::Batch(r)) => assert_eq!(r, vec![OpResult::Done]),
        other => panic!("{other:?}"),
    }
    assert_eq!(n.value_at(B, id), Some(8));
    n.assert_b_equals_c();
}
