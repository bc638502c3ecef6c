//! ALTER TABLE by copying the table (MySQL's ALGORITHM=COPY), for the
//! clauses that rewrite every row: a column's type, NOT NULL, collation,
//! storage or position (`FIRST`/`AFTER`), ADD COLUMN to a table with disk
//! columns, and DROP COLUMN of a column in an index of several columns
//! (the index is narrowed, as MySQL does).
//!
//! The statement's clauses are applied, in order, to a model of the table
//! (`Model`); the management server makes the copy with the resulting
//! definition and fences the table's writes (`MgmRequest::CopyTableBegin`);
//! the rows are read along the primary key in chunks, converted as
//! MySQL's strict mode converts them, and written into the copy; then the
//! copy takes the table's name. Any failure gives the copy up and leaves
//! the table as it was. Reads go on meanwhile; writes get 1205.

use super::{
    altered_default, check_in_place, column_spec, fill_value, index_column_names, index_name, shown_table_collation,
};
use crate::error::{SqlError, SqlResult};
use crate::session::{Response, Session};
use latsdb_client::{Op, Scan, Table};
use latsdb_types::schema::{ColumnChange, ColumnDef, ColumnId, IndexSpec, TableDef, TableSpec};
use latsdb_types::Value;
use sqlparser::ast::{self, AlterTableOperation as AOp, MySQLColumnPosition, TableConstraint};
use std::ops::Bound;
use std::sync::Arc;

/// Rows read and written per round of the copy.
const CHUNK_ROWS: usize = 1_000;

/// A column of the table as the statement leaves it.
struct Column {
    def: ColumnDef,
    /// The table's column whose values it takes (None: a new column, which
    /// takes its fill value).
    from: Option<ColumnId>,
}

/// The table as the statement's clauses leave it.
struct Model {
    columns: Vec<Column>,
    primary_key: Vec<String>,
    indexes: Vec<IndexSpec>,
    /// The auto-increment column's name, if the table has one.
    auto: Option<String>,
}

/// Whether an ALTER TABLE needs the table copied: some clause changes how
/// rows are stored. The in-place path answers every other statement.
pub(super) async fn needs_copy(session: &mut Session, def: &TableDef, ops: &[ast::AlterTableOperation]) -> bool {
    let auto = session.shared.auto_counter(def.id).await.ok().flatten().map(|(c, _)| c);
    ops.iter().any(|op| match op {
        AOp::AddColumn { column_position, column_def, .. } => {
            let disk = column_spec(session, column_def, shown_table_collation(def))
                .is_ok_and(|spec| spec.storage == Some(latsdb_types::schema::Storage::Disk));
            column_position.is_some() || def.has_disk_columns() || disk
        }
        AOp::ChangeColumn { old_name, new_name, data_type, options, column_position }
        | AOp::ModifyColumn { col_name: old_name @ new_name, data_type, options, column_position } => {
            let Ok(id) = def.column_id(&old_name.value) else { return false };
            let given = changed_column(new_name, data_type, options);
            let Ok(spec) = column_spec(session, &given, def.columns[id as usize].collation) else { return false };
            let is_auto = auto.as_deref().is_some_and(|a| a.eq_ignore_ascii_case(&old_name.value));
            column_position.is_some() || check_in_place(def, id as usize, &spec, is_auto).is_err()
        }
        AOp::DropColumn { column_names, .. } => column_names.iter().any(|n| {
            let Ok(id) = def.column_id(&n.value) else { return false };
            def.indexes.iter().skip(1).any(|i| i.columns.len() > 1 && i.columns.contains(&id))
        }),
        _ => false,
    })
}

