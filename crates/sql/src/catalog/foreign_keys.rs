//! FOREIGN KEY clauses of CREATE TABLE and ALTER TABLE: the key's
//! definition, checked against the parent as MySQL checks it (with
//! `foreign_key_checks` off the parent is not looked at, so schema dumps
//! may create a child before its parent). The rows are checked by
//! `crate::foreign`.
//!
//! As in NDB, a key references its parent's primary key or a unique
//! index (InnoDB also accepts any index). The child's columns get an
//! ordered index when none starts with them, as in MySQL, so that a
//! parent's change finds its children without reading the whole table.

use crate::error::{SqlError, SqlResult};
use crate::shared::Shared;
use latsdb_types::schema::{ColumnDef, ColumnType, ForeignKeyDef, ReferenceAction, TableDef};
use sqlparser::ast;

/// A FOREIGN KEY clause, its names not yet resolved.
pub(super) struct Clause {
    name: Option<String>,
    /// MySQL's `FOREIGN KEY index_name (...)`: the name of the child's
    /// index if one is created.
    pub index_name: Option<String>,
    pub columns: Vec<String>,
    parent_database: String,
    parent_table: String,
    parent_columns: Vec<String>,
    on_delete: ReferenceAction,
    on_update: ReferenceAction,
}

fn action(a: &Option<ast::ReferentialAction>) -> SqlResult<ReferenceAction> {
    Ok(match a {
        None | Some(ast::ReferentialAction::Restrict) => ReferenceAction::Restrict,
        Some(ast::ReferentialAction::NoAction) => ReferenceAction::NoAction,
        Some(ast::ReferentialAction::Cascade) => ReferenceAction::Cascade,
        Some(ast::ReferentialAction::SetNull) => ReferenceAction::SetNull,
        Some(ast::ReferentialAction::SetDefault) => {
            return Err(SqlError::unsupported(
                "ON DELETE/ON UPDATE SET DEFAULT is not supported (InnoDB and NDB refuse it too); use SET NULL, CASCADE or RESTRICT",
            ))
        }
    })
}

/// Reads a FOREIGN KEY clause of a table in database `db`.
pub(super) fn clause(db: &str, fk: &ast::ForeignKeyConstraint) -> SqlResult<Clause> {
    let (parent_db, parent_table) = crate::plan::table_name(&fk.foreign_table)?;
    if fk.referred_columns.is_empty() || fk.columns.len() != fk.referred_columns.len() {
        return Err(SqlError::new(
            1239,
            "42000",
            "Incorrect foreign key definition: it must name as many referenced columns as columns",
        ));
    }
    Ok(Clause {
        name: fk.name.as_ref().map(|n| n.value.clone()),
        index_name: fk.index_name.as_ref().map(|n| n.value.clone()),
        columns: fk.columns.iter().map(|c| c.value.clone()).collect(),
        parent_database: parent_db.unwrap_or_else(|| db.to_string()),
        parent_table,
        parent_columns: fk.referred_columns.iter().map(|c| c.value.clone()).collect(),
        on_delete: action(&fk.on_delete)?,
        on_update: action(&fk.on_update)?,
    })
}

/// The child table as the key sees it: its name, columns (ids are
/// positions) and the column lists of its primary key and unique indexes
/// (a key may reference its own table).
pub(super) struct Child<'a> {
    pub database: &'a str,
    pub name: &'a str,
    pub columns: &'a [ColumnDef],
    pub unique_keys: Vec<Vec<String>>,
    /// Names of the foreign keys it has (and those resolved before).
    pub taken: Vec<String>,
}

impl Child<'_> {
    pub(super) fn of(def: &TableDef) -> Child<'_> {
        let names = |cols: &[u16]| cols.iter().map(|&c| def.columns[c as usize].name.clone()).collect();
        Child {
            database: &def.database,
            name: &def.name,
            columns: &def.columns,
            unique_keys: def.indexes.iter().filter(|i| i.unique).map(|i| names(&i.columns)).collect(),
            taken: def.foreign_keys.iter().map(|k| k.name.clone()).collect(),
        }
    }
}

fn same_set(a: &[String], b: &[String]) -> bool {
    a.len() == b.len() && a.iter().all(|x| b.iter().any(|y| y.eq_ignore_ascii_case(x)))
}

