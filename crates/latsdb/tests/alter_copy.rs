//! A copying ALTER TABLE under writers: native clients keep updating rows
//! while the SQL node copies the table into a new definition; every write
//! either commits before the copy (and is in it), is refused while the
//! table is fenced (`TableAltering`, no effect), or commits to the new
//! table. No committed write is lost. Then a copy whose client goes away
//! is given up: the table takes writes again and the copy is gone.

mod common;

use common::{mariadb, TestCluster};
use latsdb_client::{Client, Op, Value};
use latsdb_types::ErrorCode;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ROWS: i64 = 30_000;
const WRITERS: i64 = 4;

/// Updates rows of its own (ids congruent to `me` modulo WRITERS) until
/// told to stop; returns each row's last committed value.
async fn writer(client: Client, me: i64, stop: Arc<AtomicBool>, fenced: Arc<AtomicU64>) -> HashMap<i64, i64> {
    let mut committed = HashMap::new();
    let mut table = client.table("ac", "counters").await.expect("the table");
    let mut id = me;
    let deadline = Instant::now() + Duration::from_secs(120);
    while !stop.load(Ordering::Relaxed) {
        assert!(Instant::now() < deadline, "writer {me} ran past its deadline");
        id = (id + WRITERS * 7919) % ROWS;
        let next = committed.get(&id).copied().unwrap_or(0) + 1;
        let op = Op::update(&table, &[Value::Int(id)], &[("n", Value::Int(next))]).expect("an update");
        match client.transaction().execute_commit(vec![op]).await {
            Ok(_) => {
                committed.insert(id, next);
            }
            Err(e) if e.code == ErrorCode::TableAltering => {
                fenced.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            // The table was replaced by its copy (or is between names).
            Err(e) if matches!(e.code, ErrorCode::UnknownTable | ErrorCode::SchemaVersionMismatch) => {
                tokio::time::sleep(Duration::from_millis(5)).await;
                if let Ok(t) = client.refresh_table("ac", "counters").await {
                    table = t;
                }
            }
            Err(e) => panic!("writer {me}: an update of row {id} failed: {e}"),
        }
    }
    committed
}

#[test]
fn writes_during_a_copying_alter_table_are_refused_or_kept() {
    let cluster = TestCluster::start(&[]);
    let (ok, _, err) = mariadb(
        &cluster,
        &[],
        "CREATE DATABASE ac; CREATE TABLE ac.counters (id INT PRIMARY KEY, n INT NOT NULL, pad VARCHAR(40))",
    );
    assert!(ok, "{err}");
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        let client = Client::connect_with(&cluster.mgmd, cluster.client_options()).await.expect("connect");
        let table = client.table("ac", "counters").await.expect("the table");
        for chunk in (0..ROWS).collect::<Vec<_>>().chunks(1_000) {
            let ops = chunk
                .iter()
                .map(|&id| Op::insert(&table, vec![Value::Int(id), Value::Int(0), Value::Str(format!("row {id}"))]))
                .collect::<Result<Vec<_>, _>>()
                .expect("inserts");
            client.transaction().execute_commit(ops).await.expect("load");
        }
        let stop = Arc::new(AtomicBool::new(false));
        let fenced = Arc::new(AtomicU64::new(0));
        let writers: Vec<_> =
            (0..WRITERS).map(|me| tokio::spawn(writer(client.clone(), me, stop.clone(), fenced.clone()))).collect();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let started = Instant::now();
        let alter = "ALTER TABLE ac.counters MODIFY n BIGINT NOT NULL, MODIFY pad VARCHAR(60) FIRST";
        let (ok, out, err) = tokio::task::block_in_place(|| mariadb(&cluster, &[], alter));
        assert!(ok, "the ALTER TABLE failed: {out}{err}");
        eprintln!("the copy of {ROWS} rows took {:?}", started.elapsed());
        tokio::time::sleep(Duration::from_millis(500)).await;
        stop.store(true, Ordering::Relaxed);
        let mut committed = HashMap::new();
        for w in writers {
            committed.extend(w.await.expect("a writer"));
        }

        let table = client.refresh_table("ac", "counters").await.expect("the new table");
        assert_eq!(table.def().columns[0].name, "pad", "the copy's definition took the table's name");
        let rows = client.scan(&table, latsdb_client::Scan::all()).await.expect("scan");
        assert_eq!(rows.len() as i64, ROWS, "every row was copied");
        let n = table.def().column_id("n").expect("n") as usize;
        let id = table.def().column_id("id").expect("id") as usize;
        let mut lost = Vec::new();
        for row in &rows {
            let Value::Int(key) = row.get(id) else { panic!("id of {row:?}") };
            let expected = committed.get(&key).copied().unwrap_or(0);
            if row.get(n) != Value::Int(expected) {
                lost.push((key, expected, row.get(n)));
            }
        }
        assert!(lost.is_empty(), "committed writes lost by the copy (id, committed, found): {lost:?}");
        assert!(fenced.load(Ordering::Relaxed) > 0, "no write met the fence: the copy was not under load");
        eprintln!(
            "{} rows written by {WRITERS} writers, {} writes refused while fenced",
            committed.len(),
            fenced.load(Ordering::Relaxed)
        );
    });
}

