//! `latsdb bench sysbench`: the real sysbench against a MySQL-protocol
//! server (latsdb's SQL node, or MariaDB for the side-by-side peer), with
//! RonDB's knobs: statements per transaction of each kind, keys per
//! IN-list, filtered ranges, read-only or read-write, a list of thread
//! counts. Prepares the tables, runs each thread count, writes a JSON file
//! and an SVG plot of TPS and p95 latency against threads.

use clap::{Args, ValueEnum};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

/// The workload script, shipped inside the binary.
const LUA: &str = include_str!("../sysbench/latsdb_oltp.lua");

#[derive(Clone, Copy, ValueEnum, Debug)]
pub enum Workload {
    /// Read-write transactions (sysbench oltp_read_write).
    Rw,
    /// Read-only transactions (sysbench oltp_read_only).
    Ro,
}

#[derive(Args, Debug)]
pub struct SysbenchArgs {
    /// SQL server address (latsdb's SQL node, or a MariaDB/MySQL to compare with).
    #[arg(long, default_value = "127.0.0.1:3306")]
    sql: String,
    #[arg(long, default_value = "root")]
    user: String,
    #[arg(long, default_value = "")]
    password: String,
    /// Database of the sbtest tables (created if missing).
    #[arg(long, default_value = "sbtest")]
    db: String,
    /// Name of the system in the results and the plot.
    #[arg(long, default_value = "latsdb")]
    label: String,
    #[arg(long, value_enum, default_value = "rw")]
    workload: Workload,
    /// Thread counts to run, comma-separated.
    #[arg(long, default_value = "1,4,16,32", value_delimiter = ',')]
    threads: Vec<u32>,
    /// Seconds per thread count.
    #[arg(long, default_value_t = 20)]
    time: u64,
    #[arg(long, default_value_t = 1)]
    tables: u32,
    #[arg(long, default_value_t = 100_000)]
    table_size: u64,
    /// Primary-key SELECTs per transaction.
    #[arg(long, default_value_t = 10)]
    point_selects: u32,
    /// IN-list SELECTs per transaction.
    #[arg(long, default_value_t = 0)]
    in_selects: u32,
    /// Keys per IN-list.
    #[arg(long, default_value_t = 100)]
    in_keys: u32,
    /// Range SELECTs of each kind per transaction (simple, ORDER BY, DISTINCT, SUM).
    #[arg(long, default_value_t = 1)]
    simple_ranges: u32,
    #[arg(long, default_value_t = 1)]
    order_ranges: u32,
    #[arg(long, default_value_t = 1)]
    distinct_ranges: u32,
    #[arg(long, default_value_t = 1)]
    sum_ranges: u32,
    /// Rows per range.
    #[arg(long, default_value_t = 100)]
    range_size: u32,
    /// Filtered range scans per transaction (range_size rows scanned, ~1% returned).
    #[arg(long, default_value_t = 0)]
    filtered_ranges: u32,
    /// `SELECT 1` statements per transaction. They touch no table, so their
    /// rate is the ceiling sysbench, the protocol and the wake-ups leave for
    /// any statement on this machine.
    #[arg(long, default_value_t = 0)]
    noop_selects: u32,
    /// Prepared statements (auto) or text queries (disable).
    #[arg(long, default_value = "auto")]
    ps_mode: String,
    /// One statement per transaction without BEGIN/COMMIT (as oltp_point_select).
    #[arg(long)]
    skip_trx: bool,
    /// Use the tables as they are (skip DROP + prepare).
    #[arg(long)]
    skip_prepare: bool,
    /// Results file (JSON); default results/sysbench-<label>-<time>.json.
    #[arg(long)]
    output: Option<PathBuf>,
    /// Plot (SVG); default next to the results file.
    #[arg(long)]
    plot: Option<PathBuf>,
}

#[derive(Debug, Clone)]
struct RunResult {
    threads: u32,
    tps: f64,
    qps: f64,
    p95_ms: f64,
    avg_ms: f64,
    ignored_errors: u64,
    transactions: u64,
}

fn sysbench_available() -> Result<(), String> {
    match Command::new("sysbench").arg("--version").output() {
        Ok(o) if o.status.success() => Ok(()),
        _ => Err("sysbench is not installed; run scripts/install-deps.sh (Debian package sysbench)".into()),
    }
}

