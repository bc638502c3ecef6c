//! Real processes, two replicas: every data node is killed with SIGKILL in
//! the middle of a transactional write load, then started again (a system
//! restart). What comes back must be exactly a prefix of epochs: every
//! transaction acknowledged as durable is there, no transaction is
//! half-present, both replicas hold the same rows, and the cluster takes
//! new writes.

mod common;

use common::{kill_all, process_exists, restart, sigkill, signal_all, tagged, TestCluster};
use latsdb_client::{Client, ClientOptions, Op, Scan};
use latsdb_types::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_restart_after_sigkill_of_every_data_node_restores_a_durable_prefix() {
    // Checkpoints every MiB of REDO: several complete (and trim the log)
    // during the load, so the restore reads a checkpoint plus REDO.
    let cluster = TestCluster::start(&["--no-restart", "--replicas", "2", "--no-rest", "--checkpoint-trigger-mb", "1"]);
    let show = cluster.mgm(&["show"]);
    let pids = common::datanode_pids(&show);
    assert_eq!(pids.len(), 2, "{show}");
    let data_dir = cluster.dir.path().join("data");

    let client = Client::connect(&cluster.mgmd).await.unwrap();
    let durable_client =
        Client::connect_with(&cluster.mgmd, ClientOptions { wait_durable: true, ..Default::default() }).await.unwrap();
    let table = tagged::create_table(&client).await;

    let stop = Arc::new(AtomicBool::new(false));
    let acked: Arc<Mutex<BTreeSet<i64>>> = Arc::default();
    let durable_acked: Arc<Mutex<BTreeSet<i64>>> = Arc::default();
    let mut tasks = Vec::new();
    // Three writers acknowledged at commit, two only once durable.
    for w in 0..5i64 {
        let (c, set) = if w < 3 { (&client, &acked) } else { (&durable_client, &durable_acked) };
        tasks.push(tokio::spawn(tagged::writer(
            c.clone(),
            table.clone(),
            w * 1_000_000,
            stop.clone(),
            set.clone(),
            Arc::default(),
        )));
    }
    tokio::time::sleep(Duration::from_millis(2500)).await;
    // On a loaded machine the writers may not have filled a MiB of REDO
    // yet: they go on until each node has published a checkpoint.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !["2", "3"].iter().all(|n| has_checkpoint(&data_dir.join(format!("datanode-{n}")))) {
        assert!(Instant::now() < deadline, "no checkpoint on both data nodes within 60 s of writes");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let durable_before = durable_acked.lock().unwrap().len();
    let plain_before = acked.lock().unwrap().len();
    assert!(durable_before > 20, "only {durable_before} durable transactions before the crash");
    assert!(plain_before > 200, "only {plain_before} transactions before the crash");

    // Kill every data node while the writers run.
    kill_all(&pids);
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let durable_acked = durable_acked.lock().unwrap().clone();
    let acked = acked.lock().unwrap().clone();

    // System restart: the same data nodes, from their disks.
    let started = Instant::now();
    let (_nodes, client) = restart(&cluster, &data_dir, &["2", "3"]).await;
    eprintln!("system restart took {} ms", started.elapsed().as_millis());
    for node in ["2", "3"] {
        let log = std::fs::read_to_string(data_dir.join(format!("datanode-{node}-restart.log"))).unwrap();
        assert!(log.contains("from checkpoint"), "node {node} restored without a checkpoint:\n{log}");
    }
    let table = client.refresh_table("r", "tagged").await.unwrap();

    let rows = client.scan(&table, Scan::all()).await.unwrap();
    let mut by_tag: BTreeMap<i64, i64> = BTreeMap::new();
    for row in &rows {
        let id = row.get(0).as_i64().unwrap();
        let tag = row.get(1).as_i64().unwrap();
        assert_eq!(id / 10, tag, "row {id} carries tag {tag}");
        *by_tag.entry(tag).or_default() += 1;
    }
    for (tag, n) in &by_tag {
        assert_eq!(*n, tagged::ROWS_PER_TX, "transaction {tag} is half-present after the restart ({n} rows)");
    }
    let missing: Vec<&i64> = durable_acked.iter().filter(|t| !by_tag.contains_key(t)).collect();
    assert!(missing.is_empty(), "transactions acknowledged as durable are lost: {missing:?}");
    let plain_kept = acked.iter().filter(|t| by_tag.contains_key(t)).count();
    eprintln!(
        "{} durable-acknowledged transactions all restored; {plain_kept} of {} plain-acknowledged restored; {} transactions in all",
        durable_acked.len(),
        acked.len(),
        by_tag.len()
    );
    // Most of the plain ones were acknowledged well before the crash, so
    // their epochs were durable.
    assert!(plain_kept * 2 > acked.len(), "only {plain_kept} of {} acknowledged transactions came back", acked.len());

    // Both replicas restored the same rows.
    let memory = cluster.mgm(&["report-memory"]);
    let counts: Vec<&str> = memory.lines().filter_map(|l| l.split(", ").nth(1)).collect();
    assert_eq!(counts.len(), 2, "{memory}");
    assert_eq!(counts[0], counts[1], "replicas differ after the restart: {memory}");

    // And the cluster takes new writes.
    let ops = vec![Op::upsert(&table, vec![Value::Int(-10), Value::Int(-1)]).unwrap()];
    let results = client.batch(ops).await.unwrap();
    assert!(results[0].is_ok(), "{:?}", results[0]);
}

