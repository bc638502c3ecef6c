//! Expressions as the SQL node evaluates them: bound to row positions,
//! with MySQL's conversions (a string compared with a number is read as a
//! number, `'0'` stored into an INT column is 0) and the scalar functions
//! that drivers and ORMs send.

use crate::error::{
    SqlError, SqlResult, ER_DATA_TOO_LONG, ER_DATA_TRUNCATED, ER_TRUNCATED_WRONG_VALUE_FOR_FIELD,
    ER_WARN_DATA_OUT_OF_RANGE,
};
use latsdb_types::expr::{arith, ArithOp, CmpOp};
use latsdb_types::schema::{ColumnDef, ColumnType};
use latsdb_types::value::{self, Decimal};
use latsdb_types::{ErrorCode, Value};
use std::cmp::Ordering;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    /// `<=>`: equality where NULL equals NULL.
    NullSafeEq,
}

impl Cmp {
    /// The operator with its operands swapped (`5 < c` is `c > 5`).
    pub fn flip(self) -> Cmp {
        match self {
            Cmp::Lt => Cmp::Gt,
            Cmp::Le => Cmp::Ge,
            Cmp::Gt => Cmp::Lt,
            Cmp::Ge => Cmp::Le,
            other => other,
        }
    }

    /// The data nodes' operator; None for `<=>`, which they do not have.
    pub fn pushed(self) -> Option<CmpOp> {
        Some(match self {
            Cmp::Eq => CmpOp::Eq,
            Cmp::Ne => CmpOp::Ne,
            Cmp::Lt => CmpOp::Lt,
            Cmp::Le => CmpOp::Le,
            Cmp::Gt => CmpOp::Gt,
            Cmp::Ge => CmpOp::Ge,
            Cmp::NullSafeEq => return None,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arith {
    Add,
    Sub,
    Mul,
    Div,
    IntDiv,
    Mod,
    BitAnd,
    BitOr,
    BitXor,
    ShiftLeft,
    ShiftRight,
}

/// Values that come from the session rather than the row.
#[derive(Clone, Debug, PartialEq)]
pub enum SessionValue {
    Database,
    User,
    ConnectionId,
    LastInsertId,
    RowCount,
    FoundRows,
    /// The current time with this many digits of a second (NOW(3) has 3;
    /// NOW() and CURRENT_TIMESTAMP none, as in MySQL).
    Now(u8),
    /// SYSDATE(n): the time it is evaluated, not the statement's (MySQL).
    SysDate(u8),
    CurDate,
    Variable(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Func {
    IfNull,
    Coalesce,
    /// NULLIF, GREATEST and LEAST compare under the collation the binder
    /// derives for their arguments, and return one of them unchanged.
    NullIf(latsdb_types::Collation),
    If,
    Concat,
    ConcatWs,
    Length,
    CharLength,
    Upper,
    Lower,
    Substring,
    Trim,
    LTrim,
    RTrim,
    Replace,
    Abs,
    Ceil,
    Floor,
    Round,
    Greatest(latsdb_types::Collation),
    Least(latsdb_types::Collation),
    Version,
    Left,
    Right,
    /// LOCATE(substr, str[, pos]): 1-based position, 0 when absent.
    Locate,
    UnixTimestamp,
    Uuid,
    /// YEAR(), MONTH(), EXTRACT(), ...
    DatePart(crate::dates::Part),
    /// DATE(x).
    DateOf,
    /// TIME() and the other functions of TIME values (`times.rs`).
    Times(crate::times::TimeFunc),
    DateFormat,
    /// DATEDIFF(a, b): days from b to a.
    DateDiff,
    /// DATE_ADD(date, INTERVAL n unit), `date + INTERVAL n unit`, ...;
    /// `true` subtracts.
    DateAdd(crate::dates::Unit, bool),
    /// `d + INTERVAL 'text' HOUR_MINUTE` and the other compound units.
    DateAddCompound(crate::dates::Compound, bool),
    ExtractCompound(crate::dates::Compound),
    /// TIMESTAMPDIFF(unit, a, b).
    TimestampDiff(crate::dates::Unit),
    LastDay,
    /// WEEK(d[, mode]), WEEKOFYEAR(d) (mode 3) and YEARWEEK(d[, mode]).
    Week,
    WeekOfYear,
    YearWeek,
    MakeDate,
    StrToDate,
    /// The arguments as one value that tells tuples apart (NULL when any
    /// is NULL): COUNT(DISTINCT a, b)'s argument.
    Tuple,
    DayName,
    MonthName,
    FromUnixTime,
    LPad,
    RPad,
    Repeat,
    Reverse,
    Space,
    Ascii,
    Hex,
    Unhex,
    ToBase64,
    FromBase64,
    /// CHAR(n, ...): the bytes of the integers.
    Char,
    /// FORMAT(x, d): x rounded to d decimals with thousands separators.
    Format,
    Conv,
    Crc32,
    ToDays,
    FromDays,
    Md5,
    Sha1,
    Sha2,
    Truncate,
    Pow,
    Sqrt,
    Exp,
    /// LN(x), and LOG(x) / LOG(base, x).
    Log,
    Log2,
    Log10,
    Sign,
    BitCount,
    SubstringIndex,
    FindInSet,
    Field,
    Elt,
    Strcmp,
    InsertStr,
    Quote,
    Pi,
    Rand,
    RegexpLike,
    RegexpInstr,
    RegexpSubstr,
    RegexpReplace,
    /// Text as its utf8mb4_general_ci weight: the binder wraps both sides
    /// of a comparison under a case-insensitive collation in it (and
    /// ORDER BY and GROUP BY keys), so comparing the results as bytes
    /// compares case- and accent-insensitively.
    Fold,
    /// Fold's result without trailing spaces (PAD SPACE): the ORDER BY and
    /// GROUP BY key of case-insensitive text; other values pass unchanged.
    Weight,
    /// `x COLLATE name`: the value unchanged, with the collation the binder
    /// gives comparisons of it.
    Collate(latsdb_types::Collation),
    /// A value of a subquery's column: unchanged, with the column's
    /// collation as its own (implicit, as a column's is).
    Implicit(latsdb_types::Collation),
    /// A DECIMAL result shown with this scale (see `Binder::decimal_scale`);
    /// integers become DECIMALs of it, other values pass unchanged.
    DecimalScale(u8),
}

/// Target of CAST/CONVERT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CastTo {
    Signed,
    Unsigned,
    Char,
    /// A FLOAT's text (`format_float`), where a FLOAT becomes text:
    /// CAST AS CHAR, CONCAT.
    FloatText,
    /// The text of a DOUBLE whose type fixes its places
    /// (`format_double_places`), where it becomes text.
    PlacesText(u8),
    Binary,
    Decimal(u8, u8),
    Double,
    Date,
    /// DATETIME(n): the digits of a second kept (the rest cut, as MariaDB).
    DateTime(u8),
    /// TIME(n), its digits as DATETIME(n)'s.
    Time(u8),
    /// A BIT(n) where it becomes text (CONCAT, TO_BASE64, MD5): its
    /// (n + 7) / 8 bytes, big-endian, as MySQL gives a BIT in a string
    /// context.
    BitBytes(u8),
}

#[derive(Clone, Debug, PartialEq)]
pub enum SExpr {
    /// A position in the input row.
    Col(usize),
    /// Column `column` of the `table`-th table of the FROM clause; replaced
    /// by `Col` once every table's fetched columns are known.
    TableCol(usize, u16),
    Const(Value),
    /// A `?` of a prepared statement.
    Param(usize),
    Session(SessionValue),
    Not(Box<SExpr>),
    And(Box<SExpr>, Box<SExpr>),
    Or(Box<SExpr>, Box<SExpr>),
    Xor(Box<SExpr>, Box<SExpr>),
    Cmp(Cmp, Box<SExpr>, Box<SExpr>),
    Arith(Arith, Box<SExpr>, Box<SExpr>),
    Neg(Box<SExpr>),
    IsNull(Box<SExpr>, bool),
    /// IS [NOT] TRUE / IS [NOT] FALSE: (expr, truth, negated).
    IsBool(Box<SExpr>, bool, bool),
    In(Box<SExpr>, Vec<SExpr>, bool),
    Between(Box<SExpr>, Box<SExpr>, Box<SExpr>, bool),
    Like(Box<SExpr>, Box<SExpr>, bool),
    Func(Func, Vec<SExpr>),
    Case(Option<Box<SExpr>>, Vec<(SExpr, SExpr)>, Option<Box<SExpr>>),
    Cast(Box<SExpr>, CastTo),
    /// The value of the `n`-th aggregate of a grouped query.
    Agg(usize),
    /// The value of the `n`-th window function of the query.
    Window(usize),
}

/// What an expression needs besides its row.
pub struct Env<'a> {
    pub params: &'a [Value],
    pub session: &'a (dyn SessionLookup + Sync),
    /// Inside INSERT, UPDATE and DELETE (MySQL's strict mode): text in
    /// arithmetic that is not wholly a number is error 1292, where a
    /// SELECT reads its numeric prefix.
    pub strict_numbers: bool,
}

pub trait SessionLookup {
    fn session_value(&self, v: &SessionValue) -> SqlResult<Value>;
}

impl SExpr {
    pub fn eval(&self, row: &[Value], env: &Env) -> SqlResult<Value> {
        Ok(match self {
            SExpr::Col(i) => row.get(*i).cloned().unwrap_or(Value::Null),
            SExpr::TableCol(..) => return Err(SqlError::general("internal: expression evaluated before binding")),
            SExpr::Agg(i) => {
                return Err(SqlError::general(format!("internal: aggregate {i} evaluated outside grouping")))
            }
            SExpr::Window(i) => {
                return Err(SqlError::general(format!("internal: window function {i} evaluated before its rows")))
            }
            SExpr::Const(v) => v.clone(),
            SExpr::Param(i) => env
                .params
                .get(*i)
                .cloned()
                .ok_or_else(|| SqlError::wrong_args(format!("parameter {} was not bound", i + 1)))?,
            SExpr::Session(v) => env.session.session_value(v)?,
            SExpr::Not(e) => match truth(&e.eval(row, env)?) {
                None => Value::Null,
                Some(b) => Value::Int(!b as i64),
            },
            SExpr::And(a, b) => {
                let x = truth(&a.eval(row, env)?);
                if x == Some(false) {
                    return Ok(Value::Int(0));
                }
                match (x, truth(&b.eval(row, env)?)) {
                    (_, Some(false)) => Value::Int(0),
                    (Some(true), Some(true)) => Value::Int(1),
                    _ => Value::Null,
                }
            }
            SExpr::Or(a, b) => {
                let x = truth(&a.eval(row, env)?);
                if x == Some(true) {
                    return Ok(Value::Int(1));
                }
                match (x, truth(&b.eval(row, env)?)) {
                    (_, Some(true)) => Value::Int(1),
                    (Some(false), Some(false)) => Value::Int(0),
                    _ => Value::Null,
                }
            }
            SExpr::Xor(a, b) => match (truth(&a.eval(row, env)?), truth(&b.eval(row, env)?)) {
                (Some(x), Some(y)) => Value::Int((x ^ y) as i64),
                _ => Value::Null,
            },
            SExpr::Cmp(op, a, b) => compare_op(*op, &a.eval(row, env)?, &b.eval(row, env)?),
            SExpr::Arith(op, a, b) => arith_op(*op, &a.eval(row, env)?, &b.eval(row, env)?, env.strict_numbers)?,
            SExpr::Neg(e) => {
                let v = e.eval(row, env)?;
                arith_op(Arith::Sub, &Value::Int(0), &v, env.strict_numbers)?
            }
            SExpr::IsNull(e, negated) => Value::Int((e.eval(row, env)?.is_null() != *negated) as i64),
            SExpr::IsBool(e, want, negated) => {
                let t = truth(&e.eval(row, env)?);
                Value::Int(((t == Some(*want)) != *negated) as i64)
            }
            SExpr::In(e, list, negated) => {
                let v = e.eval(row, env)?;
                if v.is_null() {
                    return Ok(Value::Null);
                }
                let mut saw_null = false;
                for item in list {
                    let x = item.eval(row, env)?;
                    match compare(&v, &x) {
                        Some(Ordering::Equal) => return Ok(Value::Int(!*negated as i64)),
                        None => saw_null = true,
                        _ => {}
                    }
                }
                if saw_null {
                    Value::Null
                } else {
                    Value::Int(*negated as i64)
                }
            }
            SExpr::Between(e, lo, hi, negated) => {
                let v = e.eval(row, env)?;
                let ge = compare_op(Cmp::Ge, &v, &lo.eval(row, env)?);
                let le = compare_op(Cmp::Le, &v, &hi.eval(row, env)?);
                let r = match (truth(&ge), truth(&le)) {
                    (Some(false), _) | (_, Some(false)) => Some(false),
                    (Some(true), Some(true)) => Some(true),
                    _ => None,
                };
                match r {
                    None => Value::Null,
                    Some(b) => Value::Int((b != *negated) as i64),
                }
            }
            SExpr::Like(e, pattern, negated) => {
                let v = e.eval(row, env)?;
                let p = pattern.eval(row, env)?;
                if v.is_null() || p.is_null() {
                    return Ok(Value::Null);
                }
                let text = to_text(&v);
                let pat = to_text(&p);
                let m = latsdb_types::expr::like(text.as_bytes(), pat.as_bytes());
                Value::Int((m != *negated) as i64)
            }
            SExpr::Func(f, args) => {
                let mut vals = Vec::with_capacity(args.len());
                // IF and the NULL-handling functions evaluate lazily in MySQL,
                // but none of ours has side effects, so eager is equivalent.
                for a in args {
                    vals.push(a.eval(row, env)?);
                }
                call(*f, vals, env)?
            }
            SExpr::Case(operand, whens, otherwise) => {
                let base = match operand {
                    Some(o) => Some(o.eval(row, env)?),
                    None => None,
                };
                for (when, then) in whens {
                    let w = when.eval(row, env)?;
                    let hit = match &base {
                        Some(b) => compare(b, &w) == Some(Ordering::Equal),
                        None => truth(&w) == Some(true),
                    };
                    if hit {
                        return then.eval(row, env);
                    }
                }
                match otherwise {
                    Some(e) => e.eval(row, env)?,
                    None => Value::Null,
                }
            }
            SExpr::Cast(e, to) => cast(e.eval(row, env)?, *to)?,
        })
    }

    /// Whether the expression reads no row column (so it can be computed
    /// before the rows are fetched, e.g. a key value or a bound).
    pub fn is_row_free(&self) -> bool {
        let mut free = true;
        self.walk(&mut |e| {
            if matches!(e, SExpr::Col(_) | SExpr::TableCol(..) | SExpr::Agg(_) | SExpr::Window(_)) {
                free = false;
            }
        });
        free
    }

    pub fn walk(&self, f: &mut dyn FnMut(&SExpr)) {
        f(self);
        match self {
            SExpr::Col(_)
            | SExpr::TableCol(..)
            | SExpr::Const(_)
            | SExpr::Param(_)
            | SExpr::Session(_)
            | SExpr::Agg(_)
            | SExpr::Window(_) => {}
            SExpr::Not(e) | SExpr::Neg(e) | SExpr::IsNull(e, _) | SExpr::IsBool(e, ..) | SExpr::Cast(e, _) => e.walk(f),
            SExpr::And(a, b)
            | SExpr::Or(a, b)
            | SExpr::Xor(a, b)
            | SExpr::Cmp(_, a, b)
            | SExpr::Arith(_, a, b)
            | SExpr::Like(a, b, _) => {
                a.walk(f);
                b.walk(f);
            }
            SExpr::In(e, list, _) => {
                e.walk(f);
                list.iter().for_each(|x| x.walk(f));
            }
            SExpr::Between(a, b, c, _) => {
                a.walk(f);
                b.walk(f);
                c.walk(f);
            }
            SExpr::Func(_, args) => args.iter().for_each(|x| x.walk(f)),
            SExpr::Case(o, whens, e) => {
                if let Some(o) = o {
                    o.walk(f);
                }
                for (w, t) in whens {
                    w.walk(f);
                    t.walk(f);
                }
                if let Some(e) = e {
                    e.walk(f);
                }
            }
        }
    }

    pub fn map(self, f: &mut dyn FnMut(SExpr) -> SqlResult<SExpr>) -> SqlResult<SExpr> {
        let b = |e: Box<SExpr>, f: &mut dyn FnMut(SExpr) -> SqlResult<SExpr>| -> SqlResult<Box<SExpr>> {
            Ok(Box::new((*e).map(f)?))
        };
        let mapped = match self {
            SExpr::Not(e) => SExpr::Not(b(e, f)?),
            SExpr::Neg(e) => SExpr::Neg(b(e, f)?),
            SExpr::IsNull(e, n) => SExpr::IsNull(b(e, f)?, n),
            SExpr::IsBool(e, t, n) => SExpr::IsBool(b(e, f)?, t, n),
            SExpr::Cast(e, t) => SExpr::Cast(b(e, f)?, t),
            SExpr::And(x, y) => SExpr::And(b(x, f)?, b(y, f)?),
            SExpr::Or(x, y) => SExpr::Or(b(x, f)?, b(y, f)?),
            SExpr::Xor(x, y) => SExpr::Xor(b(x, f)?, b(y, f)?),
            SExpr::Cmp(op, x, y) => SExpr::Cmp(op, b(x, f)?, b(y, f)?),
            SExpr::Arith(op, x, y) => SExpr::Arith(op, b(x, f)?, b(y, f)?),
            SExpr::Like(x, y, n) => SExpr::Like(b(x, f)?, b(y, f)?, n),
            SExpr::In(e, list, n) => {
                SExpr::In(b(e, f)?, list.into_iter().map(|x| x.map(f)).collect::<SqlResult<_>>()?, n)
            }
            SExpr::Between(x, y, z, n) => SExpr::Between(b(x, f)?, b(y, f)?, b(z, f)?, n),
            SExpr::Func(func, args) => SExpr::Func(func, args.into_iter().map(|x| x.map(f)).collect::<SqlResult<_>>()?),
            SExpr::Case(o, whens, e) => SExpr::Case(
                match o {
                    Some(o) => Some(b(o, f)?),
                    None => None,
                },
                whens.into_iter().map(|(w, t)| Ok((w.map(f)?, t.map(f)?))).collect::<SqlResult<_>>()?,
                match e {
                    Some(e) => Some(b(e, f)?),
                    None => None,
                },
            ),
            leaf => leaf,
        };
        f(mapped)
    }
}

/// SQL truth of a value: NULL is unknown, numbers are true when non-zero,
/// strings are read as numbers.
pub fn truth(v: &Value) -> Option<bool> {
    match v {
        Value::Null => None,
        Value::Bool(b) => Some(*b),
        Value::Int(i) => Some(*i != 0),
        Value::UInt(u) => Some(*u != 0),
        Value::Float(f) => Some(*f != 0.0),
        Value::Decimal(d) => Some(d.unscaled != 0),
        Value::Str(s) => Some(parse_number_prefix(s) != 0.0),
        Value::Bytes(b) => Some(parse_number_prefix(&String::from_utf8_lossy(b)) != 0.0),
        Value::Date(_) | Value::DateTime(_) | Value::Timestamp(_) => Some(true),
        Value::Time(us) => Some(*us != 0),
    }
}

/// The leading number of a string, as MySQL reads `'12abc'` as 12.
fn parse_number_prefix(s: &str) -> f64 {
    let t = s.trim_start();
    let mut end = 0;
    let bytes = t.as_bytes();
    let mut seen_digit = false;
    let mut seen_dot = false;
    let mut seen_e = false;
    while end < bytes.len() {
        let c = bytes[end];
        let ok = match c {
            b'0'..=b'9' => {
                seen_digit = true;
                true
            }
            b'+' | b'-' => end == 0 || (seen_e && matches!(bytes[end - 1], b'e' | b'E')),
            b'.' if !seen_dot && !seen_e => {
                seen_dot = true;
                true
            }
            b'e' | b'E' if seen_digit && !seen_e => {
                seen_e = true;
                true
            }
            _ => false,
        };
        if !ok {
            break;
        }
        end += 1;
    }
    let mut prefix = &t[..end];
    while !prefix.is_empty() && prefix.parse::<f64>().is_err() {
        prefix = &prefix[..prefix.len() - 1];
    }
    prefix.parse().unwrap_or(0.0)
}

fn is_number(v: &Value) -> bool {
    matches!(v, Value::Int(_) | Value::UInt(_) | Value::Float(_) | Value::Decimal(_) | Value::Bool(_))
}

/// A string as a number for comparison and arithmetic: an exact integer or
/// decimal when it is one, a double otherwise.
pub fn numeric(v: &Value) -> Value {
    match v {
        Value::Str(s) => {
            let t = s.trim();
            if let Ok(i) = t.parse::<i64>() {
                Value::Int(i)
            } else if let Some(d) = Decimal::parse(t) {
                Value::Decimal(d)
            } else {
                Value::Float(parse_number_prefix(t))
            }
        }
        Value::Bytes(b) => numeric(&Value::Str(String::from_utf8_lossy(b).into_owned())),
        Value::Bool(b) => Value::Int(*b as i64),
        // Dates in arithmetic are their digits, as in MySQL: 2024-03-07 is
        // 20240307, 2024-03-07 09:45:27 is 20240307094527.
        Value::Date(d) => {
            let c = crate::dates::Civil::from_micros(*d as i64 * 86_400_000_000);
            Value::Int(c.year * 10_000 + c.month as i64 * 100 + c.day as i64)
        }
        Value::DateTime(us) | Value::Timestamp(us) => {
            let c = crate::dates::Civil::from_micros(*us);
            let whole = (c.year * 10_000 + c.month as i64 * 100 + c.day as i64) * 1_000_000
                + c.hour * 10_000
                + c.minute * 100
                + c.second;
            if c.micros == 0 {
                Value::Int(whole)
            } else {
                Value::Decimal(Decimal::new(whole as i128 * 1_000_000 + c.micros as i128, 6))
            }
        }
        // A time is its digits too: -26:03:04.5 is -260304.5.
        Value::Time(us) => {
            let (magnitude, sign) = (us.saturating_abs(), us.signum());
            let seconds = magnitude / 1_000_000;
            let whole = sign * (seconds / 3600 * 10_000 + seconds / 60 % 60 * 100 + seconds % 60);
            match magnitude % 1_000_000 {
                0 => Value::Int(whole),
                micros => Value::Decimal(Decimal::new(whole as i128 * 1_000_000 + (sign * micros) as i128, 6)),
            }
        }
        other => other.clone(),
    }
}

/// MySQL comparison: None when either side is NULL.
pub fn compare(a: &Value, b: &Value) -> Option<Ordering> {
    if a.is_null() || b.is_null() {
        return None;
    }
    // TIMESTAMP and DATETIME hold the same microseconds.
    if matches!(a, Value::Timestamp(_)) || matches!(b, Value::Timestamp(_)) {
        let as_dt = |v: &Value| match v {
            Value::Timestamp(t) => Value::DateTime(*t),
            other => other.clone(),
        };
        return compare(&as_dt(a), &as_dt(b));
    }
    match (a, b) {
        (Value::Str(x), Value::Str(y)) => return Some(collate_cmp(x, y)),
        (Value::Date(_) | Value::DateTime(_) | Value::Timestamp(_), Value::Str(s)) => {
            if let Some(t) = temporal_from_str(s) {
                return a.sql_cmp(&t);
            }
        }
        (Value::Str(s), Value::Date(_) | Value::DateTime(_) | Value::Timestamp(_)) => {
            if let Some(t) = temporal_from_str(s) {
                return t.sql_cmp(b);
            }
        }
        (Value::DateTime(x), Value::Timestamp(y)) | (Value::Timestamp(x), Value::DateTime(y)) => return Some(x.cmp(y)),
        (Value::Time(_), Value::Str(s)) => {
            if let Some(t) = latsdb_types::mysql_types::parse_time(s) {
                return a.sql_cmp(&Value::Time(t));
            }
        }
        (Value::Str(s), Value::Time(_)) => {
            if let Some(t) = latsdb_types::mysql_types::parse_time(s) {
                return Value::Time(t).sql_cmp(b);
            }
        }
        _ => {}
    }
    if let Some(o) = a.sql_cmp(b) {
        return Some(o);
    }
    if is_number(a) || is_number(b) {
        let (x, y) = (numeric(a), numeric(b));
        if let Some(o) = x.sql_cmp(&y) {
            return Some(o);
        }
        return x.as_f64()?.partial_cmp(&y.as_f64()?);
    }
    to_text(a).as_bytes().partial_cmp(to_text(b).as_bytes())
}

/// `compare`, with text compared by its weight under `collation`.
fn compare_under(collation: latsdb_types::Collation, a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Str(x), Value::Str(y)) if collation.is_case_insensitive() => {
            Some(collation.weight(x).cmp(&collation.weight(y)))
        }
        _ => compare(a, b),
    }
}

/// Strings compare as utf8mb4_bin (bytes, PAD SPACE), exactly as the data
/// nodes compare them in pushed-down filters, so a condition means the same
/// wherever it runs. (Indexes order the bytes themselves: only text ending
/// in characters below the space sorts differently there.)
fn collate_cmp(a: &str, b: &str) -> Ordering {
    value::pad_space_cmp(a.as_bytes(), b.as_bytes())
}

fn temporal_from_str(s: &str) -> Option<Value> {
    if let Some(d) = value::parse_date(s) {
        return Some(Value::Date(d));
    }
    value::parse_datetime(s).map(Value::DateTime)
}

pub fn compare_op(op: Cmp, a: &Value, b: &Value) -> Value {
    if op == Cmp::NullSafeEq {
        return Value::Int(match (a.is_null(), b.is_null()) {
            (true, true) => 1,
            (false, false) => (compare(a, b) == Some(Ordering::Equal)) as i64,
            _ => 0,
        });
    }
    match compare(a, b) {
        None => Value::Null,
        Some(o) => Value::Int(
            (match op {
                Cmp::Eq => o == Ordering::Equal,
                Cmp::Ne => o != Ordering::Equal,
                Cmp::Lt => o == Ordering::Less,
                Cmp::Le => o != Ordering::Greater,
                Cmp::Gt => o == Ordering::Greater,
                Cmp::Ge => o != Ordering::Less,
                Cmp::NullSafeEq => unreachable!("handled above"),
            }) as i64,
        ),
    }
}

fn arith_op(op: Arith, a: &Value, b: &Value, strict: bool) -> SqlResult<Value> {
    if a.is_null() || b.is_null() {
        return Ok(Value::Null);
    }
    if let Some(exact) = integer_arith(op, a, b) {
        return exact;
    }
    if let Some(bits) = bit_op(op, a, b) {
        return Ok(bits);
    }
    // Text in arithmetic is a DOUBLE, as in MySQL: '7' / 2 is 3.5 and
    // '0.1' + '0.2' is 0.30000000000000004.
    let operand = |v: &Value| match v {
        Value::Str(s) if strict && !is_number_text(s) => Err(SqlError::new(
            crate::error::ER_TRUNCATED_WRONG_VALUE,
            "22007",
            format!("Truncated incorrect DOUBLE value: '{s}'"),
        )),
        Value::Str(_) | Value::Bytes(_) => Ok(Value::Float(numeric(v).as_f64().unwrap_or(0.0))),
        other => Ok(numeric(other)),
    };
    let (a, b) = (operand(a)?, operand(b)?);
    let simple = match op {
        Arith::Add => Some(ArithOp::Add),
        Arith::Sub => Some(ArithOp::Sub),
        Arith::Mul => Some(ArithOp::Mul),
        _ => None,
    };
    if let Some(op) = simple {
        // Unsigned values beyond i64 and mixed cases go through decimal or float.
        return Ok(arith(op, &a, &b));
    }
    let divisor_zero = b.as_f64() == Some(0.0);
    if divisor_zero {
        return Ok(Value::Null);
    }
    // Text that reads as an integer ('7' % 2) is one by now.
    if let Some(exact) = integer_arith(op, &a, &b) {
        return exact;
    }
    Ok(match op {
        Arith::Div => {
            let exact = |v: &Value| match v {
                Value::Int(i) => Some(Decimal::new(*i as i128, 0)),
                Value::UInt(u) => Some(Decimal::new(*u as i128, 0)),
                Value::Decimal(d) => Some(*d),
                _ => None,
            };
            match (exact(&a), exact(&b)) {
                (Some(x), Some(y)) => {
                    // MySQL's div_precision_increment: four more digits.
                    let scale = (x.scale + 4).min(30);
                    let shift = scale as i32 - x.scale as i32 + y.scale as i32;
                    // A divisor of many decimal places may shift past
                    // i128 (found by the sql_expressions fuzz target):
                    // then the quotient is a double, as below.
                    let shifted = 10i128.checked_pow(shift.max(0) as u32).and_then(|p| x.unscaled.checked_mul(p));
                    match shifted {
                        Some(n) => {
                            let q = n / y.unscaled;
                            let r = n % y.unscaled;
                            let q = if (r.abs() * 2) >= y.unscaled.abs() {
                                q + (n.signum() * y.unscaled.signum())
                            } else {
                                q
                            };
                            Value::Decimal(Decimal::new(q, scale))
                        }
                        None => Value::Float(x.to_f64() / y.to_f64()),
                    }
                }
                _ => Value::Float(a.as_f64().unwrap_or(0.0) / b.as_f64().unwrap_or(1.0)),
            }
        }
        Arith::IntDiv => Value::Int((a.as_f64().unwrap_or(0.0) / b.as_f64().unwrap_or(1.0)).trunc() as i64),
        Arith::Mod => Value::Float(a.as_f64().unwrap_or(0.0) % b.as_f64().unwrap_or(1.0)),
        _ => unreachable!("simple operators handled above"),
    })
}

/// Whether text reads wholly as a number (spaces around it allowed):
/// `-1.5e3` does, `12abc`, `abc` and `` do not.
pub(crate) fn is_number_text(s: &str) -> bool {
    let t = s.trim_matches(' ').as_bytes();
    let mut i = 0;
    if i < t.len() && (t[i] == b'+' || t[i] == b'-') {
        i += 1;
    }
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < t.len() && t[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    let mut mantissa = digits(&mut i);
    if i < t.len() && t[i] == b'.' {
        i += 1;
        mantissa += digits(&mut i);
    }
    if mantissa == 0 {
        return false;
    }
    if i < t.len() && (t[i] == b'e' || t[i] == b'E') {
        i += 1;
        if i < t.len() && (t[i] == b'+' || t[i] == b'-') {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == t.len()
}

/// An integer of either signedness, widened so both fit.
fn wide_int(v: &Value) -> Option<i128> {
    match v {
        Value::Int(i) => Some(*i as i128),
        Value::UInt(u) => Some(*u as i128),
        Value::Bool(b) => Some(*b as i128),
        _ => None,
    }
}

/// +, -, *, DIV and % of two integers, exactly: a result beyond BIGINT (or BIGINT
/// UNSIGNED when an operand is unsigned) is error 1690 as in MySQL, never a
/// rounded double; so is a negative result when an operand is unsigned
/// (`u - 1` at u = 0), as MySQL refuses it. None for other operands and
/// operators.
fn integer_arith(op: Arith, a: &Value, b: &Value) -> Option<SqlResult<Value>> {
    let (x, y) = (wide_int(a)?, wide_int(b)?);
    let r = match op {
        Arith::Add => x + y,
        Arith::Sub => x - y,
        // Both fit in 64 bits, so the product fits in 128.
        Arith::Mul => x * y,
        // By zero: NULL, answered by the caller.
        Arith::IntDiv | Arith::Mod if y == 0 => return None,
        Arith::IntDiv => x / y,
        Arith::Mod => x % y,
        _ => return None,
    };
    // MOD takes the dividend's signedness (its sign is the dividend's).
    let unsigned = matches!(a, Value::UInt(_)) || (op != Arith::Mod && matches!(b, Value::UInt(_)));
    Some(if let (true, Ok(u)) = (unsigned, u64::try_from(r)) {
        // Unsigned stays unsigned, so later arithmetic may go past BIGINT.
        Ok(Value::UInt(u))
    } else if let (false, Ok(i)) = (unsigned, i64::try_from(r)) {
        Ok(Value::Int(i))
    } else {
        let sign = match op {
            Arith::Add => "+",
            Arith::Sub => "-",
            Arith::Mul => "*",
            Arith::Mod => "%",
            _ => "DIV",
        };
        let kind = if unsigned { "BIGINT UNSIGNED" } else { "BIGINT" };
        Err(SqlError::new(1690, "22003", format!("{kind} value is out of range in '{x} {sign} {y}'")))
    })
}

/// A value as the 64 bits MySQL's bit operators work on: integers as two's
/// complement, other numbers rounded to an integer and held within
/// BIGINT UNSIGNED.
pub(crate) fn bits_of(v: &Value) -> u64 {
    match numeric(v) {
        Value::Int(i) => i as u64,
        Value::UInt(u) => u,
        Value::Decimal(d) => match d.rescale(0).map(|d| d.unscaled) {
            Some(i) if i < 0 => i64::try_from(i).unwrap_or(i64::MIN) as u64,
            Some(i) => u64::try_from(i).unwrap_or(u64::MAX),
            None => u64::MAX,
        },
        Value::Float(f) if f < 0.0 => f.round() as i64 as u64,
        Value::Float(f) => f.round() as u64,
        other => other.as_i64().unwrap_or(0) as u64,
    }
}

/// &, |, ^, << and >> (and ~ as ^ with all ones): BIGINT UNSIGNED results.
fn bit_op(op: Arith, a: &Value, b: &Value) -> Option<Value> {
    let (x, y) = (bits_of(a), bits_of(b));
    Some(Value::UInt(match op {
        Arith::BitAnd => x & y,
        Arith::BitOr => x | y,
        Arith::BitXor => x ^ y,
        Arith::ShiftLeft => x.checked_shl(u32::try_from(y).unwrap_or(u32::MAX)).unwrap_or(0),
        Arith::ShiftRight => x.checked_shr(u32::try_from(y).unwrap_or(u32::MAX)).unwrap_or(0),
        _ => return None,
    }))
}

/// A value as MySQL prints it in the text protocol.
pub fn to_text(v: &Value) -> String {
    match v {
        Value::Str(s) => s.clone(),
        Value::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
        Value::Float(f) => format_double(*f),
        other => other.to_string(),
    }
}

/// Doubles print in the shortest form that reads back to the same value,
/// as MySQL does: without a trailing ".0", and in exponent form ("1e15",
/// "1.5e-16") when the decimal point would sit more than 15 places left of
/// an integral value's last digit or right of the first digit.
pub fn format_double(f: f64) -> String {
    if f.is_finite() && f != 0.0 {
        let e = format!("{f:e}");
        if let Some((mantissa, exp)) = e.split_once('e') {
            let exp: i32 = exp.parse().unwrap_or(0);
            let digits = mantissa.bytes().filter(u8::is_ascii_digit).count() as i32;
            if exp <= -16 || (exp >= 15 && digits <= exp + 1) {
                return e;
            }
        }
    }
    format_number(f)
}

/// A number as MySQL prints it: integral values without ".0", others in
/// the shortest text that reads back to the same double.
fn format_number(x: f64) -> String {
    if x.is_finite() && x == x.trunc() && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

/// A DOUBLE whose type fixes its places (`Binder::double_decimals`), as
/// MySQL and MariaDB print it: the shortest digits that read back to the
/// value, padded with zeros to `places` (ROUND(0.1e0, 20) shows
/// 0.10000000000000000000, not the binary value's 0.10000000000000000555),
/// or, where those digits have more places, the value correctly rounded
/// to them (0.495, whose double is 0.49499999..., shows 0.49). A negative
/// value that shows as zero loses its sign (ROUND(-0.001e0, 2) is 0.00).
pub fn format_double_places(f: f64, places: u8) -> String {
    if !f.is_finite() {
        return format_double(f);
    }
    let places = places as usize;
    // Display of an f64 is positional, with the shortest round-trip digits.
    let shortest = format!("{f}");
    let shown = match shortest.split_once('.') {
        None if places == 0 => shortest,
        None => format!("{shortest}.{:0<places$}", ""),
        Some((_, fraction)) if fraction.len() <= places => format!("{shortest}{:0<1$}", "", places - fraction.len()),
        Some(_) => format!("{f:.places$}"),
    };
    match shown.strip_prefix('-') {
        Some(rest) if rest.bytes().all(|b| b == b'0' || b == b'.') => rest.to_string(),
        _ => shown,
    }
}

/// A FLOAT column's value as MySQL and MariaDB print it: rounded to 6
/// significant digits (FLT_DIG), then laid out as a double is. A FLOAT
/// holding 3.14159265 shows 3.14159, 123456789 shows 123457000 and the
/// largest one 3.40282e38 (the shortest text of the single-precision value
/// would be 3.1415927, 123456790 and 340282350000000000000000000000000000000).
pub fn format_float(f: f32) -> String {
    let x = f as f64;
    if !x.is_finite() || x == 0.0 {
        return format_double(x);
    }
    // Six significant digits: the scientific form with five after the point.
    let rounded = format!("{x:.5e}").parse::<f64>().unwrap_or(x);
    format_double(rounded)
}

/// Calls a scalar function on its evaluated arguments, by kind. A NULL
/// argument makes the result NULL, except for the functions that handle
/// NULLs themselves (and VERSION, UNIX_TIMESTAMP, UUID and CHAR, which
/// ignore or skip them).
fn call(f: Func, a: Vec<Value>, env: &Env) -> SqlResult<Value> {
    let handles_null = matches!(
        f,
        Func::IfNull
            | Func::Coalesce
            | Func::NullIf(..)
            | Func::If
            | Func::Concat
            | Func::ConcatWs
            | Func::Field
            | Func::Elt
            | Func::Quote
            | Func::Version
            | Func::UnixTimestamp
            | Func::Uuid
            | Func::Char
    );
    if !handles_null && a.iter().any(Value::is_null) {
        return Ok(Value::Null);
    }
    match f {
        Func::IfNull
        | Func::Coalesce
        | Func::NullIf(..)
        | Func::If
        | Func::Tuple
        | Func::Greatest(..)
        | Func::Least(..)
        | Func::Version
        | Func::Uuid => call_control(f, a, env),
        Func::Concat
        | Func::ConcatWs
        | Func::LPad
        | Func::RPad
        | Func::Repeat
        | Func::Reverse
        | Func::Space
        | Func::Length
        | Func::CharLength
        | Func::Upper
        | Func::Lower
        | Func::Trim
        | Func::LTrim
        | Func::RTrim => call_text(f, a),
        Func::Field
        | Func::Elt
        | Func::SubstringIndex
        | Func::FindInSet
        | Func::Strcmp
        | Func::InsertStr
        | Func::Substring
        | Func::Left
        | Func::Right
        | Func::Replace
        | Func::Locate => call_search(f, a),
        Func::Quote
        | Func::Ascii
        | Func::Char
        | Func::Hex
        | Func::Unhex
        | Func::ToBase64
        | Func::FromBase64
        | Func::Md5
        | Func::Sha1
        | Func::Sha2
        | Func::Fold
        | Func::Weight
        | Func::Collate(..)
        | Func::Implicit(..)
        | Func::RegexpLike
        | Func::RegexpInstr
        | Func::RegexpSubstr
        | Func::RegexpReplace => call_encoding(f, a),
        Func::Format
        | Func::Conv
        | Func::Crc32
        | Func::Truncate
        | Func::Pow
        | Func::Sqrt
        | Func::Exp
        | Func::Log
        | Func::Log2
        | Func::Log10
        | Func::Sign
        | Func::Pi
        | Func::Rand
        | Func::DecimalScale(..)
        | Func::Abs
        | Func::Ceil
        | Func::Floor
        | Func::Round
        | Func::BitCount => call_numbers(f, a),
        Func::ToDays
        | Func::FromDays
        | Func::TimestampDiff(..)
        | Func::Week
        | Func::WeekOfYear
        | Func::YearWeek
        | Func::StrToDate
        | Func::MakeDate
        | Func::LastDay
        | Func::DayName
        | Func::MonthName
        | Func::FromUnixTime
        | Func::DatePart(..)
        | Func::DateOf
        | Func::DateFormat
        | Func::ExtractCompound(..)
        | Func::DateAdd(..)
        | Func::DateAddCompound(..)
        | Func::DateDiff
        | Func::UnixTimestamp => call_dates(f, a, env),
        Func::Times(function) => Ok(crate::times::call(function, &a)),
    }
}

/// NULL handling, conditionals, comparisons of several values and the
/// server's own functions (VERSION, UUID).
fn call_control(f: Func, a: Vec<Value>, env: &Env) -> SqlResult<Value> {
    let arg = |a: &Vec<Value>, i: usize| a.get(i).cloned().unwrap_or(Value::Null);
    let any_null = |a: &Vec<Value>| a.iter().any(|v| v.is_null());
    Ok(match f {
        Func::IfNull => {
            let x = arg(&a, 0);
            if x.is_null() {
                arg(&a, 1)
            } else {
                x
            }
        }
        Func::Coalesce => a.into_iter().find(|v| !v.is_null()).unwrap_or(Value::Null),
        Func::NullIf(collation) => {
            let (x, y) = (arg(&a, 0), arg(&a, 1));
            if compare_under(collation, &x, &y) == Some(Ordering::Equal) {
                Value::Null
            } else {
                x
            }
        }
        Func::If => {
            if truth(&arg(&a, 0)) == Some(true) {
                arg(&a, 1)
            } else {
                arg(&a, 2)
            }
        }
        Func::Tuple => {
            if any_null(&a) {
                return Ok(Value::Null);
            }
            let mut key = String::new();
            crate::exec::group_key(&a, &mut key);
            Value::Str(key)
        }
        Func::Greatest(collation) | Func::Least(collation) => {
            // Of equal arguments ('b' and 'B' under a case-insensitive
            // collation, 'a' and 'a ' under any) the first wins, as in MySQL.
            let wanted = if matches!(f, Func::Greatest(_)) { Ordering::Greater } else { Ordering::Less };
            let mut args = a.into_iter();
            let mut best = args.next().unwrap_or(Value::Null);
            for v in args {
                if compare_under(collation, &v, &best) == Some(wanted) {
                    best = v;
                }
            }
            best
        }
        Func::Version => env.session.session_value(&SessionValue::Variable("version".into()))?,
        Func::Uuid => {
            let mut b = [0u8; 16];
            if getrandom::fill(&mut b).is_err() {
                return Err(SqlError::general("no randomness available for UUID()"));
            }
            b[6] = (b[6] & 0x0f) | 0x40;
            b[8] = (b[8] & 0x3f) | 0x80;
            let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
            Value::Str(format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..]))
        }

        other => unreachable!("{other:?} is not one of these functions (`call` dispatches by kind)"),
    })
}

/// Functions that build text: concatenation, length, case, trimming,
/// padding, repetition.
fn call_text(f: Func, a: Vec<Value>) -> SqlResult<Value> {
    let arg = |a: &Vec<Value>, i: usize| a.get(i).cloned().unwrap_or(Value::Null);
    let any_null = |a: &Vec<Value>| a.iter().any(|v| v.is_null());
    Ok(match f {
        Func::Concat => {
            if any_null(&a) {
                return Ok(Value::Null);
            }
            Value::Str(a.iter().map(to_text).collect())
        }
        Func::ConcatWs => {
            if a.is_empty() || a[0].is_null() {
                return Ok(Value::Null);
            }
            let sep = to_text(&a[0]);
            Value::Str(a[1..].iter().filter(|v| !v.is_null()).map(to_text).collect::<Vec<_>>().join(&sep))
        }
        Func::LPad | Func::RPad => {
            let s: Vec<char> = to_text(&a[0]).chars().collect();
            let Some(len) = int_arg(&a[1]).filter(|&n| n >= 0).map(|n| n as usize) else {
                return Ok(Value::Null);
            };
            if len <= s.len() {
                return Ok(Value::Str(s[..len].iter().collect()));
            }
            let pad: Vec<char> = to_text(&a[2]).chars().collect();
            if pad.is_empty() || len > MAX_STRING_CHARS {
                return Ok(Value::Null);
            }
            let fill: String = pad.iter().cycle().take(len - s.len()).collect();
            let s: String = s.into_iter().collect();
            Value::Str(if f == Func::LPad { fill + &s } else { s + &fill })
        }
        Func::Repeat => {
            let s = to_text(&a[0]);
            let n = int_arg(&a[1]).unwrap_or(0).max(0) as usize;
            if s.len().saturating_mul(n) > MAX_STRING_CHARS {
                return Ok(Value::Null);
            }
            Value::Str(s.repeat(n))
        }
        Func::Reverse => Value::Str(to_text(&a[0]).chars().rev().collect()),
        Func::Space => {
            let n = int_arg(&a[0]).unwrap_or(0).max(0) as usize;
            if n > MAX_STRING_CHARS {
                return Ok(Value::Null);
            }
            Value::Str(" ".repeat(n))
        }
        Func::Length => Value::Int(match &arg(&a, 0) {
            Value::Bytes(b) => b.len(),
            v => to_text(v).len(),
        } as i64),
        Func::CharLength => Value::Int(to_text(&arg(&a, 0)).chars().count() as i64),
        Func::Upper => Value::Str(to_text(&arg(&a, 0)).to_uppercase()),
        Func::Lower => Value::Str(to_text(&arg(&a, 0)).to_lowercase()),
        Func::Trim | Func::LTrim | Func::RTrim => {
            // TRIM([BOTH | LEADING | TRAILING] [r] FROM s) takes whole
            // copies of r (a space by default) off the ends.
            let s = to_text(&arg(&a, 0));
            let r = if a.len() > 1 { to_text(&a[1]) } else { " ".to_string() };
            let mut t = s.as_str();
            if !r.is_empty() {
                if f != Func::RTrim {
                    while let Some(rest) = t.strip_prefix(r.as_str()) {
                        t = rest;
                    }
                }
                if f != Func::LTrim {
                    while let Some(rest) = t.strip_suffix(r.as_str()) {
                        t = rest;
                    }
                }
            }
            Value::Str(t.to_string())
        }
        other => unreachable!("{other:?} is not one of these functions (`call` dispatches by kind)"),
    })
}

/// Functions that find and cut within text: substrings, positions,
/// replacing, list membership, comparison.
fn call_search(f: Func, mut a: Vec<Value>) -> SqlResult<Value> {
    let arg = |a: &Vec<Value>, i: usize| a.get(i).cloned().unwrap_or(Value::Null);
    Ok(match f {
        Func::Field => {
            let x = arg(&a, 0);
            if x.is_null() {
                return Ok(Value::Int(0));
            }
            let at = a[1..].iter().position(|v| compare(&x, v) == Some(Ordering::Equal));
            Value::Int(at.map_or(0, |i| i as i64 + 1))
        }
        Func::Elt => match int_arg(&arg(&a, 0)) {
            Some(n) if n >= 1 && (n as usize) < a.len() => a.swap_remove(n as usize),
            _ => Value::Null,
        },
        Func::SubstringIndex => {
            let (text, delim) = (to_text(&a[0]), to_text(&a[1]));
            let count = int_arg(&a[2]).unwrap_or(0);
            if delim.is_empty() || count == 0 {
                return Ok(Value::Str(String::new()));
            }
            let cut = if count > 0 {
                text.match_indices(delim.as_str()).nth(count as usize - 1).map(|(i, _)| text[..i].to_string())
            } else {
                text.rmatch_indices(delim.as_str())
                    .nth(count.unsigned_abs() as usize - 1)
                    .map(|(i, _)| text[i + delim.len()..].to_string())
            };
            Value::Str(cut.unwrap_or(text))
        }
        Func::FindInSet => {
            let (needle, list) = (to_text(&a[0]), to_text(&a[1]));
            if needle.contains(',') || list.is_empty() {
                return Ok(Value::Int(0));
            }
            Value::Int(list.split(',').position(|item| item == needle).map_or(0, |i| i as i64 + 1))
        }
        Func::Strcmp => Value::Int(match collate_cmp(&to_text(&a[0]), &to_text(&a[1])) {
            Ordering::Less => -1,
            Ordering::Equal => 0,
            Ordering::Greater => 1,
        }),
        Func::InsertStr => {
            let text: Vec<char> = to_text(&a[0]).chars().collect();
            let (pos, len) = (int_arg(&a[1]).unwrap_or(0), int_arg(&a[2]).unwrap_or(0));
            if pos < 1 || pos as usize > text.len() {
                return Ok(Value::Str(text.into_iter().collect()));
            }
            let start = pos as usize - 1;
            let end = if len < 0 { text.len() } else { start.saturating_add(len as usize).min(text.len()) };
            let mut out: String = text[..start].iter().collect();
            out.push_str(&to_text(&a[3]));
            out.extend(&text[end..]);
            if out.len() > MAX_STRING_CHARS {
                return Ok(Value::Null);
            }
            Value::Str(out)
        }
        Func::Substring => {
            let s: Vec<char> = to_text(&arg(&a, 0)).chars().collect();
            let pos = int_arg(&arg(&a, 1)).unwrap_or(0);
            let len = if a.len() > 2 { int_arg(&arg(&a, 2)).unwrap_or(0) } else { i64::MAX };
            let n = s.len() as i64;
            let start = if pos > 0 {
                pos - 1
            } else if pos < 0 {
                n + pos
            } else {
                return Ok(Value::Str(String::new()));
            };
            if start < 0 || start >= n || len <= 0 {
                return Ok(Value::Str(String::new()));
            }
            let end = start.saturating_add(len).min(n);
            Value::Str(s[start as usize..end as usize].iter().collect())
        }
        Func::Left | Func::Right => {
            let s: Vec<char> = to_text(&arg(&a, 0)).chars().collect();
            let n = (int_arg(&arg(&a, 1)).unwrap_or(0).max(0) as usize).min(s.len());
            Value::Str(if f == Func::Left { s[..n].iter().collect() } else { s[s.len() - n..].iter().collect() })
        }
        Func::Replace => {
            let from = to_text(&arg(&a, 1));
            let s = to_text(&arg(&a, 0));
            Value::Str(if from.is_empty() { s } else { s.replace(&from, &to_text(&arg(&a, 2))) })
        }
        Func::Locate => {
            let needle: Vec<char> = to_text(&arg(&a, 0)).chars().collect();
            let hay: Vec<char> = to_text(&arg(&a, 1)).chars().collect();
            let start = if a.len() > 2 { int_arg(&arg(&a, 2)).unwrap_or(1).max(1) as usize - 1 } else { 0 };
            if needle.is_empty() {
                return Ok(Value::Int(if start <= hay.len() { start as i64 + 1 } else { 0 }));
            }
            let found =
                (start..hay.len().saturating_sub(needle.len() - 1)).find(|&i| hay[i..i + needle.len()] == needle[..]);
            Value::Int(found.map(|i| i as i64 + 1).unwrap_or(0))
        }
        other => unreachable!("{other:?} is not one of these functions (`call` dispatches by kind)"),
    })
}

/// Functions of bytes, encodings and patterns: character codes, hex,
/// hashes, quoting, regular expressions, collation weights.
fn call_encoding(f: Func, a: Vec<Value>) -> SqlResult<Value> {
    let arg = |a: &Vec<Value>, i: usize| a.get(i).cloned().unwrap_or(Value::Null);
    Ok(match f {
        Func::Quote => match &a[0] {
            Value::Null => Value::Str("NULL".into()),
            v => {
                let mut out = String::from("'");
                for ch in to_text(v).chars() {
                    match ch {
                        '\\' => out.push_str("\\\\"),
                        '\'' => out.push_str("\\'"),
                        '\0' => out.push_str("\\0"),
                        '\x1a' => out.push_str("\\Z"),
                        c => out.push(c),
                    }
                }
                out.push('\'');
                Value::Str(out)
            }
        },
        Func::Ascii => Value::Int(match &a[0] {
            Value::Bytes(b) => b.first().copied().unwrap_or(0),
            v => to_text(v).bytes().next().unwrap_or(0),
        } as i64),
        Func::Char => {
            // Each integer's bytes, most significant first, without leading
            // zero bytes; NULLs are skipped.
            let mut bytes = Vec::new();
            for v in a.iter().filter(|v| !v.is_null()) {
                let n = match numeric(v) {
                    Value::UInt(u) => u,
                    n => n.as_f64().map_or(0, |x| x.round() as i64 as u64),
                };
                let be = (n as u32).to_be_bytes();
                let skip = be.iter().take_while(|b| **b == 0).count().min(3);
                bytes.extend_from_slice(&be[skip..]);
            }
            match String::from_utf8(bytes) {
                Ok(s) => Value::Str(s),
                Err(e) => Value::Bytes(e.into_bytes()),
            }
        }
        Func::Hex => Value::Str(match &a[0] {
            Value::Bytes(b) => b.iter().map(|x| format!("{x:02X}")).collect(),
            Value::Str(s) => s.bytes().map(|x| format!("{x:02X}")).collect(),
            v => match numeric(v) {
                Value::UInt(u) => format!("{u:X}"),
                n => format!("{:X}", n.as_f64().map_or(0, |x| x.round() as i64)),
            },
        }),
        Func::Unhex => {
            let text = to_text(&a[0]);
            let digits: Option<Vec<u8>> = text.chars().map(|c| c.to_digit(16).map(|d| d as u8)).collect();
            match digits {
                Some(d) => {
                    // An odd count has an implied leading zero.
                    let d = if d.len() % 2 == 1 { std::iter::once(0).chain(d).collect() } else { d };
                    Value::Bytes(d.chunks(2).map(|p| p[0] << 4 | p[1]).collect())
                }
                None => Value::Null,
            }
        }
        Func::ToBase64 => Value::Str(to_base64(&match &a[0] {
            Value::Bytes(b) => b.clone(),
            v => to_text(v).into_bytes(),
        })),
        Func::FromBase64 => from_base64(&to_text(&a[0])).map_or(Value::Null, Value::Bytes),
        Func::Md5 | Func::Sha1 | Func::Sha2 => {
            use sha2::Digest;
            let bytes = match &a[0] {
                Value::Bytes(b) => b.clone(),
                v => to_text(v).into_bytes(),
            };
            let digest: Vec<u8> = match f {
                Func::Md5 => md5::Md5::digest(&bytes).to_vec(),
                Func::Sha1 => sha1::Sha1::digest(&bytes).to_vec(),
                _ => match int_arg(&a[1]) {
                    Some(0 | 256) => sha2::Sha256::digest(&bytes).to_vec(),
                    Some(224) => sha2::Sha224::digest(&bytes).to_vec(),
                    Some(384) => sha2::Sha384::digest(&bytes).to_vec(),
                    Some(512) => sha2::Sha512::digest(&bytes).to_vec(),
                    _ => return Ok(Value::Null),
                },
            };
            Value::Str(digest.iter().map(|x| format!("{x:02x}")).collect())
        }
        Func::Fold => latsdb_types::Collation::GeneralCi.fold_value(arg(&a, 0)),
        Func::Weight => crate::exec::weight(&arg(&a, 0), latsdb_types::Collation::GeneralCi).into_owned(),
        Func::Collate(_) | Func::Implicit(_) => arg(&a, 0),
        Func::RegexpLike => crate::regexp::like(&a)?,
        Func::RegexpInstr => crate::regexp::instr(&a)?,
        Func::RegexpSubstr => crate::regexp::substr(&a)?,
        Func::RegexpReplace => crate::regexp::replace(&a)?,
        other => unreachable!("{other:?} is not one of these functions (`call` dispatches by kind)"),
    })
}

/// Numeric functions.
fn call_numbers(f: Func, a: Vec<Value>) -> SqlResult<Value> {
    let arg = |a: &Vec<Value>, i: usize| a.get(i).cloned().unwrap_or(Value::Null);
    Ok(match f {
        Func::Format => {
            let digits = int_arg(&a[1]).unwrap_or(0).clamp(0, 30) as u8;
            let number = match numeric(&a[0]) {
                Value::Float(f) if f.is_finite() => Decimal::of_double(f),
                Value::Float(_) => None,
                Value::Decimal(d) => Some(d),
                Value::Int(i) => Some(Decimal::new(i as i128, 0)),
                Value::UInt(u) => Some(Decimal::new(u as i128, 0)),
                _ => None,
            };
            match number.and_then(|d| d.rescale(digits)) {
                Some(d) => Value::Str(thousands(&d.to_string())),
                None => Value::Null,
            }
        }
        Func::Conv => conv(&a[0], int_arg(&a[1]).unwrap_or(0), int_arg(&a[2]).unwrap_or(0)),
        Func::Crc32 => Value::Int(match &a[0] {
            Value::Bytes(b) => crc32fast::hash(b),
            v => crc32fast::hash(to_text(v).as_bytes()),
        } as i64),
        Func::Truncate => {
            let digits = int_arg(&a[1]).unwrap_or(0);
            round_to(numeric(&a[0]), digits, true)
        }
        Func::Pow => float_or_null(float(&a[0]).powf(float(&a[1]))),
        Func::Sqrt => float_or_null(float(&a[0]).sqrt()),
        Func::Exp => float_or_null(float(&a[0]).exp()),
        Func::Log => {
            let (base, x) =
                if a.len() > 1 { (float(&a[0]), float(&a[1])) } else { (std::f64::consts::E, float(&a[0])) };
            if x <= 0.0 || base <= 0.0 || base == 1.0 {
                Value::Null
            } else {
                float_or_null(x.ln() / base.ln())
            }
        }
        Func::Log2 | Func::Log10 => {
            let x = float(&a[0]);
            if x <= 0.0 {
                Value::Null
            } else {
                float_or_null(if f == Func::Log2 { x.log2() } else { x.log10() })
            }
        }
        Func::Sign => Value::Int(match float(&a[0]) {
            x if x > 0.0 => 1,
            x if x < 0.0 => -1,
            _ => 0,
        }),
        Func::Pi => Value::Float(std::f64::consts::PI),
        Func::Rand => {
            let mut b = [0u8; 8];
            if getrandom::fill(&mut b).is_err() {
                return Err(SqlError::general("no randomness available for RAND()"));
            }
            // 53 random bits: uniform in [0, 1).
            Value::Float((u64::from_le_bytes(b) >> 11) as f64 / (1u64 << 53) as f64)
        }
        Func::DecimalScale(scale) => match arg(&a, 0) {
            Value::Decimal(d) => d.rescale(scale).map_or(Value::Decimal(d), Value::Decimal),
            Value::Int(i) => Decimal::new(i as i128, 0).rescale(scale).map_or(Value::Int(i), Value::Decimal),
            Value::UInt(u) => Decimal::new(u as i128, 0).rescale(scale).map_or(Value::UInt(u), Value::Decimal),
            other => other,
        },
        Func::Abs => match numeric(&arg(&a, 0)) {
            Value::Int(i) => i.checked_abs().map(Value::Int).unwrap_or(Value::UInt(i.unsigned_abs())),
            Value::Decimal(d) => Value::Decimal(Decimal::new(d.unscaled.abs(), d.scale)),
            Value::UInt(u) => Value::UInt(u),
            v => Value::Float(v.as_f64().unwrap_or(0.0).abs()),
        },
        Func::Ceil | Func::Floor => match numeric(&arg(&a, 0)) {
            v @ (Value::Int(_) | Value::UInt(_)) => v,
            v => {
                let x = v.as_f64().unwrap_or(0.0);
                let r = if f == Func::Ceil { x.ceil() } else { x.floor() };
                if matches!(v, Value::Decimal(_)) && r.abs() < 9.2e18 {
                    Value::Int(r as i64)
                } else {
                    Value::Float(r)
                }
            }
        },
        Func::Round => {
            let digits = if a.len() > 1 { int_arg(&arg(&a, 1)).unwrap_or(0) } else { 0 };
            round_to(numeric(&arg(&a, 0)), digits, false)
        }
        Func::BitCount => match &a[0] {
            Value::Null => Value::Null,
            v => Value::Int(bits_of(v).count_ones() as i64),
        },
        other => unreachable!("{other:?} is not one of these functions (`call` dispatches by kind)"),
    })
}

/// Date and time functions.
fn call_dates(f: Func, a: Vec<Value>, env: &Env) -> SqlResult<Value> {
    let any_null = |a: &Vec<Value>| a.iter().any(|v| v.is_null());
    Ok(match f {
        Func::ToDays => match civil(&a[0]) {
            Some(c) => Value::Int(c.days + DAYS_BEFORE_1970),
            None => Value::Null,
        },
        Func::FromDays => match int_arg(&a[0]) {
            // MySQL's day numbers count from year 0; before year 1 is no date.
            Some(n) if n >= 366 && n - DAYS_BEFORE_1970 <= i32::MAX as i64 => {
                Value::Date((n - DAYS_BEFORE_1970) as i32)
            }
            Some(_) => Value::Null,
            None => Value::Null,
        },
        Func::TimestampDiff(unit) => match (datetime_micros(&a[0]), datetime_micros(&a[1])) {
            (Some(x), Some(y)) => Value::Int(crate::dates::diff(x, y, unit)),
            _ => Value::Null,
        },
        Func::Week | Func::WeekOfYear | Func::YearWeek => {
            use crate::dates::Week;
            let Some(c) = civil(&a[0]) else { return Ok(Value::Null) };
            let mode = match (f, a.get(1)) {
                (Func::WeekOfYear, _) => 3,
                (_, None) => 0,
                (_, Some(m)) => match int_arg(m) {
                    Some(m) => m,
                    None => return Ok(Value::Null),
                },
            };
            let behaviour = Week::of_mode(mode);
            if f == Func::YearWeek {
                let (week, year) = c.week(behaviour | Week::YEAR);
                Value::Int(year * 100 + week)
            } else {
                Value::Int(c.week(behaviour).0)
            }
        }
        Func::StrToDate => {
            if any_null(&a) {
                return Ok(Value::Null);
            }
            match crate::dates::parse(&to_text(&a[0]), &to_text(&a[1])) {
                Some(crate::dates::Parsed::Date(days)) => match i32::try_from(days) {
                    Ok(d) => Value::Date(d),
                    Err(_) => Value::Null,
                },
                Some(crate::dates::Parsed::DateTime(us)) => Value::DateTime(us),
                Some(crate::dates::Parsed::Time(t)) => Value::Str(t),
                None => Value::Null,
            }
        }
        Func::MakeDate => {
            // MAKEDATE(year, day_of_year): years 0-69 are 2000-2069 and
            // 70-99 are 1970-1999, as for two-digit years.
            let (Some(year), Some(day)) = (int_arg(&a[0]), int_arg(&a[1])) else {
                return Ok(Value::Null);
            };
            let year = crate::dates::two_digit_year(year);
            if !(1..=3_660_000).contains(&day) || !(0..=9999).contains(&year) {
                return Ok(Value::Null);
            }
            let days = value::days_from_civil(year, 1, 1) + day - 1;
            if days >= value::days_from_civil(10000, 1, 1) {
                return Ok(Value::Null);
            }
            Value::Date(days as i32)
        }
        Func::LastDay => match civil(&a[0]) {
            Some(c) => {
                let next = crate::dates::add(c.days * 86_400_000_000, 1, crate::dates::Unit::Month);
                match next.map(crate::dates::Civil::from_micros) {
                    Some(n) => Value::Date((n.days - n.day as i64) as i32),
                    None => Value::Null,
                }
            }
            None => Value::Null,
        },
        Func::DayName => civil(&a[0]).map_or(Value::Null, |c| Value::Str(crate::dates::format(&c, "%W"))),
        Func::MonthName => civil(&a[0]).map_or(Value::Null, |c| Value::Str(crate::dates::format(&c, "%M"))),
        Func::FromUnixTime => match numeric(&a[0]).as_f64() {
            Some(secs) if (0.0..=32_536_771_199.0).contains(&secs) => Value::DateTime((secs * 1e6).round() as i64),
            _ => Value::Null,
        },
        Func::DatePart(part) => match (&a[0], time_part(&a[0], part)) {
            (_, Some(n)) => Value::Int(n),
            (Value::Time(_), None) => Value::Null,
            (v, None) => civil(v).map_or(Value::Null, |c| Value::Int(c.part(part))),
        },
        Func::DateOf => civil(&a[0]).map_or(Value::Null, |c| Value::Date(c.days as i32)),
        Func::DateFormat => match civil(&a[0]) {
            Some(c) => Value::Str(crate::dates::format(&c, &to_text(&a[1]))),
            None => Value::Null,
        },
        Func::ExtractCompound(compound) => match civil(&a[0]).and_then(|c| compound.extract(&c)) {
            Some(n) => Value::Int(n),
            None => Value::Null,
        },
        Func::DateAdd(..) | Func::DateAddCompound(..) => {
            let Some(us) = datetime_micros(&a[0]) else { return Ok(Value::Null) };
            let (amount, subtract) = match f {
                Func::DateAdd(unit, subtract) => (interval_count(&a[1], unit), subtract),
                Func::DateAddCompound(_, subtract) if a[1].is_null() => (None, subtract),
                Func::DateAddCompound(compound, subtract) => (compound.amount(&to_text(&a[1])), subtract),
                _ => (None, false),
            };
            let Some((n, unit)) = amount else { return Ok(Value::Null) };
            let n = if subtract { n.checked_neg().unwrap_or(i64::MAX) } else { n };
            let date_only = match &a[0] {
                Value::Date(_) => true,
                Value::Str(s) => value::parse_date(s).is_some() && s.trim().len() <= 10,
                _ => false,
            };
            match crate::dates::add(us, n, unit) {
                Some(out) if date_only && unit.keeps_dates() => Value::Date(out.div_euclid(86_400_000_000) as i32),
                Some(out) => Value::DateTime(out),
                None => Value::Null,
            }
        }
        Func::DateDiff => match (civil(&a[0]), civil(&a[1])) {
            (Some(x), Some(y)) => Value::Int(x.days - y.days),
            _ => Value::Null,
        },
        Func::UnixTimestamp => {
            let micros = match a.first() {
                None => env.session.session_value(&SessionValue::Now(0))?,
                Some(v) => cast(v.clone(), CastTo::DateTime(6))?,
            };
            match micros {
                Value::DateTime(us) | Value::Timestamp(us) => Value::Int(us.div_euclid(1_000_000)),
                _ => Value::Null,
            }
        }
        other => unreachable!("{other:?} is not one of these functions (`call` dispatches by kind)"),
    })
}

/// How many units an INTERVAL's value stands for: whole units, except that
/// seconds may have a fraction (then counted in microseconds).
fn interval_count(v: &Value, unit: crate::dates::Unit) -> Option<(i64, crate::dates::Unit)> {
    let n = numeric(v);
    match v {
        Value::Int(i) => Some((*i, unit)),
        Value::UInt(u) => i64::try_from(*u).ok().map(|n| (n, unit)),
        _ if unit == crate::dates::Unit::Second => {
            n.as_f64().map(|f| ((f * 1e6).round() as i64, crate::dates::Unit::Microsecond))
        }
        _ => n.as_f64().map(|f| (f.round() as i64, unit)),
    }
}

/// Longest string the string functions build (MySQL's default
/// max_allowed_packet, where it returns NULL too).
const MAX_STRING_CHARS: usize = 64 << 20;

fn float(v: &Value) -> f64 {
    numeric(v).as_f64().unwrap_or(0.0)
}

/// An integer argument (a length, position, count or number of digits) as
/// MySQL takes it: decimals and floats rounded half away from zero, text
/// by its number; None when it has no integer value in range.
pub(crate) fn int_arg(v: &Value) -> Option<i64> {
    match numeric(v) {
        Value::Decimal(d) => {
            let p = 10i128.pow(d.scale as u32);
            let (q, r) = (d.unscaled / p, d.unscaled % p);
            let q = if r.abs() * 2 >= p { q + r.signum() } else { q };
            i64::try_from(q).ok()
        }
        Value::Float(f) if f.is_finite() && f.abs() < 9.2e18 => Some(f.round() as i64),
        // Past i64: as large as a length or count gets.
        Value::UInt(u) => Some(i64::try_from(u).unwrap_or(i64::MAX)),
        other => other.as_i64(),
    }
}

/// NaN and infinities are NULL, as in MySQL.
fn float_or_null(x: f64) -> Value {
    if x.is_finite() {
        Value::Float(x)
    } else {
        Value::Null
    }
}

/// A date or datetime argument taken apart; None when it is not one.
/// TO_DAYS('1970-01-01'): MySQL numbers days from year 0.
const DAYS_BEFORE_1970: i64 = 719_528;

/// "1234567.891" as "1,234,567.891".
fn thousands(plain: &str) -> String {
    let (sign, rest) = plain.strip_prefix('-').map_or(("", plain), |r| ("-", r));
    let (int, frac) = rest.split_once('.').map_or((rest, None), |(i, f)| (i, Some(f)));
    let mut out = String::with_capacity(plain.len() + int.len() / 3);
    out.push_str(sign);
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if let Some(f) = frac {
        out.push('.');
        out.push_str(f);
    }
    out
}

/// CONV(n, from, to): n's digits in base |from| (2 to 36) written in base
/// |to|, as 64-bit unsigned values; a negative base reads or writes signed.
fn conv(n: &Value, from: i64, to: i64) -> Value {
    let (from_abs, to_abs) = (from.unsigned_abs(), to.unsigned_abs());
    if !(2..=36).contains(&from_abs) || !(2..=36).contains(&to_abs) {
        return Value::Null;
    }
    let text = to_text(n);
    let text = text.trim();
    if text.is_empty() {
        return Value::Null;
    }
    let (negative, digits) = text.strip_prefix('-').map_or((false, text), |d| (true, d));
    let mut value: u64 = 0;
    for c in digits.chars() {
        match c.to_digit(from_abs as u32) {
            Some(d) => value = value.saturating_mul(from_abs).saturating_add(d as u64),
            None => break,
        }
    }
    if negative {
        value = value.wrapping_neg();
    }
    let (minus, mut magnitude) =
        if to < 0 && (value as i64) < 0 { (true, (value as i64).unsigned_abs()) } else { (false, value) };
    let mut out = Vec::new();
    loop {
        let d = (magnitude % to_abs) as u32;
        out.push(std::char::from_digit(d, to_abs as u32).unwrap_or('0').to_ascii_uppercase());
        magnitude /= to_abs;
        if magnitude == 0 {
            break;
        }
    }
    if minus {
        out.push('-');
    }
    Value::Str(out.into_iter().rev().collect())
}

/// HOUR(), MINUTE(), SECOND() and MICROSECOND() of a TIME, which may pass
/// 24 hours and be negative (MySQL gives the parts of its magnitude).
fn time_part(v: &Value, part: crate::dates::Part) -> Option<i64> {
    use crate::dates::Part;
    let Value::Time(us) = v else { return None };
    let magnitude = us.saturating_abs();
    let seconds = magnitude / 1_000_000;
    match part {
        Part::Hour => Some(seconds / 3600),
        Part::Minute => Some(seconds / 60 % 60),
        Part::Second => Some(seconds % 60),
        Part::Microsecond => Some(magnitude % 1_000_000),
        _ => None,
    }
}

fn civil(v: &Value) -> Option<crate::dates::Civil> {
    datetime_micros(v).map(crate::dates::Civil::from_micros)
}

/// A date or datetime argument as microseconds since 1970; None when it is
/// not one.
fn datetime_micros(v: &Value) -> Option<i64> {
    match cast(v.clone(), CastTo::DateTime(6)) {
        Ok(Value::DateTime(us)) => Some(us),
        _ => None,
    }
}

/// ROUND (half away from zero; floats half to even, as MySQL) and TRUNCATE
/// to `digits` places, left of the point when negative. An integer stays
/// an integer; a decimal takes `digits` as its scale (ROUND(1.2, 3) is
/// 1.200).
fn round_to(v: Value, digits: i64, truncate: bool) -> Value {
    let digits = digits.clamp(-38, 30);
    let whole = |n: i128| -> i128 {
        if digits >= 0 {
            return n;
        }
        let Some(p) = 10i128.checked_pow((-digits) as u32) else { return 0 };
        let q = n / p;
        let r = n % p;
        let q = if !truncate && r.abs() * 2 >= p { q + n.signum() } else { q };
        q.saturating_mul(p)
    };
    match v {
        Value::Int(i) => {
            let n = whole(i as i128);
            i64::try_from(n).map(Value::Int).unwrap_or(Value::Decimal(Decimal::new(n, 0)))
        }
        Value::UInt(u) => {
            let n = whole(u as i128);
            u64::try_from(n).map(Value::UInt).unwrap_or(Value::Decimal(Decimal::new(n, 0)))
        }
        Value::Decimal(d) if digits < 0 => {
            // Straight from the unscaled value: rounding to an integer
            // first would round twice.
            let places = d.scale as u32 + (-digits) as u32;
            let Some(p) = 10i128.checked_pow(places) else { return Value::Decimal(Decimal::new(0, 0)) };
            let (q, r) = (d.unscaled / p, d.unscaled % p);
            let q = if !truncate && r.abs() * 2 >= p { q + d.unscaled.signum() } else { q };
            Value::Decimal(Decimal::new(q.saturating_mul(10i128.pow((-digits) as u32)), 0))
        }
        Value::Decimal(d) => {
            let scale = digits as u8;
            let cut = if scale < d.scale && truncate {
                Some(Decimal::new(d.unscaled / 10i128.pow((d.scale - scale) as u32), scale))
            } else {
                d.rescale(scale)
            };
            Value::Decimal(cut.unwrap_or(d))
        }
        v => {
            let x = v.as_f64().unwrap_or(0.0);
            let m = 10f64.powi(digits as i32);
            Value::Float(if truncate { (x * m).trunc() / m } else { (x * m).round_ties_even() / m })
        }
    }
}

pub(crate) fn cast(v: Value, to: CastTo) -> SqlResult<Value> {
    if v.is_null() {
        return Ok(Value::Null);
    }
    Ok(match to {
        CastTo::Signed => match numeric(&v) {
            Value::Int(i) => Value::Int(i),
            Value::UInt(u) => Value::Int(u as i64),
            n => Value::Int(n.as_f64().unwrap_or(0.0).round() as i64),
        },
        CastTo::Unsigned => match numeric(&v) {
            Value::Int(i) => Value::UInt(i as u64),
            Value::UInt(u) => Value::UInt(u),
            n => Value::UInt(n.as_f64().unwrap_or(0.0).round().max(0.0) as u64),
        },
        CastTo::Char => Value::Str(to_text(&v)),
        CastTo::FloatText => Value::Str(format_float(numeric(&v).as_f64().unwrap_or(0.0) as f32)),
        CastTo::PlacesText(places) => Value::Str(format_double_places(numeric(&v).as_f64().unwrap_or(0.0), places)),
        CastTo::BitBytes(width) => match v {
            Value::UInt(bits) => Value::Bytes(latsdb_types::mysql_types::bit_bytes(bits, width)),
            other => other,
        },
        CastTo::Binary => Value::Bytes(match v {
            Value::Bytes(b) => b,
            other => to_text(&other).into_bytes(),
        }),
        CastTo::Double => Value::Float(numeric(&v).as_f64().unwrap_or(0.0)),
        CastTo::Decimal(p, s) => {
            let column = ColumnDef::new("CAST", ColumnType::Decimal { precision: p.clamp(1, 38), scale: s.min(p) });
            to_column(v, &column)?
        }
        CastTo::Date => match v {
            Value::Date(d) => Value::Date(d),
            Value::DateTime(us) | Value::Timestamp(us) => Value::Date(us.div_euclid(86_400_000_000) as i32),
            other => value::parse_date(&to_text(&other)).map(Value::Date).unwrap_or(Value::Null),
        },
        CastTo::DateTime(digits) => match v {
            Value::Date(d) => Value::DateTime(d as i64 * 86_400_000_000),
            Value::DateTime(us) | Value::Timestamp(us) => Value::DateTime(crate::session::to_digits(us, digits)),
            other => value::parse_datetime(&to_text(&other))
                .map(|us| Value::DateTime(crate::session::to_digits(us, digits)))
                .unwrap_or(Value::Null),
        },
        CastTo::Time(digits) => {
            let micros = match v {
                Value::Time(us) => Some(us),
                Value::DateTime(us) | Value::Timestamp(us) => Some(us.rem_euclid(86_400_000_000)),
                Value::Date(_) => Some(0),
                other => latsdb_types::mysql_types::parse_time(&to_text(&other)),
            };
            micros.map_or(Value::Null, |us| {
                Value::Time(us.signum() * crate::session::to_digits(us.saturating_abs(), digits))
            })
        }
    })
}

/// Converts a value for storing into a column as MySQL does in strict
/// mode: numbers from strings, strings from numbers, dates from strings;
/// anything that does not fit is an error naming the column.
/// A value as a key or range bound of `column` compares it: as
/// [`to_column`], but a TIMESTAMP outside its range is a value no row holds
/// rather than an error, so `ts >= '1960-01-01'` reads the range.
pub fn to_key_column(v: Value, column: &ColumnDef) -> SqlResult<Value> {
    if column.ty != ColumnType::Timestamp {
        return to_column(v, column);
    }
    let as_datetime = ColumnDef { ty: ColumnType::DateTime, ..column.clone() };
    Ok(match to_column(v, &as_datetime)? {
        Value::DateTime(us) => Value::Timestamp(us),
        other => other,
    })
}

pub fn to_column(v: Value, column: &ColumnDef) -> SqlResult<Value> {
    let ty = column.ty;
    let shown = v.clone();
    let converted = match (&v, ty) {
        (Value::Null, _) => v,
        (Value::Str(s), ColumnType::Integer { .. }) => {
            let t = s.trim();
            if let Ok(i) = t.parse::<i64>() {
                Value::Int(i)
            } else if let Ok(u) = t.parse::<u64>() {
                Value::UInt(u)
            } else if let Some(d) = Decimal::parse(t) {
                Value::Decimal(d.rescale(0).unwrap_or(d))
            } else {
                return Err(wrong_value(&v, column));
            }
        }
        (Value::Float(f), ColumnType::Integer { .. }) => {
            if !f.is_finite() || f.abs() > 1.9e19 {
                return Err(out_of_range(&v, column));
            }
            // Stored as MySQL does, by rint(): halves to even (2.5 -> 2).
            let r = f.round_ties_even();
            if r < 0.0 {
                Value::Int(r as i64)
            } else {
                Value::UInt(r as u64)
            }
        }
        (Value::Decimal(d), ColumnType::Integer { .. }) => Value::Decimal(d.rescale(0).unwrap_or(*d)),
        (Value::Str(s), ColumnType::Float | ColumnType::Double) => {
            Value::Float(s.trim().parse::<f64>().map_err(|_| wrong_value(&v, column))?)
        }
        (
            Value::Bool(b),
            ColumnType::Integer { .. } | ColumnType::Float | ColumnType::Double | ColumnType::Decimal { .. },
        ) => Value::Int(*b as i64),
        (Value::Str(s), ColumnType::Boolean) => match s.trim().parse::<i64>() {
            Ok(i) => Value::Bool(i != 0),
            Err(_) => match s.trim().to_ascii_lowercase().as_str() {
                "true" => Value::Bool(true),
                "false" => Value::Bool(false),
                _ => return Err(wrong_value(&v, column)),
            },
        },
        (Value::Float(f), ColumnType::Boolean) => Value::Bool(*f != 0.0),
        (Value::Decimal(d), ColumnType::Boolean) => Value::Bool(d.unscaled != 0),
        (Value::Bytes(b), ColumnType::Char(_) | ColumnType::VarChar(_) | ColumnType::Text) => {
            Value::Str(String::from_utf8(b.clone()).map_err(|_| wrong_value(&v, column))?)
        }
        // A date and time into a DATE keeps the day (value::parse_date
        // reads dates alone, in MySQL's relaxed forms).
        (Value::Str(t), ColumnType::Date) if value::parse_date(t).is_none() => match value::parse_datetime(t) {
            Some(us) => Value::Date(us.div_euclid(86_400_000_000) as i32),
            None => v,
        },
        // BINARY(n) is padded with zero bytes to its length, as in MySQL.
        (Value::Str(_) | Value::Bytes(_), ColumnType::Binary(n)) => {
            let mut b = match &v {
                Value::Str(s) => s.as_bytes().to_vec(),
                Value::Bytes(b) => b.clone(),
                _ => unreachable!("matched above"),
            };
            if b.len() < n as usize {
                b.resize(n as usize, 0);
            }
            Value::Bytes(b)
        }
        (Value::Str(_) | Value::Bytes(_), _) => v,
        (_, ColumnType::Char(_) | ColumnType::VarChar(_) | ColumnType::Text) => Value::Str(to_text(&v)),
        (_, ColumnType::Binary(_) | ColumnType::VarBinary(_) | ColumnType::Blob) => {
            Value::Bytes(to_text(&v).into_bytes())
        }
        (Value::Int(i), ColumnType::Date | ColumnType::DateTime | ColumnType::Timestamp) => {
            Value::Str(int_to_date_text(*i).ok_or_else(|| wrong_value(&v, column))?)
        }
        // A DATE keeps the day of a datetime (MySQL notes the truncation).
        (Value::DateTime(us) | Value::Timestamp(us), ColumnType::Date) => {
            Value::Date(us.div_euclid(86_400_000_000) as i32)
        }
        _ => v,
    };
    // Rounded after the type's checks; rounding up past the last second of
    // year 9999 ('9999-12-31 23:59:59.7' in a DATETIME) is a wrong value.
    let coerced = latsdb_types::value::coerce(converted, column).map(|v| to_fraction_digits(v, column.fraction_digits));
    match &coerced {
        Ok(Value::DateTime(us) | Value::Timestamp(us))
            if *us >= value::days_from_civil(10_000, 1, 1) * 86_400_000_000 =>
        {
            return Err(wrong_value(&shown, column));
        }
        Ok(Value::Time(us)) if us.saturating_abs() > latsdb_types::mysql_types::MAX_TIME_MICROS => {
            return Err(wrong_value(&shown, column));
        }
        // A TIMESTAMP holds '1970-01-01 00:00:01' to '2038-01-19
        // 03:14:07.999999' UTC; MySQL's strict mode refuses the rest.
        Ok(Value::Timestamp(us)) if !latsdb_types::mysql_types::TIMESTAMP_RANGE.contains(us) => {
            return Err(wrong_value(&shown, column));
        }
        _ => {}
    }
    coerced.map_err(|e| match e.code {
        ErrorCode::TypeError if e.message.contains("cannot be NULL") => {
            SqlError::new(crate::error::ER_BAD_NULL, "23000", format!("Column '{}' cannot be null", column.name))
        }
        ErrorCode::TypeError if e.message.contains("too long") => SqlError::new(
            ER_DATA_TOO_LONG,
            "22001",
            format!("Data too long for column '{}': {}", column.name, e.message),
        ),
        // MySQL's words for a BIT value wider than the column.
        ErrorCode::TypeError if matches!(column.ty, ColumnType::Bit(_)) && e.message.contains("out of range") => {
            SqlError::new(
                ER_DATA_TOO_LONG,
                "22001",
                format!("Data too long for column '{}' at row 1: {}", column.name, e.message),
            )
        }
        ErrorCode::TypeError if e.message.contains("out of range") => out_of_range(&shown, column),
        // MySQL's strict mode refuses a value that is no member so.
        ErrorCode::TypeError if e.message.contains("is not a member") => SqlError::new(
            ER_DATA_TRUNCATED,
            "01000",
            format!("Data truncated for column '{}' at row 1: {}", column.name, e.message),
        ),
        _ if matches!(
            column.ty,
            ColumnType::Date | ColumnType::DateTime | ColumnType::Timestamp | ColumnType::Time
        ) =>
        {
            wrong_value(&shown, column)
        }
        _ => SqlError::new(
            ER_TRUNCATED_WRONG_VALUE_FOR_FIELD,
            "HY000",
            format!("{} (column '{}')", e.message, column.name),
        ),
    })
}

/// A DATETIME, TIMESTAMP or TIME value rounded to the digits of a second its
/// column keeps, half up as MySQL rounds ('10:00:00.5' in a DATETIME is
/// 10:00:01); other values as they are.
fn to_fraction_digits(v: Value, digits: u8) -> Value {
    let step = crate::session::fraction_step(digits);
    let round = |us: i64| (us + step / 2).div_euclid(step) * step;
    match v {
        Value::DateTime(us) => Value::DateTime(round(us)),
        Value::Timestamp(us) => Value::Timestamp(round(us)),
        // A negative time rounds away from zero as a positive one does.
        Value::Time(us) => Value::Time(us.signum() * round(us.saturating_abs())),
        other => other,
    }
}

/// `20240131` or `20240131123000` as a date(time) string.
fn int_to_date_text(i: i64) -> Option<String> {
    let s = i.to_string();
    match s.len() {
        8 => Some(format!("{}-{}-{}", &s[..4], &s[4..6], &s[6..8])),
        14 => Some(format!("{}-{}-{} {}:{}:{}", &s[..4], &s[4..6], &s[6..8], &s[8..10], &s[10..12], &s[12..])),
        _ => None,
    }
}

fn wrong_value(v: &Value, column: &ColumnDef) -> SqlError {
    match column.ty {
        // MySQL's code for a date it cannot read ('2023-02-29').
        ColumnType::Date | ColumnType::DateTime | ColumnType::Timestamp | ColumnType::Time => SqlError::new(
            crate::error::ER_TRUNCATED_WRONG_VALUE,
            "22007",
            format!(
                "Incorrect {} value: '{}' for column '{}'",
                match column.ty {
                    ColumnType::Date => "date",
                    ColumnType::Time => "time",
                    _ => "datetime",
                },
                to_text(v),
                column.name
            ),
        ),
        _ => SqlError::new(
            ER_TRUNCATED_WRONG_VALUE_FOR_FIELD,
            "HY000",
            format!("Incorrect {} value: '{}' for column '{}'", column.ty.sql_name(), to_text(v), column.name),
        ),
    }
}

/// [`to_column`] for INSERT IGNORE and UPDATE IGNORE, where MySQL turns
/// a value the column cannot hold into the nearest one it can (and warns):
/// a number out of range is clamped to the range, text too long is cut,
/// text that is no number is the number its prefix reads as, NULL in a NOT
/// NULL column is the type's zero. Other errors stay errors.
/// With the value, the error it stands in for (MySQL's warning), if any.
pub fn to_column_ignoring(v: Value, column: &ColumnDef) -> SqlResult<(Value, Option<SqlError>)> {
    let e = match to_column(v.clone(), column) {
        Ok(v) => return Ok((v, None)),
        Err(e) => e,
    };
    let ty = column.ty;
    let nearest = match (e.code, ty) {
        (crate::error::ER_BAD_NULL, _) if v.is_null() => match ty {
            ColumnType::Integer { .. } | ColumnType::Boolean => Value::Int(0),
            ColumnType::Float | ColumnType::Double => Value::Float(0.0),
            ColumnType::Decimal { .. } => Value::Int(0),
            ColumnType::Char(_) | ColumnType::VarChar(_) | ColumnType::Text => Value::Str(String::new()),
            ColumnType::Binary(_) | ColumnType::VarBinary(_) | ColumnType::Blob => Value::Bytes(Vec::new()),
            ColumnType::Time => Value::Time(0),
            ColumnType::Year | ColumnType::Bit(_) => Value::UInt(0),
            ColumnType::Set => Value::Str(String::new()),
            _ => return Err(e),
        },
        // A BIT too wide for its column is all ones, as MySQL stores it.
        (ER_DATA_TOO_LONG, ColumnType::Bit(n)) => Value::UInt(if n >= 64 { u64::MAX } else { (1u64 << n) - 1 }),
        (ER_DATA_TOO_LONG, ColumnType::Char(n) | ColumnType::VarChar(n)) => {
            Value::Str(to_text(&v).chars().take(n as usize).collect())
        }
        (ER_DATA_TOO_LONG, ColumnType::Binary(n) | ColumnType::VarBinary(n)) => match v {
            Value::Bytes(mut b) => {
                b.truncate(n as usize);
                Value::Bytes(b)
            }
            other => Value::Bytes(to_text(&other).into_bytes().into_iter().take(n as usize).collect()),
        },
        (
            ER_WARN_DATA_OUT_OF_RANGE | ER_TRUNCATED_WRONG_VALUE_FOR_FIELD | crate::error::ER_TRUNCATED_WRONG_VALUE,
            _,
        ) => {
            let x = numeric(&v).as_f64().unwrap_or(0.0);
            match ty {
                ColumnType::Integer { width, unsigned: false } => {
                    let (lo, hi) = width.signed_range();
                    Value::Int(if x.is_nan() { 0 } else { x.clamp(lo as f64, hi as f64).round_ties_even() as i64 })
                }
                ColumnType::Integer { width, unsigned: true } => Value::UInt(if x.is_nan() {
                    0
                } else {
                    x.clamp(0.0, width.unsigned_max() as f64).round_ties_even() as u64
                }),
                ColumnType::Decimal { precision, scale } => {
                    // The largest value of DECIMAL(p, s): p - s nines, s more after the point.
                    let nines = 10i128.pow(precision as u32) - 1;
                    let max = Decimal::new(nines, scale);
                    if x >= max.to_f64() {
                        Value::Decimal(max)
                    } else if x <= -max.to_f64() {
                        Value::Decimal(Decimal::new(-nines, scale))
                    } else {
                        Value::Float(x)
                    }
                }
                ColumnType::Float => Value::Float(x.clamp(-(f32::MAX as f64), f32::MAX as f64)),
                ColumnType::Double if x.is_finite() => Value::Float(x),
                ColumnType::Double => Value::Float(if x > 0.0 { f64::MAX } else { -f64::MAX }),
                ColumnType::Year => Value::UInt(0),
                ColumnType::Time => nearest_time(&v),
                _ => return Err(e),
            }
        }
        _ => return Err(e),
    };
    match to_column(nearest, column) {
        Ok(v) => Ok((v, Some(e))),
        Err(_) => Err(e),
    }
}

/// The TIME INSERT IGNORE stores for a value beyond TIME's range: the
/// range's end on the value's side ('900:00:00' is 838:59:59), or
/// 00:00:00 for text that is no time at all.
fn nearest_time(v: &Value) -> Value {
    let text = to_text(v);
    let t = text.trim();
    let (negative, body) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t),
    };
    let hours_like =
        body.split([':', '.']).next().is_some_and(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_digit()));
    let max = latsdb_types::mysql_types::MAX_TIME_MICROS;
    Value::Time(match (hours_like, negative) {
        (false, _) => 0,
        (true, true) => -max,
        (true, false) => max,
    })
}

fn out_of_range(v: &Value, column: &ColumnDef) -> SqlError {
    SqlError::new(
        ER_WARN_DATA_OUT_OF_RANGE,
        "22003",
        format!("Out of range value '{}' for column '{}' ({})", to_text(v), column.name, column.ty.sql_name()),
    )
}

/// MySQL's TO_BASE64: the standard alphabet with padding, and a line break
/// after every 76 characters of output.
fn to_base64(bytes: &[u8]) -> String {
    use base64::Engine;
    let encoded = base64::engine::general_purpose::STANDARD.encode(bytes);
    let mut out = String::with_capacity(encoded.len() + encoded.len() / 76);
    for (i, line) in encoded.as_bytes().chunks(76).enumerate() {
        if i > 0 {
            out.push('\n');
        }
        // The engine's output is ASCII.
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
    }
    out
}

/// MySQL's FROM_BASE64: white space is skipped, and so are set bits after
/// the last byte ('YR==' is 'a'); anything else outside the alphabet, or
/// missing padding, makes NULL (None).
fn from_base64(text: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    const LENIENT: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new().with_decode_allow_trailing_bits(true),
    );
    let compact: String = text.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    LENIENT.decode(compact).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn division_by_a_decimal_of_many_places_does_not_overflow() {
        // Found by the sql_expressions fuzz target: 3333333333 / 0.333...
        // (37 places) shifted the dividend by 10^41, past i128.
        let a = Value::Int(3_333_333_333);
        let b = Value::Decimal(Decimal::parse(&format!("0.{}", "3".repeat(37))).unwrap());
        let q = arith_op(Arith::Div, &a, &b, false).unwrap();
        let f = q.as_f64().unwrap();
        assert!((f - 9_999_999_999.0).abs() < 1.0, "{q:?}");
        let small = arith_op(Arith::Div, &Value::Int(1), &Value::Decimal(Decimal::parse("0.5").unwrap()), false);
        assert_eq!(small.unwrap(), Value::Decimal(Decimal::parse("2.0000").unwrap()));
    }