/// MySQL's name for a key without one: `<table>_ibfk_<n>`, n one more
/// than the highest taken.
fn generated_name(child: &Child<'_>) -> String {
    let prefix = format!("{}_ibfk_", child.name);
    let highest = child
        .taken
        .iter()
        .filter_map(|t| t.get(..prefix.len()).filter(|p| p.eq_ignore_ascii_case(&prefix)).map(|_| &t[prefix.len()..]))
        .filter_map(|n| n.parse::<u32>().ok())
        .max()
        .unwrap_or(0);
    format!("{prefix}{}", highest + 1)
}

/// Whether a child column may reference a parent column: the same type
/// (text and binary of any length; text of the same collation).
fn compatible(child: &ColumnDef, parent: &ColumnDef) -> bool {
    use ColumnType::*;
    match (child.ty, parent.ty) {
        (Char(_) | VarChar(_), Char(_) | VarChar(_)) => child.collation == parent.collation,
        (Binary(_) | VarBinary(_), Binary(_) | VarBinary(_)) => true,
        (a, b) => a == b && child.members == parent.members,
    }
}

/// Resolves a clause against its child table. With `checks` on, the
/// parent must exist (or be the child itself) and the referenced columns
/// must be its primary key or a unique index, of matching types.
pub(super) async fn resolve(shared: &Shared, checks: bool, child: &Child<'_>, c: &Clause) -> SqlResult<ForeignKeyDef> {
    let name = c.name.clone().unwrap_or_else(|| generated_name(child));
    if child.taken.iter().any(|t| t.eq_ignore_ascii_case(&name)) {
        return Err(SqlError::new(1826, "HY000", format!("Duplicate foreign key constraint name '{name}'")));
    }
    let mut columns = Vec::with_capacity(c.columns.len());
    for column in &c.columns {
        let at = child
            .columns
            .iter()
            .position(|d| d.name.eq_ignore_ascii_case(column) && !d.is_dropped())
            .ok_or_else(|| SqlError::new(1072, "42000", format!("Key column '{column}' doesn't exist in table")))?;
        let sets_null = c.on_delete == ReferenceAction::SetNull || c.on_update == ReferenceAction::SetNull;
        if sets_null && !child.columns[at].nullable {
            return Err(SqlError::new(
                1830,
                "HY000",
                format!("Column '{column}' cannot be NOT NULL: needed in a foreign key constraint '{name}' SET NULL"),
            ));
        }
        columns.push(at as u16);
    }
    let key = ForeignKeyDef {
        name,
        columns,
        parent_database: c.parent_database.clone(),
        parent_table: c.parent_table.clone(),
        parent_columns: c.parent_columns.clone(),
        on_delete: c.on_delete,
        on_update: c.on_update,
    };
    if checks {
        check_parent(shared, child, &key).await?;
    }
    Ok(key)
}

/// The parent's side of a key: it exists, its referenced columns are its
/// primary key or a unique index, and their types match the child's.
async fn check_parent(shared: &Shared, child: &Child<'_>, key: &ForeignKeyDef) -> SqlResult<()> {
    let own = key.references(child.database, child.name);
    let parent;
    let (columns, unique_keys): (&[ColumnDef], Vec<Vec<String>>) = if own {
        (child.columns, child.unique_keys.clone())
    } else {
        parent = shared.table(&key.parent_database, &key.parent_table).await.map_err(|_| {
            SqlError::new(1824, "HY000", format!("Failed to open the referenced table '{}'", key.parent_table))
        })?;
        let p = parent.def();
        let names = |cols: &[u16]| cols.iter().map(|&c| p.columns[c as usize].name.clone()).collect();
        (&p.columns, p.indexes.iter().filter(|i| i.unique).map(|i| names(&i.columns)).collect())
    };
    if !unique_keys.iter().any(|k| same_set(k, &key.parent_columns)) {
        return Err(SqlError::new(
            1822,
            "HY000",
            format!(
                "Failed to add the foreign key constraint. Missing index for constraint '{}' in the referenced table '{}' (latsdb, as NDB, needs its primary key or a unique index on exactly the referenced columns)",
                key.name, key.parent_table
            ),
        ));
    }
    for (&c, parent_column) in key.columns.iter().zip(&key.parent_columns) {
        let referenced = columns.iter().find(|d| d.name.eq_ignore_ascii_case(parent_column) && !d.is_dropped());
        let child_column = &child.columns[c as usize];
        if !referenced.is_some_and(|p| compatible(child_column, p)) {
            return Err(SqlError::new(
                3780,
                "HY000",
                format!(
                    "Referencing column '{}' and referenced column '{parent_column}' in foreign key constraint '{}' are incompatible.",
                    child_column.name, key.name
                ),
            ));
        }
    }
    Ok(())
}