/// Every data node is stopped with SIGTERM (a graceful stop, as `latsdb
/// start` does on Ctrl-C) while writers run whose commits are acknowledged
/// before they are durable: each node refuses clients, waits until its
/// commits are durable and exits, so after the system restart every
/// acknowledged transaction is there (a SIGKILL loses the last epoch or
/// two of them, above).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_of_every_data_node_loses_no_acknowledged_commit() {
    let cluster = TestCluster::start(&["--no-restart", "--replicas", "2", "--no-rest"]);
    let show = cluster.mgm(&["show"]);
    let pids = common::datanode_pids(&show);
    assert_eq!(pids.len(), 2, "{show}");
    let data_dir = cluster.dir.path().join("data");
    let client = Client::connect(&cluster.mgmd).await.unwrap();
    let table = tagged::create_table(&client).await;
    let writers = tagged::Writers::start(&client, &table, 3);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let before = writers.acked_count();
    assert!(before > 100, "only {before} transactions before the stop");

    signal_all(&pids, libc::SIGTERM, Duration::from_secs(30));
    let acked = writers.stop().await;
    for node in ["2", "3"] {
        let log = std::fs::read_to_string(data_dir.join(format!("datanode-{node}.log"))).unwrap_or_default();
        assert!(log.contains("is durable (waited"), "node {node} did not wait for its commits to be durable:\n{log}");
    }

    let (_nodes, client) = restart(&cluster, &data_dir, &["2", "3"]).await;
    let table = client.refresh_table("r", "tagged").await.unwrap();
    let rows = client.scan(&table, Scan::all()).await.unwrap();
    let tags: BTreeSet<i64> = rows.iter().map(|row| row.get(1).as_i64().unwrap()).collect();
    let missing: Vec<&i64> = acked.iter().filter(|t| !tags.contains(t)).collect();
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged transactions are lost after a graceful stop: {:?}",
        missing.len(),
        acked.len(),
        &missing[..missing.len().min(10)]
    );
    eprintln!("all {} acknowledged transactions restored", acked.len());
}

/// Writes `count` transactions tagged from `first`, each acknowledged only
/// once durable; one that fails with a retriable error (a node just
/// failed) is sent again (its upserts are idempotent).
async fn write_durably(client: &Client, table: &Arc<latsdb_client::Table>, first: i64, count: i64) {
    for tag in first..first + count {
        let mut tries = 0;
        loop {
            let ops = (0..tagged::ROWS_PER_TX)
                .map(|k| Op::upsert(table, vec![Value::Int(tag * 10 + k), Value::Int(tag)]).unwrap())
                .collect();
            match client.transaction().execute_commit(ops).await {
                Ok(_) => break,
                Err(e) if e.code.is_retriable() && tries < 100 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("transaction {tag} failed: {e:?}"),
            }
        }
    }
}

