//! Real processes, two replicas: a table whose non-key columns are kept on
//! disk holds several times the data memory of a node. Every row reads
//! back by key and through a filtered scan, again after a system restart
//! (every data node killed and started from its disk), and again from a
//! node that was restarted from an empty disk (initial node restart) and
//! serves alone.

mod common;

use common::{kill_all, mgm, restart, TestCluster};
use latsdb_client::{Client, ClientOptions, Expr, Op, Scan, Table};
use latsdb_types::{ColumnDef, ColumnType, IntWidth, Storage, TableSpec, Value};
use std::sync::Arc;
use std::time::Instant;

const DATA_MEMORY_MB: u64 = 64;
const ROWS: i64 = 200_000;
const PAYLOAD: usize = 2000;
const BATCH: i64 = 500;

/// The payload of row `id`: its id, then bytes that depend on it.
fn payload(id: i64) -> Vec<u8> {
    let mut bytes = id.to_le_bytes().to_vec();
    bytes.extend((0..PAYLOAD - 8).map(|i| (id as usize * 31 + i) as u8));
    bytes
}

fn note(id: i64) -> String {
    format!("note {id}")
}

async fn create(client: &Client) -> Arc<Table> {
    let spec = TableSpec::new("d", "big")
        .column(ColumnDef::new("id", ColumnType::int(IntWidth::Big)))
        .column(ColumnDef::new("k", ColumnType::int(IntWidth::Int)))
        .column(ColumnDef::new("note", ColumnType::VarChar(40)).storage(Storage::Disk))
        .column(ColumnDef::new("payload", ColumnType::VarBinary(PAYLOAD as u32)).storage(Storage::Disk))
        .primary_key(&["id"]);
    client.create_table(spec).await.unwrap()
}

async fn load(client: &Client, table: &Arc<Table>) {
    let started = Instant::now();
    for first in (0..ROWS).step_by(BATCH as usize) {
        let ops = (first..first + BATCH)
            .map(|id| {
                let values =
                    vec![Value::Int(id), Value::Int(id % 100), Value::Str(note(id)), Value::Bytes(payload(id))];
                Op::insert(table, values).unwrap()
            })
            .collect();
        for r in client.batch(ops).await.unwrap() {
            r.unwrap();
        }
    }
    eprintln!("loaded {ROWS} rows of {PAYLOAD} bytes in {} ms", started.elapsed().as_millis());
}

/// The number just before `text` in a report line (summed over lines).
fn number_before(report: &str, text: &str) -> u64 {
    let counts: Vec<u64> = report
        .lines()
        .filter_map(|line| {
            let before = &line[..line.find(text)?];
            before.rsplit(' ').next()?.parse().ok()
        })
        .collect();
    assert!(!counts.is_empty(), "no line says '{text}': {report}");
    counts.iter().sum()
}

