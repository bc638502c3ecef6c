//! Planning a SELECT: which rows each table delivers and how (primary-key
//! lookups batched into one round trip, a range scan along an ordered
//! index, or a full scan), which conditions run on the data nodes, and
//! what the SQL node still computes (joins, grouping, ordering).
//!
//! A plan keeps `?` parameters as slots, so a prepared statement is planned
//! once and executed many times.

use crate::bind::{and_all, conjuncts, tables_of, AggKind, AggSpec, Binder, ScopeTable};
use crate::error::{SqlError, SqlResult};
use crate::eval::{Cmp, Func, SExpr};
use latsdb_client::{Projection, Table};
use latsdb_types::expr::Aggregate;
use latsdb_types::proto::LockMode;
use latsdb_types::schema::{ColumnDef, ColumnType, TableDef, PRIMARY_INDEX};
use latsdb_types::{Collation, Value};
use sqlparser::ast::{self, Expr, SelectItem, SetExpr, TableFactor};
use std::sync::Arc;

/// Rows computed by the SQL node itself (information_schema, SHOW).
#[derive(Clone, Debug)]
pub struct VirtualTable {
    pub columns: Vec<ColumnDef>,
    pub rows: Vec<Vec<Value>>,
}

#[derive(Clone, Debug)]
pub enum SourceKind {
    Stored(Arc<Table>),
    Virtual(Arc<VirtualTable>),
}

#[derive(Clone, Debug)]
pub struct Source {
    pub scope: ScopeTable,
    pub kind: SourceKind,
    /// Columns fetched, in the order they appear in the joined row.
    pub fetch: Vec<u16>,
    pub projection: Option<Projection>,
}

impl Source {
    pub fn stored(&self) -> Option<&Arc<Table>> {
        match &self.kind {
            SourceKind::Stored(t) => Some(t),
            SourceKind::Virtual(_) => None,
        }
    }
}

#[derive(Clone, Debug)]
pub enum Access {
    /// Primary-key lookups; each inner list gives the key columns in order.
    Keys(Vec<Vec<SExpr>>),
    /// A range of an ordered index: equal values for a prefix of its
    /// columns, then optional bounds on the next column (value, inclusive).
    Range {
        index: String,
        columns: Vec<u16>,
        eq: Vec<SExpr>,
        lower: Option<(SExpr, bool)>,
        upper: Option<(SExpr, bool)>,
    },
    Full,
}

#[derive(Clone, Debug)]
pub struct JoinStep {
    pub table: usize,
    pub left: bool,
    /// RIGHT JOIN: every row of the joined table appears, with NULLs for
    /// the tables before it when nothing matches.
    pub right: bool,
    /// Key of the joined table computed from the row so far: one batched
    /// lookup round for all rows.
    pub lookup: Option<Vec<SExpr>>,
    pub on: Option<SExpr>,
}

#[derive(Clone, Debug)]
pub enum AggMode {
    None,
    /// Aggregates computed by the data nodes; `pushed[i]` feeds spec `i`
    /// (AVG feeds from a SUM and a COUNT).
    Pushed {
        pushed: Vec<Aggregate>,
        specs: Vec<(AggKind, usize, Option<usize>)>,
    },
    Grouped {
        keys: Vec<SExpr>,
        aggs: Vec<AggSpec>,
    },
}

#[derive(Clone, Debug)]
pub struct OutputColumn {
    pub name: String,
    pub expr: SExpr,
    /// The table column it shows unchanged, if any (for column metadata).
    pub origin: Option<(usize, u16)>,
    /// The scale its type gives a DECIMAL result (`Binder::decimal_scale`),
    /// for a set operation whose other branches give integers.
    pub decimal_scale: Option<u8>,
    /// A computed FLOAT (`Binder::is_float`: MAX of a FLOAT column), shown
    /// as a FLOAT column is.
    pub float: bool,
    /// The places a DOUBLE result shows (`Binder::double_decimals`).
    pub double_decimals: Option<u8>,
    /// The digits of a second a computed time shows (NOW(n)'s n).
    pub fraction_digits: Option<u8>,
}

#[derive(Clone, Debug)]
pub struct SelectPlan {
    pub sources: Vec<Source>,
    pub access: Access,
    /// Conditions on the first table evaluated by the data nodes (columns
    /// as `TableCol(0, c)`).
    pub pushed: Vec<SExpr>,
    pub joins: Vec<JoinStep>,
    pub filter: Option<SExpr>,
    pub agg: AggMode,
    pub having: Option<SExpr>,
    pub outputs: Vec<OutputColumn>,
    pub order: Vec<(SExpr, bool)>,
    pub distinct: bool,
    /// Each output's text collation and whether COLLATE named it (None: it
    /// has none of its own, as a literal): DISTINCT compares case-insensitive
    /// text by weight, and the result's metadata carries it.
    pub output_collations: Vec<Option<(Collation, bool)>>,
    pub limit: Option<SExpr>,
    pub offset: Option<SExpr>,
    /// The access is an ordered index whose order is ORDER BY's, and every
    /// scanned row is a result row: the first OFFSET + LIMIT rows of an
    /// ordered scan are all the query needs (`index_gives_order`).
    pub index_ordered: bool,
    pub lock: LockMode,
    /// Width of the joined source row.
    pub row_width: usize,
    /// Every condition on the first table alone, over its whole row (column
    /// id = position): checked on rows the open transaction wrote itself,
    /// which a scan of committed rows cannot see.
    pub first_conditions: Vec<SExpr>,
    /// The same query without aggregates pushed down, run instead of this
    /// plan when the transaction has written rows of the table.
    pub unpushed: Option<Box<SelectPlan>>,
    /// Window functions, computed after HAVING; `SExpr::Window(i)` reads
    /// the `i`-th one's value, appended to each row.
    pub windows: Vec<crate::bind::WindowSpec>,
}

/// Looks up tables for the planner (the SQL node's catalog).
pub trait Catalog {
    fn resolve(
        &self,
        db: Option<&str>,
        name: &str,
    ) -> impl std::future::Future<Output = SqlResult<(String, SourceKind)>> + Send;
}

