//! EXPLAIN: how the SQL node would run a SELECT, INSERT, UPDATE or DELETE,
//! in MySQL's twelve columns (one row per table read, in join order) or as
//! MySQL's FORMAT=JSON document. Nothing is written and no row is returned;
//! a whole table's `rows` is the data nodes' count of its rows, and an
//! index range's is counted by them over the range (they keep no
//! statistics), which reads the range once. Subqueries and derived tables run first, as
//! the SQL node runs them for every statement, and the plan shown is the
//! outer statement's with their results.
//!
//! Access types as MySQL names them: `const` (one primary-key lookup, or
//! a unique index whose every column is fixed), `eq_ref` (a joined table
//! looked up by its primary key), `range` (several key lookups, or a range
//! of an ordered index), `ref` (equal values on a prefix of a non-unique
//! index), `index` (a whole ordered index walked in its order) and `ALL` (a
//! full scan).

use crate::dml::InsertSource;
use crate::error::{SqlError, SqlResult};
use crate::eval::{Env, SExpr};
use crate::plan::{Access, AggMode, SelectPlan, Source};
use crate::session::{Planned, Response, ResultColumn, Session};
use latsdb_types::schema::{ColumnDef, ColumnType, IntWidth};
use latsdb_types::Value;
use sqlparser::ast::{self, Statement};

/// One row of EXPLAIN's table: a table the statement reads.
struct Step {
    select_type: &'static str,
    table: String,
    partitions: Option<String>,
    access: &'static str,
    key: Option<String>,
    key_parts: Vec<String>,
    key_len: Option<u32>,
    reference: Option<String>,
    rows: Option<u64>,
    extra: Vec<String>,
}

/// Runs `EXPLAIN [FORMAT=TRADITIONAL|JSON] statement`.
pub async fn explain(
    session: &mut Session,
    statement: &Statement,
    format: Option<&ast::AnalyzeFormatKind>,
    analyze: bool,
) -> SqlResult<Response> {
    if analyze {
        return Err(SqlError::unsupported(
            "EXPLAIN ANALYZE is not supported; EXPLAIN shows the plan without running it",
        ));
    }
    let json = match format {
        None => false,
        Some(ast::AnalyzeFormatKind::Keyword(f) | ast::AnalyzeFormatKind::Assignment(f)) => match f {
            ast::AnalyzeFormat::JSON => true,
            ast::AnalyzeFormat::TRADITIONAL | ast::AnalyzeFormat::TEXT => false,
            other => {
                return Err(SqlError::unsupported(format!(
                    "EXPLAIN FORMAT={other} is not supported; use TRADITIONAL or JSON"
                )))
            }
        },
    };
    // The session ran the statement's subqueries and derived tables before
    // it came here, as it does for every statement: what remains is planned.
    if matches!(statement, Statement::Query(q) if !is_plain(q)) {
        return Err(SqlError::unsupported("EXPLAIN of a query with WITH or set operations is not supported yet"));
    }
    let Some(planned) = session.plan(statement).await? else {
        return Err(SqlError::unsupported("EXPLAIN shows SELECT, INSERT, UPDATE, REPLACE and DELETE statements"));
    };
    let steps = steps_of(session, &planned).await?;
    Ok(if json { json_response(&steps) } else { table_response(steps) })
}

/// A query the planner takes whole: one SELECT, no set operation or WITH.
fn is_plain(q: &ast::Query) -> bool {
    q.with.is_none() && matches!(q.body.as_ref(), ast::SetExpr::Select(_))
}

async fn steps_of(session: &mut Session, planned: &Planned) -> SqlResult<Vec<Step>> {
    Ok(match planned {
        Planned::Select(s) => select_steps(session, s, "SIMPLE").await?,
        Planned::Update(w) => select_steps(session, &w.select, "UPDATE").await?,
        Planned::Delete(w) => select_steps(session, &w.select, "DELETE").await?,
        Planned::Insert(i) => {
            let mut steps = vec![Step { select_type: "INSERT", ..blank_step(&i.table.def().name, Some(&i.table)) }];
            if let InsertSource::Select(select) = &i.source {
                steps.extend(select_steps(session, select, "SIMPLE").await?);
            }
            steps
        }
    })
}

/// The steps of one SELECT: its first table by the plan's access path,
/// then each joined table.
async fn select_steps(session: &mut Session, plan: &SelectPlan, select_type: &'static str) -> SqlResult<Vec<Step>> {
    let mut steps = Vec::with_capacity(plan.sources.len());
    for (i, src) in plan.sources.iter().enumerate() {
        let mut step =
            if i == 0 { first_step(session, plan, src).await? } else { joined_step(session, plan, i).await? };
        step.select_type = select_type;
        steps.push(step);
    }
    if let Some(first) = steps.first_mut() {
        if plan.distinct || matches!(plan.agg, AggMode::Grouped { .. }) {
            first.extra.push("Using temporary".into());
        }
        let one_row = matches!(&plan.access, Access::Keys(k) if k.len() == 1) && plan.sources.len() == 1;
        if !plan.order.is_empty() && !plan.index_ordered && !one_row {
            first.extra.push("Using filesort".into());
        }
    }
    Ok(steps)
}

