//! Feature views and feature vectors (`feature_store`, `batch_feature_store`).
//!
//! A feature view is a named, versioned list of features drawn from one or
//! more tables ("feature groups") that share serving keys. Definitions are
//! stored as JSON in `latsdb_system.feature_views` (visible to SQL like any
//! table) and cached by each REST node for `VIEW_CACHE_TTL`.
//!
//! Serving one entry reads one row per feature group by primary key; all
//! reads of a request, across all its entries, go out in one batch.

use crate::auth::{ensure_table, Grant, SYSTEM_DATABASE};
use crate::hopsworks::metadata::{HopsView, Loaded};
use crate::hopsworks::serve::Served;
use crate::json::{Field, Fields, FieldsList, JsonOut, Scalar};
use crate::state::{ResolvedTable, Rest};
use crate::HttpError;
use latsdb_client::{Answers, Client, Found, Lookups, Op, Outcome, Projection, Scan, Table};
use latsdb_types::keycodec;
use latsdb_types::schema::{ColumnId, ColumnType, IntWidth};
use latsdb_types::value::{coerce, fit_text};
use latsdb_types::{ColumnDef, DbError, ErrorCode, Value};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

pub const FEATURE_VIEWS_TABLE: &str = "feature_views";
const VIEW_CACHE_TTL: Duration = Duration::from_secs(5);
const MAX_FEATURES: usize = 4096;

/// Error codes of feature-store answers (the numbering RonDB's clients know).
pub mod code {
    pub const FEATURE_VIEW_NOT_EXIST: u16 = 1;
    pub const FEATURE_STORE_NOT_EXIST: u16 = 2;
    pub const FEATURE_GROUP_NOT_EXIST: u16 = 3;
    pub const FG_READ_FAIL: u16 = 4;
    pub const FS_READ_FAIL: u16 = 5;
    pub const FEATURE_VIEW_READ_FAIL: u16 = 6;
    pub const TD_JOIN_READ_FAIL: u16 = 7;
    pub const TD_FEATURE_READ_FAIL: u16 = 8;
    pub const WRONG_DATA_TYPE: u16 = 10;
    pub const FEATURE_NOT_EXIST: u16 = 11;
    pub const INCORRECT_PRIMARY_KEY: u16 = 12;
    pub const INCORRECT_PASSED_FEATURE: u16 = 13;
    pub const READ_FAILED: u16 = 14;
    pub const NO_PRIMARY_KEY: u16 = 15;
    pub const INCORRECT_FEATURE_VALUE: u16 = 16;
    pub const READ_FROM_DB_FAIL_BAD_INPUT: u16 = 18;
    pub const DESERIALISE_FEATURE_FAIL: u16 = 19;

    pub fn reason(code: u16) -> &'static str {
        match code {
            FEATURE_VIEW_NOT_EXIST => "Feature view does not exist.",
            FEATURE_STORE_NOT_EXIST => "Feature store does not exist.",
            FEATURE_GROUP_NOT_EXIST => "Feature group does not exist.",
            FG_READ_FAIL => "Reading feature group failed.",
            FS_READ_FAIL => "Reading feature store failed.",
            FEATURE_VIEW_READ_FAIL => "Reading feature view failed.",
            TD_JOIN_READ_FAIL => "Reading training dataset join failed.",
            TD_FEATURE_READ_FAIL => "Reading training dataset feature failed.",
            WRONG_DATA_TYPE => "Wrong data type.",
            FEATURE_NOT_EXIST => "Feature does not exist.",
            INCORRECT_PRIMARY_KEY => "Incorrect primary key.",
            INCORRECT_PASSED_FEATURE => "Incorrect passed feature.",
            READ_FAILED | READ_FROM_DB_FAIL_BAD_INPUT => "Reading from db failed.",
            NO_PRIMARY_KEY => "No primary key is given.",
            INCORRECT_FEATURE_VALUE => "Incorrect feature value.",
            DESERIALISE_FEATURE_FAIL => "Deserialising complex feature failed.",
            _ => "Invalid feature store request.",
        }
    }
}

fn fs_error(status: u16, code: u16, message: String) -> HttpError {
    HttpError { status, message, code: Some(code) }
}

/// A feature view as users define it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FeatureViewDef {
    /// The feature store; also the default database of the feature groups.
    pub feature_store_name: String,
    pub feature_view_name: String,
    pub feature_view_version: u32,
    pub feature_groups: Vec<FeatureGroupDef>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FeatureGroupDef {
    /// Database of the table (default: the feature store name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database: Option<String>,
    pub table: String,
    /// Prepended to this group's column names to name its features and
    /// (unless `joinKeys` says otherwise) its serving keys.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prefix: String,
    /// Primary-key column -> serving-key name, for keys shared with other
    /// groups under another name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub join_keys: BTreeMap<String, String>,
    /// Columns served as features, in vector order.
    pub features: Vec<String>,
}

