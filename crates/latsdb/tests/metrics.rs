//! Every process of `latsdb start --metrics` serves GET /metrics, and what
//! each serves parses with the Prometheus project's own text parser
//! (prometheus_client, from `scripts/requirements-metrics.txt` in
//! `target/pyenv`), with the series its role promises counting the work
//! the test did: the management server's view of the cluster, each data
//! node's shards, the SQL node's statements and the REST node's requests.

mod common;

use common::{http, run_bounded, scrape, workspace, TestCluster};
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

/// Parses Prometheus text from stdin and prints, per sample, its name, its
/// labels as k=v joined by commas, and its value; fails on text the
/// parser refuses.
const PARSE: &str = r#"
import sys
from prometheus_client.parser import text_string_to_metric_families
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
        print(f"{s.name} {labels or '-'} {s.value}")
"#;

/// The samples of `text` as the parser reads them: name -> [(labels, value)].
fn parse(text: &str, who: &str) -> BTreeMap<String, Vec<(String, f64)>> {
    let python = workspace().join("target/pyenv/bin/python3");
    let mut cmd = Command::new(&python);
    cmd.args(["-c", PARSE]);
    let (status, out, err) = run_bounded(&mut cmd, Some(text), Duration::from_secs(60));
    assert!(status.success(), "prometheus_client refused the metrics of {who}: {err}\n{text}");
    let mut samples: BTreeMap<String, Vec<(String, f64)>> = BTreeMap::new();
    for line in out.lines() {
        let mut words = line.split(' ');
        let (Some(name), Some(labels), Some(value)) = (words.next(), words.next(), words.next()) else {
            panic!("unexpected parser output {line:?}");
        };
        samples.entry(name.to_string()).or_default().push((labels.to_string(), value.parse().unwrap()));
    }
    samples
}

/// The sum of the samples of `name` whose labels contain `with`.
fn total(samples: &BTreeMap<String, Vec<(String, f64)>>, name: &str, with: &str) -> f64 {
    samples.get(name).map(|s| s.iter().filter(|(l, _)| l.contains(with)).map(|(_, v)| v).sum()).unwrap_or(0.0)
}

#[test]
fn every_process_serves_metrics_that_prometheus_parses() {
    let cluster = TestCluster::start(&["--metrics"]);
    // Enough rows that every data node is the primary of some of them.
    let rows: Vec<String> = (1..=64).map(|i| format!("({i}, {})", i * 10)).collect();
    let sql = format!(
        "CREATE DATABASE m; CREATE TABLE m.t (id INT PRIMARY KEY, v INT); INSERT INTO m.t VALUES {}; \
         SELECT v FROM m.t WHERE id = 2; SELECT nope FROM m.t;",
        rows.join(", ")
    );
    let (_, out, _) = common::mariadb(&cluster, &["--force"], &sql);
    assert!(out.contains("20"), "the SQL script ran: {out}");
    let body = br#"{"filters":[{"column":"id","value":1}]}"#;
    let (status, answer) = http(&cluster.rest, "POST", "/0.1.0/m/t/pk-read", &[], body);
    assert_eq!(status, 200, "{answer}");

    let names: Vec<&str> = cluster.metrics.iter().map(|(n, _)| n.as_str()).collect();
    for role in ["mgmd", "datanode 2", "datanode 3", "sql"] {
        assert!(names.contains(&role), "the launcher printed no metrics address for {role}: {:?}", cluster.metrics);
    }
    let mut tx_requests = 0.0;
    let mut served: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    for (name, url) in &cluster.metrics {
        let samples = parse(&scrape(url), name);
        served.extend(samples.keys().cloned());
        match name.as_str() {
            "mgmd" => {
                // Usage arrives with its 5 s poll; the nodes' status at once.
                assert_eq!(total(&samples, "latsdb_data_node_started", "node="), 2.0, "{name}: {samples:?}");
                assert_eq!(total(&samples, "latsdb_cluster_formed", ""), 1.0, "{name}");
                assert_eq!(total(&samples, "latsdb_data_node_starts_total", "node="), 2.0, "{name}: {samples:?}");
            }
            "sql" => {
                assert!(total(&samples, "latsdb_sql_statements_total", "kind=select") >= 2.0, "{name}: {samples:?}");
                assert!(total(&samples, "latsdb_sql_statements_total", "kind=insert") >= 1.0, "{name}: {samples:?}");
                assert!(total(&samples, "latsdb_sql_statement_errors_total", "kind=select") >= 1.0, "{name}");
                assert!(total(&samples, "latsdb_sql_statement_seconds_count", "kind=select") >= 2.0, "{name}");
                assert!(total(&samples, "latsdb_sql_connections_total", "") >= 1.0, "{name}");
            }
            node => {
                let id = node.strip_prefix("datanode ").expect("a data node");
                let ops = total(&samples, "latsdb_key_operations_total", &format!("node={id}"));
                assert!(ops >= 1.0, "{name}: its shards counted no key operation: {samples:?}");
                assert!(samples.contains_key("latsdb_data_memory_used_bytes"), "{name}");
                assert!(samples.contains_key("latsdb_checkpoints_total"), "{name}");
                assert!(samples.contains_key("latsdb_redo_written_bytes_total"), "{name}");
                let causes: std::collections::BTreeSet<&str> = samples
                    .get("latsdb_transactions_aborted_total")
                    .into_iter()
                    .flatten()
                    .filter_map(|(labels, _)| labels.split(',').find_map(|l| l.strip_prefix("cause=")))
                    .collect();
                let every: std::collections::BTreeSet<&str> =
                    latsdb_types::work::AbortCause::ALL.iter().map(|c| c.name()).collect();
                assert_eq!(causes, every, "{name}: aborts are not counted by every cause");
                tx_requests += total(&samples, "latsdb_transaction_request_seconds_count", &format!("node={id}"));
            }
        }
    }
    // The SQL inserts ran as transactions, each coordinated by a data node.
    assert!(tx_requests >= 1.0, "no data node timed a transaction request");
    let rest = parse(&scrape(&format!("http://{}/metrics", cluster.rest)), "rest");
    assert!(total(&rest, "latsdb_rest_requests_total", "endpoint=pk-read") >= 1.0, "rest: {rest:?}");
    assert!(total(&rest, "latsdb_rest_request_seconds_count", "") >= 1.0, "rest");
    served.extend(rest.keys().cloned());
    dashboard_names_served_series(&served);
}

/// Every series the Grafana dashboard's queries name is one a process
/// served (a histogram's `_bucket` series among them), so the dashboard
/// cannot drift from the metrics.
fn dashboard_names_served_series(served: &std::collections::BTreeSet<String>) {
    // Served only once there is something to report: the newest backup's
    // figures appear after the first backup completes.
    const AFTER_AN_EVENT: [&str; 1] = ["latsdb_last_backup_completed_seconds"];
    let text = std::fs::read_to_string(workspace().join("deploy/grafana/latsdb.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let panels = dashboard["panels"].as_array().expect("the dashboard has panels");
    let exprs: Vec<&str> = panels
        .iter()
        .flat_map(|p| p["targets"].as_array().into_iter().flatten())
        .filter_map(|t| t["expr"].as_str())
        .collect();
    assert!(exprs.len() >= 10, "the dashboard has only {} queries", exprs.len());
    for expr in exprs {
        let names = expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).filter(|w| w.starts_with("latsdb_"));
        for name in names {
            let known = served.contains(name) || AFTER_AN_EVENT.contains(&name);
            assert!(known, "the dashboard's query {expr:?} names {name}, which no process serves: {served:?}");
        }
    }
}
