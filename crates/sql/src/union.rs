//! `SELECT ... UNION [ALL | DISTINCT] SELECT ...`: each SELECT runs as a
//! statement of its own, and the rows are put together on the SQL node;
//! then the union's own ORDER BY (result column names or positions) and
//! LIMIT/OFFSET apply.

use crate::error::{SqlError, SqlResult};
use crate::eval::{to_text, Env};
use crate::exec::{group_key, order_rows};
use crate::session::ResultColumn;
use latsdb_types::Value;
use sqlparser::ast::{self, Expr, OrderByKind, Query, SetExpr, SetOperator, SetQuantifier};

/// Whether a query is a set operation (its rows are put together here).
pub fn is_set_operation(q: &Query) -> bool {
    matches!(q.body.as_ref(), SetExpr::SetOperation { .. })
}

/// The branches of a union, left to right, each a query of its own, and
/// after each but the first whether it keeps duplicates (ALL) when joined
/// to everything before it.
pub fn branches(q: &Query) -> SqlResult<Vec<(Query, bool)>> {
    let mut out = Vec::new();
    collect(q, &q.body, true, &mut out)?;
    Ok(out)
}

fn collect(outer: &Query, body: &SetExpr, all: bool, out: &mut Vec<(Query, bool)>) -> SqlResult<()> {
    match body {
        SetExpr::SetOperation { op: SetOperator::Union, set_quantifier, left, right } => {
            collect(outer, left, all, out)?;
            let keeps = match set_quantifier {
                SetQuantifier::All => true,
                SetQuantifier::None | SetQuantifier::Distinct => false,
                other => return Err(SqlError::unsupported(format!("UNION {other} is not supported"))),
            };
            collect(outer, right, keeps, out)
        }
        SetExpr::SetOperation { op, .. } => {
            Err(SqlError::unsupported(format!("{op} is not supported; of the set operations only UNION [ALL] is")))
        }
        // A parenthesized branch keeps its own ORDER BY and LIMIT.
        SetExpr::Query(q) => {
            out.push((q.as_ref().clone(), all));
            Ok(())
        }
        other => {
            let mut q = outer.clone();
            q.body = Box::new(other.clone());
            q.order_by = None;
            q.limit_clause = None;
            q.fetch = None;
            out.push((q, all));
            Ok(())
        }
    }
}

/// Adds a branch's rows (the first branch's columns are the union's; a
/// SELECT has at least one): columns must match in number; a column whose
/// type differs between branches is typed from its values.
pub fn add_branch(
    columns: &mut Vec<ResultColumn>,
    rows: &mut Vec<Vec<Value>>,
    keep_duplicates: bool,
    branch_columns: Vec<ResultColumn>,
    branch_rows: Vec<Vec<Value>>,
) -> SqlResult<()> {
    if columns.is_empty() {
        *columns = branch_columns;
        *rows = branch_rows;
        return Ok(());
    }
    if branch_columns.len() != columns.len() {
        return Err(SqlError::new(1222, "21000", "The used SELECT statements have a different number of columns"));
    }
    for (c, b) in columns.iter_mut().zip(&branch_columns) {
        if c.ty != b.ty {
            *c = ResultColumn::computed(&c.name);
        }
    }
    rows.extend(branch_rows);
    // As in MySQL, a column that holds strings and other values in
    // different branches is a string column.
    for i in 0..columns.len() {
        let mut kinds = rows.iter().map(|r| &r[i]).filter(|v| !v.is_null()).map(|v| matches!(v, Value::Str(_)));
        let first = kinds.next();
        if first.is_some_and(|f| kinds.any(|k| k != f)) {
            for r in rows.iter_mut() {
                if !r[i].is_null() && !matches!(r[i], Value::Str(_)) {
                    r[i] = Value::Str(to_text(&r[i]));
                }
            }
        }
    }
    if !keep_duplicates {
        let mut seen = std::collections::HashSet::new();
        let mut key = String::new();
        rows.retain(|r| {
            group_key(r, &mut key);
            seen.insert(key.clone())
        });
    }
    Ok(())
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

/// Sorts (NULLs first, as MySQL) and cuts to OFFSET/LIMIT.
pub fn finish(rows: &mut Vec<Vec<Value>>, order: &[(usize, bool)], offset: u64, limit: Option<u64>) {
    if !order.is_empty() {
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

    #[test]
    fn branches_keep_their_own_clauses_and_the_union_its_own() {
        let q = query("SELECT a FROM t UNION ALL (SELECT b FROM u ORDER BY b LIMIT 2) UNION SELECT c FROM v ORDER BY 1 DESC LIMIT 5");
        let b = branches(&q).unwrap();
        let shown: Vec<(String, bool)> = b.iter().map(|(q, all)| (q.to_string(), *all)).collect();
        assert_eq!(
            shown,
            vec![
                ("SELECT a FROM t".to_string(), true),
                ("SELECT b FROM u ORDER BY b LIMIT 2".to_string(), true),
                ("SELECT c FROM v".to_string(), false),
            ]
        );
        let columns = vec![ResultColumn::computed("a")];
        assert_eq!(order(&q, &columns).unwrap(), vec![(0, true)]);
        assert!(branches(&query("SELECT a FROM t INTERSECT SELECT a FROM u")).is_err());
    }

    #[test]
    fn distinct_unions_drop_duplicates_and_finish_sorts_and_cuts() {
        let (mut columns, mut rows) = (Vec::new(), Vec::new());
        let col = || vec![ResultColumn::computed("x")];
        let ints = |v: &[i64]| v.iter().map(|&i| vec![Value::Int(i)]).collect::<Vec<_>>();
        add_branch(&mut columns, &mut rows, true, col(), ints(&[3, 1, 3])).unwrap();
        add_branch(&mut columns, &mut rows, true, col(), ints(&[2])).unwrap();
        assert_eq!(rows.len(), 4, "UNION ALL keeps duplicates");
        add_branch(&mut columns, &mut rows, false, col(), vec![vec![Value::Null]]).unwrap();
        assert_eq!(rows.len(), 4, "UNION drops them, over everything before it");
        finish(&mut rows, &[(0, false)], 1, Some(2));
        assert_eq!(rows, vec![vec![Value::Int(1)], vec![Value::Int(2)]]);
        let two = vec![ResultColumn::computed("x"), ResultColumn::computed("y")];
        let e = add_branch(&mut columns, &mut rows, true, two, Vec::new()).unwrap_err();
        assert_eq!(e.code, 1222);
        // Numbers and strings in one column: all strings, ordered as text.
        add_branch(&mut columns, &mut rows, true, col(), vec![vec![Value::Str("10".into())]]).unwrap();
        finish(&mut rows, &[(0, false)], 0, None);
        let texts: Vec<Value> = ["1", "10", "2"].iter().map(|s| Value::Str(s.to_string())).collect();
        assert_eq!(rows, texts.into_iter().map(|v| vec![v]).collect::<Vec<_>>());
    }
}
