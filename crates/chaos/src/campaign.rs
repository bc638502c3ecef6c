//! One schedule: start the cluster, run the workloads, inject the faults
//! one after the other (each healed, and the cluster recovered, before the
//! next), then stop the workloads and judge.

use crate::bank::{self, BankLog, LedgerLog};
use crate::cluster::{self, host_of, Cluster, DATA_NODES};
use crate::hosts::Hosts;
use crate::schedule::{self, Fault};
use crate::workload::{self, RegisterOp, Shared};
use latsdb_client::{Client, ClientOptions, Table};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long the cluster may take to have every data node started again
/// after a fault is healed, before the campaign starts nodes itself
/// (`mgm N start`, as an operator would for a node its angel gave up on).
const RECOVERY_BEFORE_START: Duration = Duration::from_secs(8);
/// How long after that the cluster must be whole again.
const RECOVERY: Duration = Duration::from_secs(90);

pub struct Verdict {
    pub findings: Vec<String>,
    pub faults: usize,
    pub register_ops: usize,
    pub transfers: u64,
    pub audits: u64,
    pub ledger_rows: usize,
    /// The longest time a worker took to complete an operation after a
    /// data node was killed, in ms (None without a kill).
    pub slowest_back_ms: Option<u64>,
    pub checker: String,
}

impl Verdict {
    pub fn passed(&self) -> bool {
        self.findings.is_empty()
    }

    pub fn summary(&self) -> String {
        format!(
            "{} faults; {} register operations, {} transfers, {} audits, {} ledger rows; {}; {}",
            self.faults,
            self.register_ops,
            self.transfers,
            self.audits,
            self.ledger_rows,
            match self.slowest_back_ms {
                Some(ms) => format!("every client back within {ms} ms of a kill"),
                None => "no single-node kill".to_string(),
            },
            self.checker
        )
    }
}

/// Builds the Porcupine checker from its source (a Go module next to this
/// crate) into `out`.
pub fn build_checker(out: &Path) -> Result<PathBuf, String> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("checker");
    let target = std::fs::canonicalize(out).map_err(|e| format!("{}: {e}", out.display()))?.join("chaos-checker");
    println!("building the Porcupine checker ({})", source.display());
    let output = std::process::Command::new(go_binary())
        .arg("build")
        .arg("-o")
        .arg(&target)
        .arg(".")
        .current_dir(&source)
        .output()
        .map_err(|e| format!("cannot run go (scripts/install-deps.sh installs it): {e}"))?;
    if !output.status.success() {
        return Err(format!("go build of the checker failed: {}", String::from_utf8_lossy(&output.stderr).trim()));
    }
    Ok(target)
}

/// The go command: on the PATH, or where Go's own archive installs it.
pub fn go_binary() -> PathBuf {
    let on_path = std::env::var_os("PATH").into_iter().flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>());
    on_path.map(|dir| dir.join("go")).find(|p| p.is_file()).unwrap_or_else(|| PathBuf::from("/usr/local/go/bin/go"))
}

struct Workloads {
    shared: Arc<Shared>,
    bank: Arc<Mutex<BankLog>>,
    ledger: Arc<Mutex<LedgerLog>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    client: Client,
    registers: Arc<Table>,
    accounts: Arc<Table>,
    ledger_table: Arc<Table>,
}

fn client_options(durable: bool) -> ClientOptions {
    ClientOptions {
        name: "latsdb-chaos".into(),
        connect_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_secs(5),
        wait_for_cluster: Duration::from_secs(30),
        wait_durable: durable,
        ..ClientOptions::default()
    }
}

async fn connect(mgmd: &str, durable: bool) -> Result<Client, String> {
    Client::connect_with(mgmd, client_options(durable)).await.map_err(|e| format!("cannot connect to {mgmd}: {e}"))
}