fn split_address(sql: &str) -> Result<(String, String), String> {
    let (host, port) = sql.rsplit_once(':').ok_or_else(|| format!("--sql {sql} must be HOST:PORT"))?;
    port.parse::<u16>().map_err(|_| format!("--sql {sql}: '{port}' is not a port"))?;
    Ok((host.to_string(), port.to_string()))
}

impl SysbenchArgs {
    fn common(&self, script: &str) -> Result<Vec<String>, String> {
        let (host, port) = split_address(&self.sql)?;
        let mut a = vec![
            script.to_string(),
            "--db-driver=mysql".into(),
            format!("--mysql-host={host}"),
            format!("--mysql-port={port}"),
            format!("--mysql-user={}", self.user),
            format!("--mysql-db={}", self.db),
            format!("--tables={}", self.tables),
            format!("--table-size={}", self.table_size),
            format!("--db-ps-mode={}", self.ps_mode),
            format!("--point_selects={}", self.point_selects),
            format!("--in_selects={}", self.in_selects),
            format!("--in_keys={}", self.in_keys.max(1)),
            format!("--simple_ranges={}", self.simple_ranges),
            format!("--order_ranges={}", self.order_ranges),
            format!("--distinct_ranges={}", self.distinct_ranges),
            format!("--sum_ranges={}", self.sum_ranges),
            format!("--range_size={}", self.range_size.max(1)),
            format!("--filtered_ranges={}", self.filtered_ranges),
            format!("--noop_selects={}", self.noop_selects),
            format!("--read_only={}", if matches!(self.workload, Workload::Ro) { "on" } else { "off" }),
            "--percentile=95".into(),
            format!("--skip_trx={}", if self.skip_trx { "on" } else { "off" }),
        ];
        let ranges = self.simple_ranges + self.order_ranges + self.distinct_ranges + self.sum_ranges;
        a.push(format!("--range_selects={}", if ranges > 0 { "on" } else { "off" }));
        if !self.password.is_empty() {
            a.push(format!("--mysql-password={}", self.password));
        }
        Ok(a)
    }
}

/// Creates the database with the mariadb/mysql client, if one is installed.
fn create_database(args: &SysbenchArgs) -> Result<(), String> {
    let (host, port) = split_address(&args.sql)?;
    let client = ["mariadb", "mysql"].into_iter().find(|c| Command::new(c).arg("--version").output().is_ok());
    let Some(client) = client else {
        eprintln!("no mariadb/mysql client found; make sure database '{}' exists", args.db);
        return Ok(());
    };
    let mut cmd = Command::new(client);
    cmd.args(["-h", &host, "-P", &port, "-u", &args.user]);
    if !args.password.is_empty() {
        cmd.arg(format!("-p{}", args.password));
    }
    let out = cmd
        .args(["-e", &format!("CREATE DATABASE IF NOT EXISTS `{}`", args.db)])
        .output()
        .map_err(|e| format!("cannot run {client}: {e}"))?;
    if !out.status.success() {
        return Err(format!("cannot create database {}: {}", args.db, String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(())
}

fn run_sysbench(
    args: &[String],
    command: &str,
    extra: &[String],
    seconds: Option<u64>,
    label: &str,
) -> Result<String, String> {
    let mut child = Command::new("sysbench")
        .args(args)
        .args(extra)
        .arg(command)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start sysbench: {e}"))?;
    let bar = crate::report::progress(label, seconds);
    let started = Instant::now();
    let stdout = child.stdout.take().ok_or("sysbench stdout is not piped")?;
    let mut output = String::new();
    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
        if let Some(rest) = line.strip_prefix('[') {
            // "[ 5s ] thds: 4 tps: 809.22 qps: ... lat (ms,95%): 6.55 err/s: 0.00 ..."
            bar.set_message(rest.split_once(']').map(|(_, m)| m.trim().to_string()).unwrap_or_default());
        }
        if seconds.is_some() {
            bar.set_position(started.elapsed().as_secs());
        }
        output.push_str(&line);
        output.push('\n');
    }
    let status = child.wait().map_err(|e| format!("sysbench did not finish: {e}"))?;
    bar.finish_and_clear();
    if !status.success() {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut err);
        }
        let tail: Vec<&str> = output.lines().rev().take(8).collect();
        return Err(format!(
            "sysbench {command} failed ({status}):\n{}\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
            err.trim()
        ));
    }
    Ok(output)
}

fn field(output: &str, name: &str) -> Option<String> {
    output.lines().find_map(|l| l.trim().strip_prefix(name)).map(|r| r.trim().to_string())
}

