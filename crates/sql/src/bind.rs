//! Binding: parsed SQL expressions become `SExpr`s whose column references
//! name a table of the FROM clause and a column of it. Literals get their
//! MySQL types; `?` becomes a parameter slot; session functions and
//! `@@variables` are looked up at execution time.

use crate::dates::{Part, Unit};
use crate::error::{SqlError, SqlResult};
use crate::eval::{Arith, CastTo, Cmp, Func, SExpr, SessionValue};
use crate::times::TimeFunc;
use latsdb_types::schema::{ColumnDef, ColumnType};
use latsdb_types::value::Decimal;
use latsdb_types::{Collation, Value};
use sqlparser::ast::{
    self, BinaryOperator, DataType, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, UnaryOperator,
};

/// A table as the binder sees it: its name in the query and its columns.
#[derive(Clone, Debug)]
pub struct ScopeTable {
    pub alias: String,
    pub db: String,
    pub name: String,
    pub columns: Vec<ColumnDef>,
    /// Columns a JOIN ... USING (or NATURAL JOIN) merged into another
    /// table's column of the same name: reached by qualified names only,
    /// and not in `*`.
    pub merged: Vec<u16>,
    /// The hidden key of a table created without a primary key: not in `*`
    /// or a NATURAL JOIN, reached only by its name (as MySQL's invisible
    /// columns are).
    pub hidden: Option<u16>,
}

impl ScopeTable {
    /// The column `name` reaches (never a dropped one).
    pub fn column_named(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|d| d.name.eq_ignore_ascii_case(name) && !d.is_dropped())
    }

    /// The columns `*` and NATURAL JOIN see: all but the hidden key and
    /// dropped columns.
    pub fn shown(&self) -> impl Iterator<Item = (u16, &ColumnDef)> {
        self.columns
            .iter()
            .enumerate()
            .map(|(c, d)| (c as u16, d))
            .filter(move |(c, d)| self.hidden != Some(*c) && !d.is_dropped())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AggKind {
    CountRows,
    Count,
    Sum,
    Avg,
    Min,
    Max,
    /// GROUP_CONCAT: the values as text, joined by `separator`.
    GroupConcat,
    /// VAR_POP (VARIANCE), VAR_SAMP, STDDEV_POP (STD, STDDEV) and
    /// STDDEV_SAMP: doubles, NULL without values (the sample forms also
    /// with one value).
    VarPop,
    VarSamp,
    StdPop,
    StdSamp,
    /// BIT_AND, BIT_OR and BIT_XOR over 64 unsigned bits; without values
    /// all ones (BIT_AND) or 0, as in MySQL.
    BitAnd,
    BitOr,
    BitXor,
}

impl AggKind {
    /// The aggregate named `name` (upper case), if it is one.
    pub fn named(name: &str) -> Option<AggKind> {
        Some(match name {
            "COUNT" => AggKind::Count,
            "SUM" => AggKind::Sum,
            "AVG" => AggKind::Avg,
            "MIN" => AggKind::Min,
            "MAX" => AggKind::Max,
            "GROUP_CONCAT" => AggKind::GroupConcat,
            "VARIANCE" | "VAR_POP" => AggKind::VarPop,
            "VAR_SAMP" => AggKind::VarSamp,
            "STD" | "STDDEV" | "STDDEV_POP" => AggKind::StdPop,
            "STDDEV_SAMP" => AggKind::StdSamp,
            "BIT_AND" => AggKind::BitAnd,
            "BIT_OR" => AggKind::BitOr,
            "BIT_XOR" => AggKind::BitXor,
            _ => return None,
        })
    }

    /// Whether the data nodes can compute it (over a stored column).
    pub fn pushable(self) -> bool {
        matches!(self, AggKind::CountRows | AggKind::Count | AggKind::Sum | AggKind::Avg | AggKind::Min | AggKind::Max)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct AggSpec {
    pub kind: AggKind,
    pub arg: Option<SExpr>,
    pub distinct: bool,
    /// GROUP_CONCAT's SEPARATOR (default ",").
    pub separator: String,
    /// GROUP_CONCAT's ORDER BY: (key, descending).
    pub order: Vec<(SExpr, bool)>,
    /// How DISTINCT and MIN/MAX compare the argument's values.
    pub collation: Collation,
}

/// What a window function computes over its partition.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum WindowKind {
    RowNumber,
    Rank,
    DenseRank,
    /// LAG / LEAD: the value `offset` rows before / after in the partition.
    Lag,
    Lead,
    /// An aggregate over the frame.
    Agg(AggKind),
    /// NTILE(n): the row's bucket of n nearly equal ones.
    Ntile,
    PercentRank,
    CumeDist,
    /// FIRST_VALUE / LAST_VALUE / NTH_VALUE(x, n) of the frame.
    FirstValue,
    LastValue,
    NthValue,
}

/// Which rows of its partition a window function sees for a row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Frame {
    /// No frame clause: with ORDER BY from the partition's start to the
    /// row's last peer, else the whole partition.
    Default,
    /// `ROWS BETWEEN a AND b`: positions relative to the row.
    Rows(FrameBound, FrameBound),
    /// `RANGE BETWEEN a AND b` with UNBOUNDED and CURRENT ROW bounds only
    /// (CURRENT ROW meaning the row's peers).
    Range(FrameBound, FrameBound),
}

/// A frame bound as an offset from the current row: `Preceding(None)` is
/// UNBOUNDED PRECEDING, `Preceding(Some(0))` CURRENT ROW.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FrameBound {
    Preceding(Option<u64>),
    Following(Option<u64>),
}

/// `f(args) OVER (PARTITION BY ... ORDER BY ... [frame])`.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowSpec {
    pub kind: WindowKind,
    pub args: Vec<SExpr>,
    pub partition: Vec<SExpr>,
    pub order: Vec<(SExpr, bool)>,
    pub frame: Frame,
}

pub struct Binder<'a> {
    pub tables: &'a [ScopeTable],
    /// Aggregates found while binding; None where they are not allowed.
    pub aggs: Option<&'a mut Vec<AggSpec>>,
    /// Window functions found while binding; None where they are not
    /// allowed (anywhere but the select list and ORDER BY).
    pub windows: Option<&'a mut Vec<WindowSpec>>,
    /// Select-list aliases (ORDER BY and HAVING may name them).
    pub aliases: &'a [(String, SExpr)],
    /// Clause named in "unknown column" errors.
    pub place: &'static str,
    /// A select-list alias wins over a table column of the same name (as
    /// MySQL resolves ORDER BY and HAVING).
    pub aliases_first: bool,
}

impl<'a> Binder<'a> {
    pub fn new(tables: &'a [ScopeTable], place: &'static str) -> Self {
        Binder { tables, aggs: None, windows: None, aliases: &[], place, aliases_first: false }
    }

    fn column(&self, qualifier: Option<&str>, name: &str) -> SqlResult<SExpr> {
        if self.aliases_first && qualifier.is_none() {
            if let Some((_, e)) = self.aliases.iter().find(|(a, _)| a.eq_ignore_ascii_case(name)) {
                return Ok(e.clone());
            }
        }
        let mut found = None;
        for (t, table) in self.tables.iter().enumerate() {
            if let Some(q) = qualifier {
                if !q.eq_ignore_ascii_case(&table.alias) {
                    continue;
                }
            }
            if let Some(c) = table.column_named(name) {
                if qualifier.is_none() && table.merged.contains(&(c as u16)) {
                    continue;
                }
                if found.is_some() {
                    return Err(SqlError::new(
                        crate::error::ER_NON_UNIQ,
                        "23000",
                        format!("Column '{name}' in {} is ambiguous; qualify it with its table", self.place),
                    ));
                }
                found = Some(SExpr::TableCol(t, c as u16));
            }
        }
        if let Some(f) = found {
            return Ok(f);
        }
        if qualifier.is_none() {
            if let Some((_, e)) = self.aliases.iter().find(|(a, _)| a.eq_ignore_ascii_case(name)) {
                return Ok(e.clone());
            }
        }
        let shown = match qualifier {
            Some(q) => format!("{q}.{name}"),
            None => name.to_string(),
        };
        Err(SqlError::bad_field(&shown, self.place))
    }

    /// `(a, b) = (x, y)` as `a = x AND b = y` (NULLs as SQL has them); rows
    /// of different widths are error 1241, as in MySQL.
    fn row_equal(&mut self, left: &Expr, right: &Expr) -> SqlResult<SExpr> {
        let unnest = |e: &Expr| -> Option<Vec<Expr>> {
            match e {
                Expr::Tuple(items) => Some(items.clone()),
                Expr::Nested(inner) => Some(vec![inner.as_ref().clone()]),
                _ => None,
            }
        };
        let (Some(l), Some(r)) = (unnest(left), unnest(right)) else {
            return Err(SqlError::unsupported("a row (a, b) compares only with another row of values"));
        };
        if l.len() != r.len() {
            return Err(SqlError::new(1241, "21000", format!("Operand should contain {} column(s)", l.len())));
        }
        let equalities = l
            .iter()
            .zip(&r)
            .map(|(x, y)| Ok(compare(self.tables, Cmp::Eq, self.bind(x)?, self.bind(y)?)))
            .collect::<SqlResult<Vec<_>>>()?;
        and_all(equalities).ok_or_else(|| SqlError::parse("an empty row () is not a value"))
    }

