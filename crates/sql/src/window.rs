//! Window functions (`f(...) OVER (PARTITION BY ... ORDER BY ... [frame])`)
//! over the rows a query keeps after grouping and HAVING. Each function's
//! value is appended to every row. Without a frame clause, with ORDER BY
//! the frame is MySQL's default, from the partition's first row to the
//! current row's last peer (rows with equal ORDER BY values); without it,
//! the whole partition. `ROWS BETWEEN` frames count rows from the current
//! one; `RANGE BETWEEN` frames take UNBOUNDED and CURRENT ROW (its peers).

use crate::bind::{AggKind, Frame, FrameBound, WindowKind, WindowSpec};
use crate::error::{SqlError, SqlResult};
use crate::eval::{compare, numeric, Env};
use crate::exec::{avg, bits_start, fold_bits, order_rows, Spread};
use latsdb_types::expr::Aggregate;
use latsdb_types::Value;
use std::cmp::Ordering;

/// Appends the value of every window function to every row.
pub fn compute(windows: &[WindowSpec], mut rows: Vec<Vec<Value>>, env: &Env) -> SqlResult<Vec<Vec<Value>>> {
    let mut values: Vec<Vec<Value>> = Vec::with_capacity(windows.len());
    for w in windows {
        values.push(one(w, &rows, env)?);
    }
    for (i, row) in rows.iter_mut().enumerate() {
        row.extend(values.iter_mut().map(|v| std::mem::replace(&mut v[i], Value::Null)));
    }
    Ok(rows)
}

/// One window function's value for each row, in row order.
fn one(w: &WindowSpec, rows: &[Vec<Value>], env: &Env) -> SqlResult<Vec<Value>> {
    // Per row: partition values, then ORDER BY values; sorted stably so
    // peers keep the rows' own order.
    let parts = w.partition.len();
    let mut keyed: Vec<(Vec<Value>, usize)> = Vec::with_capacity(rows.len());
    for (i, r) in rows.iter().enumerate() {
        let mut key = Vec::with_capacity(parts + w.order.len());
        for e in w.partition.iter().chain(w.order.iter().map(|(e, _)| e)) {
            key.push(e.eval(r, env)?);
        }
        keyed.push((key, i));
    }
    let sort_keys: Vec<(usize, bool)> = (0..parts)
        .map(|i| (i, false))
        .chain(w.order.iter().enumerate().map(|(i, (_, desc))| (parts + i, *desc)))
        .collect();
    keyed.sort_by(|a, b| order_rows(&a.0, &b.0, sort_keys.iter().copied()));
    let same_partition = |a: &[Value], b: &[Value]| order_rows(a, b, (0..parts).map(|i| (i, false))) == Ordering::Equal;
    let peers = |a: &[Value], b: &[Value]| order_rows(a, b, sort_keys.iter().copied()) == Ordering::Equal;

    let mut out = vec![Value::Null; rows.len()];
    let mut start = 0;
    while start < keyed.len() {
        let mut end = start + 1;
        while end < keyed.len() && same_partition(&keyed[start].0, &keyed[end].0) {
            end += 1;
        }
        partition(w, rows, &keyed[start..end], &peers, env, &mut out)?;
        start = end;
    }
    Ok(out)
}

