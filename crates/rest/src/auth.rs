//! API keys (`X-API-KEY`) with per-database grants, stored in the cluster
//! itself in `latsdb_system.api_keys`, so every REST node sees the same keys.
//!
//! A key reads `<id>.<secret>`: a 16-character id, looked up by primary
//! key, and a secret of which only the SHA-256 is stored. The REST node
//! caches what it looked up for a few seconds, so a revoked key stops
//! working within `KEY_CACHE_TTL` on every node.

use crate::HttpError;
use latsdb_client::{Client, Op, Scan, Table};
use latsdb_types::{ColumnDef, ColumnType, DbError, ErrorCode, Result, TableSpec, Value};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::Read;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The database holding latsdb's own metadata tables.
pub const SYSTEM_DATABASE: &str = "latsdb_system";
pub const API_KEYS_TABLE: &str = "api_keys";
const ID_LEN: usize = 16;
const SECRET_LEN: usize = 40;
const KEY_CACHE_TTL: Duration = Duration::from_secs(5);
const KEY_CACHE_MAX: usize = 10_000;
const ALPHABET: &[u8; 62] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AuthMode {
    /// Every request is allowed (a loopback development cluster).
    None,
    /// Every request except health, ping and openapi needs a valid key with a
    /// grant on each database it touches.
    ApiKey,
}

/// What a key may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub id: String,
    pub name: String,
    /// None: every database.
    pub databases: Option<Vec<String>>,
}

impl Grant {
    pub fn allows(&self, database: &str) -> bool {
        match &self.databases {
            None => true,
            Some(list) => list.iter().any(|d| d.eq_ignore_ascii_case(database)),
        }
    }

    pub fn check(&self, database: &str) -> Result<(), HttpError> {
        if self.allows(database) {
            Ok(())
        } else {
            // RonDB's words first: its clients look for them.
            Err(HttpError::new(
                401,
                format!("API key not authorized to access {database} (key '{}' has no grant on it)", self.name),
            ))
        }
    }
}

/// The key of an unauthenticated server: everything is allowed.
pub fn open_grant() -> Arc<Grant> {
    Arc::new(Grant { id: String::new(), name: "anonymous".into(), databases: None })
}

struct CachedKey {
    fetched: Instant,
    /// None: no such key.
    entry: Option<(Secret, Arc<Grant>)>,
}

/// How a key's secret is checked.
#[derive(Clone)]
enum Secret {
    /// latsdb's own key: the secret's SHA-256.
    Sha256(Vec<u8>),
    /// A key of Hopsworks' metadata (`crate::hopsworks::keys`).
    Hopsworks(Box<crate::hopsworks::keys::StoredKey>),
}

impl Secret {
    fn accepts(&self, secret: &str) -> bool {
        match self {
            Secret::Sha256(hash) => constant_time_eq(hash, &Sha256::digest(secret.as_bytes())),
            Secret::Hopsworks(key) => key.accepts(secret),
        }
    }
}

pub struct ApiKeys {
    client: Client,
    mode: AuthMode,
    open: Arc<Grant>,
    cache: RwLock<HashMap<String, CachedKey>>,
    /// When `hopsworks.api_key` was last found missing.
    no_hopsworks: Mutex<Option<Instant>>,
}

/// How long a missing `hopsworks.api_key` is remembered.
const NO_HOPSWORKS_TTL: Duration = Duration::from_secs(1);

impl ApiKeys {
    pub fn new(client: Client, mode: AuthMode) -> ApiKeys {
        ApiKeys { client, mode, open: open_grant(), cache: RwLock::new(HashMap::new()), no_hopsworks: Mutex::new(None) }
    }

    pub fn mode(&self) -> AuthMode {
        self.mode
    }