pub(crate) fn object_parts(name: &ast::ObjectName) -> Vec<String> {
    name.0.iter().map(|p| p.as_ident().map(|i| i.value.clone()).unwrap_or_else(|| p.to_string())).collect()
}

/// Splits `db.table` or `table`.
pub fn table_name(name: &ast::ObjectName) -> SqlResult<(Option<String>, String)> {
    let parts = object_parts(name);
    match parts.as_slice() {
        [t] => Ok((None, t.clone())),
        [d, t] => Ok((Some(d.clone()), t.clone())),
        _ => Err(SqlError::parse(format!("'{name}' is not a table name"))),
    }
}

pub async fn plan_select<C: Catalog>(catalog: &C, query: &ast::Query) -> SqlResult<SelectPlan> {
    plan_query(catalog, query, true).await
}

async fn plan_query<C: Catalog>(catalog: &C, query: &ast::Query, push_aggregates: bool) -> SqlResult<SelectPlan> {
    if query.with.is_some() {
        return Err(SqlError::unsupported("WITH (common table expressions) is not supported"));
    }
    let select = match query.body.as_ref() {
        SetExpr::Select(s) => s,
        SetExpr::Query(q) => return Box::pin(plan_query(catalog, q, push_aggregates)).await,
        _ => return Err(SqlError::unsupported("UNION and other set operations are not supported")),
    };
    // FROM: the first table and its joins; each further comma-separated
    // item joins the tables before it as a CROSS JOIN (its WHERE conditions
    // then act as join conditions). A comma binds less tightly than JOIN,
    // so an item's ON conditions see only that item's own tables.
    let mut sources: Vec<Source> = Vec::new();
    let mut join_specs: Vec<JoinSpec> = Vec::new();
    for (item, twj) in select.from.iter().enumerate() {
        let item_start = sources.len();
        sources.push(source(catalog, &twj.relation).await?);
        if item > 0 {
            join_specs.push(JoinSpec { left: false, right: false, on: JoinOn::None, item_start: 0 });
        }
        for join in &twj.joins {
            let (left, right, constraint) = match &join.join_operator {
                ast::JoinOperator::Join(c) | ast::JoinOperator::Inner(c) => (false, false, c),
                ast::JoinOperator::Left(c) | ast::JoinOperator::LeftOuter(c) => (true, false, c),
                ast::JoinOperator::Right(c) | ast::JoinOperator::RightOuter(c) => (false, true, c),
                ast::JoinOperator::CrossJoin(c) => (false, false, c),
                _ => return Err(SqlError::unsupported("only INNER, LEFT, RIGHT and CROSS joins are supported")),
            };
            if right && item > 0 {
                return Err(SqlError::unsupported(
                    "a RIGHT JOIN after a comma is not supported; write the comma as CROSS JOIN, or the RIGHT JOIN as a LEFT JOIN",
                ));
            }
            let on = match constraint {
                ast::JoinConstraint::On(e) => JoinOn::On(e),
                ast::JoinConstraint::Using(names) => {
                    JoinOn::Using(names.iter().map(|n| n.to_string().trim_matches('`').to_string()).collect())
                }
                ast::JoinConstraint::None => JoinOn::None,
                ast::JoinConstraint::Natural => JoinOn::Natural,
            };
            sources.push(source(catalog, &join.relation).await?);
            // NATURAL: USING every column name the joined table shares
            // with the item's tables before it.
            let on = match on {
                JoinOn::Natural => {
                    let right = &sources[sources.len() - 1].scope;
                    let names = right
                        .shown()
                        .filter(|(_, c)| {
                            sources[item_start..sources.len() - 1]
                                .iter()
                                .any(|s| s.scope.column_named(&c.name).is_some())
                        })
                        .map(|(_, c)| c.name.clone())
                        .collect();
                    JoinOn::Using(names)
                }
                other => other,
            };
            join_specs.push(JoinSpec { left, right, on, item_start });
        }
    }
    let mut scope: Vec<ScopeTable> = sources.iter().map(|s| s.scope.clone()).collect();
    // USING merges each named column pair into one: the left table's (the
    // right one's behind a RIGHT JOIN) answers to the bare name and comes
    // first in `*`; the other is reached by its qualified name only.
    let mut using_columns: Vec<(usize, u16)> = Vec::new();
    // The tables' order in `*`: a RIGHT JOIN ... USING puts its right table
    // before the left ones (MySQL runs it as the mirrored LEFT JOIN).
    let mut star_order: Vec<usize> = (0..scope.len()).collect();
    for (i, j) in join_specs.iter().enumerate() {
        let JoinOn::Using(names) = &j.on else { continue };
        let right = i + 1;
        if j.right {
            if let (Some(from), Some(to)) =
                (star_order.iter().position(|&t| t == right), star_order.iter().position(|&t| t == j.item_start))
            {
                let t = star_order.remove(from);
                star_order.insert(to, t);
            }
        }
        for n in names {
            let col = |t: usize| scope[t].column_named(n);
            let (Some(r), Some((lt, lc))) = (col(right), (j.item_start..right).find_map(|t| col(t).map(|c| (t, c))))
            else {
                continue;
            };
            let (kept, merged) = if j.right { ((right, r), (lt, lc)) } else { ((lt, lc), (right, r)) };
            scope[merged.0].merged.push(merged.1 as u16);
            if !using_columns.contains(&(kept.0, kept.1 as u16)) {
                using_columns.push((kept.0, kept.1 as u16));
            }
        }
    }
    let scope = scope;
    for (i, a) in scope.iter().enumerate() {
        if scope[..i].iter().any(|b| b.alias.eq_ignore_ascii_case(&a.alias)) {
            return Err(SqlError::new(1066, "42000", format!("Not unique table/alias: '{}'", a.alias)));
        }
    }

    let mut aggs: Vec<AggSpec> = Vec::new();
    let mut windows: Vec<crate::bind::WindowSpec> = Vec::new();
    // Select list (wildcards expand to every column).
    let mut outputs: Vec<OutputColumn> = Vec::new();
    for item in &select.projection {
        match item {
            SelectItem::Wildcard(_) => {
                if scope.is_empty() {
                    return Err(SqlError::new(1096, "HY000", "No tables used"));
                }
                // MySQL's order: the USING columns first, then every
                // other column, table by table.
                let firsts = using_columns.iter().copied().filter(|&(t, c)| scope[t].hidden != Some(c));
                let rest = star_order.iter().map(|&t| (t, &scope[t])).flat_map(|(t, s)| {
                    s.shown()
                        .map(|(c, _)| c)
                        .filter(move |c| !s.merged.contains(c))
                        .map(move |c| (t, c))
                        .filter(|tc| !using_columns.contains(tc))
                });
                for (t, c) in firsts.chain(rest) {
                    outputs.push(OutputColumn {
                        name: scope[t].columns[c as usize].name.clone(),
                        expr: SExpr::TableCol(t, c),
                        origin: Some((t, c)),
                        decimal_scale: None,
                        float: false,
                        double_decimals: None,
                        fraction_digits: None,
                    });
                }
            }
            SelectItem::QualifiedWildcard(kind, _) => {
                let q = match kind {
                    ast::SelectItemQualifiedWildcardKind::ObjectName(name) => {
                        object_parts(name).pop().unwrap_or_default()
                    }
                    other => return Err(SqlError::unsupported(format!("select item {other} is not supported"))),
                };
                let t = scope
                    .iter()
                    .position(|s| s.alias.eq_ignore_ascii_case(&q))
                    .ok_or_else(|| SqlError::new(1051, "42S02", format!("Unknown table '{q}'")))?;
                for (c, col) in scope[t].shown() {
                    outputs.push(OutputColumn {
                        name: col.name.clone(),
                        expr: SExpr::TableCol(t, c),
                        origin: Some((t, c)),
                        decimal_scale: None,
                        float: false,
                        double_decimals: None,
                        fraction_digits: None,
                    });
                }
            }
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                let mut b = Binder::new(&scope, "field list");
                b.aggs = Some(&mut aggs);
                b.windows = Some(&mut windows);
                let bound = b.bind(e)?;
                let decimal_scale = b.decimal_scale(std::iter::once(&bound));
                let float = b.is_float(&bound);
                let double_decimals = b.double_decimals(&bound);
                let name = match item {
                    SelectItem::ExprWithAlias { alias, .. } => alias.value.clone(),
                    _ => match e {
                        Expr::Identifier(i) => i.value.clone(),
                        Expr::CompoundIdentifier(ids) if ids[0].value.starts_with('@') => e.to_string(),
                        Expr::CompoundIdentifier(ids) => ids.last().map(|i| i.value.clone()).unwrap_or_default(),
                        Expr::Value(v) => match &v.value {
                            ast::Value::SingleQuotedString(s) | ast::Value::DoubleQuotedString(s) => s.clone(),
                            other => other.to_string(),
                        },
                        other => shown_name(other),
                    },
                };
                let origin = match bound {
                    SExpr::TableCol(t, c) => Some((t, c)),
                    _ => None,
                };
                let fraction_digits = match bound {
                    SExpr::Session(
                        crate::eval::SessionValue::Now(digits) | crate::eval::SessionValue::SysDate(digits),
                    )
                    | SExpr::Cast(_, crate::eval::CastTo::DateTime(digits) | crate::eval::CastTo::Time(digits)) => {
                        Some(digits)
                    }
                    _ => None,
                };
                outputs.push(OutputColumn {
                    name,
                    expr: bound,
                    origin,
                    decimal_scale,
                    float,
                    double_decimals,
                    fraction_digits,
                });
            }
            other => return Err(SqlError::unsupported(format!("select item {other} is not supported"))),
        }
    }
    let aliases: Vec<(String, SExpr)> = outputs.iter().map(|o| (o.name.clone(), o.expr.clone())).collect();

    let mut where_parts = Vec::new();
    if let Some(w) = &select.selection {
        let bound = Binder::new(&scope, "where clause").bind(w)?;
        conjuncts(bound, &mut where_parts);
    }
    let mut joins = Vec::new();
    // Behind a RIGHT JOIN the first table's rows may be NULL-extended, so no
    // WHERE condition may narrow its access path (`any_right`, below).
    let any_right = join_specs.iter().any(|j| j.right);
    for (i, JoinSpec { left, right: right_join, on, item_start }) in join_specs.into_iter().enumerate() {
        let right = i + 1;
        // The tables of earlier comma items are out of an ON clause's reach.
        let visible: Vec<ScopeTable> = scope[..i + 2]
            .iter()
            .enumerate()
            .map(|(t, s)| if t < item_start { hidden_table() } else { s.clone() })
            .collect();
        let on = match on {
            JoinOn::On(e) => Some(Binder::new(&visible, "on clause").bind(e)?),
            JoinOn::Using(names) => {
                let mut parts = Vec::new();
                for n in &names {
                    let col = |t: usize| scope[t].column_named(n);
                    let r = col(right).ok_or_else(|| SqlError::bad_field(n, "from clause"))?;
                    let l = (item_start..right)
                        .find_map(|t| col(t).map(|c| (t, c)))
                        .ok_or_else(|| SqlError::bad_field(n, "from clause"))?;
                    parts.push(crate::bind::compare(
                        &scope,
                        Cmp::Eq,
                        SExpr::TableCol(l.0, l.1 as u16),
                        SExpr::TableCol(right, r as u16),
                    ));
                }
                and_all(parts)
            }
            JoinOn::None => None,
            JoinOn::Natural => return Err(SqlError::general("internal: a NATURAL join was not resolved")),
        };
        joins.push(JoinStep { table: i + 1, left, right: right_join, lookup: None, on });
    }
    let group_keys: Vec<SExpr> = match &select.group_by {
        ast::GroupByExpr::Expressions(list, mods) if mods.is_empty() => {
            let mut keys = Vec::new();
            for e in list {
                let key = bind_positional(e, &outputs, &scope, &aliases, "group statement")?;
                keys.push(crate::bind::sort_key(&scope, key));
            }
            keys
        }
        _ => return Err(SqlError::unsupported("GROUP BY ALL / WITH ROLLUP are not supported")),
    };
    let having = match &select.having {
        Some(h) => {
            let mut b = Binder::new(&scope, "having clause");
            b.aggs = Some(&mut aggs);
            b.aliases = &aliases;
            b.aliases_first = true;
            Some(b.bind(h)?)
        }
        None => None,
    };
    let mut order = Vec::new();
    if let Some(ob) = &query.order_by {
        match &ob.kind {
            ast::OrderByKind::Expressions(list) => {
                for o in list {
                    let mut b = Binder::new(&scope, "order clause");
                    b.aggs = Some(&mut aggs);
                    b.windows = Some(&mut windows);
                    b.aliases = &aliases;
                    b.aliases_first = true;
                    let e = match positional(&o.expr, &outputs)? {
                        Some(e) => e,
                        None => b.bind(&o.expr)?,
                    };
                    order.push((crate::bind::sort_key(&scope, e), o.options.sort == Some(ast::OrderBySort::Desc)));
                }
            }
            ast::OrderByKind::All(_) => return Err(SqlError::unsupported("ORDER BY ALL is not supported")),
        }
    }
    let (limit, offset) = match &query.limit_clause {
        None => (None, None),
        Some(ast::LimitClause::LimitOffset { limit, offset, limit_by }) => {
            if !limit_by.is_empty() {
                return Err(SqlError::unsupported("LIMIT BY is not supported"));
            }
            let l = match limit {
                Some(e) => Some(Binder::new(&[], "limit").bind(e)?),
                None => None,
            };
            let o = match offset {
                Some(o) => Some(Binder::new(&[], "limit").bind(&o.value)?),
                None => None,
            };
            (l, o)
        }
        Some(ast::LimitClause::OffsetCommaLimit { offset, limit }) => {
            (Some(Binder::new(&[], "limit").bind(limit)?), Some(Binder::new(&[], "limit").bind(offset)?))
        }
    };
    let lock = match query.locks.first().map(|l| l.lock_type) {
        None => LockMode::Committed,
        Some(ast::LockType::Share) => LockMode::Shared,
        Some(ast::LockType::Update) => LockMode::Exclusive,
    };
    let distinct = match &select.distinct {
        None | Some(ast::Distinct::All) => false,
        Some(ast::Distinct::Distinct) => true,
        Some(ast::Distinct::On(_)) => return Err(SqlError::unsupported("DISTINCT ON is not supported")),
    };

    // Access path of the first table from the conditions on it alone.
    let mut residual = Vec::new();
    let mut first_only = Vec::new();
    for c in where_parts {
        if !sources.is_empty() && tables_of(&c) == 1 && !any_right {
            first_only.push(c);
        } else {
            residual.push(c);
        }
    }
    let first_conditions = first_only
        .iter()
        .map(|c| {
            c.clone().map(&mut |x| match x {
                SExpr::TableCol(0, col) => Ok(SExpr::Col(col as usize)),
                other => Ok(other),
            })
        })
        .collect::<SqlResult<Vec<_>>>()?;
    let (access, pushed) = match sources.first() {
        Some(s) => choose_access(s, first_only, &mut residual),
        None => {
            residual.extend(first_only);
            (Access::Full, Vec::new())
        }
    };
    // A locking read of a range re-reads each row by key under its lock and
    // checks the conditions again on the locked row.
    if lock != LockMode::Committed && !matches!(access, Access::Keys(_)) {
        residual.extend(pushed.iter().cloned());
        if let Some(t) = sources.first().and_then(|s| s.stored()) {
            for &c in &t.def().primary_key {
                // Referenced so the key is fetched.
                residual.push(SExpr::IsNull(Box::new(SExpr::TableCol(0, c)), true));
            }
        }
    }
    // A WHERE condition on tables up to an inner join's table is that join's
    // condition too (no join after it can bring rows back, without RIGHT
    // joins), so `FROM a, b WHERE a.x = b.key` joins by key rather than
    // filtering a cross product.
    if !any_right {
        for step in joins.iter_mut().filter(|s| !s.left && !s.right) {
            let upto = (2u64 << step.table) - 1;
            let mut moved = Vec::new();
            residual.retain(|c| {
                let t = tables_of(c);
                let belongs = t & (1 << step.table) != 0 && t & !upto == 0;
                if belongs {
                    moved.push(c.clone());
                }
                !belongs
            });
            if !moved.is_empty() {
                moved.extend(step.on.take());
                step.on = and_all(moved);
            }
        }
    }
    // Joins: a join on the whole primary key of the joined table becomes a
    // batched lookup.
    for step in joins.iter_mut().filter(|s| !s.right) {
        let Some(table) = sources[step.table].stored().cloned() else { continue };
        let Some(on) = step.on.take() else { continue };
        let mut parts = Vec::new();
        conjuncts(on, &mut parts);
        let earlier = (1u64 << step.table) - 1;
        let mut key = Vec::new();
        let mut taken = Vec::new();
        for &pk in &table.def().primary_key {
            let is_key = |e: &SExpr| reads_key_column(e, table.def(), step.table, pk);
            let found = parts.iter().position(|p| match p {
                SExpr::Cmp(Cmp::Eq, a, b) => {
                    (is_key(a) && tables_of(b) & !earlier == 0) || (is_key(b) && tables_of(a) & !earlier == 0)
                }
                _ => false,
            });
            match found {
                Some(i) => {
                    let condition = parts.remove(i);
                    let SExpr::Cmp(_, a, b) = &condition else { unreachable!("matched above") };
                    key.push(if is_key(a) { (**b).clone() } else { (**a).clone() });
                    taken.push(condition);
                }
                None => break,
            }
        }
        if key.len() == table.def().primary_key.len() {
            step.lookup = Some(key);
        } else {
            // Put the taken parts back: no lookup.
            parts.extend(taken);
        }
        step.on = and_all(parts);
    }

    // Aggregation.
    let has_aggs = !aggs.is_empty() || !group_keys.is_empty();
    let mut agg = AggMode::None;
    if has_aggs {
        let pushable = push_aggregates
            && windows.is_empty()
            && sources.len() == 1
            && sources[0].stored().is_some()
            && group_keys.is_empty()
            && residual.is_empty()
            && !matches!(access, Access::Keys(_))
            && lock == LockMode::Committed
            && outputs.iter().all(|o| tables_of(&o.expr) == 0)
            && having.as_ref().is_none_or(|h| tables_of(h) == 0)
            && order.iter().all(|(e, _)| tables_of(e) == 0)
            && aggs.iter().all(|a| {
                !a.distinct
                        && a.kind.pushable()
                        && matches!(a.arg, None | Some(SExpr::TableCol(0, _)))
                        // The data nodes' MIN and MAX compare text as bytes.
                        && !(matches!(a.kind, AggKind::Min | AggKind::Max) && a.collation.is_case_insensitive())
                        // They add numbers only (a TIME sums as its digits here).
                        && (!matches!(a.kind, AggKind::Sum | AggKind::Avg) || sums_on_data_nodes(&sources[0], &a.arg))
            });
        if pushable {
            let mut pushed_aggs = Vec::new();
            let mut specs = Vec::new();
            for a in &aggs {
                let col = match a.arg {
                    Some(SExpr::TableCol(0, c)) => c,
                    _ => 0,
                };
                let mut push = |x: Aggregate| {
                    pushed_aggs.push(x);
                    pushed_aggs.len() - 1
                };
                let spec = match a.kind {
                    AggKind::CountRows => (a.kind, push(Aggregate::CountRows), None),
                    AggKind::Count => (a.kind, push(Aggregate::Count(col)), None),
                    AggKind::Sum => (a.kind, push(Aggregate::Sum(col)), None),
                    AggKind::Min => (a.kind, push(Aggregate::Min(col)), None),
                    AggKind::Max => (a.kind, push(Aggregate::Max(col)), None),
                    AggKind::Avg => {
                        let s = push(Aggregate::Sum(col));
                        let n = push(Aggregate::Count(col));
                        (a.kind, s, Some(n))
                    }
                    other => unreachable!("{other:?} is never pushed down"),
                };
                specs.push(spec);
            }
            agg = AggMode::Pushed { pushed: pushed_aggs, specs };
        } else {
            agg = AggMode::Grouped { keys: group_keys, aggs };
        }
    }

    let output_collations: Vec<Option<(Collation, bool)>> =
        outputs.iter().map(|o| crate::bind::collation_of(&scope, &o.expr)).collect();
    let one_row_per_row = joins.is_empty()
        && residual.is_empty()
        && matches!(agg, AggMode::None)
        && having.is_none()
        && windows.is_empty()
        && !distinct;
    let mut access = access;
    let index_ordered = one_row_per_row
        && limit.is_some()
        && match sources.first().and_then(|s| s.stored()) {
            Some(table) => index_gives_order(table.def(), &mut access, &order),
            None => false,
        };
    let mut plan = SelectPlan {
        sources,
        access,
        pushed,
        joins,
        filter: and_all(residual),
        agg,
        having,
        outputs,
        order,
        distinct,
        output_collations,
        limit,
        offset,
        index_ordered,
        lock,
        row_width: 0,
        first_conditions,
        unpushed: None,
        windows,
    };
    if matches!(plan.agg, AggMode::Pushed { .. }) {
        plan.unpushed = Some(Box::new(Box::pin(plan_query(catalog, query, false)).await?));
    }
    finish(&mut plan)?;
    Ok(plan)
}

