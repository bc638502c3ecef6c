//! `latsdb bench flex`: a flexAsynch-style benchmark of the native client.
//!
//! Every client thread keeps `parallel` batches in flight; a batch is
//! `batch` single-row operations on random keys sent in one round trip (each
//! its own transaction, or with `--transactions` one transaction per batch).
//! Phases: insert (loads `rows` rows), read and update (timed: warm-up,
//! measured run, cool-down), delete (removes every row).

use crate::report::{new_histogram, progress, PhaseResult};
use crate::Rng;
use clap::Args;
use hdrhistogram::Histogram;
use latsdb_client::{Client, Found, Lookups, Op, Outcome, Table};
use latsdb_types::schema::{ColumnDef, ColumnType, IntWidth, Storage, TableSpec};
use latsdb_types::Value;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Args, Clone, Debug)]
pub struct FlexArgs {
    /// Management server address.
    #[arg(long, env = "LATSDB_MGMD", default_value = "127.0.0.1:1186")]
    pub mgmd: String,
    /// Directory with the cluster's ca.pem and an api certificate, for a cluster that requires TLS (`latsdb certs create`).
    #[arg(long, env = "LATSDB_TLS_DIR")]
    pub tls_dir: Option<std::path::PathBuf>,
    /// Client threads.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Batches in flight per client thread.
    #[arg(long, default_value_t = 16)]
    pub parallel: usize,
    /// Operations per batch (one round trip).
    #[arg(long, default_value_t = 100)]
    pub batch: usize,
    /// Run each batch as one transaction instead of independent operations.
    #[arg(long)]
    pub transactions: bool,
    /// Non-key attributes per row.
    #[arg(long, default_value_t = 1)]
    pub attributes: usize,
    /// Bytes per attribute.
    #[arg(long, default_value_t = 100)]
    pub attribute_size: usize,
    /// How many of the attributes (the last ones) the insert phase's table
    /// keeps on disk (STORAGE DISK) rather than in memory.
    #[arg(long, default_value_t = 0)]
    pub disk_attributes: usize,
    /// Rows loaded by the insert phase and addressed by the others.
    #[arg(long, default_value_t = 1_000_000)]
    pub rows: u64,
    /// Phases to run, in order: insert, read, update, mixed, delete.
    #[arg(long, value_delimiter = ',', default_value = "insert,read,update,delete")]
    pub phases: Vec<String>,
    /// Seconds of warm-up before measuring (timed phases).
    #[arg(long, default_value_t = 2.0)]
    pub warmup: f64,
    /// Seconds measured (timed phases).
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Seconds of load after measuring (timed phases).
    #[arg(long, default_value_t = 1.0)]
    pub cooldown: f64,
    /// Write results as JSON here (default: results/flex-<unix time>.json).
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Write per-second successful and failed operations of every phase to
    /// this CSV file (phase,second,ok_ops,failed_ops).
    #[arg(long)]
    pub timeline: Option<PathBuf>,
    #[arg(long, default_value = "bench")]
    pub database: String,
    #[arg(long, default_value = "flex")]
    pub table: String,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    Insert,
    Read,
    Update,
    /// Each batch is all reads or all updates, half and half (timed).
    Mixed,
    Delete,
}

impl Phase {
    fn parse(s: &str) -> Result<Phase, String> {
        match s.trim() {
            "insert" => Ok(Phase::Insert),
            "read" => Ok(Phase::Read),
            "update" => Ok(Phase::Update),
            "mixed" => Ok(Phase::Mixed),
            "delete" => Ok(Phase::Delete),
            other => Err(format!("unknown phase '{other}'; use insert, read, update, mixed or delete")),
        }
    }
    fn name(self) -> &'static str {
        match self {
            Phase::Insert => "insert",
            Phase::Read => "read",
            Phase::Update => "update",
            Phase::Mixed => "mixed",
            Phase::Delete => "delete",
        }
    }
    fn timed(self) -> bool {
        matches!(self, Phase::Read | Phase::Update | Phase::Mixed)
    }
}

struct Shared {
    client: Client,
    table: Arc<Table>,
    args: FlexArgs,
    phase: Phase,
    /// Next key to insert/delete (untimed phases).
    cursor: AtomicU64,
    done_ops: AtomicU64,
    start: Instant,
    measure_from: Instant,
    measure_to: Instant,
    stop_at: Instant,
    /// Per second since the phase started: (ok, failed) operations.
    timeline: std::sync::Mutex<Vec<(u64, u64)>>,
}