    /// Checks the `X-API-KEY` header and returns what the key may do.
    pub async fn authenticate(&self, header: Option<&[u8]>) -> Result<Arc<Grant>, HttpError> {
        if self.mode == AuthMode::None {
            return Ok(self.open.clone());
        }
        let header = header.ok_or_else(|| {
            HttpError::new(401, "this request needs an API key: send it in the X-API-KEY header".to_string())
        })?;
        let (id, secret) = std::str::from_utf8(header)
            .ok()
            .and_then(|k| k.trim().split_once('.'))
            .filter(|(id, secret)| id.len() == ID_LEN && !secret.is_empty() && secret.len() <= 256)
            .ok_or_else(|| {
                HttpError::new(401, "the API key has an incorrect format (expected <16-character id>.<secret>)".into())
            })?;
        let cached = {
            let cache = self.cache.read().unwrap_or_else(|p| p.into_inner());
            cache.get(id).filter(|c| c.fetched.elapsed() < KEY_CACHE_TTL).map(|c| c.entry.clone())
        };
        let entry = match cached {
            Some(entry) => entry,
            None => {
                let entry = self.fetch(id).await.map_err(HttpError::from_db)?;
                let mut cache = self.cache.write().unwrap_or_else(|p| p.into_inner());
                if cache.len() >= KEY_CACHE_MAX {
                    cache.clear();
                }
                cache.insert(id.to_string(), CachedKey { fetched: Instant::now(), entry: entry.clone() });
                entry
            }
        };
        match entry {
            Some((stored, grant)) if stored.accepts(secret) => Ok(grant),
            _ => Err(HttpError::new(401, "the API key is not valid (unknown or revoked)".into())),
        }
    }

    /// A key of Hopsworks' metadata. Without that metadata, unknown keys
    /// would each ask the management server for `hopsworks.api_key`: its
    /// absence is remembered for `NO_HOPSWORKS_TTL`.
    async fn fetch_hopsworks(&self, id: &str) -> Result<Option<(Secret, Arc<Grant>)>> {
        use crate::hopsworks::keys::{fetch, Found};
        let absent = *self.no_hopsworks.lock().unwrap_or_else(|p| p.into_inner());
        if absent.is_some_and(|at| at.elapsed() < NO_HOPSWORKS_TTL) {
            return Ok(None);
        }
        Ok(match fetch(&self.client, id).await? {
            Found::Key(key) => {
                let grant = Arc::new(key.grant.clone());
                Some((Secret::Hopsworks(key), grant))
            }
            Found::NoKey => None,
            Found::NoMetadata => {
                *self.no_hopsworks.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
                None
            }
        })
    }

    /// The key with `id`: latsdb's own, or else one of Hopsworks' metadata.
    async fn fetch(&self, id: &str) -> Result<Option<(Secret, Arc<Grant>)>> {
        let table = match self.client.table(SYSTEM_DATABASE, API_KEYS_TABLE).await {
            Ok(t) => Some(t),
            Err(e) if e.code == ErrorCode::UnknownTable => None,
            Err(e) => return Err(e),
        };
        let row = match &table {
            Some(table) => self.client.get(table, &[Value::Str(id.to_string())]).await?,
            None => None,
        };
        let Some(row) = row else {
            return self.fetch_hopsworks(id).await;
        };
        let grant = grant_of(&row)?;
        let hash = row.get_by_name("secret_sha256")?.as_bytes().map(|b| b.to_vec()).unwrap_or_default();
        Ok(Some((Secret::Sha256(hash), Arc::new(grant))))
    }
}

fn grant_of(row: &latsdb_client::Row) -> Result<Grant> {
    let text = |name: &str| -> Result<String> { Ok(row.get_by_name(name)?.as_str().unwrap_or_default().to_string()) };
    let databases = text("databases")?;
    Ok(Grant {
        id: text("id")?,
        name: text("name")?,
        databases: if databases == "*" {
            None
        } else {
            Some(databases.split(',').filter(|d| !d.is_empty()).map(str::to_string).collect())
        },
    })
}

pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Creates `table` unless it exists (several REST nodes may race to do so).
pub async fn ensure_table(client: &Client, spec: TableSpec) -> Result<Arc<Table>> {
    let (database, name) = (spec.database.clone(), spec.name.clone());
    match client.create_table(spec).await {
        Ok(t) => Ok(t),
        Err(e) if e.code == ErrorCode::TableExists => client.refresh_table(&database, &name).await,
        Err(e) => Err(e),
    }
}

async fn keys_table(client: &Client) -> Result<Arc<Table>> {
    ensure_table(
        client,
        TableSpec::new(SYSTEM_DATABASE, API_KEYS_TABLE)
            .column(ColumnDef::new("id", ColumnType::VarChar(ID_LEN as u32)))
            .column(ColumnDef::new("name", ColumnType::VarChar(64)).not_null())
            .column(ColumnDef::new("secret_sha256", ColumnType::Binary(32)).not_null())
            .column(ColumnDef::new("databases", ColumnType::Text).not_null())
            .column(ColumnDef::new("created", ColumnType::Timestamp))
            .primary_key(&["id"])
            .partitions(2),
    )
    .await
}

fn random_text(len: usize) -> Result<String> {
    let mut raw = vec![0u8; len];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut raw))
        .map_err(|e| DbError::io("reading /dev/urandom for a new API key", e))?;
    // 62 symbols: the modulo bias of 256 % 62 is irrelevant at 40 characters.
    Ok(raw.iter().map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char).collect())
}

/// Creates a key for `databases` ("*" alone for every database) and returns
/// it; the secret is not stored and cannot be shown again.
pub async fn create_key(client: &Client, name: &str, databases: &[String]) -> Result<String> {
    latsdb_types::schema::validate_name("API key", name)?;
    if databases.is_empty() {
        return Err(DbError::bad_request("give at least one database the key may access (or '*' for all)"));
    }
    for d in databases {
        if d != "*" {
            latsdb_types::schema::validate_name("database", d)?;
            if d.contains(',') {
                return Err(DbError::bad_request(format!("database name '{d}' contains a comma")));
            }
        }
    }
    let table = keys_table(client).await?;
    let id = random_text(ID_LEN)?;
    let secret = random_text(SECRET_LEN)?;
    let databases = if databases.iter().any(|d| d == "*") { "*".to_string() } else { databases.join(",") };
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as i64).unwrap_or(0);
    let row = vec![
        Value::Str(id.clone()),
        Value::Str(name.to_string()),
        Value::Bytes(Sha256::digest(secret.as_bytes()).to_vec()),
        Value::Str(databases),
        Value::Timestamp(now),
    ];
    let result = client.batch(vec![Op::insert(&table, row)?]).await?.pop();
    match result {
        Some(Ok(_)) => Ok(format!("{id}.{secret}")),
        Some(Err(e)) => Err(e),
        None => Err(DbError::internal("the insert of the key returned no result")),
    }
}

/// Every key (without secrets).
pub async fn list_keys(client: &Client) -> Result<Vec<Grant>> {
    let table = keys_table(client).await?;
    let rows = client.scan(&table, Scan::all().columns(&["id", "name", "databases"])).await?;
    rows.iter().map(grant_of).collect()
}

/// Revokes the key with this id (the part before the dot); false if unknown.
pub async fn delete_key(client: &Client, id: &str) -> Result<bool> {
    let table = keys_table(client).await?;
    let id = id.split('.').next().unwrap_or(id);
    match client.batch(vec![Op::delete(&table, &[Value::Str(id.to_string())])?]).await?.pop() {
        Some(Ok(latsdb_client::Outcome::NotFound)) => Ok(false),
        Some(Ok(_)) => Ok(true),
        Some(Err(e)) => Err(e),
        None => Err(DbError::internal("the delete of the key returned no result")),
    }
}

/// Makes sure the metadata tables exist (called when a REST node starts).
pub async fn ensure_system_tables(client: &Client) -> Result<()> {
    keys_table(client).await?;
    crate::features::views_table(client).await?;
    Ok(())
}
