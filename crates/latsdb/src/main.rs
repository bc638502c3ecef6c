//! `latsdb`: one binary for every role (management server, data node, SQL
//! node, REST node, admin client, benchmarks, simulator).

/// mimalloc: fewer cycles per allocation than glibc on the many small
/// allocations of request handling, and its segments can use huge pages.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod angel;
mod backup;
mod certs;
mod healer;
mod launcher;
mod mgm;
mod rest_cmd;
mod sql_cmd;

use clap::{Parser, Subcommand};
use latsdb_types::config::ClusterConfig;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

pub const DEFAULT_MGMD: &str = "127.0.0.1:1186";

#[derive(Parser)]
#[command(
    name = "latsdb",
    version,
    about = "latsdb: a distributed, replicated, in-memory relational key-value database"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start a whole local cluster (mgmd, data nodes, a SQL node, a REST node) as separate processes; Ctrl-C stops it.
    Start(launcher::StartArgs),
    /// Run the management server.
    Mgmd {
        /// Cluster configuration file (TOML); without it, 2 data nodes with ids 2 and 3 on loopback.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Port to listen on (overrides the configuration; 0 picks a free port).
        #[arg(long)]
        port: Option<u16>,
        /// Write the listening address to this file once ready.
        #[arg(long)]
        ready_file: Option<PathBuf>,
        /// Folder where the schema and the latest durable epoch are kept.
        #[arg(long, default_value = "latsdb-data")]
        data_dir: PathBuf,
        #[command(flatten)]
        tls: TlsArgs,
    },
    /// Run a data node.
    Datanode {
        /// Address of the management server.
        #[arg(long, env = "LATSDB_MGMD", default_value = DEFAULT_MGMD)]
        mgmd: String,
        /// Node id to take (default: the first configured data node not yet started).
        #[arg(long)]
        node_id: Option<u16>,
        /// Shard threads (overrides the configuration; 0 = automatic).
        #[arg(long)]
        threads: Option<u16>,
        /// Folder for the REDO log and checkpoints (in datanode-<id>/ below it).
        #[arg(long, default_value = "latsdb-data")]
        data_dir: PathBuf,
        /// Run without a disk: nothing is durable, a restart starts empty.
        #[arg(long)]
        diskless: bool,
        /// Initial start: empty this node's data directory first. In a
        /// running cluster the node then copies all its data from the live
        /// replicas (an initial node restart).
        #[arg(long)]
        initial: bool,
        /// Run the data node in this process, without an angel to start it
        /// again when it dies (for supervisors such as systemd). By default
        /// this process is the angel: it runs the data node as its child,
        /// starts it again after 1 s, then 2 s, when it dies unasked
        /// (leaving it down at the third death within 10 minutes), carries out
        /// `latsdb mgm N start` for it, and reports to the cluster log.
        #[arg(long)]
        no_restart: bool,
        /// Serve GET /metrics (Prometheus) on this port (0 picks a free one; the address is printed).
        #[arg(long)]
        metrics_port: Option<u16>,
        /// Write the node id here once registered (the angel's channel).
        #[arg(long, hide = true)]
        node_id_file: Option<PathBuf>,
        #[command(flatten)]
        tls: TlsArgs,
    },
    /// Run a REST node (HTTP/JSON key lookups and feature vectors).
    Rest(rest_cmd::RestArgs),
    /// Run a SQL node (the MySQL client/server protocol).
    Sql(sql_cmd::SqlArgs),
    /// Create, list and revoke the REST API keys.
    Apikey(rest_cmd::ApiKeyArgs),
    /// Admin client: show the cluster, stop, start and restart data nodes, shut it down.
    Mgm(mgm::MgmArgs),
    /// Load an online backup (`latsdb mgm backup start`) into a running
    /// cluster, which may have another number of data nodes or replicas.
    Restore(backup::RestoreArgs),
    /// Benchmarks.
    Bench(latsdb_bench::BenchArgs),
    /// Deterministic simulation: replay one seed, or sweep a range of seeds.
    Sim(SimArgs),
    /// TLS certificates for the native protocol: `certs create` makes a cluster CA and a certificate per role.
    Certs(certs::CertsArgs),
    /// A fault campaign on real processes in network namespaces (needs
    /// root): kills, pauses, partitions, slow links, restarts and full
    /// crashes under register, bank and ledger workloads, judged by
    /// Porcupine and by bank and ledger checks.
    Chaos(latsdb_chaos::ChaosArgs),
}

/// A `--location-domain` value, checked as the configuration checks one.
pub fn parse_location_domain(value: &str) -> Result<String, String> {
    latsdb_types::location::check_domain(value)?;
    Ok(value.to_string())
}