    #[test]
    fn floats_print_six_significant_digits_as_mariadb_shows_them() {
        // Each pair: a value stored into a FLOAT column, and what MariaDB
        // 10.11 prints for it (checked by hand with the mariadb client).
        let seen = [
            (1.23456789, "1.23457"),
            (2.34567891, "2.34568"),
            (0.1, "0.1"),
            (123456789.0, "123457000"),
            (3.4e38, "3.4e38"),
            (1e-7, "0.0000001"),
            (0.000123456789, "0.000123457"),
            (1234567.0, "1234570"),
            (-2.5, "-2.5"),
            (1e15, "1e15"),
            (1e14, "100000000000000"),
            (1.23456e15, "1.23456e15"),
            (123.456789, "123.457"),
            (1.17549e-38, "1.17549e-38"),
            (16777217.0, "16777200"),
            (99999.95, "100000"),
            (1e-15, "0.000000000000001"),
            (1e-16, "1e-16"),
            (1.23456e-15, "0.00000000000000123456"),
            (1.5e20, "1.5e20"),
            (0.0, "0"),
        ];
        for (stored, shown) in seen {
            assert_eq!(format_float(stored as f32), shown, "FLOAT {stored}");
        }
    }

    /// DOUBLEs with fixed places as MariaDB 10.11 printed them (ROUND of
    /// a DOUBLE and what is computed from one).
    #[test]
    fn doubles_with_fixed_places_print_as_mariadb_prints_them() {
        let seen: [(f64, u8, &str); 11] = [
            (0.1, 2, "0.10"),
            (0.1, 20, "0.10000000000000000000"),
            (0.33 * 1.5, 2, "0.49"),
            (0.33 * 0.333, 3, "0.110"),
            (-0.0, 1, "0.0"),
            (-0.0, 2, "0.00"),
            (5.0, 2, "5.00"),
            (2.0, 0, "2"),
            (0.33 / 2.0, 6, "0.165000"),
            (123456789012345660.0, 2, "123456789012345660.00"),
            (33333333333333328000.0, 2, "33333333333333328000.00"),
        ];
        for (value, places, shown) in seen {
            assert_eq!(format_double_places(value, places), shown, "{value} with {places} places");
        }
    }
    use latsdb_types::schema::IntWidth;

