//! `latsdb bench ycsb` runs every core workload (a-f) against a cluster
//! (native client), a Redis server (YCSB's Redis data model), the cluster's
//! SQL node and a MariaDB server (YCSB's JDBC statements): the load inserts
//! every record, the run executes exactly `operationcount` operations of
//! the workload's kinds, nothing fails, and the results JSON says so.
//! Short runs: this checks behaviour, not speed.

mod common;

use common::{run_bounded, MariaDb, Redis, TestCluster, BIN};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

#[test]
fn every_core_workload_loads_and_runs_without_a_failure() {
    let cluster = TestCluster::start(&["--replicas", "2", "--no-rest", "--no-sql"]);
    every_workload(&["--mgmd", &cluster.mgmd], cluster.dir.path());
}

#[test]
fn every_core_workload_runs_through_the_sql_node_and_against_mariadb() {
    let cluster = TestCluster::start(&["--replicas", "2", "--no-rest"]);
    let sql_node = format!("mysql://root@{}", cluster.sql);
    every_workload(&["--db", &sql_node], cluster.dir.path());
    let mariadb = MariaDb::start();
    let dir = tempfile::tempdir().unwrap();
    let target = format!("mysql://root@127.0.0.1:{}", mariadb.port);
    every_workload(&["--db", &target], dir.path());
}

#[test]
fn every_core_workload_runs_against_redis_with_the_same_generator() {
    let dir = tempfile::tempdir().unwrap();
    let redis = Redis::start();
    let target = format!("redis://127.0.0.1:{}", redis.port);
    every_workload(&["--db", &target], dir.path());
}

/// Runs workloads a-f against the target `args` name, each loading 2,000
/// records and running 3,000 operations, and checks every count.
fn every_workload(args: &[&str], dir: &Path) {
    // Which operations each workload must have run (read-modify-write
    // also measures its read and update).
    let expected: [(&str, &[&str]); 6] = [
        ("a", &["READ", "UPDATE"]),
        ("b", &["READ", "UPDATE"]),
        ("c", &["READ"]),
        ("d", &["READ", "INSERT"]),
        ("e", &["SCAN", "INSERT"]),
        ("f", &["READ", "READ-MODIFY-WRITE", "UPDATE"]),
    ];
    for (workload, operations) in expected {
        let output = dir.join(format!("ycsb-{workload}.json"));
        let (status, out, err) = run_bounded(
            Command::new(BIN).args(["bench", "ycsb", "--workload", workload]).args(args).args([
                "-p",
                "recordcount=2000",
                "-p",
                "operationcount=3000",
                "--threads",
                "8",
                "--duration",
                "120",
                "--output",
                output.to_str().unwrap(),
            ]),
            None,
            Duration::from_secs(180),
        );
        assert!(status.success(), "workload {workload} failed:\n{out}\n{err}");
        let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&output).unwrap()).unwrap();
        let phases = json["phases"].as_array().unwrap();
        assert_eq!(phases.len(), 2, "{json}");
        let (load, run) = (&phases[0], &phases[1]);
        assert_eq!(load["ops"], 2000, "workload {workload}: the load inserts every record: {load}");
        assert_eq!(run["ops"], 3000, "workload {workload}: the run executes operationcount operations: {run}");
        assert_eq!(run["failed"], 0, "workload {workload}: {run}");
        let mut ran: Vec<&str> = run["operations"].as_object().unwrap().keys().map(|k| k.as_str()).collect();
        ran.sort_unstable();
        let mut want = operations.to_vec();
        want.sort_unstable();
        assert_eq!(ran, want, "workload {workload} ran other operations: {run}");
        assert!(out.contains("[OVERALL], Throughput(ops/sec)"), "{out}");
    }
}
