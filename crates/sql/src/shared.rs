//! What every session of a SQL node shares: its cluster client, the
//! accounts, the connection list, and the auto-increment counters (kept in
//! a system table of the cluster, reserved here a batch at a time).

use crate::dml::AutoIncrement;
use crate::error::{SqlError, SqlResult};
use crate::eval::to_text;
use crate::session::{DATABASES_TABLE, SYSTEM_DATABASE};
use latsdb_client::{Client, Op, Outcome, Table};
use latsdb_types::proto::LockMode;
use latsdb_types::schema::{ColumnDef, ColumnId, ColumnType, IntWidth, TableSpec};
use latsdb_types::{ErrorCode, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

const AUTOINC_TABLE: &str = "sql_auto_increment";
/// Auto-increment values reserved per round trip to the cluster.
const AUTOINC_BATCH: u64 = 1000;

/// What the sessions of a SQL node share. Each worker thread has its own
/// `Shared` with its own cluster client (`with_client`); the rest is common
/// to all workers of the node.
pub struct Shared {
    pub client: Client,
    pub accounts: Vec<crate::auth::Account>,
    next_connection: Arc<AtomicU32>,
    /// The node's connections (SHOW PROCESSLIST, KILL).
    pub processes: Arc<crate::process::ProcessList>,
    /// Per table id: the auto-increment column (None: the table has none).
    auto_columns: Arc<Mutex<HashMap<u32, Option<ColumnId>>>>,
    /// Per table id: reserved values [next, end) and the counter last seen.
    auto_ranges: Arc<tokio::sync::Mutex<HashMap<u32, AutoRange>>>,
    /// When the node started (SHOW STATUS's Uptime).
    pub started: std::time::Instant,
    /// The node's counters for GET /metrics, shared by its workers.
    pub metrics: Arc<crate::metrics::SqlMetrics>,
}

#[derive(Clone, Copy, Default)]
struct AutoRange {
    next: u64,
    end: u64,
    /// The cluster counter is at least this (explicit values below it need
    /// no update).
    counter_floor: u64,
}

impl Shared {
    pub fn new(
        client: Client,
        accounts: Vec<crate::auth::Account>,
        metrics: Arc<crate::metrics::SqlMetrics>,
    ) -> Arc<Shared> {
        Arc::new(Shared {
            client,
            accounts,
            next_connection: Arc::new(AtomicU32::new(1)),
            processes: Arc::default(),
            auto_columns: Arc::default(),
            auto_ranges: Arc::default(),
            started: std::time::Instant::now(),
            metrics,
        })
    }

    /// Another worker's view of the same node: its own client (a sibling
    /// of this one, sharing table definitions), the same connection ids
    /// and AUTO_INCREMENT reservations.
    pub fn with_client(&self, client: Client) -> Arc<Shared> {
        Arc::new(Shared {
            client,
            accounts: self.accounts.clone(),
            next_connection: self.next_connection.clone(),
            processes: self.processes.clone(),
            auto_columns: self.auto_columns.clone(),
            auto_ranges: self.auto_ranges.clone(),
            started: self.started,
            metrics: self.metrics.clone(),
        })
    }

    /// The auto-increment column of a table if it is known already.
    pub fn cached_auto_column(&self, table_id: u32) -> Option<ColumnId> {
        self.auto_columns.lock().unwrap_or_else(|p| p.into_inner()).get(&table_id).copied().flatten()
    }

    pub fn connection_id(&self) -> u32 {
        self.next_connection.fetch_add(1, Ordering::Relaxed)
    }

    /// A table by name; an unknown one is MySQL's error 1146.
    pub async fn table(&self, db: &str, name: &str) -> SqlResult<Arc<Table>> {
        // Hidden tables (of unique indexes, an ALTER TABLE's copy) are
        // written only with their tables.
        if latsdb_types::schema::is_hidden_name(name) {
            return Err(SqlError::no_such_table(db, name));
        }
        self.client.table(db, name).await.map_err(|e| match e.code {
            ErrorCode::UnknownTable => SqlError::no_such_table(db, name),
            _ => e.into(),
        })
    }

    async fn system_table(&self, name: &str) -> SqlResult<Arc<Table>> {
        Ok(self.client.table(SYSTEM_DATABASE, name).await?)
    }

    /// Creates the SQL node's metadata tables if they are missing.
    pub async fn ensure_system_tables(&self) -> SqlResult<()> {
        let specs = [
            TableSpec::new(SYSTEM_DATABASE, DATABASES_TABLE)
                .column(ColumnDef::new("name", ColumnType::VarChar(64)).not_null())
                // The default collation of its tables' text (NULL: the server's).
                .column(ColumnDef::new("collation", ColumnType::VarChar(64)))
                .primary_key(&["name"]),
            TableSpec::new(SYSTEM_DATABASE, AUTOINC_TABLE)
                .column(ColumnDef::new("table_id", ColumnType::uint(IntWidth::Int)).not_null())
                .column(ColumnDef::new("column_name", ColumnType::VarChar(64)).not_null())
                .column(ColumnDef::new("next_value", ColumnType::uint(IntWidth::Big)).not_null())
                .primary_key(&["table_id"]),
        ];
        for spec in specs {
            let name = spec.name.clone();
            match self.client.create_table(spec).await {
                Ok(_) => {}
                Err(e) if e.code == ErrorCode::TableExists => {}
                Err(e) => return Err(e.into()),
            }
            self.system_table(&name).await?;
        }
        Ok(())
    }

    pub async fn register_auto_column(&self, table: &Arc<Table>, column: ColumnId, start: u64) -> SqlResult<()> {
        let t = self.system_table(AUTOINC_TABLE).await?;
        let name = table.def().columns[column as usize].name.clone();
        let op = Op::upsert(&t, vec![Value::UInt(table.def().id as u64), Value::Str(name), Value::UInt(start.max(1))])?;
        self.client.transaction().execute_commit(vec![op]).await?;
        self.auto_columns.lock().unwrap_or_else(|p| p.into_inner()).insert(table.def().id, Some(column));
        Ok(())
    }

    /// Records the auto-increment column's new name (the counter finds its
    /// column by name when a SQL node first uses it).
    pub async fn rename_auto_column(&self, table_id: u32, name: &str) -> SqlResult<()> {
        let t = self.system_table(AUTOINC_TABLE).await?;
        let op = Op::update(&t, &[Value::UInt(table_id as u64)], &[("column_name", Value::Str(name.to_string()))])?;
        self.client.transaction().execute_commit(vec![op]).await?;
        Ok(())
    }

    /// The next value of the range this node reserved for the table's
    /// auto-increment column, if it holds one.
    pub async fn next_reserved(&self, table_id: u32) -> Option<u64> {
        self.auto_ranges.lock().await.get(&table_id).filter(|r| r.next < r.end).map(|r| r.next)
    }

    pub async fn forget_auto_column(&self, table_id: u32) -> SqlResult<()> {
        let t = self.system_table(AUTOINC_TABLE).await?;
        self.client.transaction().execute_commit(vec![Op::delete(&t, &[Value::UInt(table_id as u64)])?]).await?;
        self.auto_columns.lock().unwrap_or_else(|p| p.into_inner()).remove(&table_id);
        self.auto_ranges.lock().await.remove(&table_id);
        Ok(())
    }

    pub async fn auto_counter(&self, table_id: u32) -> SqlResult<Option<(String, u64)>> {
        let t = self.system_table(AUTOINC_TABLE).await?;
        let row = self.client.get(&t, &[Value::UInt(table_id as u64)]).await?;
        Ok(row.map(|r| (to_text(&r.get(1)), r.get(2).as_u64().unwrap_or(1))))
    }

    /// Moves the cluster counter to at least `at_least`; returns the value
    /// it had. `reserve` more values are taken for the caller.
    async fn bump_counter(&self, table_id: u32, at_least: u64, reserve: u64) -> SqlResult<u64> {
        let t = self.system_table(AUTOINC_TABLE).await?;
        let key = [Value::UInt(table_id as u64)];
        let mut tx = self.client.transaction();
        let found = tx.execute(vec![Op::read_locked(&t, &key, LockMode::Exclusive)?]).await?;
        let Some(Outcome::Row(row)) = found.into_iter().next() else {
            let _ = tx.rollback().await;
            return Err(SqlError::general(format!("the auto-increment counter of table id {table_id} is missing")));
        };
        let current = row.get(2).as_u64().unwrap_or(1).max(at_least);
        let next = current.checked_add(reserve).ok_or_else(|| {
            SqlError::new(
                1467,
                "HY000",
                "Failed to read auto-increment value from storage engine (the counter is exhausted)",
            )
        })?;
        let update = Op::update(&t, &key, &[("next_value", Value::UInt(next))])?;
        tx.execute_commit(vec![update]).await?;
        Ok(current)
    }
}

impl AutoIncrement for Shared {
    async fn auto_column(&self, table: &Arc<Table>) -> SqlResult<Option<ColumnId>> {
        // Known from the definition: no race with the CREATE registering it.
        if let Some(c) = table.def().hidden_key() {
            return Ok(Some(c));
        }
        let id = table.def().id;
        if let Some(c) = self.auto_columns.lock().unwrap_or_else(|p| p.into_inner()).get(&id) {
            return Ok(*c);
        }
        let column = match self.auto_counter(id).await? {
            Some((name, _)) => table.def().column_id(&name).ok(),
            None => None,
        };
        self.auto_columns.lock().unwrap_or_else(|p| p.into_inner()).insert(id, column);
        Ok(column)
    }

    async fn next_values(&self, table: &Arc<Table>, n: u64) -> SqlResult<u64> {
        let id = table.def().id;
        let mut ranges = self.auto_ranges.lock().await;
        let r = ranges.entry(id).or_default();
        if r.end.saturating_sub(r.next) < n {
            let reserve = n.max(AUTOINC_BATCH);
            let start = self.bump_counter(id, 1, reserve).await?;
            *r = AutoRange { next: start, end: start + reserve, counter_floor: start + reserve };
        }
        let first = r.next;
        r.next += n;
        Ok(first)
    }

    async fn saw_value(&self, table: &Arc<Table>, v: u64) -> SqlResult<()> {
        let id = table.def().id;
        let mut ranges = self.auto_ranges.lock().await;
        let r = ranges.entry(id).or_default();
        if v < r.counter_floor {
            // Our own reserved range may contain it: skip past it.
            if v >= r.next && v < r.end {
                r.next = v + 1;
            }
            return Ok(());
        }
        let before = self.bump_counter(id, v.saturating_add(1), 0).await?;
        r.counter_floor = before.max(v.saturating_add(1));
        Ok(())
    }
}