/// "6634   (662.86 per sec.)" -> (6634, 662.86)
fn count_and_rate(s: &str) -> Option<(u64, f64)> {
    let mut parts = s.split_whitespace();
    let count = parts.next()?.parse().ok()?;
    let rate = parts.next()?.trim_start_matches('(').parse().ok()?;
    Some((count, rate))
}

fn parse_run(threads: u32, output: &str) -> Result<RunResult, String> {
    let bad = || format!("cannot read sysbench's summary:\n{output}");
    let (transactions, tps) = field(output, "transactions:").and_then(|s| count_and_rate(&s)).ok_or_else(bad)?;
    let (_, qps) = field(output, "queries:").and_then(|s| count_and_rate(&s)).ok_or_else(bad)?;
    let (ignored_errors, _) = field(output, "ignored errors:").and_then(|s| count_and_rate(&s)).ok_or_else(bad)?;
    let p95_ms = field(output, "95th percentile:").and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    let avg_ms = field(output, "avg:").and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    Ok(RunResult { threads, tps, qps, p95_ms, avg_ms, ignored_errors, transactions })
}

pub fn run(args: SysbenchArgs) -> Result<(), String> {
    sysbench_available()?;
    if args.threads.is_empty() || args.threads.contains(&0) {
        return Err("--threads needs thread counts of at least 1, e.g. 1,4,16,32".into());
    }
    if args.time == 0 {
        return Err("--time must be at least 1 second".into());
    }
    if !matches!(args.ps_mode.as_str(), "auto" | "disable") {
        return Err(format!("--ps-mode {} must be auto or disable", args.ps_mode));
    }
    // Removed when dropped, on errors too.
    let dir = tempfile::tempdir().map_err(|e| format!("cannot create a temporary folder: {e}"))?;
    let script = dir.path().join("latsdb_oltp.lua");
    std::fs::write(&script, LUA).map_err(|e| format!("cannot write {}: {e}", script.display()))?;
    let common = args.common(&script.display().to_string())?;
    if !args.skip_prepare {
        create_database(&args)?;
        // A leftover table of another size would skew the run.
        let _ = run_sysbench(&common, "cleanup", &[], None, "cleanup");
        run_sysbench(&common, "prepare", &["--threads=1".to_string()], None, "prepare")?;
        println!("prepared {} table(s) of {} rows in {}", args.tables, args.table_size, args.db);
    }
    let mut results = Vec::new();
    for &threads in &args.threads {
        let extra = vec![format!("--threads={threads}"), format!("--time={}", args.time), "--report-interval=1".into()];
        let out = run_sysbench(&common, "run", &extra, Some(args.time), &format!("{threads} thr"))?;
        let r = parse_run(threads, &out)?;
        println!(
            "{:>4} threads: {:>10.1} TPS {:>11.1} QPS  p95 {:>8.2} ms  avg {:>7.2} ms  ignored errors {}",
            r.threads, r.tps, r.qps, r.p95_ms, r.avg_ms, r.ignored_errors
        );
        results.push(r);
    }
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let output =
        args.output.clone().unwrap_or_else(|| PathBuf::from(format!("results/sysbench-{}-{stamp}.json", args.label)));
    if let Some(parent) = output.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    let json = serde_json::json!({
        "benchmark": "sysbench",
        "label": args.label,
        "sql": args.sql,
        "workload": format!("{:?}", args.workload).to_lowercase(),
        "ps_mode": args.ps_mode,
        "tables": args.tables,
        "table_size": args.table_size,
        "time_s": args.time,
        "point_selects": args.point_selects,
        "in_selects": args.in_selects,
        "in_keys": args.in_keys,
        "simple_ranges": args.simple_ranges,
        "order_ranges": args.order_ranges,
        "distinct_ranges": args.distinct_ranges,
        "sum_ranges": args.sum_ranges,
        "range_size": args.range_size,
        "filtered_ranges": args.filtered_ranges,
        "skip_trx": args.skip_trx,
        "runs": results.iter().map(|r| serde_json::json!({
            "threads": r.threads, "tps": r.tps, "qps": r.qps, "p95_ms": r.p95_ms, "avg_ms": r.avg_ms,
            "transactions": r.transactions, "ignored_errors": r.ignored_errors,
        })).collect::<Vec<_>>(),
    });
    let text = serde_json::to_string_pretty(&json).map_err(|e| format!("cannot encode results: {e}"))?;
    std::fs::write(&output, text).map_err(|e| format!("cannot write {}: {e}", output.display()))?;
    let plot = args.plot.clone().unwrap_or_else(|| output.with_extension("svg"));
    let title = format!(
        "sysbench {} ({}, {} x {} rows) on {}",
        json["workload"].as_str().unwrap_or(""),
        args.ps_mode,
        args.tables,
        args.table_size,
        args.label
    );
    let mut f = std::fs::File::create(&plot).map_err(|e| format!("cannot write {}: {e}", plot.display()))?;
    f.write_all(svg(&title, &results).as_bytes()).map_err(|e| format!("cannot write {}: {e}", plot.display()))?;
    println!("results: {}  plot: {}", output.display(), plot.display());
    Ok(())
}

