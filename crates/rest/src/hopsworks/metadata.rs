//! A feature view as Hopsworks' metadata defines it, read from the
//! `hopsworks` tables in the order RonDB's REST server reads them:
//! `feature_store` by name, `feature_view` by (name, version, store),
//! then the view's `training_dataset_join` rows (one per joined feature
//! group, with its prefix), its `training_dataset_feature` rows (one per
//! feature, in vector order by `idx`), each feature's `feature_group` and
//! that group's store, and the view's `serving_key` rows.
//!
//! A feature group is served from its online table `<name>_<version>` in
//! the database named like its feature store. One primary-key read per
//! joined group (`Group`) fetches its features; the serving keys say which
//! request entry gives each key column.

use super::avro::{self, Avro};
use super::{int, required_table, rows_where, table, text};
use crate::features::code;
use crate::state::{ResolvedTable, Rest};
use crate::HttpError;
use latsdb_client::Projection;
use latsdb_types::{ColumnDef, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// One feature of the vector (labels are not served).
#[derive(Debug)]
pub struct Feature {
    /// The name a client sees: the join's prefix, then the column's name.
    pub name: String,
    /// The type Hopsworks recorded (`bigint`, `string`, `struct<..>`).
    pub type_name: String,
    /// The group read for it, unless the group is a spine (never read).
    pub group: Option<usize>,
}

/// A serving key of one joined group: which request entry names the value
/// of the group's key column `column`.
#[derive(Debug, Clone)]
pub struct ServingKey {
    pub column: String,
    /// `prefix + column` when the key is required, else the feature it is
    /// joined on (may be empty).
    pub required_entry: String,
    pub prefixed: String,
}

/// One joined feature group: a primary-key read of its online table.
pub struct Group {
    pub feature_group_id: i64,
    /// None: the online table does not exist (every read answers 404).
    pub table: Option<Arc<ResolvedTable>>,
    pub keys: Vec<ServingKey>,
    /// The columns read, and for each the vector slot it fills.
    pub projection: Option<Projection>,
    pub slots: Vec<usize>,
    /// Read columns' definitions, in projection order.
    pub columns: Vec<ColumnDef>,
    /// For each read column of a complex feature: its Avro type.
    pub avro: Vec<Option<Arc<Avro>>>,
}

/// A feature view resolved from Hopsworks' metadata.
pub struct HopsView {
    pub features: Vec<Feature>,
    pub groups: Vec<Group>,
    /// Entry names a request may give: each serving key, with and without
    /// its prefix.
    pub valid_keys: Vec<String>,
    /// Prefixed feature name -> vector slots (several when unprefixed
    /// joins share a name).
    pub by_name: HashMap<String, Vec<usize>>,
    /// Entry name -> prefixed serving-key names it fills, in RonDB's three
    /// passes: by the key's own name, by its prefixed name, by the entry a
    /// required key or a join names.
    pub fill_passes: [HashMap<String, Vec<String>>; 3],
    /// The feature stores whose data the view serves (a key needs each).
    pub stores: Vec<String>,
    /// A spine group (an on-demand group with no online table) is part of
    /// the view: its features come from the entries only, and a vector is
    /// never complete.
    pub has_spine: bool,
}

impl HopsView {
    /// The online tables the view reads, as (database, table).
    pub fn tables(&self) -> impl Iterator<Item = (&str, &str)> {
        self.groups.iter().filter_map(|g| g.table.as_ref()).map(|t| {
            let def = t.table.def();
            (def.database.as_str(), def.name.as_str())
        })
    }

    /// The view's invariants: every slot a group or a name points at is a
    /// feature, a feature points at an existing group, and a group's read
    /// columns, slots and Avro types line up.
    fn check(&self) {
        let features = self.features.len();
        assert!(self.features.iter().all(|f| f.group.is_none_or(|g| g < self.groups.len())));
        assert!(self.by_name.values().flatten().all(|&slot| slot < features));
        for group in &self.groups {
            assert_eq!(group.slots.len(), group.columns.len(), "a read column per slot");
            assert_eq!(group.slots.len(), group.avro.len(), "an Avro type (or none) per read column");
            assert!(group.slots.iter().all(|&slot| slot < features));
            assert_eq!(group.table.is_some(), group.projection.is_some(), "a table is read with a projection");
        }
    }
}

fn fs_error(code: u16, message: impl Into<String>) -> HttpError {
    // RonDB answers every metadata failure with 400, whatever its code.
    HttpError { status: 400, message: message.into(), code: Some(code) }
}

fn read_failed(code: u16, e: latsdb_types::DbError) -> HttpError {
    HttpError { status: 500, message: e.message, code: Some(code) }
}

/// A row of `training_dataset_feature`, with its group's facts.
struct FeatureRow {
    name: String,
    type_name: String,
    idx: i64,
    label: bool,
    prefix: String,
    join_index: i64,
    group: GroupFacts,
}

#[derive(Clone)]
struct GroupFacts {
    id: i64,
    name: String,
    version: i64,
    store: String,
    /// The project of the group's feature store (its schemas' owner).
    project_id: i64,
    spine: bool,
}

/// What Hopsworks' metadata says of a feature view.
pub enum Loaded {
    View(Arc<HopsView>),
    /// The metadata has no feature store of that name.
    NoStore,
    /// No Hopsworks metadata is loaded.
    NoSchema,
}

/// Loads feature view `name` version `version` of feature store `store`.
pub async fn load(rest: &Rest, store: &str, name: &str, version: u32) -> Result<Loaded, HttpError> {
    let Some(stores) = table(&rest.client, "feature_store").await.map_err(|e| read_failed(code::FS_READ_FAIL, e))?
    else {
        return Ok(Loaded::NoSchema);
    };
    let found = rows_where(&rest.client, &stores, &[("name", Value::Str(store.into()))], &["id"])
        .await
        .map_err(|e| read_failed(code::FS_READ_FAIL, e))?;
    let Some(store_row) = found.first() else {
        return Ok(Loaded::NoStore);
    };
    let store_id = int(store_row, "id").map_err(|e| read_failed(code::FS_READ_FAIL, e))?;
    let view_id = view_id(rest, store_id, name, version).await?;
    let rows = feature_rows(rest, view_id).await?;
    let keys = serving_keys(rest, view_id).await?;
    Ok(Loaded::View(Arc::new(build(rest, store, rows, keys).await?)))
}

async fn view_id(rest: &Rest, store_id: i64, name: &str, version: u32) -> Result<i64, HttpError> {
    let fail = |e| read_failed(code::FEATURE_VIEW_READ_FAIL, e);
    let views = required_table(&rest.client, "feature_view").await.map_err(fail)?;
    let equal = [
        ("feature_store_id", Value::Int(store_id)),
        ("name", Value::Str(name.into())),
        ("version", Value::Int(version as i64)),
    ];
    let found = rows_where(&rest.client, &views, &equal, &["id"]).await.map_err(fail)?;
    match found.first() {
        Some(row) => int(row, "id").map_err(fail),
        None => Err(fs_error(code::FEATURE_VIEW_NOT_EXIST, "")),
    }
}

/// The view's features in `idx` order, each with its join and group.
async fn feature_rows(rest: &Rest, view_id: i64) -> Result<Vec<FeatureRow>, HttpError> {
    let deleted = || fs_error(code::FEATURE_GROUP_NOT_EXIST, "Feature view may contain deleted feature groups.");
    let fail = |e| read_failed(code::TD_JOIN_READ_FAIL, e);
    let joins_table = required_table(&rest.client, "training_dataset_join").await.map_err(fail)?;
    let view = [("feature_view_id", Value::Int(view_id))];
    let mut joins = HashMap::new();
    for row in rows_where(&rest.client, &joins_table, &view, &["id", "prefix", "idx"]).await.map_err(fail)? {
        joins.insert(
            int(&row, "id").map_err(fail)?,
            (text(&row, "prefix").map_err(fail)?, int(&row, "idx").map_err(fail)?),
        );
    }
    if joins.is_empty() {
        return Err(deleted());
    }
    let fail = |e| read_failed(code::TD_FEATURE_READ_FAIL, e);
    let features_table = required_table(&rest.client, "training_dataset_feature").await.map_err(fail)?;
    let columns = ["feature_group", "name", "type", "td_join", "idx", "label"];
    let rows = rows_where(&rest.client, &features_table, &view, &columns).await.map_err(fail)?;
    if rows.is_empty() {
        return Err(deleted());
    }
    let mut groups: HashMap<i64, GroupFacts> = HashMap::new();
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let name = text(&row, "name").map_err(fail)?;
        let group_id = int(&row, "feature_group").map_err(fail)?;
        if group_id == 0 {
            return Err(fs_error(
                code::FEATURE_GROUP_NOT_EXIST,
                format!("Cannot get the feature group of feature `{name}`. Check if the feature group still exists."),
            ));
        }
        let group = match groups.get(&group_id) {
            Some(g) => g.clone(),
            None => {
                let g = group_facts(rest, group_id).await?;
                groups.insert(group_id, g.clone());
                g
            }
        };
        let (prefix, join_index) = joins.get(&int(&row, "td_join").map_err(fail)?).cloned().unwrap_or_default();
        out.push(FeatureRow {
            name,
            type_name: text(&row, "type").map_err(fail)?,
            idx: int(&row, "idx").map_err(fail)?,
            label: int(&row, "label").map_err(fail)? == 1,
            prefix,
            join_index,
            group,
        });
    }
    out.sort_by_key(|f| f.idx);
    Ok(out)
}