    pub fn bind(&mut self, e: &Expr) -> SqlResult<SExpr> {
        Ok(match e {
            Expr::Identifier(id) => self.identifier(std::slice::from_ref(id))?,
            Expr::CompoundIdentifier(ids) => self.identifier(ids)?,
            Expr::Value(v) => literal(&v.value)?,
            Expr::TypedString(ts) => typed_literal(&ts.data_type, &ts.value.value)?,
            Expr::Nested(inner) => self.bind(inner)?,
            Expr::UnaryOp { op, expr } => {
                let inner = self.bind(expr)?;
                match op {
                    UnaryOperator::Minus => match inner {
                        SExpr::Const(Value::Int(i)) => SExpr::Const(Value::Int(-i)),
                        SExpr::Const(Value::UInt(u)) if u == 1u64 << 63 => SExpr::Const(Value::Int(i64::MIN)),
                        SExpr::Const(Value::Decimal(d)) => {
                            SExpr::Const(Value::Decimal(Decimal::new(-d.unscaled, d.scale)))
                        }
                        SExpr::Const(Value::Float(f)) => SExpr::Const(Value::Float(-f)),
                        other => SExpr::Neg(Box::new(other)),
                    },
                    UnaryOperator::Plus => inner,
                    UnaryOperator::Not | UnaryOperator::BangNot => SExpr::Not(Box::new(inner)),
                    UnaryOperator::BitwiseNot => {
                        SExpr::Arith(Arith::BitXor, Box::new(inner), Box::new(SExpr::Const(Value::UInt(u64::MAX))))
                    }
                    other => return Err(SqlError::unsupported(format!("operator {other} is not supported"))),
                }
            }
            Expr::Interval(_) => {
                return Err(SqlError::parse(
                    "INTERVAL can only be added to or subtracted from a date, or be DATE_ADD's argument",
                ))
            }
            Expr::BinaryOp { left, op: op @ (BinaryOperator::Eq | BinaryOperator::NotEq), right }
                if matches!(left.as_ref(), Expr::Tuple(_)) =>
            {
                let equal = self.row_equal(left, right)?;
                if *op == BinaryOperator::Eq {
                    equal
                } else {
                    SExpr::Not(Box::new(equal))
                }
            }
            Expr::BinaryOp { left, op, right } => {
                // `date + INTERVAL n unit`, `INTERVAL n unit + date`, `date - INTERVAL ...`.
                match (op, left.as_ref(), right.as_ref()) {
                    (BinaryOperator::Plus | BinaryOperator::Minus, date, Expr::Interval(iv))
                    | (BinaryOperator::Plus, Expr::Interval(iv), date) => {
                        return self.date_add(date, iv, *op == BinaryOperator::Minus)
                    }
                    _ => {}
                }
                let (l, r) = (self.bind(left)?, self.bind(right)?);
                let b = |x| Box::new(x);
                match op {
                    BinaryOperator::And => SExpr::And(b(l), b(r)),
                    BinaryOperator::Or => SExpr::Or(b(l), b(r)),
                    BinaryOperator::Xor => SExpr::Xor(b(l), b(r)),
                    BinaryOperator::Eq => compare(self.tables, Cmp::Eq, l, r),
                    BinaryOperator::NotEq => compare(self.tables, Cmp::Ne, l, r),
                    BinaryOperator::Lt => compare(self.tables, Cmp::Lt, l, r),
                    BinaryOperator::LtEq => compare(self.tables, Cmp::Le, l, r),
                    BinaryOperator::Gt => compare(self.tables, Cmp::Gt, l, r),
                    BinaryOperator::GtEq => compare(self.tables, Cmp::Ge, l, r),
                    BinaryOperator::Spaceship => compare(self.tables, Cmp::NullSafeEq, l, r),
                    BinaryOperator::Plus => SExpr::Arith(Arith::Add, b(l), b(r)),
                    BinaryOperator::Minus => SExpr::Arith(Arith::Sub, b(l), b(r)),
                    BinaryOperator::Multiply => SExpr::Arith(Arith::Mul, b(l), b(r)),
                    BinaryOperator::Divide => SExpr::Arith(Arith::Div, b(l), b(r)),
                    BinaryOperator::Modulo => SExpr::Arith(Arith::Mod, b(l), b(r)),
                    BinaryOperator::MyIntegerDivide => SExpr::Arith(Arith::IntDiv, b(l), b(r)),
                    BinaryOperator::BitwiseAnd => SExpr::Arith(Arith::BitAnd, b(l), b(r)),
                    BinaryOperator::BitwiseOr => SExpr::Arith(Arith::BitOr, b(l), b(r)),
                    BinaryOperator::BitwiseXor => SExpr::Arith(Arith::BitXor, b(l), b(r)),
                    BinaryOperator::PGBitwiseShiftLeft => SExpr::Arith(Arith::ShiftLeft, b(l), b(r)),
                    BinaryOperator::PGBitwiseShiftRight => SExpr::Arith(Arith::ShiftRight, b(l), b(r)),
                    other => return Err(SqlError::unsupported(format!("operator {other} is not supported"))),
                }
            }
            Expr::IsNull(x) => SExpr::IsNull(Box::new(self.bind(x)?), false),
            Expr::IsNotNull(x) => SExpr::IsNull(Box::new(self.bind(x)?), true),
            Expr::IsTrue(x) => SExpr::IsBool(Box::new(self.bind(x)?), true, false),
            Expr::IsNotTrue(x) => SExpr::IsBool(Box::new(self.bind(x)?), true, true),
            Expr::IsFalse(x) => SExpr::IsBool(Box::new(self.bind(x)?), false, false),
            Expr::IsNotFalse(x) => SExpr::IsBool(Box::new(self.bind(x)?), false, true),
            Expr::InList { expr, list, negated } if matches!(expr.as_ref(), Expr::Tuple(_)) => {
                // (a, b) IN ((1, 2), (3, 4)): (a = 1 AND b = 2) OR (a = 3 AND b = 4).
                let rows = list.iter().map(|item| self.row_equal(expr, item)).collect::<SqlResult<Vec<_>>>()?;
                let any = any_of(rows).ok_or_else(|| SqlError::parse("IN () needs at least one row"))?;
                if *negated {
                    SExpr::Not(Box::new(any))
                } else {
                    any
                }
            }
            Expr::InList { expr, list, negated } => {
                let mut items = vec![self.bind(expr)?];
                for x in list {
                    items.push(self.bind(x)?);
                }
                let mut items = collated(self.tables, items).into_iter();
                let e = items.next().ok_or_else(|| SqlError::general("internal: IN lost its operand"))?;
                SExpr::In(Box::new(e), items.collect(), *negated)
            }
            Expr::Between { expr, negated, low, high } => {
                let [e, low, high] = collated_pair(self.tables, [self.bind(expr)?, self.bind(low)?, self.bind(high)?]);
                SExpr::Between(Box::new(e), Box::new(low), Box::new(high), *negated)
            }
            Expr::Like { negated, expr, pattern, escape_char, .. } => {
                let mut pattern = self.bind(pattern)?;
                if let Some(escape) = escape_char {
                    pattern = with_backslash_escapes(pattern, self.bind(escape)?)?;
                }
                let e = self.bind(expr)?;
                let [e, pattern] = collated_pair(self.tables, [self.text_of(e), pattern]);
                SExpr::Like(Box::new(e), Box::new(pattern), *negated)
            }
            Expr::RLike { negated, expr, pattern, .. } => {
                let args = vec![self.bind(expr)?, self.bind(pattern)?];
                let args = self.regexp_case(&Func::RegexpLike, args);
                let matches = SExpr::Func(Func::RegexpLike, args);
                if *negated {
                    SExpr::Not(Box::new(matches))
                } else {
                    matches
                }
            }
            Expr::Case { operand, conditions, else_result, .. } => {
                let mut operand = match operand {
                    Some(o) => Some(self.bind(o)?),
                    None => None,
                };
                let mut whens = conditions
                    .iter()
                    .map(|w| Ok((self.bind(&w.condition)?, self.bind(&w.result)?)))
                    .collect::<SqlResult<Vec<_>>>()?;
                // `CASE x WHEN v`: x and each v compare under their collation.
                if let Some(o) = operand.take() {
                    let compared = std::iter::once(&o).chain(whens.iter().map(|(v, _)| v));
                    if comparison_collation(self.tables, compared).is_case_insensitive() {
                        whens = whens.into_iter().map(|(v, r)| (folded(v), r)).collect();
                        operand = Some(folded(o));
                    } else {
                        operand = Some(o);
                    }
                }
                let other = match else_result {
                    Some(e) => Some(Box::new(self.bind(e)?)),
                    None => None,
                };
                let kind = self.branches_kind(whens.iter().map(|(_, r)| r).chain(other.as_deref()));
                typed_as(SExpr::Case(operand.map(Box::new), whens, other), kind)
            }
            Expr::Cast { expr, data_type, .. } => {
                let e = self.bind(expr)?;
                self.cast(e, cast_target(data_type)?)
            }
            Expr::Convert { expr, data_type: Some(data_type), .. } => {
                let e = self.bind(expr)?;
                self.cast(e, cast_target(data_type)?)
            }
            Expr::Convert { expr, data_type: None, .. } => {
                let e = self.bind(expr)?;
                self.cast(e, CastTo::Char)
            }
            Expr::Ceil { expr, .. } => SExpr::Func(Func::Ceil, vec![self.bind(expr)?]),
            Expr::Extract { field, expr, .. } => {
                use ast::DateTimeField as F;
                let part = match field {
                    F::Year => Part::Year,
                    F::Quarter => Part::Quarter,
                    F::Month => Part::Month,
                    F::Day => Part::Day,
                    F::Hour => Part::Hour,
                    F::Minute => Part::Minute,
                    F::Second => Part::Second,
                    F::Microsecond => Part::Microsecond,
                    F::DayOfWeek => Part::DayOfWeek,
                    F::DayOfYear => Part::DayOfYear,
                    other => return Err(SqlError::unsupported(format!("EXTRACT({other} FROM ...) is not supported"))),
                };
                SExpr::Func(Func::DatePart(part), vec![self.bind(expr)?])
            }
            Expr::Floor { expr, .. } => SExpr::Func(Func::Floor, vec![self.bind(expr)?]),
            Expr::Substring { expr, substring_from, substring_for, .. } => {
                let text = self.bind(expr)?;
                let mut args = vec![self.text_of(text)];
                args.push(match substring_from {
                    Some(f) => self.bind(f)?,
                    None => SExpr::Const(Value::Int(1)),
                });
                if let Some(f) = substring_for {
                    args.push(self.bind(f)?);
                }
                SExpr::Func(Func::Substring, args)
            }
            Expr::Trim { expr, trim_where, trim_what, .. } => {
                let f = match trim_where {
                    Some(ast::TrimWhereField::Leading) => Func::LTrim,
                    Some(ast::TrimWhereField::Trailing) => Func::RTrim,
                    _ => Func::Trim,
                };
                let text = self.bind(expr)?;
                let mut args = vec![self.text_of(text)];
                if let Some(what) = trim_what {
                    let what = self.bind(what)?;
                    args.push(self.text_of(what));
                }
                SExpr::Func(f, args)
            }
            Expr::Function(f) => self.function(f)?,
            Expr::Collate { expr, collation } => {
                let name = collation.to_string();
                let func = match name.strip_prefix(crate::subquery::IMPLICIT_COLLATION) {
                    Some(implicit) => Func::Implicit(crate::catalog::collation_named(implicit)?),
                    None => Func::Collate(crate::catalog::collation_named(&name)?),
                };
                SExpr::Func(func, vec![self.bind(expr)?])
            }
            Expr::Position { expr, r#in } => {
                let (what, text) = (self.bind(expr)?, self.bind(r#in)?);
                SExpr::Func(Func::Locate, vec![self.text_of(what), self.text_of(text)])
            }
            Expr::Tuple(_) => return Err(SqlError::unsupported("row constructors (a, b) are not supported here")),
            Expr::Subquery(_) | Expr::InSubquery { .. } | Expr::Exists { .. } => {
                return Err(SqlError::unsupported("subqueries are not supported yet; use a join"))
            }
            other => return Err(SqlError::unsupported(format!("expression '{other}' is not supported"))),
        })
    }

    fn identifier(&self, ids: &[ast::Ident]) -> SqlResult<SExpr> {
        let first = &ids[0].value;
        if let Some(var) = first.strip_prefix("@@") {
            // @@name, @@session.name, @@global.name
            let name = match ids.len() {
                1 => var.to_string(),
                _ if matches!(var.to_ascii_lowercase().as_str(), "session" | "global" | "local") => {
                    ids[1..].iter().map(|i| i.value.as_str()).collect::<Vec<_>>().join(".")
                }
                _ => return Err(SqlError::parse(format!("unknown variable form '{first}'"))),
            };
            return Ok(SExpr::Session(SessionValue::Variable(name.to_ascii_lowercase())));
        }
        if first.starts_with('@') && ids.len() == 1 {
            return Ok(SExpr::Session(SessionValue::Variable(first.to_ascii_lowercase())));
        }
        if ids.len() == 1 && ids[0].quote_style.is_none() {
            match first.to_ascii_uppercase().as_str() {
                "CURRENT_TIMESTAMP" | "LOCALTIME" | "LOCALTIMESTAMP" => {
                    return Ok(SExpr::Session(SessionValue::Now(0)))
                }
                "CURRENT_DATE" => return Ok(SExpr::Session(SessionValue::CurDate)),
                "CURRENT_USER" => return Ok(SExpr::Session(SessionValue::User)),
                _ => {}
            }
        }
        match ids {
            [c] => self.column(None, &c.value),
            [t, c] => self.column(Some(&t.value), &c.value),
            [db, t, c] => {
                let ok = self.tables.iter().any(|s| s.alias.eq_ignore_ascii_case(&t.value) && s.db == db.value);
                if !ok {
                    return Err(SqlError::bad_field(&format!("{}.{}.{}", db.value, t.value, c.value), self.place));
                }
                self.column(Some(&t.value), &c.value)
            }
            _ => Err(SqlError::parse(format!("name with {} parts is not a column", ids.len()))),
        }
    }

    fn args(&mut self, f: &ast::Function) -> SqlResult<(Vec<SExpr>, bool, bool)> {
        let list = match &f.args {
            FunctionArguments::None => return Ok((Vec::new(), false, false)),
            FunctionArguments::List(l) => l,
            FunctionArguments::Subquery(_) => return Err(SqlError::unsupported("subqueries are not supported yet")),
        };
        let distinct = matches!(list.duplicate_treatment, Some(ast::DuplicateTreatment::Distinct));
        let mut out = Vec::new();
        let mut star = false;
        for a in &list.args {
            match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => out.push(self.bind(e)?),
                FunctionArg::Unnamed(FunctionArgExpr::Wildcard) => star = true,
                _ => return Err(SqlError::unsupported(format!("argument form in {} is not supported", f.name))),
            }
        }
        Ok((out, star, distinct))
    }

    /// A window function: its arguments and clauses are bound here (they
    /// may hold aggregates of a grouped query, but no other window).
    fn window(&mut self, f: &ast::Function, name: &str, over: &ast::WindowType) -> SqlResult<SExpr> {
        let Some(windows) = self.windows.take() else {
            return Err(SqlError::new(
                3593,
                "HY000",
                format!("You cannot use the window function '{name}' in this context (only in the select list and ORDER BY)"),
            ));
        };
        let idx = self.window_spec(f, name, over).map(|spec| match windows.iter().position(|w| *w == spec) {
            Some(i) => i,
            None => {
                windows.push(spec);
                windows.len() - 1
            }
        });
        self.windows = Some(windows);
        idx.map(SExpr::Window)
    }

    fn window_spec(&mut self, f: &ast::Function, name: &str, over: &ast::WindowType) -> SqlResult<WindowSpec> {
        let ast::WindowType::WindowSpec(w) = over else {
            return Err(SqlError::unsupported("named windows (WINDOW w AS ...) are not supported; write OVER (...)"));
        };
        let frame = match &w.window_frame {
            None => Frame::Default,
            Some(f) => window_frame(f)?,
        };
        if w.window_name.is_some() {
            return Err(SqlError::unsupported("named windows are not supported; write OVER (...)"));
        }
        let (args, star, distinct) = self.args(f)?;
        if distinct {
            return Err(SqlError::unsupported(format!("{name}(DISTINCT ...) OVER is not supported")));
        }
        let arity = |lo: usize, hi: usize| -> SqlResult<()> {
            if args.len() < lo || args.len() > hi || star {
                return Err(SqlError::new(
                    1582,
                    "42000",
                    format!("Incorrect parameter count in the call to native function '{name}'"),
                ));
            }
            Ok(())
        };
        let kind = match name {
            "ROW_NUMBER" => arity(0, 0).map(|_| WindowKind::RowNumber)?,
            "RANK" => arity(0, 0).map(|_| WindowKind::Rank)?,
            "DENSE_RANK" => arity(0, 0).map(|_| WindowKind::DenseRank)?,
            "LAG" => arity(1, 3).map(|_| WindowKind::Lag)?,
            "LEAD" => arity(1, 3).map(|_| WindowKind::Lead)?,
            "NTILE" => arity(1, 1).map(|_| WindowKind::Ntile)?,
            "PERCENT_RANK" => arity(0, 0).map(|_| WindowKind::PercentRank)?,
            "CUME_DIST" => arity(0, 0).map(|_| WindowKind::CumeDist)?,
            "FIRST_VALUE" => arity(1, 1).map(|_| WindowKind::FirstValue)?,
            "LAST_VALUE" => arity(1, 1).map(|_| WindowKind::LastValue)?,
            "NTH_VALUE" => arity(2, 2).map(|_| WindowKind::NthValue)?,
            "COUNT" if star && args.is_empty() => WindowKind::Agg(AggKind::CountRows),
            other => match AggKind::named(other) {
                Some(kind) if kind != AggKind::GroupConcat => arity(1, 1).map(|_| WindowKind::Agg(kind))?,
                _ => {
                    return Err(SqlError::unsupported(format!(
                        "window function {other} is not supported (ROW_NUMBER, RANK, DENSE_RANK, LAG, LEAD, NTILE, \
                         PERCENT_RANK, CUME_DIST, FIRST_VALUE, LAST_VALUE, NTH_VALUE and the aggregates but \
                         GROUP_CONCAT are)"
                    )))
                }
            },
        };
        let mut partition = Vec::with_capacity(w.partition_by.len());
        for e in &w.partition_by {
            let key = self.bind(e)?;
            partition.push(sort_key(self.tables, key));
        }
        let mut order = Vec::with_capacity(w.order_by.len());
        for o in &w.order_by {
            let key = self.bind(&o.expr)?;
            order.push((sort_key(self.tables, key), o.options.sort == Some(ast::OrderBySort::Desc)));
        }
        Ok(WindowSpec { kind, args, partition, order, frame })
    }

    fn function(&mut self, f: &ast::Function) -> SqlResult<SExpr> {
        let name = f.name.to_string().to_ascii_uppercase();
        if let Some(over) = &f.over {
            return self.window(f, &name, over);
        }
        if let Some(kind) = AggKind::named(&name) {
            let Some(aggs) = self.aggs.take() else {
                return Err(SqlError::new(1111, "HY000", format!("Invalid use of group function {name}")));
            };
            let bound = self.args(f);
            let (args, star, distinct) = match bound {
                Ok(b) => b,
                Err(e) => {
                    self.aggs = Some(aggs);
                    return Err(e);
                }
            };
            let (separator, order) = match self.concat_clauses(f, kind) {
                Ok(c) => c,
                Err(e) => {
                    self.aggs = Some(aggs);
                    return Err(e);
                }
            };
            let collation = comparison_collation(self.tables, &args);
            let spec = match (kind, star, args.len()) {
                (AggKind::Count, true, 0) => {
                    AggSpec { kind: AggKind::CountRows, arg: None, distinct: false, separator, order, collation }
                }
                (_, false, 1) => AggSpec { kind, arg: args.into_iter().next(), distinct, separator, order, collation },
                // COUNT(DISTINCT a, b, ...) counts the distinct tuples without
                // a NULL (each member compared under its own collation).
                (AggKind::Count, false, 2..) if distinct => {
                    let args = args.into_iter().map(|a| sort_key(self.tables, a)).collect();
                    let arg = Some(SExpr::Func(Func::Tuple, args));
                    AggSpec { kind, arg, distinct, separator, order, collation: Collation::Bin }
                }
                // GROUP_CONCAT(a, b, ...) concatenates them per row.
                (AggKind::GroupConcat, false, 2..) => {
                    let arg = Some(SExpr::Func(Func::Concat, args));
                    AggSpec { kind, arg, distinct, separator, order, collation }
                }
                _ => {
                    self.aggs = Some(aggs);
                    return Err(SqlError::parse(format!("{name} takes one argument")));
                }
            };
            if spec.arg.as_ref().is_some_and(|a| {
                let mut nested = false;
                a.walk(&mut |e| nested |= matches!(e, SExpr::Agg(_)));
                nested
            }) {
                self.aggs = Some(aggs);
                return Err(SqlError::new(1111, "HY000", "Invalid use of group function (nested aggregate)"));
            }
            let idx = match aggs.iter().position(|a| *a == spec) {
                Some(i) => i,
                None => {
                    aggs.push(spec);
                    aggs.len() - 1
                }
            };
            self.aggs = Some(aggs);
            return Ok(SExpr::Agg(idx));
        }
        // Aggregates are not allowed inside scalar function arguments of an
        // aggregate, but are inside other functions: keep `aggs` available.
        match name.as_str() {
            "TIMESTAMPDIFF" => return self.timestampdiff(f),
            "TIMESTAMPADD" => return self.timestampadd(f),
            _ if name.starts_with(crate::parse::EXTRACT_COMPOUND) => return self.extract_compound(f, &name),
            "DATE_ADD" | "ADDDATE" => return self.date_add_call(f, false),
            "DATE_SUB" | "SUBDATE" => return self.date_add_call(f, true),
            _ => {}
        }
        let (args, _, _) = self.args(f)?;
        let n = args.len();
        let need = |lo: usize, hi: usize| -> SqlResult<()> {
            if n < lo || n > hi {
                return Err(SqlError::new(
                    1582,
                    "42000",
                    format!("Incorrect parameter count in the call to native function '{name}'"),
                ));
            }
            Ok(())
        };
        let session = |v| Ok(SExpr::Session(v));
        let func = match name.as_str() {
            "DATABASE" | "SCHEMA" => return need(0, 0).and(session(SessionValue::Database)),
            "USER" | "CURRENT_USER" | "SESSION_USER" | "SYSTEM_USER" => {
                return need(0, 0).and(session(SessionValue::User))
            }
            "CONNECTION_ID" => return need(0, 0).and(session(SessionValue::ConnectionId)),
            "LAST_INSERT_ID" => return need(0, 0).and(session(SessionValue::LastInsertId)),
            "ROW_COUNT" => return need(0, 0).and(session(SessionValue::RowCount)),
            "FOUND_ROWS" => return need(0, 0).and(session(SessionValue::FoundRows)),
            "NOW" | "CURRENT_TIMESTAMP" | "LOCALTIME" | "LOCALTIMESTAMP" | "UTC_TIMESTAMP" => {
                need(0, 1)?;
                return session(SessionValue::Now(fraction_digits_arg(&name, args.first())?));
            }
            "SYSDATE" => {
                need(0, 1)?;
                return session(SessionValue::SysDate(fraction_digits_arg(&name, args.first())?));
            }
            "CURDATE" | "CURRENT_DATE" | "UTC_DATE" => return need(0, 0).and(session(SessionValue::CurDate)),
            "TIMESTAMP" => {
                // TIMESTAMP(x) is x as a DATETIME with the digits of a second
                // x gives; TIMESTAMP(x, t) adds TIME t to it, as ADDTIME.
                need(1, 2)?;
                let mut it = args.into_iter();
                let (Some(x), t) = (it.next(), it.next()) else {
                    return Err(SqlError::parse("TIMESTAMP takes one or two arguments"));
                };
                let digits = match &x {
                    SExpr::Const(Value::Str(text)) => text
                        .rsplit_once('.')
                        .map_or(0, |(_, f)| f.bytes().take_while(u8::is_ascii_digit).count().min(6)),
                    _ => 6,
                };
                let datetime = SExpr::Cast(Box::new(x), CastTo::DateTime(digits as u8));
                return Ok(match t {
                    Some(t) => SExpr::Func(Func::Times(TimeFunc::Add), vec![datetime, t]),
                    None => datetime,
                });
            }
            "MOD" => {
                need(2, 2)?;
                let mut it = args.into_iter();
                let (a, b) = (it.next(), it.next());
                return match (a, b) {
                    (Some(a), Some(b)) => Ok(SExpr::Arith(Arith::Mod, Box::new(a), Box::new(b))),
                    _ => Err(SqlError::parse("MOD takes two arguments")),
                };
            }
            "INSTR" => {
                need(2, 2)?;
                // INSTR(str, substr) is LOCATE(substr, str).
                let mut it = args.into_iter();
                let (a, b) = (it.next(), it.next());
                return match (a, b) {
                    (Some(a), Some(b)) => Ok(SExpr::Func(Func::Locate, vec![b, a])),
                    _ => Err(SqlError::parse("INSTR takes two arguments")),
                };
            }
            _ => {
                let (func, lo, hi) = SCALAR_FUNCTIONS
                    .iter()
                    .find(|(names, ..)| names.contains(&name.as_str()))
                    .map(|(_, f, lo, hi)| (*f, *lo, *hi))
                    .ok_or_else(|| SqlError::new(1305, "42000", format!("FUNCTION {name} does not exist")))?;
                need(lo, hi)?;
                func
            }
        };
        let args = match func {
            // Answers about equality or order, not the text itself.
            Func::Strcmp | Func::Field | Func::FindInSet => collated(self.tables, args),
            Func::RegexpLike | Func::RegexpInstr | Func::RegexpSubstr | Func::RegexpReplace => {
                self.regexp_case(&func, args)
            }
            // Functions of text: a FLOAT's text is its 6-digit form, a
            // DOUBLE with fixed places has them (`text_of`; their integer
            // arguments, lengths and positions, are never such numbers).
            Func::Concat
            | Func::ConcatWs
            | Func::Length
            | Func::CharLength
            | Func::Upper
            | Func::Lower
            | Func::Substring
            | Func::SubstringIndex
            | Func::Trim
            | Func::LTrim
            | Func::RTrim
            | Func::Replace
            | Func::Left
            | Func::Right
            | Func::Locate
            | Func::LPad
            | Func::RPad
            | Func::Repeat
            | Func::Reverse
            | Func::InsertStr
            | Func::Quote
            | Func::ToBase64
            | Func::Md5
            | Func::Sha1
            | Func::Sha2 => args.into_iter().map(|a| self.text_of(a)).collect(),
            _ => args,
        };
        // These return one of their arguments as written, so the collation
        // travels with the function instead of folding the arguments.
        let func = match func {
            Func::NullIf(_) => Func::NullIf(comparison_collation(self.tables, &args)),
            Func::Greatest(_) => Func::Greatest(comparison_collation(self.tables, &args)),
            Func::Least(_) => Func::Least(comparison_collation(self.tables, &args)),
            f => f,
        };
        // Functions that return one of their arguments: a DECIMAL result
        // shows the largest scale of them (COALESCE(SUM(price), 0) is 0.00),
        // and with a DOUBLE among them the result is a DOUBLE.
        let kind = match func {
            Func::Coalesce | Func::IfNull | Func::Greatest(_) | Func::Least(_) => self.branches_kind(args.iter()),
            Func::If => self.branches_kind(args.iter().skip(1)),
            _ => NumericKind::Other,
        };
        Ok(typed_as(SExpr::Func(func, args), kind))
    }

    /// A cast; a FLOAT or fixed-places DOUBLE cast to text is its shown
    /// form (`number_text`).
    fn cast(&self, e: SExpr, to: CastTo) -> SExpr {
        let to = match to {
            CastTo::Char => self.number_text(&e).unwrap_or(CastTo::Char),
            to => to,
        };
        SExpr::Cast(Box::new(e), to)
    }

    /// An argument read as text: a FLOAT's text is its 6-digit form, and a
    /// DOUBLE with fixed places has them, as MySQL shows them.
    fn text_of(&self, e: SExpr) -> SExpr {
        match self.number_text(&e) {
            Some(to) => SExpr::Cast(Box::new(e), to),
            None => e,
        }
    }

    /// The cast that gives a number the text MySQL shows for it, when that
    /// is not the plain value's text.
    fn number_text(&self, e: &SExpr) -> Option<CastTo> {
        if let SExpr::TableCol(t, c) = e {
            if let Some(ColumnType::Bit(width)) =
                self.tables.get(*t).and_then(|s| s.columns.get(*c as usize)).map(|d| d.ty)
            {
                return Some(CastTo::BitBytes(width));
            }
        }
        if self.is_float(e) {
            Some(CastTo::FloatText)
        } else {
            self.double_decimals(e).map(CastTo::PlacesText)
        }
    }

    /// Whether an expression's result is typed FLOAT (a FLOAT column passed
    /// through MIN/MAX or a function returning one of its arguments), so
    /// it shows as FLOATs do.
    pub(crate) fn is_float(&self, e: &SExpr) -> bool {
        self.numeric_kind(e) == NumericKind::Float
    }

    /// The places MySQL and MariaDB show a DOUBLE result with when its
    /// type fixes them: ROUND(x, 2) and TRUNCATE(x, 2) of a DOUBLE show 0.50,
    /// and so do sums, differences, products, MIN/MAX/SUM and the functions
    /// returning an argument (the most places among the operands; integers
    /// have none, DECIMALs their scale), with 4 more for a quotient or AVG.
    /// None: the result is no such DOUBLE (a DOUBLE column, a literal like
    /// 0.5e0 or a function of one shows as many places as it takes).
    pub(crate) fn double_decimals(&self, e: &SExpr) -> Option<u8> {
        use NumericKind::*;
        // MySQL's NOT_FIXED_DEC: 31 places or more are not fixed.
        let fixed = |places: u32| (places < 31).then_some(places as u8);
        // An operand's places, and whether it is a DOUBLE (None: a DOUBLE
        // without fixed places, or no number). Each operand is looked at
        // once: looking twice per level would double the work per level.
        let operand = |x: &SExpr| match self.numeric_kind(x) {
            Int | Null => Some((0, false)),
            Decimal(s) => Some((s, false)),
            _ => self.double_decimals(x).map(|d| (d, true)),
        };
        // The most places among operands of which one is a DOUBLE (a DOUBLE
        // column or literal among them leaves the places unfixed).
        let most = |xs: &mut dyn Iterator<Item = &SExpr>| -> Option<u8> {
            let (mut best, mut double) = (0u8, false);
            for x in xs {
                let (places, is_double) = operand(x)?;
                double |= is_double;
                best = best.max(places);
            }
            double.then_some(best)
        };
        let is_double = |x: &SExpr| matches!(self.numeric_kind(x), Double | Float) || self.double_decimals(x).is_some();
        match e {
            SExpr::Func(Func::Round | Func::Truncate, args) if args.first().is_some_and(is_double) => {
                match args.get(1) {
                    None => Some(0),
                    Some(SExpr::Const(Value::Int(n))) => fixed((*n).clamp(0, 31) as u32),
                    Some(SExpr::Const(Value::UInt(n))) => fixed((*n).min(31) as u32),
                    _ => None,
                }
            }
            SExpr::Arith(Arith::Add | Arith::Sub | Arith::Mul | Arith::Mod, a, b) => {
                most(&mut [&**a, &**b].into_iter())
            }
            SExpr::Arith(Arith::Div, a, b) => fixed(u32::from(most(&mut [&**a, &**b].into_iter())?) + 4),
            SExpr::Neg(x) => self.double_decimals(x),
            SExpr::Func(Func::Abs, args) if args.len() == 1 => self.double_decimals(&args[0]),
            SExpr::Func(Func::Coalesce | Func::IfNull | Func::Greatest(_) | Func::Least(_), args) => {
                most(&mut args.iter())
            }
            SExpr::Func(Func::If, args) => most(&mut args.iter().skip(1)),
            SExpr::Case(_, whens, other) => most(&mut whens.iter().map(|(_, r)| r).chain(other.as_deref())),
            SExpr::Cast(x, CastTo::Double) => self.double_decimals(x),
            SExpr::Agg(i) => {
                let spec = self.aggs.as_deref().and_then(|a| a.get(*i))?;
                let arg = self.double_decimals(spec.arg.as_ref()?)?;
                match spec.kind {
                    AggKind::Min | AggKind::Max | AggKind::Sum => Some(arg),
                    AggKind::Avg => fixed(u32::from(arg) + 4),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// The scale a function returning one of `branches` gives its DECIMAL
    /// result, as MySQL types it: the largest of theirs, when one is a
    /// DECIMAL and the others integers or NULL; None when the result is no
    /// DECIMAL or a branch's type is not known before it runs (a parameter).
    pub(crate) fn decimal_scale<'e>(&self, branches: impl Iterator<Item = &'e SExpr>) -> Option<u8> {
        match self.branches_kind(branches) {
            NumericKind::Decimal(s) => Some(s),
            _ => None,
        }
    }

    /// The kind of number a function returning one of `branches` gives.
    fn branches_kind<'e>(&self, branches: impl Iterator<Item = &'e SExpr>) -> NumericKind {
        let mut kind = NumericKind::Null;
        for b in branches {
            kind = match (kind, self.numeric_kind(b)) {
                (NumericKind::Null, k) | (k, NumericKind::Null) => k,
                (NumericKind::Int, NumericKind::Int) => NumericKind::Int,
                (NumericKind::Decimal(x), NumericKind::Decimal(y)) => NumericKind::Decimal(x.max(y)),
                (NumericKind::Decimal(x), NumericKind::Int) | (NumericKind::Int, NumericKind::Decimal(x)) => {
                    NumericKind::Decimal(x)
                }
                (NumericKind::Float, NumericKind::Float) => NumericKind::Float,
                (
                    NumericKind::Double | NumericKind::Float,
                    NumericKind::Int | NumericKind::Decimal(_) | NumericKind::Double | NumericKind::Float,
                )
                | (NumericKind::Int | NumericKind::Decimal(_), NumericKind::Double | NumericKind::Float) => {
                    NumericKind::Double
                }
                _ => return NumericKind::Other,
            };
        }
        kind
    }

    /// What kind of number an expression gives, as far as its type says.
    fn numeric_kind(&self, e: &SExpr) -> NumericKind {
        use NumericKind::*;
        // Arithmetic on a FLOAT computes in double precision.
        let computed = |k: NumericKind| if k == Float { Double } else { k };
        let combine = |a: NumericKind, b: NumericKind, scale: fn(u8, u8) -> u8| match (computed(a), computed(b)) {
            (Int, Int) => Int,
            (Null, _) | (_, Null) => Null,
            (Decimal(x), Int) => Decimal(scale(x, 0)),
            (Int, Decimal(y)) => Decimal(scale(0, y)),
            (Decimal(x), Decimal(y)) => Decimal(scale(x, y)),
            (Double, Int | Decimal(_) | Double) | (Int | Decimal(_), Double) => Double,
            _ => Other,
        };
        match e {
            SExpr::Const(Value::Null) => Null,
            SExpr::Const(Value::Int(_) | Value::UInt(_) | Value::Bool(_)) => Int,
            SExpr::Const(Value::Decimal(d)) => Decimal(d.scale),
            SExpr::Const(Value::Float(_)) | SExpr::Cast(_, CastTo::Double) => Double,
            SExpr::TableCol(t, c) => {
                match self.tables.get(*t).and_then(|t| t.columns.get(*c as usize)).map(|c| &c.ty) {
                    Some(ColumnType::Integer { .. } | ColumnType::Boolean) => Int,
                    Some(ColumnType::Decimal { scale, .. }) => Decimal(*scale),
                    Some(ColumnType::Float) => Float,
                    Some(ColumnType::Double) => Double,
                    _ => Other,
                }
            }
            SExpr::Neg(x) => computed(self.numeric_kind(x)),
            // Truth values are integers (1, 0 or NULL).
            SExpr::Cmp(..)
            | SExpr::In(..)
            | SExpr::Between(..)
            | SExpr::Like(..)
            | SExpr::IsNull(..)
            | SExpr::IsBool(..)
            | SExpr::Not(_)
            | SExpr::And(..)
            | SExpr::Or(..)
            | SExpr::Xor(..) => Int,
            SExpr::Arith(Arith::IntDiv, a, b) => match (self.numeric_kind(a), self.numeric_kind(b)) {
                (Null, _) | (_, Null) => Null,
                (Other, _) | (_, Other) => Other,
                _ => Int,
            },
            SExpr::Func(
                Func::Length
                | Func::CharLength
                | Func::Locate
                | Func::DatePart(_)
                | Func::DateDiff
                | Func::ExtractCompound(_)
                | Func::TimestampDiff(_)
                | Func::Week
                | Func::WeekOfYear
                | Func::YearWeek
                | Func::Ascii
                | Func::ToDays
                | Func::Crc32
                | Func::Sign
                | Func::BitCount
                | Func::FindInSet
                | Func::Field
                | Func::Strcmp
                | Func::RegexpInstr
                | Func::RegexpLike,
                _,
            ) => Int,
            SExpr::Arith(Arith::Add | Arith::Sub | Arith::Mod, a, b) => {
                combine(self.numeric_kind(a), self.numeric_kind(b), |x, y| x.max(y))
            }
            SExpr::Arith(Arith::Mul, a, b) => {
                combine(self.numeric_kind(a), self.numeric_kind(b), |x, y| x.saturating_add(y).min(30))
            }
            SExpr::Arith(Arith::Div, a, b) => {
                // MySQL's div_precision_increment: 4 more digits.
                match (computed(self.numeric_kind(a)), computed(self.numeric_kind(b))) {
                    (Null, _) | (_, Null) => Null,
                    (Int, Int | Decimal(_)) => Decimal(4),
                    (Decimal(x), Int | Decimal(_)) => Decimal(x.saturating_add(4).min(30)),
                    (Double, Int | Decimal(_) | Double) | (Int | Decimal(_), Double) => Double,
                    _ => Other,
                }
            }
            SExpr::Func(Func::DecimalScale(s), _) => Decimal(*s),
            SExpr::Func(Func::Abs, args) if args.len() == 1 => computed(self.numeric_kind(&args[0])),
            SExpr::Func(Func::Ceil | Func::Floor, args) if args.len() == 1 => {
                match computed(self.numeric_kind(&args[0])) {
                    Int | Decimal(_) => Int,
                    other => other,
                }
            }
            SExpr::Func(Func::Round | Func::Truncate, args) => {
                let digits = match args.get(1) {
                    None => Some(0),
                    Some(SExpr::Const(Value::Int(n))) => Some(*n),
                    _ => None,
                };
                match (args.first().map(|a| self.numeric_kind(a)), digits) {
                    (Some(Decimal(_)), Some(n)) if n > 0 => Decimal(n.min(30) as u8),
                    (Some(Decimal(_)), Some(_)) | (Some(Int), Some(_)) => Int,
                    (Some(Null), _) => Null,
                    _ => Other,
                }
            }
            // The ones that return an argument: the branches' common kind
            // (a DECIMAL among them is wrapped in DecimalScale above).
            SExpr::Func(Func::Coalesce | Func::IfNull | Func::Greatest(_) | Func::Least(_), args) => {
                self.branches_kind(args.iter())
            }
            SExpr::Func(Func::If, args) => self.branches_kind(args.iter().skip(1)),
            SExpr::Case(_, whens, other) => self.branches_kind(whens.iter().map(|(_, r)| r).chain(other.as_deref())),
            SExpr::Agg(i) => {
                let Some(spec) = self.aggs.as_deref().and_then(|a| a.get(*i)) else { return Other };
                let arg = spec.arg.as_ref().map_or(Other, |a| self.numeric_kind(a));
                match (spec.kind, arg) {
                    (AggKind::Count | AggKind::CountRows, _) => Int,
                    (AggKind::Sum, Int) => Decimal(0),
                    (AggKind::Sum | AggKind::Min | AggKind::Max, Decimal(s)) => Decimal(s),
                    (AggKind::Min | AggKind::Max, Int) => Int,
                    (AggKind::Min | AggKind::Max, Float) => Float,
                    (AggKind::Min | AggKind::Max | AggKind::Sum | AggKind::Avg, Double)
                    | (AggKind::Sum | AggKind::Avg, Float) => Double,
                    (AggKind::Avg, Int) => Decimal(4),
                    (AggKind::Avg, Decimal(s)) => Decimal(s.saturating_add(4).min(30)),
                    _ => Other,
                }
            }
            // Window MIN/MAX and the functions returning a row's value keep a FLOAT.
            SExpr::Window(i) => {
                let Some(spec) = self.windows.as_deref().and_then(|w| w.get(*i)) else { return Other };
                // (LAG/LEAD with a default value: that decides too.)
                let passes_through = match spec.kind {
                    WindowKind::Agg(AggKind::Min | AggKind::Max)
                    | WindowKind::FirstValue
                    | WindowKind::LastValue
                    | WindowKind::NthValue => true,
                    WindowKind::Lag | WindowKind::Lead => spec.args.len() <= 2,
                    _ => false,
                };
                match spec.args.first() {
                    Some(a) if passes_through && self.numeric_kind(a) == Float => Float,
                    _ => Other,
                }
            }
            _ => Other,
        }
    }

    /// A REGEXP function's arguments with the match type 'i' when the text
    /// and pattern are case-insensitive and no match type is given: the
    /// positional arguments before the match type are filled in with their
    /// defaults (position 1, occurrence 1 or, for REGEXP_REPLACE, 0 for
    /// every match; REGEXP_INSTR's return option 0).
    fn regexp_case(&self, func: &Func, mut args: Vec<SExpr>) -> Vec<SExpr> {
        let int = |i: i64| SExpr::Const(Value::Int(i));
        let defaults: Vec<SExpr> = match func {
            Func::RegexpLike => Vec::new(),
            Func::RegexpInstr => vec![int(1), int(1), int(0)],
            Func::RegexpSubstr => vec![int(1), int(1)],
            Func::RegexpReplace => vec![int(1), int(0)],
            _ => return args,
        };
        let first_optional = if matches!(func, Func::RegexpReplace) { 3 } else { 2 };
        let match_type_at = first_optional + defaults.len();
        if args.len() > match_type_at || args.len() < first_optional {
            return args;
        }
        if !comparison_collation(self.tables, &args[..2]).is_case_insensitive() {
            return args;
        }
        let given = args.len() - first_optional;
        args.extend(defaults.into_iter().skip(given));
        args.push(SExpr::Const(Value::Str("i".into())));
        args
    }

    /// GROUP_CONCAT's SEPARATOR and ORDER BY; other aggregates take no
    /// clauses.
    fn concat_clauses(&mut self, f: &ast::Function, kind: AggKind) -> SqlResult<(String, Vec<(SExpr, bool)>)> {
        let mut separator = ",".to_string();
        let mut order = Vec::new();
        let FunctionArguments::List(list) = &f.args else { return Ok((separator, order)) };
        for clause in &list.clauses {
            match clause {
                ast::FunctionArgumentClause::Separator(v) if kind == AggKind::GroupConcat => {
                    separator = match &v.value {
                        ast::Value::SingleQuotedString(s) | ast::Value::DoubleQuotedString(s) => s.clone(),
                        other => return Err(SqlError::parse(format!("SEPARATOR takes a string, not {other}"))),
                    };
                }
                ast::FunctionArgumentClause::OrderBy(exprs) if kind == AggKind::GroupConcat => {
                    for o in exprs {
                        order.push((self.bind(&o.expr)?, o.options.sort == Some(ast::OrderBySort::Desc)));
                    }
                }
                other => return Err(SqlError::unsupported(format!("'{other}' in {} is not supported", f.name))),
            }
        }
        Ok((separator, order))
    }

    /// `date + INTERVAL n unit` and its DATE_ADD/DATE_SUB forms.
    fn date_add(&mut self, date: &Expr, interval: &ast::Interval, subtract: bool) -> SqlResult<SExpr> {
        let unit = match &interval.leading_field {
            Some(field) => interval_unit(&field.to_string())?,
            None => return Err(SqlError::parse("INTERVAL needs a unit, such as INTERVAL 1 DAY")),
        };
        let args = vec![self.bind(date)?, self.bind(&interval.value)?];
        match &interval.last_field {
            None => Ok(SExpr::Func(Func::DateAdd(unit, subtract), args)),
            // HOUR_MINUTE and the others, read as `HOUR TO MINUTE`.
            Some(last) => {
                let last = interval_unit(&last.to_string())?;
                match crate::dates::Compound::new(unit, last) {
                    Some(c) => Ok(SExpr::Func(Func::DateAddCompound(c, subtract), args)),
                    None => Err(SqlError::parse(format!("{unit:?} TO {last:?} is not an INTERVAL unit MySQL has"))),
                }
            }
        }
    }

    /// TIMESTAMPDIFF(unit, a, b): the unit is a keyword, not a value.
    fn timestampdiff(&mut self, f: &ast::Function) -> SqlResult<SExpr> {
        let args = plain_args(f);
        let [Expr::Identifier(unit), a, b] = args.as_slice() else {
            return Err(SqlError::parse("TIMESTAMPDIFF takes a unit and two dates: TIMESTAMPDIFF(DAY, a, b)"));
        };
        let unit = interval_unit(&unit.value)?;
        Ok(SExpr::Func(Func::TimestampDiff(unit), vec![self.bind(a)?, self.bind(b)?]))
    }

    /// EXTRACT(DAY_MINUTE FROM d) and the other compound units, which the
    /// parser hands over as EXTRACT_DAY_MINUTE(d).
    fn extract_compound(&mut self, f: &ast::Function, name: &str) -> SqlResult<SExpr> {
        let unit = &name[crate::parse::EXTRACT_COMPOUND.len()..];
        let (first, last) = crate::parse::compound_unit(unit)
            .ok_or_else(|| SqlError::new(1305, "42000", format!("FUNCTION {name} does not exist")))?;
        let compound = crate::dates::Compound::new(interval_unit(first)?, interval_unit(last)?)
            .ok_or_else(|| SqlError::parse(format!("{unit} is not a unit EXTRACT takes")))?;
        let [date] = plain_args(f)[..] else {
            return Err(SqlError::parse(format!("EXTRACT({unit} FROM d) takes one date")));
        };
        Ok(SExpr::Func(Func::ExtractCompound(compound), vec![self.bind(date)?]))
    }

    /// TIMESTAMPADD(unit, n, d): DATE_ADD(d, INTERVAL n unit).
    fn timestampadd(&mut self, f: &ast::Function) -> SqlResult<SExpr> {
        let args = plain_args(f);
        let [Expr::Identifier(unit), n, date] = args.as_slice() else {
            return Err(SqlError::parse("TIMESTAMPADD takes a unit, a count and a date: TIMESTAMPADD(DAY, 1, d)"));
        };
        let unit = interval_unit(&unit.value)?;
        Ok(SExpr::Func(Func::DateAdd(unit, false), vec![self.bind(date)?, self.bind(n)?]))
    }

    /// DATE_ADD(d, INTERVAL ...), DATE_SUB, and ADDDATE/SUBDATE(d, days).
    fn date_add_call(&mut self, f: &ast::Function, subtract: bool) -> SqlResult<SExpr> {
        let args = plain_args(f);
        match args.as_slice() {
            [date, Expr::Interval(iv)] => self.date_add(date, iv, subtract),
            [date, days] => {
                Ok(SExpr::Func(Func::DateAdd(Unit::Day, subtract), vec![self.bind(date)?, self.bind(days)?]))
            }
            _ => Err(SqlError::new(
                1582,
                "42000",
                format!("Incorrect parameter count in the call to native function '{}'", f.name),
            )),
        }
    }

    /// `VALUES(col)` inside ON DUPLICATE KEY UPDATE.
    pub fn is_values_call(e: &Expr) -> Option<String> {
        if let Expr::Function(f) = e {
            if f.name.to_string().eq_ignore_ascii_case("VALUES") {
                if let FunctionArguments::List(l) = &f.args {
                    if let [FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Identifier(id)))] = l.args.as_slice() {
                        return Some(id.value.clone());
                    }
                }
            }
        }
        None
    }
}

/// A call's arguments that are plain expressions, unbound (for functions
/// whose arguments are not all values: units, intervals).
fn plain_args(f: &ast::Function) -> Vec<&Expr> {
    match &f.args {
        FunctionArguments::List(l) => l
            .args
            .iter()
            .filter_map(|a| match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// An INTERVAL unit by name (singular or plural).
fn interval_unit(name: &str) -> SqlResult<Unit> {
    let name = name.to_ascii_uppercase();
    Ok(match name.trim_end_matches('S') {
        "MICROSECOND" => Unit::Microsecond,
        "SECOND" => Unit::Second,
        "MINUTE" => Unit::Minute,
        "HOUR" => Unit::Hour,
        "DAY" => Unit::Day,
        "WEEK" => Unit::Week,
        "MONTH" => Unit::Month,
        "QUARTER" => Unit::Quarter,
        "YEAR" => Unit::Year,
        _ => return Err(SqlError::unsupported(format!("INTERVAL unit {name} is not supported"))),
    })
}

/// A constant LIKE pattern with `ESCAPE 'c'` rewritten to the `\` escapes
/// LIKE itself reads (on the SQL node and on the data nodes alike).
fn with_backslash_escapes(pattern: SExpr, escape: SExpr) -> SqlResult<SExpr> {
    let (SExpr::Const(Value::Str(p)), SExpr::Const(Value::Str(e))) = (&pattern, &escape) else {
        return Err(SqlError::unsupported("LIKE ... ESCAPE needs a constant pattern and escape character"));
    };
    let mut chars = e.chars();
    let esc = match (chars.next(), chars.next()) {
        (Some(c), None) => c,
        (None, _) => return Ok(pattern),
        _ => return Err(SqlError::new(1210, "HY000", "Incorrect arguments to ESCAPE")),
    };
    let mut out = String::with_capacity(p.len());
    let mut it = p.chars();
    while let Some(c) = it.next() {
        if c == esc {
            // The escaped character is literal; an escape at the end stands for itself.
            let literal = it.next().unwrap_or(esc);
            out.push('\\');
            out.push(literal);
        } else if c == '\\' {
            out.push_str("\\\\");
        } else {
            out.push(c);
        }
    }
    Ok(SExpr::Const(Value::Str(out)))
}

/// Scalar functions evaluated by `eval`: their names and how many
/// arguments they take (at least, at most).
const SCALAR_FUNCTIONS: &[(&[&str], Func, usize, usize)] = &[
    (&["VERSION"], Func::Version, 0, 0),
    (&["REGEXP_LIKE"], Func::RegexpLike, 2, 3),
    (&["REGEXP_INSTR"], Func::RegexpInstr, 2, 6),
    (&["REGEXP_SUBSTR"], Func::RegexpSubstr, 2, 5),
    (&["REGEXP_REPLACE"], Func::RegexpReplace, 3, 6),
    (&["IFNULL"], Func::IfNull, 2, 2),
    (&["COALESCE"], Func::Coalesce, 1, 255),
    (&["NULLIF"], Func::NullIf(Collation::Bin), 2, 2),
    (&["IF"], Func::If, 3, 3),
    (&["CONCAT"], Func::Concat, 1, 255),
    (&["CONCAT_WS"], Func::ConcatWs, 2, 255),
    (&["LENGTH", "OCTET_LENGTH"], Func::Length, 1, 1),
    (&["CHAR_LENGTH", "CHARACTER_LENGTH"], Func::CharLength, 1, 1),
    (&["UPPER", "UCASE"], Func::Upper, 1, 1),
    (&["LOWER", "LCASE"], Func::Lower, 1, 1),
    (&["SUBSTRING", "SUBSTR", "MID"], Func::Substring, 2, 3),
    (&["LEFT"], Func::Left, 2, 2),
    (&["RIGHT"], Func::Right, 2, 2),
    (&["TRIM"], Func::Trim, 1, 1),
    (&["LTRIM"], Func::LTrim, 1, 1),
    (&["RTRIM"], Func::RTrim, 1, 1),
    (&["REPLACE"], Func::Replace, 3, 3),
    (&["ABS"], Func::Abs, 1, 1),
    (&["CEIL", "CEILING"], Func::Ceil, 1, 1),
    (&["FLOOR"], Func::Floor, 1, 1),
    (&["ROUND"], Func::Round, 1, 2),
    (&["LOCATE"], Func::Locate, 2, 3),
    (&["UNIX_TIMESTAMP"], Func::UnixTimestamp, 0, 1),
    (&["UUID"], Func::Uuid, 0, 0),
    (&["YEAR"], Func::DatePart(Part::Year), 1, 1),
    (&["QUARTER"], Func::DatePart(Part::Quarter), 1, 1),
    (&["MONTH"], Func::DatePart(Part::Month), 1, 1),
    (&["DAY", "DAYOFMONTH"], Func::DatePart(Part::Day), 1, 1),
    (&["HOUR"], Func::DatePart(Part::Hour), 1, 1),
    (&["MINUTE"], Func::DatePart(Part::Minute), 1, 1),
    (&["SECOND"], Func::DatePart(Part::Second), 1, 1),
    (&["MICROSECOND"], Func::DatePart(Part::Microsecond), 1, 1),
    (&["DAYOFWEEK"], Func::DatePart(Part::DayOfWeek), 1, 1),
    (&["WEEKDAY"], Func::DatePart(Part::Weekday), 1, 1),
    (&["DAYOFYEAR"], Func::DatePart(Part::DayOfYear), 1, 1),
    (&["DATE"], Func::DateOf, 1, 1),
    (&["TIME"], Func::Times(TimeFunc::Of), 1, 1),
    (&["TIME_TO_SEC"], Func::Times(TimeFunc::ToSeconds), 1, 1),
    (&["SEC_TO_TIME"], Func::Times(TimeFunc::FromSeconds), 1, 1),
    (&["TIMEDIFF"], Func::Times(TimeFunc::Diff), 2, 2),
    (&["ADDTIME"], Func::Times(TimeFunc::Add), 2, 2),
    (&["SUBTIME"], Func::Times(TimeFunc::Subtract), 2, 2),
    (&["MAKETIME"], Func::Times(TimeFunc::Make), 3, 3),
    (&["DATE_FORMAT"], Func::DateFormat, 2, 2),
    (&["DATEDIFF"], Func::DateDiff, 2, 2),
    (&["WEEK"], Func::Week, 1, 2),
    (&["WEEKOFYEAR"], Func::WeekOfYear, 1, 1),
    (&["YEARWEEK"], Func::YearWeek, 1, 2),
    (&["MAKEDATE"], Func::MakeDate, 2, 2),
    (&["STR_TO_DATE"], Func::StrToDate, 2, 2),
    (&["LAST_DAY"], Func::LastDay, 1, 1),
    (&["DAYNAME"], Func::DayName, 1, 1),
    (&["MONTHNAME"], Func::MonthName, 1, 1),
    (&["FROM_UNIXTIME"], Func::FromUnixTime, 1, 1),
    (&["LPAD"], Func::LPad, 3, 3),
    (&["RPAD"], Func::RPad, 3, 3),
    (&["REPEAT"], Func::Repeat, 2, 2),
    (&["REVERSE"], Func::Reverse, 1, 1),
    (&["SPACE"], Func::Space, 1, 1),
    (&["ASCII", "ORD"], Func::Ascii, 1, 1),
    (&["HEX"], Func::Hex, 1, 1),
    (&["CHAR"], Func::Char, 1, 255),
    (&["FORMAT"], Func::Format, 2, 3),
    (&["CONV"], Func::Conv, 3, 3),
    (&["CRC32"], Func::Crc32, 1, 1),
    (&["TO_DAYS"], Func::ToDays, 1, 1),
    (&["FROM_DAYS"], Func::FromDays, 1, 1),
    (&["UNHEX"], Func::Unhex, 1, 1),
    (&["TO_BASE64"], Func::ToBase64, 1, 1),
    (&["FROM_BASE64"], Func::FromBase64, 1, 1),
    (&["MD5"], Func::Md5, 1, 1),
    (&["SHA1", "SHA"], Func::Sha1, 1, 1),
    (&["SHA2"], Func::Sha2, 2, 2),
    (&["TRUNCATE"], Func::Truncate, 2, 2),
    (&["POW", "POWER"], Func::Pow, 2, 2),
    (&["SQRT"], Func::Sqrt, 1, 1),
    (&["EXP"], Func::Exp, 1, 1),
    (&["LN"], Func::Log, 1, 1),
    (&["LOG"], Func::Log, 1, 2),
    (&["LOG2"], Func::Log2, 1, 1),
    (&["LOG10"], Func::Log10, 1, 1),
    (&["SIGN"], Func::Sign, 1, 1),
    (&["BIT_COUNT"], Func::BitCount, 1, 1),
    (&["SUBSTRING_INDEX"], Func::SubstringIndex, 3, 3),
    (&["FIND_IN_SET"], Func::FindInSet, 2, 2),
    (&["FIELD"], Func::Field, 2, 255),
    (&["ELT"], Func::Elt, 2, 255),
    (&["STRCMP"], Func::Strcmp, 2, 2),
    (&["INSERT"], Func::InsertStr, 4, 4),
    (&["QUOTE"], Func::Quote, 1, 1),
    (&["PI"], Func::Pi, 0, 0),
    (&["RAND"], Func::Rand, 0, 0),
    (&["GREATEST"], Func::Greatest(Collation::Bin), 2, 255),
    (&["LEAST"], Func::Least(Collation::Bin), 2, 255),
];

/// A frame clause: ROWS with any bounds, RANGE with UNBOUNDED and CURRENT
/// ROW ones (MySQL's value offsets over dates and numbers are refused).
fn window_frame(f: &ast::WindowFrame) -> SqlResult<Frame> {
    let bound = |b: &ast::WindowFrameBound, rows: bool| -> SqlResult<FrameBound> {
        let offset = |e: &Option<Box<Expr>>| -> SqlResult<Option<u64>> {
            match e.as_deref() {
                None => Ok(None),
                Some(Expr::Value(v)) if rows => match &v.value {
                    ast::Value::Number(n, _) => n.parse::<u64>().map(Some).map_err(|_| {
                        SqlError::parse(format!("a ROWS frame offset must be a non-negative integer, not {n}"))
                    }),
                    other => Err(SqlError::parse(format!("a ROWS frame offset must be an integer, not {other}"))),
                },
                Some(_) if rows => Err(SqlError::parse("a ROWS frame offset must be an integer literal")),
                Some(_) => Err(SqlError::unsupported(
                    "RANGE frames with offsets are not supported; use ROWS, or UNBOUNDED/CURRENT ROW bounds",
                )),
            }
        };
        Ok(match b {
            ast::WindowFrameBound::CurrentRow => FrameBound::Preceding(Some(0)),
            ast::WindowFrameBound::Preceding(e) => FrameBound::Preceding(offset(e)?),
            ast::WindowFrameBound::Following(e) => FrameBound::Following(offset(e)?),
        })
    };
    let rows = match f.units {
        ast::WindowFrameUnits::Rows => true,
        ast::WindowFrameUnits::Range => false,
        ast::WindowFrameUnits::Groups => return Err(SqlError::unsupported("GROUPS frames are not MySQL's")),
    };
    let start = bound(&f.start_bound, rows)?;
    // `ROWS n PRECEDING` alone ends at the current row.
    let end = match &f.end_bound {
        Some(b) => bound(b, rows)?,
        None => FrameBound::Preceding(Some(0)),
    };
    if start == FrameBound::Following(None) || end == FrameBound::Preceding(None) {
        return Err(SqlError::parse(
            "a window frame cannot start at UNBOUNDED FOLLOWING or end at UNBOUNDED PRECEDING",
        ));
    }
    Ok(if rows { Frame::Rows(start, end) } else { Frame::Range(start, end) })
}

/// The kind of number an expression gives, for typing DECIMAL results.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NumericKind {
    Null,
    Int,
    Decimal(u8),
    Double,
    /// A FLOAT column, or MIN/MAX/COALESCE/IF/CASE of FLOATs only (MySQL
    /// keeps the type there; anything computed from one is a DOUBLE).
    Float,
    /// Not a number, or not known before it runs.
    Other,
}

/// A function returning one of its arguments, typed as MySQL types it from
/// them: a DECIMAL shows the largest scale, a DOUBLE among numbers makes
/// the value a DOUBLE.
fn typed_as(e: SExpr, kind: NumericKind) -> SExpr {
    match kind {
        NumericKind::Decimal(s) => SExpr::Func(Func::DecimalScale(s), vec![e]),
        NumericKind::Double => SExpr::Cast(Box::new(e), CastTo::Double),
        _ => e,
    }
}

/// The bytes of MySQL's bit-value literal `b'0101'`: its bits read as a
/// big-endian number, in as few whole bytes as hold them all.
fn bit_literal(bits: &str) -> SqlResult<Vec<u8>> {
    if !bits.bytes().all(|b| b == b'0' || b == b'1') {
        return Err(SqlError::parse(format!("b'{bits}' is no bit-value literal: it takes only the digits 0 and 1")));
    }
    let mut bytes = vec![0u8; bits.len().div_ceil(8)];
    for (i, bit) in bits.bytes().rev().enumerate() {
        if bit == b'1' {
            let at = bytes.len() - 1 - i / 8;
            bytes[at] |= 1 << (i % 8);
        }
    }
    Ok(bytes)
}

pub fn literal(v: &ast::Value) -> SqlResult<SExpr> {
    Ok(SExpr::Const(match v {
        ast::Value::Number(n, _) => number(n)?,
        ast::Value::SingleQuotedString(s) | ast::Value::DoubleQuotedString(s) => crate::parse::literal_value(s),
        ast::Value::EscapedStringLiteral(s) | ast::Value::NationalStringLiteral(s) => Value::Str(s.clone()),
        ast::Value::HexStringLiteral(h) => Value::Bytes(hex(h)?),
        ast::Value::SingleQuotedByteStringLiteral(s) | ast::Value::DoubleQuotedByteStringLiteral(s) => {
            Value::Bytes(bit_literal(s)?)
        }
        ast::Value::Boolean(b) => Value::Int(*b as i64),
        ast::Value::Null => Value::Null,
        ast::Value::Placeholder(p) => {
            let n: usize = p
                .strip_prefix('?')
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| SqlError::parse(format!("placeholder '{p}' is not supported; use ?")))?;
            return Ok(SExpr::Param(n));
        }
        other => return Err(SqlError::unsupported(format!("literal {other} is not supported"))),
    }))
}

/// `DATE '2024-01-05'`, `TIMESTAMP '2024-01-05 10:00:00'` (and `DATETIME`,
/// `TIME` is not a type here): the string must be a valid value of the type.
fn typed_literal(t: &DataType, v: &ast::Value) -> SqlResult<SExpr> {
    let (ast::Value::SingleQuotedString(text) | ast::Value::DoubleQuotedString(text)) = v else {
        return Err(SqlError::parse(format!("{t} must be followed by a quoted string, not {v}")));
    };
    let (value, shown) = match t {
        DataType::Date => (latsdb_types::value::parse_date(text).map(Value::Date), "DATE"),
        DataType::Datetime(_) | DataType::Timestamp(..) => {
            (latsdb_types::value::parse_datetime(text).map(Value::DateTime), "DATETIME")
        }
        other => return Err(SqlError::unsupported(format!("{other} '...' literals are not supported"))),
    };
    value.map(SExpr::Const).ok_or_else(|| {
        SqlError::new(crate::error::ER_WRONG_VALUE, "HY000", format!("Incorrect {shown} value: '{text}'"))
    })
}

fn number(n: &str) -> SqlResult<Value> {
    if let Ok(i) = n.parse::<i64>() {
        return Ok(Value::Int(i));
    }
    if let Ok(u) = n.parse::<u64>() {
        return Ok(Value::UInt(u));
    }
    if !n.contains(['e', 'E']) {
        if let Some(d) = Decimal::parse(n) {
            return Ok(Value::Decimal(d));
        }
    }
    n.parse::<f64>().map(Value::Float).map_err(|_| SqlError::parse(format!("'{n}' is not a number")))
}

/// The bytes of a hexadecimal literal (X'...' or 0x...); an odd number of
/// digits reads as if a 0 led them. The text may hold any character the
/// tokenizer let through, so it is checked digit by digit, never sliced.
fn hex(h: &str) -> SqlResult<Vec<u8>> {
    let mut digits = h
        .chars()
        .map(|c| c.to_digit(16).map(|d| d as u8))
        .collect::<Option<Vec<u8>>>()
        .ok_or_else(|| SqlError::parse(format!("X'{h}' is not hexadecimal")))?;
    if digits.len() % 2 == 1 {
        digits.insert(0, 0);
    }
    Ok(digits.chunks_exact(2).map(|pair| pair[0] << 4 | pair[1]).collect())
}

fn cast_target(t: &DataType) -> SqlResult<CastTo> {
    Ok(match t {
        DataType::Signed | DataType::SignedInteger => CastTo::Signed,
        DataType::Unsigned | DataType::UnsignedInteger => CastTo::Unsigned,
        DataType::Char(_) | DataType::Varchar(_) | DataType::Text | DataType::Nvarchar(_) => CastTo::Char,
        DataType::Binary(_) | DataType::Varbinary(_) => CastTo::Binary,
        DataType::Int(_) | DataType::Integer(_) | DataType::BigInt(_) => CastTo::Signed,
        DataType::Double(_) | DataType::DoublePrecision | DataType::Float(_) | DataType::Real => CastTo::Double,
        DataType::Decimal(info) | DataType::Numeric(info) | DataType::Dec(info) => {
            let (p, s) = match info {
                ast::ExactNumberInfo::None => (10, 0),
                ast::ExactNumberInfo::Precision(p) => (*p, 0),
                ast::ExactNumberInfo::PrecisionAndScale(p, s) => (*p, (*s).max(0) as u64),
            };
            CastTo::Decimal(p.min(38) as u8, s.min(38) as u8)
        }
        DataType::Date => CastTo::Date,
        DataType::Datetime(n) | DataType::Timestamp(n, _) => match n.unwrap_or(0) {
            digits @ 0..=6 => CastTo::DateTime(digits as u8),
            digits => {
                return Err(SqlError::new(
                    1426,
                    "42000",
                    format!("Too big precision {digits} specified for 'CAST'. Maximum is 6."),
                ))
            }
        },
        DataType::Time(n, _) => match n.unwrap_or(0) {
            digits @ 0..=6 => CastTo::Time(digits as u8),
            digits => {
                return Err(SqlError::new(
                    1426,
                    "42000",
                    format!("Too big precision {digits} specified for 'CAST'. Maximum is 6."),
                ))
            }
        },
        other => return Err(SqlError::unsupported(format!("CAST to {other} is not supported"))),
    })
}

/// A text expression's collation, and whether a COLLATE clause named it
/// (which wins over a column's); None for text of the connection's
/// collation (literals, parameters, casts) and for other types.
pub fn collation_of(tables: &[ScopeTable], e: &SExpr) -> Option<(Collation, bool)> {
    match e {
        SExpr::Func(Func::Collate(c), _) => Some((*c, true)),
        SExpr::Func(Func::Implicit(c), _) => Some((*c, false)),
        SExpr::Func(Func::Fold | Func::Weight, _) => Some((Collation::GeneralCi, false)),
        SExpr::TableCol(t, c) => {
            tables.get(*t)?.columns.get(*c as usize).filter(|d| d.ty.is_string()).map(|d| (d.collation, false))
        }
        // A function of a text column keeps its collation (CONCAT, LOWER,
        // IFNULL, ...); folding a number is harmless where it does not.
        SExpr::Func(_, args) => derived(tables, args),
        SExpr::Case(_, whens, other) => derived(tables, whens.iter().map(|(_, r)| r).chain(other.as_deref())),
        _ => None,
    }
}

/// The collation of operands taken together, as MySQL derives it: a COLLATE
/// clause first; then the columns', where utf8mb4_bin wins over a
/// case-insensitive collation; None when no operand has one.
fn derived<'e>(tables: &[ScopeTable], items: impl IntoIterator<Item = &'e SExpr>) -> Option<(Collation, bool)> {
    let found: Vec<(Collation, bool)> = items.into_iter().filter_map(|e| collation_of(tables, e)).collect();
    strongest(&found)
}

/// Which of several derived collations (`collation_of`'s) operands
/// together take: a COLLATE clause's, then utf8mb4_bin over a
/// case-insensitive one, else the first.
pub fn strongest(found: &[(Collation, bool)]) -> Option<(Collation, bool)> {
    found
        .iter()
        .find(|(_, explicit)| *explicit)
        .or_else(|| found.iter().find(|(c, _)| !c.is_case_insensitive()))
        .or(found.first())
        .copied()
}

/// The collation operands compare under (`derived`), else the
/// connection's, utf8mb4_bin.
pub fn comparison_collation<'e>(tables: &[ScopeTable], items: impl IntoIterator<Item = &'e SExpr>) -> Collation {
    derived(tables, items).map_or(Collation::Bin, |(c, _)| c)
}

