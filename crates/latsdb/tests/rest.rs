//! The REST node over real HTTP against `latsdb start` (issue: REST node).
//! Answers are compared as exact JSON text: that is what clients parse.

mod common;

use common::{http, TestCluster, BIN};
use latsdb_client::{Client, Op, Outcome};
use latsdb_types::schema::{ColumnDef, ColumnType, IntWidth, TableSpec, HIDDEN_KEY_COLUMN};
use latsdb_types::Value;
use std::process::Command;
use std::time::{Duration, Instant};

fn post(cluster: &TestCluster, path: &str, body: &str) -> (u16, String) {
    http(&cluster.rest, "POST", path, &[("Content-Type", "application/json")], body.as_bytes())
}

fn types_spec() -> TableSpec {
    TableSpec::new("rest", "types")
        .column(ColumnDef::new("id", ColumnType::int(IntWidth::Big)))
        .column(ColumnDef::new("ti", ColumnType::int(IntWidth::Tiny)))
        .column(ColumnDef::new("ui", ColumnType::uint(IntWidth::Int)))
        .column(ColumnDef::new("f", ColumnType::Float))
        .column(ColumnDef::new("d", ColumnType::Double))
        .column(ColumnDef::new("dec", ColumnType::Decimal { precision: 10, scale: 2 }))
        .column(ColumnDef::new("c", ColumnType::Char(4)))
        .column(ColumnDef::new("vc", ColumnType::VarChar(20)))
        .column(ColumnDef::new("b", ColumnType::Binary(3)))
        .column(ColumnDef::new("vb", ColumnType::VarBinary(8)))
        .column(ColumnDef::new("t", ColumnType::Text))
        .column(ColumnDef::new("bl", ColumnType::Blob))
        .column(ColumnDef::new("da", ColumnType::Date))
        .column(ColumnDef::new("dt", ColumnType::DateTime))
        .column(ColumnDef::new("ts", ColumnType::Timestamp))
        .column(ColumnDef::new("bo", ColumnType::Boolean))
        .primary_key(&["id"])
}

const ROW_1: &str = r#"{"id":1,"ti":-5,"ui":4000000000,"f":1.5,"d":-0.25,"dec":12.34,"c":"ab","vc":"he said \"hi\"","b":"AQID","vb":"","t":"line\nbreak","bl":"/w==","da":"2024-02-29","dt":"2024-02-29 13:14:15","ts":"2024-02-29 13:14:15.500000","bo":true}"#;
const ROW_2: &str = r#"{"id":2,"ti":null,"ui":null,"f":null,"d":null,"dec":null,"c":null,"vc":null,"b":null,"vb":null,"t":null,"bl":null,"da":null,"dt":null,"ts":null,"bo":null}"#;

