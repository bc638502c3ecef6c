//! What the planner pushes to the data nodes: key lookups for key
//! equalities and IN-lists (one batched round trip), index ranges with the
//! other conditions as scan filters, aggregates computed on the data nodes,
//! joins on a primary key as batched lookups; and only the needed columns.

use latsdb_client::Table;
use latsdb_sql::error::{SqlError, SqlResult};
use latsdb_sql::parse::parse;
use latsdb_sql::plan::{plan_select, Access, AggMode, Catalog, SelectPlan, SourceKind};
use latsdb_types::schema::{ColumnDef, ColumnType, IntWidth, TableDef, TableSpec};
use latsdb_types::Collation;
use std::sync::Arc;

struct Tables(Vec<Arc<Table>>);

impl Catalog for Tables {
    async fn resolve(&self, _db: Option<&str>, name: &str) -> SqlResult<(String, SourceKind)> {
        let t = self.0.iter().find(|t| t.def().name == name).ok_or_else(|| SqlError::no_such_table("db", name))?;
        Ok(("db".into(), SourceKind::Stored(t.clone())))
    }
}

fn catalog() -> Tables {
    let sbtest = TableSpec::new("db", "sbtest1")
        .column(ColumnDef::new("id", ColumnType::int(IntWidth::Int)).not_null())
        .column(ColumnDef::new("k", ColumnType::int(IntWidth::Int)).not_null())
        .column(ColumnDef::new("c", ColumnType::Char(120)).not_null())
        .column(ColumnDef::new("pad", ColumnType::Char(60)).not_null())
        .primary_key(&["id"]);
    let def = TableDef::from_spec(&sbtest, 1, 8).unwrap().with_index("k_1", &["k".to_string()], false).unwrap();
    let orders = TableSpec::new("db", "orders")
        .column(ColumnDef::new("oid", ColumnType::int(IntWidth::Big)).not_null())
        .column(ColumnDef::new("customer", ColumnType::int(IntWidth::Int)).not_null())
        .primary_key(&["oid"]);
    let users = TableSpec::new("db", "users")
        .column(ColumnDef::new("email", ColumnType::VarChar(40)).collated(Collation::GeneralCi).not_null())
        .column(ColumnDef::new("name", ColumnType::VarChar(20)).collated(Collation::GeneralCi))
        .column(ColumnDef::new("note", ColumnType::VarChar(20)))
        .primary_key(&["email"]);
    let users = TableDef::from_spec(&users, 3, 8).unwrap().with_index("by_name", &["name".to_string()], false).unwrap();
    let tags = TableSpec::new("db", "tags")
        .column(ColumnDef::new("tag", ColumnType::VarChar(10)).not_null())
        .column(ColumnDef::new("n", ColumnType::int(IntWidth::Int)).not_null())
        .primary_key(&["tag", "n"]);
    Tables(vec![
        Table::from_def(TableDef::from_spec(&tags, 4, 8).unwrap()),
        Table::from_def(def),
        Table::from_def(TableDef::from_spec(&orders, 2, 8).unwrap()),
        Table::from_def(users),
    ])
}

fn plan(sql: &str) -> SelectPlan {
    let parsed = parse(sql).unwrap();
    let sqlparser::ast::Statement::Query(q) = &parsed.statements[0] else { panic!("not a query: {sql}") };
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    rt.block_on(plan_select(&catalog(), q)).unwrap_or_else(|e| panic!("{sql}: {e}"))
}

#[test]
fn key_equality_and_in_lists_become_batched_lookups() {
    let p = plan("SELECT c FROM sbtest1 WHERE id = ?");
    assert!(matches!(&p.access, Access::Keys(k) if k.len() == 1));
    assert!(p.filter.is_none() && p.pushed.is_empty());
    assert_eq!(p.sources[0].fetch, vec![2], "only column c is fetched");
    let p = plan("SELECT c FROM sbtest1 WHERE id IN (1, 2, 3, 4) AND k > 0");
    assert!(matches!(&p.access, Access::Keys(k) if k.len() == 4));
    assert!(p.filter.is_some(), "the other condition is checked on the fetched rows");
}

