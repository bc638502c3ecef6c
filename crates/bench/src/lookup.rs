//! `latsdb bench lookup`: closed-loop HTTP load on the REST node's `batch`
//! endpoint, the feature-store data path.
//!
//! Each client keeps one keep-alive HTTP/1.1 connection and sends one batch
//! of `batch` pk-reads at a time (optionally paced to a total request rate).
//! A lookup counts as done only when its item inside the answer has code
//! 200; items with any other code are failed lookups, reported apart and
//! never counted as throughput.

use crate::report::{new_histogram, progress};
use crate::Rng;
use bytes::Bytes;
use clap::{Args, ValueEnum};
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use latsdb_client::{Client, Op, Outcome};
use latsdb_types::schema::{ColumnDef, ColumnType, IntWidth, TableSpec};
use latsdb_types::{ErrorCode, Value};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum Columns {
    /// 5 INT columns.
    Ints,
    /// 5 INT and 5 VARCHAR(32) columns.
    IntsStrings,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum Distribution {
    Uniform,
    /// Zipfian with exponent 0.99 (YCSB's skew): a few keys are hot.
    Zipf,
}

#[derive(Args, Clone, Debug)]
pub struct LookupArgs {
    /// Management server (to create and load the table).
    #[arg(long, env = "LATSDB_MGMD", default_value = "127.0.0.1:1186")]
    pub mgmd: String,
    /// Directory with the cluster's ca.pem and an api certificate, for a cluster that requires TLS (`latsdb certs create`).
    #[arg(long, env = "LATSDB_TLS_DIR")]
    pub tls_dir: Option<std::path::PathBuf>,
    /// REST node address (host:port).
    #[arg(long, default_value = "127.0.0.1:4406")]
    pub rest: String,
    /// Concurrent HTTP clients (connections), each with one batch in flight.
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
    /// Lookups per batch request.
    #[arg(long, default_value_t = 100)]
    pub batch: usize,
    /// Rows in the table; keys are drawn from 0..rows.
    #[arg(long, default_value_t = 100_000)]
    pub rows: u64,
    #[arg(long, value_enum, default_value = "ints")]
    pub columns: Columns,
    /// Name the columns to return in every lookup (`readColumns`: all but
    /// the key), as RonDB's clients do; without it a lookup returns the
    /// whole row.
    #[arg(long)]
    pub read_columns: bool,
    #[arg(long, value_enum, default_value = "uniform")]
    pub distribution: Distribution,
    /// Seconds of warm-up before measuring.
    #[arg(long, default_value_t = 2.0)]
    pub warmup: f64,
    /// Seconds measured.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Total batch requests per second over all clients (0: as fast as
    /// possible). Latency is measured from each request's scheduled time.
    /// Paced clients run on a thread each, so that each sends at its own
    /// time rather than on the async timer's millisecond ticks.
    #[arg(long, default_value_t = 0.0)]
    pub rate: f64,
    /// Threads of the load generator when not paced by --rate.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Sent as X-API-KEY.
    #[arg(long, env = "LATSDB_API_KEY")]
    pub api_key: Option<String>,
    /// Do not create and load the table (it was loaded before).
    #[arg(long)]
    pub no_load: bool,
    #[arg(long, default_value = "bench")]
    pub database: String,
    /// Table name (default: lookup_ints or lookup_strings).
    #[arg(long)]
    pub table: Option<String>,
    /// Write results as JSON here (default: results/lookup-<unix time>.json).
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Also write every measured request as a line "<send time> <latency>":
    /// the scheduled send time in CLOCK_MONOTONIC nanoseconds (the clock of
    /// `perf record -k CLOCK_MONOTONIC`, so requests can be lined up with a
    /// scheduler trace) and the batch latency in microseconds.
    #[arg(long)]
    pub latency_log: Option<PathBuf>,
}

impl LookupArgs {
    fn table_name(&self) -> String {
        self.table.clone().unwrap_or_else(|| match self.columns {
            Columns::Ints => "lookup_ints".into(),
            Columns::IntsStrings => "lookup_strings".into(),
        })
    }

    fn check(&self) -> Result<(), String> {
        if self.clients == 0 || self.batch == 0 || self.rows == 0 {
            return Err("--clients, --batch and --rows must be at least 1".into());
        }
        if self.threads == 0 {
            return Err("--threads must be at least 1".into());
        }
        if self.rate > 0.0 && self.clients > MAX_PACED_CLIENTS {
            return Err(format!(
                "--rate runs a thread per client; use at most {MAX_PACED_CLIENTS} clients with it (got {})",
                self.clients
            ));
        }
        if self.duration.is_nan()
            || self.duration <= 0.0
            || self.warmup.is_nan()
            || self.warmup < 0.0
            || self.rate.is_nan()
            || self.rate < 0.0
        {
            return Err("--duration must be positive; --warmup and --rate not negative".into());
        }
        Ok(())
    }
}

/// Paced clients run a thread each (see `run_async`).
const MAX_PACED_CLIENTS: usize = 1024;

/// Draws keys from 0..rows.
struct KeyGen {
    rng: Rng,
    rows: u64,
    /// Cumulative probabilities of the Zipf distribution (empty: uniform).
    zipf_cdf: Arc<Vec<f64>>,
}

impl KeyGen {
    fn key(&mut self) -> u64 {
        let r = self.rng.next();
        if self.zipf_cdf.is_empty() {
            return r % self.rows;
        }
        let u = (r >> 11) as f64 / (1u64 << 53) as f64;
        let rank = self.zipf_cdf.partition_point(|&p| p < u) as u64;
        // Scatter the hot ranks over the key space so they hit all partitions.
        rank.wrapping_mul(0x9E37_79B9_7F4A_7C15) % self.rows
    }
}

fn zipf_cdf(rows: u64) -> Vec<f64> {
    let theta = 0.99;
    let mut cdf = Vec::with_capacity(rows as usize);
    let mut sum = 0.0;
    for i in 1..=rows {
        sum += 1.0 / (i as f64).powf(theta);
        cdf.push(sum);
    }
    for p in &mut cdf {
        *p /= sum;
    }
    cdf
}

#[derive(Default)]
struct Counters {
    lookups_ok: AtomicU64,
    lookups_failed: AtomicU64,
    requests: AtomicU64,
    /// Requests answered with a non-200 status or not at all.
    requests_failed: AtomicU64,
}

struct Shared {
    args: LookupArgs,
    path: String,
    table: String,
    /// `,"readColumns":[...]` for every item, or empty.
    read_columns: String,
    measuring: AtomicBool,
    stop: AtomicBool,
    counters: Counters,
    histograms: Mutex<Vec<Histogram<u64>>>,
    /// (send time in CLOCK_MONOTONIC ns, latency in us) of each measured
    /// request, when `--latency-log` asks for them.
    latency_log: Mutex<Vec<(u64, u64)>>,
    first_error: Mutex<Option<String>>,
    zipf: Arc<Vec<f64>>,
}

impl Shared {
    /// Keeps the first error of the run, to show with the results.
    fn note_error(&self, e: String) {
        self.first_error.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(e);
    }
}

pub fn run(args: LookupArgs) -> Result<(), String> {
    args.check()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    runtime.block_on(run_async(args))
}

async fn load(args: &LookupArgs, table_name: &str) -> Result<(), String> {
    let options = latsdb_client::ClientOptions::with_tls_dir(args.tls_dir.as_deref())?;
    let client = Client::connect_with(&args.mgmd, options).await.map_err(|e| e.to_string())?;
    let mut spec =
        TableSpec::new(&args.database, table_name).column(ColumnDef::new("id", ColumnType::int(IntWidth::Big)));
    for (name, ty) in value_columns(args.columns) {
        spec = spec.column(ColumnDef::new(name, ty));
    }
    let _ = client.drop_table(&args.database, table_name).await;
    let table = client.create_table(spec.primary_key(&["id"])).await.map_err(|e| e.to_string())?;
    let bar = progress("load", Some(args.rows));
    let next = Arc::new(AtomicU64::new(0));
    let mut loaders = Vec::new();
    for _ in 0..8 {
        let (client, table, next, bar, rows, strings) =
            (client.clone(), table.clone(), next.clone(), bar.clone(), args.rows, args.columns == Columns::IntsStrings);
        loaders.push(tokio::spawn(async move {
            loop {
                let first = next.fetch_add(1000, Ordering::Relaxed);
                if first >= rows {
                    return Ok::<(), String>(());
                }
                let last = (first + 1000).min(rows);
                let mut ops = Vec::with_capacity((last - first) as usize);
                for id in first..last {
                    let mut row = vec![Value::Int(id as i64)];
                    row.extend((1..=5).map(|i| Value::Int((id as i64 * 31 + i) % 1_000_000)));
                    if strings {
                        row.extend((1..=5).map(|i| Value::Str(format!("value-{id}-{i}"))));
                    }
                    ops.push(Op::upsert(&table, row).map_err(|e| e.to_string())?);
                }
                for r in client.batch(ops).await.map_err(|e| e.to_string())? {
                    match r {
                        Ok(Outcome::Done) => {}
                        Err(e) if e.code == ErrorCode::LockWaitTimeout => {}
                        other => return Err(format!("loading a row failed: {other:?}")),
                    }
                }
                bar.inc(last - first);
            }
        }));
    }
    for l in loaders {
        l.await.map_err(|e| format!("a loader panicked: {e}"))??;
    }
    bar.finish_and_clear();
    println!("loaded {} rows into {}.{table_name}", args.rows, args.database);
    Ok(())
}

async fn run_async(args: LookupArgs) -> Result<(), String> {
    let table = args.table_name();
    if !args.no_load {
        load(&args, &table).await?;
    }
    let zipf = Arc::new(if args.distribution == Distribution::Zipf { zipf_cdf(args.rows) } else { Vec::new() });
    let shared = Arc::new(Shared {
        path: format!("http://{}/0.1.0/batch", args.rest),
        table: format!("{}/{}/pk-read", args.database, table),
        read_columns: read_columns_json(&args),
        args: args.clone(),
        measuring: AtomicBool::new(false),
        stop: AtomicBool::new(false),
        counters: Counters::default(),
        histograms: Mutex::new(Vec::new()),
        latency_log: Mutex::new(Vec::new()),
        first_error: Mutex::new(None),
        zipf,
    });
    let mut tasks = Vec::new();
    let mut paced_threads = Vec::new();
    for client in 0..args.clients {
        if args.rate > 0.0 {
            // A paced client sleeps on its own thread until its send time:
            // tokio's timer wheel ticks every millisecond, which would send
            // every request due within a millisecond at once.
            let shared = shared.clone();
            let thread = std::thread::Builder::new().name(format!("client-{client}")).spawn(move || {
                match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(rt) => rt.block_on(client_loop(shared, client)),
                    Err(e) => shared.note_error(format!("cannot start a client's runtime: {e}")),
                }
            });
            paced_threads.push(thread.map_err(|e| format!("cannot start a client thread: {e}"))?);
        } else {
            tasks.push(tokio::spawn(client_loop(shared.clone(), client)));
        }
    }
    let bar = progress("lookup", None);
    let warmup = Duration::from_secs_f64(args.warmup);
    let started = Instant::now();
    while started.elapsed() < warmup {
        bar.set_message(format!("warm-up, {:.0} s left", (warmup - started.elapsed()).as_secs_f64()));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let before_ok = shared.counters.lookups_ok.load(Ordering::Relaxed);
    let before_failed = shared.counters.lookups_failed.load(Ordering::Relaxed);
    let before_requests = shared.counters.requests.load(Ordering::Relaxed);
    let before_requests_failed = shared.counters.requests_failed.load(Ordering::Relaxed);
    shared.measuring.store(true, Ordering::Release);
    let measure_start = Instant::now();
    let duration = Duration::from_secs_f64(args.duration);
    while measure_start.elapsed() < duration {
        let secs = measure_start.elapsed().as_secs_f64().max(0.001);
        let ok = shared.counters.lookups_ok.load(Ordering::Relaxed) - before_ok;
        bar.set_message(format!(
            "{:.0} lookups/s, {:.0} s left",
            ok as f64 / secs,
            (duration - measure_start.elapsed()).as_secs_f64()
        ));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    shared.measuring.store(false, Ordering::Release);
    let seconds = measure_start.elapsed().as_secs_f64();
    let ok = shared.counters.lookups_ok.load(Ordering::Relaxed) - before_ok;
    let failed = shared.counters.lookups_failed.load(Ordering::Relaxed) - before_failed;
    let requests = shared.counters.requests.load(Ordering::Relaxed) - before_requests;
    let requests_failed = shared.counters.requests_failed.load(Ordering::Relaxed) - before_requests_failed;
    shared.stop.store(true, Ordering::Release);
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
    }
    let joined = tokio::task::spawn_blocking(move || {
        for t in paced_threads {
            let _ = t.join();
        }
    });
    let _ = tokio::time::timeout(Duration::from_secs(10), joined).await;
    bar.finish_and_clear();
    let mut latency = new_histogram();
    for h in shared.histograms.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        latency.add(h).map_err(|e| format!("merging histograms: {e}"))?;
    }
    let lookups_per_sec = ok as f64 / seconds;
    println!(
        "lookup  {:>10.0} lookups/s  {:>8.0} requests/s  batch {}  clients {}  batch latency us p50 {} p95 {} p99 {} max {}",
        lookups_per_sec,
        requests as f64 / seconds,
        args.batch,
        args.clients,
        latency.value_at_quantile(0.50),
        latency.value_at_quantile(0.95),
        latency.value_at_quantile(0.99),
        latency.max()
    );
    if failed > 0 || requests_failed > 0 {
        println!(
            "FAILED: {failed} lookups inside answers had a non-200 code; {requests_failed} requests failed outright"
        );
    }
    if let Some(e) = shared.first_error.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
        println!("first error: {e}");
    }
    let result = serde_json::json!({
        "benchmark": "lookup",
        "rest": args.rest,
        "clients": args.clients,
        "batch": args.batch,
        "rows": args.rows,
        "columns": format!("{:?}", args.columns),
        "read_columns": args.read_columns,
        "distribution": format!("{:?}", args.distribution),
        "rate": args.rate,
        "seconds": seconds,
        "lookups": ok,
        "failed_lookups": failed,
        "requests": requests,
        "failed_requests": requests_failed,
        "lookups_per_sec": lookups_per_sec,
        "requests_per_sec": requests as f64 / seconds,
        "batch_latency_us": {
            "p50": latency.value_at_quantile(0.50),
            "p95": latency.value_at_quantile(0.95),
            "p99": latency.value_at_quantile(0.99),
            "max": latency.max(),
            "mean": latency.mean(),
        }
    });
    write_results(&args, &result)?;
    if let Some(log_path) = &args.latency_log {
        let log = std::mem::take(&mut *shared.latency_log.lock().unwrap_or_else(|p| p.into_inner()));
        write_latency_log(log_path, log)?;
    }
    if ok == 0 {
        return Err("no lookup succeeded; see the first error above".into());
    }
    Ok(())
}