/// One join of the FROM clause, in the order written.
struct JoinSpec<'a> {
    left: bool,
    right: bool,
    on: JoinOn<'a>,
    /// The first table of the comma-separated FROM item this join is in.
    item_start: usize,
}

/// Stands in for a table an ON clause may not name: it has no columns and
/// no name a query can write.
fn hidden_table() -> ScopeTable {
    ScopeTable {
        alias: String::new(),
        db: String::new(),
        name: String::new(),
        columns: Vec::new(),
        merged: Vec::new(),
        hidden: None,
    }
}

enum JoinOn<'a> {
    On(&'a Expr),
    Using(Vec<String>),
    /// Resolved into `Using` once the joined table's columns are known.
    Natural,
    None,
}

/// `ORDER BY 2` / `GROUP BY 1`: a position in the select list.
fn positional(e: &Expr, outputs: &[OutputColumn]) -> SqlResult<Option<SExpr>> {
    if let Expr::Value(v) = e {
        if let ast::Value::Number(n, _) = &v.value {
            let i: usize = n.parse().map_err(|_| SqlError::parse(format!("bad position {n}")))?;
            if i == 0 || i > outputs.len() {
                return Err(SqlError::new(1054, "42S22", format!("Unknown column '{n}' in 'order clause'")));
            }
            return Ok(Some(outputs[i - 1].expr.clone()));
        }
    }
    Ok(None)
}

