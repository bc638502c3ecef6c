//! The load and run phases of `latsdb bench ycsb`: client tasks, the
//! operations on the native client, per-operation latency and the
//! timeline, the printed summary (in YCSB's `[OP], Metric, value` form)
//! and the results JSON.

use super::db::{Db, Session};
use super::generator::{InsertSequence, KeyChooser, Operation, ScanLength, Workload};
use super::YcsbArgs;
use crate::report::{count_error, line_chart_svg, new_histogram, progress, Panel};
use crate::Rng;
use hdrhistogram::Histogram;
use latsdb_client::{Client, Table};
use latsdb_types::schema::{ColumnDef, ColumnType, Storage, TableSpec};
use latsdb_types::DbError;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Latencies and failures of one kind of operation.
struct OpStats {
    latency: Histogram<u64>,
    failed: u64,
    errors: BTreeMap<String, (u64, String)>,
}

impl OpStats {
    fn new() -> OpStats {
        OpStats { latency: new_histogram(), failed: 0, errors: BTreeMap::new() }
    }

    fn add(&mut self, other: &OpStats) {
        // Both histograms have the same bounds, so adding cannot fail.
        let _ = self.latency.add(&other.latency);
        self.failed += other.failed;
        for (code, (count, message)) in &other.errors {
            self.errors.entry(code.clone()).or_insert_with(|| (0, message.clone())).0 += count;
        }
    }

    fn json(&self) -> serde_json::Value {
        let h = &self.latency;
        serde_json::json!({
            "ops": h.len(), "failed": self.failed,
            "avg_us": h.mean(), "p95_us": h.value_at_quantile(0.95), "p99_us": h.value_at_quantile(0.99), "max_us": h.max(),
            "errors": self.errors.iter().map(|(c, (n, m))| serde_json::json!({"code": c, "count": n, "example": m})).collect::<Vec<_>>(),
        })
    }
}

type Stats = BTreeMap<Operation, OpStats>;

/// Why an operation failed: an error code (the database's, or YCSB's
/// NOT_FOUND for a missing record) and a message.
pub(super) struct Failure {
    code: String,
    message: String,
}

impl From<DbError> for Failure {
    fn from(e: DbError) -> Failure {
        Failure { code: format!("{:?}", e.code), message: e.message }
    }
}

impl Failure {
    pub(super) fn new(code: &str, message: String) -> Failure {
        Failure { code: code.to_string(), message }
    }
}

fn merge(into: &mut Stats, from: &Stats) {
    for (op, s) in from {
        into.entry(*op).or_insert_with(OpStats::new).add(s);
    }
}

/// What the client tasks of a phase share.
struct Shared {
    db: Db,
    workload: Workload,
    fields: Vec<String>,
    inserts: InsertSequence,
    /// Operations started (run phase), or the next record to load.
    started: AtomicU64,
    /// Operations that succeeded (a read-modify-write once, though its
    /// read and update are measured as READ and UPDATE too, as YCSB does).
    completed: AtomicU64,
    /// Each task's statistics since the last timeline line.
    tasks: Vec<Mutex<Stats>>,
    /// Why a task could not connect to the target, if one could not.
    connect_failed: Mutex<Option<String>>,
}

impl Shared {
    /// Records an operation's latency or failure; says whether it succeeded.
    fn record(&self, task: usize, op: Operation, began: Instant, result: Result<(), Failure>) -> bool {
        let succeeded = result.is_ok();
        let mut stats = self.tasks[task].lock().unwrap_or_else(|p| p.into_inner());
        let s = stats.entry(op).or_insert_with(OpStats::new);
        match result {
            Ok(()) => {
                let us = began.elapsed().as_micros().clamp(1, 60_000_000) as u64;
                s.latency.saturating_record(us);
            }
            Err(e) => {
                s.failed += 1;
                count_error(&mut s.errors, e.code, &e.message);
            }
        }
        succeeded
    }