impl Step {
    /// The step reads index `key` by its columns `parts` (a prefix of the
    /// index's columns).
    fn use_key(&mut self, def: &latsdb_types::schema::TableDef, key: &str, parts: &[u16]) {
        debug_assert!(!parts.is_empty(), "an index read uses at least one column of {key}");
        self.key = Some(key.to_string());
        self.key_parts = parts.iter().map(|&c| def.columns[c as usize].name.clone()).collect();
        self.key_len = Some(key_len(parts.iter().map(|&c| &def.columns[c as usize])));
    }
}

/// A full scan of `table` (`stored`: its partitions, when it is one).
fn blank_step(table: &str, stored: Option<&std::sync::Arc<latsdb_client::Table>>) -> Step {
    Step {
        select_type: "SIMPLE",
        table: table.to_string(),
        partitions: stored.map(|t| all_partitions(t.def().partitions)),
        access: "ALL",
        key: None,
        key_parts: Vec::new(),
        key_len: None,
        reference: None,
        rows: None,
        extra: Vec::new(),
    }
}

async fn first_step(session: &mut Session, plan: &SelectPlan, src: &Source) -> SqlResult<Step> {
    let mut step = blank_step(&src.scope.alias, src.stored());
    let Some(table) = src.stored().cloned() else {
        return Ok(step);
    };
    let def = table.def();
    match &plan.access {
        Access::Keys(keys) => {
            step.access = if keys.len() == 1 { "const" } else { "range" };
            step.use_key(def, "PRIMARY", &def.primary_key);
            step.reference = (keys.len() == 1).then(|| vec!["const"; def.primary_key.len()].join(","));
            step.rows = Some(keys.len() as u64);
            step.partitions = Some(key_partitions(session, &table, keys)?);
        }
        Access::Range { index, eq, lower: None, upper: None, .. } if eq.is_empty() => {
            // A whole ordered index walked in its order (ORDER BY ... LIMIT).
            step.access = "index";
            step.key = Some(index.clone());
            step.rows = Some(walked_rows(session, plan, src).await?);
        }
        Access::Range { index, columns, eq, lower, upper } => {
            let unique = def.indexes.iter().any(|ix| ix.name == *index && ix.unique);
            let fixed = lower.is_none() && upper.is_none();
            let parts = if fixed { eq.len() } else { eq.len() + 1 };
            step.access = match (fixed, unique && eq.len() == columns.len()) {
                (true, true) => "const",
                (true, false) => "ref",
                (false, _) => "range",
            };
            step.use_key(def, index, &columns[..parts.min(columns.len())]);
            step.reference = fixed.then(|| vec!["const"; eq.len()].join(","));
            step.rows = Some(rows_in(session, plan, src).await?);
        }
        Access::Full => step.rows = Some(table_rows(session, &table).await?),
    }
    if !plan.pushed.is_empty() {
        step.extra.push("Using pushed condition".into());
    }
    if plan.filter.is_some() {
        step.extra.push("Using where".into());
    }
    Ok(step)
}

async fn joined_step(session: &mut Session, plan: &SelectPlan, i: usize) -> SqlResult<Step> {
    let src = &plan.sources[i];
    let mut step = blank_step(&src.scope.alias, src.stored());
    let join = plan.joins.iter().find(|j| j.table == i);
    match (src.stored(), join.and_then(|j| j.lookup.as_ref())) {
        (Some(table), Some(lookup)) => {
            let def = table.def();
            step.access = "eq_ref";
            step.use_key(def, "PRIMARY", &def.primary_key);
            step.reference = Some(lookup.iter().map(|e| reference(plan, e)).collect::<Vec<_>>().join(","));
            step.rows = Some(1);
        }
        (Some(table), None) => {
            step.rows = Some(table_rows(session, table).await?);
            step.extra.push("Using join buffer (hash join)".into());
        }
        (None, _) => {}
    }
    if join.is_some_and(|j| j.on.is_some()) {
        step.extra.push("Using where".into());
    }
    Ok(step)
}