/// Reads every row by key and checks it exactly; then a filtered scan.
async fn check_all(client: &Client, table: &Arc<Table>, when: &str) {
    let started = Instant::now();
    for first in (0..ROWS).step_by(BATCH as usize) {
        let ops = (first..first + BATCH).map(|id| Op::read(table, &[Value::Int(id)]).unwrap()).collect();
        for (id, r) in (first..).zip(client.batch(ops).await.unwrap()) {
            let outcome = r.unwrap_or_else(|e| panic!("{when}: reading row {id}: {e}"));
            let row = outcome.into_row().unwrap_or_else(|| panic!("{when}: row {id} is missing"));
            assert_eq!(row.get(1), Value::Int(id % 100), "{when}: k of row {id}");
            assert_eq!(row.get(2), Value::Str(note(id)), "{when}: note of row {id}");
            assert_eq!(row.get(3), Value::Bytes(payload(id)), "{when}: payload of row {id}");
        }
    }
    // A filter on a disk column: notes that end in "77" (1 in 100 ids).
    let filter = Expr::Like(Box::new(table.col("note").unwrap()), "%77".into());
    let found = client.scan(table, Scan::all().filter(filter).columns(&["id", "note"])).await.unwrap();
    let mut ids: Vec<i64> = found.iter().map(|r| r.get(0).as_i64().unwrap()).collect();
    ids.sort_unstable();
    let want: Vec<i64> = (0..ROWS).filter(|id| id % 100 == 77).collect();
    assert_eq!(ids, want, "{when}: the filtered scan");
    eprintln!("{when}: every row read back in {} ms", started.elapsed().as_millis());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_table_four_times_the_data_memory_survives_system_and_initial_node_restarts() {
    let memory = DATA_MEMORY_MB.to_string();
    let cluster = TestCluster::start(&[
        "--no-restart",
        "--replicas",
        "2",
        "--no-rest",
        "--no-sql",
        "--data-memory-mb",
        &memory,
        "--disk-page-cache-mb",
        "16",
    ]);
    let data_dir = cluster.dir.path().join("data");
    let client = Client::connect(&cluster.mgmd).await.unwrap();
    let table = create(&client).await;
    load(&client, &table).await;
    let disk_bytes = ROWS as u64 * PAYLOAD as u64;
    assert!(disk_bytes >= 4 * (DATA_MEMORY_MB << 20), "the table is not 4x the data memory");
    let report = mgm(&cluster, &["report-memory"]).await;
    assert!(report.contains("tablespace") && report.contains("hit rate"), "{report}");
    eprintln!("{report}");
    check_all(&client, &table, "after loading").await;
    // The reads that missed the cache either copied the page from the
    // kernel's page cache at once or waited for it off the shard thread
    // (the O_DIRECT test below checks the waiting).
    let report = mgm(&cluster, &["report-memory"]).await;
    eprintln!("{report}");
    let waits = number_before(&report, " requests waited for pages read off the shard thread");
    let at_once = number_before(&report, " pages read at once from the OS cache");
    assert!(waits + at_once > 0, "no read missed the 16 MiB cache off the shard thread: {report}");

    // Make the load durable, then crash every data node and start them again.
    let durable =
        Client::connect_with(&cluster.mgmd, ClientOptions { wait_durable: true, ..Default::default() }).await.unwrap();
    let table_d = durable.refresh_table("d", "big").await.unwrap();
    let last = vec![
        Value::Int(ROWS - 1),
        Value::Int((ROWS - 1) % 100),
        Value::Str(note(ROWS - 1)),
        Value::Bytes(payload(ROWS - 1)),
    ];
    for r in durable.batch(vec![Op::upsert(&table_d, last).unwrap()]).await.unwrap() {
        r.unwrap();
    }
    let pids = common::datanode_pids(&mgm(&cluster, &["show"]).await);
    assert_eq!(pids.len(), 2);
    kill_all(&pids);
    let deadline = Instant::now() + std::time::Duration::from_secs(10);
    while mgm(&cluster, &["show"]).await.matches("not started").count() < 2 {
        assert!(Instant::now() < deadline, "the management server did not see the data nodes go");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let started = Instant::now();
    let (_nodes, client) = restart(&cluster, &data_dir, &["2", "3"]).await;
    eprintln!("system restart took {} ms", started.elapsed().as_millis());
    let table = client.refresh_table("d", "big").await.unwrap();
    check_all(&client, &table, "after the system restart").await;

    // Node 3 from an empty disk, then it alone serves every row.
    let out = mgm(&cluster, &["3", "restart", "--initial", "--timeout", "300"]).await;
    assert!(out.contains("data node 3: started"), "{out}");
    let out = mgm(&cluster, &["2", "stop"]).await;
    assert!(out.contains("not started"), "{out}");
    check_all(&client, &table, "from node 3 alone after its initial node restart").await;
}

/// An unmodified schema (sysbench's table, as its prepare creates it, plus
/// a wide one) under `default_column_storage = disk`: its unindexed
/// strings go to disk, its numbers stay in memory and can be indexed
/// later; a full tablespace fails writes with MySQL's 1114, naming the
/// setting, and every row written before reads back: with `O_DIRECT`
/// and a page cache half the tablespace, the reads that miss wait for the
/// device off the shard thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_default_puts_unmodified_tables_on_disk_and_a_full_tablespace_says_so() {
    let cluster = TestCluster::start(&[
        "--no-restart",
        "--replicas",
        "2",
        "--no-rest",
        "--threads",
        "1",
        "--default-column-storage",
        "disk",
        "--tablespace-mb",
        "32",
        "--disk-page-cache-mb",
        "16",
        "--disk-direct-io",
        "on",
    ]);
    let schema = "CREATE DATABASE sb; USE sb; \
        CREATE TABLE sbtest1 (id INTEGER NOT NULL AUTO_INCREMENT, k INTEGER DEFAULT '0' NOT NULL, \
        c CHAR(120) DEFAULT '' NOT NULL, pad CHAR(60) DEFAULT '' NOT NULL, PRIMARY KEY (id)); \
        CREATE INDEX k_1 ON sbtest1(k); \
        CREATE TABLE wide (id BIGINT PRIMARY KEY, body VARCHAR(4000)); \
        SHOW CREATE TABLE sbtest1;";
    let (ok, out, err) = common::mariadb(&cluster, &[], schema);
    assert!(ok, "{err}");
    assert!(out.contains("`c` char(120) NOT NULL DEFAULT '' /*!50120 STORAGE DISK */"), "{out}");
    assert!(out.contains("`pad` char(60) NOT NULL DEFAULT '' /*!50120 STORAGE DISK */"), "{out}");
    assert!(!out.contains("`k` int NOT NULL DEFAULT '0' /*!50120"), "k stays in memory: {out}");

    let client = Client::connect(&cluster.mgmd).await.unwrap();
    let wide = client.refresh_table("sb", "wide").await.unwrap();
    let body = |id: i64| format!("{id:08}{}", "b".repeat(3992));
    let mut stored = 0i64;
    let mut full = None;
    'load: for first in (0..100_000i64).step_by(100) {
        let ops = (first..first + 100)
            .map(|id| Op::insert(&wide, vec![Value::Int(id), Value::Str(body(id))]).unwrap())
            .collect();
        for r in client.batch(ops).await.unwrap() {
            match r {
                Ok(_) => stored += 1,
                Err(e) => {
                    full = Some(e);
                    break 'load;
                }
            }
        }
    }
    let e = full.expect("32 MiB of tablespace never filled up");
    assert_eq!(e.code, latsdb_types::ErrorCode::TableFull, "{e}");
    assert!(e.message.contains("tablespace_mb"), "the error names the setting: {}", e.message);
    assert!(stored > 4_000, "only {stored} rows of 4 KB fit 32 MiB");
    let (ok, _, err) = common::mariadb(&cluster, &["sb"], "INSERT INTO wide VALUES (-1, REPEAT('x', 4000));");
    assert!(!ok && err.contains("ERROR 1114"), "{err}");
    // The node keeps serving: every row stored reads back.
    let ops = (0..stored).map(|id| Op::read(&wide, &[Value::Int(id)]).unwrap()).collect();
    for (id, r) in (0..).zip(client.batch(ops).await.unwrap()) {
        let row = r.unwrap().into_row().unwrap_or_else(|| panic!("row {id} is missing"));
        assert_eq!(row.get(1), Value::Str(body(id)));
    }
    let report = mgm(&cluster, &["report-memory"]).await;
    let waits = number_before(&report, " requests waited for pages read off the shard thread");
    assert!(waits > 0, "no read waited for the device: {report}");
    // Deleting rows gives their space back to new ones.
    let ops = (0..100).map(|id| Op::delete(&wide, &[Value::Int(id)]).unwrap()).collect();
    for r in client.batch(ops).await.unwrap() {
        r.unwrap();
    }
    let ops = (0..50).map(|id| Op::insert(&wide, vec![Value::Int(-id - 10), Value::Str(body(id))]).unwrap()).collect();
    for r in client.batch(ops).await.unwrap() {
        r.unwrap();
    }
}

