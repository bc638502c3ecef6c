//! Two replicas in one node group: writes reach both, and a failed node's
//! in-flight work is finished by the survivor (a write whose backup died
//! completes; a transaction executing on the dead node aborts with a
//! retriable error; a commit in flight is completed by the backup that took
//! over). Messages are delivered one at a time so a node can fail between
//! any two of them.

use latsdb_cluster::{Outbox, Shard, ShardConfig};
use latsdb_types::proto::*;
use latsdb_types::schema::{ColumnDef, ColumnType, IntWidth, TableDef, TableSpec};
use latsdb_types::{ErrorCode, TableMeta, Value};
mod common;
use common::Wire;

const A: ShardAddr = ShardAddr { node: 2, shard: 0 };
const B: ShardAddr = ShardAddr { node: 3, shard: 0 };

fn layout(b_started: bool) -> ClusterLayout {
    let node = |id: u16, started: bool| DataNodeInfo {
        node_id: id,
        node_group: 0,
        host: "sim".into(),
        status: if started { NodeStatus::Started } else { NodeStatus::NotStarted },
        shards: if started { vec![format!("sim:{id}")] } else { vec![] },
        pid: 0,
        process: 0,
        location_domain: None,
    };
    ClusterLayout::builder("r")
        .replicas(2)
        .mgmd(1, "sim")
        .datanodes(vec![node(2, true), node(3, b_started)])
        .node_groups(1)
        .default_partitions(4)
        .lock_wait_timeout_ms(100)
        .first_view(ViewNumber(1))
        .build()
}

struct Net {
    shards: Vec<Shard>,
    wire: Wire,
    b_alive: bool,
    meta: TableMeta,
}

fn index(a: ShardAddr) -> usize {
    (a.node - 2) as usize
}

impl Net {
    fn new() -> Net {
        let spec = TableSpec::new("r", "t")
            .column(ColumnDef::new("id", ColumnType::int(IntWidth::Big)))
            .column(ColumnDef::new("v", ColumnType::int(IntWidth::Big)))
            .primary_key(&["id"]);
        let def = TableDef::from_spec(&spec, 1, 4).unwrap();
        let shards = [A, B]
            .iter()
            .map(|&me| {
                let cfg = ShardConfig {
                    me,
                    lock_wait_timeout_us: 100_000,
                    first_tx_seq: 0,
                    data_memory_bytes: 0,
                    redo_limit_bytes: 0,
                    lease: latsdb_cluster::Lease::unlimited(),
                    durable: false,
                    node_shards: 1,
                    pages: latsdb_cluster::PagesConfig::default(),
                };
                let mut s = Shard::new(cfg, layout(true));
                s.apply_schema(SchemaChange::CreateTable(def.clone())).unwrap();
                s
            })
            .collect();
        Net { shards, wire: Wire::default(), b_alive: true, meta: TableMeta::new(def) }
    }

    fn collect(&mut self, from: ShardAddr, out: &mut Outbox) {
        self.wire.collect(from, out);
    }

    fn request(&mut self, at: ShardAddr, req_id: u64, req: ClientRequest) {
        self.wire.request(&mut self.shards[index(at)], at, req_id, req, 0);
    }

    /// Delivers queued messages in order until `stop` matches the next one
    /// (which stays queued) or nothing is left.
    fn deliver_until(&mut self, stop: impl Fn(&ShardAddr, &ShardAddr, &PeerMsg) -> bool) {
        while let Some((from, to, msg)) = self.wire.queue.front() {
            if stop(from, to, msg) {
                return;
            }
            let (from, to, msg) = self.wire.queue.pop_front().unwrap();
            if !self.b_alive && (to == B || from == B) {
                continue;
            }
            let mut out = Outbox::default();
            self.shards[index(to)].on_peer(from, 0, msg, 0, &mut out);
            self.collect(to, &mut out);
        }
    }

    /// Loses the first queued message matching `pred`.
    fn drop_first(&mut self, pred: impl Fn(&ShardAddr, &ShardAddr, &PeerMsg) -> bool) {
        let pos = self.wire.queue.iter().position(|(f, t, m)| pred(f, t, m)).expect("a matching message is queued");
        self.wire.queue.remove(pos);
    }