/// Runs an ALTER TABLE by copying `table` (see the module's comment).
pub(super) async fn alter_by_copy(
    session: &mut Session,
    table: &Arc<Table>,
    ops: &[ast::AlterTableOperation],
    rename_to: Option<(String, String)>,
) -> SqlResult<Response> {
    let shared = session.shared.clone();
    let before = table.def();
    let auto = shared.auto_counter(before.id).await?;
    let mut model = Model::of(before, auto.as_ref().map(|(c, _)| c.clone()));
    for op in ops {
        model.apply(session, before, op)?;
    }
    let spec = TableSpec {
        database: before.database.clone(),
        name: before.name.clone(),
        columns: model.columns.iter().map(|c| c.def.clone()).collect(),
        primary_key: model.primary_key.clone(),
        partitions: before.partitions,
    };
    let kept_keys = model.kept_foreign_keys(before, ops)?;
    // An index the copy leaves out or narrows may not be one a key needs
    // (a key the statement drops needs none).
    let mut dropped = Vec::new();
    for index in before.indexes.iter().skip(1) {
        let source = |name: &String| model.columns.iter().find(|c| c.def.name.eq_ignore_ascii_case(name))?.from;
        let kept = model.indexes.iter().any(|i| {
            i.name.eq_ignore_ascii_case(&index.name)
                && i.columns.iter().map(source).collect::<Option<Vec<_>>>().as_deref() == Some(&index.columns[..])
        });
        if !kept {
            dropped.push(index.name.clone());
        }
    }
    let remaining = super::foreign_keys::without(before, &dropped, ops);
    super::foreign_keys::refuse_needed_indexes(&shared, &remaining, &dropped).await?;
    let client = &shared.client;
    let (old, copy) = client.copy_table_begin(table, spec, model.indexes.clone()).await?;
    let counter = auto.as_ref().map_or(0, |(_, next)| *next);
    let copied = match copy_and_count(&shared, &old, &copy, &model, counter).await {
        Ok(copied) => copied,
        Err(e) => {
            let _ = client.copy_table_abort(before.id).await;
            return Err(e);
        }
    };
    if let Err(e) = client.copy_table_finish(before.id).await {
        let _ = client.copy_table_abort(before.id).await;
        return Err(e.into());
    }
    shared.forget_auto_column(before.id).await?;
    settle_foreign_keys(session, before, kept_keys, ops).await?;
    let (database, name) = rename_to.clone().unwrap_or_else(|| (before.database.clone(), before.name.clone()));
    if rename_to.is_some() {
        client.rename_table(&before.database, &before.name, &database, &name).await?;
    }
    let renamed: Vec<(String, String)> = model
        .columns
        .iter()
        .filter_map(|c| c.from.map(|id| (before.columns[id as usize].name.clone(), c.def.name.clone())))
        .filter(|(old, new)| old != new)
        .collect();
    super::foreign_keys::repoint_children(&shared, before, (&database, &name), &renamed).await?;
    let info = format!("Records: {copied}  Duplicates: 0  Warnings: 0");
    Ok(Response::Ok { affected: copied, last_insert_id: 0, info })
}

/// The copied table's foreign keys: the ones it kept (the management
/// server carries keys over by column name, which a renamed column
/// escapes), less the ones the statement drops, plus the ones it adds.
async fn settle_foreign_keys(
    session: &mut Session,
    before: &TableDef,
    kept: Vec<latsdb_types::schema::ForeignKeyDef>,
    ops: &[AOp],
) -> SqlResult<()> {
    let (db, name) = (&before.database, &before.name);
    let now = session.shared.client.refresh_table(db, name).await?;
    let mut changes: Vec<ColumnChange> = now
        .def()
        .foreign_keys
        .iter()
        .filter(|k| !kept.contains(k))
        .map(|k| ColumnChange::DropForeignKey { name: k.name.clone() })
        .collect();
    changes.extend(kept.into_iter().filter(|k| !now.def().foreign_keys.contains(k)).map(ColumnChange::AddForeignKey));
    if !changes.is_empty() {
        session.shared.client.change_columns(db, name, changes).await?;
    }
    for op in ops {
        if let AOp::AddConstraint { constraint: TableConstraint::ForeignKey(fk), .. } = op {
            super::add_foreign_key(session, db, name, fk).await?;
        }
    }
    Ok(())
}