    struct NoSession;
    impl SessionLookup for NoSession {
        fn session_value(&self, _: &SessionValue) -> SqlResult<Value> {
            Ok(Value::Null)
        }
    }

    fn eval(e: SExpr) -> Value {
        e.eval(&[], &Env { params: &[], session: &NoSession, strict_numbers: false }).unwrap()
    }
    fn c(v: impl Into<Value>) -> Box<SExpr> {
        Box::new(SExpr::Const(v.into()))
    }

    #[test]
    fn strings_compare_with_numbers_as_numbers() {
        assert_eq!(eval(SExpr::Cmp(Cmp::Eq, c(5i64), c("5"))), Value::Int(1));
        assert_eq!(eval(SExpr::Cmp(Cmp::Lt, c("10"), c(9i64))), Value::Int(0));
        assert_eq!(eval(SExpr::Cmp(Cmp::Eq, c("abc"), c("ABC"))), Value::Int(0), "strings compare as utf8mb4_bin");
    }

    #[test]
    fn text_compares_pad_space() {
        assert_eq!(eval(SExpr::Cmp(Cmp::Eq, c("a"), c("a  "))), Value::Int(1));
        assert_eq!(eval(SExpr::Cmp(Cmp::Lt, c("a\t"), c("a"))), Value::Int(1));
    }