    fn deliver_all(&mut self) {
        self.deliver_until(|_, _, _| false);
    }

    /// Node B fails: its queued messages are lost and A learns the new layout.
    fn kill_b(&mut self) {
        self.b_alive = false;
        self.wire.queue.retain(|(from, to, _)| *from != B && *to != B);
        let mut out = Outbox::default();
        self.shards[index(A)].set_layout(layout(false), 0, &mut out);
        self.collect(A, &mut out);
        self.deliver_all();
    }

    fn op(&self, id: i64, kind: OpKind) -> KeyOp {
        let key = self.meta.encode_key(&[Value::Int(id)]).unwrap();
        KeyOp { table: 1, table_version: 1, partition: self.meta.partition_of(&key), key, kind, projection: None }
    }

    fn insert(&self, id: i64) -> KeyOp {
        self.op(id, OpKind::Insert { row: vec![Value::Int(id), Value::Int(id * 10)] })
    }

    /// A key whose partition's primary is `primary`.
    fn key_with_primary(&self, primary: ShardAddr, skip: i64) -> i64 {
        let router = Router::new(&layout(true));
        (skip..).find(|&id| router.primary_of(self.op(id, OpKind::Delete).partition) == Some(primary)).unwrap()
    }

    fn take(&mut self, req_id: u64) -> Option<ClientResponse> {
        self.wire.take(req_id)
    }