/// `x COLLATE name` as the value it names (the clause has done its work
/// once the collation is derived).
fn without_collate(e: SExpr) -> SExpr {
    match e {
        SExpr::Func(Func::Collate(_) | Func::Implicit(_), args) if args.len() == 1 => {
            args.into_iter().next().unwrap_or(SExpr::Const(Value::Null))
        }
        other => other,
    }
}

/// `e` as a case-insensitive comparison sees it: its weight.
pub fn folded(e: SExpr) -> SExpr {
    match without_collate(e) {
        SExpr::Const(Value::Str(s)) => SExpr::Const(Value::Str(Collation::GeneralCi.fold(&s).into_owned())),
        e @ SExpr::Func(Func::Fold, _) => e,
        e => SExpr::Func(Func::Fold, vec![e]),
    }
}

/// Operands compared with one another (IN, BETWEEN, LIKE, STRCMP, ...),
/// folded when their collation is case-insensitive.
pub fn collated(tables: &[ScopeTable], items: Vec<SExpr>) -> Vec<SExpr> {
    if comparison_collation(tables, &items).is_case_insensitive() {
        items.into_iter().map(folded).collect()
    } else {
        items.into_iter().map(without_implicit).collect()
    }
}

/// A subquery's value as the parameter it is, once its collation has had
/// its say (an IN-list of parameters is a batch of key lookups). Unlike a
/// COLLATE on a column, it marks a value: a `_ci` column compared as bytes
/// stays unfolded, which keeps the planner off its weight-keyed index.
fn without_implicit(e: SExpr) -> SExpr {
    match e {
        SExpr::Func(Func::Implicit(_), args) if args.len() == 1 => {
            args.into_iter().next().unwrap_or(SExpr::Const(Value::Null))
        }
        other => other,
    }
}

