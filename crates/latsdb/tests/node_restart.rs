//! Real processes, two replicas, a transactional write load running all
//! along: data node 2 is killed with SIGKILL and started again (a node
//! restart: it restores its disk and copies only the ranges that changed),
//! then data node 3 is restarted from an empty disk (an initial node
//! restart: it copies everything). Afterwards no acknowledged transaction
//! is lost or half-present, and each replica alone serves exactly the same
//! rows.

mod common;

use common::{mgm, process_exists, tagged, TestCluster};
use latsdb_client::{Client, Op, Scan};
use latsdb_types::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Every row, by id -> tag.
async fn all_rows(client: &Client, table: &Arc<latsdb_client::Table>) -> BTreeMap<i64, i64> {
    let rows = client.scan(table, Scan::all()).await.unwrap();
    rows.iter().map(|r| (r.get(0).as_i64().unwrap(), r.get(1).as_i64().unwrap())).collect()
}

/// The "N ranges equal, M ranges copied" of a node's last copy stage.
fn copy_stage(log: &str) -> (u64, u64) {
    let line = log.lines().rev().find(|l| l.contains("copy stage done")).expect("the node logged its copy stage");
    let number_before = |what: &str| -> u64 {
        let at = line.find(what).unwrap_or_else(|| panic!("{line}"));
        line[..at].split_whitespace().last().and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{line}"))
    };
    (number_before(" ranges equal"), number_before(" ranges copied"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_restart_and_initial_node_restart_under_load_keep_replicas_identical() {
    let cluster = TestCluster::start(&["--no-restart", "--replicas", "2", "--no-rest", "--checkpoint-trigger-mb", "1"]);
    let data_dir = cluster.dir.path().join("data");
    let client = Client::connect(&cluster.mgmd).await.unwrap();
    let table = tagged::create_table(&client).await;
    // A base of rows the load never touches: after the node restart most
    // of its ranges are unchanged and need no copy.
    for chunk in 0..20i64 {
        let ops = (0..1000)
            .map(|i| Op::upsert(&table, vec![Value::Int(-(chunk * 1000 + i) - 1), Value::Int(-1)]).unwrap())
            .collect();
        for r in client.batch(ops).await.unwrap() {
            r.unwrap();
        }
    }

    let writers = tagged::Writers::start(&client, &table, 3);
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // Node restart: node 2 crashes and comes back from its disk.
    let show = mgm(&cluster, &["show"]).await;
    let pid = common::datanode_pids(&show)[0];
    // SAFETY: signalling a data node process this test's cluster started.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while process_exists(pid) || !mgm(&cluster, &["show"]).await.contains("not started") {
        assert!(Instant::now() < deadline, "data node 2 was not dropped from the view");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let began = Instant::now();
    let out = mgm(&cluster, &["2", "start", "--timeout", "120"]).await;
    assert!(out.contains("data node 2: started"), "{out}");
    eprintln!("node restart of node 2 took {} ms under load", began.elapsed().as_millis());
    let log2 = std::fs::read_to_string(data_dir.join("datanode-2.log")).unwrap();
    let (equal, copied) = copy_stage(&log2);
    assert!(equal > 0, "a node restart copied every range ({copied}); it should compare and skip unchanged ones");
    assert!(log2.contains("checkpoint stage done"), "{log2}");
    let before = writers.acked_count();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(writers.acked_count() > before, "writes did not resume after the node restart");

    // Initial node restart: node 3 from an empty disk.
    let began = Instant::now();
    let out = mgm(&cluster, &["3", "restart", "--initial", "--timeout", "120"]).await;
    assert!(out.contains("data node 3: started"), "{out}");
    eprintln!("initial node restart of node 3 took {} ms under load", began.elapsed().as_millis());
    let log3 = std::fs::read_to_string(data_dir.join("datanode-3.log")).unwrap();
    assert!(log3.contains("initial start: emptied"), "{log3}");
    let (equal, copied) = copy_stage(&log3);
    // An empty node copies the base rows. A range can still compare equal
    // when it holds only rows the load wrote during the copy (replicated to
    // the starting node as they were written), or rows copied before the
    // copy started over from a new primary.
    let line = log3.lines().rev().find(|l| l.contains("copy stage done")).unwrap_or_default();
    assert!(copied > 0 && equal < copied, "an empty node must copy its rows: {line}");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let acked = writers.stop().await;

    // Nothing acknowledged is lost, nothing is half-present.
    let both = all_rows(&client, &table).await;
    let mut by_tag: BTreeMap<i64, i64> = BTreeMap::new();
    for (id, tag) in &both {
        if *tag >= 0 {
            assert_eq!(id / 10, *tag, "row {id} carries tag {tag}");
            *by_tag.entry(*tag).or_default() += 1;
        }
    }
    assert_eq!(both.len() - by_tag.values().sum::<i64>() as usize, 20_000, "base rows lost");
    for (tag, n) in &by_tag {
        assert_eq!(*n, tagged::ROWS_PER_TX, "transaction {tag} is half-present ({n} rows)");
    }
    let lost: Vec<&i64> = acked.iter().filter(|t| !by_tag.contains_key(t)).collect();
    assert!(lost.is_empty(), "acknowledged transactions are lost: {lost:?}");
    assert!(acked.len() > 100, "only {} transactions were acknowledged", acked.len());

    // Each replica alone serves the same rows.
    mgm(&cluster, &["3", "stop"]).await;
    let only_2 = all_rows(&client, &table).await;
    assert!(only_2 == both, "node 2 alone serves {} rows, both served {}", only_2.len(), both.len());
    mgm(&cluster, &["3", "start", "--timeout", "120"]).await;
    mgm(&cluster, &["2", "stop"]).await;
    let only_3 = all_rows(&client, &table).await;
    assert!(only_3 == both, "node 3 alone serves {} rows, both served {}", only_3.len(), both.len());
}

/// The launcher is the data nodes' angel: a data node killed with SIGKILL
/// is started again without anyone asking (a node restart: it rejoins and
/// serves), while one stopped with `latsdb mgm N stop` stays stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_data_node_is_started_again_by_the_launcher() {
    let cluster = TestCluster::start(&["--replicas", "2", "--no-rest", "--no-sql"]);
    let client = Client::connect(&cluster.mgmd).await.unwrap();
    let table = tagged::create_table(&client).await;
    let node3 = |show: &str| show.lines().find(|l| l.starts_with("id=3")).unwrap_or_default().to_string();
    let show = mgm(&cluster, &["show"]).await;
    let old_pid = common::datanode_pids(&node3(&show))[0];
    // SAFETY: signalling a data node process this test's cluster started.
    unsafe {
        libc::kill(old_pid, libc::SIGKILL);
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let line = node3(&mgm(&cluster, &["show"]).await);
        let pids = common::datanode_pids(&line);
        if line.contains(" started") && pids.first().is_some_and(|&p| p != old_pid) {
            break;
        }
        assert!(Instant::now() < deadline, "data node 3 was not started again within 120 s: {line}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let said: Vec<String> = cluster.output.try_iter().collect();
    assert!(
        said.iter().any(|l| l.contains("datanode 3 died") && l.contains("starting it again")),
        "the launcher did not say why it restarted the node: {said:?}"
    );
    // It serves: a write needs both replicas of its node group.
    let writers = tagged::Writers::start(&client, &table, 2);
    let before = writers.acked_count();
    let deadline = Instant::now() + Duration::from_secs(30);
    while writers.acked_count() < before + 50 {
        assert!(Instant::now() < deadline, "writes did not go on after the node came back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    writers.stop().await;

    // A node stopped on purpose stays down.
    let out = mgm(&cluster, &["3", "stop"]).await;
    assert!(out.contains("not started"), "{out}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let line = node3(&mgm(&cluster, &["show"]).await);
    assert!(line.contains("not started"), "a stopped node was started again: {line}");
}