/// One feature of a resolved view.
struct Feature {
    name: String,
    type_name: String,
    column: ColumnDef,
    group: usize,
    /// Position in the group's projection.
    position: usize,
    /// The serving key that holds this feature's value, for key columns.
    key: Option<usize>,
}

/// A feature group resolved against its table.
struct Group {
    table: Arc<ResolvedTable>,
    database: String,
    /// For each primary-key column in key order: the serving key index.
    key: Vec<usize>,
    projection: Projection,
}

/// A feature view resolved against the current table definitions.
pub struct ResolvedView {
    def: FeatureViewDef,
    groups: Vec<Group>,
    features: Vec<Feature>,
    /// Serving-key names with the column each must fit.
    serving_keys: Vec<(String, ColumnDef)>,
}

impl ResolvedView {
    /// Databases whose data the view serves (a key needs a grant on each).
    pub fn databases(&self) -> impl Iterator<Item = &str> {
        self.groups.iter().map(|g| g.database.as_str())
    }
}

pub fn feature_type(ty: ColumnType) -> String {
    match ty {
        ColumnType::Integer { width: IntWidth::Tiny, .. } => "tinyint".into(),
        ColumnType::Integer { width: IntWidth::Small, .. } => "smallint".into(),
        ColumnType::Integer { width: IntWidth::Medium | IntWidth::Int, .. } => "int".into(),
        ColumnType::Integer { width: IntWidth::Big, .. } => "bigint".into(),
        ColumnType::Float => "float".into(),
        ColumnType::Double => "double".into(),
        ColumnType::Decimal { precision, scale } => format!("decimal({precision},{scale})"),
        ColumnType::Char(_) | ColumnType::VarChar(_) | ColumnType::Text => "string".into(),
        ColumnType::Binary(_) | ColumnType::VarBinary(_) | ColumnType::Blob => "binary".into(),
        ColumnType::Date => "date".into(),
        ColumnType::DateTime | ColumnType::Timestamp => "timestamp".into(),
        ColumnType::Boolean => "boolean".into(),
        ColumnType::Time | ColumnType::Enum | ColumnType::Set => "string".into(),
        ColumnType::Year => "int".into(),
        ColumnType::Bit(_) => "binary".into(),
    }
}

/// Checks a definition against the tables and builds what serving needs.
async fn resolve(rest: &Rest, def: FeatureViewDef) -> Result<ResolvedView, HttpError> {
    let bad = |message: String| HttpError::bad_request(message);
    latsdb_types::schema::validate_name("feature store", &def.feature_store_name).map_err(HttpError::from_db)?;
    latsdb_types::schema::validate_name("feature view", &def.feature_view_name).map_err(HttpError::from_db)?;
    if def.feature_groups.is_empty() {
        return Err(bad("a feature view needs at least one feature group".into()));
    }
    let mut groups = Vec::new();
    let mut features: Vec<Feature> = Vec::new();
    let mut serving_keys: Vec<(String, ColumnDef)> = Vec::new();
    for (g, group) in def.feature_groups.iter().enumerate() {
        let database = group.database.clone().unwrap_or_else(|| def.feature_store_name.clone());
        let table = rest.table(&database, &group.table).await.map_err(|e| {
            fs_error(
                if e.status == 404 { 400 } else { e.status },
                code::FEATURE_GROUP_NOT_EXIST,
                format!("feature group {}: {}", g + 1, e.message),
            )
        })?;
        let tdef = table.table.def();
        if tdef.hidden_key().is_some() {
            return Err(bad(format!("feature group {}: {}", g + 1, crate::pk::no_key(tdef))));
        }
        for column in group.join_keys.keys() {
            let id = tdef.column_id(column).map_err(HttpError::from_db)?;
            if !tdef.primary_key.contains(&id) {
                return Err(bad(format!(
                    "joinKeys of {}.{} names '{column}', which is not a primary-key column",
                    database, group.table
                )));
            }
        }
        let mut key = Vec::new();
        for &c in &tdef.primary_key {
            let column = &tdef.columns[c as usize];
            let name = group
                .join_keys
                .get(&column.name)
                .cloned()
                .unwrap_or_else(|| format!("{}{}", group.prefix, column.name));
            let index = match serving_keys.iter().position(|(n, _)| *n == name) {
                Some(i) => {
                    if serving_keys[i].1.ty != column.ty {
                        return Err(bad(format!(
                            "serving key '{name}' is {} in one feature group and {} in {}.{}",
                            serving_keys[i].1.ty.sql_name(),
                            column.ty.sql_name(),
                            database,
                            group.table
                        )));
                    }
                    i
                }
                None => {
                    let mut column = column.clone();
                    column.name = name.clone();
                    serving_keys.push((name, column));
                    serving_keys.len() - 1
                }
            };
            key.push(index);
        }
        if group.features.is_empty() {
            return Err(bad(format!("feature group {}.{} lists no features", database, group.table)));
        }
        let names: Vec<&str> = group.features.iter().map(String::as_str).collect();
        let projection = Projection::new(&table.table, &names).map_err(HttpError::from_db)?;
        for (position, column_name) in group.features.iter().enumerate() {
            let id: ColumnId = tdef.column_id(column_name).map_err(HttpError::from_db)?;
            let column = tdef.columns[id as usize].clone();
            let name = format!("{}{}", group.prefix, column.name);
            if features.iter().any(|f| f.name == name) {
                return Err(bad(format!("feature name '{name}' appears twice; give one of the groups a prefix")));
            }
            let key_slot = tdef.primary_key.iter().position(|&c| c == id).map(|k| key[k]);
            features.push(Feature {
                name,
                type_name: feature_type(column.ty),
                column,
                group: groups.len(),
                position,
                key: key_slot,
            });
        }
        groups.push(Group { table, database, key, projection });
    }
    if features.len() > MAX_FEATURES {
        return Err(bad(format!("a feature view may have at most {MAX_FEATURES} features")));
    }
    Ok(ResolvedView { def, groups, features, serving_keys })
}

