//! `latsdb chaos`: a fault campaign on real processes. Each schedule
//! starts a cluster of four data nodes (two node groups of two replicas)
//! and a management server, each in a network namespace of its own, runs
//! register, bank and ledger workloads through the native client, injects
//! faults drawn from a seed, heals, and judges what the clients saw:
//! register histories by Porcupine (an independent linearizability
//! checker, in Go, `checker/`), the bank's total and the ledger's rows
//! here. The promise being checked is written in docs/reliability.md.

mod bank;
mod campaign;
pub use campaign::go_binary;
mod cluster;
pub use cluster::{spawn_logged, wait_all_started, wait_for_file};
mod hosts;
/// Hosts made of network namespaces, for tests that place processes on
/// several "machines" (crates/latsdb/tests/multi_host.rs).
pub use hosts::{namespaces_available, Hosts};
mod schedule;
mod workload;

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(clap::Args, Debug)]
pub struct ChaosArgs {
    /// Seed of the first schedule (default: from the clock). Schedule i
    /// runs with seed + i; a schedule's seed replays its faults.
    #[arg(long)]
    pub seed: Option<u64>,
    /// How many schedules to run, each on a new cluster.
    #[arg(long, default_value_t = 1)]
    pub schedules: u32,
    /// Length of each schedule's workload, in seconds (at least 20: faults
    /// start after 3 s and stop 10 s before the end).
    #[arg(long, default_value_t = 60)]
    pub seconds: u64,
    /// Folder for each schedule's logs, history and verdict. A schedule
    /// that passes is removed unless --keep; one that fails is kept.
    #[arg(long, default_value = "chaos-runs")]
    pub out: PathBuf,
    /// Keep the folders of schedules that passed too.
    #[arg(long)]
    pub keep: bool,
    /// Kinds of fault to inject, comma-separated, from: kill, pause,
    /// isolate, cut, isolate-mgmd, restart-mgmd, slow, restart,
    /// restart-initial, crash-all; `all` (the default) is every kind.
    #[arg(long, value_delimiter = ',')]
    pub faults: Vec<String>,
    /// A built chaos checker (default: built with `go build` from the
    /// checker's source in this repository, into --out).
    #[arg(long)]
    pub checker: Option<PathBuf>,
}

/// Runs the campaign; `exe` is the latsdb executable to start the
/// cluster's processes with. Err when a schedule found an anomaly or
/// could not run.
pub fn run(args: ChaosArgs, exe: PathBuf) -> Result<(), String> {
    if args.seconds < 20 {
        return Err(format!("--seconds {} is too short: a schedule needs at least 20 s", args.seconds));
    }
    if args.schedules == 0 {
        return Err("--schedules must be at least 1".into());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(
            "latsdb chaos creates network namespaces and needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN)".into()
        );
    }
    let kinds = fault_kinds(&args.faults)?;
    std::fs::create_dir_all(&args.out).map_err(|e| format!("cannot create {}: {e}", args.out.display()))?;
    let stale = hosts::remove_stale();
    if stale > 0 {
        println!("removed {stale} network namespace(s) left by a campaign that was killed");
    }
    let checker = match args.checker {
        Some(path) => path,
        None => campaign::build_checker(&args.out)?,
    };
    let first =
        args.seed.unwrap_or_else(|| SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(1));
    let mut failed = Vec::new();
    for i in 0..u64::from(args.schedules) {
        let seed = first.wrapping_add(i);
        println!("schedule {}/{} (seed {seed}, {} s)", i + 1, args.schedules, args.seconds);
        let dir = args.out.join(format!("seed-{seed}"));
        let verdict = campaign::run_schedule(&exe, &checker, seed, args.seconds, &kinds, &dir);
        match &verdict {
            Ok(v) if v.passed() => {
                println!("  verdict: pass ({})", v.summary());
                if !args.keep {
                    let _ = std::fs::remove_dir_all(&dir);
                }
            }
            Ok(v) => {
                println!("  verdict: FAIL ({})", v.summary());
                for finding in &v.findings {
                    println!("    {finding}");
                }
                println!(
                    "  kept in {} (replay: latsdb chaos --seed {seed} --seconds {} --faults {})",
                    dir.display(),
                    args.seconds,
                    kinds.join(",")
                );
                failed.push(seed);
            }
            Err(e) => {
                println!("  could not run: {e}");
                println!("  kept in {}", dir.display());
                failed.push(seed);
            }
        }
    }
    println!("{} of {} schedule(s) passed", u64::from(args.schedules) - failed.len() as u64, args.schedules);
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("schedule(s) with seed {failed:?} failed; their folders under {} say why", args.out.display()))
    }
}

/// The fault kinds `--faults` names, checked against the known ones.
fn fault_kinds(asked: &[String]) -> Result<Vec<&'static str>, String> {
    if asked.is_empty() {
        return Ok(schedule::default_kinds());
    }
    if asked.iter().any(|k| k == "all") {
        return Ok(schedule::KINDS.to_vec());
    }
    let mut kinds = Vec::new();
    for name in asked {
        let Some(kind) = schedule::KINDS.iter().find(|k| **k == name.trim()) else {
            return Err(format!(
                "--faults: unknown kind {name:?}; the kinds are {} (or all)",
                schedule::KINDS.join(", ")
            ));
        };
        kinds.push(*kind);
    }
    Ok(kinds)
}