/// The values of one partition (`part`: its rows in window order, with their
/// sort keys and row numbers).
fn partition(
    w: &WindowSpec,
    rows: &[Vec<Value>],
    part: &[(Vec<Value>, usize)],
    peers: &dyn Fn(&[Value], &[Value]) -> bool,
    env: &Env,
    out: &mut [Value],
) -> SqlResult<()> {
    let arg = |n: usize, row: usize| -> SqlResult<Value> {
        match w.args.get(n) {
            Some(e) => e.eval(&rows[row], env),
            None => Ok(Value::Null),
        }
    };
    let n = part.len();
    let peer_group = peer_groups(part, peers);
    let frame = |pos: usize| frame_of(w, n, &peer_group, pos);
    match w.kind {
        WindowKind::Ntile => {
            for (pos, (_, row)) in part.iter().enumerate() {
                let buckets = match arg(0, *row)?.as_i64() {
                    Some(b) if b > 0 => b as usize,
                    _ => return Err(SqlError::wrong_args("the argument of NTILE must be a positive integer")),
                };
                // The first n % buckets buckets hold one row more.
                let (size, extra) = (n / buckets, n % buckets);
                let big = extra * (size + 1);
                let bucket = if pos < big { pos / (size + 1) } else { extra + (pos - big) / size.max(1) };
                out[*row] = Value::Int(bucket as i64 + 1);
            }
        }
        WindowKind::PercentRank => {
            for (pos, (_, row)) in part.iter().enumerate() {
                let rank = peer_group[pos].0;
                out[*row] = Value::Float(if n > 1 { rank as f64 / (n - 1) as f64 } else { 0.0 });
            }
        }
        WindowKind::CumeDist => {
            for (pos, (_, row)) in part.iter().enumerate() {
                out[*row] = Value::Float(peer_group[pos].1 as f64 / n as f64);
            }
        }
        WindowKind::FirstValue | WindowKind::LastValue | WindowKind::NthValue => {
            for (pos, (_, row)) in part.iter().enumerate() {
                let (start, end) = frame(pos);
                let at = match w.kind {
                    WindowKind::FirstValue => Some(start),
                    WindowKind::LastValue => end.checked_sub(1),
                    _ => match arg(1, *row)?.as_i64() {
                        Some(k) if k > 0 => start.checked_add(k as usize - 1),
                        _ => return Err(SqlError::wrong_args("the position of NTH_VALUE must be a positive integer")),
                    },
                };
                out[*row] = match at.filter(|&i| i >= start && i < end) {
                    Some(i) => arg(0, part[i].1)?,
                    None => Value::Null,
                };
            }
        }
        WindowKind::Agg(kind) => {
            // Frames that start at the partition's start only grow (the
            // default one too): one accumulator for the partition; others
            // are summed per row.
            let mut acc = Accumulator::new(kind);
            let mut added = 0;
            for (pos, (_, row)) in part.iter().enumerate() {
                let (start, end) = frame(pos);
                if start == 0 && end >= added {
                    for (_, r) in &part[added..end] {
                        acc.add(arg(0, *r)?);
                    }
                    added = end;
                    out[*row] = acc.value()?;
                } else {
                    let mut own = Accumulator::new(kind);
                    for (_, r) in part.get(start..end).unwrap_or(&[]) {
                        own.add(arg(0, *r)?);
                    }
                    out[*row] = own.value()?;
                }
            }
        }
        WindowKind::RowNumber => {
            for (pos, (_, row)) in part.iter().enumerate() {
                out[*row] = Value::Int(pos as i64 + 1);
            }
        }
        WindowKind::Rank | WindowKind::DenseRank => {
            let mut dense = 0i64;
            for (pos, (_, row)) in part.iter().enumerate() {
                let first_peer = peer_group[pos].0;
                if first_peer == pos {
                    dense += 1;
                }
                out[*row] = Value::Int(if w.kind == WindowKind::Rank { first_peer as i64 + 1 } else { dense });
            }
        }
        WindowKind::Lag | WindowKind::Lead => {
            for (pos, (_, row)) in part.iter().enumerate() {
                let offset = match w.args.get(1) {
                    Some(e) => {
                        let v = e.eval(&rows[*row], env)?;
                        v.as_i64().and_then(|i| usize::try_from(i).ok()).ok_or_else(|| {
                            SqlError::wrong_args(format!(
                                "the offset of LAG/LEAD must be a non-negative integer, not {v}"
                            ))
                        })?
                    }
                    None => 1,
                };
                let from = if w.kind == WindowKind::Lag { pos.checked_sub(offset) } else { pos.checked_add(offset) };
                out[*row] = match from.and_then(|p| part.get(p)) {
                    Some((_, other)) => arg(0, *other)?,
                    None => arg(2, *row)?,
                };
            }
        }
    }
    Ok(())
}

/// Each position's group of peers (rows equal in the window's order), as
/// [first, last + 1).
fn peer_groups(part: &[(Vec<Value>, usize)], peers: &dyn Fn(&[Value], &[Value]) -> bool) -> Vec<(usize, usize)> {
    let n = part.len();
    let mut peer_group = vec![(0, n); n];
    let mut first = 0;
    while first < n {
        let mut end = first + 1;
        while end < n && peers(&part[first].0, &part[end].0) {
            end += 1;
        }
        for g in &mut peer_group[first..end] {
            *g = (first, end);
        }
        first = end;
    }
    peer_group
}

/// The frame of position `pos` in a partition of `n` rows, as [start, end)
/// (empty when start >= end).
fn frame_of(w: &WindowSpec, n: usize, peer_group: &[(usize, usize)], pos: usize) -> (usize, usize) {
    let ordered = !w.order.is_empty();
    match w.frame {
        Frame::Default if ordered => (0, peer_group[pos].1),
        Frame::Default => (0, n),
        Frame::Rows(a, b) => {
            let start = match a {
                FrameBound::Preceding(None) => 0,
                FrameBound::Preceding(Some(k)) => pos.saturating_sub(k.min(n as u64) as usize),
                FrameBound::Following(k) => pos.saturating_add(k.unwrap_or(0).min(n as u64) as usize),
            };
            let end = match b {
                FrameBound::Following(None) => n,
                FrameBound::Following(Some(k)) => pos.saturating_add(k.min(n as u64) as usize + 1).min(n),
                FrameBound::Preceding(Some(k)) if k as usize > pos => 0,
                FrameBound::Preceding(k) => pos - k.unwrap_or(0) as usize + 1,
            };
            (start.min(n), end)
        }
        Frame::Range(a, b) => {
            let start = match a {
                FrameBound::Preceding(None) => 0,
                _ => peer_group[pos].0,
            };
            let end = match b {
                FrameBound::Following(None) => n,
                _ => peer_group[pos].1,
            };
            (start, end)
        }
    }
}

