//! What a REST node shares between its connections: resolved tables (with
//! their projections), API keys, feature views and metrics. Each worker
//! thread has its own cluster client (its own connections to the data
//! nodes); everything else is shared by all workers, so a change made
//! through one worker (a dropped view, a stale table) is seen by all.

use crate::auth::ApiKeys;
use crate::metrics::Metrics;
use crate::pk::{build_projection, ReadColumn};
use crate::rondb::ErrorClass;
use crate::{HttpError, RestConfig};
use latsdb_client::{Client, Projection, Table};
use latsdb_types::schema::ColumnType;
use latsdb_types::ErrorCode;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// How long a "no such table" answer is remembered, so that requests for a
/// missing table do not each ask the management server.
const MISSING_TABLE_TTL: Duration = Duration::from_secs(1);
/// Projections remembered per table (distinct `readColumns` lists).
const PROJECTIONS_PER_TABLE: usize = 64;

/// A table as the REST node uses it.
pub struct ResolvedTable {
    pub table: Arc<Table>,
    /// The primary-key column names, for error messages.
    pub key_names: String,
    /// A primary-key column is FLOAT or DOUBLE: RonDB refuses key
    /// operations on such a table, and so does this node (a float read
    /// back from JSON need not be the stored one, so a key could never be
    /// trusted to name its row).
    pub float_key: bool,
    /// What a read without `readColumns` returns when the table has dropped
    /// columns: every other column (None: the whole row).
    pub shown: Option<Projection>,
    projections: Mutex<Vec<(Vec<String>, Projection)>>,
}

impl ResolvedTable {
    pub fn new(table: Arc<Table>) -> ResolvedTable {
        let def = table.def();
        let key_names =
            def.primary_key.iter().map(|&c| def.columns[c as usize].name.as_str()).collect::<Vec<_>>().join(", ");
        let float_key = def
            .primary_key
            .iter()
            .any(|&c| matches!(def.columns[c as usize].ty, ColumnType::Float | ColumnType::Double));
        let shown = def.has_dropped_columns().then(|| {
            let names: Vec<&str> = def.columns.iter().filter(|c| !c.is_dropped()).map(|c| c.name.as_str()).collect();
            Projection::new(&table, &names).expect("the names of a table's own columns resolve")
        });
        ResolvedTable { table, key_names, float_key, shown, projections: Mutex::new(Vec::new()) }
    }
}

enum CachedTable {
    Found(Arc<ResolvedTable>),
    Missing(Instant, String),
}

type TableCache = RwLock<HashMap<String, HashMap<String, CachedTable>>>;

pub struct Rest {
    /// This worker's cluster client.
    pub client: Client,
    pub config: RestConfig,
    pub keys: Arc<ApiKeys>,
    pub metrics: Arc<Metrics>,
    pub views: Arc<crate::features::ViewCache>,
    tables: Arc<TableCache>,
}

impl Rest {
    pub fn new(client: Client, config: RestConfig) -> Rest {
        Rest {
            keys: Arc::new(ApiKeys::new(client.clone(), config.auth)),
            client,
            config,
            metrics: Arc::default(),
            views: Arc::default(),
            tables: Arc::default(),
        }
    }

    /// Another worker's view of the same node: its own client, the same
    /// caches, keys and metrics.
    pub fn with_client(&self, client: Client) -> Rest {
        Rest {
            client,
            config: self.config.clone(),
            keys: self.keys.clone(),
            metrics: self.metrics.clone(),
            views: self.views.clone(),
            tables: self.tables.clone(),
        }
    }

    /// The table `database.name`, from the cache or the management server.
    /// A name no table can have is a bad request (400) before any lookup,
    /// as RonDB validates identifiers first.
    pub async fn table(&self, database: &str, name: &str) -> Result<Arc<ResolvedTable>, HttpError> {
        latsdb_types::schema::validate_name("database", database).map_err(HttpError::from_db)?;
        latsdb_types::schema::validate_name("table", name).map_err(HttpError::from_db)?;
        {
            let tables = self.tables.read().unwrap_or_else(|p| p.into_inner());
            match tables.get(database).and_then(|t| t.get(name)) {
                Some(CachedTable::Found(t)) => return Ok(t.clone()),
                Some(CachedTable::Missing(at, message)) if at.elapsed() < MISSING_TABLE_TTL => {
                    return Err(missing_table(message));
                }
                _ => {}
            }
        }
        self.load_table(database, name).await
    }

    /// Drops a cached definition (the data nodes said it is stale or gone).
    pub fn forget_table(&self, database: &str, name: &str) {
        let mut tables = self.tables.write().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = tables.get_mut(database) {
            slot.remove(name);
        }
    }

    async fn load_table(&self, database: &str, name: &str) -> Result<Arc<ResolvedTable>, HttpError> {
        let entry = match self.client.refresh_table(database, name).await {
            // The hidden tables of unique indexes are written only with
            // their tables.
            Ok(table) if table.def().is_hidden() => Err(format!("table '{database}.{name}' does not exist")),
            Ok(table) => Ok(Arc::new(ResolvedTable::new(table))),
            Err(e) if e.code == ErrorCode::UnknownTable => Err(format!("table '{database}.{name}' does not exist")),
            Err(e) => return Err(HttpError::from_db(e)),
        };
        let mut tables = self.tables.write().unwrap_or_else(|p| p.into_inner());
        let slot = tables.entry(database.to_string()).or_default();
        match entry {
            Ok(table) => {
                slot.insert(name.to_string(), CachedTable::Found(table.clone()));
                Ok(table)
            }
            Err(message) => {
                slot.insert(name.to_string(), CachedTable::Missing(Instant::now(), message.clone()));
                Err(missing_table(&message))
            }
        }
    }

    /// The projection for a `readColumns` list, built once per table and list.
    pub fn projection(&self, table: &ResolvedTable, columns: &[ReadColumn]) -> Result<Projection, HttpError> {
        let mut cache = table.projections.lock().unwrap_or_else(|p| p.into_inner());
        let same = |names: &Vec<String>| {
            names.len() == columns.len() && names.iter().zip(columns).all(|(a, b)| a.as_str() == b.column.as_ref())
        };
        if let Some((_, p)) = cache.iter().find(|(names, _)| same(names)) {
            return Ok(p.clone());
        }
        let projection = build_projection(table, columns)?;
        if cache.len() >= PROJECTIONS_PER_TABLE {
            cache.remove(0);
        }
        cache.push((columns.iter().map(|c| c.column.to_string()).collect(), projection.clone()));
        Ok(projection)
    }
}

/// The answer for a table that does not exist (or is hidden), as RonDB words it.
fn missing_table(message: &str) -> HttpError {
    HttpError::rondb(404, ErrorClass::TableNotExist, message)
}
