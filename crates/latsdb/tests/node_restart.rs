//! Real processes, two replicas, a transactional write load running all
//! along: data node 2 is killed with SIGKILL and started again (a node
//! restart: it restores its disk and copies only the ranges that changed),
//! then data node 3 is restarted from an empty disk (an initial node
//! restart: it copies everything). Afterwards no acknowledged transaction
//! is lost or half-present, and each replica alone serves exactly the same
//! rows.

mod common;

use common::{mgm, process_exists, tagged, TestCluster};
use latsdb_client::Client;
use std::time::{Duration, Instant};

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
    // Two shard threads per node: the second shard's links carry no
    // heartbeat, so a link to a dead node's second shard is found dead only
    // when the layout shows the node started again (it used to take the
    // first copy messages to the new process into the dead socket).
    let cluster = TestCluster::start(&[
        "--no-restart",
        "--replicas",
        "2",
        "--no-rest",
        "--checkpoint-trigger-mb",
        "1",
        "--threads",
        "2",
    ]);
    let data_dir = cluster.dir.path().join("data");
    let client = Client::connect(&cluster.mgmd).await.unwrap();
    let table = tagged::create_table(&client).await;
    // A base of rows the load never touches: after the node restart most
    // of its ranges are unchanged and need no copy.
    tagged::load_base_rows(&client, &table, 20).await;

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
    let both = tagged::all_rows(&client, &table).await;
    tagged::check_ledger(&both, &acked, 20_000);
    assert!(acked.len() > 100, "only {} transactions were acknowledged", acked.len());

    // Each replica alone serves the same rows.
    mgm(&cluster, &["3", "stop"]).await;
    let only_2 = tagged::all_rows(&client, &table).await;
    assert!(only_2 == both, "node 2 alone serves {} rows, both served {}", only_2.len(), both.len());
    mgm(&cluster, &["3", "start", "--timeout", "120"]).await;
    mgm(&cluster, &["2", "stop"]).await;
    let only_3 = tagged::all_rows(&client, &table).await;
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
        said.iter().any(|l| l.contains("data node 3 died") && l.contains("starting it again")),
        "the launcher did not say why it restarted the node: {said:?}"
    );
    let events = mgm(&cluster, &["log"]).await;
    assert!(
        events.contains("WARNING launcher: data node 3 died (signal: 9 (SIGKILL)); starting it again in 1 s")
            && events.contains("INFO    launcher: data node 3 started again (pid"),
        "the cluster log does not have the launcher's decisions:\n{events}"
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

/// `latsdb mgm ARGS` against the management server at `mgmd`.
fn mgm_at(mgmd: &str, args: &[&str]) -> String {
    let mut cmd = std::process::Command::new(common::BIN);
    cmd.args(["mgm", "--mgmd", mgmd]).args(args);
    let (status, out, err) = common::run_bounded(&mut cmd, None, Duration::from_secs(180));
    assert!(status.success(), "latsdb mgm {args:?} failed: {out}{err}");
    out
}

/// Polls `mgm show` until data node `node`'s line satisfies `done`.
fn wait_for_node(mgmd: &str, node: u16, what: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let show = mgm_at(mgmd, &["show"]);
        let line = show.lines().find(|l| l.starts_with(&format!("id={node} "))).unwrap_or_default().to_string();
        if done(&line) {
            return line;
        }
        assert!(Instant::now() < deadline, "data node {node}: {what} within 120 s; last `show`:\n{show}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A folder with the configuration of two data nodes (one node group of
/// two replicas) in `config.toml`.
fn two_data_nodes_config() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut config = latsdb_types::config::ClusterConfig::local(2, 2, 0);
    config.datanode_defaults.data_memory_mb = 256;
    std::fs::write(dir.path().join("config.toml"), config.to_toml()).unwrap();
    dir
}

/// Starts `latsdb mgmd` on `dir/config.toml` with its data in `dir`,
/// listening on `port` (0: any), logging to `dir/mgmd.log`; returns the
/// process and its address.
fn spawn_mgmd(dir: &std::path::Path, port: u16) -> (std::process::Child, String) {
    let ready = dir.join("mgmd.addr");
    let _ = std::fs::remove_file(&ready);
    let out = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("mgmd.log")).unwrap();
    let child = std::process::Command::new(common::BIN)
        .arg("mgmd")
        .arg("--config")
        .arg(dir.join("config.toml"))
        .args(["--port", &port.to_string(), "--ready-file"])
        .arg(&ready)
        .arg("--data-dir")
        .arg(dir)
        .stdin(std::process::Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match std::fs::read_to_string(&ready) {
            Ok(a) if !a.is_empty() => return (child, a),
            _ => assert!(Instant::now() < deadline, "the management server did not start"),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The management server loses its connection to every data node at once
/// while the data nodes run on: first it is paused with SIGSTOP, longer
/// than its heartbeats allow (as a network fault around its host would
/// do), then it is killed and started again. Each time the data nodes
/// connect again on their own, and the cluster is the same running cluster
/// afterwards: both nodes started with their processes of before, schema
/// changes work, and a node killed later is started again by its angel and
/// rejoins by a node restart.
#[test]
fn data_nodes_connect_again_after_the_management_server_lost_them_all() {
    let dir = two_data_nodes_config();
    let (mgmd_process, mgmd) = spawn_mgmd(dir.path(), 0);
    let mgmd_pid = mgmd_process.id() as i32;
    let mut procs = common::Restarted(vec![mgmd_process]);
    for node in ["2", "3"] {
        let out = std::fs::File::create(dir.path().join(format!("angel-{node}.log"))).unwrap();
        let angel = std::process::Command::new(common::BIN)
            .args(["datanode", "--mgmd", &mgmd, "--node-id", node, "--data-dir"])
            .arg(dir.path())
            .stdin(std::process::Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        procs.0.push(angel);
    }
    let started = |l: &str| l.contains(" started") && !l.contains("not started");
    let pids: Vec<i32> =
        [2, 3].iter().map(|&n| common::datanode_pids(&wait_for_node(&mgmd, n, "started", started))[0]).collect();

    // Both nodes back with their processes of before (the `times`th time
    // in this management server's cluster log), and a schema change
    // reaches them.
    let back_again = |times: usize, table: &str| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let events = mgm_at(&mgmd, &["log", "--lines", "500"]);
            let back = |n: usize| {
                events.matches(&format!("data node {n} (pid {}) is connected again", pids[n - 2])).count() >= times
            };
            if back(2) && back(3) {
                break;
            }
            assert!(Instant::now() < deadline, "the data nodes did not connect again within 60 s:\n{events}");
            std::thread::sleep(Duration::from_millis(100));
        }
        for (node, pid) in [2, 3].into_iter().zip(&pids) {
            let line = wait_for_node(&mgmd, node, "started", started);
            assert_eq!(
                common::datanode_pids(&line),
                vec![*pid],
                "data node {node} is not its process of before: {line}"
            );
        }
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let client = Client::connect(&mgmd).await.unwrap();
            let spec = latsdb_types::schema::TableSpec::new("m", table)
                .column(latsdb_types::schema::ColumnDef::new(
                    "id",
                    latsdb_types::schema::ColumnType::int(latsdb_types::schema::IntWidth::Big),
                ))
                .primary_key(&["id"]);
            let table = client.create_table(spec).await.unwrap();
            let op = latsdb_client::Op::upsert(&table, vec![latsdb_types::Value::Int(7)]).unwrap();
            for r in client.batch(vec![op]).await.unwrap() {
                r.unwrap();
            }
        });
    };

    common::send(mgmd_pid, libc::SIGSTOP);
    std::thread::sleep(Duration::from_secs(3));
    common::send(mgmd_pid, libc::SIGCONT);
    back_again(1, "after_pause");
    let events = mgm_at(&mgmd, &["log", "--lines", "500"]);
    assert!(events.contains("lost the connection to data node"), "the pause broke no connection:\n{events}");

    // A management server killed and started again (same port, same
    // data directory) takes the running cluster back from the nodes.
    common::sigkill(mgmd_pid);
    let _ = procs.0[0].wait();
    let port: u16 = mgmd.rsplit(':').next().and_then(|p| p.parse().ok()).expect("mgmd address has a port");
    let (restarted, address) = spawn_mgmd(dir.path(), port);
    assert_eq!(address, mgmd);
    procs.0[0] = restarted;
    // (The new process's cluster log starts empty: once more is once.)
    back_again(1, "after_mgmd_restart");
    // Its arbitrator took back the votes its previous process kept.
    let log = std::fs::read_to_string(dir.path().join("mgmd.log")).unwrap();
    assert!(log.contains("loaded the arbitrator's votes: view"), "the restarted server kept no votes:\n{log}");

    // A node that dies now is started again and rejoins.
    common::sigkill(pids[1]);
    let line = wait_for_node(&mgmd, 3, "started again with a new pid", |l| {
        started(l) && common::datanode_pids(l).first().is_some_and(|&p| p != pids[1])
    });
    assert!(started(&line), "{line}");
}

/// A standalone `latsdb datanode` (no launcher) is its own angel: a data
/// node killed with SIGKILL is started again and rejoins; one that dies
/// three times within ten minutes is left down, with an alert in the
/// cluster log, until `latsdb mgm N start`, which the angel carries out;
/// stopping the angel stops its data node. An angel whose executable was
/// replaced in place (an upgrade) starts its node from the new file.
#[test]
fn a_standalone_data_node_is_started_again_by_its_angel_until_it_dies_too_often() {
    let dir = two_data_nodes_config();
    let log = |name: &str| std::fs::File::create(dir.path().join(name)).unwrap();
    // Node 3's angel runs from a copy of the binary, replaced below.
    let exe_copy = dir.path().join("latsdb-copy");
    std::fs::copy(common::BIN, &exe_copy).unwrap();
    let spawn_from = |program: &std::path::Path, args: &[&str], log_name: &str| {
        let out = log(log_name);
        std::process::Command::new(program)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap()
    };
    let spawn = |args: &[&str], log_name: &str| spawn_from(std::path::Path::new(common::BIN), args, log_name);
    let data = dir.path().display().to_string();
    let (mgmd_process, mgmd) = spawn_mgmd(dir.path(), 0);
    let mut procs = common::Restarted(vec![mgmd_process]);
    // Node 3 starts well after node 2, as on another host: node 2 waits
    // for it instead of timing out. Node 2 dies while it waits: its angel
    // starts it again, and the new process takes the node id back.
    procs.0.push(spawn(&["datanode", "--mgmd", &mgmd, "--node-id", "2", "--data-dir", &data], "angel-2.log"));
    let wait_log = |what: &str, count: usize| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let log = mgm_at(&mgmd, &["log", "--lines", "500"]);
            if log.matches(what).count() >= count {
                return log;
            }
            assert!(Instant::now() < deadline, "the cluster log did not say {what:?} {count} time(s):\n{log}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let waiting = "INFO    mgmd: data node 2 waits for data nodes [3] to start";
    wait_log(waiting, 1);
    let children = format!("/proc/{0}/task/{0}/children", procs.0[1].id());
    let child: i32 = std::fs::read_to_string(&children).unwrap().trim().parse().expect("the angel runs one child");
    common::sigkill(child);
    wait_log("data node 2 went away while it waited for the cluster to form; releasing its node id", 1);
    wait_log(waiting, 2);
    std::thread::sleep(Duration::from_secs(3));
    procs.0.push(spawn_from(
        &exe_copy,
        &["datanode", "--mgmd", &mgmd, "--node-id", "3", "--data-dir", &data],
        "angel-3.log",
    ));
    let started = |l: &str| l.contains(" started") && !l.contains("not started");
    let mut pid = common::datanode_pids(&wait_for_node(&mgmd, 3, "started", started))[0];
    assert_ne!(pid, procs.0[2].id() as i32, "the angel runs the data node as its child");
    wait_for_node(&mgmd, 2, "started", started);
    let formed = mgm_at(&mgmd, &["log"]);
    assert_eq!(formed.matches("died").count(), 1, "only the killed data node died while the cluster formed:\n{formed}");

    // An upgrade in place: a new file renamed over the angel's executable.
    let replacement = dir.path().join("latsdb-new");
    std::fs::copy(common::BIN, &replacement).unwrap();
    std::fs::rename(&replacement, &exe_copy).unwrap();
    // Two deaths: each time the angel starts the node again and it rejoins.
    for death in 1..=2 {
        common::sigkill(pid);
        let line = wait_for_node(&mgmd, 3, "started again with a new pid", |l| {
            started(l) && common::datanode_pids(l).first().is_some_and(|&p| p != pid)
        });
        pid = common::datanode_pids(&line)[0];
        let events = mgm_at(&mgmd, &["log"]);
        assert!(
            events.contains(&format!("WARNING angel of data node 3: data node 3 died (signal: 9 (SIGKILL)); starting it again in {} s (death {death} of 3", 1 << (death - 1))),
            "the cluster log does not say why the angel restarted the node:\n{events}"
        );
    }
    // The third within the window: left down, with an alert.
    common::sigkill(pid);
    let line = wait_for_node(&mgmd, 3, "reported down", |l| l.contains("not started"));
    let deadline = Instant::now() + Duration::from_secs(30);
    let events = loop {
        let events = mgm_at(&mgmd, &["log"]);
        if events.contains("ALERT   angel of data node 3: data node 3 died (signal: 9 (SIGKILL)) 3 times within 10 min")
        {
            break events;
        }
        assert!(Instant::now() < deadline, "no alert in the cluster log after the third death:\n{events}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(events.contains("WARNING mgmd: lost the connection to data node 3"), "{events}");
    // Longer than any backoff (2 s here) a restart would have waited.
    std::thread::sleep(Duration::from_secs(5));
    let still = wait_for_node(&mgmd, 3, "still down", |l| l.contains("not started"));
    assert!(common::datanode_pids(&still).is_empty(), "{line} / {still}");

    // An operator's start is carried out by the angel.
    let starts = |events: &str| events.matches("angel of data node 3: data node 3 started (pid").count();
    let before = starts(&mgm_at(&mgmd, &["log", "--lines", "500"]));
    let out = mgm_at(&mgmd, &["3", "start", "--timeout", "120"]);
    assert!(out.contains("started"), "{out}");
    let events = mgm_at(&mgmd, &["log", "--lines", "500"]);
    assert_eq!(starts(&events), before + 1, "the angel did not start the node on request:\n{events}");

    // Stopping the angel stops its data node, which the cluster notices.
    let angel = &mut procs.0[2];
    common::send(angel.id() as i32, libc::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(40);
    while angel.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the angel did not stop within 40 s of SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
    wait_for_node(&mgmd, 3, "stopped with its angel", |l| l.contains("not started"));
}