/// `a op b` under the operands' collation.
pub fn compare(tables: &[ScopeTable], op: Cmp, a: SExpr, b: SExpr) -> SExpr {
    let [a, b] = collated_pair(tables, [a, b]);
    SExpr::Cmp(op, Box::new(a), Box::new(b))
}

/// `collated` for a fixed number of operands.
fn collated_pair<const N: usize>(tables: &[ScopeTable], items: [SExpr; N]) -> [SExpr; N] {
    if comparison_collation(tables, &items).is_case_insensitive() {
        items.map(folded)
    } else {
        items.map(without_implicit)
    }
}

/// A sort or grouping key under its collation: its weight when
/// case-insensitive (folded, without trailing spaces, numbers unchanged),
/// so 'a', 'A' and 'a ' sort and group together.
pub fn sort_key(tables: &[ScopeTable], e: SExpr) -> SExpr {
    if comparison_collation(tables, [&e]).is_case_insensitive() {
        SExpr::Func(Func::Weight, vec![without_collate(e)])
    } else {
        e
    }
}

/// Splits a condition into its AND-ed parts.
pub fn conjuncts(e: SExpr, out: &mut Vec<SExpr>) {
    match e {
        SExpr::And(a, b) => {
            conjuncts(*a, out);
            conjuncts(*b, out);
        }
        other => out.push(other),
    }
}