pub async fn views_table(client: &Client) -> latsdb_types::Result<Arc<Table>> {
    ensure_table(
        client,
        latsdb_types::TableSpec::new(SYSTEM_DATABASE, FEATURE_VIEWS_TABLE)
            .column(ColumnDef::new("feature_store", ColumnType::VarChar(64)))
            .column(ColumnDef::new("name", ColumnType::VarChar(64)))
            .column(ColumnDef::new("version", ColumnType::uint(IntWidth::Int)))
            .column(ColumnDef::new("definition", ColumnType::Text).not_null())
            .primary_key(&["feature_store", "name", "version"])
            .partitions(2),
    )
    .await
}

fn view_key(def_store: &str, name: &str, version: u32) -> Vec<Value> {
    vec![Value::Str(def_store.to_string()), Value::Str(name.to_string()), Value::UInt(version as u64)]
}

struct CachedView {
    fetched: Instant,
    view: Option<Arc<ResolvedView>>,
}

#[derive(Default)]
pub struct ViewCache {
    views: RwLock<HashMap<(String, String, u32), CachedView>>,
    /// Views read from Hopsworks' metadata, with when they were read. Only
    /// views found are kept: a view created after a miss is served at once.
    hopsworks: RwLock<HashMap<ViewKey, (Instant, Arc<HopsView>)>>,
    /// Feature stores Hopsworks' metadata did not know, with when it was
    /// asked: latsdb's own views of such a store are served without asking
    /// again for `UNKNOWN_STORE_TTL`.
    not_in_hopsworks: RwLock<HashMap<String, Instant>>,
}

/// How long a feature store Hopsworks' metadata does not know is remembered.
const UNKNOWN_STORE_TTL: Duration = Duration::from_secs(1);

/// A feature view's store, name and version.
type ViewKey = (String, String, u32);

/// Where a feature view's definition was found.
enum Source {
    /// Hopsworks' metadata defines it.
    Hopsworks(Arc<HopsView>),
    /// Hopsworks' metadata is loaded but has no such feature store.
    NotInHopsworks,
    /// No Hopsworks metadata is loaded.
    NoHopsworks,
}

/// The view from Hopsworks' metadata, cached for `VIEW_CACHE_TTL`.
async fn hopsworks_view(rest: &Rest, store: &str, name: &str, version: u32) -> Result<Source, HttpError> {
    let key = (store.to_string(), name.to_string(), version);
    {
        let views = rest.views.hopsworks.read().unwrap_or_else(|p| p.into_inner());
        if let Some((_, view)) = views.get(&key).filter(|(at, _)| at.elapsed() < VIEW_CACHE_TTL) {
            return Ok(Source::Hopsworks(view.clone()));
        }
        let unknown = rest.views.not_in_hopsworks.read().unwrap_or_else(|p| p.into_inner());
        if unknown.get(store).is_some_and(|at| at.elapsed() < UNKNOWN_STORE_TTL) {
            return Ok(Source::NotInHopsworks);
        }
    }
    match crate::hopsworks::metadata::load(rest, store, name, version).await? {
        Loaded::View(view) => {
            let mut views = rest.views.hopsworks.write().unwrap_or_else(|p| p.into_inner());
            views.retain(|_, (at, _)| at.elapsed() < VIEW_CACHE_TTL);
            views.insert(key, (Instant::now(), view.clone()));
            Ok(Source::Hopsworks(view))
        }
        Loaded::NoStore => {
            let mut unknown = rest.views.not_in_hopsworks.write().unwrap_or_else(|p| p.into_inner());
            unknown.retain(|_, at| at.elapsed() < UNKNOWN_STORE_TTL);
            unknown.insert(store.to_string(), Instant::now());
            Ok(Source::NotInHopsworks)
        }
        Loaded::NoSchema => Ok(Source::NoHopsworks),
    }
}

