//! `latsdb bench ycsb`: YCSB's core workloads (a-f, or a properties file)
//! over the native client, with YCSB's table (`usertable`: `YCSB_KEY` and
//! `FIELD0..`), key names and request distributions (`generator.rs`).
//!
//! A load phase inserts `recordcount` records; a run phase executes
//! `operationcount` operations (or runs `--duration` seconds) from
//! `--threads` client tasks, each one operation at a time as YCSB's
//! threads do, optionally throttled to `--target` operations per second.
//! Every 10 s a line shows throughput and each operation's latency; the
//! results JSON holds the totals and that timeline. Failed operations are
//! counted apart and never as throughput. `--db redis://HOST:PORT` drives
//! a Redis server and `--db mysql://...` a MySQL server (the SQL node, or
//! MariaDB) with the same generator (`db.rs`).

mod db;
mod generator;
mod run;

use clap::Args;
pub use generator::{Distribution, Operation, Workload};
use std::path::PathBuf;

#[derive(Args, Clone, Debug)]
pub struct YcsbArgs {
    /// Management server address.
    #[arg(long, env = "LATSDB_MGMD", default_value = "127.0.0.1:1186")]
    pub mgmd: String,
    /// Directory with the cluster's ca.pem and an api certificate, for a cluster that requires TLS (`latsdb certs create`).
    #[arg(long, env = "LATSDB_TLS_DIR")]
    pub tls_dir: Option<std::path::PathBuf>,
    /// Where operations go: latsdb (native client, --mgmd), redis://HOST:PORT (YCSB's Redis data model; use an empty server), or mysql://USER:PASSWORD@HOST:PORT (YCSB's JDBC statements; the SQL node or MariaDB).
    #[arg(long, default_value = "latsdb")]
    pub db: String,
    /// One of YCSB's workloads: a, b, c, d, e or f.
    #[arg(long, short = 'w', default_value = "a")]
    pub workload: String,
    /// A YCSB properties file, applied after the workload's properties.
    #[arg(short = 'P', long = "properties")]
    pub properties: Vec<PathBuf>,
    /// A property (key=value), applied last, e.g. -p recordcount=100000.
    #[arg(short = 'p', long = "property")]
    pub property: Vec<String>,
    /// Phases: load, run, or load,run.
    #[arg(long, value_delimiter = ',', default_value = "load,run")]
    pub phases: Vec<String>,
    /// Client tasks, each one operation at a time.
    #[arg(long, default_value_t = 16)]
    pub threads: usize,
    /// Operations per second of the run phase, over all tasks (0: as fast as they go).
    #[arg(long, default_value_t = 0)]
    pub target: u64,
    /// Longest run phase in seconds (it also ends after operationcount operations, if not 0).
    #[arg(long, default_value_t = 60.0)]
    pub duration: f64,
    /// Seconds between timeline lines.
    #[arg(long, default_value_t = 10.0)]
    pub interval: f64,
    /// Keep the FIELD columns on disk (STORAGE DISK) when the load creates the table.
    #[arg(long)]
    pub disk: bool,
    /// Write results as JSON here (default: results/ycsb-<workload>-<unix time>.json).
    #[arg(long)]
    pub output: Option<PathBuf>,
    #[arg(long, default_value = "ycsb")]
    pub database: String,
    #[arg(long, default_value = "usertable")]
    pub table: String,
}

impl YcsbArgs {
    /// The workload with the properties files and `-p` overrides applied.
    pub fn workload(&self) -> Result<Workload, String> {
        let mut w = Workload::named(&self.workload)?;
        for path in &self.properties {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read properties file {}: {e}", path.display()))?;
            w.apply_properties(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        for p in &self.property {
            let (key, value) = p.split_once('=').ok_or_else(|| format!("-p {p}: expected key=value"))?;
            w.set(key.trim(), value.trim()).map_err(|e| format!("-p {p}: {e}"))?;
        }
        w.validate()?;
        Ok(w)
    }
}

pub fn run(args: YcsbArgs) -> Result<(), String> {
    let workload = args.workload()?;
    if args.threads == 0
        || !(args.duration.is_finite() && args.duration > 0.0)
        || !(args.interval.is_finite() && args.interval >= 0.1)
    {
        return Err("--threads must be at least 1, --duration positive and --interval at least 0.1".into());
    }
    for phase in &args.phases {
        if phase != "load" && phase != "run" {
            return Err(format!("unknown phase '{phase}': use load, run or load,run"));
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.min(std::thread::available_parallelism().map_or(2, |n| n.get())))
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the client runtime: {e}"))?;
    runtime.block_on(run::run(args, workload))
}
