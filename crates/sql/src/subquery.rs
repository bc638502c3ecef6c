//! Subqueries: `x IN (SELECT ...)`, scalar `(SELECT ...)`,
//! `EXISTS (SELECT ...)`, and derived tables `FROM (SELECT ...) AS t`.
//!
//! They are run before their statement, and their results go into it as
//! parameters: `x IN (SELECT ...)` becomes `x IN (?, ?, ...)`, which the
//! planner then treats like any IN-list (on a key: one batch of key
//! lookups). Of the subqueries that refer to columns of the outer query
//! (correlated), `[NOT] EXISTS` linked by one equality runs once and
//! becomes an IN-list (`decorrelate`); the others fail to plan on their
//! own and are reported as not supported.

use crate::error::{SqlError, SqlResult};
use latsdb_types::value::Value;
use latsdb_types::Collation;
use sqlparser::ast::{self, Expr, Query, Statement, TableFactor, Visit, VisitMut, Visitor, VisitorMut};
use std::ops::ControlFlow;

/// How a subquery's rows are used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Use {
    /// `IN (SELECT ...)`: every value of its one column.
    In,
    /// `(SELECT ...)`: its one value, NULL without rows.
    Scalar,
    /// `EXISTS (SELECT ...)`: whether it has rows.
    Exists,
}