#[test]
fn ranges_use_an_ordered_index_with_the_rest_pushed_down() {
    let p = plan("SELECT c FROM sbtest1 WHERE id BETWEEN 5 AND 104 AND k < 1000");
    match &p.access {
        Access::Range { index, lower: Some(_), upper: Some(_), eq, .. } => {
            assert_eq!(index, "PRIMARY");
            assert!(eq.is_empty());
        }
        other => panic!("expected a PRIMARY range, got {other:?}"),
    }
    assert_eq!(p.pushed.len(), 1, "k < 1000 runs on the data nodes");
    assert!(p.filter.is_none());
    let p = plan("SELECT id FROM sbtest1 WHERE k = 7");
    assert!(matches!(&p.access, Access::Range { index, eq, .. } if index == "k_1" && eq.len() == 1));
    let p = plan("SELECT id FROM sbtest1 WHERE c LIKE 'ab%' OR k IS NULL");
    assert!(matches!(p.access, Access::Full));
    assert_eq!(p.pushed.len(), 1, "a pushable OR goes to the data nodes whole");
    let p = plan("SELECT id FROM sbtest1 WHERE UPPER(c) = 'AB'");
    assert!(p.pushed.is_empty() && p.filter.is_some(), "functions are evaluated on the SQL node");
}

#[test]
fn single_table_aggregates_run_on_the_data_nodes() {
    let p = plan("SELECT SUM(k), COUNT(*), AVG(k) FROM sbtest1 WHERE id BETWEEN 1 AND 100");
    assert!(matches!(&p.agg, AggMode::Pushed { pushed, .. } if pushed.len() == 4), "{:?}", p.agg);
    let p = plan("SELECT c, COUNT(*) FROM sbtest1 GROUP BY c");
    assert!(matches!(p.agg, AggMode::Grouped { .. }));
    let p = plan("SELECT COUNT(DISTINCT k) FROM sbtest1");
    assert!(matches!(p.agg, AggMode::Grouped { .. }), "DISTINCT aggregates are computed on the SQL node");
}

#[test]
fn a_join_on_the_whole_primary_key_is_a_batched_lookup() {
    let p = plan("SELECT s.c, o.oid FROM orders o JOIN sbtest1 s ON s.id = o.customer WHERE o.oid < 10");
    assert!(p.joins[0].lookup.is_some(), "{:?}", p.joins[0]);
    let p = plan("SELECT s.c FROM sbtest1 s LEFT JOIN orders o ON o.customer = s.id");
    assert!(p.joins[0].lookup.is_none(), "customer is not orders' key: scanned once, joined in memory");
}

#[test]
fn a_right_join_scans_its_table_and_keeps_where_off_the_first_table() {
    // Behind a RIGHT JOIN the first table's columns may be NULL-extended:
    // a condition on them filters joined rows, not the first table's scan.
    let p = plan("SELECT * FROM orders o RIGHT JOIN sbtest1 s ON s.id = o.customer WHERE o.oid = 7");
    assert!(matches!(p.access, Access::Full), "no key lookup of orders: {:?}", p.access);
    assert!(p.pushed.is_empty());
    assert!(p.filter.is_some(), "o.oid = 7 is checked on the joined rows");
    let step = &p.joins[0];
    assert!(step.right && !step.left);
    assert!(step.lookup.is_none(), "every sbtest1 row must appear, so the table is scanned");
    // The same join written as LEFT JOIN looks the key up.
    let p = plan("SELECT * FROM orders o LEFT JOIN sbtest1 s ON s.id = o.customer WHERE o.oid = 7");
    assert!(matches!(&p.access, Access::Keys(k) if k.len() == 1));
    assert!(p.joins[0].lookup.is_some());
}

#[test]
fn case_insensitive_keys_and_indexes_serve_case_insensitive_comparisons() {
    // The keys of a case-insensitive column hold weights: a comparison
    // under its collation still finds rows by key, index range or filter.
    let p = plan("SELECT name FROM users WHERE email = 'Alice@X.com'");
    assert!(matches!(&p.access, Access::Keys(k) if k.len() == 1), "{:?}", p.access);
    assert!(p.filter.is_none() && p.pushed.is_empty());
    let p = plan("SELECT name FROM users WHERE email IN (?, ?)");
    assert!(matches!(&p.access, Access::Keys(k) if k.len() == 2), "{:?}", p.access);
    let p = plan("SELECT email FROM users WHERE name > 'b' AND name < 'D'");
    assert!(matches!(&p.access, Access::Range { index, .. } if index == "by_name"), "{:?}", p.access);
    let p = plan("SELECT email FROM users WHERE note = 'x' AND name LIKE 'a%'");
    assert!(matches!(p.access, Access::Full));
    assert_eq!(p.pushed.len(), 2, "both comparisons run on the data nodes, the second on weights");
    // Compared as bytes, a case-insensitive column cannot use its key.
    let p = plan("SELECT name FROM users WHERE email COLLATE utf8mb4_bin = 'alice@x.com'");
    assert!(matches!(p.access, Access::Full), "{:?}", p.access);
    assert!(p.filter.is_some());
    // MIN/MAX of case-insensitive text are computed on the SQL node (the
    // data nodes compare bytes); COUNT still goes down.
    let p = plan("SELECT MAX(name) FROM users");
    assert!(matches!(p.agg, AggMode::Grouped { .. }), "{:?}", p.agg);
    let p = plan("SELECT COUNT(name) FROM users");
    assert!(matches!(p.agg, AggMode::Pushed { .. }), "{:?}", p.agg);
    let p = plan("SELECT u.note FROM users u JOIN users v ON v.email = u.name");
    assert!(p.joins[0].lookup.is_some(), "a join on a case-insensitive key is a batched lookup");
}

