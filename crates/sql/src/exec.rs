//! Executing SELECT plans: fetching rows from the data nodes (batched key
//! lookups, pushed-down scans and aggregates), then joins, grouping,
//! ordering and limits on the SQL node.

use crate::bind::{AggKind, AggSpec};
use crate::error::{SqlError, SqlResult};
use crate::eval::{bits_of, compare, numeric, to_key_column, to_text, truth, Arith, Env, SExpr};
use crate::plan::{Access, AggMode, SelectPlan, Source, SourceKind};
use latsdb_client::{Client, Op, Outcome, Row, Scan, Table, Transaction};
use latsdb_types::expr::{Aggregate, Expr};
use latsdb_types::proto::LockMode;
use latsdb_types::schema::{ColumnDef, ColumnType};
use latsdb_types::{Collation, Decimal, Value};
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::Arc;

/// Where a statement's operations go: straight to the cluster, or through
/// the session's open transaction (which sees its own writes and holds
/// locks until commit).
pub struct Ctx<'a> {
    pub client: &'a Client,
    pub tx: Option<&'a mut Transaction>,
    pub env: Env<'a>,
    /// Keys the open transaction has written (None outside a transaction).
    pub written: Option<&'a mut WrittenKeys>,
    /// UPDATE reports rows matched (CLIENT_FOUND_ROWS) instead of changed.
    pub count_matched: bool,
    /// While the transaction has savepoints: for each write, the write that
    /// undoes it (ROLLBACK TO SAVEPOINT runs them backwards).
    pub undo: Option<&'a mut Vec<Op>>,
    /// The session's `foreign_key_checks` (see `foreign.rs`).
    pub foreign_key_checks: bool,
}

/// Keys an open transaction wrote, per table id: encoded key -> key values.
pub type WrittenKeys = HashMap<u32, BTreeMap<Vec<u8>, Vec<Value>>>;

impl Ctx<'_> {
    /// Remembers a key the transaction writes, so its scans can show the
    /// transaction's own version of the row.
    pub fn note_write(&mut self, table: &Table, key: &[Value]) {
        if self.tx.is_none() {
            return;
        }
        if let Some(w) = self.written.as_deref_mut() {
            if let Ok(encoded) = table.meta.encode_key(key) {
                w.entry(table.def().id).or_default().insert(encoded, key.to_vec());
            }
        }
    }

    /// Inside BEGIN ... COMMIT (or with autocommit off), as opposed to a
    /// statement's own implicit transaction.
    pub fn in_explicit_transaction(&self) -> bool {
        self.tx.is_some() && self.written.is_some()
    }

    /// The keys (and rows) the open transaction wrote in `table`, if any.
    fn written_in(&self, table: &Table) -> Option<&BTreeMap<Vec<u8>, Vec<Value>>> {
        self.tx.as_ref()?;
        let keys = self.written.as_deref()?.get(&table.def().id)?;
        (!keys.is_empty()).then_some(keys)
    }

    fn written_keys(&self, table: &Table) -> Option<Vec<(Vec<u8>, Vec<Value>)>> {
        self.written_in(table).map(|keys| keys.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
    }

    /// Whether the open transaction wrote rows of `table`.
    fn wrote(&self, table: &Table) -> bool {
        self.written_in(table).is_some()
    }

    /// Runs key operations; in a transaction a failed operation aborts it.
    pub async fn run_ops(&mut self, ops: Vec<Op>) -> SqlResult<Vec<Outcome>> {
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        // Committed reads of rows the transaction has not written see the
        // same committed version outside it: they go straight to a replica
        // (one hop, no coordinator), as NDB's committed reads do.
        let own_rows = |ops: &[Op], written: Option<&WrittenKeys>| {
            ops.iter().any(|op| {
                let (table, key) = op.target();
                written.is_some_and(|w| w.get(&table).is_some_and(|keys| keys.contains_key(key)))
            })
        };
        // The session tracks the keys of explicit transactions; a
        // statement's own transaction has written nothing before it first
        // runs an operation.
        let tracked = self.written.is_some() || self.tx.as_ref().is_some_and(|t| t.id().is_none());
        // (After an autocommit statement's last request, committed or not,
        // its transaction is over; reads that name a duplicate key go on.)
        let over = self.tx.as_ref().is_some_and(|t| t.is_finished());
        let outside = self.tx.is_some()
            && (tracked || over)
            && ops.iter().all(Op::is_committed_read)
            && !own_rows(&ops, self.written.as_deref());
        match self.tx.as_deref_mut() {
            Some(tx) if !outside => {
                if let Some(undo) = self.undo.as_deref_mut() {
                    // What each write replaces, read under the lock it takes anyway.
                    let (at, reads): (Vec<usize>, Vec<Op>) =
                        ops.iter().enumerate().filter_map(|(i, op)| op.before_image_read().map(|r| (i, r))).unzip();
                    if !reads.is_empty() {
                        for (i, before) in at.into_iter().zip(tx.execute(reads).await?) {
                            let before = match before {
                                Outcome::Row(row) => Some(row.values()),
                                _ => None,
                            };
                            undo.push(ops[i].undo(before));
                        }
                    }
                }
                Ok(tx.execute(ops).await?)
            }
            _ => {
                let results = self.client.batch(ops).await?;
                results.into_iter().map(|r| r.map_err(SqlError::from)).collect()
            }
        }
    }
}

impl Ctx<'_> {
    /// Runs a statement's last request. In an autocommit statement that
    /// holds a transaction, the request commits too: one round trip to the
    /// coordinator instead of two (`Transaction::is_committed` tells the
    /// session there is nothing left to commit). Nothing may run in the
    /// transaction after it.
    pub async fn run_last_ops(&mut self, ops: Vec<Op>) -> SqlResult<Vec<Outcome>> {
        let autocommit = self.written.is_none() && self.undo.is_none();
        let reads_only = ops.iter().all(Op::is_committed_read);
        match self.tx.as_deref_mut() {
            Some(tx) if autocommit && !reads_only && !ops.is_empty() && !tx.is_finished() => {
                let outcomes = tx.execute_and_commit(ops).await?;
                if !tx.is_committed() {
                    return Err(SqlError::general(
                        "internal: the coordinator answered a commit request without committing",
                    ));
                }
                Ok(outcomes)
            }
            _ => self.run_ops(ops).await,
        }
    }
}

/// A fetched row as values, with room for the columns of joined tables.
fn row_with_room(row: &Row, width: usize) -> Vec<Value> {
    let mut v = Vec::with_capacity(width);
    row_values(row, &mut v);
    v
}

/// The rows key reads found (missing keys leave no row).
fn found_rows(outcomes: Vec<Outcome>, width: usize) -> Vec<Vec<Value>> {
    outcomes
        .into_iter()
        .filter_map(|o| match o {
            Outcome::Row(r) => Some(row_with_room(&r, width)),
            _ => None,
        })
        .collect()
}

fn row_values(row: &Row, out: &mut Vec<Value>) {
    for i in 0..row.len() {
        out.push(row.get(i));
    }
}

/// Evaluates row-free key expressions and converts them to the key
/// columns' types; None when a value cannot match any row.
fn key_values(table: &Table, exprs: &[SExpr], row: &[Value], env: &Env) -> SqlResult<Option<Vec<Value>>> {
    let def = table.def();
    let mut key = Vec::with_capacity(exprs.len());
    for (e, &c) in exprs.iter().zip(&def.primary_key) {
        match equal_key_part(e.eval(row, env)?, &def.columns[c as usize]) {
            Ok(Some(v)) => key.push(v),
            Ok(None) | Err(_) => return Ok(None),
        }
    }
    Ok(Some(key))
}

/// The value of a key column that equals `v`, in the column's type; None
/// when no value does (NULL, or `id = 4.5` on an integer column, which
/// converting to the column's type would round to 5).
fn holds_only_its_values(ty: ColumnType) -> bool {
    matches!(ty, ColumnType::Time | ColumnType::Year | ColumnType::Bit(_) | ColumnType::Enum | ColumnType::Set)
}