/// Copies the rows, then gives the copy its auto-increment counter before
/// it takes the table's name (a node that inserts right after finds it).
/// MySQL keeps the table's counter: the value this node would hand out
/// next (from its reserved range, else the cluster's `counter`), and past
/// the highest value copied (ranges other SQL nodes reserved and did not
/// use are given up).
async fn copy_and_count(
    shared: &crate::session::Shared,
    old: &Arc<Table>,
    copy: &Arc<Table>,
    model: &Model,
    counter: u64,
) -> SqlResult<u64> {
    let source =
        model.auto.as_deref().and_then(|a| model.columns.iter().find(|c| c.def.name == a)).and_then(|c| c.from);
    let (copied, highest) = copy_rows(&shared.client, old, copy, model, source).await?;
    if let Some(column) = &model.auto {
        let reserved = shared.next_reserved(old.def().id).await.unwrap_or(counter);
        let c = copy.def().column_id(column)?;
        shared.register_auto_column(copy, c, highest.saturating_add(1).max(reserved)).await?;
    }
    Ok(copied)
}

/// Reads every row of `old` along its primary key, a chunk at a time, and
/// writes it converted into `copy`, each chunk in one transaction. Returns
/// the rows copied and the highest value of column `auto` among them.
async fn copy_rows(
    client: &latsdb_client::Client,
    old: &Arc<Table>,
    copy: &Arc<Table>,
    model: &Model,
    auto: Option<ColumnId>,
) -> SqlResult<(u64, u64)> {
    let def = old.def();
    // A new column's fill is one value for the whole statement (a clock
    // column takes the statement's time, as in MySQL).
    let fills = model.columns.iter().map(|c| c.from.map_or_else(|| fill_value(&c.def).map(Some), |_| Ok(None)));
    let fills = fills.collect::<SqlResult<Vec<Option<Value>>>>()?;
    let mut after: Bound<Vec<Value>> = Bound::Unbounded;
    let mut copied = 0u64;
    let mut highest = 0u64;
    loop {
        let scan = Scan::all().range(after.clone(), Bound::Unbounded).ordered().limit(CHUNK_ROWS);
        let rows = client.scan(old, scan).await?;
        let mut ops = Vec::with_capacity(rows.len());
        for row in &rows {
            let values: Vec<Value> = (0..def.columns.len()).map(|c| row.get(c)).collect();
            copied += 1;
            if let Some(c) = auto {
                highest = highest.max(unsigned(&values[c as usize]));
            }
            ops.push(Op::insert(copy, model.row_from(&values, &fills, copied)?)?);
        }
        if !ops.is_empty() {
            client.transaction().execute_commit(ops).await?;
        }
        match rows.last() {
            Some(last) if rows.len() == CHUNK_ROWS => {
                after = Bound::Excluded(def.primary_key.iter().map(|&k| last.get(k as usize)).collect());
            }
            _ => return Ok((copied, highest)),
        }
    }
}

/// An auto-increment value as unsigned (NULL or a negative one counts as 0).
fn unsigned(v: &Value) -> u64 {
    match v {
        Value::Int(n) => (*n).max(0) as u64,
        Value::UInt(n) => *n,
        _ => 0,
    }
}

/// The ast column a CHANGE or MODIFY gives.
fn changed_column(name: &ast::Ident, data_type: &ast::DataType, options: &[ast::ColumnOption]) -> ast::ColumnDef {
    ast::ColumnDef {
        name: name.clone(),
        data_type: data_type.clone(),
        options: options.iter().map(|o| ast::ColumnOptionDef { name: None, option: o.clone() }).collect(),
    }
}

impl Model {
    fn of(def: &TableDef, auto: Option<String>) -> Model {
        let name = |c: &ColumnId| def.columns[*c as usize].name.clone();
        let columns = (0..def.columns.len() as ColumnId)
            .filter(|&c| !def.columns[c as usize].is_dropped())
            .map(|c| Column { def: def.columns[c as usize].clone(), from: Some(c) })
            .collect();
        let indexes = def
            .indexes
            .iter()
            .skip(1)
            .map(|i| IndexSpec {
                name: i.name.clone(),
                columns: i.columns.iter().map(name).collect(),
                unique: i.unique,
            })
            .collect();
        Model { columns, primary_key: def.primary_key.iter().map(name).collect(), indexes, auto }
    }

    /// The position of the column named `name` (not the hidden key).
    fn position(&self, name: &str, table: &str) -> SqlResult<usize> {
        self.columns
            .iter()
            .position(|c| {
                c.def.name.eq_ignore_ascii_case(name) && c.def.name != latsdb_types::schema::HIDDEN_KEY_COLUMN
            })
            .ok_or_else(|| SqlError::bad_field(name, table))
    }