#[test]
fn order_by_an_index_with_a_limit_reads_only_the_rows_it_returns() {
    // YCSB's scan: a primary-key range in key order with a limit.
    let p = plan("SELECT * FROM sbtest1 WHERE id >= 10 ORDER BY id LIMIT 5");
    assert!(p.index_ordered, "the PRIMARY range gives the order");
    assert!(matches!(&p.access, Access::Range { index, .. } if index == "PRIMARY"));
    // No WHERE: the full scan becomes an ordered walk of the primary key.
    let p = plan("SELECT c FROM sbtest1 ORDER BY id LIMIT 3");
    assert!(p.index_ordered);
    assert!(matches!(&p.access, Access::Range { index, lower: None, upper: None, .. } if index == "PRIMARY"));
    // A secondary index: the columns its range fixes may be named anywhere.
    let p = plan("SELECT id FROM sbtest1 WHERE k = 7 ORDER BY k, id LIMIT 2");
    assert!(!p.index_ordered, "k_1's entries after k are in no order ORDER BY knows of (id is not its column)");
    let p = plan("SELECT id FROM sbtest1 ORDER BY k LIMIT 2");
    assert!(p.index_ordered && matches!(&p.access, Access::Range { index, .. } if index == "k_1"));
    assert!(p.sources[0].fetch.contains(&1), "the merge of partitions needs k fetched");
    // A case-insensitive key orders by weight, as its index does.
    let p = plan("SELECT email FROM users WHERE email > 'm' ORDER BY email LIMIT 4");
    assert!(p.index_ordered);
    // A filter the data nodes run drops rows before the limit counts them.
    let p = plan("SELECT * FROM sbtest1 WHERE id >= 10 AND c LIKE '%x' ORDER BY id LIMIT 5");
    assert!(p.index_ordered && p.filter.is_none() && p.pushed.len() == 1);

    // Binary text ties under PAD SPACE ('x' = 'x ') that its index keys
    // order: it may be ORDER BY's last key only.
    assert!(plan("SELECT n FROM tags ORDER BY tag LIMIT 3").index_ordered);
    assert!(plan("SELECT n FROM tags WHERE tag = 'x' ORDER BY n LIMIT 3").index_ordered);
    assert!(!plan("SELECT n FROM tags ORDER BY tag, n LIMIT 3").index_ordered);

    for sql in [
        "SELECT * FROM sbtest1 WHERE id >= 10 ORDER BY id DESC LIMIT 5",
        "SELECT * FROM sbtest1 WHERE id >= 10 ORDER BY id",
        "SELECT * FROM sbtest1 WHERE id >= 10 ORDER BY c LIMIT 5",
        "SELECT * FROM sbtest1 WHERE id >= 10 AND CONCAT(c, pad) = 'x' ORDER BY id LIMIT 5",
        "SELECT DISTINCT k FROM sbtest1 ORDER BY k LIMIT 5",
        "SELECT k, COUNT(*) FROM sbtest1 GROUP BY k ORDER BY k LIMIT 5",
        "SELECT * FROM sbtest1 WHERE id >= 10 ORDER BY id LIMIT 5 FOR UPDATE",
        "SELECT * FROM sbtest1 JOIN orders ON orders.oid = sbtest1.id ORDER BY sbtest1.id LIMIT 5",
        "SELECT email FROM users ORDER BY email COLLATE utf8mb4_bin LIMIT 4",
    ] {
        let p = plan(sql);
        assert!(!p.index_ordered, "{sql}: every row of the range must be read");
    }
}
