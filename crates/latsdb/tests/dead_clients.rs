//! Locks never outlive their transaction: a client killed (SIGKILL) while
//! its transaction holds row locks leaves none behind. Through the SQL
//! node (the mariadb CLI, mid-transaction) and through the native client
//! (a process of its own), under a background load of writers on other
//! rows; after each kill another client writes the locked rows, and must
//! get them within the lock-wait timeout (the cluster's default, 1.5 s),
//! without a `LockWaitTimeout`. The same for a live client whose request
//! timed out while its transaction waited for a lock, and for one that
//! stops sending requests mid-transaction (the inactive timeout).

mod common;

use common::{host_port, sigkill, TestCluster};
use latsdb_client::{Client, Op, Value};
use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Waits (bounded) until `child` prints a line that ends with `line` on its
/// stdout (the test harness prints the test's name on the same line).
fn wait_for_line(child: &mut Child, line: &str, within: Duration) {
    let rx = common::lines_of(child.stdout.take().expect("stdout is piped"));
    let deadline = Instant::now() + within;
    loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(l) if l.trim().ends_with(line) => return,
            Ok(_) => continue,
            Err(_) => {
                let _ = child.kill();
                panic!("the client did not print {line:?} within {within:?}");
            }
        }
    }
}

/// Creates `dc.NAME (id BIGINT PRIMARY KEY, v BIGINT)` holding row (1, 0).
async fn table_with_row_1(client: &Client, name: &str) -> std::sync::Arc<latsdb_client::Table> {
    let spec = latsdb_types::TableSpec::new("dc", name)
        .column(latsdb_types::ColumnDef::new("id", latsdb_types::ColumnType::int(latsdb_types::IntWidth::Big)))
        .column(latsdb_types::ColumnDef::new("v", latsdb_types::ColumnType::int(latsdb_types::IntWidth::Big)))
        .primary_key(&["id"]);
    let t = client.create_table(spec).await.unwrap_or_else(|e| panic!("create dc.{name}: {e}"));
    client.batch(vec![Op::insert(&t, vec![Value::Int(1), Value::Int(0)]).unwrap()]).await.expect("insert row 1");
    t
}