    /// Where a column goes: FIRST, AFTER another, or `otherwise`.
    fn place(&self, position: &Option<MySQLColumnPosition>, otherwise: usize, table: &str) -> SqlResult<usize> {
        match position {
            None => Ok(otherwise),
            Some(MySQLColumnPosition::First) => Ok(0),
            Some(MySQLColumnPosition::After(c)) => Ok(self.position(&c.value, table)? + 1),
        }
    }

    /// Applies one clause of the statement.
    fn apply(&mut self, session: &mut Session, before: &TableDef, op: &ast::AlterTableOperation) -> SqlResult<()> {
        let table = before.name.as_str();
        match op {
            AOp::AddColumn { if_not_exists, column_def, column_position, .. } => {
                self.add(session, before, column_def, *if_not_exists, column_position)
            }
            AOp::DropColumn { column_names, if_exists, .. } => {
                for name in column_names {
                    match self.position(&name.value, table) {
                        Ok(at) => self.drop(at)?,
                        Err(_) if *if_exists => super::missing_column_noted(session, &name.value),
                        Err(_) => {
                            return Err(SqlError::new(
                                crate::error::ER_CANT_DROP_KEY,
                                "42000",
                                format!("Can't DROP COLUMN `{}`; check that it exists", name.value),
                            ))
                        }
                    }
                }
                Ok(())
            }
            AOp::ChangeColumn { old_name, new_name, data_type, options, column_position }
            | AOp::ModifyColumn { col_name: old_name @ new_name, data_type, options, column_position } => {
                let at = self.position(&old_name.value, table)?;
                let given = changed_column(new_name, data_type, options);
                self.change(session, at, &given, column_position, table)
            }
            AOp::RenameColumn { old_column_name, new_column_name } => {
                let at = self.position(&old_column_name.value, table)?;
                self.rename(at, &new_column_name.value)
            }
            AOp::AlterColumn { column_name, op } => {
                let at = self.position(&column_name.value, table)?;
                let column = &mut self.columns[at].def;
                let (default, on_insert) = altered_default(op, column)?;
                column.default = default;
                column.clock.on_insert = on_insert;
                Ok(())
            }
            AOp::AddConstraint { constraint: TableConstraint::Index(ic), .. } => {
                self.add_index(ic.name.as_ref(), index_column_names(&ic.columns), false)
            }
            AOp::AddConstraint { constraint: TableConstraint::Unique(u), .. } => {
                self.add_index(u.index_name.as_ref().or(u.name.as_ref()), index_column_names(&u.columns), true)
            }
            // Foreign keys are added once the copy has the table's name
            // (`settle_foreign_keys`).
            AOp::AddConstraint { constraint: TableConstraint::ForeignKey(_), .. } => Ok(()),
            AOp::DropIndex { name } => {
                let at = self.indexes.iter().position(|i| i.name.eq_ignore_ascii_case(&name.value));
                let at = at.ok_or_else(|| {
                    SqlError::new(
                        crate::error::ER_CANT_DROP_KEY,
                        "42000",
                        format!("Can't DROP '{}'; check that column/key exists", name.value),
                    )
                })?;
                self.indexes.remove(at);
                Ok(())
            }
            // The table is renamed once copied; foreign keys are dropped once
            // copied (`settle_foreign_keys`).
            _ => Ok(()),
        }
    }