async fn start_workloads(mgmd: &str, seed: u64) -> Result<Workloads, String> {
    let client = connect(mgmd, false).await?;
    let registers = workload::create_registers(&client).await?;
    let accounts = bank::create_bank(&client).await?;
    let ledger_table = bank::create_ledger(&client).await?;
    let shared = Shared::new();
    let bank_log = Arc::new(Mutex::new(BankLog::default()));
    let ledger_log = Arc::new(Mutex::new(LedgerLog::default()));
    let mut tasks = Vec::new();
    for worker in 1..=3 {
        let c = connect(mgmd, false).await?;
        tasks.push(tokio::spawn(workload::register_worker(worker, seed, c, registers.clone(), shared.clone())));
    }
    for worker in 5..=6 {
        let c = connect(mgmd, false).await?;
        tasks.push(tokio::spawn(bank::transfer_worker(
            worker,
            seed,
            c,
            accounts.clone(),
            shared.clone(),
            bank_log.clone(),
        )));
    }
    let c = connect(mgmd, false).await?;
    tasks.push(tokio::spawn(bank::audit_worker(7, c, accounts.clone(), shared.clone(), bank_log.clone())));
    for worker in 8..=9 {
        let c = connect(mgmd, true).await?;
        tasks.push(tokio::spawn(bank::ledger_worker(
            worker,
            c,
            ledger_table.clone(),
            shared.clone(),
            ledger_log.clone(),
        )));
    }
    Ok(Workloads { shared, bank: bank_log, ledger: ledger_log, tasks, client, registers, accounts, ledger_table })
}

pub fn run_schedule(
    exe: &Path,
    checker: &Path,
    seed: u64,
    seconds: u64,
    kinds: &[&str],
    dir: &Path,
) -> Result<Verdict, String> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let steps = schedule::draw(seed, seconds, kinds);
    let hosts = Hosts::create(&["mgmd", "node2", "node3", "node4", "node5"])?;
    if !hosts.netem_available() {
        println!(
            "  (this kernel has no netem qdisc: slow links are HTB rate limits, which delay and drop by queueing)"
        );
    }
    let mut cluster = Cluster::start(exe, dir, &hosts)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a runtime: {e}"))?;
    let mgmd = cluster.mgmd_address().to_string();
    rt.block_on(cluster::wait_all_started(&mgmd, Duration::from_secs(60)))?;
    let work = rt.block_on(start_workloads(&mgmd, seed))?;
    let mut log = format!("seed {seed}, {seconds} s, faults {}\n", kinds.join(","));
    let mut findings = Vec::new();
    let mut kills = Vec::new();
    let mut injected = 0;
    // Faults stop 10 s before the end, also when recoveries took longer
    // than the schedule planned for.
    let last_fault = work.shared.start + Duration::from_secs(seconds.saturating_sub(10));
    for step in &steps {
        let due = work.shared.start + Duration::from_millis(step.at_ms);
        if due.max(Instant::now()) >= last_fault {
            let line =
                format!("{} later fault(s) not injected: the schedule's time for faults is up", steps.len() - injected);
            println!("  {line}");
            let _ = writeln!(log, "{line}");
            break;
        }
        injected += 1;
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        let at = work.shared.start.elapsed();
        if matches!(step.fault, Fault::Kill { .. }) {
            kills.push(work.shared.now_ns());
        }
        let outcome = match inject(&rt, &mut cluster, &hosts, &work, &step.fault) {
            Ok(outcome) => outcome,
            Err(tooling) => {
                // ip or tc failed: the campaign, not the cluster. Undo what
                // was applied, and stop this schedule as one that could
                // not run.
                hosts.heal();
                let _ = recover(&rt, &cluster);
                return Err(format!("could not inject \"{}\": {tooling}", step.fault));
            }
        };
        let line = match outcome {
            Ok(recovered) => format!(
                "[{:6.1} s] {}: whole again after {:.1} s",
                at.as_secs_f64(),
                step.fault,
                recovered.as_secs_f64()
            ),
            Err(e) => {
                findings.push(format!("after \"{}\": {e}", step.fault));
                format!("[{:6.1} s] {}: {e}", at.as_secs_f64(), step.fault)
            }
        };
        println!("  {line}");
        let _ = writeln!(log, "{line}");
        // Written as it goes: a campaign stopped midway keeps what it did.
        let _ = std::fs::write(dir.join("faults.txt"), &log);
        cluster.check_alive()?;
    }
    std::thread::sleep((work.shared.start + Duration::from_secs(seconds)).saturating_duration_since(Instant::now()));
    hosts.heal();
    rt.block_on(judge(work, &mgmd, dir, checker, &kills, injected, findings))
}