/// This process's TLS identity on the native protocol.
#[derive(clap::Args, Clone, Default)]
pub struct TlsArgs {
    /// Directory with the cluster's ca.pem and this role's certificate and
    /// key (`latsdb certs create`): every native link then uses TLS, and
    /// only processes with a certificate of that CA get in.
    #[arg(long, env = "LATSDB_TLS_DIR")]
    pub tls_dir: Option<PathBuf>,
}

impl TlsArgs {
    /// Loads the identity of `role`; None without --tls-dir.
    pub fn load(
        &self,
        role: latsdb_net::tls::Role,
    ) -> Result<Option<std::sync::Arc<latsdb_net::tls::ClusterTls>>, String> {
        match &self.tls_dir {
            Some(dir) => latsdb_net::tls::ClusterTls::load(dir, role).map(Some).map_err(|e| format!("--tls-dir: {e}")),
            None => Ok(None),
        }
    }

    /// Client options that connect with the API role's certificate.
    pub fn client_options(&self) -> Result<latsdb_client::ClientOptions, String> {
        latsdb_client::ClientOptions::with_tls_dir(self.tls_dir.as_deref())
    }

    /// The flags that pass this identity's directory on to a child process.
    pub fn flags(&self) -> Vec<String> {
        match &self.tls_dir {
            Some(dir) => vec!["--tls-dir".into(), dir.display().to_string()],
            None => Vec::new(),
        }
    }
}

