//! Multi-process tests: mgmd + 2 data nodes started by `latsdb start`,
//! driven through the native client (issue: Foundation).

mod common;

use common::{process_exists, TestCluster};
use latsdb_client::{Aggregate, Client, CmpOp, Expr, LockMode, Op, Outcome, Scan};
use latsdb_types::schema::{ColumnDef, ColumnType, IntWidth, TableSpec};
use latsdb_types::{ErrorCode, Value};
use std::collections::BTreeSet;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ROWS: i64 = 100_000;

fn items_spec() -> TableSpec {
    TableSpec::new("test", "items")
        .column(ColumnDef::new("id", ColumnType::int(IntWidth::Big)))
        .column(ColumnDef::new("grp", ColumnType::int(IntWidth::Int)).not_null())
        .column(ColumnDef::new("name", ColumnType::VarChar(32)))
        .column(ColumnDef::new("amount", ColumnType::Double))
        .primary_key(&["id"])
}

fn item(id: i64) -> Vec<Value> {
    vec![Value::Int(id), Value::Int(id % 97), Value::Str(format!("item-{id}")), Value::Float(id as f64 * 0.5)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_read_scan_and_concurrent_transfers() {
    let cluster = TestCluster::start(&[]);
    let client = Client::connect(&cluster.mgmd).await.unwrap();
    let items = client.create_table(items_spec()).await.unwrap();

    load_items(&client, &items).await;
    // Read every row back by batched key lookups and check every column.
    for first in (0..ROWS).step_by(100) {
        let ops = (first..first + 100).map(|id| Op::read(&items, &[Value::Int(id)]).unwrap()).collect();
        let results = client.batch(ops).await.unwrap();
        for (offset, r) in results.into_iter().enumerate() {
            let row = r.unwrap().into_row().unwrap_or_else(|| panic!("row {} is missing", first + offset as i64));
            assert_eq!(row.values(), item(first + offset as i64));
        }
    }

    // The rows are spread over both data nodes.
    let layout = client.layout();
    let nodes: BTreeSet<u16> =
        (0..items.def().partitions).filter_map(|p| layout.primary_of(p)).map(|s| s.node).collect();
    assert_eq!(nodes.len(), 2, "partitions must live on both data nodes");

    let items = scans_indexes_and_aggregates(&client, items).await;
    assert_eq!(items.def().indexes.len(), 2);
    concurrent_transfers(&client, &layout).await;
}

/// Loads `ROWS` rows with 8 concurrent loaders of 1,000-row batches.
async fn load_items(client: &Client, items: &Arc<latsdb_client::Table>) {
    let next = Arc::new(AtomicU64::new(0));
    let mut loaders = Vec::new();
    for _ in 0..8 {
        let (client, items, next) = (client.clone(), items.clone(), next.clone());
        loaders.push(tokio::spawn(async move {
            loop {
                let first = next.fetch_add(1000, Ordering::Relaxed) as i64;
                if first >= ROWS {
                    return;
                }
                let ops = (first..(first + 1000).min(ROWS)).map(|id| Op::insert(&items, item(id)).unwrap()).collect();
                for r in client.batch(ops).await.unwrap() {
                    assert!(matches!(r, Ok(Outcome::Done)), "insert failed: {r:?}");
                }
            }
        }));
    }
    for l in loaders {
        l.await.unwrap();
    }
}

/// A primary-key range with a pushed-down filter, a secondary ordered index
/// built over existing rows, and aggregates computed on the data nodes:
/// each gives exactly the rows (or values) the loaded items imply. Returns
/// the table with its new index.
async fn scans_indexes_and_aggregates(client: &Client, items: Arc<latsdb_client::Table>) -> Arc<latsdb_client::Table> {
    // Primary-key range with a pushed-down filter: exact rows.
    let filter = Expr::And(vec![
        Expr::cmp(CmpOp::Eq, items.col("grp").unwrap(), Expr::val(Value::Int(3))),
        Expr::cmp(CmpOp::Gt, items.col("amount").unwrap(), Expr::val(Value::Float(600.0))),
    ]);
    let scan = Scan::all()
        .range(Bound::Included(vec![Value::Int(1000)]), Bound::Excluded(vec![Value::Int(5000)]))
        .filter(filter)
        .columns(&["id", "name"])
        .ordered();
    let rows = client.scan(&items, scan).await.unwrap();
    let got: Vec<i64> = rows.iter().map(|r| r.get(0).as_i64().unwrap()).collect();
    let want: Vec<i64> = (1000..5000).filter(|id| id % 97 == 3 && *id as f64 * 0.5 > 600.0).collect();
    assert_eq!(got, want);
    assert_eq!(rows[0].get(1), Value::Str(format!("item-{}", want[0])));

    // An ordered range with a limit (YCSB's scan): the first rows from a
    // key in key order, whether partitions answer in one page or several.
    for (start, limit, page_rows) in [(0, 1, 4096), (1000, 7, 3), (4990, 100, 16), (ROWS - 3, 10, 2)] {
        let scan = Scan::all()
            .range(Bound::Included(vec![Value::Int(start)]), Bound::Unbounded)
            .ordered()
            .limit(limit as usize)
            .page_rows(page_rows);
        let got: Vec<i64> =
            client.scan(&items, scan).await.unwrap().iter().map(|r| r.get(0).as_i64().unwrap()).collect();
        let want: Vec<i64> = (start..(start + limit).min(ROWS)).collect();
        assert_eq!(got, want, "{limit} rows from {start} in pages of {page_rows}");
    }

    // A secondary ordered index built over existing rows, then a range + LIKE filter.
    let items = client.create_index("test", "items", "grp_idx", &["grp"]).await.unwrap();
    let scan = Scan::all()
        .index("grp_idx")
        .range(Bound::Included(vec![Value::Int(10)]), Bound::Included(vec![Value::Int(11)]))
        .filter(Expr::Like(Box::new(items.col("name").unwrap()), "%77".into()));
    let mut got: Vec<i64> =
        client.scan(&items, scan).await.unwrap().iter().map(|r| r.get(0).as_i64().unwrap()).collect();
    got.sort_unstable();
    let want: Vec<i64> =
        (0..ROWS).filter(|id| (10..=11).contains(&(id % 97)) && id.to_string().ends_with("77")).collect();
    assert_eq!(got, want);

    // Aggregates computed on the data nodes.
    let aggs = [Aggregate::CountRows, Aggregate::Sum(0), Aggregate::Max(3), Aggregate::Min(1)];
    let values = client.aggregate(&items, Scan::all(), &aggs).await.unwrap();
    assert_eq!(values[0], Value::UInt(ROWS as u64));
    assert_eq!(values[1].to_string(), ((ROWS - 1) * ROWS / 2).to_string());
    assert_eq!(values[2], Value::Float((ROWS - 1) as f64 * 0.5));
    assert_eq!(values[3], Value::Int(0));
    let filtered = client
        .aggregate(
            &items,
            Scan::all().filter(Expr::cmp(CmpOp::Lt, items.col("id").unwrap(), Expr::val(Value::Int(10)))),
            &aggs[..1],
        )
        .await
        .unwrap();
    assert_eq!(filtered[0], Value::UInt(10));

    items
}

/// Concurrent transfers between accounts on different data nodes; a
/// checker reads every account under shared locks and the total must never
/// change.
async fn concurrent_transfers(client: &Client, layout: &latsdb_types::proto::ClusterLayout) {
    const ACCOUNTS: i64 = 20;
    let accounts = client
        .create_table(
            TableSpec::new("test", "accounts")
                .column(ColumnDef::new("id", ColumnType::int(IntWidth::Big)))
                .column(ColumnDef::new("balance", ColumnType::int(IntWidth::Big)).not_null())
                .primary_key(&["id"]),
        )
        .await
        .unwrap();
    let ops = (0..ACCOUNTS).map(|id| Op::insert(&accounts, vec![Value::Int(id), Value::Int(1000)]).unwrap()).collect();
    client.batch(ops).await.unwrap();
    let account_nodes: BTreeSet<u16> = (0..ACCOUNTS)
        .map(|id| layout.primary_of(Op::read(&accounts, &[Value::Int(id)]).unwrap().partition()).unwrap().node)
        .collect();
    assert_eq!(account_nodes.len(), 2, "accounts must live on both data nodes");

    let stop = Arc::new(AtomicBool::new(false));
    let committed = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for w in 0..6u64 {
        let (client, accounts, committed) = (client.clone(), accounts.clone(), committed.clone());
        workers.push(tokio::spawn(async move {
            let mut seed = w * 7919 + 17;
            for _ in 0..60 {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let a = (seed >> 33) as i64 % ACCOUNTS;
                let b = (a + 1 + (seed >> 40) as i64 % (ACCOUNTS - 1)) % ACCOUNTS;
                let amount = (seed >> 50) as i64 % 50 + 1;
                let (lo, hi) = (a.min(b), a.max(b));
                loop {
                    let mut tx = client.transaction();
                    let locked = tx
                        .execute(vec![
                            Op::read_locked(&accounts, &[Value::Int(lo)], LockMode::Exclusive).unwrap(),
                            Op::read_locked(&accounts, &[Value::Int(hi)], LockMode::Exclusive).unwrap(),
                        ])
                        .await;
                    if let Err(e) = locked {
                        assert!(e.is_retriable(), "transfer failed: {e}");
                        continue;
                    }
                    let balance = Expr::Column(1);
                    let ops = vec![
                        Op::update_expr(
                            &accounts,
                            &[Value::Int(a)],
                            vec![(
                                1,
                                Expr::Arith(
                                    latsdb_client::ArithOp::Sub,
                                    Box::new(balance.clone()),
                                    Box::new(Expr::val(Value::Int(amount))),
                                ),
                            )],
                        )
                        .unwrap(),
                        Op::update_expr(
                            &accounts,
                            &[Value::Int(b)],
                            vec![(
                                1,
                                Expr::Arith(
                                    latsdb_client::ArithOp::Add,
                                    Box::new(balance),
                                    Box::new(Expr::val(Value::Int(amount))),
                                ),
                            )],
                        )
                        .unwrap(),
                    ];
                    match tx.execute_commit(ops).await {
                        Ok(_) => {
                            committed.fetch_add(1, Ordering::Relaxed);
                            break;
                        }
                        Err(e) => assert!(e.is_retriable(), "transfer failed: {e}"),
                    }
                }
            }
        }));
    }
    let checker = {
        let (client, accounts, stop) = (client.clone(), accounts.clone(), stop.clone());
        tokio::spawn(async move {
            let mut checks = 0;
            while !stop.load(Ordering::Relaxed) {
                let ops = (0..ACCOUNTS)
                    .map(|id| Op::read_locked(&accounts, &[Value::Int(id)], LockMode::Shared).unwrap())
                    .collect();
                let tx = client.transaction();
                match tx.execute_commit(ops).await {
                    Ok(rows) => {
                        let total: i64 = rows.into_iter().map(|o| o.into_row().unwrap().get(1).as_i64().unwrap()).sum();
                        assert_eq!(total, ACCOUNTS * 1000, "the bank total changed");
                        checks += 1;
                    }
                    Err(e) => assert!(e.is_retriable(), "checker failed: {e}"),
                }
            }
            checks
        })
    };
    for w in workers {
        w.await.unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let checks = checker.await.unwrap();
    assert_eq!(committed.load(Ordering::Relaxed), 6 * 60);
    assert!(checks > 0, "the checker never completed a read");
    let total = client.aggregate(&accounts, Scan::all(), &[Aggregate::Sum(1)]).await.unwrap();
    assert_eq!(total[0].to_string(), (ACCOUNTS * 1000).to_string());
}

async fn counter_table(client: &Client, name: &str) -> Arc<latsdb_client::Table> {
    let t = client
        .create_table(
            TableSpec::new("test", name)
                .column(ColumnDef::new("id", ColumnType::int(IntWidth::Int)))
                .column(ColumnDef::new("v", ColumnType::int(IntWidth::Big)))
                .primary_key(&["id"]),
        )
        .await
        .unwrap();
    client.batch(vec![Op::insert(&t, vec![Value::Int(1), Value::Int(0)]).unwrap()]).await.unwrap();
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_to_one_row_serialize_and_lock_waits_time_out() {
    let cluster = TestCluster::start(&[]);
    let client = Client::connect(&cluster.mgmd).await.unwrap();
    let t = counter_table(&client, "counter").await;
    let key = [Value::Int(1)];
    let v_plus_one = || {
        vec![(
            1,
            Expr::Arith(latsdb_client::ArithOp::Add, Box::new(Expr::Column(1)), Box::new(Expr::val(Value::Int(1)))),
        )]
    };

    // Writer A takes the row lock.
    let mut a = client.transaction();
    a.execute(vec![Op::read_locked(&t, &key, LockMode::Exclusive).unwrap()]).await.unwrap();
    // Writer B must wait for A.
    let b = {
        let (client, t) = (client.clone(), t.clone());
        let set = v_plus_one();
        tokio::spawn(async move {
            client.transaction().execute_commit(vec![Op::update_expr(&t, &[Value::Int(1)], set).unwrap()]).await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!b.is_finished(), "B ran while A held the lock");
    // A's write commits first; B then applies on top of it.
    a.execute_commit(vec![Op::update(&t, &key, &[("v", Value::Int(10))]).unwrap()]).await.unwrap();
    b.await.unwrap().unwrap();
    let row = client.get(&t, &key).await.unwrap().unwrap();
    assert_eq!(row.get(1), Value::Int(11));

    // Many concurrent increments serialize: none is lost.
    let mut incs = Vec::new();
    for _ in 0..8 {
        let (client, t, set) = (client.clone(), t.clone(), v_plus_one());
        incs.push(tokio::spawn(async move {
            for _ in 0..25 {
                client
                    .transaction()
                    .execute_commit(vec![Op::update_expr(&t, &[Value::Int(1)], set.clone()).unwrap()])
                    .await
                    .unwrap();
            }
        }));
    }
    for i in incs {
        i.await.unwrap();
    }
    assert_eq!(client.get(&t, &key).await.unwrap().unwrap().get(1), Value::Int(11 + 200));

    // A holder that does not finish makes the next writer time out with a retriable error.
    let mut holder = client.transaction();
    holder.execute(vec![Op::update(&t, &key, &[("v", Value::Int(500))]).unwrap()]).await.unwrap();
    let started = Instant::now();
    let err = client
        .transaction()
        .execute_commit(vec![Op::update(&t, &key, &[("v", Value::Int(600))]).unwrap()])
        .await
        .unwrap_err();
    let waited = started.elapsed();
    assert_eq!(err.code, ErrorCode::LockWaitTimeout, "{err}");
    assert!(err.is_retriable());
    assert!(waited >= Duration::from_millis(1000) && waited < Duration::from_secs(10), "waited {waited:?}");
    // An independent write also waits and then times out, reported per operation.
    let r = client.batch(vec![Op::update(&t, &key, &[("v", Value::Int(700))]).unwrap()]).await.unwrap();
    assert!(matches!(&r[0], Err(e) if e.code == ErrorCode::LockWaitTimeout));
    // The holder is unaffected and commits; its value is the one that stands.
    holder.commit().await.unwrap();
    assert_eq!(client.get(&t, &key).await.unwrap().unwrap().get(1), Value::Int(500));
    // Committed reads never wait for locks.
    let mut holder = client.transaction();
    holder.execute(vec![Op::update(&t, &key, &[("v", Value::Int(800))]).unwrap()]).await.unwrap();
    let started = Instant::now();
    assert_eq!(client.get(&t, &key).await.unwrap().unwrap().get(1), Value::Int(500));
    assert!(started.elapsed() < Duration::from_millis(900));
    holder.rollback().await.unwrap();
    assert_eq!(client.get(&t, &key).await.unwrap().unwrap().get(1), Value::Int(500));
}

#[test]
fn start_show_and_clean_stop() {
    let mut cluster = TestCluster::start(&[]);
    let show = cluster.mgm(&["show"]);
    assert!(show.contains("1 mgmd, 2 data nodes (2 started)"), "{show}");
    let started: Vec<&str> =
        show.lines().filter(|l| l.starts_with("id=") && l.split_whitespace().any(|w| w == "started")).collect();
    assert_eq!(started.len(), 3, "mgmd and two data nodes must be started:\n{show}");
    let pids = common::datanode_pids(&show);
    assert_eq!(pids.len(), 2);
    check_shard_cpus(&pids);
    let status = cluster.stop_with(libc::SIGINT);
    assert!(status.success(), "launcher exited with {status}");
    // No process is left behind.
    let deadline = Instant::now() + Duration::from_secs(5);
    while pids.iter().any(|&p| process_exists(p)) {
        assert!(Instant::now() < deadline, "data node processes survived Ctrl-C");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `Cpus_allowed_list` of every shard thread of these processes.
fn shard_cpu_lists(pids: &[i32]) -> Vec<String> {
    let mut lists = Vec::new();
    for pid in pids {
        for task in std::fs::read_dir(format!("/proc/{pid}/task")).expect("data node tasks").flatten() {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            if !comm.starts_with("shard-") {
                continue;
            }
            let status = std::fs::read_to_string(task.path().join("status")).expect("task status");
            let list = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).expect("Cpus_allowed_list");
            lists.push(list.trim().to_string());
        }
    }
    lists
}

/// With `cpu_bind = "auto"` (the default), the data nodes' shard threads
/// each get a CPU of their own when there are enough CPUs for all of them,
/// and are left to the OS otherwise.
fn check_shard_cpus(pids: &[i32]) {
    let lists = shard_cpu_lists(pids);
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    assert!(lists.len() >= 2, "no shard threads found: {lists:?}");
    if lists.len() <= cpus {
        let mut distinct = lists.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), lists.len(), "shard threads share CPUs: {lists:?}");
        assert!(lists.iter().all(|l| l.parse::<usize>().is_ok()), "a shard thread is not bound to one CPU: {lists:?}");
    } else {
        assert!(
            lists.iter().all(|l| l.parse::<usize>().is_err()),
            "{} shard threads on {cpus} CPUs were bound: {lists:?}",
            lists.len()
        );
    }
}

#[test]
fn cpu_bind_off_leaves_shard_threads_to_the_os() {
    let cluster = TestCluster::start(&["--cpu-bind", "off", "--no-rest", "--no-sql"]);
    let pids = common::datanode_pids(&cluster.mgm(&["show"]));
    let lists = shard_cpu_lists(&pids);
    // The data nodes inherit this process's CPUs through the launcher.
    let status = std::fs::read_to_string("/proc/self/status").expect("own status");
    let own = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).expect("Cpus_allowed_list").trim();
    assert!(lists.len() >= 2 && lists.iter().all(|l| l == own), "shard threads {lists:?}, this process {own}");
}

/// Every row's email, and the unique index's hidden table, agree: one
/// entry per row with a non-NULL email, naming that row.
async fn check_unique_emails(client: &Client, table: &Arc<latsdb_client::Table>) -> usize {
    let rows = client.scan(table, Scan::all()).await.unwrap();
    let mut owner = std::collections::BTreeMap::new();
    for row in &rows {
        if let Value::Str(email) = row.get(1) {
            let id = row.get(0).as_i64().unwrap();
            assert!(owner.insert(email.clone(), id).is_none(), "two rows have email {email}");
        }
    }
    let index = table.def().index("by_email").unwrap();
    let hidden_name = latsdb_types::schema::unique_table_name(table.def().id, index.id);
    let hidden = client.refresh_table("test", &hidden_name).await.unwrap();
    let entries = client.scan(&hidden, Scan::all()).await.unwrap();
    let held: std::collections::BTreeMap<String, i64> = entries
        .iter()
        .map(|e| match e.get(0) {
            Value::Str(email) => (email, e.get(1).as_i64().unwrap()),
            other => panic!("entry {other:?}"),
        })
        .collect();
    assert_eq!(held, owner, "the unique index's entries differ from the rows");
    rows.len()
}

/// Writers racing for the same values of a unique index, through batches
/// and transactions: each value ends up in exactly one row, NULLs never
/// collide, and moving, swapping and deleting rows frees and takes values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unique_index_admits_one_row_per_value_under_concurrent_writers() {
    let cluster = TestCluster::start(&["--no-rest"]);
    let client = Client::connect(&cluster.mgmd).await.unwrap();
    let spec = TableSpec::new("test", "accounts")
        .column(ColumnDef::new("id", ColumnType::int(IntWidth::Big)))
        .column(ColumnDef::new("email", ColumnType::VarChar(20)))
        .primary_key(&["id"]);
    let table = client.create_table(spec).await.unwrap();
    let ops =
        (0..10).map(|i| Op::insert(&table, vec![Value::Int(i), Value::Str(format!("old{i}"))]).unwrap()).collect();
    client.transaction().execute_commit(ops).await.unwrap();
    // Filled from the rows stored; refused while two rows share a value.
    client.batch(vec![Op::insert(&table, vec![Value::Int(10), Value::Str("old1".into())]).unwrap()]).await.unwrap();
    let refused = client.create_unique_index("test", "accounts", "by_email", &["email"]).await.unwrap_err();
    assert_eq!(refused.code, ErrorCode::DuplicateKey, "{refused:?}");
    // The failed attempt changed the definition twice (index added, dropped).
    let table = client.refresh_table("test", "accounts").await.unwrap();
    client.batch(vec![Op::delete(&table, &[Value::Int(10)]).unwrap()]).await.unwrap().remove(0).unwrap();
    let table = client.create_unique_index("test", "accounts", "by_email", &["email"]).await.unwrap();
    assert_eq!(check_unique_emails(&client, &table).await, 10);

    let won = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for t in 0..6i64 {
        let (client, table, won) = (client.clone(), table.clone(), won.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..40i64 {
                let email = if i % 7 == 0 { Value::Null } else { Value::Str(format!("e{}", i % 20)) };
                let op = Op::insert(&table, vec![Value::Int(1000 + t * 100 + i), email]).unwrap();
                let result = if t % 2 == 0 {
                    client.batch(vec![op]).await.unwrap().remove(0)
                } else {
                    client.transaction().execute_commit(vec![op]).await.map(|mut o| o.remove(0))
                };
                match result {
                    Ok(_) => {
                        won.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) if e.code == ErrorCode::DuplicateKey => {
                        assert!(e.message.contains("for key 'accounts.by_email'"), "{e:?}")
                    }
                    Err(e) if e.code.is_retriable() => {}
                    Err(e) => panic!("insert failed: {e:?}"),
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let rows = check_unique_emails(&client, &table).await;
    assert_eq!(rows as u64, 10 + won.load(Ordering::Relaxed));
    // Every NULL insert (6 writers x 6) went in, and at most one row per email.
    let nulls = client.scan(&table, Scan::all()).await.unwrap().iter().filter(|r| r.get(1).is_null()).count();
    assert_eq!(nulls, 36);
    assert!(rows <= 10 + 36 + 20, "{rows} rows: 20 emails were raced for");

    let set = |id: i64, email: &str| Op::update(&table, &[Value::Int(id)], &[("email", Value::Str(email.into()))]);
    client.transaction().execute_commit(vec![set(1, "moved").unwrap()]).await.unwrap();
    let taken = client.transaction().execute_commit(vec![set(2, "moved").unwrap()]).await.unwrap_err();
    assert_eq!(taken.code, ErrorCode::DuplicateKey);
    // Two rows trade values in one transaction.
    client.transaction().execute_commit(vec![set(2, "old3").unwrap(), set(3, "old2").unwrap()]).await.unwrap();
    client.batch(vec![Op::delete(&table, &[Value::Int(1)]).unwrap()]).await.unwrap();
    client.transaction().execute_commit(vec![set(2, "moved").unwrap()]).await.unwrap();
    let upsert = Op::upsert(&table, vec![Value::Int(4), Value::Str("old4b".into())]).unwrap();
    client.batch(vec![upsert]).await.unwrap().remove(0).unwrap();
    check_unique_emails(&client, &table).await;
    let row = |id: i64| {
        let client = client.clone();
        let table = table.clone();
        async move { client.get(&table, &[Value::Int(id)]).await.unwrap().unwrap().get(1) }
    };
    assert_eq!(row(2).await, Value::Str("moved".into()));
    assert_eq!(row(3).await, Value::Str("old2".into()));

    // Dropping the index drops its hidden table; writes no longer check.
    let index = table.def().index("by_email").unwrap().id;
    let table = client.drop_index("test", "accounts", "by_email").await.unwrap();
    let hidden = latsdb_types::schema::unique_table_name(table.def().id, index);
    assert_eq!(client.refresh_table("test", &hidden).await.unwrap_err().code, ErrorCode::UnknownTable);
    client
        .batch(vec![Op::insert(&table, vec![Value::Int(5000), Value::Str("moved".into())]).unwrap()])
        .await
        .unwrap()
        .remove(0)
        .unwrap();
}

/// Renaming a table or its columns keeps every row, index and the UNIQUE
/// guarantee; a client holding the old definition is refused, then finds
/// nothing under the old name, and finds a table created under that name
/// later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renamed_tables_and_columns_keep_their_rows_and_stale_clients_learn_of_it() {
    use latsdb_types::schema::ColumnChange;
    let cluster = TestCluster::start(&[]);
    let client = Client::connect(&cluster.mgmd).await.unwrap();
    let stale = Client::connect(&cluster.mgmd).await.unwrap();
    let spec = TableSpec::new("r", "people")
        .column(ColumnDef::new("id", ColumnType::int(IntWidth::Big)))
        .column(ColumnDef::new("email", ColumnType::VarChar(40)))
        .column(ColumnDef::new("age", ColumnType::int(IntWidth::Int)).not_null())
        .primary_key(&["id"]);
    client.create_table(spec).await.unwrap();
    client.create_unique_index("r", "people", "by_email", &["email"]).await.unwrap();
    let table = client.create_index("r", "people", "by_age", &["age"]).await.unwrap();
    let ops = (0..200i64)
        .map(|id| {
            Op::insert(&table, vec![Value::Int(id), Value::Str(format!("p{id}@x")), Value::Int(id % 50)]).unwrap()
        })
        .collect();
    client.transaction().execute_commit(ops).await.unwrap();
    let old = stale.table("r", "people").await.unwrap();

    let changed = client
        .change_columns(
            "r",
            "people",
            vec![
                ColumnChange::Rename { from: "email".into(), to: "mail".into() },
                ColumnChange::SetDefault { column: "age".into(), default: Some(Value::Int(18)) },
                ColumnChange::AllowNull { column: "age".into() },
            ],
        )
        .await
        .unwrap();
    let def = changed.def();
    assert_eq!(def.columns[1].name, "mail");
    assert_eq!(def.columns[2].default, Some(Value::Int(18)));
    assert!(def.columns[2].nullable);
    for (changes, code) in [
        (vec![ColumnChange::Rename { from: "mail".into(), to: "AGE".into() }], ErrorCode::ColumnExists),
        (vec![ColumnChange::Rename { from: "email".into(), to: "x".into() }], ErrorCode::UnknownColumn),
        (vec![ColumnChange::AllowNull { column: "id".into() }], ErrorCode::BadRequest),
        (
            vec![ColumnChange::SetDefault { column: "age".into(), default: Some(Value::Str("x".into())) }],
            ErrorCode::BadRequest,
        ),
    ] {
        let e = client.change_columns("r", "people", changes.clone()).await.unwrap_err();
        assert_eq!(e.code, code, "{changes:?}: {e:?}");
    }

    let renamed = client.rename_table("r", "people", "r", "humans").await.unwrap();
    assert_eq!(renamed.def().id, table.def().id);
    let e = client.rename_table("r", "humans", "r", "humans").await.unwrap_err();
    assert_eq!(e.code, ErrorCode::TableExists, "{e:?}");
    let e = client.rename_table("r", "humans", "other", "humans").await.unwrap_err();
    assert_eq!(e.code, ErrorCode::BadRequest, "a table with a unique index stays in its database: {e:?}");

    // Rows, the ordered index on the kept column and the unique index all
    // carry over.
    let rows = client.scan(&renamed, Scan::all()).await.unwrap();
    assert_eq!(rows.len(), 200);
    let aged = client.scan(&renamed, Scan::all().index("by_age").equal(vec![Value::Int(7)])).await.unwrap();
    assert_eq!(aged.len(), 4);
    let dup = client
        .transaction()
        .execute_commit(vec![
            Op::insert(&renamed, vec![Value::Int(500), Value::Str("p3@x".into()), Value::Null]).unwrap()
        ])
        .await
        .unwrap_err();
    assert_eq!(dup.code, ErrorCode::DuplicateKey, "{dup:?}");
    client
        .transaction()
        .execute_commit(vec![
            Op::insert(&renamed, vec![Value::Int(501), Value::Str("new@x".into()), Value::Null]).unwrap()
        ])
        .await
        .unwrap();
    let row = client.get(&renamed, &[Value::Int(501)]).await.unwrap().unwrap();
    assert_eq!(row.get_by_name("mail").unwrap(), Value::Str("new@x".into()));
    assert_eq!(row.get_by_name("age").unwrap(), Value::Null);

    // The stale client: refused, then nothing under the old name, then a
    // new table of that name.
    let refused = stale.get(&old, &[Value::Int(1)]).await.unwrap_err();
    assert_eq!(refused.code, ErrorCode::SchemaVersionMismatch, "{refused:?}");
    let gone = stale.refresh_table("r", "people").await.unwrap_err();
    assert_eq!(gone.code, ErrorCode::UnknownTable, "{gone:?}");
    let gone = stale.table("r", "people").await.unwrap_err();
    assert_eq!(gone.code, ErrorCode::UnknownTable, "the old name left the cache: {gone:?}");
    let mut again = items_spec();
    again.database = "r".into();
    again.name = "people".into();
    client.create_table(again).await.unwrap();
    let fresh = stale.table("r", "people").await.unwrap();
    assert_ne!(fresh.def().id, table.def().id);
    assert_eq!(stale.table("r", "humans").await.unwrap().def().columns[1].name, "mail");
}