/// Kills `child` with SIGKILL and reaps it.
fn kill(mut child: Child) {
    sigkill(child.id() as i32);
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().expect("try_wait").is_none() {
        assert!(Instant::now() < deadline, "a SIGKILLed client did not exit");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Writes the rows `ids` in one transaction. A lock left behind by the
/// killed client makes it wait the lock-wait timeout and fail with
/// `LockWaitTimeout`; a lock released within that timeout lets it through.
async fn write_rows(client: &Client, ids: &[i64], value: i64) {
    let t = client.table("dc", "t").await.expect("table dc.t");
    let ops = ids.iter().map(|&id| Op::update(&t, &[Value::Int(id)], &[("v", Value::Int(value))]).unwrap()).collect();
    client.transaction().execute_commit(ops).await.expect("the killed client's rows are free again");
}

/// Writers on rows 100..104 until `stop`: the kills happen under load.
fn background_writers(
    client: &Client,
    stop: &Arc<AtomicBool>,
    done: &Arc<AtomicU64>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..4)
        .map(|w| {
            let (client, stop, done) = (client.clone(), stop.clone(), done.clone());
            tokio::spawn(async move {
                let t = client.table("dc", "t").await.expect("table dc.t");
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let op = Op::update(&t, &[Value::Int(100 + w)], &[("v", Value::Int(n))]).unwrap();
                    client.transaction().execute_commit(vec![op]).await.expect("a background write");
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect()
}

/// The SQL client: the mariadb CLI, fed from a pipe, inside a transaction
/// that has updated rows 1 and 2 when it prints `locked`.
fn sql_lock_holder(cluster: &TestCluster) -> Child {
    let (host, port) = host_port(cluster);
    let mut child = Command::new("mariadb")
        .args(["-h", &host, "-P", &port, "-u", "root", "--batch", "--unbuffered", "--connect-timeout=10"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the mariadb client (scripts/install-deps.sh installs it)");
    let stdin = child.stdin.as_mut().expect("stdin is piped");
    stdin
        .write_all(b"BEGIN;\nUPDATE dc.t SET v = v + 1 WHERE id IN (1, 2);\nSELECT 'locked' AS state;\n")
        .expect("write to the mariadb client");
    stdin.flush().expect("flush the mariadb client's input");
    child
}

/// The native client: this test binary run again as `native_lock_holder`.
fn spawn_native_lock_holder(cluster: &TestCluster) -> Child {
    Command::new(std::env::current_exe().expect("the test binary"))
        .args(["native_lock_holder", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env("LOCK_HOLDER_MGMD", &cluster.mgmd)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the native lock holder")
}

/// Not a test on its own: the native client process that
/// `killed_clients_leave_no_lock_behind` starts and kills. Locks row 3 in
/// an open transaction, says `locked`, and waits to be killed.
#[tokio::test]
#[ignore]
async fn native_lock_holder() {
    let Ok(mgmd) = std::env::var("LOCK_HOLDER_MGMD") else { return };
    let client = Client::connect(&mgmd).await.expect("connect to the cluster");
    let t = client.table("dc", "t").await.expect("table dc.t");
    let mut tx = client.transaction();
    tx.execute(vec![Op::update(&t, &[Value::Int(3)], &[("v", Value::Int(-1))]).unwrap()]).await.expect("lock row 3");
    println!("locked");
    tokio::time::sleep(Duration::from_secs(120)).await;
    panic!("the lock holder was not killed within 120 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_clients_leave_no_lock_behind() {
    let cluster = TestCluster::start(&[]);
    let rows: Vec<String> = [1, 2, 3, 100, 101, 102, 103].iter().map(|id| format!("({id}, 0)")).collect();
    let script = format!(
        "CREATE DATABASE dc; CREATE TABLE dc.t (id INT PRIMARY KEY, v INT); INSERT INTO dc.t VALUES {};",
        rows.join(", ")
    );
    let (ok, _, err) = common::mariadb(&cluster, &[], &script);
    assert!(ok, "schema: {err}");
    let client = Client::connect(&cluster.mgmd).await.expect("connect");
    let (stop, done) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
    let writers = background_writers(&client, &stop, &done);

    for round in 0..3 {
        let mut holder = sql_lock_holder(&cluster);
        wait_for_line(&mut holder, "locked", Duration::from_secs(30));
        kill(holder);
        write_rows(&client, &[1, 2], round).await;
    }
    for round in 0..2 {
        let mut holder = spawn_native_lock_holder(&cluster);
        wait_for_line(&mut holder, "locked", Duration::from_secs(60));
        kill(holder);
        write_rows(&client, &[3], round).await;
    }

    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.expect("a background writer");
    }
    assert!(done.load(Ordering::Relaxed) > 0, "the background writers ran");
    let (ok, out, err) = common::mariadb(&cluster, &[], "SELECT id, v FROM dc.t WHERE id <= 3 ORDER BY id;");
    assert!(ok, "{err}");
    assert_eq!(out, "id\tv\n1\t2\n2\t2\n3\t1\n", "the last writes after the kills are the rows' values");
}

/// A transaction whose first request times out at the client while it
/// waits for a row lock: the coordinator grants the lock later and answers
/// a request no one waits for any more. Without the client aborting it,
/// that transaction would hold the lock for good (found by the fault
/// campaign, `latsdb chaos`, as a node restart whose copy waited forever
/// for a transaction to finish).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_whose_request_timed_out_leaves_no_lock_behind() {
    let cluster = TestCluster::start(&["--no-rest", "--no-sql"]);
    let client = Client::connect(&cluster.mgmd).await.expect("connect");
    let t = table_with_row_1(&client, "t").await;
    let lock = || Op::read_locked(&t, &[Value::Int(1)], latsdb_client::LockMode::Exclusive).unwrap();

    let mut holder = client.transaction();
    holder.execute(vec![lock()]).await.expect("the holder locks row 1");
    let impatient = Client::connect_with(
        &cluster.mgmd,
        latsdb_client::ClientOptions { request_timeout: Duration::from_millis(200), ..Default::default() },
    )
    .await
    .expect("connect the impatient client");
    let it = impatient.table("dc", "t").await.expect("table dc.t");
    let mut waiter = impatient.transaction();
    let started = Instant::now();
    let lock_it = Op::read_locked(&it, &[Value::Int(1)], latsdb_client::LockMode::Exclusive).unwrap();
    let timed_out = waiter.execute(vec![lock_it]).await;
    assert!(
        matches!(&timed_out, Err(e) if e.code == latsdb_types::ErrorCode::Timeout),
        "the impatient client gives up after 200 ms: {timed_out:?}"
    );
    assert!(started.elapsed() < Duration::from_millis(1_000), "it gave up before the lock-wait timeout");
    // The holder commits within the lock-wait timeout of the abandoned
    // request: the coordinator grants it the lock and answers.
    holder.commit().await.expect("the holder commits");
    drop(waiter);
    // Another transaction must get the row within the lock-wait timeout.
    let mut next = client.transaction();
    next.execute(vec![lock()]).await.expect("row 1 is free again: the abandoned transaction was aborted");
    next.commit().await.expect("commit");
}

/// A live client that stops in the middle of a transaction
/// (`[cluster] transaction_inactive_timeout_ms`): its coordinator aborts
/// the transaction, another client gets the locked row, and the silent
/// client's next request says why its transaction is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_left_idle_loses_its_locks_after_the_inactive_timeout() {
    let mut config = latsdb_types::config::ClusterConfig::local(2, 2, 0);
    config.cluster.transaction_inactive_timeout_ms = 700;
    let dir = tempfile::tempdir().expect("a temporary folder");
    let path = dir.path().join("idle.toml");
    std::fs::write(&path, config.to_toml()).expect("write the configuration");
    let cluster = TestCluster::start(&["--config", path.to_str().unwrap(), "--no-rest", "--no-sql"]);
    let client = Client::connect(&cluster.mgmd).await.expect("connect");
    let t = table_with_row_1(&client, "idle").await;

    let mut silent = client.transaction();
    silent.execute(vec![Op::update(&t, &[Value::Int(1)], &[("v", Value::Int(5))]).unwrap()]).await.expect("update");
    // Another client's write of the row waits for the lock (1.5 s at most
    // per attempt) and gets it once the silent transaction is aborted.
    let other = Client::connect(&cluster.mgmd).await.expect("connect the other client");
    let ot = other.table("dc", "idle").await.expect("table dc.idle");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let write = Op::upsert(&ot, vec![Value::Int(1), Value::Int(9)]).unwrap();
        match other.transaction().execute_commit(vec![write]).await {
            Ok(_) => break,
            Err(e) if e.code == latsdb_types::ErrorCode::LockWaitTimeout && Instant::now() < deadline => continue,
            Err(e) => panic!("the row stayed locked by the idle transaction: {e}"),
        }
    }
    let row = other.get(&ot, &[Value::Int(1)]).await.expect("read").expect("row 1");
    assert_eq!(row.get(1), Value::Int(9), "the idle transaction's update is gone");
    let late = silent.execute(vec![Op::read(&t, &[Value::Int(1)]).unwrap()]).await;
    match late {
        Err(e) => {
            assert_eq!(e.code, latsdb_types::ErrorCode::TransactionAborted, "{e}");
            assert!(e.message.contains("without a request from its client"), "{e}");
        }
        Ok(answer) => panic!("the idle transaction went on: {answer:?}"),
    }
}