/// A feature group's name, version, store and whether it is a spine.
async fn group_facts(rest: &Rest, id: i64) -> Result<GroupFacts, HttpError> {
    let fail = |e| read_failed(code::FG_READ_FAIL, e);
    let groups = required_table(&rest.client, "feature_group").await.map_err(fail)?;
    let columns = ["name", "version", "feature_store_id", "on_demand_feature_group_id"];
    let found = rows_where(&rest.client, &groups, &[("id", Value::Int(id))], &columns).await.map_err(fail)?;
    let Some(row) = found.first() else {
        return Err(fs_error(code::FEATURE_GROUP_NOT_EXIST, ""));
    };
    let stores = required_table(&rest.client, "feature_store").await.map_err(fail)?;
    let store_id = int(row, "feature_store_id").map_err(fail)?;
    let store = rows_where(&rest.client, &stores, &[("id", Value::Int(store_id))], &["name", "project_id"])
        .await
        .map_err(fail)?;
    let project_id = store.first().map(|r| int(r, "project_id")).transpose().map_err(fail)?.unwrap_or_default();
    let store = store.first().map(|r| text(r, "name")).transpose().map_err(fail)?.unwrap_or_default();
    let on_demand = int(row, "on_demand_feature_group_id").map_err(fail)?;
    let spine = if on_demand == 0 {
        false
    } else {
        let table = required_table(&rest.client, "on_demand_feature_group").await.map_err(fail)?;
        let found =
            rows_where(&rest.client, &table, &[("id", Value::Int(on_demand))], &["spine"]).await.map_err(fail)?;
        found.first().map(|r| int(r, "spine")).transpose().map_err(fail)? == Some(1)
    };
    Ok(GroupFacts {
        id,
        name: text(row, "name").map_err(fail)?,
        version: int(row, "version").map_err(fail)?,
        store,
        project_id,
        spine,
    })
}