/// Writes the run's results as JSON to `--output` (by default
/// `results/lookup-<unix time>.json`).
fn write_results(args: &LookupArgs, result: &serde_json::Value) -> Result<(), String> {
    let path = args.output.clone().unwrap_or_else(|| {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        PathBuf::from(format!("results/lookup-{now}.json"))
    });
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    std::fs::write(&path, serde_json::to_string_pretty(result).unwrap_or_default())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    println!("results written to {}", path.display());
    Ok(())
}

/// Writes every request's (send time, latency in microseconds), in send
/// order, one per line, to `--latency-log`.
fn write_latency_log(log_path: &std::path::Path, mut log: Vec<(u64, u64)>) -> Result<(), String> {
    log.sort_unstable();
    let mut text = String::with_capacity(log.len() * 24);
    for (sent, micros) in log {
        text.push_str(itoa::Buffer::new().format(sent));
        text.push(' ');
        text.push_str(itoa::Buffer::new().format(micros));
        text.push('\n');
    }
    std::fs::write(log_path, text).map_err(|e| format!("cannot write {}: {e}", log_path.display()))?;
    println!("per-request latencies written to {}", log_path.display());
    Ok(())
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn connect(address: &str) -> Result<Sender, String> {
    let stream = tokio::net::TcpStream::connect(address)
        .await
        .map_err(|e| format!("cannot connect to the REST node at {address}: {e}"))?;
    let _ = stream.set_nodelay(true);
    let (sender, connection) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
        .await
        .map_err(|e| format!("HTTP handshake with {address} failed: {e}"))?;
    tokio::spawn(connection);
    Ok(sender)
}

/// The table's columns after its key `id`: i1..i5 INT, then for
/// `ints-strings` s1..s5 VARCHAR(32).
fn value_columns(columns: Columns) -> Vec<(String, ColumnType)> {
    let mut out: Vec<(String, ColumnType)> =
        (1..=5).map(|i| (format!("i{i}"), ColumnType::int(IntWidth::Int))).collect();
    if columns == Columns::IntsStrings {
        out.extend((1..=5).map(|i| (format!("s{i}"), ColumnType::VarChar(32))));
    }
    out
}

/// The `readColumns` member every item carries with `--read-columns`: the
/// table's columns but its key.
fn read_columns_json(args: &LookupArgs) -> String {
    if !args.read_columns {
        return String::new();
    }
    let list: Vec<String> = value_columns(args.columns).iter().map(|(n, _)| format!(r#"{{"column":"{n}"}}"#)).collect();
    format!(r#","readColumns":[{}]"#, list.join(","))
}

fn build_body(out: &mut Vec<u8>, shared: &Shared, keys: &mut KeyGen) {
    out.clear();
    out.extend_from_slice(b"{\"operations\":[");
    for i in 0..shared.args.batch {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"method\":\"POST\",\"relative-url\":\"");
        out.extend_from_slice(shared.table.as_bytes());
        out.extend_from_slice(b"\",\"body\":{\"filters\":[{\"column\":\"id\",\"value\":");
        out.extend_from_slice(itoa::Buffer::new().format(keys.key()).as_bytes());
        out.extend_from_slice(b"}]");
        out.extend_from_slice(shared.read_columns.as_bytes());
        out.extend_from_slice(b"}}");
    }
    out.extend_from_slice(b"]}");
}

/// Counts the items of a batch answer with code 200 and the others. The
/// load generator shares the machine with the servers, so this is a
/// vectorised substring search rather than a JSON parse.
fn count_codes(body: &[u8]) -> (u64, u64) {
    const NEEDLE: &[u8] = b"{\"code\":";
    let (mut ok, mut other) = (0, 0);
    for at in memchr::memmem::find_iter(body, NEEDLE) {
        match body.get(at + NEEDLE.len()..at + NEEDLE.len() + 3) {
            Some(b"200") => ok += 1,
            Some(_) => other += 1,
            None => {}
        }
    }
    (ok, other)
}

/// CLOCK_MONOTONIC in nanoseconds, paired with the `Instant` read next to
/// it: `Instant` counts on the same clock but does not show its value.
fn monotonic_base() -> (Instant, u64) {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into the valid `ts`.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let now = Instant::now();
    let nanos = if rc == 0 { ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64 } else { 0 };
    (now, nanos)
}

async fn client_loop(shared: Arc<Shared>, client: usize) {
    let mut histogram = new_histogram();
    let mut keys =
        KeyGen { rng: Rng(0x1234_5678 ^ (client as u64) << 32), rows: shared.args.rows, zipf_cdf: shared.zipf.clone() };
    let mut body = Vec::with_capacity(shared.args.batch * 100);
    let interval =
        (shared.args.rate > 0.0).then(|| Duration::from_secs_f64(shared.args.clients as f64 / shared.args.rate));
    let mut next_send =
        Instant::now() + interval.map(|i| i.mul_f64(client as f64 / shared.args.clients as f64)).unwrap_or_default();
    let mut sender: Option<Sender> = None;
    let log_base = shared.args.latency_log.is_some().then(monotonic_base);
    let mut log = Vec::new();
    let note_error = |e: String| shared.note_error(e);
    while !shared.stop.load(Ordering::Acquire) {
        // Latency counts from the scheduled send time when the previous answer
        // came too late to send on time (no coordinated omission), and from
        // the actual send otherwise (the sleep's own lateness is not the
        // server's).
        let free_at = Instant::now();
        if interval.is_some() {
            // Only this client's thread sleeps (see run_async), in slices
            // short enough to notice the end of the run at a low rate.
            let mut now = free_at;
            while next_send > now && !shared.stop.load(Ordering::Acquire) {
                std::thread::sleep((next_send - now).min(Duration::from_millis(50)));
                now = Instant::now();
            }
            if shared.stop.load(Ordering::Acquire) {
                break;
            }
        }
        let scheduled = if interval.is_some() && free_at > next_send { next_send } else { Instant::now() };
        if let Some(interval) = interval {
            next_send += interval;
        }
        if sender.as_ref().is_none_or(|s| s.is_closed()) {
            match connect(&shared.args.rest).await {
                Ok(s) => sender = Some(s),
                Err(e) => {
                    note_error(e);
                    shared.counters.requests_failed.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            }
        }
        let Some(s) = sender.as_mut() else { continue };
        build_body(&mut body, &shared, &mut keys);
        let mut request = hyper::Request::post(&shared.path)
            .header(hyper::header::HOST, shared.args.rest.as_str())
            .header(hyper::header::CONTENT_TYPE, "application/json");
        if let Some(key) = &shared.args.api_key {
            request = request.header("x-api-key", key.as_str());
        }
        let request = match request.body(Full::new(Bytes::copy_from_slice(&body))) {
            Ok(r) => r,
            Err(e) => {
                note_error(format!("cannot build a request: {e}"));
                break;
            }
        };
        let answer = async {
            let response = s.send_request(request).await.map_err(|e| format!("request failed: {e}"))?;
            let status = response.status().as_u16();
            let bytes = response.into_body().collect().await.map_err(|e| format!("reading the answer failed: {e}"))?;
            Ok::<_, String>((status, bytes.to_bytes()))
        }
        .await;
        let measuring = shared.measuring.load(Ordering::Acquire);
        shared.counters.requests.fetch_add(1, Ordering::Relaxed);
        match answer {
            Ok((200, bytes)) => {
                let (ok, other) = count_codes(&bytes);
                let missing = (shared.args.batch as u64).saturating_sub(ok + other);
                shared.counters.lookups_ok.fetch_add(ok, Ordering::Relaxed);
                shared.counters.lookups_failed.fetch_add(other + missing, Ordering::Relaxed);
                if other + missing > 0 {
                    note_error(format!(
                        "an answer had {other} non-200 items: {}",
                        String::from_utf8_lossy(&bytes[..bytes.len().min(300)])
                    ));
                }
                if measuring {
                    let micros = scheduled.elapsed().as_micros().max(1) as u64;
                    let _ = histogram.record(micros);
                    if let Some((base, base_nanos)) = log_base {
                        let sent = if scheduled >= base {
                            base_nanos + (scheduled - base).as_nanos() as u64
                        } else {
                            base_nanos.saturating_sub((base - scheduled).as_nanos() as u64)
                        };
                        log.push((sent, micros));
                    }
                }
            }
            Ok((status, bytes)) => {
                shared.counters.requests_failed.fetch_add(1, Ordering::Relaxed);
                shared.counters.lookups_failed.fetch_add(shared.args.batch as u64, Ordering::Relaxed);
                note_error(format!("HTTP {status}: {}", String::from_utf8_lossy(&bytes[..bytes.len().min(300)])));
            }
            Err(e) => {
                shared.counters.requests_failed.fetch_add(1, Ordering::Relaxed);
                shared.counters.lookups_failed.fetch_add(shared.args.batch as u64, Ordering::Relaxed);
                note_error(e);
                sender = None;
            }
        }
    }
    shared.histograms.lock().unwrap_or_else(|p| p.into_inner()).push(histogram);
    shared.latency_log.lock().unwrap_or_else(|p| p.into_inner()).append(&mut log);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(flags: &[&str]) -> LookupArgs {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            lookup: LookupArgs,
        }
        let argv = std::iter::once("lookup").chain(flags.iter().copied());
        <Cli as clap::Parser>::try_parse_from(argv).map(|c| c.lookup).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn paced_runs_refuse_more_clients_than_threads_they_may_start() {
        assert!(args(&["--rate", "100", "--clients", "1024"]).check().is_ok());
        let refused = args(&["--rate", "100", "--clients", "1025"]).check().unwrap_err();
        assert!(refused.contains("at most 1024 clients"), "{refused}");
        assert!(args(&["--clients", "5000"]).check().is_ok(), "closed-loop clients are tasks, not threads");
    }

    #[test]
    fn codes_inside_a_batch_answer_are_counted() {
        let body = br#"{"result":[{"code":200,"body":{"data":{"id":1}}},{"code":404,"body":{"message":"Not Found"}},{"code":200,"body":{}}]}"#;
        assert_eq!(count_codes(body), (2, 1));
    }

    #[test]
    fn zipf_keys_stay_in_range_and_are_skewed() {
        let mut keys = KeyGen { rng: Rng(1), rows: 1000, zipf_cdf: Arc::new(zipf_cdf(1000)) };
        let mut hits = std::collections::HashMap::new();
        for _ in 0..10_000 {
            let k = keys.key();
            assert!(k < 1000);
            *hits.entry(k).or_insert(0u32) += 1;
        }
        let hottest = hits.values().max().copied().unwrap_or(0);
        assert!(hottest > 500, "the hottest key got {hottest} of 10,000 draws");
    }
}