fn equal_key_part(v: Value, column: &ColumnDef) -> SqlResult<Option<Value>> {
    if v.is_null() {
        return Ok(None);
    }
    if let Some(steps) = Steps::of(column.ty) {
        match steps.floor_ceil(&v) {
            Some((floor, ceil)) if floor != ceil || floor < steps.min || floor > steps.max => return Ok(None),
            Some((k, _)) => return to_key_column(steps.value(k), column).map(Some),
            None => {}
        }
    }
    if column.fraction_digits < 6
        && matches!(column.ty, ColumnType::DateTime | ColumnType::Timestamp | ColumnType::Time)
    {
        // A value with more digits of a second than the column keeps
        // matches no stored value (10:00:00.6 is not 10:00:01).
        let exact = to_key_column(v.clone(), &ColumnDef { fraction_digits: 6, ..column.clone() })?;
        let stored = to_key_column(v, column)?;
        return Ok((exact == stored).then_some(stored));
    }
    to_key_column(v, column).map(Some)
}

/// The distinct keys of key-lookup expressions (row-free), converted to the
/// key columns' types; keys that cannot match any row are left out.
pub(crate) fn distinct_keys(table: &Table, keys: &[Vec<SExpr>], env: &Env) -> SqlResult<Vec<Vec<Value>>> {
    let mut out: Vec<Vec<Value>> = Vec::with_capacity(keys.len());
    // By encoded key: 'a' and 'A ' are one key of a case-insensitive column.
    let mut seen = std::collections::HashSet::with_capacity(keys.len());
    for k in keys {
        if let Some(values) = key_values(table, k, &[], env)? {
            if seen.insert(table.encode_key(&values)?) {
                out.push(values);
            }
        }
    }
    Ok(out)
}

pub async fn run_select(plan: &SelectPlan, ctx: &mut Ctx<'_>) -> SqlResult<Vec<Vec<Value>>> {
    if let (Some(unpushed), Some(t)) = (&plan.unpushed, plan.sources.first().and_then(|s| s.stored())) {
        // Aggregates of the data nodes cannot count the transaction's own
        // uncommitted rows: compute them here instead.
        if ctx.written_keys(t).is_some() {
            return Box::pin(run_select(unpushed, ctx)).await;
        }
    }
    let mut rows = fetch_first(plan, ctx).await?;
    for step in &plan.joins {
        rows = join(plan, step, rows, ctx).await?;
    }
    if let Some(f) = &plan.filter {
        let mut kept = Vec::with_capacity(rows.len());
        for r in rows {
            if truth(&f.eval(&r, &ctx.env)?) == Some(true) {
                kept.push(r);
            }
        }
        rows = kept;
    }
    let rows = match &plan.agg {
        AggMode::None => rows,
        AggMode::Grouped { keys, aggs } => group(rows, keys, aggs, plan.row_width, &ctx.env)?,
        AggMode::Pushed { .. } => rows,
    };
    finish_rows(plan, rows, &ctx.env)
}

async fn fetch_first(plan: &SelectPlan, ctx: &mut Ctx<'_>) -> SqlResult<Vec<Vec<Value>>> {
    let Some(src) = plan.sources.first() else {
        return Ok(vec![Vec::new()]);
    };
    let table = match &src.kind {
        SourceKind::Virtual(v) => return Ok(virtual_rows(src, &v.rows)),
        SourceKind::Stored(t) => t.clone(),
    };
    let env = &ctx.env;
    match &plan.access {
        Access::Keys(keys) => {
            let seen = distinct_keys(&table, keys, env)?;
            let mut ops = Vec::with_capacity(seen.len());
            for k in &seen {
                ops.push(key_read(&table, src, k, plan.lock)?);
            }
            Ok(found_rows(ctx.run_ops(ops).await?, plan.row_width))
        }
        access => {
            let scan = build_scan(plan, src, &table, access, env)?;
            let Some(scan) = scan else {
                // Nothing can match; aggregates without GROUP BY still answer one row.
                if let AggMode::Pushed { pushed, specs } = &plan.agg {
                    let values: Vec<Value> = pushed.iter().map(|a| a.initial()).collect();
                    return Ok(vec![finish_pushed(&values, specs)?]);
                }
                return Ok(Vec::new());
            };
            if let AggMode::Pushed { pushed, specs } = &plan.agg {
                let values = ctx.client.aggregate(&table, scan, pushed).await?;
                return Ok(vec![finish_pushed(&values, specs)?]);
            }
            let scan = match ordered_limit(plan, ctx, &table)? {
                Some(rows) => scan.ordered().limit(rows),
                None => scan,
            };
            let found = ctx.client.scan(&table, scan).await?;
            let mut rows: Vec<Vec<Value>> = found.iter().map(|r| row_with_room(r, plan.row_width)).collect();
            if plan.lock != LockMode::Committed {
                rows = relock(plan, src, &table, rows, ctx).await?;
            }
            if let Some(written) = ctx.written_keys(&table) {
                rows = overlay_own_writes(plan, &src.fetch, &table, rows, written, &plan.first_conditions, ctx).await?;
            }
            Ok(rows)
        }
    }
}

/// Most rows (OFFSET + LIMIT) read by an ordered scan with a limit.
const MAX_ORDERED_LIMIT: u64 = 10_000;

/// How many rows of an ordered scan answer a plan whose index gives
/// ORDER BY's order (OFFSET + LIMIT), or None to scan the whole range: the
/// plan's index does not give its order, or the transaction wrote rows of
/// the table, which the scan of committed rows does not see and which may
/// sort first.
fn ordered_limit(plan: &SelectPlan, ctx: &Ctx<'_>, table: &Table) -> SqlResult<Option<usize>> {
    if !plan.index_ordered || ctx.wrote(table) {
        return Ok(None);
    }
    let (Some(limit), offset) = (&plan.limit, &plan.offset) else { return Ok(None) };
    let limit = count_arg(limit, &ctx.env)?;
    let offset = match offset {
        Some(e) => count_arg(e, &ctx.env)?,
        None => 0,
    };
    // A merge fetches page after page of one partition at a time; for
    // many rows (`LIMIT 18446744073709551615`, MySQL's "all after OFFSET")
    // the parallel scan of the whole range is faster.
    let rows = offset.saturating_add(limit);
    Ok((rows <= MAX_ORDERED_LIMIT).then_some(rows as usize))
}

/// What a bound on a column of whole steps means, in steps.
enum StepBound {
    /// The same rows as `col >= v` (a lower bound) or `col <= v`.
    At(i128),
    /// Every value of the column passes (NULL still does not).
    All,
    /// No value of the column passes.
    Nothing,
}

/// A column type whose values are whole steps: integers, DECIMAL(p, s)
/// (steps of 10^-s) and DATE (days). A value compared with such a column
/// is placed between two steps as MySQL compares (numbers as numbers, a
/// DATE with a DATETIME as DATETIMEs), instead of being converted to the
/// column's type, which rounds: `id >= 1.5` is `id >= 2`, `price > 9.995`
/// on DECIMAL(10,2) is `price >= 10.00`, `day < '2024-01-01 10:00'` is
/// `day <= 2024-01-01`.
struct Steps {
    kind: StepKind,
    min: i128,
    max: i128,
}

#[derive(Clone, Copy)]
enum StepKind {
    Integer,
    Decimal(u8),
    Date,
}

impl Steps {
    fn of(ty: ColumnType) -> Option<Steps> {
        Some(match ty {
            ColumnType::Integer { width, unsigned: true } => {
                Steps { kind: StepKind::Integer, min: 0, max: width.unsigned_max() as i128 }
            }
            ColumnType::Integer { width, unsigned: false } => {
                let (lo, hi) = width.signed_range();
                Steps { kind: StepKind::Integer, min: lo as i128, max: hi as i128 }
            }
            ColumnType::Decimal { precision, scale } => {
                let max = 10i128.checked_pow(precision as u32)? - 1;
                Steps { kind: StepKind::Decimal(scale), min: -max, max }
            }
            ColumnType::Date => Steps { kind: StepKind::Date, min: i32::MIN as i128, max: i32::MAX as i128 },
            _ => return None,
        })
    }

