//! Foreign keys, as the SQL node enforces them inside the statement's
//! transaction (InnoDB's and NDB's semantics, checked at each statement):
//!
//! - A row written into a child table must find its parent row, read under
//!   a shared lock that holds until commit, so the parent cannot go away
//!   meanwhile (1452 otherwise). A reference with a NULL column is not
//!   checked (MySQL's MATCH SIMPLE).
//! - A parent row that is deleted, or whose referenced columns change,
//!   applies each referencing key's action to the child rows, read under
//!   exclusive locks: RESTRICT and NO ACTION fail the statement (1451),
//!   CASCADE deletes them or gives them the new values, SET NULL empties
//!   their referencing columns; and so on down the chain, at most
//!   `MAX_DEPTH` tables deep.
//!
//! Every read comes first and every write after it, so a statement that
//! fails here has written nothing. `SET foreign_key_checks = 0` turns all
//! of it off, as in MySQL. Writes through the REST node and the native
//! client are not checked (limitations.md).

use crate::error::{SqlError, SqlResult};
use crate::exec::{run_select, Ctx};
use crate::plan::{plan_select, Catalog, SelectPlan, SourceKind};
use latsdb_client::{Client, Expr, Op, Table};
use latsdb_types::schema::{ColumnId, ForeignKeyDef, ForeignKeyRef, ReferenceAction, TableDef};
use latsdb_types::Value;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// How many tables deep a cascade may go (InnoDB's limit).
const MAX_DEPTH: usize = 15;

pub const ER_ROW_IS_REFERENCED: u16 = 1451;
pub const ER_NO_REFERENCED_ROW: u16 = 1452;
const ER_FK_DEPTH_EXCEEDED: u16 = 3008;

impl Ctx<'_> {
    /// The same transaction with other statement parameters, for a
    /// statement the SQL node runs on its own (a foreign key's lookups).
    pub(crate) fn with_params<'b>(&'b mut self, params: &'b [Value]) -> Ctx<'b> {
        Ctx {
            client: self.client,
            tx: self.tx.as_deref_mut(),
            env: crate::eval::Env { params, session: self.env.session, strict_numbers: self.env.strict_numbers },
            written: self.written.as_deref_mut(),
            count_matched: self.count_matched,
            undo: self.undo.as_deref_mut(),
            foreign_key_checks: self.foreign_key_checks,
        }
    }
}

/// Resolves stored tables for the SQL node's own lookups.
struct StoredTables<'a>(&'a Client);

impl Catalog for StoredTables<'_> {
    async fn resolve(&self, db: Option<&str>, name: &str) -> SqlResult<(String, SourceKind)> {
        let db = db.ok_or_else(|| SqlError::general("internal: a foreign key lookup without a database"))?;
        Ok((db.to_string(), SourceKind::Stored(self.0.table(db, name).await?)))
    }
}

fn quoted(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

fn quoted_list<'a>(names: impl Iterator<Item = &'a str>) -> String {
    names.map(quoted).collect::<Vec<_>>().join(", ")
}

/// `CONSTRAINT ... FOREIGN KEY (...) REFERENCES ... (...)` with its
/// actions other than RESTRICT, as SHOW CREATE TABLE and the errors show it;
/// the parent's database is named when it is not the child's.
pub fn constraint_text(child: &TableDef, key: &ForeignKeyDef) -> String {
    let columns = quoted_list(key.columns.iter().map(|&c| child.columns[c as usize].name.as_str()));
    let parent = if key.parent_database == child.database {
        quoted(&key.parent_table)
    } else {
        format!("{}.{}", quoted(&key.parent_database), quoted(&key.parent_table))
    };
    let mut text = format!(
        "CONSTRAINT {} FOREIGN KEY ({columns}) REFERENCES {parent} ({})",
        quoted(&key.name),
        quoted_list(key.parent_columns.iter().map(String::as_str))
    );
    for (event, action) in [("DELETE", key.on_delete), ("UPDATE", key.on_update)] {
        if action != ReferenceAction::Restrict {
            text.push_str(&format!(" ON {event} {}", action.sql()));
        }
    }
    text
}