    #[test]
    fn nullif_greatest_and_least_compare_under_their_collation_and_return_the_first_of_equals() {
        use latsdb_types::Collation::{Bin, GeneralCi};
        let call =
            |f: Func, args: &[&str]| eval(SExpr::Func(f, args.iter().map(|a| SExpr::Const((*a).into())).collect()));
        assert_eq!(call(Func::NullIf(GeneralCi), &["Crème ", "CREME"]), Value::Null);
        assert_eq!(call(Func::NullIf(Bin), &["a", "A"]), Value::Str("a".into()));
        assert_eq!(call(Func::NullIf(Bin), &["a ", "a"]), Value::Null, "PAD SPACE");
        assert_eq!(call(Func::Greatest(GeneralCi), &["b", "B", "a"]), Value::Str("b".into()));
        assert_eq!(call(Func::Greatest(GeneralCi), &["B", "b"]), Value::Str("B".into()));
        assert_eq!(call(Func::Greatest(Bin), &["B", "b"]), Value::Str("b".into()));
        assert_eq!(call(Func::Least(GeneralCi), &["b", "A", "a"]), Value::Str("A".into()));
        assert_eq!(call(Func::Least(Bin), &["a ", "a"]), Value::Str("a ".into()));
    }

    #[test]
    fn integer_arithmetic_is_exact_or_an_error() {
        let try_eval = |e: SExpr| e.eval(&[], &Env { params: &[], session: &NoSession, strict_numbers: false });
        let over = try_eval(SExpr::Arith(Arith::Add, c(i64::MAX), c(1i64))).unwrap_err();
        assert_eq!((over.code, over.message.contains("BIGINT value is out of range")), (1690, true));
        let over = try_eval(SExpr::Arith(Arith::Mul, c(u64::MAX), c(2i64))).unwrap_err();
        assert!(over.message.contains("BIGINT UNSIGNED"), "{}", over.message);
        // An unsigned operand keeps the result unsigned, so it may pass i64.
        assert_eq!(eval(SExpr::Arith(Arith::Add, c(i64::MAX as u64), c(1i64))), Value::UInt(1 << 63));
        let half = SExpr::Arith(Arith::IntDiv, c(u64::MAX), c(2i64));
        assert_eq!(eval(SExpr::Arith(Arith::Add, Box::new(half), c(1i64))), Value::UInt(1 << 63));
        assert_eq!(eval(SExpr::Arith(Arith::Mod, c(u64::MAX), c(1000i64))), Value::UInt(615));
        // A negative result of an unsigned operand is refused, as in MySQL.
        let below = try_eval(SExpr::Arith(Arith::Sub, c(0u64), c(1i64))).unwrap_err();
        assert_eq!((below.code, below.message.contains("BIGINT UNSIGNED")), (1690, true), "{}", below.message);
        assert!(try_eval(SExpr::Arith(Arith::Mul, c(-2i64), c(3u64))).is_err());
        assert_eq!(eval(SExpr::Arith(Arith::Sub, c(5u64), c(2i64))), Value::UInt(3));
        assert_eq!(eval(SExpr::Arith(Arith::Mod, c(-7i64), c(2u64))), Value::Int(-1));
        // Text in arithmetic stays a double, as in MySQL.
        assert_eq!(
            eval(SExpr::Arith(Arith::Add, c("9223372036854775807"), c(1i64))),
            Value::Float(9.223372036854776e18)
        );
    }