/// The rows an index walk reads: it stops after OFFSET + LIMIT rows when
/// the index gives ORDER BY's order.
async fn walked_rows(session: &mut Session, plan: &SelectPlan, src: &Source) -> SqlResult<u64> {
    let Some(table) = src.stored() else {
        return Ok(0);
    };
    let rows = table_rows(session, table).await?;
    if !plan.index_ordered {
        return Ok(rows);
    }
    Ok(rows.min(limit_rows(session, plan).unwrap_or(u64::MAX)))
}

/// OFFSET + LIMIT when both are constants.
fn limit_rows(session: &Session, plan: &SelectPlan) -> Option<u64> {
    let view = session.view();
    let env = Env { params: &[], session: &view, strict_numbers: false };
    let number = |e: &Option<SExpr>| -> Option<u64> {
        match e {
            None => Some(0),
            Some(e) => e.eval(&[], &env).ok().and_then(|v| v.as_u64()),
        }
    };
    plan.limit.as_ref()?;
    number(&plan.limit)?.checked_add(number(&plan.offset)?)
}

/// What a joined table's key is looked up by: a column of an earlier table
/// (`db.alias.column`), `const`, or `func` for any other expression.
fn reference(plan: &SelectPlan, e: &SExpr) -> String {
    match e {
        SExpr::Const(_) => "const".into(),
        SExpr::Col(position) => {
            // The joined row holds each table's fetched columns in turn.
            let mut start = 0;
            for src in &plan.sources {
                if *position < start + src.fetch.len() {
                    let column = src.fetch[position - start];
                    return match src.scope.columns.get(column as usize) {
                        Some(c) => format!("{}.{}.{}", src.scope.db, src.scope.alias, c.name),
                        None => "func".into(),
                    };
                }
                start += src.fetch.len();
            }
            "func".into()
        }
        _ => "func".into(),
    }
}

/// The rows the first table's access path reads, before any condition:
/// counted by the data nodes over the same range.
async fn rows_in(session: &mut Session, plan: &SelectPlan, src: &Source) -> SqlResult<u64> {
    let Some(table) = src.stored() else {
        return Ok(0);
    };
    let view = session.view();
    let env = Env { params: &[], session: &view, strict_numbers: false };
    let mut unfiltered = plan.clone();
    unfiltered.pushed.clear();
    let scan = crate::exec::build_scan(&unfiltered, src, table, &plan.access, &env)?;
    match scan {
        None => Ok(0),
        Some(scan) => count_rows(session, table, scan).await,
    }
}

async fn count_rows(
    session: &Session,
    table: &std::sync::Arc<latsdb_client::Table>,
    scan: latsdb_client::Scan,
) -> SqlResult<u64> {
    let counted = session.shared.client.aggregate(table, scan, &[latsdb_types::expr::Aggregate::CountRows]).await?;
    Ok(counted.first().and_then(Value::as_u64).unwrap_or(0))
}

/// The rows of a whole table, as the data nodes count them (their memory
/// report: no scan).
async fn table_rows(session: &Session, table: &std::sync::Arc<latsdb_client::Table>) -> SqlResult<u64> {
    let sizes = session.shared.client.table_sizes().await?;
    Ok(sizes.get(&table.def().id).map_or(0, |&(rows, _)| rows))
}

/// The partitions primary-key lookups reach (NDB shows the pruned ones).
fn key_partitions(session: &Session, table: &latsdb_client::Table, keys: &[Vec<SExpr>]) -> SqlResult<String> {
    let view = session.view();
    let env = Env { params: &[], session: &view, strict_numbers: false };
    let Ok(values) = crate::exec::distinct_keys(table, keys, &env) else {
        return Ok(all_partitions(table.def().partitions));
    };
    let mut parts: Vec<u32> = Vec::new();
    for key in values {
        let encoded = table.meta.encode_key(&key)?;
        parts.push(table.meta.partition_of(&encoded));
    }
    parts.sort_unstable();
    parts.dedup();
    Ok(parts.iter().map(|p| format!("p{p}")).collect::<Vec<_>>().join(","))
}

fn all_partitions(n: u32) -> String {
    (0..n).map(|p| format!("p{p}")).collect::<Vec<_>>().join(",")
}

/// Bytes of an index key as MySQL counts them (`key_len`): each column's
/// stored width, 2 more for a variable-length one, 1 more when it may be
/// NULL; text counts 4 bytes a character (utf8mb4).
fn key_len<'a>(columns: impl Iterator<Item = &'a ColumnDef>) -> u32 {
    columns.map(column_key_len).sum()
}

