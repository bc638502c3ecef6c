//! Location domains: a client that names its domain reads committed rows
//! (by key and by scan) from, and has its transactions coordinated by, the
//! data nodes of that
//! domain (counted by the nodes' own /metrics), and reads from the other
//! domain when its own domain's node dies.

mod common;

use common::{datanode_pids, metric_sum, scrape, sigkill, TestCluster};
use latsdb_client::{Client, ClientOptions, LockMode, Op, Scan, Table};
use latsdb_types::config::ClusterConfig;
use latsdb_types::schema::{ColumnDef, ColumnType, IntWidth, TableSpec};
use latsdb_types::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

const ROWS: i64 = 200;

/// One node group of two replicas: data node 2 in domain "a", 3 in "b", the
/// management server (the arbitrator) in "c".
fn start_cluster() -> TestCluster {
    let mut config = ClusterConfig::local(2, 2, 0);
    config.datanodes[0].location_domain = Some("a".into());
    config.datanodes[1].location_domain = Some("b".into());
    config.mgmd.location_domain = Some("c".into());
    config.datanode_defaults.threads = 2;
    config.datanode_defaults.data_memory_mb = 256;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("domains.toml");
    std::fs::write(&path, config.to_toml()).unwrap();
    let cluster =
        TestCluster::start(&["--config", path.to_str().unwrap(), "--metrics", "--no-restart", "--no-rest", "--no-sql"]);
    drop(dir);
    cluster
}

fn metrics_url(cluster: &TestCluster, node: u16) -> String {
    let name = format!("datanode {node}");
    let found = cluster.metrics.iter().find(|(n, _)| *n == name);
    found.map(|(_, url)| url.clone()).unwrap_or_else(|| panic!("no metrics address for {name}: {:?}", cluster.metrics))
}

/// (keyed operations, transactions coordinated and committed) a data node
/// counted so far, from its own /metrics.
fn counts(cluster: &TestCluster, node: u16) -> (f64, f64) {
    let text = scrape(&metrics_url(cluster, node));
    (metric_sum(&text, "latsdb_key_operations_total"), metric_sum(&text, "latsdb_transactions_committed_total"))
}

/// Scan pages a data node served so far, from its own /metrics.
fn scan_pages(cluster: &TestCluster, node: u16) -> f64 {
    metric_sum(&scrape(&metrics_url(cluster, node)), "latsdb_scan_pages_total")
}

async fn client_in(cluster: &TestCluster, domain: &str) -> Client {
    let options = ClientOptions { location_domain: Some(domain.into()), ..cluster.client_options() };
    Client::connect_with(&cluster.mgmd, options).await.unwrap()
}

