//! Bad input from outside gets a clear error and the node keeps serving.

mod common;

use common::TestCluster;
use latsdb_client::{Client, Op, Scan};
use latsdb_types::proto::{
    self, ClientRequest, ClientResponse, Hello, KeyOp, OpKind, OpResult, ShardAddr, PROTOCOL_VERSION,
};
use latsdb_types::schema::{ColumnDef, ColumnType, IntWidth, TableSpec};
use latsdb_types::{ErrorCode, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

fn read_frame(s: &mut TcpStream) -> Option<(u64, ClientResponse)> {
    let mut header = [0u8; 12];
    s.read_exact(&mut header).ok()?;
    let len = u32::from_le_bytes(header[..4].try_into().unwrap()) as usize;
    let id = u64::from_le_bytes(header[4..12].try_into().unwrap());
    let mut body = vec![0u8; len - 8];
    s.read_exact(&mut body).ok()?;
    Some((id, proto::decode_body(&body).unwrap()))
}

fn raw_client(address: &str) -> TcpStream {
    let mut s = TcpStream::connect(address).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&proto::frame(1, &Hello::Client { protocol: PROTOCOL_VERSION, name: "raw".into() })).unwrap();
    assert!(matches!(read_frame(&mut s), Some((1, ClientResponse::Hello { .. }))));
    s
}

fn ping(s: &mut TcpStream, id: u64) {
    s.write_all(&proto::frame(id, &ClientRequest::Ping)).unwrap();
    assert_eq!(read_frame(s), Some((id, ClientResponse::Pong)));
}

fn expect_error(s: &mut TcpStream, id: u64, code: ErrorCode) -> String {
    match read_frame(s) {
        Some((got, ClientResponse::Error(e))) if got == id && e.code == code => e.message,
        other => panic!("expected {code:?} for request {id}, got {other:?}"),
    }
}

/// A peer link in the name of another node's process that the layout
/// does not list (its previous one, say) is refused, saying why; the same
/// Hello from the listed process is taken. Returns that link: the caller
/// keeps it open, since a peer's link from its first shard that closes
/// makes the data node suspect the peer.
fn peer_links_of_other_processes_are_refused(shard: &str, other: &latsdb_types::proto::DataNodeInfo) -> TcpStream {
    let peer_hello = |process: u64| {
        let mut s = TcpStream::connect(shard).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let from = ShardAddr { node: other.node_id, shard: (other.shards.len() - 1) as u16 };
        s.write_all(&proto::frame(4, &Hello::Peer { protocol: PROTOCOL_VERSION, from, process })).unwrap();
        s
    };
    let mut s = peer_hello(other.process.wrapping_add(1));
    let msg = expect_error(&mut s, 4, ErrorCode::BadRequest);
    assert!(msg.contains(&format!("lists process {:#x} for data node {}", other.process, other.node_id)), "{msg}");
    let mut listed = peer_hello(other.process);
    listed.set_read_timeout(Some(Duration::from_millis(2500))).unwrap();
    let mut byte = [0u8; 1];
    match listed.read(&mut byte) {
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
        other => panic!("the listed process's peer link was not kept open past the 2 s check: {other:?}"),
    }
    listed
}