    /// Takes every task's statistics since the last call.
    fn take(&self) -> Stats {
        let mut all = Stats::new();
        for task in &self.tasks {
            let taken = std::mem::take(&mut *task.lock().unwrap_or_else(|p| p.into_inner()));
            merge(&mut all, &taken);
        }
        all
    }

    fn value(&self, rng: &mut Rng) -> String {
        (0..self.workload.fieldlength).map(|_| (b' ' + (rng.next() % 95) as u8) as char).collect()
    }

    /// Each task's connection to the target; a task that cannot connect
    /// leaves the reason here and stops.
    async fn session(&self) -> Option<Session> {
        match self.db.session().await {
            Ok(session) => Some(session),
            Err(e) => {
                let mut failed = self.connect_failed.lock().unwrap_or_else(|p| p.into_inner());
                failed.get_or_insert(e.message);
                None
            }
        }
    }
}

pub(super) async fn run(args: YcsbArgs, workload: Workload) -> Result<(), String> {
    let load = args.phases.iter().any(|p| p == "load");
    let (db, target) = match args.db.strip_prefix("redis://") {
        Some(address) => (
            Db::Redis { address: address.trim_end_matches('/').to_string() },
            serde_json::json!({"db": "redis", "address": address}),
        ),
        None if args.db.starts_with("mysql://") => mysql_target(&args, &workload, load).await?,
        None if args.db == "latsdb" => {
            let options = latsdb_client::ClientOptions::with_tls_dir(args.tls_dir.as_deref())?;
            let client = Client::connect_with(&args.mgmd, options).await.map_err(|e| e.to_string())?;
            let table = prepare_table(&client, &args, &workload, load).await?;
            let target = serde_json::json!({"db": "latsdb", "data_nodes": client.layout().datanodes.len(), "replicas": client.layout().replicas});
            (Db::Native { client, table }, target)
        }
        None => {
            return Err(format!("--db {}: use latsdb, redis://HOST:PORT or mysql://USER:PASSWORD@HOST:PORT", args.db))
        }
    };
    let fields: Vec<String> = (0..workload.fieldcount).map(|i| format!("FIELD{i}")).collect();
    println!(
        "ycsb workload {}: {} records of {} x {} bytes, {} client tasks, request distribution {:?}",
        args.workload,
        workload.recordcount,
        workload.fieldcount,
        workload.fieldlength,
        args.threads,
        workload.requestdistribution
    );
    let mut phases = Vec::new();
    for phase in &args.phases {
        let shared = Arc::new(Shared {
            db: db.clone(),
            fields: fields.clone(),
            inserts: InsertSequence::new(workload.insertstart + workload.recordcount),
            started: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            tasks: (0..args.threads).map(|_| Mutex::new(Stats::new())).collect(),
            workload: workload.clone(),
            connect_failed: Mutex::new(None),
        });
        let result = match phase.as_str() {
            "load" => load_phase(&shared, &args).await,
            _ => run_phase(&shared, &args).await,
        };
        if let Some(why) = shared.connect_failed.lock().unwrap_or_else(|p| p.into_inner()).take() {
            return Err(why);
        }
        print_summary(phase, &result);
        phases.push(result);
    }
    write_results(&args, &workload, target, &phases)?;
    let failed: u64 = phases.iter().flat_map(|p| p.totals.values()).map(|s| s.failed).sum();
    match failed {
        0 => Ok(()),
        n => Err(format!("{n} operations failed; see the Return=ERROR lines above")),
    }
}