    /// The steps just below and above `v` (equal when `v` is one); None
    /// when `v` is not read that way (the column's own conversion decides).
    fn floor_ceil(&self, v: &Value) -> Option<(i128, i128)> {
        match self.kind {
            // Text reads as the number it starts with ('4abc' is 4), a
            // date as its digits (20240101).
            StepKind::Integer => number_floor_ceil(&numeric(v), 0),
            StepKind::Decimal(scale) => number_floor_ceil(&numeric(v), scale),
            StepKind::Date => {
                const DAY: i64 = 86_400_000_000;
                let micros = match v {
                    Value::Date(d) => return Some((*d as i128, *d as i128)),
                    Value::DateTime(us) | Value::Timestamp(us) => *us,
                    Value::Str(s) => match latsdb_types::value::parse_date(s.trim()) {
                        Some(d) => return Some((d as i128, d as i128)),
                        None => latsdb_types::value::parse_datetime(s.trim())?,
                    },
                    _ => return None,
                };
                let floor = micros.div_euclid(DAY) as i128;
                Some((floor, if micros.rem_euclid(DAY) == 0 { floor } else { floor + 1 }))
            }
        }
    }

    fn value(&self, k: i128) -> Value {
        match self.kind {
            StepKind::Integer => i64::try_from(k).map(Value::Int).unwrap_or(Value::UInt(k as u64)),
            StepKind::Decimal(scale) => Value::Decimal(Decimal { unscaled: k, scale }),
            StepKind::Date => Value::Date(k as i32),
        }
    }

    /// A bound `col >= v` / `col > v` (lower) or `col <= v` / `col < v` as
    /// an inclusive bound in steps; a bound past the type's range selects
    /// all or nothing. None when `v` is not read as a step value.
    fn bound(&self, v: &Value, inclusive: bool, lower: bool) -> Option<StepBound> {
        let (floor, ceil) = self.floor_ceil(v)?;
        let exact = floor == ceil;
        Some(if lower {
            let first = if exact && !inclusive { ceil + 1 } else { ceil };
            if first > self.max {
                StepBound::Nothing
            } else if first <= self.min {
                StepBound::All
            } else {
                StepBound::At(first)
            }
        } else {
            let last = if exact && !inclusive { floor - 1 } else { floor };
            if last < self.min {
                StepBound::Nothing
            } else if last >= self.max {
                StepBound::All
            } else {
                StepBound::At(last)
            }
        })
    }
}

/// Floor and ceil of a number in steps of 10^-scale; None for NaN and
/// non-numbers. Values far past every column's range are clamped (the
/// answer is the same).
fn number_floor_ceil(v: &Value, scale: u8) -> Option<(i128, i128)> {
    const FAR: i128 = 10i128.pow(38);
    let unit = 10i128.checked_pow(scale as u32)?;
    Some(match v {
        Value::Int(i) => {
            let k = (*i as i128).checked_mul(unit).unwrap_or(if *i < 0 { -FAR } else { FAR });
            (k, k)
        }
        Value::UInt(u) => {
            let k = (*u as i128).checked_mul(unit).unwrap_or(FAR);
            (k, k)
        }
        Value::Decimal(d) if d.scale <= scale => {
            let up = 10i128.checked_pow((scale - d.scale) as u32)?;
            let k = d.unscaled.checked_mul(up).unwrap_or(if d.unscaled < 0 { -FAR } else { FAR });
            (k, k)
        }
        Value::Decimal(d) => {
            let down = 10i128.checked_pow((d.scale - scale) as u32)?;
            let floor = d.unscaled.div_euclid(down);
            (floor, if d.unscaled.rem_euclid(down) == 0 { floor } else { floor + 1 })
        }
        // A double against a DECIMAL compares as doubles in MySQL; only
        // integer columns place it here.
        Value::Float(f) if !f.is_nan() && scale == 0 => {
            let c = f.clamp(-1e30, 1e30);
            (c.floor() as i128, c.ceil() as i128)
        }
        _ => return None,
    })
}

fn key_read(table: &Arc<Table>, src: &Source, key: &[Value], lock: LockMode) -> SqlResult<Op> {
    let op = Op::read_locked(table, key, lock)?;
    Ok(match &src.projection {
        Some(p) => op.with_projection(p),
        None => op,
    })
}

/// Reads the scanned rows again by key under the statement's lock (inside
/// the transaction), so FOR UPDATE / LOCK IN SHARE MODE hold what they return.
async fn relock(
    plan: &SelectPlan,
    src: &Source,
    table: &Arc<Table>,
    rows: Vec<Vec<Value>>,
    ctx: &mut Ctx<'_>,
) -> SqlResult<Vec<Vec<Value>>> {
    let positions: Vec<usize> = table
        .def()
        .primary_key
        .iter()
        .map(|c| src.fetch.iter().position(|f| f == c))
        .collect::<Option<_>>()
        .ok_or_else(|| SqlError::general("internal: a locking scan did not fetch the primary key"))?;
    let mut ops = Vec::with_capacity(rows.len());
    for r in &rows {
        let key: Vec<Value> = positions.iter().map(|&p| r[p].clone()).collect();
        ops.push(key_read(table, src, &key, plan.lock)?);
    }
    Ok(found_rows(ctx.run_ops(ops).await?, plan.row_width))
}

/// A scan sees committed rows only: replace the rows the transaction wrote
/// by its own version of them (read by key through the transaction, which
/// sees its staged writes), keeping those that match the conditions.
async fn overlay_own_writes(
    plan: &SelectPlan,
    columns: &[u16],
    table: &Arc<Table>,
    mut rows: Vec<Vec<Value>>,
    written: Vec<(Vec<u8>, Vec<Value>)>,
    conditions: &[SExpr],
    ctx: &mut Ctx<'_>,
) -> SqlResult<Vec<Vec<Value>>> {
    let def = table.def();
    let positions: Vec<usize> = def
        .primary_key
        .iter()
        .map(|c| columns.iter().position(|f| f == c))
        .collect::<Option<_>>()
        .ok_or_else(|| SqlError::general("internal: a scan did not fetch the primary key"))?;
    let mine: std::collections::HashSet<&[u8]> = written.iter().map(|(k, _)| k.as_slice()).collect();
    rows.retain(|r| {
        let values: Vec<Value> = positions.iter().map(|&p| r[p].clone()).collect();
        match table.meta.encode_key(&values) {
            Ok(k) => !mine.contains(k.as_slice()),
            Err(_) => true,
        }
    });
    let ops =
        written.iter().map(|(_, k)| Op::read_locked(table, k, plan.lock)).collect::<latsdb_types::Result<Vec<_>>>()?;
    for outcome in ctx.run_ops(ops).await? {
        let Outcome::Row(r) = outcome else { continue };
        let full = r.values();
        let mut keep = true;
        for c in conditions {
            if truth(&c.eval(&full, &ctx.env)?) != Some(true) {
                keep = false;
                break;
            }
        }
        if keep {
            rows.push(columns.iter().map(|&c| full.get(c as usize).cloned().unwrap_or(Value::Null)).collect());
        }
    }
    Ok(rows)
}

/// Every row of a joined table (its fetched columns). The scan reads
/// committed rows, so inside a transaction that wrote the table its own
/// versions of the rows it wrote replace them (the scan then also fetches
/// the primary key, to tell which rows those are).
async fn joined_table_rows(
    plan: &SelectPlan,
    src: &Source,
    table: &Arc<Table>,
    ctx: &mut Ctx<'_>,
) -> SqlResult<Vec<Vec<Value>>> {
    let def = table.def();
    let width = src.fetch.len();
    let name = |c: &u16| def.columns[*c as usize].name.as_str();
    let Some(written) = ctx.written_keys(table) else {
        let names: Vec<&str> = src.fetch.iter().map(name).collect();
        let found = ctx.client.scan(table, Scan::all().columns(&names)).await?;
        return Ok(found.iter().map(|r| row_with_room(r, width)).collect());
    };
    let mut columns = src.fetch.clone();
    columns.extend(def.primary_key.iter().filter(|c| !src.fetch.contains(c)));
    let names: Vec<&str> = columns.iter().map(name).collect();
    let found = ctx.client.scan(table, Scan::all().columns(&names)).await?;
    let rows = found.iter().map(|r| row_with_room(r, columns.len())).collect();
    let mut rows = overlay_own_writes(plan, &columns, table, rows, written, &[], ctx).await?;
    for r in &mut rows {
        r.truncate(width);
    }
    Ok(rows)
}