/// Whether Hopsworks' metadata is loaded: its `feature_store` table exists.
/// The answer comes from the node's table cache, which remembers a missing
/// table for a second, so a node without Hopsworks asks the management
/// server at most once a second, not per request.
async fn hopsworks_loaded(rest: &Rest) -> Result<bool, HttpError> {
    match rest.table(crate::hopsworks::DATABASE, "feature_store").await {
        Ok(_) => Ok(true),
        Err(e) if e.status == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Serves a request from Hopsworks' metadata when it defines the view;
/// None when latsdb's own definitions should serve it. A view whose tables
/// changed since it was read (the data nodes refuse the reads) is read
/// again, once.
async fn from_hopsworks(
    rest: &Rest,
    grant: &Grant,
    request: &crate::hopsworks::serve::Request<'_>,
    batch: bool,
) -> Result<Option<(u16, Vec<u8>)>, HttpError> {
    // Hopsworks' metadata is loaded (the caller checked): RonDB's words.
    let (store, name, version) = request.target()?;
    for attempt in 0..2 {
        let view = match hopsworks_view(rest, store, name, version).await? {
            Source::Hopsworks(view) => view,
            Source::NotInHopsworks => {
                // latsdb's own view (from its cache, which serving then
                // reuses); neither source knowing it is RonDB's answer.
                return match view(rest, store, name, version).await {
                    Ok(_) => Ok(None),
                    Err(e) if e.code == Some(code::FEATURE_VIEW_NOT_EXIST) => {
                        Err(fs_error(400, code::FEATURE_STORE_NOT_EXIST, String::new()))
                    }
                    Err(e) => Err(e),
                };
            }
            Source::NoHopsworks => return Ok(None),
        };
        for store in &view.stores {
            grant.check(store)?;
        }
        let served = match batch {
            false => crate::hopsworks::serve::one(rest, &view, request).await?,
            true => crate::hopsworks::serve::batch(rest, &view, request).await?,
        };
        match served {
            Served::Answer(answer) => return Ok(Some(answer)),
            Served::Stale if attempt == 0 => {
                let key = (store.to_string(), name.to_string(), version);
                rest.views.hopsworks.write().unwrap_or_else(|p| p.into_inner()).remove(&key);
                for (database, table) in view.tables() {
                    rest.forget_table(database, table);
                }
            }
            Served::Stale => {}
        }
    }
    Err(fs_error(503, code::READ_FAILED, "the feature view's tables changed while it was read; retry".to_string()))
}

impl ViewCache {
    fn forget(&self, store: &str, name: &str, version: u32) {
        self.views.write().unwrap_or_else(|p| p.into_inner()).remove(&(store.to_string(), name.to_string(), version));
    }
}

/// The resolved view, from the cache or the metadata table.
pub async fn view(rest: &Rest, store: &str, name: &str, version: u32) -> Result<Arc<ResolvedView>, HttpError> {
    let key = (store.to_string(), name.to_string(), version);
    let cached = {
        let views = rest.views.views.read().unwrap_or_else(|p| p.into_inner());
        views.get(&key).filter(|c| c.fetched.elapsed() < VIEW_CACHE_TTL).map(|c| c.view.clone())
    };
    let view = match cached {
        Some(v) => v,
        None => {
            let view = match load_def(&rest.client, store, name, version).await.map_err(HttpError::from_db)? {
                Some(def) => Some(Arc::new(resolve(rest, def).await?)),
                None => None,
            };
            rest.views
                .views
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key, CachedView { fetched: Instant::now(), view: view.clone() });
            view
        }
    };
    view.ok_or_else(|| {
        fs_error(
            404,
            code::FEATURE_VIEW_NOT_EXIST,
            format!("feature view '{name}' version {version} does not exist in feature store '{store}'"),
        )
    })
}

async fn load_def(
    client: &Client,
    store: &str,
    name: &str,
    version: u32,
) -> latsdb_types::Result<Option<FeatureViewDef>> {
    let table = views_table(client).await?;
    let Some(row) = client.get(&table, &view_key(store, name, version)).await? else {
        return Ok(None);
    };
    let text = row.get_by_name("definition")?;
    let def = serde_json::from_str(text.as_str().unwrap_or_default())
        .map_err(|e| DbError::internal(format!("stored feature view {store}.{name} v{version} is unreadable: {e}")))?;
    Ok(Some(def))
}

/// `POST /0.1.0/feature_view`: stores a new feature view after checking it
/// against the tables.
pub async fn create(rest: &Rest, grant: &Grant, body: &[u8]) -> Result<(u16, Vec<u8>), HttpError> {
    let def: FeatureViewDef = crate::json::parse(body).map_err(HttpError::bad_request)?;
    grant.check(&def.feature_store_name)?;
    let resolved = resolve(rest, def.clone()).await?;
    for database in resolved.databases() {
        grant.check(database)?;
    }
    let table = views_table(&rest.client).await.map_err(HttpError::from_db)?;
    let text = serde_json::to_string(&def).map_err(|e| HttpError::internal(e.to_string()))?;
    let mut row = view_key(&def.feature_store_name, &def.feature_view_name, def.feature_view_version);
    row.push(Value::Str(text.clone()));
    let op = Op::insert(&table, row).map_err(HttpError::from_db)?;
    match rest.client.batch(vec![op]).await.map_err(HttpError::from_db)?.pop() {
        Some(Ok(_)) => {}
        Some(Err(e)) if e.code == ErrorCode::DuplicateKey => {
            return Err(HttpError::new(
                409,
                format!(
                "feature view '{}' version {} already exists in feature store '{}'; drop it first or use a new version",
                def.feature_view_name, def.feature_view_version, def.feature_store_name
            ),
            ))
        }
        Some(Err(e)) => return Err(HttpError::from_db(e)),
        None => return Err(HttpError::internal("the insert returned no result".into())),
    }
    rest.views.forget(&def.feature_store_name, &def.feature_view_name, def.feature_view_version);
    Ok((201, text.into_bytes()))
}

/// `GET /0.1.0/feature_view`: every view the key may see.
pub async fn list(rest: &Rest, grant: &Grant) -> Result<(u16, Vec<u8>), HttpError> {
    let table = views_table(&rest.client).await.map_err(HttpError::from_db)?;
    let rows = rest.client.scan(&table, Scan::all().ordered()).await.map_err(HttpError::from_db)?;
    let mut out = JsonOut::with_capacity(256 * rows.len() + 32);
    out.raw("{\"featureViews\":[");
    for row in &rows {
        let store = row.get_by_name("feature_store").map_err(HttpError::from_db)?;
        if !grant.allows(store.as_str().unwrap_or_default()) {
            continue;
        }
        if let Value::Str(text) = row.get_by_name("definition").map_err(HttpError::from_db)? {
            out.raw(&text);
            out.byte(b',');
        }
    }
    out.trim_comma();
    out.raw("]}");
    Ok((200, out.buf))
}

/// `GET` and `DELETE /0.1.0/feature_view/{store}/{name}/{version}`.
pub async fn get_or_drop(rest: &Rest, grant: &Grant, path: &[&str], drop: bool) -> Result<(u16, Vec<u8>), HttpError> {
    let [store, name, version] = path else {
        return Err(HttpError::new(404, "use /0.1.0/feature_view/{featureStore}/{name}/{version}".into()));
    };
    let version: u32 = version
        .parse()
        .map_err(|_| HttpError::bad_request(format!("feature view version '{version}' is not a whole number")))?;
    grant.check(store)?;
    let not_found = || {
        fs_error(
            404,
            code::FEATURE_VIEW_NOT_EXIST,
            format!("feature view '{name}' version {version} does not exist in feature store '{store}'"),
        )
    };
    if !drop {
        let def =
            load_def(&rest.client, store, name, version).await.map_err(HttpError::from_db)?.ok_or_else(not_found)?;
        let text = serde_json::to_vec(&def).map_err(|e| HttpError::internal(e.to_string()))?;
        return Ok((200, text));
    }
    let table = views_table(&rest.client).await.map_err(HttpError::from_db)?;
    let op = Op::delete(&table, &view_key(store, name, version)).map_err(HttpError::from_db)?;
    let result = rest.client.batch(vec![op]).await.map_err(HttpError::from_db)?.pop();
    rest.views.forget(store, name, version);
    match result {
        Some(Ok(Outcome::NotFound)) => Err(not_found()),
        Some(Ok(_)) => Ok((200, crate::json::message_body("dropped"))),
        Some(Err(e)) => Err(HttpError::from_db(e)),
        None => Err(HttpError::internal("the delete returned no result".into())),
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct MetadataOptions {
    #[serde(default)]
    feature_name: bool,
    #[serde(default)]
    feature_type: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Options {
    #[serde(default = "yes")]
    validate_passed_features: bool,
    #[serde(default)]
    include_detailed_status: bool,
}

fn yes() -> bool {
    true
}

impl Default for Options {
    fn default() -> Self {
        Options { validate_passed_features: true, include_detailed_status: false }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FeatureRequest<'a> {
    feature_store_name: String,
    feature_view_name: String,
    feature_view_version: u32,
    #[serde(borrow)]
    entries: Fields<'a>,
    #[serde(borrow, default)]
    passed_features: Option<Fields<'a>>,
    #[serde(default)]
    metadata_options: Option<MetadataOptions>,
    #[serde(default)]
    options: Option<Options>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct BatchFeatureRequest<'a> {
    feature_store_name: String,
    feature_view_name: String,
    feature_view_version: u32,
    #[serde(borrow)]
    entries: FieldsList<'a>,
    #[serde(borrow, default)]
    passed_features: Option<Vec<Option<Fields<'a>>>>,
    #[serde(default)]
    metadata_options: Option<MetadataOptions>,
    #[serde(default)]
    options: Option<Options>,
}

/// The planned reads of every entry of a request, in one list each:
/// entry `i` has serving keys `keys[i * serving keys..]` and, per group,
/// the lookup of its read, or the status that replaced it (a missing key),
/// at `reads[i * groups..]`.
struct Plans<'a> {
    keys: Vec<Option<KeyValue<'a>>>,
    reads: Vec<Result<usize, u16>>,
    serving_keys: usize,
    groups: usize,
}

/// A serving key's value as the column takes it. Text stays borrowed from
/// the request (as the column keeps it), so a text key costs no allocation.
#[derive(Clone, Debug)]
enum KeyValue<'a> {
    Value(Value),
    Text(&'a str),
}

impl<'a> Plans<'a> {
    fn new(view: &ResolvedView, entries: usize) -> Plans<'a> {
        let (serving_keys, groups) = (view.serving_keys.len(), view.groups.len());
        Plans {
            keys: vec![None; entries * serving_keys],
            reads: vec![Err(400); entries * groups],
            serving_keys,
            groups,
        }
    }

    /// Entry `i`'s serving keys and reads.
    fn entry(&self, i: usize) -> (&[Option<KeyValue<'a>>], &[Result<usize, u16>]) {
        (&self.keys[i * self.serving_keys..][..self.serving_keys], &self.reads[i * self.groups..][..self.groups])
    }
}

/// Checks entry `i`'s serving keys and passed features; plans its reads.
fn plan_entry<'a>(
    view: &ResolvedView,
    i: usize,
    entries: &'a [Field<'a>],
    passed: Option<&Fields>,
    options: &Options,
    lookups: &mut Lookups,
    plans: &mut Plans<'a>,
) -> Result<(), HttpError> {
    if entries.is_empty() {
        return Err(fs_error(400, code::NO_PRIMARY_KEY, "'entries' is empty: give the serving keys".into()));
    }
    let keys = &mut plans.keys[i * plans.serving_keys..][..plans.serving_keys];
    for (name, scalar) in entries {
        let index = view.serving_keys.iter().position(|(n, _)| n == name).ok_or_else(|| {
            let names: Vec<&str> = view.serving_keys.iter().map(|(n, _)| n.as_str()).collect();
            fs_error(
                400,
                code::INCORRECT_PRIMARY_KEY,
                format!("'{name}' is not a serving key of this feature view (serving keys: {})", names.join(", ")),
            )
        })?;
        let column = &view.serving_keys[index].1;
        let value = match scalar {
            Scalar::Str(text) if column.ty.is_free_text() => {
                KeyValue::Text(fit_text(text, column).map_err(|e| fs_error(400, code::WRONG_DATA_TYPE, e.message))?)
            }
            _ => KeyValue::Value(
                scalar.to_column_value(column).map_err(|m| fs_error(400, code::WRONG_DATA_TYPE, m.message))?,
            ),
        };
        keys[index] = Some(value);
    }
    if let (Some(passed), true) = (passed, options.validate_passed_features) {
        for (name, scalar) in &passed.0 {
            let feature = view.features.iter().find(|f| f.name == *name).ok_or_else(|| {
                fs_error(400, code::FEATURE_NOT_EXIST, format!("passed feature '{name}' is not a feature of this view"))
            })?;
            scalar
                .to_column_value(&feature.column)
                .map_err(|m| fs_error(400, code::INCORRECT_PASSED_FEATURE, format!("passed feature '{name}': {m}")))?;
        }
    }
    let reads = &mut plans.reads[i * plans.groups..][..plans.groups];
    for (group, read) in view.groups.iter().zip(reads) {
        // Without its whole key a group cannot be read: its features are missing.
        if group.key.iter().any(|&k| keys[k].is_none()) {
            *read = Err(400);
            continue;
        }
        let table = &group.table.table;
        let def = table.def();
        let pushed = lookups.push(table, Some(&group.projection), |out| {
            for (&k, &column) in group.key.iter().zip(&def.primary_key) {
                let column = &def.columns[column as usize];
                match &keys[k] {
                    Some(KeyValue::Text(text)) => keycodec::encode_text(out, column, text)?,
                    Some(KeyValue::Value(value)) => {
                        keycodec::encode_value(out, column.ty, column.collation, &coerce(value.clone(), column)?)
                    }
                    None => return Err(DbError::internal("a serving key checked present is missing")),
                }
            }
            Ok(())
        });
        *read = Ok(pushed.map_err(HttpError::from_db)?);
    }
    Ok(())
}

/// Renders one entry's feature vector; returns its status text.
fn write_vector(
    out: &mut JsonOut,
    view: &ResolvedView,
    (keys, reads): (&[Option<KeyValue>], &[Result<usize, u16>]),
    results: &Answers,
    passed: Option<&Fields>,
    statuses: &mut Vec<u16>,
) -> &'static str {
    let start = statuses.len();
    for read in reads {
        statuses.push(match read {
            Err(status) => *status,
            Ok(slot) => match results.get(*slot) {
                Found::Row(_) => 200,
                Found::NotFound => 404,
                Found::Error(e) => crate::pk::status_of(e),
            },
        });
    }
    out.byte(b'[');
    for feature in &view.features {
        if let Some(value) = passed.and_then(|p| p.0.iter().find(|(n, _)| *n == feature.name)).map(|(_, v)| v) {
            out.scalar(value);
        } else if let Some(Some(value)) = feature.key.map(|k| &keys[k]) {
            match value {
                KeyValue::Value(value) => out.value(value),
                KeyValue::Text(text) => out.str(text),
            }
        } else {
            match &reads[feature.group] {
                Ok(slot) => match results.get(*slot) {
                    Found::Row(row) => out.value_ref(&row.get_ref(feature.position), &feature.column),
                    _ => out.raw("null"),
                },
                Err(_) => out.raw("null"),
            }
        }
        out.byte(b',');
    }
    out.trim_comma();
    out.byte(b']');
    let statuses = &statuses[start..];
    if statuses.iter().all(|&s| s == 200) {
        "COMPLETE"
    } else if statuses.iter().all(|&s| s == 200 || s == 404 || s == 400) {
        "MISSING"
    } else {
        "ERROR"
    }
}

fn write_metadata(out: &mut JsonOut, view: &ResolvedView, options: Option<&MetadataOptions>) {
    let Some(options) = options else {
        out.raw("null");
        return;
    };
    let features = view.features.iter().map(|f| (f.name.as_str(), f.type_name.as_str()));
    write_feature_metadata(out, features, options.feature_name, options.feature_type);
}

/// `[{"featureName", "featureType"}, ..]` of a vector's features, each
/// field null unless asked for; both feature-view sources answer so.
pub(crate) fn write_feature_metadata<'a>(
    out: &mut JsonOut,
    features: impl Iterator<Item = (&'a str, &'a str)>,
    name: bool,
    ty: bool,
) {
    out.byte(b'[');
    for (feature_name, type_name) in features {
        out.raw("{\"featureName\":");
        if name {
            out.str(feature_name);
        } else {
            out.raw("null");
        }
        out.raw(",\"featureType\":");
        if ty {
            out.str(type_name);
        } else {
            out.raw("null");
        }
        out.raw("},");
    }
    out.trim_comma();
    out.byte(b']');
}

