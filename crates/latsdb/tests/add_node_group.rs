//! Real processes: a cluster of one node group (two replicas, two shard
//! threads each) under a transactional write load gets a second node group
//! while it serves (`latsdb mgm nodegroup add`). The launcher starts the
//! new data nodes, they copy their share of the partitions and take it
//! over. Afterwards no acknowledged transaction is lost or half-present,
//! the new group holds its share of the rows and the old one freed them,
//! and one replica of each node group alone serves exactly the same rows.

mod common;

use common::{mgm, tagged, TestCluster};
use latsdb_client::Client;
use latsdb_types::config::{ClusterConfig, DataNodeSection};
use std::collections::BTreeMap;
use std::time::Duration;

/// Rows each data node holds, from `latsdb mgm report-memory`.
async fn rows_by_node(cluster: &TestCluster) -> BTreeMap<u16, u64> {
    let report = mgm(cluster, &["report-memory"]).await;
    report
        .lines()
        .filter_map(|l| {
            let node = l.strip_prefix("node ")?.split(':').next()?.parse().ok()?;
            let rows = l.split(", ").nth(1)?.split(' ').next()?.parse().ok()?;
            Some((node, rows))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_group_added_under_load_takes_its_share_and_loses_no_transaction() {
    let cluster = TestCluster::start(&[
        "--no-restart",
        "--replicas",
        "2",
        "--no-rest",
        "--no-sql",
        "--threads",
        "2",
        "--checkpoint-trigger-mb",
        "1",
    ]);
    let data_dir = cluster.dir.path().join("data");
    let client = Client::connect(&cluster.mgmd).await.unwrap();
    let table = tagged::create_table(&client).await;
    tagged::load_base_rows(&client, &table, 10).await;
    let writers = tagged::Writers::start(&client, &table, 3);
    tokio::time::sleep(Duration::from_millis(1000)).await;

    // A configuration that is not the cluster's shape plus whole node
    // groups is refused, and nothing changes.
    let config_path = data_dir.join("config.toml");
    let mut config = ClusterConfig::parse(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
    let first = config.datanodes[0].clone();
    let node = |id| DataNodeSection { node_id: id, ..first.clone() };
    config.datanodes.push(node(4));
    let odd = data_dir.join("odd.toml");
    std::fs::write(&odd, config.to_toml()).unwrap();
    let out = std::process::Command::new(common::BIN)
        .args(["mgm", "--mgmd", &cluster.mgmd, "nodegroup", "add", "--config"])
        .arg(&odd)
        .output()
        .unwrap();
    assert!(!out.status.success(), "a half node group was accepted");
    assert!(String::from_utf8_lossy(&out.stderr).contains("multiple of cluster.replicas"), "{out:?}");

    // Data nodes 4 and 5 as node group 1: the launcher starts them.
    config.datanodes.push(node(5));
    let grown = data_dir.join("grown.toml");
    std::fs::write(&grown, config.to_toml()).unwrap();
    let grown = grown.display().to_string();
    let out = mgm(&cluster, &["nodegroup", "add", "--config", &grown, "--timeout", "300"]).await;
    assert!(out.contains("added data nodes [4, 5] as node group 1; 4 partition numbers will move"), "{out}");
    assert!(out.contains("done: every partition is in its new place"), "{out}");
    let status = mgm(&cluster, &["nodegroup", "status"]).await;
    assert!(status.contains("node group 0: data nodes 2 (Started), 3 (Started); 4 partition numbers"), "{status}");
    assert!(status.contains("node group 1: data nodes 4 (Started), 5 (Started); 4 partition numbers"), "{status}");
    assert!(status.contains("no partition is moving"), "{status}");
    let before = writers.acked_count();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(writers.acked_count() > before, "writes did not go on after the move");
    let errors = writers.errors.lock().unwrap().clone();
    let acked = writers.stop().await;
    eprintln!("{} transactions acknowledged; {} failed: {errors:?}", acked.len(), errors.len());
    // The handovers refuse operations on the moving partitions for a
    // moment; coordinators and the client send them again, so no writer
    // sees an error.
    assert!(errors.is_empty(), "the writers saw errors while the node group was added: {errors:?}");

    // Nothing acknowledged is lost, nothing is half-present.
    let rows = tagged::all_rows(&client, &table).await;
    tagged::check_ledger(&rows, &acked, 10_000);

    // Each node group holds its share, and the old one freed what left.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let held = loop {
        let held = rows_by_node(&cluster).await;
        let total = rows.len() as u64;
        if held.get(&2) == held.get(&3)
            && held.get(&4) == held.get(&5)
            && held.get(&2).zip(held.get(&4)).is_some_and(|(a, b)| a + b == total)
        {
            break held;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the replicas do not hold the rows of their groups: {held:?} of {total}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(held[&4] as usize > rows.len() / 4, "node group 1 holds too few rows: {held:?}");
    assert!(held[&2] as usize > rows.len() / 4, "node group 0 holds too few rows: {held:?}");

    // One replica of each group alone serves the same rows.
    for (stop, start) in [(["3", "5"], ["3", "5"]), (["2", "4"], ["2", "4"])] {
        for n in stop {
            mgm(&cluster, &[n, "stop"]).await;
        }
        let alone = tagged::all_rows(&client, &table).await;
        assert!(alone == rows, "with nodes {stop:?} stopped, {} rows are served of {}", alone.len(), rows.len());
        for n in start {
            let out = mgm(&cluster, &[n, "start", "--timeout", "120"]).await;
            assert!(out.contains(&format!("data node {n}: started")), "{out}");
        }
    }
}
