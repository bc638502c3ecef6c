//! INSERT, REPLACE, UPDATE and DELETE. Writes by primary key go straight
//! to the key's partition in one round trip (`SET k = k + 1` is computed by
//! the data node); other WHERE clauses find the rows first and then write
//! each by key under its lock.

use crate::bind::{Binder, ScopeTable};
use crate::error::{SqlError, SqlResult};
use crate::eval::{to_column, Arith, Env, SExpr};
use crate::exec::{run_select, Ctx};
use crate::foreign::ParentChange;
use crate::plan::{plan_select, table_name, Access, Catalog, SelectPlan, SourceKind};
use latsdb_client::{Op, Outcome, Table};
use latsdb_types::expr::{ArithOp, Expr};
use latsdb_types::proto::LockMode;
use latsdb_types::schema::{ColumnDef, ColumnId, ColumnType, TableDef};
use latsdb_types::Value;
use sqlparser::ast::{self, AssignmentTarget, Statement};
use std::sync::Arc;

#[derive(Clone, Debug)]
pub enum InsertSource {
    Values(Vec<Vec<SExpr>>),
    Select(Box<SelectPlan>),
}

#[derive(Clone, Debug)]
pub enum OnConflict {
    Error,
    Ignore,
    Replace,
    /// Assignments over `[existing row ++ new row]`.
    Update(Vec<(ColumnId, SExpr)>),
}

#[derive(Clone, Debug)]
pub struct InsertPlan {
    pub table: Arc<Table>,
    /// Target column of each value position.
    pub columns: Vec<ColumnId>,
    pub source: InsertSource,
    pub conflict: OnConflict,
}

#[derive(Clone, Debug)]
pub struct WritePlan {
    pub table: Arc<Table>,
    /// Finds the rows (all columns of the table, in order).
    pub select: SelectPlan,
    /// For UPDATE: assignments over the full current row.
    pub sets: Vec<(ColumnId, SExpr)>,
    /// Keys and assignments computed on the data node without reading
    /// first, when the WHERE clause is exactly a key lookup.
    pub direct: Option<Vec<Vec<SExpr>>>,
    /// A multi-table UPDATE's values from the other tables: this many
    /// follow the table's columns in each selected row (which may then
    /// repeat a row; the first of each key counts).
    pub joined_values: usize,
}

/// Something that needs auto-increment values.
pub trait AutoIncrement {
    /// The auto-increment column of a table, if any.
    fn auto_column(&self, table: &Arc<Table>) -> impl std::future::Future<Output = SqlResult<Option<ColumnId>>> + Send;
    /// `n` consecutive fresh values.
    fn next_values(&self, table: &Arc<Table>, n: u64) -> impl std::future::Future<Output = SqlResult<u64>> + Send;
    /// Makes sure later values are above an explicitly inserted one.
    fn saw_value(&self, table: &Arc<Table>, v: u64) -> impl std::future::Future<Output = SqlResult<()>> + Send;
}

fn stored(kind: SourceKind, name: &str) -> SqlResult<Arc<Table>> {
    match kind {
        SourceKind::Stored(t) => Ok(t),
        SourceKind::Virtual(_) => Err(SqlError::new(1036, "HY000", format!("Table '{name}' is read only"))),
    }
}

fn scope_of(table: &Arc<Table>, alias: &str) -> ScopeTable {
    let def = table.def();
    ScopeTable {
        alias: alias.to_string(),
        db: def.database.clone(),
        name: def.name.clone(),
        columns: def.columns.clone(),
        merged: Vec::new(),
        hidden: def.hidden_key(),
    }
}

pub async fn plan_insert<C: Catalog>(catalog: &C, insert: &ast::Insert) -> SqlResult<InsertPlan> {
    let ast::TableObject::TableName(name) = &insert.table else {
        return Err(SqlError::unsupported("INSERT INTO a table function is not supported"));
    };
    let (db, tname) = table_name(name)?;
    let (_, kind) = catalog.resolve(db.as_deref(), &tname).await?;
    let table = stored(kind, &tname)?;
    let def = table.def();
    let columns: Vec<ColumnId> = if insert.columns.is_empty() && insert.assignments.is_empty() {
        def.visible_columns().map(|(c, _)| c).collect()
    } else if !insert.assignments.is_empty() {
        insert.assignments.iter().map(|a| assignment_column(&table, &a.target)).collect::<SqlResult<_>>()?
    } else {
        insert
            .columns
            .iter()
            .map(|c| {
                let n = c.to_string();
                let n = n.rsplit('.').next().unwrap_or(&n).trim_matches('`').to_string();
                named_column(def, &n)
            })
            .collect::<SqlResult<_>>()?
    };
    for (i, c) in columns.iter().enumerate() {
        if columns[..i].contains(c) {
            return Err(SqlError::new(
                1110,
                "42000",
                format!("Column '{}' specified twice", def.columns[*c as usize].name),
            ));
        }
    }
    let source = if !insert.assignments.is_empty() {
        let mut b = Binder::new(&[], "field list");
        InsertSource::Values(vec![insert.assignments.iter().map(|a| b.bind(&a.value)).collect::<SqlResult<_>>()?])
    } else {
        let query = insert.source.as_ref().ok_or_else(|| SqlError::parse("INSERT needs VALUES, SET or SELECT"))?;
        match query.body.as_ref() {
            ast::SetExpr::Values(values) => {
                let mut rows = Vec::with_capacity(values.rows.len());
                let mut b = Binder::new(&[], "field list");
                for (n, row) in values.rows.iter().enumerate() {
                    if row.len() != columns.len() {
                        return Err(SqlError::new(
                            crate::error::ER_WRONG_VALUE_COUNT,
                            "21S01",
                            format!("Column count doesn't match value count at row {}", n + 1),
                        ));
                    }
                    let mut bound = Vec::with_capacity(row.len());
                    for (e, &c) in row.iter().zip(&columns) {
                        bound.push(match e {
                            ast::Expr::Identifier(id)
                                if id.value.eq_ignore_ascii_case("DEFAULT") && id.quote_style.is_none() =>
                            {
                                column_default(&def.columns[c as usize])
                            }
                            _ => b.bind(e)?,
                        });
                    }
                    rows.push(bound);
                }
                InsertSource::Values(rows)
            }
            _ => {
                let plan = plan_select(catalog, query).await?;
                if plan.outputs.len() != columns.len() {
                    return Err(SqlError::new(
                        crate::error::ER_WRONG_VALUE_COUNT,
                        "21S01",
                        "Column count doesn't match value count at row 1",
                    ));
                }
                InsertSource::Select(Box::new(plan))
            }
        }
    };
    let conflict = if insert.replace_into {
        OnConflict::Replace
    } else if let Some(on) = &insert.on {
        match on {
            ast::OnInsert::DuplicateKeyUpdate(assignments) => {
                let n = def.columns.len();
                let scope = scope_of(&table, &def.name);
                let mut sets = Vec::new();
                for a in assignments {
                    let c = assignment_column(&table, &a.target)?;
                    let value = bind_with_values(&scope, &a.value, n)?;
                    sets.push((c, value));
                }
                OnConflict::Update(sets)
            }
            _ => return Err(SqlError::unsupported("ON CONFLICT is not MySQL syntax; use ON DUPLICATE KEY UPDATE")),
        }
    } else if insert.ignore {
        OnConflict::Ignore
    } else {
        OnConflict::Error
    };
    Ok(InsertPlan { table, columns, source, conflict })
}

/// What `DEFAULT` in a VALUES list stands for: the column's clock or its
/// default value.
fn column_default(column: &ColumnDef) -> SExpr {
    if column.clock.on_insert {
        return SExpr::Session(crate::eval::SessionValue::Now(column.fraction_digits));
    }
    SExpr::Const(column.default.clone().unwrap_or(Value::Null))
}