fn write_detailed(out: &mut JsonOut, view: &ResolvedView, statuses: &[u16]) {
    let groups = view.groups.iter().map(|g| g.table.table.def().id as i64);
    write_group_statuses(out, groups.zip(statuses.iter().copied()));
}

/// `[{"featureGroupId", "httpStatus"}, ..]`: each group read's status.
pub(crate) fn write_group_statuses(out: &mut JsonOut, statuses: impl Iterator<Item = (i64, u16)>) {
    out.byte(b'[');
    for (group, status) in statuses {
        out.raw("{\"featureGroupId\":");
        out.int(group);
        out.raw(",\"httpStatus\":");
        out.uint(status as u64);
        out.raw("},");
    }
    out.trim_comma();
    out.byte(b']');
}

fn check_grants(view: &ResolvedView, grant: &Grant) -> Result<(), HttpError> {
    grant.check(&view.def.feature_store_name)?;
    for database in view.databases() {
        grant.check(database)?;
    }
    Ok(())
}

/// A read failure that is the cluster's, not the entry's, fails the request.
fn first_cluster_error(results: &Answers) -> Option<HttpError> {
    (0..results.len()).find_map(|i| match results.get(i) {
        Found::Error(e) if crate::pk::status_of(e) >= 500 => Some(fs_error(
            crate::pk::status_of(e),
            code::READ_FAILED,
            format!("reading features failed: {}", e.message),
        )),
        _ => None,
    })
}