/// Whether an index of the child (its primary key, `primary`, or one of
/// `indexes`) starts with the key's columns, in order.
pub(super) fn has_index(primary: &[String], indexes: &[Vec<String>], columns: &[String]) -> bool {
    let starts = |index: &[String]| {
        index.len() >= columns.len() && index.iter().zip(columns).all(|(a, b)| a.eq_ignore_ascii_case(b))
    };
    starts(primary) || indexes.iter().any(|i| starts(i))
}

/// The children of a parent that was renamed (table or columns) name it
/// anew, as MySQL updates them: each referencing key is dropped and added
/// again with the parent's new database, table and column names.
/// `renamed` pairs the parent's old column names with the new ones.
pub(super) async fn repoint_children(
    shared: &Shared,
    before: &TableDef,
    (database, table): (&str, &str),
    renamed: &[(String, String)],
) -> SqlResult<()> {
    for reference in &before.referenced_by {
        // A key of the table itself is found under the table's new name.
        let own = reference.database == before.database && reference.table == before.name;
        let (child_db, child_name) = if own {
            (database.to_string(), table.to_string())
        } else {
            (reference.database.clone(), reference.table.clone())
        };
        let child = shared.client.refresh_table(&child_db, &child_name).await?;
        let Some(key) = child.def().foreign_keys.iter().find(|k| k.name == reference.name) else { continue };
        let parent_columns = key
            .parent_columns
            .iter()
            .map(|c| renamed.iter().find(|(old, _)| old.eq_ignore_ascii_case(c)).map_or(c, |(_, new)| new).clone())
            .collect();
        let moved = ForeignKeyDef {
            parent_database: database.to_string(),
            parent_table: table.to_string(),
            parent_columns,
            ..key.clone()
        };
        if moved != *key {
            let changes = vec![
                latsdb_types::schema::ColumnChange::DropForeignKey { name: key.name.clone() },
                latsdb_types::schema::ColumnChange::AddForeignKey(moved),
            ];
            shared.client.change_columns(&child_db, &child_name, changes).await?;
        }
    }
    Ok(())
}

/// Error 1553 when the indexes `dropped` leave a foreign key without one.
/// `remaining` is the table as the statement leaves it: without those
/// indexes, and without the keys the statement drops. A key of the table
/// needs an index that starts with its columns; a key of a child needs a
/// unique index (or the primary key) on exactly its referenced columns.
pub(super) async fn refuse_needed_indexes(shared: &Shared, remaining: &TableDef, dropped: &[String]) -> SqlResult<()> {
    let Some(first) = dropped.first() else { return Ok(()) };
    let def = remaining;
    let names = |cols: &[u16]| -> Vec<String> { cols.iter().map(|&c| def.columns[c as usize].name.clone()).collect() };
    let needed = |key: &str| {
        SqlError::new(1553, "HY000", format!("Cannot drop index '{first}': needed in a foreign key constraint '{key}'"))
    };
    let indexed: Vec<Vec<String>> = def.indexes.iter().map(|i| names(&i.columns)).collect();
    for key in &def.foreign_keys {
        if !has_index(&[], &indexed, &names(&key.columns)) {
            return Err(needed(&key.name));
        }
    }
    let unique: Vec<Vec<String>> = def.indexes.iter().filter(|i| i.unique).map(|i| names(&i.columns)).collect();
    for reference in &def.referenced_by {
        let Ok(child) = shared.table(&reference.database, &reference.table).await else { continue };
        let Some(key) = child.def().foreign_keys.iter().find(|k| k.name == reference.name) else { continue };
        // A key of the table itself that the statement drops needs nothing.
        let own = reference.database == def.database && reference.table == def.name;
        if own && !def.foreign_keys.iter().any(|k| k.name == key.name) {
            continue;
        }
        if !unique.iter().any(|u| same_set(u, &key.parent_columns)) {
            return Err(needed(&key.name));
        }
    }
    Ok(())
}

/// `def` as a statement leaves it: without the indexes `dropped` and the
/// foreign keys the statement drops.
pub(super) fn without(def: &TableDef, dropped: &[String], ops: &[ast::AlterTableOperation]) -> TableDef {
    let mut remaining = def.clone();
    remaining.indexes.retain(|i| !dropped.iter().any(|d| d.eq_ignore_ascii_case(&i.name)));
    remaining.foreign_keys.retain(|k| !super::drops_foreign_key(ops, &k.name));
    remaining
}