/// A MySQL server as the target: `mysql://USER:PASSWORD@HOST:PORT`, the
/// database from `--database` (a database in the URL is ignored: YCSB's
/// table is always `--database`.`--table`).
async fn mysql_target(args: &YcsbArgs, w: &Workload, fresh: bool) -> Result<(Db, serde_json::Value), String> {
    if args.disk {
        return Err(
            "--disk applies to --db latsdb; for the SQL node, put the cluster's default_column_storage on disk".into(),
        );
    }
    // Messages name the server, never the password in the URL.
    let url = mysql_async::Opts::from_url(&args.db).map_err(|e| format!("--db {}: {e}", target_name(&args.db)))?;
    let shown = format!("{}:{}", url.ip_or_hostname(), url.tcp_port());
    // Never the server's Unix socket: the URL names where to go.
    let opts: mysql_async::Opts =
        mysql_async::OptsBuilder::from_opts(url).db_name(Some(&args.database)).prefer_socket(false).into();
    let described = |e: Failure| format!("--db mysql://{shown}: {}: {}", e.code, e.message);
    if fresh {
        super::db::mysql_create_table(&opts, &args.database, &args.table, w.fieldcount).await.map_err(described)?;
    }
    let statements = Arc::new(super::db::Statements::new(&args.table, w.fieldcount));
    Ok((Db::Mysql { opts, statements }, serde_json::json!({"db": "mysql", "address": shown})))
}

async fn prepare_table(client: &Client, args: &YcsbArgs, w: &Workload, fresh: bool) -> Result<Arc<Table>, String> {
    // As YCSB's JDBC binding creates it.
    let spec = fresh.then(|| {
        let mut spec =
            TableSpec::new(&args.database, &args.table).column(ColumnDef::new("YCSB_KEY", ColumnType::VarChar(255)));
        for i in 0..w.fieldcount {
            let storage = if args.disk { Storage::Disk } else { Storage::Memory };
            spec = spec.column(ColumnDef::new(format!("FIELD{i}"), ColumnType::Text).storage(storage));
        }
        spec.primary_key(&["YCSB_KEY"])
    });
    crate::bench_table(client, &args.database, &args.table, spec, "load").await
}

/// Results of a phase: totals per operation, seconds, the timeline.
struct PhaseResult {
    name: String,
    seconds: f64,
    /// Operations that succeeded.
    ok_ops: u64,
    totals: Stats,
    timeline: Vec<Interval>,
}

/// One timeline row: when it ended, how long it was, what succeeded in it.
struct Interval {
    at: f64,
    seconds: f64,
    ok_ops: u64,
    stats: Stats,
}

async fn load_phase(shared: &Arc<Shared>, args: &YcsbArgs) -> PhaseResult {
    let total = shared.workload.recordcount;
    let bar = progress("load", Some(total));
    let tasks: Vec<_> = (0..args.threads)
        .map(|t| {
            let shared = shared.clone();
            tokio::spawn(async move {
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (t as u64 + 1));
                let Some(mut session) = shared.session().await else { return };
                loop {
                    let n = shared.started.fetch_add(1, Ordering::Relaxed);
                    if n >= shared.workload.recordcount {
                        return;
                    }
                    let began = Instant::now();
                    let result = insert(&shared, &mut session, &mut rng, shared.workload.insertstart + n).await;
                    if result.is_ok() {
                        shared.completed.fetch_add(1, Ordering::Relaxed);
                    }
                    shared.record(t, Operation::Insert, began, result);
                }
            })
        })
        .collect();
    let result = drive(shared, args, "load", tasks, &bar, |s| s.started.load(Ordering::Relaxed).min(total)).await;
    bar.finish_and_clear();
    result
}

