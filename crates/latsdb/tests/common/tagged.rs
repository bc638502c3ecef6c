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