/// Whether a statement holds a subquery or a derived table anywhere (one
/// walk; most statements hold neither).
pub fn has_nested_query(stmt: &Statement) -> bool {
    struct Any;
    impl Visitor for Any {
        type Break = ();
        fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
            if subquery_of(e).is_some() {
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        }
        fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<()> {
            if matches!(factor, TableFactor::Derived { .. }) {
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        }
    }
    stmt.visit(&mut Any).is_break()
}

/// The outermost subqueries of a statement, in the order they are replaced.
pub fn outermost(stmt: &Statement) -> Vec<(Use, Query)> {
    let mut collect = Collect { depth: 0, found: Vec::new() };
    let _ = stmt.visit(&mut collect);
    collect.found
}

struct Collect {
    depth: usize,
    found: Vec<(Use, Query)>,
}

impl Visitor for Collect {
    type Break = ();

    fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
        if let Some((kind, query)) = subquery_of(e) {
            if self.depth == 0 {
                self.found.push((kind, query.clone()));
            }
            self.depth += 1;
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
        if subquery_of(e).is_some() {
            self.depth -= 1;
        }
        ControlFlow::Continue(())
    }
}

/// What a subquery gave: its rows, or for a correlated EXISTS run once
/// (see `decorrelate`), the outer expression and the inner values it must
/// equal.
pub enum Found {
    /// With the collation of the subquery's column (see `ResultColumn`).
    Rows(Use, Vec<Vec<Value>>, Option<(Collation, bool)>),
    Semi {
        outer: Box<Expr>,
        values: Vec<Value>,
        collation: Option<(Collation, bool)>,
    },
    /// A correlated scalar subquery run once: the value for each outer
    /// value, and the value for the others.
    Lookup {
        outer: Box<Expr>,
        pairs: Vec<(Value, Value)>,
        otherwise: Value,
    },
}

/// Replaces the outermost subqueries, in the order `outermost` listed
/// them, by what they returned: their values are appended to `params` (the
/// statement's own parameters) and stand in the statement as the new
/// parameters' placeholders.
pub fn replace(stmt: &mut Statement, results: Vec<Found>, params: &mut Vec<Value>) -> SqlResult<()> {
    let mut replacements = Vec::with_capacity(results.len());
    for found in results {
        let first = params.len();
        let (kind, rows, collation) = match found {
            Found::Rows(kind, rows, collation) => (kind, rows, collation),
            Found::Semi { outer, values, collation } => {
                // `inner = outer` is never true for a NULL inner value.
                params.extend(values.into_iter().filter(|v| !v.is_null()));
                replacements.push(Replacement::Semi(outer, first, params.len() - first, collation));
                continue;
            }
            Found::Lookup { outer, pairs, otherwise } => {
                let n = pairs.iter().filter(|(k, _)| !k.is_null()).count();
                for (k, v) in pairs.into_iter().filter(|(k, _)| !k.is_null()) {
                    params.push(k);
                    params.push(v);
                }
                params.push(otherwise);
                replacements.push(Replacement::Lookup(outer, first, n));
                continue;
            }
        };
        if kind != Use::Exists {
            if let Some(row) = rows.iter().find(|r| r.len() != 1) {
                return Err(SqlError::new(
                    1241,
                    "21000",
                    format!("Operand should contain 1 column(s), not {}", row.len()),
                ));
            }
        }
        let values: Vec<Value> = rows.into_iter().filter_map(|r| r.into_iter().next()).collect();
        replacements.push(match kind {
            Use::Exists => Replacement::Truth(!values.is_empty()),
            Use::Scalar if values.len() > 1 => {
                return Err(SqlError::new(1242, "21000", "Subquery returns more than 1 row"));
            }
            Use::Scalar => {
                params.push(values.into_iter().next().unwrap_or(Value::Null));
                Replacement::Params(first, 1, collation)
            }
            Use::In => {
                params.extend(values);
                Replacement::Params(first, params.len() - first, collation)
            }
        });
    }
    replacements.reverse();
    let mut walk = Walk { depth: 0, replacements };
    let _ = VisitMut::visit(stmt, &mut walk);
    Ok(())
}

/// A correlated subquery's SELECT with its link to the outer query taken
/// out: `SELECT ... FROM ... WHERE inner = outer.col AND rest` gives the
/// SELECT with `WHERE rest`, `inner` and `outer.col`. Ok(None) when the
/// subquery does not refer to the outer query by a qualified name; an
/// error when it does in another way than one such equality.
fn split_link(q: &Query) -> SqlResult<Option<Link>> {
    let ast::SetExpr::Select(select) = q.body.as_ref() else { return Ok(None) };
    let mut inner: Vec<String> = Vec::new();
    for t in &select.from {
        for factor in std::iter::once(&t.relation).chain(t.joins.iter().map(|j| &j.relation)) {
            match factor {
                TableFactor::Table { name, alias, .. } => inner.push(match alias {
                    Some(a) => a.name.value.to_ascii_lowercase(),
                    None => name
                        .0
                        .last()
                        .and_then(|p| p.as_ident())
                        .map(|i| i.value.to_ascii_lowercase())
                        .unwrap_or_default(),
                }),
                TableFactor::Derived { alias: Some(a), .. } => inner.push(a.name.value.to_ascii_lowercase()),
                _ => return Ok(None),
            }
        }
    }
    let outer_ref = |e: &Expr| -> bool {
        let mut found = false;
        let _ = ast::visit_expressions(e, |x| {
            if let Expr::CompoundIdentifier(ids) = x {
                if ids.len() >= 2 && !inner.contains(&ids[ids.len() - 2].value.to_ascii_lowercase()) {
                    found = true;
                }
            }
            ControlFlow::<()>::Continue(())
        });
        found
    };
    let Some(selection) = &select.selection else { return Ok(None) };
    let mut parts = Vec::new();
    split_and(selection, &mut parts);
    if !parts.iter().any(|p| outer_ref(p)) {
        return Ok(None);
    }
    let unsupported = || {
        SqlError::unsupported(
            "a subquery that refers to the outer query is supported only as [NOT] EXISTS (SELECT ... WHERE inner_column = outer_table.column AND conditions on the inner tables only) or as a scalar (SELECT one value ... WHERE inner_column = outer_table.column AND ...); use a join",
        )
    };
    let grouped = !matches!(&select.group_by, ast::GroupByExpr::Expressions(e, _) if e.is_empty());
    if grouped || select.having.is_some() || q.limit_clause.is_some() {
        return Err(unsupported());
    }
    let mut link = None;
    let mut rest = Vec::new();
    for p in parts {
        if !outer_ref(p) {
            rest.push(p.clone());
            continue;
        }
        let Expr::BinaryOp { left, op: ast::BinaryOperator::Eq, right } = p else { return Err(unsupported()) };
        let (inner_side, outer_side) = match (outer_ref(left), outer_ref(right)) {
            (false, true) => (left, right),
            (true, false) => (right, left),
            _ => return Err(unsupported()),
        };
        if link.is_some() || !matches!(outer_side.as_ref(), Expr::CompoundIdentifier(_)) {
            return Err(unsupported());
        }
        link = Some((inner_side.as_ref().clone(), outer_side.as_ref().clone()));
    }
    let Some((inner_expr, outer_expr)) = link else { return Err(unsupported()) };
    let mut select = select.as_ref().clone();
    select.selection = rest.into_iter().reduce(|a, b| Expr::BinaryOp {
        left: Box::new(a),
        op: ast::BinaryOperator::And,
        right: Box::new(b),
    });
    let value_reads_outer = select.projection.iter().filter_map(select_item_expr).any(outer_ref);
    Ok(Some(Link { select, inner: inner_expr, outer: outer_expr, value_reads_outer }))
}

struct Link {
    /// The subquery's SELECT without the linking equality.
    select: ast::Select,
    inner: Expr,
    outer: Expr,
    /// The select list reads the outer query too.
    value_reads_outer: bool,
}

fn select_item_expr(item: &ast::SelectItem) -> Option<&Expr> {
    match item {
        ast::SelectItem::UnnamedExpr(e) | ast::SelectItem::ExprWithAlias { expr: e, .. } => Some(e),
        _ => None,
    }
}

fn with_select(q: &Query, select: ast::Select) -> Query {
    let mut query = q.clone();
    query.body = Box::new(ast::SetExpr::Select(Box::new(select)));
    query.order_by = None;
    query
}

/// A correlated `EXISTS (SELECT ... FROM ... WHERE inner = outer.col AND
/// ...)`, as a query to run once: `SELECT inner FROM ... WHERE ...` (the
/// conditions that do not read the outer query), and `outer.col`. Not
/// DISTINCT: under a `_ci` collation that keeps one of 'ann' and 'Ann',
/// where a utf8mb4_bin outer column needs both (the caller drops equal
/// values itself).
pub fn decorrelate(q: &Query) -> SqlResult<Option<(Query, Expr)>> {
    let Some(Link { mut select, inner: inner_expr, outer: outer_expr, .. }) = split_link(q)? else { return Ok(None) };
    select.distinct = None;
    select.projection = vec![ast::SelectItem::UnnamedExpr(inner_expr)];
    Ok(Some((with_select(q, select), outer_expr)))
}

/// A correlated scalar subquery `(SELECT value FROM ... WHERE inner =
/// outer.col AND ...)`, to run once for every outer value at the same time.
pub struct ScalarLookup {
    /// `SELECT inner, value FROM ... WHERE ...` (grouped by `inner` when
    /// `value` aggregates): one row per value of `inner`.
    pub per_key: Query,
    /// `SELECT value FROM ... WHERE FALSE`: what an outer value without
    /// inner rows gets (0 for COUNT, NULL without rows).
    pub empty: Query,
    /// Whether `value` aggregates (one row per key is then certain).
    pub aggregate: bool,
    pub outer: Expr,
}

pub fn decorrelate_scalar(q: &Query) -> SqlResult<Option<ScalarLookup>> {
    let Some(Link { select, inner: inner_expr, outer: outer_expr, value_reads_outer }) = split_link(q)? else {
        return Ok(None);
    };
    if value_reads_outer {
        return Err(SqlError::unsupported(
            "a scalar subquery's value cannot read the outer query (only its WHERE may, by one equality); use a join",
        ));
    }
    let [item] = select.projection.as_slice() else {
        return Err(SqlError::new(1241, "21000", "Operand should contain 1 column(s)"));
    };
    let Some(value) = select_item_expr(item).cloned() else {
        return Err(SqlError::new(1241, "21000", "Operand should contain 1 column(s)"));
    };
    let aggregate = has_aggregate(&value);
    let mut per_key = select.clone();
    per_key.projection = vec![ast::SelectItem::UnnamedExpr(inner_expr.clone()), ast::SelectItem::UnnamedExpr(value)];
    if aggregate {
        per_key.group_by = ast::GroupByExpr::Expressions(vec![inner_expr], Vec::new());
    }
    let mut empty = select;
    empty.selection = Some(Expr::Value(ast::Value::Boolean(false).with_empty_span()));
    Ok(Some(ScalarLookup {
        per_key: with_select(q, per_key),
        empty: with_select(q, empty),
        aggregate,
        outer: outer_expr,
    }))
}

/// Whether an expression calls an aggregate function (outside a window).
fn has_aggregate(e: &Expr) -> bool {
    const AGGREGATES: [&str; 16] = [
        "COUNT",
        "SUM",
        "AVG",
        "MIN",
        "MAX",
        "GROUP_CONCAT",
        "STD",
        "STDDEV",
        "STDDEV_POP",
        "STDDEV_SAMP",
        "VARIANCE",
        "VAR_POP",
        "VAR_SAMP",
        "BIT_AND",
        "BIT_OR",
        "BIT_XOR",
    ];
    let mut found = false;
    let _ = ast::visit_expressions(e, |x| {
        if let Expr::Function(f) = x {
            let name = f.name.to_string();
            if f.over.is_none() && AGGREGATES.iter().any(|a| a.eq_ignore_ascii_case(&name)) {
                found = true;
            }
        }
        ControlFlow::<()>::Continue(())
    });
    found
}

fn split_and<'a>(e: &'a Expr, out: &mut Vec<&'a Expr>) {
    match e {
        Expr::BinaryOp { left, op: ast::BinaryOperator::And, right } => {
            split_and(left, out);
            split_and(right, out);
        }
        Expr::Nested(inner) => split_and(inner, out),
        other => out.push(other),
    }
}