fn bind_positional(
    e: &Expr,
    outputs: &[OutputColumn],
    scope: &[ScopeTable],
    aliases: &[(String, SExpr)],
    place: &'static str,
) -> SqlResult<SExpr> {
    if let Some(p) = positional(e, outputs)? {
        return Ok(p);
    }
    let mut b = Binder::new(scope, place);
    b.aliases = aliases;
    b.bind(e)
}

async fn source<C: Catalog>(catalog: &C, factor: &TableFactor) -> SqlResult<Source> {
    let TableFactor::Table { name, alias, .. } = factor else {
        return Err(SqlError::unsupported("derived tables and table functions are not supported in FROM"));
    };
    let (db, table) = table_name(name)?;
    let (db, kind) = catalog.resolve(db.as_deref(), &table).await?;
    let (columns, hidden) = match &kind {
        SourceKind::Stored(t) => (t.def().columns.clone(), t.def().hidden_key()),
        SourceKind::Virtual(v) => (v.columns.clone(), None),
    };
    let alias = alias.as_ref().map(|a| a.name.value.clone()).unwrap_or_else(|| table.clone());
    let scope = ScopeTable { alias, db, name: table, columns, merged: Vec::new(), hidden };
    Ok(Source { scope, kind, fetch: Vec::new(), projection: None })
}

