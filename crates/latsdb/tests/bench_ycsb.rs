//! `latsdb bench ycsb` runs every core workload (a-f) against a cluster:
//! the load inserts every record, the run executes exactly
//! `operationcount` operations of the workload's kinds, nothing fails, and
//! the results JSON says so. Short runs: this checks behaviour, not speed.

mod common;

use common::{run_bounded, TestCluster, BIN};
use std::process::Command;
use std::time::Duration;

#[test]
fn every_core_workload_loads_and_runs_without_a_failure() {
    let cluster = TestCluster::start(&["--replicas", "2", "--no-rest", "--no-sql"]);
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
        let output = cluster.dir.path().join(format!("ycsb-{workload}.json"));
        let (status, out, err) = run_bounded(
            Command::new(BIN).args(["bench", "ycsb", "--mgmd", &cluster.mgmd, "--workload", workload]).args([
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