enum Replacement {
    /// Parameters `first..first + n`, values of a column of that collation.
    Params(usize, usize, Option<(Collation, bool)>),
    Truth(bool),
    /// A decorrelated EXISTS: `outer IN (parameters first..first + n)`.
    Semi(Box<Expr>, usize, usize, Option<(Collation, bool)>),
    /// A decorrelated scalar subquery: `CASE outer WHEN ?k THEN ?v ...
    /// ELSE ?otherwise END` over n (key, value) parameter pairs from `first`.
    Lookup(Box<Expr>, usize, usize),
}

struct Walk {
    depth: usize,
    /// What replaces the outermost subqueries; the next one is last.
    replacements: Vec<Replacement>,
}

/// The subquery of an expression that is one, and how its rows are used.
fn subquery_of(e: &Expr) -> Option<(Use, &Query)> {
    match e {
        Expr::InSubquery { subquery, .. } => Some((Use::In, subquery)),
        Expr::Subquery(q) => Some((Use::Scalar, q)),
        Expr::Exists { subquery, .. } => Some((Use::Exists, subquery)),
        // `x > ANY (SELECT ...)`, `x = ALL (SELECT ...)`: all its values, as
        // for IN (the inner subquery is not a scalar one).
        Expr::AnyOp { right, .. } | Expr::AllOp { right, .. } => match right.as_ref() {
            Expr::Subquery(q) => Some((Use::In, q)),
            _ => None,
        },
        _ => None,
    }
}