pub fn and_all(mut parts: Vec<SExpr>) -> Option<SExpr> {
    let mut acc = parts.pop()?;
    while let Some(p) = parts.pop() {
        acc = SExpr::And(Box::new(p), Box::new(acc));
    }
    Some(acc)
}

/// The parts joined by OR as a balanced tree, so a list of thousands of
/// rows does not nest thousands deep.
fn any_of(mut parts: Vec<SExpr>) -> Option<SExpr> {
    if parts.len() <= 1 {
        return parts.pop();
    }
    let right = parts.split_off(parts.len() / 2);
    Some(SExpr::Or(Box::new(any_of(parts)?), Box::new(any_of(right)?)))
}

/// Tables an expression reads.
pub fn tables_of(e: &SExpr) -> u64 {
    let mut mask = 0u64;
    e.walk(&mut |x| {
        if let SExpr::TableCol(t, _) = x {
            mask |= 1 << (*t).min(63);
        }
    });
    mask
}

/// The digits of a second NOW(n) and CURRENT_TIMESTAMP(n) are asked for: a
/// constant 0-6 (MySQL refuses more with 1426).
fn fraction_digits_arg(function: &str, arg: Option<&SExpr>) -> SqlResult<u8> {
    let Some(arg) = arg else {
        return Ok(0);
    };
    let value = match arg {
        SExpr::Const(v) => v.clone(),
        _ => {
            return Err(SqlError::parse(format!(
                "the precision of {function}() must be a number from 0 to 6, not an expression"
            )))
        }
    };
    match crate::eval::int_arg(&value) {
        Some(n @ 0..=6) => Ok(n as u8),
        _ => Err(SqlError::new(
            1426,
            "42000",
            format!(
                "Too big precision {} specified for '{}'. Maximum is 6.",
                crate::eval::to_text(&value),
                function.to_lowercase()
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hexadecimal_literals_decode_and_refuse_what_is_not_hex() {
        assert_eq!(hex("4142").unwrap(), b"AB");
        assert_eq!(hex("abc").unwrap(), vec![0x0a, 0xbc]);
        assert_eq!(hex("").unwrap(), Vec::<u8>::new());
        // Found by the sql_statements fuzz target: a character of several
        // bytes inside X'...' panicked the decoder, which sliced bytes.
        assert!(hex("AT\u{10ffb3}\u{7cb}").is_err());
        assert!(hex("é1").is_err());
    }
}
