//! Online backup and restore (`latsdb mgm backup start`, `latsdb restore`):
//! a backup taken while writers commit holds exactly the transactions of
//! epochs up to its epoch, every one acknowledged before it began among
//! them, and restores into a cluster of another shape;
//! a backup with a part missing or every copy of a shard damaged is refused.

mod common;

use common::{run_bounded, TestCluster, BIN};
use latsdb_client::{Client, Op, Scan, Table};
use latsdb_types::schema::{ColumnDef, ColumnType, IntWidth, TableSpec};
use latsdb_types::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Rows per transaction: ids `tag * 10 + 0..ROWS`, all carrying `tag`.
const ROWS: i64 = 3;

/// What the writers know of their transactions.
#[derive(Default)]
struct Ledger {
    /// Committed tags and the epoch the coordinator reported.
    committed: BTreeMap<i64, u64>,
    /// Tags whose commit went unanswered: committed or not.
    unknown: BTreeSet<i64>,
}

async fn writer(client: Client, table: Arc<Table>, first: i64, stop: Arc<AtomicBool>, ledger: Arc<Mutex<Ledger>>) {
    let mut tag = first;
    while !stop.load(Ordering::Relaxed) {
        let ops =
            (0..ROWS).map(|k| Op::insert(&table, vec![Value::Int(tag * 10 + k), Value::Int(tag)]).unwrap()).collect();
        let mut tx = client.transaction();
        let result = tokio::time::timeout(Duration::from_secs(10), tx.execute_and_commit(ops)).await;
        let mut ledger = ledger.lock().unwrap();
        match result {
            Ok(Ok(_)) => {
                let epoch = tx.commit_epoch().expect("a committed transaction knows its epoch");
                ledger.committed.insert(tag, epoch.0);
            }
            Ok(Err(_)) if tx.outcome_unknown() => {
                ledger.unknown.insert(tag);
            }
            Ok(Err(_)) => {}
            Err(_) => panic!("a transaction hung for 10 s"),
        }
        tag += 1;
    }
}

fn latsdb(args: &[&str]) -> (bool, String) {
    let (status, out, err) = run_bounded(Command::new(BIN).args(args), None, Duration::from_secs(120));
    (status.success(), format!("{out}{err}"))
}

/// The epoch a finished `backup start` printed (`backup 1: completed; epoch 149; ...`).
fn backup_epoch(output: &str) -> u64 {
    let line = output.lines().find(|l| l.contains(": completed; epoch ")).unwrap_or_else(|| panic!("{output}"));
    line.split("epoch ").nth(1).and_then(|r| r.split(';').next()).and_then(|e| e.trim().parse().ok()).unwrap()
}