async fn run_phase(shared: &Arc<Shared>, args: &YcsbArgs) -> PhaseResult {
    let w = &shared.workload;
    let ops = w.operationcount;
    let bar = progress("run", (ops > 0).then_some(ops));
    let deadline = Instant::now() + Duration::from_secs_f64(args.duration);
    let expected_inserts = (ops as f64 * w.insertproportion * 2.0) as u64;
    // Throttled: each task starts an operation every `gap`, as YCSB does.
    let gap = (args.target > 0).then(|| Duration::from_secs_f64(args.threads as f64 / args.target as f64));
    let tasks: Vec<_> = (0..args.threads)
        .map(|t| {
            let shared = shared.clone();
            tokio::spawn(async move {
                let mut rng = Rng(0xD1B5_4A32_D192_ED03 ^ (t as u64 + 1));
                let mut chooser = KeyChooser::new(&shared.workload, expected_inserts);
                let mut lengths = ScanLength::new(&shared.workload);
                let mut next_at = tokio::time::Instant::now();
                let Some(mut session) = shared.session().await else { return };
                while Instant::now() < deadline {
                    if ops > 0 && shared.started.fetch_add(1, Ordering::Relaxed) >= ops {
                        return;
                    }
                    if let Some(gap) = gap {
                        next_at += gap;
                        tokio::time::sleep_until(next_at).await;
                    }
                    one_operation(&shared, &mut session, t, &mut rng, &mut chooser, &mut lengths).await;
                }
            })
        })
        .collect();
    let result = drive(shared, args, "run", tasks, &bar, |s| s.started.load(Ordering::Relaxed)).await;
    bar.finish_and_clear();
    result
}

/// Waits for the tasks, printing a timeline line every interval.
async fn drive(
    shared: &Arc<Shared>,
    args: &YcsbArgs,
    name: &str,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    bar: &indicatif::ProgressBar,
    position: impl Fn(&Shared) -> u64,
) -> PhaseResult {
    let start = Instant::now();
    let interval = Duration::from_secs_f64(args.interval);
    let mut result =
        PhaseResult { name: name.to_string(), seconds: 0.0, ok_ops: 0, totals: Stats::new(), timeline: Vec::new() };
    let (mut last, mut last_ok) = (start, 0);
    let all = futures_join(tasks);
    tokio::pin!(all);
    loop {
        let tick = tokio::time::sleep(interval.saturating_sub(last.elapsed()));
        let done = tokio::select! {
            _ = &mut all => true,
            _ = tick => false,
        };
        let now = Instant::now();
        let stats = shared.take();
        let ok = shared.completed.load(Ordering::Relaxed);
        let row = Interval {
            at: start.elapsed().as_secs_f64(),
            seconds: now.duration_since(last).as_secs_f64(),
            ok_ops: ok - last_ok,
            stats,
        };
        bar.set_position(position(shared));
        if !row.stats.is_empty() {
            bar.println(timeline_line(name, &row));
            merge(&mut result.totals, &row.stats);
            result.timeline.push(row);
        }
        (last, last_ok) = (now, ok);
        if done {
            break;
        }
    }
    result.seconds = start.elapsed().as_secs_f64();
    result.ok_ops = shared.completed.load(Ordering::Relaxed);
    result
}

/// Waits for every task (a task that panicked is reported, not hidden).
async fn futures_join(tasks: Vec<tokio::task::JoinHandle<()>>) {
    for task in tasks {
        if let Err(e) = task.await {
            eprintln!("a client task stopped: {e}");
        }
    }
}

fn timeline_line(phase: &str, row: &Interval) -> String {
    let mut line = format!("[{phase}] {:>6.1} s: {:>9.0} ops/s", row.at, row.ok_ops as f64 / row.seconds.max(1e-9));
    for (op, s) in &row.stats {
        let h = &s.latency;
        line.push_str(&format!(
            "; {} {} avg {:.0} p95 {} p99 {} us",
            op.name(),
            h.len(),
            h.mean(),
            h.value_at_quantile(0.95),
            h.value_at_quantile(0.99)
        ));
        if s.failed > 0 {
            line.push_str(&format!(" ({} FAILED)", s.failed));
        }
    }
    line
}

