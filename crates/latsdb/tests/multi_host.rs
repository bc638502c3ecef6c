//! A cluster on several hosts: four network namespaces joined by a bridge
//! (veth pairs, 10.213.x.0/24 addresses this test chooses) stand for the
//! management server's host, two data nodes' hosts and an API host with a
//! SQL node, all from one configuration file; the test itself is on the
//! bridge, as a client machine. It writes and reads through the SQL node
//! and the native client, cuts one data node's host off the network (its
//! link down), checks that the other node wins arbitration and the writes
//! go on, heals the link, and checks that the cut-off node came back with
//! every row. Needs root (network namespaces); skipped with a message
//! where they cannot be made.

mod common;

use common::{metric_sum, run_bounded, scrape, BIN};
use latsdb_chaos::{namespaces_available, spawn_logged, wait_all_started, Hosts};
use latsdb_client::{Client, ClientOptions, Op, Outcome};
use latsdb_types::config::ClusterConfig;
use latsdb_types::proto::NodeStatus;
use latsdb_types::Value;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Host indexes, in the order `Hosts::create` is given their names.
const MGMD: usize = 0;
const NODE2: usize = 1;
const NODE3: usize = 2;
const API: usize = 3;
const SQL_PORT: u16 = 3306;
const METRICS_PORT: u16 = 9100;

/// The processes the test started, killed by process group (an angel's
/// data node with it) when the test ends, passed or not.
struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for child in &mut self.0 {
            // SAFETY: the process group of a child this test started.
            unsafe {
                libc::kill(-(child.id() as i32), libc::SIGKILL);
            }
            let _ = child.wait();
        }
    }
}

/// Data node 2 on host 1 in domain a, data node 3 on host 2 in domain b
/// (one node group), the management server on host 0 in domain c.
fn config(hosts: &Hosts) -> ClusterConfig {
    let mut config = ClusterConfig::local(2, 2, 0);
    config.cluster.name = "hosts".into();
    config.mgmd.host = hosts.address(MGMD);
    config.mgmd.location_domain = Some("c".into());
    for (d, (host, domain)) in config.datanodes.iter_mut().zip([(NODE2, "a"), (NODE3, "b")]) {
        d.host = hosts.address(host);
        d.location_domain = Some(domain.into());
    }
    config.datanode_defaults.threads = 1;
    config.datanode_defaults.data_memory_mb = 256;
    config.datanode_defaults.cpu_bind = latsdb_types::config::CpuBind::Off;
    config.datanode_defaults.idle_poll = false;
    // Each data node serves /metrics on this port of its own host.
    config.datanode_defaults.metrics_port = Some(METRICS_PORT);
    config.validate().unwrap();
    config
}

