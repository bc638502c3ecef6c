//! REST request bodies and paths from any HTTP client: a batch body is read
//! by the fast path and by serde, and where the fast path answers it must
//! answer what serde reads; an operation body is checked and planned as
//! every kind of operation (JSON values converted to column values) against
//! a table with a two-column key and a column of every type
//! (`latsdb_fuzz::columns_of_every_type`); a relative URL is split;
//! feature-view definitions and feature-vector requests are parsed. Errors
//! are answers; a panic is a finding.
#![no_main]

use latsdb_client::Table;
use latsdb_rest::fastpath;
use latsdb_rest::pk::{self, BatchBody, OpBody, PkKind, PkRequest};
use latsdb_rest::state::ResolvedTable;
use latsdb_types::schema::{TableDef, TableSpec};
use libfuzzer_sys::fuzz_target;
use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

const KINDS: [PkKind; 5] = [PkKind::Read, PkKind::Write, PkKind::Update, PkKind::Insert, PkKind::Delete];

fn table() -> &'static Arc<ResolvedTable> {
    static TABLE: OnceLock<Arc<ResolvedTable>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let spec = latsdb_fuzz::columns_of_every_type()
            .into_iter()
            .fold(TableSpec::new("db", "t"), |spec, (column, _)| spec.column(column))
            .primary_key(&["i", "v"]);
        let def = TableDef::from_spec(&spec, 7, 1).expect("a valid table");
        Arc::new(ResolvedTable::new(Table::from_def(def)))
    })
}

fn batch(text: &str) {
    let slow = serde_json::from_str::<BatchBody>(text);
    if let Some(fast) = fastpath::parse_batch(text) {
        match slow {
            Ok(slow) => {
                assert_eq!(fastpath::shown(&fast), fastpath::shown(&slow), "the fast path reads what serde reads")
            }
            Err(e) => panic!("the fast path took a body serde refuses ({e})"),
        }
    }
    if let Ok(body) = latsdb_rest::json::parse::<BatchBody>(text.as_bytes()) {
        for item in &body.operations {
            if let Ok((database, table, _)) = pk::parse_relative_url(&item.relative_url) {
                let _ = pk::check_table_names(database, table);
            }
            let _ = pk::check_names(&item.body, &body.filters, true);
        }
    }
}

fn operation(data: &[u8]) {
    for kind in KINDS {
        let Ok(body) = latsdb_rest::json::parse::<OpBody>(data) else { return };
        if pk::check_shape(kind, &body).is_err() || pk::check_names(&body, &[], true).is_err() {
            continue;
        }
        let request = PkRequest { database: Cow::Borrowed("db"), table: Cow::Borrowed("t"), kind, body };
        if kind != PkKind::Read {
            let _ = pk::plan_write(table(), &request, &[]);
        }
        let _ = pk::check_key_count(table(), request.body.filters(&[]).len());
    }
}

fuzz_target!(|data: &[u8]| {
    operation(data);
    let Ok(text) = std::str::from_utf8(data) else { return };
    batch(text);
    let _ = pk::parse_relative_url(text);
    let _ = latsdb_rest::strip_api_version(text);
    let _ = latsdb_rest::json::parse::<latsdb_rest::features::FeatureViewDef>(data);
    let _ = latsdb_rest::json::parse::<latsdb_rest::hopsworks::serve::Request>(data);
});