/// Picks lookups, a range or a full scan for the first table, from the
/// conditions that read only it. Returns the access and the conditions to
/// push to the data nodes; the rest is added to `residual`.
fn choose_access(src: &Source, parts: Vec<SExpr>, residual: &mut Vec<SExpr>) -> (Access, Vec<SExpr>) {
    let Some(table) = src.stored() else {
        residual.extend(parts);
        return (Access::Full, Vec::new());
    };
    let def = table.def();
    // Equality (or IN) on every key column: lookups.
    let mut used = vec![false; parts.len()];
    let mut key_choices: Vec<Vec<SExpr>> = Vec::new();
    for &pk in &def.primary_key {
        let mut found = None;
        for (i, p) in parts.iter().enumerate() {
            if used[i] {
                continue;
            }
            if let Some(values) = eq_values(p, def, pk) {
                found = Some((i, values));
                break;
            }
        }
        match found {
            Some((i, values)) => {
                used[i] = true;
                key_choices.push(values);
            }
            None => break,
        }
    }
    let combos: usize = key_choices.iter().map(|v| v.len().max(1)).product();
    if key_choices.len() == def.primary_key.len() && combos <= 100_000 {
        let mut keys: Vec<Vec<SExpr>> = vec![Vec::new()];
        for choice in key_choices {
            let mut next = Vec::with_capacity(keys.len() * choice.len());
            for k in &keys {
                for v in &choice {
                    let mut k2 = k.clone();
                    k2.push(v.clone());
                    next.push(k2);
                }
            }
            keys = next;
        }
        for (i, p) in parts.into_iter().enumerate() {
            if !used[i] {
                residual.push(p);
            }
        }
        return (Access::Keys(keys), Vec::new());
    }
    // Longest usable prefix of an ordered index.
    let mut best: Option<(usize, Access, Vec<usize>)> = None;
    for index in &def.indexes {
        let mut taken = Vec::new();
        let mut eq = Vec::new();
        let mut lower = None;
        let mut upper = None;
        for &col in &index.columns {
            let single = parts.iter().enumerate().find_map(|(i, p)| {
                if taken.contains(&i) {
                    return None;
                }
                match eq_values(p, def, col) {
                    Some(v) if v.len() == 1 => Some((i, v.into_iter().next())),
                    _ => None,
                }
            });
            if let Some((i, Some(v))) = single {
                taken.push(i);
                eq.push(v);
                continue;
            }
            for (i, p) in parts.iter().enumerate() {
                if taken.contains(&i) {
                    continue;
                }
                if let Some((lo, hi)) = range_bounds(p, def, col) {
                    let use_lo = lo.is_some() && lower.is_none();
                    let use_hi = hi.is_some() && upper.is_none();
                    // A condition whose bounds are not all used (`a BETWEEN
                    // 1 AND 5` after `a < 9` gave the upper bound) still
                    // has to be checked on each row.
                    let whole = (lo.is_none() || use_lo) && (hi.is_none() || use_hi);
                    if use_lo {
                        lower = lo;
                    }
                    if use_hi {
                        upper = hi;
                    }
                    if (use_lo || use_hi) && whole {
                        taken.push(i);
                    }
                }
            }
            break;
        }
        let score = eq.len() * 2 + lower.is_some() as usize + upper.is_some() as usize;
        if score > 0 && best.as_ref().is_none_or(|(s, ..)| score > *s || (score == *s && index.id == PRIMARY_INDEX)) {
            let access = Access::Range { index: index.name.clone(), columns: index.columns.clone(), eq, lower, upper };
            best = Some((score, access, taken));
        }
    }
    let (access, taken) = match best {
        Some((_, a, t)) => (a, t),
        None => (Access::Full, Vec::new()),
    };
    let mut pushed = Vec::new();
    for (i, p) in parts.into_iter().enumerate() {
        if taken.contains(&i) {
            continue;
        }
        if pushable(&p) {
            pushed.push(p);
        } else {
            residual.push(p);
        }
    }
    (access, pushed)
}