async fn load(client: &Client) {
    let types = client.create_table(types_spec()).await.unwrap();
    let row_1 = vec![
        Value::Int(1),
        Value::Int(-5),
        Value::UInt(4_000_000_000),
        Value::Float(1.5),
        Value::Float(-0.25),
        Value::Str("12.34".into()),
        Value::Str("ab".into()),
        Value::Str("he said \"hi\"".into()),
        Value::Bytes(vec![1, 2, 3]),
        Value::Bytes(vec![]),
        Value::Str("line\nbreak".into()),
        Value::Bytes(vec![255]),
        Value::Str("2024-02-29".into()),
        Value::Str("2024-02-29 13:14:15".into()),
        Value::Str("2024-02-29 13:14:15.5".into()),
        Value::Bool(true),
    ];
    let mut row_2 = vec![Value::Null; 16];
    row_2[0] = Value::Int(2);
    let pairs = client
        .create_table(
            TableSpec::new("rest", "pairs")
                .column(ColumnDef::new("a", ColumnType::int(IntWidth::Int)))
                .column(ColumnDef::new("b", ColumnType::VarChar(10)))
                .column(ColumnDef::new("v", ColumnType::int(IntWidth::Int)))
                .primary_key(&["a", "b"]),
        )
        .await
        .unwrap();
    let customers = client
        .create_table(
            TableSpec::new("fs", "customers")
                .column(ColumnDef::new("id", ColumnType::int(IntWidth::Big)))
                .column(ColumnDef::new("age", ColumnType::int(IntWidth::Int)))
                .column(ColumnDef::new("city", ColumnType::VarChar(20)))
                .primary_key(&["id"]),
        )
        .await
        .unwrap();
    let orders = client
        .create_table(
            TableSpec::new("fs", "orders_agg")
                .column(ColumnDef::new("cust", ColumnType::int(IntWidth::Big)))
                .column(ColumnDef::new("n_orders", ColumnType::int(IntWidth::Int)))
                .column(ColumnDef::new("total", ColumnType::Double))
                .primary_key(&["cust"]),
        )
        .await
        .unwrap();
    // As the SQL node creates a table without a primary key.
    client
        .create_table(
            TableSpec::new("rest", "keyless")
                .column(ColumnDef::new(HIDDEN_KEY_COLUMN, ColumnType::Integer { width: IntWidth::Big, unsigned: true }))
                .column(ColumnDef::new("v", ColumnType::int(IntWidth::Int)))
                .primary_key(&[HIDDEN_KEY_COLUMN]),
        )
        .await
        .unwrap();
    let ops = vec![
        Op::insert(&types, row_1).unwrap(),
        Op::insert(&types, row_2).unwrap(),
        Op::insert(&pairs, vec![Value::Int(1), Value::Str("x".into()), Value::Int(10)]).unwrap(),
        Op::insert(&customers, vec![Value::Int(1), Value::Int(30), Value::Str("Oslo".into())]).unwrap(),
        Op::insert(&customers, vec![Value::Int(2), Value::Int(41), Value::Str("Rome".into())]).unwrap(),
        Op::insert(&orders, vec![Value::Int(1), Value::Int(5), Value::Float(99.5)]).unwrap(),
    ];
    for r in client.batch(ops).await.unwrap() {
        assert!(matches!(r, Ok(Outcome::Done)), "{r:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pk_reads_writes_batches_and_feature_vectors() {
    let cluster = TestCluster::start(&[]);
    assert!(!cluster.rest.is_empty(), "the launcher printed no REST address");
    let client = Client::connect(&cluster.mgmd).await.unwrap();
    load(&client).await;
    let c = &cluster;

    // pk-read: every column type, NULLs, projections, operationId.
    let (status, body) =
        post(c, "/0.1.0/rest/types/pk-read", r#"{"filters":[{"column":"id","value":1}],"operationId":"op-1"}"#);
    assert_eq!((status, body.as_str()), (200, format!(r#"{{"operationId":"op-1","data":{ROW_1}}}"#).as_str()));
    let (status, body) = post(c, "/0.1.0/rest/types/pk-read", r#"{"filters":[{"column":"id","value":2}]}"#);
    assert_eq!((status, body), (200, format!(r#"{{"data":{ROW_2}}}"#)));
    let (status, body) = post(
        c,
        "/0.1.0/rest/types/pk-read",
        r#"{"filters":[{"column":"id","value":1}],"readColumns":[{"column":"vc","dataReturnType":"default"},{"column":"ti"}]}"#,
    );
    assert_eq!((status, body.as_str()), (200, r#"{"data":{"vc":"he said \"hi\"","ti":-5}}"#));
    let (status, body) =
        post(c, "/0.1.0/rest/pairs/pk-read", r#"{"filters":[{"column":"b","value":"x"},{"column":"a","value":1}]}"#);
    assert_eq!((status, body.as_str()), (200, r#"{"data":{"a":1,"b":"x","v":10}}"#));

    // Missing rows and bad requests.
    let (status, body) =
        post(c, "/0.1.0/rest/types/pk-read", r#"{"filters":[{"column":"id","value":99}],"operationId":"x"}"#);
    assert_eq!((status, body.as_str()), (404, r#"{"operationId":"x","message":"Not Found"}"#));
    let (status, body) = post(c, "/0.1.0/rest/nope/pk-read", r#"{"filters":[{"column":"id","value":1}]}"#);
    assert_eq!(
        (status, body.as_str()),
        (404, r#"{"message":"Database/Table does not exist. table 'rest.nope' does not exist"}"#)
    );
    // A name no table can have is refused before any lookup (as RonDB).
    let long = "t".repeat(65);
    let (status, body) = post(c, &format!("/0.1.0/rest/{long}/pk-read"), r#"{"filters":[{"column":"id","value":1}]}"#);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("Field validation for 'Table' failed on the 'max' tag"), "{body}");
    let bad = [
        (r#"{"filters":[{"column":"id","value":"one"}]}"#, "column 'id' is BIGINT but the value is string"),
        (r#"{"filters":[{"column":"id","value":"1.5"}]}"#, "column 'id' is BIGINT but the value is string"),
        (r#"{"filters":[{"column":"ti","value":1}]}"#, "filter column 'ti' is not part of the primary key"),
        (r#"{"filters":[{"column":"zz","value":1}]}"#, "has no column 'zz'"),
        (r#"{"filters":[{"column":"id","value":1}],"readColumns":[{"column":"zz"}]}"#, "has no column 'zz'"),
        (r#"{"filters":[{"column":"id","value":[1]}]}"#, "expected a number, string, boolean or null"),
        (r#"{"filters":[{"column":"id","value":1}"#, "EOF while parsing"),
        (r#"{"filters":[]}"#, "'filters' is empty"),
        (r#"{"filtres":[]}"#, "unknown field `filtres`"),
        ("[]", "the request body is not valid"),
    ];
    for (request, expected) in bad {
        let (status, body) = post(c, "/0.1.0/rest/types/pk-read", request);
        assert_eq!(status, 400, "{request} -> {body}");
        assert!(body.contains(expected), "{request} -> {body}, expected it to mention {expected:?}");
    }
    let (status, body) = post(c, "/0.1.0/rest/pairs/pk-read", r#"{"filters":[{"column":"a","value":1}]}"#);
    assert_eq!(status, 400);
    assert!(
        body.contains("Expecting: 2 Got: 1. The filters must give every primary-key column of rest.pairs (a, b)"),
        "{body}"
    );
    // A table created without a primary key has no key a client could know.
    for (op, request) in [
        ("pk-read", r#"{"filters":[{"column":"$row_id","value":1}]}"#),
        ("pk-write", r#"{"data":{"$row_id":1,"v":2}}"#),
    ] {
        let (status, body) = post(c, &format!("/0.1.0/rest/keyless/{op}"), request);
        assert_eq!(status, 400, "{op}: {body}");
        assert!(body.contains("rest.keyless was created without a PRIMARY KEY"), "{op}: {body}");
    }
    let huge = format!(r#"{{"filters":[{{"column":"id","value":"{}"}}]}}"#, "x".repeat(5 << 20));
    let (status, body) = post(c, "/0.1.0/rest/types/pk-read", &huge);
    assert_eq!(status, 413, "{body}");
    assert!(body.contains("exceeds the limit"), "{body}");
    let (status, _) = http(&c.rest, "GET", "/0.1.0/rest/types/pk-read", &[], b"");
    assert_eq!(status, 405);
    let (status, body) = http(&c.rest, "GET", "/0.1.0/nothing", &[], b"");
    assert_eq!(status, 404);
    assert!(body.contains("openapi.json"), "{body}");

    // pk-write and pk-delete, alone and batched.
    let (status, body) = post(c, "/0.1.0/rest/pairs/pk-write", r#"{"data":{"a":2,"b":"y","v":20},"operationId":"w"}"#);
    assert_eq!((status, body.as_str()), (200, r#"{"operationId":"w"}"#));
    let (status, body) = post(c, "/0.1.0/rest/pairs/pk-write", r#"{"data":{"a":2,"v":20}}"#);
    assert_eq!(status, 400, "{body}");
    let (status, body) =
        post(c, "/0.1.0/rest/pairs/pk-delete", r#"{"filters":[{"column":"a","value":2},{"column":"b","value":"y"}]}"#);
    assert_eq!((status, body.as_str()), (200, "{}"));
    let (status, _) =
        post(c, "/0.1.0/rest/pairs/pk-delete", r#"{"filters":[{"column":"a","value":2},{"column":"b","value":"y"}]}"#);
    assert_eq!(status, 404);

    // A batch: per-item codes in request order.
    let batch = r#"{"operations":[
        {"method":"POST","relative-url":"rest/types/pk-read","body":{"filters":[{"column":"id","value":2}],"readColumns":[{"column":"bo"}],"operationId":"a"}},
        {"method":"POST","relative-url":"rest/types/pk-read","body":{"filters":[{"column":"id","value":7}],"operationId":"b"}},
        {"method":"POST","relative-url":"rest/missing/pk-read","body":{"filters":[{"column":"id","value":1}]}},
        {"method":"POST","relative-url":"rest/types/pk-read","body":{"filters":[{"column":"id","value":"bad"}]}},
        {"method":"POST","relative-url":"rest/pairs/pk-write","body":{"data":{"a":3,"b":"z","v":30}}},
        {"method":"POST","relative-url":"rest/pairs/pk-read","body":{"filters":[{"column":"a","value":1},{"column":"b","value":"x"}]}}
    ]}"#;
    let (status, body) = post(c, "/0.1.0/batch", batch);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        concat!(
            r#"{"result":["#,
            r#"{"code":200,"body":{"operationId":"a","data":{"bo":null}}},"#,
            r#"{"code":404,"body":{"operationId":"b","message":"Not Found"}},"#,
            r#"{"code":404,"body":{"message":"Database/Table does not exist. table 'rest.missing' does not exist"}},"#,
            r#"{"code":400,"body":{"message":"Wrong data type. column 'id' is BIGINT but the value is string (bad)"}},"#,
            r#"{"code":200,"body":{}},"#,
            r#"{"code":200,"body":{"data":{"a":1,"b":"x","v":10}}}"#,
            "]}"
        )
    );
    let (status, body) =
        post(c, "/0.1.0/rest/pairs/pk-read", r#"{"filters":[{"column":"a","value":3},{"column":"b","value":"z"}]}"#);
    assert_eq!((status, body.as_str()), (200, r#"{"data":{"a":3,"b":"z","v":30}}"#));
    // Items listing the same readColumns share one list and projection;
    // each still reads its own columns of its own table.
    let columns = |list: &str, table: &str, key: &str| {
        format!(
            r#"{{"method":"POST","relative-url":"rest/{table}/pk-read","body":{{"filters":[{key}],"readColumns":{list}}}}}"#
        )
    };
    let (types_1, pairs_1) = (r#"{"column":"id","value":1}"#, r#"{"column":"a","value":1},{"column":"b","value":"x"}"#);
    let (ti_vc, vc, b) = (r#"[{"column":"ti"},{"column":"vc"}]"#, r#"[{"column":"vc"}]"#, r#"[{"column":"b"}]"#);
    let items = [
        columns(ti_vc, "types", types_1),
        columns(ti_vc, "types", types_1),
        columns(vc, "types", types_1),
        columns(ti_vc, "types", types_1),
        columns(b, "pairs", pairs_1),
        columns(b, "types", types_1),
    ];
    let (status, body) = post(c, "/0.1.0/batch", &format!(r#"{{"operations":[{}]}}"#, items.join(",")));
    assert_eq!(status, 200, "{body}");
    let ti_vc_row = r#"{"code":200,"body":{"data":{"ti":-5,"vc":"he said \"hi\""}}}"#;
    let expected = [
        ti_vc_row,
        ti_vc_row,
        r#"{"code":200,"body":{"data":{"vc":"he said \"hi\""}}}"#,
        ti_vc_row,
        r#"{"code":200,"body":{"data":{"b":"x"}}}"#,
        r#"{"code":200,"body":{"data":{"b":"AQID"}}}"#,
    ];
    assert_eq!(body, format!(r#"{{"result":[{}]}}"#, expected.join(",")));
    // Malformed batches are rejected whole.
    for (request, expected) in [
        (r#"{"operations":[]}"#, "'operations' is empty"),
        (
            r#"{"operations":[{"method":"GET","relative-url":"rest/types/pk-read","body":{"filters":[{"column":"id","value":1}]}}]}"#,
            "operation 0: the Method section should be POST",
        ),
        (
            r#"{"operations":[{"method":"POST","relative-url":"rest/types/pk-read","body":{"filters":[{"column":"id","value":1}]}},{"method":"POST","relative-url":"rest/types","body":{}}]}"#,
            "operation 1: Field validation for 'RelativeURL' failed: relative-url 'rest/types' must look like",
        ),
        (
            r#"{"operations":[{"method":"POST","relative-url":"rest/types/pk-read","body":{}}]}"#,
            "operation 0: Field validation for 'Filters' failed: the Field section is null",
        ),
        (r#"{"operations":{}}"#, "the request body is not valid"),
    ] {
        let (status, body) = post(c, "/0.1.0/batch", request);
        assert_eq!(status, 400, "{request} -> {body}");
        assert!(body.contains(expected), "{request} -> {body}, expected {expected:?}");
    }
    let item =
        r#"{"method":"POST","relative-url":"rest/types/pk-read","body":{"filters":[{"column":"id","value":1}]}}"#;
    // RonDB's limit of 256 operations per batch is the default.
    let (status, body) = post(c, "/0.1.0/batch", &format!(r#"{{"operations":[{}]}}"#, vec![item; 256].join(",")));
    assert_eq!(status, 200, "{body}");
    let too_many = format!(r#"{{"operations":[{}]}}"#, vec![item; 257].join(","));
    let (status, body) = post(c, "/0.1.0/batch", &too_many);
    assert_eq!(status, 400);
    assert!(body.contains("more than the limit of 256"), "{body}");

    // Feature views: create, list, get; vectors across two tables.
    let view = r#"{"featureStoreName":"fs","featureViewName":"churn","featureViewVersion":1,"featureGroups":[
        {"table":"customers","features":["id","age","city"]},
        {"table":"orders_agg","joinKeys":{"cust":"id"},"prefix":"o_","features":["n_orders","total"]}]}"#;
    let (status, body) = post(c, "/0.1.0/feature_view", view);
    assert_eq!(status, 201, "{body}");
    let (status, body) = post(c, "/0.1.0/feature_view", view);
    assert_eq!(status, 409, "{body}");
    let (status, body) = http(&c.rest, "GET", "/0.1.0/feature_view", &[], b"");
    assert_eq!(status, 200);
    assert!(body.starts_with(r#"{"featureViews":[{"featureStoreName":"fs","featureViewName":"churn""#), "{body}");
    let (status, body) = http(&c.rest, "GET", "/0.1.0/feature_view/fs/churn/1", &[], b"");
    assert_eq!(status, 200, "{body}");
    let bad_view = r#"{"featureStoreName":"fs","featureViewName":"bad","featureViewVersion":1,"featureGroups":[{"table":"customers","features":["nope"]}]}"#;
    let (status, body) = post(c, "/0.1.0/feature_view", bad_view);
    assert_eq!(status, 400);
    assert!(body.contains("has no column 'nope'"), "{body}");

    let (status, body) = post(
        c,
        "/0.1.0/feature_store",
        r#"{"featureStoreName":"fs","featureViewName":"churn","featureViewVersion":1,"entries":{"id":1},
            "metadataOptions":{"featureName":true,"featureType":true},"options":{"includeDetailedStatus":true}}"#,
    );
    assert_eq!(status, 200, "{body}");
    let customers_id = client.table("fs", "customers").await.unwrap().def().id;
    let orders_id = client.table("fs", "orders_agg").await.unwrap().def().id;
    assert_eq!(
        body,
        format!(
            concat!(
                r#"{{"features":[1,30,"Oslo",5,99.5],"metadata":[{{"featureName":"id","featureType":"bigint"}},"#,
                r#"{{"featureName":"age","featureType":"int"}},{{"featureName":"city","featureType":"string"}},"#,
                r#"{{"featureName":"o_n_orders","featureType":"int"}},{{"featureName":"o_total","featureType":"double"}}],"#,
                r#""status":"COMPLETE","detailedStatus":[{{"featureGroupId":{},"httpStatus":200}},{{"featureGroupId":{},"httpStatus":200}}]}}"#
            ),
            customers_id, orders_id
        )
    );
    // One of the two rows is missing: its features are null, status MISSING.
    let (status, body) = post(
        c,
        "/0.1.0/feature_store",
        r#"{"featureStoreName":"fs","featureViewName":"churn","featureViewVersion":1,"entries":{"id":2},"passedFeatures":{"o_total":1.25}}"#,
    );
    assert_eq!(
        (status, body.as_str()),
        (200, r#"{"features":[2,41,"Rome",null,1.25],"metadata":null,"status":"MISSING","detailedStatus":null}"#)
    );
    let (status, body) = post(
        c,
        "/0.1.0/batch_feature_store",
        r#"{"featureStoreName":"fs","featureViewName":"churn","featureViewVersion":1,"entries":[{"id":1},{"id":3},{"id":"x"}],
            "metadataOptions":{"featureName":true}}"#,
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        concat!(
            r#"{"features":[[1,30,"Oslo",5,99.5],[3,null,null,null,null],[]],"#,
            r#""metadata":[{"featureName":"id","featureType":null},{"featureName":"age","featureType":null},{"featureName":"city","featureType":null},{"featureName":"o_n_orders","featureType":null},{"featureName":"o_total","featureType":null}],"#,
            r#""status":["COMPLETE","MISSING","ERROR"],"detailedStatus":null}"#
        )
    );
    // A refused entry between two served ones: its detailed status is null.
    let (status, body) = post(
        c,
        "/0.1.0/batch_feature_store",
        r#"{"featureStoreName":"fs","featureViewName":"churn","featureViewVersion":1,"entries":[{"id":1},{"id":"x"},{"id":3}],
            "options":{"includeDetailedStatus":true}}"#,
    );
    assert_eq!(status, 200, "{body}");
    let detailed = |a: u16, b: u16| {
        format!(
            r#"[{{"featureGroupId":{customers_id},"httpStatus":{a}}},{{"featureGroupId":{orders_id},"httpStatus":{b}}}]"#
        )
    };
    assert_eq!(
        body,
        format!(
            r#"{{"features":[[1,30,"Oslo",5,99.5],[],[3,null,null,null,null]],"metadata":null,"status":["COMPLETE","ERROR","MISSING"],"detailedStatus":[{},null,{}]}}"#,
            detailed(200, 200),
            detailed(404, 404)
        )
    );
    for (request, status_expected, code) in [
        (
            r#"{"featureStoreName":"fs","featureViewName":"churn","featureViewVersion":2,"entries":{"id":1}}"#,
            404,
            r#""code":1,"#,
        ),
        (
            r#"{"featureStoreName":"fs","featureViewName":"churn","featureViewVersion":1,"entries":{"cust":1}}"#,
            400,
            r#""code":12,"#,
        ),
        (
            r#"{"featureStoreName":"fs","featureViewName":"churn","featureViewVersion":1,"entries":{"id":"x"}}"#,
            400,
            r#""code":10,"#,
        ),
        (
            r#"{"featureStoreName":"fs","featureViewName":"churn","featureViewVersion":1,"entries":{}}"#,
            400,
            r#""code":15,"#,
        ),
        (
            r#"{"featureStoreName":"fs","featureViewName":"churn","featureViewVersion":1,"entries":{"id":1},"passedFeatures":{"zz":1}}"#,
            400,
            r#""code":11,"#,
        ),
    ] {
        let (status, body) = post(c, "/0.1.0/feature_store", request);
        assert_eq!(status, status_expected, "{request} -> {body}");
        assert!(body.starts_with(&format!("{{{code}")), "{request} -> {body}");
    }
    let (status, _) = http(&c.rest, "DELETE", "/0.1.0/feature_view/fs/churn/1", &[], b"");
    assert_eq!(status, 200);
    let (status, _) = http(&c.rest, "GET", "/0.1.0/feature_view/fs/churn/1", &[], b"");
    assert_eq!(status, 404);

    // A schema change behind the REST node's cache is picked up at once.
    client.create_index("rest", "pairs", "by_v", &["v"]).await.unwrap();
    let (status, body) =
        post(c, "/0.1.0/rest/pairs/pk-read", r#"{"filters":[{"column":"a","value":1},{"column":"b","value":"x"}]}"#);
    assert_eq!((status, body.as_str()), (200, r#"{"data":{"a":1,"b":"x","v":10}}"#));

    // A unique index made behind its back is kept by its writes: a taken
    // value is that item's 409, and the hidden table is not reachable.
    let pairs = client.create_unique_index("rest", "pairs", "unique_v", &["v"]).await.unwrap();
    let batch = r#"{"operations":[
        {"method":"POST","relative-url":"rest/pairs/pk-write","body":{"data":{"a":5,"b":"u","v":50}}},
        {"method":"POST","relative-url":"rest/pairs/pk-write","body":{"data":{"a":6,"b":"u","v":10}}}
    ]}"#;
    let (status, body) = post(c, "/0.1.0/batch", batch);
    assert_eq!(
        (status, body.as_str()),
        (
            200,
            r#"{"result":[{"code":200,"body":{}},{"code":409,"body":{"message":"Duplicate entry '10' for key 'pairs.unique_v'"}}]}"#
        )
    );
    let index = pairs.def().index("unique_v").unwrap().id;
    let hidden = latsdb_types::schema::unique_table_name(pairs.def().id, index);
    let (status, _) = post(c, &format!("/0.1.0/rest/{hidden}/pk-read"), r#"{"filters":[{"column":"u0","value":10}]}"#);
    assert_eq!(status, 404);

    // Health, ping, metrics, OpenAPI; the server kept serving through all of the above.
    // A number written as a string reaches an integer key, as in RonDB.
    let (status, body) = post(c, "/0.1.0/rest/types/pk-read", r#"{"filters":[{"column":"id","value":"1"}]}"#);
    assert_eq!((status, body), (200, format!(r#"{{"data":{ROW_1}}}"#)));
    // /health answers as RonDB does; /health/details as latsdb.
    assert_eq!(http(&c.rest, "GET", "/0.1.0/health", &[], b""), (200, "1".to_string()));
    let (status, body) = http(&c.rest, "GET", "/0.1.0/health/details", &[], b"");
    assert_eq!((status, body.as_str()), (200, r#"{"status":"ok","datanodesStarted":2,"datanodes":2}"#));
    // RonDB 24.10's API version serves the same endpoints.
    let (status, body) = post(c, "/0.2.0/rest/types/pk-read", r#"{"filters":[{"column":"id","value":1}]}"#);
    assert_eq!((status, body), (200, format!(r#"{{"data":{ROW_1}}}"#)));
    assert_eq!(http(&c.rest, "GET", "/0.3.0/health", &[], b"").0, 404);
    assert_eq!(http(&c.rest, "GET", "/0.1.0/ping", &[], b""), (200, String::new()));
    let (status, body) = http(&c.rest, "GET", "/metrics", &[], b"");
    assert_eq!(status, 200);
    assert!(body.contains("latsdb_rest_requests_total{endpoint=\"batch\",status=\"2xx\"} 4"), "{body}");
    assert!(body.contains("latsdb_rest_key_operations_total{outcome=\"not_found\"}"), "{body}");
    let (status, body) = http(&c.rest, "GET", "/0.1.0/openapi.json", &[], b"");
    assert_eq!(status, 200);
    let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
    for path in [
        "/0.1.0/{db}/{table}/pk-read",
        "/0.1.0/{db}/{table}/pk-write",
        "/0.1.0/{db}/{table}/pk-delete",
        "/0.1.0/batch",
        "/0.1.0/feature_store",
        "/0.1.0/batch_feature_store",
        "/0.1.0/feature_view",
        "/0.1.0/feature_view/{store}/{name}/{version}",
        "/0.1.0/health",
        "/0.1.0/health/details",
        "/0.1.0/ping",
        "/metrics",
    ] {
        assert!(doc["paths"][path].is_object(), "the OpenAPI document lacks {path}");
    }
}

fn apikey(cluster: &TestCluster, args: &[&str]) -> String {
    let out = Command::new(BIN).args(["apikey", "--mgmd", &cluster.mgmd]).args(args).output().unwrap();
    assert!(out.status.success(), "apikey {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_keys_grant_databases() {
    let cluster = TestCluster::start(&["--rest-auth", "api-key"]);
    let client = Client::connect(&cluster.mgmd).await.unwrap();
    load(&client).await;
    let c = &cluster;
    let rest_key = apikey(c, &["create", "--name", "reader", "--db", "rest"]);
    let all_key = apikey(c, &["create", "--name", "admin", "--db", "*"]);
    let listed = apikey(c, &["list"]);
    assert!(listed.contains("reader  databases=rest") && listed.contains("admin  databases=*"), "{listed}");
    assert!(!listed.contains(rest_key.split('.').nth(1).unwrap()), "list must not show secrets");

    let read = r#"{"filters":[{"column":"id","value":2}],"readColumns":[{"column":"bo"}]}"#;
    let with = |key: &str, path: &str, body: &str| http(&c.rest, "POST", path, &[("X-API-KEY", key)], body.as_bytes());
    let (status, body) = post(c, "/0.1.0/rest/types/pk-read", read);
    assert_eq!(status, 401);
    assert!(body.contains("send it in the X-API-KEY header"), "{body}");
    assert_eq!(with("garbage", "/0.1.0/rest/types/pk-read", read).0, 401);
    let forged = format!("{}.{}", rest_key.split('.').next().unwrap(), "wrongsecret");
    assert_eq!(with(&forged, "/0.1.0/rest/types/pk-read", read).0, 401);
    assert_eq!(with(&rest_key, "/0.1.0/rest/types/pk-read", read), (200, r#"{"data":{"bo":null}}"#.to_string()));
    let (status, body) = with(&rest_key, "/0.1.0/fs/customers/pk-read", r#"{"filters":[{"column":"id","value":1}]}"#);
    assert_eq!(status, 401);
    assert!(body.contains("API key not authorized to access fs"), "{body}");
    assert_eq!(with(&all_key, "/0.1.0/fs/customers/pk-read", r#"{"filters":[{"column":"id","value":1}]}"#).0, 200);
    // One item on a database the key may not read rejects the whole batch.
    let batch = r#"{"operations":[
        {"method":"POST","relative-url":"rest/types/pk-read","body":{"filters":[{"column":"id","value":1}]}},
        {"method":"POST","relative-url":"fs/customers/pk-read","body":{"filters":[{"column":"id","value":1}]}}]}"#;
    assert_eq!(with(&rest_key, "/0.1.0/batch", batch).0, 401);
    assert_eq!(with(&all_key, "/0.1.0/batch", batch).0, 200);
    // Every item is validated before the key is checked, as in RonDB: a
    // batch without a method is a 400 whatever its databases.
    let malformed =
        r#"{"operations":[{"relative-url":"fs/customers/pk-read","body":{"filters":[{"column":"id","value":1}]}}]}"#;
    let (status, body) = with(&rest_key, "/0.1.0/batch", malformed);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("the Method section should be POST"), "{body}");
    // Health and ping stay open by default.
    assert_eq!(http(&c.rest, "GET", "/0.1.0/ping", &[], b"").0, 200);
    // A revoked key stops working within the cache lifetime.
    apikey(c, &["delete", &rest_key]);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (status, _) = with(&rest_key, "/0.1.0/rest/types/pk-read", read);
        if status == 401 {
            break;
        }
        assert!(Instant::now() < deadline, "a revoked key still works after 15 s");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// With a certificate the REST node serves HTTPS: a client that trusts the
/// certificate gets the same answers, and a plain-HTTP request gets none
/// (the node keeps serving TLS clients after it).
#[test]
fn the_rest_node_serves_https_with_the_configured_certificate() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let (cert, key) = common::self_signed_certificate(dir.path());
    let cluster = TestCluster::start(&[
        "--rest-tls-cert",
        cert.to_str().expect("utf-8 path"),
        "--rest-tls-key",
        key.to_str().expect("utf-8 path"),
    ]);
    let (status, body) = common::https(&cluster.rest, &cert, "GET", "/0.1.0/ping", b"");
    assert_eq!((status, body.as_str()), (200, ""), "ping over TLS");
    let (status, body) = common::https(&cluster.rest, &cert, "POST", "/0.1.0/batch", br#"{"operations":[]}"#);
    assert_eq!(
        (status, body.as_str()),
        (400, r#"{"message":"No operations defined ('operations' is empty): give at least one operation"}"#),
        "a bad batch over TLS"
    );
    // Plain HTTP to the TLS port: no HTTP answer, and no harm done.
    use std::io::{Read, Write};
    let mut plain = std::net::TcpStream::connect(&cluster.rest).expect("connect");
    plain.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    plain.write_all(b"GET /0.1.0/ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").expect("send");
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(!answer.starts_with(b"HTTP/"), "a plain request got an HTTP answer from the TLS port");
    let (status, _) = common::https(&cluster.rest, &cert, "GET", "/0.1.0/health", b"");
    assert_eq!(status, 200, "the node still serves TLS clients");
}

/// TIME(n), YEAR, BIT(n), ENUM and SET columns through the REST node as
/// RonDB's REST API shows them: a TIME with its column's digits, a YEAR
/// as a number, a BIT as base64 of its big-endian bytes, ENUM and SET as
/// their text; a TIME key with more digits than its column finds the row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_year_bit_enum_and_set_columns_as_rondb_shows_them() {
    let cluster = TestCluster::start(&[]);
    let client = Client::connect(&cluster.mgmd).await.unwrap();
    let spec = TableSpec::new("rest", "kinds")
        .column(ColumnDef::new("tm", ColumnType::Time).fraction_digits(3))
        .column(ColumnDef::new("y", ColumnType::Year))
        .column(ColumnDef::new("b", ColumnType::Bit(10)))
        .column(
            ColumnDef::new("e", ColumnType::Enum)
                .collated(latsdb_types::Collation::GeneralCi)
                .members(["small", "medium"]),
        )
        .column(ColumnDef::new("s", ColumnType::Set).members(["a", "b", "c"]))
        .primary_key(&["tm"]);
    let table = client.create_table(spec).await.unwrap();
    let row = |tm: &str, y: Value, b: Value, e: &str, s: &str| {
        Op::insert(&table, vec![Value::Str(tm.into()), y, b, Value::Str(e.into()), Value::Str(s.into())]).unwrap()
    };
    let ops = vec![
        row("11:11:11.123", Value::Int(2022), Value::UInt(5), "medium", "c,a"),
        row("-838:59:59", Value::Int(69), Value::UInt(1023), "small", ""),
    ];
    for result in client.batch(ops).await.unwrap() {
        assert!(matches!(result, Ok(Outcome::Done)), "{result:?}");
    }
    let c = &cluster;
    let read = |key: &str| {
        post(c, "/0.1.0/rest/kinds/pk-read", &format!(r#"{{"filters":[{{"column":"tm","value":"{key}"}}]}}"#))
    };
    assert_eq!(
        read("11:11:11.123456"),
        (200, r#"{"data":{"tm":"11:11:11.123","y":2022,"b":"AAU=","e":"medium","s":"a,c"}}"#.to_string())
    );
    assert_eq!(
        read("-838:59:59"),
        (200, r#"{"data":{"tm":"-838:59:59.000","y":2069,"b":"A/8=","e":"small","s":""}}"#.to_string())
    );
    let (status, body) = read("11:61:11");
    assert_eq!(status, 400, "{body}");
    // Written through REST: a member's text in any case (the column is
    // case-insensitive), a BIT as base64.
    let (status, body) = post(
        c,
        "/0.1.0/rest/kinds/pk-write",
        r#"{"data":{"tm":"01:02:03","y":"1999","b":"Ag==","e":"MEDIUM","s":"b"}}"#,
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        read("01:02:03"),
        (200, r#"{"data":{"tm":"01:02:03.000","y":1999,"b":"AAI=","e":"medium","s":"b"}}"#.to_string())
    );
    let (status, body) = post(c, "/0.1.0/rest/kinds/pk-write", r#"{"data":{"tm":"01:02:04","e":"large"}}"#);
    assert_ne!(status, 200, "a value that is no member is refused: {body}");
    assert!(body.contains("not a member"), "{body}");
}

/// A table dropped and created again with other columns through SQL is
/// served with its new definition at the next REST request, and a column
/// added or dropped through SQL shows or leaves at once.
#[test]
fn the_rest_node_follows_schema_changes_made_through_sql() {
    let cluster = TestCluster::start(&[]);
    let sql = |script: &str| {
        let (ok, _, err) = common::mariadb(&cluster, &[], script);
        assert!(ok, "{script}: {err}");
    };
    let read = || post(&cluster, "/0.1.0/s/t/pk-read", r#"{"filters":[{"column":"id","value":1}]}"#);
    sql("CREATE DATABASE s; CREATE TABLE s.t (id INT PRIMARY KEY, a INT); INSERT INTO s.t VALUES (1, 10)");
    assert_eq!(read(), (200, r#"{"data":{"id":1,"a":10}}"#.to_string()));
    sql("DROP TABLE s.t; CREATE TABLE s.t (id INT PRIMARY KEY, b VARCHAR(10)); INSERT INTO s.t VALUES (1, 'x')");
    assert_eq!(read(), (200, r#"{"data":{"id":1,"b":"x"}}"#.to_string()));
    sql("ALTER TABLE s.t ADD COLUMN c INT DEFAULT 5");
    assert_eq!(read(), (200, r#"{"data":{"id":1,"b":"x","c":5}}"#.to_string()));
    // A dropped column leaves reads, and no request can name it.
    sql("ALTER TABLE s.t DROP COLUMN b");
    assert_eq!(read(), (200, r#"{"data":{"id":1,"c":5}}"#.to_string()));
    let named = post(
        &cluster,
        "/0.1.0/s/t/pk-read",
        r#"{"filters":[{"column":"id","value":1}],"readColumns":[{"column":"b"}]}"#,
    );
    assert_eq!(named.0, 400, "{named:?}");
    let write = post(&cluster, "/0.1.0/s/t/pk-write", r#"{"data":{"id":2,"c":6}}"#);
    assert_eq!(write.0, 200, "{write:?}");
    sql("INSERT INTO s.t VALUES (3, 7)");
    let both = post(
        &cluster,
        "/0.1.0/batch",
        r#"{"operations":[{"method":"POST","relative-url":"s/t/pk-read","body":{"filters":[{"column":"id","value":2}]}},
            {"method":"POST","relative-url":"s/t/pk-read","body":{"filters":[{"column":"id","value":3}]}}]}"#,
    );
    assert!(both.1.contains(r#""data":{"id":2,"c":6}"#) && both.1.contains(r#""data":{"id":3,"c":7}"#), "{both:?}");
}

/// Errors lead with RonDB's sentence for them (its clients and tests look
/// for it) and come in RonDB's JSON shape at /0.2.0/; names are checked
/// before any lookup; keys convert as RonDB converts them: a DATE takes a
/// midnight datetime, a TIMESTAMP outside its range and a FLOAT key are
/// refused; FLOATs print as MySQL prints them.
#[test]
fn errors_and_key_conversions_as_rondb_gives_them() {
    let cluster = TestCluster::start(&[]);
    let (ok, _, err) = common::mariadb(
        &cluster,
        &[],
        "CREATE DATABASE r;
         CREATE TABLE r.days (d DATE PRIMARY KEY, f FLOAT, x DOUBLE);
         INSERT INTO r.days VALUES ('1111-11-11', -123.123, 0);
         CREATE TABLE r.stamps (ts TIMESTAMP PRIMARY KEY, v INT);
         INSERT INTO r.stamps VALUES ('2020-01-01 00:00:00', 1);
         CREATE TABLE r.floats (k FLOAT PRIMARY KEY, v INT);
         INSERT INTO r.floats VALUES (0, 1);
         CREATE TABLE r.two (a INT, b INT UNSIGNED, c VARCHAR(4), PRIMARY KEY (a, b));
         CREATE TABLE r.wide (a INT PRIMARY KEY, x INT, y INT DEFAULT 7);
         CREATE TABLE r.uniq (a INT PRIMARY KEY, u INT, UNIQUE KEY (u));
         INSERT INTO r.uniq VALUES (1, 5)",
    );
    assert!(ok, "{err}");
    let c = &cluster;
    let read = |table: &str, body: &str| post(c, &format!("/0.1.0/r/{table}/pk-read"), body);
    // Conversions and formatting.
    let day = r#"{"data":{"d":"1111-11-11","f":-123.123,"x":0}}"#.to_string();
    assert_eq!(read("days", r#"{"filters":[{"column":"d","value":"1111-11-11"}]}"#), (200, day.clone()));
    assert_eq!(read("days", r#"{"filters":[{"column":"d","value":"1111-11-11 00:00:00"}]}"#), (200, day));
    let sentence = |table: &str, body: &str, status: u16, words: &str| {
        let (got, answer) = read(table, body);
        assert_eq!(got, status, "{body} -> {answer}");
        assert!(answer.contains(words), "{body} -> {answer}, expected {words:?}");
    };
    sentence("days", r#"{"filters":[{"column":"d","value":"1111-11-11 11:00:00"}]}"#, 400, "Invalid column data.");
    sentence("days", r#"{"filters":[{"column":"d","value":"1111-13-11"}]}"#, 400, "Invalid Date/Time.");
    sentence("stamps", r#"{"filters":[{"column":"ts","value":"1970-01-01 00:00:00"}]}"#, 400, "Invalid Date/Time.");
    sentence("stamps", r#"{"filters":[{"column":"ts","value":"2020-01-01 -00:00:00"}]}"#, 200, r#""v":1"#);
    sentence("floats", r#"{"filters":[{"column":"k","value":0}]}"#, 400, "Hash indexes on float and double");
    // RonDB's sentences, then latsdb's detail.
    let two = |filters: &str| format!(r#"{{"filters":[{filters}]}}"#);
    sentence(
        "two",
        &two(r#"{"column":"a","value":1}"#),
        400,
        "Wrong number of primary-key columns. Expecting: 2 Got: 1",
    );
    sentence("two", &two(r#"{"column":"a","value":1},{"column":"c","value":"x"}"#), 400, "Wrong primary-key column.");
    sentence("two", &two(r#"{"column":"a","value":1},{"column":"z","value":1}"#), 400, "Column does not exist.");
    sentence("two", &two(r#"{"column":"a","value":2147483648},{"column":"b","value":1}"#), 400, "Wrong data type.");
    sentence("two", &two(r#"{"column":"a","value":1},{"column":"b","value":-1}"#), 400, "Wrong data type.");
    sentence("nope", &two(r#"{"column":"a","value":1}"#), 404, "Database/Table does not exist.");
    sentence("two", "{}", 400, "the Field section is null");
    sentence("two", &two(r#"{"column":null,"value":1}"#), 400, "a Column name in the Field section is null");
    // Names no table can hold are refused before any lookup: 400, not 404.
    let long = "c".repeat(65);
    sentence(
        "nope",
        &two(&format!(r#"{{"column":"{long}","value":1}}"#)),
        400,
        &format!("identifier is too large: {long}"),
    );
    let (status, body) = post(c, "/0.1.0/r/db%F0%90%80%80/pk-read", &two(r#"{"column":"a","value":1}"#));
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("table name is invalid"), "{body}");
    // API 0.2.0 answers errors in RonDB's JSON shape.
    let (status, body) = post(c, "/0.2.0/r/two/pk-read", &two(r#"{"column":"a","value":1}"#));
    assert_eq!(status, 400);
    let error: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(error["error"]["code"], 400, "{body}");
    assert!(error["error"]["message"].as_str().unwrap().starts_with("Wrong number of primary-key columns."), "{body}");
    assert_eq!(error["error"]["mysqlCode"], -1, "{body}");
    let (status, body) = post(c, "/0.2.0/batch", r#"{"operations":[]}"#);
    assert_eq!(status, 400);
    assert!(body.starts_with(r#"{"error":{"code":400,"message":"No operations defined"#), "{body}");
    // An item without a method rejects the whole batch, as RonDB's parser does.
    let item =
        r#"{"relative-url":"r/two/pk-read","body":{"filters":[{"column":"a","value":1},{"column":"b","value":1}]}}"#;
    let (status, body) = post(c, "/0.1.0/batch", &format!(r#"{{"operations":[{item}]}}"#));
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("operation 0: the Method section should be POST: 'method' is missing"), "{body}");
    batch_writes_and_deletes_as_rondb_takes_them(c);
}

/// RonDB's `batchwrite` (pk-write, pk-update, pk-insert with `filters` and
/// `writeColumns`) and `batchdelete`; pk-update and pk-insert alone too.
fn batch_writes_and_deletes_as_rondb_takes_them(c: &TestCluster) {
    let op = |url: &str, body: &str| format!(r#"{{"method":"POST","relative-url":"r/two/{url}","body":{body}}}"#);
    let key = |a: i32| format!(r#"[{{"column":"a","value":{a}}},{{"column":"b","value":1}}]"#);
    let write = |a: i32, c: &str| {
        format!(r#"{{"filters":{},"writeColumns":[{{"column":"c","value":"{c}"}}],"operationId":"w{a}"}}"#, key(a))
    };
    let batch = format!(
        r#"{{"operations":[{},{},{}]}}"#,
        op("pk-write", &write(1, "one")),
        op("pk-insert", &write(2, "two")),
        op("pk-update", &write(3, "none")),
    );
    let (status, body) = post(c, "/0.1.0/batchwrite", &batch);
    assert_eq!(status, 200, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    let codes: Vec<i64> = answer["result"].as_array().unwrap().iter().map(|r| r["code"].as_i64().unwrap()).collect();
    assert_eq!(codes, [200, 200, 404], "{body}");
    assert_eq!(answer["result"][0]["body"]["operationId"], "w1", "{body}");
    // A pk-insert of a taken key fails the whole batchwrite with NDB's
    // sentence, as RonDB's does; the other items are written all the same.
    let batch =
        format!(r#"{{"operations":[{},{}]}}"#, op("pk-insert", &write(1, "dup")), op("pk-write", &write(4, "four")));
    let (status, body) = post(c, "/0.2.0/batchwrite", &batch);
    assert_eq!(status, 409, "{body}");
    assert!(body.contains(r#""message":"Tuple already existed when attempting to insert."#), "{body}");
    // In latsdb's own batch the conflict stays the item's.
    let (status, body) = post(c, "/0.1.0/batch", &batch);
    assert_eq!(status, 200, "{body}");
    assert!(body.starts_with(r#"{"result":[{"code":409,"#), "{body}");
    let (status, body) = post(c, "/0.1.0/r/two/pk-update", &write(2, "TWO"));
    assert_eq!(status, 200, "{body}");
    let read = |a: i32| post(c, "/0.1.0/r/two/pk-read", &format!(r#"{{"filters":{}}}"#, key(a)));
    assert_eq!(read(2), (200, r#"{"data":{"a":2,"b":1,"c":"TWO"}}"#.to_string()));
    assert_eq!(read(1), (200, r#"{"data":{"a":1,"b":1,"c":"one"}}"#.to_string()));
    // Only writes in batchwrite, only deletes in batchdelete.
    let (status, body) = post(
        c,
        "/0.1.0/batchwrite",
        &format!(r#"{{"operations":[{}]}}"#, op("pk-read", &format!(r#"{{"filters":{}}}"#, key(1)))),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("pk-write, pk-update, or pk-insert"), "{body}");
    let delete = |a: i32| op("pk-delete", &format!(r#"{{"filters":{}}}"#, key(a)));
    let (status, body) = post(c, "/0.1.0/batchdelete", &format!(r#"{{"operations":[{},{}]}}"#, delete(1), delete(7)));
    assert_eq!(status, 200, "{body}");
    assert!(body.starts_with(r#"{"result":[{"code":200,"body":{}},{"code":404"#), "{body}");
    assert_eq!(read(1).0, 404);
    // RonDB's pk-write sets the columns it gives and keeps the others (a
    // missing row is inserted with defaults); with `data` it writes the row.
    let write = |body: &str| post(c, "/0.1.0/r/wide/pk-write", body);
    let read = || post(c, "/0.1.0/r/wide/pk-read", r#"{"filters":[{"column":"a","value":1}]}"#).1;
    let given = |column: &str, value: i32| {
        format!(
            r#"{{"filters":[{{"column":"a","value":1}}],"writeColumns":[{{"column":"{column}","value":{value}}}]}}"#
        )
    };
    assert_eq!(write(&given("x", 1)).0, 200);
    assert_eq!(read(), r#"{"data":{"a":1,"x":1,"y":7}}"#);
    assert_eq!(write(&given("y", 9)).0, 200);
    assert_eq!(read(), r#"{"data":{"a":1,"x":1,"y":9}}"#);
    assert_eq!(write(r#"{"data":{"a":1,"x":5}}"#).0, 200);
    assert_eq!(read(), r#"{"data":{"a":1,"x":5,"y":7}}"#);
    // A new row that breaks a unique index is refused as a duplicate.
    let (status, body) = post(
        c,
        "/0.1.0/r/uniq/pk-write",
        r#"{"filters":[{"column":"a","value":2}],"writeColumns":[{"column":"u","value":5}]}"#,
    );
    assert_eq!(status, 409, "{body}");
    // At 0.1.0 an operation's error echoes its operationId.
    let (status, body) =
        post(c, "/0.1.0/r/uniq/pk-read", r#"{"filters":[{"column":"a","value":"x"}],"operationId":"o1"}"#);
    assert_eq!(status, 400, "{body}");
    assert!(body.starts_with(r#"{"operationId":"o1","message":"Wrong data type."#), "{body}");
    let (status, body) = post(c, "/0.2.0/batchdelete", "{invalid json}");
    assert_eq!(status, 400, "{body}");
    assert!(body.starts_with(r#"{"error":{"code":400,"#), "{body}");
}

/// The tables of Hopsworks' metadata that feature serving reads, with the
/// columns it reads (Hopsworks' own schema has many more), and a project
/// `demo` whose user holds an API key; store `fsx` belongs to the project,
/// `fsy` to no project of the key's user.
const HOPSWORKS: &str = "CREATE DATABASE hopsworks;
    CREATE TABLE hopsworks.users (uid INT PRIMARY KEY, email VARCHAR(150) NOT NULL, UNIQUE KEY (email));
    CREATE TABLE hopsworks.project (id INT PRIMARY KEY, projectname VARCHAR(100) NOT NULL);
    CREATE TABLE hopsworks.project_team (project_id INT, team_member VARCHAR(150), team_role VARCHAR(32),
        PRIMARY KEY (project_id, team_member), KEY (team_member));
    CREATE TABLE hopsworks.api_key (id INT PRIMARY KEY, prefix VARCHAR(45) NOT NULL, secret VARCHAR(512),
        salt VARCHAR(256), name VARCHAR(45), user_id INT, UNIQUE KEY prefix_UNIQUE (prefix));
    CREATE TABLE hopsworks.feature_store (id INT PRIMARY KEY, name VARCHAR(100) NOT NULL, project_id INT,
        UNIQUE KEY (name));
    CREATE TABLE hopsworks.shared_feature_store (id INT PRIMARY KEY, feature_store INT,
        shared_with_project INT, shared_entirely TINYINT(1), KEY (shared_with_project));
    CREATE TABLE hopsworks.feature_view (id INT PRIMARY KEY, name VARCHAR(63), version INT,
        feature_store_id INT, KEY (feature_store_id, name, version));
    CREATE TABLE hopsworks.on_demand_feature_group (id INT PRIMARY KEY, spine TINYINT(1));
    CREATE TABLE hopsworks.feature_group (id INT PRIMARY KEY, name VARCHAR(63), version INT,
        feature_store_id INT, on_demand_feature_group_id INT);
    CREATE TABLE hopsworks.training_dataset_join (id INT PRIMARY KEY, feature_view_id INT, prefix VARCHAR(63),
        idx INT, KEY (feature_view_id));
    CREATE TABLE hopsworks.training_dataset_feature (id INT PRIMARY KEY, feature_view_id INT,
        feature_group INT, name VARCHAR(1000), type VARCHAR(1000), td_join INT, idx INT, label TINYINT(1),
        KEY (feature_view_id));
    CREATE TABLE hopsworks.serving_key (id INT PRIMARY KEY, feature_view_id INT, feature_group_id INT,
        feature_name VARCHAR(1000), prefix VARCHAR(63), required TINYINT(1), join_on VARCHAR(1000),
        join_index INT, KEY (feature_view_id));
    CREATE TABLE hopsworks.subjects (id INT PRIMARY KEY, subject VARCHAR(255), version INT, schema_id INT,
        project_id INT, KEY (project_id));
    CREATE TABLE hopsworks.schemas (id INT PRIMARY KEY, `schema` TEXT, project_id INT);
    INSERT INTO hopsworks.users VALUES (10, 'ann@example.com');
    INSERT INTO hopsworks.project VALUES (1, 'demo'), (2, 'other');
    INSERT INTO hopsworks.project_team VALUES (1, 'ann@example.com', 'Data scientist');
    INSERT INTO hopsworks.api_key VALUES (1, 'AAAAAAAAAAAAAAAA', SHA2(CONCAT('s3cret', 'pepper'), 256), 'pepper', 'ann', 10);
    INSERT INTO hopsworks.feature_store VALUES (7, 'fsx', 2), (8, 'fsy', 2);
    INSERT INTO hopsworks.shared_feature_store VALUES (1, 7, 1, 1), (2, 8, 1, 0);
    INSERT INTO hopsworks.feature_view VALUES (100, 'orders', 1, 7), (101, 'hidden', 1, 8);
    INSERT INTO hopsworks.feature_group VALUES (20, 'customer', 1, 7, NULL), (21, 'product', 2, 7, NULL),
        (22, 'secret', 1, 8, NULL);
    INSERT INTO hopsworks.training_dataset_join VALUES (1, 100, NULL, 0), (2, 100, 'p_', 1), (3, 101, NULL, 0);
    INSERT INTO hopsworks.training_dataset_feature VALUES
        (1, 100, 20, 'cid', 'bigint', 1, 0, 0), (2, 100, 20, 'age', 'int', 1, 1, 0),
        (3, 100, 20, 'churned', 'boolean', 1, 2, 1), (4, 100, 21, 'sku', 'string', 2, 3, 0),
        (5, 100, 21, 'price', 'double', 2, 4, 0), (6, 100, 20, 'since', 'timestamp', 1, 5, 0),
        (7, 101, 22, 'id', 'bigint', 3, 0, 0), (8, 100, 20, 'tags', 'array<string>', 1, 6, 0);
    INSERT INTO hopsworks.schemas VALUES (1, '{\"type\":\"record\",\"name\":\"old\",\"fields\":[]}', 2),
        (2, '{\"type\":\"record\",\"name\":\"customer_1\",\"fields\":[{\"name\":\"tags\",
            \"type\":[\"null\",{\"type\":\"array\",\"items\":[\"null\",\"string\"]}]}]}', 2);
    INSERT INTO hopsworks.subjects VALUES (1, 'customer_1', 1, 1, 2), (2, 'customer_1', 2, 2, 2);
    INSERT INTO hopsworks.serving_key VALUES (1, 100, 20, 'cid', NULL, 1, NULL, 0),
        (2, 100, 21, 'sku', 'p_', 1, NULL, 1), (3, 101, 22, 'id', NULL, 1, NULL, 0);
    CREATE DATABASE fsx;
    CREATE TABLE fsx.customer_1 (cid BIGINT PRIMARY KEY, age INT, churned TINYINT(1), since TIMESTAMP,
        tags VARBINARY(100));
    CREATE TABLE fsx.product_2 (sku VARCHAR(20) PRIMARY KEY, price DOUBLE);
    INSERT INTO fsx.customer_1 VALUES (1, 42, 0, '2024-01-02 03:04:05', X'020402026102026200'),
        (2, 17, 1, NULL, NULL);
    INSERT INTO fsx.product_2 VALUES ('a-1', 9.5);
    CREATE DATABASE fsy;
    CREATE TABLE fsy.secret_1 (id BIGINT PRIMARY KEY);";

/// Feature vectors of views defined in Hopsworks' metadata, with Hopsworks'
/// API keys, answered as RonDB's REST server answers them: features in
/// `idx` order without labels, a join's prefix, serving keys echoed from
/// the entries, MISSING for an absent row, passed features, RonDB's error
/// codes, a store not shared with the key's project refused.
#[test]
fn feature_vectors_from_hopsworks_metadata() {
    let cluster = TestCluster::start(&["--rest-auth", "api-key"]);
    let (ok, _, err) = common::mariadb(&cluster, &[], HOPSWORKS);
    assert!(ok, "{err}");
    let c = &cluster;
    let key = "AAAAAAAAAAAAAAAA.s3cret";
    let fs = |path: &str, body: &str| http(&c.rest, "POST", path, &[("X-API-KEY", key)], body.as_bytes());
    let one = |entries: &str, extra: &str| {
        fs(
            "/0.1.0/feature_store",
            &format!(
                r#"{{"featureStoreName":"fsx","featureViewName":"orders","featureViewVersion":1,"entries":{entries}{extra}}}"#
            ),
        )
    };
    let (status, body) =
        one(r#"{"cid":1,"p_sku":"a-1"}"#, r#","metadataOptions":{"featureName":true,"featureType":true}"#);
    assert_eq!(status, 200, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["features"], serde_json::json!([1, 42, "a-1", 9.5, "2024-01-02 03:04:05", ["a", "b"]]), "{body}");
    assert_eq!(answer["status"], "COMPLETE", "{body}");
    let names: Vec<&str> =
        answer["metadata"].as_array().unwrap().iter().map(|m| m["featureName"].as_str().unwrap()).collect();
    assert_eq!(names, ["cid", "age", "p_sku", "p_price", "since", "tags"], "{body}");
    assert_eq!(answer["metadata"][3]["featureType"], "double", "{body}");
    // An absent row: its features are null and the key is echoed as sent.
    let (status, body) = one(r#"{"cid":"3","p_sku":"a-1"}"#, r#","options":{"includeDetailedStatus":true}"#);
    assert_eq!(status, 200, "{body}");
    assert!(
        body.starts_with(r#"{"features":["3",null,"a-1",9.5,null,null],"metadata":[],"status":"MISSING","#),
        "{body}"
    );
    assert!(
        body.contains(
            r#""detailedStatus":[{"featureGroupId":20,"httpStatus":404},{"featureGroupId":21,"httpStatus":200}]"#
        ),
        "{body}"
    );
    // A key the entry does not complete: that group is not read (400).
    let (_, body) = one(r#"{"cid":1}"#, r#","options":{"includeDetailedStatus":true}"#);
    assert!(body.contains(r#""status":"MISSING","detailedStatus":[{"featureGroupId":20,"httpStatus":200},{"featureGroupId":21,"httpStatus":400}]"#), "{body}");
    // Passed features replace values; they must be features of the right kind.
    let (_, body) = one(r#"{"cid":2,"p_sku":"a-1"}"#, r#","passedFeatures":{"p_price":1.25}"#);
    assert!(body.starts_with(r#"{"features":[2,17,"a-1",1.25,null,null],"#), "{body}");
    let refused = |entries: &str, extra: &str, status: u16, code: u64| {
        let (got, body) = one(entries, extra);
        assert_eq!(got, status, "{entries}{extra} -> {body}");
        let error: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(error["code"], code, "{entries}{extra} -> {body}");
    };
    refused(r#"{"cid":1}"#, r#","passedFeatures":{"churned":true}"#, 400, 11);
    refused(r#"{"cid":1}"#, r#","passedFeatures":{"p_price":"cheap"}"#, 400, 10);
    refused(r#"{"nope":1}"#, "", 400, 12);
    refused(r#"{"cid":"x"}"#, "", 415, 10);
    let named = |store: &str, view: &str| {
        fs(
            "/0.1.0/feature_store",
            &format!(
                r#"{{"featureStoreName":"{store}","featureViewName":"{view}","featureViewVersion":1,"entries":{{"id":1}}}}"#
            ),
        )
    };
    let (status, body) = named("nostore", "orders");
    assert_eq!((status, body.contains(r#""code":2"#)), (400, true), "{body}");
    let (status, body) = named("fsx", "noview");
    assert_eq!((status, body.contains(r#""code":1"#)), (400, true), "{body}");
    // fsy is shared with the key's project, but not entirely: no access.
    let (status, body) = named("fsy", "hidden");
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("API key not authorized to access fsy"), "{body}");
    // A batch: an entry that fails its checks is ERROR with an empty vector.
    let (status, body) = fs(
        "/0.1.0/batch_feature_store",
        r#"{"featureStoreName":"fsx","featureViewName":"orders","featureViewVersion":1,
            "entries":[{"cid":1,"p_sku":"a-1"},{"bad":1},{"cid":2}]}"#,
    );
    assert_eq!(status, 200, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["status"], serde_json::json!(["COMPLETE", "ERROR", "MISSING"]), "{body}");
    assert_eq!(answer["features"][1], serde_json::json!([]), "{body}");
    assert_eq!(answer["features"][2], serde_json::json!([2, 17, null, null, null, null]), "{body}");
    assert_eq!(answer["metadata"].as_array().map(Vec::len), Some(6), "{body}");
    // A wrong secret is refused.
    let (status, _) = http(&c.rest, "POST", "/0.1.0/feature_store", &[("X-API-KEY", "AAAAAAAAAAAAAAAA.wrong")], b"{}");
    assert_eq!(status, 401);
}