#[test]
fn a_copy_whose_client_leaves_is_given_up() {
    let cluster = TestCluster::start(&[]);
    let (ok, _, err) = mariadb(
        &cluster,
        &[],
        "CREATE DATABASE ag; CREATE TABLE ag.t (id INT PRIMARY KEY, v INT); INSERT INTO ag.t VALUES (1, 1)",
    );
    assert!(ok, "{err}");
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        let owner = Client::connect_with(&cluster.mgmd, cluster.client_options()).await.expect("connect");
        let table = owner.table("ag", "t").await.expect("the table");
        let spec = latsdb_types::TableSpec { name: "ignored".into(), ..table_spec(table.def()) };
        let (old, copy) = owner.copy_table_begin(&table, spec, Vec::new()).await.expect("a copy begins");
        assert_eq!(old.def().id, table.def().id);
        let other = Client::connect_with(&cluster.mgmd, cluster.client_options()).await.expect("connect");
        let t = other.table("ag", "t").await.expect("the table");
        let write = |v: i64| Op::update(&t, &[Value::Int(1)], &[("v", Value::Int(v))]).expect("an update");
        let refused = other.transaction().execute_commit(vec![write(2)]).await.expect_err("the table is fenced");
        assert_eq!(refused.code, ErrorCode::TableAltering, "{refused}");
        let again = owner.copy_table_begin(&table, table_spec(table.def()), Vec::new()).await.expect_err("one copy");
        assert!(again.message.contains("already copies"), "{again}");
        drop(owner);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match other.transaction().execute_commit(vec![write(3)]).await {
                Ok(_) => break,
                Err(e) if e.code == ErrorCode::TableAltering && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                Err(e) => panic!("the table did not take writes again after its copy's client left: {e}"),
            }
        }
        // The copy is dropped right after the fence is lifted.
        while other.refresh_table("ag", &copy.def().name).await.is_ok() {
            assert!(Instant::now() < deadline, "the abandoned copy {} was not dropped", copy.def().name);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let (ok, out, err) = mariadb(&cluster, &["--skip-column-names"], "SELECT v FROM ag.t; SHOW TABLES FROM ag");
    assert!(ok, "{err}");
    assert_eq!(out, "3\nt\n", "the write after the copy was given up stands, and no copy is listed");
}

fn table_spec(def: &latsdb_types::TableDef) -> latsdb_types::TableSpec {
    latsdb_types::TableSpec {
        database: def.database.clone(),
        name: def.name.clone(),
        columns: def.columns.clone(),
        primary_key: def.primary_key.iter().map(|&c| def.columns[c as usize].name.clone()).collect(),
        partitions: def.partitions,
    }
}