/// Injects one fault, heals it, and waits until every data node is
/// started again: the inner result is how long that took after the heal,
/// or why the cluster did not heal (a finding); the outer error is a
/// command of the campaign's own (ip, tc) that failed.
fn inject(
    rt: &tokio::runtime::Runtime,
    cluster: &mut Cluster,
    hosts: &Hosts,
    work: &Workloads,
    fault: &Fault,
) -> Result<Result<Duration, String>, String> {
    let sleep = |ms: u64| std::thread::sleep(Duration::from_millis(ms));
    match *fault {
        Fault::Kill { node } => {
            let before = cluster.datanode_pid(node);
            cluster.signal(node, libc::SIGKILL);
            wait_replaced(cluster, &[(node, before)]);
        }
        Fault::Pause { node, ms } => {
            let stopped = cluster.signal(node, libc::SIGSTOP);
            sleep(ms);
            if stopped {
                cluster.signal(node, libc::SIGCONT);
            }
        }
        Fault::Isolate { node, ms } => {
            hosts.isolate(host_of(node), true)?;
            sleep(ms);
            hosts.isolate(host_of(node), false)?;
        }
        Fault::Cut { a, b, ms } => {
            hosts.cut(host_of(a), host_of(b), true)?;
            sleep(ms);
            hosts.cut(host_of(a), host_of(b), false)?;
        }
        Fault::IsolateMgmd { ms } => {
            hosts.isolate(0, true)?;
            sleep(ms);
            hosts.isolate(0, false)?;
        }
        Fault::RestartMgmd => {
            // A management server that cannot start again on its port and
            // folder is a finding, not a failure of the campaign's tools.
            if let Err(e) = cluster.restart_mgmd(hosts) {
                return Ok(Err(e));
            }
        }
        Fault::Slow { node, kbit, ms } => {
            hosts.slow(host_of(node), Some(kbit))?;
            sleep(ms);
            hosts.slow(host_of(node), None)?;
        }
        Fault::Restart { node, initial } => {
            let id = node.to_string();
            let mut args = vec![id.as_str(), "restart", "--timeout", "60"];
            if initial {
                args.push("--initial");
            }
            // A restart the cluster refuses (e.g. the node's partner is
            // down) is not an anomaly; the recovery below still applies.
            if let Err(e) = cluster.mgm(&args) {
                println!("    ({e})");
            }
        }
        Fault::CrashAll => return Ok(crash_all(rt, cluster, work)),
    }
    Ok(recover(rt, cluster))
}