/// `x op ANY (values)` as `(x op ?a OR x op ?b ...)`, `x op ALL (values)` as
/// the same with AND: NULLs among the values and on the left give the
/// three-valued answer SQL wants. Empty: ANY is false, ALL true. The terms
/// form a balanced tree, so thousands of values do not nest deeply.
fn quantified(
    left: &Expr,
    op: &ast::BinaryOperator,
    (first, n): (usize, usize),
    collation: Option<(Collation, bool)>,
    all: bool,
) -> Expr {
    if n == 0 {
        return truth(all);
    }
    if n == 1 {
        return Expr::Nested(Box::new(Expr::BinaryOp {
            left: Box::new(left.clone()),
            op: op.clone(),
            right: Box::new(value_of(first, collation)),
        }));
    }
    let half = n / 2;
    Expr::Nested(Box::new(Expr::BinaryOp {
        left: Box::new(quantified(left, op, (first, half), collation, all)),
        op: if all { ast::BinaryOperator::And } else { ast::BinaryOperator::Or },
        right: Box::new(quantified(left, op, (first + half, n - half), collation, all)),
    }))
}

fn placeholder(n: usize) -> Expr {
    Expr::Value(ast::Value::Placeholder(format!("?{n}")).with_empty_span())
}

/// What marks a collation as the implicit one of a subquery's column in
/// `x COLLATE name`. It survives the statement's text form, which UPDATE
/// and DELETE parse again; someone writing it gets a column's collation
/// for a value, no more.
pub const IMPLICIT_COLLATION: &str = "latsdb_implicit_";