    #[test]
    fn bit_operators_work_on_64_unsigned_bits() {
        let bits = |op, a: Value, b: Value| eval(SExpr::Arith(op, c(a), c(b)));
        assert_eq!(bits(Arith::BitAnd, Value::Int(-1), Value::Int(255)), Value::UInt(255));
        assert_eq!(bits(Arith::BitXor, Value::Int(0), Value::UInt(u64::MAX)), Value::UInt(u64::MAX));
        assert_eq!(bits(Arith::ShiftLeft, Value::Int(1), Value::Int(64)), Value::UInt(0));
        assert_eq!(bits(Arith::ShiftRight, Value::Int(16), Value::Int(2)), Value::UInt(4));
        assert_eq!(bits(Arith::BitOr, Value::Float(2.5), Value::Int(0)), Value::UInt(3));
        assert_eq!(bits(Arith::BitOr, Value::Null, Value::Int(0)), Value::Null);
    }

    #[test]
    fn string_functions_of_mysql() {
        let f = |func, args: Vec<Value>| {
            call(func, args, &Env { params: &[], session: &NoSession, strict_numbers: false }).unwrap()
        };
        let s = |x: &str| Value::Str(x.into());
        assert_eq!(f(Func::SubstringIndex, vec![s("a.b.c"), s("."), Value::Int(2)]), s("a.b"));
        assert_eq!(f(Func::SubstringIndex, vec![s("a.b.c"), s("."), Value::Int(-1)]), s("c"));
        assert_eq!(f(Func::SubstringIndex, vec![s("a.b"), s("."), Value::Int(5)]), s("a.b"));
        assert_eq!(f(Func::FindInSet, vec![s("b"), s("a,b,c")]), Value::Int(2));
        assert_eq!(f(Func::FindInSet, vec![s("b,c"), s("a,b,c")]), Value::Int(0));
        assert_eq!(f(Func::Field, vec![Value::Null, Value::Null]), Value::Int(0));
        assert_eq!(f(Func::Field, vec![s("b"), s("a"), s("b")]), Value::Int(2));
        assert_eq!(f(Func::Elt, vec![Value::Int(2), s("x"), Value::Null]), Value::Null);
        assert_eq!(f(Func::Elt, vec![Value::Int(3), s("x"), s("y")]), Value::Null);
        assert_eq!(f(Func::Strcmp, vec![s("a"), s("a  ")]), Value::Int(0));
        assert_eq!(f(Func::InsertStr, vec![s("abcdef"), Value::Int(2), Value::Int(3), s("XY")]), s("aXYef"));
        assert_eq!(f(Func::InsertStr, vec![s("abc"), Value::Int(2), Value::Int(-1), s("z")]), s("az"));
        assert_eq!(f(Func::Quote, vec![s("it's \\")]), s("'it\\'s \\\\'"));
        assert_eq!(f(Func::Quote, vec![Value::Null]), s("NULL"));
    }