    fn read_at(&mut self, at: ShardAddr, id: i64) -> Option<i64> {
        let op = self.op(id, OpKind::Read { lock: LockMode::Committed });
        self.request(at, 9_999, ClientRequest::Batch(vec![op]));
        match self.take(9_999) {
            Some(ClientResponse::Batch(r)) => match &r[0] {
                OpResult::Row(row) => self.meta.layout.get(row, 1).as_i64(),
                OpResult::NotFound => None,
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn writes_reach_every_replica_and_backups_serve_committed_reads() {
    let mut n = Net::new();
    for id in 0..40 {
        let op = n.insert(id);
        let tc = Router::new(&layout(true)).primary_of(op.partition).unwrap();
        if id % 2 == 0 {
            n.request(tc, id as u64, ClientRequest::TxExec { tx: None, ops: vec![op], commit: true });
        } else {
            n.request(tc, id as u64, ClientRequest::Batch(vec![op]));
        }
        n.deliver_all();
        match n.take(id as u64) {
            Some(ClientResponse::TxExec { committed: true, .. }) => {}
            Some(ClientResponse::Batch(r)) if r == vec![OpResult::Done] => {}
            other => panic!("write {id}: {other:?}"),
        }
    }
    for p in 0..4 {
        let a = n.shards[0].partition_rows(1, p).unwrap();
        let b = n.shards[1].partition_rows(1, p).unwrap();
        assert_eq!(a, b, "partition {p} differs between replicas");
    }
    // A committed read at a backup sees the write.
    let id = n.key_with_primary(A, 0);
    assert_eq!(n.read_at(B, id), Some(id * 10));
    // Writes and locking reads are refused at a backup.
    n.request(
        B,
        500,
        ClientRequest::Batch(vec![n.insert(id + 1000), n.op(id, OpKind::Read { lock: LockMode::Shared })]),
    );
    n.deliver_all();
    let partition_of_new = n.op(id + 1000, OpKind::Delete).partition;
    match n.take(500) {
        Some(ClientResponse::Batch(r)) => {
            let b_is_primary = Router::new(&layout(true)).primary_of(partition_of_new) == Some(B);
            assert_eq!(matches!(&r[0], OpResult::Error(e) if e.code == ErrorCode::WrongShard), !b_is_primary);
            assert!(matches!(&r[1], OpResult::Error(e) if e.code == ErrorCode::WrongShard));
        }
        other => panic!("{other:?}"),
    }
}

/// A batch of writes on the primary's partitions reaches the backup with
/// one message each way, applied there at once: no commit round follows.
#[test]
fn a_batch_of_writes_is_applied_on_the_backup_with_one_message_each_way() {
    let mut n = Net::new();
    let ids: std::collections::BTreeSet<i64> = (0..200).map(|skip| n.key_with_primary(A, skip)).collect();
    let ops: Vec<KeyOp> = ids.iter().take(50).map(|&id| n.insert(id)).collect();
    n.request(A, 1, ClientRequest::Batch(ops));
    let applies: Vec<usize> = n
        .wire
        .queue
        .iter()
        .filter_map(|(_, to, m)| match m {
            PeerMsg::ReplicaApply { writes, .. } if *to == B => Some(writes.len()),
            _ => None,
        })
        .collect();
    assert_eq!(applies, vec![50]);
    n.deliver_until(|_, _, m| matches!(m, PeerMsg::ReplicaPrepared { .. }));
    let answers: Vec<usize> = n
        .wire
        .queue
        .iter()
        .filter_map(|(_, _, m)| match m {
            PeerMsg::ReplicaPrepared { results, .. } => Some(results.len()),
            _ => None,
        })
        .collect();
    assert_eq!(answers, vec![50]);
    // The backup holds the rows before the primary commits them.
    let first = *ids.iter().next().unwrap();
    assert_eq!(n.read_at(B, first), Some(first * 10));
    n.deliver_until(|_, _, m| matches!(m, PeerMsg::ReplicaCommit { .. }));
    assert!(!n.wire.queue.iter().any(|(_, _, m)| matches!(m, PeerMsg::ReplicaCommit { .. })));
    match n.take(1) {
        Some(ClientResponse::Batch(r)) => assert!(r.iter().all(|r| *r == OpResult::Done), "{r:?}"),
        other => panic!("{other:?}"),
    }
    for p in 0..4 {
        assert_eq!(n.shards[0].partition_rows(1, p), n.shards[1].partition_rows(1, p), "partition {p}");
    }
    assert_eq!(n.shards[0].activity(), (0, 0, 0));
    assert_eq!(n.shards[1].activity(), (0, 0, 0));
}

/// A batch that writes one row twice takes the two-phase path (a refusal
/// of the second write could not be undone after the first was applied),
/// and both replicas end with the second write.
#[test]
fn a_batch_writing_a_row_twice_is_prepared_and_committed_on_the_backup() {
    let mut n = Net::new();
    let id = n.key_with_primary(A, 0);
    let again = n.op(id, OpKind::Upsert { row: vec![Value::Int(id), Value::Int(7)] });
    n.request(A, 1, ClientRequest::Batch(vec![n.insert(id), again]));
    assert!(n.wire.queue.iter().any(|(_, to, m)| *to == B && matches!(m, PeerMsg::ReplicaPrepare { .. })));
    assert!(!n.wire.queue.iter().any(|(_, _, m)| matches!(m, PeerMsg::ReplicaApply { .. })));
    n.deliver_all();
    assert_eq!(n.take(1), Some(ClientResponse::Batch(vec![OpResult::Done, OpResult::Done])));
    assert_eq!(n.read_at(A, id), Some(7));
    assert_eq!(n.read_at(B, id), Some(7));
}

/// A write the backup refuses to apply is not committed at the primary
/// either; the batch's other writes are.
#[test]
fn a_write_the_backup_refuses_is_dropped_at_the_primary_too() {
    let mut n = Net::new();
    let first = n.key_with_primary(A, 0);
    let ids = [first, n.key_with_primary(A, first + 1)];
    n.request(A, 1, ClientRequest::Batch(ids.iter().map(|&id| n.insert(id)).collect()));
    // The backup refuses the second write (as one whose table it does not
    // know yet would be).
    let refused = n.op(ids[1], OpKind::Delete).key;
    for (_, _, m) in n.wire.queue.iter_mut() {
        if let PeerMsg::ReplicaApply { writes, .. } = m {
            for w in writes.iter_mut().filter(|w| w.key == refused) {
                w.table = 99;
            }
        }
    }
    n.deliver_all();
    match n.take(1) {
        Some(ClientResponse::Batch(r)) => {
            assert_eq!(r[0], OpResult::Done);
            assert!(matches!(&r[1], OpResult::Error(e) if e.code == ErrorCode::UnknownTable), "{r:?}");
        }
        other => panic!("{other:?}"),
    }
    for at in [A, B] {
        assert_eq!(n.read_at(at, ids[0]), Some(ids[0] * 10));
        assert_eq!(n.read_at(at, ids[1]), None);
    }
    assert_eq!(n.shards[0].activity(), (0, 0, 0));
}

#[test]
fn a_write_completes_when_its_backup_dies() {
    let mut n = Net::new();
    let id = n.key_with_primary(A, 0);
    n.request(A, 1, ClientRequest::TxExec { tx: None, ops: vec![n.insert(id)], commit: true });
    // The prepare to the backup is lost with the backup.
    n.deliver_until(|_, to, msg| *to == B && matches!(msg, PeerMsg::ReplicaPrepare { .. }));
    assert!(n.take(1).is_none(), "the write must wait for its backup");
    n.kill_b();
    assert!(matches!(n.take(1), Some(ClientResponse::TxExec { committed: true, .. })));
    assert_eq!(n.read_at(A, id), Some(id * 10));
    assert_eq!(n.shards[0].activity(), (0, 0, 0));
}

#[test]
fn a_transaction_executing_on_a_failed_node_aborts_with_a_retriable_error() {
    let mut n = Net::new();
    let on_a = n.key_with_primary(A, 0);
    let on_b = n.key_with_primary(B, 0);
    n.request(A, 1, ClientRequest::TxExec { tx: None, ops: vec![n.insert(on_a), n.insert(on_b)], commit: false });
    // B fails before it answers anything.
    n.kill_b();
    match n.take(1) {
        Some(ClientResponse::TxAborted { error: Some(e), .. }) => {
            assert_eq!(e.code, ErrorCode::NodeUnavailable);
            assert!(e.is_retriable());
        }
        other => panic!("{other:?}"),
    }
    assert!(n.take(1).is_none(), "exactly one answer");
    assert_eq!(n.shards[0].activity(), (0, 0, 0), "A holds no locks or transactions");
    assert_eq!(n.read_at(A, on_a), None, "the aborted insert is invisible");
    // The survivor now serves both partitions.
    n.request(A, 2, ClientRequest::TxExec { tx: None, ops: vec![n.insert(on_a), n.insert(on_b)], commit: true });
    n.deliver_all();
    assert!(matches!(n.take(2), Some(ClientResponse::TxExec { committed: true, .. })));
    assert_eq!(n.read_at(A, on_b), Some(on_b * 10));
    // The coordinator counted both outcomes and every keyed operation.
    let counts = n.shards[0].op_counts();
    let node_failures = counts.aborts.of(latsdb_types::work::AbortCause::NodeFailure);
    assert_eq!((counts.committed, counts.aborts.total(), node_failures), (1, 1, 1), "{counts:?}");
    assert!(counts.key_ops >= 3, "{counts:?}");
    // Each of the two requests was answered, and its latency recorded.
    assert_eq!(counts.tx_request_latency.count, 2, "{counts:?}");
}

#[test]
fn a_commit_in_flight_is_completed_by_the_backup_that_took_over() {
    let mut n = Net::new();
    let on_b = n.key_with_primary(B, 0);
    n.request(A, 1, ClientRequest::TxExec { tx: None, ops: vec![n.insert(on_b)], commit: true });
    // Everything up to the coordinator's commit to B happens; then B fails.
    n.deliver_until(|_, to, msg| *to == B && matches!(msg, PeerMsg::TxCommit { .. }));
    assert!(n.take(1).is_none());
    n.kill_b();
    assert!(matches!(n.take(1), Some(ClientResponse::TxExec { committed: true, .. })));
    assert_eq!(n.read_at(A, on_b), Some(on_b * 10), "the backup committed what it staged");
    assert_eq!(n.shards[0].activity(), (0, 0, 0));
}

#[test]
fn a_failed_coordinators_commit_is_completed_by_the_survivors() {
    let mut n = Net::new();
    let on_a = n.key_with_primary(A, 0);
    let on_b = n.key_with_primary(B, 0);
    // B coordinates a transaction over both nodes.
    n.request(B, 1, ClientRequest::TxExec { tx: None, ops: vec![n.insert(on_a), n.insert(on_b)], commit: true });
    // Run until B decides to commit; B commits its own part and tells A (as
    // backup) with ReplicaCommit, but its TxCommit to A is lost when B fails.
    n.deliver_until(|_, to, msg| *to == A && matches!(msg, PeerMsg::TxCommit { .. }));
    n.drop_first(|_, to, msg| *to == A && matches!(msg, PeerMsg::TxCommit { .. }));
    n.deliver_until(|from, _, _| *from != B);
    n.kill_b();
    // The survivor saw the commit decision (the ReplicaCommit), so the
    // takeover commits A's own part too: all or nothing.
    assert_eq!(n.read_at(A, on_b), Some(on_b * 10));
    assert_eq!(n.read_at(A, on_a), Some(on_a * 10));
    assert_eq!(n.shards[0].activity(), (0, 0, 0));
}

#[test]
fn a_failed_coordinators_unfinished_transaction_is_aborted_everywhere() {
    let mut n = Net::new();
    let on_a = n.key_with_primary(A, 0);
    let on_b = n.key_with_primary(B, 0);
    n.request(B, 1, ClientRequest::TxExec { tx: None, ops: vec![n.insert(on_a), n.insert(on_b)], commit: true });
    // Everything is prepared on both nodes; B fails before deciding.
    n.deliver_until(|_, to, msg| *to == B && matches!(msg, PeerMsg::TxOpResults { .. }));
    n.kill_b();
    assert_eq!(n.read_at(A, on_a), None);
    assert_eq!(n.read_at(A, on_b), None);
    assert_eq!(n.shards[0].activity(), (0, 0, 0), "the takeover released every lock");
    // The rows are free for new writers.
    n.request(A, 2, ClientRequest::TxExec { tx: None, ops: vec![n.insert(on_a), n.insert(on_b)], commit: true });
    n.deliver_all();
    assert!(matches!(n.take(2), Some(ClientResponse::TxExec { committed: true, .. })));
}

/// The layout in which B restarts: A started, B starting (catching up).
fn layout_b_starting() -> ClusterLayout {
    let mut l = layout(true);
    l.datanodes[1].status = NodeStatus::Starting;
    l.version = 3;
    l
}

impl Net {
    fn upsert(&self, id: i64, v: i64) -> KeyOp {
        self.op(id, OpKind::Upsert { row: vec![Value::Int(id), Value::Int(v)] })
    }

    /// Runs a batch of independent writes at the primary, A, to completion.
    fn write_at_a(&mut self, req_id: u64, ops: Vec<KeyOp>) {
        self.request(A, req_id, ClientRequest::Batch(ops));
        self.deliver_all();
        match self.take(req_id) {
            Some(ClientResponse::Batch(r)) => assert!(r.iter().all(|r| *r == OpResult::Done), "{r:?}"),
            other => panic!("{other:?}"),
        }
    }

    fn set_layout(&mut self, at: ShardAddr, layout: ClusterLayout) {
        let mut out = Outbox::default();
        self.shards[index(at)].set_layout(layout, 0, &mut out);
        self.collect(at, &mut out);
    }

    fn tick(&mut self, at: ShardAddr, now: u64) {
        let mut out = Outbox::default();
        self.shards[index(at)].on_tick(now, &mut out);
        self.collect(at, &mut out);
    }

    /// B restarts (with whatever its shard holds) while A keeps writing:
    /// one new write every few messages, until B's copy is done.
    fn restart_b_under_writes(&mut self, open_tx: Option<(u64, TxId)>) {
        self.b_alive = true;
        self.set_layout(B, layout_b_starting());
        self.set_layout(A, layout_b_starting());
        let mut open_tx = open_tx;
        let mut now = 0;
        for round in 0..10_000u64 {
            if self.shards[1].sync_progress().done() && open_tx.is_none() {
                break;
            }
            assert!(self.shards[1].sync_progress().failed.is_none(), "{:?}", self.shards[1].sync_progress());
            now += 10_000;
            self.tick(A, now);
            self.tick(B, now);
            // Writes race the copy: upserts of old rows, deletes, inserts.
            let id = (round * 7) as i64 % 400;
            let op = if round % 3 == 0 { self.op(id, OpKind::Delete) } else { self.upsert(id, round as i64) };
            self.request(A, 100_000 + round, ClientRequest::Batch(vec![op]));
            for _ in 0..3 {
                if let Some((from, to, msg)) = self.wire.queue.pop_front() {
                    let mut out = Outbox::default();
                    self.shards[index(to)].on_peer(from, 0, msg, now, &mut out);
                    self.collect(to, &mut out);
                }
            }
            if self.shards[1].sync_progress().done() || round == 300 {
                // A transaction that wrote before B joined commits now (B
                // never staged its write: the copy must have waited for it).
                if let Some((req, tx)) = open_tx.take() {
                    self.request(A, req, ClientRequest::TxExec { tx: Some(tx), ops: vec![], commit: true });
                }
            }
        }
        self.deliver_all();
        assert!(self.shards[1].sync_progress().done(), "{:?}", self.shards[1].sync_progress());
    }

    /// Rows 0..rows inserted through their primaries, then B killed.
    fn loaded_then_b_killed(rows: i64) -> Net {
        let mut n = Net::new();
        for id in 0..rows {
            let op = n.insert(id);
            let tc = Router::new(&layout(true)).primary_of(op.partition).unwrap();
            n.request(tc, id as u64, ClientRequest::Batch(vec![op]));
            n.deliver_all();
        }
        n.kill_b();
        n
    }

    fn assert_replicas_equal(&self) {
        for p in 0..4 {
            let a = self.shards[0].partition_rows(1, p).unwrap();
            let b = self.shards[1].partition_rows(1, p).unwrap();
            assert_eq!(a.len(), b.len(), "partition {p}: row counts differ");
            assert!(a == b, "partition {p} differs between the primary and the restarted replica");
        }
    }
}

#[test]
fn a_restarted_node_copies_what_changed_while_writes_continue() {
    let mut n = Net::loaded_then_b_killed(300);
    // While B is down: updates, deletes and inserts it misses.
    for id in 0..60 {
        n.write_at_a(1_000 + id as u64, vec![n.upsert(id, 7)]);
    }
    for id in 60..90 {
        n.write_at_a(2_000 + id as u64, vec![n.op(id, OpKind::Delete)]);
    }
    for id in 300..340 {
        n.write_at_a(3_000 + id as u64, vec![n.insert(id)]);
    }
    // A transaction that wrote a row before B rejoined stays open.
    let row = 250;
    n.request(A, 4_000, ClientRequest::TxExec { tx: None, ops: vec![n.upsert(row, -2)], commit: false });
    n.deliver_all();
    let tx = match n.take(4_000) {
        Some(ClientResponse::TxExec { tx, committed: false, .. }) => tx,
        other => panic!("{other:?}"),
    };
    // B comes back with the rows it had (a node restart).
    n.restart_b_under_writes(Some((4_001, tx)));
    assert!(matches!(n.take(4_001), Some(ClientResponse::TxExec { committed: true, .. })));
    n.assert_replicas_equal();
    let progress = n.shards[1].sync_progress();
    assert!(progress.ranges_equal + progress.ranges_copied >= 4, "{progress:?}");
    assert_eq!(n.read_at(A, row), Some(-2));
}

#[test]
fn an_initial_node_restart_copies_everything() {
    let mut n = Net::loaded_then_b_killed(300);
    // B restarts from an empty disk.
    let cfg = ShardConfig {
        me: B,
        lock_wait_timeout_us: 100_000,
        first_tx_seq: 1 << 40,
        data_memory_bytes: 0,
        redo_limit_bytes: 0,
        lease: latsdb_cluster::Lease::unlimited(),
        durable: false,
        node_shards: 1,
        pages: latsdb_cluster::PagesConfig::default(),
    };
    let mut fresh = Shard::new(cfg, layout_b_starting());
    fresh.apply_schema(SchemaChange::CreateTable(n.meta.def.clone())).unwrap();
    n.shards[1] = fresh;
    assert_eq!(n.shards[1].row_count(), 0);
    n.restart_b_under_writes(None);
    n.assert_replicas_equal();
    let progress = n.shards[1].sync_progress();
    assert_eq!(progress.ranges_equal, 0, "nothing was there to compare: {progress:?}");
    assert!(progress.rows_copied >= 300 - 400 / 3, "{progress:?}");
}

#[test]
fn inserts_that_only_find_their_keys_taken_leave_the_transaction_open() {
    let mut n = Net::new();
    let taken = n.key_with_primary(A, 0);
    let free = n.key_with_primary(B, 0);
    let other = n.key_with_primary(A, taken.max(free) + 1);
    n.request(A, 1, ClientRequest::TxExec { tx: None, ops: vec![n.insert(taken)], commit: true });
    n.deliver_all();
    assert!(matches!(n.take(1), Some(ClientResponse::TxExec { committed: true, .. })));

    // A request whose one write finds its key taken changed nothing: the
    // transaction goes on and commits what came after.
    n.request(A, 2, ClientRequest::TxExec { tx: None, ops: vec![n.insert(taken)], commit: false });
    n.deliver_all();
    let tx = match n.take(2) {
        Some(ClientResponse::TxExec { tx, results, committed: false, .. }) => {
            assert!(matches!(&results[..], [OpResult::Error(e)] if e.code == ErrorCode::DuplicateKey), "{results:?}");
            tx
        }
        other => panic!("{other:?}"),
    };
    n.request(A, 3, ClientRequest::TxExec { tx: Some(tx), ops: vec![n.insert(free)], commit: true });
    n.deliver_all();
    assert!(matches!(n.take(3), Some(ClientResponse::TxExec { committed: true, .. })));
    assert_eq!(n.read_at(A, free), Some(free * 10));

    // One that also wrote, or that asked to commit, aborts as before.
    for (req, ops, commit) in [(4, vec![n.insert(other), n.insert(taken)], false), (5, vec![n.insert(taken)], true)] {
        n.request(A, req, ClientRequest::TxExec { tx: None, ops, commit });
        n.deliver_all();
        match n.take(req) {
            Some(ClientResponse::TxAborted { error: Some(e), .. }) => assert_eq!(e.code, ErrorCode::DuplicateKey),
            other => panic!("request {req}: {other:?}"),
        }
    }
    assert_eq!(n.read_at(A, other), None, "the aborted insert is invisible");
    assert_eq!(n.shards[0].activity(), (0, 0, 0), "no locks or transactions are left");
}

#[test]
fn an_update_that_leaves_its_row_as_it_was_writes_nothing() {
    let mut n = Net::new();
    let id = n.key_with_primary(A, 0);
    n.request(A, 1, ClientRequest::TxExec { tx: None, ops: vec![n.insert(id)], commit: true });
    n.deliver_all();
    assert!(matches!(n.take(1), Some(ClientResponse::TxExec { committed: true, .. })));
    let set = |v: i64| OpKind::Update { set: vec![(1, latsdb_types::expr::Expr::Const(Value::Int(v)))] };
    n.request(A, 2, ClientRequest::TxExec { tx: None, ops: vec![n.op(id, set(id * 10))], commit: true });
    // Nothing to replicate: no message goes to the backup.
    n.deliver_until(|_, _, msg| matches!(msg, PeerMsg::ReplicaPrepare { .. }));
    assert!(n.wire.queue.is_empty(), "an unchanged row was sent to the backup");
    match n.take(2) {
        Some(ClientResponse::TxExec { results, committed: true, .. }) => assert_eq!(results, vec![OpResult::Unchanged]),
        other => panic!("{other:?}"),
    }
    n.request(A, 3, ClientRequest::TxExec { tx: None, ops: vec![n.op(id, set(7))], commit: true });
    n.deliver_all();
    match n.take(3) {
        Some(ClientResponse::TxExec { results, committed: true, .. }) => assert_eq!(results, vec![OpResult::Done]),
        other => panic!("{other:?}"),
    }
    assert_eq!(n.read_at(B, id), Some(7));
}