/// `POST /0.1.0/feature_store`.
pub async fn serve_one(rest: &Rest, grant: &Grant, body: &[u8]) -> Result<(u16, Vec<u8>), HttpError> {
    if hopsworks_loaded(rest).await? {
        let request = crate::json::parse::<crate::hopsworks::serve::Request>(body)
            .map_err(|m| HttpError::bad_request(format!("Error:{m}")))?;
        if let Some(answer) = from_hopsworks(rest, grant, &request, false).await? {
            return Ok(answer);
        }
    }
    let request: FeatureRequest = crate::json::parse(body).map_err(|m| fs_error(400, 0, m))?;
    let view =
        view(rest, &request.feature_store_name, &request.feature_view_name, request.feature_view_version).await?;
    check_grants(&view, grant)?;
    let options = request.options.unwrap_or_default();
    let mut lookups = Lookups::with_capacity(view.groups.len(), 12);
    let mut plans = Plans::new(&view, 1);
    let passed = request.passed_features.as_ref();
    plan_entry(&view, 0, &request.entries.0, passed, &options, &mut lookups, &mut plans)?;
    let results = rest.client.lookup(&lookups).await.map_err(HttpError::from_db)?;
    if let Some(e) = first_cluster_error(&results) {
        return Err(e);
    }
    let mut out = JsonOut::with_capacity(64 + 24 * view.features.len());
    let mut statuses = Vec::new();
    out.raw("{\"features\":");
    let status = write_vector(&mut out, &view, plans.entry(0), &results, passed, &mut statuses);
    out.raw(",\"metadata\":");
    write_metadata(&mut out, &view, request.metadata_options.as_ref());
    out.raw(",\"status\":");
    out.str(status);
    out.raw(",\"detailedStatus\":");
    if options.include_detailed_status {
        write_detailed(&mut out, &view, &statuses);
    } else {
        out.raw("null");
    }
    out.byte(b'}');
    Ok((200, out.buf))
}