/// Whether an ordered scan along `access` returns rows in the order of
/// `order` (ascending keys only: scans do not run backwards). The columns
/// the range fixes by equality may appear anywhere in ORDER BY; the others
/// must be the index's next columns, in order. A full scan becomes an
/// unbounded range of the first index (the primary key's first) whose
/// columns ORDER BY names, so `ORDER BY id LIMIT 10` reads ten rows.
fn index_gives_order(def: &TableDef, access: &mut Access, order: &[(SExpr, bool)]) -> bool {
    if order.is_empty() || order.iter().any(|(_, desc)| *desc) {
        return false;
    }
    // ORDER BY sorts a case-insensitive column by its weight, which is
    // what its index holds.
    let sorts_by = |e: &SExpr, col: u16| match e {
        SExpr::Func(Func::Weight, args) => {
            def.columns.get(col as usize).is_some_and(|c| c.collation.is_case_insensitive())
                && matches!(args.as_slice(), [SExpr::TableCol(0, c)] if *c == col)
        }
        e => reads_key_column(e, def, 0, col),
    };
    // Values ORDER BY holds equal may have different keys: text that
    // differs in trailing spaces (PAD SPACE), floats -0 and 0. The index
    // breaks such ties by those keys, ORDER BY by its next key: such a
    // column may only be ORDER BY's last key (its ties are in no order).
    let ties_by_key = |col: u16| {
        def.columns.get(col as usize).is_none_or(|c| {
            !c.collation.is_case_insensitive()
                && !matches!(
                    c.ty,
                    ColumnType::Integer { .. }
                        | ColumnType::Decimal { .. }
                        | ColumnType::Date
                        | ColumnType::DateTime
                        | ColumnType::Timestamp
                        | ColumnType::Boolean
                        | ColumnType::Time
                        | ColumnType::Year
                        | ColumnType::Bit(_)
                )
        })
    };
    let follows = |columns: &[u16], fixed: usize| {
        let mut next = fixed;
        order.iter().enumerate().all(|(i, (e, _))| {
            if columns[..fixed].iter().any(|&c| sorts_by(e, c)) {
                return true;
            }
            let last = i + 1 == order.len();
            let ok = columns.get(next).is_some_and(|&c| sorts_by(e, c) && (last || !ties_by_key(c)));
            next += 1;
            ok
        })
    };
    match access {
        Access::Range { columns, eq, .. } => follows(columns, eq.len()),
        Access::Full => {
            // Index 0 is the primary key's: it is preferred.
            let Some(index) = def.indexes.iter().find(|i| follows(&i.columns, 0)) else {
                return false;
            };
            *access = Access::Range {
                index: index.name.clone(),
                columns: index.columns.clone(),
                eq: Vec::new(),
                lower: None,
                upper: None,
            };
            true
        }
        Access::Keys(_) => false,
    }
}