/// Data node 3 fails and leaves the view; later every data node dies. At
/// the system restart data node 2 (the last view) restores alone and the
/// cluster forms without node 3, which joins by a node restart and copies
/// what it missed: every durable commit is there and both replicas end
/// with the same rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_left_before_the_last_view_rejoins_after_a_system_restart() {
    let cluster = TestCluster::start(&["--no-restart", "--replicas", "2", "--no-rest"]);
    let pids = common::datanode_pids(&cluster.mgm(&["show"]));
    assert_eq!(pids.len(), 2);
    let data_dir = cluster.dir.path().join("data");
    let client =
        Client::connect_with(&cluster.mgmd, ClientOptions { wait_durable: true, ..Default::default() }).await.unwrap();
    let table = tagged::create_table(&client).await;
    write_durably(&client, &table, 0, 50).await;

    sigkill(pids[1]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while process_exists(pids[1]) || !cluster.mgm(&["show"]).contains("not started") {
        assert!(Instant::now() < deadline, "data node 3 did not leave the view:\n{}", cluster.mgm(&["show"]));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Only data node 2 has these.
    write_durably(&client, &table, 100, 50).await;
    sigkill(pids[0]);
    while process_exists(pids[0]) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    let (_nodes, client) = restart(&cluster, &data_dir, &["3", "2"]).await;
    let table = client.refresh_table("r", "tagged").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let show = cluster.mgm(&["show"]);
        if !show.contains("not started") && !show.contains("starting") {
            break;
        }
        assert!(Instant::now() < deadline, "data node 3 did not rejoin:\n{show}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log3 = std::fs::read_to_string(data_dir.join("datanode-3-restart.log")).unwrap();
    assert!(log3.contains("copy stage done"), "data node 3 did not rejoin by a node restart:\n{log3}");

    let rows = client.scan(&table, Scan::all()).await.unwrap();
    let mut by_tag: BTreeMap<i64, i64> = BTreeMap::new();
    for row in &rows {
        *by_tag.entry(row.get(1).as_i64().unwrap()).or_default() += 1;
    }
    for tag in (0..50).chain(100..150) {
        assert_eq!(by_tag.get(&tag), Some(&tagged::ROWS_PER_TX), "durable transaction {tag} is not wholly there");
    }
    let memory = cluster.mgm(&["report-memory"]);
    let counts: Vec<&str> = memory.lines().filter_map(|l| l.split(", ").nth(1)).collect();
    assert_eq!(counts.len(), 2, "{memory}");
    assert_eq!(counts[0], counts[1], "replicas differ after the rejoin: {memory}");
    let ops = vec![Op::upsert(&table, vec![Value::Int(-10), Value::Int(-1)]).unwrap()];
    assert!(client.batch(ops).await.unwrap()[0].is_ok());
}

/// Columns added to a table with rows: the rows stored before read the fill
/// values, a client holding the old definition is told to refresh it, and
/// after every data node is killed and restarted from checkpoint and REDO
/// (rows of both shapes) every row reads as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn added_columns_survive_a_system_restart() {
    use latsdb_types::{ColumnDef, ColumnType, ErrorCode, IntWidth, TableSpec};
    let cluster = TestCluster::start(&["--no-restart", "--replicas", "2", "--no-rest", "--checkpoint-trigger-mb", "1"]);
    let show = cluster.mgm(&["show"]);
    let pids = common::datanode_pids(&show);
    let data_dir = cluster.dir.path().join("data");
    let client =
        Client::connect_with(&cluster.mgmd, ClientOptions { wait_durable: true, ..Default::default() }).await.unwrap();
    let stale = Client::connect(&cluster.mgmd).await.unwrap();
    let spec = TableSpec::new("r", "grown")
        .column(ColumnDef::new("id", ColumnType::int(IntWidth::Big)))
        .column(ColumnDef::new("body", ColumnType::VarChar(400)))
        .primary_key(&["id"]);
    let table = client.create_table(spec).await.unwrap();
    // About 1.5 MiB of rows: a checkpoint starts before the change.
    let body = |id: i64| Value::Str(format!("{id:>300}"));
    for chunk in (0..4_000i64).collect::<Vec<_>>().chunks(200) {
        let ops = chunk.iter().map(|&id| Op::upsert(&table, vec![Value::Int(id), body(id)]).unwrap()).collect();
        client.transaction().execute_commit(ops).await.unwrap();
    }
    let old_def = stale.table("r", "grown").await.unwrap();
    assert_eq!(stale.get(&old_def, &[Value::Int(1)]).await.unwrap().unwrap().len(), 2);

    let table = client
        .add_columns(
            "r",
            "grown",
            vec![
                ColumnDef::new("n", ColumnType::int(IntWidth::Int)).not_null().default_value(Value::Int(7)),
                ColumnDef::new("s", ColumnType::VarChar(10)),
            ],
            vec![Value::Int(7), Value::Null],
        )
        .await
        .unwrap();
    let duplicate = client
        .add_columns("r", "grown", vec![ColumnDef::new("N", ColumnType::Double)], vec![Value::Null])
        .await
        .unwrap_err();
    assert_eq!(duplicate.code, ErrorCode::ColumnExists, "{duplicate:?}");

    // The stale client's definition is refused, and refreshing it shows
    // the fill values in the rows stored before.
    let refused = stale.get(&old_def, &[Value::Int(1)]).await.unwrap_err();
    assert_eq!(refused.code, ErrorCode::SchemaVersionMismatch, "{refused:?}");
    let fresh = stale.refresh_table("r", "grown").await.unwrap();
    let row = stale.get(&fresh, &[Value::Int(1)]).await.unwrap().unwrap();
    assert_eq!(row.values(), vec![Value::Int(1), body(1), Value::Int(7), Value::Null]);

    // Rows of the new shape: updated old rows and new ones.
    let mut ops = Vec::new();
    for id in (0..4_000i64).step_by(10) {
        ops.push(
            Op::update(
                &table,
                &[Value::Int(id)],
                &[("n", Value::Int(id as i32 as i64)), ("s", Value::Str("u".into()))],
            )
            .unwrap(),
        );
    }
    for id in 4_000..4_100i64 {
        ops.push(Op::upsert(&table, vec![Value::Int(id), body(id), Value::Int(-1), Value::Str("new".into())]).unwrap());
    }
    for batch in ops.chunks(100) {
        client.transaction().execute_commit(batch.to_vec()).await.unwrap();
    }
    let expected = |id: i64| -> Vec<Value> {
        match id {
            4_000.. => vec![Value::Int(id), body(id), Value::Int(-1), Value::Str("new".into())],
            _ if id % 10 == 0 => vec![Value::Int(id), body(id), Value::Int(id), Value::Str("u".into())],
            _ => vec![Value::Int(id), body(id), Value::Int(7), Value::Null],
        }
    };
    let check = |rows: Vec<latsdb_client::Row>| {
        assert_eq!(rows.len(), 4_100);
        for row in rows {
            let id = row.get(0).as_i64().unwrap();
            assert_eq!(row.values(), expected(id), "row {id}");
        }
    };
    check(client.scan(&table, Scan::all()).await.unwrap());

    kill_all(&pids);
    let (_nodes, client) = restart(&cluster, &data_dir, &["2", "3"]).await;
    let table = client.refresh_table("r", "grown").await.unwrap();
    // The client may have connected before both nodes reported started.
    let deadline = Instant::now() + Duration::from_secs(30);
    let rows = loop {
        match client.scan(&table, Scan::all()).await {
            Ok(rows) => break rows,
            Err(e) if e.code.is_retriable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let _ = client.refresh_layout().await;
            }
            Err(e) => panic!("scan after the restart: {e:?}"),
        }
    };
    check(rows);
    for node in ["2", "3"] {
        let log = std::fs::read_to_string(data_dir.join(format!("datanode-{node}-restart.log"))).unwrap();
        eprintln!("node {node}: {}", log.lines().filter(|l| l.contains("restored")).collect::<Vec<_>>().join(" | "));
    }
}

/// Whether some shard of a data node's folder holds a published checkpoint.
fn has_checkpoint(node_dir: &std::path::Path) -> bool {
    let Ok(shards) = std::fs::read_dir(node_dir) else { return false };
    shards.flatten().any(|shard| {
        std::fs::read_dir(shard.path())
            .is_ok_and(|files| files.flatten().any(|f| f.file_name().to_string_lossy().ends_with(".ckpt")))
    })
}