/// A `serving_key` row.
struct KeyRow {
    group_id: i64,
    join_index: i64,
    feature_name: String,
    prefix: String,
    required: bool,
    join_on: String,
}

async fn serving_keys(rest: &Rest, view_id: i64) -> Result<Vec<KeyRow>, HttpError> {
    let fail = |e| read_failed(code::FEATURE_VIEW_READ_FAIL, e);
    let table = required_table(&rest.client, "serving_key").await.map_err(fail)?;
    let columns = ["id", "feature_group_id", "feature_name", "prefix", "required", "join_on", "join_index"];
    let mut rows =
        rows_where(&rest.client, &table, &[("feature_view_id", Value::Int(view_id))], &columns).await.map_err(fail)?;
    // In the order Hopsworks wrote them, which is the serving keys' order.
    rows.sort_by_key(|row| int(row, "id").unwrap_or(0));
    if rows.is_empty() {
        return Err(fs_error(code::FEATURE_VIEW_READ_FAIL, "Failed to read serving keys."));
    }
    rows.iter()
        .map(|row| {
            Ok(KeyRow {
                group_id: int(row, "feature_group_id")?,
                join_index: int(row, "join_index")?,
                feature_name: text(row, "feature_name")?,
                prefix: text(row, "prefix")?,
                required: int(row, "required")? == 1,
                join_on: text(row, "join_on")?,
            })
        })
        .collect::<latsdb_types::Result<Vec<_>>>()
        .map_err(fail)
}