#[derive(clap::Args)]
struct SimArgs {
    /// The seed to run (replays exactly).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Run every seed in START..END instead of one (e.g. 0..1000).
    #[arg(long)]
    seeds: Option<String>,
    /// Run a spec file (crates/sim/specs/*.toml: cluster shapes, fault
    /// menus, seeds, and bounds on the reports) instead of the flags below;
    /// --seeds, if given, replaces the spec's seeds.
    #[arg(long)]
    spec: Option<PathBuf>,
    /// Events before the workload stops (then the cluster drains and is checked).
    #[arg(long, default_value_t = 20_000)]
    steps: u64,
    /// Data nodes and shards per data node.
    #[arg(long, default_value_t = 2)]
    nodes: u16,
    #[arg(long, default_value_t = 2)]
    shards: u16,
    /// Replicas per node group (the node count must be a multiple of it).
    #[arg(long, default_value_t = 1)]
    replicas: u8,
    /// Crash one data node at a random moment (same as --crashes 1).
    #[arg(long)]
    crash: bool,
    /// Data-node crashes to inject (needs --replicas 2 or more); each waits
    /// until the cluster is stable and can survive it.
    #[arg(long, default_value_t = 0)]
    crashes: u32,
    /// Crashed nodes to start again (a node restart from the node's disk,
    /// one in three an initial node restart from an empty disk: the node
    /// copies what changed from the live replicas and rejoins).
    #[arg(long, default_value_t = 0)]
    restarts: u32,
    /// Whole-cluster crashes (every data node loses power at once), each
    /// followed by a system restart that must bring back exactly a prefix
    /// of the commits, including every commit acknowledged as durable.
    #[arg(long, default_value_t = 0)]
    cluster_crashes: u32,
    /// Failed syncs (each stops its data node, whose disk keeps only what
    /// was synced); also lets syncs stall now and then (a slow disk).
    #[arg(long, default_value_t = 0)]
    disk_faults: u32,
    /// Network splits to inject; one side must be able to continue, the
    /// other shuts down.
    #[arg(long, default_value_t = 0)]
    splits: u32,
    /// Short network glitches, healed before anyone is declared dead.
    #[arg(long, default_value_t = 0)]
    glitches: u32,
    /// Connection resets between two live data nodes (one suspects the
    /// other at once).
    #[arg(long, default_value_t = 0)]
    resets: u32,
    /// Node groups added to the running cluster (`replicas` new nodes
    /// each): the new nodes copy their share of the partitions and take it
    /// over while the workload runs.
    #[arg(long, default_value_t = 0)]
    add_groups: u32,
    /// Percent of membership messages lost, and duplicated.
    #[arg(long, default_value_t = 0)]
    member_faults: u64,
    /// Stop the workload after this many events, keeping the fault
    /// schedule of --steps (replays the shortened run of a failure report).
    #[arg(long)]
    stop_after: Option<u64>,
    #[arg(long, default_value_t = 6)]
    clients: usize,
    /// Events printed when a check fails.
    #[arg(long, default_value_t = 60)]
    trace: usize,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    set_huge_page_faults(matches!(cli.command, Command::Datanode { .. }));
    let result = match cli.command {
        Command::Start(args) => launcher::run(args),
        Command::Mgmd { config, port, ready_file, data_dir, tls } => run_mgmd(config, port, ready_file, data_dir, tls),
        Command::Datanode {
            mgmd,
            node_id,
            threads,
            data_dir,
            diskless,
            initial,
            no_restart: false,
            metrics_port,
            tls,
            ..
        } => {
            let mut flags = vec![std::ffi::OsString::from("--data-dir"), data_dir.into_os_string()];
            if let Some(threads) = threads {
                flags.extend(["--threads".into(), threads.to_string().into()]);
            }
            if let Some(port) = metrics_port {
                flags.extend(["--metrics-port".into(), port.to_string().into()]);
            }
            if diskless {
                flags.push("--diskless".into());
            }
            flags.extend(tls.flags().into_iter().map(Into::into));
            angel::run(angel::AngelArgs { mgmd, node_id, flags, initial, tls })
        }
        Command::Datanode {
            mgmd,
            node_id,
            threads,
            data_dir,
            diskless,
            initial,
            no_restart: true,
            node_id_file,
            metrics_port,
            tls,
        } => runtime(1).and_then(|rt| {
            use_huge_pages();
            let tls = tls.load(latsdb_net::tls::Role::DataNode)?;
            rt.block_on(latsdb_node::datanode::run_datanode(latsdb_node::datanode::DataNodeOptions {
                mgmd,
                node_id,
                threads,
                connect_timeout: Duration::from_secs(30),
                data_dir: (!diskless).then_some(data_dir),
                initial,
                node_id_file,
                metrics_port,
                tls,
            }))
            .map_err(|e| e.to_string())
        }),
        Command::Rest(args) => rest_cmd::run_rest(args),
        Command::Sql(args) => sql_cmd::run_sql(args),
        Command::Apikey(args) => runtime(1).and_then(|rt| rt.block_on(rest_cmd::run_apikey(args))),
        Command::Mgm(args) => runtime(1).and_then(|rt| rt.block_on(mgm::run(args))),
        Command::Restore(args) => runtime(2).and_then(|rt| rt.block_on(backup::run_restore(args))),
        Command::Bench(args) => latsdb_bench::run(args).map_err(|e| e.to_string()),
        Command::Sim(args) => run_sim(args),
        Command::Certs(args) => certs::run(args),
        Command::Chaos(args) => std::env::current_exe()
            .map_err(|e| format!("cannot find the latsdb executable: {e}"))
            .and_then(|exe| latsdb_chaos::run(args, exe)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// mimalloc asks for transparent huge pages on all of its memory. In this
/// kind of VM the first touch of a 2 MiB page is a fault that zeroes it for
/// about 5 ms, during which the thread cannot be preempted and the threads
/// queued behind it on that CPU wait (seen as 30 ms stalls of every client
/// of `bench lookup`). Only a data node, whose row storage gains from the
/// TLB savings (below), keeps them; every other role turns them off for the
/// process. The setting is inherited across fork and exec, so a data node
/// started by a process that turned them off turns them back on.
fn set_huge_page_faults(allow: bool) {
    let disable: libc::c_ulong = if allow { 0 } else { 1 };
    // SAFETY: PR_SET_THP_DISABLE takes an integer flag and touches no
    // memory. Its result is ignored: a kernel without it keeps its default,
    // which is only slower.
    let _ = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, disable, 0, 0, 0) };
}

/// Row storage is read by random access; backing the heap with 2 MiB pages
/// (where the kernel allows transparent huge pages) avoids most TLB misses,
/// which in a VM cost a two-dimensional page walk each. Measured here: 14%
/// less data-node CPU per key read.
fn use_huge_pages() {
    // SAFETY: sets a process-wide allocator option; no memory is touched.
    unsafe { libmimalloc_sys::mi_option_set(libmimalloc_sys::mi_option_large_os_pages, 1) };
}

pub fn runtime(workers: usize) -> Result<tokio::runtime::Runtime, String> {
    let mut builder = if workers <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(workers);
        b
    };
    builder.enable_all().build().map_err(|e| format!("cannot start the async runtime: {e}"))
}

