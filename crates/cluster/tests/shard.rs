//! Drives two shards through an in-memory message pump: batches, atomic
//! cross-shard transactions, lock serialization and lock-wait timeouts.

use latsdb_cluster::{Outbox, Shard, ShardConfig};
use latsdb_types::proto::*;
use latsdb_types::schema::{ColumnDef, ColumnType, IntWidth, TableDef, TableSpec};
use latsdb_types::{ErrorCode, TableMeta, Value};
use std::collections::VecDeque;

struct Pump {
    shards: Vec<Shard>,
    /// Each shard's lease, which a test may let run out.
    leases: Vec<latsdb_cluster::Lease>,
    meta: TableMeta,
    now: u64,
    responses: Vec<(u64, u64, ClientResponse)>,
}

fn layout() -> ClusterLayout {
    let node = |id: u16, group: u32| DataNodeInfo {
        node_id: id,
        node_group: group,
        host: "sim".into(),
        status: NodeStatus::Started,
        shards: vec![format!("sim:{id}")],
        pid: 0,
        process: 0,
        location_domain: None,
    };
    ClusterLayout::builder("t")
        .mgmd(1, "sim")
        .datanodes(vec![node(2, 0), node(3, 1)])
        .node_groups(2)
        .default_partitions(8)
        .lock_wait_timeout_ms(100)
        .first_view(ViewNumber(1))
        .build()
}

impl Pump {
    fn new() -> Pump {
        Self::with_memory(0)
    }

    fn with_memory(data_memory_bytes: u64) -> Pump {
        let spec = TableSpec::new("bank", "accounts")
            .column(ColumnDef::new("id", ColumnType::int(IntWidth::Big)))
            .column(ColumnDef::new("balance", ColumnType::int(IntWidth::Big)))
            .primary_key(&["id"]);
        let def = TableDef::from_spec(&spec, 1, 8).unwrap();
        let leases = vec![latsdb_cluster::Lease::unlimited(), latsdb_cluster::Lease::unlimited()];
        let shards: Vec<Shard> = [2u16, 3]
            .iter()
            .zip(&leases)
            .map(|(&node, lease)| {
                let mut s = Shard::new(
                    ShardConfig {
                        me: ShardAddr { node, shard: 0 },
                        lock_wait_timeout_us: 100_000,
                        first_tx_seq: 0,
                        data_memory_bytes,
                        redo_limit_bytes: 0,
                        lease: lease.clone(),
                        durable: false,
                        node_shards: 1,
                        pages: latsdb_cluster::PagesConfig::default(),
                    },
                    layout(),
                );
                s.apply_schema(SchemaChange::CreateTable(def.clone())).unwrap();
                s
            })
            .collect();
        Pump { shards, leases, meta: TableMeta::new(def), now: 0, responses: Vec::new() }
    }

    fn index(&self, addr: ShardAddr) -> usize {
        (addr.node - 2) as usize
    }

    fn deliver(&mut self, from: usize, out: Outbox) {
        let mut queue: VecDeque<(usize, ShardAddr, PeerMsg)> = VecDeque::new();
        let mut out = out;
        loop {
            self.responses.append(&mut out.client);
            for (to, msg) in out.peer.drain(..) {
                queue.push_back((from, to, msg));
            }
            let Some((src, to, msg)) = queue.pop_front() else {
                break;
            };
            let dst = self.index(to);
            let from_addr = self.shards[src].address();
            self.shards[dst].on_peer(from_addr, 0, msg, self.now, &mut out);
            // Messages produced by `dst` come from `dst`.
            for (to, msg) in out.peer.drain(..) {
                queue.push_back((dst, to, msg));
            }
        }
    }

    fn request(&mut self, shard: usize, conn: u64, req_id: u64, req: ClientRequest) {
        let mut out = Outbox::default();
        self.shards[shard].on_client(conn, req_id, req, self.now, &mut out);
        self.deliver(shard, out);
    }

    fn tick(&mut self, advance_us: u64) {
        self.now += advance_us;
        for i in 0..self.shards.len() {
            let mut out = Outbox::default();
            self.shards[i].on_tick(self.now, &mut out);
            self.deliver(i, out);
        }
    }