/// Groups the features by joined feature group and derives the maps that
/// fill a vector from a request's entries.
async fn build(rest: &Rest, store: &str, rows: Vec<FeatureRow>, keys: Vec<KeyRow>) -> Result<HopsView, HttpError> {
    let mut view = HopsView {
        features: Vec::new(),
        groups: Vec::new(),
        valid_keys: Vec::new(),
        by_name: HashMap::new(),
        fill_passes: Default::default(),
        stores: vec![store.to_string()],
        has_spine: false,
    };
    // (join index, group id) -> group slot, with its features' columns.
    let mut joined: BTreeMap<(i64, i64), usize> = BTreeMap::new();
    let mut read_columns: Vec<Vec<(String, usize)>> = Vec::new();
    let mut facts: Vec<GroupFacts> = Vec::new();
    let is_key = |join: i64, column: &str| keys.iter().any(|k| k.join_index == join && k.feature_name == column);
    for row in rows.into_iter().filter(|r| !r.label) {
        let slot = view.features.len();
        let name = format!("{}{}", row.prefix, row.name);
        view.by_name.entry(name.clone()).or_default().push(slot);
        let group = if row.group.spine {
            view.has_spine = true;
            None
        } else {
            let next = facts.len();
            let g = *joined.entry((row.join_index, row.group.id)).or_insert(next);
            if g == next {
                facts.push(row.group.clone());
                read_columns.push(Vec::new());
            }
            if !is_key(row.join_index, &row.name) {
                read_columns[g].push((row.name.clone(), slot));
            }
            Some(g)
        };
        if !view.stores.contains(&row.group.store) && !row.group.store.is_empty() {
            view.stores.push(row.group.store.clone());
        }
        view.features.push(Feature { name, type_name: row.type_name, group });
    }
    let mut order: Vec<(i64, i64)> = vec![(0, 0); joined.len()];
    for (&join, &g) in &joined {
        order[g] = join;
    }
    for (g, &(join_index, group_id)) in order.iter().enumerate() {
        let group_keys: Vec<ServingKey> = keys
            .iter()
            .filter(|k| k.join_index == join_index && k.group_id == group_id)
            .map(|k| ServingKey {
                column: k.feature_name.clone(),
                required_entry: if k.required { format!("{}{}", k.prefix, k.feature_name) } else { k.join_on.clone() },
                prefixed: format!("{}{}", k.prefix, k.feature_name),
            })
            .collect();
        let group = resolve_group(rest, &facts[g], group_keys, &read_columns[g], &view.features).await?;
        view.groups.push(group);
    }
    derive_key_maps(&mut view, &keys);
    view.check();
    Ok(view)
}