/// Parameter `n` standing for a value of a subquery's column: text keeps
/// the column's collation, so `x IN (SELECT bin_col ...)` compares as
/// `x = bin_col` does (utf8mb4_bin over a `_ci` x, a `_ci` column over
/// a literal x), and a COLLATE in the subquery's select list stays explicit.
fn value_of(n: usize, collation: Option<(Collation, bool)>) -> Expr {
    let Some((c, explicit)) = collation else { return placeholder(n) };
    let name = if explicit { c.name().to_string() } else { format!("{IMPLICIT_COLLATION}{}", c.name()) };
    Expr::Collate { expr: Box::new(placeholder(n)), collation: ast::ObjectName::from(vec![ast::Ident::new(name)]) }
}

fn values_of(first: usize, n: usize, collation: Option<(Collation, bool)>) -> Vec<Expr> {
    (first..first + n).map(|i| value_of(i, collation)).collect()
}

fn truth(b: bool) -> Expr {
    Expr::Value(ast::Value::Boolean(b).with_empty_span())
}

impl VisitorMut for Walk {
    type Break = ();

    fn pre_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        if subquery_of(e).is_some() {
            self.depth += 1;
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        if subquery_of(e).is_none() {
            return ControlFlow::Continue(());
        }
        self.depth -= 1;
        if self.depth > 0 {
            return ControlFlow::Continue(());
        }
        let Some(next) = self.replacements.pop() else { return ControlFlow::Continue(()) };
        *e = match (std::mem::replace(e, truth(false)), next) {
            (Expr::InSubquery { expr, negated, .. }, Replacement::Params(first, n, collation)) => {
                if n == 0 {
                    // Nothing is IN an empty set; everything is NOT IN it.
                    truth(negated)
                } else {
                    Expr::InList { expr, list: values_of(first, n, collation), negated }
                }
            }
            (Expr::AnyOp { left, compare_op, .. }, Replacement::Params(first, n, collation)) => {
                quantified(&left, &compare_op, (first, n), collation, false)
            }
            (Expr::AllOp { left, compare_op, .. }, Replacement::Params(first, n, collation)) => {
                quantified(&left, &compare_op, (first, n), collation, true)
            }
            (Expr::Subquery(_), Replacement::Params(first, _, collation)) => value_of(first, collation),
            (Expr::Subquery(_), Replacement::Lookup(_, first, 0)) => placeholder(first),
            (Expr::Subquery(_), Replacement::Lookup(outer, first, n)) => Expr::Case {
                case_token: ast::helpers::attached_token::AttachedToken::empty(),
                end_token: ast::helpers::attached_token::AttachedToken::empty(),
                operand: Some(outer),
                conditions: (0..n)
                    .map(|i| ast::CaseWhen {
                        condition: placeholder(first + 2 * i),
                        result: placeholder(first + 2 * i + 1),
                    })
                    .collect(),
                else_result: Some(Box::new(placeholder(first + 2 * n))),
            },
            (Expr::Exists { negated, .. }, Replacement::Truth(found)) => truth(found != negated),
            (Expr::Exists { negated, .. }, Replacement::Semi(_, _, 0, _)) => truth(negated),
            (Expr::Exists { negated: false, .. }, Replacement::Semi(outer, first, n, collation)) => {
                Expr::InList { expr: outer, list: values_of(first, n, collation), negated: false }
            }
            (Expr::Exists { negated: true, .. }, Replacement::Semi(outer, first, n, collation)) => {
                // NOT EXISTS holds for a NULL outer value, which NOT IN does not.
                Expr::Nested(Box::new(Expr::BinaryOp {
                    left: Box::new(Expr::IsNull(outer.clone())),
                    op: ast::BinaryOperator::Or,
                    right: Box::new(Expr::InList { expr: outer, list: values_of(first, n, collation), negated: true }),
                }))
            }
            (other, _) => {
                debug_assert!(false, "subquery {other} and its result do not match");
                other
            }
        };
        ControlFlow::Continue(())
    }
}