async fn one_operation(
    shared: &Shared,
    session: &mut Session,
    task: usize,
    rng: &mut Rng,
    chooser: &mut KeyChooser,
    lengths: &mut ScanLength,
) {
    let op = shared.workload.choose(rng);
    let began = Instant::now();
    let result = match op {
        Operation::Read => {
            let keynum = chooser.next(rng, shared.inserts.limit());
            read(shared, session, rng, keynum).await
        }
        Operation::Update => {
            let keynum = chooser.next(rng, shared.inserts.limit());
            update(shared, session, rng, keynum).await
        }
        Operation::Insert => {
            let keynum = shared.inserts.next();
            let result = insert(shared, session, rng, keynum).await;
            // Acknowledged even when it failed, as YCSB does: the key
            // space does not stall behind one failure.
            shared.inserts.acknowledge(keynum);
            result
        }
        Operation::Scan => {
            let start = chooser.next(rng, shared.inserts.limit());
            let length = lengths.next(rng);
            scan(shared, session, rng, start, length).await
        }
        Operation::ReadModifyWrite => {
            let keynum = chooser.next(rng, shared.inserts.limit());
            read_modify_write(shared, session, task, rng, keynum).await
        }
    };
    if result.is_ok() {
        shared.completed.fetch_add(1, Ordering::Relaxed);
    }
    shared.record(task, op, began, result);
}

/// A read then an update of one record, each also measured on its own
/// (as YCSB measures them).
async fn read_modify_write(
    shared: &Shared,
    session: &mut Session,
    task: usize,
    rng: &mut Rng,
    keynum: u64,
) -> Result<(), Failure> {
    let began = Instant::now();
    let read = read(shared, session, rng, keynum).await;
    if !shared.record(task, Operation::Read, began, read) {
        return Err(Failure::new("READ_FAILED", "the read of a read-modify-write failed".into()));
    }
    let began = Instant::now();
    let update = update(shared, session, rng, keynum).await;
    if !shared.record(task, Operation::Update, began, update) {
        return Err(Failure::new("UPDATE_FAILED", "the update of a read-modify-write failed".into()));
    }
    Ok(())
}

fn one_field<'a>(shared: &'a Shared, rng: &mut Rng) -> &'a str {
    &shared.fields[(rng.next() % shared.fields.len() as u64) as usize]
}

async fn read(shared: &Shared, session: &mut Session, rng: &mut Rng, keynum: u64) -> Result<(), Failure> {
    let field = (!shared.workload.readallfields).then(|| one_field(shared, rng));
    let key = shared.workload.key_name(keynum);
    match session.read(&key, field).await? {
        true => Ok(()),
        false => Err(Failure::new("NOT_FOUND", format!("record {key} is missing"))),
    }
}

async fn update(shared: &Shared, session: &mut Session, rng: &mut Rng, keynum: u64) -> Result<(), Failure> {
    let values: Vec<(&str, String)> = match shared.workload.writeallfields {
        true => shared.fields.iter().map(|f| (f.as_str(), shared.value(rng))).collect(),
        false => vec![(one_field(shared, rng), shared.value(rng))],
    };
    session.update(&shared.workload.key_name(keynum), &values).await
}

async fn insert(shared: &Shared, session: &mut Session, rng: &mut Rng, keynum: u64) -> Result<(), Failure> {
    let values: Vec<(&str, String)> = shared.fields.iter().map(|f| (f.as_str(), shared.value(rng))).collect();
    session.insert(&shared.workload.key_name(keynum), &values).await
}

/// Up to `length` records in key order from record `start`'s key (along
/// the primary key's ordered index in latsdb).
async fn scan(shared: &Shared, session: &mut Session, rng: &mut Rng, start: u64, length: u64) -> Result<(), Failure> {
    let field = (!shared.workload.readallfields).then(|| one_field(shared, rng));
    session.scan(&shared.workload.key_name(start), length, field).await
}

/// YCSB's summary form: `[OVERALL], Throughput(ops/sec), ...` and per operation.
fn print_summary(phase: &str, r: &PhaseResult) {
    println!("[{}] [OVERALL], RunTime(ms), {:.0}", phase.to_uppercase(), r.seconds * 1000.0);
    println!("[{}] [OVERALL], Throughput(ops/sec), {:.1}", phase.to_uppercase(), r.ok_ops as f64 / r.seconds.max(1e-9));
    for (op, s) in &r.totals {
        let h = &s.latency;
        let name = op.name();
        println!("[{name}], Operations, {}", h.len());
        println!("[{name}], AverageLatency(us), {:.1}", h.mean());
        println!("[{name}], 95thPercentileLatency(us), {}", h.value_at_quantile(0.95));
        println!("[{name}], 99thPercentileLatency(us), {}", h.value_at_quantile(0.99));
        println!("[{name}], Return=OK, {}", h.len());
        for (code, (count, message)) in &s.errors {
            println!("[{name}], Return=ERROR, {count} ({code}, e.g. {message})");
        }
    }
}