/// Resolves a joined group's online table and the columns its read fetches.
async fn resolve_group(
    rest: &Rest,
    facts: &GroupFacts,
    keys: Vec<ServingKey>,
    read: &[(String, usize)],
    features: &[Feature],
) -> Result<Group, HttpError> {
    let table_name = format!("{}_{}", facts.name, facts.version);
    let table = match rest.table(&facts.store, &table_name).await {
        Ok(table) => Some(table),
        Err(e) if e.status == 404 => None,
        Err(e) => return Err(HttpError { status: e.status, message: e.message, code: Some(code::FG_READ_FAIL) }),
    };
    let mut group = Group {
        feature_group_id: facts.id,
        table,
        keys,
        projection: None,
        slots: Vec::new(),
        columns: Vec::new(),
        avro: Vec::new(),
    };
    let Some(table) = &group.table else {
        return Ok(group);
    };
    let def = table.table.def();
    let mut names = Vec::new();
    // The group's Avro schema, read at its first complex feature.
    let mut schema: Option<String> = None;
    for (column, slot) in read {
        // A feature the table lacks reads as null, as a missing column of
        // an older online table does in RonDB.
        if let Ok(id) = def.column_id(column) {
            names.push(def.columns[id as usize].name.as_str());
            group.slots.push(*slot);
            group.columns.push(def.columns[id as usize].clone());
            group.avro.push(match is_complex(&features[*slot].type_name) {
                true => Some(Arc::new(avro_type(rest, facts, &mut schema, column).await?)),
                false => None,
            });
        }
    }
    debug_assert!(group.slots.iter().all(|&s| s < features.len()));
    // A group whose features are all serving keys is still read (a missing
    // row makes the vector MISSING): fetch one key column for no slot.
    if names.is_empty() {
        names.push(def.columns[def.primary_key[0] as usize].name.as_str());
    }
    let projection = Projection::new(&table.table, &names).map_err(|e| HttpError {
        status: 500,
        message: e.message,
        code: Some(code::FG_READ_FAIL),
    })?;
    group.projection = Some(projection);
    Ok(group)
}

/// Whether a Hopsworks type is complex (stored as Avro): `array<..>`,
/// `struct<..>`, `map<..>`, `uniontype<..>`.
fn is_complex(type_name: &str) -> bool {
    let outer = type_name.split('<').next().unwrap_or_default();
    ["array", "struct", "map", "uniontype"].iter().any(|k| outer.trim().eq_ignore_ascii_case(k))
}

/// The Avro type of complex feature `column` of a group, from the newest
/// version of the group's subject (`<name>_<version>`) in its project's
/// schema registry (`subjects`, `schemas`); `schema` caches the schema text.
async fn avro_type(
    rest: &Rest,
    facts: &GroupFacts,
    schema: &mut Option<String>,
    column: &str,
) -> Result<Avro, HttpError> {
    let fail = |message: String| HttpError { status: 500, message, code: Some(code::FEATURE_VIEW_READ_FAIL) };
    if schema.is_none() {
        let db = |e: latsdb_types::DbError| fail(e.message);
        let subjects = required_table(&rest.client, "subjects").await.map_err(db)?;
        let subject = format!("{}_{}", facts.name, facts.version);
        let equal = [("subject", Value::Str(subject.clone())), ("project_id", Value::Int(facts.project_id))];
        let rows = rows_where(&rest.client, &subjects, &equal, &["version", "schema_id"]).await.map_err(db)?;
        let newest = rows.iter().max_by_key(|r| int(r, "version").unwrap_or(i64::MIN));
        let Some(newest) = newest else {
            return Err(fail(format!("no Avro schema is registered for feature group {subject}")));
        };
        let schema_id = int(newest, "schema_id").map_err(db)?;
        let schemas = required_table(&rest.client, "schemas").await.map_err(db)?;
        let found =
            rows_where(&rest.client, &schemas, &[("id", Value::Int(schema_id))], &["schema"]).await.map_err(db)?;
        let text = found.first().map(|r| text(r, "schema")).transpose().map_err(db)?;
        *schema = Some(text.ok_or_else(|| fail(format!("Avro schema {schema_id} of {subject} does not exist")))?);
    }
    avro::field_type(schema.as_deref().unwrap_or_default(), column).map_err(fail)
}

/// RonDB's maps from entry names to the serving keys they fill, and the
/// entry names a request may give.
fn derive_key_maps(view: &mut HopsView, keys: &[KeyRow]) {
    for key in keys {
        let prefixed = format!("{}{}", key.prefix, key.feature_name);
        for name in [&prefixed, &key.feature_name] {
            if !view.valid_keys.contains(name) {
                view.valid_keys.push(name.clone());
            }
        }
        view.fill_passes[0].entry(key.feature_name.clone()).or_default().push(prefixed.clone());
        view.fill_passes[1].entry(prefixed.clone()).or_default().push(prefixed.clone());
        if key.required {
            view.fill_passes[2].entry(prefixed.clone()).or_default().push(prefixed.clone());
        } else if !key.join_on.is_empty() {
            view.fill_passes[2].entry(key.join_on.clone()).or_default().push(prefixed);
        }
    }
}
