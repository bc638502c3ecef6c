//! Set operations: `SELECT ... UNION | INTERSECT | EXCEPT [ALL | DISTINCT]
//! SELECT ...`. Each SELECT runs as a statement of its own, and the rows
//! are put together on the SQL node, following the parser's tree (INTERSECT
//! binds tighter than UNION and EXCEPT); then the operation's own ORDER BY
//! (result column names or positions) and LIMIT/OFFSET apply. Rows compare
//! as GROUP BY compares them (NULLs equal).

use crate::error::{SqlError, SqlResult};
use crate::eval::{to_text, Env};
use crate::exec::{collated_group_key, order_rows, weight};
use crate::session::ResultColumn;
use latsdb_types::value::Decimal;
use latsdb_types::{Collation, Value};
use sqlparser::ast::{self, Expr, OrderByKind, Query, SetExpr, SetOperator, SetQuantifier};
use std::collections::HashMap;

/// Whether a query is a set operation (its rows are put together here).
pub fn is_set_operation(q: &Query) -> bool {
    matches!(q.body.as_ref(), SetExpr::SetOperation { .. })
}

/// One step of a set operation, in postfix order: run a SELECT and push its
/// rows, or combine the two row sets on top of the stack.
#[derive(Debug)]
pub enum Step {
    Select(Box<Query>),
    Combine { op: SetOperator, all: bool },
}

/// The steps of a set operation, for a stack machine: every SELECT (a
/// query of its own, with its own clauses when parenthesized) and every
/// operator after its two operands.
pub fn steps(q: &Query) -> SqlResult<Vec<Step>> {
    let mut out = Vec::new();
    collect(q, &q.body, &mut out)?;
    Ok(out)
}

fn collect(outer: &Query, body: &SetExpr, out: &mut Vec<Step>) -> SqlResult<()> {
    match body {
        SetExpr::SetOperation { op, set_quantifier, left, right } => {
            let op = match op {
                SetOperator::Union | SetOperator::Intersect | SetOperator::Except => *op,
                SetOperator::Minus => SetOperator::Except,
            };
            let all = match set_quantifier {
                SetQuantifier::All => true,
                SetQuantifier::None | SetQuantifier::Distinct => false,
                other => return Err(SqlError::unsupported(format!("{op} {other} is not supported"))),
            };
            collect(outer, left, out)?;
            collect(outer, right, out)?;
            out.push(Step::Combine { op, all });
            Ok(())
        }
        // A parenthesized branch keeps its own ORDER BY and LIMIT.
        SetExpr::Query(q) => {
            out.push(Step::Select(q.clone()));
            Ok(())
        }
        other => {
            out.push(Step::Select(Box::new(operand(outer, other))));
            Ok(())
        }
    }
}

/// One operand of a set operation as a query of its own: the operation's
/// WITH, ORDER BY and LIMIT belong to the whole, not to it.
pub fn operand(outer: &Query, body: &SetExpr) -> Query {
    let mut q = outer.clone();
    q.with = None;
    q.body = Box::new(body.clone());
    q.order_by = None;
    q.limit_clause = None;
    q.fetch = None;
    q
}

/// Rows and their result columns.
pub type RowSet = (Vec<ResultColumn>, Vec<Vec<Value>>);

