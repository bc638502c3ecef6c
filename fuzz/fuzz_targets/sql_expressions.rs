//! SQL expressions from any client: the input is a select list, parsed
//! as `SELECT <input> FROM t`, bound against a table with a column of
//! every type latsdb stores, and evaluated against one row of them; each
//! value is then converted to every column type as an INSERT or UPDATE
//! would store it, printed, and compared with itself. Every function,
//! operator, cast and conversion is reached this way. Errors are answers;
//! a panic, an abort or an allocation past libFuzzer's limit is a finding.
#![no_main]

use latsdb_sql::bind::{Binder, ScopeTable};
use latsdb_sql::error::SqlResult;
use latsdb_sql::eval::{self, Env, SessionLookup, SessionValue};
use latsdb_sql::parse;
use latsdb_types::schema::{ColumnDef, ColumnType as T, IntWidth};
use latsdb_types::{Collation, Decimal, Value};
use libfuzzer_sys::fuzz_target;
use sqlparser::ast::{SelectItem, SetExpr, Statement};

/// A connection's values (NOW(), DATABASE(), @variables) as constants.
struct Session;

impl SessionLookup for Session {
    fn session_value(&self, v: &SessionValue) -> SqlResult<Value> {
        Ok(match v {
            SessionValue::Now(_) => Value::DateTime(1_700_000_000_123_456),
            SessionValue::Database => Value::Str("db".into()),
            _ => Value::Null,
        })
    }
}

fn table() -> (ScopeTable, Vec<Value>) {
    let text = |n: &str, t: T| ColumnDef::new(n, t);
    let columns = vec![
        (text("i", T::int(IntWidth::Int)), Value::Int(-42)),
        (text("u", T::uint(IntWidth::Big)), Value::UInt(u64::MAX)),
        (text("f", T::Float), Value::Float(1.5)),
        (text("d", T::Double), Value::Float(-2.25e300)),
        (
            text("n", T::Decimal { precision: 20, scale: 4 }),
            Value::Decimal(Decimal::parse("-1234.5678").expect("a decimal")),
        ),
        (text("c", T::Char(4)).collated(Collation::GeneralCi), Value::Str("Ab".into())),
        (text("v", T::VarChar(16)), Value::Str("héllo wörld".into())),
        (text("bn", T::Binary(4)), Value::Bytes(vec![0, 255, 1, 0])),
        (text("vb", T::VarBinary(8)), Value::Bytes(vec![0x80, 0x7f])),
        (text("tx", T::Text), Value::Str("2024-02-29 23:59:59.5".into())),
        (text("bl", T::Blob), Value::Bytes(b"\xff\xfe".to_vec())),
        (text("dt", T::Date), Value::Date(19_782)),
        (text("dtm", T::DateTime).fraction_digits(6), Value::DateTime(1_700_000_000_999_999)),
        (text("ts", T::Timestamp), Value::Timestamp(1_000_000)),
        (text("b", T::Boolean), Value::Bool(true)),
        (text("tm", T::Time).fraction_digits(3), Value::Time(-3_020_399_000_000)),
        (text("y", T::Year), Value::Int(2155)),
        (text("bt", T::Bit(12)), Value::UInt(0xfff)),
        (text("e", T::Enum).members(["a", "b", "c"]), Value::Str("b".into())),
        (text("s", T::Set).members(["x", "y", "z"]), Value::Str("x,z".into())),
        (text("nl", T::int(IntWidth::Tiny)), Value::Null),
    ];
    let (defs, row): (Vec<ColumnDef>, Vec<Value>) = columns.into_iter().unzip();
    let scope = ScopeTable {
        alias: "t".into(),
        db: "db".into(),
        name: "t".into(),
        columns: defs,
        merged: Vec::new(),
        hidden: None,
    };
    (scope, row)
}

fuzz_target!(|data: &[u8]| {
    let Ok(list) = std::str::from_utf8(data) else { return };
    let Ok(parsed) = parse::parse(&format!("SELECT {list} FROM t")) else { return };
    let Some(Statement::Query(query)) = parsed.statements.first() else { return };
    let SetExpr::Select(select) = query.body.as_ref() else { return };
    let (scope, row) = table();
    let tables = [scope];
    let params: Vec<Value> = (0..parsed.params).map(|i| row[i % row.len()].clone()).collect();
    for strict in [false, true] {
        let env = Env { params: &params, session: &Session, strict_numbers: strict };
        for item in &select.projection {
            let expr = match item {
                SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => e,
                _ => continue,
            };
            let Ok(bound) = Binder::new(&tables, "field list").bind(expr) else { continue };
            let Ok(value) = bound.eval(&row, &env) else { continue };
            let _ = eval::to_text(&value);
            assert!(eval::compare(&value, &value).is_none_or(|o| o.is_eq()), "{value:?} equals itself");
            for column in &tables[0].columns {
                let _ = eval::to_column(value.clone(), column);
                let _ = eval::to_column_ignoring(value.clone(), column);
            }
        }
    }
});