    #[test]
    fn weeks_and_makedate_match_mysqls_examples() {
        let f = |func, args: Vec<Value>| {
            call(func, args, &Env { params: &[], session: &NoSession, strict_numbers: false }).unwrap()
        };
        let d = |x: &str| Value::Str(x.into());
        let i = Value::Int;
        assert_eq!(f(Func::Week, vec![d("2008-02-20")]), i(7));
        assert_eq!(f(Func::Week, vec![d("2008-02-20"), i(1)]), i(8));
        assert_eq!(f(Func::Week, vec![d("2008-12-31"), i(1)]), i(53));
        assert_eq!(f(Func::Week, vec![d("2000-01-01"), i(0)]), i(0));
        assert_eq!(f(Func::Week, vec![d("2000-01-01"), i(2)]), i(52));
        assert_eq!(f(Func::YearWeek, vec![d("1987-01-01")]), i(198652));
        assert_eq!(f(Func::WeekOfYear, vec![d("2008-02-20")]), i(8));
        // ISO weeks (mode 3): 2024-12-30 is in week 1 of 2025.
        assert_eq!(f(Func::YearWeek, vec![d("2024-12-30"), i(3)]), i(202501));
        assert_eq!(f(Func::Week, vec![d("2021-01-03"), i(3)]), i(53));
        assert_eq!(f(Func::Week, vec![d("not a date")]), Value::Null);
        let date = |x: &str| Value::Date(value::parse_date(x).unwrap());
        assert_eq!(f(Func::MakeDate, vec![i(2011), i(31)]), date("2011-01-31"));
        assert_eq!(f(Func::MakeDate, vec![i(2011), i(32)]), date("2011-02-01"));
        // Integer arguments round, as MySQL takes them (SUM is a DECIMAL).
        let s = |x: &str| Value::Str(x.into());
        let dec = |unscaled: i128, scale: u8| Value::Decimal(latsdb_types::value::Decimal::new(unscaled, scale));
        assert_eq!(f(Func::MakeDate, vec![i(2024), dec(235, 1)]), date("2024-01-24"));
        assert_eq!(f(Func::MakeDate, vec![i(2024), Value::UInt(u64::MAX)]), Value::Null);
        assert_eq!(f(Func::Left, vec![s("abcdef"), dec(25, 1)]), s("abc"));
        assert_eq!(f(Func::Substring, vec![s("abcdef"), dec(25, 1), Value::Float(1.5)]), s("cd"));
        assert_eq!(f(Func::Substring, vec![s("abc"), i(1), Value::UInt(u64::MAX)]), s("abc"));
        assert_eq!(f(Func::Repeat, vec![s("x"), dec(-25, 1)]), s(""));
        assert_eq!(f(Func::Repeat, vec![s("x"), Value::UInt(u64::MAX)]), Value::Null);
        assert_eq!(f(Func::MakeDate, vec![i(2014), i(365)]), date("2014-12-31"));
        assert_eq!(f(Func::MakeDate, vec![i(24), i(60)]), date("2024-02-29"));
        assert_eq!(f(Func::MakeDate, vec![i(2011), i(0)]), Value::Null);
        assert_eq!(f(Func::MakeDate, vec![i(9999), i(366)]), Value::Null);
    }

