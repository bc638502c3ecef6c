//! Bad bytes from the network never crash a shard: valid requests are
//! mutated (bit flips, truncation, splices, random bytes), and whatever still
//! decodes is executed by a real shard. Any panic fails the test. Seeded, so
//! a failure replays.

use latsdb_cluster::{Outbox, Shard, ShardConfig};
use latsdb_types::expr::{Aggregate, CmpOp, Expr};
use latsdb_types::proto::{self, *};
use latsdb_types::rng::Rng;
use latsdb_types::schema::{ColumnDef, ColumnType, IntWidth, TableDef, TableSpec};
use latsdb_types::{TableMeta, Value};

fn shard_and_meta() -> (Shard, TableMeta) {
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

fn seeds(meta: &TableMeta) -> Vec<ClientRequest> {
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

fn mutate(rng: &mut Rng, bytes: &mut Vec<u8>) {
    match rng.index(5) {
        0 => {
            for _ in 0..1 + rng.index(4) {
                let i = rng.index(bytes.len());
                bytes[i] ^= 1 << rng.index(8);
            }
        }
        1 => {
            let i = rng.index(bytes.len());
            bytes[i] = [0, 1, 0x7F, 0x80, 0xFF][rng.index(5)];
        }
        2 => bytes.truncate(rng.index(bytes.len())),
        3 => {
            // Overwrite a length-like field with a large value.
            let i = rng.index(bytes.len().saturating_sub(8).max(1));
            let v = [u64::MAX, 1 << 40, 65_536, 0][rng.index(4)].to_le_bytes();
            let end = (i + 8).min(bytes.len());
            bytes[i..end].copy_from_slice(&v[..end - i]);
        }
        _ => {
            let n = rng.index(64);
            *bytes = (0..n).map(|_| rng.next_u64() as u8).collect();
        }
    }
}

#[test]
fn mutated_requests_never_panic_a_shard() {
    let (mut shard, meta) = shard_and_meta();
    let originals: Vec<Vec<u8>> = seeds(&meta).iter().map(|r| proto::frame(0, r)[12..].to_vec()).collect();
    // MUTATION_SEED and MUTATION_ITERATIONS run longer explorations locally.
    let seed = std::env::var("MUTATION_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5EED_1234_ABCD_0001u64);
    let mut rng = Rng::new(seed);
    let (mut decoded, mut from_frame) = (0, 0);
    let mut now = 0;
    let iterations: u64 = std::env::var("MUTATION_ITERATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(200_000);
    for i in 0..iterations {
        let mut bytes = originals[rng.index(originals.len())].clone();
        if i % 8 != 0 {
            mutate(&mut rng, &mut bytes);
        }
        // As a data node's host does: a batch of committed reads first.
        let mut out = Outbox::default();
        if shard.on_lookups(i % 7, i, &bytes, now, &mut out) {
            from_frame += 1;
            assert!(matches!(&out.frames[..], [(_, frame)] if frame.len() >= 12), "one answer frame");
        } else if let Ok(request) = proto::decode_body::<ClientRequest>(&bytes) {
            decoded += 1;
            now += 1_000;
            shard.on_client(i % 7, i, request, now, &mut out);
            shard.on_tick(now, &mut out);
            if i % 1000 == 0 {
                shard.on_disconnect(i % 7, now, &mut out);
            }
        }
        // Peer messages with garbage must not panic either.
        if let Ok(msg) = proto::decode_body::<PeerMsg>(&bytes) {
            let mut out = Outbox::default();
            shard.on_peer(ShardAddr { node: 2, shard: 0 }, msg, now, &mut out);
        }
    }
    assert!(decoded > 20_000, "too few mutated requests decoded ({decoded}) to exercise the shard");
    assert!(from_frame > 2_000, "too few mutated batches of committed reads ({from_frame}) answered from the frame");
}