    fn take(&mut self, req_id: u64) -> Option<ClientResponse> {
        let pos = self.responses.iter().position(|(_, r, _)| *r == req_id)?;
        Some(self.responses.remove(pos).2)
    }

    fn op(&self, id: i64, kind: OpKind) -> KeyOp {
        let key = self.meta.encode_key(&[Value::Int(id)]).unwrap();
        KeyOp { table: 1, table_version: 1, partition: self.meta.partition_of(&key), key, kind, projection: None }
    }

    fn owner(&self, op: &KeyOp) -> usize {
        self.index(layout().primary_of(op.partition).unwrap())
    }

    fn balance(&mut self, id: i64) -> Option<i64> {
        let op = self.op(id, OpKind::Read { lock: LockMode::Committed });
        let shard = self.owner(&op);
        self.request(shard, 99, 999, ClientRequest::Batch(vec![op]));
        match self.take(999) {
            Some(ClientResponse::Batch(r)) => match &r[0] {
                OpResult::Row(row) => self.meta.layout.get(row, 1).as_i64(),
                OpResult::NotFound => None,
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
    }
}

/// The id of a transaction that a TxExec answer left open.
fn open_tx(response: Option<ClientResponse>) -> TxId {
    match response {
        Some(ClientResponse::TxExec { tx, committed: false, .. }) => tx,
        other => panic!("expected an open transaction, got {other:?}"),
    }
}

fn set_balance(_id: i64, value: i64) -> OpKind {
    OpKind::Update { set: vec![(1, latsdb_types::expr::Expr::Const(Value::Int(value)))] }
}

#[test]
fn batches_route_to_owners_and_wrong_shard_is_reported() {
    let mut p = Pump::new();
    for id in 0..100 {
        let op = p.op(id, OpKind::Insert { row: vec![Value::Int(id), Value::Int(100)] });
        let shard = p.owner(&op);
        p.request(shard, 1, id as u64, ClientRequest::Batch(vec![op]));
        assert_eq!(p.take(id as u64), Some(ClientResponse::Batch(vec![OpResult::Done])));
    }
    assert_eq!(p.shards[0].row_count() + p.shards[1].row_count(), 100);
    assert!(p.shards[0].row_count() > 20 && p.shards[1].row_count() > 20, "rows spread over both nodes");
    for id in 0..100 {
        assert_eq!(p.balance(id), Some(100));
    }
    let op = p.op(7, OpKind::Read { lock: LockMode::Committed });
    let wrong = 1 - p.owner(&op);
    p.request(wrong, 1, 500, ClientRequest::Batch(vec![op]));
    match p.take(500) {
        Some(ClientResponse::Batch(r)) => {
            assert!(matches!(&r[0], OpResult::Error(e) if e.code == ErrorCode::WrongShard))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn cross_shard_transaction_commits_atomically_or_not_at_all() {
    let mut p = Pump::new();
    // Find two accounts on different shards.
    let (a, b) = {
        let a = 0;
        let sa = p.owner(&p.op(a, OpKind::Delete));
        let b = (1..).find(|&i| p.owner(&p.op(i, OpKind::Delete)) != sa).unwrap();
        (a, b)
    };
    let ops = vec![
        p.op(a, OpKind::Insert { row: vec![Value::Int(a), Value::Int(50)] }),
        p.op(b, OpKind::Insert { row: vec![Value::Int(b), Value::Int(50)] }),
    ];
    p.request(0, 1, 1, ClientRequest::TxExec { tx: None, ops, commit: true });
    assert!(matches!(p.take(1), Some(ClientResponse::TxExec { committed: true, .. })));
    // A transfer whose second half fails (duplicate key) must leave both rows unchanged.
    let ops = vec![p.op(a, set_balance(a, 0)), p.op(b, OpKind::Insert { row: vec![Value::Int(b), Value::Int(1)] })];
    p.request(0, 1, 2, ClientRequest::TxExec { tx: None, ops, commit: true });
    match p.take(2) {
        Some(ClientResponse::TxAborted { error: Some(e), .. }) => {
            assert_eq!(e.code, ErrorCode::DuplicateKey)
        }
        other => panic!("{other:?}"),
    }
    assert_eq!((p.balance(a), p.balance(b)), (Some(50), Some(50)));
    // Uncommitted writes are invisible to committed reads; commit makes both visible.
    let ops = vec![p.op(a, set_balance(a, 40)), p.op(b, set_balance(b, 60))];
    p.request(0, 1, 3, ClientRequest::TxExec { tx: None, ops, commit: false });
    let tx = open_tx(p.take(3));
    assert_eq!((p.balance(a), p.balance(b)), (Some(50), Some(50)));
    p.request(0, 1, 4, ClientRequest::TxExec { tx: Some(tx), ops: vec![], commit: true });
    assert!(matches!(p.take(4), Some(ClientResponse::TxExec { committed: true, .. })));
    assert_eq!((p.balance(a), p.balance(b)), (Some(40), Some(60)));
    let (open, participating, locked) = p.shards[0].activity();
    assert_eq!((open, participating, locked), (0, 0, 0));
}

#[test]
fn writers_serialize_and_lock_waits_time_out() {
    let mut p = Pump::new();
    let insert = p.op(1, OpKind::Insert { row: vec![Value::Int(1), Value::Int(10)] });
    let s = p.owner(&insert);
    p.request(s, 1, 1, ClientRequest::Batch(vec![insert]));
    p.take(1);
    // Tx A takes the row lock.
    let ops = vec![p.op(1, set_balance(1, 11))];
    p.request(s, 1, 2, ClientRequest::TxExec { tx: None, ops, commit: false });
    let tx_a = open_tx(p.take(2));
    // Tx B (another client) wants the same row: it waits.
    let ops = vec![p.op(1, OpKind::Read { lock: LockMode::Exclusive })];
    p.request(s, 2, 3, ClientRequest::TxExec { tx: None, ops, commit: true });
    assert!(p.take(3).is_none(), "B must wait for A's lock");
    // A commits; B then runs and sees A's write.
    p.request(s, 1, 4, ClientRequest::TxExec { tx: Some(tx_a), ops: vec![], commit: true });
    assert!(matches!(p.take(4), Some(ClientResponse::TxExec { committed: true, .. })));
    match p.take(3) {
        Some(ClientResponse::TxExec { results, committed: true, .. }) => match &results[0] {
            OpResult::Row(row) => assert_eq!(p.meta.layout.get(row, 1), Value::Int(11)),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
    // Now a holder that never commits makes the next writer time out.
    let ops = vec![p.op(1, set_balance(1, 12))];
    p.request(s, 1, 5, ClientRequest::TxExec { tx: None, ops, commit: false });
    p.take(5).unwrap();
    let ops = vec![p.op(1, set_balance(1, 13))];
    p.request(s, 2, 6, ClientRequest::TxExec { tx: None, ops, commit: true });
    p.tick(50_000);
    assert!(p.take(6).is_none());
    p.tick(60_000);
    match p.take(6) {
        Some(ClientResponse::TxAborted { error: Some(e), .. }) => {
            assert_eq!(e.code, ErrorCode::LockWaitTimeout);
            assert!(e.is_retriable());
        }
        other => panic!("{other:?}"),
    }
    // An independent write from a batch also waits, then applies when the lock frees.
    let op = p.op(1, set_balance(1, 99));
    p.request(s, 3, 7, ClientRequest::Batch(vec![op]));
    assert!(p.take(7).is_none());
    let mut out = Outbox::default();
    p.shards[s].on_disconnect(1, p.now, &mut out);
    p.deliver(s, out);
    assert_eq!(p.take(7), Some(ClientResponse::Batch(vec![OpResult::Done])));
    assert_eq!(p.balance(1), Some(99));
}

#[test]
fn unexpected_peer_messages_are_ignored_not_fatal() {
    let mut p = Pump::new();
    let insert = p.op(1, OpKind::Insert { row: vec![Value::Int(1), Value::Int(10)] });
    let s = p.owner(&insert);
    p.request(s, 1, 1, ClientRequest::TxExec { tx: None, ops: vec![insert], commit: false });
    let tx = open_tx(p.take(1));
    let stranger = ShardAddr { node: 3 - (s as u16), shard: 0 };
    let me = p.shards[s].address();
    let mut out = Outbox::default();
    // TxCommitted for an idle transaction, results for operations that do not
    // exist, results from a shard that was never asked, commits and aborts
    // for unknown transactions: none may panic or answer the client.
    p.shards[s].on_peer(me, 0, PeerMsg::TxCommitted { tx }, 0, &mut out);
    p.shards[s].on_peer(
        me,
        0,
        PeerMsg::TxOpResults { tx, results: vec![(99, OpResult::Done)], epoch: latsdb_types::proto::CommitEpoch(1) },
        0,
        &mut out,
    );
    p.shards[s].on_peer(
        stranger,
        0,
        PeerMsg::TxOpResults { tx, results: vec![(0, OpResult::Done)], epoch: latsdb_types::proto::CommitEpoch(1) },
        0,
        &mut out,
    );
    let ghost = TxId { tc: me, seq: 123_456 };
    p.shards[s].on_peer(
        stranger,
        0,
        PeerMsg::TxCommit { tx: ghost, epoch: latsdb_types::proto::CommitEpoch(1) },
        0,
        &mut out,
    );
    p.shards[s].on_peer(stranger, 0, PeerMsg::TxAbort { tx: ghost }, 0, &mut out);
    assert!(out.client.is_empty());
    p.deliver(s, out);
    // The transaction still commits normally.
    p.request(s, 1, 2, ClientRequest::TxExec { tx: Some(tx), ops: vec![], commit: true });
    assert!(matches!(p.take(2), Some(ClientResponse::TxExec { committed: true, .. })));
    assert_eq!(p.balance(1), Some(10));
}

#[test]
fn abort_answers_an_executing_request_and_only_the_owner_may_abort() {
    let mut p = Pump::new();
    let insert = p.op(1, OpKind::Insert { row: vec![Value::Int(1), Value::Int(10)] });
    let s = p.owner(&insert);
    p.request(s, 1, 1, ClientRequest::Batch(vec![insert]));
    p.take(1);
    // Connection 1 holds the row; connection 2's transaction waits for it.
    p.request(s, 1, 2, ClientRequest::TxExec { tx: None, ops: vec![p.op(1, set_balance(1, 5))], commit: false });
    p.take(2).unwrap();
    p.request(s, 2, 3, ClientRequest::TxExec { tx: None, ops: vec![p.op(1, set_balance(1, 6))], commit: false });
    assert!(p.take(3).is_none());
    let waiting_tx = TxId { tc: p.shards[s].address(), seq: 2 };
    // Another connection cannot abort it.
    p.request(s, 1, 4, ClientRequest::TxAbort { tx: waiting_tx });
    assert!(matches!(p.take(4), Some(ClientResponse::Error(e)) if e.code == ErrorCode::UnknownTransaction));
    // Its own connection can, and the waiting request is answered as well.
    p.request(s, 2, 5, ClientRequest::TxAbort { tx: waiting_tx });
    assert!(matches!(p.take(5), Some(ClientResponse::TxAborted { .. })));
    assert!(matches!(p.take(3), Some(ClientResponse::TxAborted { .. })));
}

#[test]
fn operations_of_one_transaction_on_a_row_run_in_order() {
    let mut p = Pump::new();
    let insert = p.op(1, OpKind::Insert { row: vec![Value::Int(1), Value::Int(10)] });
    let s = p.owner(&insert);
    p.request(s, 1, 1, ClientRequest::Batch(vec![insert]));
    p.take(1);
    let shared = |p: &Pump| p.op(1, OpKind::Read { lock: LockMode::Shared });
    p.request(s, 1, 2, ClientRequest::TxExec { tx: None, ops: vec![shared(&p)], commit: false });
    let t1 = open_tx(p.take(2));
    p.request(s, 2, 3, ClientRequest::TxExec { tx: None, ops: vec![shared(&p)], commit: false });
    let t2 = open_tx(p.take(3));
    // T1 updates (an upgrade that must wait for T2) and then reads in the same request.
    let ops = vec![p.op(1, set_balance(1, 77)), p.op(1, OpKind::Read { lock: LockMode::Committed })];
    p.request(s, 1, 4, ClientRequest::TxExec { tx: Some(t1), ops, commit: true });
    assert!(p.take(4).is_none());
    p.request(s, 2, 5, ClientRequest::TxExec { tx: Some(t2), ops: vec![], commit: true });
    p.take(5).unwrap();
    match p.take(4) {
        Some(ClientResponse::TxExec { results, committed: true, .. }) => match &results[1] {
            OpResult::Row(row) => {
                assert_eq!(p.meta.layout.get(row, 1), Value::Int(77), "the read must follow the update")
            }
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

#[test]
fn locks_of_a_departed_coordinator_are_released() {
    let mut p = Pump::new();
    let insert = p.op(1, OpKind::Insert { row: vec![Value::Int(1), Value::Int(10)] });
    let owner = p.owner(&insert);
    p.request(owner, 1, 1, ClientRequest::Batch(vec![insert]));
    p.take(1);
    // A transaction coordinated by the other node locks the row.
    let tc = 1 - owner;
    p.request(tc, 1, 2, ClientRequest::TxExec { tx: None, ops: vec![p.op(1, set_balance(1, 5))], commit: false });
    p.take(2).unwrap();
    assert_eq!(p.shards[owner].activity().2, 1, "the row is locked");
    // The coordinator's node leaves the cluster.
    let mut layout = layout();
    layout.datanodes[tc].status = NodeStatus::NotStarted;
    let mut out = Outbox::default();
    p.shards[owner].set_layout(layout, 0, &mut out);
    assert_eq!(p.shards[owner].activity(), (0, 0, 0));
    assert_eq!(p.balance(1), Some(10));
}

#[test]
fn a_full_data_memory_refuses_writes_that_grow_it_but_not_others() {
    let mut p = Pump::with_memory(20_000);
    let mut refused = None;
    for id in 0..1000 {
        let op = p.op(id, OpKind::Insert { row: vec![Value::Int(id), Value::Int(1)] });
        let s = p.owner(&op);
        p.request(s, 1, id as u64, ClientRequest::Batch(vec![op]));
        match p.take(id as u64) {
            Some(ClientResponse::Batch(r)) => match &r[0] {
                OpResult::Done => {}
                OpResult::Error(e) => {
                    assert_eq!(e.code, ErrorCode::TableFull);
                    assert!(e.message.contains("is full") && e.message.contains("data_memory_mb"), "{}", e.message);
                    refused = Some(id);
                    break;
                }
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
    }
    let full_at = refused.expect("a 20 kB budget must fill up");
    assert!(full_at > 20, "the budget was refused too early, at row {full_at}");
    let s = p.owner(&p.op(0, OpKind::Delete));
    let (used, budget) = p.shards[s].data_memory();
    assert!(used as u64 <= budget, "used {used} exceeds the budget {budget}");
    // Reads, same-size updates and deletes still work; a delete frees room.
    assert_eq!(p.balance(0), Some(1));
    let id =
        (0..full_at).find(|&i| p.owner(&p.op(i, OpKind::Delete)) == p.owner(&p.op(full_at, OpKind::Delete))).unwrap();
    let owner = p.owner(&p.op(id, OpKind::Delete));
    p.request(owner, 1, 5000, ClientRequest::Batch(vec![p.op(id, set_balance(id, 2))]));
    assert_eq!(p.take(5000), Some(ClientResponse::Batch(vec![OpResult::Done])));
    p.request(owner, 1, 5001, ClientRequest::Batch(vec![p.op(id, OpKind::Delete)]));
    assert_eq!(p.take(5001), Some(ClientResponse::Batch(vec![OpResult::Done])));
    let retry = p.op(full_at, OpKind::Insert { row: vec![Value::Int(full_at), Value::Int(1)] });
    p.request(owner, 1, 5002, ClientRequest::Batch(vec![retry]));
    assert_eq!(p.take(5002), Some(ClientResponse::Batch(vec![OpResult::Done])));
}

/// A batch of committed reads answered straight from its frame
/// (`on_lookups`) gets, byte for byte, the answer the decoded batch gets
/// from `on_client`: rows, projections, missing rows, and every refusal.
#[test]
fn committed_reads_from_the_frame_answer_as_decoded_ones() {
    let mut p = Pump::new();
    for id in 0..50 {
        let op = p.op(id, OpKind::Insert { row: vec![Value::Int(id), Value::Int(100 + id)] });
        let shard = p.owner(&op);
        p.request(shard, 1, id as u64, ClientRequest::Batch(vec![op]));
        assert_eq!(p.take(id as u64), Some(ClientResponse::Batch(vec![OpResult::Done])));
    }
    let read = |p: &Pump, id: i64, projection: Option<&[u16]>| {
        let mut op = p.op(id, OpKind::Read { lock: LockMode::Committed });
        op.projection = projection.map(std::sync::Arc::from);
        op
    };
    for shard in 0..2 {
        let mut ops: Vec<KeyOp> = (0..60).map(|id| read(&p, id, None)).collect();
        ops.extend((0..10).map(|id| read(&p, id, Some(&[1]))));
        ops.extend((10..20).map(|id| read(&p, id, Some(&[1, 0]))));
        ops.push(read(&p, 3, Some(&[0])));
        let mut bad_key = read(&p, 4, None);
        bad_key.key.truncate(3);
        let mut unknown = read(&p, 5, None);
        unknown.table = 9;
        let mut stale = read(&p, 6, None);
        stale.table_version = 2;
        let mut elsewhere = read(&p, 7, None);
        elsewhere.partition = (elsewhere.partition + 1) % 8;
        let mut no_such_partition = read(&p, 8, None);
        no_such_partition.partition = 99;
        ops.extend([
            bad_key,
            unknown,
            stale,
            elsewhere,
            no_such_partition,
            read(&p, 9, Some(&[5])),
            read(&p, 9, Some(&[])),
        ]);
        let request = ClientRequest::Batch(ops);
        let body = frame(0, &request)[FRAME_HEADER..].to_vec();
        let mut out = Outbox::default();
        assert!(p.shards[shard].on_lookups(1, 77, &body, p.now, &mut out));
        assert!(out.client.is_empty());
        let [(conn, from_frame)] = &out.frames[..] else { panic!("one answer: {out:?}") };
        assert_eq!(*conn, 1);
        p.request(shard, 1, 77, request);
        let decoded = p.take(77).expect("answered");
        let ClientResponse::Batch(results) = &decoded else { panic!("{decoded:?}") };
        let rows = results.iter().filter(|r| matches!(r, OpResult::Row(_))).count();
        let refused = results.iter().filter(|r| matches!(r, OpResult::Error(_))).count();
        assert!(rows > 20 && refused >= 7, "{rows} rows, {refused} refused: {results:?}");
        assert_eq!(from_frame, &frame(77, &decoded), "shard {shard}");
    }
    // Anything but committed reads is left to `on_client`, untouched.
    let write = p.op(1, OpKind::Delete);
    let locking = p.op(2, OpKind::Read { lock: LockMode::Shared });
    for other in
        [ClientRequest::Batch(vec![read(&p, 1, None), write]), ClientRequest::Batch(vec![locking]), ClientRequest::Ping]
    {
        let body = frame(0, &other)[FRAME_HEADER..].to_vec();
        let mut out = Outbox::default();
        assert!(!p.shards[0].on_lookups(1, 78, &body, p.now, &mut out), "{other:?}");
        assert!(out.is_empty(), "{other:?}");
    }
    assert_eq!(p.balance(1), Some(101), "nothing was deleted");
}

/// A coordinator whose node cannot confirm its membership for a moment
/// (its lease ran out: a network fault) refuses new work, but still takes
/// a client's abort: refusing it left the transaction open for good,
/// holding its row locks (found by the fault campaign: an audit's locks
/// blocked every later transfer, and a node restart's copy, which waits
/// for older transactions).
#[test]
fn a_coordinator_without_a_lease_still_aborts_a_transaction() {
    let mut p = Pump::new();
    let id = 5;
    let insert = p.op(id, OpKind::Insert { row: vec![Value::Int(id), Value::Int(10)] });
    let owner = p.owner(&insert);
    p.request(owner, 1, 1, ClientRequest::Batch(vec![insert]));
    assert_eq!(p.take(1), Some(ClientResponse::Batch(vec![OpResult::Done])));
    let read = p.op(id, OpKind::Read { lock: LockMode::Exclusive });
    p.request(owner, 1, 2, ClientRequest::TxExec { tx: None, ops: vec![read], commit: false });
    let tx = open_tx(p.take(2));

    p.leases[owner].set(0);
    let more = p.op(id, set_balance(id, 20));
    p.request(owner, 1, 3, ClientRequest::TxExec { tx: Some(tx), ops: vec![more], commit: true });
    assert!(
        matches!(p.take(3), Some(ClientResponse::Error(e)) if e.code == ErrorCode::NotServing),
        "a node without a lease took new work"
    );
    p.request(owner, 1, 4, ClientRequest::TxAbort { tx });
    assert!(matches!(p.take(4), Some(ClientResponse::TxAborted { .. })), "the abort was refused");

    // The row's lock is free again once the node serves.
    p.leases[owner].set(u64::MAX);
    let read = p.op(id, OpKind::Read { lock: LockMode::Exclusive });
    p.request(owner, 2, 5, ClientRequest::TxExec { tx: None, ops: vec![read], commit: true });
    assert!(matches!(p.take(5), Some(ClientResponse::TxExec { committed: true, .. })), "the row is still locked");
}

/// Operations of a transaction that its coordinator does not have (they
/// were sent by the coordinator's previous process and arrived late, held
/// back by a network fault) are executed by the participant, which then
/// reports to the coordinator: it tells the participant to abort, and the
/// rows are not locked for good (found by the fault campaign: a copy for a
/// node restart waited for such a transaction for ever).
#[test]
fn a_coordinator_aborts_a_transaction_it_does_not_have() {
    let mut p = Pump::new();
    // A key whose primary is shard 3.0, operated on by a transaction of 2.0.
    let id = (0..).find(|&i| p.owner(&p.op(i, OpKind::Delete)) == 1).unwrap();
    let insert = p.op(id, OpKind::Insert { row: vec![Value::Int(id), Value::Int(10)] });
    p.request(1, 1, 1, ClientRequest::Batch(vec![insert]));
    assert_eq!(p.take(1), Some(ClientResponse::Batch(vec![OpResult::Done])));

    let stale = TxId { tc: p.shards[0].address(), seq: 7 };
    let lock = p.op(id, OpKind::Read { lock: LockMode::Exclusive });
    let mut out = Outbox::default();
    let from = p.shards[0].address();
    p.shards[1].on_peer(from, 0, PeerMsg::TxOps { tx: stale, ops: vec![(0, lock)] }, p.now, &mut out);
    p.deliver(1, out);

    let read = p.op(id, OpKind::Read { lock: LockMode::Exclusive });
    p.request(1, 2, 2, ClientRequest::TxExec { tx: None, ops: vec![read], commit: true });
    assert!(
        matches!(p.take(2), Some(ClientResponse::TxExec { committed: true, .. })),
        "the stale transaction still locks the row"
    );
}

/// What a data node's previous process sent and a network fault held
/// back is not acted on once the layout lists the node's next process:
/// its operations are refused (retriably, to whichever process now has the
/// address) and lock nothing, however the layout lists the node.
#[test]
fn messages_of_a_previous_process_are_refused() {
    let mut p = Pump::new();
    let mut with_processes = layout();
    with_processes.datanodes[0].process = 0x20;
    with_processes.datanodes[1].process = 0x30;
    with_processes.version += 1;
    for i in 0..p.shards.len() {
        let mut out = Outbox::default();
        p.shards[i].set_layout(with_processes.clone(), p.now, &mut out);
        p.deliver(i, out);
    }
    // A key whose primary is shard 3.0, locked by a transaction of 2.0.
    let id = (0..).find(|&i| p.owner(&p.op(i, OpKind::Delete)) == 1).unwrap();
    let insert = p.op(id, OpKind::Insert { row: vec![Value::Int(id), Value::Int(10)] });
    p.request(1, 1, 1, ClientRequest::Batch(vec![insert]));
    assert_eq!(p.take(1), Some(ClientResponse::Batch(vec![OpResult::Done])));
    let from = p.shards[0].address();
    let lock = p.op(id, OpKind::Read { lock: LockMode::Exclusive });

    // From process 0x19, the node's previous one: refused, nothing locked.
    let stale = TxId { tc: from, seq: 7 };
    let mut out = Outbox::default();
    p.shards[1].on_peer(from, 0x19, PeerMsg::TxOps { tx: stale, ops: vec![(0, lock.clone())] }, p.now, &mut out);
    assert_eq!(p.shards[1].activity(), (0, 0, 0), "an operation of a previous process was executed");
    let refusal = out.peer.iter().find_map(|(to, msg)| match msg {
        PeerMsg::TxOpsReturned { tx, ops, error } if *to == from && *tx == stale => Some((ops.len(), error.clone())),
        _ => None,
    });
    match refusal {
        Some((1, e)) => {
            assert_eq!(e.code, ErrorCode::NotServing);
            assert!(e.message.contains("another process of data node 2 than process 0x19"), "{}", e.message);
        }
        other => panic!("expected the operation handed back with a retriable refusal, got {other:?}"),
    }

    // From process 0x20, the one the layout lists: executed as always.
    let live = TxId { tc: from, seq: 8 };
    let mut out = Outbox::default();
    p.shards[1].on_peer(from, 0x20, PeerMsg::TxOps { tx: live, ops: vec![(0, lock)] }, p.now, &mut out);
    assert_eq!(p.shards[1].activity().2, 1, "the listed process's lock was not taken");
}

#[test]
fn a_transaction_left_idle_past_the_inactive_timeout_is_aborted() {
    let mut p = Pump::new();
    let mut idle_300 = layout();
    idle_300.transaction_inactive_timeout_ms = 300;
    idle_300.version += 1;
    for i in 0..p.shards.len() {
        let mut out = Outbox::default();
        p.shards[i].set_layout(idle_300.clone(), p.now, &mut out);
        p.deliver(i, out);
    }
    let insert = p.op(1, OpKind::Insert { row: vec![Value::Int(1), Value::Int(10)] });
    let s = p.owner(&insert);
    p.request(s, 1, 1, ClientRequest::Batch(vec![insert]));
    p.take(1);

    // A client that sends its next request within the timeout keeps its
    // transaction, however long the transaction lasts.
    p.request(s, 1, 2, ClientRequest::TxExec { tx: None, ops: vec![p.op(1, set_balance(1, 11))], commit: false });
    let busy = open_tx(p.take(2));
    for (step, req_id) in (3..6).enumerate() {
        p.tick(200_000);
        let ops = vec![p.op(1, set_balance(1, 20 + step as i64))];
        p.request(s, 1, req_id, ClientRequest::TxExec { tx: Some(busy), ops, commit: false });
        assert!(matches!(p.take(req_id), Some(ClientResponse::TxExec { committed: false, .. })), "step {step}");
    }
    p.request(s, 1, 6, ClientRequest::TxExec { tx: Some(busy), ops: vec![], commit: true });
    assert!(matches!(p.take(6), Some(ClientResponse::TxExec { committed: true, .. })));
    assert_eq!(p.balance(1), Some(22));

    // One that goes quiet with the row locked loses its transaction: the
    // lock is released, and its next request learns why.
    p.request(s, 1, 7, ClientRequest::TxExec { tx: None, ops: vec![p.op(1, set_balance(1, 30))], commit: false });
    let quiet = open_tx(p.take(7));
    p.tick(200_000);
    assert_eq!(p.shards[s].activity().0, 1, "still open 200 ms after its last answer");
    p.tick(200_000);
    assert_eq!(p.shards[s].activity(), (0, 0, 0), "aborted, its lock and staged write gone");
    let ops = vec![p.op(1, OpKind::Read { lock: LockMode::Exclusive })];
    p.request(s, 2, 8, ClientRequest::TxExec { tx: None, ops, commit: true });
    assert!(matches!(p.take(8), Some(ClientResponse::TxExec { committed: true, .. })), "the row is free");
    assert_eq!(p.balance(1), Some(22), "the aborted write is gone");
    p.request(s, 1, 9, ClientRequest::TxExec { tx: Some(quiet), ops: vec![], commit: true });
    match p.take(9) {
        Some(ClientResponse::Error(e)) => {
            assert_eq!(e.code, ErrorCode::TransactionAborted);
            assert!(e.message.contains("without a request from its client"), "{}", e.message);
        }
        other => panic!("{other:?}"),
    }
    let aborts = p.shards[s].op_counts().aborts;
    assert_eq!(aborts.of(latsdb_types::work::AbortCause::Inactive), 1, "{aborts:?}");
}