    /// The foreign keys of `before` the copy keeps, with their columns'
    /// places in the copy; those the statement drops are left out. A key
    /// whose column the statement drops is error 1828, as in MySQL.
    fn kept_foreign_keys(&self, before: &TableDef, ops: &[AOp]) -> SqlResult<Vec<latsdb_types::schema::ForeignKeyDef>> {
        let dropped = |key: &str| super::drops_foreign_key(ops, key);
        for op in ops {
            if let AOp::DropForeignKey { name, .. } = op {
                if !before.foreign_keys.iter().any(|k| k.name.eq_ignore_ascii_case(&name.value)) {
                    return Err(SqlError::new(
                        1091,
                        "42000",
                        format!("Can't DROP FOREIGN KEY `{}`; check that it exists", name.value),
                    ));
                }
            }
        }
        let mut kept = Vec::new();
        for key in before.foreign_keys.iter().filter(|k| !dropped(&k.name)) {
            let mut columns = Vec::with_capacity(key.columns.len());
            for &c in &key.columns {
                let at = self.columns.iter().position(|m| m.from == Some(c)).ok_or_else(|| {
                    SqlError::new(
                        1828,
                        "HY000",
                        format!(
                            "Cannot drop column '{}': needed in a foreign key constraint '{}'",
                            before.columns[c as usize].name, key.name
                        ),
                    )
                })?;
                columns.push(at as ColumnId);
            }
            kept.push(latsdb_types::schema::ForeignKeyDef { columns, ..key.clone() });
        }
        Ok(kept)
    }

    fn add(
        &mut self,
        session: &mut Session,
        before: &TableDef,
        c: &ast::ColumnDef,
        if_not_exists: bool,
        position: &Option<MySQLColumnPosition>,
    ) -> SqlResult<()> {
        let name = &c.name.value;
        if self.position(name, &before.name).is_ok() {
            if if_not_exists {
                let warning = format!("Duplicate column name '{name}'");
                session.warnings.push(("Note", crate::error::ER_DUP_FIELDNAME, warning));
                return Ok(());
            }
            return Err(SqlError::new(
                crate::error::ER_DUP_FIELDNAME,
                "42S21",
                format!("Duplicate column name '{name}'"),
            ));
        }
        let mut spec = column_spec(session, c, shown_table_collation(before))?;
        spec.def.storage = spec.storage.unwrap_or_default();
        if spec.primary_key || spec.auto_increment {
            return Err(SqlError::unsupported(format!(
                "ADD COLUMN {name} with PRIMARY KEY or AUTO_INCREMENT is not supported: a table's primary key is fixed when it is created"
            )));
        }
        let unique = spec.unique;
        let at = self.place(position, self.columns.len(), &before.name)?;
        self.columns.insert(at, Column { def: spec.def, from: None });
        if unique {
            self.add_index(None, vec![name.clone()], true)?;
        }
        Ok(())
    }

    /// DROP COLUMN: the column leaves its indexes (an index left without
    /// columns goes), as in MySQL; a primary-key column cannot go.
    fn drop(&mut self, at: usize) -> SqlResult<()> {
        let name = self.columns[at].def.name.clone();
        if self.primary_key.iter().any(|k| k.eq_ignore_ascii_case(&name)) {
            return Err(SqlError::unsupported(format!(
                "dropping column '{name}' of the primary key is not supported: a table's primary key cannot change (copy the table into a new one)"
            )));
        }
        self.columns.remove(at);
        for index in &mut self.indexes {
            index.columns.retain(|c| !c.eq_ignore_ascii_case(&name));
        }
        self.indexes.retain(|i| !i.columns.is_empty());
        if self.auto.as_deref().is_some_and(|a| a.eq_ignore_ascii_case(&name)) {
            self.auto = None;
        }
        if self.columns.iter().all(|c| c.def.name == latsdb_types::schema::HIDDEN_KEY_COLUMN) {
            return Err(SqlError::new(
                1090,
                "42000",
                "You can't delete all columns with ALTER TABLE; use DROP TABLE instead",
            ));
        }
        Ok(())
    }

    /// CHANGE or MODIFY: the column takes the new definition (and place).
    fn change(
        &mut self,
        session: &mut Session,
        at: usize,
        given: &ast::ColumnDef,
        position: &Option<MySQLColumnPosition>,
        table: &str,
    ) -> SqlResult<()> {
        let current = self.columns[at].def.clone();
        let mut spec = column_spec(session, given, current.collation)?;
        let is_auto = self.auto.as_deref().is_some_and(|a| a.eq_ignore_ascii_case(&current.name));
        let in_key = self.primary_key.iter().any(|k| k.eq_ignore_ascii_case(&current.name));
        if spec.auto_increment != is_auto || spec.unique || (spec.primary_key && !in_key) {
            return Err(SqlError::unsupported(format!(
                "changing AUTO_INCREMENT, UNIQUE or PRIMARY KEY of column '{}' with CHANGE/MODIFY is not supported",
                current.name
            )));
        }
        spec.def.storage = spec.storage.unwrap_or(current.storage);
        // A primary-key column is NOT NULL, as in MySQL.
        spec.def.nullable &= !in_key;
        self.rename(at, &spec.def.name)?;
        let column = self.columns.remove(at);
        let to = self.place(position, at, table)?;
        self.columns.insert(to, Column { def: spec.def, from: column.from });
        Ok(())
    }