/// Whether the data nodes can SUM or AVG the column an aggregate reads:
/// they add numbers; a temporal or text column is summed by the SQL node,
/// as MySQL sums it (a time as its digits, text as the number it starts with).
fn sums_on_data_nodes(source: &Source, arg: &Option<SExpr>) -> bool {
    let Some(SExpr::TableCol(0, c)) = arg else { return false };
    source.stored().and_then(|t| t.def().columns.get(*c as usize).map(|col| col.ty)).is_some_and(|ty| {
        matches!(
            ty,
            ColumnType::Integer { .. }
                | ColumnType::Float
                | ColumnType::Double
                | ColumnType::Decimal { .. }
                | ColumnType::Boolean
                | ColumnType::Year
                | ColumnType::Bit(_)
        )
    })
}

/// Whether `e` reads column `col` of the `table`-th table as its keys and
/// indexes order it: the column itself, or the weight of a case-insensitive
/// column (whose keys hold weights). A case-insensitive column compared as
/// bytes (`COLLATE utf8mb4_bin`) cannot use them.
fn reads_key_column(e: &SExpr, def: &TableDef, table: usize, col: u16) -> bool {
    let ci = def.columns.get(col as usize).is_some_and(|c| c.collation.is_case_insensitive());
    let is_column = |e: &SExpr| *e == SExpr::TableCol(table, col);
    match e {
        SExpr::Func(Func::Fold, args) if ci => matches!(args.as_slice(), [c] if is_column(c)),
        e => !ci && is_column(e),
    }
}

/// The first table's column a pushed condition reads, with whether it reads
/// the column's weight (`Fold(col)`) rather than the column.
pub fn pushed_column(e: &SExpr) -> Option<(u16, bool)> {
    match e {
        SExpr::TableCol(0, c) => Some((*c, false)),
        SExpr::Func(Func::Fold, args) => match args.as_slice() {
            [SExpr::TableCol(0, c)] => Some((*c, true)),
            _ => None,
        },
        _ => None,
    }
}

/// `col = v` or `col IN (v, ...)` with row-free values.
fn eq_values(p: &SExpr, def: &TableDef, col: u16) -> Option<Vec<SExpr>> {
    let is_col = |e: &SExpr| reads_key_column(e, def, 0, col);
    match p {
        SExpr::Cmp(Cmp::Eq, a, b) if is_col(a) && b.is_row_free() => Some(vec![(**b).clone()]),
        SExpr::Cmp(Cmp::Eq, a, b) if is_col(b) && a.is_row_free() => Some(vec![(**a).clone()]),
        SExpr::In(e, list, false) if is_col(e) && list.iter().all(|v| v.is_row_free()) && !list.is_empty() => {
            Some(list.clone())
        }
        _ => None,
    }
}

type Bound = Option<(SExpr, bool)>;

/// Bounds on `col` from `BETWEEN` or a comparison with a row-free value.
fn range_bounds(p: &SExpr, def: &TableDef, col: u16) -> Option<(Bound, Bound)> {
    let is_col = |e: &SExpr| reads_key_column(e, def, 0, col);
    match p {
        SExpr::Between(e, lo, hi, false) if is_col(e) && lo.is_row_free() && hi.is_row_free() => {
            Some((Some(((**lo).clone(), true)), Some(((**hi).clone(), true))))
        }
        SExpr::Cmp(op, a, b) if is_col(a) && b.is_row_free() => bound_of(*op, (**b).clone()),
        SExpr::Cmp(op, a, b) if is_col(b) && a.is_row_free() => bound_of(op.flip(), (**a).clone()),
        _ => None,
    }
}

fn bound_of(op: Cmp, v: SExpr) -> Option<(Bound, Bound)> {
    match op {
        Cmp::Gt => Some((Some((v, false)), None)),
        Cmp::Ge => Some((Some((v, true)), None)),
        Cmp::Lt => Some((None, Some((v, false)))),
        Cmp::Le => Some((None, Some((v, true)))),
        _ => None,
    }
}

/// Whether a data node can evaluate the condition: comparisons of the
/// first table's columns with row-free values, combined with AND/OR/NOT.
pub fn pushable(e: &SExpr) -> bool {
    let col = |e: &SExpr| pushed_column(e).is_some();
    let val = |e: &SExpr| e.is_row_free() && !matches!(e, SExpr::Session(crate::eval::SessionValue::Variable(_)));
    match e {
        SExpr::Cmp(op, a, b) => *op != Cmp::NullSafeEq && ((col(a) && val(b)) || (val(a) && col(b))),
        SExpr::Between(e, lo, hi, _) => col(e) && val(lo) && val(hi),
        SExpr::In(e, list, _) => col(e) && list.iter().all(val),
        SExpr::IsNull(e, _) => col(e),
        SExpr::Like(e, p, _) => col(e) && val(p),
        SExpr::And(a, b) | SExpr::Or(a, b) => pushable(a) && pushable(b),
        SExpr::Not(a) => pushable(a),
        _ => false,
    }
}