    #[test]
    fn dates_in_arithmetic_are_their_digits() {
        assert_eq!(numeric(&Value::Date(19_724)), Value::Int(20240102));
        let us = 19_724i64 * 86_400_000_000 + 3_723_000_000;
        assert_eq!(numeric(&Value::DateTime(us)), Value::Int(20240102010203));
        assert_eq!(numeric(&Value::DateTime(us + 500_000)).to_string(), "20240102010203.500000");
    }

    #[test]
    fn doubles_print_as_mysql_prints_them() {
        let shown: Vec<String> =
            [1e15, 1e14, 1.5e-16, 1.5e-15, 1234567890123456.0, 1000000000000000.5, -1e16, 0.1, 0.0, 2.5]
                .into_iter()
                .map(format_double)
                .collect();
        assert_eq!(
            shown,
            [
                "1e15",
                "100000000000000",
                "1.5e-16",
                "0.0000000000000015",
                "1.234567890123456e15",
                "1000000000000000.5",
                "-1e16",
                "0.1",
                "0",
                "2.5"
            ]
        );
    }

    #[test]
    fn null_follows_three_valued_logic() {
        let null = || Box::new(SExpr::Const(Value::Null));
        assert_eq!(eval(SExpr::Cmp(Cmp::Eq, null(), c(1i64))), Value::Null);
        assert_eq!(eval(SExpr::And(null(), c(0i64))), Value::Int(0));
        assert_eq!(eval(SExpr::Or(null(), c(1i64))), Value::Int(1));
        assert_eq!(eval(SExpr::Cmp(Cmp::NullSafeEq, null(), null())), Value::Int(1));
        assert_eq!(
            eval(SExpr::In(c(3i64), vec![SExpr::Const(Value::Int(1)), SExpr::Const(Value::Null)], false)),
            Value::Null
        );
    }

