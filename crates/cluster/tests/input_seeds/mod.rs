//! A shard with one table (integer key, text, decimal, blob and
//! timestamp columns, a secondary index), and valid client
//! requests for it: the starting points that `mutated_input.rs` mutates and
//! that the `native_frames` fuzz target (fuzz/) takes as its corpus. Shared
//! by path so the test and the fuzz target start from the same shard.

use latsdb_cluster::{Outbox, Shard, ShardConfig};
use latsdb_types::expr::{Aggregate, CmpOp, Expr};
use latsdb_types::proto::{self, *};
use latsdb_types::schema::{ColumnDef, ColumnType, IntWidth, TableDef, TableSpec};
use latsdb_types::{TableMeta, Value};

pub fn shard_and_meta() -> (Shard, TableMeta) {
    let spec = TableSpec::new("f", "t")
        .column(ColumnDef::new("id", ColumnType::int(IntWidth::Int)))
        .column(ColumnDef::new("s", ColumnType::VarChar(8)))
        .column(ColumnDef::new("d", ColumnType::Decimal { precision: 10, scale: 2 }))
        .column(ColumnDef::new("b", ColumnType::Blob))
        .column(ColumnDef::new("ts", ColumnType::Timestamp))
        .primary_key(&["id"]);
    let def = TableDef::from_spec(&spec, 1, 1).unwrap().with_index("s_idx", &["s".into()], false).unwrap();
    let layout = ClusterLayout::builder("f")
        .mgmd(1, "f")
        .datanodes(vec![DataNodeInfo {
            node_id: 2,
            node_group: 0,
            host: "f".into(),
            status: NodeStatus::Started,
            shards: vec!["f".into()],
            pid: 0,
            process: 0,
            location_domain: None,
        }])
        .node_groups(1)
        .default_partitions(1)
        .lock_wait_timeout_ms(5)
        .first_view(ViewNumber(1))
        .build();
    let cfg = ShardConfig {
        me: ShardAddr { node: 2, shard: 0 },
        lock_wait_timeout_us: 5_000,
        first_tx_seq: 1,
        data_memory_bytes: 1 << 20,
        redo_limit_bytes: 0,
        lease: latsdb_cluster::Lease::unlimited(),
        durable: false,
        node_shards: 1,
        pages: latsdb_cluster::PagesConfig::default(),
    };
    let mut shard = Shard::new(cfg, layout);
    shard.apply_schema(SchemaChange::CreateTable(def.clone())).unwrap();
    (shard, TableMeta::new(def))
}

pub fn seeds(meta: &TableMeta) -> Vec<ClientRequest> {
    let key = |i: i64| meta.encode_key(&[Value::Int(i)]).unwrap();
    let op =
        |i: i64, kind: OpKind| KeyOp { table: 1, table_version: 2, partition: 0, key: key(i), kind, projection: None };
    let row = |i: i64| {
        vec![
            Value::Int(i),
            Value::Str("abc".into()),
            Value::Str("12.5".into()),
            Value::Bytes(vec![1, 2]),
            Value::Timestamp(5),
        ]
    };
    let filter = Expr::And(vec![
        Expr::cmp(CmpOp::Gt, Expr::Column(0), Expr::Const(Value::Int(3))),
        Expr::Like(Box::new(Expr::Column(1)), "a%".into()),
    ]);
    vec![
        ClientRequest::Batch(vec![op(1, OpKind::Insert { row: row(1) }), op(2, OpKind::Upsert { row: row(2) })]),
        ClientRequest::Batch(vec![
            op(1, OpKind::Read { lock: LockMode::Shared }),
            KeyOp {
                projection: Some(std::sync::Arc::from([1, 3])),
                ..op(2, OpKind::Read { lock: LockMode::Committed })
            },
        ]),
        ClientRequest::TxExec {
            tx: None,
            ops: vec![
                op(
                    1,
                    OpKind::Update {
                        set: vec![(
                            2,
                            Expr::Arith(
                                latsdb_types::expr::ArithOp::Add,
                                Box::new(Expr::Column(2)),
                                Box::new(Expr::Const(Value::Int(1))),
                            ),
                        )],
                    },
                ),
                op(3, OpKind::Delete),
            ],
            commit: true,
        },
        ClientRequest::TxExec { tx: None, ops: vec![op(2, OpKind::Read { lock: LockMode::Exclusive })], commit: false },
        ClientRequest::Scan(ScanRequest {
            table: 1,
            table_version: 2,
            partition: 0,
            index: 1,
            lower: KeyBound::Included(vec![1, b'a', 0, 1]),
            upper: KeyBound::Unbounded,
            resume_after: None,
            filter: Some(filter),
            projection: Some(vec![0, 4]),
            max_rows: 10,
            aggregates: vec![],
        }),
        ClientRequest::Scan(ScanRequest {
            table: 1,
            table_version: 2,
            partition: 0,
            index: 0,
            lower: KeyBound::Unbounded,
            upper: KeyBound::Excluded(key(9)),
            resume_after: Some(key(1)),
            filter: None,
            projection: None,
            max_rows: 3,
            aggregates: vec![Aggregate::CountRows, Aggregate::Sum(2), Aggregate::Max(1)],
        }),
        ClientRequest::TxAbort { tx: TxId { tc: ShardAddr { node: 2, shard: 0 }, seq: 2 } },
        // Committed reads only: answered from the frame (`on_lookups`).
        ClientRequest::Batch(vec![
            op(1, OpKind::Read { lock: LockMode::Committed }),
            KeyOp {
                projection: Some(std::sync::Arc::from([1, 3])),
                ..op(2, OpKind::Read { lock: LockMode::Committed })
            },
            KeyOp {
                projection: Some(std::sync::Arc::from([1, 3])),
                ..op(3, OpKind::Read { lock: LockMode::Committed })
            },
        ]),
    ]
}

/// The frame bodies of `data`: a lone body when it has no length prefixes
/// (the seeds are plain bodies), else each `[len: u16 le][body]` in turn.
fn bodies(data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    while rest.len() >= 2 {
        let len = u16::from_le_bytes([rest[0], rest[1]]) as usize;
        if len > rest.len() - 2 {
            break;
        }
        out.push(&rest[2..2 + len]);
        rest = &rest[2 + len..];
    }
    if out.is_empty() {
        out.push(data);
    }
    out
}

/// Runs `data` as a sequence of frame bodies through a fresh shard, as a
/// data node's host would: committed-read batches from the frame, other
/// client requests and peer messages decoded and handled, a tick after
/// each. Management and greeting messages are only decoded (their handlers
/// need a running node). Must never panic, whatever `data` is.
pub fn run_frames(data: &[u8]) {
    let (mut shard, _) = shard_and_meta();
    let mut now = 1_000;
    for (i, body) in bodies(data).into_iter().enumerate() {
        let i = i as u64;
        let mut out = Outbox::default();
        now += 1_000;
        if !shard.on_lookups(i % 3, i, body, now, &mut out) {
            if let Ok(request) = proto::decode_body::<ClientRequest>(body) {
                shard.on_client(i % 3, i, request, now, &mut out);
            }
        }
        if let Ok(msg) = proto::decode_body::<PeerMsg>(body) {
            shard.on_peer(ShardAddr { node: 2, shard: 0 }, 0, msg, now, &mut out);
        }
        // The management server and a data node's greeting decode these;
        // decoding alone must hold (their handlers need a running node).
        let _ = proto::decode_body::<MgmRequest>(body);
        let _ = proto::decode_body::<Hello>(body);
        shard.on_tick(now, &mut out);
    }
    shard.on_disconnect(0, now + 1, &mut Outbox::default());
}