fn virtual_rows(src: &Source, rows: &[Vec<Value>]) -> Vec<Vec<Value>> {
    rows.iter()
        .map(|r| src.fetch.iter().map(|&c| r.get(c as usize).cloned().unwrap_or(Value::Null)).collect())
        .collect()
}

/// Turns the access path and pushed conditions into a scan; None when a
/// bound is NULL (nothing can match).
pub(crate) fn build_scan(
    plan: &SelectPlan,
    src: &Source,
    table: &Table,
    access: &Access,
    env: &Env,
) -> SqlResult<Option<Scan>> {
    let def = table.def();
    let names: Vec<&str> = src.fetch.iter().map(|&c| def.columns[c as usize].name.as_str()).collect();
    let mut scan = Scan::all().columns(&names);
    if let Access::Range { index, columns, eq, lower, upper } = access {
        let mut prefix = Vec::with_capacity(eq.len() + 1);
        for (e, &c) in eq.iter().zip(columns) {
            let column = &def.columns[c as usize];
            let part = match equal_key_part(e.eval(&[], env)?, column) {
                // A TIME, YEAR, BIT, ENUM or SET column holds no value it
                // cannot take: an equality with one matches no row.
                Err(_) if holds_only_its_values(column.ty) => None,
                other => other?,
            };
            match part {
                Some(v) => prefix.push(v),
                None => return Ok(None),
            }
        }
        let next = columns.get(eq.len()).copied();
        // All of the prefix's rows (no bound on the next column).
        let whole_prefix = || if prefix.is_empty() { Bound::Unbounded } else { Bound::Included(prefix.clone()) };
        let bound = |b: &Option<(SExpr, bool)>, lower: bool| -> SqlResult<Option<Bound<Vec<Value>>>> {
            let (Some((e, inclusive)), Some(c)) = (b, next) else { return Ok(Some(whole_prefix())) };
            let v = e.eval(&[], env)?;
            if v.is_null() {
                return Ok(None);
            }
            let column = &def.columns[c as usize];
            let mut p = prefix.clone();
            let stepped = Steps::of(column.ty).and_then(|s| s.bound(&v, *inclusive, lower).map(|b| (s, b)));
            Ok(Some(match stepped {
                Some((_, StepBound::Nothing)) => return Ok(None),
                Some((steps, StepBound::At(k))) => {
                    p.push(to_key_column(steps.value(k), column)?);
                    Bound::Included(p)
                }
                // Not reaching the NULLs, which sort first.
                Some((_, StepBound::All)) if lower => {
                    p.push(Value::Null);
                    Bound::Excluded(p)
                }
                Some((_, StepBound::All)) => whole_prefix(),
                None => {
                    p.push(to_key_column(v, column)?);
                    if *inclusive {
                        Bound::Included(p)
                    } else {
                        Bound::Excluded(p)
                    }
                }
            }))
        };
        let (Some(mut lo), Some(hi)) = (bound(lower, true)?, bound(upper, false)?) else { return Ok(None) };
        // NULL sorts first in an index, and `col < v` is not true for NULL:
        // an upper bound alone must not reach down into the NULLs.
        if let (None, Some(_), Some(c)) = (lower, upper, next) {
            if def.columns[c as usize].nullable {
                let mut p = prefix;
                p.push(Value::Null);
                lo = Bound::Excluded(p);
            }
        }
        scan = scan.index(index).range(lo, hi);
    }
    if !plan.pushed.is_empty() {
        let mut parts = Vec::with_capacity(plan.pushed.len());
        for p in &plan.pushed {
            parts.push(pushed_expr(p, table, env)?);
        }
        let filter = if parts.len() == 1 { parts.pop().unwrap_or(Expr::And(Vec::new())) } else { Expr::And(parts) };
        scan = scan.filter(filter);
    }
    Ok(Some(scan))
}

/// A value compared with a column, converted so the data node compares it
/// as the SQL node would (strings against numbers as numbers, and so on).
fn for_column(v: Value, ty: ColumnType) -> Value {
    if v.is_null() {
        return v;
    }
    match ty {
        ColumnType::Integer { .. }
        | ColumnType::Float
        | ColumnType::Double
        | ColumnType::Decimal { .. }
        | ColumnType::Boolean => numeric(&v),
        ColumnType::Char(_) | ColumnType::VarChar(_) | ColumnType::Text | ColumnType::Enum | ColumnType::Set => match v
        {
            Value::Str(_) | Value::Bytes(_) => v,
            other => Value::Str(to_text(&other)),
        },
        ColumnType::Year => numeric(&v),
        // b'1010' and x'0A' are the number their bytes spell (big-endian).
        ColumnType::Bit(_) => match &v {
            Value::Bytes(b) => latsdb_types::mysql_types::big_endian(b).map_or(Value::Null, Value::UInt),
            _ => numeric(&v),
        },
        ColumnType::Time => match &v {
            Value::Time(_) => v,
            other => crate::eval::cast(other.clone(), crate::eval::CastTo::Time(6)).unwrap_or(Value::Null),
        },
        ColumnType::Date | ColumnType::DateTime | ColumnType::Timestamp => {
            let parsed = match &v {
                Value::Str(s) => latsdb_types::value::parse_date(s)
                    .map(Value::Date)
                    .or_else(|| latsdb_types::value::parse_datetime(s).map(Value::DateTime)),
                other => Some(other.clone()),
            };
            // The data node compares a TIMESTAMP column only with timestamps.
            match (parsed, ty) {
                (Some(Value::DateTime(us)), ColumnType::Timestamp) => Value::Timestamp(us),
                (Some(Value::Date(d)), ColumnType::Timestamp) => Value::Timestamp(d as i64 * 86_400_000_000),
                (Some(Value::Timestamp(us)), ColumnType::DateTime) => Value::DateTime(us),
                (Some(p), _) => p,
                (None, _) => v,
            }
        }
        _ => v,
    }
}

fn pushed_expr(e: &SExpr, table: &Table, env: &Env) -> SqlResult<Expr> {
    let def = table.def();
    // A column read as its weight (case-insensitive comparison) is pushed
    // as `Fold(column)`; the values were folded by the binder.
    let col_of = |e: &SExpr| crate::plan::pushed_column(e).map(|(c, _)| c);
    let column = |e: &SExpr| match crate::plan::pushed_column(e) {
        Some((c, true)) => Expr::Fold(Box::new(Expr::Column(c))),
        Some((c, false)) => Expr::Column(c),
        None => Expr::Const(Value::Null),
    };
    let value =
        |e: &SExpr, c: u16| -> SqlResult<Value> { Ok(for_column(e.eval(&[], env)?, def.columns[c as usize].ty)) };
    Ok(match e {
        SExpr::Cmp(op, a, b) => {
            let (v, op, side) = match (col_of(a), col_of(b)) {
                (Some(c), _) => (value(b, c)?, *op, a),
                (None, Some(c)) => (value(a, c)?, op.flip(), b),
                _ => return Err(SqlError::general("internal: pushed comparison without a column")),
            };
            let op = op.pushed().ok_or_else(|| SqlError::general("internal: <=> is not pushed"))?;
            Expr::cmp(op, column(side), Expr::Const(v))
        }
        SExpr::Between(x, lo, hi, negated) => {
            let c = col_of(x).ok_or_else(|| SqlError::general("internal: pushed BETWEEN without a column"))?;
            let inner = Expr::And(vec![column(x).ge(value(lo, c)?), column(x).le(value(hi, c)?)]);
            if *negated {
                Expr::Not(Box::new(inner))
            } else {
                inner
            }
        }
        SExpr::In(x, list, negated) => {
            let c = col_of(x).ok_or_else(|| SqlError::general("internal: pushed IN without a column"))?;
            let values = list.iter().map(|v| value(v, c)).collect::<SqlResult<Vec<_>>>()?;
            let inner = Expr::In(Box::new(column(x)), values);
            if *negated {
                Expr::Not(Box::new(inner))
            } else {
                inner
            }
        }
        SExpr::IsNull(x, negated) => {
            col_of(x).ok_or_else(|| SqlError::general("internal: pushed IS NULL without a column"))?;
            let inner = column(x).is_null();
            if *negated {
                Expr::Not(Box::new(inner))
            } else {
                inner
            }
        }
        SExpr::Like(x, p, negated) => {
            col_of(x).ok_or_else(|| SqlError::general("internal: pushed LIKE without a column"))?;
            let pattern = p.eval(&[], env)?;
            if pattern.is_null() {
                // NULL pattern: unknown for every row.
                return Ok(Expr::IsNull(Box::new(Expr::Const(Value::Null))).and(Expr::Const(Value::Null)));
            }
            let inner = column(x).like(&to_text(&pattern));
            if *negated {
                Expr::Not(Box::new(inner))
            } else {
                inner
            }
        }
        SExpr::And(a, b) => flat(true, pushed_expr(a, table, env)?, pushed_expr(b, table, env)?),
        SExpr::Or(a, b) => flat(false, pushed_expr(a, table, env)?, pushed_expr(b, table, env)?),
        SExpr::Not(a) => Expr::Not(Box::new(pushed_expr(a, table, env)?)),
        _ => return Err(SqlError::general("internal: condition is not pushable")),
    })
}