    #[test]
    fn writes_refuse_text_that_is_no_number_in_arithmetic() {
        let env = |strict_numbers| Env { params: &[], session: &NoSession, strict_numbers };
        let plus = |s: &str| SExpr::Arith(Arith::Add, c(s), c(1i64));
        for text in ["7", " -1.5e3 ", "+.5", "2."] {
            assert!(plus(text).eval(&[], &env(true)).is_ok(), "{text:?} is a number");
        }
        for text in ["abc", "12abc", "", "1e", ".", "- 1"] {
            let e = plus(text).eval(&[], &env(true)).unwrap_err();
            assert_eq!((e.code, e.message.contains("Truncated incorrect DOUBLE value")), (1292, true), "{text:?}");
            // A query reads the numeric prefix instead.
            assert!(plus(text).eval(&[], &env(false)).is_ok());
        }
    }

    #[test]
    fn division_is_decimal_with_four_more_digits_and_null_by_zero() {
        assert_eq!(eval(SExpr::Arith(Arith::Div, c(1i64), c(3i64))).to_string(), "0.3333");
        assert_eq!(eval(SExpr::Arith(Arith::Div, c(1i64), c(0i64))), Value::Null);
        // Text is a DOUBLE in arithmetic, as in MySQL.
        assert_eq!(eval(SExpr::Arith(Arith::Add, c("2"), c(3i64))), Value::Float(5.0));
        assert_eq!(eval(SExpr::Arith(Arith::Div, c("7"), c(2i64))), Value::Float(3.5));
        assert_eq!(eval(SExpr::Arith(Arith::Add, c("0.1"), c("0.2"))), Value::Float(0.1 + 0.2));
    }

    #[test]
    fn values_are_converted_into_column_types_with_mysql_errors() {
        let int = ColumnDef::new("k", ColumnType::int(IntWidth::Int)).not_null();
        assert_eq!(to_column(Value::Str("0".into()), &int).unwrap(), Value::Int(0));
        assert_eq!(to_column(Value::Str("x".into()), &int).unwrap_err().code, ER_TRUNCATED_WRONG_VALUE_FOR_FIELD);
        assert_eq!(to_column(Value::Int(1 << 40), &int).unwrap_err().code, ER_WARN_DATA_OUT_OF_RANGE);
        assert_eq!(to_column(Value::Null, &int).unwrap_err().code, crate::error::ER_BAD_NULL);
        let c = ColumnDef::new("c", ColumnType::Char(3));
        assert_eq!(to_column(Value::Int(12), &c).unwrap(), Value::Str("12".into()));
        assert_eq!(to_column(Value::Str("abcd".into()), &c).unwrap_err().code, ER_DATA_TOO_LONG);
    }
}