/// Waits (up to 4 s) until the killed data nodes' angels have started
/// new processes, so that the recovery that follows does not take the
/// management server's view from before the kill for a whole cluster.
fn wait_replaced(cluster: &Cluster, killed: &[(u16, Option<i32>)]) {
    let deadline = Instant::now() + Duration::from_secs(4);
    while Instant::now() < deadline {
        let replaced = killed.iter().all(|&(node, before)| {
            let now = cluster.datanode_pid(node);
            now.is_some() && now != before
        });
        if replaced {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn recover(rt: &tokio::runtime::Runtime, cluster: &Cluster) -> Result<Duration, String> {
    let start = Instant::now();
    let mgmd = cluster.mgmd_address().to_string();
    if rt.block_on(cluster::wait_all_started(&mgmd, RECOVERY_BEFORE_START)).is_ok() {
        return Ok(start.elapsed());
    }
    let down = rt.block_on(async {
        match connect(&mgmd, false).await {
            Ok(c) => cluster::not_started(&c).await,
            Err(_) => DATA_NODES.to_vec(),
        }
    });
    for node in &down {
        let _ = cluster.mgm(&[&node.to_string(), "start", "--no-wait"]);
    }
    rt.block_on(cluster::wait_all_started(&mgmd, RECOVERY)).map(|_| start.elapsed()).map_err(|e| {
        format!(
            "the cluster did not heal: {e} (nodes {down:?} were started by mgm after {} s)",
            RECOVERY_BEFORE_START.as_secs()
        )
    })
}

/// Holds the workers, kills every data node, waits for the system restart
/// their angels make, and starts a new era of the register history
/// (commits not yet durable may be lost, as documented).
fn crash_all(rt: &tokio::runtime::Runtime, cluster: &mut Cluster, work: &Workloads) -> Result<Duration, String> {
    let shared = &work.shared;
    shared.paused.store(true, Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(30);
    while shared.in_flight.load(Ordering::SeqCst) > 0 {
        if Instant::now() >= deadline {
            shared.paused.store(false, Ordering::SeqCst);
            return Err("workers did not finish their operations within 30 s before the crash".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(shared.in_flight.load(Ordering::SeqCst), 0, "the cluster is crashed with operations under way");
    let before: Vec<(u16, Option<i32>)> = DATA_NODES.iter().map(|&n| (n, cluster.datanode_pid(n))).collect();
    for node in DATA_NODES {
        cluster.signal(node, libc::SIGKILL);
    }
    wait_replaced(cluster, &before);
    let recovered = recover(rt, cluster);
    assert!(shared.paused.load(Ordering::SeqCst), "workers ran across the crash");
    shared.era.fetch_add(1, Ordering::SeqCst);
    shared.paused.store(false, Ordering::SeqCst);
    recovered
}

/// Stops the workers and judges what they saw.
async fn judge(
    work: Workloads,
    mgmd: &str,
    dir: &Path,
    checker: &Path,
    kills: &[u64],
    faults: usize,
    mut findings: Vec<String>,
) -> Result<Verdict, String> {
    if let Err(e) = cluster::wait_all_started(mgmd, RECOVERY).await {
        findings.push(format!("after the last heal: {e}"));
    }
    work.shared.stop.store(true, Ordering::SeqCst);
    for task in work.tasks {
        let abort = task.abort_handle();
        if tokio::time::timeout(Duration::from_secs(30), task).await.is_err() {
            // Its operation could still commit after the history is taken:
            // judging it would not be sound.
            abort.abort();
            return Err("could not judge: a worker did not stop within 30 s".into());
        }
    }
    final_register_reads(&work.client, &work.registers, &work.shared).await;
    match final_audit(&work.client, &work.accounts).await {
        Some(total) if total == bank::ACCOUNTS * bank::OPENING => {}
        Some(total) => {
            findings.push(format!("bank: the final total is {total}, not {}", bank::ACCOUNTS * bank::OPENING))
        }
        None => findings.push("bank: no audit succeeded after the run".into()),
    }
    let bank_log = std::mem::take(&mut *work.bank.lock().map_err(|_| "bank log poisoned")?);
    for (at, total) in &bank_log.wrong_totals {
        findings.push(format!("bank: an audit at {:.3} s saw a total of {total}", *at as f64 / 1e9));
    }
    let ledger_log = std::mem::take(&mut *work.ledger.lock().map_err(|_| "ledger log poisoned")?);
    findings.extend(bank::check_ledger(&work.client, &work.ledger_table, &ledger_log).await?);
    let history = std::mem::take(&mut *work.shared.history.lock().map_err(|_| "history poisoned")?);
    let checker_line = run_checker(checker, dir, &history, &mut findings)?;
    let successes = std::mem::take(&mut *work.shared.successes.lock().map_err(|_| "successes poisoned")?);
    Ok(Verdict {
        findings,
        faults,
        register_ops: history.len(),
        transfers: bank_log.transfers,
        audits: bank_log.audits,
        ledger_rows: ledger_log.acknowledged.len(),
        slowest_back_ms: slowest_back_ms(kills, &successes),
        checker: checker_line,
    })
}

/// A locking read of every register, recorded as worker 0's: the values
/// the run leaves are judged with the rest.
async fn final_register_reads(client: &Client, table: &Arc<Table>, shared: &Shared) {
    for key in 1..=workload::REGISTERS {
        let call = shared.now_ns();
        let mut tx = client.transaction();
        let Ok(op) =
            latsdb_client::Op::read_locked(table, &[latsdb_types::Value::Int(key)], latsdb_client::LockMode::Exclusive)
        else {
            continue;
        };
        let Ok(mut found) = tx.execute(vec![op]).await else { continue };
        let _ = tx.commit().await;
        let Some(value) = found.pop().and_then(|o| o.into_row()).and_then(|r| r.get(1).as_i64()) else { continue };
        let era = shared.era.load(Ordering::SeqCst);
        let op = RegisterOp {
            worker: 0,
            key,
            era,
            kind: "lread",
            from: 0,
            value,
            read: value,
            ok: true,
            unknown: false,
            call,
            ret: shared.now_ns(),
        };
        if let Ok(mut h) = shared.history.lock() {
            h.push(op);
        }
    }
}

async fn final_audit(client: &Client, table: &Arc<Table>) -> Option<i64> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(total) = bank::audit(client, table).await {
            return Some(total);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn run_checker(
    checker: &Path,
    dir: &Path,
    history: &[RegisterOp],
    findings: &mut Vec<String>,
) -> Result<String, String> {
    let path = dir.join("history.jsonl");
    let mut text = String::with_capacity(history.len() * 120);
    for op in history {
        text += &serde_json::to_string(op).map_err(|e| e.to_string())?;
        text.push('\n');
    }
    std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    let output = std::process::Command::new(checker)
        .arg(&path)
        .output()
        .map_err(|e| format!("cannot run the checker {}: {e}", checker.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout).trim().to_string();
    let _ = std::fs::write(dir.join("verdict.json"), &stdout);
    let verdict: serde_json::Value = serde_json::from_str(&stdout).map_err(|_| {
        format!("the checker answered no verdict: {} {}", stdout, String::from_utf8_lossy(&output.stderr).trim())
    })?;
    if let Some(failure) = verdict.get("failure").and_then(|f| f.as_str()) {
        findings.push(format!("registers: {failure}"));
    }
    if verdict.get("timed_out").and_then(|t| t.as_bool()) == Some(true) {
        findings.push("registers: the checker timed out on a key (no verdict for it)".into());
    }
    let flag = |name: &str| verdict.get(name).and_then(|v| v.as_bool()).unwrap_or(false);
    Ok(format!(
        "Porcupine: linearizable {}, committed reads regular {}, all reads atomic {} ({:.1} s)",
        flag("linearizable"),
        flag("regular"),
        flag("atomic_reads"),
        verdict.get("seconds").and_then(|s| s.as_f64()).unwrap_or(0.0)
    ))
}

/// For each kill, the time until every worker completed an operation
/// after it; the largest, in ms (None without a kill).
fn slowest_back_ms(kills: &[u64], successes: &[(u32, u64)]) -> Option<u64> {
    if kills.is_empty() {
        return None;
    }
    let workers: std::collections::BTreeSet<u32> = successes.iter().map(|(w, _)| *w).collect();
    let mut slowest = 0;
    for &kill in kills {
        for &w in &workers {
            let first = successes.iter().filter(|(x, t)| *x == w && *t > kill).map(|(_, t)| *t).min();
            if let Some(t) = first {
                slowest = slowest.max((t - kill) / 1_000_000);
            }
        }
    }
    Some(slowest)
}
