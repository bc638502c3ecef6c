//! A transactional write load whose every transaction tags its rows, so a
//! check afterwards can tell a whole transaction from a half-present one.

use latsdb_client::{Client, Op, Table};
use latsdb_types::schema::{ColumnDef, ColumnType, IntWidth, TableSpec};
use latsdb_types::{DbError, Value};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Rows each transaction writes: ids `tag * 10 + 0..ROWS_PER_TX`, all
/// carrying `tag`.
pub const ROWS_PER_TX: i64 = 3;

/// Creates `r.tagged (id BIGINT PRIMARY KEY, tag BIGINT)`.
pub async fn create_table(client: &Client) -> Arc<Table> {
    client
        .create_table(
            TableSpec::new("r", "tagged")
                .column(ColumnDef::new("id", ColumnType::int(IntWidth::Big)))
                .column(ColumnDef::new("tag", ColumnType::int(IntWidth::Big)))
                .primary_key(&["id"]),
        )
        .await
        .unwrap()
}

/// Writes transactions of ROWS_PER_TX rows tagged `tag` (from `first_tag`
/// up) until stopped; records the tags whose commit was acknowledged.
/// Failures while nodes fail or restart leave the outcome unknown: those
/// tags are not recorded, and the errors are kept in `errors`.
pub async fn writer(
    client: Client,
    table: Arc<Table>,
    first_tag: i64,
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<BTreeSet<i64>>>,
    errors: Arc<Mutex<Vec<DbError>>>,
) {
    let mut tag = first_tag;
    while !stop.load(Ordering::Relaxed) {
        let ops = (0..ROWS_PER_TX)
            .map(|k| Op::upsert(&table, vec![Value::Int(tag * 10 + k), Value::Int(tag)]).unwrap())
            .collect();
        match tokio::time::timeout(Duration::from_secs(10), client.transaction().execute_commit(ops)).await {
            Ok(Ok(_)) => {
                acked.lock().unwrap().insert(tag);
            }
            Ok(Err(e)) => {
                errors.lock().unwrap().push(e);
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(_) => panic!("a transaction hung for 10 s"),
        }
        tag += 1;
    }
}

/// `n` writers on one client (tags from 0, 1,000,000, 2,000,000, ...),
/// running until `stop`.
pub struct Writers {
    stop: Arc<AtomicBool>,
    /// Tags whose commit was acknowledged so far.
    pub acked: Arc<Mutex<BTreeSet<i64>>>,
    /// The errors the writers' transactions failed with.
    pub errors: Arc<Mutex<Vec<DbError>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Writers {
    pub fn start(client: &Client, table: &Arc<Table>, n: i64) -> Writers {
        let stop = Arc::new(AtomicBool::new(false));
        let acked: Arc<Mutex<BTreeSet<i64>>> = Arc::default();
        let errors: Arc<Mutex<Vec<DbError>>> = Arc::default();
        let tasks = (0..n)
            .map(|w| {
                let (stop, acked, errors) = (stop.clone(), acked.clone(), errors.clone());
                tokio::spawn(writer(client.clone(), table.clone(), w * 1_000_000, stop, acked, errors))
            })
            .collect();
        Writers { stop, acked, errors, tasks }
    }

    /// Transactions acknowledged so far.
    pub fn acked_count(&self) -> usize {
        self.acked.lock().unwrap().len()
    }

    /// Stops the writers and returns every acknowledged tag.
    pub async fn stop(self) -> BTreeSet<i64> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.await.unwrap();
        }
        let acked = self.acked.lock().unwrap().clone();
        acked
    }
}

/// Rows the load never touches (negative ids, tag -1), `count` thousand of
/// them: a node restart or a move has something to copy besides the load.
pub async fn load_base_rows(client: &Client, table: &Arc<Table>, thousands: i64) {
    for chunk in 0..thousands {
        let ops = (0..1000)
            .map(|i| Op::upsert(table, vec![Value::Int(-(chunk * 1000 + i) - 1), Value::Int(-1)]).unwrap())
            .collect();
        for r in client.batch(ops).await.unwrap() {
            r.unwrap();
        }
    }
}

/// Every row, by id -> tag.
pub async fn all_rows(client: &Client, table: &Arc<Table>) -> std::collections::BTreeMap<i64, i64> {
    let rows = client.scan(table, latsdb_client::Scan::all()).await.unwrap();
    rows.iter().map(|r| (r.get(0).as_i64().unwrap(), r.get(1).as_i64().unwrap())).collect()
}

/// Checks the rows against the writers' ledger: every row of a transaction
/// carries its tag, `base` rows of the base load are all there, no
/// transaction is half-present, and every acknowledged one is there.
pub fn check_ledger(rows: &std::collections::BTreeMap<i64, i64>, acked: &BTreeSet<i64>, base: usize) {
    let mut by_tag: std::collections::BTreeMap<i64, i64> = std::collections::BTreeMap::new();
    for (id, tag) in rows {
        if *tag >= 0 {
            assert_eq!(id / 10, *tag, "row {id} carries tag {tag}");
            *by_tag.entry(*tag).or_default() += 1;
        }
    }
    assert_eq!(rows.len() - by_tag.values().sum::<i64>() as usize, base, "base rows lost");
    for (tag, n) in &by_tag {
        assert_eq!(*n, ROWS_PER_TX, "transaction {tag} is half-present ({n} rows)");
    }
    let lost: Vec<&i64> = acked.iter().filter(|t| !by_tag.contains_key(t)).collect();
    assert!(lost.is_empty(), "acknowledged transactions are lost: {lost:?}");
}