struct WorkerResult {
    ops: u64,
    failed: u64,
    errors: std::collections::BTreeMap<String, (u64, String)>,
    batches: u64,
    latency: Histogram<u64>,
}

fn validate(args: &FlexArgs) -> Result<Vec<Phase>, String> {
    if args.threads == 0 || args.parallel == 0 || args.batch == 0 {
        return Err("--threads, --parallel and --batch must be at least 1".into());
    }
    if args.rows == 0 {
        return Err("--rows must be at least 1".into());
    }
    if args.attributes == 0 || args.attributes > 100 || args.attribute_size == 0 || args.attribute_size > 65_535 {
        return Err("--attributes must be 1..=100 and --attribute-size 1..=65535".into());
    }
    let finite_nonneg = |x: f64| x.is_finite() && x >= 0.0;
    if !finite_nonneg(args.duration)
        || args.duration == 0.0
        || !finite_nonneg(args.warmup)
        || !finite_nonneg(args.cooldown)
    {
        return Err("--duration must be positive; --warmup and --cooldown not negative".into());
    }
    args.phases.iter().map(|p| Phase::parse(p)).collect()
}

pub fn run(args: FlexArgs) -> Result<(), String> {
    let phases = validate(&args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the client runtime: {e}"))?;
    runtime.block_on(run_async(args, phases))
}

async fn run_async(args: FlexArgs, phases: Vec<Phase>) -> Result<(), String> {
    let options = latsdb_client::ClientOptions::with_tls_dir(args.tls_dir.as_deref())?;
    let client = Client::connect_with(&args.mgmd, options).await.map_err(|e| e.to_string())?;
    let table = prepare_table(&client, &args, phases.first() == Some(&Phase::Insert)).await?;
    println!(
        "flex: {} thread(s) x {} batches in flight x {} ops per batch{}, {} rows of {} x {} bytes, {} partitions",
        args.threads,
        args.parallel,
        args.batch,
        if args.transactions { " (one transaction per batch)" } else { "" },
        args.rows,
        args.attributes,
        args.attribute_size,
        table.def().partitions
    );
    let mut results = Vec::new();
    for phase in phases {
        let r = run_phase(&client, &table, &args, phase).await?;
        r.print();
        results.push(r);
    }
    let output = args.output.clone().unwrap_or_else(|| {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        PathBuf::from(format!("results/flex-{t}.json"))
    });
    let json = serde_json::json!({
        "benchmark": "flex",
        "config": {
            "threads": args.threads, "parallel": args.parallel, "batch": args.batch,
            "transactions": args.transactions, "attributes": args.attributes,
            "attribute_size": args.attribute_size, "rows": args.rows,
            "warmup_s": args.warmup, "duration_s": args.duration, "cooldown_s": args.cooldown,
            "partitions": table.def().partitions,
            "data_nodes": client.layout().datanodes.len(),
            "replicas": client.layout().replicas,
        },
        "machine": { "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0) },
        "unix_time": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
        "phases": results.iter().map(|r| r.to_json()).collect::<Vec<_>>(),
    });
    if let Some(parent) = output.parent() {
        if !parent.as_os_str().is_empty() {
            std::fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
    }
    let text = serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?;
    std::fs::write(&output, text).map_err(|e| format!("cannot write {}: {e}", output.display()))?;
    println!("results written to {}", output.display());
    let failed: u64 = results.iter().map(|r| r.failed_ops).sum();
    if failed > 0 {
        return Err(format!("{failed} operations failed; see the FAILED counts above"));
    }
    Ok(())
}

async fn prepare_table(client: &Client, args: &FlexArgs, fresh: bool) -> Result<Arc<Table>, String> {
    if args.disk_attributes > args.attributes {
        return Err(format!(
            "--disk-attributes {} is more than --attributes {}",
            args.disk_attributes, args.attributes
        ));
    }
    let spec = fresh.then(|| {
        let mut spec =
            TableSpec::new(&args.database, &args.table).column(ColumnDef::new("id", ColumnType::uint(IntWidth::Big)));
        for a in 0..args.attributes {
            let on_disk = a >= args.attributes - args.disk_attributes;
            let storage = if on_disk { Storage::Disk } else { Storage::Memory };
            let column = ColumnDef::new(format!("attr{a}"), ColumnType::VarBinary(args.attribute_size as u32));
            spec = spec.column(column.storage(storage));
        }
        spec.primary_key(&["id"])
    });
    crate::bench_table(client, &args.database, &args.table, spec, "insert").await
}

fn row_values(args: &FlexArgs, key: u64, generation: u64) -> Vec<Value> {
    let mut row = Vec::with_capacity(args.attributes + 1);
    row.push(Value::UInt(key));
    for a in 0..args.attributes {
        let mut bytes = vec![b'x'; args.attribute_size];
        let stamp = (key ^ generation.rotate_left(17) ^ a as u64).to_le_bytes();
        let n = stamp.len().min(bytes.len());
        bytes[..n].copy_from_slice(&stamp[..n]);
        row.push(Value::Bytes(bytes));
    }
    row
}

async fn run_phase(client: &Client, table: &Arc<Table>, args: &FlexArgs, phase: Phase) -> Result<PhaseResult, String> {
    let start = Instant::now();
    let secs = |s: f64| Duration::from_secs_f64(s);
    let measure_from = start + secs(if phase.timed() { args.warmup } else { 0.0 });
    let measure_to = measure_from + secs(args.duration);
    let stop_at = measure_to + secs(if phase.timed() { args.cooldown } else { 0.0 });
    let shared = Arc::new(Shared {
        client: client.clone(),
        table: table.clone(),
        args: args.clone(),
        phase,
        cursor: AtomicU64::new(0),
        done_ops: AtomicU64::new(0),
        start,
        measure_from,
        measure_to,
        stop_at,
        timeline: std::sync::Mutex::new(Vec::new()),
    });
    let bar = progress(phase.name(), if phase.timed() { None } else { Some(args.rows) });
    let workers = args.threads * args.parallel;
    let mut handles = Vec::with_capacity(workers);
    for w in 0..workers {
        let s = shared.clone();
        handles.push(tokio::spawn(async move { worker(s, w as u64).await }));
    }
    let ticker = {
        let s = shared.clone();
        let bar = bar.clone();
        tokio::spawn(async move {
            let mut last = (Instant::now(), 0u64);
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let done = s.done_ops.load(Ordering::Relaxed);
                let now = Instant::now();
                let rate = (done - last.1) as f64 / now.duration_since(last.0).as_secs_f64();
                last = (now, done);
                if s.phase.timed() {
                    let stage = if now < s.measure_from {
                        "warm-up"
                    } else if now < s.measure_to {
                        "measuring"
                    } else {
                        "cool-down"
                    };
                    bar.set_message(format!("{stage}: {rate:.0} ops/s, {done} ops"));
                } else {
                    bar.set_position(done.min(s.args.rows));
                    bar.set_message(format!("{rate:.0} ops/s"));
                }
            }
        })
    };
    let mut result = PhaseResult {
        name: phase.name().into(),
        ops: 0,
        failed_ops: 0,
        batches: 0,
        seconds: 0.0,
        latency: new_histogram(),
        errors: Default::default(),
    };
    let mut first_error: Option<String> = None;
    for h in handles {
        match h.await {
            Ok(Ok(w)) => {
                result.ops += w.ops;
                result.failed_ops += w.failed;
                for (code, (count, message)) in w.errors {
                    result.errors.entry(code).or_insert((0, message)).0 += count;
                }
                result.batches += w.batches;
                let _ = result.latency.add(&w.latency);
            }
            Ok(Err(e)) => {
                first_error.get_or_insert(e);
            }
            Err(e) => {
                first_error.get_or_insert(format!("a worker panicked: {e}"));
            }
        }
    }
    ticker.abort();
    bar.finish_and_clear();
    if let Some(e) = first_error {
        return Err(format!("{} phase failed: {e}", phase.name()));
    }
    result.seconds = if phase.timed() { args.duration } else { shared.start.elapsed().as_secs_f64() };
    if let Some(path) = &args.timeline {
        use std::io::Write;
        let timeline = shared.timeline.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let exists = path.exists();
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        let mut text = String::new();
        if !exists {
            text.push_str("phase,second,ok_ops,failed_ops\n");
        }
        for (second, (ok, failed)) in timeline.iter().enumerate() {
            text.push_str(&format!("{},{second},{ok},{failed}\n", phase.name()));
        }
        file.write_all(text.as_bytes()).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(result)
}

async fn worker(s: Arc<Shared>, id: u64) -> Result<WorkerResult, String> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (id + 1).wrapping_mul(0xD1B5_4A32_D192_ED03));
    let mut out = WorkerResult { ops: 0, failed: 0, errors: Default::default(), batches: 0, latency: new_histogram() };
    let batch = s.args.batch as u64;
    let mut generation = 0u64;
    loop {
        let keys: Vec<u64> = if s.phase.timed() {
            if Instant::now() >= s.stop_at {
                break;
            }
            (0..batch).map(|_| rng.next() % s.args.rows).collect()
        } else {
            let first = s.cursor.fetch_add(batch, Ordering::Relaxed);
            if first >= s.args.rows {
                break;
            }
            (first..(first + batch).min(s.args.rows)).collect()
        };
        generation += 1;
        let n = keys.len() as u64;
        let reads = matches!(s.phase, Phase::Read) || (matches!(s.phase, Phase::Mixed) && generation.is_multiple_of(2));
        let tally = if reads && !s.args.transactions {
            // A batch of lookups: keys and rows each in one buffer.
            let mut lookups = Lookups::with_capacity(keys.len(), 9);
            for &k in &keys {
                lookups.push_values(&s.table, None, &[Value::UInt(k)]).map_err(|e| e.to_string())?;
            }
            let mut tally = Tally::start();
            let answers = s.client.lookup(&lookups).await;
            tally.took(&s);
            match &answers {
                Ok(answers) => (0..answers.len()).for_each(|i| match answers.get(i) {
                    Found::Row(_) => {}
                    Found::NotFound => tally.missing(&mut out),
                    Found::Error(e) => tally.failed(&mut out, e),
                }),
                Err(e) => (0..n).for_each(|_| tally.failed(&mut out, e)),
            }
            tally
        } else {
            let ops = keys
                .iter()
                .map(|&k| match s.phase {
                    Phase::Insert => Op::insert(&s.table, row_values(&s.args, k, 0)),
                    Phase::Read | Phase::Mixed if reads => Op::read(&s.table, &[Value::UInt(k)]),
                    Phase::Update | Phase::Mixed | Phase::Read => {
                        let mut row = row_values(&s.args, k, generation);
                        Op::update(&s.table, &[Value::UInt(k)], &[("attr0", row.swap_remove(1))])
                    }
                    Phase::Delete => Op::delete(&s.table, &[Value::UInt(k)]),
                })
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?;
            let mut tally = Tally::start();
            let outcomes = if s.args.transactions {
                s.client.transaction().execute_commit(ops).await.map(|list| list.into_iter().map(Ok).collect())
            } else {
                s.client.batch(ops).await
            };
            tally.took(&s);
            match &outcomes {
                Ok(list) => list.iter().for_each(|o| match o {
                    Ok(Outcome::Row(_) | Outcome::Done | Outcome::Unchanged) => {}
                    Ok(Outcome::NotFound) => tally.missing(&mut out),
                    Err(e) => tally.failed(&mut out, e),
                }),
                Err(e) => (0..n).for_each(|_| tally.failed(&mut out, e)),
            }
            tally
        };
        let Tally { took, measured, failed, .. } = tally;
        s.done_ops.fetch_add(n, Ordering::Relaxed);
        if s.args.timeline.is_some() {
            let second = s.start.elapsed().as_secs() as usize;
            let mut timeline = s.timeline.lock().unwrap_or_else(|p| p.into_inner());
            if timeline.len() <= second {
                timeline.resize(second + 1, (0, 0));
            }
            timeline[second].0 += n - failed;
            timeline[second].1 += failed;
        }
        if measured {
            out.ops += n - failed;
            out.failed += failed;
            out.batches += 1;
            let _ = out.latency.record((took.as_micros() as u64).max(1));
        }
    }
    Ok(out)
}

/// What a batch came to: reads, updates and deletes address rows that
/// must exist. Errors are counted only for batches measured.
struct Tally {
    sent: Instant,
    took: Duration,
    measured: bool,
    failed: u64,
}

impl Tally {
    /// The batch is sent now.
    fn start() -> Tally {
        Tally { sent: Instant::now(), took: Duration::ZERO, measured: false, failed: 0 }
    }

    /// The batch was answered now.
    fn took(&mut self, s: &Shared) {
        self.took = self.sent.elapsed();
        self.measured = !s.phase.timed() || (self.sent >= s.measure_from && self.sent + self.took <= s.measure_to);
    }

    fn missing(&mut self, out: &mut WorkerResult) {
        self.failed += 1;
        if self.measured {
            crate::report::count_error(&mut out.errors, "NotFound".into(), "the row does not exist");
        }
    }

    fn failed(&mut self, out: &mut WorkerResult, e: &latsdb_types::DbError) {
        self.failed += 1;
        if self.measured {
            crate::report::count_error(&mut out.errors, format!("{:?}", e.code), &e.message);
        }
    }
}
