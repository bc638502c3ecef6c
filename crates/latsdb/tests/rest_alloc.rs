//! The REST node's batch paths allocate per request, never per row (issue:
//! REST node, "no per-row allocations on the hot path"): answering a batch
//! of 100 lookups, or of 100 feature vectors over two tables, allocates no
//! more than answering one of 10. Counted on the thread that runs the REST
//! handler and its cluster client (parsing, planning, key encoding, the
//! round trip to the data nodes, decoding the answer and writing the JSON),
//! against a real cluster.

mod common;

use common::TestCluster;
use latsdb_client::{Client, Op};
use latsdb_rest::auth::AuthMode;
use latsdb_rest::state::Rest;
use latsdb_rest::RestConfig;
use latsdb_types::collation::Collation;
use latsdb_types::schema::{ColumnDef, ColumnType, IntWidth, TableSpec};
use latsdb_types::Value;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Counts the allocations (and reallocations) of each thread.
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        System.realloc(ptr, layout, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

const ROWS: i64 = 150;

/// A batch of `n` pk-reads of keys 0, 3, 6, ...: those under ROWS find
/// their rows, the others find none.
fn batch_body(n: i64, read_columns: bool, key: Key) -> String {
    let columns = if read_columns { r#","readColumns":[{"column":"c"},{"column":"a"},{"column":"e"}]"# } else { "" };
    let item = |i: i64| {
        let id = i * 3;
        let (table, filters) = match key {
            Key::Int => ("probe", format!(r#"{{"column":"id","value":{id}}}"#)),
            Key::Pair => ("pair", format!(r#"{{"column":"k1","value":{}}},{{"column":"k2","value":{id}}}"#, id % 7)),
            // Upper case finds the lower-case key: the column compares
            // without case, so the key holds the text's weight.
            Key::Text => ("named", format!(r#"{{"column":"name","value":"User-{id:04}"}}"#)),
        };
        format!(
            r#"{{"method":"POST","relative-url":"alloc/{table}/pk-read","body":{{"filters":[{filters}]{columns},"operationId":"op{i}"}}}}"#
        )
    };
    let operations: Vec<String> = (0..n).map(item).collect();
    format!(r#"{{"operations":[{}]}}"#, operations.join(","))
}

#[derive(Clone, Copy, Debug)]
enum Key {
    /// BIGINT
    Int,
    /// INT, BIGINT
    Pair,
    /// VARCHAR(20), case-insensitive
    Text,
}

async fn load(client: &Client) {
    let five_ints = |spec: TableSpec| {
        ["a", "b", "c", "d", "e"].iter().fold(spec, |s, c| s.column(ColumnDef::new(*c, ColumnType::int(IntWidth::Int))))
    };
    let probe = client
        .create_table(
            five_ints(TableSpec::new("alloc", "probe").column(ColumnDef::new("id", ColumnType::int(IntWidth::Big))))
                .primary_key(&["id"]),
        )
        .await
        .unwrap();
    let pair = client
        .create_table(
            five_ints(
                TableSpec::new("alloc", "pair")
                    .column(ColumnDef::new("k1", ColumnType::int(IntWidth::Int)))
                    .column(ColumnDef::new("k2", ColumnType::int(IntWidth::Big))),
            )
            .primary_key(&["k1", "k2"]),
        )
        .await
        .unwrap();
    let named = client
        .create_table(
            five_ints(
                TableSpec::new("alloc", "named")
                    .column(ColumnDef::new("name", ColumnType::VarChar(20)).collated(Collation::GeneralCi)),
            )
            .primary_key(&["name"]),
        )
        .await
        .unwrap();
    let extra = client
        .create_table(
            TableSpec::new("alloc", "extra")
                .column(ColumnDef::new("pid", ColumnType::int(IntWidth::Big)))
                .column(ColumnDef::new("x", ColumnType::int(IntWidth::Int)))
                .primary_key(&["pid"]),
        )
        .await
        .unwrap();
    let mut ops = Vec::new();
    for id in (0..ROWS).step_by(2) {
        ops.push(Op::insert(&extra, vec![Value::Int(id), Value::Int(id % 100)]).unwrap());
    }
    for id in 0..ROWS {
        let ints = (1..=5).map(|c| Value::Int(id * 10 + c));
        ops.push(Op::insert(&probe, std::iter::once(Value::Int(id)).chain(ints.clone()).collect()).unwrap());
        let key = [Value::Int(id % 7), Value::Int(id)];
        ops.push(Op::insert(&pair, key.into_iter().chain(ints.clone()).collect()).unwrap());
        let name = Value::Str(format!("user-{id:04}"));
        ops.push(Op::insert(&named, std::iter::once(name).chain(ints).collect()).unwrap());
    }
    for answer in client.batch(ops).await.unwrap() {
        answer.unwrap();
    }
}

/// Allocations of the fewest-allocating of five answers to `body` (other
/// tasks of the runtime, such as the layout refresher, may run during
/// one), with the answer.
async fn fewest_allocations(rest: &Rest, endpoint: Endpoint, body: &str) -> (u64, String) {
    let mut fewest = u64::MAX;
    let mut text = String::new();
    for _ in 0..5 {
        let before = allocations();
        let answer = match endpoint {
            Endpoint::Batch => latsdb_rest::answer_batch(rest, None, body.as_bytes(), latsdb_rest::Batch::Any).await,
            Endpoint::Features => match rest.keys.authenticate(None).await {
                Ok(grant) => latsdb_rest::features::serve_batch(rest, &grant, body.as_bytes()).await,
                Err(e) => Err(e),
            },
        };
        let used = allocations() - before;
        let (status, json) = answer.unwrap_or_else(|e| panic!("the batch failed: {} {}", e.status, e.message));
        assert_eq!(status, 200);
        fewest = fewest.min(used);
        text = String::from_utf8(json).unwrap();
    }
    (fewest, text)
}

#[derive(Clone, Copy)]
enum Endpoint {
    /// `POST /0.1.0/batch`
    Batch,
    /// `POST /0.1.0/batch_feature_store`
    Features,
}

/// A batch of `n` feature vectors of view `v` (over `probe` and `extra`,
/// served by id) or `t` (over `named`, served by name), for keys 0, 3, 6, ...
fn features_body(n: i64, view: &str) -> String {
    let entries: Vec<String> = match view {
        "v" => (0..n).map(|i| format!(r#"{{"id":{}}}"#, i * 3)).collect(),
        _ => (0..n).map(|i| format!(r#"{{"name":"User-{:04}"}}"#, i * 3)).collect(),
    };
    format!(
        r#"{{"featureStoreName":"alloc","featureViewName":"{view}","featureViewVersion":1,"entries":[{}],"options":{{"includeDetailedStatus":true}}}}"#,
        entries.join(",")
    )
}

#[test]
fn a_batch_of_lookups_allocates_per_request_not_per_row() {
    let cluster = TestCluster::start(&[]);
    let mgmd = cluster.mgmd.clone();
    // The REST handler and its client on one thread: every allocation of
    // the path is counted there.
    let report = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let client = Client::connect(&mgmd).await.unwrap();
            load(&client).await;
            let rest = Rest::new(client, RestConfig { auth: AuthMode::None, ..RestConfig::default() });
            let mut report = Vec::new();
            for key in [Key::Int, Key::Pair, Key::Text] {
                for read_columns in [false, true] {
                    let small = batch_body(10, read_columns, key);
                    let large = batch_body(100, read_columns, key);
                    // Warm up: table definitions, projections, connections.
                    for body in [&small, &large] {
                        fewest_allocations(&rest, Endpoint::Batch, body).await;
                    }
                    let (few, small_answer) = fewest_allocations(&rest, Endpoint::Batch, &small).await;
                    let (many, large_answer) = fewest_allocations(&rest, Endpoint::Batch, &large).await;
                    report.push((read_columns, key, few, many, small_answer, large_answer));
                }
            }
            // Feature vectors across two tables.
            let view = r#"{"featureStoreName":"alloc","featureViewName":"v","featureViewVersion":1,"featureGroups":[
                {"table":"probe","features":["id","a","c"]},
                {"table":"extra","joinKeys":{"pid":"id"},"prefix":"x_","features":["x"]}]}"#;
            let by_name = r#"{"featureStoreName":"alloc","featureViewName":"t","featureViewVersion":1,"featureGroups":[
                {"table":"named","features":["name","b"]}]}"#;
            let grant = rest.keys.authenticate(None).await.unwrap();
            let mut vectors = Vec::new();
            for (name, view) in [("v", view), ("t", by_name)] {
                let (status, body) = latsdb_rest::features::create(&rest, &grant, view.as_bytes()).await.unwrap();
                assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
                let (small, large) = (features_body(10, name), features_body(100, name));
                for body in [&small, &large] {
                    fewest_allocations(&rest, Endpoint::Features, body).await;
                }
                let (few, small_answer) = fewest_allocations(&rest, Endpoint::Features, &small).await;
                let (many, large_answer) = fewest_allocations(&rest, Endpoint::Features, &large).await;
                vectors.push((name, few, many, small_answer, large_answer));
            }
            (report, vectors)
        })
    })
    .join()
    .unwrap();
    let (report, vectors) = report;
    let complete = |answer: &str| answer.matches(r#""COMPLETE""#).count();
    let missing = |answer: &str| answer.matches(r#""MISSING""#).count();
    for (view, few, many, small_answer, large_answer) in vectors {
        eprintln!("feature vectors of view {view}: 10 entries {few} allocations, 100 entries {many}");
        if view == "v" {
            // Keys below ROWS have a `probe` row, even ones below ROWS an `extra` row too.
            assert_eq!((complete(&small_answer), missing(&small_answer)), (5, 5), "{small_answer}");
            assert_eq!((complete(&large_answer), missing(&large_answer)), (25, 75), "{large_answer}");
            assert!(small_answer.starts_with(r#"{"features":[[0,1,3,0],[3,31,33,null],"#), "{small_answer}");
        } else {
            // Names compare without case: "User-0003" finds "user-0003".
            assert_eq!((complete(&small_answer), missing(&small_answer)), (10, 0), "{small_answer}");
            assert_eq!((complete(&large_answer), missing(&large_answer)), (50, 50), "{large_answer}");
            assert!(small_answer.starts_with(r#"{"features":[["User-0000",2],["User-0003",32],"#), "{small_answer}");
        }
        assert!(many <= few + 12, "feature vectors of view {view}: 10 entries made {few} allocations, 100 made {many}");
    }
    for (read_columns, key, few, many, small_answer, large_answer) in report {
        let what = format!("key {key:?}, readColumns: {read_columns}");
        eprintln!("{what}: 10 lookups {few} allocations, 100 lookups {many}");
        // The answers are what they should be: keys 0, 3, .. below ROWS found.
        let found = |answer: &str| answer.matches(r#""code":200"#).count();
        let missing = |answer: &str| answer.matches(r#""code":404"#).count();
        assert_eq!((found(&small_answer), missing(&small_answer)), (10, 0), "{what}: {small_answer}");
        assert_eq!((found(&large_answer), missing(&large_answer)), (50, 50), "{what}");
        let first = if read_columns { r#"{"c":3,"a":1,"e":5}"# } else { r#""a":1,"b":2,"c":3,"d":4,"e":5}"# };
        assert!(small_answer.contains(first), "{what}: {small_answer}");
        // 90 more rows may grow a few buffers (doublings), but one
        // allocation per row would be 90 more.
        assert!(many <= few + 12, "{what}: 10 lookups made {few} allocations, 100 made {many}");
    }
}
