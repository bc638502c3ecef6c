//! Expressions pushed down to data nodes: scan filters, update assignments
//! computed from the current row (`k = k + 1`), and aggregates.
//!
//! Evaluation follows SQL three-valued logic: a comparison with NULL is
//! unknown (NULL), and a filter keeps a row only when it evaluates to true.

use crate::collation::Collation;
use crate::error::{DbError, Result};
use crate::row::RowLayout;
use crate::schema::ColumnId;
use crate::value::{Decimal, Value};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;

/// Deepest expression tree a data node accepts (bounds recursion on input
/// from the network).
pub const MAX_EXPR_DEPTH: usize = 64;

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArithOp {
    Add,
    Sub,
    Mul,
}

/// A filter or computed value a data node evaluates. Every operand it
/// nests is decoded through `nested`, which refuses more than
/// `MAX_EXPR_DEPTH` levels: decoding recurses once per level, and a frame
/// of a few MiB could otherwise nest deep enough to overflow a shard
/// thread's stack before `validate` could refuse it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum Expr {
    Column(ColumnId),
    Const(Value),
    Cmp(CmpOp, #[serde(deserialize_with = "nested")] Box<Expr>, #[serde(deserialize_with = "nested")] Box<Expr>),
    And(#[serde(deserialize_with = "nested")] Vec<Expr>),
    Or(#[serde(deserialize_with = "nested")] Vec<Expr>),
    Not(#[serde(deserialize_with = "nested")] Box<Expr>),
    IsNull(#[serde(deserialize_with = "nested")] Box<Expr>),
    In(#[serde(deserialize_with = "nested")] Box<Expr>, Vec<Value>),
    /// SQL LIKE with `%` and `_` wildcards and `\` escapes.
    Like(#[serde(deserialize_with = "nested")] Box<Expr>, String),
    Arith(ArithOp, #[serde(deserialize_with = "nested")] Box<Expr>, #[serde(deserialize_with = "nested")] Box<Expr>),
    /// Text folded to its utf8mb4_general_ci weight (`Collation::fold`), so
    /// comparisons and LIKE over it are case- and accent-insensitive; other
    /// values pass unchanged.
    Fold(#[serde(deserialize_with = "nested")] Box<Expr>),
}

thread_local! {
    /// Levels of `Expr` being decoded on this thread now.
    static DECODE_DEPTH: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Decodes the operands one level below an `Expr`, refusing to go deeper
/// than `MAX_EXPR_DEPTH` levels (with room for `validate`'s own check to
/// word the error for anything it lets through).
fn nested<'de, D, T>(decoder: D) -> std::result::Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    let depth = DECODE_DEPTH.with(|d| d.get());
    if depth > 2 * MAX_EXPR_DEPTH {
        return Err(serde::de::Error::custom(format!("an expression nests deeper than {MAX_EXPR_DEPTH} levels")));
    }
    DECODE_DEPTH.with(|d| d.set(depth + 1));
    let decoded = T::deserialize(decoder);
    DECODE_DEPTH.with(|d| d.set(depth));
    decoded
}

impl Expr {
    pub fn col(c: ColumnId) -> Expr {
        Expr::Column(c)
    }
    pub fn val(v: impl Into<Value>) -> Expr {
        Expr::Const(v.into())
    }
    pub fn cmp(op: CmpOp, a: Expr, b: Expr) -> Expr {
        Expr::Cmp(op, Box::new(a), Box::new(b))
    }
    pub fn eq(self, v: impl Into<Value>) -> Expr {
        Expr::cmp(CmpOp::Eq, self, Expr::val(v))
    }
    pub fn ne(self, v: impl Into<Value>) -> Expr {
        Expr::cmp(CmpOp::Ne, self, Expr::val(v))
    }
    pub fn lt(self, v: impl Into<Value>) -> Expr {
        Expr::cmp(CmpOp::Lt, self, Expr::val(v))
    }
    pub fn le(self, v: impl Into<Value>) -> Expr {
        Expr::cmp(CmpOp::Le, self, Expr::val(v))
    }
    pub fn gt(self, v: impl Into<Value>) -> Expr {
        Expr::cmp(CmpOp::Gt, self, Expr::val(v))
    }
    pub fn ge(self, v: impl Into<Value>) -> Expr {
        Expr::cmp(CmpOp::Ge, self, Expr::val(v))
    }
    pub fn and(self, other: Expr) -> Expr {
        match self {
            Expr::And(mut list) => {
                list.push(other);
                Expr::And(list)
            }
            e => Expr::And(vec![e, other]),
        }
    }
    pub fn or(self, other: Expr) -> Expr {
        Expr::Or(vec![self, other])
    }
    pub fn like(self, pattern: &str) -> Expr {
        Expr::Like(Box::new(self), pattern.to_string())
    }
    pub fn is_null(self) -> Expr {
        Expr::IsNull(Box::new(self))
    }
    pub fn plus(self, v: impl Into<Value>) -> Expr {
        Expr::Arith(ArithOp::Add, Box::new(self), Box::new(Expr::val(v)))
    }
    pub fn minus(self, v: impl Into<Value>) -> Expr {
        Expr::Arith(ArithOp::Sub, Box::new(self), Box::new(Expr::val(v)))
    }

    /// Checks column references and depth against a table's layout.
    pub fn validate(&self, columns: usize) -> Result<()> {
        self.validate_at(columns, 0)
    }

    fn validate_at(&self, columns: usize, depth: usize) -> Result<()> {
        if depth > MAX_EXPR_DEPTH {
            return Err(DbError::bad_request(format!("expression is nested deeper than {MAX_EXPR_DEPTH} levels")));
        }
        let d = depth + 1;
        match self {
            Expr::Column(c) if *c as usize >= columns => Err(DbError::new(
                crate::ErrorCode::UnknownColumn,
                format!("column number {c} does not exist (the table has {columns})"),
            )),
            Expr::Column(_) | Expr::Const(_) => Ok(()),
            Expr::Cmp(_, a, b) | Expr::Arith(_, a, b) => {
                a.validate_at(columns, d)?;
                b.validate_at(columns, d)
            }
            Expr::And(list) | Expr::Or(list) => list.iter().try_for_each(|e| e.validate_at(columns, d)),
            Expr::Not(e) | Expr::IsNull(e) | Expr::In(e, _) | Expr::Like(e, _) | Expr::Fold(e) => {
                e.validate_at(columns, d)
            }
        }
    }

    pub fn eval(&self, layout: &RowLayout, row: &[u8]) -> Value {
        match self {
            Expr::Column(c) => layout.get(row, *c as usize),
            Expr::Const(v) => v.clone(),
            Expr::Cmp(op, a, b) => {
                let (a, b) = (a.eval(layout, row), b.eval(layout, row));
                match a.sql_cmp(&b) {
                    None => Value::Null,
                    Some(ord) => Value::Bool(match op {
                        CmpOp::Eq => ord == Ordering::Equal,
                        CmpOp::Ne => ord != Ordering::Equal,
                        CmpOp::Lt => ord == Ordering::Less,
                        CmpOp::Le => ord != Ordering::Greater,
                        CmpOp::Gt => ord == Ordering::Greater,
                        CmpOp::Ge => ord != Ordering::Less,
                    }),
                }
            }
            Expr::And(list) => {
                let mut unknown = false;
                for e in list {
                    match truth(&e.eval(layout, row)) {
                        Some(false) => return Value::Bool(false),
                        None => unknown = true,
                        Some(true) => {}
                    }
                }
                if unknown {
                    Value::Null
                } else {
                    Value::Bool(true)
                }
            }
            Expr::Or(list) => {
                let mut unknown = false;
                for e in list {
                    match truth(&e.eval(layout, row)) {
                        Some(true) => return Value::Bool(true),
                        None => unknown = true,
                        Some(false) => {}
                    }
                }
                if unknown {
                    Value::Null
                } else {
                    Value::Bool(false)
                }
            }
            Expr::Not(e) => match truth(&e.eval(layout, row)) {
                None => Value::Null,
                Some(b) => Value::Bool(!b),
            },
            Expr::IsNull(e) => Value::Bool(e.eval(layout, row).is_null()),
            Expr::In(e, list) => {
                let v = e.eval(layout, row);
                if v.is_null() {
                    return Value::Null;
                }
                let mut unknown = false;
                for item in list {
                    match v.sql_cmp(item) {
                        Some(Ordering::Equal) => return Value::Bool(true),
                        None => unknown = true,
                        _ => {}
                    }
                }
                if unknown {
                    Value::Null
                } else {
                    Value::Bool(false)
                }
            }
            Expr::Like(e, pattern) => match e.eval(layout, row) {
                Value::Null => Value::Null,
                v => match v.as_bytes() {
                    Some(text) => Value::Bool(like(text, pattern.as_bytes())),
                    None => Value::Bool(like(v.to_string().as_bytes(), pattern.as_bytes())),
                },
            },
            Expr::Arith(op, a, b) => arith(*op, &a.eval(layout, row), &b.eval(layout, row)),
            Expr::Fold(e) => Collation::GeneralCi.fold_value(e.eval(layout, row)),
        }
    }

    /// True when the expression evaluates to true for the row.
    pub fn matches(&self, layout: &RowLayout, row: &[u8]) -> bool {
        truth(&self.eval(layout, row)) == Some(true)
    }
}

fn truth(v: &Value) -> Option<bool> {
    match v {
        Value::Null => None,
        Value::Bool(b) => Some(*b),
        other => other.as_f64().map(|f| f != 0.0).or(Some(false)),
    }
}

pub fn arith(op: ArithOp, a: &Value, b: &Value) -> Value {
    if a.is_null() || b.is_null() {
        return Value::Null;
    }
    if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64()) {
        let r = match op {
            ArithOp::Add => x.checked_add(y),
            ArithOp::Sub => x.checked_sub(y),
            ArithOp::Mul => x.checked_mul(y),
        };
        if let Some(r) = r {
            return Value::Int(r);
        }
    }
    if let (Value::Decimal(_), _) | (_, Value::Decimal(_)) = (a, b) {
        let dec = |v: &Value| match v {
            Value::Decimal(d) => Some(*d),
            v => v.as_i64().map(|i| Decimal::new(i as i128, 0)),
        };
        if let (Some(x), Some(y)) = (dec(a), dec(b)) {
            if op == ArithOp::Mul {
                // MySQL: the product's scale is the sum of the factors' scales.
                if let Some(u) = x.unscaled.checked_mul(y.unscaled).filter(|_| x.scale + y.scale <= 30) {
                    return Value::Decimal(Decimal::new(u, x.scale + y.scale));
                }
            }
            let scale = x.scale.max(y.scale);
            if let (Some(x), Some(y)) = (x.rescale(scale), y.rescale(scale)) {
                let r = match op {
                    ArithOp::Add => x.unscaled.checked_add(y.unscaled).map(|u| Decimal::new(u, scale)),
                    ArithOp::Sub => x.unscaled.checked_sub(y.unscaled).map(|u| Decimal::new(u, scale)),
                    ArithOp::Mul => None,
                };
                if let Some(r) = r {
                    return Value::Decimal(r);
                }
            }
        }
    }
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => Value::Float(match op {
            ArithOp::Add => x + y,
            ArithOp::Sub => x - y,
            ArithOp::Mul => x * y,
        }),
        _ => Value::Null,
    }
}

/// SQL LIKE over bytes; `\` escapes the next pattern byte.
pub fn like(text: &[u8], pattern: &[u8]) -> bool {
    let (mut t, mut p) = (0, 0);
    let (mut star_p, mut star_t) = (usize::MAX, 0);
    while t < text.len() {
        if p < pattern.len() {
            match pattern[p] {
                b'%' => {
                    star_p = p;
                    star_t = t;
                    p += 1;
                    continue;
                }
                b'_' => {
                    t += 1;
                    p += 1;
                    continue;
                }
                b'\\' if p + 1 < pattern.len() && pattern[p + 1] == text[t] => {
                    t += 1;
                    p += 2;
                    continue;
                }
                // An escape whose next byte does not match: no match here.
                b'\\' if p + 1 < pattern.len() => {}
                c if c == text[t] => {
                    t += 1;
                    p += 1;
                    continue;
                }
                _ => {}
            }
        }
        if star_p != usize::MAX {
            p = star_p + 1;
            star_t += 1;
            t = star_t;
        } else {
            return false;
        }
    }
    while p < pattern.len() && pattern[p] == b'%' {
        p += 1;
    }
    p == pattern.len()
}

/// Aggregates computed on the data nodes; each partition returns a partial
/// result that the client merges with `Aggregate::merge`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Aggregate {
    /// COUNT(*)
    CountRows,
    /// COUNT(col): non-NULL values.
    Count(ColumnId),
    Sum(ColumnId),
    Min(ColumnId),
    Max(ColumnId),
}

impl Aggregate {
    pub fn column(self) -> Option<ColumnId> {
        match self {
            Aggregate::CountRows => None,
            Aggregate::Count(c) | Aggregate::Sum(c) | Aggregate::Min(c) | Aggregate::Max(c) => Some(c),
        }
    }

    /// The value of the aggregate over no rows.
    pub fn initial(self) -> Value {
        match self {
            Aggregate::CountRows | Aggregate::Count(_) => Value::UInt(0),
            _ => Value::Null,
        }
    }

    /// Adds one row's column value (`Value::Null` for CountRows is ignored).
    pub fn accumulate(self, acc: &mut Value, v: Value) {
        match self {
            Aggregate::CountRows => *acc = Value::UInt(acc.as_u64().unwrap_or(0) + 1),
            Aggregate::Count(_) => {
                if !v.is_null() {
                    *acc = Value::UInt(acc.as_u64().unwrap_or(0) + 1)
                }
            }
            Aggregate::Sum(_) => self.merge(acc, sum_input(v)),
            Aggregate::Min(_) | Aggregate::Max(_) => self.merge(acc, v),
        }
    }

    /// Combines two partial results.
    pub fn merge(self, acc: &mut Value, partial: Value) {
        if partial.is_null() {
            return;
        }
        if acc.is_null() {
            *acc = partial;
            return;
        }
        match self {
            Aggregate::CountRows | Aggregate::Count(_) => {
                *acc = Value::UInt(acc.as_u64().unwrap_or(0) + partial.as_u64().unwrap_or(0))
            }
            Aggregate::Sum(_) => *acc = arith_sum(acc, &partial),
            Aggregate::Min(_) => {
                if partial.sql_cmp(acc) == Some(Ordering::Less) {
                    *acc = partial
                }
            }
            Aggregate::Max(_) => {
                if partial.sql_cmp(acc) == Some(Ordering::Greater) {
                    *acc = partial
                }
            }
        }
    }
}

/// Integers are summed as DECIMAL(38,0) so a sum cannot overflow i64.
fn sum_input(v: Value) -> Value {
    match v {
        Value::Int(i) => Value::Decimal(Decimal::new(i as i128, 0)),
        Value::UInt(u) => Value::Decimal(Decimal::new(u as i128, 0)),
        Value::Bool(b) => Value::Decimal(Decimal::new(b as i128, 0)),
        other => other,
    }
}

fn arith_sum(a: &Value, b: &Value) -> Value {
    match (a, b) {
        (Value::Float(x), y) | (y, Value::Float(x)) => Value::Float(x + y.as_f64().unwrap_or(0.0)),
        _ => arith(ArithOp::Add, a, b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `NOT NOT ... NOT column 0`, `levels` deep, as the wire encodes it
    /// (variant index 5 is `Not`, 0 is `Column`), built without recursing.
    fn nots_on_the_wire(levels: usize) -> Vec<u8> {
        let mut bytes = [5u8, 0, 0, 0].repeat(levels);
        bytes.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
        bytes
    }

    #[test]
    fn decoding_refuses_deep_nesting_without_recursing_into_it() {
        let shallow: Expr = crate::proto::decode_body(&nots_on_the_wire(10)).expect("10 levels decode");
        assert!(shallow.validate(1).is_ok());
        // A million levels would overflow any thread's stack if decoded.
        let e = crate::proto::decode_body::<Expr>(&nots_on_the_wire(1_000_000)).expect_err("too deep");
        assert!(e.message.contains("deeper than"), "{}", e.message);
        // The thread's decode depth is back to 0: a shallow one decodes again.
        assert!(crate::proto::decode_body::<Expr>(&nots_on_the_wire(100)).is_ok());
    }
    use crate::schema::{ColumnDef, ColumnType, IntWidth};

    #[test]
    fn three_valued_logic_and_like() {
        let layout = RowLayout::new(&[
            ColumnDef::new("a", ColumnType::int(IntWidth::Int)),
            ColumnDef::new("s", ColumnType::VarChar(20)),
        ]);
        let row = layout.encode(&[Value::Null, Value::Str("hello world".into())]);
        let a_gt_1 = Expr::cmp(CmpOp::Gt, Expr::col(0), Expr::val(Value::Int(1)));
        assert_eq!(a_gt_1.eval(&layout, &row), Value::Null);
        assert!(!Expr::Not(Box::new(a_gt_1.clone())).matches(&layout, &row));
        assert!(Expr::Or(vec![a_gt_1, Expr::Like(Box::new(Expr::col(1)), "hel%o_w%".into())]).matches(&layout, &row));
        assert!(like(b"50%", b"50\\%"));
        let folded = |e: Expr| Expr::Fold(Box::new(e));
        assert!(folded(Expr::col(1)).eq(Value::Str("HELLO WORLD".into())).matches(&layout, &row));
        assert!(Expr::Like(Box::new(folded(Expr::col(1))), "HEL%".into()).matches(&layout, &row));
        assert!(!Expr::col(1).eq(Value::Str("HELLO WORLD".into())).matches(&layout, &row));
        assert!(!like(b"abc", b"a_"));
    }

    #[test]
    fn aggregates_merge_partials() {
        let mut acc = Aggregate::Sum(0).initial();
        for v in [Value::Int(i64::MAX), Value::Int(i64::MAX), Value::Null] {
            Aggregate::Sum(0).accumulate(&mut acc, v);
        }
        assert_eq!(acc, Value::Decimal(Decimal::new(2 * i64::MAX as i128, 0)));
        let mut max = Value::Null;
        Aggregate::Max(0).merge(&mut max, Value::Int(3));
        Aggregate::Max(0).merge(&mut max, Value::Int(9));
        assert_eq!(max, Value::Int(9));
    }

    #[test]
    fn depth_is_bounded() {
        let mut e = Expr::val(Value::Int(1));
        for _ in 0..100 {
            e = Expr::Not(Box::new(e));
        }
        assert!(e.validate(1).is_err());
    }
}