fn fails(code: u16, what: &str, child: &TableDef, key: &ForeignKeyDef) -> SqlError {
    SqlError::new(
        code,
        "23000",
        format!(
            "Cannot {what}: a foreign key constraint fails ({}.{}, {})",
            quoted(&child.database),
            quoted(&child.name),
            constraint_text(child, key)
        ),
    )
}

/// A row's values in `columns`, or None when one is NULL (no reference).
fn values_of(row: &[Value], columns: &[ColumnId]) -> Option<Vec<Value>> {
    let values: Vec<Value> = columns.iter().map(|&c| row[c as usize].clone()).collect();
    (!values.iter().any(Value::is_null)).then_some(values)
}

/// Values as `columns` of `def` compare them ('a' and 'A ' are one value
/// of a case-insensitive column).
fn weighed(def: &TableDef, columns: &[ColumnId], values: &[Value]) -> Vec<Value> {
    values
        .iter()
        .zip(columns)
        .map(|(v, &c)| crate::exec::weight(v, def.columns[c as usize].collation).into_owned())
        .collect()
}

/// The column ids of `names` in `def`; None when one is missing.
fn column_ids(def: &TableDef, names: &[String]) -> Option<Vec<ColumnId>> {
    names.iter().map(|n| def.column_id(n).ok().filter(|&c| def.is_visible(c))).collect()
}

/// Plans of the statement's lookups, by table, columns and lock.
#[derive(Default)]
pub(crate) struct Lookups {
    plans: HashMap<(u32, u32, Vec<ColumnId>, bool), Arc<SelectPlan>>,
}

impl Lookups {
    /// The rows of `table` whose `columns` equal `values`, every column
    /// (hidden ones too) in the order of its ids; under an exclusive lock,
    /// or a shared one for a parent's existence.
    async fn rows(
        &mut self,
        table: &Arc<Table>,
        columns: &[ColumnId],
        values: &[Value],
        exclusive: bool,
        ctx: &mut Ctx<'_>,
    ) -> SqlResult<Vec<Vec<Value>>> {
        let def = table.def();
        let id = (def.id, def.version, columns.to_vec(), exclusive);
        let plan = match self.plans.get(&id) {
            Some(p) => p.clone(),
            None => {
                let plan = Arc::new(plan_lookup(ctx.client, def, columns, exclusive).await?);
                self.plans.insert(id, plan.clone());
                plan
            }
        };
        let mut own = ctx.with_params(values);
        run_select(&plan, &mut own).await
    }
}

/// `SELECT <every column> FROM t WHERE c1 = ?0 AND ... FOR UPDATE` (or
/// LOCK IN SHARE MODE), planned as any statement is.
async fn plan_lookup(client: &Client, def: &TableDef, columns: &[ColumnId], exclusive: bool) -> SqlResult<SelectPlan> {
    let every: Vec<String> =
        def.columns.iter().map(|c| if c.is_dropped() { "NULL".to_string() } else { quoted(&c.name) }).collect();
    let conditions: Vec<String> =
        columns.iter().map(|&c| format!("{} = ?", quoted(&def.columns[c as usize].name))).collect();
    let sql = format!(
        "SELECT {} FROM {}.{} WHERE {} {}",
        every.join(", "),
        quoted(&def.database),
        quoted(&def.name),
        conditions.join(" AND "),
        if exclusive { "FOR UPDATE" } else { "LOCK IN SHARE MODE" }
    );
    let parsed = crate::parse::parse(&sql)?;
    let Some(sqlparser::ast::Statement::Query(q)) = parsed.statements.first() else {
        return Err(SqlError::general("internal: a foreign key lookup did not parse as a query"));
    };
    plan_select(&StoredTables(client), q).await
}