/// `a AND b` (`and`) or `a OR b` as one list, splicing in the lists of
/// operands of the same kind: SQL's chain of 3,000 ORs (bound as a tree
/// 3,000 deep) reaches the data node as one level, which takes at most
/// `MAX_EXPR_DEPTH` levels.
fn flat(and: bool, a: Expr, b: Expr) -> Expr {
    // The left operand's list is kept and grown: a left-deep chain costs
    // one push a level, not a copy of everything before it.
    let mut parts = match (and, a) {
        (true, Expr::And(list)) | (false, Expr::Or(list)) => list,
        (_, a) => vec![a],
    };
    match (and, b) {
        (true, Expr::And(list)) | (false, Expr::Or(list)) => parts.extend(list),
        (_, b) => parts.push(b),
    }
    if and {
        Expr::And(parts)
    } else {
        Expr::Or(parts)
    }
}

async fn join(
    plan: &SelectPlan,
    step: &crate::plan::JoinStep,
    rows: Vec<Vec<Value>>,
    ctx: &mut Ctx<'_>,
) -> SqlResult<Vec<Vec<Value>>> {
    let src = &plan.sources[step.table];
    let width = src.fetch.len();
    let mut out = Vec::with_capacity(rows.len());
    let matches_on = |joined: &[Value], env: &Env| -> SqlResult<bool> {
        Ok(match &step.on {
            Some(on) => truth(&on.eval(joined, env)?) == Some(true),
            None => true,
        })
    };
    match (&src.kind, &step.lookup) {
        (SourceKind::Stored(table), Some(key_exprs)) => {
            let mut ops = Vec::new();
            let mut which = Vec::with_capacity(rows.len());
            for r in &rows {
                match key_values(table, key_exprs, r, &ctx.env)? {
                    Some(k) => {
                        which.push(Some(ops.len()));
                        ops.push(key_read(table, src, &k, plan.lock)?);
                    }
                    None => which.push(None),
                }
            }
            let found = ctx.run_ops(ops).await?;
            for (r, w) in rows.into_iter().zip(which) {
                let right = w.and_then(|i| found.get(i)).and_then(|o| match o {
                    Outcome::Row(row) => Some(row),
                    _ => None,
                });
                let mut joined = r.clone();
                let matched = match right {
                    Some(row) => {
                        row_values(row, &mut joined);
                        matches_on(&joined, &ctx.env)?
                    }
                    None => false,
                };
                if matched {
                    out.push(joined);
                } else if step.left {
                    let mut j = r;
                    j.resize(j.len() + width, Value::Null);
                    out.push(j);
                }
            }
        }
        (kind, _) => {
            let right: Vec<Vec<Value>> = match kind {
                SourceKind::Virtual(v) => virtual_rows(src, &v.rows),
                SourceKind::Stored(table) => joined_table_rows(plan, src, table, ctx).await?,
            };
            let mut right_matched = vec![false; if step.right { right.len() } else { 0 }];
            for r in rows {
                let mut any = false;
                for (i, x) in right.iter().enumerate() {
                    let mut joined = r.clone();
                    joined.extend(x.iter().cloned());
                    if matches_on(&joined, &ctx.env)? {
                        any = true;
                        if let Some(m) = right_matched.get_mut(i) {
                            *m = true;
                        }
                        out.push(joined);
                    }
                }
                if !any && step.left {
                    let mut j = r;
                    j.resize(j.len() + width, Value::Null);
                    out.push(j);
                }
            }
            if step.right {
                let before: usize = plan.sources[..step.table].iter().map(|s| s.fetch.len()).sum();
                for (x, _) in right.into_iter().zip(right_matched).filter(|(_, matched)| !matched) {
                    let mut j = vec![Value::Null; before];
                    j.extend(x);
                    out.push(j);
                }
            }
        }
    }
    Ok(out)
}

/// A key under which equal values group together (5, 5.0 and '5' alike).
pub(crate) fn group_key(values: &[Value], out: &mut String) {
    out.clear();
    for v in values {
        match v {
            Value::Null => out.push_str("\u{0}N"),
            Value::Int(_) | Value::UInt(_) | Value::Decimal(_) | Value::Float(_) | Value::Bool(_) => {
                out.push_str("\u{0}#");
                let n = numeric(v);
                match n {
                    Value::Decimal(d) if d.scale > 0 && d.unscaled % 10i128.pow(d.scale as u32) == 0 => {
                        out.push_str(&(d.unscaled / 10i128.pow(d.scale as u32)).to_string())
                    }
                    // 1.50 and 1.500 are one value (their scales differ when
                    // the branches of a COALESCE, IF or CASE differ).
                    Value::Decimal(mut d) if d.scale > 0 && d.unscaled % 10 == 0 => {
                        while d.scale > 0 && d.unscaled % 10 == 0 {
                            d.unscaled /= 10;
                            d.scale -= 1;
                        }
                        out.push_str(&to_text(&Value::Decimal(d)))
                    }
                    Value::Float(f) if f == f.trunc() && f.abs() < 1e18 => out.push_str(&(f as i64).to_string()),
                    other => out.push_str(&to_text(&other)),
                }
            }
            // Text PAD SPACEs in both collations: 'a' and 'a ' group together.
            Value::Str(s) => {
                out.push_str("\u{0}s");
                out.push_str(s.trim_end_matches(' '));
            }
            other => {
                out.push_str("\u{0}s");
                out.push_str(&to_text(other));
            }
        }
    }
}

/// `group_key` of a row whose columns compare under `collations`: text of
/// a case-insensitive column by its weight ('a' and 'A' are one).
/// Keeps the first of rows equal under `collations` (an empty list
/// compares bytes): DISTINCT, UNION, the values of a decorrelated EXISTS.
pub(crate) fn retain_distinct(rows: &mut Vec<Vec<Value>>, collations: &[Collation]) {
    let (mut seen, mut key) = (std::collections::HashSet::new(), String::new());
    rows.retain(|r| {
        collated_group_key(r, collations, &mut key);
        seen.insert(key.clone())
    });
}

pub(crate) fn collated_group_key(row: &[Value], collations: &[Collation], out: &mut String) {
    if collations.iter().all(|c| !c.is_case_insensitive()) {
        group_key(row, out);
        return;
    }
    let weights: Vec<Value> = row.iter().zip(collations).map(|(v, &c)| weight(v, c).into_owned()).collect();
    group_key(&weights, out);
}

/// A value as `collation` compares it: text folded to its weight, without
/// trailing spaces (PAD SPACE), for grouping keys.
pub(crate) fn weight(v: &Value, collation: Collation) -> std::borrow::Cow<'_, Value> {
    match v {
        Value::Str(s) if collation.is_case_insensitive() => match collation.weight(s) {
            std::borrow::Cow::Borrowed(t) if t.len() == s.len() => std::borrow::Cow::Borrowed(v),
            weight => std::borrow::Cow::Owned(Value::Str(weight.into_owned())),
        },
        _ => std::borrow::Cow::Borrowed(v),
    }
}

fn collated_compare(a: &Value, b: &Value, collation: Collation) -> Option<Ordering> {
    compare(&weight(a, collation), &weight(b, collation))
}