fn run_sim(args: SimArgs) -> Result<(), String> {
    if let Some(path) = &args.spec {
        return run_sim_spec(path, args.seeds.as_deref());
    }
    let config = |seed| latsdb_sim::SimConfig {
        seed,
        steps: args.steps,
        nodes: args.nodes,
        replicas: args.replicas,
        crashes: args.crashes.max(u32::from(args.crash)),
        restarts: args.restarts,
        cluster_crashes: args.cluster_crashes,
        disk_faults: args.disk_faults,
        splits: args.splits,
        glitches: args.glitches,
        resets: args.resets,
        add_groups: args.add_groups,
        member_fault_pct: args.member_faults,
        stop_after: args.stop_after,
        shards_per_node: args.shards,
        clients: args.clients,
        trace_lines: args.trace,
        ..Default::default()
    };
    let Some(range) = &args.seeds else {
        let report = latsdb_sim::run(&config(args.seed))?;
        println!("seed {} passed: {report:?}", args.seed);
        return Ok(());
    };
    let (start, end) = seed_range(range)?;
    let started = std::time::Instant::now();
    let bar = indicatif::ProgressBar::new(end - start);
    // What the seeds injected and went through, summed.
    let mut totals = [0u64; 8];
    for seed in start..end {
        let r = match latsdb_sim::run(&config(seed)) {
            Ok(r) => r,
            Err(e) => {
                bar.finish_and_clear();
                return Err(format!("{e}\nreplay with: latsdb sim --seed {seed} {} --trace 1000", replay_flags(&args)));
            }
        };
        let counts = [
            r.committed_transfers,
            r.crashes.into(),
            r.restarts.into(),
            r.failed_restarts.into(),
            r.copy_switches,
            r.system_restarts.into(),
            r.failed_syncs.into(),
            r.register_writes,
        ];
        for (t, c) in totals.iter_mut().zip(counts) {
            *t += c;
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{} seeds passed in {secs:.1} s ({:.0} seeds per minute)",
        end - start,
        (end - start) as f64 * 60.0 / secs
    );
    let [committed, crashes, restarts, failed_restarts, switches, system_restarts, failed_syncs, registers] = totals;
    println!(
        "totals: {committed} committed transfers, {registers} acknowledged register writes, {crashes} crashes, {restarts} node restarts ({failed_restarts} gave up, {switches} partition copies switched to a new primary), {system_restarts} system restarts, {failed_syncs} failed syncs"
    );
    Ok(())
}

/// `--seeds START..END`.
fn seed_range(range: &str) -> Result<(u64, u64), String> {
    range
        .split_once("..")
        .and_then(|(a, b)| Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?)))
        .filter(|(a, b)| a < b)
        .ok_or_else(|| format!("--seeds '{range}' must look like START..END with START < END"))
}

/// `latsdb sim --spec FILE`: every seed of the spec under each of its
/// configs, with a progress bar; the spec's bounds on the reports are
/// checked as the runs finish.
fn run_sim_spec(path: &std::path::Path, seeds: Option<&str>) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut spec = latsdb_sim::Spec::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if let Some(range) = seeds {
        let (start, end) = seed_range(range)?;
        spec.seeds = [start, end];
    }
    let runs = (spec.seeds[1] - spec.seeds[0]) * spec.config.len() as u64;
    println!("{}: {}", path.display(), spec.description.trim());
    let bar = indicatif::ProgressBar::new(runs);
    let started = std::time::Instant::now();
    let outcome = spec.run(|_, _| bar.inc(1));
    bar.finish_and_clear();
    let outcome = outcome.map_err(|e| format!("{}: {e}", path.display()))?;
    let secs = started.elapsed().as_secs_f64();
    println!("{} runs passed in {secs:.1} s; totals:", outcome.runs);
    for (name, total) in &outcome.totals {
        println!("  {name:<24} {total}");
    }
    Ok(())
}

/// The flags that reproduce a sweep's run (all but the seed range).
fn replay_flags(args: &SimArgs) -> String {
    format!(
        "--steps {} --nodes {} --shards {} --replicas {} --clients {} --crashes {} --restarts {} --cluster-crashes {} --disk-faults {} --splits {} --glitches {} --resets {} --add-groups {} --member-faults {}",
        args.steps,
        args.nodes,
        args.shards,
        args.replicas,
        args.clients,
        args.crashes.max(u32::from(args.crash)),
        args.restarts,
        args.cluster_crashes,
        args.disk_faults,
        args.splits,
        args.glitches,
        args.resets,
        args.add_groups,
        args.member_faults
    )
}

fn run_mgmd(
    config: Option<PathBuf>,
    port: Option<u16>,
    ready_file: Option<PathBuf>,
    data_dir: PathBuf,
    tls: TlsArgs,
) -> Result<(), String> {
    let config = match config {
        Some(path) => {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("cannot read the configuration {}: {e}", path.display()))?;
            ClusterConfig::parse(&text).map_err(|e| format!("{}: {}", path.display(), e.message))?
        }
        None => ClusterConfig::local(2, 1, 1186),
    };
    let tls = tls.load(latsdb_net::tls::Role::Mgmd)?;
    if config.tls.require_tls && tls.is_none() {
        return Err("the configuration says [tls] require_tls = true, but no --tls-dir (or LATSDB_TLS_DIR) names \
                    this server's certificates; make them with `latsdb certs create`"
            .into());
    }
    let rt = runtime(2)?;
    rt.block_on(latsdb_node::mgmd::run_mgmd(latsdb_node::mgmd::MgmdOptions {
        config,
        port,
        ready_file,
        data_dir: Some(data_dir),
        tls,
    }))
    .map_err(|e| e.to_string())
}