    /// Renames column `at` everywhere the model names it.
    fn rename(&mut self, at: usize, to: &str) -> SqlResult<()> {
        let from = self.columns[at].def.name.clone();
        if from == to {
            return Ok(());
        }
        super::reserved_name(to)?;
        if self.columns.iter().enumerate().any(|(i, c)| i != at && c.def.name.eq_ignore_ascii_case(to)) {
            return Err(SqlError::new(
                crate::error::ER_DUP_FIELDNAME,
                "42S21",
                format!("Duplicate column name '{to}'"),
            ));
        }
        let renamed = |name: &mut String| {
            if name.eq_ignore_ascii_case(&from) {
                *name = to.to_string();
            }
        };
        self.primary_key.iter_mut().for_each(renamed);
        self.indexes.iter_mut().flat_map(|i| i.columns.iter_mut()).for_each(renamed);
        self.auto.iter_mut().for_each(renamed);
        self.columns[at].def.name = to.to_string();
        Ok(())
    }

    fn add_index(&mut self, given: Option<&ast::Ident>, columns: Vec<String>, unique: bool) -> SqlResult<()> {
        for c in &columns {
            if !self.columns.iter().any(|m| m.def.name.eq_ignore_ascii_case(c)) {
                return Err(SqlError::new(1072, "42000", format!("Key column '{c}' doesn't exist in table")));
            }
        }
        let taken: Vec<String> = self.indexes.iter().map(|i| i.name.clone()).collect();
        let name = index_name(&taken, given, &columns)?;
        if taken.iter().any(|t| t.eq_ignore_ascii_case(&name)) {
            return Err(SqlError::new(crate::error::ER_DUP_KEYNAME, "42000", format!("Duplicate key name '{name}'")));
        }
        self.indexes.push(IndexSpec { name, columns, unique });
        Ok(())
    }

    /// The copy's row of a row of the table (`values`, by column id; a new
    /// column takes its `fills` value): each value converted to its column
    /// as MySQL's strict mode converts it. `number` is the row's number in
    /// the copy, for messages.
    fn row_from(&self, values: &[Value], fills: &[Option<Value>], number: u64) -> SqlResult<Vec<Value>> {
        let mut row = Vec::with_capacity(self.columns.len());
        for (column, fill) in self.columns.iter().zip(fills) {
            let value = match (column.from, fill) {
                (Some(c), _) => values[c as usize].clone(),
                (None, Some(fill)) => fill.clone(),
                (None, None) => unreachable!("every new column has a fill value"),
            };
            if value.is_null() && !column.def.nullable {
                return Err(truncated(&column.def.name, number));
            }
            row.push(crate::eval::to_column(value, &column.def).map_err(|e| at_row(e, &column.def.name, number))?);
        }
        debug_assert_eq!(row.len(), self.columns.len(), "a value for every column of the copy");
        Ok(row)
    }
}

/// A conversion error of the copy names the row, as MySQL's does; a value
/// too long for its new type is 1265 "Data truncated", as MariaDB's ALTER
/// TABLE says (an INSERT's is 1406).
fn at_row(mut e: SqlError, column: &str, number: u64) -> SqlError {
    if e.code == crate::error::ER_DATA_TOO_LONG {
        return truncated(column, number);
    }
    if !e.message.contains(" at row ") {
        e.message = format!("{} at row {number}", e.message);
    }
    e
}

fn truncated(column: &str, number: u64) -> SqlError {
    SqlError::new(
        crate::error::ER_DATA_TRUNCATED,
        "01000",
        format!("Data truncated for column '{column}' at row {number}"),
    )
}
