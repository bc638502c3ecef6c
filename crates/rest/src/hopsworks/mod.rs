//! Feature views defined in Hopsworks' metadata database.
//!
//! Hopsworks keeps its feature store's metadata in a MySQL database named
//! `hopsworks` (feature stores, feature views, the feature groups they join,
//! serving keys, API keys, projects). RonDB's REST server serves
//! `feature_store` and `batch_feature_store` from those tables, so that
//! Hopsworks' clients get feature vectors without a second definition. When
//! that schema has been loaded into latsdb (through the SQL node, like any
//! other), the REST node does the same: `metadata` reads a view's
//! definition from it, `serve` answers the two endpoints as RonDB does, and
//! `keys` checks Hopsworks' API keys. latsdb's own feature views
//! (`crate::features`) remain a second source for stores Hopsworks does not
//! know.

pub mod avro;
pub mod keys;
pub mod metadata;
pub mod serve;

use latsdb_client::{Client, Row, Scan, Table};
use latsdb_types::expr::Expr;
use latsdb_types::{DbError, Result, Value};
use std::sync::Arc;

/// The database holding Hopsworks' metadata.
pub const DATABASE: &str = "hopsworks";

/// The table `hopsworks.<name>`, or None when it does not exist (no
/// Hopsworks metadata has been loaded).
async fn table(client: &Client, name: &str) -> Result<Option<Arc<Table>>> {
    match client.table(DATABASE, name).await {
        Ok(table) => Ok(Some(table)),
        Err(e) if e.code == latsdb_types::ErrorCode::UnknownTable => Ok(None),
        Err(e) => Err(e),
    }
}

/// The table `hopsworks.<name>`, which a loaded schema must have.
async fn required_table(client: &Client, name: &str) -> Result<Arc<Table>> {
    table(client, name).await?.ok_or_else(|| {
        DbError::internal(format!(
            "Hopsworks' metadata has no table {DATABASE}.{name}: load the whole hopsworks schema"
        ))
    })
}

/// The rows of `table` whose columns equal the given values (SQL's
/// `WHERE a = ? AND b = ?`), with `columns` read. The scan follows an
/// ordered index that starts with the first column when the table has one
/// (Hopsworks indexes every column it looks rows up by), and filters the
/// rest on the data nodes. Rows come in no particular order. A table
/// changed since it was cached (Hopsworks migrates its schema while
/// serving) is read again with its new definition.
async fn rows_where(
    client: &Client,
    table: &Arc<Table>,
    equal: &[(&str, Value)],
    columns: &[&str],
) -> Result<Vec<Row>> {
    match scan_where(client, table, equal, columns).await {
        Err(e) if e.code == latsdb_types::ErrorCode::SchemaVersionMismatch => {
            let fresh = client.refresh_table(&table.def().database, &table.def().name).await?;
            scan_where(client, &fresh, equal, columns).await
        }
        result => result,
    }
}

async fn scan_where(
    client: &Client,
    table: &Arc<Table>,
    equal: &[(&str, Value)],
    columns: &[&str],
) -> Result<Vec<Row>> {
    let def = table.def();
    let mut filter: Option<Expr> = None;
    for (name, value) in equal {
        let column = def.column_id(name)?;
        let test = Expr::col(column).eq(value.clone());
        filter = Some(match filter {
            Some(f) => f.and(test),
            None => test,
        });
    }
    let mut scan = Scan::all().columns(columns);
    if let Some((first, value)) = equal.first() {
        let first = def.column_id(first)?;
        if let Some(index) = def.indexes.iter().find(|i| i.columns.first() == Some(&first)) {
            scan = scan.index(&index.name).equal(vec![value.clone()]);
        }
    }
    if let Some(filter) = filter {
        scan = scan.filter(filter);
    }
    client.scan(table, scan).await
}

/// A whole-number column's value; NULL reads as 0, as RonDB reads it.
fn int(row: &Row, column: &str) -> Result<i64> {
    Ok(match row.get_by_name(column)? {
        Value::Int(v) => v,
        Value::UInt(v) => i64::try_from(v).unwrap_or(i64::MAX),
        Value::Bool(b) => b as i64,
        _ => 0,
    })
}

/// A text column's value; NULL reads as "", as RonDB reads it.
fn text(row: &Row, column: &str) -> Result<String> {
    Ok(match row.get_by_name(column)? {
        Value::Str(s) => s,
        Value::Bytes(b) => String::from_utf8_lossy(&b).into_owned(),
        _ => String::new(),
    })
}