/// Decides which columns each table fetches and rewrites column references
/// into positions of the joined row (and of the grouped row).
fn finish(plan: &mut SelectPlan) -> SqlResult<()> {
    let mut used: Vec<Vec<u16>> = vec![Vec::new(); plan.sources.len()];
    {
        let mut note = |e: &SExpr| {
            e.walk(&mut |x| {
                if let SExpr::TableCol(t, c) = x {
                    if !used[*t].contains(c) {
                        used[*t].push(*c);
                    }
                }
            })
        };
        if let Some(f) = &plan.filter {
            note(f);
        }
        for j in &plan.joins {
            if let Some(on) = &j.on {
                note(on);
            }
            for k in j.lookup.iter().flatten() {
                note(k);
            }
        }
        match &plan.agg {
            AggMode::Grouped { keys, aggs } => {
                keys.iter().for_each(&mut note);
                aggs.iter().filter_map(|a| a.arg.as_ref()).for_each(&mut note);
                aggs.iter().flat_map(|a| a.order.iter().map(|(k, _)| k)).for_each(&mut note);
            }
            AggMode::Pushed { .. } | AggMode::None => {}
        }
        plan.outputs.iter().for_each(|o| note(&o.expr));
        plan.order.iter().for_each(|(e, _)| note(e));
        for w in &plan.windows {
            w.args.iter().chain(&w.partition).chain(w.order.iter().map(|(k, _)| k)).for_each(&mut note);
        }
        if let Some(h) = &plan.having {
            note(h);
        }
    }
    let mut fetch_first = |columns: &[u16]| {
        for &c in columns {
            if !used[0].contains(&c) {
                used[0].push(c);
            }
        }
    };
    // A scanned first table always brings its key: rows the transaction
    // wrote itself replace the scanned ones by key.
    if !matches!(plan.access, Access::Keys(_)) {
        if let Some(t) = plan.sources.first().and_then(|s| s.stored()) {
            fetch_first(&t.def().primary_key);
        }
    }
    // An ordered scan merges the partitions' rows by the index's columns.
    if let (true, Access::Range { columns, .. }) = (plan.index_ordered, &plan.access) {
        fetch_first(columns);
    }
    let mut offsets = Vec::new();
    let mut width = 0;
    for (t, src) in plan.sources.iter_mut().enumerate() {
        let mut cols = std::mem::take(&mut used[t]);
        cols.sort_unstable();
        if cols.is_empty() {
            // Something must be fetched to count rows: the first key column.
            cols.push(src.stored().map(|t| t.def().primary_key[0]).unwrap_or(0));
        }
        if let Some(table) = src.stored() {
            let names: Vec<&str> = cols.iter().map(|&c| table.def().columns[c as usize].name.as_str()).collect();
            src.projection = Some(Projection::new(table, &names)?);
        }
        offsets.push(width);
        width += cols.len();
        src.fetch = cols;
    }
    plan.row_width = width;
    let sources = &plan.sources;
    let agg_base = match &plan.agg {
        AggMode::Pushed { .. } => 0,
        _ => width,
    };
    // Window values follow the row as grouping leaves it.
    let window_base = match &plan.agg {
        AggMode::Pushed { specs, .. } => specs.len(),
        AggMode::Grouped { aggs, .. } => width + aggs.len(),
        AggMode::None => width,
    };
    let mut rewrite = |e: SExpr| -> SqlResult<SExpr> {
        e.map(&mut |x| match x {
            SExpr::TableCol(t, c) => {
                let pos =
                    sources[t].fetch.iter().position(|&f| f == c).ok_or_else(|| {
                        SqlError::general(format!("internal: column {c} of table {t} is not fetched"))
                    })?;
                Ok(SExpr::Col(offsets[t] + pos))
            }
            SExpr::Agg(i) => Ok(SExpr::Col(agg_base + i)),
            SExpr::Window(i) => Ok(SExpr::Col(window_base + i)),
            other => Ok(other),
        })
    };
    let mut windows = std::mem::take(&mut plan.windows);
    for w in &mut windows {
        let take = |e: &mut SExpr| std::mem::replace(e, SExpr::Const(Value::Null));
        for a in w.args.iter_mut().chain(w.partition.iter_mut()) {
            *a = rewrite(take(a))?;
        }
        for (k, _) in w.order.iter_mut() {
            *k = rewrite(take(k))?;
        }
    }
    plan.windows = windows;
    if let Some(f) = plan.filter.take() {
        plan.filter = Some(rewrite(f)?);
    }
    for j in &mut plan.joins {
        if let Some(on) = j.on.take() {
            j.on = Some(rewrite(on)?);
        }
        if let Some(keys) = j.lookup.take() {
            j.lookup = Some(keys.into_iter().map(&mut rewrite).collect::<SqlResult<_>>()?);
        }
    }
    if let AggMode::Grouped { keys, aggs } = &mut plan.agg {
        *keys = std::mem::take(keys).into_iter().map(&mut rewrite).collect::<SqlResult<_>>()?;
        for a in aggs.iter_mut() {
            if let Some(arg) = a.arg.take() {
                a.arg = Some(rewrite(arg)?);
            }
            for (k, _) in a.order.iter_mut() {
                *k = rewrite(std::mem::replace(k, SExpr::Const(Value::Null)))?;
            }
        }
    }
    for o in &mut plan.outputs {
        o.expr = rewrite(std::mem::replace(&mut o.expr, SExpr::Const(Value::Null)))?;
    }
    for (e, _) in &mut plan.order {
        *e = rewrite(std::mem::replace(e, SExpr::Const(Value::Null)))?;
    }
    if let Some(h) = plan.having.take() {
        plan.having = Some(rewrite(h)?);
    }
    Ok(())
}

/// The name of an unaliased computed column: the expression as written, with
/// its parameters shown as `?` (the parser numbers them `?0`, `?1`, ...).
fn shown_name(e: &Expr) -> String {
    let mut e = e.clone();
    let _ = ast::visit_expressions_mut(&mut e, |x| {
        if let Expr::Value(v) = x {
            if let ast::Value::Placeholder(p) = &mut v.value {
                p.truncate(1);
            }
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    e.to_string()
}