/// The parent table a key names, and its referenced columns; None when
/// either is missing (then no parent row exists).
/// A table from the cache, or (`fresh`) as the management server has it
/// now; None when there is none.
async fn stored_table(client: &Client, database: &str, name: &str, fresh: bool) -> SqlResult<Option<Arc<Table>>> {
    let found = if fresh { client.refresh_table(database, name).await } else { client.table(database, name).await };
    match found {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.code == latsdb_types::ErrorCode::UnknownTable => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The parent must list the key among its references: a parent that does
/// not is read again, and if it still does not, the management server has
/// not linked the key yet, and the statement is refused as planned against
/// a changed table (1412, which an autocommit statement retries once): a
/// writer of the parent could otherwise miss the new child row.
async fn parent_of(
    client: &Client,
    child: &TableDef,
    key: &ForeignKeyDef,
) -> SqlResult<Option<(Arc<Table>, Vec<ColumnId>)>> {
    let listed = |p: &TableDef| {
        p.referenced_by.iter().any(|r| r.database == child.database && r.table == child.name && r.name == key.name)
    };
    // A hidden table (of a unique index, a copy) is never a parent.
    if latsdb_types::schema::is_hidden_name(&key.parent_table) {
        return Ok(None);
    }
    for fresh in [false, true] {
        let Some(parent) = stored_table(client, &key.parent_database, &key.parent_table, fresh).await? else {
            continue;
        };
        let Some(ids) = column_ids(parent.def(), &key.parent_columns) else { continue };
        if listed(parent.def()) {
            return Ok(Some((parent, ids)));
        }
        if fresh {
            return Err(SqlError::new(
                crate::error::ER_TABLE_DEF_CHANGED,
                "HY000",
                format!(
                    "foreign key '{}' of {} is not linked to its parent {}.{} yet; retry the statement",
                    key.name,
                    child.qualified_name(),
                    key.parent_database,
                    key.parent_table
                ),
            ));
        }
    }
    Ok(None)
}

/// Fails with 1452 unless every row of `rows` (whole rows of `table`, as
/// written) finds the parent rows its keys reference; the parents are
/// locked shared. In a table that references itself a row may reference
/// itself or a row written before it in the same statement, as InnoDB
/// checks row by row.
pub(crate) async fn check_parents(
    table: &Arc<Table>,
    rows: &[Vec<Value>],
    lookups: &mut Lookups,
    ctx: &mut Ctx<'_>,
) -> SqlResult<()> {
    let def = table.def();
    for key in &def.foreign_keys {
        if rows.iter().all(|r| values_of(r, &key.columns).is_none()) {
            continue;
        }
        let Some((parent, columns)) = parent_of(ctx.client, def, key).await? else {
            return Err(fails(ER_NO_REFERENCED_ROW, "add or update a child row", def, key));
        };
        let own = parent.def().id == def.id;
        // Values found already, as the parent's columns compare them.
        let mut found: Vec<Vec<Value>> = Vec::new();
        for (i, row) in rows.iter().enumerate() {
            let Some(values) = values_of(row, &key.columns) else { continue };
            let wanted = weighed(parent.def(), &columns, &values);
            if found.contains(&wanted) {
                continue;
            }
            let earlier = own
                && rows[..=i]
                    .iter()
                    .any(|r| values_of(r, &columns).is_some_and(|v| weighed(def, &columns, &v) == wanted));
            if !earlier && lookups.rows(&parent, &columns, &values, false, ctx).await?.is_empty() {
                return Err(fails(ER_NO_REFERENCED_ROW, "add or update a child row", def, key));
            }
            found.push(wanted);
        }
    }
    Ok(())
}

/// What a statement does to parent rows: deletes them, or gives them new
/// values (`new`, one per old row).
pub(crate) struct ParentChange<'a> {
    pub old: &'a [Vec<Value>],
    pub new: Option<&'a [Vec<Value>]>,
}

/// What the statement does to a row, by table and encoded key.
enum Pending {
    /// One of the statement's own rows: deleted (None) or its new values.
    Statement(Option<Vec<Value>>),
    Deleted,
    /// A child row changed by keys' actions: its new values.
    Updated(Vec<Value>),
}

type Rows = Vec<Vec<Value>>;

/// A row by its table's id and its encoded primary key.
type RowId = (u32, Vec<u8>);

/// A touched row: its table, its values as read, what happens to it.
type Touched = (Arc<Table>, Vec<Value>, Pending);

/// The rows the statement and the keys' actions write, in the order first
/// touched: each is written once, with every action's change merged.
#[derive(Default)]
struct Effects {
    rows: HashMap<RowId, Touched>,
    order: Vec<RowId>,
}

impl Effects {
    fn note(&mut self, table: &Arc<Table>, original: Vec<Value>, pending: Pending) -> SqlResult<()> {
        let id = (table.def().id, table.encode_key(&crate::dml::key_of(table.def(), &original))?);
        debug_assert_eq!(original.len(), table.def().columns.len(), "a touched row is a whole row");
        if !self.rows.contains_key(&id) {
            self.order.push(id.clone());
        }
        self.rows.insert(id, (table.clone(), original, pending));
        debug_assert_eq!(self.rows.len(), self.order.len(), "every touched row is in the order once");
        Ok(())
    }

    /// The writes of the rows the actions changed (the statement writes
    /// its own rows).
    fn writes(self) -> SqlResult<Vec<Op>> {
        let Effects { mut rows, order } = self;
        let mut ops = Vec::new();
        for id in order {
            let Some((table, original, pending)) = rows.remove(&id) else { continue };
            let key = crate::dml::key_of(table.def(), &original);
            match pending {
                Pending::Statement(_) => {}
                Pending::Deleted => ops.push(Op::delete(&table, &key)?),
                Pending::Updated(new) => {
                    let set: Vec<(ColumnId, Expr)> = (0..table.def().columns.len())
                        .filter(|&c| new[c] != original[c])
                        .map(|c| (c as ColumnId, Expr::Const(new[c].clone())))
                        .collect();
                    if !set.is_empty() {
                        ops.push(Op::update_expr(&table, &key, set)?);
                    }
                }
            }
        }
        Ok(ops)
    }
}

/// The writes the referencing keys' actions make in child tables when
/// `table`'s rows change as `change` says, found (under exclusive locks)
/// before anything is written; fails with 1451 where an action is
/// RESTRICT or NO ACTION. A row is written once, with the changes of all
/// the keys that reach it.
pub(crate) async fn child_writes(
    table: &Arc<Table>,
    change: ParentChange<'_>,
    lookups: &mut Lookups,
    ctx: &mut Ctx<'_>,
) -> SqlResult<Vec<Op>> {
    let mut effects = Effects::default();
    for (i, row) in change.old.iter().enumerate() {
        let after = change.new.map(|n| n[i].clone());
        effects.note(table, row[..table.def().columns.len()].to_vec(), Pending::Statement(after))?;
    }
    Box::pin(cascade(table, change, 0, &mut effects, lookups, ctx)).await?;
    // The transaction's scans must see the rows it writes.
    for (table, original, pending) in effects.rows.values() {
        if !matches!(pending, Pending::Statement(_)) {
            ctx.note_write(table, &crate::dml::key_of(table.def(), original));
        }
    }
    effects.writes()
}

/// The child table and key a reference names, read again once when the
/// cached definition does not have the key (it may be older than the
/// parent's list of references).
async fn referencing_key(client: &Client, reference: &ForeignKeyRef) -> SqlResult<Option<(Arc<Table>, ForeignKeyDef)>> {
    for fresh in [false, true] {
        let Some(child) = stored_table(client, &reference.database, &reference.table, fresh).await? else {
            continue;
        };
        if let Some(key) = child.def().foreign_keys.iter().find(|k| k.name == reference.name).cloned() {
            return Ok(Some((child, key)));
        }
    }
    Ok(None)
}

async fn cascade(
    table: &Arc<Table>,
    change: ParentChange<'_>,
    depth: usize,
    effects: &mut Effects,
    lookups: &mut Lookups,
    ctx: &mut Ctx<'_>,
) -> SqlResult<()> {
    let def = table.def();
    for reference in &def.referenced_by {
        let Some((child, key)) = referencing_key(ctx.client, reference).await? else { continue };
        let Some(parent_columns) = column_ids(def, &key.parent_columns) else { continue };
        for (i, old) in change.old.iter().enumerate() {
            let Some(values) = values_of(old, &parent_columns) else { continue };
            let new_values = change.new.map(|n| n[i].clone());
            let referenced = weighed(def, &parent_columns, &values);
            if let Some(n) = &new_values {
                if values_of(n, &parent_columns)
                    .is_some_and(|after| weighed(def, &parent_columns, &after) == referenced)
                {
                    continue;
                }
            }
            let found = lookups.rows(&child, &key.columns, &values, true, ctx).await?;
            let (before, after) =
                act_on_children(&child, &key, found, &referenced, new_values.as_deref(), &parent_columns, effects)?;
            if before.is_empty() {
                continue;
            }
            if depth + 1 > MAX_DEPTH {
                return Err(SqlError::new(
                    ER_FK_DEPTH_EXCEEDED,
                    "HY000",
                    format!("Foreign key cascade delete/update exceeds max depth of {MAX_DEPTH}."),
                ));
            }
            let next = ParentChange { old: &before, new: after.as_deref() };
            Box::pin(cascade(&child, next, depth + 1, effects, lookups, ctx)).await?;
        }
    }
    Ok(())
}

/// Applies a key's action to the child rows found referencing `referenced`
/// (a parent row's values, weighed), on top of what the statement and
/// earlier actions do to them. Returns the rows it changed, before and
/// after (None: deleted), for the next level.
fn act_on_children(
    child: &Arc<Table>,
    key: &ForeignKeyDef,
    found: Vec<Vec<Value>>,
    referenced: &[Value],
    parent_new: Option<&[Value]>,
    parent_columns: &[ColumnId],
    effects: &mut Effects,
) -> SqlResult<(Vec<Vec<Value>>, Option<Rows>)> {
    let cdef = child.def();
    let width = cdef.columns.len();
    let action = if parent_new.is_some() { key.on_update } else { key.on_delete };
    let still_refers =
        |row: &[Value]| values_of(row, &key.columns).is_some_and(|v| weighed(cdef, &key.columns, &v) == referenced);
    let (mut before, mut after) = (Vec::new(), Vec::new());
    for row in found {
        let original = row
            .get(..width)
            .ok_or_else(|| SqlError::general("internal: a foreign key lookup returned a row narrower than its table"))?
            .to_vec();
        let id = (cdef.id, child.encode_key(&crate::dml::key_of(cdef, &original))?);
        let current = match effects.rows.get(&id).map(|(_, _, p)| p) {
            Some(Pending::Deleted | Pending::Statement(None)) => continue,
            // The statement's own row keeps its reference: InnoDB refuses
            // to cascade into the rows of the statement that changes them.
            Some(Pending::Statement(Some(new))) => {
                if still_refers(new) {
                    return Err(fails(ER_ROW_IS_REFERENCED, "delete or update a parent row", cdef, key));
                }
                continue;
            }
            // A second key's change to a row another key changed: its own
            // children were found by the first change's values, so a
            // change that goes on down the chain is refused.
            Some(Pending::Updated(new)) if !cdef.referenced_by.is_empty() => {
                if still_refers(new) {
                    return Err(SqlError::unsupported(format!(
                        "a row of {} is changed by two foreign keys whose changes cascade further; latsdb does not merge them",
                        cdef.qualified_name()
                    )));
                }
                continue;
            }
            Some(Pending::Updated(new)) => new.clone(),
            None => original.clone(),
        };
        if !still_refers(&current) {
            continue;
        }
        let changed = match action {
            ReferenceAction::Restrict | ReferenceAction::NoAction => {
                return Err(fails(ER_ROW_IS_REFERENCED, "delete or update a parent row", cdef, key))
            }
            ReferenceAction::Cascade if parent_new.is_none() => None,
            ReferenceAction::Cascade | ReferenceAction::SetNull => {
                Some(child_updated(child, key, &current, parent_columns, parent_new, action)?)
            }
        };
        let pending = match &changed {
            None => Pending::Deleted,
            Some(new) => Pending::Updated(new.clone()),
        };
        effects.note(child, original, pending)?;
        before.push(current);
        if let Some(new) = changed {
            after.push(new);
        }
    }
    // A delete cascades as deletes; SET NULL, and any update, change rows.
    let after = match (action, parent_new) {
        (ReferenceAction::Cascade, None) => None,
        _ => Some(after),
    };
    Ok((before, after))
}

/// A child row after CASCADE (the parent's new values) or SET NULL.
fn child_updated(
    child: &Table,
    key: &ForeignKeyDef,
    row: &[Value],
    parent_columns: &[ColumnId],
    parent_new: Option<&[Value]>,
    action: ReferenceAction,
) -> SqlResult<Vec<Value>> {
    let def = child.def();
    if key.columns.iter().any(|c| def.primary_key.contains(c)) {
        return Err(SqlError::unsupported(format!(
            "foreign key '{}' would change the primary key of rows of {}; latsdb does not cascade into a primary key",
            key.name,
            def.qualified_name()
        )));
    }
    let mut new = row.to_vec();
    for (i, &c) in key.columns.iter().enumerate() {
        new[c as usize] = match (action, parent_new) {
            (ReferenceAction::Cascade, Some(parent)) => {
                crate::eval::to_column(parent[parent_columns[i] as usize].clone(), &def.columns[c as usize])?
            }
            _ => Value::Null,
        };
    }
    debug_assert!(
        key.columns.iter().all(|&c| action == ReferenceAction::Cascade || new[c as usize].is_null()),
        "SET NULL left a referencing column set"
    );
    Ok(new)
}

/// Most tables a failed statement's retry reads again along foreign keys.
pub(crate) const MAX_RELATED: usize = 256;

/// The tables a write of `def` reads for its foreign keys: its parents
/// and its children.
pub(crate) fn related_tables(def: &TableDef) -> Vec<(String, String)> {
    let parents = def.foreign_keys.iter().map(|k| (k.parent_database.clone(), k.parent_table.clone()));
    let children = def.referenced_by.iter().map(|r| (r.database.clone(), r.table.clone()));
    let mut out: Vec<(String, String)> = parents.chain(children).collect();
    out.sort();
    out.dedup();
    out
}

/// Whether a statement writing `def` has foreign keys to look at.
pub(crate) fn involved(def: &TableDef, ctx: &Ctx<'_>) -> bool {
    ctx.foreign_key_checks && (!def.foreign_keys.is_empty() || !def.referenced_by.is_empty())
}

/// ALTER TABLE ... ADD FOREIGN KEY with checks on: every stored row of
/// `child` must find its parent (1452 otherwise). Both tables are read
/// whole, once: the parent's referenced values go into a set.
pub(crate) async fn check_stored_rows(client: &Client, child: &TableDef, key: &ForeignKeyDef) -> SqlResult<()> {
    let child_table = client.table(&child.database, &child.name).await?;
    let names: Vec<&str> = key.columns.iter().map(|&c| child.columns[c as usize].name.as_str()).collect();
    let rows = client.scan(&child_table, latsdb_client::Scan::all().columns(&names)).await?;
    let referencing: Vec<Vec<Value>> =
        rows.iter().map(|r| r.values()).filter(|v| !v.iter().any(Value::is_null)).collect();
    if referencing.is_empty() {
        return Ok(());
    }
    // The parent as it is now (the key's link gave it a new version).
    match client.refresh_table(&key.parent_database, &key.parent_table).await {
        Err(e) if e.code != latsdb_types::ErrorCode::UnknownTable => return Err(e.into()),
        _ => {}
    }
    let Some((parent, columns)) = parent_of(client, child, key).await? else {
        return Err(fails(ER_NO_REFERENCED_ROW, "add or update a child row", child, key));
    };
    let parent_def = parent.def();
    let parent_names: Vec<&str> = columns.iter().map(|&c| parent_def.columns[c as usize].name.as_str()).collect();
    // By text of the weighed values, as GROUP BY tells values apart.
    let text = |values: &[Value]| {
        let mut out = String::new();
        crate::exec::group_key(&weighed(parent_def, &columns, values), &mut out);
        out
    };
    let held: HashSet<String> = client
        .scan(&parent, latsdb_client::Scan::all().columns(&parent_names))
        .await?
        .iter()
        .map(|r| text(&r.values()))
        .collect();
    if referencing.iter().any(|v| !held.contains(&text(v))) {
        return Err(fails(ER_NO_REFERENCED_ROW, "add or update a child row", child, key));
    }
    Ok(())
}

/// REPLACE deletes the rows it replaces, and ON DUPLICATE KEY UPDATE may
/// change a key column: on a table that foreign keys reference, both would
/// need the keys' actions, which latsdb does not run for them yet.
pub(crate) fn refuse_parent_rewrites(
    def: &latsdb_types::schema::TableDef,
    conflict: &crate::dml::OnConflict,
) -> SqlResult<()> {
    if def.referenced_by.is_empty() {
        return Ok(());
    }
    let keyed = |c: &ColumnId| def.indexes.iter().any(|i| i.unique && i.columns.contains(c));
    let refused = match conflict {
        crate::dml::OnConflict::Replace => Some("REPLACE"),
        crate::dml::OnConflict::Update(sets) if sets.iter().any(|(c, _)| keyed(c)) => {
            Some("INSERT ... ON DUPLICATE KEY UPDATE of a primary-key or unique column")
        }
        _ => None,
    };
    match refused {
        Some(what) => Err(SqlError::unsupported(format!(
            "{what} into {}, which foreign keys reference, is not supported; use UPDATE or DELETE (or SET foreign_key_checks = 0)",
            def.qualified_name()
        ))),
        None => Ok(()),
    }
}

/// The rows of an INSERT whose references find their parents: all of them
/// or error 1452, except that INSERT IGNORE leaves a row out with a
/// warning, as MySQL does.
pub(crate) async fn rows_with_parents(
    table: &Arc<Table>,
    rows: Vec<Vec<Value>>,
    conflict: &crate::dml::OnConflict,
    warnings: &mut crate::dml::Warnings,
    ctx: &mut Ctx<'_>,
) -> SqlResult<Vec<Vec<Value>>> {
    let mut lookups = Lookups::default();
    if matches!(conflict, crate::dml::OnConflict::Update(_)) {
        // Checked once the updates are known (`run_insert`).
        return Ok(rows);
    }
    if !matches!(conflict, crate::dml::OnConflict::Ignore) {
        check_parents(table, &rows, &mut lookups, ctx).await?;
        return Ok(rows);
    }
    let mut kept = Vec::with_capacity(rows.len());
    for row in rows {
        match check_parents(table, std::slice::from_ref(&row), &mut lookups, ctx).await {
            Ok(()) => kept.push(row),
            Err(e) if e.code == ER_NO_REFERENCED_ROW => warnings.push((e.code, e.message)),
            Err(e) => return Err(e),
        }
    }
    Ok(kept)
}

/// Checks the foreign keys of a statement's changed rows and runs their
/// actions' writes in child tables (`foreign.rs`), before the statement
/// writes its own rows: every check reads first, so a refused statement
/// has written nothing.
pub(crate) async fn foreign_key_actions(
    table: &Arc<Table>,
    change: ParentChange<'_>,
    ctx: &mut Ctx<'_>,
) -> SqlResult<()> {
    let def = table.def();
    let mut lookups = Lookups::default();
    if let Some(new) = change.new {
        // Only references whose columns change are checked again.
        let moved: Vec<Vec<Value>> = change
            .old
            .iter()
            .zip(new)
            .filter(|(o, n)| def.foreign_keys.iter().flat_map(|k| &k.columns).any(|&c| o[c as usize] != n[c as usize]))
            .map(|(_, n)| n.clone())
            .collect();
        check_parents(table, &moved, &mut lookups, ctx).await?;
    }
    let writes = child_writes(table, change, &mut lookups, ctx).await?;
    ctx.run_ops(writes).await?;
    Ok(())
}
