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
use latsdb_types::schema::ColumnDef;
use latsdb_types::Value;
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
    let (defs, row): (Vec<ColumnDef>, Vec<Value>) = latsdb_fuzz::columns_of_every_type().into_iter().unzip();
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

fuzz_target!(|data: &[u8]| latsdb_fuzz::on_worker_stack(run, data));

fn run(data: &[u8]) {
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
            // REPEAT and LPAD make values up to max_allowed_packet (64 MiB)
            // as MySQL does; converting those to every column, twice, takes
            // longer than the target's 10 s per input without finding more.
            if eval::to_text(&value).len() > 1 << 16 {
                continue;
            }
            assert!(eval::compare(&value, &value).is_none_or(|o| o.is_eq()), "{value:?} equals itself");
            for column in &tables[0].columns {
                let _ = eval::to_column(value.clone(), column);
                let _ = eval::to_column_ignoring(value.clone(), column);
            }
        }
    }
}