/// Puts two row sets together (the left one's columns name the result):
/// columns must match in number; a column whose type differs between the
/// sides is typed from its values.
pub fn combine(op: SetOperator, all: bool, left: RowSet, right: RowSet) -> SqlResult<RowSet> {
    let (mut columns, mut rows) = left;
    let (right_columns, mut right_rows) = right;
    if right_columns.len() != columns.len() {
        return Err(SqlError::new(1222, "21000", "The used SELECT statements have a different number of columns"));
    }
    for (i, (c, b)) in columns.iter_mut().zip(&right_columns).enumerate() {
        // The two sides' collations together decide how the column's text
        // compares, as in a comparison: a literal takes the other side's,
        // utf8mb4_bin wins over a case-insensitive column (MariaDB's
        // choice; MySQL would refuse two explicit COLLATE clauses that differ).
        let both: Vec<(Collation, bool)> = [c.collation, b.collation].into_iter().flatten().collect();
        let collation = crate::bind::strongest(&both);
        let decimal_scale = decimal_scale_of(c).max(decimal_scale_of(b));
        // A DOUBLE with fixed places keeps the most places of the sides
        // when the others are fixed-places DOUBLEs, integers or DECIMALs (a
        // DECIMAL's scale counts); the exact sides then show as DOUBLEs.
        let double_decimals = match (c.double_decimals, b.double_decimals) {
            (Some(x), Some(y)) => Some(x.max(y)),
            (Some(x), None) => exact_places(b, &right_rows, i).map(|s| x.max(s)),
            (None, Some(y)) => exact_places(c, &rows, i).map(|s| y.max(s)),
            (None, None) => None,
        };
        if double_decimals.is_some() {
            for v in rows.iter_mut().chain(right_rows.iter_mut()).map(|r| &mut r[i]) {
                let exact = matches!(v, Value::Int(_) | Value::UInt(_) | Value::Decimal(_));
                if let (true, Some(f)) = (exact, v.as_f64()) {
                    *v = Value::Float(f);
                }
            }
        }
        if c.ty != b.ty {
            *c = ResultColumn::computed(&c.name);
        }
        c.collation = collation;
        c.decimal_scale = decimal_scale;
        c.double_decimals = double_decimals;
    }
    for (i, c) in columns.iter().enumerate() {
        unify_column(&mut rows, &mut right_rows, i, c.decimal_scale);
    }
    let collations: Vec<Collation> = columns.iter().map(|c| c.collation.map_or(Collation::Bin, |(c, _)| c)).collect();
    let mut key = String::new();
    let keyed = |rows: &[Vec<Value>], key: &mut String| -> HashMap<String, usize> {
        let mut counts = HashMap::new();
        for r in rows {
            collated_group_key(r, &collations, key);
            *counts.entry(key.clone()).or_insert(0) += 1;
        }
        counts
    };
    match op {
        SetOperator::Union => rows.extend(right_rows),
        SetOperator::Intersect => {
            // ALL: a row as often as it is on both sides (the fewer).
            let mut on_right = keyed(&right_rows, &mut key);
            rows.retain(|r| {
                collated_group_key(r, &collations, &mut key);
                match on_right.get_mut(key.as_str()) {
                    Some(n) if *n > 0 => {
                        *n -= 1;
                        true
                    }
                    _ => false,
                }
            });
        }
        _ => {
            // EXCEPT ALL: a row as often as the left has it more.
            let mut on_right = keyed(&right_rows, &mut key);
            rows.retain(|r| {
                collated_group_key(r, &collations, &mut key);
                match on_right.get_mut(key.as_str()) {
                    Some(n) if *n > 0 => {
                        if all {
                            *n -= 1;
                        }
                        false
                    }
                    _ => true,
                }
            });
        }
    }
    if !all {
        crate::exec::retain_distinct(&mut rows, &collations);
    }
    Ok((columns, rows))
}

/// The scale a branch's column type gives DECIMAL values.
fn decimal_scale_of(c: &ResultColumn) -> Option<u8> {
    match c.ty {
        Some(latsdb_types::schema::ColumnType::Decimal { scale, .. }) => Some(scale),
        _ => c.decimal_scale,
    }
}

/// The places a branch of integers or DECIMALs shows (0 for integers, the
/// largest scale for DECIMALs); None when it is of another type (an
/// unfixed DOUBLE, text, ...). A branch of NULLs alone has no type to give.
fn exact_places(c: &ResultColumn, rows: &[Vec<Value>], i: usize) -> Option<u8> {
    match c.ty {
        Some(latsdb_types::schema::ColumnType::Integer { .. }) => return Some(0),
        Some(latsdb_types::schema::ColumnType::Decimal { .. }) | None => {}
        Some(_) => return None,
    }
    let mut places = decimal_scale_of(c).unwrap_or(0);
    for v in rows.iter().map(|r| &r[i]) {
        match v {
            Value::Null | Value::Int(_) | Value::UInt(_) => {}
            Value::Decimal(d) => places = places.max(d.scale),
            _ => return None,
        }
    }
    Some(places)
}