fn column_key_len(c: &ColumnDef) -> u32 {
    let fraction = u32::from(c.fraction_digits).div_ceil(2);
    let width = match c.ty {
        ColumnType::Integer { width, .. } => match width {
            IntWidth::Tiny => 1,
            IntWidth::Small => 2,
            IntWidth::Medium => 3,
            IntWidth::Int => 4,
            IntWidth::Big => 8,
        },
        ColumnType::Float => 4,
        ColumnType::Double => 8,
        ColumnType::Decimal { precision, scale } => decimal_bytes(precision - scale) + decimal_bytes(scale),
        ColumnType::Char(n) => n * 4,
        ColumnType::VarChar(n) => n * 4 + 2,
        ColumnType::Binary(n) => n,
        ColumnType::VarBinary(n) => n + 2,
        ColumnType::Text | ColumnType::Blob => 767 + 2,
        ColumnType::Date => 3,
        ColumnType::DateTime => 5 + fraction,
        ColumnType::Timestamp => 4 + fraction,
        ColumnType::Boolean => 1,
        ColumnType::Time => 3 + fraction,
        ColumnType::Year => 1,
        ColumnType::Bit(n) => u32::from(n).div_ceil(8),
        ColumnType::Enum if c.members.len() > 255 => 2,
        ColumnType::Enum => 1,
        // A SET of n members takes (n + 7) / 8 bytes, 8 past 32 members.
        ColumnType::Set => match c.members.len().div_ceil(8) {
            n @ 0..=4 => n as u32,
            _ => 8,
        },
    };
    width + u32::from(c.nullable)
}

/// MySQL's packed DECIMAL: 4 bytes per 9 digits, fewer for the rest.
fn decimal_bytes(digits: u8) -> u32 {
    const REST: [u32; 10] = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4];
    u32::from(digits / 9) * 4 + REST[usize::from(digits % 9)]
}

fn table_response(steps: Vec<Step>) -> Response {
    let text = |s: &str| ResultColumn::computed(s);
    let columns = [
        "id",
        "select_type",
        "table",
        "partitions",
        "type",
        "possible_keys",
        "key",
        "key_len",
        "ref",
        "rows",
        "filtered",
        "Extra",
    ]
    .iter()
    .map(|c| text(c))
    .collect();
    let opt = |v: Option<String>| v.map_or(Value::Null, Value::Str);
    let rows = steps
        .into_iter()
        .map(|s| {
            vec![
                Value::Int(1),
                Value::Str(s.select_type.into()),
                Value::Str(s.table),
                opt(s.partitions),
                Value::Str(s.access.into()),
                opt(s.key.clone()),
                opt(s.key),
                opt(s.key_len.map(|n| n.to_string())),
                opt(s.reference),
                s.rows.map_or(Value::Null, |n| Value::Int(n as i64)),
                Value::Str("100.00".into()),
                opt((!s.extra.is_empty()).then(|| s.extra.join("; "))),
            ]
        })
        .collect();
    Response::Rows { columns, rows }
}

/// A comma-separated list as a JSON array of strings.
fn list(text: &str) -> serde_json::Value {
    serde_json::Value::Array(text.split(',').map(|p| serde_json::Value::String(p.to_string())).collect())
}

/// MySQL's FORMAT=JSON shape: a query block with its table, or a nested
/// loop of tables when it joins.
fn json_response(steps: &[Step]) -> Response {
    let tables: Vec<serde_json::Value> = steps
        .iter()
        .map(|s| {
            let mut t = serde_json::Map::new();
            t.insert("table_name".into(), s.table.clone().into());
            if let Some(p) = &s.partitions {
                t.insert("partitions".into(), list(p));
            }
            t.insert("access_type".into(), s.access.into());
            if let Some(k) = &s.key {
                t.insert("possible_keys".into(), vec![serde_json::Value::from(k.clone())].into());
                t.insert("key".into(), k.clone().into());
                t.insert("used_key_parts".into(), s.key_parts.clone().into());
            }
            if let Some(n) = s.key_len {
                t.insert("key_length".into(), n.to_string().into());
            }
            if let Some(r) = &s.reference {
                t.insert("ref".into(), list(r));
            }
            if let Some(n) = s.rows {
                t.insert("rows_examined_per_scan".into(), n.into());
            }
            t.insert("filtered".into(), "100.00".into());
            if !s.extra.is_empty() {
                t.insert("message".into(), s.extra.join("; ").into());
            }
            serde_json::Value::Object(t)
        })
        .collect();
    let mut block = serde_json::Map::new();
    block.insert("select_id".into(), 1.into());
    match tables.as_slice() {
        [one] => {
            block.insert("table".into(), one.clone());
        }
        many => {
            let nested: Vec<serde_json::Value> = many.iter().map(|t| serde_json::json!({ "table": t })).collect();
            block.insert("nested_loop".into(), nested.into());
        }
    }
    let doc = serde_json::json!({ "query_block": block });
    let text = serde_json::to_string_pretty(&doc).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    Response::Rows { columns: vec![ResultColumn::computed("EXPLAIN")], rows: vec![vec![Value::Str(text)]] }
}