async fn committed_before(ledger: &Mutex<Ledger>, count: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while ledger.lock().unwrap().committed.len() < count {
        assert!(tokio::time::Instant::now() < deadline, "the writers committed too little in 60 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_under_writes_restores_exactly_the_commits_up_to_its_epoch() {
    let shape = ["--threads", "1", "--no-rest", "--no-sql"];
    let source = TestCluster::start(&[&["--datanodes", "4", "--replicas", "2"][..], &shape].concat());
    let client = Client::connect(&source.mgmd).await.unwrap();
    let spec = TableSpec::new("r", "ledger")
        .column(ColumnDef::new("id", ColumnType::int(IntWidth::Big)))
        .column(ColumnDef::new("tag", ColumnType::int(IntWidth::Big)))
        .primary_key(&["id"]);
    let table = client.create_table(spec).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let writers: Vec<_> = (0..4)
        .map(|w| tokio::spawn(writer(client.clone(), table.clone(), w * 1_000_000, stop.clone(), ledger.clone())))
        .collect();
    committed_before(&ledger, 300).await;
    let before_backup: BTreeSet<i64> = ledger.lock().unwrap().committed.keys().copied().collect();
    let mgmd = source.mgmd.clone();
    let (ok, output) =
        tokio::task::spawn_blocking(move || latsdb(&["mgm", "--mgmd", &mgmd, "backup", "start"])).await.unwrap();
    assert!(ok, "{output}");
    let epoch = backup_epoch(&output);
    let committed_at_backup = ledger.lock().unwrap().committed.len();
    committed_before(&ledger, committed_at_backup + 300).await;
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    let ledger = Arc::try_unwrap(ledger).ok().unwrap().into_inner().unwrap();
    for tag in &before_backup {
        let e = ledger.committed[tag];
        assert!(e <= epoch, "transaction {tag} was acknowledged before the backup began, in epoch {e} > {epoch}");
    }
    assert!(ledger.committed.values().any(|&e| e > epoch), "nothing committed after the backup's epoch {epoch}");

    let (listed, list) = latsdb(&["mgm", "--mgmd", &source.mgmd, "backup", "list"]);
    assert!(listed && list.contains("backup 1: completed"), "{list}");
    let backup = source.dir.path().join("data/backups/BACKUP-1");
    let target = TestCluster::start(&[&["--datanodes", "3", "--replicas", "1"][..], &shape].concat());
    let (ok, output) = latsdb(&["restore", "--mgmd", &target.mgmd, "--backup", backup.to_str().unwrap()]);
    assert!(ok, "{output}");

    let restored = Client::connect(&target.mgmd).await.unwrap();
    let table = restored.table("r", "ledger").await.unwrap();
    let mut rows_of: BTreeMap<i64, BTreeSet<i64>> = BTreeMap::new();
    for row in restored.scan(&table, Scan::all()).await.unwrap() {
        let (id, tag) = (row.get(0).as_i64().unwrap(), row.get(1).as_i64().unwrap());
        rows_of.entry(tag).or_default().insert(id);
    }
    for (tag, ids) in &rows_of {
        let whole: BTreeSet<i64> = (0..ROWS).map(|k| tag * 10 + k).collect();
        assert_eq!(ids, &whole, "transaction {tag} was restored in part");
        match ledger.committed.get(tag) {
            Some(&e) => assert!(e <= epoch, "transaction {tag} of epoch {e} is in the backup of epoch {epoch}"),
            None => assert!(ledger.unknown.contains(tag), "transaction {tag} was never committed, yet restored"),
        }
    }
    for (tag, &e) in &ledger.committed {
        if e <= epoch {
            assert!(
                rows_of.contains_key(tag),
                "transaction {tag} of epoch {e} is missing from the backup of epoch {epoch}"
            );
        }
    }
    refused_when_incomplete_or_damaged(&backup, &target.mgmd);
}

/// A part missing (only one node group's data node given) and every copy
/// of the shards damaged are refused, before the target is touched.
fn refused_when_incomplete_or_damaged(backup: &Path, target: &str) {
    let one_node = backup.join("datanode-2");
    let (ok, output) = latsdb(&["restore", "--mgmd", target, "--backup", one_node.to_str().unwrap()]);
    assert!(!ok && output.contains("the backup is incomplete"), "{output}");

    let copy = tempfile::tempdir().unwrap();
    for node in std::fs::read_dir(backup).unwrap().flatten() {
        let to = copy.path().join(node.file_name());
        std::fs::create_dir_all(&to).unwrap();
        for file in std::fs::read_dir(node.path()).unwrap().flatten() {
            let mut bytes = std::fs::read(file.path()).unwrap();
            if file.file_name().to_string_lossy().ends_with(".redo") && bytes.len() > 100 {
                bytes[100] ^= 0x40;
            }
            std::fs::write(to.join(file.file_name()), bytes).unwrap();
        }
    }
    let (ok, output) = latsdb(&["restore", "--mgmd", target, "--backup", copy.path().to_str().unwrap()]);
    assert!(!ok && output.contains("the backup is corrupt"), "{output}");
    assert!(
        !output.contains("already exists"),
        "a damaged backup must be refused before the target is touched: {output}"
    );
}

/// What the SQL node keeps beside the rows comes back too: AUTO_INCREMENT
/// counters (renumbered to the new table ids), UNIQUE indexes, tables
/// without a primary key, columns added after rows were written; and
/// `--tables` restores just the tables it names.
#[test]
fn sql_tables_come_back_with_their_counters_unique_indexes_and_added_columns() {
    let source = TestCluster::start(&["--threads", "1", "--no-rest"]);
    let script = "CREATE DATABASE shop; USE shop;
        CREATE TABLE orders (id INT PRIMARY KEY AUTO_INCREMENT, code INT, note VARCHAR(20), gone TEXT, UNIQUE KEY (code));
        INSERT INTO orders (code, note, gone) VALUES (1, 'a', 'x'), (2, 'b', 'y'), (3, 'c', NULL);
        ALTER TABLE orders ADD COLUMN qty INT DEFAULT 7, DROP COLUMN gone;
        INSERT INTO orders (code, note, qty) VALUES (4, 'd', 1);
        CREATE TABLE log (line TEXT);
        INSERT INTO log VALUES ('one'), ('two');
        CREATE TABLE items (id INT PRIMARY KEY, order_id INT,
            CONSTRAINT items_order FOREIGN KEY (order_id) REFERENCES orders (id) ON DELETE CASCADE);
        INSERT INTO items VALUES (1, 1), (2, 2);
        CREATE DATABASE other; CREATE TABLE other.t (k INT PRIMARY KEY);
        INSERT INTO other.t VALUES (1);";
    let (ok, out, err) = common::mariadb(&source, &[], script);
    assert!(ok, "{out}{err}");
    let (ok, output) = latsdb(&["mgm", "--mgmd", &source.mgmd, "backup", "start"]);
    assert!(ok, "{output}");
    let backup = source.dir.path().join("data/backups/BACKUP-1");

    let target = TestCluster::start(&["--threads", "1", "--no-rest", "--datanodes", "1", "--replicas", "1"]);
    let (ok, output) = latsdb(&[
        "restore",
        "--mgmd",
        &target.mgmd,
        "--backup",
        backup.to_str().unwrap(),
        "--tables",
        "shop.orders,shop.log,shop.items",
    ]);
    assert!(ok, "{output}");
    let check = "USE shop;
        SELECT * FROM orders ORDER BY id;
        SELECT line FROM log ORDER BY line;
        INSERT INTO orders (code, note) VALUES (5, 'e');
        SELECT MAX(id) > 4 FROM orders;
        SHOW DATABASES;";
    let (ok, out, err) = common::mariadb(&target, &[], check);
    assert!(ok, "{out}{err}");
    // The dropped column stays dropped.
    assert!(out.contains("id\tcode\tnote\tqty\n1\t1\ta\t7\n2\t2\tb\t7\n3\t3\tc\t7\n4\t4\td\t1\n"), "{out}");
    assert!(out.contains("one\ntwo\n"), "{out}");
    assert!(out.contains("MAX(id) > 4\n1\n"), "the counter came back, so new ids follow the restored ones: {out}");
    assert!(out.contains("shop") && !out.contains("other"), "only the tables named were restored: {out}");
    let (ok, out, err) = common::mariadb(&target, &[], "INSERT INTO shop.orders (code, note) VALUES (2, 'dup');");
    assert!(!ok && err.contains("Duplicate entry"), "the unique index holds after the restore: {out}{err}");
    // The foreign key came back, and acts.
    let (ok, out, err) = common::mariadb(&target, &[], "INSERT INTO shop.items VALUES (3, 99);");
    assert!(!ok && err.contains("ERROR 1452"), "the foreign key holds after the restore: {out}{err}");
    let (ok, out, err) =
        common::mariadb(&target, &[], "DELETE FROM shop.orders WHERE id = 1; SELECT id FROM shop.items;");
    assert!(ok && out == "id\n2\n", "the delete cascaded to the restored child: {out}{err}");
}