/// Gives a column's values on both sides one type, as MySQL types a set
/// operation's column by all its branches (so rows compare as MySQL
/// compares them): strings with other values make a string column, and
/// integers with decimals a decimal column at the largest scale (1.5 and
/// 1.50 are then one value).
/// `typed_scale`: the largest DECIMAL scale the branches' types give the
/// column (a branch may have no rows to show it).
fn unify_column(left: &mut [Vec<Value>], right: &mut [Vec<Value>], i: usize, typed_scale: Option<u8>) {
    let values = || left.iter().chain(right.iter()).map(|r| &r[i]).filter(|v| !v.is_null());
    let strings = values().filter(|v| matches!(v, Value::Str(_))).count();
    let all = values().count();
    if strings > 0 && strings < all {
        for v in left.iter_mut().chain(right.iter_mut()).map(|r| &mut r[i]) {
            if !v.is_null() && !matches!(v, Value::Str(_)) {
                *v = Value::Str(to_text(v));
            }
        }
        return;
    }
    let exact = |v: &Value| matches!(v, Value::Int(_) | Value::UInt(_) | Value::Decimal(_));
    let Some(scale) =
        values().filter_map(|v| if let Value::Decimal(d) = v { Some(d.scale) } else { None }).max().max(typed_scale)
    else {
        return;
    };
    if !values().all(exact) {
        return;
    }
    for v in left.iter_mut().chain(right.iter_mut()).map(|r| &mut r[i]) {
        let d = match v {
            Value::Int(n) => Decimal::new(*n as i128, 0),
            Value::UInt(n) => Decimal::new(*n as i128, 0),
            Value::Decimal(d) => *d,
            _ => continue,
        };
        if let Some(d) = d.rescale(scale) {
            *v = Value::Decimal(d);
        }
    }
}

/// The union's ORDER BY as (result column, descending).
pub fn order(q: &Query, columns: &[ResultColumn]) -> SqlResult<Vec<(usize, bool)>> {
    let Some(ob) = &q.order_by else { return Ok(Vec::new()) };
    let OrderByKind::Expressions(exprs) = &ob.kind else {
        return Err(SqlError::unsupported("ORDER BY ALL is not supported"));
    };
    let mut out = Vec::with_capacity(exprs.len());
    for o in exprs {
        let named = |name: &str| columns.iter().position(|c| c.name.eq_ignore_ascii_case(name));
        let column = match &o.expr {
            Expr::Value(v) => match &v.value {
                ast::Value::Number(n, _) => {
                    n.parse::<usize>().ok().filter(|&i| i >= 1 && i <= columns.len()).map(|i| i - 1)
                }
                _ => None,
            },
            Expr::Identifier(id) => named(&id.value),
            Expr::CompoundIdentifier(ids) => ids.last().and_then(|id| named(&id.value)),
            _ => None,
        };
        let Some(column) = column else {
            return Err(SqlError::new(
                1054,
                "42S22",
                format!("Unknown column '{}' in 'order clause' (a UNION is ordered by its result columns, by name or position)", o.expr),
            ));
        };
        out.push((column, o.options.sort == Some(ast::OrderBySort::Desc)));
    }
    Ok(out)
}