fn wait_for_file(path: &Path, what: &str) -> String {
    latsdb_chaos::wait_for_file(path, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{what} did not start: {e} (its log is next to {})", path.display()))
}

/// Starts the management server, both data nodes (under their angels) and
/// the SQL node, each in its host's namespace; returns them and the
/// management server's address.
fn start(hosts: &Hosts, dir: &Path) -> (Procs, String) {
    let exe = Path::new(BIN);
    let config_path = dir.join("cluster.toml");
    std::fs::write(&config_path, config(hosts).to_toml()).unwrap();
    let mut procs = Procs(Vec::new());
    let mut cmd = hosts.command(MGMD, exe);
    cmd.arg("mgmd").arg("--config").arg(&config_path).arg("--data-dir").arg(dir.join("mgmd"));
    cmd.arg("--ready-file").arg(dir.join("mgmd.addr"));
    procs.0.push(spawn_logged(cmd, &dir.join("mgmd.log")).unwrap());
    let mgmd = wait_for_file(&dir.join("mgmd.addr"), "the management server");
    for (id, host) in [(2, NODE2), (3, NODE3)] {
        let mut cmd = hosts.command(host, exe);
        cmd.args(["datanode", "--mgmd", &mgmd, "--node-id", &id.to_string(), "--data-dir"]).arg(dir.join("data"));
        procs.0.push(spawn_logged(cmd, &dir.join(format!("datanode-{id}.log"))).unwrap());
    }
    let mut cmd = hosts.command(API, exe);
    cmd.args(["sql", "--mgmd", &mgmd, "--bind", &hosts.address(API), "--port", &SQL_PORT.to_string()]);
    cmd.args(["--location-domain", "a", "--ready-file"]).arg(dir.join("sql.addr"));
    procs.0.push(spawn_logged(cmd, &dir.join("sql.log")).unwrap());
    (procs, mgmd)
}

/// Runs `script` with the mariadb client from the test's host against the
/// SQL node on the API host; Err carries the client's error.
fn sql(hosts: &Hosts, script: &str) -> Result<String, String> {
    let mut cmd = Command::new("mariadb");
    cmd.args(["-h", &hosts.address(API), "-P", &SQL_PORT.to_string(), "-u", "root", "--batch", "--skip-column-names"]);
    cmd.arg("--connect-timeout=10");
    let (status, out, err) = run_bounded(&mut cmd, Some(script), Duration::from_secs(60));
    if status.success() {
        Ok(out)
    } else {
        Err(err)
    }
}

/// `sql`, asked again for up to 30 s while the cluster fails over.
fn sql_retried(hosts: &Hosts, script: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match sql(hosts, script) {
            Ok(out) => return out,
            Err(e) if Instant::now() < deadline => {
                println!("retrying after: {}", e.trim());
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("{script} failed for 30 s: {e}"),
        }
    }
}

/// Writes rows `ids` (v = 3 * id); `REPLACE`, so that running it again
/// after a lost answer changes nothing.
fn inserts(ids: std::ops::RangeInclusive<i64>) -> String {
    let rows: Vec<String> = ids.map(|id| format!("({id}, {})", id * 3)).collect();
    format!("REPLACE INTO geo.t VALUES {};", rows.join(", "))
}

/// Reads rows 1..=`rows` by key with a client of domain b (so from data
/// node 3 while it is started) and checks each value.
async fn read_in_domain_b(mgmd: &str, rows: i64) {
    let options = ClientOptions { location_domain: Some("b".into()), ..Default::default() };
    let client = Client::connect_with(mgmd, options).await.unwrap();
    let table = client.table("geo", "t").await.unwrap();
    let ops = (1..=rows).map(|id| Op::read(&table, &[Value::Int(id)]).unwrap()).collect();
    for (k, outcome) in client.batch(ops).await.unwrap().into_iter().enumerate() {
        let id = k as i64 + 1;
        match outcome.unwrap() {
            Outcome::Row(row) => assert_eq!(row.get(1).as_i64(), Some(id * 3), "row {id}"),
            other => panic!("row {id} read as {other:?}"),
        }
    }
}

/// Waits (bounded) until the layout lists node 3 as not started.
async fn wait_until_node_3_left(mgmd: &str) {
    let client = Client::connect(mgmd).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let layout = client.refresh_layout().await.unwrap();
        if layout.datanodes.iter().any(|d| d.node_id == 3 && d.status == NodeStatus::NotStarted) {
            return;
        }
        assert!(Instant::now() < deadline, "node 3 was still listed 30 s after its host was cut off: {layout:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_on_several_hosts_survives_a_cut_off_host_and_heals() {
    if let Err(why) = namespaces_available() {
        println!("skipped: this test makes network namespaces as hosts, which needs root ({why})");
        return;
    }
    let hosts = Hosts::create(&["mgmd", "node2", "node3", "api"]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (_procs, mgmd) = start(&hosts, dir.path());
    wait_all_started(&mgmd, Duration::from_secs(60)).await.unwrap();
    wait_for_file(&dir.path().join("sql.addr"), "the SQL node");

    // Retried statements must be safe to run twice: one that ran but lost
    // its answer is run again.
    sql_retried(
        &hosts,
        "CREATE DATABASE IF NOT EXISTS geo; CREATE TABLE IF NOT EXISTS geo.t (id BIGINT PRIMARY KEY, v BIGINT);",
    );
    sql(&hosts, &inserts(1..=100)).unwrap();
    assert_eq!(sql(&hosts, "SELECT COUNT(*), SUM(v) FROM geo.t;").unwrap().trim(), "100\t15150");
    read_in_domain_b(&mgmd, 100).await;

    // Node 3's host loses its network: node 2 wins arbitration (the
    // management server is its arbitrator) and goes on alone.
    hosts.isolate(NODE3, true).unwrap();
    wait_until_node_3_left(&mgmd).await;
    let log = std::fs::read_to_string(dir.path().join("mgmd.log")).unwrap();
    assert!(log.contains("(reported by data node 2): live data nodes [2]"), "node 2 did not go on alone:\n{log}");
    sql_retried(&hosts, &inserts(101..=200));
    assert_eq!(sql(&hosts, "SELECT COUNT(*), SUM(v) FROM geo.t;").unwrap().trim(), "200\t60300");

    // Healed, node 3 (started again by its angel) copies what it missed
    // and serves domain b's reads: every row, counted by its own metrics.
    hosts.isolate(NODE3, false).unwrap();
    wait_all_started(&mgmd, Duration::from_secs(120)).await.unwrap();
    let metrics = format!("http://{}:{METRICS_PORT}/metrics", hosts.address(NODE3));
    let before = metric_sum(&scrape(&metrics), "latsdb_key_operations_total");
    read_in_domain_b(&mgmd, 200).await;
    let after = metric_sum(&scrape(&metrics), "latsdb_key_operations_total");
    assert!(after - before >= 200.0, "node 3 served domain b's reads: {before} -> {after}");
    assert_eq!(sql(&hosts, "SELECT COUNT(*), SUM(v) FROM geo.t;").unwrap().trim(), "200\t60300");
}