/// Reads every row in batches of 20 and checks each value.
async fn read_all(client: &Client, table: &Arc<Table>) {
    for first in (0..ROWS).step_by(20) {
        let ops = (first..first + 20).map(|id| Op::read(table, &[Value::Int(id)]).unwrap()).collect();
        for (k, outcome) in client.batch(ops).await.unwrap().into_iter().enumerate() {
            let id = first + k as i64;
            match outcome.unwrap() {
                latsdb_client::Outcome::Row(row) => assert_eq!(row.get(1).as_i64(), Some(id * 7), "row {id}"),
                other => panic!("row {id} read as {other:?}"),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_and_coordinators_stay_in_the_clients_domain_until_its_node_dies() {
    let cluster = start_cluster();
    let show = cluster.mgm(&["show"]);
    assert!(show.contains("domain=a") && show.contains("domain=b"), "mgm show names the domains:\n{show}");
    let plain = Client::connect_with(&cluster.mgmd, cluster.client_options()).await.unwrap();
    let spec = TableSpec::new("geo", "t")
        .column(ColumnDef::new("id", ColumnType::int(IntWidth::Big)))
        .column(ColumnDef::new("v", ColumnType::int(IntWidth::Big)))
        .primary_key(&["id"]);
    let table = plain.create_table(spec).await.unwrap();
    let ops = (0..ROWS).map(|id| Op::upsert(&table, vec![Value::Int(id), Value::Int(id * 7)]).unwrap()).collect();
    for r in plain.batch(ops).await.unwrap() {
        r.unwrap();
    }

    // Each domain's client reads only from its domain's node, though each
    // node is the primary of half the partitions.
    for (domain, local, other) in [("a", 2, 3), ("b", 3, 2)] {
        let client = client_in(&cluster, domain).await;
        let table = client.table("geo", "t").await.unwrap();
        let before = (counts(&cluster, local), counts(&cluster, other));
        read_all(&client, &table).await;
        let after = (counts(&cluster, local), counts(&cluster, other));
        assert!(
            after.0 .0 - before.0 .0 >= ROWS as f64,
            "domain {domain}: node {local} served {before:?} -> {after:?}"
        );
        assert_eq!(after.1 .0, before.1 .0, "domain {domain}: node {other} of the other domain was read");

        // So does a scan: every partition's pages come from the local node.
        let before = (scan_pages(&cluster, local), scan_pages(&cluster, other));
        let rows = client.scan(&table, Scan::all()).await.unwrap();
        assert_eq!(rows.len(), ROWS as usize, "domain {domain}: the scan saw every row");
        let after = (scan_pages(&cluster, local), scan_pages(&cluster, other));
        assert!(after.0 > before.0, "domain {domain}: node {local} served no scan page ({before:?} -> {after:?})");
        assert_eq!(after.1, before.1, "domain {domain}: node {other} of the other domain served scan pages");
    }

    // Transactions of a client in domain b are coordinated by node 3, also
    // for keys whose primary is node 2.
    let b = client_in(&cluster, "b").await;
    let table_b = b.table("geo", "t").await.unwrap();
    let before = (counts(&cluster, 3).1, counts(&cluster, 2).1);
    for id in 0..20 {
        let mut tx = b.transaction();
        tx.execute(vec![Op::read_locked(&table_b, &[Value::Int(id)], LockMode::Exclusive).unwrap()]).await.unwrap();
        tx.execute(vec![Op::update(&table_b, &[Value::Int(id)], &[("v", Value::Int(id * 7))]).unwrap()]).await.unwrap();
        tx.commit().await.unwrap();
    }
    let after = (counts(&cluster, 3).1, counts(&cluster, 2).1);
    assert_eq!(after.0 - before.0, 20.0, "node 3 coordinated the 20 transactions ({before:?} -> {after:?})");
    assert_eq!(after.1, before.1, "node 2 of the other domain coordinated one of them");

    // Node 2 (domain a) dies: domain a's client reads every row from node 3.
    let a = client_in(&cluster, "a").await;
    let table_a = a.table("geo", "t").await.unwrap();
    let pid = node_pid(&cluster, 2);
    sigkill(pid);
    wait_until_started_alone(&cluster, 3);
    let before = counts(&cluster, 3).0;
    read_all(&a, &table_a).await;
    let after = counts(&cluster, 3).0;
    assert!(after - before >= ROWS as f64, "node 3 served domain a's reads: {before} -> {after}");
}

fn node_pid(cluster: &TestCluster, node: u16) -> i32 {
    let show = cluster.mgm(&["show"]);
    let line = show.lines().find(|l| l.starts_with(&format!("id={node} "))).expect("mgm show lists the node");
    datanode_pids(line).first().copied().unwrap_or_else(|| panic!("no pid for node {node}:\n{show}"))
}

/// Waits (bounded) until the layout lists `node` as the only started data node.
fn wait_until_started_alone(cluster: &TestCluster, node: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let show = cluster.mgm(&["show"]);
        // The mgmd line and the surviving data node say "started" (a node
        // that left says "not started").
        let started: Vec<&str> =
            show.lines().filter(|l| l.starts_with("id=") && l.split_whitespace().nth(2) == Some("started")).collect();
        if started.len() == 2 && started.iter().any(|l| l.starts_with(&format!("id={node} "))) {
            return;
        }
        assert!(Instant::now() < deadline, "node {node} did not go on alone within 30 s:\n{show}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_bad_location_domain_is_refused_with_its_reason() {
    for role in ["sql", "rest"] {
        let out = std::process::Command::new(common::BIN)
            .args([role, "--mgmd", "127.0.0.1:1", "--location-domain", "zone a"])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{role} took a domain with a space");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--location-domain") && err.contains("use ASCII letters"), "{role}: {err}");
    }
}
