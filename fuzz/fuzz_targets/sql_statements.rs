//! SQL statements from any client through the parser and the planner: a
//! SELECT (joins, subqueries, grouping, windows, UNION), an INSERT, an
//! UPDATE or a DELETE is planned against a catalog where `t` is a stored
//! table with a column of every type (primary key `i`, an index on `v`)
//! and every other name is an in-memory table of the same columns with two
//! rows. Planning runs the binder over every expression and chooses keys,
//! ranges and pushed-down filters. Errors are answers; a panic is a
//! finding.
#![no_main]

use latsdb_client::Table;
use latsdb_sql::error::SqlResult;
use latsdb_sql::plan::{plan_select, Catalog, SourceKind, VirtualTable};
use latsdb_sql::{dml, parse};
use latsdb_types::schema::{ColumnDef, TableDef, TableSpec};
use latsdb_types::Value;
use libfuzzer_sys::fuzz_target;
use sqlparser::ast::Statement;
use std::sync::{Arc, OnceLock};

struct Tables {
    stored: Arc<Table>,
    virtual_table: Arc<VirtualTable>,
}

fn tables() -> &'static Tables {
    static TABLES: OnceLock<Tables> = OnceLock::new();
    TABLES.get_or_init(|| {
        let (columns, row): (Vec<ColumnDef>, Vec<Value>) = latsdb_fuzz::columns_of_every_type().into_iter().unzip();
        let spec =
            columns.iter().cloned().fold(TableSpec::new("db", "t"), |spec, c| spec.column(c)).primary_key(&["i"]);
        let def = TableDef::from_spec(&spec, 7, 1)
            .and_then(|d| d.with_index("v_idx", &["v".into()], false))
            .expect("a valid table");
        let nulls = vec![Value::Null; row.len()];
        Tables {
            stored: Table::from_def(def),
            virtual_table: Arc::new(VirtualTable { columns, rows: vec![row, nulls] }),
        }
    })
}

struct FuzzCatalog;

impl Catalog for FuzzCatalog {
    async fn resolve(&self, _db: Option<&str>, name: &str) -> SqlResult<(String, SourceKind)> {
        let kind = if name.eq_ignore_ascii_case("t") {
            SourceKind::Stored(tables().stored.clone())
        } else {
            SourceKind::Virtual(tables().virtual_table.clone())
        };
        Ok(("db".into(), kind))
    }
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| tokio::runtime::Builder::new_current_thread().build().expect("a current-thread runtime"))
}

fuzz_target!(|data: &[u8]| latsdb_fuzz::on_worker_stack(run, data));

fn run(data: &[u8]) {
    let text = parse::decode_query(data);
    let Ok(parsed) = parse::parse(&text) else { return };
    for statement in &parsed.statements {
        runtime().block_on(async {
            match statement {
                Statement::Query(query) => drop(plan_select(&FuzzCatalog, query).await),
                Statement::Insert(insert) => drop(dml::plan_insert(&FuzzCatalog, insert).await),
                Statement::Update(_) | Statement::Delete(_) => drop(dml::plan_write(&FuzzCatalog, statement).await),
                _ => {}
            }
        });
    }
}