/// The derived tables (`FROM (SELECT ...) AS t`) of a statement that are
/// not inside another query, in the order `replace_derived` replaces them.
/// A derived table without an alias is error 1248, as in MySQL.
pub fn derived_tables(stmt: &Statement) -> SqlResult<Vec<Query>> {
    let mut collect = Derived { depth: 0, found: Vec::new(), names: Vec::new(), missing_alias: false };
    let _ = stmt.visit(&mut collect);
    if collect.missing_alias {
        return Err(SqlError::new(1248, "42000", "Every derived table must have its own alias"));
    }
    Ok(collect.found)
}

/// Puts tables named `names` (in `derived_tables` order) where the derived
/// tables were, keeping their aliases.
pub fn replace_derived(stmt: &mut Statement, names: Vec<String>) {
    let mut names = names;
    names.reverse();
    let mut walk = Derived { depth: 0, found: Vec::new(), names, missing_alias: false };
    let _ = VisitMut::visit(stmt, &mut walk);
}

struct Derived {
    /// Queries entered.
    depth: usize,
    found: Vec<Query>,
    /// Replacing: the next name is last.
    names: Vec<String>,
    missing_alias: bool,
}

/// `name AS alias` as a table of the FROM clause.
fn named_table(name: &str, alias: &str) -> Option<TableFactor> {
    let sql = format!("SELECT 1 FROM `{name}` AS `{}`", alias.replace('`', "``"));
    let Statement::Query(q) = crate::parse::parse(&sql).ok()?.statements.pop()? else { return None };
    let ast::SetExpr::Select(select) = *q.body else { return None };
    select.from.into_iter().next().map(|t| t.relation)
}

impl Visitor for Derived {
    type Break = ();

    fn pre_visit_query(&mut self, _: &Query) -> ControlFlow<()> {
        self.depth += 1;
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, _: &Query) -> ControlFlow<()> {
        self.depth -= 1;
        ControlFlow::Continue(())
    }

    fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<()> {
        if let TableFactor::Derived { subquery, alias, .. } = factor {
            if self.depth <= 1 {
                self.missing_alias |= alias.is_none();
                self.found.push(subquery.as_ref().clone());
            }
        }
        ControlFlow::Continue(())
    }
}

impl VisitorMut for Derived {
    type Break = ();