/// A plotted quantity: its name and how to read it from a run.
type Series = (&'static str, fn(&RunResult) -> f64);

/// Two panels side by side: TPS and p95 latency against threads.
fn svg(title: &str, runs: &[RunResult]) -> String {
    let (w, h, pad) = (900.0, 340.0, 55.0);
    let panel = (w - 3.0 * pad) / 2.0;
    let mut out = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12"><rect width="{w}" height="{h}" fill="white"/><text x="{pad}" y="20">{}</text>"#,
        title.replace('&', "&amp;").replace('<', "&lt;")
    );
    let series: [Series; 2] = [("TPS", |r| r.tps), ("p95 latency (ms)", |r| r.p95_ms)];
    for (i, (name, value)) in series.iter().enumerate() {
        let x0 = pad + i as f64 * (panel + pad);
        let top = runs.iter().map(value).fold(0.0f64, f64::max).max(1e-9) * 1.1;
        let n = runs.len().max(1);
        let x = |j: usize| x0 + (j as f64 + 0.5) * panel / n as f64;
        let y = |v: f64| h - pad - v / top * (h - 2.0 * pad);
        out.push_str(&format!(
            r#"<line x1="{x0}" y1="{}" x2="{}" y2="{}" stroke="black"/><line x1="{x0}" y1="{pad}" x2="{x0}" y2="{}" stroke="black"/><text x="{x0}" y="{}">{name}</text><text x="{}" y="{}">threads</text>"#,
            h - pad,
            x0 + panel,
            h - pad,
            h - pad,
            pad - 8.0,
            x0 + panel - 45.0,
            h - pad + 30.0
        ));
        let points: Vec<String> =
            runs.iter().enumerate().map(|(j, r)| format!("{:.1},{:.1}", x(j), y(value(r)))).collect();
        out.push_str(&format!(
            r#"<polyline fill="none" stroke="steelblue" stroke-width="2" points="{}"/>"#,
            points.join(" ")
        ));
        for (j, r) in runs.iter().enumerate() {
            out.push_str(&format!(
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="steelblue"/><text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text><text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
                x(j),
                y(value(r)),
                x(j),
                y(value(r)) - 8.0,
                if value(r) < 100.0 { format!("{:.1}", value(r)) } else { format!("{:.0}", value(r)) },
                x(j),
                h - pad + 15.0,
                r.threads
            ));
        }
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "SQL statistics:
    queries:                             132697 (13258.94 per sec.)
    ignored errors:                      2      (0.20 per sec.)
    transactions:                        6634   (662.86 per sec.)
Latency (ms):
         min:                                    2.41
         avg:                                    6.03
         95th percentile:                        6.67
";

    #[test]
    fn reads_the_summary_sysbench_prints() {
        let r = parse_run(4, SAMPLE).unwrap();
        assert_eq!((r.transactions, r.ignored_errors), (6634, 2));
        assert!((r.tps - 662.86).abs() < 1e-9 && (r.p95_ms - 6.67).abs() < 1e-9 && (r.avg_ms - 6.03).abs() < 1e-9);
        assert!(parse_run(4, "FATAL: connection refused").is_err());
    }

    #[test]
    fn the_plot_has_a_point_per_thread_count() {
        let runs: Vec<RunResult> = [1, 4, 16]
            .iter()
            .map(|&t| RunResult {
                threads: t,
                tps: t as f64 * 100.0,
                qps: 0.0,
                p95_ms: 2.0,
                avg_ms: 1.0,
                ignored_errors: 0,
                transactions: 1,
            })
            .collect();
        let s = svg("t", &runs);
        assert_eq!(s.matches("<circle").count(), 6, "{s}");
    }
}