/// ALTER TABLE moves a column between memory and disk by copying the
/// table (issue 37's offline copy), and adds columns to a table with disk
/// columns the same way; every value survives each move, and an indexed
/// column is refused on disk with a message naming the table.
#[test]
fn alter_table_moves_columns_between_memory_and_disk_by_copying() {
    let cluster = TestCluster::start(&["--no-rest"]);
    let values: Vec<String> = (0..3_000).map(|i| format!("({i}, REPEAT('v', {}), {i})", 50 + i % 200)).collect();
    let load = format!(
        "CREATE DATABASE mv; USE mv; CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(300), b INT, KEY kb (b)); INSERT INTO t VALUES {};",
        values.join(", ")
    );
    let (ok, _, err) = common::mariadb(&cluster, &[], &load);
    assert!(ok, "{err}");
    let sums = "SELECT COUNT(*), SUM(LENGTH(a)), SUM(b) FROM mv.t;";
    let (_, before, _) = common::mariadb(&cluster, &["--skip-column-names"], sums);
    let steps = [
        (
            "ALTER TABLE mv.t MODIFY a VARCHAR(300) STORAGE DISK",
            "`a` varchar(300) DEFAULT NULL /*!50120 STORAGE DISK */",
        ),
        ("ALTER TABLE mv.t ADD COLUMN c INT NOT NULL DEFAULT 7", "`c` int NOT NULL DEFAULT '7'"),
        ("ALTER TABLE mv.t MODIFY a VARCHAR(300) STORAGE MEMORY", "`a` varchar(300) DEFAULT NULL,"),
    ];
    for (alter, shown) in steps {
        let (ok, out, err) = common::mariadb(&cluster, &[], &format!("{alter}; SHOW CREATE TABLE mv.t;"));
        assert!(ok, "{alter}: {err}");
        assert!(out.contains(shown), "{alter}:\n{out}");
        let (_, after, _) = common::mariadb(&cluster, &["--skip-column-names"], sums);
        assert_eq!(after, before, "{alter} changed the rows");
    }
    let (ok, _, err) = common::mariadb(&cluster, &[], "ALTER TABLE mv.t MODIFY b INT STORAGE DISK");
    assert!(!ok && err.contains("mv.t") && err.contains("indexed"), "{err}");
    let (_, count, _) = common::mariadb(&cluster, &["--skip-column-names"], "SELECT SUM(c) FROM mv.t");
    assert_eq!(count, "21000\n", "the added column's value in every row");
}