    fn pre_visit_query(&mut self, _: &mut Query) -> ControlFlow<()> {
        self.depth += 1;
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, _: &mut Query) -> ControlFlow<()> {
        self.depth -= 1;
        ControlFlow::Continue(())
    }

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        if let TableFactor::Derived { alias: Some(alias), .. } = factor {
            if self.depth <= 1 {
                if let Some(table) = self.names.pop().and_then(|name| named_table(&name, &alias.name.value)) {
                    *factor = table;
                }
            }
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(sql: &str) -> Statement {
        crate::parse::parse(sql).unwrap().statements.remove(0)
    }

    #[test]
    fn outermost_subqueries_are_found_in_order_and_replaced_by_parameters() {
        let mut stmt = parse(
            "SELECT a FROM t WHERE id IN (SELECT x FROM u WHERE y IN (SELECT z FROM v)) AND b > (SELECT MAX(c) FROM w) OR EXISTS (SELECT 1 FROM e)",
        );
        assert!(has_nested_query(&stmt));
        assert!(!has_nested_query(&parse("SELECT a FROM t WHERE id IN (1, 2)")));
        let found = outermost(&stmt);
        let kinds: Vec<Use> = found.iter().map(|(k, _)| *k).collect();
        assert_eq!(kinds, vec![Use::In, Use::Scalar, Use::Exists]);
        assert!(found[0].1.to_string().contains("SELECT z FROM v"), "the nested one stays inside its parent");
        let mut params = vec![Value::Int(0)];
        let results = vec![
            Found::Rows(Use::In, vec![vec![Value::Int(5)], vec![Value::Int(6)]], None),
            Found::Rows(Use::Scalar, vec![vec![Value::Int(9)]], None),
            Found::Rows(Use::Exists, vec![], None),
        ];
        replace(&mut stmt, results, &mut params).unwrap();
        assert_eq!(params, vec![Value::Int(0), Value::Int(5), Value::Int(6), Value::Int(9)]);
        assert_eq!(stmt.to_string(), "SELECT a FROM t WHERE id IN (?1, ?2) AND b > ?3 OR false");
    }

    #[test]
    fn outermost_derived_tables_become_named_tables() {
        let mut stmt = parse(
            "SELECT COUNT(*) FROM (SELECT a FROM t WHERE a IN (SELECT b FROM (SELECT b FROM u) AS inner_u)) AS sub JOIN (SELECT 1 AS one) AS o",
        );
        let found = derived_tables(&stmt).unwrap();
        assert_eq!(found.len(), 2, "the table derived inside a derived table is left to it");
        assert!(found[0].to_string().contains("inner_u"));
        replace_derived(&mut stmt, vec!["d0".into(), "d1".into()]);
        assert_eq!(stmt.to_string(), "SELECT COUNT(*) AS `COUNT(*)` FROM `d0` AS `sub` JOIN `d1` AS `o`");
        let e = derived_tables(&parse("SELECT * FROM (SELECT 1)")).unwrap_err();
        assert_eq!(e.code, 1248);
    }

    #[test]
    fn a_correlated_exists_runs_once_and_becomes_an_in_list() {
        let stmt =
            parse("SELECT a.x FROM a WHERE NOT EXISTS (SELECT 1 FROM b AS bb WHERE bb.k > 0 AND bb.a_id = a.id)");
        let (_, query) = outermost(&stmt).remove(0);
        let (once, outer) = decorrelate(&query).unwrap().unwrap();
        assert_eq!(once.to_string(), "SELECT bb.a_id FROM b AS bb WHERE bb.k > 0");
        assert_eq!(outer.to_string(), "a.id");
        let mut stmt = stmt;
        let mut params = Vec::new();
        let found = Found::Semi {
            outer: Box::new(outer),
            values: vec![Value::Int(4), Value::Null, Value::Int(5)],
            collation: None,
        };
        replace(&mut stmt, vec![found], &mut params).unwrap();
        assert_eq!(stmt.to_string(), "SELECT a.x FROM a WHERE (a.id IS NULL OR a.id NOT IN (?0, ?1))");
        assert_eq!(params, vec![Value::Int(4), Value::Int(5)]);
        // Uncorrelated: nothing to do; other correlations: said so.
        let uncorrelated = parse("SELECT 1 FROM a WHERE EXISTS (SELECT 1 FROM b WHERE b.k = 1)");
        assert!(decorrelate(&outermost(&uncorrelated)[0].1).unwrap().is_none());
        let other = parse("SELECT 1 FROM a WHERE EXISTS (SELECT 1 FROM b WHERE b.k < a.k)");
        assert_eq!(decorrelate(&outermost(&other)[0].1).unwrap_err().code, 1235);
    }

    #[test]
    fn empty_sets_and_bad_shapes() {
        let mut stmt = parse("DELETE FROM t WHERE id NOT IN (SELECT x FROM u) AND NOT EXISTS (SELECT 1 FROM u)");
        let mut params = Vec::new();
        let results =
            vec![Found::Rows(Use::In, vec![], None), Found::Rows(Use::Exists, vec![vec![Value::Int(1)]], None)];
        replace(&mut stmt, results, &mut params).unwrap();
        assert_eq!(stmt.to_string(), "DELETE FROM t WHERE true AND false");
        let mut stmt = parse("SELECT (SELECT x FROM u)");
        let two_rows = vec![vec![Value::Int(1)], vec![Value::Int(2)]];
        let e = replace(&mut stmt, vec![Found::Rows(Use::Scalar, two_rows, None)], &mut params).unwrap_err();
        assert_eq!(e.code, 1242);
        let e =
            replace(&mut stmt, vec![Found::Rows(Use::In, vec![vec![Value::Int(1), Value::Int(2)]], None)], &mut params)
                .unwrap_err();
        assert_eq!(e.code, 1241);
    }
}