fn write_results(
    args: &YcsbArgs,
    w: &Workload,
    target: serde_json::Value,
    phases: &[PhaseResult],
) -> Result<(), String> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let output =
        args.output.clone().unwrap_or_else(|| PathBuf::from(format!("results/ycsb-{}-{now}.json", args.workload)));
    let ops_json = |stats: &Stats| -> serde_json::Value {
        stats.iter().map(|(op, s)| (op.name().to_string(), s.json())).collect::<serde_json::Map<_, _>>().into()
    };
    let json = serde_json::json!({
        "benchmark": "ycsb",
        "workload": args.workload,
        "properties": format!("{w:?}"),
        "config": { "threads": args.threads, "target": args.target, "duration_s": args.duration, "disk": args.disk },
        "target": target,
        "machine": { "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0) },
        "unix_time": now,
        "phases": phases.iter().map(|p| serde_json::json!({
            "phase": p.name, "seconds": p.seconds, "ops": p.ok_ops,
            "ops_per_sec": p.ok_ops as f64 / p.seconds.max(1e-9),
            "failed": p.totals.values().map(|s| s.failed).sum::<u64>(),
            "operations": ops_json(&p.totals),
            "timeline": p.timeline.iter().map(|row| serde_json::json!({
                "at_s": row.at, "ops_per_sec": row.ok_ops as f64 / row.seconds.max(1e-9),
                "operations": ops_json(&row.stats),
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    });
    if let Some(parent) = output.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    let text = serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?;
    std::fs::write(&output, text).map_err(|e| format!("cannot write {}: {e}", output.display()))?;
    let plot = output.with_extension("svg");
    let title = format!("YCSB workload {} on {}, {} client tasks", args.workload, target_name(&args.db), args.threads);
    std::fs::write(&plot, timeline_svg(&title, phases)).map_err(|e| format!("cannot write {}: {e}", plot.display()))?;
    println!("results written to {}  plot: {}", output.display(), plot.display());
    Ok(())
}

fn target_name(db: &str) -> &str {
    // The address without credentials: the part after '@' if any.
    db.rsplit_once('@').map_or(db, |(_, host)| host)
}

/// Each phase's timeline as two panels: throughput, and each operation's
/// average and 99th-percentile latency, per interval.
fn timeline_svg(title: &str, phases: &[PhaseResult]) -> String {
    let mut panels = Vec::new();
    for p in phases {
        let throughput = p.timeline.iter().map(|row| (row.at, row.ok_ops as f64 / row.seconds.max(1e-9))).collect();
        panels.push(Panel {
            title: format!("{}: throughput (ops/s)", p.name),
            x_label: "seconds".into(),
            lines: vec![("ops/s".into(), throughput)],
        });
        let mut lines = Vec::new();
        for op in p.totals.keys() {
            let latency = |q: Option<f64>| -> Vec<(f64, f64)> {
                p.timeline
                    .iter()
                    .filter_map(|row| {
                        let h = &row.stats.get(op)?.latency;
                        (!h.is_empty()).then(|| (row.at, q.map_or(h.mean(), |q| h.value_at_quantile(q) as f64)))
                    })
                    .collect()
            };
            lines.push((format!("{} avg", op.name()), latency(None)));
            lines.push((format!("{} p99", op.name()), latency(Some(0.99))));
        }
        panels.push(Panel { title: format!("{}: latency (us)", p.name), x_label: "seconds".into(), lines });
    }
    line_chart_svg(title, &panels)
}