/// A data node's registration that names no process (0) is refused with
/// the reason: 0 means "no process" in a layout and would turn the peers'
/// process check off for that node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_without_a_process_number_is_refused() {
    use latsdb_types::proto::{MgmRequest, MgmResponse};
    let cluster = TestCluster::start(&["--no-sql", "--no-rest"]);
    let mut mgm = latsdb_net::RpcConn::connect(&cluster.mgmd, Duration::from_secs(5), None).await.unwrap();
    let register = MgmRequest::RegisterDataNode { node_id: None, pid: 1, process: 0, protocol: PROTOCOL_VERSION };
    match mgm.call::<_, MgmResponse>(&register).await {
        Ok(MgmResponse::Error(e)) => {
            assert_eq!(e.code, ErrorCode::BadRequest);
            assert!(e.message.contains("process number must not be 0"), "{}", e.message);
        }
        other => panic!("a registration with process 0 was not refused: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_unknown_wrong_and_oversized_requests_get_clear_errors() {
    let cluster = TestCluster::start(&[]);
    let client = Client::connect(&cluster.mgmd).await.unwrap();
    let t = client
        .create_table(
            TableSpec::new("test", "t")
                .column(ColumnDef::new("id", ColumnType::int(IntWidth::Int)))
                .column(ColumnDef::new("n", ColumnType::int(IntWidth::Small)))
                .column(ColumnDef::new("s", ColumnType::VarChar(4)))
                .primary_key(&["id"]),
        )
        .await
        .unwrap();
    let layout = client.layout();
    let shard = layout.datanodes[0].shards[0].clone();

    // Client-side validation: clear, typed errors before anything is sent.
    let e = client.table("test", "nope").await.unwrap_err();
    assert_eq!(e.code, ErrorCode::UnknownTable);
    assert!(e.message.contains("test.nope"), "{}", e.message);
    let e = Op::update(&t, &[Value::Int(1)], &[("missing", Value::Int(1))]).unwrap_err();
    assert_eq!(e.code, ErrorCode::UnknownColumn);
    let e = Op::insert(&t, vec![Value::Str("x".into()), Value::Int(1), Value::Null]).unwrap_err();
    assert_eq!(e.code, ErrorCode::TypeError);
    assert!(e.message.contains("column 'id' is INT"), "{}", e.message);
    let e = Op::insert(&t, vec![Value::Int(1), Value::Int(70_000), Value::Null]).unwrap_err();
    assert!(e.message.contains("out of range"), "{}", e.message);
    let e = Op::insert(&t, vec![Value::Int(1), Value::Int(1), Value::Str("toolong".into())]).unwrap_err();
    assert!(e.message.contains("too long"), "{}", e.message);
    assert!(client.scan(&t, Scan::all().index("no_such_index")).await.is_err());

    // Server-side validation of requests that bypass the client library.
    let mut raw = raw_client(&shard);
    // A body that is not a request.
    let mut garbage = Vec::new();
    garbage.extend_from_slice(&(8u32 + 5).to_le_bytes());
    garbage.extend_from_slice(&7u64.to_le_bytes());
    garbage.extend_from_slice(&[0xFF, 0xFE, 0x01, 0x02, 0x03]);
    raw.write_all(&garbage).unwrap();
    let msg = expect_error(&mut raw, 7, ErrorCode::Malformed);
    assert!(msg.contains("could not decode"), "{msg}");
    ping(&mut raw, 8);
    // Unknown table id, wrong value type, key for the wrong partition.
    let good = Op::read(&t, &[Value::Int(5)]).unwrap();
    let partition = good.partition();
    let key = t.meta.encode_key(&[Value::Int(5)]).unwrap();
    let mut ops = vec![
        KeyOp { table: 999, table_version: 1, partition: 0, key: key.clone(), kind: OpKind::Delete, projection: None },
        KeyOp {
            table: t.def().id,
            table_version: t.def().version,
            partition,
            key: key.clone(),
            kind: OpKind::Insert { row: vec![Value::Int(5), Value::Str("not a number".into()), Value::Null] },
            projection: None,
        },
        KeyOp {
            table: t.def().id,
            table_version: t.def().version + 5,
            partition,
            key: key.clone(),
            kind: OpKind::Delete,
            projection: None,
        },
        KeyOp {
            table: t.def().id,
            table_version: t.def().version,
            partition,
            key: vec![1, 2, 3],
            kind: OpKind::Delete,
            projection: None,
        },
    ];
    let owner = layout.primary_of(partition).unwrap();
    let mut owner_conn = raw_client(layout.shard_address(owner).unwrap());
    owner_conn.write_all(&proto::frame(9, &ClientRequest::Batch(std::mem::take(&mut ops)))).unwrap();
    match read_frame(&mut owner_conn) {
        Some((9, ClientResponse::Batch(results))) => {
            let codes: Vec<ErrorCode> = results
                .iter()
                .map(|r| match r {
                    OpResult::Error(e) => e.code,
                    other => panic!("expected an error, got {other:?}"),
                })
                .collect();
            assert_eq!(
                codes,
                vec![
                    ErrorCode::UnknownTable,
                    ErrorCode::TypeError,
                    ErrorCode::SchemaVersionMismatch,
                    ErrorCode::Malformed
                ]
            );
        }
        other => panic!("{other:?}"),
    }
    ping(&mut owner_conn, 10);

    // A frame larger than the limit: error, then the connection is closed.
    let mut big = raw_client(&shard);
    let mut header = Vec::new();
    header.extend_from_slice(&(200u32 << 20).to_le_bytes());
    header.extend_from_slice(&11u64.to_le_bytes());
    big.write_all(&header).unwrap();
    let msg = expect_error(&mut big, 11, ErrorCode::FrameTooLarge);
    assert!(msg.contains("frame limit"), "{msg}");
    assert!(read_frame(&mut big).is_none(), "the connection must be closed");

    // A first message that is not a Hello.
    let mut s = TcpStream::connect(&shard).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&proto::frame(3, &ClientRequest::Ping)).unwrap();
    expect_error(&mut s, 3, ErrorCode::Malformed);
    let _listed_link = peer_links_of_other_processes_are_refused(&shard, &layout.datanodes[1]);
    // A frame whose length cannot hold its header.
    let mut s = TcpStream::connect(&shard).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&[3, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
    assert!(read_frame(&mut s).is_none());

    // Duplicate keys are reported per operation; the node keeps serving everyone.
    let ins = || Op::insert(&t, vec![Value::Int(5), Value::Int(1), Value::Str("ok".into())]).unwrap();
    let r = client.batch(vec![ins(), ins()]).await.unwrap();
    assert!(r[0].is_ok());
    assert!(matches!(&r[1], Err(e) if e.code == ErrorCode::DuplicateKey));
    ping(&mut raw, 12);
    client.ping().await.unwrap();
    assert_eq!(client.get(&t, &[Value::Int(5)]).await.unwrap().unwrap().get(2), Value::Str("ok".into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_operation_outcomes() {
    let cluster = TestCluster::start(&[]);
    let client = Client::connect(&cluster.mgmd).await.unwrap();
    let t = client
        .create_table(
            TableSpec::new("k", "t")
                .column(ColumnDef::new("id", ColumnType::VarChar(20)))
                .column(ColumnDef::new("n", ColumnType::int(IntWidth::Int)).not_null().default_value(Value::Int(7)))
                .column(ColumnDef::new("note", ColumnType::Text))
                .primary_key(&["id"]),
        )
        .await
        .unwrap();
    let key = |s: &str| vec![Value::Str(s.into())];
    // Upsert inserts, then overwrites; insert_named fills defaults.
    let r = client
        .batch(vec![
            Op::upsert(&t, vec!["a".into(), Value::Int(1), Value::Null]).unwrap(),
            Op::insert_named(&t, &[("id", "b".into())]).unwrap(),
        ])
        .await
        .unwrap();
    assert!(r.iter().all(|x| matches!(x, Ok(latsdb_client::Outcome::Done))));
    client.batch(vec![Op::upsert(&t, vec!["a".into(), Value::Int(2), "x".into()]).unwrap()]).await.unwrap();
    let a = client.get(&t, &key("a")).await.unwrap().unwrap();
    assert_eq!(a.values(), vec!["a".into(), Value::Int(2), "x".into()]);
    let b = client.get(&t, &key("b")).await.unwrap().unwrap();
    assert_eq!(b.get_by_name("n").unwrap(), Value::Int(7));
    assert_eq!(b.get_by_name("note").unwrap(), Value::Null);
    // A projection returns only the named columns.
    let only_note = Op::read(&t, &key("a")).unwrap().columns(&t, &["note"]).unwrap();
    let row = client.batch(vec![only_note]).await.unwrap().pop().unwrap().unwrap().into_row().unwrap();
    assert_eq!(row.values(), vec![Value::from("x")]);
    // Update, delete and read of a missing row are NotFound outcomes, not errors.
    let r = client
        .batch(vec![
            Op::update(&t, &key("zz"), &[("n", Value::Int(1))]).unwrap(),
            Op::delete(&t, &key("zz")).unwrap(),
            Op::read(&t, &key("zz")).unwrap(),
            Op::delete(&t, &key("b")).unwrap(),
        ])
        .await
        .unwrap();
    let kinds: Vec<&str> = r
        .iter()
        .map(|x| match x {
            Ok(latsdb_client::Outcome::NotFound) => "notfound",
            Ok(latsdb_client::Outcome::Done) => "done",
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(kinds, vec!["notfound", "notfound", "notfound", "done"]);
    assert!(client.get(&t, &key("b")).await.unwrap().is_none());
    // NOT NULL is enforced on update too, and a key column cannot be updated.
    let e = Op::update(&t, &key("a"), &[("n", Value::Null)]).unwrap_err();
    assert!(e.message.contains("cannot be NULL"), "{}", e.message);
    let r = client.batch(vec![Op::update(&t, &key("a"), &[("id", "c".into())]).unwrap()]).await.unwrap();
    assert!(matches!(&r[0], Err(e) if e.message.contains("primary-key column 'id' cannot be updated")), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_changes_reach_every_node() {
    let cluster = TestCluster::start(&[]);
    let client = Client::connect(&cluster.mgmd).await.unwrap();
    let spec = TableSpec::new("s", "t")
        .column(ColumnDef::new("id", ColumnType::int(IntWidth::Int)))
        .column(ColumnDef::new("k", ColumnType::int(IntWidth::Int)))
        .primary_key(&["id"]);
    let t = client.create_table(spec.clone()).await.unwrap();
    assert_eq!(client.create_table(spec.clone()).await.unwrap_err().code, ErrorCode::TableExists);
    let bad = TableSpec::new("s", "u").column(ColumnDef::new("id", ColumnType::int(IntWidth::Int)));
    let e = client.create_table(bad).await.unwrap_err();
    assert!(e.message.contains("primary key"), "{}", e.message);
    let ops = (0..100).map(|i| Op::insert(&t, vec![Value::Int(i), Value::Int(i % 3)]).unwrap()).collect();
    client.batch(ops).await.unwrap();
    // After an index is added, operations built for the old version are refused
    // with a retriable error, and a refreshed definition works.
    let t2 = client.create_index("s", "t", "k_idx", &["k"]).await.unwrap();
    assert_eq!(t2.def().version, t.def().version + 1);
    let stale = client.batch(vec![Op::read(&t, &[Value::Int(1)]).unwrap()]).await.unwrap();
    assert!(matches!(&stale[0], Err(e) if e.code == ErrorCode::SchemaVersionMismatch && e.is_retriable()));
    let rows = client.scan(&t2, Scan::all().index("k_idx").equal(vec![Value::Int(2)])).await.unwrap();
    assert_eq!(rows.len(), 33);
    let t3 = client.drop_index("s", "t", "k_idx").await.unwrap();
    assert!(client.scan(&t3, Scan::all().index("k_idx")).await.is_err());
    assert_eq!(client.scan(&t3, Scan::all()).await.unwrap().len(), 100);
    let listed = cluster.mgm(&["tables"]);
    assert!(listed.contains("s.t"), "{listed}");
    client.drop_table("s", "t").await.unwrap();
    let gone = client.batch(vec![Op::read(&t3, &[Value::Int(1)]).unwrap()]).await.unwrap();
    assert!(matches!(&gone[0], Err(e) if e.code == ErrorCode::UnknownTable));
    // The name can be reused.
    let again = client.create_table(spec).await.unwrap();
    assert!(client.get(&again, &[Value::Int(1)]).await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_node_refuses_writes_with_table_full_and_keeps_serving() {
    // Two replicas: every row is held by both data nodes.
    let cluster = TestCluster::start(&["--data-memory-mb", "16"]);
    let client = Client::connect(&cluster.mgmd).await.unwrap();
    let t = client
        .create_table(
            TableSpec::new("m", "big")
                .column(ColumnDef::new("id", ColumnType::int(IntWidth::Big)))
                .column(ColumnDef::new("payload", ColumnType::VarBinary(200)))
                .primary_key(&["id"]),
        )
        .await
        .unwrap();
    let mut stored = Vec::new();
    let mut refused = 0;
    for first in (0..100_000i64).step_by(1000) {
        let ops = (first..first + 1000)
            .map(|id| Op::insert(&t, vec![Value::Int(id), Value::Bytes(vec![7; 200])]).unwrap())
            .collect();
        for (offset, r) in client.batch(ops).await.unwrap().into_iter().enumerate() {
            match r {
                Ok(_) => stored.push(first + offset as i64),
                Err(e) => {
                    assert_eq!(e.code, ErrorCode::TableFull, "{e}");
                    assert!(e.message.contains("m.big is full"), "{}", e.message);
                    refused += 1;
                }
            }
        }
    }
    assert!(refused > 0, "16 MiB of data memory per node cannot hold 100,000 rows of 200 bytes");
    let report = cluster.mgm(&["report-memory"]);
    let memory: Vec<&str> = report.lines().filter(|l| l.contains("data memory")).collect();
    assert_eq!(memory.len(), 2, "{report}");
    assert!(memory.iter().all(|l| l.contains("of 16 MiB") && l.contains("rows in 1 shard")), "{report}");
    assert!(memory.iter().all(|l| l.contains(", ALERT: shard ")), "a full node is flagged: {report}");
    // The cluster log has an alert for each node (the fill may have been
    // too quick for the 5 s checks to see the warning level on the way).
    let alerted = |log: &str, node: u16| {
        log.contains(&format!("ALERT   mgmd: data node {node}: data memory"))
            && log.contains("a shard refuses writes when its data memory is full")
    };
    wait_for_log(&cluster, |log| alerted(log, 2) && alerted(log, 3));
    assert!(stored.len() > 20_000, "only {} rows fit", stored.len());
    // Every stored row is intact, and the nodes answer as before.
    let last = *stored.last().unwrap();
    assert_eq!(client.get(&t, &[Value::Int(last)]).await.unwrap().unwrap().get(1), Value::Bytes(vec![7; 200]));
    client.ping().await.unwrap();
    // Deleting rows makes room again.
    let deletes = stored[..5000].iter().map(|&id| Op::delete(&t, &[Value::Int(id)]).unwrap()).collect();
    assert!(client.batch(deletes).await.unwrap().iter().all(|r| r.is_ok()));
    let retry = (100_000..100_100)
        .map(|id| Op::insert(&t, vec![Value::Int(id), Value::Bytes(vec![1; 200])]).unwrap())
        .collect();
    assert!(client.batch(retry).await.unwrap().iter().all(|r| r.is_ok()));
    // Emptied, the nodes are below the warning level again, and the log says so.
    for chunk in stored[5000..].chunks(1000) {
        let deletes = chunk.iter().map(|&id| Op::delete(&t, &[Value::Int(id)]).unwrap()).collect();
        assert!(client.batch(deletes).await.unwrap().iter().all(|r| r.is_ok()));
    }
    wait_for_log(&cluster, |log| {
        (2..=3).all(|node| {
            log.contains(&format!("INFO    mgmd: data node {node}: data memory"))
                && log.contains("below the warning level again")
        })
    });
}

/// With checkpoints off, the REDO log only grows: at its limit writes are
/// refused with a temporary error that says why, without effect, while the
/// node keeps serving reads and the cluster log raises an alert (the disk
/// is never filled).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_redo_log_refuses_writes_and_keeps_serving() {
    let cluster =
        TestCluster::start(&["--checkpoint-trigger-mb", "0", "--redo-limit-mb", "8", "--no-sql", "--no-rest"]);
    let (client, t) = payload_table(&cluster, "log").await;
    let mut refused = None;
    'fill: for first in (0..100_000i64).step_by(100) {
        let ops = (first..first + 100)
            .map(|id| Op::insert(&t, vec![Value::Int(id), Value::Bytes(vec![7; 1000])]).unwrap())
            .collect();
        for (offset, r) in client.batch(ops).await.unwrap().into_iter().enumerate() {
            if let Err(e) = r {
                assert_eq!(e.code, ErrorCode::RedoFull, "{e}");
                assert!(e.is_retriable(), "{e}");
                assert!(e.message.contains("REDO log of shard") && e.message.contains("checkpoints are off"), "{e}");
                refused = Some(first + offset as i64);
                break 'fill;
            }
        }
    }
    let refused = refused.expect("8 MiB of REDO cannot log 100 MB of rows");
    assert!(refused > 1000, "writes were refused too early, at row {refused}");
    assert!(client.get(&t, &[Value::Int(refused)]).await.unwrap().is_none(), "a refused write left a row");
    assert_eq!(client.get(&t, &[Value::Int(0)]).await.unwrap().unwrap().get(1), Value::Bytes(vec![7; 1000]));
    let report = cluster.mgm(&["report-memory"]);
    assert!(report.contains("REDO log") && report.contains(", ALERT: shard "), "{report}");
    wait_for_log(&cluster, |log| {
        log.contains("ALERT   mgmd: data node")
            && log.contains("REDO log")
            && log.contains("a shard refuses writes (a temporary error) when its REDO log is full")
    });
}

/// With checkpoints on, a REDO limit smaller than the checkpoint trigger
/// starts checkpoints at half the limit: a load that logs several times the
/// limit goes through (a write refused meanwhile is retried), and the REDO
/// kept ends below the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redo_limit_starts_checkpoints_that_let_older_redo_go() {
    let cluster =
        TestCluster::start(&["--checkpoint-trigger-mb", "1024", "--redo-limit-mb", "16", "--no-sql", "--no-rest"]);
    let (client, t) = payload_table(&cluster, "churn").await;
    // 60 MB of REDO over 2,000 rows rewritten again and again.
    let mut refused = 0;
    for round in 0..300i64 {
        let ops: Vec<Op> = (0..200i64)
            .map(|i| {
                Op::upsert(&t, vec![Value::Int((round * 200 + i) % 2000), Value::Bytes(vec![round as u8; 1000])])
                    .unwrap()
            })
            .collect();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let results = client.batch(ops.clone()).await.unwrap();
            let full = results.iter().filter(|r| matches!(r, Err(e) if e.code == ErrorCode::RedoFull)).count();
            assert!(
                results.iter().all(|r| r.is_ok() || matches!(r, Err(e) if e.code == ErrorCode::RedoFull)),
                "{results:?}"
            );
            if full == 0 {
                break;
            }
            refused += full;
            assert!(std::time::Instant::now() < deadline, "writes stayed refused for 60 s: no checkpoint let REDO go");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // The last writes may have filled the REDO up to the limit (never past
    // it); the checkpoint they started then lets older REDO go.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let report = cluster.mgm(&["report-memory"]);
        let kept: Vec<f64> = report
            .lines()
            .filter_map(|l| l.split("REDO log ").nth(1)?.split(" MiB kept").next()?.parse().ok())
            .collect();
        assert_eq!(kept.len(), 2, "{report}");
        assert!(kept.iter().all(|&k| k <= 16.0), "a node keeps more REDO than its limit: {report}");
        if kept.iter().all(|&k| k < 16.0) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no checkpoint let REDO go below the limit in 60 s: {report}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("writes refused and retried while checkpoints caught up: {refused}");
}

/// The management server's GET /metrics shows the nodes, the cluster log's
/// counts and each shard's usage, in the Prometheus text format.
#[test]
fn the_management_server_serves_prometheus_metrics() {
    let port = common::free_port().to_string();
    let cluster = TestCluster::start(&["--mgmd-metrics-port", &port, "--no-sql", "--no-rest"]);
    let get = |path: &str| -> String {
        let mut stream = TcpStream::connect(("127.0.0.1", port.parse::<u16>().unwrap())).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(stream, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        answer
    };
    assert!(get("/nothing").starts_with("HTTP/1.1 404"));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let text = loop {
        let text = get("/metrics");
        // The usage arrives with the first poll of the data nodes (5 s).
        if text.contains("latsdb_rows{node=\"3\"") {
            break text;
        }
        assert!(std::time::Instant::now() < deadline, "no usage in the metrics within 30 s:\n{text}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(text.starts_with("HTTP/1.1 200") && text.contains("text/plain; version=0.0.4"), "{text}");
    for line in [
        "latsdb_cluster_formed 1",
        "latsdb_data_node_started{node=\"2\",node_group=\"0\"} 1",
        "latsdb_data_node_started{node=\"3\",node_group=\"0\"} 1",
        "# TYPE latsdb_data_memory_used_bytes gauge",
    ] {
        assert!(text.lines().any(|l| l == line), "no line {line:?} in:\n{text}");
    }
    let info = text.lines().find_map(|l| l.strip_prefix("latsdb_cluster_events_total{severity=\"info\"} "));
    assert!(info.and_then(|n| n.parse::<u64>().ok()).is_some_and(|n| n > 0), "{text}");
    let log = cluster.mgm(&["log"]);
    assert!(log.contains(&format!("metrics at http://127.0.0.1:{port}/metrics")), "{log}");
    // `mgm report` prints the same samples, without the comment lines.
    let report = cluster.mgm(&["report"]);
    assert!(report.lines().any(|l| l == "latsdb_cluster_formed 1") && !report.contains("# TYPE"), "{report}");
    assert!(report.contains("latsdb_rows{node=\"3\""), "{report}");
}

/// A connected client and a new table r.NAME of a BIGINT key and a
/// VARBINARY(1000) payload.
async fn payload_table(cluster: &TestCluster, name: &str) -> (Client, std::sync::Arc<latsdb_client::Table>) {
    let client = Client::connect(&cluster.mgmd).await.unwrap();
    let spec = TableSpec::new("r", name)
        .column(ColumnDef::new("id", ColumnType::int(IntWidth::Big)))
        .column(ColumnDef::new("payload", ColumnType::VarBinary(1000)))
        .primary_key(&["id"]);
    let table = client.create_table(spec).await.unwrap();
    (client, table)
}

/// Polls `latsdb mgm log` until `done` holds (the management server checks
/// usage every 5 s).
fn wait_for_log(cluster: &TestCluster, done: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let log = cluster.mgm(&["log", "--lines", "500"]);
        if done(&log) {
            return log;
        }
        assert!(std::time::Instant::now() < deadline, "the cluster log did not show it within 60 s:\n{log}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}