/// Sorts (NULLs first, as MySQL; text of a case-insensitive column by its
/// weight) and cuts to OFFSET/LIMIT.
pub fn finish(
    rows: &mut Vec<Vec<Value>>,
    columns: &[ResultColumn],
    order: &[(usize, bool)],
    offset: u64,
    limit: Option<u64>,
) {
    let collation = |i: usize| columns.get(i).and_then(|c| c.collation).map_or(Collation::Bin, |(c, _)| c);
    let folded = |i: usize| collation(i).is_case_insensitive();
    if order.iter().any(|&(i, _)| folded(i)) {
        let mut keyed: Vec<(Vec<Value>, Vec<Value>)> = rows
            .drain(..)
            .map(|r| {
                let weights = order.iter().map(|&(i, _)| weight(&r[i], collation(i)).into_owned()).collect();
                (weights, r)
            })
            .collect();
        keyed.sort_by(|a, b| order_rows(&a.0, &b.0, order.iter().enumerate().map(|(k, &(_, desc))| (k, desc))));
        rows.extend(keyed.into_iter().map(|(_, r)| r));
    } else if !order.is_empty() {
        rows.sort_by(|a, b| order_rows(a, b, order.iter().copied()));
    }
    let start = (offset as usize).min(rows.len());
    let end = limit.map_or(rows.len(), |l| start.saturating_add(l as usize).min(rows.len()));
    rows.truncate(end);
    rows.drain(..start);
}