/// `POST /0.1.0/batch_feature_store`: entries that fail validation get
/// status "ERROR" and an empty vector; the others are served.
pub async fn serve_batch(rest: &Rest, grant: &Grant, body: &[u8]) -> Result<(u16, Vec<u8>), HttpError> {
    if hopsworks_loaded(rest).await? {
        let request = crate::json::parse::<crate::hopsworks::serve::Request>(body)
            .map_err(|m| HttpError::bad_request(format!("Error:{m}")))?;
        if let Some(answer) = from_hopsworks(rest, grant, &request, true).await? {
            return Ok(answer);
        }
    }
    let request: BatchFeatureRequest = crate::json::parse(body).map_err(|m| fs_error(400, 0, m))?;
    if request.entries.is_empty() {
        return Err(fs_error(
            400,
            code::NO_PRIMARY_KEY,
            "'entries' is empty: give one object of serving keys per vector".into(),
        ));
    }
    if request.entries.len() > rest.config.max_batch_ops {
        return Err(HttpError::bad_request(format!(
            "{} entries exceed the limit of {} per request; split the request",
            request.entries.len(),
            rest.config.max_batch_ops
        )));
    }
    let passed = request.passed_features.as_deref().unwrap_or_default();
    if !passed.is_empty() && passed.len() != request.entries.len() {
        return Err(fs_error(
            400,
            code::INCORRECT_PASSED_FEATURE,
            format!(
                "'passedFeatures' has {} items but 'entries' has {}; give one per entry (or null)",
                passed.len(),
                request.entries.len()
            ),
        ));
    }
    let view =
        view(rest, &request.feature_store_name, &request.feature_view_name, request.feature_view_version).await?;
    check_grants(&view, grant)?;
    let options = request.options.unwrap_or_default();
    let entries = request.entries.len();
    let mut lookups = Lookups::with_capacity(view.groups.len() * entries, 12);
    let mut plans = Plans::new(&view, entries);
    // Per entry: planned, or refused (its vector is empty, its status "ERROR").
    let planned: Vec<bool> = (0..entries)
        .map(|i| {
            let p = passed.get(i).and_then(|p| p.as_ref());
            plan_entry(&view, i, request.entries.get(i), p, &options, &mut lookups, &mut plans).is_ok()
        })
        .collect();
    let results = rest.client.lookup(&lookups).await.map_err(HttpError::from_db)?;
    if let Some(e) = first_cluster_error(&results) {
        return Err(e);
    }
    let mut out = JsonOut::with_capacity(64 + 24 * view.features.len() * entries);
    // Every planned entry's statuses, one after the other.
    let mut statuses = Vec::with_capacity(view.groups.len() * entries);
    let mut texts = Vec::with_capacity(entries);
    out.raw("{\"features\":[");
    for (i, &planned) in planned.iter().enumerate() {
        if planned {
            let p = passed.get(i).and_then(|p| p.as_ref());
            texts.push(write_vector(&mut out, &view, plans.entry(i), &results, p, &mut statuses));
        } else {
            out.raw("[]");
            texts.push("ERROR");
        }
        out.byte(b',');
    }
    out.trim_comma();
    out.raw("],\"metadata\":");
    write_metadata(&mut out, &view, request.metadata_options.as_ref());
    out.raw(",\"status\":[");
    for text in &texts {
        out.str(text);
        out.byte(b',');
    }
    out.trim_comma();
    out.raw("],\"detailedStatus\":");
    if options.include_detailed_status {
        out.byte(b'[');
        let mut entry_statuses = statuses.chunks(view.groups.len().max(1));
        for &planned in &planned {
            match planned.then(|| entry_statuses.next()).flatten() {
                Some(s) => write_detailed(&mut out, &view, s),
                None => out.raw("null"),
            }
            out.byte(b',');
        }
        out.trim_comma();
        out.byte(b']');
    } else {
        out.raw("null");
    }
    out.byte(b'}');
    Ok((200, out.buf))
}