/// Binds an ON DUPLICATE KEY UPDATE value over `[existing row ++ new
/// row]`: a column reads the existing row, `VALUES(col)` the row that was
/// to be inserted, anywhere in the expression.
fn bind_with_values(scope: &ScopeTable, e: &ast::Expr, n: usize) -> SqlResult<SExpr> {
    // VALUES(c) becomes a reference to column "\0c" of a second table that
    // only VALUES() can name, so a plain `c` still means the existing row.
    let mut e = e.clone();
    let mut unknown = None;
    let _ = ast::visit_expressions_mut(&mut e, |x| {
        if let Some(col) = Binder::is_values_call(x) {
            if scope.column_named(&col).is_some() {
                *x = ast::Expr::Identifier(ast::Ident::new(format!("\0{col}")));
            } else {
                unknown.get_or_insert(col);
            }
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    if let Some(col) = unknown {
        return Err(SqlError::bad_field(&col, "field list"));
    }
    let mut new_row = scope.clone();
    new_row.alias = "\0".into();
    for c in &mut new_row.columns {
        c.name = format!("\0{}", c.name);
    }
    let tables = [scope.clone(), new_row];
    Binder::new(&tables, "field list").bind(&e)?.map(&mut |x| match x {
        SExpr::TableCol(0, c) => Ok(SExpr::Col(c as usize)),
        SExpr::TableCol(_, c) => Ok(SExpr::Col(n + c as usize)),
        other => Ok(other),
    })
}

fn assignment_column(table: &Arc<Table>, target: &AssignmentTarget) -> SqlResult<ColumnId> {
    let AssignmentTarget::ColumnName(name) = target else {
        return Err(SqlError::unsupported("tuple assignments are not supported"));
    };
    let n = name.to_string();
    let n = n.rsplit('.').next().unwrap_or(&n).trim_matches('`').to_string();
    named_column(table.def(), &n)
}

/// The column a statement names (never the hidden key).
fn named_column(def: &TableDef, name: &str) -> SqlResult<ColumnId> {
    def.column_id(name).ok().filter(|&c| def.is_visible(c)).ok_or_else(|| SqlError::bad_field(name, "field list"))
}

/// Binds the TableCol references of single-table expressions to the full
/// row positions (column id = position).
fn full_row(e: SExpr) -> SqlResult<SExpr> {
    e.map(&mut |x| match x {
        SExpr::TableCol(0, c) => Ok(SExpr::Col(c as usize)),
        SExpr::TableCol(..) => Err(SqlError::unsupported("multi-table UPDATE/DELETE is not supported")),
        other => Ok(other),
    })
}

/// MySQL runs an UPDATE's assignments left to right, each seeing the
/// values the ones before it gave (`SET a = a + 1, b = a` sets b to the new
/// a): a column an earlier assignment set is replaced by that assignment's
/// expression, so the sets can then be evaluated against the old row alone
/// (here or on the data node).
fn after_earlier_sets(e: SExpr, earlier: &[(ColumnId, SExpr)]) -> SqlResult<SExpr> {
    if earlier.is_empty() {
        return Ok(e);
    }
    e.map(&mut |x| match x {
        SExpr::TableCol(0, c) => match earlier.iter().rev().find(|(set, _)| *set == c) {
            Some((_, value)) => Ok(value.clone()),
            None => Ok(x),
        },
        other => Ok(other),
    })
}

/// Table, alias, WHERE, ORDER BY, LIMIT and SET of an UPDATE or DELETE.
type WriteParts<'a> = (
    &'a ast::ObjectName,
    Option<String>,
    &'a Option<ast::Expr>,
    &'a Vec<ast::OrderByExpr>,
    &'a Option<ast::Expr>,
    &'a [ast::Assignment],
);

/// UPDATE and DELETE: the WHERE/ORDER BY/LIMIT become a SELECT of whole
/// rows; a WHERE that is exactly a key lookup writes without reading.
pub async fn plan_write<C: Catalog>(catalog: &C, stmt: &Statement) -> SqlResult<WritePlan> {
    if let Some(plan) = plan_joined_write(catalog, stmt).await? {
        return Ok(plan);
    }
    let (name, alias, selection, order_by, limit, assignments): WriteParts = match stmt {
        Statement::Update(u) => {
            if u.from.is_some() {
                return Err(SqlError::unsupported(
                    "UPDATE ... FROM is not supported; write UPDATE t JOIN u ON ... SET",
                ));
            }
            let ast::TableFactor::Table { name, alias, .. } = &u.table.relation else {
                return Err(SqlError::unsupported("UPDATE of a derived table is not supported"));
            };
            (name, alias.as_ref().map(|a| a.name.value.clone()), &u.selection, &u.order_by, &u.limit, &u.assignments)
        }
        Statement::Delete(d) => {
            let from = match &d.from {
                ast::FromTable::WithFromKeyword(f) | ast::FromTable::WithoutKeyword(f) => f,
            };
            if from.len() != 1 || !from[0].joins.is_empty() || !d.tables.is_empty() || d.using.is_some() {
                return Err(SqlError::unsupported("multi-table DELETE is not supported"));
            }
            let ast::TableFactor::Table { name, alias, .. } = &from[0].relation else {
                return Err(SqlError::unsupported("DELETE from a derived table is not supported"));
            };
            (name, alias.as_ref().map(|a| a.name.value.clone()), &d.selection, &d.order_by, &d.limit, &[])
        }
        _ => return Err(SqlError::general("internal: not an UPDATE or DELETE")),
    };
    let (db, tname) = table_name(name)?;
    let (db, kind) = catalog.resolve(db.as_deref(), &tname).await?;
    let table = stored(kind, &tname)?;
    // Reuse the SELECT planner: SELECT * FROM t WHERE ... ORDER BY ... LIMIT ... FOR UPDATE.
    let query = locking_select(&table, &db, &tname, alias.as_deref(), selection, order_by, limit)?;
    let select = plan_select(catalog, &query).await?;
    let scope = [scope_of(&table, alias.as_deref().unwrap_or(&tname))];
    let mut sets = Vec::new();
    for a in assignments {
        let c = assignment_column(&table, &a.target)?;
        let bound = Binder::new(&scope, "field list").bind(&a.value)?;
        sets.push((c, after_earlier_sets(bound, &sets)?));
    }
    let direct = match &select.access {
        Access::Keys(keys) if select.filter.is_none() && select.order.is_empty() && select.limit.is_none() => {
            // A new primary key moves the row: that needs the old row.
            let moves_key = sets.iter().any(|(c, _)| table.def().primary_key.contains(c));
            let all_pushable = sets.iter().all(|(_, e)| data_node_expr(e).is_some());
            // A clock column changes only with the row: that needs the old row too.
            let clocked = !sets.is_empty()
                && table
                    .def()
                    .columns
                    .iter()
                    .enumerate()
                    .any(|(i, column)| column.clock.on_update && !sets.iter().any(|(c, _)| *c as usize == i));
            (all_pushable && !moves_key && !clocked).then(|| keys.clone())
        }
        _ => None,
    };
    let sets = sets.into_iter().map(|(c, e)| Ok((c, full_row(e)?))).collect::<SqlResult<_>>()?;
    Ok(WritePlan { table, select, sets, direct, joined_values: 0 })
}

/// MySQL's strict mode refuses an UPDATE or DELETE whose key lookup is
/// given text that is not wholly a number for a numeric column (`WHERE id =
/// '4abc'`: error 1292), where a SELECT reads the number it starts with.
fn no_text_keys_of_numbers(plan: &WritePlan, env: &Env) -> SqlResult<()> {
    let def = plan.table.def();
    if plan.select.sources.len() != 1 {
        // A multi-table write: the access path may be another table's.
        return Ok(());
    }
    // (A direct write's keys are these same key lookups.)
    let keyed: Vec<(&SExpr, ColumnId)> = match &plan.select.access {
        Access::Keys(keys) => keys.iter().flat_map(|k| k.iter().zip(def.primary_key.iter().copied())).collect(),
        Access::Range { columns, eq, .. } => eq.iter().zip(columns.iter().copied()).collect(),
        Access::Full => Vec::new(),
    };
    for (e, c) in keyed {
        let numeric_column =
            matches!(def.columns[c as usize].ty, ColumnType::Integer { .. } | ColumnType::Decimal { .. });
        if let (true, Value::Str(s)) = (numeric_column, e.eval(&[], env)?) {
            if !crate::eval::is_number_text(&s) {
                return Err(SqlError::new(
                    crate::error::ER_TRUNCATED_WRONG_VALUE,
                    "22007",
                    format!("Truncated incorrect DECIMAL value: '{s}'"),
                ));
            }
        }
    }
    Ok(())
}

/// `SELECT * FROM db.t [AS alias] [WHERE ...] [ORDER BY ...] [LIMIT n] FOR
/// UPDATE` made of the UPDATE's or DELETE's own clauses: a template parsed
/// once, its parts replaced (their text is never printed and parsed again).
/// A table with a hidden key or dropped columns lists every column, which
/// `*` would not.
fn locking_select(
    table: &Table,
    db: &str,
    name: &str,
    alias: Option<&str>,
    selection: &Option<ast::Expr>,
    order_by: &[ast::OrderByExpr],
    limit: &Option<ast::Expr>,
) -> SqlResult<ast::Query> {
    static TEMPLATE: std::sync::OnceLock<Option<ast::Query>> = std::sync::OnceLock::new();
    let template = TEMPLATE.get_or_init(|| {
        let parsed = crate::parse::parse("SELECT * FROM `d`.`t` AS `a` FOR UPDATE").ok()?;
        match parsed.statements.into_iter().next() {
            Some(Statement::Query(q)) => Some(*q),
            _ => None,
        }
    });
    let internal = || SqlError::general("internal: the template of UPDATE/DELETE's locking read did not parse");
    let mut query = template.clone().ok_or_else(internal)?;
    let ast::SetExpr::Select(select) = query.body.as_mut() else {
        return Err(internal());
    };
    let quoted = |s: &str| ast::Ident::with_quote('`', s);
    if let Some(columns) = row_select_list(table, None) {
        select.projection = columns.into_iter().map(ast::SelectItem::UnnamedExpr).collect();
    }
    let Some(ast::TableFactor::Table { name: table_name, alias: table_alias, .. }) =
        select.from.first_mut().map(|f| &mut f.relation)
    else {
        return Err(internal());
    };
    *table_name = ast::ObjectName::from(vec![quoted(db), quoted(name)]);
    match (table_alias.as_mut(), alias) {
        (Some(a), Some(given)) => a.name = quoted(given),
        _ => *table_alias = None,
    }
    select.selection = selection.clone();
    query.order_by = (!order_by.is_empty())
        .then(|| ast::OrderBy { kind: ast::OrderByKind::Expressions(order_by.to_vec()), interpolate: None });
    query.limit_clause =
        limit.clone().map(|l| ast::LimitClause::LimitOffset { limit: Some(l), offset: None, limit_by: Vec::new() });
    Ok(query)
}

/// The select list of every column of `table` in order, the hidden key
/// included (`*` leaves it out).
fn every_column(table: &Table, qualifier: Option<&str>) -> String {
    match row_select_list(table, qualifier) {
        Some(columns) => columns.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(", "),
        None => match qualifier {
            Some(q) => format!("{}.*", ast::Ident::with_quote('`', q)),
            None => "*".to_string(),
        },
    }
}

/// Every column of `table` in the order of its ids, for a read whose rows
/// are indexed by column id; None when `*` is that list (no hidden key, no
/// dropped column). A dropped column has no name: NULL keeps the others at
/// their places.
fn row_select_list(table: &Table, qualifier: Option<&str>) -> Option<Vec<ast::Expr>> {
    let def = table.def();
    if def.hidden_key().is_none() && !def.has_dropped_columns() {
        return None;
    }
    let column = |c: &latsdb_types::schema::ColumnDef| match (c.is_dropped(), qualifier) {
        (true, _) => ast::Expr::value(ast::Value::Null),
        (false, None) => ast::Expr::Identifier(ast::Ident::with_quote('`', &c.name)),
        (false, Some(q)) => {
            ast::Expr::CompoundIdentifier(vec![ast::Ident::with_quote('`', q), ast::Ident::with_quote('`', &c.name)])
        }
    };
    Some(def.columns.iter().map(column).collect())
}

/// Plans the SELECT an UPDATE or DELETE was rewritten into, reading its
/// rows under exclusive locks.
async fn plan_locking_select<C: Catalog>(catalog: &C, mut sql: String) -> SqlResult<crate::plan::SelectPlan> {
    sql.push_str(" FOR UPDATE");
    let parsed = crate::parse::parse(&sql)?;
    let Some(Statement::Query(q)) = parsed.statements.first() else {
        return Err(SqlError::general("internal: rewritten UPDATE/DELETE did not parse as a query"));
    };
    plan_select(catalog, q).await
}

/// A multi-table UPDATE or DELETE (`UPDATE t JOIN u ON ... SET t.c = ...`,
/// `DELETE t FROM t JOIN u ON ...`, `DELETE FROM t USING t JOIN u ...`):
/// one target table, whose rows the join matches are read under exclusive
/// locks (`SELECT DISTINCT t.* ... FOR UPDATE`) and then written by key.
/// SET writes only the target's columns; a value may read the other tables
/// (the SELECT computes it from the first joined row). None for a
/// single-table statement.
async fn plan_joined_write<C: Catalog>(catalog: &C, stmt: &Statement) -> SqlResult<Option<WritePlan>> {
    let (source, target, selection, order_limit, assignments): (
        &[ast::TableWithJoins],
        Option<&ast::ObjectName>,
        _,
        bool,
        &[ast::Assignment],
    ) = match stmt {
        Statement::Update(u) if !u.table.joins.is_empty() => (
            std::slice::from_ref(&u.table),
            None,
            &u.selection,
            !u.order_by.is_empty() || u.limit.is_some(),
            &u.assignments,
        ),
        Statement::Delete(d) => {
            let from = match &d.from {
                ast::FromTable::WithFromKeyword(f) | ast::FromTable::WithoutKeyword(f) => f,
            };
            let source = match &d.using {
                Some(using) => using,
                None => from,
            };
            if d.tables.is_empty() && d.using.is_none() && from.len() == 1 && from[0].joins.is_empty() {
                return Ok(None);
            }
            if d.tables.len() > 1 || (d.using.is_some() && from.len() != 1) {
                return Err(SqlError::unsupported(
                    "DELETE from several tables at once is not supported; delete from one table per statement",
                ));
            }
            let target = d.tables.first().or(match &from[0].relation {
                ast::TableFactor::Table { name, .. } if d.using.is_some() => Some(name),
                _ => None,
            });
            (source.as_slice(), target, &d.selection, !d.order_by.is_empty() || d.limit.is_some(), &[])
        }
        _ => return Ok(None),
    };
    if order_limit {
        return Err(SqlError::new(1221, "HY000", "Incorrect usage of multi-table UPDATE/DELETE and ORDER BY or LIMIT"));
    }
    // The target: named by DELETE, else UPDATE's first table; by alias or name.
    let relations: Vec<&ast::TableFactor> = source
        .iter()
        .flat_map(|item| std::iter::once(&item.relation).chain(item.joins.iter().map(|j| &j.relation)))
        .collect();
    let named = |f: &ast::TableFactor, n: &str| match f {
        ast::TableFactor::Table { name, alias, .. } => match alias {
            Some(a) => a.name.value.eq_ignore_ascii_case(n),
            None => table_name(name).is_ok_and(|(_, t)| t.eq_ignore_ascii_case(n)),
        },
        _ => false,
    };
    let factor = match target {
        Some(t) => {
            let (_, n) = table_name(t)?;
            *relations
                .iter()
                .find(|f| named(f, &n))
                .ok_or_else(|| SqlError::new(1109, "42S02", format!("Unknown table '{n}' in MULTI DELETE")))?
        }
        None => relations[0],
    };
    let ast::TableFactor::Table { name, alias, .. } = factor else {
        return Err(SqlError::unsupported("writing a derived table is not supported"));
    };
    let (db, tname) = table_name(name)?;
    let (_, kind) = catalog.resolve(db.as_deref(), &tname).await?;
    let table = stored(kind, &tname)?;
    let shown = alias.as_ref().map_or(tname.clone(), |a| a.name.value.clone());
    let scope = [scope_of(&table, &shown)];
    // A SET value that reads the other tables (`SET t.c = u.c`) is computed
    // by the SELECT, as a value after the target's columns, from the first
    // joined row of each target row (MySQL updates a row once).
    let columns = table.def().columns.len();
    let mut from_join = Vec::new();
    let mut sets = Vec::new();
    for a in assignments {
        if let AssignmentTarget::ColumnName(n) = &a.target {
            let parts = crate::plan::object_parts(n);
            if parts.len() > 1 && !parts[parts.len() - 2].eq_ignore_ascii_case(&shown) {
                return Err(SqlError::unsupported(format!(
                    "a multi-table UPDATE writes one table ({shown}); SET {n} names another"
                )));
            }
        }
        let c = assignment_column(&table, &a.target)?;
        let bound = match Binder::new(&scope, "field list").bind(&a.value) {
            Err(e) if e.code == crate::error::ER_BAD_FIELD => {
                from_join.push(a.value.to_string());
                SExpr::TableCol(0, (columns + from_join.len() - 1) as u16)
            }
            other => after_earlier_sets(other?, &sets)?,
        };
        sets.push((c, bound));
    }
    let from = source.iter().map(|item| item.to_string()).collect::<Vec<_>>().join(", ");
    let mut sql = format!("SELECT DISTINCT {}", every_column(&table, Some(&shown)));
    for value in &from_join {
        sql.push_str(&format!(", ({value})"));
    }
    sql.push_str(&format!(" FROM {from}"));
    if let Some(w) = selection {
        sql.push_str(&format!(" WHERE {w}"));
    }
    let select = plan_locking_select(catalog, sql).await?;
    let sets = sets.into_iter().map(|(c, e)| Ok((c, full_row(e)?))).collect::<SqlResult<_>>()?;
    Ok(Some(WritePlan { table, select, sets, direct: None, joined_values: from_join.len() }))
}

/// An assignment the data node computes from the current row, if the
/// expression has that form (columns, constants, parameters, + - *).
/// Parameters and constants stay SExprs and are filled in at execution.
fn data_node_expr(e: &SExpr) -> Option<()> {
    match e {
        SExpr::TableCol(0, _) | SExpr::Const(_) | SExpr::Param(_) => Some(()),
        SExpr::Arith(Arith::Add | Arith::Sub | Arith::Mul, a, b) => {
            data_node_expr(a)?;
            data_node_expr(b)
        }
        _ => None,
    }
}

/// Whether the data nodes compute every assignment of a key-addressed
/// UPDATE as MySQL does: integer arithmetic into an integer column, integer
/// and DECIMAL arithmetic into a DECIMAL column, over signed operands, and a
/// column copied into a column of the same type. Anything else (text read
/// as a number, DOUBLE, unsigned subtraction, conversions) reads the row
/// and computes here.
fn data_nodes_compute_alike(plan: &WritePlan, env: &Env) -> SqlResult<bool> {
    let columns = &plan.table.def().columns;
    for (target, e) in &plan.sets {
        let target_ty = columns[*target as usize].ty;
        let alike = match e {
            SExpr::Col(c) => columns[*c].ty == target_ty,
            SExpr::Arith(..) => match target_ty {
                ColumnType::Integer { .. } => operands_alike(e, columns, false, false, env)?,
                ColumnType::Decimal { .. } => operands_alike(e, columns, true, false, env)?,
                _ => false,
            },
            _ => true,
        };
        if !alike {
            return Ok(false);
        }
    }
    Ok(true)
}

/// `under_sub`: below a subtraction, where an unsigned operand makes MySQL
/// compute unsigned (and refuse a negative result).
fn operands_alike(e: &SExpr, columns: &[ColumnDef], decimal: bool, under_sub: bool, env: &Env) -> SqlResult<bool> {
    Ok(match e {
        SExpr::Arith(op, a, b) => {
            let under_sub = under_sub || matches!(op, Arith::Sub);
            operands_alike(a, columns, decimal, under_sub, env)? && operands_alike(b, columns, decimal, under_sub, env)?
        }
        SExpr::Col(c) => match columns[*c].ty {
            ColumnType::Integer { unsigned, .. } => !(unsigned && under_sub),
            ColumnType::Decimal { .. } => decimal,
            _ => false,
        },
        other => match other.eval(&[], env)? {
            Value::Int(_) => true,
            Value::UInt(_) => !under_sub,
            Value::Decimal(_) => decimal,
            _ => false,
        },
    })
}

fn to_data_node(e: &SExpr, table: &Table, target: ColumnId, env: &Env) -> SqlResult<Expr> {
    Ok(match e {
        SExpr::Col(c) => Expr::Column(*c as ColumnId),
        SExpr::Arith(op, a, b) => {
            let op = match op {
                Arith::Add => ArithOp::Add,
                Arith::Sub => ArithOp::Sub,
                Arith::Mul => ArithOp::Mul,
                _ => return Err(SqlError::general("internal: operator not computed on data nodes")),
            };
            Expr::Arith(
                op,
                Box::new(to_data_node(a, table, target, env)?),
                Box::new(to_data_node(b, table, target, env)?),
            )
        }
        other => {
            let v = other.eval(&[], env)?;
            // A whole-value assignment is converted to the column's type here;
            // an operand of arithmetic is only read as a number.
            let column = &table.def().columns[target as usize];
            match v {
                Value::Str(_) | Value::Bytes(_) if !column.ty.is_string() && !column.ty.is_binary() => {
                    Expr::Const(crate::eval::numeric(&v))
                }
                other => Expr::Const(other),
            }
        }
    })
}

/// The primary-key values of a whole row (column id = position), as the
/// key compares them: text of a case-insensitive column as its weight, so
/// two rows of one statement that share a key compare equal here.
pub(crate) fn key_of(def: &latsdb_types::schema::TableDef, row: &[Value]) -> Vec<Value> {
    weighed_key(def, def.primary_key.iter().map(|&c| row[c as usize].clone()).collect())
}

/// A primary key (values in key order) with case-insensitive text as its
/// weight; it finds the same row.
fn weighed_key(def: &latsdb_types::schema::TableDef, mut key: Vec<Value>) -> Vec<Value> {
    for (v, &c) in key.iter_mut().zip(&def.primary_key) {
        match def.columns.get(c as usize) {
            Some(column) if column.collation.is_case_insensitive() => {
                *v = crate::exec::weight(v, column.collation).into_owned()
            }
            _ => {}
        }
    }
    key
}

/// The data node's duplicate-key error names no key; MySQL's does. Nothing
/// of the failed INSERT was written (its writes commit together), so the
/// key to name is one the rows share or one already stored. `written`: the
/// primary keys of the statement's rows as written (`written_key`); the
/// comparisons use their weights.
async fn name_duplicate(table: &Arc<Table>, e: SqlError, written: Vec<Vec<Value>>, ctx: &mut Ctx<'_>) -> SqlError {
    if e.code != crate::error::ER_DUP_ENTRY || e.message.starts_with("Duplicate entry") {
        return e;
    }
    if let [key] = written.as_slice() {
        return duplicate_entry(table, key);
    }
    let def = table.def();
    let keys: Vec<Vec<Value>> = written.iter().map(|k| weighed_key(def, k.clone())).collect();
    if let Some(i) = (0..keys.len()).find(|&i| keys[..i].contains(&keys[i])) {
        return duplicate_entry(table, &written[i]);
    }
    let Ok(reads) = keys.iter().map(|k| Op::read(table, k)).collect::<latsdb_types::Result<Vec<_>>>() else {
        return e;
    };
    let found = ctx.run_ops(reads).await.unwrap_or_default();
    match written.iter().zip(found).find(|(_, f)| matches!(f, Outcome::Row(_))) {
        Some((key, _)) => duplicate_entry(table, key),
        None => e,
    }
}

/// The primary key of `row` as written (`key_of` gives its weight).
fn written_key(def: &latsdb_types::schema::TableDef, row: &[Value]) -> Vec<Value> {
    def.primary_key.iter().map(|&c| row[c as usize].clone()).collect()
}

/// Error 1062 naming a primary key as the new row has it: MySQL shows the
/// value written, not the stored row's nor a collation weight ('Creme'
/// against a stored 'crème' is "Duplicate entry 'Creme'").
fn duplicate_entry(table: &Table, written: &[Value]) -> SqlError {
    let shown: Vec<String> = written.iter().map(crate::eval::to_text).collect();
    SqlError::new(
        crate::error::ER_DUP_ENTRY,
        "23000",
        format!("Duplicate entry '{}' for key '{}.PRIMARY'", shown.join("-"), table.def().name),
    )
}

/// For each row, the primary key of another row that holds its values in a
/// unique index (the first such index), read under exclusive locks: a
/// stored row, or an earlier row of the statement taking the same values
/// (MySQL writes the rows one by one). `statement_first`: the earlier row
/// wins over a stored one (REPLACE, whose earlier row has deleted the
/// stored one by then, and which writes every row); else the stored one
/// does (IGNORE and ON DUPLICATE KEY UPDATE, whose earlier row met it
/// first), and an earlier row takes its values only when it is inserted:
/// its key is free (`key_taken` says which are stored), no earlier
/// inserted row has it, and nothing holds its unique values. Each holder
/// comes with whether it is a row of the statement (else a stored one).
async fn unique_holders(
    table: &Arc<Table>,
    rows: &[Vec<Value>],
    statement_first: bool,
    key_taken: &[bool],
    ctx: &mut Ctx<'_>,
) -> SqlResult<Vec<Option<(Vec<Value>, bool)>>> {
    let def = table.def();
    let mut holders = vec![None; rows.len()];
    let (probes, found) = read_unique_entries(table, rows, ctx).await?;
    let keys: Vec<Vec<Value>> = rows.iter().map(|r| key_of(def, r)).collect();
    let mut by_row: Vec<usize> = (0..probes.len()).collect();
    by_row.sort_by_key(|&i| probes[i].row);
    let mut inserted = vec![statement_first; rows.len()];
    let mut at = 0;
    for row in 0..rows.len() {
        while let Some(&i) = by_row.get(at).filter(|&&i| probes[i].row == row) {
            at += 1;
            let p = &probes[i];
            if holders[row].is_some() {
                continue;
            }
            let earlier = probes
                .iter()
                .find(|q| q.index == p.index && q.entry == p.entry && q.row < row && inserted[q.row])
                .map(|q| (keys[q.row].clone(), true));
            let stored = p.other_row(&found[i]).map(|k| (weighed_key(def, k), false));
            holders[row] = if statement_first { earlier.or(stored) } else { stored.or(earlier) };
        }
        if !statement_first {
            inserted[row] = !key_taken.get(row).copied().unwrap_or(false)
                && holders[row].is_none()
                && !(0..row).any(|e| inserted[e] && keys[e] == keys[row]);
        }
    }
    Ok(holders)
}

/// The unique-index entries rows would take, read under exclusive locks.
async fn read_unique_entries(
    table: &Arc<Table>,
    rows: &[Vec<Value>],
    ctx: &mut Ctx<'_>,
) -> SqlResult<(Vec<latsdb_client::UniqueProbe>, Vec<Outcome>)> {
    let probes = ctx.client.unique_probes(table, rows).await?;
    let found = ctx.run_ops(probes.iter().map(|p| p.read.clone()).collect()).await?;
    Ok((probes, found))
}

/// Fails with 1062 if rows (whole, new) would take values that other rows
/// hold in a unique index, or that two of them share; the entries are read
/// under exclusive locks, so the values stay free until the write.
async fn check_unique(table: &Arc<Table>, rows: &[Vec<Value>], ctx: &mut Ctx<'_>) -> SqlResult<()> {
    let (probes, found) = read_unique_entries(table, rows, ctx).await?;
    for (i, p) in probes.iter().enumerate() {
        if probes[..i].iter().any(|q| q.index == p.index && q.entry == p.entry) {
            return Err(duplicate_unique(table, p));
        }
    }
    match probes.iter().zip(&found).find(|(p, f)| p.holds_other_row(f)) {
        Some((p, _)) => Err(duplicate_unique(table, p)),
        None => Ok(()),
    }
}

fn duplicate_unique(table: &Table, probe: &latsdb_client::UniqueProbe) -> SqlError {
    let shown: Vec<String> = probe.values.iter().map(crate::eval::to_text).collect();
    SqlError::new(
        crate::error::ER_DUP_ENTRY,
        "23000",
        format!("Duplicate entry '{}' for key '{}.{}'", shown.join("-"), table.def().name, probe.index),
    )
}

pub struct WriteResult {
    pub affected: u64,
    pub last_insert_id: Option<u64>,
    /// MySQL's warnings: values INSERT IGNORE stored in place of ones the
    /// columns could not hold (level "Warning", code, message).
    pub warnings: Warnings,
}

/// MySQL warnings of a statement: code and message.
pub type Warnings = Vec<(u16, String)>;

/// The warning MySQL gives where IGNORE stored a nearest value instead of
/// failing with `e`, for row `row` (from 1).
fn ignored_warning(e: SqlError, column: &ColumnDef, row: usize) -> (u16, String) {
    match e.code {
        crate::error::ER_DATA_TOO_LONG => (1265, format!("Data truncated for column '{}' at row {row}", column.name)),
        crate::error::ER_WARN_DATA_OUT_OF_RANGE => {
            (e.code, format!("Out of range value for column '{}' at row {row}", column.name))
        }
        crate::error::ER_BAD_NULL => (e.code, e.message),
        _ => (e.code, format!("{} at row {row}", e.message)),
    }
}

/// When the statement began, as NOW(6) reads it (the session's one time
/// per statement; the clock where there is no session).
fn statement_time(env: &crate::eval::Env) -> i64 {
    match env.session.session_value(&crate::eval::SessionValue::Now(6)) {
        Ok(Value::DateTime(us)) => us,
        _ => crate::session::now_micros(),
    }
}

pub async fn run_insert<A: AutoIncrement>(plan: &InsertPlan, ctx: &mut Ctx<'_>, auto: &A) -> SqlResult<WriteResult> {
    // Strict mode: text that is no number fails the write (IGNORE turns
    // that into warnings, which latsdb does not do for arithmetic yet).
    ctx.env.strict_numbers = !matches!(plan.conflict, OnConflict::Ignore);
    // Every row's clock columns take the one time of the statement.
    let statement_time = statement_time(&ctx.env);
    let table = &plan.table;
    let def = table.def();
    let n = def.columns.len();
    let auto_col = auto.auto_column(table).await?;
    // Values of each row, in target order.
    let source_rows: Vec<Vec<Value>> = match &plan.source {
        InsertSource::Values(rows) => {
            let mut out = Vec::with_capacity(rows.len());
            for r in rows {
                out.push(r.iter().map(|e| e.eval(&[], &ctx.env)).collect::<SqlResult<Vec<_>>>()?);
            }
            out
        }
        InsertSource::Select(select) => run_select(select, ctx).await?,
    };
    let mut rows: Vec<Vec<Value>> = Vec::with_capacity(source_rows.len());
    let mut warnings = Vec::new();
    let mut need_auto = 0u64;
    let mut explicit_max: Option<u64> = None;
    for values in source_rows {
        let mut row: Vec<Option<Value>> = vec![None; n];
        for (v, &c) in values.into_iter().zip(&plan.columns) {
            row[c as usize] = Some(v);
        }
        let mut full = Vec::with_capacity(n);
        for (c, slot) in row.into_iter().enumerate() {
            let column = &def.columns[c];
            let is_auto = auto_col == Some(c as ColumnId);
            let v = match slot {
                // NULL or 0 asks for the next value, as MySQL does by default.
                Some(v) if is_auto && (v.is_null() || crate::eval::numeric(&v).as_i64() == Some(0)) => Value::Null,
                Some(v) if matches!(plan.conflict, OnConflict::Ignore) => {
                    let (v, replaced) = crate::eval::to_column_ignoring(v, column)?;
                    if let Some(e) = replaced {
                        warnings.push(ignored_warning(e, column, rows.len() + 1));
                    }
                    v
                }
                Some(v) => to_column(v, column)?,
                None if is_auto => Value::Null,
                None if column.clock.on_insert => to_column(
                    Value::DateTime(crate::session::to_digits(statement_time, column.fraction_digits)),
                    column,
                )?,
                None => match &column.default {
                    Some(d) => d.clone(),
                    None if column.nullable => Value::Null,
                    // IGNORE: the type's zero, as MySQL gives with a warning.
                    None if matches!(plan.conflict, OnConflict::Ignore) => {
                        warnings.push((1364, format!("Field '{}' doesn't have a default value", column.name)));
                        crate::eval::to_column_ignoring(Value::Null, column)?.0
                    }
                    None => {
                        return Err(SqlError::new(
                            1364,
                            "HY000",
                            format!("Field '{}' doesn't have a default value", column.name),
                        ))
                    }
                },
            };
            if is_auto {
                match &v {
                    Value::Null => need_auto += 1,
                    other => {
                        if let Some(u) = other.as_u64() {
                            explicit_max = Some(explicit_max.map_or(u, |m: u64| m.max(u)));
                        }
                    }
                }
            }
            full.push(v);
        }
        rows.push(full);
    }
    let mut first_auto = None;
    if let Some(c) = auto_col {
        if need_auto > 0 {
            let mut next = auto.next_values(table, need_auto).await?;
            // The hidden key's numbers are no insert id a client sees.
            first_auto = def.is_visible(c).then_some(next);
            for row in &mut rows {
                if row[c as usize].is_null() {
                    row[c as usize] = to_column(Value::UInt(next), &def.columns[c as usize])?;
                    next += 1;
                }
            }
        }
        if let Some(m) = explicit_max {
            auto.saw_value(table, m).await?;
        }
    }
    for r in &rows {
        let key = key_of(def, r);
        ctx.note_write(table, &key);
    }
    if crate::foreign::involved(def, ctx) {
        crate::foreign::refuse_parent_rewrites(def, &plan.conflict)?;
        rows = crate::foreign::rows_with_parents(table, rows, &plan.conflict, &mut warnings, ctx).await?;
    }
    let affected = match &plan.conflict {
        OnConflict::Error => {
            // One row: its insert alone fails on a taken key, and the
            // cluster keeps the transaction open (nothing else changed).
            // (A table with unique indexes writes their entries too.)
            let single = rows.len() == 1 && !table.def().has_unique_indexes();
            if ctx.in_explicit_transaction() {
                // A failed operation aborts the whole cluster transaction, but
                // MySQL undoes only the failed statement: look for existing
                // keys first (under exclusive locks, so nobody inserts them
                // meanwhile) and fail the statement alone.
                let keys: Vec<Vec<Value>> = rows.iter().map(|r| key_of(def, r)).collect();
                let reads = keys
                    .iter()
                    .filter(|_| !single)
                    .map(|k| Op::read_locked(table, k, LockMode::Exclusive))
                    .collect::<latsdb_types::Result<Vec<_>>>()?;
                for (row, found) in rows.iter().zip(ctx.run_ops(reads).await?) {
                    if matches!(found, Outcome::Row(_)) {
                        return Err(duplicate_entry(table, &written_key(def, row)));
                    }
                }
                for (i, k) in keys.iter().enumerate() {
                    if keys[..i].contains(k) {
                        return Err(duplicate_entry(table, &written_key(def, &rows[i])));
                    }
                }
                // And in the unique indexes (their entries locked as well).
                check_unique(table, &rows, ctx).await?;
            }
            let written: Vec<Vec<Value>> = rows.iter().map(|r| written_key(def, r)).collect();
            let ops = rows.into_iter().map(|r| Op::insert(table, r)).collect::<latsdb_types::Result<Vec<_>>>()?;
            let count = ops.len() as u64;
            match ctx.run_last_ops(ops).await {
                Ok(_) => count,
                Err(e) => return Err(name_duplicate(table, e, written, ctx).await),
            }
        }
        OnConflict::Replace => {
            // As MySQL's REPLACE: other rows holding a new row's values in
            // a unique index are deleted first.
            let holders = unique_holders(table, &rows, true, &[], ctx).await?;
            let keys: Vec<Vec<Value>> = rows.iter().map(|r| key_of(def, r)).collect();
            // Keys as the table compares them ('fig' and 'FIG' are one key of
            // a case-insensitive column).
            let weighed: Vec<Vec<Value>> = keys.iter().map(|k| weighed_key(def, k.clone())).collect();
            let mut gone: Vec<Vec<Value>> = Vec::new();
            // Earlier rows of the statement that a later one replaces
            // through a unique index: never written (their key is deleted
            // unless another row of the statement takes it).
            let mut dropped: Vec<usize> = Vec::new();
            for (i, holder) in holders.iter().enumerate() {
                let Some((k, in_statement)) = holder else { continue };
                let k = weighed_key(def, k.clone());
                match weighed[..i].iter().rposition(|e| *e == k) {
                    Some(j) if *in_statement && k != weighed[i] => dropped.push(j),
                    // A stored holder that an earlier row of the statement
                    // rewrote (same key) holds the values no more: that row
                    // would be the holder if it had taken them again.
                    Some(_) => {}
                    None if !gone.contains(&k) && !weighed.contains(&k) => gone.push(k),
                    None => {}
                }
            }
            for k in &gone {
                ctx.note_write(table, k);
            }
            let deletes = gone.iter().map(|k| Op::delete(table, k)).collect::<latsdb_types::Result<Vec<_>>>()?;
            ctx.run_ops(deletes).await?;
            // MySQL counts 1 per row inserted and 2 per row that replaced
            // another (stored before, or written earlier in the same
            // statement). A row replaced by an identical one counts 1, but
            // only in a table without unique secondary indexes: with one,
            // the primary key is not the last unique key, and MySQL deletes
            // and inserts even an identical row. So the stored rows are
            // read first, under locks.
            let delete_and_insert = def.has_unique_indexes();
            let reads = keys
                .iter()
                .map(|k| Op::read_locked(table, k, LockMode::Exclusive))
                .collect::<latsdb_types::Result<Vec<_>>>()?;
            let existing = ctx.run_ops(reads).await?;
            let mut count = gone.len() as u64;
            for (i, (k, found)) in weighed.iter().zip(existing).enumerate() {
                let before = match weighed[..i].iter().rposition(|e| e == k) {
                    Some(j) => Some(rows[j].clone()),
                    None => match found {
                        Outcome::Row(old) => Some(old.values()),
                        _ => None,
                    },
                };
                count += match before {
                    Some(old) if delete_and_insert || old != rows[i] => 2,
                    _ => 1,
                };
            }
            // Each dropped row was deleted again by the row after it.
            count += dropped.len() as u64;
            // A dropped row took the place of the earlier rows with its key;
            // its key ends deleted unless a later row takes it again.
            let mut unwritten = vec![false; rows.len()];
            let mut ops = Vec::with_capacity(rows.len());
            for &j in &dropped {
                for (m, k) in weighed[..=j].iter().enumerate() {
                    unwritten[m] |= *k == weighed[j];
                }
                if !weighed[j + 1..].contains(&weighed[j]) {
                    ops.push(Op::delete(table, &keys[j])?);
                }
            }
            for (r, skip) in rows.into_iter().zip(unwritten) {
                if !skip {
                    ops.push(Op::upsert(table, r)?);
                }
            }
            ctx.run_last_ops(ops).await?;
            count
        }
        OnConflict::Ignore | OnConflict::Update(_) => {
            // Read each key under an exclusive lock, then insert or update.
            let keys: Vec<Vec<Value>> = rows.iter().map(|r| key_of(def, r)).collect();
            let reads = keys
                .iter()
                .map(|k| Op::read_locked(table, k, LockMode::Exclusive))
                .collect::<latsdb_types::Result<Vec<_>>>()?;
            let mut existing = ctx.run_ops(reads).await?;
            // A row whose key is free may still collide in a unique index:
            // then the row holding the values is the one that conflicts.
            let key_taken: Vec<bool> = existing.iter().map(|e| matches!(e, Outcome::Row(_))).collect();
            let holders = unique_holders(table, &rows, false, &key_taken, ctx).await?;
            let mut conflicting = keys.clone();
            let mut holder_reads = Vec::new();
            for (i, holder) in holders.into_iter().enumerate() {
                if let (Outcome::NotFound, Some((h, _))) = (&existing[i], holder) {
                    ctx.note_write(table, &h);
                    holder_reads.push((i, Op::read_locked(table, &h, LockMode::Exclusive)?));
                    conflicting[i] = h;
                }
            }
            let (at, reads): (Vec<usize>, Vec<Op>) = holder_reads.into_iter().unzip();
            for (i, found) in at.into_iter().zip(ctx.run_ops(reads).await?) {
                existing[i] = found;
            }
            let resolved = Resolving { conflict: &plan.conflict, env: &ctx.env, statement_time };
            let (writes, affected) = resolve_conflicts(def, &resolved, rows, conflicting, existing)?;
            if crate::foreign::involved(def, ctx) {
                let written: Vec<Vec<Value>> = writes.iter().map(|w| w.row.clone()).collect();
                let mut lookups = crate::foreign::Lookups::default();
                crate::foreign::check_parents(table, &written, &mut lookups, ctx).await?;
            }
            let ops = writes
                .into_iter()
                .map(|w| match w.assigned {
                    None => Op::insert(table, w.row),
                    Some(assigned) => {
                        Op::update_expr(table, &w.key, assigned.into_iter().map(|(c, v)| (c, Expr::Const(v))).collect())
                    }
                })
                .collect::<latsdb_types::Result<Vec<_>>>()?;
            ctx.run_last_ops(ops).await?;
            affected
        }
    };
    Ok(WriteResult { affected, last_insert_id: first_auto, warnings })
}

/// What decides the writes of INSERT IGNORE or ON DUPLICATE KEY UPDATE:
/// the clause, the values' environment and the statement's time.
struct Resolving<'a> {
    conflict: &'a OnConflict,
    env: &'a Env<'a>,
    statement_time: i64,
}

/// One key's write after INSERT IGNORE or ON DUPLICATE KEY UPDATE rows
/// were applied in order: an insert of `row`, or (`assigned`) an update of
/// the stored row `key`.
struct ResolvedWrite {
    key: Vec<Value>,
    row: Vec<Value>,
    assigned: Option<Vec<(ColumnId, Value)>>,
}

/// Applies the rows of an INSERT IGNORE or ON DUPLICATE KEY UPDATE in
/// order, as MySQL does: a row meets the stored row of its key (`existing`,
/// read under lock) or the row an earlier row of the statement left there.
/// Returns the writes, one per key, and MySQL's affected-row count: 1 per
/// row inserted, 2 per row an update changed, 0 per row left as it was.
fn resolve_conflicts(
    def: &latsdb_types::schema::TableDef,
    how: &Resolving<'_>,
    rows: Vec<Vec<Value>>,
    keys: Vec<Vec<Value>>,
    existing: Vec<Outcome>,
) -> SqlResult<(Vec<ResolvedWrite>, u64)> {
    let (conflict, env) = (how.conflict, how.env);
    let mut writes: Vec<ResolvedWrite> = Vec::new();
    let mut affected = 0;
    for ((row, key), found) in rows.into_iter().zip(keys).zip(existing) {
        let earlier = writes.iter().position(|w| w.key == key);
        let current = match (earlier, found) {
            (Some(i), _) => Some(writes[i].row.clone()),
            (None, Outcome::Row(old)) => Some(old.values()),
            (None, _) => None,
        };
        let (old, sets) = match (current, conflict) {
            (None, _) => {
                affected += 1;
                writes.push(ResolvedWrite { key, row, assigned: None });
                continue;
            }
            (Some(old), OnConflict::Update(sets)) => (old, sets),
            _ => continue,
        };
        // Assignments run left to right, each seeing the ones before it.
        let mut both = old.clone();
        both.extend(row);
        let mut assigned: Vec<(ColumnId, Value)> = Vec::with_capacity(sets.len());
        for (c, e) in sets {
            let v = to_column(e.eval(&both, env)?, &def.columns[*c as usize])?;
            both[*c as usize] = v.clone();
            match assigned.iter_mut().find(|(a, _)| a == c) {
                Some(slot) => slot.1 = v,
                None => assigned.push((*c, v)),
            }
        }
        both.truncate(old.len());
        if both == old {
            continue;
        }
        for (c, now) in clock_updates(def, sets.iter().map(|(c, _)| *c), how.statement_time)? {
            both[c as usize] = now.clone();
            assigned.push((c, now));
        }
        affected += 2;
        match earlier {
            Some(i) => {
                let w = &mut writes[i];
                w.row = both;
                if let Some(prior) = w.assigned.as_mut() {
                    for (c, v) in assigned {
                        match prior.iter_mut().find(|(a, _)| *a == c) {
                            Some(slot) => slot.1 = v,
                            None => prior.push((c, v)),
                        }
                    }
                }
            }
            None => writes.push(ResolvedWrite { key, row: both, assigned: Some(assigned) }),
        }
    }
    Ok((writes, affected))
}

/// The columns an UPDATE that changes a row sets to the current time (`ON
/// UPDATE CURRENT_TIMESTAMP`) because it does not name them, with that
/// time. The caller has checked that the row changes.
fn clock_updates(
    def: &latsdb_types::schema::TableDef,
    named: impl Iterator<Item = ColumnId> + Clone,
    statement_time: i64,
) -> SqlResult<Vec<(ColumnId, Value)>> {
    let mut out = Vec::new();
    for (i, column) in def.columns.iter().enumerate() {
        if column.clock.on_update && !named.clone().any(|c| c as usize == i) {
            let now = crate::session::to_digits(statement_time, column.fraction_digits);
            out.push((i as ColumnId, to_column(Value::DateTime(now), column)?));
        }
    }
    debug_assert!(out.iter().all(|(c, _)| def.columns[*c as usize].clock.on_update));
    Ok(out)
}

/// Rows an UPDATE or DELETE matched, and of those the rows it changed.
pub struct Affected {
    pub matched: u64,
    pub changed: u64,
}

pub async fn run_update(plan: &WritePlan, ctx: &mut Ctx<'_>, delete: bool) -> SqlResult<Affected> {
    // Strict mode for the values written (SET), not for the WHERE, which
    // reads text's numeric prefix as MariaDB does.
    ctx.env.strict_numbers = false;
    let statement_time = statement_time(&ctx.env);
    let table = &plan.table;
    let def = table.def();
    no_text_keys_of_numbers(plan, &ctx.env)?;
    // Inside a transaction a duplicate in a unique index must fail the
    // statement alone: the new values are checked before anything is
    // written, which takes the rows (so no direct path).
    let checks_unique = !delete && ctx.in_explicit_transaction() && def.has_unique_indexes();
    // The data nodes tell an update that left its row as it was
    // (`Unchanged`) from one that changed it, as MySQL counts them.
    // Foreign keys need the rows before and after.
    let foreign = crate::foreign::involved(def, ctx);
    let direct = match &plan.direct {
        Some(keys) if !checks_unique && !foreign && data_nodes_compute_alike(plan, &ctx.env)? => Some(keys),
        _ => None,
    };
    if let Some(keys) = direct {
        let seen = crate::exec::distinct_keys(table, keys, &ctx.env)?;
        ctx.env.strict_numbers = true;
        let mut ops = Vec::with_capacity(seen.len());
        for key in &seen {
            ctx.note_write(table, key);
            if delete {
                ops.push(Op::delete(table, key)?);
            } else {
                let mut set = Vec::with_capacity(plan.sets.len());
                for (c, e) in &plan.sets {
                    let expr = match e {
                        SExpr::Col(_) | SExpr::Arith(..) => to_data_node(e, table, *c, &ctx.env)?,
                        other => Expr::Const(to_column(other.eval(&[], &ctx.env)?, &def.columns[*c as usize])?),
                    };
                    set.push((*c, expr));
                }
                ops.push(Op::update_expr(table, key, set)?);
            }
        }
        let outcomes = ctx.run_last_ops(ops).await?;
        let changed = outcomes.iter().filter(|o| matches!(o, Outcome::Done)).count() as u64;
        let matched = changed + outcomes.iter().filter(|o| matches!(o, Outcome::Unchanged)).count() as u64;
        return Ok(Affected { matched, changed });
    }
    let mut rows = run_select(&plan.select, ctx).await?;
    if plan.joined_values > 0 {
        // By encoded key: 'a' and 'A ' are one key of a case-insensitive column.
        let mut seen = std::collections::HashSet::with_capacity(rows.len());
        let mut first = Vec::with_capacity(rows.len());
        for row in rows {
            if seen.insert(table.encode_key(&key_of(def, &row))?) {
                first.push(row);
            }
        }
        rows = first;
    }
    ctx.env.strict_numbers = true;
    let mut ops = Vec::with_capacity(rows.len());
    let mut updated = Vec::new();
    let mut moves = Vec::new();
    // With foreign keys: each changed row as it was and as it becomes.
    let (mut before, mut after) = (Vec::new(), Vec::new());
    for row in &rows {
        let key = key_of(def, row);
        if delete {
            ctx.note_write(table, &key);
            ops.push(Op::delete(table, &key)?);
            continue;
        }
        let mut set = Vec::with_capacity(plan.sets.len());
        let mut changes = false;
        let mut new_row = row[..def.columns.len()].to_vec();
        for (c, e) in &plan.sets {
            let v = to_column(e.eval(row, &ctx.env)?, &def.columns[*c as usize])?;
            let old = &row[*c as usize];
            changes |= !(v == *old || (v.is_null() && old.is_null()));
            new_row[*c as usize] = v.clone();
            set.push((*c, Expr::Const(v)));
        }
        if !changes {
            continue;
        }
        for (c, now) in clock_updates(def, plan.sets.iter().map(|(c, _)| *c), statement_time)? {
            new_row[c as usize] = now.clone();
            set.push((c, Expr::Const(now)));
        }
        ctx.note_write(table, &key);
        if foreign {
            before.push(row[..def.columns.len()].to_vec());
            after.push(new_row.clone());
        }
        let new_key = key_of(def, &new_row);
        if new_key != key {
            // The key changes: the row moves (possibly to another partition).
            ctx.note_write(table, &new_key);
            moves.push((key, new_key, new_row));
            continue;
        }
        if def.primary_key.iter().any(|&c| row[c as usize] != new_row[c as usize]) {
            // A case-insensitive key written another way ('alice' ->
            // 'Alice'): the same key, so the row is rewritten in place.
            ops.push(Op::upsert(table, new_row.clone())?);
        } else {
            ops.push(Op::update_expr(table, &key, set)?);
        }
        if checks_unique {
            updated.push(new_row);
        }
    }
    // (A row whose key changes moves by a delete and an insert; a
    // duplicate there ends the transaction.)
    check_unique(table, &updated, ctx).await?;
    if foreign {
        let old: Vec<Vec<Value>>;
        let change = if delete {
            old = rows.iter().map(|r| r[..def.columns.len()].to_vec()).collect();
            ParentChange { old: &old, new: None }
        } else {
            ParentChange { old: &before, new: Some(&after) }
        };
        crate::foreign::foreign_key_actions(table, change, ctx).await?;
    }
    let matched = rows.len() as u64;
    // Rows that move are written after the others, by a request of their own.
    let outcomes = if moves.is_empty() { ctx.run_last_ops(ops).await? } else { ctx.run_ops(ops).await? };
    let mut changed = outcomes.iter().filter(|o| matches!(o, Outcome::Done)).count() as u64;
    if !moves.is_empty() {
        changed += move_rows(table, moves, ctx).await?;
    }
    Ok(Affected { matched, changed })
}

/// Rows whose primary key an UPDATE changes: deleted under their old key
/// and inserted under the new one, in one request of the statement's
/// transaction (a new key that exists already is a duplicate-key error).
async fn move_rows(
    table: &Arc<Table>,
    moves: Vec<(Vec<Value>, Vec<Value>, Vec<Value>)>,
    ctx: &mut Ctx<'_>,
) -> SqlResult<u64> {
    let leaving: Vec<&Vec<Value>> = moves.iter().map(|(old, _, _)| old).collect();
    let mut targets: Vec<&Vec<Value>> = Vec::new();
    for (_, new, new_row) in &moves {
        if targets.contains(&new) {
            return Err(duplicate_entry(table, &written_key(table.def(), new_row)));
        }
        targets.push(new);
    }
    // New keys not vacated by this statement must not exist.
    let probe: Vec<(&Vec<Value>, &Vec<Value>)> =
        moves.iter().filter(|(_, new, _)| !leaving.contains(&new)).map(|(_, new, row)| (new, row)).collect();
    let reads = probe
        .iter()
        .map(|(k, _)| Op::read_locked(table, k, LockMode::Exclusive))
        .collect::<latsdb_types::Result<Vec<_>>>()?;
    for ((_, row), found) in probe.iter().zip(ctx.run_ops(reads).await?) {
        if matches!(found, Outcome::Row(_)) {
            return Err(duplicate_entry(table, &written_key(table.def(), row)));
        }
    }
    let n = moves.len() as u64;
    let mut ops = Vec::with_capacity(moves.len() * 2);
    for (old, _, _) in &moves {
        ops.push(Op::delete(table, old)?);
    }
    for (_, _, row) in moves {
        ops.push(Op::insert(table, row)?);
    }
    ctx.run_last_ops(ops).await?;
    Ok(n)
}