/// LIMIT and OFFSET of the union, evaluated.
pub fn limits(q: &Query, env: &Env) -> SqlResult<(u64, Option<u64>)> {
    let count = |e: &Expr| -> SqlResult<u64> {
        let v = crate::bind::Binder::new(&[], "limit").bind(e)?.eval(&[], env)?;
        v.as_u64()
            .or_else(|| v.as_i64().and_then(|i| u64::try_from(i).ok()))
            .ok_or_else(|| SqlError::parse(format!("LIMIT and OFFSET take non-negative integers, not {v}")))
    };
    Ok(match &q.limit_clause {
        None => (0, None),
        Some(ast::LimitClause::LimitOffset { limit, offset, limit_by }) => {
            if !limit_by.is_empty() {
                return Err(SqlError::unsupported("LIMIT BY is not supported"));
            }
            let offset = match offset {
                Some(o) => count(&o.value)?,
                None => 0,
            };
            (offset, limit.as_ref().map(count).transpose()?)
        }
        Some(ast::LimitClause::OffsetCommaLimit { offset, limit }) => (count(offset)?, Some(count(limit)?)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(sql: &str) -> Query {
        match crate::parse::parse(sql).unwrap().statements.remove(0) {
            ast::Statement::Query(q) => *q,
            other => panic!("not a query: {other}"),
        }
    }

    fn shown(steps: &[Step]) -> Vec<String> {
        steps
            .iter()
            .map(|s| match s {
                Step::Select(q) => q.to_string(),
                Step::Combine { op, all } => format!("{op}{}", if *all { " ALL" } else { "" }),
            })
            .collect()
    }

    #[test]
    fn selects_keep_their_own_clauses_and_the_operation_its_own() {
        let q = query("SELECT a FROM t UNION ALL (SELECT b FROM u ORDER BY b LIMIT 2) UNION SELECT c FROM v ORDER BY 1 DESC LIMIT 5");
        assert_eq!(
            shown(&steps(&q).unwrap()),
            vec!["SELECT a FROM t", "SELECT b FROM u ORDER BY b LIMIT 2", "UNION ALL", "SELECT c FROM v", "UNION"]
        );
        let columns = vec![ResultColumn::computed("a")];
        assert_eq!(order(&q, &columns).unwrap(), vec![(0, true)]);
        // INTERSECT binds tighter than UNION and EXCEPT.
        let q = query("SELECT a FROM t EXCEPT SELECT a FROM u INTERSECT SELECT a FROM v");
        assert_eq!(
            shown(&steps(&q).unwrap()),
            vec!["SELECT a FROM t", "SELECT a FROM u", "SELECT a FROM v", "INTERSECT", "EXCEPT"]
        );
    }

    fn ints(v: &[i64]) -> RowSet {
        (vec![ResultColumn::computed("x")], v.iter().map(|&i| vec![Value::Int(i)]).collect())
    }

    fn values(set: &RowSet) -> Vec<i64> {
        let mut v: Vec<i64> = set.1.iter().map(|r| r[0].as_i64().unwrap_or(-1)).collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn intersect_and_except_count_rows_as_the_standard_says() {
        let (l, r) = (&[1, 1, 1, 2, 3, 5][..], &[1, 1, 3, 3, 4][..]);
        let run = |op, all| values(&combine(op, all, ints(l), ints(r)).unwrap());
        assert_eq!(run(SetOperator::Intersect, false), vec![1, 3]);
        assert_eq!(run(SetOperator::Intersect, true), vec![1, 1, 3]);
        assert_eq!(run(SetOperator::Except, false), vec![2, 5]);
        assert_eq!(run(SetOperator::Except, true), vec![1, 2, 5]);
        assert_eq!(run(SetOperator::Union, false), vec![1, 2, 3, 4, 5]);
        assert_eq!(run(SetOperator::Union, true).len(), 11);
        // NULLs are equal to each other here.
        let nulls = || (vec![ResultColumn::computed("x")], vec![vec![Value::Null], vec![Value::Int(1)]]);
        let both = combine(SetOperator::Intersect, false, nulls(), nulls()).unwrap();
        assert_eq!(both.1.len(), 2);
    }

    #[test]
    fn distinct_unions_drop_duplicates_and_finish_sorts_and_cuts() {
        let all = combine(SetOperator::Union, true, ints(&[3, 1, 3]), ints(&[2])).unwrap();
        assert_eq!(all.1.len(), 4, "UNION ALL keeps duplicates");
        let (columns, mut rows) =
            combine(SetOperator::Union, false, all, (vec![ResultColumn::computed("x")], vec![vec![Value::Null]]))
                .unwrap();
        assert_eq!(rows.len(), 4, "UNION drops them, over everything before it");
        finish(&mut rows, &columns, &[(0, false)], 1, Some(2));
        assert_eq!(rows, vec![vec![Value::Int(1)], vec![Value::Int(2)]]);
        let two = vec![ResultColumn::computed("x"), ResultColumn::computed("y")];
        let e = combine(SetOperator::Union, true, (columns.clone(), rows.clone()), (two, Vec::new())).unwrap_err();
        assert_eq!(e.code, 1222);
        // Numbers and strings in one column: all strings, ordered as text.
        let (columns, mut rows) = combine(
            SetOperator::Union,
            true,
            (columns, rows),
            (vec![ResultColumn::computed("x")], vec![vec![Value::Str("10".into())]]),
        )
        .unwrap();
        finish(&mut rows, &columns, &[(0, false)], 0, None);
        let texts: Vec<Value> = ["1", "10", "2"].iter().map(|s| Value::Str(s.to_string())).collect();
        assert_eq!(rows, texts.into_iter().map(|v| vec![v]).collect::<Vec<_>>());
    }

    #[test]
    fn case_insensitive_columns_make_one_row_of_a_and_capital_a() {
        let text = |v: &[&str], collation: Option<Collation>| {
            let column = ResultColumn { collation: collation.map(|c| (c, false)), ..ResultColumn::computed("s") };
            (vec![column], v.iter().map(|s| vec![Value::Str(s.to_string())]).collect::<Vec<_>>())
        };
        // The left branch's column is case-insensitive; the right one literals.
        let ci = Some(Collation::GeneralCi);
        let (columns, mut rows) =
            combine(SetOperator::Union, false, text(&["b", "A"], ci), text(&["a", "B ", "c"], None)).unwrap();
        assert_eq!(columns[0].collation, Some((Collation::GeneralCi, false)));
        finish(&mut rows, &columns, &[(0, false)], 0, None);
        let shown: Vec<String> = rows.iter().map(|r| to_text(&r[0])).collect();
        assert_eq!(shown, ["A", "b", "c"], "first of equals kept, ordered by weight");
        let (_, rows) = combine(SetOperator::Intersect, false, text(&["x", "Y"], None), text(&["X"], ci)).unwrap();
        assert_eq!(rows, vec![vec![Value::Str("x".into())]]);
        // A binary column against a case-insensitive one: bytes decide.
        let (columns, rows) =
            combine(SetOperator::Union, false, text(&["a"], ci), text(&["A"], Some(Collation::Bin))).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(columns[0].collation, Some((Collation::Bin, false)));
    }
}