/// A group's first row, its accumulators, and the values seen by each
/// DISTINCT aggregate.
type Group = (Vec<Value>, Vec<Acc>, Vec<std::collections::HashSet<String>>);

#[derive(Clone)]
enum Acc {
    Count(u64),
    Value(Value),
    Avg(Value, u64),
    /// GROUP_CONCAT: each value's ORDER BY keys and text.
    Concat(Vec<(Vec<Value>, String)>),
    Spread(Spread),
    Bits(u64),
}

/// Count, mean and sum of squared deviations from the mean, updated one
/// value at a time (Welford's method, which does not lose the variance of
/// large values to cancellation), for VARIANCE and STDDEV in all forms.
#[derive(Clone, Copy, Default)]
pub(crate) struct Spread {
    n: u64,
    mean: f64,
    m2: f64,
}

impl Spread {
    pub(crate) fn add(&mut self, v: &Value) {
        let x = numeric(v).as_f64().unwrap_or(0.0);
        self.n += 1;
        let delta = x - self.mean;
        self.mean += delta / self.n as f64;
        self.m2 += delta * (x - self.mean);
    }

    /// The variance or standard deviation `kind` asks for.
    pub(crate) fn value(&self, kind: AggKind) -> Value {
        let sample = matches!(kind, AggKind::VarSamp | AggKind::StdSamp);
        if self.n == 0 || (sample && self.n < 2) {
            return Value::Null;
        }
        let variance = self.m2 / (self.n - sample as u64) as f64;
        Value::Float(if matches!(kind, AggKind::StdPop | AggKind::StdSamp) { variance.sqrt() } else { variance })
    }
}

/// BIT_AND, BIT_OR or BIT_XOR's state before any value (all ones for AND).
pub(crate) fn bits_start(kind: AggKind) -> u64 {
    if kind == AggKind::BitAnd {
        u64::MAX
    } else {
        0
    }
}

pub(crate) fn fold_bits(kind: AggKind, acc: u64, v: &Value) -> u64 {
    let x = bits_of(v);
    match kind {
        AggKind::BitAnd => acc & x,
        AggKind::BitOr => acc | x,
        _ => acc ^ x,
    }
}

fn group(
    rows: Vec<Vec<Value>>,
    keys: &[SExpr],
    aggs: &[AggSpec],
    width: usize,
    env: &Env,
) -> SqlResult<Vec<Vec<Value>>> {
    let fresh = || -> Vec<Acc> {
        aggs.iter()
            .map(|a| match a.kind {
                AggKind::CountRows | AggKind::Count => Acc::Count(0),
                AggKind::Avg => Acc::Avg(Value::Null, 0),
                AggKind::GroupConcat => Acc::Concat(Vec::new()),
                AggKind::VarPop | AggKind::VarSamp | AggKind::StdPop | AggKind::StdSamp => {
                    Acc::Spread(Spread::default())
                }
                AggKind::BitAnd | AggKind::BitOr | AggKind::BitXor => Acc::Bits(bits_start(a.kind)),
                AggKind::Sum | AggKind::Min | AggKind::Max => Acc::Value(Value::Null),
            })
            .collect()
    };
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut groups: Vec<Group> = Vec::new();
    let mut kbuf = String::new();
    let mut dbuf = String::new();
    for row in rows {
        let key_vals = keys.iter().map(|k| k.eval(&row, env)).collect::<SqlResult<Vec<_>>>()?;
        group_key(&key_vals, &mut kbuf);
        let gi = match index.get(&kbuf) {
            Some(&i) => i,
            None => {
                index.insert(kbuf.clone(), groups.len());
                groups.push((row.clone(), fresh(), vec![Default::default(); aggs.len()]));
                groups.len() - 1
            }
        };
        let (_, accs, seen) = &mut groups[gi];
        for (i, a) in aggs.iter().enumerate() {
            let v = match &a.arg {
                Some(e) => e.eval(&row, env)?,
                None => Value::Int(1),
            };
            if v.is_null() && a.kind != AggKind::CountRows {
                continue;
            }
            if a.distinct {
                group_key(std::slice::from_ref(&weight(&v, a.collation)), &mut dbuf);
                if !seen[i].insert(dbuf.clone()) {
                    continue;
                }
            }
            match (&mut accs[i], a.kind) {
                (Acc::Count(n), _) => *n += 1,
                (Acc::Value(acc), AggKind::Sum) => Aggregate::Sum(0).accumulate(acc, numeric(&v)),
                (Acc::Value(acc), AggKind::Min) => {
                    if acc.is_null() || collated_compare(&v, acc, a.collation) == Some(Ordering::Less) {
                        *acc = v
                    }
                }
                (Acc::Value(acc), AggKind::Max) => {
                    if acc.is_null() || collated_compare(&v, acc, a.collation) == Some(Ordering::Greater) {
                        *acc = v
                    }
                }
                (Acc::Avg(sum, n), _) => {
                    Aggregate::Sum(0).accumulate(sum, numeric(&v));
                    *n += 1;
                }
                (Acc::Concat(items), _) => {
                    let keys = a.order.iter().map(|(k, _)| k.eval(&row, env)).collect::<SqlResult<Vec<_>>>()?;
                    items.push((keys, to_text(&v)));
                }
                (Acc::Spread(spread), _) => spread.add(&v),
                (Acc::Bits(bits), kind) => *bits = fold_bits(kind, *bits, &v),
                (Acc::Value(_), _) => return Err(SqlError::general("internal: aggregate state mismatch")),
            }
        }
    }
    if groups.is_empty() && keys.is_empty() {
        // An aggregate over no rows still answers one row (COUNT(*) = 0).
        groups.push((vec![Value::Null; width], fresh(), Vec::new()));
    }
    let mut out = Vec::with_capacity(groups.len());
    for (first, accs, _) in groups {
        let mut row = first;
        row.resize(width, Value::Null);
        for (acc, spec) in accs.into_iter().zip(aggs) {
            row.push(match acc {
                Acc::Count(n) => Value::Int(n as i64),
                Acc::Value(v) => v,
                Acc::Avg(sum, n) => avg(&sum, n)?,
                Acc::Concat(items) => concat(items, spec),
                Acc::Spread(spread) => spread.value(spec.kind),
                Acc::Bits(bits) => Value::UInt(bits),
            });
        }
        out.push(row);
    }
    Ok(out)
}

/// ORDER BY's comparison of two rows by the values at `keys` (position,
/// descending): NULLs first, as in MySQL.
pub(crate) fn order_rows(a: &[Value], b: &[Value], keys: impl IntoIterator<Item = (usize, bool)>) -> Ordering {
    for (i, desc) in keys {
        let o = match (a[i].is_null(), b[i].is_null()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Less,
            (false, true) => Ordering::Greater,
            _ => compare(&a[i], &b[i]).unwrap_or(Ordering::Equal),
        };
        let o = if desc { o.reverse() } else { o };
        if o != Ordering::Equal {
            return o;
        }
    }
    Ordering::Equal
}

/// GROUP_CONCAT's result: the texts in its ORDER BY (else in row order),
/// joined; NULL without any.
fn concat(mut items: Vec<(Vec<Value>, String)>, spec: &AggSpec) -> Value {
    if items.is_empty() {
        return Value::Null;
    }
    if !spec.order.is_empty() {
        items.sort_by(|a, b| order_rows(&a.0, &b.0, spec.order.iter().enumerate().map(|(i, (_, desc))| (i, *desc))));
    }
    Value::Str(items.into_iter().map(|(_, text)| text).collect::<Vec<_>>().join(&spec.separator))
}

pub(crate) fn avg(sum: &Value, n: u64) -> SqlResult<Value> {
    if n == 0 || sum.is_null() {
        return Ok(Value::Null);
    }
    SExpr::Arith(Arith::Div, Box::new(SExpr::Const(sum.clone())), Box::new(SExpr::Const(Value::Int(n as i64))))
        .eval(&[], &Env { params: &[], session: &crate::session::NoSession, strict_numbers: false })
}