/// An aggregate's state over a window frame that only grows.
struct Accumulator {
    kind: AggKind,
    value: Value,
    count: u64,
    spread: Spread,
    bits: u64,
}

impl Accumulator {
    fn new(kind: AggKind) -> Self {
        Accumulator { kind, value: Value::Null, count: 0, spread: Spread::default(), bits: bits_start(kind) }
    }

    fn add(&mut self, v: Value) {
        if self.kind == AggKind::CountRows {
            self.count += 1;
            return;
        }
        if v.is_null() {
            return;
        }
        self.count += 1;
        match self.kind {
            AggKind::Sum | AggKind::Avg => Aggregate::Sum(0).accumulate(&mut self.value, numeric(&v)),
            AggKind::Min if self.value.is_null() || compare(&v, &self.value) == Some(Ordering::Less) => self.value = v,
            AggKind::Max if self.value.is_null() || compare(&v, &self.value) == Some(Ordering::Greater) => {
                self.value = v
            }
            AggKind::VarPop | AggKind::VarSamp | AggKind::StdPop | AggKind::StdSamp => self.spread.add(&v),
            AggKind::BitAnd | AggKind::BitOr | AggKind::BitXor => self.bits = fold_bits(self.kind, self.bits, &v),
            _ => {}
        }
    }

    fn value(&self) -> SqlResult<Value> {
        Ok(match self.kind {
            AggKind::Count | AggKind::CountRows => Value::Int(self.count as i64),
            AggKind::Avg => avg(&self.value, self.count)?,
            AggKind::VarPop | AggKind::VarSamp | AggKind::StdPop | AggKind::StdSamp => self.spread.value(self.kind),
            AggKind::BitAnd | AggKind::BitOr | AggKind::BitXor => Value::UInt(self.bits),
            _ => self.value.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::SExpr;

    fn env() -> Env<'static> {
        Env { params: &[], session: &crate::session::NoSession, strict_numbers: false }
    }

    fn spec(kind: WindowKind, args: Vec<SExpr>, partition: Vec<SExpr>, order: Vec<(SExpr, bool)>) -> WindowSpec {
        WindowSpec { kind, args, partition, order, frame: Frame::Default }
    }

    #[test]
    fn ranks_and_running_sums_treat_peers_as_one_step() {
        // (group, value) rows, not in window order.
        let rows: Vec<Vec<Value>> = [(1, Some(20)), (1, Some(10)), (2, None), (1, Some(20)), (2, Some(5))]
            .iter()
            .map(|&(g, v)| vec![Value::Int(g), v.map_or(Value::Null, Value::Int)])
            .collect();
        let by_value = vec![(SExpr::Col(1), false)];
        let group = vec![SExpr::Col(0)];
        let windows = [
            spec(WindowKind::Rank, vec![], group.clone(), by_value.clone()),
            spec(WindowKind::DenseRank, vec![], vec![], by_value.clone()),
            spec(WindowKind::Agg(AggKind::Sum), vec![SExpr::Col(1)], group.clone(), by_value.clone()),
            spec(WindowKind::Agg(AggKind::CountRows), vec![], group.clone(), vec![]),
            spec(
                WindowKind::Lead,
                vec![SExpr::Col(1), SExpr::Const(Value::Int(1)), SExpr::Const(Value::Int(-1))],
                group,
                by_value,
            ),
        ];
        let out = compute(&windows, rows, &env()).unwrap();
        let got: Vec<Vec<Value>> = out.into_iter().map(|r| r[2..].to_vec()).collect();
        let i = Value::Int;
        // SUM of integers is a DECIMAL, as in MySQL.
        let d = |n: i128| Value::Decimal(latsdb_types::value::Decimal { unscaled: n, scale: 0 });
        assert_eq!(
            got,
            vec![
                // group 1 in order: 10, 20, 20 (NULLs first in group 2).
                vec![i(2), i(4), d(50), i(3), i(20)],
                vec![i(1), i(3), d(10), i(3), i(20)],
                vec![i(1), i(1), Value::Null, i(2), i(5)],
                vec![i(2), i(4), d(50), i(3), i(-1)],
                vec![i(2), i(2), d(5), i(2), i(-1)],
            ]
        );
    }
}