fn finish_pushed(values: &[Value], specs: &[(AggKind, usize, Option<usize>)]) -> SqlResult<Vec<Value>> {
    let mut row = Vec::with_capacity(specs.len());
    for &(kind, a, b) in specs {
        let v = values.get(a).cloned().unwrap_or(Value::Null);
        row.push(match (kind, b) {
            (AggKind::Avg, Some(b)) => {
                let n = values.get(b).and_then(|n| n.as_u64()).unwrap_or(0);
                avg(&v, n)?
            }
            (AggKind::CountRows | AggKind::Count, _) => Value::Int(v.as_i64().unwrap_or(0)),
            _ => v,
        });
    }
    Ok(row)
}

/// HAVING, the select list, ORDER BY, DISTINCT and LIMIT.
fn finish_rows(plan: &SelectPlan, rows: Vec<Vec<Value>>, env: &Env) -> SqlResult<Vec<Vec<Value>>> {
    let limit = match &plan.limit {
        Some(e) => Some(count_arg(e, env)?),
        None => None,
    };
    let offset = match &plan.offset {
        Some(e) => count_arg(e, env)?,
        None => 0,
    };
    // Window functions see the rows HAVING keeps: then HAVING runs first.
    let (rows, having) = if plan.windows.is_empty() {
        (rows, plan.having.as_ref())
    } else {
        let mut kept = Vec::with_capacity(rows.len());
        for r in rows {
            if plan.having.as_ref().map_or(Ok(true), |h| h.eval(&r, env).map(|v| truth(&v) == Some(true)))? {
                kept.push(r);
            }
        }
        (crate::window::compute(&plan.windows, kept, env)?, None)
    };
    if let (Some(l), false, false) = (limit, plan.order.is_empty(), plan.distinct) {
        // ORDER BY ... LIMIT: sort by the keys, then compute the select list
        // of the rows kept only, as MySQL does (an expression that fails on
        // a row the LIMIT drops raises no error there, and costs nothing).
        let mut keyed: Vec<(Vec<Value>, usize)> = Vec::with_capacity(rows.len());
        for (i, r) in rows.iter().enumerate() {
            if let Some(h) = having {
                if truth(&h.eval(r, env)?) != Some(true) {
                    continue;
                }
            }
            keyed.push((plan.order.iter().map(|(e, _)| e.eval(r, env)).collect::<SqlResult<Vec<_>>>()?, i));
        }
        keyed.sort_by(|a, b| order_rows(&a.0, &b.0, plan.order.iter().enumerate().map(|(i, (_, desc))| (i, *desc))));
        let start = (offset as usize).min(keyed.len());
        let end = start.saturating_add(l as usize).min(keyed.len());
        return keyed[start..end]
            .iter()
            .map(|(_, i)| plan.outputs.iter().map(|o| o.expr.eval(&rows[*i], env)).collect::<SqlResult<Vec<_>>>())
            .collect();
    }
    let mut out: Vec<(Vec<Value>, Vec<Value>)> = Vec::with_capacity(rows.len());
    for r in &rows {
        if let Some(h) = having {
            if truth(&h.eval(r, env)?) != Some(true) {
                continue;
            }
        }
        let values = plan.outputs.iter().map(|o| o.expr.eval(r, env)).collect::<SqlResult<Vec<_>>>()?;
        let keys = plan.order.iter().map(|(e, _)| e.eval(r, env)).collect::<SqlResult<Vec<_>>>()?;
        out.push((values, keys));
        // Without ordering or DISTINCT, stop as soon as the limit is reached.
        if plan.order.is_empty() && !plan.distinct {
            if let Some(l) = limit {
                if out.len() as u64 >= offset.saturating_add(l) {
                    break;
                }
            }
        }
    }
    if !plan.order.is_empty() {
        out.sort_by(|a, b| order_rows(&a.1, &b.1, plan.order.iter().enumerate().map(|(i, (_, desc))| (i, *desc))));
    }
    let mut rows: Vec<Vec<Value>> = out.into_iter().map(|(v, _)| v).collect();
    if plan.distinct {
        let collations: Vec<Collation> =
            plan.output_collations.iter().map(|c| c.map_or(Collation::Bin, |(c, _)| c)).collect();
        retain_distinct(&mut rows, &collations);
    }
    let start = (offset as usize).min(rows.len());
    let end = match limit {
        Some(l) => start.saturating_add(l as usize).min(rows.len()),
        None => rows.len(),
    };
    if start > 0 || end < rows.len() {
        rows = rows.drain(start..end).collect();
    }
    Ok(rows)
}

fn count_arg(e: &SExpr, env: &Env) -> SqlResult<u64> {
    let v = e.eval(&[], env)?;
    numeric(&v)
        .as_u64()
        .ok_or_else(|| SqlError::wrong_args(format!("LIMIT/OFFSET must be a non-negative integer, got {v}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use latsdb_types::schema::IntWidth;

    /// Bounds on INT, DECIMAL and DATE columns as MySQL compares: values
    /// between two steps round inward, bounds past the type select all or
    /// nothing.
    #[test]
    fn bounds_on_stepped_columns_select_the_rows_mysql_would() {
        let int = Steps::of(ColumnType::Integer { width: IntWidth::Int, unsigned: false }).unwrap();
        let tiny_unsigned = Steps::of(ColumnType::Integer { width: IntWidth::Tiny, unsigned: true }).unwrap();
        let dec = |unscaled, scale| Value::Decimal(Decimal { unscaled, scale });
        let at = |b: Option<StepBound>| match b {
            Some(StepBound::At(k)) => Some(k),
            _ => None,
        };
        // (value, inclusive, lower) -> inclusive integer bound
        for (v, inclusive, lower, want) in [
            (Value::Int(5), true, true, 5),
            (Value::Int(5), false, true, 6),
            (Value::Int(5), false, false, 4),
            (dec(15, 1), true, true, 2),   // col >= 1.5
            (dec(15, 1), false, true, 2),  // col > 1.5
            (dec(45, 1), true, false, 4),  // col <= 4.5
            (dec(45, 1), false, false, 4), // col < 4.5
            (dec(-25, 1), true, true, -2), // col >= -2.5
            (dec(90, 1), false, true, 10), // col > 9.0
            (Value::Float(2.0), true, false, 2),
            (Value::Float(-0.5), false, false, -1),
            (Value::Str("5".into()), false, true, 6),
            (Value::Str(" 4.5".into()), true, false, 4),
            (Value::Str("2.5e1x".into()), false, true, 26),
            (Value::Date(0), true, true, 19_700_101),
        ] {
            assert_eq!(at(int.bound(&v, inclusive, lower)), Some(want), "{v:?} {inclusive} {lower}");
        }
        assert!(matches!(int.bound(&Value::Int(2_147_483_700), true, true), Some(StepBound::Nothing)));
        assert!(matches!(int.bound(&Value::Int(2_147_483_700), true, false), Some(StepBound::All)));
        assert!(matches!(int.bound(&Value::Float(-1e30), true, true), Some(StepBound::All)));
        assert!(matches!(int.bound(&Value::Str("1e400".into()), false, false), Some(StepBound::All)));
        assert!(int.bound(&Value::Float(f64::NAN), true, true).is_none());
        assert!(matches!(tiny_unsigned.bound(&Value::Int(-1), true, false), Some(StepBound::Nothing)));
        assert!(matches!(tiny_unsigned.bound(&Value::Int(0), true, true), Some(StepBound::All)));
        assert!(matches!(tiny_unsigned.bound(&Value::Int(255), false, true), Some(StepBound::Nothing)));
        assert!(Steps::of(ColumnType::Double).is_none());

        // DECIMAL(6,3): steps of 0.001.
        let price = Steps::of(ColumnType::Decimal { precision: 6, scale: 3 }).unwrap();
        assert_eq!(at(price.bound(&dec(12345, 4), false, true)), Some(1235)); // > 1.2345
        assert_eq!(at(price.bound(&dec(12345, 4), true, false)), Some(1234)); // <= 1.2345
        assert_eq!(at(price.bound(&Value::Int(2), false, false)), Some(1999)); // < 2
        assert!(matches!(price.bound(&Value::Int(1000), true, true), Some(StepBound::Nothing)));
        assert!(price.bound(&Value::Float(1.5), true, true).is_none());

        // DATE: days; a DATETIME between two days rounds inward.
        let date = Steps::of(ColumnType::Date).unwrap();
        let jan1 = latsdb_types::value::parse_date("2024-01-01").unwrap() as i128;
        assert_eq!(at(date.bound(&Value::Str("2024-01-01 10:00:00".into()), true, true)), Some(jan1 + 1));
        assert_eq!(at(date.bound(&Value::Str("2024-01-01 10:00:00".into()), false, false)), Some(jan1));
        assert_eq!(at(date.bound(&Value::Str("2024-01-01".into()), false, false)), Some(jan1 - 1));
        assert!(date.bound(&Value::Int(20240101), true, true).is_none());

        // Equality: no row for a value between two steps.
        let column = |ty| ColumnDef::new("c", ty);
        let int_col = column(ColumnType::Integer { width: IntWidth::Int, unsigned: false });
        for (v, want) in [
            (dec(45, 1), None),
            (Value::Str("4.5".into()), None),
            (Value::Float(4.5), None),
            (Value::Int(2_147_483_648), None),
            (dec(40, 1), Some(Value::Int(4))),
            (Value::Str("4".into()), Some(Value::Int(4))),
            (Value::Str("4abc".into()), Some(Value::Int(4))),
            (Value::Int(2_147_483_647), Some(Value::Int(2_147_483_647))),
            (Value::Int(-2_147_483_648), Some(Value::Int(-2_147_483_648))),
        ] {
            assert_eq!(equal_key_part(v.clone(), &int_col).unwrap(), want, "{v:?}");
        }
        let dec_col = column(ColumnType::Decimal { precision: 6, scale: 3 });
        assert_eq!(equal_key_part(dec(12345, 4), &dec_col).unwrap(), None);
        assert_eq!(equal_key_part(dec(12350, 4), &dec_col).unwrap(), Some(dec(1235, 3)));
        let date_col = column(ColumnType::Date);
        assert_eq!(equal_key_part(Value::Str("2024-01-01 10:00:00".into()), &date_col).unwrap(), None);
        assert_eq!(
            equal_key_part(Value::Str("2024-01-01 00:00:00".into()), &date_col).unwrap(),
            Some(Value::Date(jan1 as i32))
        );
    }

    fn agg(kind: AggKind, distinct: bool) -> AggSpec {
        AggSpec {
            kind,
            arg: Some(SExpr::Col(1)),
            distinct,
            separator: ",".into(),
            order: Vec::new(),
            collation: Collation::Bin,
        }
    }

    /// One row per group: (group key, aggregates...) as `group` leaves them
    /// after the first row's `width` values.
    fn grouped(rows: &[(i64, Option<i64>)], kinds: &[(AggKind, bool)]) -> Vec<Vec<Value>> {
        let rows = rows.iter().map(|&(g, v)| vec![Value::Int(g), v.map_or(Value::Null, Value::Int)]).collect();
        let aggs: Vec<AggSpec> = kinds.iter().map(|&(k, d)| agg(k, d)).collect();
        let env = Env { params: &[], session: &crate::session::NoSession, strict_numbers: false };
        let keys = [SExpr::Col(0)];
        let mut out = group(rows, &keys, &aggs, 2, &env).unwrap();
        out.sort_by(|a, b| order_rows(a, b, [(0, false)]));
        out.into_iter().map(|r| r[2..].to_vec()).collect()
    }

    #[test]
    fn variance_and_standard_deviation_skip_nulls() {
        use AggKind::*;
        let rows = [(1, Some(2)), (1, Some(4)), (1, None), (1, Some(4)), (1, Some(6)), (2, Some(7)), (3, None)];
        let kinds = [(VarPop, false), (VarSamp, false), (StdPop, false), (StdSamp, false), (VarPop, true)];
        let got = grouped(&rows, &kinds);
        let f = Value::Float;
        // 2, 4, 4, 6: mean 4, squared deviations 4 + 0 + 0 + 4.
        assert_eq!(got[0], vec![f(2.0), f(8.0 / 3.0), f(2f64.sqrt()), f((8.0f64 / 3.0).sqrt()), f(8.0 / 3.0)]);
        // One value: no spread, and no sample to estimate one from.
        assert_eq!(got[1], vec![f(0.0), Value::Null, f(0.0), Value::Null, f(0.0)]);
        // Only NULLs: NULL.
        assert_eq!(got[2], vec![Value::Null; 5]);
    }

    #[test]
    fn variance_of_large_close_values_keeps_its_digits() {
        let base = 1_000_000_000_000i64;
        let rows: Vec<(i64, Option<i64>)> = (0..4).map(|i| (1, Some(base + 2 * i))).collect();
        // 0, 2, 4, 6 above the base: mean 3, squared deviations 9 + 1 + 1 + 9.
        assert_eq!(grouped(&rows, &[(AggKind::VarPop, false)])[0], vec![Value::Float(5.0)]);
    }

    #[test]
    fn count_distinct_of_several_columns_counts_tuples_without_nulls() {
        let rows = [(1, Some(1)), (1, Some(1)), (2, Some(1)), (1, None), (12, Some(1)), (1, Some(21))]
            .iter()
            .map(|&(a, b)| vec![Value::Int(a), b.map_or(Value::Null, Value::Int)])
            .collect();
        let arg = SExpr::Func(crate::eval::Func::Tuple, vec![SExpr::Col(0), SExpr::Col(1)]);
        let spec = AggSpec {
            kind: AggKind::Count,
            arg: Some(arg),
            distinct: true,
            separator: ",".into(),
            order: Vec::new(),
            collation: Collation::Bin,
        };
        let env = Env { params: &[], session: &crate::session::NoSession, strict_numbers: false };
        let out = group(rows, &[], &[spec], 2, &env).unwrap();
        // (1,1), (2,1), (12,1) and (1,21): (1,NULL) is not counted, and
        // (12,1) is not (1,21).
        assert_eq!(out[0][2], Value::Int(4));
    }

    #[test]
    fn text_groups_pad_space_and_case_insensitive_text_groups_by_weight() {
        let key = |v: &Value| {
            let mut k = String::new();
            group_key(std::slice::from_ref(v), &mut k);
            k
        };
        let text = |s: &str| Value::Str(s.into());
        assert_eq!(key(&text("a")), key(&text("a  ")), "trailing spaces do not count");
        assert_ne!(key(&text("a")), key(&text("A")), "utf8mb4_bin tells case apart");
        assert_ne!(key(&Value::Bytes(b"a".to_vec())), key(&Value::Bytes(b"a ".to_vec())), "binary strings do not pad");
        let ci = |s: &str| key(&weight(&text(s), Collation::GeneralCi));
        assert_eq!(ci("crème"), ci("CREME "));
        let ordered = collated_compare(&text("apple"), &text("Banana"), Collation::GeneralCi);
        assert_eq!(ordered, Some(Ordering::Less), "MIN/MAX of _ci text compare weights");
    }

    #[test]
    fn numbers_group_by_value_whatever_their_scale() {
        let key = |v: Value| {
            let mut k = String::new();
            group_key(&[v], &mut k);
            k
        };
        let dec = |unscaled: i128, scale: u8| Value::Decimal(latsdb_types::value::Decimal::new(unscaled, scale));
        assert_eq!(key(dec(150, 2)), key(dec(1500, 3)));
        assert_eq!(key(dec(150, 2)), key(Value::Float(1.5)));
        assert_eq!(key(dec(-20, 1)), key(Value::Int(-2)));
        assert_ne!(key(dec(150, 2)), key(dec(151, 2)));
        assert_ne!(key(dec(10, 2)), key(Value::Int(1)), "0.10 is not 1");
    }

    #[test]
    fn bit_aggregates_fold_64_unsigned_bits() {
        use AggKind::*;
        let rows = [(1, Some(12)), (1, Some(10)), (1, None), (2, Some(-1)), (3, None)];
        let got = grouped(&rows, &[(BitAnd, false), (BitOr, false), (BitXor, false)]);
        let u = Value::UInt;
        assert_eq!(got[0], vec![u(8), u(14), u(6)]);
        assert_eq!(got[1], vec![u(u64::MAX), u(u64::MAX), u(u64::MAX)]);
        // No values: BIT_AND is all ones, the others 0 (as in MySQL).
        assert_eq!(got[2], vec![u(u64::MAX), u(0), u(0)]);
    }
}
